/* Per-component GMM log-likelihood in exactly the float operation order of
 * Kaldi's reference build (OpenBLAS sgemv_t, Haswell/Zen kernels), shared by
 * the CPU path (gmm.c, which also has an AVX2 copy for speed) and, if it
 * wants bit-identical likelihoods, the CUDA path. Scalar code: fmaf() is
 * exact everywhere (hardware FMA or libm), plain + and * must not be
 * contracted (-ffp-contract=off, nvcc --fmad=false).
 *
 * Which kernel handles component i of a pdf with n components:
 * i < n & ~3 -> 4 (4x4 FMA kernel), i < (n & ~3) + (n & 2) -> 2 (4x2),
 * else 1 (4x1). */
#ifndef GALIGN_GMM_CORE_H
#define GALIGN_GMM_CORE_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include "gpu-align.h"
#include "base/matrix/sgemv-skx-small.h"

#ifdef __CUDACC__
#define GALIGN_GMM_HD __host__ __device__ GALIGN_GMM_CORE_INLINE
#else
#define GALIGN_GMM_HD GALIGN_GMM_CORE_INLINE
#endif
#ifndef GALIGN_GMM_CORE_INLINE
#define GALIGN_GMM_CORE_INLINE
#endif

/* Per-component log-likelihoods as Kaldi computes them through OpenBLAS
 * (cblas_sgemv row-major = sgemv_t; the 4x4/4x2/4x1 kernels are the same
 * asm on Haswell, Zen and SkylakeX): the dot product
 * over the first NB = D - D%4 dims is done by the 4x4 FMA micro-kernel for
 * components 4k..4k+3 of the pdf (8 lanes, fma, lanes folded hi+lo then
 * pairwise) and by the SSE 4x2/4x1 kernels (4 lanes, mul+add, pairwise) for
 * the last n%4; y += alpha * dot; then the D%4 tail dims are added in a
 * separate step. Reproducing that order makes our likelihoods bit-identical
 * to the reference build's, so near-ties in pruning go the same way. */
#define GALIGN_NB(D) ((D) & ~3)

GALIGN_GMM_HD static inline float galign_k4x4_dot(const float *a, const float *x, int32_t nb) {
  float acc[8] = { 0, 0, 0, 0, 0, 0, 0, 0 };
  int32_t i = 0, n = nb;
  if (n & 4) {
    for (int l = 0; l < 4; l++) acc[l] = fmaf(a[l], x[l], acc[l]);
    i += 4; n -= 4;
  }
  if (n & 8) {
    for (int l = 0; l < 8; l++) acc[l] = fmaf(a[i + l], x[i + l], acc[l]);
    i += 8; n -= 8;
  }
  for (; n > 0; i += 16, n -= 16) {
    for (int l = 0; l < 8; l++) acc[l] = fmaf(a[i + l], x[i + l], acc[l]);
    for (int l = 0; l < 8; l++) acc[l] = fmaf(a[i + 8 + l], x[i + 8 + l], acc[l]);
  }
  float s0 = acc[4] + acc[0], s1 = acc[5] + acc[1], s2 = acc[6] + acc[2], s3 = acc[7] + acc[3];
  return (s0 + s1) + (s2 + s3);
}

/* 4x2 kernel: one 4-lane accumulator; 4x1 kernel: a second accumulator
 * takes the odd groups of 4 of each 8 after an optional leading 4. */
GALIGN_GMM_HD static inline float galign_sse_dot(const float *a, const float *x, int32_t nb, int k1) {
  float acc[4] = { 0, 0, 0, 0 }, acc2[4] = { 0, 0, 0, 0 };
  int32_t i = 0, n = nb;
  if (n & 4) {
    for (int l = 0; l < 4; l++) acc[l] = acc[l] + a[l] * x[l];
    i += 4; n -= 4;
  }
  for (; n > 0; i += 8, n -= 8) {
    for (int l = 0; l < 4; l++) acc[l] = acc[l] + a[i + l] * x[i + l];
    if (k1)
      for (int l = 0; l < 4; l++) acc2[l] = acc2[l] + a[i + 4 + l] * x[i + 4 + l];
    else
      for (int l = 0; l < 4; l++) acc[l] = acc[l] + a[i + 4 + l] * x[i + 4 + l];
  }
  if (k1)
    for (int l = 0; l < 4; l++) acc[l] = acc[l] + acc2[l];
  return (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

/* The m%4 tail, added to y as OpenBLAS 0.3.21's sgemv_t does it on
 * SkylakeX/Cooperlake (the reference build's machine; gcc contracts the C
 * tail there): with xt_k = x_k * alpha,
 *   m3 = 1: y = fma(a0, xt0, y)
 *   m3 = 2: y = y + fma(a0, xt0, a1 * xt1)
 *   m3 = 3: y = y + fma(a2, xt2, fma(a0, xt0, a1 * xt1))
 * The Haswell/Zen build adds ((a0*xt0 + a1*xt1) + a2*xt2) without FMA
 * (hsw = 1: galign_gmm.blas_hsw, KALDI_GPU_BLAS_PROFILE=hsw, to compare with a
 * Kaldi run on such a host); tools/sgemv-order-check tells which order an
 * installed OpenBLAS uses.
 * Unused a/x arguments are ignored. */
GALIGN_GMM_HD static inline float galign_tail_add(float y, int32_t m3, float alpha, float a0,
                                                  float a1, float a2, float x0, float x1,
                                                  float x2, int hsw) {
  if (hsw) {  /* ((a0*xt0 + a1*xt1) + a2*xt2), unfused */
    float t = a0 * (x0 * alpha);
    if (m3 > 1) t = t + a1 * (x1 * alpha);
    if (m3 > 2) t = t + a2 * (x2 * alpha);
    return y + t;
  }
  if (m3 == 1) return fmaf(a0, x0 * alpha, y);
  float t = fmaf(a0, x0 * alpha, a1 * (x1 * alpha));
  if (m3 == 3) t = fmaf(a2, x2 * alpha, t);
  return y + t;
}

/* galign_tail_add on contiguous a[0..m3), x[0..m3). */
GALIGN_GMM_HD static inline float galign_tail_add_v(float y, const float *a, const float *x,
                                                    int32_t m3, float alpha, int hsw) {
  return galign_tail_add(y, m3, alpha, a[0], m3 > 1 ? a[1] : 0.0f, m3 > 2 ? a[2] : 0.0f, x[0],
                         m3 > 1 ? x[1] : 0.0f, m3 > 2 ? x[2] : 0.0f, hsw);
}

/* kern: 4 = the 4x4 FMA kernel, 2 = 4x2, 1 = 4x1. */
GALIGN_GMM_HD static inline float galign_comp_loglike(const galign_gmm *g, int32_t m, int kern,
                                                     const float *x, const float *x2) {
  const int32_t D = g->dim, nb = GALIGN_NB(D), m3 = D - nb;
  const float *mi = g->means_invvars + (size_t)m * D, *iv = g->inv_vars + (size_t)m * D;
  float y = g->gconst[m];
  if (nb > 0) y = y + (kern == 4 ? galign_k4x4_dot(mi, x, nb) : galign_sse_dot(mi, x, nb, kern == 1)) * 1.0f;
  if (m3) y = galign_tail_add_v(y, mi + nb, x + nb, m3, 1.0f, g->blas_hsw);
  if (nb > 0) y = y + (kern == 4 ? galign_k4x4_dot(iv, x2, nb) : galign_sse_dot(iv, x2, nb, kern == 1)) * -0.5f;
  if (m3) y = galign_tail_add_v(y, iv + nb, x2 + nb, m3, -0.5f, g->blas_hsw);
  return y;
}

GALIGN_GMM_HD static inline int galign_comp_kernel(int32_t i, int32_t n) {
  int32_t n4 = n & ~3;
  return i < n4 ? 4 : i < n4 + (n & 2) ? 2 : 1;
}

/* Except: on SkylakeX (the skx profile: g->blas_small), OpenBLAS sends
 * rows of at most 8 floats with lda == D to a kernel of its own
 * (base/matrix/sgemv-skx-small.h); Kaldi's row stride is D rounded up to 4, so
 * that is D = 4 and D = 8. Then every component of a pdf is
 * galign_small_loglike (x[d] at x[d * xs]). */
GALIGN_GMM_HD static inline int galign_use_small(const galign_gmm *g) {
  return g->blas_small && kio_sgemv_skx_small(g->dim, kio_kaldi_stride(g->dim));
}

GALIGN_GMM_HD static inline float galign_small_loglike(const galign_gmm *g, int32_t m, int32_t i,
                                                      int32_t n, const float *x, const float *x2,
                                                      int32_t xs) {
  const int32_t D = g->dim;
  const float *mi = g->means_invvars + (size_t)m * D, *iv = g->inv_vars + (size_t)m * D;
  float y = kio_sgemv_skx_small_row(g->gconst[m], mi, x, xs, D, 1.0f, i, n);
  return kio_sgemv_skx_small_row(y, iv, x2, xs, D, -0.5f, i, n);
}

#endif
