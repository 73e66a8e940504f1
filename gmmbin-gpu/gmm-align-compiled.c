/* gmm-align-compiled: drop-in replacement of Kaldi's gmmbin/gmm-align-compiled
 * (reference section 5). The work (batches aligned through gpu-align on the
 * CPU or a CUDA GPU, messages and outputs emitted in input order exactly as
 * Kaldi prints them one utterance at a time) is gpu-align/align-pipeline.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/io/io.h"
#include "base/sys/log.h"
#include "base/sys/options.h"
#include "gpu-align/align-pipeline.h"
#include "gpu-align/gpu-align.h"
#include "base/program/program.h"

static galign_pipeline *g_pipe;

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
  /* Early returns free what main owns (so leak checkers stay quiet). */
#define RETURN(rc) do { kio_opts_free(po); galign_pipeline_cli_free(&cli); return (rc); } while (0)
  int prc = kio_opts_parse(po, argc, argv);
  if (prc == KIO_OPTS_HELP) RETURN(0);
  if (prc != KIO_OPTS_OK) kio_fatal_exit();
  if (kio_opts_num_args(po) < 4 || kio_opts_num_args(po) > 5) {
    kio_opts_print_usage(po);
    RETURN(1);
  }
  kio_log_ours();
  if (galign_pipeline_cli_apply(&cli, &cfg) != KIO_OK) kio_fatal_exit();
  cfg.model_rxfilename = kio_opts_arg(po, 1);
  cfg.graphs_rspecifier = kio_opts_arg(po, 2);
  cfg.feats_rspecifier = kio_opts_arg(po, 3);
  cfg.ali_wspecifier = kio_opts_arg(po, 4);
  cfg.scores_wspecifier = kio_opts_opt_arg(po, 5);
  cfg.gpu_feats = 1;  /* KALDI_GPU_FEATS_GPU=1: the feature chain on our own GPU context */

  /* A fatal error (ERROR logged) leaves the tables open: kio_fatal_exit
   * abandons the outputs (base/io/io.h) and exits 255. */
  if (galign_pipeline_open(&g_pipe, &cfg) != KIO_OK) kio_fatal_exit();
  if (galign_pipeline_run(g_pipe, NULL, NULL) != KIO_OK) kio_fatal_exit();
  galign_pipeline_log_summary(g_pipe);
  galign_pipeline_counts n;
  galign_pipeline_get_counts(g_pipe, &n);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  /* An error found while closing a table (Kaldi finds it in a destructor
   * and aborts) is a fatal error too. */
  if (galign_pipeline_close(g_pipe) != KIO_OK) kio_fatal_exit();
  galign_pipeline_free(g_pipe);
  g_pipe = NULL;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  KIO_VLOG(2, "Closing and freeing took %.3f s",
           (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
  RETURN(n.num_done != 0 ? 0 : 1);
#undef RETURN
}
