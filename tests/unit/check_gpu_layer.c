/* The device layer (device/gpu.h) on a fake CUDA backend: the job's one
 * device chosen once for every thread, budgets and their defaults, accounts
 * and their limits, the out-of-memory policy of each --use-gpu mode (what
 * to do, bounded waits, the one LOG line), the fall-back order, the
 * allocation-failure test hook; and the GPU service's admission of batches
 * by memory (gpu-service/admission.h). No GPU needed. */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tests/lib/test-util.h"
#include "base/sys/log.h"
#include "base/sys/settings.h"
#include "device/gpu.h"
#include "gpu-service/admission.h"

#define MIB ((size_t)1 << 20)
#define GIB ((size_t)1 << 30)

/* ---- the fake device: fake_ndev devices of fake_total bytes ---- */
static int fake_ndev = 2, fake_selects, fake_trims, fake_binds;
static size_t fake_total = 8 * GIB, fake_live;
static int fake_busy_until_select = 0;  /* select fails (busy) this many times */

static int f_count(void) { return fake_ndev; }
static int f_select(double wait_s, int named, char *desc, int n, int *dev) {
  (void)wait_s;
  __sync_fetch_and_add(&fake_selects, 1);
  if (fake_busy_until_select > 0) {
    fake_busy_until_select--;
    return KIO_GPU_GAVE_UP;
  }
  *dev = named >= 0 ? named : 1;  /* "the most free memory": device 1 */
  snprintf(desc, (size_t)n, "fake device %d", *dev);
  return 0;
}
static int f_bind(int dev) { (void)dev; __sync_fetch_and_add(&fake_binds, 1); return 0; }
static int f_info(int dev, size_t *fr, size_t *tot) {
  (void)dev;
  *tot = fake_total;
  *fr = fake_total - fake_live;
  return 0;
}
static int f_alloc(void **p, size_t bytes, void *st, char *msg, size_t n) {
  (void)st; (void)msg; (void)n;
  if (fake_live + bytes > fake_total) return 1;
  *p = malloc(bytes + sizeof(size_t));
  *(size_t *)*p = bytes;
  *p = (char *)*p + sizeof(size_t);
  fake_live += bytes;
  return 0;
}
static void f_free(void *p, void *st) {
  (void)st;
  if (!p) return;
  char *b = (char *)p - sizeof(size_t);
  fake_live -= *(size_t *)b;
  free(b);
}
static void f_trim(int dev) { (void)dev; fake_trims++; }
static void f_keep(int dev, size_t b) { (void)dev; (void)b; }
static const kio_gpu_backend fake = {f_count, f_select, f_bind, f_info, f_alloc, f_free, f_trim,
                                     f_keep};

static void setup(void) {
  kio_gpu_set_backend(&fake);
  kio_gpu_reset_for_tests();
  kio_gpu_set_instances_for_tests(2);  /* a recipe's jobs: the shared budgets */
  fake_ndev = 2;
  fake_total = 8 * GIB;
  fake_selects = fake_trims = 0;
  tu_logcap_start();
}

START_TEST(test_modes_and_bytes) {
  kio_gpu_mode m;
  ck_assert_int_eq(kio_gpu_parse_mode("wait", &m), KIO_OK);
  ck_assert_int_eq(m, KIO_GPU_WAIT);
  ck_assert_int_eq(kio_gpu_parse_mode("maybe", &m), KIO_ERR);
  size_t b;
  ck_assert_int_eq(kio_gpu_parse_bytes("2G", 0, &b), KIO_OK);
  ck_assert_uint_eq(b, 2 * GIB);
  ck_assert_int_eq(kio_gpu_parse_bytes("512MiB", 0, &b), KIO_OK);
  ck_assert_uint_eq(b, 512 * MIB);
  ck_assert_int_eq(kio_gpu_parse_bytes("1048576", 0, &b), KIO_OK);
  ck_assert_uint_eq(b, MIB);
  ck_assert_int_eq(kio_gpu_parse_bytes("10%", 100 * GIB, &b), KIO_OK);
  ck_assert_uint_eq(b, 10 * GIB);
  ck_assert_int_eq(kio_gpu_parse_bytes("10%", 0, &b), KIO_ERR);  /* no device to take it of */
  ck_assert_int_eq(kio_gpu_parse_bytes("lots", 0, &b), KIO_ERR);
  ck_assert_int_eq(kio_gpu_parse_bytes("-1G", 0, &b), KIO_ERR);
  ck_assert_int_eq(kio_gpu_parse_bytes("", 0, &b), KIO_ERR);
}
END_TEST

START_TEST(test_budget_defaults) {
  /* 2 GiB per job, at most 1/8 of the device; 12 GiB for the service, at
   * most 1/4 */
  ck_assert_uint_eq(kio_gpu_job_budget(140 * GIB), 2 * GIB);
  ck_assert_uint_eq(kio_gpu_job_budget(80 * GIB), 2 * GIB);
  ck_assert_uint_eq(kio_gpu_job_budget(8 * GIB), GIB);
  ck_assert_uint_eq(kio_gpu_service_budget(140 * GIB), 12 * GIB);
  ck_assert_uint_eq(kio_gpu_service_budget(16 * GIB), 4 * GIB);
  kio_setting_override(KIO_SET_GPU_MEMORY, "25%");
  ck_assert_uint_eq(kio_gpu_job_budget(80 * GIB), 20 * GIB);
  ck_assert_int_eq(kio_gpu_set_job_memory("300M"), KIO_OK);  /* --gpu-memory wins */
  ck_assert_uint_eq(kio_gpu_job_budget(80 * GIB), 300 * MIB);
  ck_assert_int_eq(kio_gpu_set_job_memory("lots"), KIO_ERR);
  ck_assert_int_eq(tu_cap.errors, 1);
  kio_setting_override(KIO_SET_SERVICE_MEMORY, "bad");
  ck_assert_uint_eq(kio_gpu_service_budget(140 * GIB), 12 * GIB);  /* default, one WARNING */
  ck_assert_int_eq(tu_cap.warnings, 1);
}
END_TEST

START_TEST(test_shares_add_up) {
  kio_gpu *g;
  ck_assert_int_eq(kio_gpu_job(&g, 0), KIO_OK);
  size_t job = kio_gpu_job_budget(kio_gpu_total(g));
  ck_assert_uint_eq(kio_gpu_job_budget_on(g), job);
  ck_assert_uint_eq(kio_gpu_share(g, KIO_GPU_PART_ALIGN) + kio_gpu_share(g, KIO_GPU_PART_ACC) +
                        kio_gpu_share(g, KIO_GPU_PART_FEATS),
                    job);
  kio_gpu *s;
  ck_assert_int_eq(kio_gpu_open_device(&s, 0), KIO_OK);
  ck_assert(kio_gpu_is_service(s));
  /* 8 GiB device: service budget 2 GiB, a job's batch 1/8 of it */
  ck_assert_uint_eq(kio_gpu_share(s, KIO_GPU_PART_ALIGN), 256 * MIB);
  ck_assert_uint_eq(kio_gpu_share(s, KIO_GPU_PART_ACC), 32 * MIB);
}
END_TEST

/* A job alone on its own device (no other copy of the program, no other
 * process holding more than 1/16 of it) gets 1/4 of the device; anything
 * else the shared default; an explicit
 * budget always wins; the service's devices never count as alone. _i:
 * 0 alone, 1 another copy running, 2 another process holds 1/8 of the
 * device, 3 KALDI_GPU_MEMORY set, 4 the service's device. */
START_TEST(test_budget_alone) {
  fake_total = 140 * GIB;
  fake_live = _i == 2 ? fake_total / 8 : 0;
  kio_gpu_set_instances_for_tests(_i == 1 ? 2 : 1);
  if (_i == 3) kio_setting_override(KIO_SET_GPU_MEMORY, "3G");
  kio_gpu *g;
  if (_i == 4)
    ck_assert_int_eq(kio_gpu_open_device(&g, 0), KIO_OK);
  else
    ck_assert_int_eq(kio_gpu_job(&g, 0), KIO_OK);
  static const size_t want[] = {35 * GIB, 2 * GIB, 2 * GIB, 3 * GIB, 2 * GIB};
  ck_assert_uint_eq(kio_gpu_job_budget_on(g), want[_i]);
  if (_i < 4) {
    size_t sum = kio_gpu_share(g, KIO_GPU_PART_ALIGN) + kio_gpu_share(g, KIO_GPU_PART_ACC) +
                 kio_gpu_share(g, KIO_GPU_PART_FEATS);
    ck_assert_uint_eq(sum, want[_i]);
  } else {  /* 12 GiB service budget: a job's batch 1.5 GiB, as before */
    ck_assert_uint_eq(kio_gpu_share(g, KIO_GPU_PART_ALIGN), 1536 * MIB);
  }
  fake_live = 0;
  kio_setting_override(KIO_SET_GPU_MEMORY, NULL);
}
END_TEST

/* What a context or a small process holds leaves the job alone; more than
 * 1/16 of the device does not. _i: 0 half a GiB held of 16, 1 just over
 * one GiB. */
START_TEST(test_budget_alone_small_free) {
  fake_total = 16 * GIB;
  fake_live = _i == 0 ? GIB / 2 : GIB + 1;
  kio_gpu_set_instances_for_tests(1);
  kio_gpu *g;
  ck_assert_int_eq(kio_gpu_job(&g, 0), KIO_OK);
  ck_assert_uint_eq(kio_gpu_job_budget_on(g), _i == 0 ? 4 * GIB : 2 * GIB);
  fake_live = 0;
}
END_TEST

/* A batch in the service asks for an even part of the capacity while few
 * jobs use the device, its job's limit with many. */
START_TEST(test_service_want) {
  const size_t cap = 12 * GIB, share = 1536 * MIB;
  ck_assert_uint_eq(gsvc_mem_want(share, cap, 1, 0), 6 * GIB);
  ck_assert_uint_eq(gsvc_mem_want(share, cap, 0, 0), 6 * GIB);
  ck_assert_uint_eq(gsvc_mem_want(share, cap, 2, 0), 4 * GIB);
  ck_assert_uint_eq(gsvc_mem_want(share / 8, cap, 2, 1), 512 * MIB);
  ck_assert_uint_eq(gsvc_mem_want(share, cap, 16, 0), share);
  ck_assert_uint_eq(gsvc_mem_want(share / 8, cap, 16, 1), share / 8);
  /* sixteen jobs' batches together stay within the capacity (each asks for
   * its limit; the admission grants in turn) */
  ck_assert(8 * gsvc_mem_want(share, cap, 16, 0) <= cap);
}
END_TEST

/* An alignment batch asks for its plan with room, never more than its want;
 * no plan (SIZE_MAX) or a plan near the want: the want. */
START_TEST(test_service_want_capped) {
  const size_t share = 1536 * MIB;
  ck_assert_uint_eq(gsvc_mem_cap_want(share, SIZE_MAX), share);
  ck_assert_uint_eq(gsvc_mem_cap_want(share, 0), 64 * MIB);
  ck_assert_uint_eq(gsvc_mem_cap_want(share, 512 * MIB), 512 * MIB + 32 * MIB + 64 * MIB);
  ck_assert_uint_eq(gsvc_mem_cap_want(share, 1400 * MIB), share);
  ck_assert_uint_eq(gsvc_mem_cap_want(share, 4 * GIB), share);
  ck_assert_uint_eq(gsvc_mem_cap_want(share, SIZE_MAX - 1), share);
  /* sixteen mono-sized batches (~0.5 GiB planned) run together in 12 GiB */
  ck_assert(16 * gsvc_mem_cap_want(share, 512 * MIB) <= 12 * GIB);
}
END_TEST

/* The two-GPU crash's root: each half of the one-pass program chose its
 * own device (and the second choice reset the first's context). Now the
 * first choice is the job's for every thread. */
static void *job_device(void *arg) {
  kio_gpu **out = arg;
  ck_assert_int_eq(kio_gpu_job(out, 0), KIO_OK);
  return NULL;
}

START_TEST(test_one_device_per_job) {
  kio_gpu *a = NULL, *b = NULL, *c = NULL;
  pthread_t t1, t2;
  pthread_create(&t1, NULL, job_device, &a);
  pthread_create(&t2, NULL, job_device, &b);
  pthread_join(t1, NULL);
  pthread_join(t2, NULL);
  ck_assert_int_eq(kio_gpu_job(&c, 0), KIO_OK);
  ck_assert_ptr_eq(a, b);
  ck_assert_ptr_eq(a, c);
  ck_assert_int_eq(fake_selects, 1);  /* chosen once */
  ck_assert_int_eq(kio_gpu_device(a), 1);
  /* the service puts a thread on its own device */
  kio_gpu *s, *d;
  ck_assert_int_eq(kio_gpu_open_device(&s, 0), KIO_OK);
  kio_gpu_set_thread(s);
  ck_assert_int_eq(kio_gpu_job(&d, 0), KIO_OK);
  ck_assert_ptr_eq(d, s);
  kio_gpu_set_thread(NULL);
  ck_assert_int_eq(kio_gpu_job(&d, 0), KIO_OK);
  ck_assert_ptr_eq(d, a);
}
END_TEST

START_TEST(test_accounts) {
  kio_gpu *g;
  ck_assert_int_eq(kio_gpu_job(&g, 0), KIO_OK);
  kio_gpu_acct *a = kio_gpu_acct_new(g, "aligner", 10 * MIB, KIO_GPU_OPTIONAL);
  void *p = NULL, *q = NULL, *r = NULL;
  ck_assert_int_eq(kio_gpu_alloc(a, &p, 6 * MIB, NULL), KIO_OK);
  ck_assert_uint_eq(kio_gpu_acct_live(a), 6 * MIB);
  ck_assert_uint_eq(kio_gpu_acct_room(a), 4 * MIB);
  /* over the budget: inside kio_gpu_catch held (kind 2), not logged */
  kio_gpu_catch();
  ck_assert_int_eq(kio_gpu_alloc(a, &q, 6 * MIB, NULL), KIO_ERR);
  char why[200];
  ck_assert_int_eq(kio_gpu_caught(why, sizeof why), 2);
  ck_assert_ptr_nonnull(strstr(why, "aligner's budget"));
  ck_assert_int_eq(tu_cap.errors, 0);
  /* outside: an ERROR, as before the device layer */
  ck_assert_int_eq(kio_gpu_alloc(a, &q, 6 * MIB, NULL), KIO_ERR);
  ck_assert_int_eq(tu_cap.errors, 1);
  /* the device itself full: kind 1 */
  kio_gpu_acct_set_limit(a, 64 * GIB);
  kio_gpu_catch();
  ck_assert_int_eq(kio_gpu_alloc(a, &q, 9 * GIB, NULL), KIO_ERR);
  ck_assert_int_eq(kio_gpu_caught(NULL, 0), 1);
  ck_assert_int_eq(kio_gpu_alloc(a, &r, MIB, NULL), KIO_OK);
  ck_assert_uint_eq(kio_gpu_acct_peak(a), 7 * MIB);
  ck_assert_uint_eq(kio_gpu_held(g), 7 * MIB);
  kio_gpu_free(p, NULL);
  kio_gpu_free(r, NULL);
  ck_assert_uint_eq(kio_gpu_acct_live(a), 0);
  ck_assert_uint_eq(kio_gpu_held(g), 0);
  ck_assert_uint_eq(fake_live, 0);
  kio_gpu_catch();  /* nothing happened: 0 */
  ck_assert_int_eq(kio_gpu_caught(NULL, 0), 0);
  kio_gpu_acct_free(a);
}
END_TEST

/* Allocations from concurrent threads never pass the budget together. */
static kio_gpu_acct *shared;
static void *grab(void *arg) {
  (void)arg;
  for (int i = 0; i < 2000; i++) {
    void *p;
    kio_gpu_catch();
    if (kio_gpu_alloc(shared, &p, MIB, NULL) == KIO_OK) {
      ck_assert_uint_le(kio_gpu_acct_live(shared), 4 * MIB);
      kio_gpu_free(p, NULL);
    }
    kio_gpu_caught(NULL, 0);
  }
  return NULL;
}

START_TEST(test_account_threads) {
  kio_gpu *g;
  ck_assert_int_eq(kio_gpu_job(&g, 0), KIO_OK);
  shared = kio_gpu_acct_new(g, "aligner", 4 * MIB, KIO_GPU_YES);
  pthread_t t[6];
  for (int i = 0; i < 6; i++) pthread_create(&t[i], NULL, grab, NULL);
  for (int i = 0; i < 6; i++) pthread_join(t[i], NULL);
  ck_assert_uint_le(kio_gpu_acct_peak(shared), 4 * MIB);
  ck_assert_uint_eq(kio_gpu_acct_live(shared), 0);
  kio_gpu_acct_free(shared);
}
END_TEST

static int count_lines(const char *what) {
  (void)what;
  return tu_cap.n;
}

START_TEST(test_policy_optional) {
  kio_gpu *g;
  ck_assert_int_eq(kio_gpu_job(&g, 0), KIO_OK);
  kio_gpu_acct *a = kio_gpu_acct_new(g, "aligner", 100 * MIB, KIO_GPU_OPTIONAL);
  double w = 0;
  double t0 = kio_now_s();
  ck_assert_int_eq(kio_gpu_out_of_memory(a, "out of memory", MIB, &w), KIO_GPU_USE_CPU);
  ck_assert_int_eq(kio_gpu_out_of_memory(a, "out of memory", MIB, &w), KIO_GPU_USE_CPU);
  ck_assert(kio_now_s() - t0 < 0.2);  /* no waiting */
  ck_assert_int_eq(count_lines(NULL), 1);  /* one LOG line per job */
  ck_assert_ptr_nonnull(strstr(tu_cap.last, "runs on the CPU (--use-gpu=optional)"));
  kio_gpu_note_split(a, "again");
  ck_assert_int_eq(count_lines(NULL), 1);
  kio_gpu_events e;
  kio_gpu_acct_events(a, &e);
  ck_assert_int_eq(e.cpu_pieces, 2);
  ck_assert_int_eq(e.splits, 1);
  /* a second part of the same job (own device): still the one line */
  kio_gpu_acct *b = kio_gpu_acct_new(g, "accumulator", 100 * MIB, KIO_GPU_OPTIONAL);
  ck_assert_int_eq(kio_gpu_out_of_memory(b, "oom", MIB, &w), KIO_GPU_USE_CPU);
  ck_assert_int_eq(count_lines(NULL), 1);
  kio_gpu_acct_free(a);
  kio_gpu_acct_free(b);
}
END_TEST

START_TEST(test_policy_wait_and_yes) {
  kio_setting_override(KIO_SET_GPU_WAIT, "1");
  kio_gpu *g;
  ck_assert_int_eq(kio_gpu_job(&g, 0), KIO_OK);
  for (int yes = 0; yes < 2; yes++) {
    kio_gpu_acct *a =
        kio_gpu_acct_new(g, "aligner", 100 * MIB, yes ? KIO_GPU_YES : KIO_GPU_WAIT);
    double w = 0, t0 = kio_now_s();
    int retries = 0;
    kio_gpu_action act;
    while ((act = kio_gpu_out_of_memory(a, "out of memory", MIB, &w)) == KIO_GPU_RETRY)
      retries++;
    double took = kio_now_s() - t0;
    ck_assert_int_ge(retries, 2);  /* a back-off, not a busy loop */
    /* waited the 1 s asked for, and stopped then (the bound leaves room for a loaded machine) */
    ck_assert(took >= 0.9 && took < 5.0);
    ck_assert_int_eq(act, yes ? KIO_GPU_FAIL : KIO_GPU_USE_CPU);
    ck_assert_int_gt(fake_trims, 0);  /* the pool trimmed while waiting */
    /* the bound is the job's: the next piece does not wait again */
    w = 0;
    t0 = kio_now_s();
    act = kio_gpu_out_of_memory(a, "out of memory", MIB, &w);
    ck_assert(kio_now_s() - t0 < 0.2);
    ck_assert_int_eq(act, yes ? KIO_GPU_FAIL : KIO_GPU_USE_CPU);
    /* never fits (need over the budget): no wait at all */
    kio_gpu_acct_new_job(a);
    w = 0;
    t0 = kio_now_s();
    act = kio_gpu_out_of_memory(a, "out of memory", 200 * MIB, &w);
    ck_assert(kio_now_s() - t0 < 0.2);
    ck_assert_int_eq(act, yes ? KIO_GPU_FAIL : KIO_GPU_USE_CPU);
    kio_gpu_acct_free(a);
  }
  ck_assert_int_ge(tu_cap.errors, 2);  /* yes: the ERROR lines */
}
END_TEST

START_TEST(test_policy_service) {
  kio_setting_override(KIO_SET_GPU_WAIT, "1");
  kio_gpu *s;
  ck_assert_int_eq(kio_gpu_open_device(&s, 0), KIO_OK);
  kio_gpu_acct *a = kio_gpu_acct_new(s, "aligner", 100 * MIB, KIO_GPU_YES);
  double w = 0;
  /* a service account waits (at most 10 s per job; here KALDI_GPU_WAIT is
   * less), then the CPU even under yes: the job's own fall-back is not the
   * service's to decide */
  kio_gpu_action act = KIO_GPU_RETRY;
  double t0 = kio_now_s();
  while (act == KIO_GPU_RETRY && kio_now_s() - t0 < 15)
    act = kio_gpu_out_of_memory(a, "oom", MIB, &w);
  ck_assert_int_eq(act, KIO_GPU_USE_CPU);
  ck_assert(kio_now_s() - t0 < 2);
  ck_assert_ptr_nonnull(strstr(tu_cap.last, "at most 1 s in the GPU service"));
  ck_assert_int_eq(tu_cap.n, 1);
  kio_gpu_acct_new_job(a);  /* the next job gets its own line */
  w = 0;
  kio_gpu_acct_set_limit(a, MIB);
  ck_assert_int_eq(kio_gpu_out_of_memory(a, "oom", 2 * MIB, &w), KIO_GPU_USE_CPU);
  ck_assert_int_eq(tu_cap.n, 2);
  kio_gpu_acct_free(a);
}
END_TEST

typedef struct { int fail_times, oom_kind, tries; } try_ctx;
static int try_dev(void *user, kio_gpu *g) {
  try_ctx *t = user;
  t->tries++;
  if (t->tries > t->fail_times) return KIO_OK;
  kio_gpu_acct *a = kio_gpu_acct_new(g, "aligner", t->oom_kind == 2 ? MIB : 64 * GIB, KIO_GPU_YES);
  void *p;
  int rc = kio_gpu_alloc(a, &p, 16 * GIB, NULL);  /* more than the budget or the device */
  kio_gpu_acct_free(a);
  ck_assert_int_eq(rc, KIO_ERR);
  return KIO_ERR;
}

START_TEST(test_choose) {
  char line[640];
  kio_gpu *g;
  kio_setting_override(KIO_SET_GPU_WAIT, "1");
  ck_assert_int_eq(kio_gpu_choose(KIO_GPU_NO, "", "aligning", &g, NULL, NULL, line, sizeof line),
                   KIO_OK);
  ck_assert_str_eq(line, "Aligning on the CPU (--use-gpu=no).");
  ck_assert_ptr_null(g);
  fake_ndev = 0;
  ck_assert_int_eq(kio_gpu_choose(KIO_GPU_OPTIONAL, "no socket", "accumulating", &g, NULL, NULL,
                                  line, sizeof line), KIO_OK);
  ck_assert_str_eq(line, "No GPU found; accumulating on the CPU. (GPU service not usable: no socket)");
  fake_ndev = 2;
  try_ctx t = {0, 1, 0};
  ck_assert_int_eq(kio_gpu_choose(KIO_GPU_YES, "", "aligning", &g, try_dev, &t, line, sizeof line),
                   KIO_OK);
  ck_assert_str_eq(line, "Using GPU: fake device 1");
  /* optional: out of device memory setting up: the CPU at once, no ERROR */
  t = (try_ctx){1, 1, 0};
  double t0 = kio_now_s();
  ck_assert_int_eq(kio_gpu_choose(KIO_GPU_OPTIONAL, "", "aligning", &g, try_dev, &t, line,
                                  sizeof line), KIO_OK);
  ck_assert_ptr_null(g);
  ck_assert_ptr_nonnull(strstr(line, "GPU not usable; aligning on the CPU (CUDA error out of memory"));
  ck_assert(kio_now_s() - t0 < 0.2);
  ck_assert_int_eq(tu_cap.errors, 0);
  /* wait: a shortage that passes is waited for */
  t = (try_ctx){2, 1, 0};
  ck_assert_int_eq(kio_gpu_choose(KIO_GPU_WAIT, "", "aligning", &g, try_dev, &t, line,
                                  sizeof line), KIO_OK);
  ck_assert_ptr_nonnull(g);
  ck_assert_ptr_nonnull(strstr(line, "after waiting for device memory"));
  /* yes: one that lasts: the ERROR after the wait */
  t = (try_ctx){1000, 1, 0};
  t0 = kio_now_s();
  ck_assert_int_eq(kio_gpu_choose(KIO_GPU_YES, "", "aligning", &g, try_dev, &t, line,
                                  sizeof line), KIO_ERR);
  ck_assert(kio_now_s() - t0 >= 0.9 && kio_now_s() - t0 < 3);
  ck_assert_int_eq(tu_cap.errors, 2);
  /* a budget too small is never waited for */
  t = (try_ctx){1000, 2, 0};
  t0 = kio_now_s();
  ck_assert_int_eq(kio_gpu_choose(KIO_GPU_WAIT, "", "aligning", &g, try_dev, &t, line,
                                  sizeof line), KIO_OK);
  ck_assert_ptr_null(g);
  ck_assert(kio_now_s() - t0 < 0.2);
}
END_TEST

START_TEST(test_wait_for_a_device) {
  /* every device busy (exclusive mode) past KALDI_GPU_WAIT: wait gives up
   * on the GPU and runs on the CPU instead of waiting forever */
  fake_busy_until_select = 1;
  char line[640];
  kio_gpu *g;
  ck_assert_int_eq(kio_gpu_choose(KIO_GPU_WAIT, "", "aligning", &g, NULL, NULL, line, sizeof line),
                   KIO_OK);
  ck_assert_ptr_null(g);
  ck_assert_ptr_nonnull(strstr(line, "No GPU became free"));
}
END_TEST

START_TEST(test_fail_hook) {
  kio_setting_override(KIO_SET_TEST_FAIL_ALLOC, "2,5:2,>3M");
  kio_gpu *g;
  ck_assert_int_eq(kio_gpu_job(&g, 0), KIO_OK);
  kio_gpu_acct *a = kio_gpu_acct_new(g, "aligner", GIB, KIO_GPU_YES);
  const int want[8] = {1, 0, 1, 1, 0, 0, 1, 1};  /* attempts 1..8 */
  void *p[8];
  for (int i = 0; i < 8; i++) {
    kio_gpu_catch();
    ck_assert_int_eq(kio_gpu_alloc(a, &p[i], MIB, NULL) == KIO_OK, want[i]);
    ck_assert_int_eq(kio_gpu_caught(NULL, 0), want[i] ? 0 : 1);
  }
  void *big;
  kio_gpu_catch();
  ck_assert_int_eq(kio_gpu_alloc(a, &big, 4 * MIB, NULL), KIO_ERR);
  ck_assert_int_eq(kio_gpu_caught(NULL, 0), 1);
  for (int i = 0; i < 8; i++) kio_gpu_free(p[i], NULL);
  ck_assert_uint_eq(fake_live, 0);
  kio_gpu_acct_free(a);
}
END_TEST

/* ---- the service's admission ---- */

typedef struct { gsvc_mem_pool *p; size_t want, got; double at; int order; } admit_ctx;
static int admit_seq;
static void *admit_one(void *arg) {
  admit_ctx *c = arg;
  c->got = gsvc_mem_pool_admit(c->p, c->want, c->want / 8);
  c->at = kio_now_s();
  c->order = __sync_add_and_fetch(&admit_seq, 1);
  return NULL;
}

START_TEST(test_admission_turns) {
  gsvc_mem_pool *p = gsvc_mem_pool_new(100, 600, NULL, NULL);
  /* two batches of 40 fit, the third waits its turn until one ends */
  ck_assert_uint_eq(gsvc_mem_pool_admit(p, 40, 5), 40);
  ck_assert_uint_eq(gsvc_mem_pool_admit(p, 40, 5), 40);
  admit_ctx c = {p, 40, 0, 0, 0};
  pthread_t t;
  pthread_create(&t, NULL, admit_one, &c);
  struct timespec ts = {0, 300 * 1000 * 1000};
  nanosleep(&ts, NULL);
  int running, waiting;
  size_t granted;
  gsvc_mem_pool_state(p, &granted, &running, &waiting);
  ck_assert_int_eq(waiting, 1);
  ck_assert_uint_eq(granted, 80);
  double t0 = kio_now_s();
  gsvc_mem_pool_release(p, 40);
  pthread_join(t, NULL);
  ck_assert_uint_eq(c.got, 40);
  ck_assert(c.at - t0 < 0.5);  /* woken by the release */
  gsvc_mem_pool_release(p, 40);
  gsvc_mem_pool_release(p, 40);
  gsvc_mem_pool_state(p, &granted, &running, &waiting);
  ck_assert_uint_eq(granted, 0);
  ck_assert_int_eq(running, 0);
  /* alone, a batch takes all there is even if it wanted more */
  ck_assert_uint_eq(gsvc_mem_pool_admit(p, 500, 10), 100);
  gsvc_mem_pool_release(p, 100);
  gsvc_mem_pool_free(p);
}
END_TEST

START_TEST(test_admission_order_and_progress) {
  gsvc_mem_pool *p = gsvc_mem_pool_new(100, 600, NULL, NULL);
  ck_assert_uint_eq(gsvc_mem_pool_admit(p, 70, 8), 70);
  /* first in line wants 80: after 2 s it takes the 30 left (>= 80/8) */
  admit_ctx a = {p, 80, 0, 0, 0}, b = {p, 10, 0, 0, 0};
  admit_seq = 0;
  pthread_t ta, tb;
  pthread_create(&ta, NULL, admit_one, &a);
  struct timespec ts = {0, 200 * 1000 * 1000};
  nanosleep(&ts, NULL);
  pthread_create(&tb, NULL, admit_one, &b);  /* would fit, but waits behind a */
  double t0 = kio_now_s();
  pthread_join(ta, NULL);
  ck_assert_uint_eq(a.got, 30);
  ck_assert(a.at - t0 > 1.5);
  ck_assert_int_eq(a.order, 1);  /* arrival order */
  nanosleep(&ts, NULL);
  ck_assert_int_eq(admit_seq, 1); /* b: nothing left, batches running: it waits */
  gsvc_mem_pool_release(p, 70);
  pthread_join(tb, NULL);
  ck_assert_int_eq(b.order, 2);
  ck_assert_uint_eq(b.got, 10);
  gsvc_mem_pool_release(p, 30);
  gsvc_mem_pool_release(p, 10);
  gsvc_mem_pool_free(p);
  /* no batch ends within the wait limit: the first in line goes on */
  p = gsvc_mem_pool_new(100, 1, NULL, NULL);
  ck_assert_uint_eq(gsvc_mem_pool_admit(p, 100, 100), 100);
  t0 = kio_now_s();
  ck_assert_uint_eq(gsvc_mem_pool_admit(p, 50, 50), 0);
  ck_assert(kio_now_s() - t0 < 2.5);
  gsvc_mem_pool_free(p);
}
END_TEST

/* What the service holds outside the grants (the models) counts too. */
static size_t held30(void *user) { (void)user; return 30; }

START_TEST(test_admission_counts_models) {
  gsvc_mem_pool *p = gsvc_mem_pool_new(100, 600, held30, NULL);
  ck_assert_uint_eq(gsvc_mem_pool_admit(p, 60, 8), 60);
  admit_ctx c = {p, 20, 0, 0, 0};
  pthread_t t;
  double t0 = kio_now_s();
  pthread_create(&t, NULL, admit_one, &c);
  pthread_join(t, NULL);
  ck_assert_uint_eq(c.got, 10);  /* 100 - 60 - 30, after its 2 s at the head */
  ck_assert(c.at - t0 > 1.5);
  gsvc_mem_pool_release(p, 60);
  gsvc_mem_pool_release(p, 10);
  gsvc_mem_pool_free(p);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("gpu_layer");
  TCase *tc = tcase_create("core");
  tcase_add_checked_fixture(tc, setup, NULL);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_modes_and_bytes);
  tcase_add_test(tc, test_budget_defaults);
  tcase_add_test(tc, test_shares_add_up);
  tcase_add_loop_test(tc, test_budget_alone, 0, 5);
  tcase_add_loop_test(tc, test_budget_alone_small_free, 0, 2);
  tcase_add_test(tc, test_service_want);
  tcase_add_test(tc, test_service_want_capped);
  tcase_add_test(tc, test_one_device_per_job);
  tcase_add_test(tc, test_accounts);
  tcase_add_test(tc, test_account_threads);
  tcase_add_test(tc, test_policy_optional);
  tcase_add_test(tc, test_policy_wait_and_yes);
  tcase_add_test(tc, test_policy_service);
  tcase_add_test(tc, test_choose);
  tcase_add_test(tc, test_wait_for_a_device);
  tcase_add_test(tc, test_fail_hook);
  tcase_add_test(tc, test_admission_turns);
  tcase_add_test(tc, test_admission_order_and_progress);
  tcase_add_test(tc, test_admission_counts_models);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return tu_run_suite(suite()); }
