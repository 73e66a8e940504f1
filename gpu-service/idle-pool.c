/* A pool of idle objects per device (idle-pool.h). */
#include "idle-pool.h"

#include <stddef.h>

#include "base/sys/log.h"

gsvc_idle *gsvc_idle_take(gsvc_idle_pool *pool, int dev,
                          long (*rank)(const gsvc_idle *e, const void *ctx), const void *ctx) {
  pthread_mutex_lock(&pool->mu);
  gsvc_idle **best = NULL;
  long top = -1;
  for (gsvc_idle **pp = &pool->head; *pp; pp = &(*pp)->next) {
    if ((*pp)->dev != dev) continue;
    long r = rank(*pp, ctx);
    if (r > top) {
      top = r;
      best = pp;
    }
  }
  gsvc_idle *e = NULL;
  if (best) {
    e = *best;
    *best = e->next;
  }
  pthread_mutex_unlock(&pool->mu);
  return e;
}

int gsvc_idle_put(gsvc_idle_pool *pool, gsvc_idle *e, int dev, int *n_idle) {
  int n = 0, kept = 0;
  pthread_mutex_lock(&pool->mu);
  for (const gsvc_idle *q = pool->head; q; q = q->next) n += q->dev == dev;
  if (e && n < pool->max_per_dev) {
    e->next = pool->head;
    e->dev = dev;
    e->since = kio_now_s();
    pool->head = e;
    kept = 1;
    n++;
  }
  pthread_mutex_unlock(&pool->mu);
  *n_idle = n;
  return kept;
}

int gsvc_idle_shed(gsvc_idle_pool *pool, int dev, double idle_s) {
  gsvc_idle *gone = NULL;
  double now = kio_now_s();
  int n = 0;
  pthread_mutex_lock(&pool->mu);
  for (gsvc_idle **pp = &pool->head; *pp;) {
    gsvc_idle *e = *pp;
    if ((dev < 0 || e->dev == dev) && (idle_s < 0 || now - e->since > idle_s)) {
      *pp = e->next;
      e->next = gone;
      gone = e;
      n++;
    } else {
      pp = &e->next;
    }
  }
  pthread_mutex_unlock(&pool->mu);
  while (gone) {  /* outside the lock: a free waits for the object's stream */
    gsvc_idle *next = gone->next;
    pool->drop(gone);
    gone = next;
  }
  return n;
}

int gsvc_idle_count(gsvc_idle_pool *pool, int dev) {
  int n = 0;
  pthread_mutex_lock(&pool->mu);
  for (const gsvc_idle *e = pool->head; e; e = e->next) n += dev < 0 || e->dev == dev;
  pthread_mutex_unlock(&pool->mu);
  return n;
}
