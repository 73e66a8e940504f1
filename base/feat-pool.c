/* A small pool of worker threads for one feature chain (KIO_FEATS_THREADS):
 * kio_fpool_run splits frames [0, T) of one stage of one utterance into
 * chunks computed by the workers and the calling thread, and returns when
 * all are done. Each output frame is computed by exactly one thread with the
 * same code as without the pool, so results do not depend on the count. */
#include "feat-pool.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>

struct kio_fpool {
  int n;  /* workers (the caller is one more) */
  pthread_t *th;
  pthread_mutex_t mu;
  pthread_cond_t go, done;
  unsigned long gen;
  int busy, stop;
  kio_fpool_fn fn;
  void *arg;
  int32_t T, chunk, next;
};

/* Takes the next chunk: 1 and [*a, *b), or 0 when none is left. */
static int take(kio_fpool *p, int32_t *a, int32_t *b) {
  if (p->next >= p->T) return 0;
  *a = p->next;
  *b = p->next + p->chunk < p->T ? p->next + p->chunk : p->T;
  p->next = *b;
  return 1;
}

static void *worker(void *arg) {
  kio_fpool *p = arg;
  unsigned long seen = 0;
  pthread_mutex_lock(&p->mu);
  for (;;) {
    while (!p->stop && p->gen == seen) pthread_cond_wait(&p->go, &p->mu);
    if (p->stop) break;
    seen = p->gen;
    int32_t a, b;
    while (take(p, &a, &b)) {
      p->busy++;
      pthread_mutex_unlock(&p->mu);
      p->fn(p->arg, a, b);
      pthread_mutex_lock(&p->mu);
      if (--p->busy == 0 && p->next >= p->T) pthread_cond_broadcast(&p->done);
    }
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

kio_fpool *kio_fpool_new(int threads) {
  if (threads < 2) return NULL;
  kio_fpool *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->th = calloc((size_t)threads - 1, sizeof *p->th);
  if (!p->th) { free(p); return NULL; }
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->go, NULL);
  pthread_cond_init(&p->done, NULL);
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  for (int i = 0; i < threads - 1; i++) {
    if (pthread_create(&p->th[i], NULL, worker, p) != 0) break;
    p->n++;
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  return p;
}

void kio_fpool_run(kio_fpool *p, int32_t T, int32_t align, kio_fpool_fn fn, void *arg) {
  if (!p || p->n == 0 || T < 2 * align) {
    fn(arg, 0, T);
    return;
  }
  int32_t parts = p->n + 1, chunk = (T + parts - 1) / parts;
  chunk = (chunk + align - 1) / align * align;
  pthread_mutex_lock(&p->mu);
  p->fn = fn;
  p->arg = arg;
  p->T = T;
  p->chunk = chunk;
  p->next = 0;
  p->gen++;
  pthread_cond_broadcast(&p->go);
  int32_t a, b;
  while (take(p, &a, &b)) {
    p->busy++;
    pthread_mutex_unlock(&p->mu);
    fn(arg, a, b);
    pthread_mutex_lock(&p->mu);
    p->busy--;
  }
  while (p->busy > 0) pthread_cond_wait(&p->done, &p->mu);
  pthread_mutex_unlock(&p->mu);
}

void kio_fpool_free(kio_fpool *p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  p->stop = 1;
  pthread_cond_broadcast(&p->go);
  pthread_mutex_unlock(&p->mu);
  for (int i = 0; i < p->n; i++) pthread_join(p->th[i], NULL);
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->go);
  pthread_cond_destroy(&p->done);
  free(p->th);
  free(p);
}

int kio_fpool_threads(void) {
  const char *e = getenv("KIO_FEATS_THREADS");
  long n = e && *e ? strtol(e, NULL, 10) : 1;
  return n < 1 ? 1 : n > 256 ? 256 : (int)n;
}
