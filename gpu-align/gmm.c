/* The AmDiagGmm flattened for likelihood computation, and CPU log-likelihoods
 * (reference 3.4, 5.5). */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "base/sys/log.h"
#include "base/sys/settings.h"
#include "align-cpu.h"

int galign_gmm_init(galign_gmm *g, const kio_am_gmm *am) {
  memset(g, 0, sizeof *g);
  int64_t ng = 0;
  for (int32_t j = 0; j < am->num_pdfs; j++) {
    if (am->pdfs[j].dim != am->dim) {
      KIO_ERROR("pdf %d has dim %d, model dim %d", j, am->pdfs[j].dim, am->dim);
      return KIO_ERR;
    }
    ng += am->pdfs[j].num_comp;
  }
  if (ng > INT32_MAX / (am->dim > 0 ? am->dim : 1)) {
    KIO_ERROR("Model too large: %lld Gaussians", (long long)ng);
    return KIO_ERR;
  }
  g->dim = am->dim;
  g->num_pdfs = am->num_pdfs;
  const char *prof = kio_setting_str(KIO_SET_BLAS_PROFILE);
  g->blas_hsw = prof && !strcmp(prof, "hsw");
  g->blas_small = !(prof && (!strcmp(prof, "hsw") || !strcmp(prof, "plain")));
  g->num_gauss = (int32_t)ng;
  size_t nd = (size_t)ng * (size_t)am->dim;
  g->pdf_offset = malloc(((size_t)am->num_pdfs + 1) * sizeof(int32_t));
  g->gconst = malloc((size_t)(ng ? ng : 1) * sizeof(float));
  g->means_invvars = malloc((nd ? nd : 1) * sizeof(float));
  g->inv_vars = malloc((nd ? nd : 1) * sizeof(float));
  if (!g->pdf_offset || !g->gconst || !g->means_invvars || !g->inv_vars) {
    galign_gmm_free(g);
    KIO_ERROR("Out of memory flattening the model");
    return KIO_ERR;
  }
  int32_t off = 0;
  for (int32_t j = 0; j < am->num_pdfs; j++) {
    const kio_diag_gmm *p = &am->pdfs[j];
    g->pdf_offset[j] = off;
    size_t n = (size_t)p->num_comp * (size_t)am->dim;
    memcpy(g->gconst + off, p->gconsts, (size_t)p->num_comp * sizeof(float));
    memcpy(g->means_invvars + (size_t)off * am->dim, p->means_invvars, n * sizeof(float));
    memcpy(g->inv_vars + (size_t)off * am->dim, p->inv_vars, n * sizeof(float));
    off += p->num_comp;
  }
  g->pdf_offset[am->num_pdfs] = off;
  return KIO_OK;
}

void galign_gmm_free(galign_gmm *g) {
  if (!g) return;
  free(g->pdf_offset);
  free(g->gconst);
  free(g->means_invvars);
  free(g->inv_vars);
  memset(g, 0, sizeof *g);
}

int32_t galign_gmm_max_comp(const galign_gmm *g) {
  int32_t m = 1;
  for (int32_t j = 0; j < g->num_pdfs; j++) {
    int32_t n = g->pdf_offset[j + 1] - g->pdf_offset[j];
    if (n > m) m = n;
  }
  return m;
}

#if defined(__GNUC__) || defined(__clang__)
#define GALIGN_AI __attribute__((always_inline))
#else
#define GALIGN_AI
#endif
#define GALIGN_GMM_CORE_INLINE GALIGN_AI
#include "gmm-core.h"

/* VectorBase::LogSumExp: prune below max + log(FLT_EPSILON), sum in double. */
static float log_sum_exp(const float *l, int32_t n) {
  float mx = -INFINITY;
  int any_nan = 0;
  for (int32_t i = 0; i < n; i++) {
    if (l[i] > mx) mx = l[i];
    if (l[i] != l[i]) any_nan = 1;
  }
  if (any_nan || n == 0) return NAN;
  float cut = mx + logf(FLT_EPSILON);
  double sum = 0.0;
  for (int32_t i = 0; i < n; i++)
    if (l[i] >= cut) sum += expf(l[i] - mx);
  if (!(sum > 0.0)) return NAN;  /* only NaN gets here: the max adds exp(0) */
  return (float)(mx + log(sum));
}

static void comps_generic(const galign_gmm *g, int32_t m0, int32_t n, const float *x,
                          const float *x2, float *out) {
  if (galign_use_small(g)) {
    for (int32_t i = 0; i < n; i++) out[i] = galign_small_loglike(g, m0 + i, i, n, x, x2, 1);
    return;
  }
  for (int32_t i = 0; i < n; i++)
    out[i] = galign_comp_loglike(g, m0 + i, galign_comp_kernel(i, n), x, x2);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define GALIGN_FMA_TARGET __attribute__((target("fma,avx2")))

/* The same kernels with AVX2/FMA instructions (what OpenBLAS runs). */
static inline GALIGN_AI GALIGN_FMA_TARGET float k4x4_dot_avx(const float *a, const float *x,
                                                             int32_t nb) {
  __m256 acc = _mm256_setzero_ps();
  int32_t i = 0, n = nb;
  if (n & 4) {
    __m128 lo = _mm_fmadd_ps(_mm_loadu_ps(a), _mm_loadu_ps(x), _mm_setzero_ps());
    acc = _mm256_insertf128_ps(_mm256_setzero_ps(), lo, 0);
    i += 4; n -= 4;
  }
  if (n & 8) {
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(x + i), acc);
    i += 8; n -= 8;
  }
  for (; n > 0; i += 16, n -= 16) {
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(x + i), acc);
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(x + i + 8), acc);
  }
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  s = _mm_hadd_ps(s, s);
  s = _mm_hadd_ps(s, s);
  return _mm_cvtss_f32(s);
}

static inline GALIGN_AI GALIGN_FMA_TARGET float sse_dot_avx(const float *a, const float *x,
                                                            int32_t nb, int k1) {
  __m128 acc = _mm_setzero_ps(), acc2 = _mm_setzero_ps();
  int32_t i = 0, n = nb;
  if (n & 4) {
    acc = _mm_add_ps(acc, _mm_mul_ps(_mm_loadu_ps(a), _mm_loadu_ps(x)));
    i += 4; n -= 4;
  }
  for (; n > 0; i += 8, n -= 8) {
    acc = _mm_add_ps(acc, _mm_mul_ps(_mm_loadu_ps(a + i), _mm_loadu_ps(x + i)));
    __m128 p = _mm_mul_ps(_mm_loadu_ps(a + i + 4), _mm_loadu_ps(x + i + 4));
    if (k1) acc2 = _mm_add_ps(acc2, p);
    else acc = _mm_add_ps(acc, p);
  }
  if (k1) acc = _mm_add_ps(acc, acc2);
  acc = _mm_hadd_ps(acc, acc);
  acc = _mm_hadd_ps(acc, acc);
  return _mm_cvtss_f32(acc);
}

static inline GALIGN_AI GALIGN_FMA_TARGET float comp_loglike_avx(const galign_gmm *g, int32_t m,
                                                                 int kern, const float *x,
                                                                 const float *x2) {
  const int32_t D = g->dim, nb = GALIGN_NB(D), m3 = D - nb;
  const float *mi = g->means_invvars + (size_t)m * D, *iv = g->inv_vars + (size_t)m * D;
  float y = g->gconst[m];
  if (nb > 0)
    y = y + (kern == 4 ? k4x4_dot_avx(mi, x, nb) : sse_dot_avx(mi, x, nb, kern == 1)) * 1.0f;
  if (m3) y = galign_tail_add_v(y, mi + nb, x + nb, m3, 1.0f, g->blas_hsw);
  if (nb > 0)
    y = y + (kern == 4 ? k4x4_dot_avx(iv, x2, nb) : sse_dot_avx(iv, x2, nb, kern == 1)) * -0.5f;
  if (m3) y = galign_tail_add_v(y, iv + nb, x2 + nb, m3, -0.5f, g->blas_hsw);
  return y;
}

/* Four rows at once through the 4x4 kernel (what OpenBLAS does): the same
 * per-row lane operations as k4x4_dot_avx, interleaved for speed. */
static inline GALIGN_AI GALIGN_FMA_TARGET void k4x4_block_avx(const float *a, int32_t lda,
                                                              const float *x, int32_t nb,
                                                              float out[4]) {
  __m256 c0 = _mm256_setzero_ps(), c1 = c0, c2 = c0, c3 = c0;
  const float *a0 = a, *a1 = a + lda, *a2 = a + 2 * lda, *a3 = a + 3 * lda;
  int32_t i = 0, n = nb;
  if (n & 4) {
    __m128 xv = _mm_loadu_ps(x), z = _mm_setzero_ps();
    c0 = _mm256_insertf128_ps(c0, _mm_fmadd_ps(_mm_loadu_ps(a0), xv, z), 0);
    c1 = _mm256_insertf128_ps(c1, _mm_fmadd_ps(_mm_loadu_ps(a1), xv, z), 0);
    c2 = _mm256_insertf128_ps(c2, _mm_fmadd_ps(_mm_loadu_ps(a2), xv, z), 0);
    c3 = _mm256_insertf128_ps(c3, _mm_fmadd_ps(_mm_loadu_ps(a3), xv, z), 0);
    i += 4; n -= 4;
  }
  if (n & 8) {
    __m256 xv = _mm256_loadu_ps(x + i);
    c0 = _mm256_fmadd_ps(_mm256_loadu_ps(a0 + i), xv, c0);
    c1 = _mm256_fmadd_ps(_mm256_loadu_ps(a1 + i), xv, c1);
    c2 = _mm256_fmadd_ps(_mm256_loadu_ps(a2 + i), xv, c2);
    c3 = _mm256_fmadd_ps(_mm256_loadu_ps(a3 + i), xv, c3);
    i += 8; n -= 8;
  }
  for (; n > 0; i += 16, n -= 16) {
    __m256 xv = _mm256_loadu_ps(x + i), xw = _mm256_loadu_ps(x + i + 8);
    c0 = _mm256_fmadd_ps(_mm256_loadu_ps(a0 + i), xv, c0);
    c1 = _mm256_fmadd_ps(_mm256_loadu_ps(a1 + i), xv, c1);
    c0 = _mm256_fmadd_ps(_mm256_loadu_ps(a0 + i + 8), xw, c0);
    c1 = _mm256_fmadd_ps(_mm256_loadu_ps(a1 + i + 8), xw, c1);
    c2 = _mm256_fmadd_ps(_mm256_loadu_ps(a2 + i), xv, c2);
    c3 = _mm256_fmadd_ps(_mm256_loadu_ps(a3 + i), xv, c3);
    c2 = _mm256_fmadd_ps(_mm256_loadu_ps(a2 + i + 8), xw, c2);
    c3 = _mm256_fmadd_ps(_mm256_loadu_ps(a3 + i + 8), xw, c3);
  }
  __m128 s0 = _mm_add_ps(_mm256_castps256_ps128(c0), _mm256_extractf128_ps(c0, 1));
  __m128 s1 = _mm_add_ps(_mm256_castps256_ps128(c1), _mm256_extractf128_ps(c1, 1));
  __m128 s2 = _mm_add_ps(_mm256_castps256_ps128(c2), _mm256_extractf128_ps(c2, 1));
  __m128 s3 = _mm_add_ps(_mm256_castps256_ps128(c3), _mm256_extractf128_ps(c3, 1));
  s0 = _mm_hadd_ps(s0, s0); s1 = _mm_hadd_ps(s1, s1);
  s2 = _mm_hadd_ps(s2, s2); s3 = _mm_hadd_ps(s3, s3);
  s0 = _mm_hadd_ps(s0, s0); s1 = _mm_hadd_ps(s1, s1);
  s2 = _mm_hadd_ps(s2, s2); s3 = _mm_hadd_ps(s3, s3);
  out[0] = _mm_cvtss_f32(s0); out[1] = _mm_cvtss_f32(s1);
  out[2] = _mm_cvtss_f32(s2); out[3] = _mm_cvtss_f32(s3);
}

GALIGN_FMA_TARGET static void comps_fma(const galign_gmm *g, int32_t m0, int32_t n,
                                         const float *x, const float *x2, float *out) {
  const int32_t D = g->dim, nb = GALIGN_NB(D), m3 = D - nb;
  const int32_t n4 = n & ~3;
  int32_t i = 0;
  if (galign_use_small(g)) {  /* D = 4, 8: scalar, SkylakeX's order */
    for (; i < n; i++) out[i] = galign_small_loglike(g, m0 + i, i, n, x, x2, 1);
    return;
  }
  if (nb > 0) {
    for (; i < n4; i += 4) {
      const int32_t m = m0 + i;
      const float *mi = g->means_invvars + (size_t)m * D, *iv = g->inv_vars + (size_t)m * D;
      float d1[4], d2[4];
      k4x4_block_avx(mi, D, x, nb, d1);
      k4x4_block_avx(iv, D, x2, nb, d2);
      for (int r = 0; r < 4; r++) {
        float y = g->gconst[m + r] + d1[r] * 1.0f;
        if (m3) y = galign_tail_add_v(y, mi + (size_t)r * D + nb, x + nb, m3, 1.0f, g->blas_hsw);
        y = y + d2[r] * -0.5f;
        if (m3) y = galign_tail_add_v(y, iv + (size_t)r * D + nb, x2 + nb, m3, -0.5f, g->blas_hsw);
        out[i + r] = y;
      }
    }
  }
  for (; i < n; i++) out[i] = comp_loglike_avx(g, m0 + i, galign_comp_kernel(i, n), x, x2);
}
#endif

float galign_gmm_loglike(const galign_gmm *g, int32_t pdf, const float *x, const float *x2,
                         float *scratch) {
  const int32_t m0 = g->pdf_offset[pdf], n = g->pdf_offset[pdf + 1] - m0;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  /* libgcc initialises the CPU model before main; the test is a load. */
  if (__builtin_cpu_supports("fma") && __builtin_cpu_supports("avx2"))
    comps_fma(g, m0, n, x, x2, scratch);
  else
#endif
    comps_generic(g, m0, n, x, x2, scratch);
  return log_sum_exp(scratch, n);
}

float galign_gmm_loglike_scalar(const galign_gmm *g, int32_t pdf, const float *x,
                                const float *x2, float *scratch) {
  const int32_t m0 = g->pdf_offset[pdf], n = g->pdf_offset[pdf + 1] - m0;
  comps_generic(g, m0, n, x, x2, scratch);
  return log_sum_exp(scratch, n);
}

int galign_cpu_loglikes(const galign_gmm *gmm, const kio_matrix *feats,
                        const int32_t *pdfs_used, int32_t n_used, kio_matrix *out) {
  if (feats->cols != gmm->dim) {
    KIO_ERROR("Dim mismatch: data dim = %d vs. model dim = %d", feats->cols, gmm->dim);
    return KIO_ERR;
  }
  if (kio_matrix_resize(out, feats->rows, n_used) != KIO_OK) {
    KIO_ERROR("Out of memory");
    return KIO_ERR;
  }
  float *scratch = malloc((size_t)galign_gmm_max_comp(gmm) * sizeof(float));
  float *x2 = malloc((size_t)(gmm->dim ? gmm->dim : 1) * sizeof(float));
  if (!scratch || !x2) {
    free(scratch); free(x2);
    KIO_ERROR("Out of memory");
    return KIO_ERR;
  }
  int rc = KIO_OK;
  for (int32_t t = 0; t < feats->rows && rc == KIO_OK; t++) {
    const float *x = feats->data + (size_t)t * feats->cols;
    for (int32_t d = 0; d < gmm->dim; d++) x2[d] = x[d] * x[d];
    for (int32_t k = 0; k < n_used; k++) {
      float v = galign_gmm_loglike(gmm, pdfs_used[k], x, x2, scratch);
      if (isnan(v) || isinf(v)) {
        KIO_ERROR("Invalid answer (overflow or invalid variances/features?)");
        rc = KIO_ERR;
        break;
      }
      out->data[(size_t)t * n_used + k] = v;
    }
  }
  free(scratch);
  free(x2);
  return rc;
}
