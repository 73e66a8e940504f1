/* Graph preparation for alignment: AddTransitionProbs (reference 5.2),
 * careful-alignment graph (5.4), the pdfs an utterance can reach. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "base/sys/log.h"
#include "base/sys/options.h"
#include "gpu-align.h"

void galign_opts_default(galign_opts *o) {
  o->beam = 200.0f;
  o->retry_beam = 0.0f;
  o->transition_scale = 1.0f;
  o->self_loop_scale = 1.0f;
  o->acoustic_scale = 1.0f;
  o->careful = 0;
  o->num_gpus = 1;
  o->graph_has_probs = 0;
  o->no_service = 0;
}

void galign_opts_register(kio_opts *po, galign_opts *o) {
  kio_opts_float(po, "beam", &o->beam, "Decoding beam used in alignment");
  kio_opts_float(po, "retry-beam", &o->retry_beam, "Decoding beam for second try at alignment");
  kio_opts_bool(po, "careful", &o->careful,
                "If true, do 'careful' alignment, which is better at detecting "
                "alignment failure (involves loop to start of decoding graph).");
  kio_opts_float(po, "transition-scale", &o->transition_scale,
                 "Transition-probability scale [relative to acoustics]");
  kio_opts_float(po, "acoustic-scale", &o->acoustic_scale,
                 "Scaling factor for acoustic likelihoods");
  kio_opts_float(po, "self-loop-scale", &o->self_loop_scale,
                 "Scale of self-loop versus non-self-loop log probs [relative to acoustics]");
}

/* GetScaledTransitionLogProb (hmm/hmm-utils.cc), in float as Kaldi does. */
static float scaled_log_prob(const kio_tmodel *tm, int32_t tid, float tscale, float lscale) {
  float lp = tm->log_probs[tid];
  if (tscale == lscale) return lp * tscale;
  if (tm->tid_is_self_loop[tid]) return lscale * lp;
  float nonloop = tm->nonloop_log_prob[tm->tid2ts[tid]];
  float ignoring_loops = lp - nonloop;
  return lscale * nonloop + tscale * ignoring_loops;
}

/* Grows out->fst to hold ns states and na arcs (contents not kept). */
static int reserve(kio_fst *f, size_t ns, size_t na) {
  if (ns > f->state_cap || !f->arc_start || !f->final) {
    int32_t *as = realloc(f->arc_start, (ns + 1) * sizeof *as);
    if (!as) return KIO_ERR;
    f->arc_start = as;
    float *fi = realloc(f->final, (ns ? ns : 1) * sizeof *fi);
    if (!fi) return KIO_ERR;
    f->final = fi;
    f->state_cap = ns;
  }
  if (na > f->arc_cap || !f->arcs) {
    kio_arc *a = realloc(f->arcs, (na ? na : 1) * sizeof *a);
    if (!a) return KIO_ERR;
    f->arcs = a;
    f->arc_cap = na;
  }
  return KIO_OK;
}

static int cmp_i32(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x > y) - (x < y);
}

int galign_graph_prepare(const kio_fst *in, const kio_tmodel *tm, const galign_opts *o,
                         galign_graph *out) {
  const int32_t N = in->num_states;
  if (N > 0 && in->start >= N) {
    KIO_ERROR("Invalid graph: start state %d of %d", in->start, N);
    return KIO_ERR;
  }
  const int careful = o->careful && N > 0 && in->start >= 0;
  int64_t num_final = 0;
  for (int32_t s = 0; s < N; s++)
    if (in->final[s] != INFINITY) num_final++;
  int64_t ns = careful ? 2 * (int64_t)N + 1 : N;
  int64_t na = careful ? 2 * (int64_t)in->num_arcs + num_final + 1 : in->num_arcs;
  if (ns > INT32_MAX / 2 || na > INT32_MAX) {
    KIO_ERROR("Graph too large: %lld states, %lld arcs", (long long)ns, (long long)na);
    return KIO_ERR;
  }
  kio_fst *f = &out->fst;
  out->band_T = 0;  /* a band belongs to the graph it was laid on */
  if (reserve(f, (size_t)ns, (size_t)na) != KIO_OK) {
    KIO_ERROR("Out of memory preparing a graph of %lld arcs", (long long)na);
    return KIO_ERR;
  }

  /* First the original states, with transition probabilities added. */
  const float ts = o->transition_scale, ls = o->self_loop_scale;
  int32_t k = 0;
  for (int32_t s = 0; s < N; s++) {
    f->arc_start[s] = k;
    for (int32_t a = in->arc_start[s]; a < in->arc_start[s + 1]; a++) {
      kio_arc arc = in->arcs[a];
      int32_t l = arc.ilabel;
      if (arc.nextstate < 0 || arc.nextstate >= N) {
        KIO_ERROR("Invalid graph: arc to state %d of %d", arc.nextstate, N);
        return KIO_ERR;
      }
      if (tm && l != 0) {
        if (l < 0 || l > tm->num_tids) {
          KIO_ERROR("AddTransitionProbs: invalid symbol %d on graph input side.", l);
          return KIO_ERR;
        }
        if (!o->graph_has_probs) arc.weight = arc.weight + -scaled_log_prob(tm, l, ts, ls);
      }
      f->arcs[k++] = arc;
    }
    if (careful && in->final[s] != INFINITY) {
      kio_arc arc = { 0, 0, in->final[s], 2 * N };
      f->arcs[k++] = arc;
    }
    f->final[s] = careful ? INFINITY : in->final[s];
  }
  if (careful) {
    /* Concat(G, G-without-finals preceded by a final state 2N): a copy whose
     * states are N..2N-1, then state 2N with 0:0/0 -> N + start. */
    for (int32_t s = 0; s < N; s++) {
      f->arc_start[N + s] = k;
      int32_t n_orig = in->arc_start[s + 1] - in->arc_start[s];
      for (int32_t i = 0; i < n_orig; i++) {
        kio_arc arc = f->arcs[f->arc_start[s] + i];
        arc.nextstate += N;
        f->arcs[k++] = arc;
      }
      f->final[N + s] = INFINITY;
    }
    f->arc_start[2 * N] = k;
    kio_arc arc = { 0, 0, 0.0f, N + in->start };
    f->arcs[k++] = arc;
    f->final[2 * N] = 0.0f;
  }
  f->arc_start[ns] = k;
  f->num_states = (int32_t)ns;
  f->num_arcs = k;
  f->start = in->start;

  /* pdfs_used (sorted distinct) and the compact index of each arc. */
  free(out->arc_pdf);
  free(out->pdfs_used);
  out->arc_pdf = malloc((size_t)(k ? k : 1) * sizeof(int32_t));
  out->pdfs_used = NULL;
  out->num_pdfs_used = 0;
  if (!out->arc_pdf) { KIO_ERROR("Out of memory"); return KIO_ERR; }
  if (!tm) {
    for (int32_t a = 0; a < k; a++) out->arc_pdf[a] = -1;
    return KIO_OK;
  }
  /* Distinct pdfs through a per-pdf slot table (O(arcs + pdfs)); only the
   * few distinct ones are sorted. */
  const int32_t P = tm->num_pdfs > 0 ? tm->num_pdfs : 1;
  int32_t *slot = malloc((size_t)P * sizeof(int32_t));
  int32_t *tmp = malloc((size_t)(P < k ? P : (k ? k : 1)) * sizeof(int32_t));
  if (!slot || !tmp) { free(slot); free(tmp); KIO_ERROR("Out of memory"); return KIO_ERR; }
  for (int32_t p = 0; p < P; p++) slot[p] = -1;
  int32_t u = 0;
  for (int32_t a = 0; a < k; a++) {
    if (f->arcs[a].ilabel == 0) continue;
    int32_t pdf = tm->tid2pdf[f->arcs[a].ilabel];
    if (slot[pdf] < 0) { slot[pdf] = 0; tmp[u++] = pdf; }
  }
  qsort(tmp, (size_t)u, sizeof *tmp, cmp_i32);
  for (int32_t i = 0; i < u; i++) slot[tmp[i]] = i;
  out->pdfs_used = malloc((size_t)(u ? u : 1) * sizeof(int32_t));
  if (!out->pdfs_used) { free(slot); free(tmp); KIO_ERROR("Out of memory"); return KIO_ERR; }
  memcpy(out->pdfs_used, tmp, (size_t)u * sizeof(int32_t));
  out->num_pdfs_used = u;
  free(tmp);
  for (int32_t a = 0; a < k; a++) {
    int32_t l = f->arcs[a].ilabel;
    out->arc_pdf[a] = l == 0 ? -1 : slot[tm->tid2pdf[l]];
  }
  free(slot);
  return KIO_OK;
}

void galign_graph_free(galign_graph *g) {
  if (!g) return;
  free(g->fst.arc_start);
  free(g->fst.arcs);
  free(g->fst.final);
  free(g->pdfs_used);
  free(g->arc_pdf);
  free(g->topo_pos);
  free(g->band_lo);
  free(g->band_hi);
  memset(g, 0, sizeof *g);
}
