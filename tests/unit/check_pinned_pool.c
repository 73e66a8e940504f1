/* The pool of page-locked host blocks (device/pinned-pool.h) over a
 * malloc backend that counts its calls: blocks never overlap and keep
 * their bytes, freed blocks are reused without the backend, growing
 * buffers cost a few slab allocations (not one each), large blocks are the
 * backend's own and cached within the limit, a trim gives back only the
 * cache and the slabs with nothing in use, threads share one pool; slabs
 * pinned ahead up to the reserve serve later blocks (large ones whole)
 * without the backend and stay through trims. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "device/pinned-pool.h"
#include "tests/lib/test-util.h"

#define MIB ((size_t)1 << 20)
static int n_alloc, n_free;
static pthread_mutex_t count_mu = PTHREAD_MUTEX_INITIALIZER;

static void *counting_alloc(size_t n) {
  pthread_mutex_lock(&count_mu);
  n_alloc++;
  pthread_mutex_unlock(&count_mu);
  return malloc(n);
}
static void counting_free(void *p) {
  pthread_mutex_lock(&count_mu);
  n_free++;
  pthread_mutex_unlock(&count_mu);
  free(p);
}
static const kio_pinned_backend be = {counting_alloc, counting_free};

static kio_pinned_pool *new_pool(size_t slab, size_t cache) {
  n_alloc = n_free = 0;
  kio_pinned_pool *p = kio_pinned_pool_new(be, slab, cache);
  ck_assert_ptr_nonnull(p);
  return p;
}

START_TEST(blocks_apart_and_reused) {
  kio_pinned_pool *p = new_pool(16 * MIB, 0);
  enum { N = 200 };
  unsigned char *b[N];
  size_t sz[N];
  unsigned seed = 7;
  for (int i = 0; i < N; i++) {
    sz[i] = 1 + (size_t)(rand_r(&seed) % (3 * MIB));
    b[i] = kio_pinned_alloc(p, sz[i]);
    ck_assert_ptr_nonnull(b[i]);
    ck_assert_uint_eq((uintptr_t)b[i] % 16, 0);
    memset(b[i], i & 0xff, sz[i]);
  }
  for (int i = 0; i < N; i++)  /* no block overwrote another */
    for (size_t k = 0; k < sz[i]; k += 4093) ck_assert_uint_eq(b[i][k], (unsigned)(i & 0xff));
  int allocs = n_alloc;
  ck_assert_int_le(allocs, 40);  /* slabs, not one call per block */
  for (int i = 0; i < N; i++) kio_pinned_release(p, b[i]);
  for (int i = 0; i < N; i++) {  /* the same sizes again: all from the free lists */
    b[i] = kio_pinned_alloc(p, sz[i]);
    ck_assert_ptr_nonnull(b[i]);
  }
  ck_assert_int_eq(n_alloc, allocs);
  ck_assert_int_eq(n_free, 0);
  for (int i = 0; i < N; i++) kio_pinned_release(p, b[i]);
  kio_pinned_stats st;
  kio_pinned_get_stats(p, &st);
  ck_assert_uint_eq(st.in_use, 0);
  ck_assert_int_eq(st.driver_allocs, allocs);
  kio_pinned_pool_free(p);
}
END_TEST

/* A job's buffers growing by a quarter each batch, 16 jobs at once: the
 * backend sees a few slabs, not one allocation per growth. */
START_TEST(growing_buffers) {
  kio_pinned_pool *p = new_pool(32 * MIB, 0);
  void *buf[16][6] = {{0}};
  size_t cap[16][6] = {{0}};
  int growths = 0;
  for (size_t want = 64 * 1024; want < 6 * MIB; want += want / 4)
    for (int j = 0; j < 16; j++)
      for (int k = 0; k < 6; k++) {
        size_t w = want / (size_t)(k + 1);
        if (w <= cap[j][k]) continue;
        kio_pinned_release(p, buf[j][k]);
        buf[j][k] = kio_pinned_alloc(p, w);
        ck_assert_ptr_nonnull(buf[j][k]);
        cap[j][k] = w;
        growths++;
      }
  ck_assert_int_gt(growths, 500);
  ck_assert_int_le(n_alloc, 16);
  for (int j = 0; j < 16; j++)
    for (int k = 0; k < 6; k++) kio_pinned_release(p, buf[j][k]);
  kio_pinned_pool_free(p);
}
END_TEST

START_TEST(large_blocks_cached) {
  kio_pinned_pool *p = new_pool(4 * MIB, 8 * MIB);  /* blocks over 1 MiB are large */
  void *a = kio_pinned_alloc(p, 3 * MIB);
  ck_assert_ptr_nonnull(a);
  ck_assert_int_eq(n_alloc, 1);
  kio_pinned_release(p, a);
  ck_assert_int_eq(n_free, 0);  /* cached */
  void *b = kio_pinned_alloc(p, 3 * MIB - 100);
  ck_assert_ptr_eq(a, b);
  ck_assert_int_eq(n_alloc, 1);
  void *c = kio_pinned_alloc(p, 20 * MIB);  /* over the cache's limit when freed */
  ck_assert_ptr_nonnull(c);
  kio_pinned_release(p, c);
  ck_assert_int_eq(n_free, 1);
  void *d = kio_pinned_alloc(p, 300 * 1024);  /* from a slab */
  ck_assert_ptr_nonnull(d);
  ck_assert_int_eq(n_alloc, 3);
  kio_pinned_release(p, b);
  kio_pinned_trim(p);  /* the cached block; the slab still has d */
  ck_assert_int_eq(n_free, 2);
  kio_pinned_stats st;
  kio_pinned_get_stats(p, &st);
  ck_assert_int_eq(st.slabs, 1);
  ck_assert_uint_eq(st.cached, 0);
  kio_pinned_release(p, d);
  kio_pinned_trim(p);
  ck_assert_int_eq(n_free, 3);
  kio_pinned_get_stats(p, &st);
  ck_assert_int_eq(st.slabs, 0);
  void *e = kio_pinned_alloc(p, 300 * 1024);  /* after a trim: a new slab */
  ck_assert_ptr_nonnull(e);
  ck_assert_int_eq(n_alloc, 4);
  kio_pinned_release(p, e);
  kio_pinned_pool_free(p);
  ck_assert_int_eq(n_free, 4);
}
END_TEST

static void *churn(void *arg) {
  kio_pinned_pool *p = arg;
  unsigned seed = (unsigned)(uintptr_t)pthread_self();
  for (int i = 0; i < 2000; i++) {
    size_t n = 1 + (size_t)(rand_r(&seed) % (512 * 1024));
    unsigned char *b = kio_pinned_alloc(p, n);
    ck_assert_ptr_nonnull(b);
    memset(b, 0x5a, n);
    ck_assert_uint_eq(b[n - 1], 0x5a);
    kio_pinned_release(p, b);
  }
  return NULL;
}

/* The reserve: slabs pinned ahead one call at a time, then blocks (a large
 * one whole in an empty slab) without the backend; a trim keeps the
 * reserve's slabs and gives back the rest. */
START_TEST(reserve_pinned_ahead) {
  kio_pinned_pool *p = new_pool(16 * MIB, 0);
  kio_pinned_set_reserve(p, 40 * MIB);
  int grown = 0, r;
  while ((r = kio_pinned_grow(p)) == 1) grown++;
  ck_assert_int_eq(r, 0);
  ck_assert_int_eq(grown, 3);  /* 48 MiB of 16 MiB slabs */
  ck_assert_int_eq(n_alloc, 3);
  kio_pinned_stats st;
  kio_pinned_get_stats(p, &st);
  ck_assert_int_eq(st.ahead_allocs, 3);
  ck_assert_uint_eq(st.slab_bytes, 48 * MIB);
  /* a large block (over a quarter of a slab) takes an empty slab whole */
  unsigned char *big = kio_pinned_alloc(p, 10 * MIB);
  ck_assert_ptr_nonnull(big);
  memset(big, 0xab, 10 * MIB);
  /* small ones share another slab */
  unsigned char *s1 = kio_pinned_alloc(p, 1 * MIB), *s2 = kio_pinned_alloc(p, 2 * MIB);
  ck_assert_ptr_nonnull(s1);
  ck_assert_ptr_nonnull(s2);
  memset(s1, 1, 1 * MIB);
  memset(s2, 2, 2 * MIB);
  /* one empty slab left: a second large block takes it */
  unsigned char *big2 = kio_pinned_alloc(p, 12 * MIB);
  ck_assert_ptr_nonnull(big2);
  memset(big2, 0xcd, 12 * MIB);
  ck_assert_int_eq(n_alloc, 3);
  for (size_t k = 0; k < 10 * MIB; k += 4099) ck_assert_uint_eq(big[k], 0xab);
  ck_assert_uint_eq(s1[MIB - 1], 1);
  ck_assert_uint_eq(s2[0], 2);
  /* no empty slab now: the third large block is the backend's */
  void *big3 = kio_pinned_alloc(p, 9 * MIB);
  ck_assert_ptr_nonnull(big3);
  ck_assert_int_eq(n_alloc, 4);
  kio_pinned_get_stats(p, &st);
  ck_assert_int_eq(st.large_allocs, 1);
  kio_pinned_release(p, big3);  /* cache limit 0: straight back */
  ck_assert_int_eq(n_free, 1);
  /* a released whole-slab block leaves its slab empty for the next one */
  kio_pinned_release(p, big);
  void *again = kio_pinned_alloc(p, 16 * MIB - 64);
  ck_assert_ptr_nonnull(again);
  ck_assert_int_eq(n_alloc, 4);
  kio_pinned_release(p, again);
  kio_pinned_release(p, big2);
  kio_pinned_release(p, s1);
  kio_pinned_release(p, s2);
  /* a trim keeps 40 MiB: all three 16 MiB slabs stay (two would be less) */
  kio_pinned_trim(p);
  kio_pinned_get_stats(p, &st);
  ck_assert_uint_eq(st.slab_bytes, 48 * MIB);
  ck_assert_int_eq(n_free, 1);
  /* a lower reserve: the trim gives back what is above it */
  kio_pinned_set_reserve(p, 16 * MIB);
  kio_pinned_trim(p);
  kio_pinned_get_stats(p, &st);
  ck_assert_uint_eq(st.slab_bytes, 16 * MIB);
  ck_assert_int_eq(n_free, 3);
  ck_assert_int_eq(kio_pinned_grow(p), 0);
  kio_pinned_pool_free(p);
}
END_TEST

static void *failing_alloc(size_t n) { (void)n; return NULL; }

/* A backend that cannot pin: grow says so once and stops asking. */
START_TEST(reserve_backend_fails) {
  kio_pinned_pool *p = kio_pinned_pool_new((kio_pinned_backend){failing_alloc, counting_free},
                                           16 * MIB, 0);
  ck_assert_ptr_nonnull(p);
  kio_pinned_set_reserve(p, 64 * MIB);
  ck_assert_int_eq(kio_pinned_grow(p), -1);
  ck_assert_int_eq(kio_pinned_grow(p), 0);
  kio_pinned_stats st;
  kio_pinned_get_stats(p, &st);
  ck_assert_uint_eq(st.reserve, 0);
  kio_pinned_pool_free(p);
}
END_TEST


START_TEST(threads_share) {
  kio_pinned_pool *p = new_pool(8 * MIB, 0);
  pthread_t t[8];
  for (int i = 0; i < 8; i++) ck_assert_int_eq(pthread_create(&t[i], NULL, churn, p), 0);
  for (int i = 0; i < 8; i++) pthread_join(t[i], NULL);
  kio_pinned_stats st;
  kio_pinned_get_stats(p, &st);
  ck_assert_uint_eq(st.in_use, 0);
  ck_assert_int_le(st.slabs, 8);
  kio_pinned_pool_free(p);
}
END_TEST

START_TEST(bad_arguments) {
  ck_assert_ptr_null(kio_pinned_pool_new(be, 3 * MIB, 0));  /* not a power of two */
  ck_assert_ptr_null(kio_pinned_pool_new(be, 64 * 1024, 0));  /* under 1 MiB */
  ck_assert_ptr_null(kio_pinned_pool_new((kio_pinned_backend){NULL, NULL}, 8 * MIB, 0));
  ck_assert_ptr_null(kio_pinned_alloc(NULL, 10));
  kio_pinned_release(NULL, NULL);
  kio_pinned_pool *p = new_pool(8 * MIB, 0);
  ck_assert_ptr_null(kio_pinned_alloc(p, SIZE_MAX - 10));
  kio_pinned_pool_free(p);
}
END_TEST

int main(void) {
  Suite *s = suite_create("pinned_pool");
  TCase *tc = tcase_create("pool");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, blocks_apart_and_reused);
  tcase_add_test(tc, growing_buffers);
  tcase_add_test(tc, large_blocks_cached);
  tcase_add_test(tc, reserve_pinned_ahead);
  tcase_add_test(tc, reserve_backend_fails);
  tcase_add_test(tc, threads_share);
  tcase_add_test(tc, bad_arguments);
  suite_add_tcase(s, tc);
  return tu_run_suite(s);
}
