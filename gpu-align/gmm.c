/* The AmDiagGmm flattened for likelihood computation, and CPU log-likelihoods
 * (reference 3.4, 5.5). */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "base/sys/log.h"
#include "base/matrix/blas-profile.h"
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
  g->blas_prof = kio_blas_profile();
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
#include "base/matrix/blas-order-x86.h"

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
  for (int32_t i = 0; i < n; i++) out[i] = galign_comp_loglike(g, m0 + i, i, n, x, x2, 1);
}

#if KIO_BLAS_HAVE_X86
#define GALIGN_FMA_TARGET __attribute__((target("fma,avx2")))

/* The HSW/SKX lanes with AVX2/FMA instructions (what OpenBLAS runs): rows
 * 4k..4k+3 together through the 4x4 kernel, the rest one by one. */
GALIGN_FMA_TARGET static void comps_fma(const galign_gmm *g, int32_t m0, int32_t n,
                                         const float *x, const float *x2, float *out) {
  const int32_t D = g->dim, nb = GALIGN_NB(D), m3 = D - nb;
  const int prof = g->blas_prof;
  const int32_t n4 = n & ~3;
  int32_t i = 0;
  if (nb > 0 && D <= 4096) {
    for (; i < n4; i += 4) {
      const int32_t m = m0 + i;
      const float *mi = g->means_invvars + (size_t)m * D, *iv = g->inv_vars + (size_t)m * D;
      float d1[4], d2[4];
      _mm_storeu_ps(d1, kio_blas_dot4x4_avx2(mi, D, x, nb));
      _mm_storeu_ps(d2, kio_blas_dot4x4_avx2(iv, D, x2, nb));
      for (int r = 0; r < 4; r++) {
        float y = g->gconst[m + r] + d1[r] * 1.0f;
        y = kio_blas_gemv_tail(prof, y, mi + (size_t)r * D + nb, x + nb, 1, m3, 1.0f);
        y = y + d2[r] * -0.5f;
        y = kio_blas_gemv_tail(prof, y, iv + (size_t)r * D + nb, x2 + nb, 1, m3, -0.5f);
        out[i + r] = y;
      }
    }
  }
  for (; i < n; i++) {
    const int32_t m = m0 + i;
    const float *mi = g->means_invvars + (size_t)m * D, *iv = g->inv_vars + (size_t)m * D;
    float y = kio_blas_gemv_row_avx2(prof, g->gconst[m], mi, x, D, 1.0f, i, n);
    out[i] = kio_blas_gemv_row_avx2(prof, y, iv, x2, D, -0.5f, i, n);
  }
}
#endif

float galign_gmm_loglike(const galign_gmm *g, int32_t pdf, const float *x, const float *x2,
                         float *scratch) {
  const int32_t m0 = g->pdf_offset[pdf], n = g->pdf_offset[pdf + 1] - m0;
#if KIO_BLAS_HAVE_X86
  /* libgcc initialises the CPU model before main; the test is a load. */
  if (!galign_use_small(g) && __builtin_cpu_supports("fma") && __builtin_cpu_supports("avx2"))
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
