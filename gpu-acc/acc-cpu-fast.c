/* The CPU accumulator (gmm-acc-stats-ali --use-gpu=no and every CPU
 * fallback): Kaldi's AccumulateFromDiag frame by frame, bit-identical to
 * the stock Kaldi build whose OpenBLAS kernels the rounding profile names
 * (base/matrix/blas-profile.h), with AVX2+FMA where the CPU has them
 * (KALDI_GPU_DEV_NO_SIMD=1 forces the scalar code, which gives the same
 * bits). What goes through OpenBLAS in Kaldi:
 *  - loglikes: cblas_sgemv (sgemv_t), in blas-order.h's order for the
 *    profile (the 4x4 kernel's HSW/SKX lanes also in AVX2 here,
 *    blas-order-x86.h);
 *  - stats: the mean and variance accumulators take cblas_dger = per
 *    component daxpy(post, x): fused for the profile's first
 *    kio_blas_daxpy_fused dims, mul then add after. Mean products post*x are
 *    exact in double, so only the variance (post*x^2) sees the difference. */
#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "acc-internal.h"
#include "acc-math.h"
#include "base/matrix/blas-order-x86.h"
#include "base/sys/settings.h"

static int g_simd = -1;

/* Decided once; threads that race to decide write the same answer. */
static int use_simd(void) {
  int v = __atomic_load_n(&g_simd, __ATOMIC_RELAXED);
  if (v >= 0) return v;
  __builtin_cpu_init();
  v = !kio_setting_flag(KIO_SET_DEV_NO_SIMD, 0) && __builtin_cpu_supports("avx2") &&
      __builtin_cpu_supports("fma");
  __atomic_store_n(&g_simd, v, __ATOMIC_RELAXED);
  return v;
}

/* ---------------- scalar ---------------- */

static float row_scalar(float y, const float *a, const float *xv, int D, float alpha, int j,
                        int M, int prof) {
  return kio_blas_gemv_row(prof, y, a, xv, 1, D, kio_kaldi_stride(D), alpha, j, M);
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
  int k = kio_blas_daxpy_fused(prof, D);
  var_scalar(var, gm, x2, 0, k, 1);
  var_scalar(var, gm, x2, k, D, 0);
}

/* ---------------- AVX2 + FMA ---------------- */

#define AVX2 __attribute__((target("avx2,fma")))

AVX2 static inline void stats_avx2(double *mean, double *var, double gm, const double *xd,
                            const double *x2, int D, int prof) {
  __m256d g = _mm256_set1_pd(gm);
  int D4 = D & ~3, k = kio_blas_daxpy_fused(prof, D);
  int d = 0;
  for (; d < D4; d += 4) {
    __m256d m = _mm256_loadu_pd(mean + d), v = _mm256_loadu_pd(var + d);
    __m256d q = _mm256_loadu_pd(x2 + d);
    m = _mm256_fmadd_pd(g, _mm256_loadu_pd(xd + d), m);
    if (d < k) v = _mm256_fmadd_pd(g, q, v);  /* k: a multiple of 16, or D */
    else v = _mm256_add_pd(v, _mm256_mul_pd(g, q));
    _mm256_storeu_pd(mean + d, m);
    _mm256_storeu_pd(var + d, v);
  }
  for (; d < D; d++) {
    mean[d] = fma(gm, xd[d], mean[d]);
    if (d < k) var[d] = fma(gm, x2[d], var[d]);
    else {
      double p = gm * x2[d];
      var[d] = var[d] + p;
    }
  }
}

/* Components j..j+3 of a pdf (all in the 4x4 kernel, HSW/SKX lanes): the
 * four log-likelihoods into ll[0..3]. */
AVX2 static void loglike4_avx2(const kio_diag_gmm *g, int32_t j, const float *x,
                               const float *x2, float *ll, int prof) {
  int D = g->dim, m3 = D & 3, nb = D - m3;
  const float *mi = g->means_invvars + (size_t)j * D, *iv = g->inv_vars + (size_t)j * D;
  float y[4], d1[4], d2[4];
  _mm_storeu_ps(d1, nb > 0 ? kio_blas_dot4x4_avx2(mi, D, x, nb) : _mm_setzero_ps());
  _mm_storeu_ps(d2, nb > 0 ? kio_blas_dot4x4_avx2(iv, D, x2, nb) : _mm_setzero_ps());
  for (int r = 0; r < 4; r++) {
    y[r] = g->gconsts[j + r];
    if (nb > 0) y[r] = y[r] + d1[r] * 1.0f;
    y[r] = kio_blas_gemv_tail(prof, y[r], mi + (size_t)r * D + nb, x + nb, 1, m3, 1.0f);
    if (nb > 0) y[r] = y[r] + d2[r] * -0.5f;
    ll[r] = kio_blas_gemv_tail(prof, y[r], iv + (size_t)r * D + nb, x2 + nb, 1, m3, -0.5f);
  }
}

AVX2 static void rows_avx2(const kio_diag_gmm *g, int32_t m0, const float *x, const float *x2,
                           float *ll, int prof) {
  int32_t M = g->num_comp, D = g->dim;
  if (D <= 4096)
    for (; m0 + 4 <= (M & ~3); m0 += 4) loglike4_avx2(g, m0, x, x2, ll + m0, prof);
  for (int32_t m = m0; m < M; m++) {
    const float *mi = g->means_invvars + (size_t)m * D, *iv = g->inv_vars + (size_t)m * D;
    float y = kio_blas_gemv_row_avx2(prof, g->gconsts[m], mi, x, D, 1.0f, m, M);
    ll[m] = kio_blas_gemv_row_avx2(prof, y, iv, x2, D, -0.5f, m, M);
  }
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
  if (simd && kio_blas_gemv_hsw_lanes(prof, D)) {
    rows_avx2(g, 0, x, x2, ll, prof);
  } else {
    for (int32_t m = 0; m < M; m++) {
      const float *mi = g->means_invvars + (size_t)m * D, *iv = g->inv_vars + (size_t)m * D;
      float y = row_scalar(g->gconsts[m], mi, x, D, 1.0f, m, M, prof);
      ll[m] = row_scalar(y, iv, x2, D, -0.5f, m, M, prof);
    }
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

float gacc_cpu_component_posteriors(const kio_diag_gmm *g, const float *x, float *x2,
                                    float *post) {
  for (int32_t d = 0; d < g->dim; d++) x2[d] = x[d] * x[d];
  return frame_post(g, x, x2, post, kio_blas_profile(), use_simd());
}

int gacc_accumulate_frames_cpu(gacc_acc *a, const gacc_utt *u, int32_t t0, float *like_io) {
  gacc_stats *s = &a->st;
  const kio_matrix *f = u->feats;
  int32_t D = a->am->dim;
  int prof = kio_blas_profile(), simd = use_simd();
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

AVX2 static float row_avx2(int prof, float y, const float *a, const float *xv, int D, float alpha,
                           int j, int M) {
  return kio_blas_gemv_row_avx2(prof, y, a, xv, D, alpha, j, M);
}

float gacc_cpu_gemv_row(float y, const float *a, const float *xv, int D, int lda, float alpha,
                        int j, int M) {
  int prof = kio_blas_profile();
  if (use_simd() && kio_blas_gemv_hsw_lanes(prof, D) && lda == kio_kaldi_stride(D))
    return row_avx2(prof, y, a, xv, D, alpha, j, M);
  return kio_blas_gemv_row(prof, y, a, xv, 1, D, lda, alpha, j, M);
}

void gacc_cpu_stats_row(double *mean, double *var, double post, const double *xd,
                        const double *x2, int D) {
  int prof = kio_blas_profile();
  if (use_simd()) stats_avx2(mean, var, post, xd, x2, D, prof);
  else stats_scalar(mean, var, post, xd, x2, D, prof);
}
