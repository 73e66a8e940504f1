/* Internal to gpu-acc: the job's side of accumulation through the GPU
 * service (acc-remote.c: the requests; acc-keep.c: the batches kept since
 * the service's last statistics, and the job's own backend from there when
 * the service is lost). */
#ifndef GACC_ACC_REMOTE_IMPL_H
#define GACC_ACC_REMOTE_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "device/svc-link.h"
#include "gpu-align/align-remote.h"
#include "gpu-align/align-shm.h"
#include "acc-internal.h"
#include "acc-remote.h"

/* A batch sent since the last checkpoint: copies of its keys, features and
 * alignments in one block. */
typedef struct kept {
  struct kept *next;
  int n;
  gacc_utt *utts;
  kio_matrix *mats;
  size_t bytes;
  int owns;            /* the features were taken: mats own them */
  uint32_t seq_first;  /* fused: the first request it went with; a connection
                          of its own: the ACC request's number */
  int pending;         /* sent, its reply not read yet */
  gacc_utt_result *res;/* pending: where its results go (NULL: only the sums) */
} kept;

/* Replies a connection of its own awaits: its ACC requests (at most
 * GACC_REMOTE_INFLIGHT, acc-remote.h) and a checkpoint's STATS between
 * them. */
enum { ACC_QUEUE = GACC_REMOTE_INFLIGHT + 2 };

/* Frees k (its taken matrices too). */
void gacc_kept_free(kept *k);

struct gacc_remote {
  kio_svc *svc;
  kio_msg msg;
  /* the replies awaited, in the order the requests went: an ACC request's
   * (its kept batch) or a STATS request's (k NULL; seq: the ACC requests
   * sent before it, which its statistics cover) */
  struct { kept *k; uint32_t seq; } q[ACC_QUEUE];
  int qhead, qn;
  int nacc;               /* ACC requests among them */
  int inflight;           /* at most this many ACC requests unanswered */
  uint32_t nsent;         /* ACC requests sent */
  int stats_asked;        /* a STATS request is among the replies awaited */
  int in_wait_first;      /* collecting the oldest batch for its caller */
  int in_wait_all;        /* collecting every reply */
  char desc[160];
  gacc_on_loss on_loss;
  kept *kept_first, *kept_last;
  size_t kept_bytes, keep_limit;
  double ck_like;         /* a->like_sum, a->frames_sum at the checkpoint */
  int64_t ck_frames;
  /* fused: the batches went with the aligner's requests */
  const galign_aligner *al;
  galign_acc_link *link;
  /* taken matrices of batches no longer kept, given back by the next take
   * (the caller's reader reuses their buffers, as with its own) */
  kio_matrix *spare;
  int nspare, cap_spare;
  galign_shm shm[GACC_REMOTE_REGIONS]; /* the features of ACC requests */
  size_t shm_min;         /* fewer bytes go inline (0: all) */
  int shm_off;            /* no memfd here: inline */
  size_t shm_last;        /* bytes of the last request through shared memory */
  int nwarm;              /* regions faulted in ahead (galign_shm_warm) */
  /* where the time of a connection of its own goes (--verbose=2, at the end) */
  int nreq, ntaken, most; /* most: ACC requests unanswered at once */
  int nstats_ahead;       /* checkpoints asked for behind a request in flight */
  double t_wait, t_fill, t_keep;
};

/* Frees k; its taken matrices go to r's spares (at most two batches'
 * worth), which later batches hand to the caller. */
void gacc_kept_drop(gacc_remote *r, kept *k);
void gacc_kept_free_all(gacc_remote *r);
/* A copy of the batch, appended to the kept ones; NULL without memory.
 * feats (NULL: copied): the features are taken, each swapped with a spare
 * or an empty matrix. */
kept *gacc_keep_batch(gacc_remote *r, int n, const gacc_utt *utts, kio_matrix *const *feats);
/* The service is lost (why): the job goes on by itself from the last
 * checkpoint, redoing the kept batches (those in flight: their results into
 * their callers' res). The outcome of batches in flight after the first of
 * them (their log lines, an error) is held for the accumulator's next entry
 * (gacc_held_out), so that it comes after the earlier batch's collection as
 * without a loss. KIO_OK once redone; KIO_ERR: a fatal error, logged. */
int gacc_remote_fall_back(gacc_acc *a, const char *why);
/* How many bytes of batches a job keeps before it asks for a checkpoint. */
size_t gacc_keep_limit(const gacc_stats *st);

#endif
