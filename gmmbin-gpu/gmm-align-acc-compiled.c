/* gmm-align-acc-compiled: one pass of gmm-align-compiled followed by
 * gmm-acc-stats-ali. Aligns as gmm-align-compiled does (the same pipeline,
 * gpu-align/align-pipeline.c: same options, same messages, same alignment
 * archive) and accumulates the GMM and transition statistics of every
 * aligned batch through the pipeline's hook (gpu-acc, on the GPU when the
 * aligner runs there, in a thread of its own so that reading goes on),
 * writing the stats file gmm-acc-stats-ali would write
 * from the alignments (the same bytes when the feature archive lists the
 * utterances in the order of the graphs), then gmm-acc-stats-ali's two
 * closing lines. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/cuda-util.h"
#include "base/io/io.h"
#include "base/sys/log.h"
#include "base/sys/options.h"
#include "gpu-acc/gpu-acc.h"
#include "gpu-align/align-pipeline.h"
#include "gpu-align/gpu-align.h"
#include "base/program/program.h"

#define ACC_FILE "gmm-acc-stats-ali.cc"

static galign_pipeline *g_pipe;

/* The statistics; gmm-acc-stats-ali's totals are the accumulator's. */
typedef struct {
  gacc_acc *acc;
  gacc_utt *utts;
  kio_matrix **mats;  /* the same features, to be taken */
  int cap;
} acc_ctx;
static acc_ctx g_acc;

/* A fatal error (ERROR logged): the tables are left open, kio_fatal_exit
 * abandons the outputs and exits 255 (_exit: the accumulator's thread may
 * still have a batch on the device; nothing is torn down under it). */
static void fatal(void) { kio_fatal_exit(); }

/* The pipeline's hook: hands one batch of aligned utterances to the
 * accumulator, which takes the feature matrices (no copy on this thread)
 * and returns while the device accumulates (this thread goes back to
 * reading). An error of the previous batch or of this one's checks is
 * logged here. */
static int accumulate(void *user, int n, const galign_pipeline_utt *utts) {
  acc_ctx *c = user;
  if (n > c->cap) {
    gacc_utt *u = realloc(c->utts, (size_t)n * sizeof *u);
    if (!u) { KIO_ERROR("Out of memory"); return KIO_ERR; }
    c->utts = u;
    kio_matrix **m = realloc(c->mats, (size_t)n * sizeof *m);
    if (!m) { KIO_ERROR("Out of memory"); return KIO_ERR; }
    c->mats = m;
    c->cap = n;
  }
  for (int i = 0; i < n; i++) {
    c->utts[i] = (gacc_utt){utts[i].key, utts[i].feats, utts[i].res->ali};
    c->mats[i] = utts[i].feats;
  }
  return gacc_accumulate_batch_take(c->acc, n, c->utts, c->mats);
}

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
  /* Early returns free what main owns (so leak checkers stay quiet). */
#define RETURN(rc) do { kio_opts_free(po); galign_pipeline_cli_free(&cli); return (rc); } while (0)
  int prc = kio_opts_parse(po, argc, argv);
  if (prc == KIO_OPTS_HELP) RETURN(0);
  if (prc != KIO_OPTS_OK) fatal();
  if (kio_opts_num_args(po) != 5) {
    kio_opts_print_usage(po);
    RETURN(1);
  }
  kio_log_ours();
  if (galign_pipeline_cli_apply(&cli, &cfg) != KIO_OK) fatal();
  cfg.model_rxfilename = kio_opts_arg(po, 1);
  cfg.graphs_rspecifier = kio_opts_arg(po, 2);
  cfg.feats_rspecifier = kio_opts_arg(po, 3);
  cfg.ali_wspecifier = kio_opts_arg(po, 4);
  const char *accs_wxfilename = kio_opts_arg(po, 5);
  cfg.scores_wspecifier = "";

  if (galign_pipeline_open(&g_pipe, &cfg) != KIO_OK) fatal();
  /* Statistics on the aligner's device or the CPU; the device is selected
   * per host thread, and the aligner was created on another one. */
  int gpu = galign_pipeline_is_gpu(g_pipe);
  const kio_tmodel *tm = galign_pipeline_tmodel(g_pipe);
  const kio_am_gmm *am = galign_pipeline_am(g_pipe);
  char why[256] = "";
  if (galign_aligner_is_remote(galign_pipeline_aligner(g_pipe))) {
    /* the aligner is on the GPU service: so are the statistics */
    gacc_on_loss on_loss = cfg.use_gpu == GALIGN_GPU_OPTIONAL ? GACC_LOSS_GPU_OR_CPU
                           : cfg.use_gpu == GALIGN_GPU_WAIT   ? GACC_LOSS_GPU_WAIT
                                                              : GACC_LOSS_GPU;
    if (gacc_new_remote(&g_acc.acc, tm, am, on_loss, why, sizeof why) != KIO_OK) {
      if (on_loss == GACC_LOSS_GPU_OR_CPU && kio_cuda_device_count() <= 0) {
        KIO_LOG("Accumulating on the CPU (GPU service not usable: %s)", why);
        gpu = 0;
      } else {
        KIO_LOG("Accumulating on a GPU context of our own (GPU service not usable: %s)", why);
      }
    }
  }
  if (!g_acc.acc) {
    if (gpu && kio_cuda_select(0, NULL, 0) != KIO_OK) fatal();
    if (gacc_new(&g_acc.acc, gpu ? "gpu" : "cpu", tm, am) != KIO_OK) fatal();
  }
  if (galign_pipeline_run(g_pipe, accumulate, &g_acc) != KIO_OK) fatal();
  /* the last batch (its ERROR, if any, is logged here) */
  double like;
  int64_t frames;
  if (gacc_get_totals(g_acc.acc, &like, &frames) != KIO_OK) fatal();
  galign_pipeline_log_summary(g_pipe);
  /* what gmm-acc-stats-ali would print after reading these alignments */
  char buf[32];
  KIO_LOG_AT(KIO_LOG_INFO, "main", ACC_FILE, 115,
             "Overall avg like per frame (Gaussian only) = %s over %lld frames.",
             kio_fmt_g(buf, frames > 0 ? like / (double)frames : -NAN), (long long)frames);
  /* The tables before the stats: statistics of inputs that turn out to have
   * failed (a read error or a failed pipe seen when closing) are not
   * written; an error there is fatal. */
  if (galign_pipeline_close(g_pipe) != KIO_OK) fatal();
  gacc_stats stats;
  memset(&stats, 0, sizeof stats);
  if (gacc_get_stats(g_acc.acc, &stats) != KIO_OK ||
      gacc_stats_write(accs_wxfilename, binary, &stats) != KIO_OK)
    fatal();
  KIO_LOG_AT(KIO_LOG_INFO, "main", ACC_FILE, 123, "Written accs.");
  gacc_stats_free(&stats);
  galign_pipeline_counts n;
  galign_pipeline_get_counts(g_pipe, &n);
  galign_pipeline_free(g_pipe);
  g_pipe = NULL;
  gacc_free(g_acc.acc);
  free(g_acc.utts);
  free(g_acc.mats);
  RETURN(n.num_done != 0 ? 0 : 1);
#undef RETURN
}
