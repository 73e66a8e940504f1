/* Kaldi Matrix / Vector I/O (reference 2.1, 2.2) and their table holders.
 * Binary bodies are read with one fread straight into the buffer; text is
 * parsed with the same acceptance rules as Kaldi's readers. */
#include "matrix.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "compressed-matrix.h"
#include "base/io/io.h"
#include "base/sys/log.h"

/* ---- storage ---- */

/* Makes room for n elements of size esz (contents undefined). */
static int ensure_cap(void **data, size_t *cap, size_t n, size_t esz) {
  if (n <= *cap && (*data || n == 0)) return KIO_OK;
  if (n > SIZE_MAX / esz) {
    kio_set_error("Matrix/vector too large (%zu elements)", n);
    return KIO_ERR;
  }
  void *p = malloc(n * esz);
  if (!p) {
    kio_set_error("Out of memory allocating %zu elements", n);
    return KIO_ERR;
  }
  free(*data);
  *data = p;
  *cap = n;
  return KIO_OK;
}

static int check_dims(int32_t rows, int32_t cols) {
  if (rows < 0 || cols < 0) {
    kio_set_error("Invalid matrix size %d x %d", rows, cols);
    return KIO_ERR;
  }
  return KIO_OK;
}

/* Sets the size without zeroing (a read overwrites everything). A matrix
 * with zero rows or zero columns is stored as 0 x 0, as in Kaldi. */
static int mat_setsize(void **data, size_t *cap, int32_t *r, int32_t *c,
                       int32_t rows, int32_t cols, size_t esz) {
  if (check_dims(rows, cols) != KIO_OK) return KIO_ERR;
  if (rows == 0 || cols == 0) rows = cols = 0;
  size_t n = (size_t)rows * (size_t)cols;
  if (ensure_cap(data, cap, n, esz) != KIO_OK) return KIO_ERR;
  *r = rows;
  *c = cols;
  return KIO_OK;
}

int kio_matrix_resize(kio_matrix *m, int32_t rows, int32_t cols) {
  if (mat_setsize((void **)&m->data, &m->cap, &m->rows, &m->cols, rows, cols,
                  sizeof(float)) != KIO_OK) return KIO_ERR;
  if (m->data) memset(m->data, 0, (size_t)m->rows * m->cols * sizeof(float));
  return KIO_OK;
}

int kio_matrix_setsize(kio_matrix *m, int32_t rows, int32_t cols) {
  return mat_setsize((void **)&m->data, &m->cap, &m->rows, &m->cols, rows, cols, sizeof(float));
}

int kio_dmatrix_resize(kio_dmatrix *m, int32_t rows, int32_t cols) {
  if (mat_setsize((void **)&m->data, &m->cap, &m->rows, &m->cols, rows, cols,
                  sizeof(double)) != KIO_OK) return KIO_ERR;
  if (m->data) memset(m->data, 0, (size_t)m->rows * m->cols * sizeof(double));
  return KIO_OK;
}

static int vec_setsize(void **data, size_t *cap, int32_t *d, int32_t dim, size_t esz) {
  if (dim < 0) {
    kio_set_error("Invalid vector dimension %d", dim);
    return KIO_ERR;
  }
  if (ensure_cap(data, cap, (size_t)dim, esz) != KIO_OK) return KIO_ERR;
  *d = dim;
  return KIO_OK;
}

int kio_vector_resize(kio_vector *v, int32_t dim) {
  if (vec_setsize((void **)&v->data, &v->cap, &v->dim, dim, sizeof(float)) != KIO_OK)
    return KIO_ERR;
  if (v->data) memset(v->data, 0, (size_t)dim * sizeof(float));
  return KIO_OK;
}

int kio_dvector_resize(kio_dvector *v, int32_t dim) {
  if (vec_setsize((void **)&v->data, &v->cap, &v->dim, dim, sizeof(double)) != KIO_OK)
    return KIO_ERR;
  if (v->data) memset(v->data, 0, (size_t)dim * sizeof(double));
  return KIO_OK;
}

void kio_matrix_free(kio_matrix *m) { if (m) { free(m->data); memset(m, 0, sizeof *m); } }
void kio_dmatrix_free(kio_dmatrix *m) { if (m) { free(m->data); memset(m, 0, sizeof *m); } }
void kio_vector_free(kio_vector *v) { if (v) { free(v->data); memset(v, 0, sizeof *v); } }
void kio_dvector_free(kio_dvector *v) { if (v) { free(v->data); memset(v, 0, sizeof *v); } }

/* ---- binary helpers ---- */

/* Prefixes the low-level detail with what was being read. */
static int fail_with(const char *what) {
  char detail[512];
  snprintf(detail, sizeof detail, "%s", kio_last_error());
  kio_set_error("Failed to read %s from stream. %s", what, detail);
  return KIO_ERR;
}

/* Reads "TOKEN rows cols" (binary) after checking the token. */
static int read_bin_dims(FILE *f, const char *want, int32_t *rows, int32_t *cols,
                         const char *what) {
  char tok[64];
  if (kio_read_token(f, 1, tok, sizeof tok) != KIO_OK) return fail_with(what);
  if (strcmp(tok, want) != 0) {
    kio_set_error("Failed to read %s from stream. Expected token %s, got %s",
                  what, want, tok);
    return KIO_ERR;
  }
  if (kio_read_int32(f, 1, rows) != KIO_OK) return fail_with(what);
  if (cols && kio_read_int32(f, 1, cols) != KIO_OK) return fail_with(what);
  if (*rows < 0 || (cols && *cols < 0) ||
      (cols && (int64_t)*rows * *cols > (int64_t)1 << 34)) {
    kio_set_error("Failed to read %s from stream. Invalid size %d x %d", what,
                  *rows, cols ? *cols : 1);
    return KIO_ERR;
  }
  return KIO_OK;
}

/* Reads n binary elements of src_esz bytes (4 float, 8 double) into *data as
 * dst_esz-byte elements, converting when the sizes differ. Past READ_CHUNK
 * elements the buffer grows only as data really arrives, so a corrupt size in
 * a 10-byte header cannot allocate gigabytes before the read fails. */
#define READ_CHUNK ((size_t)1 << 20)
static int read_elems(FILE *f, void **data, size_t *cap, size_t n, size_t src_esz,
                      size_t dst_esz, const char *what) {
  if (n == 0) return KIO_OK;
  size_t first = (n <= *cap && *data) || n < READ_CHUNK ? n : READ_CHUNK;
  if (ensure_cap(data, cap, first, dst_esz) != KIO_OK) return KIO_ERR;
  void *tmp = NULL;
  if (src_esz != dst_esz && !(tmp = malloc((n < READ_CHUNK ? n : READ_CHUNK) * src_esz))) {
    kio_set_error("Out of memory reading %s", what);
    return KIO_ERR;
  }
  int rc = KIO_OK;
  for (size_t done = 0; done < n;) {
    size_t k = n - done < READ_CHUNK ? n - done : READ_CHUNK;
    if (done + k > *cap) {
      size_t nc = 2 * *cap < done + k ? done + k : 2 * *cap;
      if (nc > n) nc = n;
      void *p = realloc(*data, nc * dst_esz);
      if (!p) {
        kio_set_error("Out of memory reading %s", what);
        rc = KIO_ERR;
        break;
      }
      *data = p;
      *cap = nc;
    }
    void *dst = (char *)*data + done * dst_esz;
    size_t got = fread(tmp ? tmp : dst, src_esz, k, f);
    if (tmp && src_esz == sizeof(double)) {
      float *d = dst;
      const double *t = tmp;
      for (size_t i = 0; i < got; i++) d[i] = (float)t[i];
    } else if (tmp) {
      double *d = dst;
      const float *t = tmp;
      for (size_t i = 0; i < got; i++) d[i] = t[i];
    }
    if (got != k) {
      kio_set_error("Failed to read %s data: expected %zu elements, got %zu "
                    "(truncated stream?)", what, n, done + got);
      rc = KIO_ERR;
      break;
    }
    done += k;
  }
  free(tmp);
  return rc;
}

/* ---- text parsing (FILE* with getc/ungetc) ---- */

/* Growable double buffer for text-parsed numbers. */
typedef struct { double *v; size_t n, cap; } dbuf;

static int dbuf_push(dbuf *b, double x) {
  if (b->n == b->cap) {
    size_t nc = b->cap ? b->cap * 2 : 256;
    double *p = realloc(b->v, nc * sizeof(double));
    if (!p) {
      kio_set_error("Out of memory parsing text matrix");
      return KIO_ERR;
    }
    b->v = p;
    b->cap = nc;
  }
  b->v[b->n++] = x;
  return KIO_OK;
}

static int peekc(FILE *f) {
  int c = getc_unlocked(f);
  if (c != EOF) ungetc(c, f);
  return c;
}

/* C++ "is >> str": skips whitespace, reads up to whitespace. Returns length
 * (truncated to cap-1), or -1 at EOF. */
static int read_word(FILE *f, char *buf, size_t cap) {
  int c;
  while ((c = getc_unlocked(f)) != EOF && isspace(c)) {}
  if (c == EOF) return -1;
  size_t n = 0;
  while (c != EOF && !isspace(c)) {
    if (n + 1 < cap) buf[n++] = (char)c;
    c = getc_unlocked(f);
  }
  if (c != EOF) ungetc(c, f);
  buf[n] = 0;
  return (int)n;
}

/* C++ "is >> real" (libstdc++ num_get): consumes the characters a number may
 * be made of, then the whole run must convert; overflow fails. Also accepts
 * "-inf"/"-nan" (which C++ cannot read back), warning as for "inf". */
static int read_number(FILE *f, int is_float, double *out, const char *what) {
  char buf[128];
  size_t n = 0;
  int c = getc_unlocked(f), seen_e = 0, seen_dot = 0;
  if (c == '-' || c == '+') { buf[n++] = (char)c; c = getc_unlocked(f); }
  if (n == 1 && c != EOF && isalpha(c)) {  /* "-inf", "-nan" */
    ungetc(c, f);
    char w[64];
    read_word(f, w, sizeof w);
    if (!strcasecmp(w, "inf") || !strcasecmp(w, "infinity")) {
      KIO_WARN("Reading infinite value into %s.", what);
      *out = buf[0] == '-' ? -INFINITY : INFINITY;
      return KIO_OK;
    }
    if (!strcasecmp(w, "nan")) {
      KIO_WARN("Reading NaN value into %s.", what);
      *out = buf[0] == '-' ? -NAN : NAN;
      return KIO_OK;
    }
    kio_set_error("Expecting numeric %s data, got %c%s", what, buf[0], w);
    return KIO_ERR;
  }
  while (c != EOF) {
    int is_e = (c == 'e' || c == 'E') && !seen_e;
    if (!isdigit(c) && !(c == '.' && !seen_dot && !seen_e) && !is_e) break;
    /* Room for this char, a sign after an 'e' and the NUL (fuzzing found the
     * sign written past the end); a longer run is an error, not two numbers. */
    if (n + 3 > sizeof buf) {
      kio_set_error("Failed to read number in %s data (longer than %zu characters)",
                    what, sizeof buf - 3);
      return KIO_ERR;
    }
    if (c == '.') seen_dot = 1;
    buf[n++] = (char)c;
    c = getc_unlocked(f);
    if (is_e) {
      seen_e = 1;
      if (c == '+' || c == '-') { buf[n++] = (char)c; c = getc_unlocked(f); }
    }
  }
  if (c != EOF) ungetc(c, f);
  buf[n] = 0;
  char *end;
  errno = 0;
  double x = is_float ? (double)strtof(buf, &end) : strtod(buf, &end);
  if (n == 0 || end != buf + n || isinf(x)) {
    kio_set_error("Failed to read number in %s data (\"%s\")", what, buf);
    return KIO_ERR;
  }
  *out = x;
  return KIO_OK;
}

/* After "]": eats "\n" or "\r\n" (what Kaldi writes). */
static void eat_newline(FILE *f) {
  int c = getc_unlocked(f);
  if (c == '\r') { getc_unlocked(f); return; }
  if (c != '\n' && c != EOF) ungetc(c, f);
}

/* Text matrix: "[", numbers, rows ended by newline or ';', "]". On success
 * vals holds rows*cols numbers row-major. */
static int read_text_matrix(FILE *f, int is_float, dbuf *vals, int32_t *rows,
                            int32_t *cols) {
  char w[64];
  *rows = *cols = 0;
  if (read_word(f, w, sizeof w) < 0) {
    kio_set_error("Failed to read matrix from stream. Expected \"[\", got EOF");
    return KIO_ERR;
  }
  if (strcmp(w, "[]") == 0) return KIO_OK;
  if (strcmp(w, "[") != 0) {
    kio_set_error("Failed to read matrix from stream. Expected \"[\", got \"%s\"", w);
    return KIO_ERR;
  }
  size_t row_start = 0;
  int32_t nrows = 0, ncols = -1;
  for (;;) {
    int c = peekc(f);
    int end_row = 0, done = 0;
    if (c == EOF) {
      kio_set_error("Failed to read matrix from stream. Got EOF while reading matrix data");
      return KIO_ERR;
    } else if (c == ']') {
      getc_unlocked(f);
      eat_newline(f);
      end_row = done = 1;
    } else if (c == '\n' || c == ';') {
      getc_unlocked(f);
      end_row = 1;
    } else if ((c >= '0' && c <= '9') || c == '-') {
      double x;
      if (read_number(f, is_float, &x, "matrix") != KIO_OK) return fail_with("matrix");
      if (dbuf_push(vals, x) != KIO_OK) return KIO_ERR;
    } else if (isspace(c)) {
      getc_unlocked(f);
    } else {
      read_word(f, w, sizeof w);
      if (!strcasecmp(w, "inf") || !strcasecmp(w, "infinity")) {
        KIO_WARN("Reading infinite value into matrix.");
        if (dbuf_push(vals, INFINITY) != KIO_OK) return KIO_ERR;
      } else if (!strcasecmp(w, "nan")) {
        KIO_WARN("Reading NaN value into matrix.");
        if (dbuf_push(vals, NAN) != KIO_OK) return KIO_ERR;
      } else {
        kio_set_error("Failed to read matrix from stream. Expecting numeric "
                      "matrix data, got %s", w);
        return KIO_ERR;
      }
    }
    if (end_row && vals->n > row_start) {
      size_t len = vals->n - row_start;
      if (ncols < 0) {
        if (len > INT32_MAX) {
          kio_set_error("Text matrix row too long");
          return KIO_ERR;
        }
        ncols = (int32_t)len;
      } else if (len != (size_t)ncols) {
        kio_set_error("Failed to read matrix from stream. Matrix has inconsistent "
                      "#cols: %d vs.%zu (processing row%d", ncols, len, nrows);
        return KIO_ERR;
      }
      if (nrows == INT32_MAX) {
        kio_set_error("Text matrix has too many rows");
        return KIO_ERR;
      }
      nrows++;
      row_start = vals->n;
    }
    if (done) break;
  }
  *rows = nrows;
  *cols = ncols < 0 ? 0 : ncols;
  return KIO_OK;
}

/* Text vector: " [ a b c ]" on one line. */
static int read_text_vector(FILE *f, int is_float, dbuf *vals) {
  char w[64];
  if (read_word(f, w, sizeof w) < 0) {
    kio_set_error("Failed to read vector from stream. EOF while trying to read vector.");
    return KIO_ERR;
  }
  if (strcmp(w, "[]") == 0) return KIO_OK;
  if (strcmp(w, "[") != 0) {
    kio_set_error("Failed to read vector from stream. Expected \"[\" but got %s", w);
    return KIO_ERR;
  }
  for (;;) {
    int c = peekc(f);
    if (c == '-' || (c >= '0' && c <= '9')) {
      double x;
      if (read_number(f, is_float, &x, "vector") != KIO_OK) return fail_with("vector");
      int n = peekc(f);
      if (n != ']' && !(n != EOF && isspace(n))) {
        kio_set_error("Failed to read vector from stream. Expected whitespace after number.");
        return KIO_ERR;
      }
      if (dbuf_push(vals, x) != KIO_OK) return KIO_ERR;
    } else if (c == ' ' || c == '\t') {
      getc_unlocked(f);
    } else if (c == ']') {
      getc_unlocked(f);
      eat_newline(f);
      return KIO_OK;
    } else if (c == EOF) {
      kio_set_error("Failed to read vector from stream. EOF while reading vector data.");
      return KIO_ERR;
    } else if (c == '\n' || c == '\r') {
      kio_set_error("Failed to read vector from stream. Newline found while reading "
                    "vector (maybe it's a matrix?)");
      return KIO_ERR;
    } else {
      read_word(f, w, sizeof w);
      if (!strcasecmp(w, "inf") || !strcasecmp(w, "infinity")) {
        KIO_WARN("Reading infinite value into vector.");
        if (dbuf_push(vals, INFINITY) != KIO_OK) return KIO_ERR;
      } else if (!strcasecmp(w, "nan")) {
        KIO_WARN("Reading NaN value into vector.");
        if (dbuf_push(vals, NAN) != KIO_OK) return KIO_ERR;
      } else {
        kio_set_error("Failed to read vector from stream. Expecting numeric vector "
                      "data, got %s", w);
        return KIO_ERR;
      }
    }
  }
}

/* ---- matrix read/write ---- */

int kio_matrix_read(FILE *f, int binary, kio_matrix *m) {
  if (binary) {
    int c = kio_peek(f, 1);
    if (c == 'C') {
      if (kio_cmatrix_read_float(f, m) != KIO_OK) return fail_with("matrix");
      return KIO_OK;
    }
    int is_double = c == 'D';
    int32_t rows, cols;
    if (read_bin_dims(f, is_double ? "DM" : "FM", &rows, &cols, "matrix") != KIO_OK)
      return KIO_ERR;
    if (rows == 0 || cols == 0) rows = cols = 0;  /* stored as 0 x 0, as in Kaldi */
    m->rows = m->cols = 0;
    int rc = read_elems(f, (void **)&m->data, &m->cap, (size_t)rows * (size_t)cols,
                        is_double ? sizeof(double) : sizeof(float), sizeof(float), "matrix");
    if (rc == KIO_OK) { m->rows = rows; m->cols = cols; }
    return rc;
  }
  dbuf b = {0};
  int32_t rows, cols;
  int rc = read_text_matrix(f, 1, &b, &rows, &cols);
  if (rc == KIO_OK) rc = kio_matrix_resize(m, rows, cols);
  if (rc == KIO_OK)
    for (size_t i = 0; i < (size_t)m->rows * m->cols; i++) m->data[i] = (float)b.v[i];
  free(b.v);
  return rc;
}

int kio_dmatrix_read(FILE *f, int binary, kio_dmatrix *m) {
  if (binary) {
    int c = kio_peek(f, 1);
    if (c == 'C') {  /* Kaldi decompresses in float and widens */
      kio_matrix tmp = {0};
      if (kio_cmatrix_read_float(f, &tmp) != KIO_OK) return fail_with("matrix");
      int rc = mat_setsize((void **)&m->data, &m->cap, &m->rows, &m->cols, tmp.rows,
                           tmp.cols, sizeof(double));
      for (size_t i = 0; rc == KIO_OK && i < (size_t)tmp.rows * tmp.cols; i++)
        m->data[i] = tmp.data[i];
      kio_matrix_free(&tmp);
      return rc;
    }
    int is_float = c == 'F';
    int32_t rows, cols;
    if (read_bin_dims(f, is_float ? "FM" : "DM", &rows, &cols, "matrix") != KIO_OK)
      return KIO_ERR;
    if (rows == 0 || cols == 0) rows = cols = 0;
    m->rows = m->cols = 0;
    int rc = read_elems(f, (void **)&m->data, &m->cap, (size_t)rows * (size_t)cols,
                        is_float ? sizeof(float) : sizeof(double), sizeof(double), "matrix");
    if (rc == KIO_OK) { m->rows = rows; m->cols = cols; }
    return rc;
  }
  dbuf b = {0};
  int32_t rows, cols;
  int rc = read_text_matrix(f, 0, &b, &rows, &cols);
  if (rc == KIO_OK) rc = kio_dmatrix_resize(m, rows, cols);
  if (rc == KIO_OK && m->rows) memcpy(m->data, b.v, (size_t)m->rows * m->cols * sizeof(double));
  free(b.v);
  return rc;
}

static int write_check(FILE *f, const char *what) {
  if (ferror(f)) {
    kio_set_error("Failed to write %s to stream", what);
    return KIO_ERR;
  }
  return KIO_OK;
}

/* Text element: C++ "<<" at precision 7, then a space. */
static void write_text_elem(FILE *f, double v) {
  kio_write_text_real(f, v);
  putc_unlocked(' ', f);
}

/* data: float elements, or double ones if is_double (one pointer, so no
 * caller passes NULL for the other type). */
static double elem_at(const void *data, int is_double, size_t k) {
  return is_double ? ((const double *)data)[k] : (double)((const float *)data)[k];
}

static int write_text_matrix(FILE *f, int32_t rows, int32_t cols, const void *data,
                             int is_double) {
  if (cols == 0 || rows == 0) {
    fputs(" [ ]\n", f);
  } else {
    fputs(" [", f);
    for (size_t i = 0; i < (size_t)rows; i++) {
      fputs("\n  ", f);
      for (size_t j = 0; j < (size_t)cols; j++) {
        size_t k = i * (size_t)cols + j;
        write_text_elem(f, elem_at(data, is_double, k));
      }
    }
    fputs("]\n", f);
  }
  return write_check(f, "matrix");
}

int kio_matrix_write(FILE *f, int binary, const kio_matrix *m) {
  if (!binary) return write_text_matrix(f, m->rows, m->cols, m->data, 0);
  kio_write_token(f, 1, "FM");
  kio_write_int32(f, 1, m->rows);
  kio_write_int32(f, 1, m->cols);
  size_t n = (size_t)m->rows * m->cols;
  if (n && fwrite(m->data, sizeof(float), n, f) != n) {
    kio_set_error("Failed to write matrix to stream");
    return KIO_ERR;
  }
  return write_check(f, "matrix");
}

int kio_dmatrix_write(FILE *f, int binary, const kio_dmatrix *m) {
  if (!binary) return write_text_matrix(f, m->rows, m->cols, m->data, 1);
  kio_write_token(f, 1, "DM");
  kio_write_int32(f, 1, m->rows);
  kio_write_int32(f, 1, m->cols);
  size_t n = (size_t)m->rows * m->cols;
  if (n && fwrite(m->data, sizeof(double), n, f) != n) {
    kio_set_error("Failed to write matrix to stream");
    return KIO_ERR;
  }
  return write_check(f, "matrix");
}

/* ---- vector read/write ---- */

int kio_vector_read(FILE *f, int binary, kio_vector *v) {
  if (binary) {
    int is_double = kio_peek(f, 1) == 'D';
    int32_t dim;
    if (read_bin_dims(f, is_double ? "DV" : "FV", &dim, NULL, "vector") != KIO_OK)
      return KIO_ERR;
    v->dim = 0;
    int rc = read_elems(f, (void **)&v->data, &v->cap, (size_t)dim,
                        is_double ? sizeof(double) : sizeof(float), sizeof(float), "vector");
    if (rc == KIO_OK) v->dim = dim;
    return rc;
  }
  dbuf b = {0};
  int rc = read_text_vector(f, 1, &b);
  if (rc == KIO_OK && b.n > INT32_MAX) {
    kio_set_error("Text vector too long");
    rc = KIO_ERR;
  }
  if (rc == KIO_OK) rc = kio_vector_resize(v, (int32_t)b.n);
  for (size_t i = 0; rc == KIO_OK && i < b.n; i++) v->data[i] = (float)b.v[i];
  free(b.v);
  return rc;
}

int kio_dvector_read(FILE *f, int binary, kio_dvector *v) {
  if (binary) {
    int is_float = kio_peek(f, 1) == 'F';
    int32_t dim;
    if (read_bin_dims(f, is_float ? "FV" : "DV", &dim, NULL, "vector") != KIO_OK)
      return KIO_ERR;
    v->dim = 0;
    int rc = read_elems(f, (void **)&v->data, &v->cap, (size_t)dim,
                        is_float ? sizeof(float) : sizeof(double), sizeof(double), "vector");
    if (rc == KIO_OK) v->dim = dim;
    return rc;
  }
  dbuf b = {0};
  int rc = read_text_vector(f, 0, &b);
  if (rc == KIO_OK && b.n > INT32_MAX) {
    kio_set_error("Text vector too long");
    rc = KIO_ERR;
  }
  if (rc == KIO_OK) rc = kio_dvector_resize(v, (int32_t)b.n);
  if (rc == KIO_OK && b.n) memcpy(v->data, b.v, b.n * sizeof(double));
  free(b.v);
  return rc;
}

static int write_text_vector(FILE *f, int32_t dim, const void *data, int is_double) {
  fputs(" [ ", f);
  for (size_t i = 0; i < (size_t)dim; i++) write_text_elem(f, elem_at(data, is_double, i));
  fputs("]\n", f);
  return write_check(f, "vector");
}

int kio_vector_write(FILE *f, int binary, const kio_vector *v) {
  if (!binary) return write_text_vector(f, v->dim, v->data, 0);
  kio_write_token(f, 1, "FV");
  kio_write_int32(f, 1, v->dim);
  if (v->dim && fwrite(v->data, sizeof(float), (size_t)v->dim, f) != (size_t)v->dim) {
    kio_set_error("Failed to write vector to stream");
    return KIO_ERR;
  }
  return write_check(f, "vector");
}

int kio_dvector_write(FILE *f, int binary, const kio_dvector *v) {
  if (!binary) return write_text_vector(f, v->dim, v->data, 1);
  kio_write_token(f, 1, "DV");
  kio_write_int32(f, 1, v->dim);
  if (v->dim && fwrite(v->data, sizeof(double), (size_t)v->dim, f) != (size_t)v->dim) {
    kio_set_error("Failed to write vector to stream");
    return KIO_ERR;
  }
  return write_check(f, "vector");
}

/* ---- holders ---- */

static int mh_read(FILE *f, int binary, void *obj) { return kio_matrix_read(f, binary, obj); }
static int mh_write(FILE *f, int binary, const void *obj) {
  return kio_matrix_write(f, binary, obj);
}
static void mh_free(void *obj) { kio_matrix_free(obj); }

/* scp range "[r1:r2,c1:c2]" (inclusive; -1,-1 = all), as Kaldi's
 * ParseMatrixRangeSpecifier + ExtractObjectRange: r2 may exceed rows-1 by up
 * to 3 (warning, clipped); everything else out of range is an error. */
static int mh_apply_range(void *obj, int32_t r1, int32_t r2, int32_t c1, int32_t c2) {
  kio_matrix *m = obj;
  int32_t rows = m->rows, cols = m->cols;
  if (r1 == -1 && r2 == -1) { r1 = 0; r2 = rows - 1; }
  if (c1 == -1 && c2 == -1) { c1 = 0; c2 = cols - 1; }
  const int32_t tolerance = 3;
  if (!(r1 >= 0 && r1 <= r2 && (int64_t)r2 < (int64_t)rows + tolerance &&
        c1 >= 0 && c1 <= c2 && c2 < cols && r1 < rows)) {
    kio_set_error("Invalid range specifier: %d:%d,%d:%d for matrix of size %dx%d",
                  r1, r2, c1, c2, rows, cols);
    return KIO_ERR;
  }
  if (r2 >= rows)
    KIO_WARN("Row range %d:%d goes beyond the number of rows of the matrix %d",
             r1, r2, rows);
  int32_t nr = (r2 < rows - 1 ? r2 : rows - 1) - r1 + 1, nc = c2 - c1 + 1;
  /* In place, moving forward: destination never overtakes the source. */
  for (int32_t i = 0; i < nr; i++)
    memmove(m->data + (size_t)i * nc,
            m->data + (size_t)(r1 + i) * cols + c1, (size_t)nc * sizeof(float));
  m->rows = nr;
  m->cols = nc;
  return KIO_OK;
}

int64_t kio_matrix_body_bytes(FILE *f, int binary) {
  if (!binary) return -1;
  int c = kio_peek(f, 1);
  if (c == 'C') return kio_cmatrix_body_bytes(f);
  if (c != 'F' && c != 'D') return -1;
  int32_t rows, cols;
  if (read_bin_dims(f, c == 'D' ? "DM" : "FM", &rows, &cols, "matrix") != KIO_OK) return -1;
  return (int64_t)rows * cols * (c == 'D' ? 8 : 4);
}

const kio_holder kio_matrix_holder = {
  "Matrix<float>", sizeof(kio_matrix), 1, mh_read, mh_write, mh_free, mh_apply_range
};

static int vh_read(FILE *f, int binary, void *obj) { return kio_vector_read(f, binary, obj); }
static int vh_write(FILE *f, int binary, const void *obj) {
  return kio_vector_write(f, binary, obj);
}
static void vh_free(void *obj) { kio_vector_free(obj); }

const kio_holder kio_vector_holder = {
  "Vector<float>", sizeof(kio_vector), 1, vh_read, vh_write, vh_free, NULL
};

static int dh_read(FILE *f, int binary, void *obj) { return kio_dmatrix_read(f, binary, obj); }
static int dh_write(FILE *f, int binary, const void *obj) {
  return kio_dmatrix_write(f, binary, obj);
}
static void dh_free(void *obj) { kio_dmatrix_free(obj); }

const kio_holder kio_dmatrix_holder = {
  "Matrix<double>", sizeof(kio_dmatrix), 1, dh_read, dh_write, dh_free, NULL
};

/* ---- Matrix<float> entries kept compressed (compressed-matrix.h) ---- */
static int rh_read(FILE *f, int binary, void *obj) {
  kio_cmatrix_raw *r = obj;
  r->format = 0;
  r->rows = r->cols = 0;
  if (binary && kio_peek(f, 1) == 'C') {
    int format;
    if (kio_cmatrix_read_raw(f, &format, &r->bytes, &r->cap) != KIO_OK) return fail_with("matrix");
    int32_t rows, cols;
    memcpy(&rows, r->bytes + 8, 4);
    memcpy(&cols, r->bytes + 12, 4);
    r->format = format;
    if (rows > 0 && cols > 0) {  /* else decompressed as 0 x 0 */
      r->rows = rows;
      r->cols = cols;
    }
    return KIO_OK;
  }
  int rc = kio_matrix_read(f, binary, &r->m);
  r->rows = r->m.rows;
  r->cols = r->m.cols;
  return rc;
}

/* The entry as a plain matrix in r->m (format 0). */
static int rh_materialise(kio_cmatrix_raw *r) {
  if (r->format && kio_cmatrix_decompress(r->format, r->bytes, r->bytes + 16, &r->m) != KIO_OK)
    return KIO_ERR;
  r->format = 0;
  return KIO_OK;
}

static int rh_write(FILE *f, int binary, const void *obj) {
  kio_cmatrix_raw *r = (kio_cmatrix_raw *)obj;
  if (rh_materialise(r) != KIO_OK) return KIO_ERR;
  return kio_matrix_write(f, binary, &r->m);
}

static void rh_free(void *obj) {
  kio_cmatrix_raw *r = obj;
  free(r->bytes);
  kio_matrix_free(&r->m);
  memset(r, 0, sizeof *r);
}

static int rh_apply_range(void *obj, int32_t r1, int32_t r2, int32_t c1, int32_t c2) {
  kio_cmatrix_raw *r = obj;
  if (rh_materialise(r) != KIO_OK) return KIO_ERR;
  int rc = mh_apply_range(&r->m, r1, r2, c1, c2);
  r->rows = r->m.rows;
  r->cols = r->m.cols;
  return rc;
}

const kio_holder kio_cmatrix_raw_holder = {
  "Matrix<float>", sizeof(kio_cmatrix_raw), 1, rh_read, rh_write, rh_free, rh_apply_range
};
