/* Internal to base/: the feature chain's producer thread feeding its reader
 * whole archive entries, taken as matrices or read as bytes through a
 * read-only FILE* (feat-ring.c). */
#ifndef KIO_FEAT_RING_H
#define KIO_FEAT_RING_H

#include <stdio.h>

#include "base/matrix/matrix.h"

typedef struct kio_ring kio_ring;

/* Starts fn(ring, arg) in a thread (all signals blocked) and returns the
 * FILE* that reads what it puts as a binary archive; *ring set. fclose(f)
 * stops the ring (later puts fail) and joins the thread; fn's results must
 * be kept in arg. NULL on failure (fn not run). */
FILE *kio_ring_start(void *(*fn)(kio_ring *, void *), void *arg, kio_ring **ring);
/* Producer: queues the entry KEY + *m, swapping *m with a recycled matrix
 * (any size: the caller resizes). 0, or -1 when the reader has closed. */
int kio_ring_put(kio_ring *r, const char *key, kio_matrix *m);
int kio_ring_stopped(kio_ring *r);
/* Reader, instead of the FILE*: the next entry, key into *key (growing
 * buffer), matrix swapped with *m. KIO_OK, KIO_EOF at the end, KIO_ERR (out
 * of memory, or the FILE* was read before). */
int kio_ring_take(kio_ring *r, char **key, size_t *keycap, kio_matrix *m);

#endif
