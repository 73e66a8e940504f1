/* gmm-align: drop-in replacement of Kaldi's gmmbin/gmm-align: features in
 * order, transcripts by key, each utterance's training graph compiled
 * in-process (train-graphs/: byte-identical to Kaldi's, with the
 * transition probabilities of --transition-scale / --self-loop-scale) on the
 * pipeline's preparation threads, overlapped with the alignment of the
 * previous batch (GPU or CPU, gpu-align/align-pipeline.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/io/io.h"
#include "base/sys/kaldi-msg.h"
#include "base/sys/log.h"
#include "base/model/model.h"
#include "base/sys/options.h"
#include "gpu-align/align-pipeline.h"
#include "gpu-align/gpu-align.h"
#include "train-graphs/train-graphs.h"
#include "base/program/program.h"


/* The pipeline's compile callback: one graph, CSR form, on the calling thread. */
static int compile_cb(void *user, const kio_int_vec *words, kio_fst *out) {
  tgraph_graph g;
  memset(&g, 0, sizeof g);
  if (tgraph_compile_one(user, words, TGRAPH_CSR, &g) != KIO_OK) {
    tgraph_graph_free(&g);
    return KIO_ERR;
  }
  kio_fst t = *out;  /* out's old buffers are freed with g */
  *out = g.fst;
  g.fst = t;
  tgraph_graph_free(&g);
  return KIO_OK;
}

int main(int argc, char *argv[]) {
  kio_program_start(argc, argv);
  tgraph_tune_malloc(argv);
  const char *usage =
      "Align features given [GMM-based] models.\n"
      "Usage:   gmm-align [options] tree-in model-in lexicon-fst-in feature-rspecifier "
      "transcriptions-rspecifier alignments-wspecifier\n"
      "e.g.: \n"
      " gmm-align tree 1.mdl lex.fst scp:train.scp 'ark:sym2int.pl -f 2- words.txt text|' "
      "ark:1.ali\n";
  galign_pipeline_cfg cfg;
  memset(&cfg, 0, sizeof cfg);
  galign_pipeline_cli cli;
  char *disambig_rx = NULL;
  tgraph_opts gopts;
  tgraph_opts_default(&gopts);

  kio_opts *po = kio_opts_new(usage);
  /* --beam, --retry-beam, --careful, --acoustic-scale (default 1), and the
   * graph compiler's --transition-scale / --self-loop-scale (default 1),
   * which here scale the probabilities compiled into the graphs. */
  galign_pipeline_cli_register(po, &cli, &cfg);
  kio_opts_string(po, "read-disambig-syms", &disambig_rx,
                  "File containing list of disambiguation symbols in phone symbol table");
  kio_opts_bool(po, "reorder", &gopts.reorder,
                "Reorder transition ids for greater decoding efficiency.");
  kio_opts_bool(po, "rm-eps", &gopts.rm_eps,
                "Remove [most] epsilons before minimization (only applicable if disambig "
                "symbols present)");
  kio_program_args(po, argc, argv, 6, 6);
  if (galign_pipeline_cli_apply(&cli, &cfg) != KIO_OK) kio_fatal_exit();
  gopts.transition_scale = cfg.opts.transition_scale;
  gopts.self_loop_scale = cfg.opts.self_loop_scale;
  cfg.opts.graph_has_probs = 1;

  kio_ctx_dep tree;
  memset(&tree, 0, sizeof tree);
  kio_tmodel tm;
  memset(&tm, 0, sizeof tm);
  int32_t *disambig = NULL, num_disambig = 0;
  tgraph_compiler *gc = NULL;
  /* The compiler has its own copy of the transition model (the pipeline
   * reads the model again for the aligner). */
  if (kio_ctx_dep_read(kio_opts_arg(po, 1), &tree) != KIO_OK ||
      kio_model_read(kio_opts_arg(po, 2), &tm, NULL) != KIO_OK ||
      tgraph_read_disambig(disambig_rx, KIO_KM_GA_DISAMBIG, &disambig, &num_disambig) != KIO_OK ||
      tgraph_create(&gc, &tm, &tree, kio_opts_arg(po, 3), disambig, num_disambig, &gopts) !=
          KIO_OK)
    kio_fatal_exit();

  cfg.model_rxfilename = kio_opts_arg(po, 2);
  cfg.feats_rspecifier = kio_opts_arg(po, 4);
  cfg.transcripts_rspecifier = kio_opts_arg(po, 5);
  cfg.ali_wspecifier = kio_opts_arg(po, 6);
  cfg.compile = compile_cb;
  cfg.compile_user = gc;

  galign_pipeline *pipe = NULL;
  if (galign_pipeline_open(&pipe, &cfg) != KIO_OK) kio_fatal_exit();
  if (galign_pipeline_run(pipe, NULL, NULL) != KIO_OK) kio_fatal_exit();
  galign_pipeline_log_summary(pipe);
  galign_pipeline_counts n;
  galign_pipeline_get_counts(pipe, &n);
  if (galign_pipeline_close(pipe) != KIO_OK) kio_fatal_exit();
  galign_pipeline_free(pipe);
  tgraph_free(gc);
  free(disambig);
  kio_tmodel_free(&tm);
  kio_ctx_dep_free(&tree);
  kio_opts_free(po);
  galign_pipeline_cli_free(&cli);
  free(disambig_rx);
  return n.num_done != 0 ? 0 : 1;
}
