/* The feature programs' arithmetic, in Kaldi's float operation order (see
 * feat-ops.h). Built with -ffp-contract=off: every fused multiply-add here is
 * an explicit fmaf (or _mm256_fmadd_ps), where OpenBLAS's kernels use one. */
#include "feat-ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/sys/simd.h"
#include "base/matrix/blas-profile.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define FEAT_X86 1
#else
#define FEAT_X86 0
#endif

int kio_featop_simd(void) { return kio_simd_level() >= KIO_SIMD_AVX2; }

/* ---- apply-cmvn (transform/cmvn.cc: ApplyCmvn, ApplyCmvnReverse) ---- */
int kio_featop_cmvn_norm(const double *stats, int32_t rows, int32_t dim, int var_norm,
                         int reverse, float *offset, float *scale,
                         kio_featop_warn warn, void *user) {
  double count = stats[dim];
  for (int32_t d = 0; d < dim; d++) {
    double mean = stats[d] / count, off, sc;
    if (!var_norm && !reverse) {
      /* offset.AddVec(-1.0 / count, mean_stats): a float alpha times the
       * double sum, rounded to float. */
      float alpha = (float)(-1.0 / count);
      offset[d] = (float)((double)alpha * stats[d]);
      scale[d] = 1.0f;
      continue;
    }
    if (!var_norm) {
      sc = 1.0;
      off = mean;
    } else {
      double var = stats[(dim + 1) + d] / count - mean * mean, floor = 1.0e-20;
      if (var < floor) {
        if (warn) warn(user, var);
        var = floor;
      }
      if (reverse) {
        sc = sqrt(var);
        off = mean;
      } else {
        sc = 1.0 / sqrt(var);
        if (sc != sc || 1 / sc == 0.0) return KIO_FEATOP_NAN;
        off = -(mean * sc);
      }
    }
    offset[d] = (float)off;
    scale[d] = (float)sc;
  }
  (void)rows;
  return 0;
}

#if FEAT_X86
/* The AVX-512 version's flat walk (feat-simd.c), 8 lanes: offset/scale
 * repeated to lcm(dim, 8) values; 0 when dim is too large for that. */
int32_t kio_featop_cmvn_pattern(int32_t dim, int32_t lanes, const float *offset,
                                const float *scale, float *offp, float *scp) {
  int32_t g = dim, b = lanes;
  while (b) { int32_t r = g % b; g = b; b = r; }
  int32_t L = dim / g * lanes;  /* lcm(dim, lanes) */
  if (L > 1024) return 0;
  for (int32_t e = 0; e < L; e++) offp[e] = offset[e % dim], scp[e] = scale[e % dim];
  return L;
}

__attribute__((target("avx2")))
static int cmvn_apply_avx2(float *x, int32_t frames, int32_t dim, int var_norm,
                           const float *offset, const float *scale) {
  float offp[1024], scp[1024];
  int32_t L = kio_featop_cmvn_pattern(dim, 8, offset, scale, offp, scp);
  if (!L) return 0;
  size_t n = (size_t)frames * (size_t)dim, e = 0;
  int32_t p = 0;
  for (; e + 8 <= n; e += 8) {
    __m256 v = _mm256_loadu_ps(x + e);
    if (var_norm) v = _mm256_mul_ps(v, _mm256_loadu_ps(scp + p));
    _mm256_storeu_ps(x + e, _mm256_add_ps(v, _mm256_loadu_ps(offp + p)));
    if ((p += 8) == L) p = 0;
  }
  for (; e < n; e++, p++) {
    float v = x[e];
    if (var_norm) v = v * scp[p];
    x[e] = v + offp[p];
  }
  return 1;
}
#endif

void kio_featop_cmvn_apply(float *x, int32_t frames, int32_t dim, int var_norm,
                           const float *offset, const float *scale) {
#if FEAT_X86
  if (kio_simd_level() >= KIO_SIMD_AVX512) {
    kio_featop_cmvn_apply_avx512(x, frames, dim, var_norm, offset, scale);
    return;
  }
  if (kio_featop_simd() && cmvn_apply_avx2(x, frames, dim, var_norm, offset, scale)) return;
#endif
  for (int32_t t = 0; t < frames; t++) {
    float *r = x + (size_t)t * dim;
    if (var_norm)
      for (int32_t d = 0; d < dim; d++) r[d] = r[d] * scale[d];
    for (int32_t d = 0; d < dim; d++) r[d] = r[d] + offset[d];
  }
}

/* ---- add-deltas (feat/feature-functions.cc: DeltaFeatures) ---- */
int kio_featop_delta_scales(int order, int window, float ***scales_out, int **dims_out) {
  float **sc = calloc((size_t)order + 1, sizeof *sc);
  int *dims = calloc((size_t)order + 1, sizeof *dims);
  if (!sc || !dims) { free(sc); free(dims); return -1; }
  dims[0] = 1;
  sc[0] = calloc(1, sizeof(float));
  if (!sc[0]) goto fail;
  sc[0][0] = 1.0f;
  for (int i = 1; i <= order; i++) {
    int prev_dim = dims[i - 1], prev_off = (prev_dim - 1) / 2, cur_off = prev_off + window;
    dims[i] = prev_dim + 2 * window;
    sc[i] = calloc((size_t)dims[i], sizeof(float));
    if (!sc[i]) goto fail;
    float normalizer = 0.0f;
    for (int j = -window; j <= window; j++) {
      normalizer += (float)(j * j);
      for (int k = -prev_off; k <= prev_off; k++)
        sc[i][j + k + cur_off] += (float)j * sc[i - 1][k + prev_off];
    }
    float alpha = (float)(1.0 / normalizer);  /* Scale(1.0 / normalizer) */
    for (int m = 0; m < dims[i]; m++) sc[i][m] = sc[i][m] * alpha;
  }
  *scales_out = sc;
  *dims_out = dims;
  return 0;
fail:
  for (int i = 0; i <= order; i++) free(sc[i]);
  free(sc);
  free(dims);
  return -1;
}

/* y += a * x as the profile's OpenBLAS saxpy: the first
 * kio_blas_saxpy_fused(n) elements fused, the rest mul then add. */
static inline void saxpy(float *y, float a, const float *x, int32_t n) {
  int32_t n1 = kio_blas_saxpy_fused(kio_blas_profile(), n), i = 0;
  for (; i < n1; i++) y[i] = fmaf(a, x[i], y[i]);
  for (; i < n; i++) y[i] = y[i] + a * x[i];
}

#if FEAT_X86
static void deltas_avx2(const float *in, int32_t frames, int32_t t0, int32_t t1, int32_t dim,
                        int order, float *const *scales, const int *sdims, float *out);
#endif
static void kio_featop_deltas_scalar(const float *in, int32_t frames, int32_t t0, int32_t t1,
                                     int32_t dim, int order, float *const *scales,
                                     const int *sdims, float *out);

void kio_featop_deltas_range(const float *in, int32_t frames, int32_t t0, int32_t t1, int32_t dim,
                             int order, float *const *scales, const int *sdims, float *out) {
#if FEAT_X86
  if (kio_simd_level() >= KIO_SIMD_AVX512) {
    kio_featop_deltas_avx512(in, frames, t0, t1, dim, order, scales, sdims, out);
    return;
  }
  if (kio_featop_simd()) {
    deltas_avx2(in, frames, t0, t1, dim, order, scales, sdims, out);
    return;
  }
#endif
  kio_featop_deltas_scalar(in, frames, t0, t1, dim, order, scales, sdims, out);
}

void kio_featop_deltas(const float *in, int32_t frames, int32_t dim, int order,
                       float *const *scales, const int *sdims, float *out) {
  kio_featop_deltas_range(in, frames, 0, frames, dim, order, scales, sdims, out);
}

#if FEAT_X86
/* feat-simd.c's AVX-512 deltas with 8 lanes: a chunk of 8 dims is all FMA
 * or all mul+add (the fused part is all dims or a multiple of 32); the last dim % 8 dims by
 * masked loads, stored through a buffer (no masked store: slow on some AMD
 * cores); unclamped frames 4 at a time. */
__attribute__((target("avx2,fma"), always_inline))
static inline __m256 tap8(int fused, __m256 s, __m256 x, __m256 acc) {
  return fused ? _mm256_fmadd_ps(s, x, acc) : _mm256_add_ps(acc, _mm256_mul_ps(s, x));
}

__attribute__((target("avx2,fma"), always_inline))
static inline void store8(float *o, __m256 v, int32_t n) {
  if (n == 8) {
    _mm256_storeu_ps(o, v);
  } else {
    float tmp[8];
    _mm256_storeu_ps(tmp, v);
    memcpy(o, tmp, sizeof(float) * (size_t)n);
  }
}

__attribute__((target("avx2,fma")))
static void deltas_avx2(const float *in, int32_t frames, int32_t t0, int32_t t1, int32_t dim,
                        int order, float *const *scales, const int *sdims, float *out) {
  int32_t odim = dim * (order + 1);
  int32_t nfused = kio_blas_saxpy_fused(kio_blas_profile(), dim);
  int32_t maxw = (sdims[order] - 1) / 2;
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (int32_t t = t0; t < t1;) {
    int four = t >= maxw && t + 3 + maxw < frames && t + 4 <= t1;
    for (int i = 0; i <= order; i++) {
      int maxo = (sdims[i] - 1) / 2;
      for (int32_t d = 0; d < dim; d += 8) {
        int32_t n = dim - d < 8 ? dim - d : 8;
        __m256i mk = _mm256_cmpgt_epi32(_mm256_set1_epi32(n), lane);
        int fused = nfused == dim || d + 8 <= nfused;
        float *o = out + (size_t)t * odim + (size_t)i * dim + d;
        if (four) {
          __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
          const float *p = in + (size_t)(t - maxo) * dim + d;
          for (int j = 0; j < 2 * maxo + 1; j++, p += dim) {
            float sc = scales[i][j];
            if (sc == 0.0f) continue;
            __m256 sv = _mm256_set1_ps(sc);
            a0 = tap8(fused, sv, _mm256_maskload_ps(p, mk), a0);
            a1 = tap8(fused, sv, _mm256_maskload_ps(p + dim, mk), a1);
            a2 = tap8(fused, sv, _mm256_maskload_ps(p + 2 * dim, mk), a2);
            a3 = tap8(fused, sv, _mm256_maskload_ps(p + 3 * dim, mk), a3);
          }
          store8(o, a0, n);
          store8(o + odim, a1, n);
          store8(o + 2 * odim, a2, n);
          store8(o + 3 * odim, a3, n);
          continue;
        }
        __m256 acc = _mm256_setzero_ps();
        for (int j = -maxo; j <= maxo; j++) {
          float sc = scales[i][j + maxo];
          if (sc == 0.0f) continue;
          int32_t f = t + j;
          if (f < 0) f = 0;
          else if (f >= frames) f = frames - 1;
          acc = tap8(fused, _mm256_set1_ps(sc), _mm256_maskload_ps(in + (size_t)f * dim + d, mk), acc);
        }
        store8(o, acc, n);
      }
    }
    t += four ? 4 : 1;
  }
}
#endif

static void kio_featop_deltas_scalar(const float *in, int32_t frames, int32_t t0, int32_t t1,
                                     int32_t dim, int order, float *const *scales,
                                     const int *sdims, float *out) {
  int32_t odim = dim * (order + 1);
  for (int32_t t = t0; t < t1; t++) {
    float *o = out + (size_t)t * odim;
    memset(o, 0, sizeof(float) * (size_t)odim);
    for (int i = 0; i <= order; i++) {
      int maxo = (sdims[i] - 1) / 2;
      for (int j = -maxo; j <= maxo; j++) {
        int32_t f = t + j;
        if (f < 0) f = 0;
        else if (f >= frames) f = frames - 1;
        float s = scales[i][j + maxo];
        if (s != 0.0f) saxpy(o + (size_t)i * dim, s, in + (size_t)f * dim, dim);
      }
    }
  }
}

/* ---- splice-feats (SpliceFrames) ---- */
void kio_featop_splice(const float *in, int32_t frames, int32_t dim, int left, int right,
                       float *out) {
  int32_t ctx = left + right + 1;
  for (int32_t t = 0; t < frames; t++) {
    float *o = out + (size_t)t * dim * ctx;
    for (int32_t j = -left; j <= right; j++) {
      int32_t f = t + j;
      if (f < 0) f = 0;
      if (f >= frames) f = frames - 1;
      memcpy(o + (size_t)(j + left) * dim, in + (size_t)f * dim, sizeof(float) * (size_t)dim);
    }
  }
}

/* ---- transform-feats: out = in * W^T (+ offset), every output the SEQ
 * chain (blas-order.h) over k = 0..K-1 from 0, fused or mul then add, then
 * C = 0 + acc (K in one block: the caller sends blocked K elsewhere).
 * wt: W's first K columns transposed (K x rows) for the vector path. ---- */
#if FEAT_X86
#define AVX2_AI __attribute__((target("avx2,fma"), always_inline))
static inline AVX2_AI __m256 mac8(int fused, __m256 x, __m256 w, __m256 acc) {
  return fused ? _mm256_fmadd_ps(x, w, acc) : _mm256_add_ps(acc, _mm256_mul_ps(x, w));
}

static inline AVX2_AI void gemm_avx2_body(int fused, const float *in, int32_t stride,
                                          int32_t frames, int32_t k, const float *wt,
                                          int32_t rows, float *out) {
  int32_t r8 = rows & ~7, t = 0;
  const __m256 z = _mm256_setzero_ps();
  /* 8 frames x 8 outputs per tile: 8 independent chains share each W^T load
   * (one frame at a time, below, waits on the latency). */
  for (; t + 8 <= frames && r8 > 0; t += 8) {
    const float *x = in + (size_t)t * stride;
    float *o = out + (size_t)t * rows;
    for (int32_t j = 0; j < r8; j += 8) {
      __m256 a[8];
      _Pragma("GCC unroll 8")
      for (int f = 0; f < 8; f++) a[f] = z;
      for (int32_t q = 0; q < k; q++) {
        __m256 w = _mm256_loadu_ps(wt + (size_t)q * rows + j);
        _Pragma("GCC unroll 8")
        for (int f = 0; f < 8; f++) a[f] = mac8(fused, _mm256_set1_ps(x[(size_t)f * stride + q]), w, a[f]);
      }
      _Pragma("GCC unroll 8")
      for (int f = 0; f < 8; f++) _mm256_storeu_ps(o + (size_t)f * rows + j, _mm256_add_ps(z, a[f]));
    }
    for (int32_t f = 0; f < 8; f++)
      for (int32_t j = r8; j < rows; j++)
        o[(size_t)f * rows + j] =
            kio_blas_gemm_chain(KIO_GEMM_SEQ, fused, x + (size_t)f * stride, 1, wt + j, rows, k) + 0.0f;
  }
  for (; t < frames; t++) {
    const float *x = in + (size_t)t * stride;
    float *o = out + (size_t)t * rows;
    int32_t j = 0;
    for (; j + 32 <= r8; j += 32) {
      __m256 a0 = z, a1 = z, a2 = z, a3 = z;
      for (int32_t q = 0; q < k; q++) {
        __m256 xv = _mm256_set1_ps(x[q]);
        const float *w = wt + (size_t)q * rows + j;
        a0 = mac8(fused, xv, _mm256_loadu_ps(w), a0);
        a1 = mac8(fused, xv, _mm256_loadu_ps(w + 8), a1);
        a2 = mac8(fused, xv, _mm256_loadu_ps(w + 16), a2);
        a3 = mac8(fused, xv, _mm256_loadu_ps(w + 24), a3);
      }
      _mm256_storeu_ps(o + j, _mm256_add_ps(z, a0));
      _mm256_storeu_ps(o + j + 8, _mm256_add_ps(z, a1));
      _mm256_storeu_ps(o + j + 16, _mm256_add_ps(z, a2));
      _mm256_storeu_ps(o + j + 24, _mm256_add_ps(z, a3));
    }
    for (; j < r8; j += 8) {
      __m256 a0 = z;
      for (int32_t q = 0; q < k; q++)
        a0 = mac8(fused, _mm256_set1_ps(x[q]), _mm256_loadu_ps(wt + (size_t)q * rows + j), a0);
      _mm256_storeu_ps(o + j, _mm256_add_ps(z, a0));
    }
    for (; j < rows; j++) o[j] = kio_blas_gemm_chain(KIO_GEMM_SEQ, fused, x, 1, wt + j, rows, k) + 0.0f;
  }
}

__attribute__((target("avx2,fma")))
static void gemm_avx2(int fused, const float *in, int32_t stride, int32_t frames, int32_t k,
                      const float *wt, int32_t rows, float *out) {
  if (fused) gemm_avx2_body(1, in, stride, frames, k, wt, rows, out);
  else gemm_avx2_body(0, in, stride, frames, k, wt, rows, out);
}
#endif

void kio_featop_transform_rows(int fused, const float *in, int32_t stride, int32_t T, int32_t k,
                               const float *wt, int32_t rows, const float *offset, float *out) {
#if FEAT_X86
  if (kio_simd_level() >= KIO_SIMD_AVX512) {  /* the offset added in the kernel */
    kio_featop_transform_avx512(fused, in, stride, T, k, wt, rows, offset, out);
    return;
  }
  if (kio_featop_simd()) {
    gemm_avx2(fused, in, stride, T, k, wt, rows, out);
  } else
#endif
  {
    for (int32_t t = 0; t < T; t++) {
      const float *x = in + (size_t)t * stride;
      for (int32_t j = 0; j < rows; j++)
        out[(size_t)t * rows + j] = 0.0f + kio_blas_gemm_chain(KIO_GEMM_SEQ, fused, x, 1, wt + j, rows, k);
    }
  }
  if (offset)
    for (int32_t t = 0; t < T; t++)
      for (int32_t j = 0; j < rows; j++) out[(size_t)t * rows + j] += offset[j];
}

void kio_featop_transform_range(int fused, const float *in, int32_t t0, int32_t t1, int32_t k,
                                const float *wt, int32_t rows, const float *offset, float *out) {
  kio_featop_transform_rows(fused, in + (size_t)t0 * k, k, t1 - t0, k, wt, rows, offset,
                            out + (size_t)t0 * rows);
}

void kio_featop_transform(int fused, const float *in, int32_t frames, int32_t k, const float *wt,
                          int32_t rows, const float *offset, float *out) {
  kio_featop_transform_range(fused, in, 0, frames, k, wt, rows, offset, out);
}

/* 0.5 * log det(L L^T), L = the first k columns of W (rows x ?, stride ws),
 * as Kaldi computes it in float: TT = L L^T (ssyrk, here one FMA chain per
 * entry), LAPACK ssptrf on the packed upper triangle (Bunch-Kaufman; 1x1
 * pivots without interchanges, the case of well-conditioned TT; a 2x2 pivot
 * sends us to a double Cholesky), each rank-1 update by OpenBLAS sspr
 * (saxpy per column), then SpMatrix::LogDet's float product of the pivots
 * and logf. Not bit-exact in every case: the printed 6 digits agree. */
static double half_logdet_double(const float *w, int32_t rows, int32_t ws, int32_t k) {
  double *a = calloc((size_t)rows * rows, sizeof *a);
  if (!a) return NAN;
  for (int32_t i = 0; i < rows; i++)
    for (int32_t j = 0; j <= i; j++) {
      double s = 0;
      for (int32_t q = 0; q < k; q++) s += (double)w[(size_t)i * ws + q] * w[(size_t)j * ws + q];
      a[(size_t)i * rows + j] = s;
    }
  double ld = 0;
  for (int32_t j = 0; j < rows; j++) {
    double d = a[(size_t)j * rows + j];
    for (int32_t q = 0; q < j; q++) d -= a[(size_t)j * rows + q] * a[(size_t)j * rows + q];
    if (!(d > 0)) { free(a); return NAN; }
    double l = sqrt(d);
    a[(size_t)j * rows + j] = l;
    ld += log(l);
    for (int32_t i = j + 1; i < rows; i++) {
      double s = a[(size_t)i * rows + j];
      for (int32_t q = 0; q < j; q++) s -= a[(size_t)i * rows + q] * a[(size_t)j * rows + q];
      a[(size_t)i * rows + j] = s / l;
    }
  }
  free(a);
  return ld;
}

double kio_featop_half_logdet(const float *w, int32_t rows, int32_t ws, int32_t k) {
  int32_t n = rows;
  /* a[c][r] = TT(r, c) for r <= c (upper, column c) */
  float *a = malloc(sizeof(float) * (size_t)n * n);
  if (!a) return NAN;
  for (int32_t c = 0; c < n; c++)
    for (int32_t r = 0; r <= c; r++) {
      float acc = 0.0f;
      for (int32_t q = 0; q < k; q++) acc = fmaf(w[(size_t)r * ws + q], w[(size_t)c * ws + q], acc);
      a[(size_t)c * n + r] = acc;
    }
  const float alpha = (float)((1.0 + sqrt(17.0)) / 8.0);
  for (int32_t c = n - 1; c >= 0; c--) {
    float akk = fabsf(a[(size_t)c * n + c]), colmax = 0.0f;
    for (int32_t r = 0; r < c; r++) colmax = fmaxf(colmax, fabsf(a[(size_t)c * n + r]));
    if (!(akk >= alpha * colmax) || akk == 0.0f) {
      free(a);
      return half_logdet_double(w, rows, ws, k);
    }
    float r1 = 1.0f / a[(size_t)c * n + c];
    float *x = a + (size_t)c * n;  /* column c, rows 0..c-1 */
    /* sspr: A(0..j, j) += (-r1 * x_j) * x(0..j), j = 0..c-1 */
    for (int32_t j = 0; j < c; j++) {
      if (x[j] == 0.0f) continue;
      float t = -r1 * x[j];
      float *col = a + (size_t)j * n;
      int32_t len = j + 1, i = 0;
      int32_t n1 = kio_blas_saxpy_fused(kio_blas_profile(), len);
      for (; i < n1; i++) col[i] = fmaf(t, x[i], col[i]);
      for (; i < len; i++) col[i] = col[i] + t * x[i];
    }
    for (int32_t r = 0; r < c; r++) x[r] = x[r] * r1;
  }
  float prod = 1.0f, log_prod = 0.0f;
  for (int32_t i = 0; i < n; i++) {
    prod *= a[(size_t)i * n + i];
    if (i == n - 1 || fabsf(prod) < 1.0e-10f || fabsf(prod) > 1.0e+10f) {
      if (prod < 0) prod = -prod;
      log_prod += logf(fabsf(prod));
      prod = 1.0f;
    }
  }
  free(a);
  return (float)(0.5 * (double)log_prod);
}
