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
                                  float *sum_out, float *xs_out) {
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
    xs_out[(size_t)start * D + i] = v;  /* the statistics read these rows in order */
  }
  __syncthreads();

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

  for (int i = threadIdx.x; i < len * M; i += blockDim.x) {
    int f = i / M, m = i - f * M;
    gam_out[(size_t)(start + f) * maxc + m] = gam[i];
  }
}

/* The same sums, GACC_CELLS cells of one pdf per block: blocks[b] = (pdf,
 * first sorted frame, frames, first cell), cells numbered as in
 * gacc_stats_kernel (m * D + d for the means and variances, then M * D + m
 * for the occupancies). A thread reads its frames' feature (xs: the rows
 * in sorted-frame order, written by the chunk kernel) and posterior
 * straight from global memory (a warp's cells are neighbouring dims of one
 * or two components: coalesced rows, broadcast posteriors), the loads of
 * the next GACC_UNROLL frames issued before the adds of these, which stay
 * in frame order: no shared memory, no barrier. The pdf with the most
 * frames thus runs on M * (D + 1) / GACC_CELLS SMs at once, each add
 * waiting only for the previous one of its cell. */
enum { GACC_UNROLL = 16 };
__device__ static __forceinline__ void gacc_cell_add(double gm, double xd, int fused, double &sm,
                                                     double &sv) {
  if (gm != 0.0) {
    const double q = xd * xd;
    sm = fma(gm, xd, sm);
    if (fused) {
      sv = fma(gm, q, sv);
    } else {
      double p = gm * q;
      sv = sv + p;
    }
  }
}

__global__ void gacc_cells_kernel(const int4 *__restrict__ blocks,
                                  const float *__restrict__ xs,
                                  const float *__restrict__ gam, int maxc,
                                  const int32_t *__restrict__ pdf_offset, int D, int prof,
                                  double *occ, double *mean, double *var) {
  const int4 b = blocks[blockIdx.x];
  const int pdf = b.x, start = b.y, len = b.z;
  const int g0 = pdf_offset[pdf], M = pdf_offset[pdf + 1] - g0, MD = M * D;
  const int fuse_to = kio_blas_daxpy_fused(prof, D);
  int n = MD + M - b.w;
  if (n > GACC_CELLS) n = GACC_CELLS;
  for (int c = threadIdx.x; c < n; c += blockDim.x) {
    const int i = b.w + c;
    const int m = i < MD ? i / D : i - MD, d = i < MD ? i - m * D : 0;
    const float *gp = gam + (size_t)start * maxc + m;
    const float *xp = xs + (size_t)start * D + d;
    const int full = len - len % GACC_UNROLL;
    float ga[GACC_UNROLL], xa[GACC_UNROLL];
    if (i < MD) {
      const size_t cell = (size_t)g0 * D + i;
      const int fused = d < fuse_to;
      double sm = mean[cell], sv = var[cell];
      if (full > 0) {
#pragma unroll
        for (int u = 0; u < GACC_UNROLL; u++) {
          ga[u] = gp[(size_t)u * maxc];
          xa[u] = xp[(size_t)u * D];
        }
      }
      for (int f = 0; f < full; f += GACC_UNROLL) {
        float gb[GACC_UNROLL], xb[GACC_UNROLL];
        const int nf = f + GACC_UNROLL;
        if (nf < full) {
#pragma unroll
          for (int u = 0; u < GACC_UNROLL; u++) {
            gb[u] = gp[(size_t)(nf + u) * maxc];
            xb[u] = xp[(size_t)(nf + u) * D];
          }
        }
#pragma unroll
        for (int u = 0; u < GACC_UNROLL; u++)
          gacc_cell_add((double)ga[u], (double)xa[u], fused, sm, sv);
#pragma unroll
        for (int u = 0; u < GACC_UNROLL; u++) {
          ga[u] = gb[u];
          xa[u] = xb[u];
        }
      }
      for (int f = full; f < len; f++)
        gacc_cell_add((double)gp[(size_t)f * maxc], (double)xp[(size_t)f * D], fused, sm, sv);
      mean[cell] = sm;
      var[cell] = sv;
    } else {
      double so = occ[g0 + m];
      if (full > 0) {
#pragma unroll
        for (int u = 0; u < GACC_UNROLL; u++) ga[u] = gp[(size_t)u * maxc];
      }
      for (int f = 0; f < full; f += GACC_UNROLL) {
        float gb[GACC_UNROLL];
        const int nf = f + GACC_UNROLL;
        if (nf < full) {
#pragma unroll
          for (int u = 0; u < GACC_UNROLL; u++) gb[u] = gp[(size_t)(nf + u) * maxc];
        }
#pragma unroll
        for (int u = 0; u < GACC_UNROLL; u++)
          if (ga[u] != 0.0f) so = so + (double)ga[u];
#pragma unroll
        for (int u = 0; u < GACC_UNROLL; u++) ga[u] = gb[u];
      }
      for (int f = full; f < len; f++) {
        const double gm = (double)gp[(size_t)f * maxc];
        if (gm != 0.0) so = so + gm;
      }
      occ[g0 + m] = so;
    }
  }
}

void gacc_launch_chunks(unsigned grid, size_t shmem, cudaStream_t st, const int4 *chunks,
                        const int32_t *order, const float *feats, const int32_t *tid,
                        const int32_t *pdf_offset, const float *gconst, const float *mi,
                        const float *iv, int D, int chunk_cap, int prof, int maxc, double *tacc,
                        float *gam_out, float *mx_out, float *sum_out, float *xs_out) {
  GACC_LAUNCH_CHUNKS(grid, shmem, st, chunks, order, feats, tid, pdf_offset, gconst, mi, iv, D,
                     chunk_cap, prof, maxc, tacc, gam_out, mx_out, sum_out, xs_out);
}

void gacc_launch_cells(unsigned grid, cudaStream_t st, const int4 *blocks, const float *xs,
                       const float *gam, int maxc, const int32_t *pdf_offset, int D, int prof,
                       double *occ, double *mean, double *var) {
  GACC_LAUNCH_CELLS(grid, st, blocks, xs, gam, maxc, pdf_offset, D, prof, occ, mean, var);
}
