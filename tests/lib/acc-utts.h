/* The GPU accumulator suites' fixture utterances in memory: up to MAXU of a feature
 * archive with their alignments, and the model. Test code only. */
#ifndef ACC_UTTS_H
#define ACC_UTTS_H
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include "base/io/table.h"
#include "base/matrix/matrix.h"
#include "base/model/model.h"
#include "gpu-acc/gpu-acc.h"

enum { MAXU = 64 };
typedef struct {
  kio_tmodel tm;
  kio_am_gmm am;
  kio_matrix m[MAXU];
  int32_t *a[MAXU];
  char *keys[MAXU];
  gacc_utt u[MAXU];
  int n;
} acc_utts;

static inline void utts_load(acc_utts *d, const char *mdl, const char *feats, const char *alis) {
  memset(d, 0, sizeof *d);
  ck_assert_int_eq(kio_model_read(mdl, &d->tm, &d->am), KIO_OK);
  kio_seq_reader *r = NULL;
  kio_ra_reader *ra = NULL;
  ck_assert_int_eq(kio_seq_open(&r, feats, &kio_matrix_holder), KIO_OK);
  ck_assert_int_eq(kio_ra_open(&ra, alis, &kio_int_vec_holder), KIO_OK);
  for (; !kio_seq_done(r) && d->n < MAXU; kio_seq_next(r)) {
    int n = d->n;
    const kio_matrix *f = kio_seq_value(r);
    const kio_int_vec *v = kio_ra_value(ra, kio_seq_key(r));
    ck_assert(v && v->n == f->rows);
    ck_assert_int_eq(kio_matrix_resize(&d->m[n], f->rows, f->cols), KIO_OK);
    memcpy(d->m[n].data, f->data, sizeof(float) * (size_t)f->rows * (size_t)f->cols);
    d->a[n] = malloc(sizeof(int32_t) * (size_t)v->n);
    memcpy(d->a[n], v->v, sizeof(int32_t) * (size_t)v->n);
    d->keys[n] = strdup(kio_seq_key(r));
    d->u[n] = (gacc_utt){d->keys[n], &d->m[n], d->a[n]};
    d->n++;
  }
  kio_seq_close(r);
  kio_ra_close(ra);
  ck_assert_int_ge(d->n, 4);
}

static inline void mono_load(acc_utts *d) {
  utts_load(d, "models/mono/final.mdl", "ark:feats/delta.ark", "ark:kaldi/mono/ali.ark");
}

static inline void acc_utts_free(acc_utts *d) {
  for (int i = 0; i < d->n; i++) {
    kio_matrix_free(&d->m[i]);
    free(d->a[i]);
    free(d->keys[i]);
  }
  kio_tmodel_free(&d->tm);
  kio_am_gmm_free(&d->am);
}

#endif
