/* The per-frame float arithmetic of the accumulators, identical on host and
 * device (internal header of gpu-acc): the softmax's expf. The Gaussian
 * log-likelihoods and the statistics' adds round as Kaldi's OpenBLAS does
 * through base/matrix/blas-order.h.
 *
 * expf: Kaldi's softmax calls glibc expf. CUDA's expf differs from it by up
 * to 2 ulp, which would make GPU posteriors differ from CPU ones. This is
 * the algorithm glibc (>= 2.28) uses (ARM optimized-routines: a 32-entry
 * table of 2^(i/32) and a cubic in double precision), written so that
 * every operation is a plain IEEE double op: with -ffp-contract=off on the
 * host and --fmad=false on the device both give the same bits. Over all
 * 4.3e9 floats it differs from glibc 2.36's expf on 2 near-halfway inputs
 * (one negative, -0x1.f8cbb2p+5); tests/parity/check_acc.c checks a sample. */
#ifndef GACC_ACC_MATH_H
#define GACC_ACC_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "base/matrix/blas-order.h"

#ifdef __CUDACC__
#define GACC_HD __host__ __device__ __forceinline__
#else
#define GACC_HD static inline
#endif

/* bits of 2^(i/32) minus (i << 47), so that adding (k << 47) to entry
 * k % 32 gives the bits of 2^(k/32). */
#define GACC_EXP_TAB_INIT {                                                   \
  0x3ff0000000000000ULL, 0x3fefd9b0d3158574ULL, 0x3fefb5586cf9890fULL,       \
  0x3fef9301d0125b51ULL, 0x3fef72b83c7d517bULL, 0x3fef54873168b9aaULL,       \
  0x3fef387a6e756238ULL, 0x3fef1e9df51fdee1ULL, 0x3fef06fe0a31b715ULL,       \
  0x3feef1a7373aa9cbULL, 0x3feedea64c123422ULL, 0x3feece086061892dULL,       \
  0x3feebfdad5362a27ULL, 0x3feeb42b569d4f82ULL, 0x3feeab07dd485429ULL,       \
  0x3feea47eb03a5585ULL, 0x3feea09e667f3bcdULL, 0x3fee9f75e8ec5f74ULL,       \
  0x3feea11473eb0187ULL, 0x3feea589994cce13ULL, 0x3feeace5422aa0dbULL,       \
  0x3feeb737b0cdc5e5ULL, 0x3feec49182a3f090ULL, 0x3feed503b23e255dULL,       \
  0x3feee89f995ad3adULL, 0x3feeff76f2fb5e47ULL, 0x3fef199bdd85529cULL,       \
  0x3fef3720dcef9069ULL, 0x3fef5818dcfba487ULL, 0x3fef7c97337b9b5fULL,       \
  0x3fefa4afa2a490daULL, 0x3fefd0765b6e4540ULL }

#ifdef __CUDACC__
/* Only acc-cuda.cu includes this header in device code. */
static __device__ __constant__ uint64_t gacc_exp_tab_dev[32] = GACC_EXP_TAB_INIT;
#endif

static const uint64_t gacc_exp_tab_host[32] = GACC_EXP_TAB_INIT;

GACC_HD double gacc_asdouble(uint64_t u) { double d; memcpy(&d, &u, 8); return d; }
GACC_HD uint64_t gacc_asuint64(double d) { uint64_t u; memcpy(&u, &d, 8); return u; }
GACC_HD uint32_t gacc_asuint(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* expf(x) as glibc computes it. Out-of-range inputs follow expf too:
 * -inf -> 0, nan -> nan, overflow -> inf, underflow -> 0. */
GACC_HD float gacc_expf(float x) {
  const double inv_ln2_n = 0x1.71547652b82fep+5;  /* 32 / ln 2 */
  const double shift = 0x1.8p+52;
  const double c0 = 0x1.c6af84b912394p-20, c1 = 0x1.ebfce50fac4f3p-13,
               c2 = 0x1.62e42ff0c52d6p-6;
  uint32_t abstop = (gacc_asuint(x) >> 20) & 0x7ff;
  if (abstop >= 0x42b) {  /* |x| >= 88 or nan */
    if (gacc_asuint(x) == 0xff800000u) return 0.0f;
    if (abstop >= 0x7f8) return x + x;
    if (x > 0x1.62e42ep6f) return HUGE_VALF;
    if (x < -0x1.9fe368p6f) return 0.0f;
  }
  double xd = (double)x;
  double z = inv_ln2_n * xd;
  double kd = z + shift;       /* rounds z to an integer (ties to even) */
  uint64_t ki = gacc_asuint64(kd);
  kd -= shift;
  double r = z - kd;
#ifdef __CUDA_ARCH__
  uint64_t t = gacc_exp_tab_dev[ki % 32];
#else
  uint64_t t = gacc_exp_tab_host[ki % 32];
#endif
  t += ki << 47;
  double s = gacc_asdouble(t);
  double p = c0 * r + c1;
  double r2 = r * r;
  double y = c2 * r + 1.0;
  y = p * r2 + y;
  y = y * s;
  return (float)y;
}

#endif
