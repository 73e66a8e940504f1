/* libFuzzer harness: Kaldi Matrix/Vector readers (FM, DM, CM, CM2, CM3 and
 * text). Input: one selector byte, then the object body (no "\0B").
 *   selector & 7: 0 matrix bin, 1 matrix text, 2 dmatrix bin, 3 dmatrix text,
 *                 4 vector bin, 5 vector text, 6 dvector bin, 7 dvector text
 * A float matrix or vector read in binary is written back (FM/FV), re-read
 * and compared bit for bit; a float matrix is also compressed with method
 * 1 + (selector >> 3) % 7 and decompressed. */
#include "fuzz-common.h"
#include "base/matrix/matrix.h"

/* A matrix that reads is also compressed with method 1..7 (selector bits
 * 3-5) and decompressed: the codec must cope with any float (NaN, inf,
 * denormals, constant columns) and give back the same shape. */
static void compress_roundtrip(const kio_matrix *m, int method) {
  char *buf = NULL;
  size_t len = 0;
  FILE *w = open_memstream(&buf, &len);
  FUZZ_CHECK(w);
  int rc = kio_matrix_write_compressed(w, m, method);
  fclose(w);
  if (rc == KIO_OK) {
    FILE *r = fmemopen(buf, len, "rb");
    FUZZ_CHECK(r);
    kio_matrix m2 = {0};
    FUZZ_CHECK(kio_matrix_read(r, 1, &m2) == KIO_OK);
    FUZZ_CHECK(getc(r) == EOF);
    FUZZ_CHECK(m2.rows == m->rows && m2.cols == m->cols);
    kio_matrix_free(&m2);
    fclose(r);
  }
  free(buf);
}

static void roundtrip_matrix(const kio_matrix *m) {
  char *buf = NULL;
  size_t len = 0;
  FILE *w = open_memstream(&buf, &len);
  FUZZ_CHECK(w);
  FUZZ_CHECK(kio_matrix_write(w, 1, m) == KIO_OK);
  fclose(w);
  FILE *r = fmemopen(buf, len, "rb");
  FUZZ_CHECK(r);
  kio_matrix m2 = {0};
  FUZZ_CHECK(kio_matrix_read(r, 1, &m2) == KIO_OK);
  FUZZ_CHECK(getc(r) == EOF);  /* consumed exactly the object */
  FUZZ_CHECK(m2.rows == m->rows && m2.cols == m->cols);
  size_t n = (size_t)m->rows * (size_t)m->cols;
  FUZZ_CHECK(n == 0 || !memcmp(m->data, m2.data, n * sizeof(float)));
  kio_matrix_free(&m2);
  fclose(r);
  free(buf);
}

static void roundtrip_vector(const kio_vector *v) {
  char *buf = NULL;
  size_t len = 0;
  FILE *w = open_memstream(&buf, &len);
  FUZZ_CHECK(w);
  FUZZ_CHECK(kio_vector_write(w, 1, v) == KIO_OK);
  fclose(w);
  FILE *r = fmemopen(buf, len, "rb");
  FUZZ_CHECK(r);
  kio_vector v2 = {0};
  FUZZ_CHECK(kio_vector_read(r, 1, &v2) == KIO_OK);
  FUZZ_CHECK(v2.dim == v->dim);
  FUZZ_CHECK(v->dim == 0 || !memcmp(v->data, v2.data, (size_t)v->dim * sizeof(float)));
  kio_vector_free(&v2);
  fclose(r);
  free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_init();
  if (size < 1) return 0;
  int sel = data[0] & 7, binary = !(sel & 1);
  void *copy;
  FILE *f = fuzz_open_mem(data + 1, size - 1, &copy);
  if (!f) return 0;
  switch (sel >> 1) {
    case 0: {
      kio_matrix m = {0};
      int rc = kio_matrix_read(f, binary, &m);
      fuzz_report("Matrix", rc);
      if (rc == KIO_OK) {
        FUZZ_CHECK(m.rows >= 0 && m.cols >= 0 && (m.rows == 0) == (m.cols == 0));
        FUZZ_CHECK((size_t)m.rows * m.cols <= m.cap);
        if (binary) roundtrip_matrix(&m);
        compress_roundtrip(&m, 1 + (data[0] >> 3) % 7);
        /* a second read into the same (reused) buffers must also be safe */
        kio_matrix_read(f, binary, &m);
      }
      kio_matrix_free(&m);
      break;
    }
    case 1: {
      kio_dmatrix m = {0};
      if (kio_dmatrix_read(f, binary, &m) == KIO_OK) {
        FUZZ_CHECK(m.rows >= 0 && m.cols >= 0 && (m.rows == 0) == (m.cols == 0));
        FUZZ_CHECK((size_t)m.rows * m.cols <= m.cap);
      }
      kio_dmatrix_free(&m);
      break;
    }
    case 2: {
      kio_vector v = {0};
      if (kio_vector_read(f, binary, &v) == KIO_OK) {
        FUZZ_CHECK(v.dim >= 0 && (size_t)v.dim <= v.cap);
        if (binary) roundtrip_vector(&v);
      }
      kio_vector_free(&v);
      break;
    }
    default: {
      kio_dvector v = {0};
      if (kio_dvector_read(f, binary, &v) == KIO_OK)
        FUZZ_CHECK(v.dim >= 0 && (size_t)v.dim <= v.cap);
      kio_dvector_free(&v);
      break;
    }
  }
  fuzz_close_mem(f, copy);
  return 0;
}
