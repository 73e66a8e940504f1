/* Internal to base/: worker threads for one feature chain (feat-pool.c). */
#ifndef KIO_FEAT_POOL_H
#define KIO_FEAT_POOL_H

#include <stdint.h>

typedef struct kio_fpool kio_fpool;
typedef void (*kio_fpool_fn)(void *arg, int32_t t0, int32_t t1);

/* KIO_FEATS_THREADS (default 1: no pool). */
int kio_fpool_threads(void);
/* threads - 1 workers; NULL for fewer than 2 threads (runs inline). */
kio_fpool *kio_fpool_new(int threads);
/* fn(arg, t0, t1) over [0, T) in chunks that are multiples of align (the
 * last one excepted), on the workers and the caller; returns when done. */
void kio_fpool_run(kio_fpool *p, int32_t T, int32_t align, kio_fpool_fn fn, void *arg);
void kio_fpool_free(kio_fpool *p);

#endif
