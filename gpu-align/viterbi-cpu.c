/* CPU driver of the shared decoder core: workspace allocation and growth,
 * likelihoods computed lazily (only the pdfs the decoder asks for on each
 * frame, cached across the retry pass), retry, best path. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "base/sys/log.h"
#include "align-cpu.h"
#include "viterbi-core.h"
#include "base/sys/settings.h"

struct galign_cpu_ws {
  galign_core_ws core;
  /* likelihood cache of the current utterance */
  float *ll; uint8_t *done; size_t ll_cap;
  float *x2; int32_t x2_cap;
  float *scratch; int32_t scratch_cap;
  int32_t *gcmap; int32_t gcmap_cap;  /* galign_core_gc's scratch */
  int ll_rows;                     /* 1: likelihoods kept for one frame only (long utterances) */
  int64_t base_frames, base_toks;  /* stats before the utterance being redone */
  double t_ll, t_vit, t_bt;        /* seconds in each phase (galign_cpu_ws_times) */
};

galign_cpu_ws *galign_cpu_ws_new(void) {
  galign_cpu_ws *w = calloc(1, sizeof *w);
  return w;
}

static void free_core(galign_core_ws *c) {
  free(c->tok); free(c->pool[0]); free(c->pool[1]); free(c->state_elem);
  free(c->used_bucket); free(c->bucket_last); free(c->stack);
}

void galign_cpu_ws_free(galign_cpu_ws *w) {
  if (!w) return;
  free_core(&w->core);
  free(w->ll); free(w->done); free(w->x2); free(w->scratch); free(w->gcmap);
  free(w);
}

void galign_cpu_ws_stats(const galign_cpu_ws *w, int64_t *frames, int64_t *toks,
                         int32_t *max_toks) {
  *frames = w->core.stat_frames;
  *toks = w->core.stat_toks;
  *max_toks = w->core.stat_max_toks;
}

void galign_cpu_ws_times(const galign_cpu_ws *w, galign_aligner_stats *s) {
  s->loglike_s += w->t_ll;
  s->viterbi_s += w->t_vit;
  s->backtrace_s += w->t_bt;
}

static int grow(void **p, size_t n, size_t elt) {
  void *q = realloc(*p, (n ? n : 1) * elt);
  if (!q) return KIO_ERR;
  *p = q;
  return KIO_OK;
}

/* Makes the core's capacities at least the given ones (maps reset if any
 * map buffer moved). */
static int reserve_core(galign_core_ws *c, int32_t states, int32_t toks, int32_t stack) {
  int remap = 0;
  if (states > c->state_cap || !c->state_elem) {
    int32_t hc = galign_core_hash_cap(states);
    if (grow((void **)&c->pool[0], (size_t)states, sizeof(galign_elem)) ||
        grow((void **)&c->pool[1], (size_t)states, sizeof(galign_elem)) ||
        grow((void **)&c->state_elem, (size_t)states, sizeof(int32_t)) ||
        grow((void **)&c->used_bucket, (size_t)states, sizeof(int32_t)) ||
        grow((void **)&c->bucket_last, (size_t)hc, sizeof(int32_t)))
      return KIO_ERR;
    c->state_cap = states;
    c->hash_cap = hc;
    remap = 1;
  }
  if (toks > c->tok_cap || !c->tok) {
    if (grow((void **)&c->tok, (size_t)toks, sizeof(galign_tok))) return KIO_ERR;
    c->tok_cap = toks;
  }
  if (stack > c->stack_cap || !c->stack) {
    if (grow((void **)&c->stack, (size_t)stack, sizeof(int32_t))) return KIO_ERR;
    c->stack_cap = stack;
  }
  if (remap) galign_core_ws_reset(c);
  return KIO_OK;
}

static int32_t grow_cap(int32_t cur) {
  int64_t n = 2 * (int64_t)cur;
  return n > INT32_MAX ? INT32_MAX : (int32_t)n;
}

/* Likelihoods of an utterance are cached for the retry pass while T x pdfs
 * stays below this (40 MB with the flags); longer utterances keep one frame
 * (Kaldi's decodable caches one frame too; a retry recomputes). */
enum { LL_CACHE_MAX = 8 << 20 };
/* Tokens: at most this many at the start of an utterance; beyond, garbage
 * collection keeps the arena at about twice the tokens alive. */
enum { TOK_START_MAX = 1 << 20 };

/* Tests shrink both limits to exercise the long-utterance paths on short
 * utterances (test hooks: tokens, likelihood cache entries). */
static int64_t env_limit(kio_setting s, int64_t dflt) {
  const char *v = kio_test_hook(s);
  if (!v) return dflt;
  char *end;
  long long x = strtoll(v, &end, 10);
  return (*end || x < 1) ? dflt : (int64_t)x;
}

/* Between frames: when the token arena is half full, drop the dead tokens;
 * when more than a quarter is still alive, grow it (indices stay valid). */
static int maybe_gc(galign_cpu_ws *w) {
  galign_core_ws *c = &w->core;
  if (c->n_tok <= c->tok_cap / 2) return KIO_OK;
  if (w->gcmap_cap < c->tok_cap) {
    if (grow((void **)&w->gcmap, (size_t)c->tok_cap, sizeof(int32_t))) return KIO_ERR;
    w->gcmap_cap = c->tok_cap;
  }
  int32_t kept = galign_core_gc(c, w->gcmap);
  if (kept > c->tok_cap / 4) {
    int32_t nc = grow_cap(c->tok_cap);
    if (nc == c->tok_cap || grow((void **)&c->tok, (size_t)nc, sizeof(galign_tok))) return KIO_ERR;
    c->tok_cap = nc;
  }
  return KIO_OK;
}

/* The likelihood row of frame t: computed lazily from the GMM (only the
 * pdfs the decoder needs; cached for the retry while T x pdfs is small), or
 * taken from src and checked where the decoder reads it. NULL: err set. */
static const float *frame_row(galign_cpu_ws *w, const galign_gmm *gmm,
                              const galign_core_graph *cg, const galign_graph *g,
                              const kio_matrix *feats, galign_ll_source *src, int32_t t,
                              char *err, size_t errlen) {
  galign_core_ws *c = &w->core;
  int bad = 0;
  if (src) {
    const double tl = kio_now_s();
    const float *row = src->row(src, t, err, errlen);
    w->t_ll += kio_now_s() - tl;
    if (!row) return NULL;
    GALIGN_CORE_FOR_NEEDED(c, cg, k, {
      if (isnan(row[k]) || isinf(row[k])) bad = 1;
    });
    if (!bad) return row;
  } else {
    const int32_t D = feats->cols, U = cg->n_used;
    float *row = w->ll;
    uint8_t *dn = w->done;
    if (w->ll_rows) memset(dn, 0, (size_t)U);
    else row += (size_t)t * U, dn += (size_t)t * U;
    const float *x = feats->data + (size_t)t * D;
    int have_x2 = 0;
    double tl = 0.0;
    /* The clock is read only on frames that compute likelihoods (a retry
     * pass mostly finds them cached). */
    GALIGN_CORE_FOR_NEEDED(c, cg, k, {
      if (!dn[k]) {
        if (!have_x2) {
          tl = kio_now_s();
          for (int32_t d = 0; d < D; d++) w->x2[d] = x[d] * x[d];
          have_x2 = 1;
        }
        float v = galign_gmm_loglike(gmm, g->pdfs_used[k], x, w->x2, w->scratch);
        if (isnan(v) || isinf(v)) bad = 1;
        row[k] = v;
        dn[k] = 1;
      }
    });
    if (have_x2) w->t_ll += kio_now_s() - tl;
    if (!bad) return row;
  }
  snprintf(err, errlen, "Invalid answer (overflow or invalid variances/features?)");
  return NULL;
}

/* One decoding pass. Returns a core status, or -1 with err set on an
 * invalid likelihood, a failed source or no memory. */
static int decode_pass(galign_cpu_ws *w, const galign_gmm *gmm, const galign_core_graph *cg,
                       const galign_graph *g, const kio_matrix *feats, galign_ll_source *src,
                       float beam, float ac_scale, char *err, size_t errlen) {
  galign_core_ws *c = &w->core;
  const int32_t T = feats->rows;
  int st = galign_core_begin(c, cg);
  for (int32_t t = 0; st == GALIGN_CORE_OK && t < T; t++) {
    galign_core_cutoff(c, beam);
    const float *row = frame_row(w, gmm, cg, g, feats, src, t, err, errlen);
    if (!row) {
      galign_core_clear_list(c);
      return -1;
    }
    st = galign_core_emit(c, cg, row, ac_scale);
    if (st == GALIGN_CORE_OK && maybe_gc(w) != KIO_OK) {
      snprintf(err, errlen, "Out of memory aligning an utterance of %d frames", T);
      galign_core_clear_list(c);
      return -1;
    }
  }
  return st;
}

int galign_cpu_align_one(galign_cpu_ws *w, const galign_gmm *gmm, const galign_graph *g,
                         const kio_matrix *feats, const galign_opts *o, int want_per_frame,
                         galign_result *r, char *err, size_t errlen) {
  return galign_cpu_align_src(w, gmm, g, feats, o, want_per_frame, NULL, r, err, errlen);
}

int galign_cpu_align_src(galign_cpu_ws *w, const galign_gmm *gmm, const galign_graph *g,
                         const kio_matrix *feats, const galign_opts *o, int want_per_frame,
                         galign_ll_source *src, galign_result *r, char *err, size_t errlen) {
  const int32_t T = feats->rows;
  r->ok = 0;
  r->band_failed = 0;
  r->retried = 0;
  r->num_frames = T;
  r->like = r->score = 0.0f;
  if (feats->cols != gmm->dim) {
    snprintf(err, errlen, "Dim mismatch: data dim = %d vs. model dim = %d", feats->cols,
             gmm->dim);
    return KIO_ERR;
  }
  const kio_fst *f = &g->fst;
  if (f->num_states <= 0 || f->start < 0 || T <= 0) return KIO_OK;
  /* The margin band, when the graph has one for this length (align-margin.h). */
  int banded = g->band_T == T && g->band_lo && g->band_hi && g->topo_pos;
  galign_core_graph cg = { f->num_states, f->start, g->num_pdfs_used, f->arc_start, f->arcs,
                           f->final, g->arc_pdf, banded ? g->topo_pos : NULL,
                           banded ? g->band_lo : NULL, banded ? g->band_hi : NULL };
  r->band_failed = 0;
  const int32_t U = g->num_pdfs_used;
  if (U == 0 || !g->arc_pdf) {
    /* No likelihoods to look up: only a graph without emitting arcs (which
     * cannot consume a frame) is acceptable here. */
    for (int32_t a = 0; a < f->num_arcs; a++)
      if (f->arcs[a].ilabel != 0) {
        snprintf(err, errlen, "Graph was prepared without a transition model");
        return KIO_ERR;
      }
    return KIO_OK;
  }
  size_t need = (size_t)T * (size_t)(U ? U : 1);
  w->ll_rows = (int64_t)need > env_limit(KIO_SET_TEST_CPU_LL_CACHE, LL_CACHE_MAX);
  if (w->ll_rows || src) need = (size_t)U;
  if (need > w->ll_cap) {
    if (grow((void **)&w->ll, need, sizeof(float)) || grow((void **)&w->done, need, 1))
      goto oom;
    w->ll_cap = need;
  }
  memset(w->done, 0, need);
  if (gmm->dim > w->x2_cap) {
    if (grow((void **)&w->x2, (size_t)gmm->dim, sizeof(float))) goto oom;
    w->x2_cap = gmm->dim;
  }
  int32_t mc = galign_gmm_max_comp(gmm);
  if (mc > w->scratch_cap) {
    if (grow((void **)&w->scratch, (size_t)mc, sizeof(float))) goto oom;
    w->scratch_cap = mc;
  }
  if (grow((void **)&r->ali, (size_t)T, sizeof(int32_t))) goto oom;
  if (want_per_frame && grow((void **)&r->per_frame, (size_t)T, sizeof(float))) goto oom;

  if (src && src->begin(src, g, feats, err, errlen) != KIO_OK) return KIO_ERR;
  galign_core_ws *c = &w->core;
  int64_t tok_guess = (int64_t)T * 32 + 1024;
  int64_t tok_max = env_limit(KIO_SET_TEST_CPU_TOK_START, TOK_START_MAX);
  if (tok_guess > tok_max) tok_guess = tok_max < 16 ? 16 : tok_max;
  int32_t stack_guess = 2 * f->num_states + 64;
  if (reserve_core(c, f->num_states, (int32_t)tok_guess, stack_guess) != KIO_OK) goto oom;
  int64_t f0 = c->stat_frames, t0 = c->stat_toks;
  for (;;) {
    c->stat_frames = f0; c->stat_toks = t0;  /* count a redone utterance once */
    c->hash_size = 1000;
    r->retried = 0;
    /* Viterbi time: the passes less the likelihoods computed inside them. */
    double tp = kio_now_s(), ll0 = w->t_ll;
    int st = decode_pass(w, gmm, &cg, g, feats, src, o->beam, o->acoustic_scale, err, errlen);
    if (st == GALIGN_CORE_OK && !galign_core_reached_final(c, &cg) && o->retry_beam != 0.0f) {
      r->retried = 1;
      st = decode_pass(w, gmm, &cg, g, feats, src, o->retry_beam, o->acoustic_scale, err, errlen);
    }
    double tf = kio_now_s();
    w->t_vit += tf - tp - (w->t_ll - ll0);
    if (st < 0) return KIO_ERR;
    if (st == GALIGN_CORE_OK && banded && !galign_core_reached_final(c, &cg)) {
      /* No final state inside the band: the full search decides. */
      galign_core_clear_list(c);
      banded = 0;
      cg.topo_pos = cg.band_lo = cg.band_hi = NULL;
      r->band_failed = 1;
      continue;
    }
    if (st == GALIGN_CORE_EPSLOOP) {
      snprintf(err, errlen, "Decoding does not terminate: the graph has a cycle of "
               "input-epsilon arcs with negative total cost");
      return KIO_ERR;
    }
    if (st == GALIGN_CORE_OK) {
      galign_core_out out;
      st = galign_core_finish(c, &cg, T, o->acoustic_scale, r->ali,
                              want_per_frame ? r->per_frame : NULL, &out);
      w->t_bt += kio_now_s() - tf;
      if (st == GALIGN_CORE_BADPATH) {
        snprintf(err, errlen, "Best path does not have %d emitting arcs (bug)", T);
        return KIO_ERR;
      }
      r->ok = out.ok;
      r->like = out.like;
      r->score = out.score;
      return KIO_OK;
    }
    /* NOSPACE: grow what overflowed and redo the utterance. */
    galign_core_clear_list(c);
    int32_t ns = c->state_cap, nt = c->tok_cap, nk = c->stack_cap;
    if (c->need_state || c->need_hash) ns = grow_cap(ns);
    if (c->need_tok) nt = grow_cap(nt);
    if (c->need_stack) nk = grow_cap(nk);
    if (ns == c->state_cap && nt == c->tok_cap && nk == c->stack_cap) {
      snprintf(err, errlen, "Decoder workspace limit reached (%d tokens)", nt);
      return KIO_ERR;
    }
    if (reserve_core(c, ns, nt, nk) != KIO_OK) goto oom;
  }
oom:
  snprintf(err, errlen, "Out of memory aligning an utterance of %d frames", T);
  return KIO_ERR;
}
