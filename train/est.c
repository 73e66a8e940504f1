/* gmm-est in process: the transition update, MleDiagGmmUpdate per pdf (on
 * several threads), SplitByCount (mixing up), the occupancies and gmm-est's
 * lines (gmm-sum-accs' sum: sum-accs.c). Types and statement order follow
 * Kaldi's source so the float/double rounding is the same (see est.h). */
#include "train/est.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/matrix/blas-level1.h"
#include "base/matrix/blas-profile.h"
#include "base/io/io.h"
#include "base/sys/cpu-share.h"
#include "base/sys/kaldi-msg.h"
#include "base/sys/log.h"
#include "base/sys/options.h"
#include "gpu-align/gpu-align.h"


void trn_est_opts_default(trn_est_opts *o) {
  memset(o, 0, sizeof *o);
  o->min_gaussian_weight = 1.0e-05f;
  o->min_gaussian_occupancy = 10.0f;
  o->min_variance = 0.001;
  o->remove_low_count_gaussians = 1;
  o->transition_floor = 0.01f;
  o->transition_min_count = 5.0f;
  o->perturb_factor = 0.01f;
  o->power = 0.2f;
  o->min_count = 20.0f;
  o->update_flags = TRN_FLAG_MEANS | TRN_FLAG_VARS | TRN_FLAG_WEIGHTS | TRN_FLAG_TRANS;
}

void trn_est_opts_register(kio_opts *po, trn_est_opts *o, char **update_flags_str) {
  kio_opts_int(po, "mix-up", &o->mix_up,
               "Increase number of mixture components to this overall target.");
  kio_opts_float(po, "min-count", &o->min_count,
                 "Minimum per-Gaussian count enforced while mixing up and down.");
  kio_opts_int(po, "mix-down", &o->mix_down,
               "If nonzero, merge mixture components to this target.");
  kio_opts_float(po, "power", &o->power,
                 "If mixing up, power to allocate Gaussians to states.");
  kio_opts_string(po, "update-flags", update_flags_str,
                  "Which GMM parameters to update: subset of mvwt.");
  kio_opts_float(po, "perturb-factor", &o->perturb_factor,
                 "While mixing up, perturb means by standard deviation times this factor.");
  kio_opts_float(po, "transition-floor", &o->transition_floor,
                 "Floor for transition probabilities");
  kio_opts_float(po, "transition-min-count", &o->transition_min_count,
                 "Minimum count required to update transitions from a state");
  kio_opts_bool(po, "share-for-pdfs", &o->share_for_pdfs,
                "If true, share all transition parameters where the states have the same pdf.");
  kio_opts_float(po, "min-gaussian-weight", &o->min_gaussian_weight,
                 "MleDiagGmmOptions: Min Gaussian weight before we remove it.");
  kio_opts_float(po, "min-gaussian-occupancy", &o->min_gaussian_occupancy,
                 "MleDiagGmmOptions: Minimum occupancy to update a Gaussian.");
  kio_opts_double(po, "min-variance", &o->min_variance,
                  "MleDiagGmmOptions: Variance floor (absolute variance).");
  kio_opts_bool(po, "remove-low-count-gaussians", &o->remove_low_count_gaussians,
                "MleDiagGmmOptions: If true, remove Gaussians that fall below the floors.");
}

int trn_est_parse_flags(const char *s, unsigned *flags) {
  unsigned f = 0;
  for (const char *p = s; *p; p++) {
    switch (*p) {
      case 'm': f |= TRN_FLAG_MEANS; break;
      case 'v': f |= TRN_FLAG_VARS; break;
      case 'w': f |= TRN_FLAG_WEIGHTS; break;
      case 't': f |= TRN_FLAG_TRANS; break;
      case 'a': f |= TRN_FLAG_MEANS | TRN_FLAG_VARS | TRN_FLAG_WEIGHTS | TRN_FLAG_TRANS; break;
      default:
        KIO_KALDI(GMM_FLAGS, *p, s);
        return KIO_ERR;
    }
  }
  *flags = f;
  return KIO_OK;
}

/* ---- OpenBLAS orders ---- */

float trn_est_sdot(int n, const float *x, const float *y) {
  return kio_blas_sdot(kio_blas_profile(), n, x, y);
}

/* VectorBase::Sum: a dot product with a stride-0 one, in the order of the
 * profile's strided loop (blas-level1.h). */
static float sum_f(const float *x, int32_t n) { return kio_blas_ssum(kio_blas_profile(), n, x); }
static double sum_d(const double *x, int32_t n) { return kio_blas_dsum(kio_blas_profile(), n, x); }

double trn_est_dsum(const double *x, int32_t n) { return sum_d(x, n); }

/* cblas_saxpy: y += a * x. */
static void saxpy(float *y, float a, const float *x, int32_t n) {
  kio_blas_saxpy(kio_blas_profile(), n, a, x, y);
}

/* ---- the transition model (TransitionModel::MleUpdate) ---- */

static int transition_update(const trn_est_opts *o, const gacc_stats *s, kio_tmodel *tm,
                             float *objf_out, float *count_out) {
  float count_sum = 0.0f, objf_impr_sum = 0.0f;
  int32_t num_skipped = 0, num_floored = 0;
  double counts[64];
  float old_probs[64], new_probs[64];
  for (int32_t ts = 1; ts <= tm->num_tuples; ts++) {
    int32_t t0 = tm->first_tid[ts], n = tm->first_tid[ts + 1] - t0;
    if (n <= 1) continue;
    if (n > 64) {
      KIO_ERROR("transition-state %d has %d transitions (at most 64 handled)", (int)ts, (int)n);
      return KIO_ERR;
    }
    for (int32_t i = 0; i < n; i++) counts[i] = s->tacc[t0 + i];
    double tstate_tot = sum_d(counts, n);
    count_sum = (float)((double)count_sum + tstate_tot);
    if (tstate_tot < (double)o->transition_min_count) {
      num_skipped++;
      continue;
    }
    for (int32_t i = 0; i < n; i++) old_probs[i] = new_probs[i] = expf(tm->log_probs[t0 + i]);
    for (int32_t i = 0; i < n; i++) new_probs[i] = (float)(counts[i] / tstate_tot);
    for (int it = 0; it < 3; it++) {
      float scale = (float)(1.0 / (double)sum_f(new_probs, n));
      for (int32_t i = 0; i < n; i++) new_probs[i] = scale * new_probs[i];
      for (int32_t i = 0; i < n; i++)
        if (new_probs[i] < o->transition_floor) new_probs[i] = o->transition_floor;
    }
    for (int32_t i = 0; i < n; i++) {
      if (new_probs[i] == o->transition_floor) num_floored++;
      double change = counts[i] * (double)(logf(new_probs[i]) - logf(old_probs[i]));
      objf_impr_sum = (float)((double)objf_impr_sum + change);
    }
    for (int32_t i = 0; i < n; i++) {
      float lp = logf(new_probs[i]);
      if (lp - lp != 0.0f) {
        KIO_KALDI(TM_LOGPROB_NAN);
        return KIO_ERR;
      }
      tm->log_probs[t0 + i] = lp;
    }
  }
  char a[32], b[32];
  KIO_KALDI(TM_UPDATE_OBJF, kio_fmt_g(a, objf_impr_sum / count_sum), kio_fmt_g(b, count_sum));
  KIO_KALDI(TM_UPDATE_FLOORED, (int)num_floored, (int)num_skipped, (int)tm->num_tuples);
  *objf_out = objf_impr_sum;
  *count_out = count_sum;
  return kio_tmodel_update_derived(tm);
}

/* ---- one GMM (MleDiagGmmUpdate) ---- */

/* MlObjective: float copies of the statistics against the model, in
 * OpenBLAS's sdot order. */
static float ml_objective(const kio_diag_gmm *g, const gacc_stats *s, int32_t g0, float *tmp) {
  int32_t M = g->num_comp, D = g->dim;
  for (int32_t m = 0; m < M; m++) tmp[m] = (float)s->occ[g0 + m];
  float obj = trn_est_sdot(M, tmp, g->gconsts);
  float tr = 0.0f;
  for (int32_t m = 0; m < M; m++) {
    const double *row = s->mean_acc + (size_t)(g0 + m) * D;
    for (int32_t d = 0; d < D; d++) tmp[d] = (float)row[d];
    tr += trn_est_sdot(D, tmp, g->means_invvars + (size_t)m * D);
  }
  obj += tr;
  tr = 0.0f;
  for (int32_t m = 0; m < M; m++) {
    const double *row = s->var_acc + (size_t)(g0 + m) * D;
    for (int32_t d = 0; d < D; d++) tmp[d] = (float)row[d];
    tr += trn_est_sdot(D, tmp, g->inv_vars + (size_t)m * D);
  }
  obj = (float)((double)obj - 0.5 * (double)tr);
  return obj;
}

/* DiagGmm::RemoveComponent(g, true): the weights renormalised after each. */
static void remove_component(kio_diag_gmm *g, int32_t c) {
  int32_t M = g->num_comp, D = g->dim;
  for (int32_t m = c + 1; m < M; m++) {
    g->weights[m - 1] = g->weights[m];
    g->gconsts[m - 1] = g->gconsts[m];
    memmove(g->means_invvars + (size_t)(m - 1) * D, g->means_invvars + (size_t)m * D,
            sizeof(float) * (size_t)D);
    memmove(g->inv_vars + (size_t)(m - 1) * D, g->inv_vars + (size_t)m * D,
            sizeof(float) * (size_t)D);
  }
  g->num_comp = M - 1;
  float scale = (float)(1.0 / (double)sum_f(g->weights, g->num_comp));
  for (int32_t m = 0; m < g->num_comp; m++) g->weights[m] = scale * g->weights[m];
}

typedef struct {
  float obj_change, count;
  int32_t elems_floored, gauss_floored, gauss_removed;
} gmm_result;

/* The trace of one pdf (trn_est_trace): Gaussian m now holds share[m] of the
 * statistics of Gaussian orig[m] before the update. */
static int trace_start(trn_trace_pdf *tp, int32_t M) {
  if (!tp) return KIO_OK;
  free(tp->orig);
  free(tp->share);
  tp->orig = malloc(sizeof(int32_t) * (size_t)(M ? M : 1));
  tp->share = malloc(sizeof(float) * (size_t)(M ? M : 1));
  if (!tp->orig || !tp->share) { KIO_ERROR("out of memory"); return KIO_ERR; }
  for (int32_t m = 0; m < M; m++) { tp->orig[m] = m; tp->share[m] = 1.0f; }
  tp->n = M;
  return KIO_OK;
}
static void trace_remove(trn_trace_pdf *tp, int32_t c) {
  if (!tp) return;
  for (int32_t m = c + 1; m < tp->n; m++) {
    tp->orig[m - 1] = tp->orig[m];
    tp->share[m - 1] = tp->share[m];
  }
  tp->n--;
}

static int gmm_update(const trn_est_opts *o, const gacc_stats *s, int32_t pdf, kio_diag_gmm *g,
                      double *work, float *ftmp, int32_t *to_remove, gmm_result *res,
                      trn_trace_pdf *tp) {
  unsigned flags = o->update_flags;
  int32_t M = g->num_comp, D = g->dim, g0 = s->pdf_offset[pdf];
  const double *occ = s->occ + g0;
  double occ_sum = sum_d(occ, M);
  memset(res, 0, sizeof *res);
  if (trace_start(tp, M) != KIO_OK) return KIO_ERR;
  if (kio_diag_gmm_compute_gconsts(g) != KIO_OK) goto gconst_fail;
  float obj_old = ml_objective(g, s, g0, ftmp);

  /* DiagGmmNormal: weights, means and variances in double. */
  double *w = work, *mean = w + M, *var = mean + (size_t)M * D, *old_mean = var + (size_t)M * D;
  for (int32_t m = 0; m < M; m++) w[m] = g->weights[m];
  for (size_t i = 0; i < (size_t)M * D; i++) {
    var[i] = 1.0 / (double)g->inv_vars[i];
    mean[i] = (double)g->means_invvars[i] * var[i];
  }
  int32_t nrem = 0;
  for (int32_t m = 0; m < M; m++) {
    double prob = occ_sum > 0.0 ? occ[m] / occ_sum : 1.0 / M;
    if (occ[m] > (double)o->min_gaussian_occupancy && prob > (double)o->min_gaussian_weight) {
      w[m] = prob;
      double *mu = mean + (size_t)m * D, *va = var + (size_t)m * D;
      memcpy(old_mean, mu, sizeof(double) * (size_t)D);
      const double *ma = s->mean_acc + (size_t)(g0 + m) * D;
      const double *vacc = s->var_acc + (size_t)(g0 + m) * D;
      double inv = 1.0 / occ[m];
      for (int32_t d = 0; d < D; d++) mu[d] = inv * ma[d];
      for (int32_t d = 0; d < D; d++) va[d] = inv * vacc[d];
      for (int32_t d = 0; d < D; d++) va[d] += -1.0 * mu[d] * mu[d];
      if (!(flags & TRN_FLAG_MEANS)) {
        for (int32_t d = 0; d < D; d++) old_mean[d] += -1.0 * mu[d];
        for (int32_t d = 0; d < D; d++) va[d] += old_mean[d] * old_mean[d];
      }
      int32_t floored = 0;
      for (int32_t d = 0; d < D; d++)
        if (va[d] < o->min_variance) { va[d] = o->min_variance; floored++; }
      if (floored) {
        res->elems_floored += floored;
        res->gauss_floored++;
      }
    } else if (o->remove_low_count_gaussians && nrem < M - 1) {
      KIO_KALDI(MLE_GAUSS_REMOVED, prob, occ[m], (int)D);
      to_remove[nrem++] = m;
    } else {
      char a[32], b[32];
      KIO_KALDI(MLE_GAUSS_KEPT,
                o->remove_low_count_gaussians ? " it is the last Gaussian: i = "
                                              : " remove-low-count-gaussians == false: g = ",
                (int)m, kio_fmt_g(a, occ[m]), kio_fmt_g(b, prob));
      w[m] = prob > (double)o->min_gaussian_weight ? prob : (double)o->min_gaussian_weight;
    }
  }
  /* DiagGmmNormal::CopyToDiagGmm(gmm, flags) */
  if (flags & TRN_FLAG_WEIGHTS)
    for (int32_t m = 0; m < M; m++) g->weights[m] = (float)w[m];
  if (flags & TRN_FLAG_VARS) {
    for (size_t i = 0; i < (size_t)M * D; i++) {
      float iv = (float)(1.0 / (double)(float)var[i]);
      if (!(flags & TRN_FLAG_MEANS)) {  /* the old mean, from the old model */
        double old_m = (double)g->means_invvars[i] * (1.0 / (double)g->inv_vars[i]);
        g->means_invvars[i] = (float)old_m * iv;
      }
      g->inv_vars[i] = iv;
    }
  }
  if (flags & TRN_FLAG_MEANS)
    for (size_t i = 0; i < (size_t)M * D; i++)
      g->means_invvars[i] = (float)mean[i] * g->inv_vars[i];
  if (kio_diag_gmm_compute_gconsts(g) != KIO_OK) goto gconst_fail;
  float obj_new = ml_objective(g, s, g0, ftmp);
  res->obj_change = obj_new - obj_old;
  res->count = (float)occ_sum;
  if (nrem > 0) {
    for (int32_t i = 0; i < nrem; i++) {
      remove_component(g, to_remove[i] - i);
      trace_remove(tp, to_remove[i] - i);
    }
    if (kio_diag_gmm_compute_gconsts(g) != KIO_OK) goto gconst_fail;
  }
  res->gauss_removed = nrem;
  return KIO_OK;
gconst_fail:
  KIO_KALDI(GCONSTS, kio_last_error(), (int)pdf);
  return KIO_ERR;
}

/* ---- mixing up (AmDiagGmm::SplitByCount, DiagGmm::Split) ---- */

/* Kaldi's RandGauss over rand(): the first uniform draw feeds the log, the
 * second the cosine (the order the bundle's build evaluates them in). */
static float rand_uniform(galign_rand *r) {
  return (float)(((double)galign_rand_next(r) + 1.0) / (2147483647.0 + 2.0));
}
static float rand_gauss(galign_rand *r) {
  float a = sqrtf(-2.0f * logf(rand_uniform(r)));
  float u = rand_uniform(r);
  float c = cosf((float)(2.0 * 3.14159265358979323846 * (double)u));
  return a * c;
}

static int gmm_grow(kio_diag_gmm *g, int32_t target) {
  int32_t D = g->dim;
  float *w = realloc(g->weights, sizeof(float) * (size_t)target);
  if (w) g->weights = w;
  float *gc = realloc(g->gconsts, sizeof(float) * (size_t)target);
  if (gc) g->gconsts = gc;
  float *mi = realloc(g->means_invvars, sizeof(float) * (size_t)target * (size_t)D);
  if (mi) g->means_invvars = mi;
  float *iv = realloc(g->inv_vars, sizeof(float) * (size_t)target * (size_t)D);
  if (iv) g->inv_vars = iv;
  if (!w || !gc || !mi || !iv) {
    KIO_ERROR("out of memory splitting to %d Gaussians", (int)target);
    return KIO_ERR;
  }
  return KIO_OK;
}

static int gmm_split(kio_diag_gmm *g, int32_t target, float perturb_factor, galign_rand *r,
                     float *rand_vec, trn_trace_pdf *tp) {
  int32_t cur = g->num_comp, D = g->dim;
  if (target < cur || cur == 0) {
    KIO_KALDI(GMM_SPLIT_CANNOT, (int)cur, (int)target);
    return KIO_ERR;
  }
  if (target == cur) {
    KIO_KALDI(GMM_SPLIT_ALREADY);
    return KIO_OK;
  }
  if (gmm_grow(g, target) != KIO_OK) return KIO_ERR;
  if (tp) {
    int32_t *no = realloc(tp->orig, sizeof(int32_t) * (size_t)target);
    if (no) tp->orig = no;
    float *ns = realloc(tp->share, sizeof(float) * (size_t)target);
    if (ns) tp->share = ns;
    if (!no || !ns) { KIO_ERROR("out of memory"); return KIO_ERR; }
  }
  while (cur < target) {
    float max_w = g->weights[0];
    int32_t mx = 0;
    for (int32_t i = 1; i < cur; i++)
      if (g->weights[i] > max_w) { max_w = g->weights[i]; mx = i; }
    g->weights[mx] *= 0.5f;
    g->weights[cur] = g->weights[mx];
    if (tp) {  /* the statistics split as the weight */
      tp->share[mx] *= 0.5f;
      tp->share[cur] = tp->share[mx];
      tp->orig[cur] = tp->orig[mx];
      tp->n = cur + 1;
    }
    const float *ivm = g->inv_vars + (size_t)mx * D;
    for (int32_t d = 0; d < D; d++) rand_vec[d] = rand_gauss(r) * sqrtf(ivm[d]);
    memcpy(g->inv_vars + (size_t)cur * D, ivm, sizeof(float) * (size_t)D);
    float *mc = g->means_invvars + (size_t)cur * D, *mm = g->means_invvars + (size_t)mx * D;
    memcpy(mc, mm, sizeof(float) * (size_t)D);
    saxpy(mc, perturb_factor, rand_vec, D);
    saxpy(mm, -perturb_factor, rand_vec, D);
    cur++;
  }
  g->num_comp = target;
  return kio_diag_gmm_compute_gconsts(g);
}

/* GetSplitTargets' std::priority_queue<CountStats> as libstdc++ runs it (push_heap /
 * pop_heap on a vector), so that ties break as in Kaldi. */
typedef struct { int32_t pdf, n; float occ; } count_stats;
static int cs_less(const count_stats *a, const count_stats *b) {
  return (double)a->occ / ((double)a->n + 1.0e-10) < (double)b->occ / ((double)b->n + 1.0e-10);
}
static void heap_push_hole(count_stats *h, size_t hole, size_t top, count_stats v) {
  size_t parent = (hole - 1) / 2;
  while (hole > top && cs_less(&h[parent], &v)) {
    h[hole] = h[parent];
    hole = parent;
    parent = (hole - 1) / 2;
  }
  h[hole] = v;
}
static void heap_push(count_stats *h, size_t *len, count_stats v) {
  h[*len] = v;
  (*len)++;
  heap_push_hole(h, *len - 1, 0, v);
}
static void heap_pop(count_stats *h, size_t *len) {
  size_t n = *len;
  if (n > 1) {
    count_stats v = h[n - 1];
    h[n - 1] = h[0];
    size_t l = n - 1, hole = 0, child = 0;
    while (child < (l - 1) / 2) {
      child = 2 * (child + 1);
      if (cs_less(&h[child], &h[child - 1])) child--;
      h[hole] = h[child];
      hole = child;
    }
    if ((l & 1) == 0 && child == (l - 2) / 2) {
      child = 2 * (child + 1);
      h[hole] = h[child - 1];
      hole = child - 1;
    }
    heap_push_hole(h, hole, 0, v);
  }
  (*len)--;
}

static int split_by_count(kio_am_gmm *am, const float *pdf_occs, int32_t target,
                          float perturb_factor, float power, float min_count,
                          trn_est_trace *trace);
int trn_est_split_by_count(kio_am_gmm *am, const float *pdf_occs, int32_t target,
                           float perturb_factor, float power, float min_count) {
  return split_by_count(am, pdf_occs, target, perturb_factor, power, min_count, NULL);
}
static int split_by_count(kio_am_gmm *am, const float *pdf_occs, int32_t target,
                          float perturb_factor, float power, float min_count,
                          trn_est_trace *trace) {
  int32_t P = am->num_pdfs, gauss_at_start = 0, max_target = 1;
  for (int32_t p = 0; p < P; p++) gauss_at_start += am->pdfs[p].num_comp;
  count_stats *h = malloc(sizeof *h * (size_t)(P + 1));
  int32_t *targets = malloc(sizeof(int32_t) * (size_t)P);
  float *rand_vec = malloc(sizeof(float) * (size_t)(am->dim > 0 ? am->dim : 1));
  if (!h || !targets || !rand_vec) {
    free(h); free(targets); free(rand_vec);
    KIO_ERROR("out of memory");
    return KIO_ERR;
  }
  size_t len = 0;
  for (int32_t p = 0; p < P; p++) {
    count_stats c = { p, 1, (float)pow((double)pdf_occs[p], (double)power) };
    heap_push(h, &len, c);
  }
  for (int32_t num_gauss = P; num_gauss < target;) {
    count_stats top = h[0];
    if (top.occ == 0) {
      char a[32];
      KIO_KALDI(SPLIT_TARGETS, (int)target, kio_fmt_g(a, min_count));
      break;
    }
    heap_pop(h, &len);
    float orig_occ = pdf_occs[top.pdf];
    if ((float)(top.n + 1) * min_count >= orig_occ) {
      top.occ = 0;  /* min-count reached: this pdf is not split again */
    } else {
      top.n++;
      num_gauss++;
    }
    heap_push(h, &len, top);
  }
  while (len > 0) {
    targets[h[0].pdf] = h[0].n;
    if (h[0].n > max_target) max_target = h[0].n;
    heap_pop(h, &len);
  }
  free(h);
  galign_rand r;
  galign_srand(&r, 1);  /* a fresh process: rand() as if srand(1) */
  int rc = KIO_OK;
  for (int32_t p = 0; p < P && rc == KIO_OK; p++)
    if (am->pdfs[p].num_comp < targets[p])
      rc = gmm_split(&am->pdfs[p], targets[p], perturb_factor, &r, rand_vec,
                     trace ? &trace->pdf[p] : NULL);
  free(targets);
  free(rand_vec);
  if (rc != KIO_OK) return KIO_ERR;
  int32_t after = 0;
  for (int32_t p = 0; p < P; p++) after += am->pdfs[p].num_comp;
  char a[32], b[32], c[32];
  KIO_KALDI(SPLIT_BY_COUNT, (int)P, (int)target, kio_fmt_g(a, power), kio_fmt_g(b, perturb_factor),
            kio_fmt_g(c, min_count), (int)gauss_at_start, (int)after);
  return KIO_OK;
}

/* ---- gmm-est ---- */

static int write_occs(const char *wx, const float *occs, int32_t n) {
  kio_output *out = NULL;
  if (kio_output_open(&out, wx, 0, 1) != KIO_OK) return KIO_ERR;
  kio_vector v = { n, (float *)occs, 0 };
  int rc = kio_vector_write(kio_output_stream(out), 0, &v);
  if (rc != KIO_OK) KIO_ERROR("Error writing occupancies to %s: %s", wx, kio_last_error());
  if (kio_output_close(out) != KIO_OK) {
    if (rc == KIO_OK) KIO_ERROR("Error closing %s", wx);
    rc = KIO_ERR;
  }
  return rc;
}

void trn_est_trace_free(trn_est_trace *t) {
  for (int32_t p = 0; t->pdf && p < t->num_pdfs; p++) {
    free(t->pdf[p].orig);
    free(t->pdf[p].share);
  }
  free(t->pdf);
  memset(t, 0, sizeof *t);
}

static int g_threads;  /* trn_est_set_threads; 0: the process's share */

void trn_est_set_threads(int n) { __atomic_store_n(&g_threads, n > 0 ? n : 0, __ATOMIC_RELAXED); }

int trn_est_threads(int max_threads) {
  int n = __atomic_load_n(&g_threads, __ATOMIC_RELAXED);
  return n > 0 ? n : kio_cpu_share(max_threads);
}

/* ---- MleAmDiagGmmUpdate's pdfs on several threads ----
 * Each pdf's update reads only its own statistics and GMM, so pdfs run on
 * this process's CPU share of threads with the serial bits; each pdf's
 * lines are kept and printed in pdf order, up to the first failing pdf, as
 * Kaldi's loop would print them. */
typedef struct {
  const trn_est_opts *o;
  const gacc_stats *s;
  kio_am_gmm *am;
  trn_est_trace *trace;
  gmm_result *res;
  kio_log_deferred **logs;  /* per pdf; NULL: one thread, lines printed */
  int32_t maxM;
  pthread_mutex_t mu;
  int32_t next, fail_at;    /* next pdf to take; first failed pdf (num_pdfs: none) */
} pdf_job;

enum { PDF_CHUNK = 16 };

static void *pdf_worker(void *arg) {
  pdf_job *j = arg;
  int32_t P = j->am->num_pdfs, D = j->am->dim, M = j->maxM;
  double *work = malloc(sizeof(double) * ((size_t)M * (1 + 2 * (size_t)D) + (size_t)D));
  float *ftmp = malloc(sizeof(float) * (size_t)(M > D ? M : D));
  int32_t *to_remove = malloc(sizeof(int32_t) * (size_t)M);
  for (;;) {
    pthread_mutex_lock(&j->mu);
    int32_t p0 = j->next < j->fail_at ? j->next : P;
    j->next = p0 + PDF_CHUNK;
    pthread_mutex_unlock(&j->mu);
    if (p0 >= P) break;
    for (int32_t p = p0; p < p0 + PDF_CHUNK && p < P; p++) {
      if (j->logs) kio_log_defer(&j->logs[p]);
      int rc = KIO_ERR;
      if (!work || !ftmp || !to_remove) KIO_ERROR("out of memory");
      else rc = gmm_update(j->o, j->s, p, &j->am->pdfs[p], work, ftmp, to_remove, &j->res[p],
                           j->trace ? &j->trace->pdf[p] : NULL);
      if (j->logs) kio_log_defer(NULL);
      if (rc != KIO_OK) {
        pthread_mutex_lock(&j->mu);
        if (p < j->fail_at) j->fail_at = p;
        pthread_mutex_unlock(&j->mu);
        break;
      }
    }
  }
  free(work);
  free(ftmp);
  free(to_remove);
  return NULL;
}

static int update_pdfs(const trn_est_opts *o, const gacc_stats *s, kio_am_gmm *am,
                       trn_est_trace *trace, int32_t maxM, gmm_result *res) {
  int32_t P = am->num_pdfs;
  /* a thread per ~2000 Gaussians at most: small models stay on this one */
  int threads = trn_est_threads((s->num_gauss / 2000) + 1);
  if (threads > (P + PDF_CHUNK - 1) / PDF_CHUNK) threads = (P + PDF_CHUNK - 1) / PDF_CHUNK;
  if (threads < 1) threads = 1;
  pdf_job j = { .o = o, .s = s, .am = am, .trace = trace, .res = res, .maxM = maxM,
                .next = 0, .fail_at = P };
  pthread_t *th = NULL;
  if (threads > 1) {
    j.logs = calloc((size_t)P, sizeof *j.logs);
    th = malloc(sizeof *th * (size_t)threads);
    if (!j.logs || !th) {
      free(j.logs);
      free(th);
      j.logs = NULL;
      th = NULL;
      threads = 1;
    }
  }
  (void)kio_blas_profile();  /* chosen (and its line logged) here, not in a worker */
  pthread_mutex_init(&j.mu, NULL);
  int started = 0;
  for (int t = 1; t < threads; t++)
    if (pthread_create(&th[started], NULL, pdf_worker, &j) == 0) started++;
  pdf_worker(&j);
  for (int t = 0; t < started; t++) pthread_join(th[t], NULL);
  pthread_mutex_destroy(&j.mu);
  if (j.logs) {
    for (int32_t p = 0; p < P; p++) {
      if (p <= j.fail_at) kio_log_replay(&j.logs[p]);
      else kio_log_discard(&j.logs[p]);
    }
  }
  free(j.logs);
  free(th);
  return j.fail_at < P ? KIO_ERR : KIO_OK;
}

int trn_est_update(const trn_est_opts *o, const gacc_stats *s, kio_tmodel *tm, kio_am_gmm *am,
                   const char *occs_wx, trn_est_report *r) {
  return trn_est_update_traced(o, s, tm, am, occs_wx, r, NULL);
}

int trn_est_update_traced(const trn_est_opts *o, const gacc_stats *s, kio_tmodel *tm,
                          kio_am_gmm *am, const char *occs_wx, trn_est_report *r,
                          trn_est_trace *trace) {
  memset(r, 0, sizeof *r);
  if (o->share_for_pdfs || o->mix_down != 0) {
    KIO_ERROR("--%s is not supported by the in-process estimation",
              o->share_for_pdfs ? "share-for-pdfs" : "mix-down");
    return KIO_ERR;
  }
  if (s->num_tids != tm->num_tids) {
    KIO_ERROR("Statistics have %d transition-ids, the model %d", (int)s->num_tids,
              (int)tm->num_tids);
    return KIO_ERR;
  }
  if (s->num_pdfs != am->num_pdfs || s->dim != am->dim) {
    KIO_ERROR("Statistics (%d pdfs, dimension %d) do not match the model (%d pdfs, dimension %d)",
              (int)s->num_pdfs, (int)s->dim, (int)am->num_pdfs, (int)am->dim);
    return KIO_ERR;
  }
  int32_t maxM = 1;
  for (int32_t p = 0; p < am->num_pdfs; p++) {
    int32_t M = am->pdfs[p].num_comp;
    if (s->pdf_offset[p + 1] - s->pdf_offset[p] != M) {
      KIO_ERROR("Statistics of pdf %d have %d Gaussians, the model %d", (int)p,
                (int)(s->pdf_offset[p + 1] - s->pdf_offset[p]), (int)M);
      return KIO_ERR;
    }
    if (M > maxM) maxM = M;
  }
  char a[32], b[32];
  double t0 = kio_now_s();
  if (o->update_flags & TRN_FLAG_TRANS) {
    if (transition_update(o, s, tm, &r->trans_objf_impr, &r->trans_count) != KIO_OK)
      return KIO_ERR;
    KIO_KALDI(EST_TRANS, kio_fmt_g(a, r->trans_objf_impr / r->trans_count),
              kio_fmt_g(b, r->trans_count));
  }
  r->tot_like = (float)s->total_like;
  r->tot_t = (float)s->total_frames;
  float *pdf_occs = malloc(sizeof(float) * (size_t)am->num_pdfs);
  gmm_result *res = malloc(sizeof(gmm_result) * (size_t)(am->num_pdfs ? am->num_pdfs : 1));
  if (!pdf_occs || !res) {
    free(pdf_occs); free(res);
    KIO_ERROR("out of memory");
    return KIO_ERR;
  }
  int rc = KIO_OK;
  if (trace) {
    trn_est_trace_free(trace);
    trace->pdf = calloc((size_t)(am->num_pdfs ? am->num_pdfs : 1), sizeof *trace->pdf);
    if (!trace->pdf) { KIO_ERROR("out of memory"); rc = KIO_ERR; }
    trace->num_pdfs = am->num_pdfs;
  }
  int32_t elems_floored = 0, gauss_floored = 0, gauss_removed = 0;
  float tot_obj = 0.0f, tot_count = 0.0f;
  double t1 = kio_now_s();
  r->secs_trans = t1 - t0;
  if (rc == KIO_OK) rc = update_pdfs(o, s, am, trace, maxM, res);
  for (int32_t p = 0; p < am->num_pdfs && rc == KIO_OK; p++) {  /* Kaldi's order */
    tot_obj += res[p].obj_change;
    tot_count += res[p].count;
    elems_floored += res[p].elems_floored;
    gauss_floored += res[p].gauss_floored;
    gauss_removed += res[p].gauss_removed;
  }
  if (rc == KIO_OK) {
    int32_t ng = 0;
    for (int32_t p = 0; p < am->num_pdfs; p++) ng += am->pdfs[p].num_comp;
    KIO_KALDI(MLE_AM_FLOORED, (int)elems_floored, (int)gauss_floored, (int)ng);
    if (o->remove_low_count_gaussians)
      KIO_KALDI(MLE_AM_REMOVED, (int)gauss_removed, kio_fmt_g(a, o->min_gaussian_occupancy));
    r->gmm_objf_impr = tot_obj;
    r->gmm_count = tot_count;
    KIO_KALDI(EST_GMM_OBJF, kio_fmt_g(a, tot_obj / tot_count), kio_fmt_g(b, tot_count));
    KIO_KALDI(EST_GMM_LIKE, kio_fmt_g(a, r->tot_like / r->tot_t), kio_fmt_g(b, r->tot_t));
    r->gauss_before_split = r->gauss_after = ng;
  }
  double t2 = kio_now_s(), t3 = t2;
  r->secs_pdfs = t2 - t1;
  int want_occs = occs_wx && *occs_wx;
  if (rc == KIO_OK && (o->mix_up != 0 || want_occs)) {
    for (int32_t p = 0; p < am->num_pdfs; p++) {
      pdf_occs[p] = (float)sum_d(s->occ + s->pdf_offset[p], s->pdf_offset[p + 1] - s->pdf_offset[p]);
    }
    if (o->mix_up != 0)
      rc = split_by_count(am, pdf_occs, o->mix_up, o->perturb_factor, o->power, o->min_count,
                          trace);
    t3 = kio_now_s();
    r->secs_mixup = t3 - t2;
    if (rc == KIO_OK && want_occs) rc = write_occs(occs_wx, pdf_occs, am->num_pdfs);
    r->secs_occs = kio_now_s() - t3;
    int32_t ng = 0;
    for (int32_t p = 0; p < am->num_pdfs; p++) ng += am->pdfs[p].num_comp;
    r->gauss_after = ng;
  }
  free(res);
  free(pdf_occs);
  return rc;
}
