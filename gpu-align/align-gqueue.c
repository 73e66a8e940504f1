/* The pipeline's graph source (align-pipeline-impl.h): graph archives read
 * ahead by a thread of their own, with the lines logged while reading each
 * entry kept for the moment Kaldi would print them. */
#include <stdlib.h>
#include <string.h>

#include "base/io/table.h"
#include "base/sys/log.h"
#include "align-pipeline-impl.h"

/* Produces item number p->gq_tail (the caller has room for it): advances the
 * reader (except for the first) and takes its key and graph. */
static void gq_produce(galign_pipeline *p) {
  gitem *it = &p->gq[p->gq_tail % GQ_CAP];
  event_list *saved = galign_t_capture;  /* the main thread's, without a thread */
  galign_t_capture = &it->lines;
  if (p->gq_started) kio_seq_next(p->graphs);
  p->gq_started = 1;
  it->end = kio_seq_done(p->graphs);
  if (!it->end) {
    char *k = strdup(kio_seq_key(p->graphs));
    /* Archives: the value cannot fail; on no memory the queue ends here. */
    if (!k || kio_seq_take(p->graphs, &it->fst) != KIO_OK) {
      free(k);
      k = NULL;
      it->end = 1;
    }
    free(it->key);
    it->key = k;
  }
  galign_t_capture = saved;
}

static void *gq_main(void *arg) {
  galign_pipeline *p = arg;
  pthread_mutex_lock(&p->gq_mu);
  for (;;) {
    while (!p->gq_stop && p->gq_tail - p->gq_head >= GQ_CAP)
      pthread_cond_wait(&p->gq_cv, &p->gq_mu);
    if (p->gq_stop) break;
    pthread_mutex_unlock(&p->gq_mu);
    gq_produce(p);
    pthread_mutex_lock(&p->gq_mu);
    int end = p->gq[p->gq_tail % GQ_CAP].end;
    p->gq_tail++;
    pthread_cond_broadcast(&p->gq_cv);
    if (end) break;
  }
  pthread_mutex_unlock(&p->gq_mu);
  return NULL;
}

/* Starts the queue (after the tables are open). */
int galign_gq_open(galign_pipeline *p) {
  kio_rspec spec;
  p->gq_direct = kio_parse_rspecifier(p->cfg.graphs_rspecifier, &spec) != KIO_OK ||
                 spec.kind != KIO_SPEC_ARCHIVE;
  if (p->gq_direct) return KIO_OK;
  p->gq = calloc(GQ_CAP, sizeof *p->gq);
  if (!p->gq) { KIO_ERROR("Out of memory"); return KIO_ERR; }
  pthread_mutex_init(&p->gq_mu, NULL);
  pthread_cond_init(&p->gq_cv, NULL);
  p->gq_thread_on = pthread_create(&p->gq_thread, NULL, gq_main, p) == 0;
  return KIO_OK;
}

/* Stops and joins the reading thread (it finishes the entry it reads). */
void galign_gq_join(galign_pipeline *p) {
  if (!p->gq_thread_on) return;
  pthread_mutex_lock(&p->gq_mu);
  p->gq_stop = 1;
  pthread_cond_broadcast(&p->gq_cv);
  pthread_mutex_unlock(&p->gq_mu);
  pthread_join(p->gq_thread, NULL);
  p->gq_thread_on = 0;
}

void galign_gq_free(galign_pipeline *p) {
  galign_gq_join(p);
  if (!p->gq) return;
  for (int i = 0; i < GQ_CAP; i++) {
    free(p->gq[i].key);
    kio_fst_free(&p->gq[i].fst);
    galign_ev_free(&p->gq[i].lines);
  }
  free(p->gq);
  p->gq = NULL;
  pthread_mutex_destroy(&p->gq_mu);
  pthread_cond_destroy(&p->gq_cv);
}

/* Item i (>= gq_head), once produced. */
static gitem *gq_item(galign_pipeline *p, long i) {
  if (!p->gq_thread_on) {
    while (p->gq_tail <= i) gq_produce(p), p->gq_tail++;
    return &p->gq[i % GQ_CAP];
  }
  pthread_mutex_lock(&p->gq_mu);
  while (p->gq_tail <= i) pthread_cond_wait(&p->gq_cv, &p->gq_mu);
  pthread_mutex_unlock(&p->gq_mu);
  return &p->gq[i % GQ_CAP];
}

/* The graph source seen by read_batch: the current entry is gq_head. */
int galign_gs_done(galign_pipeline *p) {
  if (p->tr || p->by_key) return kio_seq_done(p->fseq);
  return p->gq_direct ? kio_seq_done(p->graphs) : gq_item(p, p->gq_head)->end;
}
const char *galign_gs_key(galign_pipeline *p) {
  return p->gq_direct ? kio_seq_key(p->graphs) : gq_item(p, p->gq_head)->key;
}
/* 1 if the next entry may have the same key (then the features are copied:
 * a doubly sorted reader cannot give the object out twice). */
int galign_gs_next_same(galign_pipeline *p, const char *key) {
  if (p->gq_direct) return 1;
  const gitem *it = gq_item(p, p->gq_head + 1);
  return !it->end && !strcmp(it->key, key);
}
/* Moves the current graph into *dst (its old buffers go back for reuse). */
int galign_gs_take(galign_pipeline *p, kio_fst *dst) {
  if (p->gq_direct) return kio_seq_take(p->graphs, dst);
  gitem *it = gq_item(p, p->gq_head);
  kio_fst t = *dst;
  *dst = it->fst;
  it->fst = t;
  return KIO_OK;
}
/* Advances to the next entry; its lines are logged here, as Kaldi's Next()
 * logs them. */
void galign_gs_next(galign_pipeline *p) {
  if (p->gq_direct) { kio_seq_next(p->graphs); return; }
  if (p->gq_thread_on) {
    pthread_mutex_lock(&p->gq_mu);
    p->gq_head++;
    pthread_cond_broadcast(&p->gq_cv);
    pthread_mutex_unlock(&p->gq_mu);
  } else {
    p->gq_head++;
  }
  event_list *l = &gq_item(p, p->gq_head)->lines;
  for (int i = 0; i < l->n; i++) {
    event *e = &l->v[i];
    if (galign_t_capture && galign_ev_push(galign_t_capture, *e) == 0) continue;
    galign_ev_replay_one(e);
    free(e->func); free(e->file); free(e->msg); free(e->prog);
  }
  l->n = 0;
}
