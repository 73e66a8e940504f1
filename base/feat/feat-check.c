/* The feature programs' per-utterance checks and messages (feat-check.h). */
#include "feat-check.h"

#include "feat-ops.h"
#include "base/sys/kaldi-msg.h"

int kio_fchk_table_key(const kio_feat_stage *st, kio_ra_reader *u2s, kio_ra_reader *tab,
                       const char *utt, const char **key) {
  *key = utt;
  if (u2s) {
    int h = kio_ra_has_key(u2s, utt);
    if (h < 0) return KIO_FCHK_DIE;
    if (h == 0) {
      /* transform-feats opens its reader with Open(), which leaves the
       * name Kaldi prints empty: "standard input". */
      const char *name = st->op == KIO_FEAT_TRANSFORM ? "standard input" : st->utt2spk;
      KIO_KALDI_AS(st->prog, TABLE_MAPPED_NO_KEY, utt, name);
      return KIO_FCHK_DIE;
    }
    const kio_token *t = kio_ra_value(u2s, utt);
    if (!t) return KIO_FCHK_DIE;
    *key = t->s;
  }
  int h = kio_ra_has_key(tab, *key);
  if (h < 0) return KIO_FCHK_DIE;
  if (h > 0) return KIO_FCHK_PASS;
  if (st->op == KIO_FEAT_CMVN)
    KIO_KALDI_AS(st->prog, APPLY_CMVN_NO_STATS, utt);
  else
    KIO_KALDI_AS(st->prog, TRANSFORM_NO_MATRIX, utt);
  return KIO_FCHK_DROP;
}

int kio_fchk_cmvn(const kio_feat_stage *st, const kio_dmatrix *stats, int32_t rows, int32_t cols) {
  const char *p = st->prog;
  int32_t dim = stats->cols - 1;
  if (stats->rows > 2 || stats->rows < 1 || cols != dim) {
    if (st->reverse) KIO_KALDI_AS(p, CMVN_REV_DIM, stats->rows, stats->cols, rows, cols);
    else KIO_KALDI_AS(p, CMVN_DIM, stats->rows, stats->cols, rows, cols);
    return KIO_FCHK_DIE;
  }
  if (stats->rows == 1 && st->norm_vars) {
    if (st->reverse) KIO_KALDI_AS(p, CMVN_REV_NO_VARS);
    else KIO_KALDI_AS(p, CMVN_NO_VARS);
    return KIO_FCHK_DIE;
  }
  double count = stats->data[dim];
  if (count < 1.0) {
    char a[32];
    if (st->reverse) KIO_KALDI_AS(p, CMVN_REV_COUNT, kio_fmt_g(a, count));
    else KIO_KALDI_AS(p, CMVN_COUNT, kio_fmt_g(a, count));
    return KIO_FCHK_DIE;
  }
  return KIO_FCHK_PASS;
}

static void floor_warn(void *user, double var) {
  char a[32];
  KIO_KALDI_AS((const char *)user, CMVN_FLOOR, kio_fmt_g(a, var));
}

int kio_fchk_cmvn_norm(const kio_feat_stage *st, const kio_dmatrix *stats, float *offset,
                       float *scale) {
  if (kio_featop_cmvn_norm(stats->data, stats->rows, stats->cols - 1, st->norm_vars, st->reverse,
                           offset, scale, floor_warn, (void *)st->prog) != KIO_FEATOP_NAN)
    return KIO_FCHK_PASS;
  if (st->reverse) KIO_KALDI_AS(st->prog, CMVN_REV_NAN);
  else KIO_KALDI_AS(st->prog, CMVN_NAN);
  return KIO_FCHK_DIE;
}

int kio_fchk_deltas(const kio_feat_stage *st, const char *utt, int32_t rows, int32_t cols) {
  if (rows == 0) {
    KIO_KALDI_AS(st->prog, ADD_DELTAS_EMPTY, utt);
    return KIO_FCHK_DROP;
  }
  if (st->truncate > cols) {
    KIO_KALDI_AS(st->prog, ADD_DELTAS_TRUNCATE, cols);
    return KIO_FCHK_DIE;
  }
  return KIO_FCHK_PASS;
}

int kio_fchk_splice(const kio_feat_stage *st, int32_t rows) {
  if (rows > 0) return KIO_FCHK_PASS;
  KIO_KALDI_AS(st->prog, SPLICE_EMPTY);
  return KIO_FCHK_DIE;
}

int kio_fchk_transform(const kio_feat_stage *st, const char *utt, const kio_matrix *w,
                       int32_t dim) {
  if (w->cols == dim || w->cols == dim + 1) return KIO_FCHK_PASS;
  KIO_KALDI_AS(st->prog, TRANSFORM_BAD_DIM, utt, w->rows, w->cols, dim);
  if (w->cols == dim + 2) KIO_KALDI_AS(st->prog, TRANSFORM_B_IS_AFFINE);
  return KIO_FCHK_DROP;
}
