/* A connection's requests read ahead (svc-reader.h). */
#include "svc-reader.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/sys/log.h"

/* Waiting requests, plus the one the connection's thread works on. */
enum { DEPTH = KIO_SVC_MAX_INFLIGHT, SLOTS = KIO_SVC_MAX_INFLIGHT + 1 };

struct gsvc_reader {
  kio_svc *s;
  _Atomic int *busy;
  int (*stop)(void);
  pthread_t th;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  gsvc_request slot[SLOTS];
  gsvc_request *queue[DEPTH];  /* ring, in arrival order */
  int head, count;
  gsvc_request *spare[SLOTS];  /* slots not in use */
  int nspare;
  int quit, ended;
  long received;
  _Atomic long answered;
  int most;  /* unanswered at once, at most */
};

static void *reader_main(void *arg) {
  gsvc_reader *r = arg;
  for (;;) {
    pthread_mutex_lock(&r->mu);
    while (!r->quit && (r->count == DEPTH || r->nspare == 0)) pthread_cond_wait(&r->cv, &r->mu);
    gsvc_request *q = r->quit ? NULL : r->spare[--r->nspare];
    pthread_mutex_unlock(&r->mu);
    if (!q) break;
    kio_msg_reader rd;
    uint32_t type = 0;
    int ok = !r->stop() && kio_svc_recv(r->s, 0, &type, &rd) == KIO_OK;
    if (!ok) {
      const char *e = kio_svc_error(r->s);
      if (strstr(e, "refused")) KIO_WARN("%s; closing the connection", e);
      pthread_mutex_lock(&r->mu);
      r->spare[r->nspare++] = q;
      pthread_mutex_unlock(&r->mu);
      break;
    }
    q->type = type;
    q->len = rd.len;
    kio_svc_swap_payload(r->s, &q->buf, &q->cap);  /* the next message goes elsewhere */
    q->fd = kio_svc_take_fd(r->s);
    atomic_fetch_add(r->busy, 1);  /* heartbeats until its reply */
    pthread_mutex_lock(&r->mu);
    int unanswered = (int)(++r->received - atomic_load(&r->answered));
    if (unanswered > r->most) r->most = unanswered;
    r->queue[(r->head + r->count) % DEPTH] = q;
    r->count++;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
  }
  pthread_mutex_lock(&r->mu);
  r->ended = 1;
  pthread_cond_broadcast(&r->cv);
  pthread_mutex_unlock(&r->mu);
  return NULL;
}

gsvc_reader *gsvc_reader_start(kio_svc *s, _Atomic int *busy, int (*stop)(void)) {
  gsvc_reader *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  r->s = s;
  r->busy = busy;
  r->stop = stop;
  pthread_mutex_init(&r->mu, NULL);
  pthread_cond_init(&r->cv, NULL);
  for (int i = 0; i < SLOTS; i++) {
    r->slot[i].fd = -1;
    r->spare[r->nspare++] = &r->slot[i];
  }
  if (pthread_create(&r->th, NULL, reader_main, r) != 0) {
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    free(r);
    return NULL;
  }
  return r;
}

gsvc_request *gsvc_reader_next(gsvc_reader *r) {
  pthread_mutex_lock(&r->mu);
  while (r->count == 0 && !r->ended) pthread_cond_wait(&r->cv, &r->mu);
  gsvc_request *q = NULL;
  if (r->count > 0) {
    q = r->queue[r->head];
    r->head = (r->head + 1) % DEPTH;
    r->count--;
    pthread_cond_broadcast(&r->cv);
  }
  pthread_mutex_unlock(&r->mu);
  return q;
}

void gsvc_reader_done(gsvc_reader *r, gsvc_request *q) {
  if (!q) return;
  if (q->fd >= 0) close(q->fd);
  q->fd = -1;
  pthread_mutex_lock(&r->mu);
  r->spare[r->nspare++] = q;
  pthread_cond_broadcast(&r->cv);
  pthread_mutex_unlock(&r->mu);
}

void gsvc_reader_answering(gsvc_reader *r) { atomic_fetch_add(&r->answered, 1); }

int gsvc_reader_most(gsvc_reader *r) {
  pthread_mutex_lock(&r->mu);
  int n = r->most;
  pthread_mutex_unlock(&r->mu);
  return n;
}

void gsvc_reader_stop(gsvc_reader *r) {
  if (!r) return;
  pthread_mutex_lock(&r->mu);
  r->quit = 1;
  int ended = r->ended;
  pthread_cond_broadcast(&r->cv);
  pthread_mutex_unlock(&r->mu);
  if (!ended) kio_svc_shutdown(r->s);  /* wakes a receive in progress */
  pthread_join(r->th, NULL);
  for (int i = 0; i < SLOTS; i++) {
    if (r->slot[i].fd >= 0) close(r->slot[i].fd);
    free(r->slot[i].buf);
  }
  pthread_cond_destroy(&r->cv);
  pthread_mutex_destroy(&r->mu);
  free(r);
}
