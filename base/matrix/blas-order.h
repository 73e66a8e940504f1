/* The float arithmetic that must round as Kaldi's OpenBLAS does, in one
 * place (header only, host and device): the orders of sgemv_t (Gaussian
 * log-likelihoods), daxpy/dger (statistics), saxpy (add-deltas) and the
 * per-output chains of sgemm (transform-feats), for each OpenBLAS 0.3.21
 * kernel family we reproduce (a "profile"; base/matrix/blas-profile.h picks
 * one). Every operation is explicit: fmaf where the kernel fuses, * and +
 * that the build does not contract (-ffp-contract=off, nvcc --fmad=false).
 * docs/journal/rounding.md records how each order was found and checked.
 *
 * Kaldi's row-major calls, as OpenBLAS sees them:
 *  - loglikes: cblas_sgemv(RowMajor, NoTrans) = sgemv_t with m = D (row
 *    length), n = components, lda = Kaldi's row stride (D rounded up to 4);
 *  - mean/var statistics: cblas_dger = per component daxpy(post, x) over D;
 *  - add-deltas: saxpy per tap; transform-feats: sgemm, out (T x M) =
 *    in (T x K) * W^T, i.e. OpenBLAS's C (M x T) = W * in^T. */
#ifndef KIO_BLAS_ORDER_H
#define KIO_BLAS_ORDER_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define KIO_BLAS_HD static inline __host__ __device__
#else
#define KIO_BLAS_HD static inline
#endif

/* The profiles: which OpenBLAS kernels Kaldi's library runs. SKX is the
 * reference (the fixtures' hosts). */
enum {
  KIO_BLAS_SKX = 0, /* SkylakeX, SapphireRapids (AVX-512, built -march=skylake-avx512) */
  KIO_BLAS_HSW = 1, /* Haswell, Zen (AVX2 + FMA kernels, C parts built without FMA) */
  KIO_BLAS_SNB = 2, /* Sandybridge (AVX, no FMA) */
  KIO_BLAS_NHM = 3, /* Nehalem (SSE, no FMA) */
  KIO_BLAS_SSE = 4, /* Prescott: the generic C sgemv_t, SSE3 sgemm, no FMA */
  KIO_BLAS_CPL = 5, /* Cooperlake: SkylakeX's kernels, but sgemm's GEMM_Q is 320, not 448 */
  KIO_BLAS_NPROF = 6
};

/* Does prof run SkylakeX's kernels (SKX, CPL)? */
KIO_BLAS_HD int kio_blas_skx(int prof) { return prof == KIO_BLAS_SKX || prof == KIO_BLAS_CPL; }

/* The SkylakeX small-m sgemv_t kernel (rows of <= 8 floats, lda == m). */
#include "base/matrix/sgemv-skx-small.h"

/* Do the BLAS kernels of prof fuse multiply-adds at all? */
KIO_BLAS_HD int kio_blas_fused(int prof) { return kio_blas_skx(prof) || prof == KIO_BLAS_HSW; }

/* ---- daxpy / saxpy: y[i] += a * x[i] ----
 * The first n_fused elements are fma(a, x, y) (the vector micro-kernel, or
 * a C loop built with FMA), the rest y + a * x. */
KIO_BLAS_HD int32_t kio_blas_daxpy_fused(int prof, int32_t n) {
  return kio_blas_skx(prof) ? n : prof == KIO_BLAS_HSW ? (n & -16) : 0;
}
KIO_BLAS_HD int32_t kio_blas_saxpy_fused(int prof, int32_t n) {
  return kio_blas_skx(prof) ? n : prof == KIO_BLAS_HSW ? (n & -32) : 0;
}

/* ---- sgemv_t: y + alpha * (a . x) for one row a ----
 * Every profile but SSE runs kernel/x86_64/sgemv_t_4.c: the first D - D%4
 * dims (in blocks of at most 4096) by a kernel chosen per row: rows 4k..4k+3
 * of the n rows by the 4x4 micro-kernel, then 2 rows by 4x2, then 1 by 4x1
 * (kio_blas_gemv_kind); each block's dot added as y + dot * alpha; then the
 * D%4 tail dims by C code (fused on SKX). SSE runs a generic C kernel
 * (kio_blas_gemv_row_c). x[k] is at x[k * xs]. */
KIO_BLAS_HD int kio_blas_gemv_kind(int32_t j, int32_t n) {
  int32_t n4 = n & ~3;
  return j < n4 ? 4 : j < n4 + (n & 2) ? 2 : 1;
}

KIO_BLAS_HD float kio_blas_hsum4(const float *v) {
  float h0 = v[0] + v[1], h1 = v[2] + v[3];
  return h0 + h1;
}

/* 4x4 micro-kernel, one row, nb a multiple of 4.
 * HSW/SKX: 8 FMA lanes; a 4-wide step if nb&4, an 8-wide step if nb&8,
 *   then 16-wide steps (two FMAs per lane); lanes l and l+4 added, then
 *   (s0 + s1) + (s2 + s3).
 * SNB: 8 lanes, mul then add, two accumulators: A takes the 4- and 8-wide
 *   steps and one half of each 16-wide step, B the other half (the first
 *   half for rows 4k, 4k+2, 4k+3, the second half for row 4k+1: the
 *   register allocation of sgemv_t_microk_sandy-4.c); A + B per lane, then
 *   as HSW.
 * NHM: 4 lanes, mul then add, 4 dims a step; (l0 + l1) + (l2 + l3).
 * r: the row's place in its group of 4 (SNB only). */
KIO_BLAS_HD float kio_blas_dot4(int prof, const float *a, const float *x, int32_t xs, int32_t nb,
                                int r) {
  if (prof == KIO_BLAS_NHM) {
    float acc[4] = {0, 0, 0, 0};
    for (int32_t i = 0; i < nb; i += 4)
      for (int l = 0; l < 4; l++) {
        float p = a[i + l] * x[(i + l) * xs];
        acc[l] = acc[l] + p;
      }
    return kio_blas_hsum4(acc);
  }
  float A[8] = {0, 0, 0, 0, 0, 0, 0, 0}, B[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  const int fused = prof != KIO_BLAS_SNB;
  int32_t i = 0, n = nb;
  if (n & 4) {
    for (int l = 0; l < 4; l++) {
      if (fused) A[l] = fmaf(a[l], x[l * xs], A[l]);
      else { float p = a[l] * x[l * xs]; A[l] = A[l] + p; }
    }
    i = 4;
    n -= 4;
  }
  if (n & 8) {
    for (int l = 0; l < 8; l++) {
      if (fused) A[l] = fmaf(a[i + l], x[(i + l) * xs], A[l]);
      else { float p = a[i + l] * x[(i + l) * xs]; A[l] = A[l] + p; }
    }
    i += 8;
    n -= 8;
  }
  for (; n > 0; i += 16, n -= 16) {
    if (fused) {
      for (int l = 0; l < 8; l++) A[l] = fmaf(a[i + l], x[(i + l) * xs], A[l]);
      for (int l = 0; l < 8; l++) A[l] = fmaf(a[i + 8 + l], x[(i + 8 + l) * xs], A[l]);
    } else {
      float *lo = r == 1 ? B : A, *hi = r == 1 ? A : B;
      for (int l = 0; l < 8; l++) { float p = a[i + l] * x[(i + l) * xs]; lo[l] = lo[l] + p; }
      for (int l = 0; l < 8; l++) { float p = a[i + 8 + l] * x[(i + 8 + l) * xs]; hi[l] = hi[l] + p; }
    }
  }
  float s[4];
  for (int l = 0; l < 4; l++) {
    float u = fused ? A[l] : A[l] + B[l], v = fused ? A[l + 4] : A[l + 4] + B[l + 4];
    s[l] = u + v;
  }
  return kio_blas_hsum4(s);
}

/* 4x2 kernel (one 4-lane accumulator) and 4x1 kernel (a second one takes
 * the second 4 of each 8 after an optional leading 4): mul then add, every
 * profile of the sgemv_t_4.c family. */
KIO_BLAS_HD float kio_blas_dot21(const float *a, const float *x, int32_t xs, int32_t nb, int k1) {
  float u[4] = {0, 0, 0, 0}, v[4] = {0, 0, 0, 0};
  int32_t i = 0, n = nb;
  if (n & 4) {
    for (int l = 0; l < 4; l++) { float p = a[l] * x[l * xs]; u[l] = u[l] + p; }
    i = 4;
    n -= 4;
  }
  for (; n > 0; i += 8, n -= 8) {
    for (int l = 0; l < 4; l++) { float p = a[i + l] * x[(i + l) * xs]; u[l] = u[l] + p; }
    float *w = k1 ? v : u;
    for (int l = 0; l < 4; l++) { float p = a[i + 4 + l] * x[(i + 4 + l) * xs]; w[l] = w[l] + p; }
  }
  if (k1)
    for (int l = 0; l < 4; l++) u[l] = u[l] + v[l];
  return kio_blas_hsum4(u);
}

/* The dot of a row's first nb dims by its kernel (kind 4, 2 or 1). */
KIO_BLAS_HD float kio_blas_gemv_dot(int prof, int kind, const float *a, const float *x,
                                    int32_t xs, int32_t nb, int r) {
  return kind == 4 ? kio_blas_dot4(prof, a, x, xs, nb, r) : kio_blas_dot21(a, x, xs, nb, kind == 1);
}

/* The D%4 tail (m3 dims) added to y, xt_k = x_k * alpha:
 * unfused: y + ((a0*xt0 + a1*xt1) + a2*xt2);
 * SKX (gcc contracts the C tail, the first product being the fused one):
 *   m3 = 1: fma(a0, xt0, y); 2: y + fma(a0, xt0, a1*xt1);
 *   3: y + fma(a2, xt2, fma(a0, xt0, a1*xt1)). */
KIO_BLAS_HD float kio_blas_gemv_tail(int prof, float y, const float *a, const float *x, int32_t xs,
                                     int32_t m3, float alpha) {
  if (m3 <= 0) return y;
  if (!kio_blas_skx(prof)) {
    float t = a[0] * (x[0] * alpha);
    for (int32_t k = 1; k < m3; k++) {
      float p = a[k] * (x[k * xs] * alpha);
      t = t + p;
    }
    return y + t;
  }
  if (m3 == 1) return fmaf(a[0], x[0] * alpha, y);
  float t = fmaf(a[0], x[0] * alpha, a[1] * (x[xs] * alpha));
  if (m3 == 3) t = fmaf(a[2], x[2 * xs] * alpha, t);
  return y + t;
}

/* SSE: the generic C sgemv_t. The first D - D%16 dims in blocks of at most
 * 4096: per block t = 0, t = t + (((p0 + p1) + p2) + p3) for each 4 dims,
 * then y + t * alpha; then the last D%16 dims: t = 0 + p0 + p1 + ... in
 * turn, y + t * alpha. Row independent (no kernel per row). */
KIO_BLAS_HD float kio_blas_gemv_row_c(float y, const float *a, const float *x, int32_t xs,
                                      int32_t D, float alpha) {
  int32_t m2 = D & 15, m1 = D - m2;
  for (int32_t off = 0; off < m1; off += 4096) {
    int32_t end = m1 - off < 4096 ? m1 : off + 4096;
    float t = 0.0f;
    for (int32_t i = off; i < end; i += 4) {
      float s = a[i] * x[i * xs];
      float p1 = a[i + 1] * x[(i + 1) * xs];
      s = s + p1;
      float p2 = a[i + 2] * x[(i + 2) * xs];
      s = s + p2;
      float p3 = a[i + 3] * x[(i + 3) * xs];
      s = s + p3;
      t = t + s;
    }
    float p = t * alpha;
    y = p + y;
  }
  if (m2) {
    float t = 0.0f;
    for (int32_t i = m1; i < D; i++) {
      float p = a[i] * x[i * xs];
      t = t + p;
    }
    float p = t * alpha;
    y = p + y;
  }
  return y;
}

/* Row j of n of cblas_sgemv(RowMajor, NoTrans, n, D, alpha, A, lda, x, 1,
 * 1, y, 1) for the row a = A + j * lda: y + alpha * (a . x). */
KIO_BLAS_HD float kio_blas_gemv_row(int prof, float y, const float *a, const float *x, int32_t xs,
                                    int32_t D, int32_t lda, float alpha, int32_t j, int32_t n) {
  if (prof == KIO_BLAS_SSE) return kio_blas_gemv_row_c(y, a, x, xs, D, alpha);
  if (kio_blas_skx(prof) && kio_sgemv_skx_small(D, lda))
    return kio_sgemv_skx_small_row(y, a, x, xs, D, alpha, j, n);
  const int kind = kio_blas_gemv_kind(j, n);
  const int32_t m3 = D & 3, nb_total = D - m3;
  for (int32_t off = 0; off < nb_total; off += 4096) {
    int32_t nb = nb_total - off < 4096 ? nb_total - off : 4096;
    float t = kio_blas_gemv_dot(prof, kind, a + off, x + off * xs, xs, nb, j & 3);
    float p = t * alpha;
    y = y + p;
  }
  return kio_blas_gemv_tail(prof, y, a + nb_total, x + nb_total * xs, xs, m3, alpha);
}

/* Kaldi's Gaussian log-likelihood of component j of a pdf of n:
 * gconst + MI.x - 0.5 IV.x2 (two sgemv calls; x2[d] = x[d] * x[d] in
 * float), rows laid out with Kaldi's row stride. */
KIO_BLAS_HD float kio_blas_gauss_loglike(int prof, float gconst, const float *mi, const float *iv,
                                         const float *x, const float *x2, int32_t xs, int32_t D,
                                         int32_t j, int32_t n) {
  const int32_t lda = kio_kaldi_stride(D);
  float y = kio_blas_gemv_row(prof, gconst, mi, x, xs, D, lda, 1.0f, j, n);
  return kio_blas_gemv_row(prof, y, iv, x2, xs, D, lda, -0.5f, j, n);
}

/* Does every row of a pdf go through the 4x4/4x2/4x1 kernels in the
 * order of kio_blas_dot4's HSW lanes (the tiled fast paths of the CPU and
 * device likelihood code)? */
KIO_BLAS_HD int kio_blas_gemv_hsw_lanes(int prof, int32_t D) {
  return prof == KIO_BLAS_HSW || (kio_blas_skx(prof) && !kio_sgemv_skx_small(D, kio_kaldi_stride(D)));
}

/* ---- sgemm: out(t, r) = sum_k x_k * w_k as the kernel tile holding it ----
 * Each output is one of these chains over k in [0, K) (K a block of the
 * driver's K loop), products fused on HSW/SKX, mul then add otherwise:
 *  SEQ:  acc = acc + x_k w_k from 0;
 *  PAIR: for k < K & ~7 even k into A, odd k into B; the rest into A; A + B;
 *  QUAD: for k < K & ~7 k % 4 picks one of 4; the rest into the first;
 *        (a0 + a1) + (a2 + a3);
 *  OCT:  for k < K & ~15, ((k % 8) / 2, k % 2) picks one of 4 x 2 (L/H); the
 *        rest into L0; ((L0+L1)+(L2+L3)) + ((H0+H1)+(H2+H3));
 *  NHM1: Nehalem's one-row tiles, software-pipelined: per 4 dims
 *        A += P, B += p0, A += p1, B += p2, P = p3 (P starts 0); A = A + B;
 *        then for each further k: A += P, P = p_k; finally A + P.
 *  L16R, L16G: SkylakeX's small-matrix kernel (sgemm_small_kernel_b0_tn):
 *        16 lanes, lane l takes the k = l mod 16 (fused, from 0; the masked
 *        last step adds 0 * 0 to the lanes past K), then reduced:
 *        L16R (its REDUCE_4): per 4-lane block b, (l0 + l1) + (l2 + l3),
 *          then (b0 + b1) + (b2 + b3);
 *        L16G (GCC's _mm512_reduce_add_ps): h_i = l_i + l_i+8,
 *          q_i = h_i + h_i+4, then (q0 + q2) + (q1 + q3).
 *        Stored as the sum itself (alpha 1, beta 0: no C + ...).
 * Which tile holds which output: base/matrix/blas-gemm.c. */
enum {
  KIO_GEMM_SEQ = 0, KIO_GEMM_PAIR = 1, KIO_GEMM_QUAD = 2, KIO_GEMM_OCT = 3, KIO_GEMM_NHM1 = 4,
  KIO_GEMM_L16R = 5, KIO_GEMM_L16G = 6
};

KIO_BLAS_HD float kio_blas_mac(int fused, float acc, float x, float w) {
  if (fused) return fmaf(x, w, acc);
  float p = x * w;
  return acc + p;
}

/* The 16-lane chain of SkylakeX's small-matrix kernel (always fused). */
KIO_BLAS_HD float kio_blas_gemm_l16(int type, const float *x, int32_t xs, const float *w,
                                    int32_t ws, int32_t K) {
  float l[16];
  for (int i = 0; i < 16; i++) l[i] = 0.0f;
  for (int32_t k0 = 0; k0 < K; k0 += 16)
    for (int i = 0; i < 16; i++) {
      int32_t k = k0 + i;
      l[i] = k < K ? fmaf(x[k * xs], w[k * ws], l[i]) : fmaf(0.0f, 0.0f, l[i]);
    }
  if (type == KIO_GEMM_L16R) {
    float b[4];
    for (int i = 0; i < 4; i++) {
      float u = l[4 * i] + l[4 * i + 1], v = l[4 * i + 2] + l[4 * i + 3];
      b[i] = u + v;
    }
    return kio_blas_hsum4(b);
  }
  float h[8], q[4];
  for (int i = 0; i < 8; i++) h[i] = l[i] + l[i + 8];
  for (int i = 0; i < 4; i++) q[i] = h[i] + h[i + 4];
  float u = q[0] + q[2], v = q[1] + q[3];
  return u + v;
}

/* One chain over K products x[k * xs] * w[k * ws]. */
KIO_BLAS_HD float kio_blas_gemm_chain(int type, int fused, const float *x, int32_t xs,
                                      const float *w, int32_t ws, int32_t K) {
  if (type == KIO_GEMM_L16R || type == KIO_GEMM_L16G) return kio_blas_gemm_l16(type, x, xs, w, ws, K);
  if (type == KIO_GEMM_PAIR) {
    float A = 0.0f, B = 0.0f;
    int32_t k8 = K & ~7, k = 0;
    for (; k < k8; k += 2) {
      A = kio_blas_mac(fused, A, x[k * xs], w[k * ws]);
      B = kio_blas_mac(fused, B, x[(k + 1) * xs], w[(k + 1) * ws]);
    }
    for (; k < K; k++) A = kio_blas_mac(fused, A, x[k * xs], w[k * ws]);
    return A + B;
  }
  if (type == KIO_GEMM_QUAD) {
    float a[4] = {0, 0, 0, 0};
    int32_t k8 = K & ~7;
    for (int32_t k = 0; k < K; k++) {
      int s = k < k8 ? (int)(k & 3) : 0;
      a[s] = kio_blas_mac(fused, a[s], x[k * xs], w[k * ws]);
    }
    return kio_blas_hsum4(a);
  }
  if (type == KIO_GEMM_OCT) {
    float L[4] = {0, 0, 0, 0}, H[4] = {0, 0, 0, 0};
    int32_t k16 = K & ~15;
    for (int32_t k = 0; k < K; k++) {
      float *acc = k < k16 && (k & 1) ? H : L;
      int s = k < k16 ? (int)((k & 7) >> 1) : 0;
      acc[s] = kio_blas_mac(fused, acc[s], x[k * xs], w[k * ws]);
    }
    float l = kio_blas_hsum4(L), h = kio_blas_hsum4(H);
    return l + h;
  }
  if (type == KIO_GEMM_NHM1) {
    float A = 0.0f, B = 0.0f, P = 0.0f;
    int32_t k4 = K & ~3, k = 0;
    for (; k < k4; k += 4) {
      A = A + P;
      B = kio_blas_mac(0, B, x[k * xs], w[k * ws]);
      A = kio_blas_mac(0, A, x[(k + 1) * xs], w[(k + 1) * ws]);
      B = kio_blas_mac(0, B, x[(k + 2) * xs], w[(k + 2) * ws]);
      P = x[(k + 3) * xs] * w[(k + 3) * ws];
    }
    A = A + B;
    for (; k < K; k++) {
      A = A + P;
      P = x[k * xs] * w[k * ws];
    }
    return A + P;
  }
  float acc = 0.0f;
  for (int32_t k = 0; k < K; k++) acc = kio_blas_mac(fused, acc, x[k * xs], w[k * ws]);
  return acc;
}

/* The driver's K blocks: GEMM_Q of the profile's kernels and their
 * GEMM_UNROLL_M (the library's runtime table, gotoblas->sgemm_q). */
KIO_BLAS_HD int32_t kio_blas_gemm_q(int prof) {
  return prof == KIO_BLAS_SSE ? 128 : prof == KIO_BLAS_NHM ? 512 : prof == KIO_BLAS_SNB ? 384
       : prof == KIO_BLAS_HSW || prof == KIO_BLAS_CPL ? 320 : 448;
}
KIO_BLAS_HD int32_t kio_blas_gemm_um(int prof) {
  return prof == KIO_BLAS_NHM ? 4 : prof == KIO_BLAS_SNB || kio_blas_skx(prof) ? 16 : 8;
}
/* The length of the K block that starts `rest` before K's end: GEMM_Q while
 * 2 GEMM_Q remain, then the rest in one block, or in two halves when it is
 * over GEMM_Q (level3.c rounds the first half up to GEMM_UNROLL_M, the
 * threaded driver takes (rest + 1) / 2). */
KIO_BLAS_HD int32_t kio_blas_gemm_block(int prof, int32_t rest, int threaded) {
  const int32_t q = kio_blas_gemm_q(prof), um = kio_blas_gemm_um(prof);
  if (q <= 0 || rest <= q) return rest;
  if (rest >= 2 * q) return q;
  return threaded ? (rest + 1) / 2 : ((rest / 2 + um - 1) / um) * um;
}

/* A plan byte (blas-gemm.h): the chain, plus this flag when the threaded
 * driver made the call (its K blocks differ). */
enum { KIO_GEMM_TYPE = 0x7f, KIO_GEMM_THREADED = 0x80 };

/* The output as sgemm (alpha 1, beta 0) leaves it: C = 0, then for each K
 * block C = C + chain (a -0 sum becomes +0); the small-matrix kernel's
 * chains are stored as they are. code: a plan byte. */
KIO_BLAS_HD float kio_blas_gemm_out(int prof, int code, const float *x, int32_t xs, const float *w,
                                    int32_t ws, int32_t K) {
  const int fused = kio_blas_fused(prof), type = code & KIO_GEMM_TYPE;
  const int threaded = (code & KIO_GEMM_THREADED) != 0;
  if (type == KIO_GEMM_L16R || type == KIO_GEMM_L16G) return kio_blas_gemm_l16(type, x, xs, w, ws, K);
  float c = 0.0f;
  for (int32_t ls = 0; ls < K;) {
    int32_t l = kio_blas_gemm_block(prof, K - ls, threaded);
    float b = kio_blas_gemm_chain(type, fused, x + ls * xs, xs, w + ls * ws, ws, l);
    c = c + b;
    ls += l;
  }
  return c;
}

#endif
