/* Graphs of the in-memory calls (kga_graph) and the words along an
 * alignment's path (kalpy's Alignment.words). */
#include "api-internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/sys/log.h"

int kga_graph_from_openfst(kga_graph **out, const void *bytes, size_t len) {
  kga_call c;
  kga_call_begin(&c, NULL, NULL);
  if (!out || (!bytes && len)) return kga_call_end(&c, KGA_EINVAL);
  *out = NULL;
  const unsigned char *b = bytes;
  if (len >= 2 && b[0] == 0 && b[1] == 'B') { b += 2; len -= 2; }  /* an archive's header */
  if (len == 0)
    return kga_call_end(&c, kga_call_fail(&c, KGA_EINVAL, "empty FST bytes"));
  kga_graph *g = calloc(1, sizeof *g);
  FILE *f = fmemopen((void *)b, len, "rb");
  if (!g || !f) {
    if (f) fclose(f);
    free(g);
    return kga_call_end(&c, KGA_ENOMEM);
  }
  int rc = kio_fst_read(f, &g->fst);
  fclose(f);
  if (rc != KIO_OK) {
    kga_call_fail(&c, KGA_EINVAL, "cannot read the FST: %s", kio_last_error());
    kga_graph_free(g);
    return kga_call_end(&c, KGA_EINVAL);
  }
  *out = g;
  return kga_call_end(&c, KGA_OK);
}

int kga_graph_from_arrays(kga_graph **out, int32_t num_states, int32_t start,
                          const float *final, const int32_t *arc_start, const int32_t *ilabel,
                          const int32_t *olabel, const float *weight,
                          const int32_t *nextstate) {
  kga_call c;
  kga_call_begin(&c, NULL, NULL);
  if (!out || num_states < 0 || (num_states > 0 && (!final || !arc_start)))
    return kga_call_end(&c, KGA_EINVAL);
  *out = NULL;
  int32_t num_arcs = num_states > 0 ? arc_start[num_states] : 0;
  if (num_states > 0 && arc_start[0] != 0)
    return kga_call_end(&c, kga_call_fail(&c, KGA_EINVAL, "arc_start[0] must be 0"));
  for (int32_t s = 0; s < num_states; s++)
    if (arc_start[s + 1] < arc_start[s])
      return kga_call_end(&c, kga_call_fail(&c, KGA_EINVAL, "arc_start decreases at state %d",
                                            (int)s));
  if (num_arcs > 0 && (!ilabel || !olabel || !weight || !nextstate))
    return kga_call_end(&c, KGA_EINVAL);
  if (start < -1 || start >= num_states)
    return kga_call_end(&c, kga_call_fail(&c, KGA_EINVAL, "start state %d out of range",
                                          (int)start));
  for (int32_t a = 0; a < num_arcs; a++)
    if (nextstate[a] < 0 || nextstate[a] >= num_states || ilabel[a] < 0 || olabel[a] < 0)
      return kga_call_end(&c, kga_call_fail(&c, KGA_EINVAL, "arc %d: label or next state out "
                                            "of range", (int)a));
  kga_graph *g = calloc(1, sizeof *g);
  if (g) {
    g->fst.arc_start = malloc(sizeof(int32_t) * ((size_t)num_states + 1));
    g->fst.final = malloc(sizeof(float) * ((size_t)num_states + 1));
    g->fst.arcs = malloc(sizeof(kio_arc) * ((size_t)num_arcs + 1));
    g->fst.state_cap = (size_t)num_states + 1;
    g->fst.arc_cap = (size_t)num_arcs + 1;
  }
  if (!g || !g->fst.arc_start || !g->fst.final || !g->fst.arcs) {
    kga_graph_free(g);
    return kga_call_end(&c, KGA_ENOMEM);
  }
  g->fst.num_states = num_states;
  g->fst.num_arcs = num_arcs;
  g->fst.arc_start[0] = 0;
  g->fst.start = start;
  if (num_states > 0) {
    memcpy(g->fst.arc_start, arc_start, sizeof(int32_t) * ((size_t)num_states + 1));
    memcpy(g->fst.final, final, sizeof(float) * (size_t)num_states);
  }
  for (int32_t a = 0; a < num_arcs; a++)
    g->fst.arcs[a] = (kio_arc){ilabel[a], olabel[a], weight[a], nextstate[a]};
  *out = g;
  return kga_call_end(&c, KGA_OK);
}

int32_t kga_graph_num_states(const kga_graph *g) { return g ? g->fst.num_states : 0; }
int32_t kga_graph_num_arcs(const kga_graph *g) { return g ? g->fst.num_arcs : 0; }

void kga_graph_free(kga_graph *g) {
  if (!g) return;
  kio_fst_free(&g->fst);
  free(g);
}

/* ---------------- words along the path ----------------
 * A Viterbi pass restricted to ali: layer t holds the states reachable by
 * the first t transition-ids (and input-epsilon arcs after them), each with
 * its least cost and the arc it came by. The alignment fixes the acoustic
 * costs, so the least graph cost among these paths is the decoder's best
 * path; in a training graph every such path carries the transcript. */

typedef struct {
  int32_t state;
  double cost;
  int64_t prev;   /* entry the arc came from, -1 for the start */
  int32_t arc;    /* index into g->arcs, -1 for the start */
} entry;

typedef struct {
  entry *e;
  int64_t n, cap;
} entries;

static int push(entries *v, entry x) {
  if (v->n == v->cap) {
    int64_t cap = v->cap ? 2 * v->cap : 256;
    entry *e = realloc(v->e, (size_t)cap * sizeof *e);
    if (!e) return -1;
    v->e = e;
    v->cap = cap;
  }
  v->e[v->n++] = x;
  return 0;
}

/* Relaxes input-epsilon arcs within the layer [first, v->n): where[s] is
 * the entry of state s in this layer (stamp[s] == layer), else none. */
static int eps_closure(const kio_fst *g, entries *v, int64_t first, int64_t *where,
                       int32_t *stamp, int32_t layer) {
  /* Bellman-Ford over the layer's entries; bounded (no negative cycles in
   * graphs of -log probabilities, but stay finite whatever comes). */
  for (int round = 0; round < 64; round++) {
    int changed = 0;
    for (int64_t i = first; i < v->n; i++) {
      int32_t s = v->e[i].state;
      for (int32_t a = g->arc_start[s]; a < g->arc_start[s + 1]; a++) {
        const kio_arc *arc = &g->arcs[a];
        if (arc->ilabel != 0) continue;
        double c = v->e[i].cost + (double)arc->weight;
        int32_t d = arc->nextstate;
        if (stamp[d] == layer) {
          entry *x = &v->e[where[d]];
          if (c < x->cost) { x->cost = c; x->prev = i; x->arc = a; changed = 1; }
        } else {
          stamp[d] = layer;
          where[d] = v->n;
          if (push(v, (entry){d, c, i, a}) != 0) return -1;
          changed = 1;
        }
      }
    }
    if (!changed) return 0;
  }
  return 0;
}

int kga_words_on_path(const kio_fst *g, const int32_t *ali, int32_t T, int32_t **words,
                      int32_t *n) {
  *words = NULL;
  *n = 0;
  if (g->num_states <= 0 || g->start < 0) return KIO_ERR;
  int64_t *where = malloc(sizeof(int64_t) * (size_t)g->num_states);
  int32_t *stamp = malloc(sizeof(int32_t) * (size_t)g->num_states);
  entries v = {0};
  int rc = KIO_ERR;
  if (!where || !stamp) goto out;
  for (int32_t s = 0; s < g->num_states; s++) stamp[s] = -1;
  int64_t first = 0;
  stamp[g->start] = 0;
  where[g->start] = 0;
  if (push(&v, (entry){g->start, 0.0, -1, -1}) != 0 ||
      eps_closure(g, &v, 0, where, stamp, 0) != 0)
    goto out;
  for (int32_t t = 0; t < T; t++) {
    int64_t end = v.n;
    for (int64_t i = first; i < end; i++) {
      int32_t s = v.e[i].state;
      for (int32_t a = g->arc_start[s]; a < g->arc_start[s + 1]; a++) {
        const kio_arc *arc = &g->arcs[a];
        if (arc->ilabel != ali[t]) continue;
        double c = v.e[i].cost + (double)arc->weight;
        int32_t d = arc->nextstate;
        if (stamp[d] == t + 1) {
          entry *x = &v.e[where[d]];
          if (c < x->cost) { x->cost = c; x->prev = i; x->arc = a; }
        } else {
          stamp[d] = t + 1;
          where[d] = v.n;
          if (push(&v, (entry){d, c, i, a}) != 0) goto out;
        }
      }
    }
    if (v.n == end) goto out;  /* ali is not a path of g */
    first = end;
    if (eps_closure(g, &v, first, where, stamp, t + 1) != 0) goto out;
  }
  int64_t best = -1;
  double best_cost = INFINITY;
  for (int64_t i = first; i < v.n; i++) {
    double c = v.e[i].cost + (double)g->final[v.e[i].state];
    if (g->final[v.e[i].state] != INFINITY && c < best_cost) { best_cost = c; best = i; }
  }
  if (best < 0) goto out;
  int32_t count = 0;
  int64_t steps = 0;
  for (int64_t i = best; i >= 0 && v.e[i].arc >= 0; i = v.e[i].prev) {
    if (++steps > v.n) goto out;  /* a loop of back pointers: give up */
    if (g->arcs[v.e[i].arc].olabel != 0) count++;
  }
  if (count > 0) {
    int32_t *w = malloc(sizeof(int32_t) * (size_t)count);
    if (!w) goto out;
    int32_t k = count;
    for (int64_t i = best; i >= 0 && v.e[i].arc >= 0; i = v.e[i].prev)
      if (g->arcs[v.e[i].arc].olabel != 0) w[--k] = g->arcs[v.e[i].arc].olabel;
    *words = w;
  }
  *n = count;
  rc = KIO_OK;
out:
  free(where);
  free(stamp);
  free(v.e);
  return rc;
}
