/* The per-utterance forced-alignment decoder: Kaldi's FasterDecoder
 * (decoder/faster-decoder.cc, util/hash-list-inl.h) reproduced operation by
 * operation, including its float/double mix, its hash-list order (which
 * decides ties and the order of epsilon expansion) and its min-active-20
 * adaptive beam; then the best path with RemoveEpsLocal's regrouping of the
 * float sums (reference 5.6-5.8).
 *
 * Shared by the CPU path and the CUDA kernel (one thread per utterance):
 * everything is GALIGN_HD static inline, no allocation, no libc besides
 * arithmetic. The caller owns every buffer of galign_core_ws; when a capacity
 * is too small the core returns GALIGN_CORE_NOSPACE (with ws->need_* saying
 * what to grow) and the utterance must be redone from the start.
 *
 * Use: galign_core_ws_reset() once after (re)allocating the buffers; then per
 * utterance galign_core_align() (whole log-likelihood matrix given), or the
 * step functions (galign_core_begin / _cutoff / _emit / _finish) when the
 * likelihoods are computed lazily per frame (CPU). */
#ifndef GALIGN_VITERBI_CORE_H
#define GALIGN_VITERBI_CORE_H

#include <stdint.h>
#include <float.h>
#include <math.h>
#include "base/model/fst.h"

#ifdef __CUDACC__
#define GALIGN_HD __host__ __device__
#else
#define GALIGN_HD
#endif

#define GALIGN_CORE_INF ((double)INFINITY)

enum {
  GALIGN_CORE_OK = 0,
  GALIGN_CORE_NOSPACE = 1,   /* a capacity of the workspace was exceeded */
  GALIGN_CORE_BADPATH = 2,   /* best path does not have T emitting arcs (bug) */
  GALIGN_CORE_EPSLOOP = 3    /* epsilon relaxation does not settle: a cycle of
                              * input-epsilon arcs with negative total cost */
};

/* Graph view (plain pointers into a galign_graph or device copies). */
typedef struct {
  int32_t num_states, start, n_used;
  const int32_t *arc_start;  /* num_states + 1 */
  const kio_arc *arcs;
  const float *final;        /* +inf: not final */
  const int32_t *arc_pdf;    /* compact pdf index per arc, -1 for ilabel 0 */
  /* Margin band (NULL: none): after k frames (k = 0..T) only states s with
   * band_lo[k] <= topo_pos[s] <= band_hi[k] may hold tokens (align-margin.h). */
  const int32_t *topo_pos, *band_lo, *band_hi;
} galign_core_graph;

/* 1 if state s may hold a token after k frames. */
GALIGN_HD static inline int galign_core_in_band(const galign_core_graph *g, int32_t k,
                                                int32_t s) {
  if (!g->band_lo) return 1;
  int32_t p = g->topo_pos[s];
  return p >= g->band_lo[k] && p <= g->band_hi[k];
}

/* A token: never freed within an utterance. prev = -1 and arc = -1 for the
 * dummy start token. */
typedef struct { double cost; int32_t prev; int32_t arc; } galign_tok;

/* An element of a hash list (pool index links; -1 ends). */
typedef struct { int32_t state, tok, next; } galign_elem;

typedef struct {
  /* ---- buffers (caller-owned) and their capacities ---- */
  galign_tok *tok;          int32_t tok_cap;
  galign_elem *pool[2];     /* each state_cap */
  int32_t *state_elem;      /* state_cap: element of the state in the current list, -1 */
  int32_t *used_bucket;     /* state_cap: buckets in use by the current list */
  int32_t *bucket_last;     /* hash_cap: last element of the bucket, -1 = empty */
  int32_t *stack;           int32_t stack_cap;
  int32_t state_cap, hash_cap;
  /* ---- decoder state ---- */
  int32_t n_tok;            /* tokens allocated this pass */
  int32_t cur;              /* pool of the current list */
  int32_t head, tail, n_elem, n_used_buckets;
  uint64_t hash_size;       /* Kaldi's HashList size (kept across the retry) */
  double cutoff;            /* from the last galign_core_cutoff */
  float adaptive_beam;
  int32_t best_elem;        /* element (in pool cur) of the best token, -1 */
  int32_t frame;            /* frames consumed by the current list's tokens */
  /* ---- what to grow after NOSPACE (0 = fine) ---- */
  int32_t need_tok, need_stack, need_state, need_hash;
  /* ---- statistics (tokens alive at each frame's GetCutoff) ---- */
  int64_t stat_frames, stat_toks;
  int32_t stat_max_toks;
} galign_core_ws;

/* Per-utterance result of galign_core_finish. */
typedef struct {
  int ok;          /* a final state was reached */
  float like;      /* -(g + a) / acoustic_scale */
  float score;     /* -(g + a) */
} galign_core_out;

/* Capacity of bucket arrays that the Kaldi hash size can never exceed. */
GALIGN_HD static inline int32_t galign_core_hash_cap(int32_t num_states) {
  int64_t h = 2 * (int64_t)num_states + 2;
  return (int32_t)(h < 1000 ? 1000 : h);
}

/* All maps to "empty". Call after (re)allocating the buffers. */
GALIGN_HD static inline void galign_core_ws_reset(galign_core_ws *w) {
  for (int32_t i = 0; i < w->state_cap; i++) w->state_elem[i] = -1;
  for (int32_t i = 0; i < w->hash_cap; i++) w->bucket_last[i] = -1;
  w->head = w->tail = -1;
  w->n_elem = w->n_used_buckets = 0;
  w->n_tok = 0;
  w->cur = 0;
  w->best_elem = -1;
  w->hash_size = 1000;
}

/* Empties the current list (Kaldi's HashList::Clear), keeping the maps clean. */
GALIGN_HD static inline void galign_core_clear_list(galign_core_ws *w) {
  const galign_elem *p = w->pool[w->cur];
  for (int32_t e = w->head; e >= 0; e = p[e].next) w->state_elem[p[e].state] = -1;
  for (int32_t i = 0; i < w->n_used_buckets; i++) w->bucket_last[w->used_bucket[i]] = -1;
  w->head = w->tail = -1;
  w->n_elem = w->n_used_buckets = 0;
}

GALIGN_HD static inline int32_t galign_core_new_tok(galign_core_ws *w, double cost,
                                                    int32_t prev, int32_t arc) {
  if (w->n_tok >= w->tok_cap) { w->need_tok = 1; return -1; }
  galign_tok *t = &w->tok[w->n_tok];
  t->cost = cost; t->prev = prev; t->arc = arc;
  return w->n_tok++;
}

/* HashList::Insert of a state known to be absent: a bucket's first element
 * goes to the end of the list, later ones right after the bucket's last. */
GALIGN_HD static inline int32_t galign_core_insert(galign_core_ws *w, int32_t state,
                                                   int32_t tok) {
  if (w->n_elem >= w->state_cap || state >= w->state_cap) { w->need_state = 1; return -1; }
  if (w->hash_size > (uint64_t)w->hash_cap) { w->need_hash = 1; return -1; }
  galign_elem *p = w->pool[w->cur];
  int32_t e = w->n_elem++;
  int32_t b = (int32_t)((uint64_t)state % w->hash_size);
  int32_t last = w->bucket_last[b];
  p[e].state = state; p[e].tok = tok;
  if (last < 0) {
    p[e].next = -1;
    if (w->tail < 0) w->head = e; else p[w->tail].next = e;
    w->tail = e;
    w->used_bucket[w->n_used_buckets++] = b;
  } else {
    p[e].next = p[last].next;
    p[last].next = e;
    if (w->tail == last) w->tail = e;
  }
  w->bucket_last[b] = e;
  w->state_elem[state] = e;
  return e;
}

/* ProcessNonemitting(cutoff): LIFO over states (elements), an element popped
 * is expanded with whatever token it holds then. */
GALIGN_HD static inline int galign_core_nonemitting(galign_core_ws *w,
                                                    const galign_core_graph *g,
                                                    double cut) {
  galign_elem *p = w->pool[w->cur];
  int32_t sp = 0;
  for (int32_t e = w->head; e >= 0; e = p[e].next) {
    if (sp >= w->stack_cap) { w->need_stack = 1; return GALIGN_CORE_NOSPACE; }
    w->stack[sp++] = e;
  }
  /* Kaldi loops forever on a negative-cost epsilon cycle; we stop. Without
   * such a cycle the relaxations per frame stay a small multiple of the
   * states, so this bound never triggers on real graphs. */
  int64_t budget = 1000 * ((int64_t)g->num_states + 1);
  while (sp > 0) {
    if (--budget < 0) return GALIGN_CORE_EPSLOOP;
    int32_t e = w->stack[--sp];
    int32_t ti = p[e].tok;
    double c0 = w->tok[ti].cost;
    if (c0 > cut) continue;
    int32_t s = p[e].state;
    for (int32_t a = g->arc_start[s]; a < g->arc_start[s + 1]; a++) {
      const kio_arc *arc = &g->arcs[a];
      if (arc->ilabel != 0) continue;
      if (!galign_core_in_band(g, w->frame, arc->nextstate)) continue;
      double c = c0 + (double)arc->weight;
      if (c > cut) continue;
      int32_t f = w->state_elem[arc->nextstate];
      if (f < 0) {
        int32_t nt = galign_core_new_tok(w, c, ti, a);
        if (nt < 0) return GALIGN_CORE_NOSPACE;
        f = galign_core_insert(w, arc->nextstate, nt);
        if (f < 0) return GALIGN_CORE_NOSPACE;
      } else if (w->tok[p[f].tok].cost > c) {
        /* A new token: the old one may be the prev of tokens made this frame. */
        int32_t nt = galign_core_new_tok(w, c, ti, a);
        if (nt < 0) return GALIGN_CORE_NOSPACE;
        p[f].tok = nt;
      } else {
        continue;
      }
      if (sp >= w->stack_cap) { w->need_stack = 1; return GALIGN_CORE_NOSPACE; }
      w->stack[sp++] = f;
    }
  }
  return GALIGN_CORE_OK;
}

/* InitDecoding: fresh token arena, start token, epsilon closure with cutoff
 * FLT_MAX. w->hash_size is left alone (1000 at the start of an utterance,
 * kept for the retry pass, as Kaldi's decoder object keeps it). */
GALIGN_HD static inline int galign_core_begin(galign_core_ws *w, const galign_core_graph *g) {
  galign_core_clear_list(w);
  w->n_tok = 0;
  w->best_elem = -1;
  w->frame = 0;
  w->need_tok = w->need_stack = w->need_state = w->need_hash = 0;
  int32_t t0 = galign_core_new_tok(w, 0.0, -1, -1);
  if (t0 < 0) return GALIGN_CORE_NOSPACE;
  if (galign_core_insert(w, g->start, t0) < 0) return GALIGN_CORE_NOSPACE;
  return galign_core_nonemitting(w, g, (double)FLT_MAX);
}

/* Keeps the 21 smallest float-rounded costs seen (sorted ascending), since
 * Kaldi's GetCutoff collects costs in a vector<float> and takes nth_element
 * at index min_active = 20. */
#define GALIGN_MIN_ACTIVE 20

/* GetCutoff over the current list (the previous frame's tokens), then
 * PossiblyResizeHash. Sets w->cutoff, w->adaptive_beam, w->best_elem. */
GALIGN_HD static inline void galign_core_cutoff(galign_core_ws *w, float beam) {
  const galign_elem *p = w->pool[w->cur];
  float top[GALIGN_MIN_ACTIVE + 1];
  int32_t ntop = 0;
  double best = GALIGN_CORE_INF;
  int32_t best_e = -1;
  int64_t n = 0;
  for (int32_t e = w->head; e >= 0; e = p[e].next, n++) {
    double c = w->tok[p[e].tok].cost;
    if (c < best) { best = c; best_e = e; }
    float f = (float)c;
    if (ntop < GALIGN_MIN_ACTIVE + 1) {
      int32_t i = ntop++;
      while (i > 0 && top[i - 1] > f) { top[i] = top[i - 1]; i--; }
      top[i] = f;
    } else if (f < top[GALIGN_MIN_ACTIVE]) {
      int32_t i = GALIGN_MIN_ACTIVE;
      while (i > 0 && top[i - 1] > f) { top[i] = top[i - 1]; i--; }
      top[i] = f;
    }
  }
  double beam_cutoff = best + (double)beam;
  double min_active_cutoff = GALIGN_CORE_INF;
  if (n > GALIGN_MIN_ACTIVE) min_active_cutoff = (double)top[GALIGN_MIN_ACTIVE];
  if (min_active_cutoff > beam_cutoff) {
    w->adaptive_beam = (float)(min_active_cutoff - best + (double)0.5f);
    w->cutoff = min_active_cutoff;
  } else {
    w->adaptive_beam = beam;
    w->cutoff = beam_cutoff;
  }
  w->best_elem = best_e;
  uint64_t new_sz = (uint64_t)((float)n * 2.0f);
  if (new_sz > w->hash_size) w->hash_size = new_sz;
  w->stat_frames++;
  w->stat_toks += n;
  if (n > w->stat_max_toks) w->stat_max_toks = (int32_t)n;
}

/* Calls fn(ctx, k) for the compact pdf index k of every emitting arc that
 * galign_core_emit will need on this frame (duplicates possible). Call after
 * galign_core_cutoff. Host helper for lazy likelihoods. */
#define GALIGN_CORE_FOR_NEEDED(w, g, K, BODY)                                     \
  do {                                                                            \
    const galign_elem *p_ = (w)->pool[(w)->cur];                                  \
    for (int32_t e_ = (w)->head; e_ >= 0; e_ = p_[e_].next) {                     \
      if (!((w)->tok[p_[e_].tok].cost < (w)->cutoff) && e_ != (w)->best_elem)     \
        continue;                                                                 \
      int32_t s_ = p_[e_].state;                                                  \
      for (int32_t a_ = (g)->arc_start[s_]; a_ < (g)->arc_start[s_ + 1]; a_++) {  \
        int32_t K = (g)->arc_pdf[a_];                                             \
        if (K >= 0 && (g)->arcs[a_].ilabel != 0 &&                                \
            galign_core_in_band((g), (w)->frame + 1, (g)->arcs[a_].nextstate)) {  \
          BODY;                                                                   \
        }                                                                         \
      }                                                                           \
    }                                                                             \
  } while (0)

/* ProcessEmitting for one frame (ll_row[k] = LL of compact pdf k, unscaled)
 * followed by ProcessNonemitting with the cutoff it returns. Call after
 * galign_core_cutoff. */
GALIGN_HD static inline int galign_core_emit(galign_core_ws *w, const galign_core_graph *g,
                                             const float *ll_row, float acoustic_scale) {
  int32_t pc = w->cur;
  const galign_elem *pp = w->pool[pc];
  int32_t prev_head = w->head;
  /* HashList::Clear: the previous list is walked below, no longer indexed. */
  for (int32_t e = prev_head; e >= 0; e = pp[e].next) w->state_elem[pp[e].state] = -1;
  for (int32_t i = 0; i < w->n_used_buckets; i++) w->bucket_last[w->used_bucket[i]] = -1;
  w->cur = 1 - pc;
  w->head = w->tail = -1;
  w->n_elem = w->n_used_buckets = 0;
  w->frame++;
  const int32_t k = w->frame;
  galign_elem *np = w->pool[w->cur];

  const double cutoff = w->cutoff;
  const double ab = (double)w->adaptive_beam;
  double next_cut = GALIGN_CORE_INF;
  if (w->best_elem >= 0) {
    int32_t s = pp[w->best_elem].state;
    double bc = w->tok[pp[w->best_elem].tok].cost;
    for (int32_t a = g->arc_start[s]; a < g->arc_start[s + 1]; a++) {
      const kio_arc *arc = &g->arcs[a];
      if (arc->ilabel == 0 || !galign_core_in_band(g, k, arc->nextstate)) continue;
      float ac = -(acoustic_scale * ll_row[g->arc_pdf[a]]);
      double nw = ((double)arc->weight + bc) + (double)ac;
      if (nw + ab < next_cut) next_cut = nw + ab;
    }
  }
  for (int32_t e = prev_head; e >= 0; e = pp[e].next) {
    int32_t ti = pp[e].tok;
    double cost = w->tok[ti].cost;
    if (!(cost < cutoff)) continue;
    int32_t s = pp[e].state;
    for (int32_t a = g->arc_start[s]; a < g->arc_start[s + 1]; a++) {
      const kio_arc *arc = &g->arcs[a];
      if (arc->ilabel == 0 || !galign_core_in_band(g, k, arc->nextstate)) continue;
      float ac = -(acoustic_scale * ll_row[g->arc_pdf[a]]);
      double nw = ((double)arc->weight + cost) + (double)ac;
      if (!(nw < next_cut)) continue;
      int32_t f = w->state_elem[arc->nextstate];
      if (f < 0) {
        int32_t nt = galign_core_new_tok(w, nw, ti, a);
        if (nt < 0) return GALIGN_CORE_NOSPACE;
        if (galign_core_insert(w, arc->nextstate, nt) < 0) return GALIGN_CORE_NOSPACE;
      } else {
        galign_tok *old = &w->tok[np[f].tok];
        /* Nothing refers to this frame's tokens yet: overwrite in place. */
        if (old->cost > nw) { old->cost = nw; old->prev = ti; old->arc = a; }
      }
      if (nw + ab < next_cut) next_cut = nw + ab;
    }
  }
  w->best_elem = -1;
  return galign_core_nonemitting(w, g, next_cut);
}

/* Frees the tokens that no token of the current list leads back to (Kaldi's
 * FasterDecoder frees them by reference counts as it goes; here a mark and
 * compact between frames, so memory follows the tokens alive, not T).
 * Survivors keep their order (a token's prev is always older), so nothing
 * the decoder decides changes. map: n_tok int32 of scratch. Call between
 * frames (after galign_core_begin or _emit). Returns the tokens kept. */
GALIGN_HD static inline int32_t galign_core_gc(galign_core_ws *w, int32_t *map) {
  galign_elem *p = w->pool[w->cur];
  for (int32_t i = 0; i < w->n_tok; i++) map[i] = 0;
  for (int32_t e = w->head; e >= 0; e = p[e].next)
    for (int32_t t = p[e].tok; t >= 0 && !map[t]; t = w->tok[t].prev) map[t] = 1;
  int32_t n = 0;
  for (int32_t i = 0; i < w->n_tok; i++) map[i] = map[i] ? n++ : -1;
  for (int32_t i = 0; i < w->n_tok; i++) {
    if (map[i] < 0) continue;
    galign_tok t = w->tok[i];
    if (t.prev >= 0) t.prev = map[t.prev];
    w->tok[map[i]] = t;
  }
  for (int32_t e = w->head; e >= 0; e = p[e].next) p[e].tok = map[p[e].tok];
  w->n_tok = n;
  return n;
}

/* ReachedFinal. */
GALIGN_HD static inline int galign_core_reached_final(const galign_core_ws *w,
                                                      const galign_core_graph *g) {
  const galign_elem *p = w->pool[w->cur];
  for (int32_t e = w->head; e >= 0; e = p[e].next)
    if (w->tok[p[e].tok].cost != GALIGN_CORE_INF && g->final[p[e].state] != (float)GALIGN_CORE_INF)
      return 1;
  return 0;
}

/* One full decoding pass over T frames with the whole (unscaled) likelihood
 * matrix ll[t * g->n_used + k]. */
GALIGN_HD static inline int galign_core_decode(galign_core_ws *w, const galign_core_graph *g,
                                               const float *ll, int32_t T, float beam,
                                               float acoustic_scale) {
  int st = galign_core_begin(w, g);
  for (int32_t t = 0; st == GALIGN_CORE_OK && t < T; t++) {
    galign_core_cutoff(w, beam);
    st = galign_core_emit(w, g, ll + (int64_t)t * g->n_used, acoustic_scale);
  }
  return st;
}

/* Adds one RemoveEpsLocal group to the totals (GetLinearSymbolSequence) and
 * to the per-frame costs (GetPerFrameAcousticCosts). */
GALIGN_HD static inline void galign_core_group_done(int32_t il, float gg, float ga,
                                                    float *tot_g, float *tot_a,
                                                    float *per_frame, int32_t *nf,
                                                    float *eps_acwt) {
  *tot_g = *tot_g + gg;
  *tot_a = *tot_a + ga;
  if (!per_frame) return;
  if (il != 0) {
    if (*eps_acwt > 0) { ga += *eps_acwt; *eps_acwt = 0.0f; }
    per_frame[(*nf)++] = ga;
  } else if (ga == ga) {
    if (*nf > 0) per_frame[*nf - 1] += ga;
    else *eps_acwt += ga;
  }
}

/* Best final token, traceback, alignment (ali[T]) and scores; per_frame (T
 * values, may be NULL) gets the acoustic log-likelihood of each frame. Must
 * be the last call of the pass (it relinks the tokens of the path). Returns
 * OK (out->ok = 0 when no final state was reached) or BADPATH. */
GALIGN_HD static inline int galign_core_finish(galign_core_ws *w, const galign_core_graph *g,
                                               int32_t T, float acoustic_scale, int32_t *ali,
                                               float *per_frame, galign_core_out *out) {
  out->ok = 0; out->like = 0.0f; out->score = 0.0f;
  if (!galign_core_reached_final(w, g)) { galign_core_clear_list(w); return GALIGN_CORE_OK; }
  const galign_elem *p = w->pool[w->cur];
  double best_cost = GALIGN_CORE_INF;
  int32_t best = -1;
  for (int32_t e = w->head; e >= 0; e = p[e].next) {
    double c = w->tok[p[e].tok].cost + (double)g->final[p[e].state];
    if (c < best_cost && c != GALIGN_CORE_INF) { best_cost = c; best = e; }
  }
  if (best < 0) { galign_core_clear_list(w); return GALIGN_CORE_OK; }
  float final_w = g->final[p[best].state];
  /* Reverse the back-pointer chain so it can be walked forward. */
  int32_t rev = -1;
  for (int32_t t = p[best].tok; t >= 0;) {
    int32_t nx = w->tok[t].prev;
    w->tok[t].prev = rev;
    rev = t; t = nx;
  }
  galign_core_clear_list(w);
  /* rev = dummy start token; walk the real arcs, grouping as RemoveEpsLocal
   * does on a linear lattice: an arc joins the running group unless both
   * have input labels or both have output labels. */
  float tot_g = 0.0f, tot_a = 0.0f, eps_acwt = 0.0f;
  int32_t nf = 0, n_ali = 0;
  int32_t gil = 0, gol = 0, have = 0;
  float gg = 0.0f, ga = 0.0f;
  double prev_cost = w->tok[rev].cost;  /* dummy: 0 */
  for (int32_t t = w->tok[rev].prev; t >= 0; t = w->tok[t].prev) {
    const kio_arc *arc = &g->arcs[w->tok[t].arc];
    float graph = arc->weight;
    float tot = (float)(w->tok[t].cost - prev_cost);
    float ac = tot - graph;
    prev_cost = w->tok[t].cost;
    if (arc->ilabel != 0) {
      if (n_ali >= T) return GALIGN_CORE_BADPATH;
      ali[n_ali++] = arc->ilabel;
    }
    if (have && !(gil != 0 && arc->ilabel != 0) && !(gol != 0 && arc->olabel != 0)) {
      gg = gg + graph; ga = ga + ac;
      if (gil == 0) gil = arc->ilabel;
      if (gol == 0) gol = arc->olabel;
    } else {
      if (have) galign_core_group_done(gil, gg, ga, &tot_g, &tot_a, per_frame, &nf, &eps_acwt);
      gil = arc->ilabel; gol = arc->olabel; gg = graph; ga = ac; have = 1;
    }
  }
  if (n_ali != T) return GALIGN_CORE_BADPATH;
  if (have && gil == 0 && gol == 0) {
    /* An all-epsilon last group is folded into the final weight. */
    final_w = gg + final_w;
    tot_a = tot_a + ga;
  } else if (have) {
    galign_core_group_done(gil, gg, ga, &tot_g, &tot_a, per_frame, &nf, &eps_acwt);
  }
  tot_g = tot_g + final_w;
  if (per_frame) {
    float scale = -1.0f / acoustic_scale;
    for (int32_t i = 0; i < nf; i++) per_frame[i] *= scale;
    for (int32_t i = nf; i < T; i++) per_frame[i] = 0.0f;
  }
  out->ok = 1;
  out->score = -(tot_g + tot_a);
  out->like = -(tot_g + tot_a) / acoustic_scale;
  return GALIGN_CORE_OK;
}

/* The whole utterance as gmm-align-compiled's AlignUtteranceWrapper does it:
 * decode with beam; if no final state and retry_beam != 0, decode again from
 * scratch with retry_beam (*retried = 1); then the best path. The beams were
 * checked by the caller. ll: T x g->n_used, unscaled. */
GALIGN_HD static inline int galign_core_align(galign_core_ws *w, const galign_core_graph *g,
                                              const float *ll, int32_t T, float beam,
                                              float retry_beam, float acoustic_scale,
                                              int32_t *ali, float *per_frame,
                                              galign_core_out *out, int *retried) {
  *retried = 0;
  w->hash_size = 1000;
  int st = galign_core_decode(w, g, ll, T, beam, acoustic_scale);
  if (st != GALIGN_CORE_OK) { galign_core_clear_list(w); return st; }
  if (!galign_core_reached_final(w, g) && retry_beam != 0.0f) {
    *retried = 1;
    st = galign_core_decode(w, g, ll, T, retry_beam, acoustic_scale);
    if (st != GALIGN_CORE_OK) { galign_core_clear_list(w); return st; }
  }
  return galign_core_finish(w, g, T, acoustic_scale, ali, per_frame, out);
}

/* The retry pass alone, for a first pass (galign_core_align with
 * retry_beam 0) that reached no final state and ended with Kaldi's hash
 * size hash_size: the rest of galign_core_align with retry_beam, on another
 * workspace (the device hands its retries to host threads). */
GALIGN_HD static inline int galign_core_retry(galign_core_ws *w, const galign_core_graph *g,
                                              const float *ll, int32_t T, uint64_t hash_size,
                                              float retry_beam, float acoustic_scale,
                                              int32_t *ali, float *per_frame,
                                              galign_core_out *out) {
  w->hash_size = hash_size;
  int st = galign_core_decode(w, g, ll, T, retry_beam, acoustic_scale);
  if (st != GALIGN_CORE_OK) { galign_core_clear_list(w); return st; }
  return galign_core_finish(w, g, T, acoustic_scale, ali, per_frame, out);
}

#endif
