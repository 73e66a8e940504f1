/* Shared by check_acc (CPU) and check_gpu_acc (GPU): runs
 * gmm-acc-stats-ali's loop through the gpu-acc library. Test code only. */
#ifndef ACC_RUN_H
#define ACC_RUN_H
#include <stdlib.h>
#include <string.h>
#include "test-util.h"
#include "base/sys/log.h"
#include "base/matrix/matrix.h"
#include "base/model/model.h"
#include "base/io/table.h"
#include "gpu-acc/gpu-acc.h"

/* Runs the program's loop through the library: utterances with a matching
 * alignment accumulated (batch utterances at a time), others skipped. */
typedef struct { double tot_like; int64_t tot_t; int done, err; } run_info;
/* async: batches through gacc_accumulate_batch_async (the caller's arrays
 * are overwritten right after each call, as a reader's would be), totals
 * from gacc_get_totals; otherwise from the per-utterance results, checked
 * against gacc_get_totals. */
static int run_acc_mode(const char *backend, const char *mdl, const char *feats,
                        const char *alis, int batch, int async, gacc_stats *out,
                        run_info *ri) {
  kio_tmodel tm;
  kio_am_gmm am;
  memset(&tm, 0, sizeof tm);
  memset(&am, 0, sizeof am);
  memset(ri, 0, sizeof *ri);
  memset(out, 0, sizeof *out);
  ck_assert_int_eq(kio_model_read(mdl, &tm, &am), KIO_OK);
  gacc_acc *acc = NULL;
  if (gacc_new(&acc, backend, &tm, &am) != KIO_OK) return KIO_ERR;
  kio_seq_reader *r = NULL;
  kio_ra_reader *ra = NULL;
  ck_assert_int_eq(kio_seq_open(&r, feats, &kio_matrix_holder), KIO_OK);
  ck_assert_int_eq(kio_ra_open(&ra, alis, &kio_int_vec_holder), KIO_OK);
  kio_matrix *m = calloc((size_t)batch, sizeof *m);
  int32_t **a = calloc((size_t)batch, sizeof *a);
  char **keys = calloc((size_t)batch, sizeof *keys);
  gacc_utt *u = calloc((size_t)batch, sizeof *u);
  gacc_utt_result *res = calloc((size_t)batch, sizeof *res);
  int n = 0, rc = KIO_OK;
  for (;; kio_seq_next(r)) {
    int done = kio_seq_done(r);
    if (!done) {
      const char *key = kio_seq_key(r);
      const kio_matrix *f = kio_seq_value(r);
      ck_assert_ptr_nonnull(f);
      if (!kio_ra_has_key(ra, key)) { ri->err++; continue; }
      const kio_int_vec *v = kio_ra_value(ra, key);
      if (v->n != f->rows) { ri->err++; continue; }
      ck_assert_int_eq(kio_matrix_resize(&m[n], f->rows, f->cols), KIO_OK);
      memcpy(m[n].data, f->data, sizeof(float) * (size_t)f->rows * (size_t)f->cols);
      a[n] = realloc(a[n], sizeof(int32_t) * (size_t)(v->n + 1));
      memcpy(a[n], v->v, sizeof(int32_t) * (size_t)v->n);
      free(keys[n]);
      keys[n] = strdup(key);
      u[n].key = keys[n];
      u[n].feats = &m[n];
      u[n].ali = a[n];
      n++;
    }
    if (n > 0 && (done || n == batch) && async) {
      rc = gacc_accumulate_batch_async(acc, n, u);
      if (rc != KIO_OK) break;
      ri->done += n;
      for (int i = 0; i < n; i++) {  /* the caller's buffers are its own again */
        memset(m[i].data, 0xff, sizeof(float) * (size_t)m[i].rows * (size_t)m[i].cols);
        memset(a[i], 0xff, sizeof(int32_t) * (size_t)m[i].rows);
        memset(keys[i], 'X', strlen(keys[i]));
      }
      n = 0;
    } else if (n > 0 && (done || n == batch)) {
      rc = gacc_accumulate_batch(acc, n, u, res);
      if (rc != KIO_OK) break;
      for (int i = 0; i < n; i++) {
        ri->tot_like += res[i].like;
        ri->tot_t += res[i].frames;
        ri->done++;
      }
      n = 0;
    }
    if (done) break;
  }
  if (rc == KIO_OK) {
    double like;
    int64_t frames;
    rc = gacc_get_totals(acc, &like, &frames);
    if (async) {
      ri->tot_like = like;
      ri->tot_t = frames;
    } else if (rc == KIO_OK) {
      ck_assert(like == ri->tot_like);
      ck_assert(frames == ri->tot_t);
    }
  }
  if (rc == KIO_OK) rc = gacc_get_stats(acc, out);
  for (int i = 0; i < batch; i++) {
    kio_matrix_free(&m[i]);
    free(a[i]);
    free(keys[i]);
  }
  free(m); free(a); free(keys); free(u); free(res);
  kio_ra_close(ra);
  kio_seq_close(r);
  gacc_free(acc);
  kio_tmodel_free(&tm);
  kio_am_gmm_free(&am);
  return rc;
}
/* Every value bit for bit (same layout assumed checked by the caller). */
static int stats_identical(const gacc_stats *x, const gacc_stats *y) {
  size_t gd = (size_t)x->num_gauss * (size_t)x->dim;
  return x->num_tids == y->num_tids && x->num_gauss == y->num_gauss && x->dim == y->dim &&
         !memcmp(x->tacc, y->tacc, sizeof(double) * ((size_t)x->num_tids + 1)) &&
         !memcmp(x->occ, y->occ, sizeof(double) * (size_t)x->num_gauss) &&
         !memcmp(x->mean_acc, y->mean_acc, sizeof(double) * gd) &&
         !memcmp(x->var_acc, y->var_acc, sizeof(double) * gd) &&
         !memcmp(&x->total_like, &y->total_like, sizeof(double)) &&
         x->total_frames == y->total_frames;
}
static int run_acc(const char *backend, const char *mdl, const char *feats,
                   const char *alis, int batch, gacc_stats *out, run_info *ri) {
  return run_acc_mode(backend, mdl, feats, alis, batch, 0, out, ri);
}

#endif
