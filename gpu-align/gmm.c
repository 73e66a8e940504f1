/* The AmDiagGmm flattened for likelihood computation, and CPU log-likelihoods
 * (reference 3.4, 5.5). */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "../base/log.h"
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

/* Four-lane float vectors (GCC/Clang extension; SSE on x86-64). The order of
 * the float sums is ours: Kaldi's comes from its BLAS and cannot be matched
 * bit for bit anyway (reference 3.4). */
typedef float galign_v4 __attribute__((vector_size(16)));
static inline galign_v4 ld4(const float *p) { galign_v4 v; memcpy(&v, p, sizeof v); return v; }

/* d1 = mi . x, d2 = iv . x2 */
static inline void dots(const float *mi, const float *iv, const float *x, const float *x2,
                        int32_t n, float *d1, float *d2) {
  galign_v4 a0 = {0, 0, 0, 0}, a1 = a0, b0 = a0, b1 = a0;
  int32_t d = 0;
  for (; d + 8 <= n; d += 8) {
    a0 += ld4(mi + d) * ld4(x + d);
    a1 += ld4(mi + d + 4) * ld4(x + d + 4);
    b0 += ld4(iv + d) * ld4(x2 + d);
    b1 += ld4(iv + d + 4) * ld4(x2 + d + 4);
  }
  if (d + 4 <= n) {
    a0 += ld4(mi + d) * ld4(x + d);
    b0 += ld4(iv + d) * ld4(x2 + d);
    d += 4;
  }
  galign_v4 a = a0 + a1, b = b0 + b1;
  float s1 = (a[0] + a[1]) + (a[2] + a[3]);
  float s2 = (b[0] + b[1]) + (b[2] + b[3]);
  for (; d < n; d++) {
    s1 += mi[d] * x[d];
    s2 += iv[d] * x2[d];
  }
  *d1 = s1;
  *d2 = s2;
}

float galign_gmm_loglike(const galign_gmm *g, int32_t pdf, const float *x, const float *x2,
                         float *scratch) {
  const int32_t D = g->dim, m0 = g->pdf_offset[pdf], m1 = g->pdf_offset[pdf + 1];
  const int32_t n = m1 - m0;
  float mx = -INFINITY;
  int any_nan = 0;
  for (int32_t i = 0; i < n; i++) {
    int32_t m = m0 + i;
    float d1, d2;
    dots(g->means_invvars + (size_t)m * D, g->inv_vars + (size_t)m * D, x, x2, D, &d1, &d2);
    /* sgemv semantics: y = gconst; y += MI x; y += -0.5 * (IV x^2). */
    float l = (g->gconst[m] + d1) + (-0.5f * d2);
    scratch[i] = l;
    if (l > mx) mx = l;
    if (l != l) any_nan = 1;
  }
  if (any_nan || n == 0) return NAN;
  /* VectorBase::LogSumExp: prune below max + log(FLT_EPSILON), sum in double. */
  float cut = mx + logf(FLT_EPSILON);
  double sum = 0.0;
  for (int32_t i = 0; i < n; i++)
    if (scratch[i] >= cut) sum += expf(scratch[i] - mx);
  return (float)(mx + log(sum));
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
