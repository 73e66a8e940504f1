/* GPU batches: staging, the run (sort, upload, kernel, likelihoods, in
 * acc-cuda.cu and here) and the worker thread of the asynchronous entry.
 *
 * A batch is first put into a staging set (gacc_job): transition-ids in
 * page-locked memory, frame counts, keys, and the features:
 *  - synchronous entry: the caller's matrices, borrowed for the call; the
 *    batch runs at once on the calling thread;
 *  - asynchronous entry: copied into page-locked memory;
 *  - take entry (the one-pass program): the matrices swapped in.
 * The last two hand the job to a worker thread and return, so the caller
 * (the aligner's reading thread) goes on while the device accumulates. Two
 * staging sets: batch k+1 is staged while batch k runs. Matrices reach the
 * device through a small page-locked ring (acc-cuda.cu). All entries run the
 * same code on the same rows in the same order, so statistics and sums are
 * bit-identical.
 *
 * Log lines of a run on the worker (the invalid-likelihood ERROR, CUDA
 * errors) are deferred (base/sys/log.h) and replayed by gacc_wait on the
 * caller's thread, where a program that routes lines by thread expects
 * them. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "acc-internal.h"

/* ---------------- the host threads ---------------- */

/* The pool of a's per-frame host work, made and lent to the device backend
 * on the first batch, on the caller's thread (its checks and staging come
 * before anything reaches the worker, and a lost service's job has made its
 * device backend by then). */
static gacc_par *par_of(gacc_acc *a) {
  if (!a->par_made) {
    a->par_made = 1;
    int n = gacc_par_threads();
    a->par = n > 1 ? gacc_par_new(n) : NULL;  /* none: one thread, the same results */
    if (a->cuda) gacc_cuda_set_par(a->cuda, a->par);
  }
  return a->par;
}

void gacc_set_host_threads(gacc_acc *a, int n) {
  if (!a || a->par_made) return;
  a->par_made = 1;
  a->par = n > 1 ? gacc_par_new(n) : NULL;
  if (a->cuda) gacc_cuda_set_par(a->cuda, a->par);
}

/* Parts to cut n frames into: at least 256 frames each. */
static int frame_parts(const gacc_acc *a, size_t n) {
  size_t most = (n + 255) / 256, p = (size_t)gacc_par_size(a->par);
  return (int)(most < p ? (most ? most : 1) : p);
}

/* ---------------- staging ---------------- */

static void job_free(gacc_job *j) {
  for (int i = 0; i < j->cap_mats; i++) kio_matrix_free(&j->mats[i]);
  free(j->mats);
  gacc_cuda_host_free(j->feats);
  gacc_cuda_host_free(j->tid);
  free(j->pdf);
  free(j->rows);
  free(j->key_off);
  free(j->keys);
  free(j->like);
  kio_log_discard(&j->log);
  memset(j, 0, sizeof *j);
}

static size_t grow_cap(size_t cap, size_t need, size_t first) {
  if (!cap) cap = first;
  while (cap < need) cap *= 2;
  return cap;
}

/* Room for frames / n utterances / key bytes (not for the features: see
 * job_reserve_feats). Silent (the caller logs after collecting the previous
 * batch, so lines keep their order). */
static int job_reserve(gacc_job *j, size_t frames, int n, size_t key_bytes) {
  if (frames > j->cap_frames) {
    size_t cap = grow_cap(j->cap_frames, frames, 8192);
    gacc_cuda_host_free(j->tid);
    free(j->pdf);
    j->tid = NULL; j->cap_frames = 0;
    j->pdf = malloc(cap * sizeof(int32_t));
    if (!j->pdf || gacc_cuda_host_alloc((void **)&j->tid, cap * sizeof(int32_t)))
      return KIO_ERR;
    j->cap_frames = cap;
  }
  if ((size_t)n > j->cap_utts) {
    size_t cap = grow_cap(j->cap_utts, (size_t)n, 64);
    int32_t *r = realloc(j->rows, cap * sizeof *r);
    if (r) j->rows = r;
    size_t *o = realloc(j->key_off, cap * sizeof *o);
    if (o) j->key_off = o;
    float *l = realloc(j->like, cap * sizeof *l);
    if (l) j->like = l;
    if (!r || !o || !l) return KIO_ERR;
    j->cap_utts = cap;
  }
  if (key_bytes > j->cap_keys) {
    size_t cap = grow_cap(j->cap_keys, key_bytes, 4096);
    char *k = realloc(j->keys, cap);
    if (!k) return KIO_ERR;
    j->keys = k;
    j->cap_keys = cap;
  }
  return KIO_OK;
}

/* Room for the features of frames frames (pinned). Silent. */
static int job_reserve_feats(gacc_job *j, size_t D, size_t frames) {
  if (frames <= j->cap_feats) return KIO_OK;
  size_t cap = grow_cap(j->cap_feats, frames, 8192);
  gacc_cuda_host_free(j->feats);
  j->feats = NULL;
  j->cap_feats = 0;
  if (gacc_cuda_host_alloc((void **)&j->feats, cap * (D ? D : 1) * sizeof(float))) return KIO_ERR;
  j->cap_feats = cap;
  return KIO_OK;
}

enum { STAGED = 0, STAGE_BAD_INPUT = 1, STAGE_TOO_MANY = 2, STAGE_OOM = 3 };

/* The alignments, back to back, into j->tid (parts of the utterances on
 * the pool's threads). */
typedef struct {
  gacc_job *j;
  const gacc_utt *utts;
  int n, parts;
} tid_arg;

static void tid_part(void *arg, int t, int nt) {
  tid_arg *c = arg;
  for (int q = t; q < c->parts; q += nt) {
    size_t lo, hi;
    gacc_par_range((size_t)c->n, q, c->parts, &lo, &hi);
    size_t off = 0;
    for (size_t i = 0; i < lo; i++) off += (size_t)c->j->rows[i];
    for (size_t i = lo; i < hi; i++) {
      size_t r = (size_t)c->j->rows[i];
      if (r) memcpy(c->j->tid + off, c->utts[i].ali, r * sizeof(int32_t));
      off += r;
    }
  }
}

static void copy_tids(gacc_acc *a, gacc_job *j, int n, const gacc_utt *utts, size_t frames) {
  int parts = frame_parts(a, frames);
  if (parts > n) parts = n > 0 ? n : 1;
  tid_arg c = {j, utts, n, parts};
  if (parts == 1) tid_part(&c, 0, 1);
  else gacc_par_run(a->par, tid_part, &c);
}

/* What every entry stages: checks the shapes, reserves, copies keys, frame
 * counts and transition-ids into j. The features are the caller's business
 * (stage, stage_take, stage_borrow). Logs nothing: returns STAGED, or why
 * not. A feature dimension other than the model's is left to gacc_check_utt. */
static int stage_common(gacc_acc *a, gacc_job *j, int n, const gacc_utt *utts) {
  size_t frames = 0, key_bytes = 0;
  par_of(a);
  for (int i = 0; i < n; i++) {
    const kio_matrix *f = utts[i].feats;
    if (f->rows < 0 || (f->rows > 0 && f->cols != a->am->dim)) return STAGE_BAD_INPUT;
    frames += (size_t)f->rows;
    key_bytes += strlen(utts[i].key ? utts[i].key : "") + 1;
  }
  if (frames > INT32_MAX) return STAGE_TOO_MANY;
  if (job_reserve(j, frames, n, key_bytes) != KIO_OK) return STAGE_OOM;
  size_t koff = 0;
  for (int i = 0; i < n; i++) {
    const char *key = utts[i].key ? utts[i].key : "";
    size_t kl = strlen(key) + 1;
    memcpy(j->keys + koff, key, kl);
    j->key_off[i] = koff;
    koff += kl;
    j->rows[i] = utts[i].feats->rows;
  }
  copy_tids(a, j, n, utts, frames);
  j->n = n;
  j->frames = frames;
  j->status = KIO_OK;
  return STAGED;
}

/* Asynchronous entry: the features copied into j->feats (page-locked). */
static int stage(gacc_acc *a, gacc_job *j, int n, const gacc_utt *utts) {
  int why = stage_common(a, j, n, utts);
  if (why != STAGED) return why;
  size_t D = (size_t)a->am->dim, off = 0;
  if (job_reserve_feats(j, D, j->frames) != KIO_OK) return STAGE_OOM;
  for (int i = 0; i < n; i++) {
    size_t r = (size_t)j->rows[i];
    if (r) memcpy(j->feats + off * D, utts[i].feats->data, r * D * sizeof(float));
    off += r;
  }
  j->use_mats = 0;
  return STAGED;
}

/* Take entry: the feature matrices swapped with the job's (the worker
 * uploads them through the device's staging ring). Run after the checks. */
static int stage_take(gacc_acc *a, gacc_job *j, int n, const gacc_utt *utts,
                      kio_matrix *const *feats) {
  for (int i = 0; i < n; i++)
    if (utts[i].feats != feats[i]) return STAGE_BAD_INPUT;
  int why = stage_common(a, j, n, utts);
  if (why != STAGED) return why;
  if (n > j->cap_mats) {
    kio_matrix *m = realloc(j->mats, (size_t)n * sizeof *m);
    if (!m) return STAGE_OOM;
    memset(m + j->cap_mats, 0, (size_t)(n - j->cap_mats) * sizeof *m);
    j->mats = m;
    j->cap_mats = n;
  }
  for (int i = 0; i < n; i++) {
    kio_matrix t = j->mats[i];
    j->mats[i] = *feats[i];
    *feats[i] = t;
  }
  j->use_mats = 1;
  j->src = j->mats;
  return STAGED;
}

/* Synchronous entry: the caller's matrices are uploaded as they are during
 * the call (a->borrow holds shallow copies), so no batch-sized staging
 * buffer is needed. */
static int stage_borrow(gacc_acc *a, gacc_job *j, int n, const gacc_utt *utts) {
  int why = stage_common(a, j, n, utts);
  if (why != STAGED) return why;
  if (n > a->cap_borrow) {
    kio_matrix *m = realloc(a->borrow, (size_t)n * sizeof *m);
    if (!m) return STAGE_OOM;
    a->borrow = m;
    a->cap_borrow = n;
  }
  for (int i = 0; i < n; i++) a->borrow[i] = *utts[i].feats;
  j->use_mats = 1;
  j->src = a->borrow;
  return STAGED;
}

/* The ERROR for a batch that stage() refused (bad input is reported by
 * gacc_check_utt instead, with the utterance). */
static int stage_error(int why, int n, const gacc_utt *utts) {
  if (why == STAGE_BAD_INPUT) {
    int logged = 0;
    for (int i = 0; i < n; i++)
      if (utts[i].feats->rows < 0)
        KIO_ERROR("Invalid feature matrix for utterance %s", utts[i].key), logged = 1;
    if (!logged) KIO_ERROR("Invalid feature matrices for a batch of %d utterances", n);
  } else if (why == STAGE_TOO_MANY)
    KIO_ERROR("Too many frames in one batch of %d utterances for the GPU accumulator", n);
  else if (why == STAGE_OOM)
    KIO_ERROR("Out of memory staging a batch of %d utterances", n);
  return KIO_ERR;
}

/* ---------------- the run ---------------- */

static int grow_results(gacc_acc *a, size_t frames) {
  if (frames <= a->cap_mx) return KIO_OK;
  size_t cap = grow_cap(a->cap_mx, frames, 8192);
  gacc_cuda_host_free(a->mx);
  gacc_cuda_host_free(a->sum);
  a->mx = a->sum = NULL;
  a->cap_mx = 0;
  if (gacc_cuda_host_alloc((void **)&a->mx, cap * sizeof(float)) ||
      gacc_cuda_host_alloc((void **)&a->sum, cap * sizeof(float))) {
    KIO_ERROR("Out of memory staging %zu frames", frames);
    return KIO_ERR;
  }
  a->cap_mx = cap;
  return KIO_OK;
}

/* Frames of a device piece: what the accumulator's budget holds beside
 * the model and the statistics (at most piece_cap once memory ran short). */
enum { MIN_PIECE = 256 };
static size_t piece_frames(const gacc_acc *a) {
  const kio_gpu_acct *acct = gacc_cuda_acct(a->cuda);
  size_t limit = kio_gpu_acct_limit(acct), pers = gacc_cuda_persistent(a->cuda);
  size_t f = (limit > pers ? limit - pers : 0) / gacc_cuda_frame_bytes(a->cuda);
  if (a->piece_cap && f > a->piece_cap) f = a->piece_cap;
  return f < MIN_PIECE ? MIN_PIECE : f;
}

/* Utterance i of j as a matrix, and its first frame. */
static kio_matrix utt_mat(const gacc_acc *a, const gacc_job *j, int i, size_t first) {
  if (j->use_mats) return j->src[i];
  return (kio_matrix){j->rows[i], a->am->dim, j->feats + first * (size_t)a->am->dim, 0};
}

/* The rest of j from frame ut of utterance ui on the CPU: the device's
 * statistics are fetched, the CPU adds the remaining frames in order (the
 * same operations as the device), and they go back to the device. */
static int cpu_rest(gacc_acc *a, gacc_job *j, int ui, int32_t ut, size_t first) {
  if (gacc_cuda_fetch(a->cuda, &a->st) != KIO_OK) return KIO_ERR;
  for (int i = ui; i < j->n; i++) {
    kio_matrix m = utt_mat(a, j, i, first);
    gacc_utt u = {j->keys + j->key_off[i], &m, j->tid + first};
    if (gacc_accumulate_frames_cpu(a, &u, i == ui ? ut : 0, &j->like[i]) != KIO_OK)
      return KIO_ERR;
    first += (size_t)j->rows[i];
  }
  return gacc_cuda_load(a->cuda, &a->st);
}

/* The pdf of every frame (pool's threads). */
typedef struct {
  const gacc_acc *a;
  gacc_job *j;
  int parts;
} pdf_arg;

static void pdf_part(void *arg, int t, int nt) {
  pdf_arg *c = arg;
  const int32_t *t2p = c->a->tm->tid2pdf, *tid = c->j->tid;
  int32_t *pdf = c->j->pdf;
  for (int q = t; q < c->parts; q += nt) {
    size_t lo, hi;
    gacc_par_range(c->j->frames, q, c->parts, &lo, &hi);
    for (size_t k = lo; k < hi; k++) pdf[k] = t2p[tid[k]];
  }
}

/* A piece's log-likelihoods: phase 1 forms every frame's l = mx + logf(sum)
 * (the host's logf, as the CPU path) in place of mx and finds the first
 * invalid one; phase 2 adds them up in frame order as the one-thread loop
 * did: thread 0 the double total over all frames, the others (or thread 0
 * too, alone) each utterance's float sum, utterance by utterance. */
typedef struct {
  gacc_acc *a;
  gacc_job *j;
  size_t len;
  int parts;
  size_t bad[256];  /* phase 1, per part: its first invalid frame, or len */
  const int32_t *seg;  /* phase 2: nseg (utterance, first, end) triples */
  int nseg;
  double total;
} like_arg;

static void like_part(void *arg, int t, int nt) {
  like_arg *c = arg;
  float *mx = c->a->mx;
  const float *sum = c->a->sum;
  for (int q = t; q < c->parts; q += nt) {
    size_t lo, hi;
    gacc_par_range(c->len, q, c->parts, &lo, &hi);
    c->bad[q] = c->len;
    for (size_t k = lo; k < hi; k++) {
      float l = mx[k] + logf(sum[k]);
      mx[k] = l;
      if ((isnan(l) || isinf(l)) && c->bad[q] == c->len) c->bad[q] = k;
    }
  }
}

static void like_sums(void *arg, int t, int nt) {
  like_arg *c = arg;
  const float *l = c->a->mx;
  if (t == 0) {
    double tot = c->total;
    for (size_t k = 0; k < c->len; k++) tot += (double)l[k];
    c->total = tot;
  }
  if (nt > 1 && t == 0) return;
  const int w = nt > 1 ? nt - 1 : 1, me = nt > 1 ? t - 1 : 0;
  for (int s = me; s < c->nseg; s += w) {
    const int32_t *g = c->seg + 3 * (size_t)s;
    float acc = c->j->like[g[0]];
    for (int32_t k = g[1]; k < g[2]; k++) acc += l[k];
    c->j->like[g[0]] = acc;
  }
}

/* Frames 0 .. len of a piece that starts at frame *ut of utterance *ui
 * (utterance *first frame in the batch): log-likelihoods, their sums, and
 * *ui, *ut, *first moved past the piece. KIO_ERR (logged) on an invalid
 * log-likelihood. */
static int piece_likes(gacc_acc *a, gacc_job *j, size_t len, int *ui, int32_t *ut,
                       size_t *first) {
  like_arg c;
  c.a = a;
  c.j = j;
  c.len = len;
  c.parts = frame_parts(a, len);
  if (c.parts > 256) c.parts = 256;
  if (c.parts == 1) like_part(&c, 0, 1);
  else gacc_par_run(a->par, like_part, &c);
  size_t bad = len;
  for (int q = 0; q < c.parts; q++)
    if (c.bad[q] < bad) bad = c.bad[q];
  /* the piece's utterances (the frame of an invalid one too) */
  int u = *ui;
  int32_t t = *ut;
  size_t k = 0, nseg = 0;
  while (k < len) {
    while (t == j->rows[u]) *first += (size_t)j->rows[u++], t = 0;
    size_t r = (size_t)(j->rows[u] - t);
    if (r > len - k) r = len - k;
    if (bad >= k && bad < k + r)
      return gacc_bad_like(j->keys + j->key_off[u], t + (int32_t)(bad - k));
    if (3 * (nseg + 1) > a->cap_seg) {
      size_t cap = a->cap_seg ? 2 * a->cap_seg : 3 * 256;
      int32_t *g = realloc(a->seg, cap * sizeof *g);
      if (!g) { KIO_ERROR("Out of memory"); return KIO_ERR; }
      a->seg = g;
      a->cap_seg = cap;
    }
    a->seg[3 * nseg] = u;
    a->seg[3 * nseg + 1] = (int32_t)k;
    a->seg[3 * nseg + 2] = (int32_t)(k + r);
    nseg++;
    k += r;
    t += (int32_t)r;
  }
  *ui = u;
  *ut = t;
  c.seg = a->seg;
  c.nseg = (int)nseg;
  c.total = a->st.total_like;
  if (c.parts == 1) like_sums(&c, 0, 1);
  else gacc_par_run(a->par, like_sums, &c);
  a->st.total_like = c.total;
  a->st.total_frames += (double)len;  /* exact: whole numbers far below 2^53 */
  return KIO_OK;
}

/* Accumulates a staged, checked batch; j->like[i] receives utterance i's
 * likelihood. The device statistics and a->st.total_like/frames are
 * updated; the per-utterance sums are the caller's (collect()). The batch
 * goes to the device in pieces that fit the accumulator's budget (a piece
 * may end inside an utterance: the statistics are sums in frame order, so
 * any cut gives the same bits). When device memory runs out: the batch
 * buffers are freed and the piece tried again, then halved, then the
 * device layer decides (wait, the CPU for the rest of the batch, or the
 * error). */
static int run_job(gacc_acc *a, gacc_job *j) {
  for (int i = 0; i < j->n; i++) j->like[i] = 0.0f;
  if (j->frames == 0) return KIO_OK;
  pdf_arg pa = {a, j, frame_parts(a, j->frames)};
  if (pa.parts == 1) pdf_part(&pa, 0, 1);
  else gacc_par_run(a->par, pdf_part, &pa);
  const size_t D = (size_t)a->am->dim;
  size_t off = 0, first = 0;  /* next frame; first frame of utterance ui */
  int ui = 0, trimmed = 0, split = 0;
  int32_t ut = 0;             /* next frame within utterance ui */
  double waited = 0;
  char why[200];
  while (off < j->frames) {
    while (ui < j->n && ut == j->rows[ui]) first += (size_t)j->rows[ui++], ut = 0;
    size_t len = piece_frames(a);
    if (len > j->frames - off) len = j->frames - off;
    if (grow_results(a, len) != KIO_OK) return KIO_ERR;
    /* the piece's matrices: views of the utterances it covers */
    int nv = 0;
    if (j->use_mats) {
      if (j->n > a->cap_views) {
        kio_matrix *v = realloc(a->views, (size_t)j->n * sizeof *v);
        if (!v) { KIO_ERROR("Out of memory"); return KIO_ERR; }
        a->views = v;
        a->cap_views = j->n;
      }
      size_t left = len;
      for (int i = ui; left > 0; i++) {
        int32_t t0 = i == ui ? ut : 0, r = j->rows[i] - t0;
        if ((size_t)r > left) r = (int32_t)left;
        if (r == 0) continue;
        a->views[nv++] = (kio_matrix){r, (int32_t)D, j->src[i].data + (size_t)t0 * D, 0};
        left -= (size_t)r;
      }
    }
    kio_gpu_catch();
    int rc = j->use_mats
                 ? gacc_cuda_accumulate_mats(a->cuda, (int32_t)len, a->views, nv, j->tid + off,
                                             j->pdf + off, a->mx, a->sum)
                 : gacc_cuda_accumulate(a->cuda, (int32_t)len, j->feats + off * D, j->tid + off,
                                        j->pdf + off, a->mx, a->sum);
    const int oom = kio_gpu_caught(why, sizeof why);
    if (rc == KIO_OK) {
      /* Per-frame log-likelihoods in frame order, with the host's logf,
       * so that the float/double sums are those of the CPU path bit for
       * bit. */
      double tl = kio_now_s();
      if (piece_likes(a, j, len, &ui, &ut, &first) != KIO_OK) return KIO_ERR;
      a->t_like += kio_now_s() - tl;
      off += len;
      trimmed = 0;
      waited = 0;
      continue;
    }
    if (!oom) return KIO_ERR;  /* logged */
    gacc_cuda_trim(a->cuda);
    if (!trimmed) {  /* once more with nothing of the last batches held */
      trimmed = 1;
      continue;
    }
    if (len > MIN_PIECE) {
      a->piece_cap = len / 2;
      if (!split++) kio_gpu_note_split(gacc_cuda_acct(a->cuda), why);
      continue;
    }
    size_t need = gacc_cuda_persistent(a->cuda) + len * gacc_cuda_frame_bytes(a->cuda);
    kio_gpu_action act = kio_gpu_out_of_memory(gacc_cuda_acct(a->cuda), why, need, &waited);
    if (act == KIO_GPU_RETRY) continue;
    if (act != KIO_GPU_USE_CPU) return KIO_ERR;
    return cpu_rest(a, j, ui, ut, first);
  }
  if (a->piece_cap) a->piece_cap *= 2;  /* memory was short: grow back */
  return KIO_OK;
}

/* Adds a finished batch's per-utterance results to the totals. */
static void collect(gacc_acc *a, const gacc_job *j) {
  for (int i = 0; i < j->n; i++) {
    a->like_sum += (double)j->like[i];
    a->frames_sum += j->rows[i];
  }
}

/* gacc_check_utt's conditions, silent. */
static int utt_ok(const gacc_acc *a, const gacc_utt *u) {
  const kio_matrix *f = u->feats;
  if (f->rows > 0 && f->cols != a->am->dim) return 0;
  const int32_t nt = a->tm->num_tids, np = a->am->num_pdfs, *t2p = a->tm->tid2pdf;
  for (int32_t t = 0; t < f->rows; t++) {
    int32_t tid = u->ali[t];
    if (tid < 0 || tid > nt || t2p[tid] < 0 || t2p[tid] >= np) return 0;
  }
  return 1;
}

typedef struct {
  const gacc_acc *a;
  const gacc_utt *utts;
  int n, parts;
  int *bad;  /* per part: its first utterance that fails, or n */
} check_arg;

static void check_part(void *arg, int t, int nt) {
  check_arg *c = arg;
  for (int q = t; q < c->parts; q += nt) {
    size_t lo, hi;
    gacc_par_range((size_t)c->n, q, c->parts, &lo, &hi);
    c->bad[q] = c->n;
    for (size_t i = lo; i < hi; i++)
      if (!utt_ok(c->a, &c->utts[i])) {
        c->bad[q] = (int)i;
        break;
      }
  }
}

/* Every utterance checked on the pool's threads; the first that fails is
 * checked again by gacc_check_utt, which logs its ERROR as before. */
static int check_all(gacc_acc *a, int n, const gacc_utt *utts) {
  enum { MAX_PARTS = 256 };
  int bad[MAX_PARTS];
  int parts = gacc_par_size(par_of(a));
  if (parts > n / 4) parts = n / 4 > 0 ? n / 4 : 1;
  if (parts > MAX_PARTS) parts = MAX_PARTS;
  check_arg c = {a, utts, n, parts, bad};
  if (parts == 1) check_part(&c, 0, 1);
  else gacc_par_run(a->par, check_part, &c);
  for (int q = 0; q < parts; q++)
    if (bad[q] < n && gacc_check_utt(a, &utts[bad[q]]) != KIO_OK) return KIO_ERR;
  return KIO_OK;
}

int gacc_gpu_batch(gacc_acc *a, int n, const gacc_utt *utts, gacc_utt_result *res) {
  if (gacc_gpu_wait(a) != KIO_OK) return KIO_ERR;
  if (check_all(a, n, utts) != KIO_OK) return KIO_ERR;
  gacc_job *j = &a->job[a->next];
  int why = stage_borrow(a, j, n, utts);
  if (why != STAGED) return stage_error(why, n, utts);
  int rc = run_job(a, j);
  j->use_mats = 0;  /* the borrowed matrices are the caller's again */
  j->src = NULL;
  if (rc != KIO_OK) return KIO_ERR;
  for (int i = 0; i < n; i++) {
    res[i].like = j->like[i];
    res[i].frames = j->rows[i];
  }
  collect(a, j);
  return KIO_OK;
}

/* ---------------- the worker ---------------- */

static void *worker_main(void *arg) {
  gacc_acc *a = arg;
  pthread_mutex_lock(&a->mu);
  for (;;) {
    while (!a->stop && !(a->inflight && !a->started)) pthread_cond_wait(&a->cv, &a->mu);
    if (!(a->inflight && !a->started)) break;  /* stop, nothing left */
    gacc_job *j = a->inflight;
    a->started = 1;
    pthread_mutex_unlock(&a->mu);
    kio_log_defer(&j->log);
    /* the device is current per host thread */
    int rc = KIO_OK;
    if (!a->bound) {
      rc = gacc_cuda_bind_thread(a->cuda);
      a->bound = rc == KIO_OK;
    }
    if (rc == KIO_OK) rc = run_job(a, j);
    kio_log_defer(NULL);
    pthread_mutex_lock(&a->mu);
    j->status = rc;
    a->finished = 1;
    pthread_cond_broadcast(&a->cv);
  }
  pthread_mutex_unlock(&a->mu);
  return NULL;
}

static int start_worker(gacc_acc *a) {
  if (a->thread_on) return KIO_OK;
  if (pthread_mutex_init(&a->mu, NULL) != 0) goto fail;
  if (pthread_cond_init(&a->cv, NULL) != 0) {
    pthread_mutex_destroy(&a->mu);
    goto fail;
  }
  if (pthread_create(&a->thread, NULL, worker_main, a) != 0) {
    pthread_cond_destroy(&a->cv);
    pthread_mutex_destroy(&a->mu);
    goto fail;
  }
  a->thread_on = 1;
  return KIO_OK;
fail:
  KIO_ERROR("Could not start the accumulation thread");
  return KIO_ERR;
}

int gacc_gpu_wait(gacc_acc *a) {
  gacc_job *j = a->inflight;
  if (!j) return KIO_OK;
  pthread_mutex_lock(&a->mu);
  while (!a->finished) pthread_cond_wait(&a->cv, &a->mu);
  a->inflight = NULL;
  a->started = a->finished = 0;
  pthread_mutex_unlock(&a->mu);
  gacc_utt_result *res = a->pending_res;
  a->pending_res = NULL;
  if (j->src == a->borrow) {  /* gacc_gpu_batch_start: the caller's matrices again */
    j->use_mats = 0;
    j->src = NULL;
  }
  kio_log_replay(&j->log);
  if (j->status != KIO_OK) return KIO_ERR;
  if (res)
    for (int i = 0; i < j->n; i++) {
      res[i].like = j->like[i];
      res[i].frames = j->rows[i];
    }
  collect(a, j);
  return KIO_OK;
}

/* Hands the staged job j to the worker (nothing is in flight). */
static int submit(gacc_acc *a, gacc_job *j) {
  if (start_worker(a) != KIO_OK) return KIO_ERR;
  pthread_mutex_lock(&a->mu);
  a->inflight = j;
  a->started = a->finished = 0;
  pthread_cond_broadcast(&a->cv);
  pthread_mutex_unlock(&a->mu);
  a->next ^= 1;
  return KIO_OK;
}

int gacc_gpu_batch_async(gacc_acc *a, int n, const gacc_utt *utts) {
  /* Copy while the previous batch runs (the other staging set); its errors
   * come first, then this batch's checks, as the synchronous order. */
  gacc_job *j = &a->job[a->next];
  int why = stage(a, j, n, utts);
  if (gacc_gpu_wait(a) != KIO_OK) return KIO_ERR;
  if (check_all(a, n, utts) != KIO_OK) return KIO_ERR;
  if (why != STAGED) return stage_error(why, n, utts);
  return submit(a, j);
}

int gacc_gpu_batch_start(gacc_acc *a, int n, const gacc_utt *utts, gacc_utt_result *res) {
  /* The caller's matrices are borrowed until gacc_gpu_wait (its batch stays
   * untouched until then), so its thread reads the next batch meanwhile. */
  if (gacc_gpu_wait(a) != KIO_OK) return KIO_ERR;
  if (check_all(a, n, utts) != KIO_OK) return KIO_ERR;
  gacc_job *j = &a->job[a->next];
  int why = stage_borrow(a, j, n, utts);
  if (why != STAGED) return stage_error(why, n, utts);
  a->pending_res = res;
  return submit(a, j);
}

int gacc_gpu_batch_take(gacc_acc *a, int n, const gacc_utt *utts, kio_matrix *const *feats) {
  /* Nothing to copy ahead: wait (the previous batch's errors first), check,
   * then swap the features in (the job is free: nothing is in flight). */
  if (gacc_gpu_wait(a) != KIO_OK) return KIO_ERR;
  if (check_all(a, n, utts) != KIO_OK) return KIO_ERR;
  gacc_job *j = &a->job[a->next];
  int why = stage_take(a, j, n, utts, feats);
  if (why != STAGED) return stage_error(why, n, utts);
  return submit(a, j);
}

void gacc_gpu_free(gacc_acc *a) {
  if (a->thread_on) {
    /* a batch not collected: its lines are still worth printing */
    (void)gacc_gpu_wait(a);
    pthread_mutex_lock(&a->mu);
    a->stop = 1;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
    pthread_join(a->thread, NULL);
    pthread_cond_destroy(&a->cv);
    pthread_mutex_destroy(&a->mu);
    a->thread_on = 0;
  }
  job_free(&a->job[0]);
  job_free(&a->job[1]);
  free(a->borrow);  /* shallow copies: the data was never ours */
  a->borrow = NULL;
  a->cap_borrow = 0;
  free(a->views);
  a->views = NULL;
  a->cap_views = 0;
  if (a->cuda) gacc_cuda_set_par(a->cuda, NULL);
  gacc_par_free(a->par);
  a->par = NULL;
  a->par_made = 0;
  free(a->seg);
  a->seg = NULL;
  a->cap_seg = 0;
  gacc_cuda_host_free(a->mx);
  gacc_cuda_host_free(a->sum);
  a->mx = a->sum = NULL;
  a->cap_mx = 0;
}
