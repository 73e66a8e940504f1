/* fmllr/'s shared parts: the Kaldi's OpenBLAS functions that Kaldi's fMLLR
 * code calls, and the statistics as the update reads them. */
#ifndef FMLLR_INTERNAL_H
#define FMLLR_INTERNAL_H

#include "fmllr/fmllr.h"

enum { FM_ROW_MAJOR = 101, FM_NO_TRANS = 111, FM_TRANS = 112, FM_LOWER = 122 };

struct fmllr_blas {
  void *lib;
  void (*sgemv)(int order, int trans, int m, int n, float alpha, const float *a, int lda,
                const float *x, int incx, float beta, float *y, int incy);
  float (*sdot)(int n, const float *x, int incx, const float *y, int incy);
  double (*ddot)(int n, const double *x, int incx, const double *y, int incy);
  void (*dscal)(int n, double alpha, double *x, int incx);
  void (*dspmv)(int order, int uplo, int n, double alpha, const double *ap, const double *x,
                int incx, double beta, double *y, int incy);
  void (*dgetrf)(const int *m, const int *n, double *a, const int *lda, int *ipiv, int *info);
  void (*dgetri)(const int *n, double *a, const int *lda, const int *ipiv, double *work,
                 const int *lwork, int *info);
  void (*dsptrf)(const char *uplo, const int *n, double *ap, int *ipiv, int *info);
  void (*dsptri)(const char *uplo, const int *n, double *ap, const int *ipiv, double *work,
                 int *info);
};

struct fmllr_accs {
  const fmllr_blas *blas;
  int32_t D, P;        /* dim; packed size of dim + 1 */
  int full, nfused;
  double beta;
  double *K;           /* D x (D + 1) */
  double *G;           /* D packed (D + 1) matrices (SpMatrix: lower, row-major) */
  /* SingleFrameStats */
  float *x, *a, *b;
  double count;
  int have_x;
  /* the block of G updates (full) */
  int nb;
  double *A;           /* BLOCK x D: b per frame */
  double *T;           /* BLOCK x P: x+ x+^T packed (fmllr-acc.c's TIDX order) */
  double *xp, *row;    /* scratch: x+ (D + 1), one packed x+ x+^T (P rounded up to 8) */
  float *post, *x2;
  int32_t cap_post;
  void *par;           /* gacc_par */
  int simd;
};

/* Commits the pending frame and applies the buffered G updates (Update's
 * CommitSingleFrameStats). */
void fmllr_accs_flush(fmllr_accs *s);

#endif
