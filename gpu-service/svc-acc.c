/* The ACC connections' idle accumulators (svc-acc.h). */
#include "svc-acc.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/sys/log.h"
#include "gpu-service/admission.h"
#include "gpu-service/svc-fused.h"

/* More idle ones than this per model and device are not worth their
 * device memory: a recipe runs at most this many jobs at once. */
enum { MAX_IDLE = 64 };

struct gsvc_acc_idle {
  struct gsvc_acc_idle *next;
  int dev;
  gacc_acc *acc;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

/* The host threads of a's per-frame work: the first of jobs at once took
 * the process's share, the others one each (acc-par.c). */
static int threads_of(const gacc_acc *a) {
  gacc_timing t;
  gacc_get_timing(a, &t);
  return t.host_threads;
}

gacc_acc *gsvc_acc_take(gsvc_acc_idle **list, int dev) {
  gacc_acc *a = NULL;
  pthread_mutex_lock(&mu);
  /* the one with the most threads: a job alone gets them as a new one would */
  gsvc_acc_idle **best = NULL;
  int most = -1;
  for (gsvc_acc_idle **pp = list; *pp; pp = &(*pp)->next)
    if ((*pp)->dev == dev && threads_of((*pp)->acc) > most) {
      most = threads_of((*pp)->acc);
      best = pp;
    }
  if (best) {
    gsvc_acc_idle *p = *best;
    *best = p->next;
    a = p->acc;
    free(p);
  }
  pthread_mutex_unlock(&mu);
  if (!a) return NULL;
  kio_log_deferred *quiet = NULL;  /* a failure: a new one is made, which tells */
  kio_log_defer(&quiet);
  int rc = gacc_reset_stats(a);
  kio_log_defer(NULL);
  kio_log_discard(&quiet);
  if (rc != KIO_OK) {
    gacc_free(a);
    return NULL;
  }
  gsvc_mem_job_acc(a);
  return a;
}

gacc_acc *gsvc_acc_get(gsvc_acc_idle **list, int dev, const kio_tmodel *tm,
                       const kio_am_gmm *am, int use_cpu, int *pooled, char *why) {
  gacc_acc *a = gsvc_acc_take(list, dev);
  *pooled = a != NULL;
  if (a) return a;
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

void gsvc_acc_put(gsvc_acc_idle **list, int dev, gacc_acc *a) {
  if (!a) return;
  gsvc_acc_idle *p = malloc(sizeof *p);
  int n = 0;
  pthread_mutex_lock(&mu);
  for (gsvc_acc_idle *q = *list; q; q = q->next) n += q->dev == dev;
  if (p && n < MAX_IDLE) {
    *p = (gsvc_acc_idle){*list, dev, a};
    *list = p;
    a = NULL;
    p = NULL;
  }
  pthread_mutex_unlock(&mu);
  free(p);
  gacc_free(a);
}

void gsvc_acc_end(gsvc_acc_idle **list, int dev, gacc_acc *a, int drop, int verbose) {
  double t0 = kio_now_s();
  if (drop) gacc_free(a);
  else gsvc_acc_put(list, dev, a);
  if (verbose)
    KIO_LOG("acc connection: %.3f s %s the accumulator", kio_now_s() - t0,
            drop ? "freeing" : "pooling");
}

void gsvc_acc_idle_free(gsvc_acc_idle **list) {
  pthread_mutex_lock(&mu);
  gsvc_acc_idle *p = *list;
  *list = NULL;
  pthread_mutex_unlock(&mu);
  while (p) {
    gsvc_acc_idle *next = p->next;
    gacc_free(p->acc);
    free(p);
    p = next;
  }
}

void gsvc_acc_log(int dev, int requests, int shm, double setup, double busy, double connected,
                  const gacc_acc *a, const gacc_timing *t0) {
  const char *kind = t0 ? "pooled" : "new";
  KIO_LOG("acc connection (device %d): %d requests (%d through shared memory), %.3f s setting "
          "up (%s accumulator), %.3f s accumulating, %.3f s connected", dev, requests, shm,
          setup, kind, busy, connected);
  if (kio_log_verbose() < 2) return;
  gacc_timing t, zero = {0};
  gacc_get_timing(a, &t);
  if (!t0) t0 = &zero;
  KIO_LOG("acc connection (device %d): %s accumulator; %ld batches, %ld frames; host sort "
          "%.3f s, staging %.3f s, waiting for the device %.3f s, likelihoods %.3f s, "
          "fetching statistics %.3f s (%d host threads)", dev, kind,
          t.batches - t0->batches, t.frames - t0->frames, t.sort - t0->sort,
          t.stage - t0->stage, t.wait - t0->wait, t.like - t0->like, t.fetch - t0->fetch,
          t.host_threads);
}
