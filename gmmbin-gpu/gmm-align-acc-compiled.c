/* gmm-align-acc-compiled: one pass of gmm-align-compiled followed by
 * gmm-acc-stats-ali. Aligns as gmm-align-compiled does (same options, same
 * messages, same alignment archive) and accumulates the GMM and transition
 * statistics of every aligned batch (on the GPU when the aligner runs
 * there, in a thread of its own so that reading goes on), writing the
 * stats file gmm-acc-stats-ali would write from the alignments (the same
 * bytes when the feature archive lists the utterances in the order of the
 * graphs), then gmm-acc-stats-ali's two closing lines. The work goes
 * through the public library's fused pass (include/kaldi-gpu-align.h:
 * kga_fused_archive); the command line and the fatal exit are the
 * program's own (base/). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api-cli.h"
#include "base/io/io.h"
#include "base/program/program.h"
#include "base/sys/log.h"
#include "base/sys/options.h"
#include "gpu-align/align-pipeline.h"
#include "include/kaldi-gpu-align.h"

int main(int argc, char *argv[]) {
  kio_program_start(argc, argv);
  const char *usage =
      "Align features given [GMM-based] models and accumulate the statistics\n"
      "gmm-acc-stats-ali would accumulate from the alignments, in one pass\n"
      "(equivalent to gmm-align-compiled followed by gmm-acc-stats-ali).\n"
      "Usage:   gmm-align-acc-compiled [options] <model-in> <graphs-rspecifier> "
      "<feature-rspecifier> <alignments-wspecifier> <stats-wxfilename>\n"
      "e.g.: \n"
      " gmm-align-acc-compiled 1.mdl ark:graphs.fsts scp:train.scp ark:1.ali 1.acc\n";
  galign_pipeline_cfg cfg;
  memset(&cfg, 0, sizeof cfg);
  galign_pipeline_cli cli;
  int binary = 1;

  kio_opts *po = kio_opts_new(usage);
  galign_pipeline_cli_register(po, &cli, &cfg);
  kio_opts_bool(po, "binary", &binary, "Write the stats file in binary mode");
  kio_program_args(po, argc, argv, 5, 5);
  /* A fatal error (ERROR logged): the library has abandoned the outputs (and
   * joined its threads); kio_fatal_exit exits 255. */
  if (galign_pipeline_cli_apply(&cli, &cfg) != KIO_OK) kio_fatal_exit();
  cfg.model_rxfilename = kio_opts_arg(po, 1);
  cfg.graphs_rspecifier = kio_opts_arg(po, 2);
  cfg.feats_rspecifier = kio_opts_arg(po, 3);
  cfg.ali_wspecifier = kio_opts_arg(po, 4);
  const char *accs_wxfilename = kio_opts_arg(po, 5);
  cfg.scores_wspecifier = "";

  kga_aligner_opts ao;
  kga_archive_opts xo;
  kga_cli_options(&cfg, &ao, &xo);
  kga_fused *f;
  if (kga_fused_new(&f, cfg.model_rxfilename, &ao) != KGA_OK) kio_fatal_exit();
  kga_align_counts n;
  /* The statistics of inputs that turn out to have failed (a read error or
   * a failed pipe seen when closing) are not written: an error there is
   * fatal before this returns. */
  if (kga_fused_archive(f, cfg.graphs_rspecifier, cfg.feats_rspecifier, &xo, &n) != KGA_OK ||
      kga_fused_write(f, accs_wxfilename, binary) != KGA_OK)
    kio_fatal_exit();
  kga_fused_free(f);
  kio_opts_free(po);
  galign_pipeline_cli_free(&cli);
  return n.done != 0 ? 0 : 1;
}
