/* Per-component GMM log-likelihoods as Kaldi's OpenBLAS rounds them, for the
 * CPU path (gmm.c) and the CUDA path (loglike-exact-cuda.cu): the orders
 * themselves are base/matrix/blas-order.h's, for the model's profile
 * (galign_gmm.blas_prof); this header only adapts them to the flattened
 * model. Scalar code: fmaf() is exact everywhere (hardware FMA or libm),
 * plain + and * must not be contracted (-ffp-contract=off, nvcc
 * --fmad=false). Bit-identical likelihoods make near-ties in pruning go as
 * in Kaldi. */
#ifndef GALIGN_GMM_CORE_H
#define GALIGN_GMM_CORE_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include "gpu-align.h"
#include "base/matrix/blas-order.h"

#ifdef __CUDACC__
#define GALIGN_GMM_HD __host__ __device__ GALIGN_GMM_CORE_INLINE
#else
#define GALIGN_GMM_HD GALIGN_GMM_CORE_INLINE
#endif
#ifndef GALIGN_GMM_CORE_INLINE
#define GALIGN_GMM_CORE_INLINE
#endif

/* The dims the 4x4/4x2/4x1 kernels take (the rest is the tail). */
#define GALIGN_NB(D) ((D) & ~3)

/* The D%4 tail of one row added to y (kio_blas_gemv_tail); unused a/x
 * arguments are ignored. */
GALIGN_GMM_HD static inline float galign_tail_add(float y, int32_t m3, float alpha, float a0,
                                                  float a1, float a2, float x0, float x1,
                                                  float x2, int prof) {
  const float a[3] = {a0, a1, a2}, x[3] = {x0, x1, x2};
  return kio_blas_gemv_tail(prof, y, a, x, 1, m3, alpha);
}

/* Component m of the pdf, the i-th of its n, for frame x (x2 = x * x),
 * x[d] at x[d * xs]: gconst + MI.x - 0.5 IV.x2. */
GALIGN_GMM_HD static inline float galign_comp_loglike(const galign_gmm *g, int32_t m, int32_t i,
                                                     int32_t n, const float *x, const float *x2,
                                                     int32_t xs) {
  const int32_t D = g->dim;
  const float *mi = g->means_invvars + (size_t)m * D, *iv = g->inv_vars + (size_t)m * D;
  return kio_blas_gauss_loglike(g->blas_prof, g->gconst[m], mi, iv, x, x2, xs, D, i, n);
}

/* 1: every component through galign_comp_loglike one by one (the tiled
 * fast paths model the 4x4 kernel's HSW/SKX FMA lanes only: SkylakeX's
 * small-m kernel for D = 4, 8 and the other profiles' kernels go here). */
GALIGN_GMM_HD static inline int galign_use_small(const galign_gmm *g) {
  return !kio_blas_gemv_hsw_lanes(g->blas_prof, g->dim);
}

GALIGN_GMM_HD static inline float galign_small_loglike(const galign_gmm *g, int32_t m, int32_t i,
                                                      int32_t n, const float *x, const float *x2,
                                                      int32_t xs) {
  return galign_comp_loglike(g, m, i, n, x, x2, xs);
}

#endif
