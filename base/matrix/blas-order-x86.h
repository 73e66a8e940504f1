/* Host AVX2 versions of blas-order.h's sgemv_t kernels for the HSW/SKX
 * lanes (x86-64, gcc/clang): the same operations lane for lane, so the same
 * bits. Callers are compiled for avx2,fma (a target attribute) and check
 * the CPU first. Shared by the aligner's and the accumulator's CPU paths. */
#ifndef KIO_BLAS_ORDER_X86_H
#define KIO_BLAS_ORDER_X86_H

#include <stdint.h>

#include "base/matrix/blas-order.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define KIO_BLAS_HAVE_X86 1
#define KIO_BLAS_AVX2 __attribute__((target("avx2,fma"), always_inline))

/* (s0 + s1) + (s2 + s3) of a 4-lane sum. */
static inline KIO_BLAS_AVX2 float kio_blas_hsum4_avx(__m128 s) {
  s = _mm_hadd_ps(s, s);
  s = _mm_hadd_ps(s, s);
  return _mm_cvtss_f32(s);
}

/* kio_blas_dot4, HSW/SKX lanes, one row. */
static inline KIO_BLAS_AVX2 float kio_blas_dot4_avx2(const float *a, const float *x, int32_t nb) {
  __m256 acc = _mm256_setzero_ps();
  int32_t i = 0, n = nb;
  if (n & 4) {
    __m128 lo = _mm_fmadd_ps(_mm_loadu_ps(a), _mm_loadu_ps(x), _mm_setzero_ps());
    acc = _mm256_insertf128_ps(acc, lo, 0);
    i = 4;
    n -= 4;
  }
  /* an 8-wide step if n & 8, then 16-wide steps of two 8-wide FMAs into
   * the same lanes: the same as 8-wide steps in order */
  for (; n > 0; i += 8, n -= 8)
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(x + i), acc);
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  return kio_blas_hsum4_avx(s);
}

/* kio_blas_dot4 (HSW/SKX lanes) of four rows a, a + lda, ... at once (the
 * 4x4 kernel's own grouping): their dots in the 4 lanes. */
static inline KIO_BLAS_AVX2 __m128 kio_blas_dot4x4_avx2(const float *a, int32_t lda,
                                                        const float *x, int32_t nb) {
  __m256 c0 = _mm256_setzero_ps(), c1 = c0, c2 = c0, c3 = c0;
  const float *a0 = a, *a1 = a + lda, *a2 = a + 2 * (size_t)lda, *a3 = a + 3 * (size_t)lda;
  int32_t i = 0, n = nb;
  if (n & 4) {
    __m128 xv = _mm_loadu_ps(x), z = _mm_setzero_ps();
    c0 = _mm256_insertf128_ps(c0, _mm_fmadd_ps(_mm_loadu_ps(a0), xv, z), 0);
    c1 = _mm256_insertf128_ps(c1, _mm_fmadd_ps(_mm_loadu_ps(a1), xv, z), 0);
    c2 = _mm256_insertf128_ps(c2, _mm_fmadd_ps(_mm_loadu_ps(a2), xv, z), 0);
    c3 = _mm256_insertf128_ps(c3, _mm_fmadd_ps(_mm_loadu_ps(a3), xv, z), 0);
    i = 4;
    n -= 4;
  }
  for (; n > 0; i += 8, n -= 8) {
    __m256 xv = _mm256_loadu_ps(x + i);
    c0 = _mm256_fmadd_ps(_mm256_loadu_ps(a0 + i), xv, c0);
    c1 = _mm256_fmadd_ps(_mm256_loadu_ps(a1 + i), xv, c1);
    c2 = _mm256_fmadd_ps(_mm256_loadu_ps(a2 + i), xv, c2);
    c3 = _mm256_fmadd_ps(_mm256_loadu_ps(a3 + i), xv, c3);
  }
  __m128 s0 = _mm_add_ps(_mm256_castps256_ps128(c0), _mm256_extractf128_ps(c0, 1));
  __m128 s1 = _mm_add_ps(_mm256_castps256_ps128(c1), _mm256_extractf128_ps(c1, 1));
  __m128 s2 = _mm_add_ps(_mm256_castps256_ps128(c2), _mm256_extractf128_ps(c2, 1));
  __m128 s3 = _mm_add_ps(_mm256_castps256_ps128(c3), _mm256_extractf128_ps(c3, 1));
  /* hadd(hadd(s0, s1), hadd(s2, s3)) adds exactly (l0 + l1) + (l2 + l3) per row */
  return _mm_hadd_ps(_mm_hadd_ps(s0, s1), _mm_hadd_ps(s2, s3));
}

/* kio_blas_dot21: the 4x2 (k1 = 0) and 4x1 (k1 = 1) kernels. */
static inline KIO_BLAS_AVX2 float kio_blas_dot21_avx2(const float *a, const float *x, int32_t nb,
                                                      int k1) {
  __m128 u = _mm_setzero_ps(), v = _mm_setzero_ps();
  int32_t i = 0, n = nb;
  if (n & 4) {
    u = _mm_add_ps(u, _mm_mul_ps(_mm_loadu_ps(a), _mm_loadu_ps(x)));
    i = 4;
    n -= 4;
  }
  for (; n > 0; i += 8, n -= 8) {
    u = _mm_add_ps(u, _mm_mul_ps(_mm_loadu_ps(a + i), _mm_loadu_ps(x + i)));
    __m128 p = _mm_mul_ps(_mm_loadu_ps(a + i + 4), _mm_loadu_ps(x + i + 4));
    if (k1) v = _mm_add_ps(v, p);
    else u = _mm_add_ps(u, p);
  }
  if (k1) u = _mm_add_ps(u, v);
  return kio_blas_hsum4_avx(u);
}

/* kio_blas_gemv_row for the HSW/SKX lanes (no SkylakeX small-m case). */
static inline KIO_BLAS_AVX2 float kio_blas_gemv_row_avx2(int prof, float y, const float *a,
                                                         const float *x, int32_t D, float alpha,
                                                         int32_t j, int32_t n) {
  const int kind = j < (n & ~3) ? 4 : j < (n & ~3) + (n & 2) ? 2 : 1;
  const int32_t m3 = D & 3, nb_total = D - m3;
  for (int32_t off = 0; off < nb_total; off += 4096) {
    int32_t nb = nb_total - off < 4096 ? nb_total - off : 4096;
    float t = kind == 4 ? kio_blas_dot4_avx2(a + off, x + off, nb)
                        : kio_blas_dot21_avx2(a + off, x + off, nb, kind == 1);
    float p = t * alpha;
    y = y + p;
  }
  return kio_blas_gemv_tail(prof, y, a + nb_total, x + nb_total, 1, m3, alpha);
}
#endif

#endif
