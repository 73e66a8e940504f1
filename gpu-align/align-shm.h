/* Internal to gpu-align (and gpu-acc/acc-remote.c's ACC requests): the
 * job's shared memory for requests to the GPU service (align-remote.c). A
 * request's features (and an ALIGN request's graphs) are copied into a sealed
 * memfd the service maps (one copy in the job instead of two in the kernel
 * and a wake-up per socket buffer). inflight + 1 regions per connection (at
 * most KIO_SVC_REGIONS), request by request in turn: the service reads
 * request k's (its accumulation too) until it answers k+1, and the job,
 * with at most inflight requests unanswered, sends request k + inflight + 1
 * (region k's again) only after that answer. Batches of less than SHM_MIN
 * go inline. */
#ifndef GALIGN_ALIGN_SHM_H
#define GALIGN_ALIGN_SHM_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "base/matrix/matrix.h"

#define SHM_MIN ((size_t)1 << 20)
#define SHM_MAX ((size_t)1 << 31)
#define SHM_LEAST ((size_t)256 << 20)  /* a new region's least size, at most */
/* One region. */
typedef struct {
  int fd;
  uint8_t *map;
  size_t cap;
  int sent;     /* the service has the descriptor */
  int warming;  /* a thread is faulting its first warm_len bytes in (galign_shm_warm) */
  size_t warm_len;
  pthread_t warm_thread;
} galign_shm;

void galign_shm_release(galign_shm *g);
/* Room for bytes in g (a new sealed memfd when it is too small), of
 * least_cap bytes or more: a region sized for a whole request from the
 * start is not made and first written again (page faults: ~10x a copy)
 * each time a larger request comes; untouched pages cost nothing. KIO_ERR
 * if no memfd can be made here. */
int galign_shm_reserve(galign_shm *g, size_t bytes, size_t least_cap);
/* A region not made yet, made now for about bytes (as galign_shm_reserve
 * sizes it) and the pages of its first bytes + bytes / 4 (the rest stays
 * untouched, costing nothing) faulted in by a thread of its own, while the job
 * reads its next batch: a fresh page costs its first write ~10x a copy, and
 * the first inflight + 1 requests of a job would each pay that on the
 * sending path. Nothing if the region exists, or no memfd can be made (the
 * reserve then decides). Writes no byte: the region may be filled while
 * the thread still runs; released regions wait for it. 1 if the thread
 * started. */
int galign_shm_warm(galign_shm *g, size_t bytes, size_t least_cap);
/* A piece of a request: len bytes from src, to the region's offset off. */
typedef struct {
  const void *src;
  size_t off, len;
} galign_shm_piece;
/* Copies the n pieces (in increasing offset order, within bytes) to dst,
 * on the job's share of the cores: each thread an equal part of the
 * bytes. */
void galign_shm_fill_pieces(uint8_t *dst, const galign_shm_piece *pc, int n, size_t bytes);
/* Copies the n matrices' data to dst + off[i] (increasing), as
 * galign_shm_fill_pieces.
 * KIO_ERR: out of memory (nothing copied). */
int galign_shm_fill(uint8_t *dst, const kio_matrix *const *feats, const size_t *off, int n,
                    size_t bytes);
/* The service's side: maps a region received (fd, closed here) read-only,
 * if it is sealed against shrinking (the job cannot pull pages from under
 * the reader). KIO_ERR if unusable. */
int galign_shm_map_received(int fd, const uint8_t **map, size_t *len);

#endif
