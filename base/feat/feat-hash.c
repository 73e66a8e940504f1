/* The feature cache's checksum over a whole entry on several threads
 * (feat-hash.h): a hit is checked end to end before it hands anything out,
 * so the check is the hit's latency; the entries' hashes are independent
 * (only their combination is ordered), so they are computed side by side. */
#include "feat-hash.h"

#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* The entries [a, b) hashed by one thread. */
typedef struct {
  const unsigned char *m;
  kio_fhash_span *v;
  size_t a, b;
  pthread_t th;
  int started;
} fc_part;

/* The most threads a hit's checksum uses, and the fewest bytes given to
 * each (below that, a thread costs more than it saves). */
#define FC_HASH_THREADS_MAX 16
#define FC_HASH_MIN_BYTES ((uint64_t)1 << 20)

/* The pages of [p, p + n) mapped in one call, ahead of reading them (not a
 * fault every few pages); a kernel without MADV_POPULATE_READ faults them
 * in as they are read. */
static void populate(const unsigned char *p, size_t n) {
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
  long ps = sysconf(_SC_PAGE_SIZE);
  if (ps <= 0 || !n) return;
  uintptr_t a = (uintptr_t)p & ~(uintptr_t)(ps - 1), e = (uintptr_t)p + n;
  (void)madvise((void *)a, e - a, MADV_POPULATE_READ);
}

/* kio_fhash_bytes(KIO_FNV_START, ...) of the header and of the data of entries
 * [a, b) (each a multiple of 8 bytes), FC_LANES runs at once: one run's
 * chain of products waits on the multiplier's latency, independent chains
 * side by side fill it (2.8 times one chain's speed on data in cache). */
#define FC_LANES 4
_Static_assert(FC_LANES == 4, "hash_part's loop is written for four chains");
static void *hash_part(void *arg) {
  fc_part *t = arg;
  if (t->b <= t->a) return NULL;
  const kio_fhash_span *last = &t->v[t->b - 1];
  populate(t->m + t->v[t->a].pos, last->pos + last->hb + last->db - t->v[t->a].pos);
  const unsigned char *p[FC_LANES];
  uint64_t h[FC_LANES], left[FC_LANES], len[FC_LANES], *out[FC_LANES];
  int active = 0;
  size_t next = 2 * t->a, end = 2 * t->b;  /* run 2i: entry i's header, 2i + 1: its data */
  for (;;) {
    for (; active < FC_LANES && next < end; next++, active++) {
      kio_fhash_span *e = &t->v[next / 2];
      int data = next % 2;
      p[active] = t->m + e->pos + (data ? e->hb : 0);
      len[active] = data ? e->db : e->hb;
      left[active] = len[active] / 8;
      h[active] = KIO_FNV_START;
      out[active] = data ? &e->ds : &e->hs;
    }
    if (!active) break;
    uint64_t n = left[0];
    for (int l = 1; l < active; l++) n = left[l] < n ? left[l] : n;
    if (active == FC_LANES) {
      /* Four scalar chains: the empty asm keeps the compiler from turning
       * them into vector code, whose 64-bit products x86 lacks before
       * AVX-512 (emulated, it was slower than one chain). */
      uint64_t h0 = h[0], h1 = h[1], h2 = h[2], h3 = h[3];
      for (uint64_t i = 0; i < n; i++) {
        uint64_t w0, w1, w2, w3;
        memcpy(&w0, p[0] + 8 * i, 8);
        memcpy(&w1, p[1] + 8 * i, 8);
        memcpy(&w2, p[2] + 8 * i, 8);
        memcpy(&w3, p[3] + 8 * i, 8);
        h0 = kio_fhash_mix(h0, w0);
        h1 = kio_fhash_mix(h1, w1);
        h2 = kio_fhash_mix(h2, w2);
        h3 = kio_fhash_mix(h3, w3);
        __asm__("" : "+r"(h0), "+r"(h1), "+r"(h2), "+r"(h3));
      }
      h[0] = h0, h[1] = h1, h[2] = h2, h[3] = h3;
    } else {
      for (int l = 0; l < active; l++)
        for (uint64_t i = 0; i < n; i++) {
          uint64_t w;
          memcpy(&w, p[l] + 8 * i, 8);
          h[l] = kio_fhash_mix(h[l], w);
        }
    }
    for (int l = 0; l < active;) {
      p[l] += 8 * n;
      left[l] -= n;
      if (left[l]) { l++; continue; }
      *out[l] = kio_fhash_mix(h[l], len[l]);  /* as kio_fhash_bytes ends (8 | len: no tail) */
      active--;
      p[l] = p[active], h[l] = h[active], left[l] = left[active], len[l] = len[active];
      out[l] = out[active];
    }
  }
  return NULL;
}

/* Each a run of entries of about the same bytes; the calling thread takes
 * the first. */
int kio_fhash_spans(const unsigned char *m, kio_fhash_span *v, size_t n, uint64_t bytes,
                    int threads) {
  uint64_t most = bytes / FC_HASH_MIN_BYTES;
  if (threads < 1) threads = 1;
  if (threads > FC_HASH_THREADS_MAX) threads = FC_HASH_THREADS_MAX;
  if ((uint64_t)threads > most) threads = most > 0 ? (int)most : 1;
  if ((size_t)threads > n) threads = n > 0 ? (int)n : 1;
  fc_part part[FC_HASH_THREADS_MAX];
  size_t i = 0;
  uint64_t done = 0;
  for (int t = 0; t < threads; t++) {
    uint64_t until = bytes / (uint64_t)threads * (uint64_t)(t + 1);
    part[t] = (fc_part){.m = m, .v = v, .a = i, .b = i};
    while (i < n && (t == threads - 1 || done < until)) {
      done += v[i].hb + v[i].db;
      i++;
    }
    part[t].b = i;
  }
  /* Helpers take no signals, as the chain's other threads. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int used = 1;
  for (int t = 1; t < threads; t++) {
    part[t].started = part[t].b > part[t].a &&
                      pthread_create(&part[t].th, NULL, hash_part, &part[t]) == 0;
    used += part[t].started;
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  hash_part(&part[0]);
  for (int t = 1; t < threads; t++) {
    if (part[t].started) pthread_join(part[t].th, NULL);
    else hash_part(&part[t]);  /* no thread: done here */
  }
  return used;
}
