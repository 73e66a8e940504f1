/* The GPU accumulator's per-batch kernels (acc-cuda.cu drives them): the
 * chunk kernel (features staged, log-likelihoods, posteriors, transition
 * counts) and the cells kernel (the statistics), launched on the
 * accumulator's stream; acc-cuda.cu's opening comment says what each does
 * and why its sums match the CPU path's bit for bit. */
#include <stdint.h>
#include <stdlib.h>

#include "acc-internal.h"
#include "acc-kernels.h"
#include "acc-math.h"

/* Under the host emulation of tests/emu (cuda-emu.h force-included, g++),
 * blocks run one after another with ONE thread each: every loop below is
 * strided by blockDim.x, so that single thread does each phase completely
 * before the next, which keeps the barriers' meaning. */
#ifdef GALIGN_CUDA_EMU_H
/* per thread (freed with it): a launch runs on its caller's thread, and the
 * service's connections launch for models of different sizes at once */
struct gacc_emu_shm { float *p = nullptr; ~gacc_emu_shm() { free(p); } };
static thread_local gacc_emu_shm gacc_emu_shared;
#define GACC_DYN_SHARED(name) float *name = gacc_emu_shared.p
#define GACC_LAUNCH_CHUNKS(grid, shmem, stream, ...)                           \
  do {                                                                       \
    gacc_emu_shared.p = (float *)realloc(gacc_emu_shared.p, (shmem));        \
    GALIGN_LAUNCH(gacc_chunk_kernel, (grid), 1, (stream), __VA_ARGS__);      \
  } while (0)
#define GACC_LAUNCH_CELLS(grid, stream, ...)                                   \
  GALIGN_LAUNCH(gacc_cells_kernel, (grid), 1, (stream), __VA_ARGS__)
static inline double atomicAdd(double *p, double v) { double o = *p; *p = o + v; return o; }
#else
#define GACC_DYN_SHARED(name) extern __shared__ float name[]
#define GACC_LAUNCH_CHUNKS(grid, shmem, stream, ...)                           \
  gacc_chunk_kernel<<<(grid), GACC_THREADS, (shmem), (stream)>>>(__VA_ARGS__)
#define GACC_LAUNCH_CELLS(grid, stream, ...)                                   \
  gacc_cells_kernel<<<(grid), GACC_CELLS, 0, (stream)>>>(__VA_ARGS__)
#endif

__global__ void gacc_chunk_kernel(const int4 *__restrict__ chunks,
                                  const int32_t *__restrict__ order,
                                  const float *__restrict__ feats,
                                  const int32_t *__restrict__ tid,
                                  const int32_t *__restrict__ pdf_offset,
                                  const float *__restrict__ gconst,
                                  const float *__restrict__ mi,
                                  const float *__restrict__ iv,
                                  int D, int chunk_cap, int prof, int maxc,
                                  double *tacc, float *gam_out, float *mx_out,
                                  float *sum_out, float *xs_t, float *gam_t, size_t cap,
                                  int *nonfinite) {
  GACC_DYN_SHARED(sh);
  const int4 ch = chunks[blockIdx.x];
  const int pdf = ch.x, start = ch.y, len = ch.z;
  const int g0 = pdf_offset[pdf], M = pdf_offset[pdf + 1] - g0;
  float *xs = sh;                              /* len x D features */
  float *x2 = sh + (size_t)chunk_cap * D;      /* len x D, squared */
  float *gam = sh + (size_t)chunk_cap * 2 * D; /* len x M loglikes, then gammas */

  for (int i = threadIdx.x; i < len * D; i += blockDim.x) {
    int f = i / D, d = i - f * D;
    float v = feats[(size_t)order[start + f] * D + d];
    xs[i] = v;
    x2[i] = v * v;
    if (!isfinite(v)) *nonfinite = 1;
  }
  __syncthreads();
  /* the statistics read each dim's frames in sorted order: dim-major rows
   * of cap floats (consecutive threads, consecutive frames) */
  for (int i = threadIdx.x; i < len * D; i += blockDim.x) {
    int d = i / len, f = i - d * len;
    xs_t[(size_t)d * cap + start + f] = xs[f * D + d];
  }

  for (int i = threadIdx.x; i < len * M; i += blockDim.x) {
    int f = i / M, m = i - f * M;
    size_t g = (size_t)g0 + m;
    gam[i] = kio_blas_gauss_loglike(prof, gconst[g], mi + g * D, iv + g * D, xs + (size_t)f * D,
                                    x2 + (size_t)f * D, 1, D, m, M);
  }
  __syncthreads();

  for (int f = threadIdx.x; f < len; f += blockDim.x) {
    float *l = gam + (size_t)f * M;
    float mx = -INFINITY;
    for (int m = 0; m < M; m++)
      if (l[m] > mx) mx = l[m];
    float s = 0.0f;
    for (int m = 0; m < M; m++) s += (l[m] = gacc_expf(l[m] - mx));
    float inv = (float)(1.0 / (double)s);
    for (int m = 0; m < M; m++) l[m] *= inv;
    int fr = order[start + f];
    mx_out[fr] = mx;
    sum_out[fr] = s;
    atomicAdd(&tacc[tid[fr]], 1.0);
  }
  __syncthreads();

  if (gam_out) /* the per-pdf statistics kernel's layout */
    for (int i = threadIdx.x; i < len * M; i += blockDim.x) {
      int f = i / M, m = i - f * M;
      gam_out[(size_t)(start + f) * maxc + m] = gam[i];
    }
  else /* the cells kernel's: component-major rows of cap floats */
    for (int i = threadIdx.x; i < len * M; i += blockDim.x) {
      int m = i / len, f = i - m * len;
      gam_t[(size_t)m * cap + start + f] = gam[f * M + m];
    }
}

/* The same sums, GACC_CELLS cells of one pdf per block: blocks[b] = (pdf,
 * first sorted frame, frames, first cell), cells numbered as in
 * gacc_stats_kernel (m * D + d for the means and variances, then M * D + m
 * for the occupancies). A thread adds its cell's terms in frame order to a
 * running double sum; the pdf with the most frames is the kernel's length,
 * so what counts is one thread's time a frame. It reads its dim's features
 * and its component's posteriors as rows of consecutive frames (xs_t, gam_t:
 * cap floats a row, written so by the chunk kernel; a warp's cells are
 * neighbouring dims of one or two components), four frames a load, the
 * next GACC_UNROLL frames' loads issued before the adds of these.
 *
 * A frame whose posterior is 0 leaves the sums as they are (the CPU path
 * skips it). Where no feature so far was inf or NaN (*nonfinite 0) and no
 * sum starts at -0, its terms are made +0 instead (its feature taken as 0),
 * which leaves a sum as it is too, and the sum's chain is one fma a frame;
 * else (SUB 0) a select after the fma keeps the sum. */
enum { GACC_UNROLL = 16 };
template <int FUSED, int SUB>
__device__ static __forceinline__ void gacc_cell_add(float g, float x, double &sm, double &sv) {
  const bool on = g != 0.0f;
  const double gm = (double)g, xd = (double)(SUB && !on ? 0.0f : x), q = xd * xd;
  const double m1 = fma(gm, xd, sm);
  const double v1 = FUSED ? fma(gm, q, sv) : sv + gm * q;
  sm = SUB || on ? m1 : sm;
  sv = SUB || on ? v1 : sv;
}

/* One mean/variance cell over frames [0, len) of gp (posteriors) and xp
 * (features): single frames up to a 16-byte boundary, then four at a time,
 * then the rest (all singly where gp and xp are not equally aligned). */
template <int FUSED, int SUB>
__device__ static __forceinline__ void gacc_cell_run(const float *gp, const float *xp, int len,
                                                     double &sm, double &sv) {
  int f = 0;
  if (((uintptr_t)gp & 15) != ((uintptr_t)xp & 15)) { /* no common boundary: singly */
    for (; f < len; f++) gacc_cell_add<FUSED, SUB>(gp[f], xp[f], sm, sv);
    return;
  }
  for (; f < len && ((uintptr_t)(xp + f) & 15) != 0; f++)
    gacc_cell_add<FUSED, SUB>(gp[f], xp[f], sm, sv);
  const float4 *g4 = (const float4 *)(gp + f), *x4 = (const float4 *)(xp + f);
  const int n4 = (len - f) / 4, full = n4 - n4 % (GACC_UNROLL / 4);
  enum { V = GACC_UNROLL / 4 };
  float4 ga[V], xa[V];
  if (full > 0) {
#pragma unroll
    for (int u = 0; u < V; u++) {
      ga[u] = g4[u];
      xa[u] = x4[u];
    }
  }
  for (int k = 0; k < full; k += V) {
    float4 gb[V], xb[V];
    if (k + V < full) {
#pragma unroll
      for (int u = 0; u < V; u++) {
        gb[u] = g4[k + V + u];
        xb[u] = x4[k + V + u];
      }
    }
#pragma unroll
    for (int u = 0; u < V; u++) {
      gacc_cell_add<FUSED, SUB>(ga[u].x, xa[u].x, sm, sv);
      gacc_cell_add<FUSED, SUB>(ga[u].y, xa[u].y, sm, sv);
      gacc_cell_add<FUSED, SUB>(ga[u].z, xa[u].z, sm, sv);
      gacc_cell_add<FUSED, SUB>(ga[u].w, xa[u].w, sm, sv);
    }
#pragma unroll
    for (int u = 0; u < V; u++) {
      ga[u] = gb[u];
      xa[u] = xb[u];
    }
  }
  for (f += 4 * full; f < len; f++) gacc_cell_add<FUSED, SUB>(gp[f], xp[f], sm, sv);
}

/* An occupancy cell: the posteriors' sum over frames [0, len) of gp, four
 * frames a load as gacc_cell_run. SKIP0: a posterior of 0 is skipped (the
 * sum is -0); else added (+0 or -0 leaves any other sum as it is). */
template <int SKIP0>
__device__ static __forceinline__ void gacc_occ_add(float g, double &so) {
  const double s1 = so + (double)g;
  so = SKIP0 && g == 0.0f ? so : s1;
}
template <int SKIP0>
__device__ static __forceinline__ void gacc_occ_run(const float *gp, int len, double &so) {
  int f = 0;
  for (; f < len && ((uintptr_t)(gp + f) & 15) != 0; f++) gacc_occ_add<SKIP0>(gp[f], so);
  const float4 *g4 = (const float4 *)(gp + f);
  enum { V = GACC_UNROLL / 4 };
  const int n4 = (len - f) / 4, full = n4 - n4 % V;
  float4 ga[V];
  if (full > 0) {
#pragma unroll
    for (int u = 0; u < V; u++) ga[u] = g4[u];
  }
  for (int k = 0; k < full; k += V) {
    float4 gb[V];
    if (k + V < full) {
#pragma unroll
      for (int u = 0; u < V; u++) gb[u] = g4[k + V + u];
    }
#pragma unroll
    for (int u = 0; u < V; u++) {
      gacc_occ_add<SKIP0>(ga[u].x, so);
      gacc_occ_add<SKIP0>(ga[u].y, so);
      gacc_occ_add<SKIP0>(ga[u].z, so);
      gacc_occ_add<SKIP0>(ga[u].w, so);
    }
#pragma unroll
    for (int u = 0; u < V; u++) ga[u] = gb[u];
  }
  for (f += 4 * full; f < len; f++) gacc_occ_add<SKIP0>(gp[f], so);
}

__global__ void gacc_cells_kernel(const int4 *__restrict__ blocks,
                                  const float *__restrict__ xs_t,
                                  const float *__restrict__ gam_t, size_t cap,
                                  const int32_t *__restrict__ pdf_offset, int D, int prof,
                                  const int *__restrict__ nonfinite, double *occ, double *mean,
                                  double *var) {
  const int4 b = blocks[blockIdx.x];
  const int pdf = b.x, start = b.y, len = b.z;
  const int g0 = pdf_offset[pdf], M = pdf_offset[pdf + 1] - g0, MD = M * D;
  const int fuse_to = kio_blas_daxpy_fused(prof, D);
  const int finite = *nonfinite == 0;
  int n = MD + M - b.w;
  if (n > GACC_CELLS) n = GACC_CELLS;
  for (int c = threadIdx.x; c < n; c += blockDim.x) {
    const int i = b.w + c;
    const int m = i < MD ? i / D : i - MD, d = i < MD ? i - m * D : 0;
    const float *gp = gam_t + (size_t)m * cap + start;
    if (i < MD) {
      const float *xp = xs_t + (size_t)d * cap + start;
      const size_t cell = (size_t)g0 * D + i;
      double sm = mean[cell], sv = var[cell];
      const int sub = finite && !(sm == 0.0 && signbit(sm)) && !(sv == 0.0 && signbit(sv));
      if (d < fuse_to) {
        if (sub) gacc_cell_run<1, 1>(gp, xp, len, sm, sv);
        else gacc_cell_run<1, 0>(gp, xp, len, sm, sv);
      } else {
        if (sub) gacc_cell_run<0, 1>(gp, xp, len, sm, sv);
        else gacc_cell_run<0, 0>(gp, xp, len, sm, sv);
      }
      mean[cell] = sm;
      var[cell] = sv;
    } else {
      double so = occ[g0 + m];
      if (so == 0.0 && signbit(so)) gacc_occ_run<1>(gp, len, so);
      else gacc_occ_run<0>(gp, len, so);
      occ[g0 + m] = so;
    }
  }
}

void gacc_launch_chunks(unsigned grid, size_t shmem, cudaStream_t st, const int4 *chunks,
                        const int32_t *order, const float *feats, const int32_t *tid,
                        const int32_t *pdf_offset, const float *gconst, const float *mi,
                        const float *iv, int D, int chunk_cap, int prof, int maxc, double *tacc,
                        float *gam_out, float *mx_out, float *sum_out, float *xs_t,
                        float *gam_t, size_t cap, int *nonfinite) {
  GACC_LAUNCH_CHUNKS(grid, shmem, st, chunks, order, feats, tid, pdf_offset, gconst, mi, iv, D,
                     chunk_cap, prof, maxc, tacc, gam_out, mx_out, sum_out, xs_t, gam_t, cap,
                     nonfinite);
}

void gacc_launch_cells(unsigned grid, cudaStream_t st, const int4 *blocks, const float *xs_t,
                       const float *gam_t, size_t cap, const int32_t *pdf_offset, int D, int prof,
                       const int *nonfinite, double *occ, double *mean, double *var) {
  GACC_LAUNCH_CELLS(grid, st, blocks, xs_t, gam_t, cap, pdf_offset, D, prof, nonfinite, occ, mean,
                    var);
}
