/* The ALIGN connections' idle aligners, one pool per device (svc-align.h). */
#include "svc-align.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/sys/log.h"
#include "gpu-service/admission.h"
#include "gpu-service/svc-fused.h"

/* More idle ones than this per device are not worth their memory: a recipe
 * runs at most this many jobs at once. */
enum { MAX_IDLE = 64 };

typedef struct idle_aligner {
  struct idle_aligner *next;
  int dev;
  uint64_t model;   /* the model it last aligned with (not referenced) */
  galign_opts opts; /* and its options */
  double since;
  galign_aligner *aligner;
} idle_aligner;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static idle_aligner *pool;  /* the most recently idle first */

static int same_opts(const galign_opts *a, const galign_opts *b) {
  return a->beam == b->beam && a->retry_beam == b->retry_beam &&
         a->transition_scale == b->transition_scale &&
         a->self_loop_scale == b->self_loop_scale && a->acoustic_scale == b->acoustic_scale &&
         a->careful == b->careful;
}

/* The idle aligner a connection takes, out of the pool; NULL if none. One
 * that aligned this model with these options first, else the one idle for
 * the shortest time. */
static idle_aligner *take(int dev, uint64_t model, const galign_opts *o) {
  pthread_mutex_lock(&mu);
  idle_aligner **best = NULL;
  for (idle_aligner **pp = &pool; *pp; pp = &(*pp)->next) {
    const idle_aligner *p = *pp;
    if (p->dev != dev) continue;
    if (p->model == model && same_opts(&p->opts, o)) {
      best = pp;
      break;
    }
    if (!best) best = pp;
  }
  idle_aligner *p = NULL;
  if (best) {
    p = *best;
    *best = p->next;
  }
  pthread_mutex_unlock(&mu);
  return p;
}

galign_aligner *gsvc_align_get(int dev, uint64_t model, const kio_tmodel *tm,
                               const kio_am_gmm *am, const galign_opts *o, int use_cpu,
                               int *kind, char *why) {
  galign_aligner *a = NULL;
  idle_aligner *p = take(dev, model, o);
  *kind = GSVC_ALIGN_NEW;
  if (p) {
    const int same = p->model == model && same_opts(&p->opts, o);
    a = p->aligner;
    free(p);
    kio_log_deferred *quiet = NULL;  /* a failure: a new one is made, which tells */
    kio_log_defer(&quiet);
    int rc = galign_rebind(a, tm, am, o);
    kio_log_defer(NULL);
    kio_log_discard(&quiet);
    if (rc == KIO_OK) {
      *kind = same ? GSVC_ALIGN_POOLED : GSVC_ALIGN_REBOUND;
      gsvc_mem_job_align(a);
      return a;
    }
    galign_aligner_free(a);
    a = NULL;
  }
  kio_log_deferred *lines = NULL;
  why[0] = '\0';
  kio_log_defer(&lines);
  int rc = galign_aligner_new(&a, use_cpu ? GALIGN_GPU_NO : GALIGN_GPU_YES, tm, am, o);
  kio_log_defer(NULL);
  if (rc != KIO_OK) kio_log_deferred_each(lines, gsvc_join_line, why);
  kio_log_discard(&lines);
  if (rc != KIO_OK) {
    if (!why[0]) snprintf(why, 200, "cannot set up the aligner");
    return NULL;
  }
  gsvc_mem_job_align(a);
  return a;
}

/* Keeps a idle; 0 if the pool is full or without memory (a not kept). */
static int put(int dev, uint64_t model, const galign_opts *o, galign_aligner *a, int *n_idle) {
  idle_aligner *p = malloc(sizeof *p);
  int n = 0, kept = 0;
  galign_unbind(a);  /* the model entry may go while a is idle */
  pthread_mutex_lock(&mu);
  for (idle_aligner *q = pool; q; q = q->next) n += q->dev == dev;
  if (p && n < MAX_IDLE) {
    *p = (idle_aligner){pool, dev, model, *o, kio_now_s(), a};
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

void gsvc_align_end(int dev, uint64_t model, const galign_opts *o, galign_aligner *a, int drop,
                    int verbose) {
  if (!a) return;
  double t0 = kio_now_s();
  int n = 0, kept = !drop && put(dev, model, o, a, &n);
  if (!kept) galign_aligner_free(a);
  if (verbose)
    KIO_LOG("align connection: %.3f s %s the aligner (%d idle on device %d)",
            kio_now_s() - t0, kept ? "pooling" : "freeing",
            kept ? n : gsvc_align_idle_count(dev), dev);
}

int gsvc_align_shed(int dev, double idle_s) {
  idle_aligner *gone = NULL;
  double now = kio_now_s();
  int n = 0;
  pthread_mutex_lock(&mu);
  for (idle_aligner **pp = &pool; *pp;) {
    idle_aligner *p = *pp;
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
  while (gone) {  /* outside the lock: a free waits for the aligner's stream */
    idle_aligner *next = gone->next;
    galign_aligner_free(gone->aligner);
    free(gone);
    gone = next;
  }
  return n;
}

int gsvc_align_on_pressure(int dev) { return gsvc_align_shed(dev, -1.0); }

int gsvc_align_idle_count(int dev) {
  int n = 0;
  pthread_mutex_lock(&mu);
  for (idle_aligner *p = pool; p; p = p->next) n += dev < 0 || p->dev == dev;
  pthread_mutex_unlock(&mu);
  return n;
}

const char *gsvc_align_kind_name(int kind) {
  return kind == GSVC_ALIGN_REBOUND  ? "pooled aligner, rebound to a new model"
         : kind == GSVC_ALIGN_POOLED ? "pooled aligner"
                                     : "new aligner";
}
