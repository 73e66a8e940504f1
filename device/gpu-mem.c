/* The device layer's table of live blocks and its test hooks:
 *   KALDI_GPU_TEST_FAIL_ALLOC  comma-separated rules, over the process's
 *       device allocations counted from 1: "N" fails the Nth, "N:K" the K
 *       from the Nth on, "N+" the Nth and every later one, ">B" every
 *       allocation of more than B bytes (K/M/G suffixes allowed). A failure
 *       looks exactly like the device's out of memory.
 *   KALDI_GPU_TEST_MEMORY_REPORT=1  at a normal exit, one line on stderr:
 *       "kio-gpu: ALLOCS allocations, peak PEAK bytes, LIVE bytes in BLOCKS
 *       blocks at exit" (a leak check of device memory that needs no GPU). */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/sys/log.h"
#include "base/sys/settings.h"
#include "gpu-internal.h"

typedef struct block {
  struct block *next;
  void *p;
  size_t bytes;
  kio_gpu_acct *acct;
} block;

enum { NBUCKETS = 1024 };
static block *buckets[NBUCKETS];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static size_t live_bytes, live_blocks, peak_bytes;
static long long nallocs;

static unsigned bucket_of(const void *p) {
  uintptr_t x = (uintptr_t)p;
  x ^= x >> 17;
  x *= 0x9E3779B97F4A7C15ull;
  return (unsigned)(x >> 40) % NBUCKETS;
}

static void report(void) {
  pthread_mutex_lock(&mu);
  fprintf(stderr, "kio-gpu: %lld allocations, peak %zu bytes, %zu bytes in %zu blocks at exit\n",
          nallocs, peak_bytes, live_bytes, live_blocks);
  pthread_mutex_unlock(&mu);
}

static pthread_once_t report_once = PTHREAD_ONCE_INIT;
static void report_setup(void) {
  const char *v = kio_test_hook(KIO_SET_TEST_MEMORY_REPORT);
  if (v && !strcmp(v, "1")) atexit(report);
}

int kio_gpu_blocks_add(void *p, size_t bytes, kio_gpu_acct *a) {
  pthread_once(&report_once, report_setup);
  block *b = malloc(sizeof *b);
  if (!b) return KIO_ERR;
  b->p = p;
  b->bytes = bytes;
  b->acct = a;
  unsigned h = bucket_of(p);
  pthread_mutex_lock(&mu);
  b->next = buckets[h];
  buckets[h] = b;
  live_bytes += bytes;
  live_blocks++;
  nallocs++;
  if (live_bytes > peak_bytes) peak_bytes = live_bytes;
  pthread_mutex_unlock(&mu);
  return KIO_OK;
}

int kio_gpu_blocks_take(void *p, size_t *bytes, kio_gpu_acct **a) {
  unsigned h = bucket_of(p);
  pthread_mutex_lock(&mu);
  for (block **pp = &buckets[h]; *pp; pp = &(*pp)->next)
    if ((*pp)->p == p) {
      block *b = *pp;
      *pp = b->next;
      live_bytes -= b->bytes;
      live_blocks--;
      pthread_mutex_unlock(&mu);
      *bytes = b->bytes;
      *a = b->acct;
      free(b);
      return KIO_OK;
    }
  pthread_mutex_unlock(&mu);
  return KIO_ERR;
}

void kio_gpu_blocks_forget(kio_gpu_acct *a) {
  pthread_mutex_lock(&mu);
  for (unsigned h = 0; h < NBUCKETS; h++)
    for (block *b = buckets[h]; b; b = b->next)
      if (b->acct == a) b->acct = NULL;
  pthread_mutex_unlock(&mu);
}

/* ---- KALDI_GPU_TEST_FAIL_ALLOC ---- */

enum { MAX_RULES = 16 };
static struct { long long from, count; size_t above; } rules[MAX_RULES];
static int nrules;
static long long attempts;
static pthread_once_t hook_once = PTHREAD_ONCE_INIT;

static void hook_parse(void) {
  const char *v = kio_test_hook(KIO_SET_TEST_FAIL_ALLOC);
  if (!v) return;
  char *s = strdup(v), *save = NULL;
  for (char *tok = s ? strtok_r(s, ",", &save) : NULL; tok && nrules < MAX_RULES;
       tok = strtok_r(NULL, ",", &save)) {
    char *end;
    if (tok[0] == '>') {
      size_t b;
      if (kio_gpu_parse_bytes(tok + 1, 0, &b) == KIO_OK) rules[nrules++].above = b;
      continue;
    }
    long long n = strtoll(tok, &end, 10), k = 1;
    if (end == tok || n < 1) continue;
    if (*end == '+') k = -1;
    else if (*end == ':') k = strtoll(end + 1, NULL, 10);
    rules[nrules].from = n;
    rules[nrules].count = k;
    nrules++;
  }
  free(s);
}

int kio_gpu_hook_fails(size_t bytes) {
  pthread_once(&hook_once, hook_parse);
  pthread_once(&report_once, report_setup);
  if (!nrules) return 0;
  pthread_mutex_lock(&mu);
  long long k = ++attempts;
  pthread_mutex_unlock(&mu);
  for (int i = 0; i < nrules; i++) {
    if (rules[i].above && bytes > rules[i].above) return 1;
    if (!rules[i].above && k >= rules[i].from &&
        (rules[i].count < 0 || k < rules[i].from + rules[i].count))
      return 1;
  }
  return 0;
}
