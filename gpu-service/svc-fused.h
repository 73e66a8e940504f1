/* Internal to gpu-service: the accumulation of a fused alignment
 * connection (FUSE, the one pass: gpu-acc/acc-remote.c has the job's side
 * and the wire format). service.c's serve_align calls these around each
 * request: the previous request's accumulation runs beside the next one's
 * alignment (ended before it where device memory is short) and ends before
 * that request is answered; the aligned utterances of a request start after
 * answering it. */
#ifndef GSVC_SVC_FUSED_H
#define GSVC_SVC_FUSED_H

#include <stddef.h>
#include <stdint.h>

#include "device/svc-link.h"
#include "gpu-acc/acc-remote.h"
#include "gpu-acc/gpu-acc.h"
#include "gpu-align/align-remote.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  gacc_acc *acc;     /* NULL: not fused; else from svc-acc's pool */
  uint64_t model;    /* the connection's model entry (svc-acc.h) */
  int kind;          /* how it came: GSVC_ACC_* */
  int failed;        /* an accumulation failed: the accumulator is not kept */
  gacc_serve *sv;
  uint8_t *held;     /* the payload an accumulation reads (swapped out of the
                        request, whose slot gets the one held before) */
  size_t held_cap;
  int admitted;      /* an accumulation holds its grant of device memory */
  int started;       /* accumulations started */
  double t_wait;     /* seconds the connection waited for them to end */
} gsvc_fused;

/* For kio_log_deferred_each: appends a captured line's text to user (a
 * 200-byte buffer, lines separated by "; "): the reason a READY refuses. */
void gsvc_join_line(void *user, int level, const char *func, const char *file, int line,
                    const char *msg);

/* The connection's accumulator, from device d's pool of idle ones
 * (gsvc_acc_get: rebound to model, the entry's number, of parsed tm and
 * am) or new (on the CPU backend: use_cpu). KIO_ERR with why. */
int gsvc_fuse(gsvc_fused *f, int d, uint64_t model, const kio_tmodel *tm, const kio_am_gmm *am,
              int use_cpu, char *why, size_t why_len);
/* The running accumulation ends on device d (its outcome kept for the next
 * reply, its grant given back). KIO_ERR if an accumulation failed. */
int gsvc_fused_end(gsvc_fused *f, int d);
/* After sv's request was answered: its aligned utterances start, reading
 * the request's payload (*buf, *cap: kept until the accumulation ends,
 * exchanged for the payload kept before). sv must not parse another request
 * until then. */
void gsvc_fused_start(gsvc_fused *f, galign_serve *sv, int d, uint8_t **buf, size_t *cap);
/* The connection's end: the accumulation ended, the accumulator back in
 * the pool (gsvc_acc_end; freed instead if an accumulation failed or
 * drop: a broken context), verbose: its LOG line. */
void gsvc_fused_free(gsvc_fused *f, int d, int drop, int verbose);

#ifdef __cplusplus
}
#endif
#endif
