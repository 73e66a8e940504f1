/* Storage of the batch pipeline (see align-batch.h): captured log lines
 * and the batches of utterances. */
#include "align-batch.h"

#include <stdlib.h>
#include <string.h>

#include "base/sys/log.h"

int galign_ev_push(event_list *l, event e) {
  if (l->n == l->cap) {
    int cap = l->cap ? 2 * l->cap : 64;
    event *v = realloc(l->v, (size_t)cap * sizeof *v);
    if (!v) return -1;
    l->v = v;
    l->cap = cap;
  }
  l->v[l->n++] = e;
  return 0;
}

void galign_ev_clear(event_list *l) {
  for (int i = 0; i < l->n; i++) {
    free(l->v[i].func);
    free(l->v[i].file);
    free(l->v[i].msg);
    free(l->v[i].prog);
  }
  l->n = 0;
}

void galign_ev_free(event_list *l) {
  galign_ev_clear(l);
  free(l->v);
  l->v = NULL;
  l->cap = 0;
}

/* Prints captured lines (on the pipeline's thread, t_capture NULL). */
void galign_ev_replay(const event_list *l) {
  for (int i = 0; i < l->n; i++) {
    const event *e = &l->v[i];
    if (e->slot < 0) galign_ev_replay_one(e);
  }
}
void galign_ev_replay_one(const event *e) {
  const char *own = kio_log_thread_program();
  if (e->prog) kio_log_set_thread_program(e->prog);
  kio_logf(e->level, e->func, e->file, e->line, "%s", e->msg);
  kio_log_set_thread_program(own);
}

/* Copies m into dst, reusing dst's buffer. */
int galign_copy_matrix(kio_matrix *dst, const kio_matrix *m) {
  size_t n = (size_t)m->rows * (size_t)m->cols;
  if (n > dst->cap) {
    float *d = realloc(dst->data, n * sizeof(float));
    if (!d) return KIO_ERR;
    dst->data = d;
    dst->cap = n;
  }
  if (n) memcpy(dst->data, m->data, n * sizeof(float));
  dst->rows = m->rows;
  dst->cols = m->cols;
  return KIO_OK;
}

/* Makes room for one more slot, b->slots[b->nslots]: read_batch fills it
 * and keeps it by incrementing nslots. */
slot *galign_peek_slot(batch *b) {
  if (b->nslots == b->cap) {
    int cap = b->cap ? 2 * b->cap : 64;
    slot *s = realloc(b->slots, (size_t)cap * sizeof *s);
    if (!s) return NULL;
    memset(s + b->cap, 0, (size_t)(cap - b->cap) * sizeof *s);
    b->slots = s;
    b->cap = cap;
  }
  return &b->slots[b->nslots];
}

int galign_grow(void **ptr, int n, size_t elem) {
  void *q = realloc(*ptr, (size_t)(n ? n : 1) * elem);
  if (!q) return KIO_ERR;
  *ptr = q;
  return KIO_OK;
}

void galign_batch_free(batch *b) {
  for (int i = 0; i < b->cap; i++) {
    free(b->slots[i].key);
    kio_matrix_free(&b->slots[i].feats);
    kio_fst_free(&b->slots[i].raw);
    free(b->slots[i].words.v);
    galign_graph_free(&b->slots[i].graph);
    galign_ev_free(&b->slots[i].prep_lines);
  }
  free(b->slots);
  galign_ev_free(&b->events);
  galign_ev_free(&b->align_lines);
  for (int k = 0; k < b->res_cap; k++) galign_result_free(&b->res[k]);
  free(b->graphs);
  free(b->feats);
  free(b->res);
  free(b->res_slot);
  free(b->utts);
}
