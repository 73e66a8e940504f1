/* Internal to base/: a producer thread feeding a read-only FILE* through a
 * ring of buffers (feat-ring.c). */
#ifndef KIO_FEAT_RING_H
#define KIO_FEAT_RING_H

#include <stdio.h>

typedef struct kio_ring kio_ring;

/* Starts fn(ring, arg) in a thread (all signals blocked) and returns the
 * FILE* that reads what it writes. fclose(f) stops the ring (later writes
 * fail) and joins the thread; fn's results must be kept in arg. NULL on
 * failure (fn not run). */
FILE *kio_ring_start(void *(*fn)(kio_ring *, void *), void *arg);
/* 0, or -1 when the reader has closed (nothing written). */
int kio_ring_write(kio_ring *r, const void *data, size_t n);
int kio_ring_stopped(kio_ring *r);

#endif
