/* Internal to base/feat: the feature cache's checksum (feat-cache.c) and a
 * whole entry's hashes on several threads (feat-hash.c). */
#ifndef KIO_FEAT_HASH_H
#define KIO_FEAT_HASH_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/sys/private-dir.h"

/* The checksum: 8-byte words multiplied in, the tail through FNV-1a. */
static inline uint64_t kio_fhash_mix(uint64_t h, uint64_t w) {
  h = (h ^ w) * 0x9E3779B97F4A7C15ull;
  return h ^ (h >> 29);
}
static inline uint64_t kio_fhash_bytes(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    memcpy(&w, b + i, 8);
    h = kio_fhash_mix(h, w);
  }
  return kio_fhash_mix(kio_fnv1a(h, b + i, n - i), n);
}

/* One stored output entry: where it lies in the mapped file, its header's
 * and its data's bytes (each a multiple of 8), and their hashes. */
typedef struct {
  size_t pos;
  uint64_t hb, db, hs, ds;
} kio_fhash_span;

/* For every span of m, hs = kio_fhash_bytes(KIO_FNV_START, header) and
 * ds = the same of its data, on up to `threads` threads (at most 16, at
 * least 1 MB of the spans' `bytes` each); the pages are populated ahead.
 * Returns the threads that ran. */
int kio_fhash_spans(const unsigned char *m, kio_fhash_span *v, size_t n, uint64_t bytes,
                    int threads);

#endif
