/* The byte ring between a producer thread and a FILE* reader (fopencookie),
 * as gzip-input.c's, for the in-process feature chain: the producer writes
 * what the pipe's last process would have written; the reader closing early
 * stops it as SIGPIPE would stop that process. */
#include "feat-ring.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define RING_NBUF 4
#define RING_BUFSZ (1 << 20)

struct kio_ring {
  pthread_t thread;
  int started;
  pthread_mutex_t mu;
  pthread_cond_t can_read, can_write;
  unsigned char *buf[RING_NBUF];
  size_t len[RING_NBUF];
  int head, count;
  size_t rpos;
  int done;
  atomic_int stop;
  int wr;       /* producer: buffer being filled */
  size_t wlen;
  void *(*fn)(kio_ring *, void *);
  void *arg;
};

/* Publishes the buffer being filled; waits for a free one. -1: reader gone. */
static int ring_publish(kio_ring *r) {
  pthread_mutex_lock(&r->mu);
  r->len[r->wr] = r->wlen;
  r->count++;
  r->wr = (r->wr + 1) % RING_NBUF;
  r->wlen = 0;
  pthread_cond_signal(&r->can_read);
  while (r->count == RING_NBUF && !atomic_load(&r->stop))
    pthread_cond_wait(&r->can_write, &r->mu);
  int gone = atomic_load(&r->stop);
  pthread_mutex_unlock(&r->mu);
  return gone ? -1 : 0;
}

int kio_ring_write(kio_ring *r, const void *data, size_t n) {
  const unsigned char *p = data;
  if (atomic_load(&r->stop)) return -1;
  while (n > 0) {
    size_t room = RING_BUFSZ - r->wlen, m = n < room ? n : room;
    memcpy(r->buf[r->wr] + r->wlen, p, m);
    r->wlen += m;
    p += m;
    n -= m;
    if (r->wlen == RING_BUFSZ && ring_publish(r) != 0) return -1;
  }
  return 0;
}

int kio_ring_stopped(kio_ring *r) { return atomic_load(&r->stop); }

static void *ring_thread(void *arg) {
  kio_ring *r = arg;
  r->fn(r, r->arg);
  pthread_mutex_lock(&r->mu);
  if (r->wlen > 0) { /* a free buffer is always there while one is filled */
    r->len[r->wr] = r->wlen;
    r->count++;
    r->wlen = 0;
  }
  r->done = 1;
  pthread_cond_broadcast(&r->can_read);
  pthread_mutex_unlock(&r->mu);
  return NULL;
}

static ssize_t ring_read(void *cookie, char *buf, size_t size) {
  kio_ring *r = cookie;
  pthread_mutex_lock(&r->mu);
  while (r->count == 0 && !r->done) pthread_cond_wait(&r->can_read, &r->mu);
  if (r->count == 0) {
    pthread_mutex_unlock(&r->mu);
    return 0;
  }
  int slot = r->head;
  pthread_mutex_unlock(&r->mu);
  size_t n = r->len[slot] - r->rpos;
  if (n > size) n = size;
  memcpy(buf, r->buf[slot] + r->rpos, n);
  r->rpos += n;
  if (r->rpos == r->len[slot]) {
    pthread_mutex_lock(&r->mu);
    r->head = (r->head + 1) % RING_NBUF;
    r->count--;
    r->rpos = 0;
    pthread_cond_signal(&r->can_write);
    pthread_mutex_unlock(&r->mu);
  }
  return (ssize_t)n;
}

static void ring_free(kio_ring *r) {
  for (int i = 0; i < RING_NBUF; i++) free(r->buf[i]);
  pthread_mutex_destroy(&r->mu);
  pthread_cond_destroy(&r->can_read);
  pthread_cond_destroy(&r->can_write);
  free(r);
}

static int ring_close(void *cookie) {
  kio_ring *r = cookie;
  pthread_mutex_lock(&r->mu);
  atomic_store(&r->stop, 1);
  pthread_cond_broadcast(&r->can_write);
  pthread_mutex_unlock(&r->mu);
  if (r->started) pthread_join(r->thread, NULL);
  ring_free(r);
  return 0;
}

static int ring_seek(void *cookie, off64_t *off, int whence) {
  (void)cookie, (void)off, (void)whence;
  errno = ESPIPE;
  return -1;
}

FILE *kio_ring_start(void *(*fn)(kio_ring *, void *), void *arg) {
  kio_ring *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  pthread_mutex_init(&r->mu, NULL);
  pthread_cond_init(&r->can_read, NULL);
  pthread_cond_init(&r->can_write, NULL);
  atomic_init(&r->stop, 0);
  r->fn = fn;
  r->arg = arg;
  int ok = 1;
  for (int i = 0; ok && i < RING_NBUF; i++) ok = (r->buf[i] = malloc(RING_BUFSZ)) != NULL;
  cookie_io_functions_t io = {ring_read, NULL, ring_seek, ring_close};
  FILE *f = ok ? fopencookie(r, "r", io) : NULL;
  if (!f) {
    ring_free(r);
    return NULL;
  }
  /* The producer takes no signals: handlers keep running on the caller's
   * threads, as they did with child processes. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  r->started = pthread_create(&r->thread, NULL, ring_thread, r) == 0;
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (!r->started) {
    fclose(f);
    return NULL;
  }
  return f;
}
