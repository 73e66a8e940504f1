/* The batch pipeline of gmm-align-compiled (reference section 5), shared by
 * the programs that align: read the model, graphs and features, prepare the
 * graphs, align in batches on the chosen backend, and emit in input order
 * everything Kaldi's one-utterance-at-a-time loop prints and writes (LOG
 * line per utterance, warnings, alignments, scores, per-frame
 * log-likelihoods), with Kaldi's summary counters.
 *
 * Threads: the calling thread reads batch k+1 while a worker prepares the
 * graphs of batch k (several threads) and aligns it; the calling thread
 * then emits batch k. Lines logged by the other threads are captured and
 * replayed where Kaldi would have printed them, so the log is Kaldi's
 * sequential one. For that the pipeline installs its own log handler (see
 * base/sys/log.h) from galign_pipeline_open() to the end of
 * galign_pipeline_run(); lines the calling thread logs in between (e.g. in
 * the hook) are printed at once. One pipeline at a time per process.
 *
 * Usage (a program's main):
 *   galign_pipeline_open()   model, aligner, tables, first batch
 *   galign_pipeline_run()    all batches; hook called per batch
 *   galign_pipeline_log_summary(), galign_pipeline_close(), _free()
 * A KIO_ERR from open, run or close is Kaldi's fatal error: the ERROR lines
 * are printed, every thread is joined; the program calls kio_fatal_exit()
 * (base/io/io.h: exit 255, outputs abandoned) without closing the tables (so
 * no pipe errors follow the fatal one, and no output looks complete). */
#ifndef GALIGN_PIPELINE_H
#define GALIGN_PIPELINE_H

#include <stdint.h>
#include "base/matrix/matrix.h"
#include "base/model/model.h"
#include "gpu-align.h"

#ifdef __cplusplus
extern "C" {
#endif

struct galign_pipeline_utt;
struct galign_pipeline_counts;

/* Strings are not copied: they must outlive the pipeline. */
typedef struct {
  const char *model_rxfilename;
  const char *graphs_rspecifier;
  const char *feats_rspecifier;
  const char *ali_wspecifier;
  const char *scores_wspecifier;     /* "" or NULL: not written */
  const char *per_frame_wspecifier;  /* "" or NULL: not written */
  galign_opts opts;
  galign_use_gpu use_gpu;
  int batch_size;                    /* utterances per batch, >= 1 */
  /* Margin mode (align-margin.h): 0 off; 1 priors from prior_rspecifier;
   * 2 (KALDI_GPU_MARGIN) priors from the file ali_wspecifier will replace. */
  int margin_mode;
  const char *prior_rspecifier;
  int32_t margin;
  /* gmm-align's form (NULL/"": gmm-align-compiled's): features read in order
   * from feats_rspecifier, transcripts looked up here, each utterance's graph
   * compiled by compile() on the preparation threads (thread-safe; logs its
   * ERROR and returns KIO_ERR on a fatal error) instead of read from
   * graphs_rspecifier. See align-source.c. */
  const char *transcripts_rspecifier;
  int (*compile)(void *user, const kio_int_vec *words, kio_fst *out);
  void *compile_user;
  /* 1: with KALDI_GPU_FEATS_GPU=1 and our own CUDA backend, a recognised feature
   * chain is computed on the device (align-gfeat.h; gmm-align-compiled). */
  int gpu_feats;
  /* 1: features read in order, graphs looked up by key in graphs_rspecifier
   * (kalpy's align_utterances): zero-length features and keys without a
   * graph are skipped with a warning, no "LOG KEY" line. */
  int features_order;
  /* 1: per-frame log-likelihoods computed even without per_frame_wspecifier
   * (for cfg.each). */
  int want_per_frame;
  /* A model read by the caller (borrowed; NULL: model_rxfilename is read). */
  const kio_tmodel *tm;
  const kio_am_gmm *am;
  /* An aligner kept by the caller from run to run (NULL: the pipeline's
   * own). If *aligner is NULL the pipeline creates it as usual and leaves it
   * there, the caller's to free; otherwise it is used as is. */
  galign_aligner **aligner;
  /* With a caller's aligner: called by the thread that creates it, before
   * (e.g. to wait for the caller's CUDA warm-up); the pipeline then starts
   * no warm-up of its own. */
  void (*warm_wait)(void *user);
  void *warm_user;
  /* Called on the pipeline's thread, in input order, for every utterance
   * that reached the decoder (after its lines and writes; status: one of
   * GALIGN_UTT_*; u->res is NULL for an empty graph), and after each batch
   * with the counts so far. A nonzero return stops the run: run returns
   * KIO_ERR with nothing logged, galign_pipeline_stopped() is 1. */
  int (*each)(void *user, const struct galign_pipeline_utt *u, int status);
  int (*progress)(void *user, const struct galign_pipeline_counts *c);
  void *each_user;
} galign_pipeline_cfg;
enum { GALIGN_UTT_ALIGNED = 0, GALIGN_UTT_FAILED = 1, GALIGN_UTT_EMPTY_GRAPH = 2 };

/* One aligned utterance (result ok) handed to the hook. Valid during the
 * call only. The hook may take the features: swap *feats with another valid
 * matrix (the pipeline no longer needs them, and reuses whatever buffer it
 * gets back). */
typedef struct galign_pipeline_utt {
  const char *key;
  kio_matrix *feats;
  const galign_result *res;   /* res->ali: feats->rows transition-ids */
  const galign_graph *graph;  /* the prepared graph it was aligned on */
} galign_pipeline_utt;

/* Called on the thread that runs the pipeline, once per batch that has
 * aligned utterances (n >= 1), in input order, after the batch's lines and
 * writes. Returns KIO_OK, or KIO_ERR after logging an ERROR (fatal: the
 * pipeline stops and returns KIO_ERR). */
typedef int (*galign_pipeline_hook)(void *user, int n, const galign_pipeline_utt *utts);

/* Kaldi's counters (gmm-align-compiled's summary lines). */
typedef struct galign_pipeline_counts {
  int num_done, num_err, num_retry;
  double tot_like;        /* sum of the aligned utterances' likelihoods */
  int64_t frame_count;    /* frames of the aligned utterances */
} galign_pipeline_counts;

typedef struct galign_pipeline galign_pipeline;

/* Reads the model, creates the aligner (in another thread, overlapping the
 * rest), opens the tables and reads the first batch. *p is set even on
 * KIO_ERR (fatal: see above). */
int galign_pipeline_open(galign_pipeline **p, const galign_pipeline_cfg *cfg);

/* The model read by open (for a hook that needs it) and the backend. */
const kio_tmodel *galign_pipeline_tmodel(const galign_pipeline *p);
const kio_am_gmm *galign_pipeline_am(const galign_pipeline *p);
int galign_pipeline_is_gpu(const galign_pipeline *p);
/* The aligner (e.g. for galign_aligner_get_stats after the run). */
const galign_aligner *galign_pipeline_aligner(const galign_pipeline *p);

/* Aligns and emits every utterance. hook may be NULL. KIO_OK, or KIO_ERR
 * on a fatal error (Kaldi's: AddTransitionProbs, beams, dimension, invalid
 * likelihood, a failed write or read, the hook's). Removes the log handler. */
int galign_pipeline_run(galign_pipeline *p, galign_pipeline_hook hook, void *user);

void galign_pipeline_get_counts(const galign_pipeline *p, galign_pipeline_counts *c);

/* With --verbose >= 1 a VLOG[1] line with the time split (setup, reading,
 * preparation, alignment and its phases, writing, hook); then the three
 * closing LOG lines of gmm-align-compiled. */
void galign_pipeline_log_summary(const galign_pipeline *p);

/* Closes the readers, then the writers (discarded instead if a reader
 * failed). KIO_ERR when one failed (logged): a fatal error. */
int galign_pipeline_close(galign_pipeline *p);

/* Frees everything (closes the tables still open). NULL is allowed. */
void galign_pipeline_free(galign_pipeline *p);
/* After a fatal error, for a caller that goes on living (a library): joins
 * the threads, closes the readers and abandons the outputs as
 * kio_fatal_exit would (files removed, pipes killed), then frees. Lines
 * logged meanwhile (a failed input pipe) are the caller's to drop. */
void galign_pipeline_discard(galign_pipeline *p);
/* 1 if the run ended because cfg.each or cfg.progress asked to stop. */
int galign_pipeline_stopped(const galign_pipeline *p);

/* Command-line options shared by gmm-align-compiled and gmm-align-acc-compiled:
 * the decoding options, --write-per-frame-acoustic-loglikes, --use-gpu and
 * --batch-size. Owner of the strings: the struct. */
typedef struct {
  char *per_frame_wspecifier;
  char *use_gpu;
  char *gpu_memory;   /* --gpu-memory (device/gpu.h) */
  int32_t batch_size;
  char *prior_rspecifier;
  int32_t margin;
} galign_pipeline_cli;
struct kio_opts;
/* Sets Kaldi's defaults in cfg->opts and cli, and registers the options. */
void galign_pipeline_cli_register(struct kio_opts *po, galign_pipeline_cli *cli,
                                  galign_pipeline_cfg *cfg);
/* After parsing: validates --use-gpu, --batch-size and --margin (ERROR +
 * KIO_ERR on a bad value) and copies them into cfg (cfg borrows the
 * strings); sets cfg's margin mode from --prior-alignments, else from
 * KALDI_GPU_MARGIN=N (in the environment; a bad value: LOG, full search). */
int galign_pipeline_cli_apply(const galign_pipeline_cli *cli, galign_pipeline_cfg *cfg);
void galign_pipeline_cli_free(galign_pipeline_cli *cli);
/* Reads the priors of cfg's margin mode (NULL when off or, for mode 2,
 * when there are none: see galign_prior_from_output). Called by
 * galign_pipeline_open before any output is opened. KIO_ERR (logged) when
 * --prior-alignments cannot be read. */
struct galign_prior_table;
int galign_margin_open(const galign_pipeline_cfg *cfg, struct galign_prior_table **priors);

#ifdef __cplusplus
}
#endif
#endif
