/* A job's equal alignment, realignment and accumulation, with the lines of
 * align-equal-compiled, gmm-boost-silence, gmm-align-compiled and
 * gmm-acc-stats-ali (their functions, files and lines as in Kaldi's logs). */
#include "train/trn-pass.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/sys/kaldi-msg.h"
#include "base/sys/log.h"


static int picked(const trn_range *r, int32_t i) { return !r->pick || r->pick[i]; }

/* ---- gmm-boost-silence ---- */

static void boost_lines(int32_t np, int shared, float boost) {
  const char *old = kio_log_thread_program();
  kio_log_set_thread_program("gmm-boost-silence");
  if (shared)
    KIO_KALDI(BOOST_SHARED);
  char b[32];
  KIO_KALDI(BOOST_DONE, (int)np, kio_fmt_g(b, boost));
  KIO_KALDI(BOOST_WROTE);
  kio_log_set_thread_program(old);
}

void trn_boost_lines(const kio_tmodel *tm, const int32_t *phones, int32_t nphones, float boost) {
  int32_t *pdfs = malloc(sizeof(int32_t) * (2 * (size_t)tm->num_tuples + 1));
  if (!pdfs) return;
  int shared;
  int32_t np = kio_tmodel_pdfs_for_phones(tm, phones, nphones, pdfs, &shared);
  boost_lines(np, shared, boost);
  free(pdfs);
}

int trn_boost_silence(const kio_tmodel *tm, const kio_am_gmm *am, const int32_t *phones,
                      int32_t nphones, float boost, kio_am_gmm *out) {
  memset(out, 0, sizeof *out);
  int32_t *pdfs = malloc(sizeof(int32_t) * (2 * (size_t)tm->num_tuples + 1));
  if (!pdfs) { KIO_ERROR("out of memory"); return KIO_ERR; }
  int shared;
  int32_t np = kio_tmodel_pdfs_for_phones(tm, phones, nphones, pdfs, &shared);
  int rc = KIO_OK;
  if (boost != 1.0f) {  /* a copy with the weights scaled (1: the model as it is) */
    char *buf = NULL;
    size_t len = 0;
    rc = kio_model_to_bytes(tm, am, &buf, &len);
    kio_tmodel tm2;
    memset(&tm2, 0, sizeof tm2);
    if (rc == KIO_OK) rc = kio_model_from_bytes(buf, len, &tm2, out);
    kio_tmodel_free(&tm2);
    free(buf);
    for (int32_t i = 0; i < np && rc == KIO_OK; i++) {
      kio_diag_gmm *g = &out->pdfs[pdfs[i]];
      for (int32_t m = 0; m < g->num_comp; m++) g->weights[m] = boost * g->weights[m];
      rc = kio_diag_gmm_compute_gconsts(g);
    }
    if (rc != KIO_OK) KIO_ERROR("%s", kio_last_error());
  }
  if (rc == KIO_OK) boost_lines(np, shared, boost);
  free(pdfs);
  return rc;
}

/* ---- equal alignment ---- */

int trn_equal_align(trn_data *d, const trn_range *r) {
  const char *old = kio_log_thread_program();
  kio_log_set_thread_program("align-equal-compiled");
  long done = 0, error = 0;
  for (int32_t i = r->lo; i < r->hi; i++) {
    trn_utt *u = &d->u[i];
    if (!picked(r, i) || !u->graph) continue;
    free(u->ali);
    u->ali = NULL;
    u->ali_len = 0;
    if (u->feats->rows == 0) {
      KIO_KALDI(AEC_ZERO_LENGTH, u->key);
      error++;
      continue;
    }
    if (u->graph->start < 0) {
      KIO_KALDI(AEC_EMPTY_GRAPH, u->key);
      error++;
      continue;
    }
    u->ali = malloc(sizeof(int32_t) * (size_t)u->feats->rows);
    if (!u->ali) { KIO_ERROR("out of memory"); kio_log_set_thread_program(old); return KIO_ERR; }
    if (galign_equal_align(u->graph, u->feats->rows, galign_key_seed(u->key), u->ali)) {
      u->ali_len = u->feats->rows;
      done++;
    } else {
      free(u->ali);
      u->ali = NULL;
      KIO_KALDI(AEC_NOT_ALIGNED, u->key);  /* sic */
      error++;
    }
  }
  if (done != 0 && error == 0)
    KIO_KALDI(AEC_SUCCESS, done);
  else
    KIO_KALDI(AEC_COMPUTED, done, 0L, error);
  kio_log_set_thread_program(old);
  return KIO_OK;
}

/* ---- realignment ---- */

typedef struct {
  trn_data *d;
  const int32_t *idx;
  galign_graph *g;
  int *rc;
  int32_t n;
  int nth, t;
  const kio_tmodel *tm;
  const galign_opts *o;
  kio_log_deferred *log;
} prep_job;

static void *prep_thread(void *arg) {
  prep_job *p = arg;
  kio_log_defer(&p->log);
  for (int32_t k = p->t; k < p->n; k += p->nth)
    p->rc[k] = galign_graph_prepare(p->d->u[p->idx[k]].graph, p->tm, p->o, &p->g[k]);
  kio_log_defer(NULL);
  return NULL;
}

enum { ALIGN_CHUNK = 4096 };

/* Prepares graphs k0..k1 of idx on threads threads (g[k - k0]). */
static int prepare_graphs(trn_data *d, const int32_t *idx, int32_t n, galign_graph *g, int *prc,
                          const kio_tmodel *tm, const galign_opts *o, int threads) {
  if (threads < 1) threads = 1;
  if (threads > 64) threads = 64;
  prep_job pj[64];
  pthread_t th[64];
  int started[64] = {0};
  for (int t = 0; t < threads; t++) {
    pj[t] = (prep_job){ d, idx, g, prc, n, threads, t, tm, o, NULL };
    started[t] = t > 0 && pthread_create(&th[t], NULL, prep_thread, &pj[t]) == 0;
  }
  prep_thread(&pj[0]);
  for (int t = 1; t < threads; t++)
    if (started[t]) pthread_join(th[t], NULL);
    else prep_thread(&pj[t]);
  for (int t = 0; t < threads; t++) kio_log_replay(&pj[t].log);
  for (int32_t k = 0; k < n; k++)
    if (prc[k] != KIO_OK) return KIO_ERR;
  return KIO_OK;
}

int trn_align(trn_data *d, const trn_range *r, galign_aligner *a, const kio_tmodel *tm,
              const galign_opts *o, int threads, int32_t stage, trn_ali_note *note) {
  int32_t *idx = malloc(sizeof(int32_t) * ALIGN_CHUNK);
  galign_graph *g = calloc(ALIGN_CHUNK, sizeof *g);
  int *prc = calloc(ALIGN_CHUNK, sizeof(int));
  const galign_graph **gp = malloc(sizeof *gp * ALIGN_CHUNK);
  const kio_matrix **fp = malloc(sizeof *fp * ALIGN_CHUNK);
  galign_result *res = calloc(ALIGN_CHUNK, sizeof *res);
  int32_t *slot = malloc(sizeof(int32_t) * ALIGN_CHUNK);
  int rc = KIO_OK;
  if (!idx || !g || !prc || !gp || !fp || !res || !slot) {
    KIO_ERROR("out of memory");
    rc = KIO_ERR;
    goto done;
  }
  /* Chunks of the range's utterances, whatever their jobs: the device gets
   * large batches, and only a chunk's graphs are held with this model's
   * transition probabilities at a time. */
  for (int32_t i = r->lo; i < r->hi && rc == KIO_OK;) {
    int32_t n = 0;
    for (; i < r->hi && n < ALIGN_CHUNK; i++) {
      note[i].state = TRN_ALI_NONE;
      if (picked(r, i) && d->u[i].graph) idx[n++] = i;
    }
    if (prepare_graphs(d, idx, n, g, prc, tm, o, threads) != KIO_OK) { rc = KIO_ERR; break; }
    int32_t m = 0;
    for (int32_t k = 0; k < n; k++) {
      const trn_utt *u = &d->u[idx[k]];
      slot[k] = -1;
      if (u->feats->rows == 0 || u->graph->start < 0) continue;
      slot[k] = m;
      gp[m] = &g[k];
      fp[m] = u->feats;
      m++;
    }
    if (m > 0 && galign_align_batch(a, m, gp, fp, 0, res) != KIO_OK) { rc = KIO_ERR; break; }
    for (int32_t k = 0; k < n; k++) {
      trn_utt *u = &d->u[idx[k]];
      trn_ali_note *nt = &note[idx[k]];
      free(u->ali);
      u->ali = NULL;
      u->ali_len = 0;
      nt->retried = 0;
      nt->like = 0.0f;
      if (u->feats->rows == 0) { nt->state = TRN_ALI_ZERO_LENGTH; continue; }
      if (u->graph->start < 0) { nt->state = TRN_ALI_EMPTY_GRAPH; continue; }
      galign_result *rs = &res[slot[k]];
      nt->retried = (uint8_t)(rs->retried != 0);
      if (!rs->ok) { nt->state = TRN_ALI_FAILED; continue; }
      nt->state = TRN_ALI_OK;
      nt->like = rs->like;
      u->ali = rs->ali;  /* taken */
      rs->ali = NULL;
      u->ali_len = u->feats->rows;
      u->ali_stage = stage;
    }
    for (int32_t s = 0; s < m; s++) galign_result_free(&res[s]);
  }
done:
  for (int32_t k = 0; g && k < ALIGN_CHUNK; k++) galign_graph_free(&g[k]);
  for (int32_t s = 0; res && s < ALIGN_CHUNK; s++) galign_result_free(&res[s]);
  free(idx);
  free(g);
  free(prc);
  free(gp);
  free(fp);
  free(res);
  free(slot);
  return rc;
}

void trn_align_lines(const trn_data *d, const trn_range *r, const trn_ali_note *note,
                     const galign_opts *o) {
  long num_done = 0, num_err = 0, num_retry = 0;
  double tot_like = 0.0;
  int64_t frames = 0;
  char b1[32];
  for (int32_t i = r->lo; i < r->hi; i++) {
    const trn_utt *u = &d->u[i];
    const trn_ali_note *nt = &note[i];
    if (nt->state == TRN_ALI_NONE) continue;
    if (nt->state == TRN_ALI_ZERO_LENGTH) {
      KIO_KALDI(GAC_ZERO_LENGTH, u->key);
      num_err++;
      continue;
    }
    KIO_KALDI(GAC_KEY, u->key);
    if (nt->state == TRN_ALI_EMPTY_GRAPH) {
      KIO_KALDI(ALIGN_EMPTY_GRAPH, u->key);
      num_err++;
      continue;
    }
    if (nt->retried) {
      num_retry++;
      KIO_KALDI(ALIGN_RETRY, u->key, kio_fmt_g(b1, o->retry_beam));
    }
    if (nt->state == TRN_ALI_FAILED) {
      KIO_KALDI(ALIGN_FAILED, u->key, (int)u->feats->rows);
      num_err++;
      continue;
    }
    num_done++;
    tot_like += nt->like;
    frames += u->feats->rows;
  }
  KIO_KALDI(GAC_OVERALL, kio_fmt_g(b1, tot_like / (double)frames), (long long)frames);
  KIO_KALDI(GAC_RETRIED, num_retry, num_done + num_err);
  KIO_KALDI(GAC_DONE, num_done, num_err);
}

/* ---- accumulation ---- */

enum { ACC_CHUNK = 1024 };

int trn_accumulate(const trn_range *r, gacc_acc *acc, int lines) {
  const trn_data *d = r->d;
  gacc_utt *utts = malloc(sizeof *utts * ACC_CHUNK);
  gacc_utt_result *res = malloc(sizeof *res * ACC_CHUNK);
  int32_t *which = malloc(sizeof(int32_t) * ACC_CHUNK);
  if (!utts || !res || !which) {
    free(utts); free(res); free(which);
    KIO_ERROR("out of memory");
    return KIO_ERR;
  }
  long num_done = 0, num_err = 0;
  double tot_like = 0.0;
  int64_t tot_t = 0;
  int rc = KIO_OK;
  char b[32];
  int32_t i = r->lo;
  while (i < r->hi && rc == KIO_OK) {
    int32_t n = 0, first = i;
    for (; i < r->hi && n < ACC_CHUNK; i++) {
      const trn_utt *u = &d->u[i];
      if (!picked(r, i) || !u->ali || u->ali_len != u->feats->rows) continue;
      utts[n] = (gacc_utt){ u->key, u->feats, u->ali };
      which[n++] = i;
    }
    if (n > 0 && gacc_accumulate_batch(acc, n, utts, res) != KIO_OK) { rc = KIO_ERR; break; }
    /* lines in input order, as gmm-acc-stats-ali prints them */
    int32_t k = 0;
    for (int32_t j = first; j < i; j++) {
      const trn_utt *u = &d->u[j];
      if (!picked(r, j)) continue;
      if (!u->ali) {
        if (lines) KIO_KALDI(ACC_NO_ALI, u->key);
        num_err++;
        continue;
      }
      if (u->ali_len != u->feats->rows) {
        if (lines)
          KIO_KALDI(ACC_WRONG_SIZE, (int)u->ali_len, (int)u->feats->rows);
        num_err++;
        continue;
      }
      const gacc_utt_result *rs = &res[k++];
      num_done++;
      tot_like += (double)rs->like;
      tot_t += rs->frames;
      if (lines && num_done % 50 == 0) {
        float avg = rs->frames > 0 ? rs->like / (float)rs->frames : -NAN;
        KIO_KALDI(ACC_PROCESSED, num_done, u->key, kio_fmt_g(b, avg), (int)rs->frames);
      }
    }
  }
  if (rc == KIO_OK && lines) {
    KIO_KALDI(ACC_DONE, num_done, num_err);
    double avg = tot_t > 0 ? tot_like / (double)tot_t : -NAN;
    KIO_KALDI(ACC_OVERALL, kio_fmt_g(b, avg), (long long)tot_t);
    KIO_KALDI(ACC_WRITTEN);
  }
  free(utts);
  free(res);
  free(which);
  return rc;
}
