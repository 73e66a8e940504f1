/* Internal to the pipeline (align-pipeline.c, align-gqueue.c): its state
 * and the graph queue that reads graph archives ahead in a thread. */
#ifndef GALIGN_ALIGN_PIPELINE_IMPL_H
#define GALIGN_ALIGN_PIPELINE_IMPL_H

#include <pthread.h>
#include <stdatomic.h>

#include "align-batch.h"
#include "align-gfeat.h"
#include "align-margin.h"
#include "align-pipeline.h"

/* Where this thread's log lines go: NULL = print now (on the thread that
 * runs the pipeline). */
extern _Thread_local event_list *galign_t_capture;


/* A graph read ahead, with the lines logged while advancing to it. */
enum { GQ_CAP = 1024 };  /* ~14 MB of tri graphs: the reader rarely waits for us */
typedef struct gitem {
  char *key;
  kio_fst fst;
  int end;             /* no more graphs (done) */
  event_list lines;
} gitem;

struct galign_pipeline {
  galign_pipeline_cfg cfg;
  const kio_tmodel *tm;   /* own_tm or the caller's */
  const kio_am_gmm *am;
  kio_tmodel own_tm;
  kio_am_gmm own_am;
  galign_aligner *aligner;
  int stopped;            /* cfg.each / cfg.progress asked to stop */
  int beams_ok, want_per_frame, prep_threads;
  kio_seq_reader *graphs;
  kio_ra_reader *feats;
  galign_gfeat *gf;       /* features computed on the device (align-gfeat.h) */
  /* gmm-align's form (tr): features in order, transcripts by key; or
   * (by_key) features in order, graphs by key */
  int tr, by_key;
  kio_seq_reader *fseq;
  kio_ra_reader *trans, *gra;
  /* graph queue: archives are read ahead by a thread (gq_*), scp graphs in
   * the main thread as Kaldi does (direct) */
  int gq_direct, gq_thread_on, gq_stop, gq_started;
  struct gitem *gq;
  long gq_head, gq_tail;  /* items consumed / produced (gq[i % GQ_CAP]) */
  pthread_mutex_t gq_mu;
  pthread_cond_t gq_cv;
  pthread_t gq_thread;
  kio_writer *ali, *scores, *per_frame;
  int closed;
  batch bufs[2];
  batch *cur, *next;
  /* worker thread (one batch at a time) */
  batch *wb;
  pthread_t thread;
  int running;
  atomic_int wb_done, init_done;  /* set by the worker / init thread when it ends */
  /* aligner creation, overlapping the opening of the tables; before it,
   * the device's context is created while the model is read */
  pthread_t init_thread, warm_thread;
  int init_running, init_rc, warm_running;
  event_list init_lines;
  galign_pipeline_hook hook;
  void *user;
  galign_pipeline_counts n;
  galign_prior_table *priors;  /* margin mode's prior alignments (or NULL) */
  galign_margin_counts mc;
  /* seconds: setup, reading (graphs, features), preparation, alignment,
   * writing, hook; t_start = open */
  double t_start, t_setup, t_read, t_graphs, t_feats, t_prep, t_align, t_write, t_hook;
  double t_prep_main;  /* preparation done by the reading thread (t_prep: worker) */
};

/* ---- graph queue (align-gqueue.c): archives are read ahead by a thread,
 * scp graphs in the calling thread as Kaldi does ---- */
int galign_gq_open(galign_pipeline *p);   /* after the tables are open */
void galign_gq_join(galign_pipeline *p);  /* stops and joins the thread */
void galign_gq_free(galign_pipeline *p);
/* The graph source seen by read_batch: the current entry is gq_head. */
int galign_gs_done(galign_pipeline *p);
const char *galign_gs_key(galign_pipeline *p);
/* 1 if the next entry may have the same key (then the features are copied:
 * a doubly sorted reader cannot give the object out twice). */
int galign_gs_next_same(galign_pipeline *p, const char *key);
/* Moves the current graph into *dst (its old buffers go back for reuse). */
int galign_gs_take(galign_pipeline *p, kio_fst *dst);
/* Advances to the next entry; its lines are logged here, as Kaldi's Next()
 * logs them. */
void galign_gs_next(galign_pipeline *p);

#endif
