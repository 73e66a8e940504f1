/* gmm-acc-mllt: Kaldi's program (gmmbin/gmm-acc-mllt.cc): the same usage,
 * options, output bytes, log lines and exit codes. The statistics are
 * Kaldi's MlltAccs with Kaldi's rounding (gpu-acc/mllt-acc.c); the
 * features rspecifier of the steps scripts is computed in-process
 * (base/feat), the posteriors rspecifier read as a table. */
#include <stdlib.h>

#include "base/io/io.h"
#include "base/model/model.h"
#include "base/program/program.h"
#include "base/sys/kaldi-msg.h"
#include "base/sys/log.h"
#include "base/sys/options.h"
#include "gpu-acc/mllt.h"

static const char *const kUsage =
    "Accumulate MLLT (global STC) statistics\n"
    "Usage:  gmm-acc-mllt [options] <model-in> <feature-rspecifier> <posteriors-rspecifier> "
    "<stats-out>\n"
    "e.g.: \n"
    " gmm-acc-mllt 1.mdl scp:train.scp ark:1.post 1.macc\n";

int main(int argc, char **argv) {
  kio_program_start(argc, argv);
  kio_opts *po = kio_opts_new(kUsage);
  int binary = 1;
  float rand_prune = 0.25f;
  kio_opts_bool(po, "binary", &binary, "Write output in binary mode");
  kio_opts_float(po, "rand-prune", &rand_prune,
                 "Randomized pruning parameter to speed up accumulation (larger -> more "
                 "pruning.  May exceed one).");
  kio_program_args(po, argc, argv, 4, 4);
  const char *model_in = kio_opts_arg(po, 1), *feats = kio_opts_arg(po, 2),
             *posts = kio_opts_arg(po, 3), *accs_out = kio_opts_arg(po, 4);
  if (rand_prune < 0.0f) {
    KIO_ERROR("--rand-prune must be >= 0, got %g", (double)rand_prune);
    kio_fatal_exit();
  }
  kio_tmodel tm = {0};
  kio_am_gmm am = {0};
  gacc_mllt *m = NULL;
  long done = 0;
  if (kio_model_read(model_in, &tm, &am) != KIO_OK) kio_fatal_exit();
  if (gacc_mllt_new(&m, am.dim, rand_prune, 0) != KIO_OK ||
      gacc_mllt_run(m, &tm, &am, feats, posts, &done) != KIO_OK ||
      gacc_mllt_write(m, accs_out, binary) != KIO_OK)
    kio_fatal_exit();
  KIO_KALDI(MLLT_WRITTEN);
  gacc_mllt_free(m);
  kio_tmodel_free(&tm);
  kio_am_gmm_free(&am);
  kio_opts_free(po);
  return done != 0 ? 0 : 1;
}
