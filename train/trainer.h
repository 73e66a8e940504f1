/* GMM training in one process (prefix trn_): the iteration loop of
 * Kaldi's steps/train_mono.sh, train_deltas.sh and train_lda_mllt.sh with
 * graphs compiled once, features computed once and kept, alignment and
 * accumulation fused on realignment iterations, and gmm-est in process
 * (est.h). The scripts in steps-gpu/ run Kaldi's own initialisation (tree,
 * first model, converted alignments) and then this loop; the experiment
 * directory it leaves is the stock script's (models, occs, ali.JOB.gz,
 * log/ with the per-job lines of the programs it stands for).
 *
 * Default mode: the statistics of each job (the data/splitNJ/JOB subsets,
 * in their feature order) are accumulated apart and summed in the order of
 * the scripts' shell glob, so every model is the stock script's, byte for
 * byte, under the same rounding profile. Stochastic mode (trn_stoch): each
 * update from a random subset of the data, merged with earlier subsets'
 * statistics (Novak et al.); see docs/trainer.md. */
#ifndef TRN_TRAINER_H
#define TRN_TRAINER_H

#include <stdint.h>

#include "base/matrix/matrix.h"
#include "base/model/fst.h"
#include "gpu-align/gpu-align.h"
#include "train/est.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  /* inputs (strings borrowed) */
  const char *dir;            /* experiment directory */
  const char *lang;           /* lang directory */
  const char *sdata;          /* data/splitNJ */
  int nj;
  const char *feats;          /* features rspecifier, JOB = the job (1-based) */
  const char *mllt_feats;     /* after an MLLT update: also ITER = the iteration */
  const char *text_rspec;     /* transcripts (word ids), JOB as above */
  const char *ali_in;         /* initial alignments rspecifier with JOB, or "" */
  int equal_align;            /* 1: pass 0 of train_mono (equal alignments,
                                 0.mdl, --min-gaussian-occupancy=3) */
  /* schedule (the scripts' options) */
  int start_iter;             /* first model: DIR/START.mdl (0 with equal_align) */
  int num_iters;
  const char *realign_iters;  /* "10 20 30" */
  const char *mllt_iters;     /* "" unless LDA+MLLT */
  const char *mllt_hook;      /* shell command run at an MLLT iteration */
  int max_iter_inc;
  int32_t start_gauss, inc_gauss;
  float power;
  galign_opts align;          /* scales, beams, careful */
  float first_beam;           /* iteration 1's beam (train_mono's initial beam) */
  float boost_silence;
  const char *silence_csl;    /* optional_silence.csl contents */
  trn_est_opts est;           /* gmm-est's other options */
  galign_use_gpu use_gpu;
  int write_graphs;           /* also fsts.JOB.gz */
  int ali_text;               /* ali.JOB.gz in text form (train_mono's) */
  int phone_stats;            /* with the final ali.JOB.gz: phone_stats.JOB.gz */
  int threads;                /* CPU threads (<= 0: this process's share) */
  /* stochastic mode (0: off) */
  double stoch_batch;         /* fraction of the frames per update */
  double stoch_passes;        /* full data passes in all */
  double stoch_memory;        /* fraction of the data whose statistics are merged */
  int stoch_speaker;          /* 1: sample speakers, 0: utterances */
  uint64_t stoch_seed;
  int replicate;              /* developers: each utterance this many times */
  const char *start_after;    /* "" or a file: read the features and start the
                                 device, then wait for it (the script's stages
                                 before the loop); "model": start the graphs
                                 and wait on, "go": train, else stop */
  int start_after_pid;        /* > 0: stop waiting (and fail) when it is gone */
} trn_cfg;

void trn_cfg_default(trn_cfg *c);

/* Runs the loop. KIO_OK, or KIO_ERR after the ERROR line (the program
 * exits 255). */
int trn_run(const trn_cfg *c);

/* ---- internal: the resident data (trn-data.c) ---- */
typedef struct {
  char *key;
  int32_t job;            /* 0-based */
  int32_t spk;            /* speaker index (utt2spk order of first appearance) */
  kio_matrix *feats;      /* resident features (shared by replicas) */
  kio_fst *graph;         /* NULL: no transcript; start < 0: empty graph */
  int32_t *ali;           /* current alignment, NULL: none */
  int32_t ali_len;
  int32_t ali_stage;      /* realignment stage of ali (stochastic mode) */
  int32_t replica;        /* 0: the utterance itself; k > 0: its k-th copy */
} trn_utt;

typedef struct {
  int nj;
  int32_t n;              /* utterances, job by job in feature order */
  trn_utt *u;
  int32_t *job_start;     /* nj + 1 */
  int32_t num_spk;
  kio_matrix *feat_store; /* one per distinct utterance */
  kio_fst *graph_store;
  char **store_key;       /* the key and job of each stored utterance */
  int32_t *store_job;
  int32_t n_store;
  int64_t frames;         /* of all utterances */
  struct trn_graph_bg *gbg; /* the compilation, until trn_graphs_ready (trn-graphs.c) */
  struct trn_graph_out *gw; /* fsts.JOB.gz writers still running (trn-graphs.c) */
  double gw_t0;           /* when the last job's graphs were compiled */
  int gw_rc;              /* the compilation's and writers' outcome once joined */
  double t_feats;         /* seconds reading the features */
  int32_t *key_idx;       /* trn_data_load_graphs .. trn_data_load_ali: keys sorted */
  double t_graphs;        /* seconds starting (or compiling) the graphs */
} trn_data;

/* Keys sorted for lookups: idx orders d->u by key. */
typedef struct { const trn_data *d; int32_t *idx; } trn_key_index;
int32_t trn_key_find(const trn_key_index *ki, const char *key); /* -1: none */
/* Every job's graphs compiled into d (trn-graphs.c); with c->write_graphs
 * also written as fsts.JOB.gz by writer threads. trn_graphs_start reads the
 * tree and lexicon (their errors at once) and compiles the jobs, with
 * background on a thread of its own at a lower priority
 * (KALDI_GPU_DEV_TRAIN_GRAPHS_NICE) while the caller goes on: the
 * iterations before the first realignment need only the alignments.
 * trn_graphs_ready waits for the compilation and points the utterances at
 * their graphs (KIO_ERR if it failed: its ERROR already logged);
 * trn_graphs_failed says, without waiting, whether it has failed. The
 * writers go on after that: trn_graphs_wait waits for them too (KIO_ERR if
 * one failed). trn_graphs_abandon (a failing run) stops the compilation at
 * its next batch and waits; trn_data_free calls it. */
int trn_graphs_start(trn_data *d, const trn_cfg *c, const kio_tmodel *tm, const trn_key_index *ki,
                     int background, int gated);
int trn_graphs_ready(trn_data *d);
int trn_graphs_failed(const trn_data *d);
int trn_graphs_wait(trn_data *d);
void trn_graphs_abandon(trn_data *d);
/* Graphs started before the script's stages are done (gated, with
 * background: the script's first model is there, its alignments are not
 * yet): jobs compiled before trn_graphs_gate(d, 1) keep their log lines and
 * graphs in memory, and their compile_graphs.JOB.log and fsts.JOB.gz are
 * made when it is called, as if compiled then; trn_graphs_gate(d, 0) (the
 * script stopped) drops them and stops the compilation, leaving no file.
 * trn_graphs_discard does that and waits: the number of jobs that had been
 * compiled. */
void trn_graphs_gate(trn_data *d, int open);
/* After trn_graphs_gate(d, 1): the jobs compiled before it (-1: not gated,
 * or the compilation already joined). */
int trn_graphs_at_gate(const trn_data *d);
int trn_graphs_discard(trn_data *d);

/* The resident data in two steps: the features (nothing of the experiment
 * directory needed), then speakers, graphs and alignments with model tm;
 * with graphs_background the graphs are still compiling on return
 * (trn_graphs_ready before they are used). */
int trn_data_load_feats(trn_data *d, const trn_cfg *c);
int trn_data_load_rest(trn_data *d, const trn_cfg *c, const kio_tmodel *tm, int graphs_background);
/* The same in two steps: speakers and the graphs' start (gated: see
 * trn_graphs_gate), then the alignments (the key index kept between). */
int trn_data_load_graphs(trn_data *d, const trn_cfg *c, const kio_tmodel *tm, int graphs_background,
                         int gated);
int trn_data_load_ali(trn_data *d, const trn_cfg *c);
/* --start-after (trn-start.c): waits for the script's stages, then reads
 * the first model into tm/am, the speakers, graphs (started beside the
 * script's last stage when it says "model" first) and alignments. KIO_OK
 * to train; TRN_START_STOP when the script stopped before the loop (logged,
 * nothing of the graphs left); KIO_ERR after an ERROR. Without
 * --start-after it loads at once. st: the waits and steps, in seconds. */
enum { TRN_START_STOP = 1 };
typedef struct {
  int at_model;       /* the graphs were started at the first model */
  double wait;        /* waiting for the script, in all */
  double wait_model;  /* of which for its first model (at_model) */
  double model;       /* reading the model */
  double graphs;      /* speakers and the graphs' start (at_model) */
  double rest;        /* after "go": the rest (speakers, graphs unless started, alignments) */
} trn_start_times;
int trn_start_rest(trn_data *d, const trn_cfg *c, kio_tmodel *tm, kio_am_gmm *am, int beside,
                   trn_start_times *st);
/* Features again (after an MLLT update) from rspec (JOB, ITER replaced). */
int trn_data_reload_feats(trn_data *d, const char *rspec, int iter);
/* ali.JOB.gz of every job; with phones (the model's transitions, NULL: not)
 * also phone_stats.JOB.gz and log/get_phone_alignments.JOB.log, the first
 * step of analyze_alignments.sh (trn-phones.c). */
int trn_data_write_ali(const trn_data *d, const char *dir, int text, const kio_tmodel *phones);
int trn_phone_stats_job(const trn_data *d, const kio_tmodel *tm, const char *dir, int j);
void trn_data_free(trn_data *d);

/* "JOB" (and "ITER") replaced in a template; malloc'ed. */
char *trn_subst(const char *tmpl, int job, int iter);

#ifdef __cplusplus
}
#endif
#endif
