/* The device decoder's retry passes on host threads (align-retry.h). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/sys/log.h"
#include "base/sys/settings.h"
#include "align-retry.h"
#include "viterbi-core.h"

#define GALIGN_RETRY_MAX_THREADS 16

typedef struct retry_item {
  galign_retry_task t;
  struct retry_item *next;
} retry_item;

/* A thread's decoder workspace, grown as utterances need. */
typedef struct {
  galign_core_ws w;
  int64_t frames0, toks0;
} retry_ws;

struct galign_retry_pool {
  float retry_beam, ac_scale;
  pthread_mutex_t mu;
  pthread_cond_t work, idle;
  retry_item *head, *tail;
  int queued_or_running;
  int nthreads, max_threads, stop;
  pthread_t th[GALIGN_RETRY_MAX_THREADS];
  /* totals since the last wait (under mu) */
  int64_t frames, toks, redo;
  int32_t max_toks;
  double busy;
};

int galign_retry_on_host(void) {
  static const char *const ways[] = {"host", "device", NULL};
  return kio_setting_choice(KIO_SET_DEV_RETRY, ways, 0) == 0;
}

static void ws_release(galign_core_ws *w) {
  free(w->tok); free(w->pool[0]); free(w->pool[1]); free(w->state_elem);
  free(w->used_bucket); free(w->bucket_last); free(w->stack);
  memset(w, 0, sizeof *w);
}

/* Capacities at least those asked; KIO_ERR: no memory (w released). */
static int ws_fit(galign_core_ws *w, int32_t states, int32_t toks, int32_t stack) {
  int32_t hash = galign_core_hash_cap(states);
  if (states > w->state_cap || hash > w->hash_cap) {
    free(w->pool[0]); free(w->pool[1]); free(w->state_elem); free(w->used_bucket);
    free(w->bucket_last);
    w->pool[0] = malloc(sizeof(galign_elem) * (size_t)states);
    w->pool[1] = malloc(sizeof(galign_elem) * (size_t)states);
    w->state_elem = malloc(sizeof(int32_t) * (size_t)states);
    w->used_bucket = malloc(sizeof(int32_t) * (size_t)states);
    w->bucket_last = malloc(sizeof(int32_t) * (size_t)hash);
    w->state_cap = states;
    w->hash_cap = hash;
  }
  if (toks > w->tok_cap) {
    free(w->tok);
    w->tok = malloc(sizeof(galign_tok) * (size_t)toks);
    w->tok_cap = toks;
  }
  if (stack > w->stack_cap) {
    free(w->stack);
    w->stack = malloc(sizeof(int32_t) * (size_t)stack);
    w->stack_cap = stack;
  }
  if (!w->tok || !w->pool[0] || !w->pool[1] || !w->state_elem || !w->used_bucket ||
      !w->bucket_last || !w->stack) {
    ws_release(w);
    return KIO_ERR;
  }
  return KIO_OK;
}

static int32_t cap32(int64_t v) { return (int32_t)(v > (1 << 30) ? (1 << 30) : v); }

/* One task; 1 if done, 0 if it is the CPU path's to redo. */
static int run_task(galign_retry_pool *p, retry_ws *rw, galign_retry_task *t) {
  const galign_graph *gr = t->graph;
  const int32_t T = t->num_frames, S = gr->fst.num_states;
  galign_result *r = t->result;
  galign_core_graph g;
  g.num_states = S;
  g.start = gr->fst.start;
  g.n_used = gr->num_pdfs_used;
  g.arc_start = gr->fst.arc_start;
  g.arcs = gr->fst.arcs;
  g.final = gr->fst.final;
  g.arc_pdf = gr->arc_pdf;
  g.topo_pos = g.band_lo = g.band_hi = NULL;  /* banded utterances retry on the device */
  int32_t *ali = realloc(r->ali, sizeof(int32_t) * (size_t)(T > 0 ? T : 1));
  if (!ali) return 0;
  r->ali = ali;
  float *pf = NULL;
  if (t->want_per_frame) {
    pf = realloc(r->per_frame, sizeof(float) * (size_t)(T > 0 ? T : 1));
    if (!pf) return 0;
    r->per_frame = pf;
  }
  int32_t toks = cap32((int64_t)T * 128 + 1024), stack = cap32(2 * (int64_t)S + 64);
  galign_core_out out;
  for (int tries = 0; tries < 4; tries++) {
    galign_core_ws *w = &rw->w;
    if (ws_fit(w, S > 0 ? S : 1, toks, stack) != KIO_OK) return 0;
    int64_t f0 = w->stat_frames, k0 = w->stat_toks;
    galign_core_ws_reset(w);
    int st = galign_core_retry(w, &g, t->ll, T, t->hash_size, p->retry_beam, p->ac_scale, ali,
                               pf, &out);
    if (st == GALIGN_CORE_OK) {
      r->retried = 1;
      r->ok = out.ok;
      r->like = out.ok ? out.like : 0.0f;
      r->score = out.ok ? out.score : 0.0f;
      return 1;
    }
    w->stat_frames = f0; w->stat_toks = k0;  /* a pass done again is counted once */
    if (st != GALIGN_CORE_NOSPACE) return 0;  /* the CPU path reports it */
    if (w->need_tok) toks = cap32((int64_t)toks * 8);
    if (w->need_stack) stack = cap32((int64_t)stack * 8);
    if (w->need_state || w->need_hash) return 0;
  }
  return 0;
}

static void *worker(void *arg) {
  galign_retry_pool *p = arg;
  retry_ws rw;
  memset(&rw, 0, sizeof rw);
  pthread_mutex_lock(&p->mu);
  for (;;) {
    while (!p->head && !p->stop) pthread_cond_wait(&p->work, &p->mu);
    if (!p->head) break;
    retry_item *it = p->head;
    p->head = it->next;
    if (!p->head) p->tail = NULL;
    pthread_mutex_unlock(&p->mu);
    double t0 = kio_now_s();
    rw.w.stat_max_toks = 0;
    int64_t f0 = rw.w.stat_frames, k0 = rw.w.stat_toks;
    int done = run_task(p, &rw, &it->t);
    if (!done) {
      it->t.result->ok = 0;
      *it->t.redo = 1;
    }
    free(it->t.ll);
    double dt = kio_now_s() - t0;
    pthread_mutex_lock(&p->mu);
    p->frames += rw.w.stat_frames - f0;
    p->toks += rw.w.stat_toks - k0;
    if (rw.w.stat_max_toks > p->max_toks) p->max_toks = rw.w.stat_max_toks;
    p->redo += !done;
    p->busy += dt;
    free(it);
    if (--p->queued_or_running == 0) pthread_cond_broadcast(&p->idle);
  }
  pthread_mutex_unlock(&p->mu);
  ws_release(&rw.w);
  return NULL;
}

galign_retry_pool *galign_retry_new(float retry_beam, float acoustic_scale) {
  galign_retry_pool *p = calloc(1, sizeof *p);
  if (!p) {
    KIO_ERROR("Out of memory");
    return NULL;
  }
  p->retry_beam = retry_beam;
  p->ac_scale = acoustic_scale;
  p->max_threads = (int)kio_setting_int(KIO_SET_DEV_RETRY_THREADS, 4, 1,
                                        GALIGN_RETRY_MAX_THREADS);
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->work, NULL);
  pthread_cond_init(&p->idle, NULL);
  return p;
}

void galign_retry_free(galign_retry_pool *p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  while (p->queued_or_running > 0) pthread_cond_wait(&p->idle, &p->mu);
  p->stop = 1;
  pthread_cond_broadcast(&p->work);
  pthread_mutex_unlock(&p->mu);
  for (int i = 0; i < p->nthreads; i++) pthread_join(p->th[i], NULL);
  pthread_cond_destroy(&p->work);
  pthread_cond_destroy(&p->idle);
  pthread_mutex_destroy(&p->mu);
  free(p);
}

int galign_retry_add(galign_retry_pool *p, const galign_retry_task *t) {
  retry_item *it = malloc(sizeof *it);
  if (!it) {
    free(t->ll);
    KIO_ERROR("Out of memory");
    return KIO_ERR;
  }
  it->t = *t;
  it->next = NULL;
  pthread_mutex_lock(&p->mu);
  if (p->tail) p->tail->next = it; else p->head = it;
  p->tail = it;
  p->queued_or_running++;
  /* one more thread while tasks wait and the limit allows */
  if (p->nthreads < p->max_threads && p->queued_or_running > p->nthreads &&
      pthread_create(&p->th[p->nthreads], NULL, worker, p) == 0)
    p->nthreads++;
  int none = p->nthreads == 0;
  if (!none) pthread_cond_signal(&p->work);
  pthread_mutex_unlock(&p->mu);
  if (none) {
    /* no thread could start: this one does the work now */
    p->stop = 1;
    worker(p);
    p->stop = 0;
  }
  return KIO_OK;
}

void galign_retry_wait(galign_retry_pool *p, int64_t *frames, int64_t *toks, int32_t *max_toks,
                       int64_t *redo_count, double *busy_s) {
  pthread_mutex_lock(&p->mu);
  while (p->queued_or_running > 0) pthread_cond_wait(&p->idle, &p->mu);
  *frames += p->frames;
  *toks += p->toks;
  if (p->max_toks > *max_toks) *max_toks = p->max_toks;
  *redo_count += p->redo;
  *busy_s += p->busy;
  p->frames = p->toks = p->redo = 0;
  p->max_toks = 0;
  p->busy = 0;
  pthread_mutex_unlock(&p->mu);
}
