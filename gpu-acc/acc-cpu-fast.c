/* The CPU accumulator (gmm-acc-stats-ali --use-gpu=no and every CPU
 * fallback): Kaldi's AccumulateFromDiag frame by frame, bit-identical to
 * the stock Kaldi build on the machine it runs on, with AVX2+FMA where the
 * CPU has them (KALDI_GPU_DEV_NO_SIMD=1 forces the scalar code, which gives the same
 * bits).
 *
 * Kaldi's arithmetic goes through OpenBLAS, whose rounding depends on the
 * kernel OpenBLAS picks for the CPU (DYNAMIC_ARCH) and on how that kernel
 * was compiled; what matters here:
 *  - loglikes: cblas_sgemv (sgemv_t). The dot over the first D - D%4 dims
 *    is the same everywhere we know (acc-math.h); the D%4 tail dims are C
 *    code, contracted into FMAs only where the kernel was compiled with FMA
 *    enabled;
 *  - stats: mean and variance accumulators take cblas_dger = per component
 *    daxpy(post, x) on D - D%16 dims, then daxpy on the D%16 rest. The
 *    first is an FMA micro-kernel (AVX2 and AVX-512 builds), the rest C
 *    code, fused or not as above. Mean products post*x are exact in double,
 *    so only the variance (post*x^2) sees the difference.
 * Profiles (gacc_blas_profile):
 *  - "hsw": Haswell/Zen kernels of a build without -mfma (Debian 12's
 *    OpenBLAS 0.3.21, the bundle's; checked here on AMD EPYC, Zen): tails
 *    of sgemv and daxpy unfused;
 *  - "skx": AVX-512 kernels (built with -march=skylake-avx512): tails fused
 *    (sgemv tail as in acc-math.h, the fixtures' machine; daxpy fully
 *    fused); rows of at most 8 floats with lda == D (Kaldi: D = 4, 8) in
 *    the small-m kernel's order (base/matrix/sgemv-skx-small.h);
 *  - "plain": no FMA anywhere (older CPUs).
 * The default is "skx" on every machine: our output must not depend on the
 * host (Kaldi's does), and skx is the reference hosts' rounding (the
 * fixtures, the H200 host). KALDI_GPU_BLAS_PROFILE=hsw|plain reproduces the Kaldi
 * of another host, for tests against a live Kaldi there. */
#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "acc-internal.h"
#include "acc-math.h"
#include "base/sys/settings.h"

enum { PROF_PLAIN = 0, PROF_HSW = 1, PROF_SKX = 2 };

static int g_profile = -1, g_simd = -1;

static const char *const prof_names[] = { "plain", "hsw", "skx" };

int gacc_blas_profile(void) {
  if (g_profile >= 0) return g_profile;
  const char *e = kio_setting_str(KIO_SET_BLAS_PROFILE);
  int p = -1;
  for (int i = 0; e && i < 3; i++)
    if (!strcmp(e, prof_names[i])) p = i;
  if (p < 0) p = PROF_SKX;
  g_profile = p;
  return p;
}

const char *gacc_blas_profile_name(void) { return prof_names[gacc_blas_profile()]; }

static int use_simd(void) {
  if (g_simd >= 0) return g_simd;
  __builtin_cpu_init();
  g_simd = !kio_setting_flag(KIO_SET_DEV_NO_SIMD, 0) && __builtin_cpu_supports("avx2") &&
           __builtin_cpu_supports("fma");
  return g_simd;
}

/* The D%4 tail of one sgemv row: y + alpha * (a . xv) over m3 dims. */
static inline float row_tail(float y, const float *at, const float *xt, int m3, float alpha,
                             int prof) {
  if (m3 == 0) return y;
  if (prof == PROF_SKX) {
    /* acc-math.h's contracted form */
    if (m3 == 3) {
      float t0 = xt[0] * alpha, t1 = xt[1] * alpha, t2 = xt[2] * alpha;
      float p1 = at[1] * t1;
      return y + fmaf(at[2], t2, fmaf(at[0], t0, p1));
    }
    if (m3 == 2) {
      float t0 = xt[0] * alpha, t1 = xt[1] * alpha;
      float p1 = at[1] * t1;
      return y + fmaf(at[0], t0, p1);
    }
    return fmaf(at[0], xt[0] * alpha, y);
  }
  float t = at[0] * (xt[0] * alpha);
  for (int k = 1; k < m3; k++) {
    float p = at[k] * (xt[k] * alpha);
    t = t + p;
  }
  return y + t;
}

/* ---------------- scalar ---------------- */

static float row_scalar(float y, const float *a, const float *xv, int D, float alpha, int kind,
                        int prof) {
  int m3 = D & 3, nb_total = D - m3;
  for (int off = 0; off < nb_total; off += 4096) {
    int nb = nb_total - off < 4096 ? nb_total - off : 4096;
    float t = kind == GACC_K4 ? gacc_dot_k4(a + off, xv + off, nb)
            : kind == GACC_K2 ? gacc_dot_k2(a + off, xv + off, nb)
                              : gacc_dot_k1(a + off, xv + off, nb);
    float p = t * alpha;
    y = y + p;
  }
  return row_tail(y, a + nb_total, xv + nb_total, m3, alpha, prof);
}

/* var[d] += post * x2[d] for d in [d0, d1): fused or not. */
static void var_scalar(double *var, double gm, const double *x2, int d0, int d1, int fused) {
  for (int d = d0; d < d1; d++) {
    if (fused) var[d] = fma(gm, x2[d], var[d]);
    else {
      double p = gm * x2[d];
      var[d] = var[d] + p;
    }
  }
}

static void stats_scalar(double *mean, double *var, double gm, const double *xd,
                         const double *x2, int D, int prof) {
  for (int d = 0; d < D; d++) mean[d] = fma(gm, xd[d], mean[d]);  /* exact product */
  int k = prof == PROF_PLAIN ? 0 : D & ~15;
  var_scalar(var, gm, x2, 0, k, 1);
  var_scalar(var, gm, x2, k, D, prof == PROF_SKX);
}

/* ---------------- AVX2 + FMA ---------------- */

#define AVX2 __attribute__((target("avx2,fma")))

AVX2 static inline float hsum_pairs(__m128 s) {
  float v[4];
  _mm_storeu_ps(v, s);
  float h0 = v[0] + v[1], h1 = v[2] + v[3];
  return h0 + h1;
}

/* acc-math.h's gacc_dot_k4 with vectors: 8 FMA lanes. */
AVX2 static inline float dot_k4_avx2(const float *a, const float *x, int n) {
  __m256 acc = _mm256_setzero_ps();
  int i = 0;
  if (n & 4) {
    __m128 lo = _mm_fmadd_ps(_mm_loadu_ps(a), _mm_loadu_ps(x), _mm_setzero_ps());
    acc = _mm256_insertf128_ps(acc, lo, 0);
    i = 4;
    n -= 4;
  }
  if (n & 8) {
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(x + i), acc);
    i += 8;
    n -= 8;
  }
  for (; n > 0; i += 16, n -= 16) {
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(x + i), acc);
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(x + i + 8), acc);
  }
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  return hsum_pairs(s);
}

/* gacc_dot_k2 (k1 = 0) and gacc_dot_k1 (k1 = 1): 4 lanes, mul then add. */
AVX2 static inline float dot_sse(const float *a, const float *x, int n, int k1) {
  __m128 u = _mm_setzero_ps(), v = _mm_setzero_ps();
  int i = 0;
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
  return hsum_pairs(u);
}

AVX2 static float row_avx2(float y, const float *a, const float *xv, int D, float alpha,
                           int kind, int prof) {
  int m3 = D & 3, nb_total = D - m3;
  for (int off = 0; off < nb_total; off += 4096) {
    int nb = nb_total - off < 4096 ? nb_total - off : 4096;
    float t = kind == GACC_K4 ? dot_k4_avx2(a + off, xv + off, nb)
                              : dot_sse(a + off, xv + off, nb, kind == GACC_K1);
    float p = t * alpha;
    y = y + p;
  }
  return row_tail(y, a + nb_total, xv + nb_total, m3, alpha, prof);
}

AVX2 static inline void stats_avx2(double *mean, double *var, double gm, const double *xd,
                            const double *x2, int D, int prof) {
  __m256d g = _mm256_set1_pd(gm);
  int D4 = D & ~3, k = prof == PROF_PLAIN ? 0 : D & ~15;
  int fused_rest = prof == PROF_SKX;
  int d = 0;
  for (; d < D4; d += 4) {
    __m256d m = _mm256_loadu_pd(mean + d), v = _mm256_loadu_pd(var + d);
    __m256d q = _mm256_loadu_pd(x2 + d);
    m = _mm256_fmadd_pd(g, _mm256_loadu_pd(xd + d), m);
    if (d < k || fused_rest) v = _mm256_fmadd_pd(g, q, v);
    else v = _mm256_add_pd(v, _mm256_mul_pd(g, q));
    _mm256_storeu_pd(mean + d, m);
    _mm256_storeu_pd(var + d, v);
  }
  for (; d < D; d++) {
    mean[d] = fma(gm, xd[d], mean[d]);
    if (d < k || fused_rest) var[d] = fma(gm, x2[d], var[d]);
    else {
      double p = gm * x2[d];
      var[d] = var[d] + p;
    }
  }
}

/* Components j..j+3 of a pdf (all in the 8-lane kernel, as OpenBLAS's 4x4
 * micro-kernel takes them): the lanes of each row as in dot_k4_avx2, the
 * four rows interleaved; the reductions ((s0+s1)+(s2+s3) per row) with two
 * horizontal adds, which add exactly those pairs. Returns the four
 * log-likelihoods in ll[0..3]. */
AVX2 static inline __m128 dot4_k4_avx2(const float *a, int lda, const float *x, int n) {
  __m256 c0 = _mm256_setzero_ps(), c1 = c0, c2 = c0, c3 = c0;
  const float *a0 = a, *a1 = a + lda, *a2 = a + 2 * (size_t)lda, *a3 = a + 3 * (size_t)lda;
  int i = 0;
  if (n & 4) {
    __m128 xv = _mm_loadu_ps(x), z = _mm_setzero_ps();
    c0 = _mm256_insertf128_ps(c0, _mm_fmadd_ps(_mm_loadu_ps(a0), xv, z), 0);
    c1 = _mm256_insertf128_ps(c1, _mm_fmadd_ps(_mm_loadu_ps(a1), xv, z), 0);
    c2 = _mm256_insertf128_ps(c2, _mm_fmadd_ps(_mm_loadu_ps(a2), xv, z), 0);
    c3 = _mm256_insertf128_ps(c3, _mm_fmadd_ps(_mm_loadu_ps(a3), xv, z), 0);
    i = 4;
    n -= 4;
  }
  /* OpenBLAS: an 8-wide step if n & 8, then 16-wide steps of two 8-wide
   * FMAs into the same lanes: the same as 8-wide steps in order. */
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
  return _mm_hadd_ps(_mm_hadd_ps(s0, s1), _mm_hadd_ps(s2, s3));
}

/* y (4 rows) + alpha * tail dot over the m3 dims after nb, as row_tail. */
AVX2 static inline __m128 tail4_avx2(__m128 y, const float *a, int lda, const float *xt,
                                     int m3, float alpha, int prof) {
  if (m3 == 0) return y;
  __m128 av[3] = { _mm_setzero_ps(), _mm_setzero_ps(), _mm_setzero_ps() };
  __m128 tv[3] = { av[0], av[0], av[0] };
  for (int k = 0; k < m3; k++) {
    av[k] = _mm_setr_ps(a[k], a[lda + k], a[2 * (size_t)lda + k], a[3 * (size_t)lda + k]);
    tv[k] = _mm_set1_ps(xt[k] * alpha);
  }
  if (prof == PROF_SKX) {
    if (m3 == 3)
      return _mm_add_ps(y, _mm_fmadd_ps(av[2], tv[2],
                                        _mm_fmadd_ps(av[0], tv[0], _mm_mul_ps(av[1], tv[1]))));
    if (m3 == 2) return _mm_add_ps(y, _mm_fmadd_ps(av[0], tv[0], _mm_mul_ps(av[1], tv[1])));
    return _mm_fmadd_ps(av[0], tv[0], y);
  }
  __m128 t = _mm_mul_ps(av[0], tv[0]);
  for (int k = 1; k < m3; k++) t = _mm_add_ps(t, _mm_mul_ps(av[k], tv[k]));
  return _mm_add_ps(y, t);
}

AVX2 static void loglike4_avx2(const kio_diag_gmm *g, int32_t j, const float *x,
                               const float *x2, float *ll, int prof) {
  int D = g->dim, m3 = D & 3, nb = D - m3;
  const float *mi = g->means_invvars + (size_t)j * D, *iv = g->inv_vars + (size_t)j * D;
  __m128 y = _mm_loadu_ps(g->gconsts + j);
  if (nb > 0) y = _mm_add_ps(y, _mm_mul_ps(dot4_k4_avx2(mi, D, x, nb), _mm_set1_ps(1.0f)));
  y = tail4_avx2(y, mi + nb, D, x + nb, m3, 1.0f, prof);
  if (nb > 0) y = _mm_add_ps(y, _mm_mul_ps(dot4_k4_avx2(iv, D, x2, nb), _mm_set1_ps(-0.5f)));
  y = tail4_avx2(y, iv + nb, D, x2 + nb, m3, -0.5f, prof);
  _mm_storeu_ps(ll, y);
}

/* ---------------- one frame ---------------- */

/* glibc's expf, as Kaldi calls it; below -0x1.9fe368p6 it only raises
 * underflow (errno) and returns 0, which is what we return at once. */
static inline float kaldi_expf(float v) { return v < -0x1.9fe368p6f ? 0.0f : expf(v); }

/* Log-likelihoods, softmax (Kaldi's ApplySoftMax), returns max + log(sum);
 * ll receives the posteriors. */
static float frame_post(const kio_diag_gmm *g, const float *x, const float *x2, float *ll,
                        int prof, int simd) {
  int32_t M = g->num_comp, D = g->dim;
  if (M <= 0) return -INFINITY;
  int32_t m0 = 0;
  if (prof == PROF_SKX && kio_sgemv_skx_small(D, kio_kaldi_stride(D))) {
    /* SkylakeX's small-m kernel (D = 4, 8): scalar, in its order */
    for (int32_t m = 0; m < M; m++) {
      const float *mi = g->means_invvars + (size_t)m * D, *iv = g->inv_vars + (size_t)m * D;
      float y = kio_sgemv_skx_small_row(g->gconsts[m], mi, x, 1, D, 1.0f, m, M);
      ll[m] = kio_sgemv_skx_small_row(y, iv, x2, 1, D, -0.5f, m, M);
    }
    m0 = M;
  }
  if (simd && D <= 4096)
    for (; m0 + 4 <= (M & ~3); m0 += 4) loglike4_avx2(g, m0, x, x2, ll + m0, prof);
  for (int32_t m = m0; m < M; m++) {
    int kind = gacc_kernel_kind(m, M);
    const float *mi = g->means_invvars + (size_t)m * D, *iv = g->inv_vars + (size_t)m * D;
    float y;
    if (simd) {
      y = row_avx2(g->gconsts[m], mi, x, D, 1.0f, kind, prof);
      y = row_avx2(y, iv, x2, D, -0.5f, kind, prof);
    } else {
      y = row_scalar(g->gconsts[m], mi, x, D, 1.0f, kind, prof);
      y = row_scalar(y, iv, x2, D, -0.5f, kind, prof);
    }
    ll[m] = y;
  }
  float mx = -INFINITY;
  for (int32_t m = 0; m < M; m++)
    if (ll[m] > mx) mx = ll[m];
  float s = (ll[0] = kaldi_expf(ll[0] - mx));
  for (int32_t m = 1; m < M; m++) s += (ll[m] = kaldi_expf(ll[m] - mx));
  float inv = (float)(1.0 / (double)s);
  for (int32_t m = 0; m < M; m++) ll[m] *= inv;
  return mx + logf(s);
}

int gacc_accumulate_frames_cpu(gacc_acc *a, const gacc_utt *u, int32_t t0, float *like_io) {
  gacc_stats *s = &a->st;
  const kio_matrix *f = u->feats;
  int32_t D = a->am->dim;
  int prof = gacc_blas_profile(), simd = use_simd();
  double *xd = a->xd, *x2d = a->xd + D;
  float like = *like_io;
  for (int32_t t = t0; t < f->rows; t++) {
    int32_t tid = u->ali[t], pdf = a->tm->tid2pdf[tid];
    s->tacc[tid] += 1.0;
    const kio_diag_gmm *g = &a->am->pdfs[pdf];
    const float *x = f->data + (size_t)t * f->cols;
    for (int32_t d = 0; d < D; d++) {
      a->x2[d] = x[d] * x[d];
      xd[d] = (double)x[d];
      x2d[d] = xd[d] * xd[d];
    }
    float l = frame_post(g, x, a->x2, a->ll, prof, simd);
    if (isnan(l) || isinf(l)) return gacc_bad_like(u->key, t);
    size_t g0 = (size_t)s->pdf_offset[pdf];
    for (int32_t m = 0; m < g->num_comp; m++) {
      double gm = (double)a->ll[m];
      /* post 0: Kaldi adds 0 * x, which leaves every (finite) sum as it is */
      if (gm == 0.0) continue;
      double *mean = s->mean_acc + (g0 + (size_t)m) * (size_t)D;
      double *var = s->var_acc + (g0 + (size_t)m) * (size_t)D;
      s->occ[g0 + (size_t)m] += gm;
      if (simd) stats_avx2(mean, var, gm, xd, x2d, D, prof);
      else stats_scalar(mean, var, gm, xd, x2d, D, prof);
    }
    s->total_like += (double)(l * 1.0f);
    s->total_frames += 1.0;
    like += l;
  }
  *like_io = like;
  return KIO_OK;
}

int gacc_accumulate_utt_cpu(gacc_acc *a, const gacc_utt *u, gacc_utt_result *r) {
  float like = 0.0f;
  if (gacc_accumulate_frames_cpu(a, u, 0, &like) != KIO_OK) return KIO_ERR;
  r->like = like;
  r->frames = u->feats->rows;
  return KIO_OK;
}

/* ---------------- entry points for checks (tools/acc-blas-check) ---------------- */

float gacc_cpu_gemv_row(float y, const float *a, const float *xv, int D, int lda, float alpha,
                        int j, int M) {
  int kind = gacc_kernel_kind(j, M), prof = gacc_blas_profile();
  if (prof == PROF_SKX && kio_sgemv_skx_small(D, lda))
    return kio_sgemv_skx_small_row(y, a, xv, 1, D, alpha, j, M);
  return use_simd() ? row_avx2(y, a, xv, D, alpha, kind, prof)
                    : row_scalar(y, a, xv, D, alpha, kind, prof);
}

void gacc_cpu_stats_row(double *mean, double *var, double post, const double *xd,
                        const double *x2, int D) {
  int prof = gacc_blas_profile();
  if (use_simd()) stats_avx2(mean, var, post, xd, x2, D, prof);
  else stats_scalar(mean, var, post, xd, x2, D, prof);
}
