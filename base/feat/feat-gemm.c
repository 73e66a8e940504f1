/* transform-feats' matrix product in the exact float order of Kaldi's
 * OpenBLAS sgemm for the rounding profile, so the features are
 * bit-identical to Kaldi's: each output is one of blas-order.h's chains
 * (SEQ, PAIR, ...), fused or not as the profile's kernels are, in the
 * driver's K blocks; which chain is base/matrix/blas-gemm.c's plan. This
 * file only runs the plan: vectors over 8 independent outputs for the SEQ
 * and PAIR chains (each lane its own chain), the rarer chains and K blocks
 * one output at a time through blas-order.h. */
#include "feat-ops.h"
#include "base/matrix/blas-order.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>

#define AVX2_AI __attribute__((target("avx2,fma"), always_inline))

/* acc + x * w, fused or mul then add (fused: a constant where inlined). */
static inline AVX2_AI __m256 mac8(int fused, __m256 x, __m256 w, __m256 acc) {
  return fused ? _mm256_fmadd_ps(x, w, acc) : _mm256_add_ps(acc, _mm256_mul_ps(x, w));
}

/* 8 rows at once (wt: W^T, k x M): the SEQ or PAIR chains, lane-wise. */
static inline AVX2_AI void chains8_body(int fused, const float *x, const float *wt, int32_t M,
                                        int32_t k, int pair, float *o) {
  __m256 A = _mm256_setzero_ps(), B = _mm256_setzero_ps();
  int32_t q = 0;
  if (pair) {
    int32_t k8 = k & ~7;
    for (; q < k8; q += 2) {
      A = mac8(fused, _mm256_set1_ps(x[q]), _mm256_loadu_ps(wt + (size_t)q * M), A);
      B = mac8(fused, _mm256_set1_ps(x[q + 1]), _mm256_loadu_ps(wt + (size_t)(q + 1) * M), B);
    }
  }
  for (; q < k; q++) A = mac8(fused, _mm256_set1_ps(x[q]), _mm256_loadu_ps(wt + (size_t)q * M), A);
  if (pair) A = _mm256_add_ps(A, B);
  _mm256_storeu_ps(o, _mm256_add_ps(_mm256_setzero_ps(), A));
}

/* 8 rows: the SEQ chains of 8 frames (x[0..7]) and the PAIR chains of the
 * first 4, interleaved so that the latency is hidden; each output lane is
 * still its own chain. */
static inline AVX2_AI void chains8x4_body(int fused, const float *const *x, const float *wt,
                                          int32_t M, int32_t k, int want_seq, int want_pair,
                                          float (*sq)[8], float (*pr)[8]) {
  const __m256 zero = _mm256_setzero_ps();
  if (want_seq) {  /* 8 frames: x[4..7] are the next 4 (or repeat 0..3) */
    __m256 a[8];
    _Pragma("GCC unroll 8")
    for (int f = 0; f < 8; f++) a[f] = zero;
    for (int32_t q = 0; q < k; q++) {
      __m256 w = _mm256_loadu_ps(wt + (size_t)q * M);
      _Pragma("GCC unroll 8")
      for (int f = 0; f < 8; f++) a[f] = mac8(fused, _mm256_set1_ps(x[f][q]), w, a[f]);
    }
    _Pragma("GCC unroll 8")
    for (int f = 0; f < 8; f++) _mm256_storeu_ps(sq[f], _mm256_add_ps(zero, a[f]));
  }
  if (want_pair) {
    __m256 A[4], B[4];
    _Pragma("GCC unroll 8")
    for (int f = 0; f < 4; f++) A[f] = B[f] = zero;
    int32_t k8 = k & ~7, q = 0;
    for (; q < k8; q += 2) {
      __m256 w = _mm256_loadu_ps(wt + (size_t)q * M), v = _mm256_loadu_ps(wt + (size_t)(q + 1) * M);
      _Pragma("GCC unroll 8")
      for (int f = 0; f < 4; f++) {
        A[f] = mac8(fused, _mm256_set1_ps(x[f][q]), w, A[f]);
        B[f] = mac8(fused, _mm256_set1_ps(x[f][q + 1]), v, B[f]);
      }
    }
    for (; q < k; q++) {
      __m256 w = _mm256_loadu_ps(wt + (size_t)q * M);
      _Pragma("GCC unroll 8")
      for (int f = 0; f < 4; f++) A[f] = mac8(fused, _mm256_set1_ps(x[f][q]), w, A[f]);
    }
    _Pragma("GCC unroll 8")
    for (int f = 0; f < 4; f++) _mm256_storeu_ps(pr[f], _mm256_add_ps(zero, _mm256_add_ps(A[f], B[f])));
  }
}

/* The above as functions of their own (inlined into the frame loops they
 * spill), with `fused` a constant inside. */
__attribute__((target("avx2,fma"), noinline))
static void chains8(int fused, const float *x, const float *wt, int32_t M, int32_t k, int pair,
                    float *o) {
  if (fused) chains8_body(1, x, wt, M, k, pair, o);
  else chains8_body(0, x, wt, M, k, pair, o);
}
__attribute__((target("avx2,fma"), noinline))
static void chains8x4(int fused, const float *const *x, const float *wt, int32_t M, int32_t k,
                      int want_seq, int want_pair, float (*sq)[8], float (*pr)[8]) {
  if (fused) chains8x4_body(1, x, wt, M, k, want_seq, want_pair, sq, pr);
  else chains8x4_body(0, x, wt, M, k, want_seq, want_pair, sq, pr);
}

/* Groups of 8 frames from t, their rows in tiles of 8 (SEQ/PAIR plans);
 * returns the first frame not done. */
static inline AVX2_AI int32_t frames8(int fused, const unsigned char *cls, const float *in,
                                      int32_t base, int32_t stride, int32_t t, int32_t t1,
                                      int32_t k, const float *wt, int32_t M, float *out) {
  for (; t + 8 <= t1; t += 8) {
    const float *xs[8];
    _Pragma("GCC unroll 8")
    for (int f = 0; f < 8; f++) xs[f] = in + (size_t)(t + f - base) * stride;
    int32_t j = 0;
    for (; j + 8 <= M; j += 8) {
      int wp[2] = {0, 0};
      _Pragma("GCC unroll 8")
      for (int f = 0; f < 8; f++)
        wp[f >> 2] |= memchr(cls + (size_t)(t + f) * M + j, KIO_GEMM_PAIR, 8) != NULL;
      float sq[8][8], pr[8][8];
      chains8x4(fused, xs, wt + j, M, k, 1, wp[0], sq, pr);
      if (wp[1]) chains8x4(fused, xs + 4, wt + j, M, k, 0, 1, sq, pr + 4);
      _Pragma("GCC unroll 8")
      for (int f = 0; f < 8; f++) {
        const unsigned char *c = cls + (size_t)(t + f) * M + j;
        float *o = out + (size_t)(t + f) * M + j;
        for (int i = 0; i < 8; i++) o[i] = c[i] == KIO_GEMM_PAIR ? pr[f][i] : sq[f][i];
      }
    }
  }
  return t;  /* the rows past the last 8-row tile are the caller's */
}
#endif

/* One output as sgemm leaves it (x: the frame's input, w: W's row). */
static inline float out1(int prof, int type, const float *x, const float *w, int32_t k) {
  return kio_blas_gemm_out(prof, type, x, 1, w, 1, k);
}

#if defined(__x86_64__)
/* Plans with vectors: the SEQ and PAIR chains 8 rows at a time, then the
 * outputs of the other chains one by one: frames [t0, t1) (returns t1). */
__attribute__((target("avx2,fma")))
static int32_t mixed_avx2(int prof, const unsigned char *cls, const float *in, int32_t base,
                          int32_t stride, int32_t t0, int32_t t1, int32_t k, const float *w,
                          int32_t ws, const float *wt, int32_t M, float *out) {
  const int fused = kio_blas_fused(prof);
  int32_t t = fused ? frames8(1, cls, in, base, stride, t0, t1, k, wt, M, out)
                    : frames8(0, cls, in, base, stride, t0, t1, k, wt, M, out);
  /* frames8 leaves the rows past the last 8-row tile of its frames: */
  for (int32_t tt = t0; tt < t; tt++) {
    const float *x = in + (size_t)(tt - base) * stride;
    for (int32_t j = M & ~7; j < M; j++)
      out[(size_t)tt * M + j] = out1(prof, cls[(size_t)tt * M + j], x, w + (size_t)j * ws, k);
  }
  for (; t < t1; t++) {  /* single frames, 8 rows at a time */
    const float *x = in + (size_t)(t - base) * stride;
    const unsigned char *c = cls + (size_t)t * M;
    float *o = out + (size_t)t * M;
    int32_t j = 0;
    for (; j + 8 <= M; j += 8) {
      int np = 0, ns = 0;  /* the other chains take SEQ's value first (redone below) */
      for (int32_t i = 0; i < 8; i++) {
        if (c[j + i] == KIO_GEMM_PAIR) np = 1;
        else ns = 1;
      }
      float sq[8], pr[8];
      if (ns) {
        if (fused) chains8(1, x, wt + j, M, k, 0, sq);
        else chains8(0, x, wt + j, M, k, 0, sq);
      }
      if (np) {
        if (fused) chains8(1, x, wt + j, M, k, 1, pr);
        else chains8(0, x, wt + j, M, k, 1, pr);
      }
      for (int32_t i = 0; i < 8; i++) o[j + i] = c[j + i] == KIO_GEMM_PAIR ? pr[i] : sq[i];
    }
    for (; j < M; j++) o[j] = out1(prof, c[j], x, w + (size_t)j * ws, k);
  }
  for (int32_t tt = t0; tt < t1; tt++) {  /* QUAD, OCT, NHM1 (edge tiles) */
    const unsigned char *c = cls + (size_t)tt * M;
    const float *x = in + (size_t)(tt - base) * stride;
    for (int32_t j = 0; j < (M & ~7); j++)
      if (c[j] > KIO_GEMM_PAIR) out[(size_t)tt * M + j] = out1(prof, c[j], x, w + (size_t)j * ws, k);
  }
  return t;
}
#endif

void kio_featop_gemm_frames(int prof, const unsigned char *cls, const float *in, int32_t base,
                            int32_t stride, int32_t t0, int32_t t1, int32_t k, const float *w,
                            int32_t ws, const float *wt, int32_t M, const float *off,
                            float *out) {
  const int fused = kio_blas_fused(prof);
  const int32_t q = kio_blas_gemm_q(prof);
  const int blocked = q > 0 && k > q;
  if (!cls && !blocked && wt) {  /* SEQ everywhere: the tiled kernels */
    kio_featop_transform_rows(fused, in + (size_t)(t0 - base) * stride, stride, t1 - t0, k, wt, M,
                              off, out + (size_t)t0 * M);
    return;
  }
  int32_t t = t0;
#if defined(__x86_64__)
  if (cls && !blocked && wt && kio_featop_simd())
    t = mixed_avx2(prof, cls, in, base, stride, t0, t1, k, w, ws, wt, M, out);
#endif
  for (; t < t1; t++) {
    const float *x = in + (size_t)(t - base) * stride;
    const unsigned char *c = cls ? cls + (size_t)t * M : NULL;
    float *o = out + (size_t)t * M;
    for (int32_t j = 0; j < M; j++) o[j] = out1(prof, c ? c[j] : KIO_GEMM_SEQ, x, w + (size_t)j * ws, k);
  }
  if (off)
    for (int32_t tt = t0; tt < t1; tt++)
      for (int32_t j = 0; j < M; j++) out[(size_t)tt * M + j] += off[j];
}
