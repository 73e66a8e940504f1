/* Internal to gpu-acc (and the GPU service): accumulation through the
 * per-user GPU service (see acc-remote.c for the wire format). The job's
 * side is a backend of gacc_acc (a->remote); the service's side decodes a
 * batch and runs it on the service's own accumulator. */
#ifndef GACC_ACC_REMOTE_H
#define GACC_ACC_REMOTE_H

#include <stddef.h>
#include "device/svc-link.h"
#include "gpu-acc.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ACC requests a job keeps unanswered on a connection of its own (the next
 * batch is packed and sent while the service accumulates the one before),
 * and the shared-memory regions they take in turn: request k writes region
 * k mod GACC_REMOTE_REGIONS, which the service is done with once it
 * answered k; request k + GACC_REMOTE_REGIONS is sent only after that
 * answer was read. */
enum { GACC_REMOTE_INFLIGHT = 2, GACC_REMOTE_REGIONS = GACC_REMOTE_INFLIGHT };

/* The job's side, called by the entries of acc-cpu.c when a->remote. */
int gacc_remote_batch(gacc_acc *a, int n, const gacc_utt *utts, gacc_utt_result *res);
int gacc_remote_start(gacc_acc *a, int n, const gacc_utt *utts, gacc_utt_result *res);
/* The start entry with the features taken into the kept batch (no copy on
 * the caller's thread; gacc_accumulate_batch_start_take). */
int gacc_remote_start_take(gacc_acc *a, int n, const gacc_utt *utts, kio_matrix *const *feats,
                           gacc_utt_result *res);
int gacc_remote_async(gacc_acc *a, int n, const gacc_utt *utts);
/* The take entry: on a fused accumulator the features are taken (kept for
 * a lost service without a copy), else as gacc_remote_async. */
int gacc_remote_take(gacc_acc *a, int n, const gacc_utt *utts, kio_matrix *const *feats);
int gacc_remote_wait(gacc_acc *a);
/* Collects the replies up to the oldest ACC request's (gacc_wait_first). */
int gacc_remote_wait_first(gacc_acc *a);
/* ACC requests the start-take entry keeps unanswered (1 on a fused
 * accumulator). */
int gacc_remote_inflight(const gacc_acc *a);
/* out already shaped for the model. */
int gacc_remote_stats(gacc_acc *a, gacc_stats *out);
void gacc_remote_free(gacc_acc *a);

/* ---- the service's side ---- */
int gacc_serve_hello(kio_msg_reader *req, const void **model, size_t *model_len);
typedef struct gacc_serve gacc_serve;
gacc_serve *gacc_serve_new(void);
void gacc_serve_free(gacc_serve *s);
/* The descriptor that came with an ACC request (-1: none; s takes it): the
 * job's shared memory, mapped by gacc_serve_acc. */
void gacc_serve_give_fd(gacc_serve *s, int fd);
/* ACC requests whose features came through the shared memory so far. */
int gacc_serve_shm_requests(const gacc_serve *s);
/* An ACC request accumulated into a (log lines captured), the ACCUMULATED
 * reply in reply, the batch's status in *batch_rc. KIO_ERR only for a
 * malformed request. */
int gacc_serve_acc(gacc_serve *s, gacc_acc *a, kio_msg_reader *req, kio_msg *reply,
                   int *batch_rc);
/* The STATS_ARE reply (refers to s until the next call). */
int gacc_serve_stats(gacc_serve *s, gacc_acc *a, kio_msg *reply, int *batch_rc);
/* A fused alignment connection: after a request is aligned and answered,
 * its aligned utterances (features in the request's payload, which must
 * stay as they are until the next gacc_serve_fused_end) are accumulated
 * on a's worker. Returns 1 if something runs now. */
int gacc_serve_fused_start(gacc_serve *s, gacc_acc *a, int n, const kio_matrix *const *feats,
                           const int32_t *const *ali, uint32_t seq);
/* Waits for what runs (before the next request is aligned): its outcome
 * is kept for the next reply. KIO_ERR once an accumulation failed. */
int gacc_serve_fused_end(gacc_serve *s, gacc_acc *a);
/* Appends the accumulation part to a reply: the outcome of the last
 * accumulation ended, then (stats) the statistics so far. */
void gacc_serve_fused_put(gacc_serve *s, gacc_acc *a, kio_msg *reply, int stats);

#ifdef __cplusplus
}
#endif
#endif
