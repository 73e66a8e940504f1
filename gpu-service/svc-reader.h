/* Internal to gpu-service: a connection's requests read ahead. A job keeps
 * up to KIO_SVC_MAX_INFLIGHT requests in flight (device/svc-link.h); a
 * reader thread receives them while the connection's thread aligns the
 * earlier ones and writes their replies, so the next request's transfer
 * overlaps the work. Requests are handed over in the order they came and
 * answered in that order (the job matches replies to requests by order). */
#ifndef GSVC_SVC_READER_H
#define GSVC_SVC_READER_H

#include <stddef.h>
#include <stdint.h>

#include "device/svc-link.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A received request: its type, payload (owned by the reader's pool until
 * given back) and the descriptor that came with it (-1: none; taking it
 * sets it to -1). */
typedef struct {
  uint32_t type;
  uint8_t *buf;
  size_t cap;
  uint64_t len;
  int fd;
} gsvc_request;

typedef struct gsvc_reader gsvc_reader;

/* Starts reading s's requests (at most KIO_SVC_MAX_INFLIGHT waiting).
 * *busy counts the requests received and not yet answered (the caller
 * takes one off after each reply); stop() is asked before each receive (1:
 * read no more). NULL without memory or thread. */
gsvc_reader *gsvc_reader_start(kio_svc *s, _Atomic int *busy, int (*stop)(void));
/* The next request, in arrival order; NULL once the connection ended (the
 * job closed it, it failed or broke a bound: the reason is kio_svc_error's,
 * already logged where it matters). */
gsvc_request *gsvc_reader_next(gsvc_reader *r);
/* The request is done with: its buffer goes back to the pool, unless *buf
 * was swapped out (then what was swapped in). */
void gsvc_reader_done(gsvc_reader *r, gsvc_request *q);
/* The reply to the oldest request taken is about to be sent (before the
 * job can have read it: what counts as answered for gsvc_reader_most). */
void gsvc_reader_answering(gsvc_reader *r);
/* The most requests the job had unanswered at once. */
int gsvc_reader_most(gsvc_reader *r);
/* Ends the reading (the connection is shut if the reader still waits on
 * it) and frees everything. */
void gsvc_reader_stop(gsvc_reader *r);

#ifdef __cplusplus
}
#endif
#endif
