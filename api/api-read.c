/* Reading Kaldi tables for a binding (kga_read_matrices,
 * kga_read_int32_vectors): the same readers as the programs', so the
 * recipes' feature pipes are computed in-process. */
#include "api-internal.h"

#include "base/io/table.h"
#include "base/matrix/matrix.h"
#include "base/sys/log.h"

/* Calls each(user, value) for every entry in order. */
static int read_table(const char *rspecifier, const kio_holder *h,
                      int (*each)(void *fn, void *user, const char *key, const void *value),
                      void *fn, void *user, kga_log_fn log, void *log_user) {
  kga_call c;
  kga_call_begin(&c, log, log_user);
  if (!rspecifier || !fn) return kga_call_end(&c, KGA_EINVAL);
  kio_seq_reader *r = NULL;
  int st = KGA_OK;
  if (kio_seq_open(&r, rspecifier, h) != KIO_OK) {
    st = KGA_ERROR;
  } else {
    for (; !kio_seq_done(r); kio_seq_next(r)) {
      const void *v = kio_seq_value(r);
      if (!v) { st = KGA_ERROR; break; }
      if (each(fn, user, kio_seq_key(r), v)) { st = KGA_ECANCELED; break; }
    }
  }
  if (st != KGA_OK) c.mute = 1;  /* nothing after the ERROR, as Kaldi */
  if (kio_seq_close(r) != KIO_OK && st == KGA_OK) st = KGA_ERROR;
  return kga_call_end(&c, st);
}

static int each_matrix(void *fn, void *user, const char *key, const void *value) {
  const kio_matrix *m = value;
  return ((kga_matrix_fn)fn)(user, key, m->data, m->rows, m->cols) != 0;
}

static int each_ivec(void *fn, void *user, const char *key, const void *value) {
  const kio_int_vec *v = value;
  return ((kga_int32_vector_fn)fn)(user, key, v->v, v->n) != 0;
}

int kga_read_matrices(const char *rspecifier, kga_matrix_fn fn, void *user, kga_log_fn log,
                      void *log_user) {
  return read_table(rspecifier, &kio_matrix_holder, each_matrix, (void *)fn, user, log,
                    log_user);
}

int kga_read_int32_vectors(const char *rspecifier, kga_int32_vector_fn fn, void *user,
                           kga_log_fn log, void *log_user) {
  return read_table(rspecifier, &kio_int_vec_holder, each_ivec, (void *)fn, user, log,
                    log_user);
}
