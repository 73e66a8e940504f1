/* Stochastic training (Novak, Otec, Lee, Goel: stochastic approaches to ML
 * training): each update from the statistics of a random batch of the data
 * (speakers or utterances, sampled without replacement epoch by epoch),
 * merged with the statistics of the batches before it up to a given share
 * of the data, weighted by their sizes (raw sufficient statistics summed).
 *
 * The stock schedule is stretched over the updates: update u of U stands
 * for iteration x(u) = start + floor((u - 1) (num_iters - start) / U), whose
 * Gaussian target, beam and MLLT step it takes. Realignment is lazy: an
 * utterance is realigned (fused with its accumulation) when its batch comes
 * and a realignment iteration lies between its alignment and x(u). The
 * stored statistics follow the model through each update (est.h's trace):
 * a Gaussian split by mixing up passes half its statistics to each half
 * (as its weight), a removed one's are dropped; an MLLT step (new
 * features) drops them all. */
#include "train/trn-stoch.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/sys/log.h"
#include "train/trn-pass.h"

/* splitmix64: seeded, the same sequence everywhere */
static uint64_t rng_next(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
static uint32_t rng_below(uint64_t *s, uint32_t n) { return (uint32_t)(rng_next(s) % n); }

typedef struct {
  gacc_stats s;  /* shaped as the current model */
} stored;

typedef struct {
  int32_t nunits, *order, pos;   /* units (speakers or utterances) in epoch order */
  int64_t *unit_frames;
  int32_t *unit_of;              /* per utterance */
  uint64_t seed;
} sampler;

static void shuffle(sampler *sp) {
  for (int32_t i = sp->nunits - 1; i > 0; i--) {
    int32_t j = (int32_t)rng_below(&sp->seed, (uint32_t)i + 1);
    int32_t tmp = sp->order[i]; sp->order[i] = sp->order[j]; sp->order[j] = tmp;
  }
  sp->pos = 0;
}

/* The next batch: units in epoch order until target frames (a new epoch,
 * reshuffled, when the units run out). pick_unit[unit] = 1. */
static void next_batch(sampler *sp, int64_t target, uint8_t *pick_unit) {
  memset(pick_unit, 0, (size_t)sp->nunits);
  int64_t got = 0;
  int32_t taken = 0;
  while (got < target && taken < sp->nunits) {
    if (sp->pos == sp->nunits) shuffle(sp);
    int32_t u = sp->order[sp->pos++];
    if (pick_unit[u]) continue;  /* drawn again in the next epoch */
    pick_unit[u] = 1;
    got += sp->unit_frames[u];
    taken++;
  }
}

/* iteration of update u (1-based) of U */
static int iter_of(const trn_cfg *c, int start, int u, int U) {
  return start + (int)((int64_t)(u - 1) * (c->num_iters - start) / U);
}

static int32_t gauss_target(const trn_cfg *c, int start, int x) {
  int32_t g = c->start_gauss;
  for (int i = start; i < x; i++)
    if (i <= c->max_iter_inc) g += c->inc_gauss;
  return g;
}

/* merged = the sum of the stored batches' statistics (all shaped as the
 * current model): raw sufficient statistics, so each batch weighs as its
 * size. */
static int merge(const stored *st, int n, const kio_tmodel *tm, const kio_am_gmm *am,
                 gacc_stats *out) {
  if (gacc_stats_init(out, tm, am) != KIO_OK) return KIO_ERR;
  size_t D = (size_t)out->dim, G = (size_t)out->num_gauss;
  for (int k = 0; k < n; k++) {
    const gacc_stats *s = &st[k].s;
    if (s->num_gauss != out->num_gauss || s->num_tids != out->num_tids) {
      KIO_ERROR("stored statistics of another model (%d Gaussians, the model %d)",
                (int)s->num_gauss, (int)out->num_gauss);
      gacc_stats_free(out);
      return KIO_ERR;
    }
    for (int32_t t = 0; t <= s->num_tids; t++) out->tacc[t] += s->tacc[t];
    out->total_like += s->total_like;
    out->total_frames += s->total_frames;
    for (size_t g = 0; g < G; g++) out->occ[g] += s->occ[g];
    for (size_t i = 0; i < G * D; i++) {
      out->mean_acc[i] += s->mean_acc[i];
      out->var_acc[i] += s->var_acc[i];
    }
  }
  return KIO_OK;
}

/* Carries stored statistics over an update (tr: where the new model's
 * Gaussians come from): a Gaussian split in the update passes half its
 * statistics to each half, as its weight; a removed one's are dropped.
 * s is reshaped as the model (tm, am). */
static int carry(gacc_stats *s, const trn_est_trace *tr, const kio_tmodel *tm,
                 const kio_am_gmm *am) {
  gacc_stats n;
  if (gacc_stats_init(&n, tm, am) != KIO_OK) return KIO_ERR;
  size_t D = (size_t)n.dim;
  memcpy(n.tacc, s->tacc, sizeof(double) * ((size_t)n.num_tids + 1));
  n.total_like = s->total_like;
  n.total_frames = s->total_frames;
  for (int32_t p = 0; p < n.num_pdfs; p++) {
    const trn_trace_pdf *tp = &tr->pdf[p];
    int32_t o0 = s->pdf_offset[p], n0 = n.pdf_offset[p];
    if (tp->n != n.pdf_offset[p + 1] - n0) {
      KIO_ERROR("pdf %d: %d Gaussians traced, the model has %d", (int)p, (int)tp->n,
                (int)(n.pdf_offset[p + 1] - n0));
      gacc_stats_free(&n);
      return KIO_ERR;
    }
    for (int32_t m = 0; m < tp->n; m++) {
      size_t src = (size_t)(o0 + tp->orig[m]), dst = (size_t)(n0 + m);
      double f = tp->share[m];
      n.occ[dst] = f * s->occ[src];
      for (size_t d = 0; d < D; d++) {
        n.mean_acc[dst * D + d] = f * s->mean_acc[src * D + d];
        n.var_acc[dst * D + d] = f * s->var_acc[src * D + d];
      }
    }
  }
  gacc_stats_free(s);
  *s = n;
  return KIO_OK;
}

int trn_stoch_run(trn_ctx *t) {
  const trn_cfg *c = t->c;
  trn_data *d = &t->d;
  int start = c->equal_align ? 1 : c->start_iter;
  double b = c->stoch_batch > 1.0 ? 1.0 : c->stoch_batch;
  double passes = c->stoch_passes > 0 ? c->stoch_passes : (double)(c->num_iters - start);
  int U = (int)floor(passes / b + 0.5);
  if (U < 1) U = 1;
  int keep = (int)floor(c->stoch_memory / b + 0.5);  /* batches merged, the current one included */
  if (keep < 1) keep = 1;
  int rc = KIO_OK;
  trn_est_trace trace;
  memset(&trace, 0, sizeof trace);
  sampler sp;
  memset(&sp, 0, sizeof sp);
  sp.seed = c->stoch_seed;
  sp.nunits = c->stoch_speaker ? d->num_spk : d->n;
  sp.order = malloc(sizeof(int32_t) * (size_t)(sp.nunits ? sp.nunits : 1));
  sp.unit_frames = calloc((size_t)(sp.nunits ? sp.nunits : 1), sizeof(int64_t));
  uint8_t *pick_unit = malloc((size_t)(sp.nunits ? sp.nunits : 1));
  uint8_t *batch = calloc((size_t)(d->n ? d->n : 1), 1);
  stored *st = calloc((size_t)keep, sizeof *st);
  gacc_stats *jobs = calloc((size_t)d->nj, sizeof *jobs);
  const gacc_stats **jp = calloc((size_t)d->nj, sizeof *jp);
  if (!sp.order || !sp.unit_frames || !pick_unit || !batch || !st || !jobs || !jp) {
    KIO_ERROR("out of memory");
    rc = KIO_ERR;
    goto done;
  }
  for (int32_t i = 0; i < sp.nunits; i++) sp.order[i] = i;
  for (int32_t i = 0; i < d->n; i++)
    sp.unit_frames[c->stoch_speaker ? d->u[i].spk : i] += d->u[i].feats->rows;
  shuffle(&sp);
  KIO_LOG("Stochastic training: %d updates of %.3g of the data (%s level, seed %llu), %.3g full "
          "data passes, statistics of the last %d batches merged", U, b,
          c->stoch_speaker ? "speaker" : "utterance", (unsigned long long)c->stoch_seed,
          U * b, keep);

  if (c->equal_align) {
    /* pass 0 over all the data, as the stock script */
    t->pick = NULL;
    rc = trn_equal_pass(t);
  }
  int nstored = 0, next = 0, last_mllt = 0;
  double t0 = kio_now_s(), realigned_frames = 0.0;
  for (int u = 1; u <= U && rc == KIO_OK; u++) {
    int x = iter_of(c, start, u, U);
    int32_t stage = 0;
    for (int i = start; i <= x; i++) stage += t->realign[i];
    next_batch(&sp, (int64_t)(b * (double)d->frames + 0.5), pick_unit);
    int32_t nre = 0;
    for (int32_t i = 0; i < d->n; i++) {
      batch[i] = pick_unit[c->stoch_speaker ? d->u[i].spk : i];
      if (batch[i] && d->u[i].ali_stage < stage) nre++;
    }
    /* MLLT step of an iteration reached for the first time (on all the data) */
    for (int m = last_mllt + 1; m <= x && rc == KIO_OK; m++)
      if (m >= start && t->mllt[m]) {
        t->pick = NULL;
        rc = trn_mllt_step(t, m);
        last_mllt = m;
        /* new features: no earlier statistics apply */
        for (int k = 0; k < keep; k++) gacc_stats_free(&st[k].s);
        nstored = next = 0;
      }
    if (x > last_mllt) last_mllt = x;
    if (rc != KIO_OK) break;
    /* lazy realignment of the batch's stale utterances */
    if (nre > 0) {
      uint8_t *re = malloc((size_t)d->n);
      if (!re) { KIO_ERROR("out of memory"); rc = KIO_ERR; break; }
      for (int32_t i = 0; i < d->n; i++) {
        re[i] = batch[i] && d->u[i].ali_stage < stage;
        if (re[i]) realigned_frames += d->u[i].feats->rows;
      }
      t->pick = re;
      float beam = x == 1 && c->first_beam > 0 ? c->first_beam : c->align.beam;
      double ta = kio_now_s();
      rc = trn_realign_jobs(t, u, beam, stage);
      t->time_align += kio_now_s() - ta;
      t->pick = NULL;
      free(re);
      if (rc != KIO_OK) break;
    }
    /* this batch's statistics, stored in place of the oldest */
    t->pick = batch;  /* jobs' buffers reused (gacc_get_stats reshapes them) */
    double tc = kio_now_s();
    rc = trn_accumulate_jobs(t, &t->am, u, jobs, 0);
    t->time_acc += kio_now_s() - tc;
    t->pick = NULL;
    if (rc != KIO_OK) break;
    for (int j = 0; j < d->nj; j++) jp[j] = &jobs[j];
    stored *slot = &st[next];  /* the oldest sum's buffers reused */
    if (trn_est_sum_jobs((gacc_stats *const *)jp, d->nj, &slot->s, 0) != KIO_OK) {
      rc = KIO_ERR;
      break;
    }
    next = (next + 1) % keep;
    if (nstored < keep) nstored++;
    gacc_stats merged;
    if (merge(st, nstored, &t->tm, &t->am, &merged) != KIO_OK) { rc = KIO_ERR; break; }
    trn_est_opts eo = c->est;
    eo.mix_up = gauss_target(c, start, x);
    eo.power = c->power;
    const gacc_stats *mp = &merged;
    char desc[96];
    snprintf(desc, sizeof desc, "statistics of the last %d batches (update %d of %d)", nstored, u, U);
    double te = kio_now_s();
    rc = trn_estimate(t, &mp, 1, u, &eo, 1, desc, &trace);
    t->time_est += kio_now_s() - te;
    gacc_stats_free(&merged);
    if (rc != KIO_OK) break;
    /* the stored statistics follow the model's Gaussians (the slot just
     * filled included: the ring holds the last nstored batches) */
    for (int k = 0; k < keep && rc == KIO_OK; k++)
      if (st[k].s.occ) rc = carry(&st[k].s, &trace, &t->tm, &t->am);
    if (rc != KIO_OK) break;
    char p1[4200];
    snprintf(p1, sizeof p1, "%s/%d.mdl", c->dir, u);
    unlink(p1);
    snprintf(p1, sizeof p1, "%s/%d.occs", c->dir, u);
    unlink(p1);
    KIO_LOG("Update %d of %d (iteration %d): %d utterances realigned; avg like per frame %g", u, U,
            x, (int)nre, (double)t->last_like);
  }
  if (rc == KIO_OK) {
    char a[4200], l[64];
    snprintf(a, sizeof a, "%s/final.mdl", c->dir);
    snprintf(l, sizeof l, "%d.mdl", U + 1);
    unlink(a);
    if (symlink(l, a) != 0) { KIO_ERROR("Could not link %s", a); rc = KIO_ERR; }
    snprintf(a, sizeof a, "%s/final.occs", c->dir);
    snprintf(l, sizeof l, "%d.occs", U + 1);
    unlink(a);
    if (rc == KIO_OK && symlink(l, a) != 0) { KIO_ERROR("Could not link %s", a); rc = KIO_ERR; }
    if (rc == KIO_OK) rc = trn_data_write_ali(d, c->dir, c->ali_text, c->phone_stats ? &t->tm : NULL);
    KIO_LOG("Stochastic training: %d updates, %.3g data passes of accumulation (%.3g of them "
            "realigning) in %.1f s", U, U * b, realigned_frames / (double)d->frames,
            kio_now_s() - t0);
  }
done:
  for (int k = 0; st && k < keep; k++) gacc_stats_free(&st[k].s);
  trn_est_trace_free(&trace);
  for (int j = 0; jobs && j < d->nj; j++) gacc_stats_free(&jobs[j]);
  free(st);
  free(jobs);
  free(jp);
  free(sp.order);
  free(sp.unit_frames);
  free(pick_unit);
  free(batch);
  return rc;
}
