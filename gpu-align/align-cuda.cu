/* The CUDA aligner object: device choice, model upload, stream, cuBLAS
 * handle (lazily), and the batch entry points (align-cuda.h). The likelihood kernels
 * are in loglike-cuda.cu, the decoder in decode-cuda.cu. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "align-cuda-impl.h"
#include "base/sys/settings.h"

int galign_cu_model_reserve(galign_cuda *c, int which, void **p, size_t bytes) {
  if (*p && c->model_cap[which] >= bytes) return KIO_OK;
  if (*p) kio_gpu_free(*p, c->stream);
  *p = NULL;
  c->model_cap[which] = 0;
  if (kio_gpu_alloc(c->acct, p, bytes, c->stream) != KIO_OK) return KIO_ERR;
  c->model_cap[which] = bytes;
  return KIO_OK;
}

/* The model g on the device (its arrays reused where large enough) and
 * the host copies the batches read. */
static int galign_cuda_upload_model(galign_cuda *c, const galign_gmm *g) {
  free(c->h_pdf_offset);
  free(c->h_sel_of);
  c->h_pdf_offset = c->h_sel_of = NULL;
  c->dim = g->dim;
  c->num_pdfs = g->num_pdfs;
  c->num_gauss = g->num_gauss;
  c->kpad = (1 + 2 * g->dim + 3) & ~3;
  c->log_eps = logf(FLT_EPSILON);
  size_t np1 = (size_t)g->num_pdfs + 1;
  c->h_pdf_offset = (int32_t *)malloc(sizeof(int32_t) * np1);
  c->h_sel_of = (int32_t *)malloc(sizeof(int32_t) * (np1 + 1));
  size_t wn = (size_t)(g->num_gauss > 0 ? g->num_gauss : 1) * c->kpad;
  float *w = (float *)calloc(wn, sizeof(float));
  if (!c->h_pdf_offset || !c->h_sel_of || !w) {
    free(w);
    KIO_ERROR("Out of memory for a model of %d Gaussians", (int)g->num_gauss);
    return KIO_ERR;
  }
  memcpy(c->h_pdf_offset, g->pdf_offset, sizeof(int32_t) * np1);
  for (size_t p = 0; p < np1; p++) c->h_sel_of[p] = -1;
  const int D = g->dim;
  for (int32_t m = 0; m < g->num_gauss; m++) {
    float *row = w + (size_t)m * c->kpad;
    row[0] = g->gconst[m];
    for (int d = 0; d < D; d++) {
      row[1 + d] = g->means_invvars[(size_t)m * D + d];
      row[1 + D + d] = -0.5f * g->inv_vars[(size_t)m * D + d]; /* exact: power of 2 */
    }
  }
  /* On the aligner's stream, from the stream-ordered pool: in the GPU
   * service other jobs' streams keep running meanwhile. */
  cudaStream_t st = c->stream;
  if (galign_cu_model_reserve(c, GALIGN_CU_MODEL_W, (void **)&c->d_w, sizeof(float) * wn) != KIO_OK) {
    free(w);
    return KIO_ERR;
  }
  cudaError_t e = cudaMemcpyAsync(c->d_w, w, sizeof(float) * wn, cudaMemcpyHostToDevice, st);
  if (e == cudaSuccess) e = kio_cuda_stream_wait(st);
  free(w);
  KIO_CUDA_TRY(e);
  if (galign_cu_model_reserve(c, GALIGN_CU_MODEL_PDF_OFFSET, (void **)&c->d_pdf_offset,
                              sizeof(int32_t) * np1) != KIO_OK)
    return KIO_ERR;
  KIO_CUDA_TRY(cudaMemcpyAsync(c->d_pdf_offset, c->h_pdf_offset, sizeof(int32_t) * np1,
                               cudaMemcpyHostToDevice, st));
  /* the flat model as is, for the exact kernel */
  size_t ng = (size_t)(g->num_gauss > 0 ? g->num_gauss : 1), nd = ng * (size_t)D;
  c->dgmm.dim = g->dim;
  c->dgmm.num_pdfs = g->num_pdfs;
  c->dgmm.num_gauss = g->num_gauss;
  c->dgmm.blas_prof = g->blas_prof;
  c->dgmm.pdf_offset = c->d_pdf_offset;
  if (galign_cu_model_reserve(c, GALIGN_CU_MODEL_GCONST, (void **)&c->dgmm.gconst,
                              sizeof(float) * ng) != KIO_OK ||
      galign_cu_model_reserve(c, GALIGN_CU_MODEL_MI, (void **)&c->dgmm.means_invvars,
                              sizeof(float) * nd) != KIO_OK ||
      galign_cu_model_reserve(c, GALIGN_CU_MODEL_IV, (void **)&c->dgmm.inv_vars,
                              sizeof(float) * nd) != KIO_OK)
    return KIO_ERR;
  if (g->num_gauss > 0) {
    KIO_CUDA_TRY(cudaMemcpyAsync(c->dgmm.gconst, g->gconst, sizeof(float) * ng,
                                 cudaMemcpyHostToDevice, st));
    KIO_CUDA_TRY(cudaMemcpyAsync(c->dgmm.means_invvars, g->means_invvars, sizeof(float) * nd,
                                 cudaMemcpyHostToDevice, st));
    KIO_CUDA_TRY(cudaMemcpyAsync(c->dgmm.inv_vars, g->inv_vars, sizeof(float) * nd,
                                 cudaMemcpyHostToDevice, st));
  }
  KIO_CUDA_TRY(kio_cuda_stream_wait(st));
  int32_t maxc = 0;
  for (int32_t p = 0; p < g->num_pdfs; p++)
    if (g->pdf_offset[p + 1] - g->pdf_offset[p] > maxc) maxc = g->pdf_offset[p + 1] - g->pdf_offset[p];
  static const char *const kernels[] = {"exact", "gemm", NULL};
  /* The exact kernel's tile of features (galign_cu_ll_exact_smem: 1 KiB per
   * dimension) must fit one block's shared memory, which depends on the
   * GPU: 64 KiB on sm_75, 99 KiB on sm_86/89/120, 163 KiB on sm_80/87,
   * 227 KiB on sm_90/100. Every usual dimension (39, 40, 48) fits all. */
  int optin = 0;
  KIO_CUDA_TRY(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, c->device));
  const size_t smem = galign_cu_ll_exact_smem(g->dim);
  const int fits = smem <= GALIGN_LL_MAX_SMEM && smem <= (size_t)optin;
  c->ll_exact = maxc <= GALIGN_LL_MAXC && fits &&
                kio_setting_choice(KIO_SET_DEV_LIKELIHOODS, kernels, 0) == 0;
  if (!fits && smem <= GALIGN_LL_MAX_SMEM && maxc <= GALIGN_LL_MAXC)
    KIO_LOG("Feature dimension %d: the exact likelihood kernel needs %zu KiB of shared "
            "memory per block, this GPU gives %d KiB; likelihoods through cuBLAS (may "
            "differ from the CPU path's rounding)", (int)g->dim, smem >> 10, optin >> 10);
  if (c->ll_exact && galign_cu_ll_exact_upload(c, g) != KIO_OK) return KIO_ERR;
  KIO_VLOG(1, "Device likelihoods: %s (at most %d Gaussians per pdf)",
           c->ll_exact ? "exact kernel (CPU order)" : "cuBLAS SGEMM", (int)maxc);
  return KIO_OK;
}

static int galign_cuda_init(galign_cuda *c, kio_gpu *gpu, const galign_gmm *gmm) {
  c->gpu = gpu;
  c->device = kio_gpu_device(gpu);
  if (kio_gpu_bind(gpu) != KIO_OK) return KIO_ERR;
  snprintf(c->desc, sizeof c->desc, "%s", kio_gpu_desc(gpu));
  c->mem_total = kio_gpu_total(gpu);
  c->acct = kio_gpu_acct_new(gpu, "aligner", kio_gpu_share(gpu, KIO_GPU_PART_ALIGN), c->mode);
  if (!c->acct) return KIO_ERR;
  KIO_CUDA_TRY(cudaDeviceGetAttribute(&c->num_sms, cudaDevAttrMultiProcessorCount, c->device));
  KIO_CUDA_TRY(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
  galign_cu_use(c->acct, c->stream);
  for (int i = 0; i < 4; i++) KIO_CUDA_TRY(cudaEventCreate(&c->ev[i]));
  for (int i = 0; i < GALIGN_RING_N; i++)
    KIO_CUDA_TRY(cudaEventCreateWithFlags(&c->ring_ev[i], cudaEventDisableTiming));
  if (galign_cuda_upload_model(c, gmm) != KIO_OK) return KIO_ERR;
  if (galign_cu_host_reserve(&c->h_flags, sizeof(int)) != KIO_OK) return KIO_ERR;
  if (galign_cu_dev_reserve(&c->d_flags, sizeof(int)) != KIO_OK) return KIO_ERR;
  *(int *)c->h_flags.p = 0;
  c->model_bytes = kio_gpu_acct_live(c->acct);
  if (galign_cu_dec_new(c) != KIO_OK) return KIO_ERR;
  return KIO_OK;
}

/* The cuBLAS handle, created on first use: the default exact kernel never
 * needs it, and creating one costs tens of milliseconds at start-up. */
int galign_cu_blas(galign_cuda *c) {
  if (c->blas) return KIO_OK;
  const galign_cublas_api *b = galign_cublas();
  if (!b) return KIO_ERR;
  GALIGN_CUBLAS_TRY(b->create(&c->blas));
  GALIGN_CUBLAS_TRY(b->set_stream(c->blas, c->stream));
  /* Plain FP32: no TF32 tensor cores, whatever NVIDIA_TF32_OVERRIDE says. */
  GALIGN_CUBLAS_TRY(b->set_math_mode(c->blas, CUBLAS_PEDANTIC_MATH));
  return KIO_OK;
}

extern "C" int galign_cuda_new(galign_cuda **out, kio_gpu *gpu, galign_use_gpu mode,
                               const galign_gmm *gmm, const galign_opts *o) {
  *out = NULL;
  if (!gmm || gmm->dim <= 0 || gmm->num_pdfs <= 0) {
    KIO_ERROR("Empty acoustic model given to the CUDA aligner");
    return KIO_ERR;
  }
  galign_cuda *c = (galign_cuda *)calloc(1, sizeof *c);
  if (!c) {
    KIO_ERROR("Out of memory");
    return KIO_ERR;
  }
  if (o) c->opts = *o; else galign_opts_default(&c->opts);
  c->mode = mode;
  if (galign_cuda_init(c, gpu, gmm) != KIO_OK) {
    galign_cuda_free(c);
    return KIO_ERR;
  }
  KIO_VLOG(1, "CUDA aligner on %s: %d pdfs, %d Gaussians, dim %d", c->desc,
           (int)c->num_pdfs, (int)c->num_gauss, (int)c->dim);
  *out = c;
  return KIO_OK;
}

extern "C" int galign_cuda_rebind(galign_cuda *c, const galign_gmm *gmm, const galign_opts *o) {
  if (!gmm || gmm->dim <= 0 || gmm->num_pdfs <= 0) {
    KIO_ERROR("Empty acoustic model given to the CUDA aligner");
    return KIO_ERR;
  }
  if (kio_gpu_bind(c->gpu) != KIO_OK) return KIO_ERR;
  galign_cu_use(c->acct, c->stream);
  /* nothing of the last model's batches may still read the arrays */
  galign_cu_retry_wait(c, NULL);
  KIO_CUDA_TRY(kio_cuda_stream_wait(c->stream));
  if (o) c->opts = *o; else galign_opts_default(&c->opts);
  c->sub_bytes = 0;
  c->ndf = 0;
  c->df_base = NULL;
  /* the model first, whatever the budget (as a new aligner's); then the
   * budget a new one has (the GPU service sets its own per batch) */
  kio_gpu_acct_set_limit(c->acct, SIZE_MAX / 2);
  if (galign_cuda_upload_model(c, gmm) != KIO_OK) return KIO_ERR;
  kio_gpu_acct_set_limit(c->acct, kio_gpu_share(c->gpu, KIO_GPU_PART_ALIGN));
  /* what the account holds besides the batch buffers: the model's arrays
   * (as large as the largest model bound so far) and the flag */
  size_t live = kio_gpu_acct_live(c->acct), held = galign_cu_batch_held(c);
  c->model_bytes = live > held ? live - held : 0;
  KIO_VLOG(1, "CUDA aligner on %s rebound: %d pdfs, %d Gaussians, dim %d", c->desc,
           (int)c->num_pdfs, (int)c->num_gauss, (int)c->dim);
  return KIO_OK;
}

extern "C" void galign_cuda_free(galign_cuda *c) {
  if (!c) return;
  if (c->gpu) kio_gpu_bind(c->gpu); /* see bind_device */
  if (c->stream) kio_cuda_stream_wait(c->stream);
  galign_cu_use(c->acct, c->stream);
  galign_cu_dec_free(c);
  galign_cu_buf *dev[] = {&c->d_feats, &c->d_utt, &c->d_sel, &c->d_ucol, &c->d_wsel,
                          &c->d_xexp, &c->d_lg, &c->d_ll, &c->d_flags, &c->d_uflags,
                          &c->d_tiles, &c->d_tsel};
  galign_cu_buf *host[] = {&c->h_feats, &c->h_utt, &c->h_sel, &c->h_ucol, &c->h_flags,
                           &c->h_uflags, &c->h_tiles};
  for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) galign_cu_dev_release(dev[i]);
  for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) galign_cu_host_release(host[i]);
  void *model[] = {c->d_w, c->d_pdf_offset, c->dgmm.gconst, c->dgmm.means_invvars,
                   c->dgmm.inv_vars, c->d_groups, c->d_grp_start};
  for (size_t i = 0; i < sizeof model / sizeof model[0]; i++) kio_gpu_free(model[i], c->stream);
  if (c->blas) galign_cublas()->destroy(c->blas);
  for (int i = 0; i < 4; i++)
    if (c->ev[i]) cudaEventDestroy(c->ev[i]);
  for (int i = 0; i < GALIGN_RING_N; i++) {
    galign_cu_host_release(&c->h_ring[i]);
    if (c->ring_ev[i]) cudaEventDestroy(c->ring_ev[i]);
  }
  if (c->stream) kio_cuda_stream_wait(c->stream);  /* the frees above are stream-ordered */
  if (c->stream) cudaStreamDestroy(c->stream);
  cudaGetLastError(); /* a failed teardown must not poison a later call */
  galign_cu_use(NULL, NULL);
  kio_gpu_acct_free(c->acct);
  free(c->h_pdf_offset);
  free(c->h_sel_of);
  free(c->df);
  free(c);
}

static int galign_df_cmp(const void *a, const void *b) {
  const kio_matrix *x = ((const galign_cu_devfeat *)a)->m, *y = ((const galign_cu_devfeat *)b)->m;
  return x < y ? -1 : x > y;
}

extern "C" int galign_cuda_set_dev_feats(galign_cuda *c, int n, const kio_matrix *const *feats,
                                         const float *d_base, const int64_t *row_off) {
  c->ndf = 0;
  c->df_base = n > 0 ? d_base : NULL;
  if (n <= 0) return KIO_OK;
  if (n > c->df_cap) {
    galign_cu_devfeat *d = (galign_cu_devfeat *)realloc(c->df, sizeof *d * (size_t)n);
    if (!d) { KIO_ERROR("Out of memory"); return KIO_ERR; }
    c->df = d;
    c->df_cap = n;
  }
  for (int i = 0; i < n; i++) c->df[i] = (galign_cu_devfeat){feats[i], row_off[i]};
  qsort(c->df, (size_t)n, sizeof *c->df, galign_df_cmp);
  c->ndf = n;
  return KIO_OK;
}

extern "C" int galign_cuda_device(const galign_cuda *c) { return c ? c->device : -1; }
extern "C" kio_gpu_acct *galign_cuda_acct(const galign_cuda *c) { return c ? c->acct : NULL; }
extern "C" int64_t galign_cuda_dev_feat_utts(const galign_cuda *c) { return c ? c->stat_df_utts : 0; }

extern "C" const char *galign_cuda_device_desc(const galign_cuda *c) {
  return c ? c->desc : "";
}

extern "C" void galign_cuda_stats(const galign_cuda *c, int64_t *frames, int64_t *toks,
                                  int32_t *max_toks, int64_t *redo, int64_t *bad_like,
                                  int64_t *regrown) {
  if (frames) *frames = c ? c->stat_frames : 0;
  if (toks) *toks = c ? c->stat_toks : 0;
  if (max_toks) *max_toks = c ? c->stat_max_toks : 0;
  if (redo) *redo = c ? c->stat_redo : 0;
  if (bad_like) *bad_like = c ? c->stat_bad_like : 0;
  if (regrown) *regrown = c ? c->stat_regrow : 0;
}

extern "C" void galign_cuda_retry_stats(const galign_cuda *c, int64_t *host_retries,
                                        double *host_s) {
  if (host_retries) *host_retries = c ? c->stat_host_retry : 0;
  if (host_s) *host_s = c ? c->t_retry : 0;
}

extern "C" void galign_cuda_times(const galign_cuda *c, double *ll_s, double *dec_s,
                                  double *wall_s, double *stage_s) {
  if (stage_s) *stage_s = c ? c->t_stage : 0;
  if (ll_s) *ll_s = c ? c->t_ll : 0;
  if (dec_s) *dec_s = c ? c->t_dec : 0;
  if (wall_s) *wall_s = c ? c->t_wall : 0;
}

int galign_cu_accum_times(galign_cuda *c, int dec_pass) {
  float ms = 0;
  if (c->ll_timed) {
    KIO_CUDA_TRY(cudaEventElapsedTime(&ms, c->ev[0], c->ev[1]));
    c->t_ll += 1e-3 * ms;
    c->ll_timed = 0;
  }
  if (dec_pass) {
    KIO_CUDA_TRY(cudaEventElapsedTime(&ms, c->ev[2], c->ev[3]));
    c->t_dec += 1e-3 * ms;
  }
  return KIO_OK;
}

/* The calling thread's current device must be the aligner's: the worker and
 * main threads never chose one, and a new thread starts on device 0, so with
 * the aligner on another GPU its stream-ordered allocations and copies
 * would go to the wrong device. */
static int bind_device(const galign_cuda *c) {
  if (kio_gpu_bind(c->gpu) != KIO_OK) return KIO_ERR;
  galign_cu_use(c->acct, c->stream);
  return KIO_OK;
}

/* Frames per device sub-batch forced by $KALDI_GPU_DEV_BATCH_FRAMES
 * (debugging), else 0: sub-batches are planned in bytes. */
static int64_t galign_forced_batch_frames(void) {
  return kio_setting_int(KIO_SET_DEV_BATCH_FRAMES, 0, 1, INT64_MAX);
}

/* Bytes a sub-batch may plan for: the budget less what is held besides the
 * batch buffers (the model, long utterances' chunk buffers of other
 * threads) and, on the cuBLAS path, its fixed chunk buffers; at most
 * sub_bytes. */
static size_t galign_plan_bytes(const galign_cuda *c) {
  size_t limit = kio_gpu_acct_limit(c->acct), live = kio_gpu_acct_live(c->acct);
  size_t held = galign_cu_batch_held(c);
  size_t fixed = live > held ? live - held : 0;
  if (!c->ll_exact) fixed += limit / 8 + (size_t)c->num_gauss * c->kpad * sizeof(float);
  size_t room = limit > fixed ? limit - fixed : 0;
  return c->sub_bytes && c->sub_bytes < room ? c->sub_bytes : room;
}

extern "C" size_t galign_cuda_batch_need(const galign_cuda *c, int n,
                                         const galign_graph *const *graphs, const int32_t *rows) {
  /* the cuBLAS path's fixed buffers are a share of whatever the limit is */
  if (!c || !c->ll_exact) return SIZE_MAX;
  size_t b = 0;
  for (int i = 0; i < n; i++) b += galign_cu_utt_bytes(c, graphs[i], rows[i]);
  return b;
}

extern "C" void galign_cuda_trim(galign_cuda *c) {
  if (!c) return;
  if (bind_device(c) != KIO_OK) return;
  galign_cu_dec_trim(c);
}

/* Runs [likelihoods ->] decoder over sub-batches planned to fit the
 * aligner's budget. When device memory runs out anyway (the device is
 * shared, or the estimate was short): the batch buffers are freed and the
 * sub-batch tried again, then halved down to one utterance, then the
 * device layer decides (kio_gpu_out_of_memory): wait and retry, the CPU
 * for the rest of this batch (redo[i] = 1), or an error. Retry passes
 * queued on host threads run beside the later sub-batches; galign_cuda_run
 * waits for them. */
static int galign_cuda_run_batches(galign_cuda *c, int n, const galign_graph *const *graphs,
                           const kio_matrix *const *feats, const kio_matrix *const *loglikes,
                           int want_per_frame, galign_result *results, uint8_t *redo,
                           int *num_redo) {
  if (num_redo) *num_redo = 0;
  if (n < 0 || (n > 0 && (!graphs || !results || !redo || (!feats && !loglikes)))) {
    KIO_ERROR("Bad arguments to the CUDA aligner");
    return KIO_ERR;
  }
  const int64_t forced = galign_forced_batch_frames();
  const double t0 = kio_now_s();
  const int max_utts = 1 << 20;
  int done = 0, cap = max_utts, trimmed = 0, split = 0;
  double waited = 0;
  char why[200];
  while (done < n) {
    const size_t plan = galign_plan_bytes(c);
    int64_t frames = 0;
    size_t bytes = 0, first = 0;
    int m = 0;
    while (done + m < n && m < cap) {
      const kio_matrix *x = loglikes ? loglikes[done + m] : feats[done + m];
      size_t b = galign_cu_utt_bytes(c, graphs[done + m], x->rows);
      if (m == 0) first = b;
      if (m > 0 && (forced > 0 ? frames + x->rows > forced : bytes + b > plan)) break;
      frames += x->rows;
      bytes += b;
      m++;
    }
    KIO_VLOG(2, "Device sub-batch: %d utterances, %lld frames, %.1f MiB planned (%.0f bytes "
             "per frame); the aligner's budget %.1f MiB, %.1f MiB held", m, (long long)frames,
             bytes / 1048576.0, frames ? (double)bytes / (double)frames : 0.0,
             kio_gpu_acct_limit(c->acct) / 1048576.0, kio_gpu_acct_live(c->acct) / 1048576.0);
    kio_gpu_catch();
    int rc = galign_cu_loglikes_launch(c, m, graphs + done, feats ? feats + done : NULL,
                                       loglikes ? loglikes + done : NULL);
    int nr = 0;
    if (rc == KIO_OK)
      rc = galign_cu_decode_batch(c, m, graphs + done, want_per_frame, results + done,
                                  redo + done, &nr);
    const int oom = kio_gpu_caught(why, sizeof why);
    if (rc == KIO_OK) {
      if (num_redo) *num_redo += nr;
      done += m;
      trimmed = 0;
      waited = 0;
      continue;
    }
    kio_cuda_stream_wait(c->stream);
    cudaGetLastError();
    if (!oom) return KIO_ERR;  /* logged */
    /* Out of memory: first once more with nothing of the last batches
     * held, then smaller pieces. */
    galign_cu_dec_trim(c);
    if (!trimmed) {
      trimmed = 1;
      continue;
    }
    if (m > 1) {
      cap = m / 2;
      c->sub_bytes = bytes / 2 > 1 ? bytes / 2 : 1;
      if (!split++) kio_gpu_note_split(c->acct, why);
      continue;
    }
    switch (kio_gpu_out_of_memory(c->acct, why, first + c->model_bytes, &waited)) {
      case KIO_GPU_RETRY:
        continue;
      case KIO_GPU_USE_CPU:
        /* this batch's rest on the CPU; the next batch tries the device */
        for (int i = done; i < n; i++) {
          redo[i] = 1;
          results[i].ok = 0;
        }
        if (num_redo) *num_redo += n - done;
        c->stat_redo += n - done;
        done = n;
        break;
      default:
        return KIO_ERR;
    }
  }
  /* memory was short: the next batches start at twice the last size */
  if (c->sub_bytes) {
    c->sub_bytes = c->sub_bytes > ((size_t)1 << 62) ? 0 : c->sub_bytes * 2;
    size_t limit = kio_gpu_acct_limit(c->acct);
    if (c->sub_bytes >= limit) c->sub_bytes = 0;
  }
  c->t_wall += kio_now_s() - t0;
  return KIO_OK;
}

static int galign_cuda_run(galign_cuda *c, int n, const galign_graph *const *graphs,
                           const kio_matrix *const *feats, const kio_matrix *const *loglikes,
                           int want_per_frame, galign_result *results, uint8_t *redo,
                           int *num_redo) {
  int rc = galign_cuda_run_batches(c, n, graphs, feats, loglikes, want_per_frame, results, redo,
                                   num_redo);
  const double t0 = kio_now_s(), busy0 = c->t_retry;
  galign_cu_retry_wait(c, num_redo);  /* the host writes results until then */
  c->t_wall += kio_now_s() - t0;
  if (c->t_retry > busy0)
    KIO_VLOG(2, "Retry passes on host threads: %.3f s of thread time, %.3f s waited for "
             "after the device's batches", c->t_retry - busy0, kio_now_s() - t0);
  return rc;
}

extern "C" int galign_cuda_align_batch(galign_cuda *c, int n, const galign_graph *const *graphs,
                                       const kio_matrix *const *feats, int want_per_frame,
                                       galign_result *results, uint8_t *redo, int *num_redo) {
  if (bind_device(c) != KIO_OK) return KIO_ERR;
  return galign_cuda_run(c, n, graphs, feats, NULL, want_per_frame, results, redo, num_redo);
}

extern "C" int galign_cuda_decode(galign_cuda *c, int n, const galign_graph *const *graphs,
                                  const kio_matrix *const *loglikes, int want_per_frame,
                                  galign_result *results, uint8_t *redo, int *num_redo) {
  if (bind_device(c) != KIO_OK) return KIO_ERR;
  return galign_cuda_run(c, n, graphs, NULL, loglikes, want_per_frame, results, redo, num_redo);
}

extern "C" int galign_cuda_loglikes(galign_cuda *c, const galign_graph *g,
                                    const kio_matrix *feats, kio_matrix *out) {
  const galign_graph *gs[1] = {g};
  const kio_matrix *fs[1] = {feats};
  if (bind_device(c) != KIO_OK) return KIO_ERR;
  if (galign_cu_loglikes_launch(c, 1, gs, fs, NULL) != KIO_OK) {
    kio_cuda_stream_wait(c->stream);
    return KIO_ERR;
  }
  KIO_CUDA_TRY(kio_cuda_stream_wait(c->stream));
  if (galign_cu_accum_times(c, 0) != KIO_OK) return KIO_ERR;
  if (galign_cu_check_flags(c) != KIO_OK) return KIO_ERR;
  if (kio_matrix_resize(out, feats->rows, g->num_pdfs_used) != KIO_OK) {
    KIO_ERROR("Out of memory");
    return KIO_ERR;
  }
  size_t cnt = (size_t)feats->rows * g->num_pdfs_used;
  if (cnt > 0)
    KIO_CUDA_TRY(cudaMemcpyAsync(out->data, c->d_ll.p, sizeof(float) * cnt,
                                 cudaMemcpyDeviceToHost, c->stream));
  KIO_CUDA_TRY(kio_cuda_stream_wait(c->stream));
  return KIO_OK;
}
