/* The per-frame float arithmetic of the accumulators, identical on host and
 * device (internal header of gpu-acc): Gaussian log-likelihoods rounded as
 * Kaldi's OpenBLAS build rounds them, and the softmax's expf.
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

#include "base/matrix/sgemv-skx-small.h"

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

/* ---- Gaussian log-likelihoods exactly as Kaldi's reference build ----
 * Kaldi computes y = gconsts; y += MI.x; y += -0.5 * IV.x^2 with two
 * cblas_sgemv calls; the fixtures come from OpenBLAS (Haswell kernels:
 * kernel/x86_64/sgemv_t_4.c with sgemv_t_microk_haswell-4.c). Its rounding
 * depends on how each dot product is split, so we reproduce that split
 * (checked bit for bit against Kaldi's stats in tests/parity/check_acc.c):
 *  - the dimension is cut into NB = D - D%4 (blocks of at most 4096) and a
 *    tail of D%4 elements added afterwards;
 *  - components are taken 4 at a time (8-lane FMA kernel), then 2 (4-lane
 *    multiply-add kernel), then 1 (two 4-lane multiply-add accumulators);
 *  - each block's dot is added as y + dot*alpha; the tail as
 *    y + fma(a2, x2*alpha, fma(a0, x0*alpha, a1*x1*alpha)) (GCC's FMA
 *    contraction of the C expression).
 * Except: on SkylakeX, rows of at most 8 floats with lda == D (Kaldi: D = 4
 * and 8) go to AVX-512 kernels with their own order per D and per block of
 * rows (base/matrix/sgemv-skx-small.h; gacc_gauss_loglike_p takes it). */
enum { GACC_K4 = 0, GACC_K2 = 1, GACC_K1 = 2 };

/* Which sgemv kernel handles component j of M. */
GACC_HD int gacc_kernel_kind(int j, int M) {
  if (j < (M & ~3)) return GACC_K4;
  if ((M & 2) && j < (M & ~3) + 2) return GACC_K2;
  return GACC_K1;
}

/* 8 lanes of FMA: a 4-wide step if n&4, an 8-wide step if n&8, then
 * 16-wide steps (two FMAs per lane); lanes k and k+4 added, then
 * horizontal adds ((s0+s1)+(s2+s3)). */
GACC_HD float gacc_dot_k4(const float *a, const float *x, int n) {
  float acc[8] = { 0, 0, 0, 0, 0, 0, 0, 0 };
  int i = 0;
  if (n & 4) {
    for (int l = 0; l < 4; l++) acc[l] = fmaf(a[l], x[l], acc[l]);
    i = 4;
    n -= 4;
  }
  if (n & 8) {
    for (int l = 0; l < 8; l++) acc[l] = fmaf(a[i + l], x[i + l], acc[l]);
    i += 8;
    n -= 8;
  }
  for (; n > 0; i += 16, n -= 16) {
    for (int l = 0; l < 8; l++) acc[l] = fmaf(a[i + l], x[i + l], acc[l]);
    for (int l = 0; l < 8; l++) acc[l] = fmaf(a[i + 8 + l], x[i + 8 + l], acc[l]);
  }
  float s0 = acc[0] + acc[4], s1 = acc[1] + acc[5], s2 = acc[2] + acc[6],
        s3 = acc[3] + acc[7];
  float h0 = s0 + s1, h1 = s2 + s3;
  return h0 + h1;
}

/* 4 lanes, multiply then add, in element order. */
GACC_HD float gacc_dot_k2(const float *a, const float *x, int n) {
  float acc[4] = { 0, 0, 0, 0 };
  for (int i = 0; i < n; i += 4)
    for (int l = 0; l < 4; l++) {
      float p = a[i + l] * x[i + l];
      acc[l] = acc[l] + p;
    }
  float h0 = acc[0] + acc[1], h1 = acc[2] + acc[3];
  return h0 + h1;
}

/* Two 4-lane accumulators: a 4-wide step into the first if n&4, then
 * 8-wide steps (first half into the first, second into the second). */
GACC_HD float gacc_dot_k1(const float *a, const float *x, int n) {
  float u[4] = { 0, 0, 0, 0 }, v[4] = { 0, 0, 0, 0 };
  int i = 0;
  if (n & 4) {
    for (int l = 0; l < 4; l++) {
      float p = a[l] * x[l];
      u[l] = u[l] + p;
    }
    i = 4;
    n -= 4;
  }
  for (; n > 0; i += 8, n -= 8) {
    for (int l = 0; l < 4; l++) {
      float p = a[i + l] * x[i + l];
      u[l] = u[l] + p;
    }
    for (int l = 0; l < 4; l++) {
      float p = a[i + 4 + l] * x[i + 4 + l];
      v[l] = v[l] + p;
    }
  }
  float w0 = u[0] + v[0], w1 = u[1] + v[1], w2 = u[2] + v[2], w3 = u[3] + v[3];
  float h0 = w0 + w1, h1 = w2 + w3;
  return h0 + h1;
}

/* y + alpha * (a . xv) for one component row a of length D, as sgemv_t
 * does it. plain_tail: the D%4 tail unfused (the "hsw"/"plain" OpenBLAS
 * profiles of acc-cpu-fast.c); else contracted as below ("skx"). */
GACC_HD float gacc_gemv_row_p(float y, const float *a, const float *xv, int D, float alpha,
                              int kind, int plain_tail) {
  int m3 = D & 3, nb_total = D - m3;
  for (int off = 0; off < nb_total; off += 4096) {
    int nb = nb_total - off < 4096 ? nb_total - off : 4096;
    float t = kind == GACC_K4 ? gacc_dot_k4(a + off, xv + off, nb)
            : kind == GACC_K2 ? gacc_dot_k2(a + off, xv + off, nb)
                              : gacc_dot_k1(a + off, xv + off, nb);
    float p = t * alpha;
    y = y + p;
  }
  const float *at = a + nb_total, *xt = xv + nb_total;
  if (m3 && plain_tail) {
    float t = at[0] * (xt[0] * alpha);
    for (int k = 1; k < m3; k++) {
      float p = at[k] * (xt[k] * alpha);
      t = t + p;
    }
    y = y + t;
  } else if (m3 == 3) {
    float t0 = xt[0] * alpha, t1 = xt[1] * alpha, t2 = xt[2] * alpha;
    float p1 = at[1] * t1;
    float t = fmaf(at[2], t2, fmaf(at[0], t0, p1));
    y = y + t;
  } else if (m3 == 2) {
    float t0 = xt[0] * alpha, t1 = xt[1] * alpha;
    float p1 = at[1] * t1;
    y = y + fmaf(at[0], t0, p1);
  } else if (m3 == 1) {
    y = fmaf(at[0], xt[0] * alpha, y);
  }
  return y;
}

GACC_HD float gacc_gemv_row(float y, const float *a, const float *xv, int D, float alpha,
                            int kind) {
  return gacc_gemv_row_p(y, a, xv, D, alpha, kind, 0);
}

/* Log-likelihood of component j (of M) for frame x: gconst + MI.x
 * - 0.5 IV.x2 rounded as Kaldi/OpenBLAS (above); x2[d] = x[d] * x[d] in
 * float, as Kaldi squares the frame. In the skx profile (plain_tail 0),
 * D = 4 and D = 8 (Kaldi's row stride = D <= 8) take OpenBLAS's SkylakeX
 * small-m kernel instead (base/matrix/sgemv-skx-small.h). */
GACC_HD float gacc_gauss_loglike_p(float gconst, const float *mi, const float *iv,
                                   const float *x, const float *x2, int D, int j, int M,
                                   int plain_tail) {
  if (!plain_tail && kio_sgemv_skx_small(D, kio_kaldi_stride(D))) {
    float y = kio_sgemv_skx_small_row(gconst, mi, x, 1, D, 1.0f, j, M);
    return kio_sgemv_skx_small_row(y, iv, x2, 1, D, -0.5f, j, M);
  }
  int kind = gacc_kernel_kind(j, M);
  float y = gacc_gemv_row_p(gconst, mi, x, D, 1.0f, kind, plain_tail);
  return gacc_gemv_row_p(y, iv, x2, D, -0.5f, kind, plain_tail);
}

GACC_HD float gacc_gauss_loglike(float gconst, const float *mi, const float *iv,
                                 const float *x, const float *x2, int D, int j, int M) {
  return gacc_gauss_loglike_p(gconst, mi, iv, x, x2, D, j, M, 0);
}

#endif
