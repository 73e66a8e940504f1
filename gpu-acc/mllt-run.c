/* gmm-acc-mllt's loop (gmmbin/gmm-acc-mllt.cc): the features in order
 * (through base/feat's in-process chain when the rspecifier is one of the
 * recipes' pipes), the posteriors by key, Kaldi's log lines and counts. */
#include <math.h>
#include <stdlib.h>

#include "acc-internal.h"
#include "base/sys/kaldi-msg.h"
#include "base/sys/log.h"
#include "gpu-acc/mllt-postpipe.h"
#include "gpu-acc/mllt.h"

static void quiet(int level, const char *func, const char *file, int line, const char *msg,
                  void *user) {
  (void)level; (void)func; (void)file; (void)line; (void)msg; (void)user;
}

/* Kaldi dies (or asserts) on these; ours is an ERROR naming the utterance. */
static int check_tid(const kio_tmodel *tm, const kio_am_gmm *am, int32_t tid, const char *key,
                     int32_t t, int32_t *pdf) {
  if (tid < 0 || tid > tm->num_tids) {
    KIO_ERROR("Transition-id %d out of range [0, %d] at frame %d of the posteriors for "
              "utterance %s", (int)tid, (int)tm->num_tids, (int)t, key);
    return KIO_ERR;
  }
  *pdf = tm->tid2pdf[tid];
  if (*pdf < 0 || *pdf >= am->num_pdfs) {
    KIO_ERROR("Transition-id %d maps to pdf %d, but the model has %d pdfs (utterance %s)",
              (int)tid, (int)*pdf, (int)am->num_pdfs, key);
    return KIO_ERR;
  }
  return KIO_OK;
}

/* One file's posteriors into the statistics; *like, *weight: Kaldi's float
 * sums of like * weight and weight, in pair order. */
static int utt(gacc_mllt *m, const kio_tmodel *tm, const kio_am_gmm *am, const char *key,
               const kio_matrix *x, const gacc_post *p, float *like, float *weight) {
  float tl = 0.0f, tw = 0.0f;
  for (int32_t t = 0; t < p->frames; t++)
    for (int32_t j = p->off[t]; j < p->off[t + 1]; j++) {
      int32_t pdf;
      if (check_tid(tm, am, p->tid[j], key, t, &pdf) != KIO_OK) return KIO_ERR;
      const kio_diag_gmm *g = &am->pdfs[pdf];
      if (x->cols != g->dim) {
        KIO_KALDI(MLLT_DIM, (int)x->cols, (int)g->dim);
        return KIO_ERR;
      }
      float w = p->w[j], l;
      if (gacc_mllt_frame(m, g, x->data + (size_t)t * x->cols, w, key, t, &l) != KIO_OK)
        return KIO_ERR;
      tl += l * w;
      tw += w;
    }
  *like = tl;
  *weight = tw;
  return KIO_OK;
}

static int run(gacc_mllt *m, const kio_tmodel *tm, const kio_am_gmm *am, kio_seq_reader *feats,
               gacc_posts_in *posts, long *num_done) {
  long done = 0, no_post = 0, other = 0;
  double tot_like = 0.0, tot_t = 0.0;
  char b1[32], b2[32];
  for (; !kio_seq_done(feats); kio_seq_next(feats)) {
    const char *key = kio_seq_key(feats);
    int has = gacc_posts_has_key(posts, key);
    if (has < 0) return KIO_ERR;
    if (!has) {
      no_post++;
      continue;
    }
    const kio_matrix *x = kio_seq_value(feats);
    if (!x) return KIO_ERR;
    const gacc_post *p = gacc_posts_value(posts, key);
    if (!p) return KIO_ERR;
    if (p->frames != x->rows) {
      KIO_KALDI(MLLT_WRONG_SIZE, (int)p->frames, (int)x->rows);
      other++;
      continue;
    }
    done++;
    float like, weight;
    if (utt(m, tm, am, key, x, p, &like, &weight) != KIO_OK) return KIO_ERR;
    KIO_KALDI(MLLT_FILE, kio_fmt_g(b1, like / weight), kio_fmt_g(b2, weight));
    tot_like += like;
    tot_t += weight;
    if (done % 10 == 0) KIO_KALDI(MLLT_SO_FAR, kio_fmt_g(b1, tot_like / tot_t));
  }
  if (gacc_posts_finish(posts) != KIO_OK) return KIO_ERR;
  KIO_KALDI(MLLT_DONE, done, no_post, other);
  KIO_KALDI(MLLT_OVERALL, kio_fmt_g(b1, tot_like / tot_t), kio_fmt_g(b2, tot_t));
  *num_done = done;
  return KIO_OK;
}

int gacc_mllt_run(gacc_mllt *m, const kio_tmodel *tm, const kio_am_gmm *am,
                  const char *feature_rspecifier, const char *posteriors_rspecifier,
                  long *num_done) {
  kio_seq_reader *feats = NULL;
  gacc_posts_in posts;
  *num_done = 0;
  if (kio_seq_open(&feats, feature_rspecifier, &kio_matrix_holder) != KIO_OK) return KIO_ERR;
  if (gacc_posts_open(&posts, posteriors_rspecifier) != KIO_OK) {
    kio_seq_close(feats);
    return KIO_ERR;
  }
  if (run(m, tm, am, feats, &posts, num_done) != KIO_OK) {
    /* Kaldi prints nothing after its ERROR line */
    kio_log_handler h;
    void *u;
    kio_log_get_handler(&h, &u);
    kio_log_set_handler(quiet, NULL);
    gacc_posts_close(&posts);
    kio_seq_close(feats);
    kio_log_set_handler(h, u);
    return KIO_ERR;
  }
  /* A reader's failure at close (read error, failed pipe) is fatal; Kaldi
   * finds it in the destructors, after writing the statistics: here it
   * comes first, so that no statistics of failed inputs are written. */
  int failed = gacc_posts_close(&posts) != KIO_OK;
  if (kio_seq_close(feats) != KIO_OK) failed = 1;
  return failed ? KIO_ERR : KIO_OK;
}
