/* gmm-est-fmllr: Kaldi's program (gmmbin/gmm-est-fmllr.cc): the same usage,
 * options, output bytes, log lines and exit codes. fmllr/ holds the work:
 * the statistics with Kaldi's rounding, the update through the Kaldi's own
 * OpenBLAS; the features rspecifier of the steps scripts is computed
 * in-process (base/feat). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/io/io.h"
#include "base/matrix/blas-profile.h"
#include "base/program/program.h"
#include "base/sys/log.h"
#include "base/sys/options.h"
#include "fmllr/fmllr.h"

static const char *const kUsage =
    "Estimate global fMLLR transforms, either per utterance or for the supplied\n"
    "set of speakers (spk2utt option).  Reads posteriors (on transition-ids).  Writes\n"
    "to a table of matrices.\n"
    "Usage: gmm-est-fmllr [options] <model-in> <feature-rspecifier> <post-rspecifier> "
    "<transform-wspecifier>\n";

int main(int argc, char **argv) {
  kio_program_start(argc, argv);
  kio_opts *po = kio_opts_new(kUsage);
  char *spk2utt = NULL, *update_type = NULL;
  fmllr_opts o = {"full", 500.0f, 40};
  kio_opts_string(po, "spk2utt", &spk2utt, "rspecifier for speaker to utterance-list map");
  update_type = strdup(o.update_type);
  kio_opts_string(po, "fmllr-update-type", &update_type,
                  "Update type for fMLLR (\"full\"|\"diag\"|\"offset\"|\"none\")");
  kio_opts_float(po, "fmllr-min-count", &o.min_count, "Minimum count required to update fMLLR");
  kio_opts_int(po, "fmllr-num-iters", &o.num_iters,
               "Number of iterations in fMLLR update phase.");
  kio_program_args(po, argc, argv, 4, 4);
  o.update_type = update_type;
  long done = 0;
  char why[512] = "";
  int rc = fmllr_run(&o, spk2utt ? spk2utt : "", kio_opts_arg(po, 1), kio_opts_arg(po, 2),
                     kio_opts_arg(po, 3), kio_opts_arg(po, 4), &done, why, sizeof why);
  if (rc == FMLLR_UNAVAILABLE) {
    /* Nothing is read yet: Kaldi's own program does the whole job, so a
     * recipe goes on with Kaldi's transforms. */
    char kaldi[4096];
    if (kio_find_kaldi_program("gmm-est-fmllr", kaldi, sizeof kaldi)) {
      KIO_LOG("Kaldi's fMLLR transforms cannot be computed here (%s): running %s instead",
              why, kaldi);
      fflush(stderr);
      argv[0] = kaldi;
      execv(kaldi, argv);
      KIO_ERROR("Cannot run %s: %s", kaldi, strerror(errno));
    } else {
      KIO_ERROR("Cannot compute Kaldi's fMLLR transforms here: %s, and Kaldi's own "
                "gmm-est-fmllr is not on PATH", why);
    }
    kio_fatal_exit();
  }
  if (rc != KIO_OK) kio_fatal_exit();
  kio_opts_free(po);
  free(spk2utt);
  free(update_type);
  return done != 0 ? 0 : 1;
}
