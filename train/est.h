/* Kaldi's maximum-likelihood re-estimation in process (prefix trn_):
 * what `gmm-sum-accs - X.*.acc | gmm-est` does to a model, with the same
 * bytes and log lines (reference: gmmbin/gmm-est.cc, gmm/mle-diag-gmm.cc,
 * gmm/mle-am-diag-gmm.cc, gmm/am-diag-gmm.cc, gmm/diag-gmm.cc,
 * hmm/transition-model.cc).
 *
 * Statistics are gacc_stats (double). Kaldi writes the GMM statistics of
 * each job as float, sums the jobs in double in the order of the shell's
 * glob and writes the sum as float again: trn_est_sum_jobs (sum-accs.h) reproduces that, so
 * that estimation from in-process statistics gives the model the scripts'
 * files give. Arithmetic follows Kaldi's types (float/double) and its
 * OpenBLAS calls: saxpy in mixing up and sdot in the objective lines round
 * as the process's profile (base/matrix/blas-level1.h). */
#ifndef TRN_EST_H
#define TRN_EST_H

#include <stdint.h>

#include "base/model/model.h"
#include "gpu-acc/gpu-acc.h"
#include "train/sum-accs.h"  /* trn_est_sum_jobs */

#ifdef __cplusplus
extern "C" {
#endif

/* gmm-est's options (MleDiagGmmOptions, MleTransitionUpdateConfig and the
 * program's own) with Kaldi's types and defaults. */
typedef struct {
  float min_gaussian_weight;     /* 1e-5 */
  float min_gaussian_occupancy;  /* 10 */
  double min_variance;           /* 0.001 */
  int remove_low_count_gaussians;/* 1 */
  float transition_floor;        /* 0.01 */
  float transition_min_count;    /* 5 */
  int share_for_pdfs;            /* 0 (1 is refused: no steps script uses it) */
  int32_t mix_up;                /* 0: none */
  int32_t mix_down;              /* 0 (nonzero is refused) */
  float perturb_factor;          /* 0.01 */
  float power;                   /* 0.2 */
  float min_count;               /* 20 */
  unsigned update_flags;         /* TRN_FLAG_* from "mvwt" */
} trn_est_opts;

enum { TRN_FLAG_MEANS = 1, TRN_FLAG_VARS = 2, TRN_FLAG_WEIGHTS = 4, TRN_FLAG_TRANS = 8 };

void trn_est_opts_default(trn_est_opts *o);
struct kio_opts;
/* gmm-est's option names and help texts. */
void trn_est_opts_register(struct kio_opts *po, trn_est_opts *o, char **update_flags_str);
/* "mvwt" subsets; KIO_ERR (logged as Kaldi) on another letter. */
int trn_est_parse_flags(const char *s, unsigned *flags);

/* VectorBase<double>::Sum in the profile's OpenBLAS order (kio_blas_dsum). */
double trn_est_dsum(const double *x, int32_t n);

/* What one update reported (gmm-est's lines). */
typedef struct {
  float trans_objf_impr, trans_count;
  float gmm_objf_impr, gmm_count;
  float tot_like, tot_t;           /* avg like per frame = tot_like / tot_t */
  int32_t gauss_before_split, gauss_after;
  double secs_trans, secs_pdfs, secs_mixup, secs_occs;  /* where the time went */
} trn_est_report;

/* gmm-est on a model in memory: transition update (flag t), GMM update,
 * mixing down/up, the occupancies written to occs_wxfilename ("" or NULL:
 * none; text, as --write-occs). rand() restarts from glibc's default seed
 * (a fresh gmm-est process). Logs gmm-est's lines; KIO_ERR after an ERROR
 * line for what Kaldi dies of. */
int trn_est_update(const trn_est_opts *o, const gacc_stats *s, kio_tmodel *tm, kio_am_gmm *am,
                const char *occs_wxfilename, trn_est_report *r);

/* Where the Gaussians of an updated model come from (the stochastic mode
 * carries earlier statistics over an update with it): per pdf, Gaussian m
 * after the update inherits share[m] of the statistics of Gaussian orig[m]
 * before it (1; halved with the weight at each split; removed Gaussians
 * have no heir). */
typedef struct { int32_t *orig; float *share; int32_t n; } trn_trace_pdf;
typedef struct { int32_t num_pdfs; trn_trace_pdf *pdf; } trn_est_trace;
/* trn_est_update, filling trace (zeroed, or an earlier trace: replaced). */
int trn_est_update_traced(const trn_est_opts *o, const gacc_stats *s, kio_tmodel *tm,
                          kio_am_gmm *am, const char *occs_wxfilename, trn_est_report *r,
                          trn_est_trace *trace);
void trn_est_trace_free(trn_est_trace *t);

/* AmDiagGmm::SplitByCount (exposed for tests): pdf_occs per pdf. */
int trn_est_split_by_count(kio_am_gmm *am, const float *pdf_occs, int32_t target,
                        float perturb_factor, float power, float min_count);

/* Threads of the estimation's parallel parts (the pdfs' updates, the
 * jobs' sum in trn_est_sum_jobs): trn_est_threads(max) is n if set (tests:
 * the same bits whatever n), else this process's CPU share, at most max.
 * n <= 0: the default again. */
void trn_est_set_threads(int n);
int trn_est_threads(int max_threads);

/* cblas_sdot as Kaldi's OpenBLAS computes it (for the objective lines). */
float trn_est_sdot(int n, const float *x, const float *y);

#ifdef __cplusplus
}
#endif
#endif
