/* gmm-est-fmllr's work (Kaldi's FmllrDiagGmmAccs, transform/fmllr-diag-gmm.cc,
 * driven as gmmbin/gmm-est-fmllr.cc drives it): the per-speaker statistics
 * with Kaldi's rounding, the update (full, diag, offset, none) and the
 * program's loop with Kaldi's log lines.
 *
 * Where Kaldi calls OpenBLAS (the per-frame sgemv and sdot, the update's
 * LAPACK and level-2 calls) we call the same functions of the OpenBLAS that
 * the Kaldi in use loads (fmllr-blas.c), so those results are that
 * library's own; the per-frame statistics of the hot loop (component
 * posteriors, the G updates) are ours, in the order of the rounding profile
 * (base/matrix/blas-order.h). */
#ifndef FMLLR_H
#define FMLLR_H

#include <stdint.h>

#include "base/model/model.h"

/* Kaldi's FmllrOptions */
typedef struct {
  const char *update_type;  /* "full", "diag", "offset", "none" (other: ERROR at update) */
  float min_count;
  int32_t num_iters;
} fmllr_opts;

/* ---- the Kaldi's OpenBLAS (fmllr-blas.c) ---- */
typedef struct fmllr_blas fmllr_blas;
/* Loads the OpenBLAS of the Kaldi in use and checks that its core is the one
 * our rounding profile reproduces. KIO_ERR with why (no Kaldi, another BLAS,
 * another core): the program refuses. */
int fmllr_blas_load(fmllr_blas **b, char *why, size_t why_len);
/* Frees b (NULL: nothing); the library stays loaded. */
void fmllr_blas_free(fmllr_blas *b);

/* ---- statistics (fmllr-acc.c) ---- */
typedef struct fmllr_accs fmllr_accs;
/* FmllrDiagGmmAccs(dim, opts): full: the whole G matrices (update type
 * "full"), else only the elements the others read. threads: for the G
 * updates (<= 0: the process's CPU share); results do not depend on it. */
int fmllr_accs_new(fmllr_accs **s, const fmllr_blas *b, int32_t dim, int full, int threads);
void fmllr_accs_free(fmllr_accs *s);
/* A new speaker: all zero. */
void fmllr_accs_reset(fmllr_accs *s);
/* AccumulateForGmm(gmm, x, weight) for frame t of utterance key. ERROR
 * (KIO_ERR) where Kaldi dies: an invalid likelihood. */
int fmllr_accs_frame(fmllr_accs *s, const kio_diag_gmm *gmm, const float *x, float weight,
                     const char *key, int32_t t);

/* Update(opts, xform, &impr, &count): xform (dim x dim+1, row-major) starts
 * as the unit transform and is replaced by the estimate. KIO_ERR after
 * Kaldi's ERROR (unknown update type, a singular matrix). */
int fmllr_accs_update(fmllr_accs *s, const fmllr_opts *o, float *xform, float *impr,
                      float *count);

/* ---- the program (fmllr-run.c) ---- */
/* gmm-est-fmllr's loop; *num_done: files accumulated. KIO_ERR after an ERROR;
 * FMLLR_UNAVAILABLE, with why and nothing read or written, when the Kaldi's
 * OpenBLAS cannot be used here (the program runs Kaldi's own then). */
enum { FMLLR_UNAVAILABLE = 2 };
int fmllr_run(const fmllr_opts *o, const char *spk2utt, const char *model_in,
              const char *feature_rspecifier, const char *post_rspecifier,
              const char *trans_wspecifier, long *num_done, char *why, size_t why_len);

#endif
