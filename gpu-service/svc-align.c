/* The ALIGN connections' idle aligners, one pool per device (svc-align.h). */
#include "svc-align.h"

#include <stdio.h>
#include <stdlib.h>

#include "base/sys/log.h"
#include "gpu-service/admission.h"
#include "gpu-service/idle-pool.h"
#include "gpu-service/svc-fused.h"

/* More idle ones than this per device are not worth their memory: a recipe
 * runs at most this many jobs at once. */
enum { MAX_IDLE = 64 };

typedef struct idle_aligner {
  gsvc_idle e;      /* first: the pool's entry (model: the one it last aligned with) */
  galign_opts opts; /* and its options */
  galign_aligner *aligner;
} idle_aligner;

static void drop(gsvc_idle *e) {
  galign_aligner_free(((idle_aligner *)e)->aligner);
  free(e);
}

static gsvc_idle_pool pool = GSVC_IDLE_POOL_INIT(MAX_IDLE, drop);

static int same_opts(const galign_opts *a, const galign_opts *b) {
  return a->beam == b->beam && a->retry_beam == b->retry_beam &&
         a->transition_scale == b->transition_scale &&
         a->self_loop_scale == b->self_loop_scale && a->acoustic_scale == b->acoustic_scale &&
         a->careful == b->careful;
}

typedef struct want {
  uint64_t model;
  const galign_opts *o;
} want;

/* One that aligned this model with these options first, else the one idle
 * for the shortest time. */
static long rank(const gsvc_idle *e, const void *ctx) {
  const want *w = ctx;
  return e->model == w->model && same_opts(&((const idle_aligner *)e)->opts, w->o);
}

/* The idle aligner a connection takes, out of the pool; NULL if none. */
static idle_aligner *take(int dev, uint64_t model, const galign_opts *o) {
  const want w = {model, o};
  return (idle_aligner *)gsvc_idle_take(&pool, dev, rank, &w);
}

galign_aligner *gsvc_align_get(int dev, uint64_t model, const kio_tmodel *tm,
                               const kio_am_gmm *am, const galign_opts *o, int use_cpu,
                               int *kind, char *why) {
  galign_aligner *a = NULL;
  idle_aligner *p = take(dev, model, o);
  *kind = GSVC_ALIGN_NEW;
  if (p) {
    const int same = p->e.model == model && same_opts(&p->opts, o);
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
  galign_unbind(a);  /* the model entry may go while a is idle */
  if (p) *p = (idle_aligner){{.model = model}, *o, a};
  int kept = gsvc_idle_put(&pool, p ? &p->e : NULL, dev, n_idle);
  if (!kept) free(p);
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

int gsvc_align_shed(int dev, double idle_s) { return gsvc_idle_shed(&pool, dev, idle_s); }

int gsvc_align_on_pressure(int dev) { return gsvc_align_shed(dev, -1.0); }

int gsvc_align_idle_count(int dev) { return gsvc_idle_count(&pool, dev); }

const char *gsvc_align_kind_name(int kind) {
  return kind == GSVC_ALIGN_REBOUND  ? "pooled aligner, rebound to a new model"
         : kind == GSVC_ALIGN_POOLED ? "pooled aligner"
                                     : "new aligner";
}
