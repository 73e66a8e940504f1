/* Margin bands around a prior alignment (see align-margin.h) and the table
 * of prior alignments. */
#include "align-margin.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/sys/log.h"

/* ---------------- the band ---------------- */

/* pos[s] = place of s's strongly connected component in a topological
 * order of the components (Tarjan's algorithm, iterative: graphs of long
 * utterances are deep). Silence HMMs have cycles among their states, so
 * those share a place. work: 4 * N int32. 0, or -1 without memory. */
static int topo_order(const kio_fst *f, int32_t *pos, int32_t *work) {
  const int32_t N = f->num_states;
  int32_t *index = work, *low = work + N, *stk = work + 2 * (size_t)N,
          *call = work + 3 * (size_t)N;
  int32_t *arc_it = malloc((size_t)N * sizeof *arc_it);
  if (!arc_it) return -1;
  for (int32_t s = 0; s < N; s++) { index[s] = -1; pos[s] = -1; }
  int32_t next_index = 0, sp = 0, ncomp = 0;
  for (int32_t root = 0; root < N; root++) {
    if (index[root] >= 0) continue;
    int32_t cp = 0;
    call[cp++] = root;
    index[root] = low[root] = next_index++;
    arc_it[root] = f->arc_start[root];
    stk[sp++] = root;
    while (cp > 0) {
      int32_t v = call[cp - 1];
      if (arc_it[v] < f->arc_start[v + 1]) {
        int32_t w = f->arcs[arc_it[v]++].nextstate;
        if (index[w] < 0) {
          index[w] = low[w] = next_index++;
          arc_it[w] = f->arc_start[w];
          stk[sp++] = w;
          call[cp++] = w;
        } else if (pos[w] < 0 && index[w] < low[v]) {
          low[v] = index[w];  /* w is on the stack (no component yet) */
        }
        continue;
      }
      cp--;
      if (cp > 0 && low[v] < low[call[cp - 1]]) low[call[cp - 1]] = low[v];
      if (low[v] == index[v]) {  /* v roots a component: pop it */
        int32_t w;
        do { w = stk[--sp]; pos[w] = ncomp; } while (w != v);
        ncomp++;
      }
    }
  }
  free(arc_it);
  /* Components come sinks first: reverse. */
  for (int32_t s = 0; s < N; s++) pos[s] = ncomp - 1 - pos[s];
  return 0;
}

galign_band_status galign_band_build(galign_graph *g, const int32_t *prior, int32_t n,
                                     int32_t T, int32_t margin) {
  g->band_T = 0;
  if (!prior) return GALIGN_BAND_NO_PRIOR;
  if (n != T || T <= 0) return GALIGN_BAND_LENGTH;
  const kio_fst *f = &g->fst;
  const int32_t N = f->num_states;
  if (N <= 0 || f->start < 0 || f->start >= N) return GALIGN_BAND_NOT_IN_GRAPH;
  if (margin < 0) margin = 0;
  int32_t *pos = realloc(g->topo_pos, (size_t)N * sizeof *pos);
  if (pos) g->topo_pos = pos;
  int32_t *lo = realloc(g->band_lo, ((size_t)T + 1) * sizeof *lo);
  if (lo) g->band_lo = lo;
  int32_t *hi = realloc(g->band_hi, ((size_t)T + 1) * sizeof *hi);
  if (hi) g->band_hi = hi;
  /* stamp, cur and nxt (3 N) + one N more: the work area of topo_order. */
  int32_t *work = malloc(4 * (size_t)N * sizeof *work);
  int32_t *stamp = work, *cur = work ? work + N : NULL, *nxt = work ? work + 2 * (size_t)N : NULL;
  galign_band_status st = GALIGN_BAND_OK;
  if (!pos || !lo || !hi || !work) { st = GALIGN_BAND_NOMEM; goto done; }
  if (topo_order(f, pos, work) != 0) { st = GALIGN_BAND_NOMEM; goto done; }
  /* A final state in the start's component (a loop back to the start):
   * every state of the loop shares one place, a band would be the whole
   * graph. (Careful alignment's graph has no such loop: G, a final state,
   * a copy of G.) */
  for (int32_t s = 0; s < N; s++)
    if (s != f->start && f->final[s] != INFINITY && pos[s] == pos[f->start]) {
      st = GALIGN_BAND_CYCLIC;
      goto done;
    }
  for (int32_t s = 0; s < N; s++) stamp[s] = -1;
  int32_t ncur = 0;
  cur[ncur++] = f->start;
  stamp[f->start] = 0;
  for (int32_t k = 0;; k++) {
    /* Epsilon closure of cur (stamped k). */
    for (int32_t i = 0; i < ncur; i++) {
      int32_t s = cur[i];
      for (int32_t a = f->arc_start[s]; a < f->arc_start[s + 1]; a++) {
        const kio_arc *arc = &f->arcs[a];
        if (arc->ilabel == 0 && stamp[arc->nextstate] != k) {
          stamp[arc->nextstate] = k;
          cur[ncur++] = arc->nextstate;
        }
      }
    }
    int32_t mn = INT32_MAX, mx = -1;
    for (int32_t i = 0; i < ncur; i++) {
      int32_t p = pos[cur[i]];
      if (p < mn) mn = p;
      if (p > mx) mx = p;
    }
    lo[k] = mn;
    hi[k] = mx;
    if (k == T) break;
    int32_t nn = 0;
    for (int32_t i = 0; i < ncur; i++) {
      int32_t s = cur[i];
      for (int32_t a = f->arc_start[s]; a < f->arc_start[s + 1]; a++) {
        const kio_arc *arc = &f->arcs[a];
        if (arc->ilabel == prior[k] && arc->ilabel != 0 && stamp[arc->nextstate] != k + 1) {
          stamp[arc->nextstate] = k + 1;
          nxt[nn++] = arc->nextstate;
        }
      }
    }
    if (nn == 0) { st = GALIGN_BAND_NOT_IN_GRAPH; goto done; }
    int32_t *t = cur; cur = nxt; nxt = t;
    ncur = nn;
  }
  int fin = 0;
  for (int32_t i = 0; i < ncur && !fin; i++) fin = f->final[cur[i]] != INFINITY;
  if (!fin) { st = GALIGN_BAND_NOT_IN_GRAPH; goto done; }
  /* Both bounds are non-decreasing in k (every state reached after k + 1
   * frames follows one reached after k in the order), so the window's
   * minimum is at its left end and its maximum at its right end. */
  for (int32_t k = T; k >= 0; k--) lo[k] = lo[k - margin > 0 ? k - margin : 0];
  for (int32_t k = 0; k <= T; k++) hi[k] = hi[(int64_t)k + margin < T ? k + margin : T];
  g->band_T = T;
done:
  free(work);
  return st;
}

/* ---------------- the table of priors ---------------- */

typedef struct { char *key; kio_int_vec ali; } prior_ent;
struct galign_prior_table {
  prior_ent *ent;
  int32_t n, cap;     /* entries; hash slots (power of 2, > 2n) */
  int32_t *slot;      /* cap: entry index or -1 */
};

static uint64_t hash_key(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

static int table_rehash(galign_prior_table *t, int32_t cap) {
  int32_t *sl = malloc((size_t)cap * sizeof *sl);
  if (!sl) return KIO_ERR;
  for (int32_t i = 0; i < cap; i++) sl[i] = -1;
  for (int32_t e = 0; e < t->n; e++) {
    uint64_t h = hash_key(t->ent[e].key) & (uint64_t)(cap - 1);
    while (sl[h] >= 0) h = (h + 1) & (uint64_t)(cap - 1);
    sl[h] = e;
  }
  free(t->slot);
  t->slot = sl;
  t->cap = cap;
  return KIO_OK;
}

/* Adds key (taking ali's buffer) unless present (the first one counts). */
static int table_add(galign_prior_table *t, const char *key, kio_int_vec *ali) {
  if (galign_prior_table_get(t, key)) return KIO_OK;
  if (2 * ((int64_t)t->n + 1) >= t->cap) {
    /* Entries: room for cap / 2 (the most the slots allow). */
    if (t->cap > INT32_MAX / 4) return KIO_ERR;
    prior_ent *e = realloc(t->ent, (size_t)t->cap * sizeof *e);
    if (!e) return KIO_ERR;
    t->ent = e;
    if (table_rehash(t, 2 * t->cap) != KIO_OK) return KIO_ERR;
  }
  char *k = strdup(key);
  if (!k) return KIO_ERR;
  t->ent[t->n].key = k;
  t->ent[t->n].ali = *ali;
  ali->n = 0;
  ali->v = NULL;
  uint64_t h = hash_key(k) & (uint64_t)(t->cap - 1);
  while (t->slot[h] >= 0) h = (h + 1) & (uint64_t)(t->cap - 1);
  t->slot[h] = t->n++;
  return KIO_OK;
}

const kio_int_vec *galign_prior_table_get(const galign_prior_table *t, const char *key) {
  if (!t || t->cap == 0) return NULL;
  uint64_t h = hash_key(key) & (uint64_t)(t->cap - 1);
  for (; t->slot[h] >= 0; h = (h + 1) & (uint64_t)(t->cap - 1))
    if (!strcmp(t->ent[t->slot[h]].key, key)) return &t->ent[t->slot[h]].ali;
  return NULL;
}

int32_t galign_prior_table_size(const galign_prior_table *t) { return t ? t->n : 0; }

void galign_prior_table_free(galign_prior_table *t) {
  if (!t) return;
  for (int32_t e = 0; e < t->n; e++) {
    free(t->ent[e].key);
    free(t->ent[e].ali.v);
  }
  free(t->ent);
  free(t->slot);
  free(t);
}

int galign_prior_table_read(galign_prior_table **out, const char *rspecifier) {
  *out = NULL;
  galign_prior_table *t = calloc(1, sizeof *t);
  if (!t || table_rehash(t, 64) != KIO_OK) { free(t); KIO_ERROR("Out of memory"); return KIO_ERR; }
  t->ent = malloc(64 * sizeof *t->ent);
  kio_seq_reader *r = NULL;
  if (!t->ent || kio_seq_open(&r, rspecifier, &kio_int_vec_holder) != KIO_OK) {
    if (!t->ent) KIO_ERROR("Out of memory");
    galign_prior_table_free(t);
    kio_seq_close(r);
    return KIO_ERR;
  }
  kio_int_vec v = {0, NULL};
  int ok = 1;
  for (; !kio_seq_done(r); kio_seq_next(r)) {
    if (kio_seq_take(r, &v) != KIO_OK || table_add(t, kio_seq_key(r), &v) != KIO_OK) {
      ok = 0;
      break;
    }
  }
  free(v.v);
  if (kio_seq_close(r) != KIO_OK) ok = 0;
  if (!ok) { galign_prior_table_free(t); return KIO_ERR; }
  *out = t;
  return KIO_OK;
}

/* ---------------- KALDI_GPU_MARGIN: the prior from the output file ------- */

static void quiet(int level, const char *func, const char *file, int line, const char *msg,
                  void *user) {
  (void)level; (void)func; (void)file; (void)line; (void)msg; (void)user;
}

/* FILE of "ark[,opts]:|gzip -c >FILE", or NULL. Only plain path characters. */
static const char *output_file(const char *w) {
  const char *colon = strchr(w, ':');
  if (!colon || strncmp(w, "ark", 3) != 0) return NULL;
  for (const char *p = w + 3; p < colon;) {
    if (*p != ',') return NULL;
    const char *q = ++p;
    while (q < colon && *q != ',') q++;
    size_t len = (size_t)(q - p);
    if (!((len == 1 && (*p == 't' || *p == 'b' || *p == 'f' || *p == 'p')) ||
          (len == 2 && !strncmp(p, "nf", 2))))
      return NULL;
    p = q;
  }
  static const char pre[] = "|gzip -c >";
  if (strncmp(colon + 1, pre, sizeof pre - 1) != 0) return NULL;
  const char *f = colon + sizeof pre;
  if (!*f) return NULL;
  for (const char *p = f; *p; p++)
    if (!(((*p | 32) >= 'a' && (*p | 32) <= 'z') || (*p >= '0' && *p <= '9') || *p == '.' ||
          *p == '/' || *p == '_' || *p == '-' || *p == '+'))
      return NULL;
  return f;
}

int galign_prior_from_output(const char *ali_wspecifier, galign_prior_table **t) {
  *t = NULL;
  const char *f = ali_wspecifier ? output_file(ali_wspecifier) : NULL;
  if (!f) {
    KIO_LOG("KALDI_GPU_MARGIN: output %s is not of the form ark:|gzip -c >FILE: full search",
            ali_wspecifier ? ali_wspecifier : "(none)");
    return KIO_OK;
  }
  struct stat sb;
  if (stat(f, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size == 0) {
    KIO_LOG("KALDI_GPU_MARGIN: no previous alignments in %s: full search", f);
    return KIO_OK;
  }
  size_t len = strlen(f) + 32;
  char *rs = malloc(len);
  if (!rs) return KIO_OK;
  snprintf(rs, len, "ark:gunzip -c %s|", f);
  kio_log_handler prev_h;
  void *prev_u;
  kio_log_get_handler(&prev_h, &prev_u);
  kio_log_set_handler(quiet, NULL);
  int rc = galign_prior_table_read(t, rs);
  kio_log_set_handler(prev_h, prev_u);
  free(rs);
  if (rc != KIO_OK) {
    *t = NULL;
    KIO_LOG("KALDI_GPU_MARGIN: %s could not be read to its end: full search", f);
    return KIO_OK;
  }
  KIO_LOG("KALDI_GPU_MARGIN: %d previous alignments read from %s", galign_prior_table_size(*t),
          f);
  return KIO_OK;
}

/* ---------------- counts ---------------- */

void galign_margin_count(galign_margin_counts *c, galign_band_status st, int band_failed) {
  if (band_failed) c->fallback[GALIGN_BAND_FAILED]++;
  else if (st == GALIGN_BAND_OK) c->banded++;
  else if (st > 0 && st < GALIGN_BAND_NUM) c->fallback[st]++;
}

void galign_margin_log(int32_t margin, const galign_margin_counts *c) {
  static const char *const why[GALIGN_BAND_NUM] = {
      "", "no prior", "prior of another length", "prior not a path of the graph",
      "a cycle through the start state", "out of memory", "no final state in the band"};
  int64_t nf = 0;
  for (int i = 1; i < GALIGN_BAND_NUM; i++) nf += c->fallback[i];
  char buf[512] = "";
  size_t used = 0;
  for (int i = 1; i < GALIGN_BAND_NUM; i++)
    if (c->fallback[i] && used < sizeof buf)
      used += (size_t)snprintf(buf + used, sizeof buf - used, "%s%s %lld", used ? ", " : "",
                               why[i], (long long)c->fallback[i]);
  KIO_LOG("Margin %d: %lld of %lld utterances aligned inside the band around the prior "
          "alignment; full search for %lld%s%s%s", (int)margin, (long long)c->banded,
          (long long)(c->banded + nf), (long long)nf, nf ? " (" : "", buf, nf ? ")" : "");
}
