/* The service's pool of idle objects (gpu-service/idle-pool.h): take by
 * rank (the highest, the most recently idle of equals, only the device's,
 * a negative rank never), the bound per device, shedding by device and
 * idle time (each shed entry dropped once), counts. */
#include <stdlib.h>
#include <time.h>

#include "gpu-service/idle-pool.h"
#include "tests/lib/test-util.h"

typedef struct item {
  gsvc_idle e;
  int id, score;
} item;

static int dropped[64], n_dropped;

static void drop(gsvc_idle *e) {
  dropped[n_dropped++] = ((item *)e)->id;
  free(e);
}

static long by_score(const gsvc_idle *e, const void *ctx) {
  (void)ctx;
  return ((const item *)e)->score;
}

static item *make(int id, int score) {
  item *p = calloc(1, sizeof *p);
  ck_assert_ptr_nonnull(p);
  p->id = id;
  p->score = score;
  return p;
}

START_TEST(take_by_rank) {
  gsvc_idle_pool pool = GSVC_IDLE_POOL_INIT(8, drop);
  int n = 0;
  ck_assert_int_eq(gsvc_idle_put(&pool, &make(1, 0)->e, 0, &n), 1);
  ck_assert_int_eq(gsvc_idle_put(&pool, &make(2, 3)->e, 0, &n), 1);
  ck_assert_int_eq(gsvc_idle_put(&pool, &make(3, 3)->e, 0, &n), 1);
  ck_assert_int_eq(gsvc_idle_put(&pool, &make(4, 9)->e, 1, &n), 1);
  ck_assert_int_eq(gsvc_idle_put(&pool, &make(5, -1)->e, 0, &n), 1);
  ck_assert_int_eq(n, 4);  /* device 0's, with 5 */
  ck_assert_int_eq(gsvc_idle_count(&pool, 0), 4);
  ck_assert_int_eq(gsvc_idle_count(&pool, -1), 5);
  /* 3 and 2 rank equal: 3 was idle last; 4 is another device's */
  item *p = (item *)gsvc_idle_take(&pool, 0, by_score, NULL);
  ck_assert_int_eq(p->id, 3);
  free(p);
  p = (item *)gsvc_idle_take(&pool, 0, by_score, NULL);
  ck_assert_int_eq(p->id, 2);
  free(p);
  p = (item *)gsvc_idle_take(&pool, 0, by_score, NULL);
  ck_assert_int_eq(p->id, 1);
  free(p);
  /* 5's rank is negative: never taken */
  ck_assert_ptr_null(gsvc_idle_take(&pool, 0, by_score, NULL));
  ck_assert_ptr_null(gsvc_idle_take(&pool, 2, by_score, NULL));
  p = (item *)gsvc_idle_take(&pool, 1, by_score, NULL);
  ck_assert_int_eq(p->id, 4);
  ck_assert_int_eq(p->e.dev, 1);
  free(p);
  n_dropped = 0;
  ck_assert_int_eq(gsvc_idle_shed(&pool, -1, -1.0), 1);
  ck_assert_int_eq(n_dropped, 1);
  ck_assert_int_eq(dropped[0], 5);
  ck_assert_int_eq(gsvc_idle_count(&pool, -1), 0);
}
END_TEST

START_TEST(bound_per_device) {
  gsvc_idle_pool pool = GSVC_IDLE_POOL_INIT(2, drop);
  int n = -1;
  ck_assert_int_eq(gsvc_idle_put(&pool, &make(1, 0)->e, 0, &n), 1);
  ck_assert_int_eq(n, 1);
  ck_assert_int_eq(gsvc_idle_put(&pool, &make(2, 0)->e, 0, &n), 1);
  ck_assert_int_eq(n, 2);
  item *full = make(3, 0);
  ck_assert_int_eq(gsvc_idle_put(&pool, &full->e, 0, &n), 0);  /* not kept: the caller's */
  ck_assert_int_eq(n, 2);
  free(full);
  ck_assert_int_eq(gsvc_idle_put(&pool, &make(4, 0)->e, 1, &n), 1);  /* another device */
  ck_assert_int_eq(n, 1);
  ck_assert_int_eq(gsvc_idle_put(&pool, NULL, 0, &n), 0);  /* only counted */
  ck_assert_int_eq(n, 2);
  n_dropped = 0;
  ck_assert_int_eq(gsvc_idle_shed(&pool, 0, -1.0), 2);  /* memory pressure on device 0 */
  ck_assert_int_eq(n_dropped, 2);
  ck_assert_int_eq(gsvc_idle_count(&pool, 0), 0);
  ck_assert_int_eq(gsvc_idle_count(&pool, 1), 1);
  ck_assert_int_eq(gsvc_idle_shed(&pool, -1, -1.0), 1);
  ck_assert_int_eq(n_dropped, 3);
}
END_TEST

START_TEST(shed_by_idle_time) {
  gsvc_idle_pool pool = GSVC_IDLE_POOL_INIT(8, drop);
  int n;
  ck_assert_int_eq(gsvc_idle_put(&pool, &make(1, 0)->e, 0, &n), 1);
  ck_assert_int_eq(gsvc_idle_put(&pool, &make(2, 0)->e, 1, &n), 1);
  nanosleep(&(struct timespec){0, 200 * 1000 * 1000}, NULL);
  ck_assert_int_eq(gsvc_idle_put(&pool, &make(3, 0)->e, 0, &n), 1);
  n_dropped = 0;
  ck_assert_int_eq(gsvc_idle_shed(&pool, -1, 60.0), 0);  /* none idle that long */
  ck_assert_int_eq(gsvc_idle_shed(&pool, -1, 0.1), 2);   /* 1 and 2, not 3 */
  ck_assert_int_eq(n_dropped, 2);
  ck_assert_int_eq(dropped[0] + dropped[1], 3);
  ck_assert_int_eq(gsvc_idle_count(&pool, 0), 1);
  ck_assert_int_eq(gsvc_idle_shed(&pool, 0, -1.0), 1);
  ck_assert_int_eq(dropped[2], 3);
}
END_TEST

int main(void) {
  Suite *s = suite_create("idle_pool");
  TCase *tc = tcase_create("pool");
  tcase_add_test(tc, take_by_rank);
  tcase_add_test(tc, bound_per_device);
  tcase_add_test(tc, shed_by_idle_time);
  suite_add_tcase(s, tc);
  return tu_run_suite(s);
}
