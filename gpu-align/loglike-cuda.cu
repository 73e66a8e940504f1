/* GMM log-likelihoods of a batch of utterances on the device (reference 3.4,
 * 5.5): rows [1, x, x*x] (FP32) times the model matrix [gconst, mi, -0.5 iv]
 * with cublasSgemm (plain FP32, no TF32), chunked over frames, then Kaldi's
 * per-pdf log-sum-exp with its FLT_EPSILON cut-off, written straight into
 * each utterance's compact (frame, pdfs_used) layout. Only the Gaussians of
 * the union of pdfs the batch's graphs use enter the GEMM. */
#include <float.h>
#include <pthread.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "align-cuda-impl.h"

/* ---- buffers ---- */

/* The account and stream of the aligner the calling thread works for (set
 * by its entry points): buffers are charged to its budget and allocated and
 * freed in its stream's order (device/gpu.h), so growing one never stalls
 * the other jobs' streams in the GPU service. */
static __thread cudaStream_t t_buf_stream;
static __thread kio_gpu_acct *t_buf_acct;
void galign_cu_use(kio_gpu_acct *acct, cudaStream_t st) {
  t_buf_acct = acct;
  t_buf_stream = st;
}

int galign_cu_dev_reserve(galign_cu_buf *b, size_t bytes) {
  if (bytes <= b->cap) return KIO_OK;
  size_t want = bytes + bytes / 4; /* some slack: batches vary a little */
  kio_gpu_free(b->p, t_buf_stream);
  b->p = NULL;
  b->cap = 0;
  /* without the slack when the budget has no room for it */
  if (want > bytes && kio_gpu_acct_room(t_buf_acct) < want) want = bytes;
  if (kio_gpu_alloc(t_buf_acct, &b->p, want, t_buf_stream) != KIO_OK) return KIO_ERR;
  b->cap = want;
  return KIO_OK;
}

int galign_cu_host_reserve(galign_cu_buf *b, size_t bytes) {
  if (bytes <= b->cap) return KIO_OK;
  size_t want = bytes + bytes / 4;
  kio_cuda_host_free(b->p, t_buf_stream);
  b->p = NULL;
  b->cap = 0;
  if (kio_cuda_host_alloc(&b->p, want) != KIO_OK) return KIO_ERR;
  b->cap = want;
  return KIO_OK;
}

void galign_cu_dev_release(galign_cu_buf *b) {
  kio_gpu_free(b->p, t_buf_stream);
  b->p = NULL;
  b->cap = 0;
}

void galign_cu_host_release(galign_cu_buf *b) {
  kio_cuda_host_free(b->p, t_buf_stream);
  b->p = NULL;
  b->cap = 0;
}

/* ---- kernels ---- */

/* Copies the Gaussian rows of each selected pdf (contiguous in the model
 * matrix) to its place in the selected matrix. One block per selected pdf. */
__global__ void galign_k_gather_w(const float *__restrict__ w, const int32_t *__restrict__ pdf_offset,
                                  const int32_t *__restrict__ sel_pdf,
                                  const int32_t *__restrict__ sel_goff, int kpad,
                                  float *__restrict__ wsel) {
  int s = blockIdx.x;
  int32_t p = sel_pdf[s];
  size_t src = (size_t)pdf_offset[p] * kpad, dst = (size_t)sel_goff[s] * kpad;
  size_t cnt = (size_t)(sel_goff[s + 1] - sel_goff[s]) * kpad;
  for (size_t i = threadIdx.x; i < cnt; i += blockDim.x) wsel[dst + i] = w[src + i];
}

/* xexp row r = [1, x, x*x, 0 pad] for batch row f0 + r. */
__global__ void galign_k_expand(const float *__restrict__ feats, int64_t f0, int64_t rows,
                                int dim, int kpad, float *__restrict__ xexp) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= rows * kpad) return;
  int64_t r = i / kpad;
  int c = (int)(i - r * kpad);
  float v;
  if (c == 0) {
    v = 1.0f;
  } else if (c <= dim) {
    v = feats[(f0 + r) * dim + (c - 1)];
  } else if (c <= 2 * dim) {
    float x = feats[(f0 + r) * dim + (c - 1 - dim)];
    v = x * x; /* one rounding, as the CPU's x*x (no FMA to contract into) */
  } else {
    v = 0.0f;
  }
  xexp[i] = v;
}

/* Utterance holding batch row f (utts sorted by frame_off). */
__device__ static int galign_d_find_utt(const galign_cu_utt *utt, int n, int64_t f) {
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) >> 1;
    if (utt[mid].frame_off <= f) lo = mid; else hi = mid - 1;
  }
  return lo;
}

/* One block per batch row of the chunk; threads over the utterance's
 * compact pdfs. Kaldi's VectorBase::LogSumExp: max, cut = max +
 * logf(FLT_EPSILON), sum of expf(l - max) over l >= cut in double, in
 * component order; result (float)(max + log(sum)). */
__global__ void galign_k_lse(const float *__restrict__ lg, int64_t f0, int64_t rows, int gsel,
                             const galign_cu_utt *__restrict__ utt, int n,
                             const int32_t *__restrict__ ucol, const int32_t *__restrict__ sel_goff,
                             float log_eps, float *__restrict__ ll, int *__restrict__ flags,
                             int *__restrict__ uflags) {
  int64_t r = blockIdx.x;
  if (r >= rows) return;
  int64_t f = f0 + r;
  __shared__ int su;
  if (threadIdx.x == 0) su = galign_d_find_utt(utt, n, f);
  __syncthreads();
  const galign_cu_utt u = utt[su];
  const float *row = lg + r * (int64_t)gsel;
  float *out = ll + u.ll_off + (f - u.frame_off) * (int64_t)u.npu;
  int bad = 0;
  for (int k = threadIdx.x; k < u.npu; k += blockDim.x) {
    int32_t s = ucol[u.col_off + k];
    int32_t g0 = sel_goff[s], g1 = sel_goff[s + 1];
    float mx = -INFINITY;
    for (int32_t g = g0; g < g1; g++) {
      float l = row[g];
      if (l > mx) mx = l;
      if (l != l) bad = 1; /* as the CPU path: a NaN component is invalid */
    }
    float cut = mx + log_eps;
    double sum = 0.0;
    for (int32_t g = g0; g < g1; g++) {
      float l = row[g];
      /* expf correctly rounded (as glibc's) through double */
      if (l >= cut) sum += (double)(float)exp((double)(l - mx));
    }
    float res = (float)((double)mx + log(sum));
    if (isnan(res) || isinf(res)) bad = 1;
    out[k] = res;
  }
  if (bad) {
    atomicOr(flags, GALIGN_CU_BAD_LIKE);
    atomicOr(uflags + su, GALIGN_CU_BAD_LIKE);
  }
}

/* ---- host side ---- */

static int64_t galign_chunk_rows(const galign_cuda *c) {
  /* Gaussian log-likelihood chunk: at most 1/8 of the aligner's budget or
   * 2 GiB (galign_cu_utt_bytes leaves it out of the sub-batches). */
  size_t budget = kio_gpu_acct_limit(c->acct) / 8;
  if (budget > ((size_t)2 << 30)) budget = (size_t)2 << 30;
  size_t per_row = sizeof(float) * ((size_t)c->gsel + (size_t)c->kpad);
  int64_t rows = (int64_t)(budget / per_row);
  if (rows < 256) rows = 256;
  rows &= ~(int64_t)31;
  if (rows > c->total_frames) rows = c->total_frames;
  return rows;
}

/* Builds the per-utterance table, the selected-pdf union and its Gaussian
 * offsets, and the per-utterance compact -> selected map (all on the host). */
static int galign_plan(galign_cuda *c, int n, const galign_graph *const *graphs,
                       const int32_t *frames) {
  int64_t total_npu = 0, total_frames = 0, total_ll = 0;
  for (int i = 0; i < n; i++) total_npu += graphs[i]->num_pdfs_used;
  GALIGN_CU_RESERVE(host, c->h_utt, galign_cu_utt, n);
  GALIGN_CU_RESERVE(host, c->h_ucol, int32_t, total_npu + 1);
  GALIGN_CU_RESERVE(host, c->h_sel, int32_t, 2 * (int64_t)c->num_pdfs + 1);
  galign_cu_utt *utt = (galign_cu_utt *)c->h_utt.p;
  int32_t *ucol = (int32_t *)c->h_ucol.p, *sel = (int32_t *)c->h_sel.p;
  int32_t nsel = 0;
  int64_t col = 0;
  int ret = KIO_OK;
  for (int i = 0; i < n && ret == KIO_OK; i++) {
    const galign_graph *g = graphs[i];
    utt[i].frame_off = total_frames;
    utt[i].num_frames = frames[i];
    utt[i].npu = g->num_pdfs_used;
    utt[i].col_off = col;
    utt[i].ll_off = total_ll;
    total_frames += frames[i];
    total_ll += (int64_t)frames[i] * g->num_pdfs_used;
    for (int32_t k = 0; k < g->num_pdfs_used; k++) {
      int32_t p = g->pdfs_used[k];
      if (p < 0 || p >= c->num_pdfs) {
        KIO_ERROR("Graph uses pdf %d but the model has %d pdfs", (int)p, (int)c->num_pdfs);
        ret = KIO_ERR;
        break;
      }
      if (c->h_sel_of[p] < 0) {
        c->h_sel_of[p] = nsel;
        sel[nsel++] = p;
      }
      ucol[col++] = c->ll_exact ? p : c->h_sel_of[p];
    }
  }
  /* gaussian offsets of the selected pdfs follow the list: sel[nsel ..] */
  int32_t *goff = sel + nsel, gsel = 0;
  for (int32_t s = 0; s < nsel; s++) {
    int32_t p = sel[s];
    c->h_sel_of[p] = -1; /* reset for the next batch */
    goff[s] = gsel;
    gsel += c->h_pdf_offset[p + 1] - c->h_pdf_offset[p];
  }
  goff[nsel] = gsel;
  if (ret != KIO_OK) return ret;
  c->nsel = nsel;
  c->gsel = gsel;
  c->total_frames = total_frames;
  c->total_ll = total_ll;
  return KIO_OK;
}

/* Copies the features of utterances [g0, g1) one after another to h, in
 * up to GALIGN_STAGE_THREADS threads (one thread copies at ~8 GB/s, less
 * than the H2D link: the GPU would wait on it). */
#define GALIGN_STAGE_THREADS 4
typedef struct {
  const galign_cu_utt *utt;
  const kio_matrix *const *feats;
  int g0, g1, dim;
  char *h;
} galign_stage_job;

static void *galign_stage_main(void *arg) {
  const galign_stage_job *j = (const galign_stage_job *)arg;
  char *h = j->h;
  for (int i = j->g0; i < j->g1; i++) {
    size_t b = sizeof(float) * (size_t)j->utt[i].num_frames * j->dim;
    if (b) memcpy(h, j->feats[i]->data, b);
    h += b;
  }
  return NULL;
}

static void galign_stage_copy(const galign_cuda *c, const galign_cu_utt *utt,
                              const kio_matrix *const *feats, int g0, int g1, char *h) {
  galign_stage_job jobs[GALIGN_STAGE_THREADS];
  pthread_t th[GALIGN_STAGE_THREADS];
  int nt = (g1 - g0) / 16 < GALIGN_STAGE_THREADS ? (g1 - g0) / 16 : GALIGN_STAGE_THREADS;
  if (nt < 1) nt = 1;
  /* utterances split evenly by count; offsets follow from frame_off */
  const int64_t f0 = utt[g0].frame_off;
  for (int t = 0; t < nt; t++) {
    int a = g0 + (int)((int64_t)(g1 - g0) * t / nt), b = g0 + (int)((int64_t)(g1 - g0) * (t + 1) / nt);
    jobs[t] = (galign_stage_job){utt, feats, a, b, c->dim,
                                 h + sizeof(float) * (size_t)(utt[a].frame_off - f0) * c->dim};
  }
  int started = 1;
  for (int t = 1; t < nt; t++, started++)
    if (pthread_create(&th[t], NULL, galign_stage_main, &jobs[t]) != 0) break;
  galign_stage_main(&jobs[0]);
  for (int t = 1; t < started; t++) pthread_join(th[t], NULL);
  for (int t = started; t < nt; t++) galign_stage_main(&jobs[t]);
}

/* 1 and *row when m's rows are registered on the device. */
static int galign_dev_feat(const galign_cuda *c, const kio_matrix *m, int64_t *row) {
  int lo = 0, hi = c->ndf - 1;
  while (lo <= hi) {
    int mid = (lo + hi) >> 1;
    const kio_matrix *x = c->df[mid].m;
    if (x == m) { *row = c->df[mid].row; return 1; }
    if (x < m) lo = mid + 1; else hi = mid - 1;
  }
  return 0;
}

static int galign_read_flags(galign_cuda *c, int n) {
  KIO_CUDA_TRY(cudaEventRecord(c->ev[1], c->stream));
  c->ll_timed = 1;
  KIO_CUDA_TRY(cudaMemcpyAsync(c->h_flags.p, c->d_flags.p, sizeof(int),
                               cudaMemcpyDeviceToHost, c->stream));
  KIO_CUDA_TRY(cudaMemcpyAsync(c->h_uflags.p, c->d_uflags.p, sizeof(int) * n,
                               cudaMemcpyDeviceToHost, c->stream));
  return KIO_OK;
}

int galign_cu_loglikes_launch(galign_cuda *c, int n, const galign_graph *const *graphs,
                              const kio_matrix *const *feats,
                              const kio_matrix *const *loglikes) {
  if (n <= 0) return KIO_OK;
  int32_t *frames = (int32_t *)malloc(sizeof(int32_t) * (size_t)n);
  if (!frames) {
    KIO_ERROR("Out of memory");
    return KIO_ERR;
  }
  for (int i = 0; i < n; i++) {
    const kio_matrix *m = loglikes ? loglikes[i] : feats[i];
    int want = loglikes ? graphs[i]->num_pdfs_used : c->dim;
    if (m->rows > 0 && m->cols != want) {
      if (loglikes)
        KIO_ERROR("Log-likelihood matrix has %d columns, the graph uses %d pdfs", (int)m->cols, want);
      else
        KIO_ERROR("Dim mismatch: data dim = %d vs. model dim = %d", (int)m->cols, want);
      free(frames);
      return KIO_ERR;
    }
    frames[i] = m->rows;
  }
  int ret = galign_plan(c, n, graphs, frames);
  free(frames);
  if (ret != KIO_OK) return ret;
  const galign_cu_utt *utt = (const galign_cu_utt *)c->h_utt.p;
  cudaStream_t st = c->stream;

  KIO_CUDA_TRY(cudaEventRecord(c->ev[0], st));
  KIO_CUDA_TRY(cudaMemsetAsync(c->d_flags.p, 0, sizeof(int), st));
  GALIGN_CU_RESERVE(dev, c->d_uflags, int, n);
  GALIGN_CU_RESERVE(host, c->h_uflags, int, n);
  KIO_CUDA_TRY(cudaMemsetAsync(c->d_uflags.p, 0, sizeof(int) * n, st));
  GALIGN_CU_RESERVE(dev, c->d_ll, float, c->total_ll + 1);
  GALIGN_CU_RESERVE(dev, c->d_utt, galign_cu_utt, n);
  KIO_CUDA_TRY(cudaMemcpyAsync(c->d_utt.p, c->h_utt.p, sizeof(galign_cu_utt) * n,
                               cudaMemcpyHostToDevice, st));

  if (loglikes) { /* decoder-only path: the given likelihoods as they are */
    GALIGN_CU_RESERVE(host, c->h_feats, float, c->total_ll + 1);
    float *h = (float *)c->h_feats.p;
    for (int i = 0; i < n; i++)
      if (utt[i].num_frames > 0)
        memcpy(h + utt[i].ll_off, loglikes[i]->data,
               sizeof(float) * (size_t)utt[i].num_frames * utt[i].npu);
    KIO_CUDA_TRY(cudaMemcpyAsync(c->d_ll.p, h, sizeof(float) * c->total_ll,
                                 cudaMemcpyHostToDevice, st));
    return galign_read_flags(c, n);
  }
  if (c->total_frames == 0 || c->nsel == 0) {
    return galign_read_flags(c, n);
  }

  /* selected pdfs, their Gaussian offsets, per-utterance maps */
  int64_t total_npu = 0;
  for (int i = 0; i < n; i++) total_npu += utt[i].npu;
  GALIGN_CU_RESERVE(dev, c->d_sel, int32_t, 2 * (int64_t)c->nsel + 1);
  GALIGN_CU_RESERVE(dev, c->d_ucol, int32_t, total_npu + 1);
  KIO_CUDA_TRY(cudaMemcpyAsync(c->d_sel.p, c->h_sel.p, sizeof(int32_t) * (2 * (size_t)c->nsel + 1),
                               cudaMemcpyHostToDevice, st));
  KIO_CUDA_TRY(cudaMemcpyAsync(c->d_ucol.p, c->h_ucol.p, sizeof(int32_t) * total_npu,
                               cudaMemcpyHostToDevice, st));
  if (c->ll_exact && galign_cu_ll_exact_prepare(c, n, graphs) != KIO_OK) return KIO_ERR;

  /* Features through a small ring of pinned buffers (GALIGN_RING_N x ~8 MB):
   * the copy of one group runs while the next is staged, and pinned memory
   * stays small whatever the batch (pinning and unpinning hundreds of MB
   * costs more than the copies). The exact kernel then runs once over the
   * batch, so its grid fills the device. */
  size_t nfeat = (size_t)c->total_frames * c->dim;
  GALIGN_CU_RESERVE(dev, c->d_feats, float, nfeat);
  const size_t group_bytes = (size_t)8 << 20;
  for (int g0 = 0, g1; g0 < n; g0 = g1) {
    int64_t src, s1;
    if (galign_dev_feat(c, feats[g0], &src)) {
      /* rows already on the device (gpu-feats): one copy per run of
       * utterances that are contiguous there too */
      int64_t rows = utt[g0].num_frames;
      for (g1 = g0 + 1; g1 < n && galign_dev_feat(c, feats[g1], &s1) && s1 == src + rows; g1++)
        rows += utt[g1].num_frames;
      c->stat_df_utts += g1 - g0;
      if (rows > 0)
        KIO_CUDA_TRY(cudaMemcpyAsync((float *)c->d_feats.p + (size_t)utt[g0].frame_off * c->dim,
                                     c->df_base + (size_t)src * c->dim,
                                     sizeof(float) * (size_t)rows * c->dim,
                                     cudaMemcpyDeviceToDevice, st));
      continue;
    }
    size_t bytes = 0;
    for (g1 = g0; g1 < n && (g1 == g0 || (bytes + sizeof(float) * (size_t)utt[g1].num_frames *
                                                      c->dim <= group_bytes &&
                                          !galign_dev_feat(c, feats[g1], &s1))); g1++)
      bytes += sizeof(float) * (size_t)utt[g1].num_frames * c->dim;
    if (bytes == 0) continue;
    const int r = c->ring_next++ % GALIGN_RING_N;
    if (c->ring_used[r]) KIO_CUDA_TRY(kio_cuda_event_wait(c->ring_ev[r]));
    GALIGN_CU_RESERVE(host, c->h_ring[r], char, bytes);
    const double t0 = kio_now_s();
    galign_stage_copy(c, utt, feats, g0, g1, (char *)c->h_ring[r].p);
    c->t_stage += kio_now_s() - t0;
    KIO_CUDA_TRY(cudaMemcpyAsync((float *)c->d_feats.p + (size_t)utt[g0].frame_off * c->dim,
                                 c->h_ring[r].p, bytes, cudaMemcpyHostToDevice, st));
    KIO_CUDA_TRY(cudaEventRecord(c->ring_ev[r], st));
    c->ring_used[r] = 1;
  }
  if (c->ll_exact && galign_cu_ll_exact_run(c) != KIO_OK) return KIO_ERR;
  if (c->ll_exact) return galign_read_flags(c, n);
  const int32_t *d_sel_pdf = (const int32_t *)c->d_sel.p;
  const int32_t *d_goff = d_sel_pdf + c->nsel;
  const float *wsel = c->d_w;
  if (c->nsel < c->num_pdfs) { /* gather the union's Gaussians */
    GALIGN_CU_RESERVE(dev, c->d_wsel, float, (int64_t)c->gsel * c->kpad);
    GALIGN_LAUNCH(galign_k_gather_w, c->nsel, 128, st, c->d_w, c->d_pdf_offset, d_sel_pdf,
                  d_goff, c->kpad, (float *)c->d_wsel.p);
    KIO_CUDA_LAUNCHED();
    wsel = (const float *)c->d_wsel.p;
  }

  if (galign_cu_blas(c) != KIO_OK) return KIO_ERR;
  int64_t chunk = galign_chunk_rows(c);
  GALIGN_CU_RESERVE(dev, c->d_xexp, float, chunk * c->kpad);
  GALIGN_CU_RESERVE(dev, c->d_lg, float, chunk * (int64_t)c->gsel);
  const float one = 1.0f, zero = 0.0f;
  for (int64_t f0 = 0; f0 < c->total_frames; f0 += chunk) {
    int64_t rows = c->total_frames - f0 < chunk ? c->total_frames - f0 : chunk;
    int64_t nel = rows * c->kpad;
    GALIGN_LAUNCH(galign_k_expand, (unsigned)((nel + 255) / 256), 256, st,
                  (const float *)c->d_feats.p, f0, rows, c->dim, c->kpad, (float *)c->d_xexp.p);
    KIO_CUDA_LAUNCHED();
    /* column-major view: lg^T (gsel x rows) = wsel^T (gsel x kpad) * xexp^T (kpad x rows) */
    GALIGN_CUBLAS_TRY(galign_cublas()->sgemm(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, c->gsel, (int)rows, c->kpad,
                                  &one, wsel, c->kpad, (const float *)c->d_xexp.p, c->kpad,
                                  &zero, (float *)c->d_lg.p, c->gsel));
    GALIGN_LAUNCH(galign_k_lse, (unsigned)rows, 128, st,
        (const float *)c->d_lg.p, f0, rows, c->gsel, (const galign_cu_utt *)c->d_utt.p, n,
        (const int32_t *)c->d_ucol.p, d_goff, c->log_eps, (float *)c->d_ll.p, (int *)c->d_flags.p,
        (int *)c->d_uflags.p);
    KIO_CUDA_LAUNCHED();
  }
  return galign_read_flags(c, n);
}

int galign_cu_check_flags(galign_cuda *c) {
  int f = *(volatile int *)c->h_flags.p;
  if (f & GALIGN_CU_BAD_LIKE) {
    KIO_ERROR("Invalid answer (overflow or invalid variances/features?)");
    return KIO_ERR;
  }
  return KIO_OK;
}
