/* gmm-align-compiled: drop-in replacement of Kaldi's gmmbin/gmm-align-compiled
 * (reference section 5). The work goes through the public library
 * (include/kaldi-gpu-align.h: kga_align_archive, on the CPU or a CUDA GPU,
 * messages and outputs emitted in input order exactly as Kaldi prints them
 * one utterance at a time); the command line, Kaldi's option parsing and
 * the fatal exit stay the programs' own (base/). */
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
      "Align features given [GMM-based] models.\n"
      "Usage:   gmm-align-compiled [options] <model-in> <graphs-rspecifier> "
      "<feature-rspecifier> <alignments-wspecifier> [scores-wspecifier]\n"
      "e.g.: \n"
      " gmm-align-compiled 1.mdl ark:graphs.fsts scp:train.scp ark:1.ali\n"
      "or:\n"
      " compile-train-graphs tree 1.mdl lex.fst 'ark:sym2int.pl -f 2- words.txt text|' \\\n"
      "   ark:- | gmm-align-compiled 1.mdl ark:- scp:train.scp t, ark:1.ali\n";
  galign_pipeline_cfg cfg;
  memset(&cfg, 0, sizeof cfg);
  galign_pipeline_cli cli;

  kio_opts *po = kio_opts_new(usage);
  galign_pipeline_cli_register(po, &cli, &cfg);
  kio_program_args(po, argc, argv, 4, 5);
  if (galign_pipeline_cli_apply(&cli, &cfg) != KIO_OK) kio_fatal_exit();
  cfg.model_rxfilename = kio_opts_arg(po, 1);
  cfg.graphs_rspecifier = kio_opts_arg(po, 2);
  cfg.feats_rspecifier = kio_opts_arg(po, 3);
  cfg.ali_wspecifier = kio_opts_arg(po, 4);
  cfg.scores_wspecifier = kio_opts_opt_arg(po, 5);

  /* A fatal error (ERROR logged): the library has abandoned the outputs;
   * kio_fatal_exit exits 255. */
  kga_aligner_opts ao;
  kga_archive_opts xo;
  kga_cli_options(&cfg, &ao, &xo);
  kga_aligner *al;
  if (kga_aligner_new(&al, cfg.model_rxfilename, &ao) != KGA_OK) kio_fatal_exit();
  kga_align_counts n;
  if (kga_align_archive(al, cfg.graphs_rspecifier, cfg.feats_rspecifier, &xo, &n) != KGA_OK)
    kio_fatal_exit();
  kga_aligner_free(al);
  kio_opts_free(po);
  galign_pipeline_cli_free(&cli);
  return n.done != 0 ? 0 : 1;
}
