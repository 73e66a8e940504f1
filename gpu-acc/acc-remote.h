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

/* The job's side, called by the entries of acc-cpu.c when a->remote. */
int gacc_remote_batch(gacc_acc *a, int n, const gacc_utt *utts, gacc_utt_result *res);
int gacc_remote_start(gacc_acc *a, int n, const gacc_utt *utts, gacc_utt_result *res);
int gacc_remote_async(gacc_acc *a, int n, const gacc_utt *utts);
int gacc_remote_wait(gacc_acc *a);
/* out already shaped for the model. */
int gacc_remote_stats(gacc_acc *a, gacc_stats *out);
void gacc_remote_free(gacc_acc *a);

/* ---- the service's side ---- */
int gacc_serve_hello(kio_msg_reader *req, const void **model, size_t *model_len);
typedef struct gacc_serve gacc_serve;
gacc_serve *gacc_serve_new(void);
void gacc_serve_free(gacc_serve *s);
/* An ACC request accumulated into a (log lines captured), the ACCUMULATED
 * reply in reply, the batch's status in *batch_rc. KIO_ERR only for a
 * malformed request. */
int gacc_serve_acc(gacc_serve *s, gacc_acc *a, kio_msg_reader *req, kio_msg *reply,
                   int *batch_rc);
/* The STATS_ARE reply (refers to s until the next call). */
int gacc_serve_stats(gacc_serve *s, gacc_acc *a, kio_msg *reply, int *batch_rc);

#ifdef __cplusplus
}
#endif
#endif
