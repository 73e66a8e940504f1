/* The in-process estimation (train/est.c) behind gmm-est's command line,
 * so that tests compare it with Kaldi's gmm-est on the same files:
 *   gmm-est-inproc [gmm-est options] <model-in> <stats-in> <model-out>
 * Not installed and not on a recipe's PATH (a program named gmm-est there
 * would shadow Kaldi's). */
#include <stdlib.h>

#include "base/io/io.h"
#include "base/program/program.h"
#include "base/sys/kaldi-msg.h"
#include "base/sys/log.h"
#include "base/sys/options.h"
#include "gpu-acc/gpu-acc.h"
#include "train/est.h"

static const char *const kUsage =
    "Do Maximum Likelihood re-estimation of GMM-based acoustic model\n"
    "Usage:  gmm-est [options] <model-in> <stats-in> <model-out>\n"
    "e.g.: gmm-est 1.mdl 1.acc 2.mdl\n";

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
  if (kio_model_read(kio_opts_arg(po, 1), &tm, &am) != KIO_OK) kio_fatal_exit();
  if (gacc_stats_read(kio_opts_arg(po, 2), &s, NULL) != KIO_OK) kio_fatal_exit();
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
