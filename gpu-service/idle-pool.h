/* Internal to gpu-service: a pool of idle objects, per device, that the
 * connections of one kind hand back at their end and take at their start
 * (svc-align's aligners, svc-acc's accumulators). Each entry embeds a
 * gsvc_idle as its first member; the kind chooses among the device's idle
 * entries (gsvc_idle_take's rank) and frees what it shed (the pool's
 * drop). The pool holds at most max_per_dev entries a device, the most
 * recently idle first; it is thread-safe, and frees outside its lock (a
 * free may wait for the object's stream). */
#ifndef GSVC_IDLE_POOL_H
#define GSVC_IDLE_POOL_H

#include <pthread.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gsvc_idle {
  struct gsvc_idle *next;
  int dev;
  uint64_t model;  /* the model it was last bound to (not referenced) */
  double since;    /* idle since (kio_now_s) */
} gsvc_idle;

typedef struct gsvc_idle_pool {
  pthread_mutex_t mu;
  gsvc_idle *head;
  int max_per_dev;
  void (*drop)(gsvc_idle *e);  /* frees the object and its entry */
} gsvc_idle_pool;

#define GSVC_IDLE_POOL_INIT(max, drop) {PTHREAD_MUTEX_INITIALIZER, NULL, (max), (drop)}

/* The idle entry of device dev with the highest rank(e, ctx) (the first of
 * equals, most recently idle first; a negative rank: not taken), out of the
 * pool; NULL if none. rank runs under the pool's lock. */
gsvc_idle *gsvc_idle_take(gsvc_idle_pool *pool, int dev,
                          long (*rank)(const gsvc_idle *e, const void *ctx), const void *ctx);
/* Keeps e (its model set; dev and since set here) unless the pool holds
 * max_per_dev entries of its device already or e is NULL (only counted):
 * returns 1 if kept (e then belongs to the pool); *n_idle: the device's
 * idle entries (with e if kept). */
int gsvc_idle_put(gsvc_idle_pool *pool, gsvc_idle *e, int dev, int *n_idle);
/* Frees (drop) the entries of device dev (-1: every device) idle for more
 * than idle_s seconds (negative: all); returns how many. */
int gsvc_idle_shed(gsvc_idle_pool *pool, int dev, double idle_s);
/* Idle entries of device dev (-1: all). */
int gsvc_idle_count(gsvc_idle_pool *pool, int dev);

#ifdef __cplusplus
}
#endif
#endif
