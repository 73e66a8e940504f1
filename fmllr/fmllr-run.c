/* gmm-est-fmllr's loop (gmmbin/gmm-est-fmllr.cc): per speaker of the
 * spk2utt table (features and posteriors looked up by utterance), or per
 * utterance of the features; Kaldi's warnings, counts and log lines. The
 * features rspecifier goes through base/feat's in-process chain where it
 * is one of the recipes' pipes; the posteriors are a table (or the
 * alignments' pipe in-process, gpu-acc/mllt-postpipe.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/io/table.h"
#include "base/matrix/matrix.h"
#include "base/sys/kaldi-msg.h"
#include "base/sys/log.h"
#include "fmllr/fmllr-internal.h"
#include "gpu-acc/mllt-postpipe.h"
#include "gpu-acc/mllt.h"

/* ---- spk2utt: Kaldi's TokenVectorHolder (text: the rest of the line,
 * split at spaces, tabs and CRs) ---- */
typedef struct {
  int32_t n, cap;
  char **tok;
  char *line;
  size_t line_cap;
} tokvec;

static int tv_read(FILE *f, int binary, void *obj) {
  tokvec *v = obj;
  (void)binary;
  ssize_t len = getline(&v->line, &v->line_cap, f);
  v->n = 0;
  if (len < 0) {
    kio_set_error("end of file reading a token vector");
    return KIO_ERR;
  }
  for (char *p = v->line, *save = NULL, *t; (t = strtok_r(p, " \t\r\n", &save)); p = NULL) {
    if (v->n == v->cap) {
      int32_t cap = v->cap ? 2 * v->cap : 16;
      char **nt = realloc(v->tok, sizeof(char *) * (size_t)cap);
      if (!nt) {
        kio_set_error("out of memory");
        return KIO_ERR;
      }
      v->tok = nt;
      v->cap = cap;
    }
    v->tok[v->n++] = t;
  }
  return KIO_OK;
}
static int tv_write(FILE *f, int binary, const void *obj) {
  const tokvec *v = obj;
  (void)binary;
  for (int32_t i = 0; i < v->n; i++) fprintf(f, "%s ", v->tok[i]);
  putc('\n', f);
  return KIO_OK;
}
static void tv_free(void *obj) {
  tokvec *v = obj;
  free(v->tok);
  free(v->line);
  memset(v, 0, sizeof *v);
}
static const kio_holder tokvec_holder = {"TokenVector", sizeof(tokvec), 0, tv_read, tv_write,
                                         tv_free, NULL};

typedef struct {
  const fmllr_opts *o;
  kio_tmodel tm;
  kio_am_gmm am;
  fmllr_accs *s;
  gacc_posts_in posts;
  kio_writer *w;
  float *xform;
  long done, no_post, other;
  double tot_impr, tot_t;
} run_ctx;

/* AccumulateForUtterance: every pair of every frame in order. */
static int acc_utt(run_ctx *c, const char *key, const kio_matrix *x, const gacc_post *p) {
  const kio_tmodel *tm = &c->tm;
  for (int32_t t = 0; t < p->frames; t++)
    for (int32_t j = p->off[t]; j < p->off[t + 1]; j++) {
      int32_t tid = p->tid[j];
      if (tid < 1 || tid > tm->num_tids) {
        KIO_ERROR("Transition-id %d out of range [1, %d] at frame %d of the posteriors for "
                  "utterance %s", (int)tid, (int)tm->num_tids, (int)t, key);
        return KIO_ERR;
      }
      int32_t pdf = tm->tid2pdf[tid];
      if (pdf < 0 || pdf >= c->am.num_pdfs) {
        KIO_ERROR("Transition-id %d maps to pdf %d, but the model has %d pdfs (utterance %s)",
                  (int)tid, (int)pdf, (int)c->am.num_pdfs, key);
        return KIO_ERR;
      }
      const kio_diag_gmm *g = &c->am.pdfs[pdf];
      if (x->cols != g->dim) {
        KIO_KALDI(MLLT_DIM, (int)x->cols, (int)g->dim);
        return KIO_ERR;
      }
      if (fmllr_accs_frame(c->s, g, x->data + (size_t)t * x->cols, p->w[j], key, t) != KIO_OK)
        return KIO_ERR;
    }
  return KIO_OK;
}

/* The transform of one speaker or utterance: estimated, written, logged. */
static int estimate(run_ctx *c, const char *key, int per_spk) {
  const int32_t D = c->am.dim;
  memset(c->xform, 0, sizeof(float) * (size_t)D * (D + 1));
  for (int32_t i = 0; i < D; i++) c->xform[(size_t)i * (D + 1) + i] = 1.0f;
  float impr, t;
  if (fmllr_accs_update(c->s, c->o, c->xform, &impr, &t) != KIO_OK) return KIO_ERR;
  kio_matrix m = {D, D + 1, c->xform, 0};
  if (kio_writer_write(c->w, key, &m) != KIO_OK) return KIO_ERR;
  char b1[32], b2[32];
  if (per_spk) KIO_KALDI(FMLLR_SPEAKER, key, kio_fmt_g(b1, impr / t), kio_fmt_g(b2, t));
  else KIO_KALDI(FMLLR_UTT, key, kio_fmt_g(b1, impr / t), kio_fmt_g(b2, t));
  c->tot_impr += impr;
  c->tot_t += t;
  return KIO_OK;
}

static int per_speaker(run_ctx *c, const char *spk2utt, const char *feats_rs) {
  kio_seq_reader *spk = NULL;
  kio_ra_reader *feats = NULL;
  int rc = KIO_ERR;
  if (kio_seq_open(&spk, spk2utt, &tokvec_holder) != KIO_OK) return KIO_ERR;
  if (kio_ra_open(&feats, feats_rs, &kio_matrix_holder) != KIO_OK) goto out;
  for (; !kio_seq_done(spk); kio_seq_next(spk)) {
    const char *sk = kio_seq_key(spk);
    const tokvec *utts = kio_seq_value(spk);
    if (!utts) goto out;
    fmllr_accs_reset(c->s);
    for (int32_t i = 0; i < utts->n; i++) {
      const char *utt = utts->tok[i];
      int h = kio_ra_has_key(feats, utt);
      if (h < 0) goto out;
      if (!h) {
        KIO_KALDI(FMLLR_NO_FEATS, utt);
        c->other++;
        continue;
      }
      h = gacc_posts_has_key(&c->posts, utt);
      if (h < 0) goto out;
      if (!h) {
        KIO_KALDI(FMLLR_NO_POST, utt);
        c->no_post++;
        continue;
      }
      const kio_matrix *x = kio_ra_value(feats, utt);
      if (!x) goto out;
      const gacc_post *p = gacc_posts_value(&c->posts, utt);
      if (!p) goto out;
      if (p->frames != x->rows) {
        KIO_KALDI(FMLLR_WRONG_SIZE, (int)p->frames, (int)x->rows);
        c->other++;
        continue;
      }
      if (acc_utt(c, utt, x, p) != KIO_OK) goto out;
      c->done++;
    }
    if (estimate(c, sk, 1) != KIO_OK) goto out;
  }
  rc = kio_seq_close(spk);
  spk = NULL;
  if (kio_ra_close(feats) != KIO_OK) rc = KIO_ERR;
  feats = NULL;
out:
  if (spk) kio_seq_close(spk);
  if (feats) kio_ra_close(feats);
  return rc;
}

static int per_utt(run_ctx *c, const char *feats_rs) {
  kio_seq_reader *feats = NULL;
  if (kio_seq_open(&feats, feats_rs, &kio_matrix_holder) != KIO_OK) return KIO_ERR;
  for (; !kio_seq_done(feats); kio_seq_next(feats)) {
    const char *utt = kio_seq_key(feats);
    int h = gacc_posts_has_key(&c->posts, utt);
    if (h < 0) goto fail;
    if (!h) {
      KIO_KALDI(FMLLR_UTT_NO_POST, utt);
      c->no_post++;
      continue;
    }
    const kio_matrix *x = kio_seq_value(feats);
    if (!x) goto fail;
    const gacc_post *p = gacc_posts_value(&c->posts, utt);
    if (!p) goto fail;
    if (p->frames != x->rows) {
      KIO_KALDI(FMLLR_UTT_WRONG_SIZE, (int)p->frames, (int)x->rows);
      c->other++;
      continue;
    }
    c->done++;
    fmllr_accs_reset(c->s);
    if (acc_utt(c, utt, x, p) != KIO_OK || estimate(c, utt, 0) != KIO_OK) goto fail;
  }
  return kio_seq_close(feats);
fail:
  kio_seq_close(feats);
  return KIO_ERR;
}

int fmllr_run(const fmllr_opts *o, const char *spk2utt, const char *model_in,
              const char *feats_rs, const char *post_rs, const char *trans_ws,
              long *num_done, char *why, size_t why_len) {
  run_ctx c;
  memset(&c, 0, sizeof c);
  c.o = o;
  *num_done = 0;
  fmllr_blas *blas = NULL;
  int rc = KIO_ERR, posts_open = 0;
  if (fmllr_blas_load(&blas, why, why_len) != KIO_OK) return FMLLR_UNAVAILABLE;
  if (kio_model_read(model_in, &c.tm, &c.am) != KIO_OK) goto out;
  if (gacc_posts_open(&c.posts, post_rs) != KIO_OK) goto out;
  posts_open = 1;
  if (kio_writer_open(&c.w, trans_ws, &kio_matrix_holder) != KIO_OK) goto out;
  c.xform = malloc(sizeof(float) * (size_t)c.am.dim * (size_t)(c.am.dim + 1));
  if (!c.xform) {
    KIO_ERROR("Out of memory");
    goto out;
  }
  if (fmllr_accs_new(&c.s, blas, c.am.dim, !strcmp(o->update_type, "full"), 0) != KIO_OK)
    goto out;
  if ((spk2utt[0] ? per_speaker(&c, spk2utt, feats_rs) : per_utt(&c, feats_rs)) != KIO_OK)
    goto out;
  if (gacc_posts_finish(&c.posts) != KIO_OK) goto out;
  char b1[32], b2[32];
  KIO_KALDI(FMLLR_DONE, c.done, c.no_post, c.other);
  KIO_KALDI(FMLLR_OVERALL, kio_fmt_g(b1, c.tot_impr / c.tot_t), kio_fmt_g(b2, c.tot_t));
  rc = kio_writer_close(c.w);
  c.w = NULL;
  posts_open = 0;
  if (gacc_posts_close(&c.posts) != KIO_OK) rc = KIO_ERR;
  *num_done = c.done;
out:
  if (c.w) kio_writer_close(c.w);
  if (posts_open) gacc_posts_close(&c.posts);
  fmllr_accs_free(c.s);
  free(c.xform);
  kio_tmodel_free(&c.tm);
  kio_am_gmm_free(&c.am);
  fmllr_blas_free(blas);
  return rc;
}
