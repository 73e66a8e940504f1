/* The ACC connections' idle accumulators, one pool per device (svc-acc.h). */
#include "svc-acc.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/sys/log.h"
#include "gpu-service/admission.h"
#include "gpu-service/svc-fused.h"

/* More idle ones than this per device are not worth their memory: a recipe
 * runs at most this many jobs at once. */
enum { MAX_IDLE = 64 };

typedef struct idle_acc {
  struct idle_acc *next;
  int dev, dim;
  uint64_t model;   /* the model its device copy holds (not referenced) */
  double since;
  gacc_acc *acc;
} idle_acc;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static idle_acc *pool;

/* The host threads of a's per-frame work: the first of jobs at once took
 * the process's share, the others one each (acc-par.c). */
static int threads_of(const gacc_acc *a) {
  gacc_timing t;
  gacc_get_timing(a, &t);
  return t.host_threads;
}

/* The idle accumulator a connection takes, out of the pool; NULL if none.
 * The most host threads first (a job alone gets them as a new one would),
 * then one that holds the model already (no upload). */
static idle_acc *take(int dev, int dim, uint64_t model) {
  pthread_mutex_lock(&mu);
  idle_acc **best = NULL;
  int most = -1, same = 0;
  for (idle_acc **pp = &pool; *pp; pp = &(*pp)->next) {
    const idle_acc *p = *pp;
    if (p->dev != dev || p->dim != dim) continue;
    int t = threads_of(p->acc), s = p->model == model;
    if (t > most || (t == most && s && !same)) {
      most = t;
      same = s;
      best = pp;
    }
  }
  idle_acc *p = NULL;
  if (best) {
    p = *best;
    *best = p->next;
  }
  pthread_mutex_unlock(&mu);
  return p;
}

gacc_acc *gsvc_acc_get(int dev, uint64_t model, const kio_tmodel *tm, const kio_am_gmm *am,
                       int use_cpu, int *kind, char *why) {
  gacc_acc *a = NULL;
  idle_acc *p = take(dev, am->dim, model);
  *kind = GSVC_ACC_NEW;
  if (p) {
    const int same = p->model == model;
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
  int n = 0, kept = 0;
  gacc_unbind(a);  /* the model entry may go while a is idle */
  pthread_mutex_lock(&mu);
  for (idle_acc *q = pool; q; q = q->next) n += q->dev == dev;
  if (p && n < MAX_IDLE) {
    *p = (idle_acc){pool, dev, gacc_dim(a), model, kio_now_s(), a};
    pool = p;
    p = NULL;
    kept = 1;
    n++;
  }
  pthread_mutex_unlock(&mu);
  free(p);
  *n_idle = n;
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

int gsvc_acc_shed(int dev, double idle_s) {
  idle_acc *gone = NULL;
  double now = kio_now_s();
  int n = 0;
  pthread_mutex_lock(&mu);
  for (idle_acc **pp = &pool; *pp;) {
    idle_acc *p = *pp;
    if ((dev < 0 || p->dev == dev) && (idle_s < 0 || now - p->since > idle_s)) {
      *pp = p->next;
      p->next = gone;
      gone = p;
      n++;
    } else {
      pp = &p->next;
    }
  }
  pthread_mutex_unlock(&mu);
  while (gone) {  /* outside the lock: a free waits for the accumulator's stream */
    idle_acc *next = gone->next;
    gacc_free(gone->acc);
    free(gone);
    gone = next;
  }
  return n;
}

int gsvc_acc_on_pressure(int dev) { return gsvc_acc_shed(dev, -1.0); }

int gsvc_acc_idle_count(int dev) {
  int n = 0;
  pthread_mutex_lock(&mu);
  for (idle_acc *p = pool; p; p = p->next) n += dev < 0 || p->dev == dev;
  pthread_mutex_unlock(&mu);
  return n;
}

const char *gsvc_acc_kind_name(int kind) {
  return kind == GSVC_ACC_REBOUND  ? "pooled accumulator, rebound to a new model"
         : kind == GSVC_ACC_POOLED ? "pooled accumulator"
                                   : "new accumulator";
}

void gsvc_acc_log(int dev, int requests, int shm, double setup, double busy, double connected,
                  const gacc_acc *a, int kind, const gacc_timing *t0) {
  const char *what = gsvc_acc_kind_name(kind);
  KIO_LOG("acc connection (device %d): %d requests (%d through shared memory), %.3f s setting "
          "up (%s), %.3f s accumulating, %.3f s connected", dev, requests, shm, setup, what,
          busy, connected);
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
