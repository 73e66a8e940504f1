/* The queue between the feature chain's producer thread and its reader
 * (feat-ring.h). The producer hands over whole archive entries (key +
 * matrix, buffers swapped, not copied). A sequential Matrix<float> table
 * reader takes them the same way (kio_ring_take: no copy at all); any other
 * reader gets the archive's bytes through a FILE* (fopencookie), serialised
 * here on the reader's side straight from the entry's matrix. The reader
 * closing early stops the producer as SIGPIPE would stop the pipe's last
 * process; the queue holds at most RING_NSLOT entries or about
 * RING_MAXBYTES, about what the byte ring before it buffered. */
#include "feat-ring.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/sys/log.h"

#define RING_NSLOT 32
#define RING_MAXBYTES ((size_t)4 << 20)
/* A waiting side is woken only once the other has made some room or some
 * entries (a few per wake-up, not one: a thread switch per utterance cost
 * more than the copies saved). */
#define RING_WAKE_N 8
#define RING_WAKE_BYTES ((size_t)1 << 20)

typedef struct {
  char *key;
  size_t keycap, bytes;
  kio_matrix m;
} ring_slot;

struct kio_ring {
  pthread_t thread;
  int started;
  pthread_mutex_t mu;
  pthread_cond_t can_read, can_write;
  ring_slot slot[RING_NSLOT];
  int head, count;  /* queued entries: slot[head .. head + count) */
  size_t queued;    /* their bytes */
  int rwait, wwait; /* the reader / the producer is waiting */
  int done;
  atomic_int stop;
  /* reader side of the byte stream: the current entry's key and header,
   * then its matrix's data */
  char *stage, *key;
  size_t stagecap, keycap, slen, spos, dlen, dpos;
  kio_matrix cur;
  int bytes_read;   /* the FILE* was read: objects can no longer be taken */
  void *(*fn)(kio_ring *, void *);
  void *arg;
};

static size_t entry_bytes(const char *key, const kio_matrix *m) {
  return strlen(key) + 16 + sizeof(float) * (size_t)m->rows * (size_t)m->cols;
}

int kio_ring_put(kio_ring *r, const char *key, kio_matrix *m) {
  if (atomic_load(&r->stop)) return -1;
  size_t kl = strlen(key);
  pthread_mutex_lock(&r->mu);
  while ((r->count == RING_NSLOT || (r->count > 0 && r->queued >= RING_MAXBYTES)) &&
         !atomic_load(&r->stop)) {
    if (r->rwait) pthread_cond_signal(&r->can_read);
    r->wwait = 1;
    pthread_cond_wait(&r->can_write, &r->mu);
    r->wwait = 0;
  }
  if (atomic_load(&r->stop)) {
    pthread_mutex_unlock(&r->mu);
    return -1;
  }
  /* The slot after the queued ones is the producer's until count grows. */
  ring_slot *s = &r->slot[(r->head + r->count) % RING_NSLOT];
  pthread_mutex_unlock(&r->mu);
  if (kl + 1 > s->keycap) {
    char *k = realloc(s->key, kl + 1);
    if (!k) return -1;
    s->key = k;
    s->keycap = kl + 1;
  }
  memcpy(s->key, key, kl + 1);
  kio_matrix t = s->m;
  s->m = *m;
  *m = t;
  if (s->m.rows == 0 || s->m.cols == 0) s->m.rows = s->m.cols = 0;  /* written as 0 x 0 */
  s->bytes = entry_bytes(key, &s->m);
  pthread_mutex_lock(&r->mu);
  r->count++;
  r->queued += s->bytes;
  if (r->rwait && (r->count >= RING_WAKE_N || r->queued >= RING_WAKE_BYTES))
    pthread_cond_signal(&r->can_read);
  pthread_mutex_unlock(&r->mu);
  return 0;
}

int kio_ring_stopped(kio_ring *r) { return atomic_load(&r->stop); }

/* The next entry: key copied into *key, the matrix swapped with *m. */
static int take(kio_ring *r, char **key, size_t *keycap, kio_matrix *m) {
  pthread_mutex_lock(&r->mu);
  while (r->count == 0 && !r->done) {
    if (r->wwait) pthread_cond_signal(&r->can_write);
    r->rwait = 1;
    pthread_cond_wait(&r->can_read, &r->mu);
    r->rwait = 0;
  }
  if (r->count == 0) {
    pthread_mutex_unlock(&r->mu);
    return KIO_EOF;
  }
  ring_slot *s = &r->slot[r->head];  /* the reader's until head moves */
  pthread_mutex_unlock(&r->mu);
  size_t kl = strlen(s->key);
  if (kl + 1 > *keycap) {
    char *k = realloc(*key, kl + 1);
    if (!k) return KIO_ERR;
    *key = k;
    *keycap = kl + 1;
  }
  memcpy(*key, s->key, kl + 1);
  kio_matrix t = s->m;
  s->m = *m;
  *m = t;
  pthread_mutex_lock(&r->mu);
  r->head = (r->head + 1) % RING_NSLOT;
  r->count--;
  r->queued -= s->bytes;
  if (r->wwait && r->count <= RING_NSLOT / 2 && r->queued <= RING_MAXBYTES / 2)
    pthread_cond_signal(&r->can_write);
  pthread_mutex_unlock(&r->mu);
  return KIO_OK;
}

int kio_ring_take(kio_ring *r, char **key, size_t *keycap, kio_matrix *m) {
  if (r->bytes_read) {
    kio_set_error("feature chain: entries taken after bytes were read");
    return KIO_ERR;
  }
  return take(r, key, keycap, m);
}

static void *ring_thread(void *arg) {
  kio_ring *r = arg;
  r->fn(r, r->arg);
  pthread_mutex_lock(&r->mu);
  r->done = 1;
  pthread_cond_broadcast(&r->can_read);
  pthread_mutex_unlock(&r->mu);
  return NULL;
}

/* The archive bytes of the entries: "KEY \0BFM \4<rows>\4<cols>" + data. */
static ssize_t ring_read(void *cookie, char *buf, size_t size) {
  kio_ring *r = cookie;
  r->bytes_read = 1;
  if (r->spos == r->slen && r->dpos == r->dlen) {
    int ret = take(r, &r->key, &r->keycap, &r->cur);
    if (ret == KIO_EOF) return 0;
    if (ret != KIO_OK) {
      errno = ENOMEM;
      return -1;
    }
    size_t kl = strlen(r->key);
    if (kl + 16 > r->stagecap) {
      char *s = realloc(r->stage, kl + 16);
      if (!s) {
        errno = ENOMEM;
        return -1;
      }
      r->stage = s;
      r->stagecap = kl + 16;
    }
    int32_t rows = r->cur.rows, cols = r->cur.cols;
    memcpy(r->stage, r->key, kl);
    memcpy(r->stage + kl, " \0BFM \4", 7);
    memcpy(r->stage + kl + 7, &rows, 4);
    r->stage[kl + 11] = 4;
    memcpy(r->stage + kl + 12, &cols, 4);
    r->slen = kl + 16;
    r->spos = 0;
    r->dlen = sizeof(float) * (size_t)rows * (size_t)cols;
    r->dpos = 0;
  }
  size_t n;
  if (r->spos < r->slen) {
    n = r->slen - r->spos < size ? r->slen - r->spos : size;
    memcpy(buf, r->stage + r->spos, n);
    r->spos += n;
  } else {
    n = r->dlen - r->dpos < size ? r->dlen - r->dpos : size;
    memcpy(buf, (const char *)r->cur.data + r->dpos, n);
    r->dpos += n;
  }
  return (ssize_t)n;
}

static void ring_free(kio_ring *r) {
  for (int i = 0; i < RING_NSLOT; i++) {
    free(r->slot[i].key);
    kio_matrix_free(&r->slot[i].m);
  }
  free(r->stage);
  free(r->key);
  kio_matrix_free(&r->cur);
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

FILE *kio_ring_start(void *(*fn)(kio_ring *, void *), void *arg, kio_ring **out) {
  kio_ring *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  pthread_mutex_init(&r->mu, NULL);
  pthread_cond_init(&r->can_read, NULL);
  pthread_cond_init(&r->can_write, NULL);
  atomic_init(&r->stop, 0);
  r->fn = fn;
  r->arg = arg;
  cookie_io_functions_t io = {ring_read, NULL, ring_seek, ring_close};
  FILE *f = fopencookie(r, "r", io);
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
  *out = r;
  return f;
}
