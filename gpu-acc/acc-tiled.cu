/* The per-pdf statistics kernel of the GPU accumulator (acc-cuda.cu), kept
 * for measuring against the cells kernel (KALDI_GPU_DEV_ACC_STATS=tiled):
 * the same sums in the same order. */
#include <stdint.h>
#include <stdlib.h>

#include "acc-internal.h"
#include "acc-kernels.h"
#include "acc-math.h"

#ifdef GALIGN_CUDA_EMU_H
static float *gacc_tiled_shared;
#define GACC_DYN_SHARED(name) float *name = gacc_tiled_shared
#else
#define GACC_DYN_SHARED(name) extern __shared__ float name[]
#endif

/* a pdf has M * (D + 1) cells (up to ~1600 for tri models), each a serial
 * loop over the pdf's frames: many threads per block */
enum { GACC_STATS_THREADS = 512 };

/* One block per pdf of the batch: ranges[b] = (pdf, first sorted frame,
 * frames). Each thread owns cells of that pdf and adds frame after frame
 * as the CPU path does (acc-cpu-fast.c stats_scalar): post 0 skipped,
 * mean = fma(post, x, mean) (exact product), var fused where the profile's
 * daxpy fuses it (kio_blas_daxpy_fused).
 * The pdf's frames go through shared memory in tiles of `tile` frames
 * (features and posteriors, loaded by the whole block with coalesced
 * reads): each add then waits only for a shared-memory read, not for the
 * two dependent global loads (order, then the feature row) it needed
 * before; a cell's sums stay in frame order, tile after tile. */
__global__ void gacc_stats_kernel(const int4 *__restrict__ ranges,
                                  const int32_t *__restrict__ order,
                                  const float *__restrict__ feats,
                                  const float *__restrict__ gam, int maxc,
                                  const int32_t *__restrict__ pdf_offset, int D, int prof,
                                  int tile, double *occ, double *mean, double *var) {
  GACC_DYN_SHARED(sh);
  const int4 r = ranges[blockIdx.x];
  const int pdf = r.x, start = r.y, len = r.z;
  const int g0 = pdf_offset[pdf], M = pdf_offset[pdf + 1] - g0, MD = M * D;
  const int fuse_to = kio_blas_daxpy_fused(prof, D);
  float *xs = sh;                          /* tile x D features */
  float *gs = sh + (size_t)tile * D;       /* tile x M posteriors */
  for (int f0 = 0; f0 < len; f0 += tile) {
    const int n = len - f0 < tile ? len - f0 : tile;
    __syncthreads();  /* the previous tile is no longer read */
    for (int i = threadIdx.x; i < n * D; i += blockDim.x) {
      int f = i / D, d = i - f * D;
      xs[i] = feats[(size_t)order[start + f0 + f] * D + d];
    }
    for (int i = threadIdx.x; i < n * M; i += blockDim.x) {
      int f = i / M, m = i - f * M;
      gs[i] = gam[(size_t)(start + f0 + f) * maxc + m];
    }
    __syncthreads();
    for (int i = threadIdx.x; i < MD + M; i += blockDim.x) {
      if (i < MD) {
        int m = i / D, d = i - m * D;
        size_t cell = (size_t)g0 * D + i;
        double sm = mean[cell], sv = var[cell];
        for (int f = 0; f < n; f++) {
          double gm = (double)gs[f * M + m];
          double xd = (double)xs[f * D + d];
          if (gm != 0.0) {
            double q = xd * xd;
            sm = fma(gm, xd, sm);
            if (d < fuse_to) {
              sv = fma(gm, q, sv);
            } else {
              double p = gm * q;
              sv = sv + p;
            }
          }
        }
        mean[cell] = sm;
        var[cell] = sv;
      } else {
        int m = i - MD;
        double so = occ[g0 + m];
        for (int f = 0; f < n; f++) {
          double gm = (double)gs[f * M + m];
          if (gm != 0.0) so = so + gm;
        }
        occ[g0 + m] = so;
      }
    }
  }
}

void gacc_launch_tiled(unsigned grid, size_t shmem, cudaStream_t st, const int4 *ranges,
                       const int32_t *order, const float *feats, const float *gam, int maxc,
                       const int32_t *pdf_offset, int D, int prof, int tile, double *occ,
                       double *mean, double *var) {
#ifdef GALIGN_CUDA_EMU_H
  gacc_tiled_shared = (float *)realloc(gacc_tiled_shared, shmem);
  GALIGN_LAUNCH(gacc_stats_kernel, grid, 1, st, ranges, order, feats, gam, maxc, pdf_offset, D,
                prof, tile, occ, mean, var);
#else
  gacc_stats_kernel<<<grid, GACC_STATS_THREADS, shmem, st>>>(ranges, order, feats, gam, maxc,
                                                            pdf_offset, D, prof, tile, occ,
                                                            mean, var);
#endif
}
