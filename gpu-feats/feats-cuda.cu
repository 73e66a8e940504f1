/* gpu-feats, device part: the feature chain's kernels (decompression +
 * CMVN, add-deltas, splice-feats, transform-feats) and the batch driver.
 *
 * Exactness: each output element is computed by one thread with the same
 * float operations, in the same order, as the CPU chain
 * (compressed-matrix.c, feat-ops.c, feat-gemm.c), every one explicit
 * (__fmaf_rn, __fadd_rn, __fmul_rn, __dadd_rn, ...; the build uses
 * --fmad=false as well). IEEE float and double arithmetic with
 * round-to-nearest is the same on both sides, so the results are the same
 * bits. The decompression's double steps (CharToFloat) are double on the
 * device too. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "device/cuda-util.h"
#include "base/sys/log.h"
#include "feats-impl.h"
#include "base/matrix/blas-order.h"

/* Launches (tests/emu/cuda-emu.h replaces them to run kernels on the host). */
#ifdef GALIGN_LAUNCH
#define GFEAT_LAUNCH GALIGN_LAUNCH
#define GFEAT_LAUNCH_SMEM GALIGN_LAUNCH_SMEM
#define GFEAT_DYN_SMEM GALIGN_DYN_SMEM
#else
#define GFEAT_LAUNCH(kernel, grid, block, stream, ...) \
  kernel<<<(grid), (block), 0, (stream)>>>(__VA_ARGS__)
#define GFEAT_LAUNCH_SMEM(kernel, grid, block, smem, stream, ...) \
  kernel<<<(grid), (block), (smem), (stream)>>>(__VA_ARGS__)
#define GFEAT_DYN_SMEM(type, name) extern __shared__ type name[]
#endif

/* ---- explicit IEEE operations (host versions for the emulator; the C
 * host code is built with -ffp-contract=off) ---- */
__host__ __device__ static inline float gf_fma(float a, float b, float c) {
#ifdef __CUDA_ARCH__
  return __fmaf_rn(a, b, c);
#else
  return fmaf(a, b, c);
#endif
}
__host__ __device__ static inline float gf_add(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
__host__ __device__ static inline float gf_sub(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
__host__ __device__ static inline float gf_mul(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
/* (float)((double)a + (double)b * c), each step rounded once. */
__host__ __device__ static inline float gf_dmuladd(float a, float b, double c) {
#ifdef __CUDA_ARCH__
  return __double2float_rn(__dadd_rn((double)a, __dmul_rn((double)b, c)));
#else
  volatile double p = (double)b * c;  /* no contraction */
  return (float)((double)a + p);
#endif
}

/* ---- kernels ---- */
#define GFEAT_THREADS 256
#define GFEAT_TF 32 /* frames per block of the transform */

/* The utterance holding batch row t: the last with frame_off <= t (an
 * empty utterance shares its offset with the next one). */
__device__ static int gfeat_find_utt(const gfeat_dutt *utt, int n, int64_t t) {
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) >> 1;
    if (utt[mid].frame_off <= t) lo = mid; else hi = mid - 1;
  }
  return lo;
}

__device__ static inline uint16_t gfeat_u16(const unsigned char *p) {
  return (uint16_t)(p[0] | (p[1] << 8));
}
__device__ static inline float gfeat_f32(const unsigned char *p) {
  return *(const float *)p; /* 4-byte aligned: raw blocks start at 16 */
}

/* Uint16ToFloat: min + (range * 1.52590218966964e-05F) * v, all float. */
__device__ static inline float gfeat_u16_to_float(float mn, float range, uint16_t v) {
  return gf_add(mn, gf_mul(gf_mul(range, 1.52590218966964e-05F), (float)v));
}

/* Decompression (CompressedMatrix::CopyToMat) and apply-cmvn, one thread
 * per element of the batch's input matrix (frames x dim). */
__global__ void gfeat_k_decode(const unsigned char *__restrict__ bytes,
                               const gfeat_dutt *__restrict__ utt, int n, int64_t frames, int dim,
                               const float *__restrict__ cmvn, int apply, int var_norm,
                               float *__restrict__ out) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= frames * dim) return;
  int64_t t = i / dim;
  int c = (int)(i - t * dim);
  int ui = gfeat_find_utt(utt, n, t);
  const gfeat_dutt u = utt[ui];
  int64_t r = t - u.frame_off, rows = u.rows;
  const unsigned char *d = bytes + u.byte_off;
  float v;
  if (u.format == GFEAT_RAW_FLOAT) {
    v = gfeat_f32(d + 4 * (r * dim + c));
  } else {
    float mn = gfeat_f32(d), range = gfeat_f32(d + 4);
    if (u.format == GFEAT_RAW_CM) {
      const unsigned char *h = d + 16 + 8 * c;
      float p0 = gfeat_u16_to_float(mn, range, gfeat_u16(h)),
            p25 = gfeat_u16_to_float(mn, range, gfeat_u16(h + 2)),
            p75 = gfeat_u16_to_float(mn, range, gfeat_u16(h + 4)),
            p100 = gfeat_u16_to_float(mn, range, gfeat_u16(h + 6));
      unsigned b = d[16 + 8 * (int64_t)dim + c * rows + r];
      if (b <= 64) v = gf_dmuladd(p0, gf_mul(gf_sub(p25, p0), (float)b), 1 / 64.0);
      else if (b <= 192) v = gf_dmuladd(p25, gf_mul(gf_sub(p75, p25), (float)(b - 64)), 1 / 128.0);
      else v = gf_dmuladd(p75, gf_mul(gf_sub(p100, p75), (float)(b - 192)), 1 / 63.0);
    } else {
      int two = u.format == GFEAT_RAW_CM2;
#ifdef __CUDA_ARCH__
      float inc = __double2float_rn(__dmul_rn((double)range, two ? 1.0 / 65535.0 : 1.0 / 255.0));
#else
      float inc = (float)((double)range * (two ? 1.0 / 65535.0 : 1.0 / 255.0));
#endif
      int64_t e = r * dim + c;
      unsigned q = two ? gfeat_u16(d + 16 + 2 * e) : d[16 + e];
      v = gf_add(mn, gf_mul((float)q, inc));
    }
  }
  if (apply) {
    const float *p = cmvn + (int64_t)ui * 2 * dim;
    if (var_norm) v = gf_mul(v, p[dim + c]);
    v = gf_add(v, p[c]);
  }
  out[i] = v;
}

typedef struct { int32_t soff[GFEAT_MAX_ORDER + 1], sdims[GFEAT_MAX_ORDER + 1]; } gfeat_taps;

/* add-deltas (DeltaFeatures, OpenBLAS saxpy order): output (t, i, d) =
 * sum over the window's nonzero taps of scale * x[clamp(t + j)][d], from 0,
 * FMA for d < fused, mul + add after. */
__global__ void gfeat_k_deltas(const float *__restrict__ in, const gfeat_dutt *__restrict__ utt,
                               int n, int64_t frames, int dim, int order,
                               const float *__restrict__ scales, gfeat_taps taps, int fused,
                               float *__restrict__ out) {
  int odim = dim * (order + 1);
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= frames * odim) return;
  int64_t t = i / odim;
  int col = (int)(i - t * odim), ord = col / dim, d = col - ord * dim;
  const gfeat_dutt u = utt[gfeat_find_utt(utt, n, t)];
  int64_t tl = t - u.frame_off;
  int maxo = (taps.sdims[ord] - 1) / 2;
  const float *sc = scales + taps.soff[ord] + maxo;
  float y = 0.0f;
  for (int j = -maxo; j <= maxo; j++) {
    int64_t f = tl + j;
    if (f < 0) f = 0;
    else if (f >= u.rows) f = u.rows - 1;
    float s = sc[j];
    if (s == 0.0f) continue;
    float x = in[(u.frame_off + f) * dim + d];
    y = d < fused ? gf_fma(s, x, y) : gf_add(y, gf_mul(s, x));
  }
  out[i] = y;
}

/* splice-feats (SpliceFrames): a copy of the clamped context frames. */
__global__ void gfeat_k_splice(const float *__restrict__ in, const gfeat_dutt *__restrict__ utt,
                               int n, int64_t frames, int dim, int left, int right,
                               float *__restrict__ out) {
  int odim = dim * (left + right + 1);
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= frames * odim) return;
  int64_t t = i / odim;
  int col = (int)(i - t * odim), j = col / dim - left, d = col - (col / dim) * dim;
  const gfeat_dutt u = utt[gfeat_find_utt(utt, n, t)];
  int64_t f = t - u.frame_off + j;
  if (f < 0) f = 0;
  if (f >= u.rows) f = u.rows - 1;
  out[i] = in[(u.frame_off + f) * dim + d];
}

/* transform-feats: out(t, r) = the chain cls picks (blas-order.h's SEQ,
 * PAIR, ...; NULL: SEQ everywhere) over q < K of x_q * W(r, q), fused or
 * not and in K blocks as the profile's sgemm (kio_blas_gemm_out, the CPU
 * chain's own code), then + offset(r) if affine. cls: frames x M.
 * wt: W transposed (cols x M): wt[q * M + r]; the offset is row K. With
 * refs (a table of transforms: per utterance or speaker), utterance u's
 * matrix is pool + refs[u].off instead, affine as refs[u].affine. One
 * block per tfr (<= GFEAT_TF) frames; the frames' inputs in shared memory. */
__global__ void gfeat_k_transform(const float *__restrict__ in, int64_t frames, int tfr, int K,
                                  const float *__restrict__ wt_global, int M, int affine_global,
                                  int prof, const unsigned char *__restrict__ cls,
                                  const gfeat_dutt *__restrict__ utt, int n,
                                  const gfeat_wref *__restrict__ refs,
                                  const float *__restrict__ pool, float *__restrict__ out) {
  GFEAT_DYN_SMEM(float, xs);
  __shared__ int su[GFEAT_TF];
  int64_t f0 = (int64_t)blockIdx.x * tfr;
  int tf = frames - f0 < tfr ? (int)(frames - f0) : tfr;
  for (int e = threadIdx.x; e < tf * K; e += blockDim.x) xs[e] = in[f0 * K + e];
  if (refs)
    for (int e = threadIdx.x; e < tf; e += blockDim.x) su[e] = gfeat_find_utt(utt, n, f0 + e);
  __syncthreads();
  for (int e = threadIdx.x; e < tf * M; e += blockDim.x) {
    int tt = e / M, r = e - tt * M;
    const float *x = xs + tt * K;
    const float *wt = wt_global;
    int affine = affine_global;
    if (refs) {
      const gfeat_wref w = refs[su[tt]];
      wt = pool + w.off;
      affine = w.affine;
    }
    int64_t o = (f0 + tt) * M + r;
    float v = kio_blas_gemm_out(prof, cls ? (int)cls[o] : (int)KIO_GEMM_SEQ, x, 1, wt + r, M, K);
    if (affine) v = gf_add(v, wt[(int64_t)K * M + r]);
    out[o] = v;
  }
}

/* ---- host side ---- */
typedef struct { void *p; size_t cap; } gfeat_buf;

struct gfeat_cuda {
  const gfeat_chain *c;
  int device;
  kio_gpu *gpu;              /* the job's device (device/gpu.h) */
  kio_gpu_acct *acct;        /* its device memory: the feature chain's share */
  cudaStream_t own;          /* for gfeat_cuda_run_host */
  float *d_scales[GFEAT_MAX_STAGES], *d_wt[GFEAT_MAX_STAGES];
  gfeat_buf bytes, utt, cmvn, work[2], out;
  gfeat_buf cls[GFEAT_MAX_STAGES], pool[GFEAT_MAX_STAGES], ref[GFEAT_MAX_STAGES];
  float *h_out;
  size_t h_out_cap;
  int64_t batches, frames;
};

static int gfeat_reserve(gfeat_cuda *g, gfeat_buf *b, size_t bytes, cudaStream_t st) {
  if (bytes <= b->cap) return KIO_OK;
  size_t want = bytes + bytes / 4;
  kio_gpu_free(b->p, st);
  b->p = NULL;
  b->cap = 0;
  if (kio_gpu_alloc(g->acct, &b->p, want, st) != KIO_OK) return KIO_ERR;
  b->cap = want;
  return KIO_OK;
}

static int gfeat_upload(gfeat_cuda *g, void **d, const void *h, size_t bytes, cudaStream_t st) {
  if (kio_gpu_alloc(g->acct, d, bytes ? bytes : 4, st) != KIO_OK) return KIO_ERR;
  KIO_CUDA_TRY(cudaMemcpyAsync(*d, h, bytes, cudaMemcpyHostToDevice, st));
  return KIO_OK;
}

extern "C" int gfeat_cuda_new(gfeat_cuda **out, const gfeat_chain *c, kio_gpu *gpu) {
  *out = NULL;
  if (!gpu && kio_gpu_job(&gpu, 0) != KIO_OK) return KIO_ERR;
  if (kio_gpu_bind(gpu) != KIO_OK) return KIO_ERR;
  gfeat_cuda *g = (gfeat_cuda *)calloc(1, sizeof *g);
  if (!g) { KIO_ERROR("Out of memory"); return KIO_ERR; }
  g->c = c;
  g->gpu = gpu;
  g->device = kio_gpu_device(gpu);
  /* twice its share: the pipeline cuts batches at the share
   * (galign_gfeat_full), one utterance may pass it */
  g->acct = kio_gpu_acct_new(gpu, "feature chain", 2 * kio_gpu_share(gpu, KIO_GPU_PART_FEATS),
                             KIO_GPU_YES);
  int rc = KIO_OK;
  if (!g->acct || cudaStreamCreateWithFlags(&g->own, cudaStreamNonBlocking) != cudaSuccess) {
    if (g->acct) KIO_ERROR("CUDA error creating a stream");
    kio_gpu_acct_free(g->acct);
    free(g);
    return KIO_ERR;
  }
  for (int k = 0; k < c->nst && rc == KIO_OK; k++) {
    const gfeat_stage *s = &c->st[k];
    if (s->op == GFEAT_OP_DELTAS) {
      rc = gfeat_upload(g, (void **)&g->d_scales[k], s->scales, sizeof(float) * (size_t)s->ntaps, g->own);
    } else if (s->op == GFEAT_OP_TRANSFORM && !s->table) {
      int32_t M = s->w.rows, C = s->w.cols;
      float *wt = (float *)malloc(sizeof(float) * ((size_t)M * C + 1));
      if (!wt) { KIO_ERROR("Out of memory"); rc = KIO_ERR; break; }
      for (int32_t r = 0; r < M; r++)
        for (int32_t q = 0; q < C; q++) wt[(size_t)q * M + r] = s->w.data[(size_t)r * C + q];
      rc = gfeat_upload(g, (void **)&g->d_wt[k], wt, sizeof(float) * (size_t)M * C, g->own);
      if (rc == KIO_OK && kio_cuda_stream_wait(g->own) != cudaSuccess) rc = KIO_ERR;
      free(wt);
    }
  }
  if (rc == KIO_OK && kio_cuda_stream_wait(g->own) != cudaSuccess) {
    KIO_ERROR("CUDA error uploading the feature chain's constants");
    rc = KIO_ERR;
  }
  if (rc != KIO_OK) {
    gfeat_cuda_free(g);
    return KIO_ERR;
  }
  *out = g;
  return KIO_OK;
}

extern "C" void gfeat_cuda_free(gfeat_cuda *g) {
  if (!g) return;
  kio_gpu_bind(g->gpu);
  kio_cuda_stream_wait(g->own);
  for (int k = 0; k < GFEAT_MAX_STAGES; k++) {
    kio_gpu_free(g->d_scales[k], g->own);
    kio_gpu_free(g->d_wt[k], g->own);
  }
  gfeat_buf *bufs[] = {&g->bytes, &g->utt, &g->cmvn, &g->work[0], &g->work[1], &g->out};
  for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) kio_gpu_free(bufs[i]->p, g->own);
  for (int k = 0; k < GFEAT_MAX_STAGES; k++) {
    kio_gpu_free(g->cls[k].p, g->own);
    kio_gpu_free(g->pool[k].p, g->own);
    kio_gpu_free(g->ref[k].p, g->own);
  }
  kio_cuda_stream_wait(g->own);
  kio_cuda_host_free(g->h_out, g->own);
  cudaStreamDestroy(g->own);
  kio_gpu_acct_free(g->acct);
  free(g);
}

static unsigned gfeat_grid(int64_t work, int block) { return (unsigned)((work + block - 1) / block); }

extern "C" int gfeat_cuda_run(gfeat_cuda *g, const gfeat_batch *b, float *d_out, void *stream) {
  if (kio_gpu_bind(g->gpu) != KIO_OK) return KIO_ERR;
  cudaStream_t st = stream ? (cudaStream_t)stream : g->own;
  const gfeat_chain *c = g->c;
  if (b->n == 0 || b->frames == 0) return KIO_OK;
  if (b->chain != c) {
    KIO_ERROR("Feature batch of another chain");
    return KIO_ERR;
  }
  const int64_t T = b->frames;
  const int32_t wmax = gfeat_batch_widest(b);  /* widest intermediate */
  size_t nb = sizeof(float) * (size_t)T * (size_t)wmax;
  if (gfeat_reserve(g, &g->bytes, b->nbytes + 16, st) != KIO_OK ||
      gfeat_reserve(g, &g->utt, sizeof(gfeat_dutt) * (size_t)b->n, st) != KIO_OK ||
      gfeat_reserve(g, &g->cmvn, sizeof(float) * 2 * (size_t)b->n * (size_t)b->in_dim + 4, st) != KIO_OK ||
      (c->nst > 0 && gfeat_reserve(g, &g->work[0], nb, st) != KIO_OK) ||
      (c->nst > 1 && gfeat_reserve(g, &g->work[1], nb, st) != KIO_OK))
    return KIO_ERR;
  KIO_CUDA_TRY(cudaMemcpyAsync(g->bytes.p, b->bytes, b->nbytes, cudaMemcpyHostToDevice, st));
  KIO_CUDA_TRY(cudaMemcpyAsync(g->utt.p, b->utt, sizeof(gfeat_dutt) * (size_t)b->n,
                               cudaMemcpyHostToDevice, st));
  if (b->apply_cmvn)
    KIO_CUDA_TRY(cudaMemcpyAsync(g->cmvn.p, b->cmvn, sizeof(float) * 2 * (size_t)b->n * b->in_dim,
                                 cudaMemcpyHostToDevice, st));
  for (int k = 0; k < c->nst; k++) {  /* transforms: chain choices, tables' matrices */
    const gfeat_bstage *bs = &b->st[k];
    if (bs->ncls) {
      if (gfeat_reserve(g, &g->cls[k], bs->ncls, st) != KIO_OK) return KIO_ERR;
      KIO_CUDA_TRY(cudaMemcpyAsync(g->cls[k].p, bs->cls, bs->ncls, cudaMemcpyHostToDevice, st));
    }
    if (c->st[k].table) {
      if (gfeat_reserve(g, &g->pool[k], sizeof(float) * bs->npool + 4, st) != KIO_OK ||
          gfeat_reserve(g, &g->ref[k], sizeof(gfeat_wref) * (size_t)b->n, st) != KIO_OK)
        return KIO_ERR;
      KIO_CUDA_TRY(cudaMemcpyAsync(g->pool[k].p, bs->pool, sizeof(float) * bs->npool,
                                   cudaMemcpyHostToDevice, st));
      KIO_CUDA_TRY(cudaMemcpyAsync(g->ref[k].p, bs->ref, sizeof(gfeat_wref) * (size_t)b->n,
                                   cudaMemcpyHostToDevice, st));
    }
  }
  const gfeat_dutt *utt = (const gfeat_dutt *)g->utt.p;
  float *cur = c->nst ? (float *)g->work[0].p : d_out;
  int32_t dim = b->in_dim;
  GFEAT_LAUNCH(gfeat_k_decode, gfeat_grid(T * dim, GFEAT_THREADS), GFEAT_THREADS, st,
               (const unsigned char *)g->bytes.p, utt, b->n, T, dim, (const float *)g->cmvn.p,
               b->apply_cmvn, b->var_norm, cur);
  KIO_CUDA_LAUNCHED();
  for (int k = 0; k < c->nst; k++) {
    const gfeat_stage *s = &c->st[k];
    float *nxt = k == c->nst - 1 ? d_out : (float *)g->work[(k + 1) & 1].p;
    if (s->op == GFEAT_OP_DELTAS) {
      gfeat_taps taps;
      memset(&taps, 0, sizeof taps);
      for (int i = 0; i <= s->order; i++) { taps.soff[i] = s->soff[i]; taps.sdims[i] = s->sdims[i]; }
      int odim = dim * (s->order + 1);
      GFEAT_LAUNCH(gfeat_k_deltas, gfeat_grid(T * odim, GFEAT_THREADS), GFEAT_THREADS, st,
                   cur, utt, b->n, T, dim, s->order, g->d_scales[k], taps,
                   kio_blas_saxpy_fused(c->profile, dim), nxt);
      dim = odim;
    } else if (s->op == GFEAT_OP_SPLICE) {
      int odim = dim * (s->left + s->right + 1);
      GFEAT_LAUNCH(gfeat_k_splice, gfeat_grid(T * odim, GFEAT_THREADS), GFEAT_THREADS, st,
                   cur, utt, b->n, T, dim, s->left, s->right, nxt);
      dim = odim;
    } else {
      /* frames per block: their inputs within the 48 KB of shared memory
       * every device gives without opting in (static + dynamic) */
      const size_t budget = 48 * 1024 - sizeof(int) * GFEAT_TF;
      int tfr = (int)(budget / (sizeof(float) * (size_t)dim));
      if (tfr > GFEAT_TF) tfr = GFEAT_TF;
      if (tfr < 1) {
        KIO_ERROR("Transform input dimension %d: more than the device path's %d", dim,
                  (int)(budget / sizeof(float)));
        return KIO_ERR;
      }
      size_t smem = sizeof(float) * (size_t)tfr * (size_t)dim;
      const gfeat_bstage *bs = &b->st[k];
      int32_t M = s->table ? b->st[k].ref[0].rows : s->w.rows;
      GFEAT_LAUNCH_SMEM(gfeat_k_transform, gfeat_grid(T, tfr), 128, smem, st, cur, T, tfr, dim,
                        (const float *)g->d_wt[k], M, s->w.cols == dim + 1, c->profile,
                        bs->ncls ? (const unsigned char *)g->cls[k].p : (const unsigned char *)NULL,
                        utt, b->n, s->table ? (const gfeat_wref *)g->ref[k].p : (const gfeat_wref *)NULL,
                        (const float *)g->pool[k].p, nxt);
      dim = M;
    }
    KIO_CUDA_LAUNCHED();
    cur = nxt;
  }
  g->batches++;
  g->frames += T;
  return KIO_OK;
}

extern "C" int gfeat_cuda_compute(gfeat_cuda *g, const gfeat_batch *b, const float **d_feats,
                                  float *const *host_rows) {
  if (kio_gpu_bind(g->gpu) != KIO_OK) return KIO_ERR;
  int64_t T = b->frames;
  size_t n = (size_t)T * (size_t)b->out_dim;
  *d_feats = NULL;
  if (gfeat_reserve(g, &g->out, sizeof(float) * n + 4, g->own) != KIO_OK) return KIO_ERR;
  if (gfeat_cuda_run(g, b, (float *)g->out.p, g->own) != KIO_OK) return KIO_ERR;
  *d_feats = (const float *)g->out.p;
  if (host_rows && n) {
    if (n > g->h_out_cap) {
      kio_cuda_host_free(g->h_out, g->own);
      g->h_out = NULL;
      g->h_out_cap = 0;
      size_t want = n + n / 4;
      if (kio_cuda_host_alloc((void **)&g->h_out, sizeof(float) * want) != KIO_OK) return KIO_ERR;
      g->h_out_cap = want;
    }
    KIO_CUDA_TRY(cudaMemcpyAsync(g->h_out, g->out.p, sizeof(float) * n, cudaMemcpyDeviceToHost,
                                 g->own));
  }
  KIO_CUDA_TRY(kio_cuda_stream_wait(g->own));
  for (int i = 0; host_rows && n && i < b->n; i++)
    if (host_rows[i] && b->utt[i].rows)
      memcpy(host_rows[i], g->h_out + (size_t)b->utt[i].frame_off * b->out_dim,
             sizeof(float) * (size_t)b->utt[i].rows * (size_t)b->out_dim);
  return KIO_OK;
}

extern "C" int gfeat_cuda_run_host(gfeat_cuda *g, const gfeat_batch *b, kio_matrix *out) {
  float **rows = (float **)calloc((size_t)b->n + 1, sizeof(float *));
  if (!rows) { KIO_ERROR("Out of memory"); return KIO_ERR; }
  int rc = KIO_OK;
  for (int i = 0; i < b->n && rc == KIO_OK; i++) {
    int32_t r = b->utt[i].rows;
    rc = kio_matrix_resize(&out[i], r, r ? b->out_dim : 0);
    rows[i] = out[i].data;
  }
  const float *d = NULL;
  if (rc == KIO_OK) rc = gfeat_cuda_compute(g, b, &d, rows);
  free(rows);
  return rc;
}

extern "C" void gfeat_cuda_stats(const gfeat_cuda *g, int64_t *batches, int64_t *frames) {
  if (batches) *batches = g ? g->batches : 0;
  if (frames) *frames = g ? g->frames : 0;
}
