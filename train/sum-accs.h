/* gmm-sum-accs in process (prefix trn_sum_): the statistics files of
 * gmm-acc-stats-ali summed as Kaldi's gmm-sum-accs sums them, with the same
 * bits (reference: gmmbin/gmm-sum-accs.cc, AccumAmDiagGmm::Read with add).
 *
 * Kaldi reads the files one by one, each added into double sums that start
 * at zero. Here several threads parse files at once (each file into its own
 * arrays, in double as Kaldi reads them: float binary data converted, text
 * parsed as double); each file is added into the sums in argument order, so
 * every element sees the additions in Kaldi's order. At most one parsed file
 * per thread waits for its turn, so memory stays bounded whatever the count.
 * Used by gmmbin-gpu/gmm-sum-accs and by gmm-est for its
 * "gmm-sum-accs - FILES |" statistics. */
#ifndef TRN_SUM_ACCS_H
#define TRN_SUM_ACCS_H

#include "gpu-acc/gpu-acc.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Sums the n files rx[0..n-1] (rxfilenames) into *sum (initialised here:
 * the double sums as gmm-sum-accs holds them before writing), with up to
 * threads parsing threads (<= 0: this process's CPU share). A failure is
 * reported as Kaldi's reading of the files in order would meet it: the
 * ERROR of the first file (in argument order) that cannot be read or does
 * not match the ones before it, nothing of the later ones. Lines are
 * logged as program prog (NULL: this process's). KIO_OK or KIO_ERR. */
int trn_sum_accs(const char *const *rx, int n, int threads, const char *prog, gacc_stats *sum);

/* gmm-sum-accs' closing lines (as prog, NULL: this process's) for n summed
 * files written to out_name. */
void trn_sum_accs_log(const char *prog, int n, const gacc_stats *sum, const char *out_name);

/* The sums as a reader of gmm-sum-accs' output gets them: every GMM
 * statistic rounded to float as written (the transition counts and totals
 * are written as double). */
void trn_sum_accs_round(gacc_stats *sum);

/* Sums per-job statistics as `gmm-sum-accs - X.*.acc` does: job j's
 * statistics rounded to float as written, added in double in the order
 * the glob lists "X.J.acc" (1, 10, 11, ..., 2, ...), the sum rounded to
 * float as written and read back. jobs[j] holds job j+1's statistics
 * (NULL: none); out is zeroed or holds an earlier sum of any shape, whose
 * buffers are reused (on failure it is freed). Logs gmm-sum-accs' lines when
 * log_lines is nonzero. */
int trn_est_sum_jobs(gacc_stats *const *jobs, int nj, gacc_stats *out, int log_lines);

/* The shell glob's order of the jobs' files "X.1.acc" .. "X.NJ.acc"
 * (1, 10, 11, ..., 2, ...): order[k] = the job (1-based) listed k-th. */
void trn_sum_glob_order(int nj, int *order);

/* trn_est_sum_jobs for jobs whose statistics lie in the slots of ds
 * (gpu-acc.h gacc_dev_sum), job j (0-based) in slot k where
 * order[k] = j + 1 (trn_sum_glob_order), so that the device adds them in
 * the glob's order; like[j] and frames[j]: job j's totals. out: shaped for
 * the jobs' model (gacc_stats_reshape), every value set here. The same
 * sums, lines and roundings as trn_est_sum_jobs. */
int trn_est_sum_dev(gacc_dev_sum *ds, const double *like, const double *frames, int nj,
                    gacc_stats *out, int log_lines);

/* Recognises a statistics rxfilename that is exactly gmm-sum-accs writing
 * to standard output, as the steps scripts write it:
 * "gmm-sum-accs - WORD... |", words of plain characters (no quoting,
 * variables, redirections or options). Each word with a glob character
 * is expanded as /bin/sh would (sorted by byte order, itself when nothing
 * matches). Returns 1 with *files (malloc'd array of malloc'd strings,
 * trn_sum_accs_free_files) and *n set; 0 when rx is anything else, or when
 * the shell's order of a glob's matches could differ from byte order
 * (/bin/sh not dash, under a locale other than C/POSIX): then the pipe
 * runs as before. */
int trn_sum_accs_pipe(const char *rx, char ***files, int *n);
void trn_sum_accs_free_files(char **files, int n);

/* Prints a program's command line as Kaldi's ParseOptions echoes it. */
void trn_sum_accs_echo(const char *prog, char *const *args, int n);

#ifdef __cplusplus
}
#endif
#endif
