/* Internal to gpu-align: the retry pass of the device decoder's utterances
 * on host threads (align-retry.c). The device decodes every utterance at
 * --beam only; one that reached no final state is handed here with its
 * likelihood rows copied back from the device and the hash size its first
 * pass ended with, and is decoded again at --retry-beam by the same code
 * (viterbi-core.h) on a host thread, while the device goes on with the next
 * sub-batch. A thread runs an utterance at the beam-40 pass many times faster
 * than one GPU thread, which made the batch's tail. Results are the same
 * bits as the device retry's (and the CPU path's). */
#ifndef GALIGN_ALIGN_RETRY_H
#define GALIGN_ALIGN_RETRY_H

#include <stdint.h>
#include "gpu-align.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct galign_retry_pool galign_retry_pool;

/* One utterance to retry. The graph and result must stay valid until
 * galign_retry_wait; ll (num_frames x graph->num_pdfs_used, unscaled) is
 * owned by the pool from galign_retry_add on. */
typedef struct {
  const galign_graph *graph;
  float *ll;
  int32_t num_frames;
  uint32_t hash_size;   /* Kaldi's HashList size at the end of the first pass */
  int want_per_frame;
  galign_result *result;
  uint8_t *redo;        /* set to 1 if the host cannot finish it (CPU path redo) */
} galign_retry_task;

/* 1 when the device decoder leaves its retries to host threads
 * ($KALDI_GPU_DEV_RETRY: host, the default, or device). */
int galign_retry_on_host(void);

/* A pool of at most $KALDI_GPU_DEV_RETRY_THREADS threads (default 4),
 * started on the first task. NULL: out of memory (logged). */
galign_retry_pool *galign_retry_new(float retry_beam, float acoustic_scale);
void galign_retry_free(galign_retry_pool *p);

/* Queues t (copied). KIO_ERR (logged): no memory; t->ll is freed then. */
int galign_retry_add(galign_retry_pool *p, const galign_retry_task *t);

/* Waits until every queued task is done. Adds the retry passes' decoder
 * statistics to *frames, *toks, *max_toks and the tasks left to the CPU to
 * *redo_count. Tasks the host could not finish (no memory, a decoder
 * status other than OK) get *t->redo = 1 and result->ok = 0. */
void galign_retry_wait(galign_retry_pool *p, int64_t *frames, int64_t *toks, int32_t *max_toks,
                       int64_t *redo_count, double *busy_s);

#ifdef __cplusplus
}
#endif
#endif
