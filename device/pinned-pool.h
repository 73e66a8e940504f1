/* A pool of page-locked host blocks over a driver's allocator.
 *
 * Allocating page-locked memory is slow (the pages are pinned one by one)
 * and serialises every stream of the device while it runs, so jobs whose
 * buffers grow at the same time (the GPU service's connections) stall each
 * other. The pool asks the driver for slabs, rarely, and hands out
 * power-of-two blocks carved from them; freed blocks wait on a free list of
 * their size for the next request. A block larger than a quarter of a slab
 * takes an empty slab whole when there is one, else is the driver's own,
 * kept in a small cache when freed. Slabs go back to the driver only on a
 * trim, only those with no block in use, and not below the reserve.
 *
 * Thread-safe (one mutex). The backend is a parameter so that the logic is
 * tested without a device (tests/unit/check_pinned_pool.c). */
#ifndef KIO_DEVICE_PINNED_POOL_H
#define KIO_DEVICE_PINNED_POOL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  /* NULL on failure */
  void *(*alloc)(size_t bytes);
  void (*free)(void *p);
} kio_pinned_backend;

typedef struct {
  int64_t driver_allocs, driver_frees; /* backend calls */
  double driver_alloc_s, driver_free_s;
  size_t slab_bytes;   /* held in slabs */
  size_t in_use;       /* bytes of blocks handed out (their capacities) */
  size_t cached;       /* bytes of large blocks waiting in the cache */
  int slabs;
  int64_t large_allocs;  /* of them, blocks larger than the slabs' classes */
  int64_t ahead_allocs;  /* of them, slabs pinned ahead (kio_pinned_grow) */
  size_t reserve;
} kio_pinned_stats;

typedef struct kio_pinned_pool kio_pinned_pool;

/* slab: bytes per slab (a power of two, at least 1 MiB; the first slabs are
 * an eighth of it, doubling); blocks up to a quarter of it come from slabs;
 * cache_limit: bytes of freed large blocks kept. NULL when out of memory or
 * for bad arguments. */
kio_pinned_pool *kio_pinned_pool_new(kio_pinned_backend be, size_t slab, size_t cache_limit);
/* Frees every slab and cached block; blocks still in use are lost. */
void kio_pinned_pool_free(kio_pinned_pool *p);
/* At least bytes (16-byte aligned); NULL when the backend fails. */
void *kio_pinned_alloc(kio_pinned_pool *p, size_t bytes);
void kio_pinned_release(kio_pinned_pool *p, void *ptr);
/* The cached large blocks and the slabs with no block in use, back to the
 * backend. */
void kio_pinned_trim(kio_pinned_pool *p);
/* Slab bytes to pin ahead of need and to keep through trims. Pinning
 * stalls the device, so a process that will need much page-locked memory at
 * once (the GPU service, when many jobs start batches together) pins it
 * while the device is idle. An empty slab then also holds a large block
 * whole. */
void kio_pinned_set_reserve(kio_pinned_pool *p, size_t bytes);
/* One full slab from the backend if the slabs hold less than the reserve
 * (the backend called without the pool's lock): 1 pinned, 0 nothing to do,
 * -1 the backend failed (the reserve is then lowered to what is held). */
int kio_pinned_grow(kio_pinned_pool *p);
void kio_pinned_get_stats(kio_pinned_pool *p, kio_pinned_stats *out);

#ifdef __cplusplus
}
#endif

#endif
