/* FmllrDiagGmmAccs::Update (transform/fmllr-diag-gmm.cc) as Kaldi computes
 * it: the full update (ComputeFmllrMatrixDiagGmmFull: G's inverses by
 * SpMatrix::Invert, 40 iterations of the row-by-row FmllrInnerUpdate with
 * the cofactors by MatrixBase::Invert, FmllrAuxFuncDiagGmm before and after),
 * the diagonal and offset updates (closed forms on G and K) and "none".
 * Every BLAS/LAPACK call of Kaldi's code is the same call to the Kaldi's
 * own OpenBLAS (fmllr-blas.c) on matrices laid out as Kaldi's (rows padded
 * to 16 bytes); the scalar arithmetic between the calls is Kaldi's, in
 * Kaldi's order and types (float where Kaldi keeps BaseFloat). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/sys/kaldi-msg.h"
#include "base/sys/log.h"
#include "fmllr/fmllr-internal.h"

/* Kaldi's Matrix<double> row stride: the columns rounded up to 16 bytes. */
static int stride_d(int cols) { return (cols + 1) & ~1; }

static double *dalloc(size_t n) {
  void *p = NULL;
  if (posix_memalign(&p, 16, (n ? n : 1) * sizeof(double))) return NULL;
  memset(p, 0, (n ? n : 1) * sizeof(double));
  return p;
}

/* MatrixBase<double>::Invert(log_det, NULL, inverse_needed) of the n x n
 * matrix a (stride lda): dgetrf, the log-determinant in Kaldi's blocks of
 * products, dgetri with lwork = n. KIO_ERR (after Kaldi's ERROR) when
 * singular and the inverse is needed; singular without: *log_det = -inf. */
static int invert(const fmllr_blas *L, double *a, int n, int lda, double *log_det,
                  int inverse_needed) {
  int *piv = malloc(sizeof(int) * (size_t)n), info = -1, lwork = n > 1 ? n : 1;
  double *work = dalloc((size_t)lwork);
  if (!piv || !work) {
    free(piv);
    free(work);
    KIO_ERROR("Out of memory");
    return KIO_ERR;
  }
  L->dgetrf(&n, &n, a, &lda, piv, &info);
  if (info > 0) {
    free(piv);
    free(work);
    if (inverse_needed) {
      KIO_ERROR("Cannot invert: matrix is singular");
      return KIO_ERR;
    }
    if (log_det) *log_det = -INFINITY;
    return KIO_OK;
  }
  if (log_det) {
    *log_det = 0.0;
    double prod = 1.0;
    for (int i = 0; i < n; i++) {
      prod *= a[(size_t)i * lda + i];
      if (i == n - 1 || fabs(prod) < 1.0e-10 || fabs(prod) > 1.0e+10) {
        *log_det += log(fabs(prod));
        prod = 1.0;
      }
    }
  }
  if (inverse_needed) L->dgetri(&n, a, &lda, piv, work, &lwork, &info);
  free(piv);
  free(work);
  return KIO_OK;
}

/* SpMatrix<double>::Invert() of the packed (n x n) ap: dsptrf/dsptri "U". */
static int sp_invert(const fmllr_blas *L, double *ap, int n) {
  int *piv = calloc((size_t)n, sizeof(int)), info = 0;
  double *work = dalloc((size_t)n);
  if (!piv || !work) {
    free(piv);
    free(work);
    KIO_ERROR("Out of memory");
    return KIO_ERR;
  }
  L->dsptrf("U", &n, ap, piv, &info);
  if (info > 0) {
    KIO_ERROR("CLAPACK stptrf_ : factorization failed");
  } else {
    L->dsptri("U", &n, ap, piv, work, &info);
    if (info != 0) KIO_ERROR("CLAPACK ssptrf_ : Matrix is singular");
  }
  free(piv);
  free(work);
  return info != 0 ? KIO_ERR : KIO_OK;
}

/* FmllrAuxFuncDiagGmm (the double version) of xform (D x D+1, stride xs). */
static int auxf(const fmllr_accs *s, const double *xform, int xs, double *obj) {
  const fmllr_blas *L = s->blas;
  const int D = s->D, ts = stride_d(D), ks = D + 1;
  double *tmp = dalloc((size_t)D * ts), *row_g = dalloc((size_t)D + 1);
  if (!tmp || !row_g) {
    free(tmp);
    free(row_g);
    KIO_ERROR("Out of memory");
    return KIO_ERR;
  }
  for (int r = 0; r < D; r++) memcpy(tmp + (size_t)r * ts, xform + (size_t)r * xs, sizeof(double) * D);
  double logdet = 0.0;
  if (invert(L, tmp, D, ts, &logdet, 0) != KIO_OK) {
    free(tmp);
    free(row_g);
    return KIO_ERR;
  }
  double tr = 0.0;  /* TraceMatMat(xform, K, kTrans): a dot per row */
  for (int r = 0; r < D; r++) tr += L->ddot(D + 1, xform + (size_t)r * xs, 1, s->K + (size_t)r * ks, 1);
  double o = s->beta * logdet + tr;
  for (int d = 0; d < D; d++) {
    const double *row = xform + (size_t)d * xs;
    L->dspmv(FM_ROW_MAJOR, FM_LOWER, D + 1, 1.0, s->G + (size_t)d * s->P, row, 1, 0.0, row_g, 1);
    o -= 0.5 * L->ddot(D + 1, row_g, 1, row, 1);
  }
  free(tmp);
  free(row_g);
  *obj = o;
  return KIO_OK;
}

/* FmllrInnerUpdate: row `row` of xform (D x D+1, stride xs). */
static int inner_update(const fmllr_accs *s, const double *inv_g, const double *k, int row,
                        double *xform, int xs, double *cof, double *crow, double *crow_g) {
  const fmllr_blas *L = s->blas;
  const int D = s->D, cs = stride_d(D);
  const double beta = s->beta;
  for (int r = 0; r < D; r++)
    for (int c = 0; c < D; c++) cof[(size_t)r * cs + c] = xform[(size_t)c * xs + r];
  double logdet;
  if (invert(L, cof, D, cs, &logdet, 1) != KIO_OK) return KIO_ERR;
  memcpy(crow, cof + (size_t)row * cs, sizeof(double) * D);
  crow[D] = 0.0;
  L->dspmv(FM_ROW_MAJOR, FM_LOWER, D + 1, 1.0, inv_g, crow, 1, 0.0, crow_g, 1);
  double e1 = L->ddot(D + 1, crow_g, 1, crow, 1);
  double e2 = L->ddot(D + 1, crow_g, 1, k, 1);
  double discr = sqrt(e2 * e2 + 4 * e1 * beta);
  double alpha1 = (-e2 + discr) / (2 * e1);
  double alpha2 = (-e2 - discr) / (2 * e1);
  double auxf1 = beta * log(fabs(alpha1 * e1 + e2)) - 0.5 * alpha1 * alpha1 * e1;
  double auxf2 = beta * log(fabs(alpha2 * e1 + e2)) - 0.5 * alpha2 * alpha2 * e1;
  double alpha = (auxf1 > auxf2) ? alpha1 : alpha2;
  L->dscal(D + 1, alpha, crow, 1);
  for (int j = 0; j <= D; j++) crow[j] = crow[j] + k[j];  /* daxpy(1.0, k): exact either way */
  L->dspmv(FM_ROW_MAJOR, FM_LOWER, D + 1, 1.0, inv_g, crow, 1, 0.0, xform + (size_t)row * xs, 1);
  return KIO_OK;
}

/* Kaldi's ApproxEqual(float, float) with its default tolerance. */
static int approx_equal(float a, float b) {
  if (a == b) return 1;
  float diff = fabsf(a - b);
  if (isinf(diff) || diff != diff) return 0;
  return diff <= 0.0001f * (fabsf(a) + fabsf(b));
}

/* ComputeFmllrMatrixDiagGmmFull from the unit transform xf (float, D x D+1):
 * *impr; xf replaced unless the objective did not increase. */
static int full(const fmllr_accs *s, int32_t num_iters, float *xf, float *impr) {
  const int D = s->D, P = s->P, xs = stride_d(D + 1), cs = stride_d(D);
  int rc = KIO_ERR;
  double *inv_g = dalloc((size_t)D * P), *old_x = dalloc((size_t)D * xs),
         *new_x = dalloc((size_t)D * xs), *cof = dalloc((size_t)D * cs),
         *crow = dalloc((size_t)D + 1), *crow_g = dalloc((size_t)D + 1);
  if (!inv_g || !old_x || !new_x || !cof || !crow || !crow_g) {
    KIO_ERROR("Out of memory");
    goto out;
  }
  memcpy(inv_g, s->G, sizeof(double) * (size_t)D * P);
  for (int d = 0; d < D; d++)
    if (sp_invert(s->blas, inv_g + (size_t)d * P, D + 1) != KIO_OK) goto out;
  for (int r = 0; r < D; r++)
    for (int c = 0; c <= D; c++)
      old_x[(size_t)r * xs + c] = new_x[(size_t)r * xs + c] = (double)xf[(size_t)r * (D + 1) + c];
  double o;
  if (auxf(s, old_x, xs, &o) != KIO_OK) goto out;
  float old_objf = (float)o;
  for (int32_t it = 0; it < num_iters; it++)
    for (int d = 0; d < D; d++)
      if (inner_update(s, inv_g + (size_t)d * P, s->K + (size_t)d * (D + 1), d, new_x, xs, cof,
                       crow, crow_g) != KIO_OK)
        goto out;
  if (auxf(s, new_x, xs, &o) != KIO_OK) goto out;
  float new_objf = (float)o, objf_improvement = new_objf - old_objf;
  char b1[32], b2[32];
  KIO_KALDI(FMLLR_FULL_IMPR, kio_fmt_g(b1, objf_improvement / (s->beta + 1.0e-10)),
            kio_fmt_g(b2, s->beta));
  if (objf_improvement < 0.0f && !approx_equal(new_objf, old_objf)) {
    KIO_KALDI(FMLLR_NOT_APPLIED);
    *impr = 0.0f;
  } else {
    for (int r = 0; r < D; r++)
      for (int c = 0; c <= D; c++) xf[(size_t)r * (D + 1) + c] = (float)new_x[(size_t)r * xs + c];
    *impr = objf_improvement;
  }
  rc = KIO_OK;
out:
  free(inv_g);
  free(old_x);
  free(new_x);
  free(cof);
  free(crow);
  free(crow_g);
  return rc;
}

/* FmllrAuxFuncDiagGmm (the float version): the transform in double, Kaldi's
 * Matrix<double> copy of it. */
static int auxf_f(const fmllr_accs *s, const float *xf, float *obj) {
  const int D = s->D, xs = stride_d(D + 1);
  double *x = dalloc((size_t)D * xs), o;
  if (!x) {
    KIO_ERROR("Out of memory");
    return KIO_ERR;
  }
  for (int r = 0; r < D; r++)
    for (int c = 0; c <= D; c++) x[(size_t)r * xs + c] = (double)xf[(size_t)r * (D + 1) + c];
  int rc = auxf(s, x, xs, &o);
  free(x);
  *obj = (float)o;
  return rc;
}

/* packed (r, c) of a (D+1) SpMatrix, either order */
static size_t sp(int r, int c) {
  return r >= c ? (size_t)r * (r + 1) / 2 + c : (size_t)c * (c + 1) / 2 + r;
}

/* ComputeFmllrMatrixDiagGmmDiagonal */
static int diag(const fmllr_accs *s, float *xf, float *impr) {
  const int D = s->D;
  const double beta = s->beta;
  if (beta == 0.0) {
    KIO_KALDI(FMLLR_DIAG_NO_STATS);
    *impr = 0.0f;
    return KIO_OK;
  }
  float old_obj, new_obj;
  if (auxf_f(s, xf, &old_obj) != KIO_OK) return KIO_ERR;
  for (int i = 0; i < D; i++) {
    const double *g = s->G + (size_t)i * s->P, *k = s->K + (size_t)i * (D + 1);
    double k_ii = k[i], k_id = k[D], g_iii = g[sp(i, i)], g_idd = g[sp(D, D)],
           g_idi = g[sp(D, i)];
    double a = g_idi * g_idi / g_idd - g_iii, b = k_ii - g_idi * k_id / g_idd, c = beta;
    double sc = (-b - sqrt(b * b - 4 * a * c)) / (2 * a);
    if (!(sc > 0.0)) {
      KIO_ERROR("Assertion failed: (s > 0.0) in the diagonal fMLLR update, row %d", i);
      return KIO_ERR;
    }
    double o = (k_id - sc * g_idi) / g_idd;
    xf[(size_t)i * (D + 1) + i] = (float)sc;
    xf[(size_t)i * (D + 1) + D] = (float)o;
  }
  if (auxf_f(s, xf, &new_obj) != KIO_OK) return KIO_ERR;
  if (kio_log_verbose() >= 2) {
    char b[32];
    KIO_KALDI(FMLLR_DIAG_IMPR, kio_fmt_g(b, new_obj - old_obj));
  }
  *impr = new_obj - old_obj;
  return KIO_OK;
}

/* ComputeFmllrMatrixDiagGmmOffset */
static void offset(const fmllr_accs *s, float *xf, float *impr) {
  const int D = s->D;
  float objf_impr = 0.0f;
  char b1[32], b2[32];
  for (int i = 0; i < D; i++) {
    const double *g = s->G + (size_t)i * s->P, *k = s->K + (size_t)i * (D + 1);
    double gdd = g[sp(D, D)], gid = g[sp(i, D)], kid = k[D];
    float b_i = xf[(size_t)i * (D + 1) + D];
    float objf_before = (float)(-0.5 * b_i * b_i * gdd - b_i * gid + b_i * kid);
    b_i = (float)((kid - gid) / gdd);
    xf[(size_t)i * (D + 1) + D] = b_i;
    float objf_after = (float)(-0.5 * b_i * b_i * gdd - b_i * gid + b_i * kid);
    if (objf_after < objf_before)
      KIO_KALDI(FMLLR_OFFSET_DECREASE, kio_fmt_g(b1, objf_after), kio_fmt_g(b2, objf_before));
    objf_impr += objf_after - objf_before;
  }
  *impr = objf_impr;
}

int fmllr_accs_update(fmllr_accs *s, const fmllr_opts *o, float *xf, float *impr,
                      float *count) {
  fmllr_accs_flush(s);
  char b[32];
  if (s->beta > o->min_count) {
    const char *t = o->update_type;
    float change = 0.0f;
    if (!strcmp(t, "full")) {
      if (full(s, o->num_iters, xf, &change) != KIO_OK) return KIO_ERR;
    } else if (!strcmp(t, "diag")) {
      if (diag(s, xf, &change) != KIO_OK) return KIO_ERR;
    } else if (!strcmp(t, "offset")) {
      offset(s, xf, &change);
    } else if (strcmp(t, "none")) {
      KIO_KALDI(FMLLR_UNKNOWN_TYPE, t);
      return KIO_ERR;
    }
    *impr = change;
  } else {
    KIO_KALDI(FMLLR_MIN_COUNT, kio_fmt_g(b, s->beta));
    *impr = 0.0f;
  }
  *count = (float)s->beta;
  return KIO_OK;
}
