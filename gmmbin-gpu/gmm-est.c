/* gmm-est: Kaldi's program (gmmbin/gmm-est.cc): maximum-likelihood
 * re-estimation with the same usage, options (those the steps scripts use;
 * --mix-down and --share-for-pdfs are refused with an ERROR), model and
 * --write-occs bytes, log lines and exit codes (train/est.h).
 *
 * The steps scripts pass the statistics as "gmm-sum-accs - DIR/X.*.acc |":
 * that pipe is summed in process instead (train/sum-accs.h: the files read
 * by several threads, added in the shell's glob order), with the lines
 * gmm-sum-accs would have printed and the float rounding of its output.
 * Any other statistics rxfilename is read as Kaldi reads it. The rounding
 * profile (two short child processes when it follows the Kaldi on PATH) is
 * chosen in a thread while the model and statistics are read; its line is
 * printed after them. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/io/io.h"
#include "base/matrix/blas-profile.h"
#include "base/program/program.h"
#include "base/sys/kaldi-msg.h"
#include "base/sys/log.h"
#include "base/sys/options.h"
#include "gpu-acc/gpu-acc.h"
#include "train/est.h"
#include "train/sum-accs.h"

static const char *const kUsage =
    "Do Maximum Likelihood re-estimation of GMM-based acoustic model\n"
    "Usage:  gmm-est [options] <model-in> <stats-in> <model-out>\n"
    "e.g.: gmm-est 1.mdl 1.acc 2.mdl\n";

/* The statistics: the steps scripts' gmm-sum-accs pipe in process, else
 * read from the rxfilename. */
static int read_stats(const char *rx, gacc_stats *s) {
  char **files;
  int n;
  /* a file (or another pipe): read as Kaldi's Read(add) reads it, text as
   * double (the sum of one file) */
  if (!trn_sum_accs_pipe(rx, &files, &n)) return trn_sum_accs(&rx, 1, 1, NULL, s);
  static const char kProg[] = "gmm-sum-accs";
  /* its command line as the shell started it: the output "-", the inputs */
  char **args = malloc(sizeof(char *) * ((size_t)n + 1));
  if (!args) {
    trn_sum_accs_free_files(files, n);
    KIO_ERROR("out of memory");
    return KIO_ERR;
  }
  args[0] = "-";
  for (int i = 0; i < n; i++) args[i + 1] = files[i];
  trn_sum_accs_echo(kProg, args, n + 1);
  free(args);
  int rc = trn_sum_accs((const char *const *)files, n, 0, kProg, s);
  if (rc == KIO_OK) {
    trn_sum_accs_log(kProg, n, s, "-");
    trn_sum_accs_round(s);
  } else {
    /* what gmm-est meets when its gmm-sum-accs pipe dies (exit 255) */
    KIO_ERROR("Failed to read stats from %s: gmm-sum-accs failed", rx);
    kio_pipe_status_warn(rx, 255 << 8);
  }
  trn_sum_accs_free_files(files, n);
  return rc;
}

static kio_log_deferred *g_probe_lines;
static void *probe(void *arg) {
  (void)arg;
  kio_log_defer(&g_probe_lines);
  (void)kio_blas_profile();
  kio_log_defer(NULL);
  return NULL;
}

int main(int argc, char **argv) {
  kio_program_start(argc, argv);
  kio_opts *po = kio_opts_new(kUsage);
  int binary = 1;
  trn_est_opts eo;
  trn_est_opts_default(&eo);
  char *flags = malloc(5), *occs = malloc(1);
  if (!flags || !occs) return 255;
  snprintf(flags, 5, "mvwt");
  occs[0] = 0;
  kio_opts_bool(po, "binary", &binary, "Write output in binary mode");
  kio_opts_string(po, "write-occs", &occs, "File to write pdf occupation counts to.");
  trn_est_opts_register(po, &eo, &flags);
  kio_program_args(po, argc, argv, 3, 3);
  if (trn_est_parse_flags(flags, &eo.update_flags) != KIO_OK) kio_fatal_exit();
  kio_tmodel tm = {0};
  kio_am_gmm am = {0};
  gacc_stats s;
  const char *out = kio_opts_arg(po, 3);
  pthread_t pt;
  int probing = pthread_create(&pt, NULL, probe, NULL) == 0;
  if (kio_model_read(kio_opts_arg(po, 1), &tm, &am) != KIO_OK) kio_fatal_exit();
  if (read_stats(kio_opts_arg(po, 2), &s) != KIO_OK) kio_fatal_exit();
  if (probing) {
    pthread_join(pt, NULL);
    kio_log_replay(&g_probe_lines);
  }
  trn_est_report r;
  if (trn_est_update(&eo, &s, &tm, &am, occs, &r) != KIO_OK) kio_fatal_exit();
  if (kio_model_write(out, binary, &tm, &am) != KIO_OK) kio_fatal_exit();
  KIO_KALDI(EST_WRITTEN, out);
  gacc_stats_free(&s);
  kio_tmodel_free(&tm);
  kio_am_gmm_free(&am);
  kio_opts_free(po);
  free(flags);
  free(occs);
  return 0;
}
