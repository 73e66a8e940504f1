/* Internal to device/: the connection object shared by the transport
 * (svc-link.c) and the connecting side (svc-start.c). */
#ifndef KIO_SVC_INTERNAL_H
#define KIO_SVC_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "svc-link.h"

enum { MSG_MAGIC = 0x3153474b };  /* "KGS1" */

struct kio_svc {
  int fd;                  /* non-blocking */
  int rx_fd;               /* the last descriptor received (-1: none) */
  const char *peer;        /* "GPU service" or "job", for messages */
  uint8_t *rbuf;           /* the last message's payload */
  size_t rcap;
  double wait_s, stall_s;  /* see kio_svc_set_timeouts */

  uint64_t max_len;        /* longest message accepted */
  _Atomic double last_io;  /* kio_now_s of the last byte either way (read by
                              the service's main and ticker threads) */
  pthread_mutex_t send_mu; /* one message (or heartbeat) at a time */
  int sending;
  uint8_t hb[16];          /* a heartbeat's header ... */
  size_t hb_left;          /* ... and how much of it is still to send */
  int broken;              /* a heartbeat found the link broken */
  char err[200];           /* why a send failed (under send_mu) */
  char rerr[200];          /* why a receive failed (the receiving thread) */
  _Atomic int err_rx;      /* the latest failure was a receive's */
};

/* Wraps a connected fd (made non-blocking): the job's side gets the job's
 * timeouts, the service's side none yet and the HELLO's limit. NULL (fd
 * closed) without memory. */
kio_svc *kio_svc_wrap(int fd, int service_side);

#endif
