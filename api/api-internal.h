/* Internal to api/: the handles behind include/kaldi-gpu-align.h and the
 * frame every public call runs in (api.c): its log lines routed to the
 * handle's callback, its first ERROR kept as the thread's last error. */
#ifndef KGA_API_INTERNAL_H
#define KGA_API_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "include/kaldi-gpu-align.h"
#include "base/model/fst.h"
#include "base/model/model.h"
#include "gpu-acc/gpu-acc.h"
#include "gpu-align/gpu-align.h"

/* ---- the frame of one public call (api.c) ---- */
typedef struct kga_call {
  kga_log_fn log;
  void *log_user;
  int mute;               /* 1: lines dropped (cleaning up after a fatal error:
                             Kaldi prints nothing after its ERROR line) */
  char err[1024];         /* the first ERROR line's message */
  int direct_before;      /* the thread's kio_log_thread_direct() before */
  struct kga_call *prev;  /* the frame this one is nested in (same thread) */
} kga_call;

/* Starts a call on this thread: its lines go to log (NULL: dropped). */
void kga_call_begin(kga_call *c, kga_log_fn log, void *log_user);
/* Ends it: a failed status leaves its message as the thread's last error
 * (the first ERROR line's, else the detail given to kga_call_fail, else
 * the status's name). Returns status. */
int kga_call_end(kga_call *c, int status);
/* A failure the library finds itself (bad argument...): the message is
 * kept as the call's error, nothing is logged. Returns status. */
int kga_call_fail(kga_call *c, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A handle's calls do not overlap (one would corrupt the other's work
 * buffers): KGA_OK with *busy taken, or KGA_EINVAL (reason kept in c). */
int kga_busy_take(kga_call *c, atomic_int *busy);
static inline void kga_busy_give(atomic_int *busy) { atomic_store(busy, 0); }
/* kio status -> kga status: KIO_OK -> KGA_OK, anything else -> KGA_ERROR. */
static inline int kga_from_kio(int rc) { return rc == 0 ? KGA_OK : KGA_ERROR; }
/* Archive calls (the pipelines) run one at a time per process: their log
 * capture is process-wide. KGA_OK, or KGA_EINVAL (reason kept in c) when
 * this thread is inside one already (from a callback: waiting would never
 * end). */
int kga_archive_lock(kga_call *c);
void kga_archive_unlock(void);

/* ---- graphs (api-graph.c) ---- */
struct kga_graph {
  kio_fst fst;
};
/* The nonzero output labels of the least-cost path of g whose input labels
 * (epsilons aside) are ali[0..T-1] (the decoder's best path; Kaldi's
 * GetLinearSymbolSequence words). *words malloc'ed (may be NULL when n is
 * 0). KIO_ERR if no such path or no memory. */
int kga_words_on_path(const kio_fst *g, const int32_t *ali, int32_t T, int32_t **words,
                      int32_t *n);

/* ---- the aligner (api-align.c) ---- */
struct kga_aligner {
  kga_aligner_opts o;
  galign_opts gopts;
  galign_use_gpu use_gpu;
  kio_tmodel tm;
  kio_am_gmm am;
  galign_aligner *backend;  /* made at the first call that aligns */
  int model_changed;        /* boosted since the backend was made */
  pthread_t warm;           /* CUDA context being created */
  int warm_running;
  pthread_mutex_t warm_mu;
  atomic_int busy;          /* a call is running on it */
};
/* KGA_OK, or KGA_EINVAL with the reason kept in c. */
int kga_aligner_check_opts(kga_call *c, const kga_aligner_opts *o);
/* Model read, warm-up started (shared with kga_fused). */
int kga_aligner_init(kga_aligner *al, const char *model_rxfilename, const kga_aligner_opts *o);
void kga_aligner_fini(kga_aligner *al);
/* Waits for the warm-up (idempotent; the pipeline's warm_wait). */
void kga_aligner_warm_wait(void *al);
/* Drops a backend made before the model changed. */
void kga_aligner_refresh(kga_aligner *al);

/* gmm-align-compiled's run through the pipeline (gpu-align/align-pipeline.h)
 * for kga_align_archive and kga_fused_archive; ext adds the fused pass's
 * steps (NULL: none). Fatal errors: the pipeline discarded, the call muted.
 * Returns a kga status. */
struct galign_pipeline;
struct galign_pipeline_utt;
typedef struct {
  /* after the pipeline is open (the backend known): KIO_OK or KIO_ERR */
  int (*after_open)(void *u, struct galign_pipeline *p);
  /* per batch of aligned utterances (the pipeline's hook) */
  int (*hook)(void *u, int n, const struct galign_pipeline_utt *utts);
  /* after the run: before the closing lines, and after them */
  int (*before_summary)(void *u);
  void (*after_summary)(void *u);
  void *u;
} kga_archive_ext;
int kga_archive_run(kga_call *c, kga_aligner *al, const char *graphs_rspecifier,
                    const char *feats_rspecifier, const kga_archive_opts *o, int gpu_feats,
                    const kga_archive_ext *ext, kga_align_counts *counts);

/* ---- the accumulator (api-acc.c) and the fused pass (api-fused.c) ---- */
struct kga_acc {
  kga_acc_opts o;
  kio_tmodel tm;
  kio_am_gmm am;
  gacc_acc *backend;
  atomic_int busy;
  kga_acc_counts counts;
  double t_created;  /* for the first run's time line (model read included) */
};
/* The statistics of acc as gmm-acc-stats-ali writes them, to a file or in
 * memory (shared with the fused pass). */
int kga_stats_write(gacc_acc *acc, const kio_tmodel *tm, const kio_am_gmm *am,
                    const char *wxfilename, int binary);
int kga_stats_write_mem(gacc_acc *acc, const kio_tmodel *tm, const kio_am_gmm *am, int binary,
                        void **bytes, size_t *len);

#endif
