/* The ACC connections' idle accumulators, one pool per device (svc-acc.h). */
#include "svc-acc.h"

#include <stdio.h>
#include <stdlib.h>

#include "base/sys/log.h"
#include "gpu-service/admission.h"
#include "gpu-service/idle-pool.h"
#include "gpu-service/svc-fused.h"

/* More idle ones than this per device are not worth their memory: a recipe
 * runs at most this many jobs at once. */
enum { MAX_IDLE = 64 };

typedef struct idle_acc {
  gsvc_idle e;  /* first: the pool's entry */
  int dim;
  gacc_acc *acc;
} idle_acc;

static void drop(gsvc_idle *e) {
  gacc_free(((idle_acc *)e)->acc);
  free(e);
}

static gsvc_idle_pool pool = GSVC_IDLE_POOL_INIT(MAX_IDLE, drop);

/* The host threads of a's per-frame work: the first of jobs at once took
 * the process's share, the others one each (acc-par.c). */
static int threads_of(const gacc_acc *a) {
  gacc_timing t;
  gacc_get_timing(a, &t);
  return t.host_threads;
}

typedef struct want {
  int dim;
  uint64_t model;
} want;

/* The most host threads first (a job alone gets them as a new one would),
 * then one that holds the model already (no upload); only the same
 * dimension. */
static long rank(const gsvc_idle *e, const void *ctx) {
  const idle_acc *p = (const idle_acc *)e;
  const want *w = ctx;
  if (p->dim != w->dim) return -1;
  return 2L * threads_of(p->acc) + (e->model == w->model);
}

/* The idle accumulator a connection takes, out of the pool; NULL if none. */
static idle_acc *take(int dev, int dim, uint64_t model) {
  const want w = {dim, model};
  return (idle_acc *)gsvc_idle_take(&pool, dev, rank, &w);
}

gacc_acc *gsvc_acc_get(int dev, uint64_t model, const kio_tmodel *tm, const kio_am_gmm *am,
                       int use_cpu, int *kind, char *why) {
  gacc_acc *a = NULL;
  idle_acc *p = take(dev, am->dim, model);
  *kind = GSVC_ACC_NEW;
  if (p) {
    const int same = p->e.model == model;
    a = p->acc;
    free(p);
    kio_log_deferred *quiet = NULL;  /* a failure: a new one is made, which tells */
    kio_log_defer(&quiet);
    int rc = gacc_rebind(a, tm, am, same);
    kio_log_defer(NULL);
    kio_log_discard(&quiet);
    if (rc == KIO_OK) {
      *kind = same ? GSVC_ACC_POOLED : GSVC_ACC_REBOUND;
      gsvc_mem_job_acc(a);
      return a;
    }
    gacc_free(a);
    a = NULL;
  }
  kio_log_deferred *lines = NULL;
  why[0] = '\0';
  kio_log_defer(&lines);
  int rc = gacc_new(&a, use_cpu ? "cpu" : "gpu", tm, am);
  kio_log_defer(NULL);
  if (rc != KIO_OK) kio_log_deferred_each(lines, gsvc_join_line, why);
  kio_log_discard(&lines);
  if (rc != KIO_OK) {
    if (!why[0]) snprintf(why, 200, "cannot set up the accumulator");
    return NULL;
  }
  gsvc_mem_job_acc(a);
  return a;
}

/* Keeps a idle; 0 if the pool is full or without memory (a not kept). */
static int put(int dev, uint64_t model, gacc_acc *a, int *n_idle) {
  idle_acc *p = malloc(sizeof *p);
  gacc_unbind(a);  /* the model entry may go while a is idle */
  if (p) *p = (idle_acc){{.model = model}, gacc_dim(a), a};
  int kept = gsvc_idle_put(&pool, p ? &p->e : NULL, dev, n_idle);
  if (!kept) free(p);
  return kept;
}

void gsvc_acc_end(int dev, uint64_t model, gacc_acc *a, int drop, int verbose) {
  if (!a) return;
  double t0 = kio_now_s();
  int n = 0, kept = !drop && put(dev, model, a, &n);
  if (!kept) gacc_free(a);
  if (verbose)
    KIO_LOG("acc connection: %.3f s %s the accumulator (%d idle on device %d)",
            kio_now_s() - t0, kept ? "pooling" : "freeing", kept ? n : gsvc_acc_idle_count(dev),
            dev);
}

int gsvc_acc_shed(int dev, double idle_s) { return gsvc_idle_shed(&pool, dev, idle_s); }

int gsvc_acc_on_pressure(int dev) { return gsvc_acc_shed(dev, -1.0); }

int gsvc_acc_idle_count(int dev) { return gsvc_idle_count(&pool, dev); }

const char *gsvc_acc_kind_name(int kind) {
  return kind == GSVC_ACC_REBOUND  ? "pooled accumulator, rebound to a new model"
         : kind == GSVC_ACC_POOLED ? "pooled accumulator"
                                   : "new accumulator";
}

void gsvc_acc_log(int dev, int requests, int most, int shm, double setup, double busy,
                  double waiting, double connected, const gacc_acc *a, int kind,
                  const gacc_timing *t0) {
  const char *what = gsvc_acc_kind_name(kind);
  KIO_LOG("acc connection (device %d): %d requests (%d through shared memory), up to %d in "
          "flight, %.3f s setting up (%s), %.3f s accumulating, %.3f s waiting for requests, "
          "%.3f s connected", dev, requests, shm, most, setup, what, busy, waiting, connected);
  if (kio_log_verbose() < 2) return;
  gacc_timing t;
  gacc_get_timing(a, &t);
  KIO_LOG("acc connection (device %d): %s accumulator; %ld batches, %ld frames; host sort "
          "%.3f s, staging %.3f s, waiting for the device %.3f s, likelihoods %.3f s, "
          "fetching statistics %.3f s (%d host threads)", dev,
          kind == GSVC_ACC_NEW ? "new" : "pooled", t.batches - t0->batches, t.frames - t0->frames,
          t.sort - t0->sort, t.stage - t0->stage, t.wait - t0->wait, t.like - t0->like,
          t.fetch - t0->fetch, t.host_threads);
}
