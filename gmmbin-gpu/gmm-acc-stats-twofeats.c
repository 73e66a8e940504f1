/* gmm-acc-stats-twofeats: Kaldi's program (gmmbin/gmm-acc-stats-twofeats.cc):
 * the same usage, options, output bytes, log lines and exit codes. The
 * statistics are the CPU accumulator's (Kaldi's rounding per profile,
 * gpu-acc/acc-twofeats.c); the features rspecifiers of the steps scripts
 * are computed in-process (base/feat), the posteriors read as a table. */
#include <stdlib.h>

#include "base/io/io.h"
#include "base/model/model.h"
#include "base/program/program.h"
#include "base/sys/kaldi-msg.h"
#include "base/sys/log.h"
#include "base/sys/options.h"
#include "gpu-acc/twofeats.h"

static const char *const kUsage =
    "Accumulate stats for GMM training, computing posteriors with one set of features\n"
    "but accumulating statistics with another.\n"
    "First features are used to get posteriors, second to accumulate stats\n"
    "Usage:  gmm-acc-stats-twofeats [options] <model-in> <feature1-rspecifier> "
    "<feature2-rspecifier> <posteriors-rspecifier> <stats-out>\n"
    "e.g.: \n"
    " gmm-acc-stats-twofeats 1.mdl 1.ali scp:train.scp scp:train_new.scp ark:1.ali 1.acc\n";

int main(int argc, char **argv) {
  kio_program_start(argc, argv);
  kio_opts *po = kio_opts_new(kUsage);
  int binary = 1;
  kio_opts_bool(po, "binary", &binary, "Write output in binary mode");
  kio_program_args(po, argc, argv, 5, 5);
  const char *model_in = kio_opts_arg(po, 1), *feats1 = kio_opts_arg(po, 2),
             *feats2 = kio_opts_arg(po, 3), *posts = kio_opts_arg(po, 4),
             *accs_out = kio_opts_arg(po, 5);
  kio_tmodel tm = {0};
  kio_am_gmm am = {0};
  gacc_stats st;
  long done = 0;
  if (kio_model_read(model_in, &tm, &am) != KIO_OK) kio_fatal_exit();
  if (gacc_twofeats_run(&tm, &am, feats1, feats2, posts, &st, &done) != KIO_OK ||
      gacc_stats_write(accs_out, binary, &st) != KIO_OK)
    kio_fatal_exit();
  KIO_KALDI(TWOFEATS_WRITTEN);
  gacc_stats_free(&st);
  kio_tmodel_free(&tm);
  kio_am_gmm_free(&am);
  kio_opts_free(po);
  return done != 0 ? 0 : 1;
}
