/* Statistics accumulation: the front shared by both backends (checks,
 * per-utterance likelihoods) and the CPU reference of reference 4.2; the
 * GPU batches are in acc-batch.c. */
#include "gpu-acc.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/sys/log.h"
#include "acc-internal.h"
#include "acc-remote.h"
#include "acc-math.h"

/* ---------------- stats ---------------- */

int gacc_stats_init(gacc_stats *s, const kio_tmodel *tm, const kio_am_gmm *am) {
  memset(s, 0, sizeof *s);
  s->num_tids = tm->num_tids;
  s->num_pdfs = am->num_pdfs;
  s->dim = am->dim;
  s->pdf_offset = malloc(sizeof(int32_t) * ((size_t)am->num_pdfs + 1));
  if (!s->pdf_offset) goto oom;
  int64_t g = 0;
  for (int32_t j = 0; j < am->num_pdfs; j++) {
    s->pdf_offset[j] = (int32_t)g;
    g += am->pdfs[j].num_comp;
    if (g > INT32_MAX) goto oom;
  }
  s->pdf_offset[am->num_pdfs] = (int32_t)g;
  s->num_gauss = (int32_t)g;
  size_t gd = (size_t)g * (size_t)(am->dim > 0 ? am->dim : 0);
  s->tacc = calloc((size_t)tm->num_tids + 1, sizeof(double));
  s->occ = calloc(g ? (size_t)g : 1, sizeof(double));
  s->mean_acc = calloc(gd ? gd : 1, sizeof(double));
  s->var_acc = calloc(gd ? gd : 1, sizeof(double));
  if (!s->tacc || !s->occ || !s->mean_acc || !s->var_acc) goto oom;
  return KIO_OK;
oom:
  gacc_stats_free(s);
  KIO_ERROR("Out of memory allocating statistics for %d pdfs", (int)am->num_pdfs);
  return KIO_ERR;
}

/* *p resized to n elements of size sz (at least one), its contents kept
 * up to the smaller size; KIO_ERR leaves *p as it was. */
static int resize(void **p, size_t n, size_t sz) {
  void *q = realloc(*p, (n ? n : 1) * sz);
  if (!q) return KIO_ERR;
  *p = q;
  return KIO_OK;
}

int gacc_stats_reshape(gacc_stats *s, const kio_tmodel *tm, const kio_am_gmm *am, int zero) {
  int64_t g = 0;
  for (int32_t j = 0; j < am->num_pdfs; j++) g += am->pdfs[j].num_comp;
  if (g > INT32_MAX) goto oom;
  size_t gd = (size_t)g * (size_t)(am->dim > 0 ? am->dim : 0);
  size_t old_gd = (size_t)s->num_gauss * (size_t)(s->dim > 0 ? s->dim : 0);
  int fresh = !s->tacc;  /* a zeroed struct: nothing to keep */
  if ((fresh || s->num_pdfs != am->num_pdfs) &&
      resize((void **)&s->pdf_offset, (size_t)am->num_pdfs + 1, sizeof(int32_t)) != KIO_OK)
    goto oom;
  if ((fresh || s->num_tids != tm->num_tids) &&
      resize((void **)&s->tacc, (size_t)tm->num_tids + 1, sizeof(double)) != KIO_OK)
    goto oom;
  if ((fresh || s->num_gauss != g) && resize((void **)&s->occ, (size_t)g, sizeof(double)) != KIO_OK)
    goto oom;
  if ((fresh || old_gd != gd) && (resize((void **)&s->mean_acc, gd, sizeof(double)) != KIO_OK ||
                                  resize((void **)&s->var_acc, gd, sizeof(double)) != KIO_OK))
    goto oom;
  s->num_tids = tm->num_tids;
  s->num_pdfs = am->num_pdfs;
  s->dim = am->dim;
  s->num_gauss = (int32_t)g;
  g = 0;
  for (int32_t j = 0; j < am->num_pdfs; j++) {
    s->pdf_offset[j] = (int32_t)g;
    g += am->pdfs[j].num_comp;
  }
  s->pdf_offset[am->num_pdfs] = (int32_t)g;
  s->total_like = s->total_frames = 0.0;
  if (zero) {
    memset(s->tacc, 0, sizeof(double) * ((size_t)tm->num_tids + 1));
    memset(s->occ, 0, sizeof(double) * (size_t)g);
    memset(s->mean_acc, 0, sizeof(double) * gd);
    memset(s->var_acc, 0, sizeof(double) * gd);
  }
  return KIO_OK;
oom:
  gacc_stats_free(s);
  KIO_ERROR("Out of memory allocating statistics for %d pdfs", (int)am->num_pdfs);
  return KIO_ERR;
}

void gacc_stats_free(gacc_stats *s) {
  if (!s) return;
  free(s->pdf_offset);
  free(s->tacc);
  free(s->occ);
  free(s->mean_acc);
  free(s->var_acc);
  memset(s, 0, sizeof *s);
}

/* ---------------- per-frame arithmetic (4.2) ---------------- */

float gacc_expf_ref(float x) { return gacc_expf(x); }

float gacc_frame_posteriors(const kio_diag_gmm *g, const float *x, const float *x2,
                            float *ll) {
  int32_t M = g->num_comp, D = g->dim;
  if (M <= 0) return -INFINITY;  /* no components: an invalid answer */
  const int prof = kio_blas_profile();
  for (int32_t m = 0; m < M; m++)
    ll[m] = kio_blas_gauss_loglike(prof, g->gconsts[m], g->means_invvars + (size_t)m * D,
                                   g->inv_vars + (size_t)m * D, x, x2, 1, D, m, M);
  /* Kaldi's ApplySoftMax: float max, float sum in ascending m, scale by the
   * float of the double reciprocal, return max + log(sum). */
  float mx = -INFINITY;
  for (int32_t m = 0; m < M; m++)
    if (ll[m] > mx) mx = ll[m];
  float s = (ll[0] = gacc_expf(ll[0] - mx));  /* = 0.0f + e_0 */
  for (int32_t m = 1; m < M; m++) s += (ll[m] = gacc_expf(ll[m] - mx));
  float inv = (float)(1.0 / (double)s);
  for (int32_t m = 0; m < M; m++) ll[m] *= inv;
  return mx + logf(s);
}

/* ---------------- accumulator object ---------------- */

/* The largest Gaussian count of am's pdfs into *max_comp; KIO_ERR (logged)
 * if a pdf's dimension is not the model's. */
static int model_max_comp(const kio_am_gmm *am, int32_t *max_comp) {
  *max_comp = 0;
  for (int32_t j = 0; j < am->num_pdfs; j++) {
    if (am->pdfs[j].dim != am->dim) {
      KIO_ERROR("Pdf %d has dimension %d, model dimension is %d", (int)j,
                (int)am->pdfs[j].dim, (int)am->dim);
      return KIO_ERR;
    }
    if (am->pdfs[j].num_comp > *max_comp) *max_comp = am->pdfs[j].num_comp;
  }
  return KIO_OK;
}

/* The accumulator on the CPU (dev NULL) or on device dev. */
static int acc_new(gacc_acc **out, kio_gpu *dev, kio_gpu_mode mode, const kio_tmodel *tm,
                   const kio_am_gmm *am) {
  *out = NULL;
  const int gpu = dev != NULL;
  gacc_acc *a = calloc(1, sizeof *a);
  if (!a) { KIO_ERROR("Out of memory"); return KIO_ERR; }
  a->is_gpu = gpu;
  a->tm = tm;
  a->am = am;
  if (model_max_comp(am, &a->max_comp) != KIO_OK) { gacc_free(a); return KIO_ERR; }
  if (gacc_stats_init(&a->st, tm, am) != KIO_OK) { gacc_free(a); return KIO_ERR; }
  a->ll = malloc(sizeof(float) * (size_t)(a->max_comp > 0 ? a->max_comp : 1));
  a->x2 = malloc(sizeof(float) * (size_t)(am->dim > 0 ? am->dim : 1));
  a->xd = malloc(sizeof(double) * 2 * (size_t)(am->dim > 0 ? am->dim : 1));
  if (!a->ll || !a->x2 || !a->xd) { KIO_ERROR("Out of memory"); gacc_free(a); return KIO_ERR; }
  if (gpu && gacc_cuda_new(&a->cuda, dev, mode, &a->st, am) != KIO_OK) {
    gacc_free(a);
    return KIO_ERR;
  }
  *out = a;
  return KIO_OK;
}

int gacc_new(gacc_acc **out, const char *backend, const kio_tmodel *tm,
             const kio_am_gmm *am) {
  *out = NULL;
  if (!strcmp(backend, "cpu")) return acc_new(out, NULL, KIO_GPU_NO, tm, am);
  if (strcmp(backend, "gpu")) {
    KIO_ERROR("Unknown accumulation backend '%s' (expected cpu or gpu)", backend);
    return KIO_ERR;
  }
  kio_gpu *g = NULL;
  if (kio_gpu_job(&g, 0) != KIO_OK) return KIO_ERR;
  return acc_new(out, g, KIO_GPU_YES, tm, am);
}

int gacc_new_gpu(gacc_acc **out, kio_gpu *g, kio_gpu_mode mode, const kio_tmodel *tm,
                 const kio_am_gmm *am) {
  return acc_new(out, g, mode, tm, am);
}

kio_gpu_acct *gacc_acct(const gacc_acc *a) { return a && a->cuda ? gacc_cuda_acct(a->cuda) : NULL; }

void gacc_trim(gacc_acc *a) {
  if (a && a->cuda) gacc_cuda_trim(a->cuda);
}

int gacc_is_gpu(const gacc_acc *a) { return a && a->is_gpu; }

void gacc_free(gacc_acc *a) {
  if (!a) return;
  gacc_remote_free(a);
  kio_log_discard(&a->held_lines);
  gacc_gpu_free(a);  /* first: the worker may still use the device */
  gacc_cuda_free(a->cuda);
  gacc_stats_free(&a->st);
  free(a->ll);
  free(a->x2);
  free(a->xd);
  free(a->res);
  free(a);
}

/* Checks everything Kaldi would die on before touching the statistics:
 * feature dimension, transition-ids in [0, NumTransitionIds], pdf ids the
 * AmDiagGmm has (tid 0 maps to pdf 0, as in Kaldi). */
int gacc_check_utt(const gacc_acc *a, const gacc_utt *u) {
  const kio_matrix *f = u->feats;
  if (f->rows > 0 && f->cols != a->am->dim) {
    KIO_ERROR("Features for utterance %s have dimension %d, model expects %d",
              u->key, (int)f->cols, (int)a->am->dim);
    return KIO_ERR;
  }
  for (int32_t t = 0; t < f->rows; t++) {
    int32_t tid = u->ali[t];
    if (tid < 0 || tid > a->tm->num_tids) {
      KIO_ERROR("Transition-id %d out of range [0, %d] at frame %d of the "
                "alignment for utterance %s", (int)tid, (int)a->tm->num_tids,
                (int)t, u->key);
      return KIO_ERR;
    }
    int32_t pdf = a->tm->tid2pdf[tid];
    if (pdf < 0 || pdf >= a->am->num_pdfs) {
      KIO_ERROR("Transition-id %d maps to pdf %d, but the model has %d pdfs "
                "(utterance %s)", (int)tid, (int)pdf, (int)a->am->num_pdfs, u->key);
      return KIO_ERR;
    }
  }
  return KIO_OK;
}

int gacc_bad_like(const char *key, int32_t t) {
  KIO_ERROR("Invalid answer (overflow or invalid variances/features?) at frame "
            "%d of utterance %s", (int)t, key);
  return KIO_ERR;
}

int gacc_accumulate_cpu(gacc_acc *a, int n, const gacc_utt *utts,
                        gacc_utt_result *res) {
  for (int i = 0; i < n; i++)
    if (gacc_check_utt(a, &utts[i]) != KIO_OK) return KIO_ERR;
  for (int i = 0; i < n; i++)
    if (gacc_accumulate_utt_cpu(a, &utts[i], &res[i]) != KIO_OK) return KIO_ERR;
  for (int i = 0; i < n; i++) {
    a->like_sum += (double)res[i].like;
    a->frames_sum += res[i].frames;
  }
  return KIO_OK;
}

/* The outcome of a batch a lost service's fall-back redid before its
 * collection (acc-keep.c): its lines now, its status. */
static int held_out(gacc_acc *a) {
  if (!a->held) return KIO_OK;
  a->held = 0;
  a->held_skip = 0;
  kio_log_replay(&a->held_lines);
  return a->held_rc;
}

#define HELD_OUT(a)                        \
  do {                                     \
    if ((a)->held && held_out(a) != KIO_OK) \
      return KIO_ERR;                      \
  } while (0)

int gacc_accumulate_batch(gacc_acc *a, int n, const gacc_utt *utts,
                          gacc_utt_result *res) {
  HELD_OUT(a);
  if (a->remote) return gacc_remote_batch(a, n, utts, res);
  if (a->is_gpu) return gacc_gpu_batch(a, n, utts, res);
  return gacc_accumulate_cpu(a, n, utts, res);
}

int gacc_accumulate_batch_start(gacc_acc *a, int n, const gacc_utt *utts,
                                gacc_utt_result *res) {
  HELD_OUT(a);
  if (a->remote) return gacc_remote_start(a, n, utts, res);
  if (a->is_gpu && n > 0) return gacc_gpu_batch_start(a, n, utts, res);
  return gacc_accumulate_batch(a, n, utts, res);
}

int gacc_accumulate_batch_start_take(gacc_acc *a, int n, const gacc_utt *utts,
                                     kio_matrix *const *feats, gacc_utt_result *res) {
  HELD_OUT(a);
  if (a->remote) return gacc_remote_start_take(a, n, utts, feats, res);
  return gacc_accumulate_batch_start(a, n, utts, res);
}

/* The CPU backend has no worker: the batch is accumulated now. */
int gacc_accumulate_batch_take(gacc_acc *a, int n, const gacc_utt *utts,
                               kio_matrix *const *feats) {
  HELD_OUT(a);
  if (a->remote) return gacc_remote_take(a, n, utts, feats);
  if (a->is_gpu) return gacc_gpu_batch_take(a, n, utts, feats);
  return gacc_accumulate_batch_async(a, n, utts);
}

int gacc_accumulate_batch_async(gacc_acc *a, int n, const gacc_utt *utts) {
  HELD_OUT(a);
  if (a->remote) return gacc_remote_async(a, n, utts);
  if (a->is_gpu) return gacc_gpu_batch_async(a, n, utts);
  if (n > a->cap_res) {
    gacc_utt_result *r = realloc(a->res, (size_t)n * sizeof *r);
    if (!r) { KIO_ERROR("Out of memory"); return KIO_ERR; }
    a->res = r;
    a->cap_res = n;
  }
  return gacc_accumulate_cpu(a, n, utts, a->res);
}

int gacc_wait(gacc_acc *a) {
  HELD_OUT(a);
  if (a->remote) return gacc_remote_wait(a);
  return a->is_gpu ? gacc_gpu_wait(a) : KIO_OK;
}

int gacc_wait_first(gacc_acc *a) {
  if (a->remote) return gacc_remote_wait_first(a);
  if (a->held && a->held_skip > 0) {  /* a batch before the held one: done */
    a->held_skip--;
    return KIO_OK;
  }
  return gacc_wait(a);
}

int gacc_inflight(const gacc_acc *a) { return a && a->remote ? gacc_remote_inflight(a) : 1; }

int gacc_get_totals(gacc_acc *a, double *like, int64_t *frames) {
  int rc = gacc_wait(a);
  *like = a->like_sum;
  *frames = a->frames_sum;
  return rc;
}

int gacc_get_stats(gacc_acc *a, gacc_stats *out) {
  if (gacc_wait(a) != KIO_OK) return KIO_ERR;
  const gacc_stats *s = &a->st;
  /* every value is written below: out's buffers are only reshaped */
  if (gacc_stats_reshape(out, a->tm, a->am, 0) != KIO_OK) return KIO_ERR;
  if (a->remote) return gacc_remote_stats(a, out);
  if (a->is_gpu) {
    if (gacc_cuda_fetch(a->cuda, out) != KIO_OK) return KIO_ERR;
  } else {
    size_t gd = (size_t)s->num_gauss * (size_t)s->dim;
    memcpy(out->tacc, s->tacc, sizeof(double) * ((size_t)s->num_tids + 1));
    memcpy(out->occ, s->occ, sizeof(double) * (size_t)s->num_gauss);
    memcpy(out->mean_acc, s->mean_acc, sizeof(double) * gd);
    memcpy(out->var_acc, s->var_acc, sizeof(double) * gd);
  }
  out->total_like = s->total_like;
  out->total_frames = s->total_frames;
  return KIO_OK;
}

int gacc_reset_stats(gacc_acc *a) {
  if (gacc_wait(a) != KIO_OK) return KIO_ERR;
  if (a->remote) {
    KIO_ERROR("The statistics of an accumulator on the GPU service cannot be reset");
    return KIO_ERR;
  }
  gacc_stats *s = &a->st;
  /* on the device backend the host arrays are scratch, each use (cpu_rest)
   * fetches the device's statistics into them first */
  if (!a->cuda) {
    size_t gd = (size_t)s->num_gauss * (size_t)s->dim;
    memset(s->tacc, 0, sizeof(double) * ((size_t)s->num_tids + 1));
    memset(s->occ, 0, sizeof(double) * (size_t)s->num_gauss);
    memset(s->mean_acc, 0, sizeof(double) * gd);
    memset(s->var_acc, 0, sizeof(double) * gd);
  }
  s->total_like = s->total_frames = 0.0;
  a->like_sum = 0.0;
  a->frames_sum = 0;
  a->piece_cap = 0;  /* the next job's pieces as a new accumulator's */
  if (a->is_gpu && gacc_cuda_zero(a->cuda) != KIO_OK) return KIO_ERR;
  return KIO_OK;
}

int gacc_rebind(gacc_acc *a, const kio_tmodel *tm, const kio_am_gmm *am, int same) {
  if (gacc_wait(a) != KIO_OK) return KIO_ERR;
  if (a->remote) {
    KIO_ERROR("An accumulator on the GPU service cannot serve another model");
    return KIO_ERR;
  }
  if (am->dim != a->st.dim) {
    KIO_ERROR("The accumulator's dimension is %d, the model's %d", (int)a->st.dim, (int)am->dim);
    return KIO_ERR;
  }
  a->tm = tm;
  a->am = am;
  if (same) return gacc_reset_stats(a);
  int32_t mc;
  if (model_max_comp(am, &mc) != KIO_OK) return KIO_ERR;
  float *ll = realloc(a->ll, sizeof(float) * (size_t)(mc > 0 ? mc : 1));
  if (!ll) {
    KIO_ERROR("Out of memory");
    return KIO_ERR;
  }
  a->ll = ll;
  a->max_comp = mc;
  /* the statistics' buffers kept, reshaped; zero as gacc_new's (on the
   * device backend the host arrays are scratch: see gacc_reset_stats) */
  if (gacc_stats_reshape(&a->st, tm, am, !a->cuda) != KIO_OK) return KIO_ERR;
  a->like_sum = 0.0;
  a->frames_sum = 0;
  a->piece_cap = 0;
  return a->is_gpu ? gacc_cuda_rebind(a->cuda, &a->st, am) : KIO_OK;
}

void gacc_unbind(gacc_acc *a) {
  if (!a) return;
  (void)gacc_wait(a);
  a->tm = NULL;
  a->am = NULL;
}

int gacc_dim(const gacc_acc *a) { return a ? a->st.dim : -1; }

void gacc_get_timing(const gacc_acc *a, gacc_timing *t) {
  memset(t, 0, sizeof *t);
  if (!a || !a->cuda || a->remote) return;
  gacc_cuda_timing(a->cuda, t);
  t->like = a->t_like;
  t->host_threads = gacc_par_size(a->par);
}

void gacc_use_dev_feats(gacc_acc *a, const gacc_dev_feats *f) {
  if (!a || !a->cuda || a->remote) return;
  if (f && gacc_dev_feats_device(f) != gacc_cuda_device_of(a->cuda)) f = NULL;
  gacc_cuda_use_dev_feats(a->cuda, f);
}
