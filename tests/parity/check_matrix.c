/* Matrix / Vector I/O against Kaldi's fixtures (reference 2.1, 2.2). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/io/io.h"
#include "base/sys/log.h"
#include "base/matrix/matrix.h"
#include "base/io/table.h"
#include "tests/lib/test-util.h"

/* One archive entry: key, separator, header; returns 1, 0 at EOF, -1 error. */
static int next_entry(FILE *f, char *key, size_t cap, int *binary) {
  if (fscanf(f, " ") < 0) return 0;
  int c = getc(f);
  if (c == EOF) return 0;
  ungetc(c, f);
  size_t n = 0;
  while ((c = getc(f)) != EOF && c != ' ' && c != '\n' && n + 1 < cap) key[n++] = (char)c;
  key[n] = 0;
  if (c != ' ') return -1;
  return kio_read_header(f, binary) == KIO_OK ? 1 : -1;
}

/* All matrices of a binary or text archive (max 64). */
typedef struct { int n; char key[64][128]; kio_matrix m[64]; } mat_list;

static void load_ark(const char *path, mat_list *l) {
  FILE *f = fopen(path, "rb");
  ck_assert_msg(f != NULL, "open %s", path);
  memset(l, 0, sizeof *l);
  int binary, r;
  while (l->n < 64 && (r = next_entry(f, l->key[l->n], 128, &binary)) == 1) {
    ck_assert_msg(kio_matrix_read(f, binary, &l->m[l->n]) == KIO_OK, "%s %s: %s",
                  path, l->key[l->n], kio_last_error());
    l->n++;
  }
  ck_assert_int_ne(r, -1);
  fclose(f);
}

static void free_list(mat_list *l) {
  for (int i = 0; i < l->n; i++) kio_matrix_free(&l->m[i]);
}

/* Reads one object from an in-memory buffer. */
static FILE *mem_in(const void *buf, size_t len) { return fmemopen((void *)buf, len, "rb"); }

START_TEST(binary_fm_roundtrip_bytes) {
  static mat_list l;
  load_ark("feats/delta.ark", &l);
  ck_assert_int_eq(l.n, 40);
  ck_assert_int_eq(l.m[0].cols, 39);
  char *out = NULL;
  size_t len = 0;
  FILE *w = open_memstream(&out, &len);
  for (int i = 0; i < l.n; i++) {
    fprintf(w, "%s ", l.key[i]);
    fputc(0, w);
    fputc('B', w);
    ck_assert_int_eq(kio_matrix_write(w, 1, &l.m[i]), KIO_OK);
  }
  fclose(w);
  size_t flen;
  unsigned char *orig = tu_read_file("feats/delta.ark", &flen);
  ck_assert_uint_eq(len, flen);
  ck_assert(memcmp(out, orig, len) == 0);
  free(out);
  free(orig);
  free_list(&l);
}
END_TEST

/* DM, FV, DV written by us read back (same and other precision) and rewrite
 * byte-identically; the layout is checked byte by byte on a small case. */
START_TEST(binary_dm_fv_dv_roundtrip) {
  static mat_list l;
  load_ark("compressed/raw.ark", &l);
  kio_matrix *fm = &l.m[0];
  kio_dmatrix dm = {0};
  ck_assert_int_eq(kio_dmatrix_resize(&dm, fm->rows, fm->cols), KIO_OK);
  for (size_t i = 0; i < (size_t)fm->rows * fm->cols; i++)
    dm.data[i] = fm->data[i] * 1.0000001;
  char *b1 = NULL, *b2 = NULL;
  size_t n1 = 0, n2 = 0;
  FILE *w = open_memstream(&b1, &n1);
  kio_dmatrix_write(w, 1, &dm);
  fclose(w);
  ck_assert_uint_eq(n1, 3 + 10 + 8 * (size_t)fm->rows * fm->cols);
  ck_assert(memcmp(b1, "DM \4", 4) == 0);
  kio_dmatrix dm2 = {0};
  FILE *r = mem_in(b1, n1);
  ck_assert_int_eq(kio_dmatrix_read(r, 1, &dm2), KIO_OK);
  fclose(r);
  w = open_memstream(&b2, &n2);
  kio_dmatrix_write(w, 1, &dm2);
  fclose(w);
  ck_assert(n1 == n2 && memcmp(b1, b2, n1) == 0);
  /* DM into a float matrix: each element narrowed. */
  kio_matrix fm2 = {0};
  r = mem_in(b1, n1);
  ck_assert_int_eq(kio_matrix_read(r, 1, &fm2), KIO_OK);
  fclose(r);
  for (size_t i = 0; i < (size_t)fm->rows * fm->cols; i++)
    ck_assert(fm2.data[i] == (float)dm.data[i]);
  /* FM into a double matrix: widened exactly. */
  free(b2);
  w = open_memstream(&b2, &n2);
  kio_matrix_write(w, 1, fm);
  fclose(w);
  r = mem_in(b2, n2);
  ck_assert_int_eq(kio_dmatrix_read(r, 1, &dm2), KIO_OK);
  fclose(r);
  for (size_t i = 0; i < (size_t)fm->rows * fm->cols; i++)
    ck_assert(dm2.data[i] == (double)fm->data[i]);
  free(b1);
  free(b2);

  /* Vectors. */
  kio_vector fv = {0}, fv2 = {0};
  kio_dvector dv = {0}, dv2 = {0};
  kio_vector_resize(&fv, 3);
  fv.data[0] = 1.5f; fv.data[1] = -2.25f; fv.data[2] = 1e-3f;
  w = open_memstream(&b1, &n1);
  kio_vector_write(w, 1, &fv);
  fclose(w);
  static const unsigned char want[] = {'F', 'V', ' ', 4, 3, 0, 0, 0};
  ck_assert_uint_eq(n1, sizeof want + 12);
  ck_assert(memcmp(b1, want, sizeof want) == 0);
  r = mem_in(b1, n1);
  ck_assert_int_eq(kio_dvector_read(r, 1, &dv), KIO_OK);  /* FV -> double */
  fclose(r);
  ck_assert_int_eq(dv.dim, 3);
  ck_assert(dv.data[2] == (double)1e-3f);
  r = mem_in(b1, n1);
  ck_assert_int_eq(kio_vector_read(r, 1, &fv2), KIO_OK);
  fclose(r);
  w = open_memstream(&b2, &n2);
  kio_vector_write(w, 1, &fv2);
  fclose(w);
  ck_assert(n1 == n2 && memcmp(b1, b2, n1) == 0);
  free(b1);
  free(b2);
  dv.data[2] = 1e-3;
  w = open_memstream(&b1, &n1);
  kio_dvector_write(w, 1, &dv);
  fclose(w);
  ck_assert(memcmp(b1, "DV \4\3\0\0\0", 8) == 0 && n1 == 8 + 24);
  r = mem_in(b1, n1);
  ck_assert_int_eq(kio_dvector_read(r, 1, &dv2), KIO_OK);
  fclose(r);
  w = open_memstream(&b2, &n2);
  kio_dvector_write(w, 1, &dv2);
  fclose(w);
  ck_assert(n1 == n2 && memcmp(b1, b2, n1) == 0);
  r = mem_in(b1, n1);
  ck_assert_int_eq(kio_vector_read(r, 1, &fv2), KIO_OK);  /* DV -> float */
  fclose(r);
  ck_assert(fv2.data[2] == 1e-3f);
  free(b1);
  free(b2);
  kio_vector_free(&fv);
  kio_vector_free(&fv2);
  kio_dvector_free(&dv);
  kio_dvector_free(&dv2);
  kio_matrix_free(&fm2);
  kio_dmatrix_free(&dm);
  kio_dmatrix_free(&dm2);
  free_list(&l);
}
END_TEST

/* delta3.txt.ark (copy-feats ark,t) = first three utterances of delta.ark. */
START_TEST(text_matches_binary) {
  static mat_list t, b;
  load_ark("feats/delta3.txt.ark", &t);
  load_ark("feats/delta.ark", &b);
  ck_assert_int_eq(t.n, 3);
  for (int k = 0; k < 3; k++) {
    ck_assert_str_eq(t.key[k], b.key[k]);
    ck_assert_int_eq(t.m[k].rows, b.m[k].rows);
    ck_assert_int_eq(t.m[k].cols, b.m[k].cols);
    for (size_t i = 0; i < (size_t)b.m[k].rows * b.m[k].cols; i++) {
      float x = t.m[k].data[i], y = b.m[k].data[i];
      /* precision 7 printing: relative error <= 5e-7 */
      ck_assert_msg(fabsf(x - y) <= 1e-6f * fabsf(y), "%s[%zu]: %.9g vs %.9g",
                    t.key[k], i, x, y);
    }
  }
  /* Our text writer reproduces Kaldi's text archive byte for byte. */
  char *out = NULL;
  size_t len = 0;
  FILE *w = open_memstream(&out, &len);
  for (int k = 0; k < 3; k++) {
    fprintf(w, "%s ", b.key[k]);
    ck_assert_int_eq(kio_matrix_write(w, 0, &b.m[k]), KIO_OK);
  }
  fclose(w);
  size_t flen;
  unsigned char *orig = tu_read_file("feats/delta3.txt.ark", &flen);
  ck_assert_uint_eq(len, flen);
  ck_assert(memcmp(out, orig, len) == 0);
  free(out);
  free(orig);
  free_list(&t);
  free_list(&b);
}
END_TEST

static int read_text_mat(const char *s, kio_matrix *m) {
  FILE *f = mem_in(s, strlen(s));
  int rc = kio_matrix_read(f, 0, m);
  fclose(f);
  return rc;
}

START_TEST(text_reader_rules) {
  kio_matrix m = {0};
  ck_assert_int_eq(read_text_mat(" [ 1 2 3 ; 4 5 6 ]\n", &m), KIO_OK);
  ck_assert_int_eq(m.rows, 2);
  ck_assert_int_eq(m.cols, 3);
  ck_assert(m.data[5] == 6.0f);
  ck_assert_int_eq(read_text_mat("[\r\n 1.5 -2e3\r\n 3 4 ]\r\n", &m), KIO_OK);
  ck_assert(m.rows == 2 && m.cols == 2 && m.data[1] == -2000.0f);
  ck_assert_int_eq(read_text_mat("[]", &m), KIO_OK);
  ck_assert(m.rows == 0 && m.cols == 0);
  ck_assert_int_eq(read_text_mat(" [ ]\n", &m), KIO_OK);
  ck_assert(m.rows == 0 && m.cols == 0);
  /* inf / nan (any case) are accepted with a warning */
  int w0 = kio_log_num_warnings();
  ck_assert_int_eq(read_text_mat("[ 1 INF\n nan 2 ]", &m), KIO_OK);
  ck_assert(isinf(m.data[1]) && isnan(m.data[2]));
  ck_assert_int_eq(kio_log_num_warnings(), w0 + 2);
  /* correctly rounded to float, as C++ >> float */
  ck_assert_int_eq(read_text_mat("[ 0.1 16777217 ]", &m), KIO_OK);
  ck_assert(m.data[0] == 0.1f && m.data[1] == 16777216.0f);
  /* errors */
  const char *bad[] = {
    "[ 1 2\n 3 ]",        /* unequal rows */
    "[ 1 2\n 3 4",        /* EOF inside */
    "FM 1 2",             /* wrong token in text mode */
    "[ 1 abc ]",          /* not a number */
    "[ 1 1e50 ]",         /* float overflow */
    "[ 1 - ]",            /* lone sign */
    "[ 1 .5 ]",           /* C++ would not start a number with '.' here */
    "",                   /* empty */
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    kio_clear_error();
    ck_assert_msg(read_text_mat(bad[i], &m) == KIO_ERR, "accepted %s", bad[i]);
    ck_assert_msg(kio_last_error()[0] != 0, "no detail for %s", bad[i]);
  }
  kio_dmatrix d = {0};
  FILE *f = mem_in("[ 0.1 2\n3 4 ]", 13);
  ck_assert_int_eq(kio_dmatrix_read(f, 0, &d), KIO_OK);
  fclose(f);
  ck_assert(d.data[0] == 0.1);
  kio_dmatrix_free(&d);
  kio_matrix_free(&m);
}
END_TEST

START_TEST(text_vectors) {
  kio_vector v = {0};
  kio_dvector dv = {0};
  char *out = NULL;
  size_t len = 0;
  FILE *f = mem_in(" [ 1 -2.5 3e-05 ]\n", 18);
  ck_assert_int_eq(kio_vector_read(f, 0, &v), KIO_OK);
  ck_assert_int_eq(getc(f), EOF);  /* the newline was eaten */
  fclose(f);
  ck_assert(v.dim == 3 && v.data[2] == 3e-05f);
  FILE *w = open_memstream(&out, &len);
  kio_vector_write(w, 0, &v);
  kio_vector_resize(&v, 0);
  kio_vector_write(w, 0, &v);
  fclose(w);
  ck_assert_str_eq(out, " [ 1 -2.5 3e-05 ]\n [ ]\n");
  free(out);
  f = mem_in("[ 0.1 ]", 7);
  ck_assert_int_eq(kio_dvector_read(f, 0, &dv), KIO_OK);
  fclose(f);
  ck_assert(dv.dim == 1 && dv.data[0] == 0.1);
  const char *bad[] = {"[ 1 2\n 3 ]", "[ 1 2", "[ 1x ]", "[ 1 foo ]", "<V> 1"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    kio_clear_error();
    f = mem_in(bad[i], strlen(bad[i]));
    ck_assert_msg(kio_vector_read(f, 0, &v) == KIO_ERR, "accepted %s", bad[i]);
    fclose(f);
    ck_assert(kio_last_error()[0] != 0);
  }
  kio_vector_free(&v);
  kio_dvector_free(&dv);
}
END_TEST

/* Text matrix write format: " [\n  a b \n  c d ]\n", empty " [ ]\n". */
START_TEST(text_write_format) {
  kio_matrix m = {0};
  kio_matrix_resize(&m, 2, 2);
  m.data[0] = 1; m.data[1] = 0.1f; m.data[2] = -3.25e-10f; m.data[3] = 123456789.0f;
  char *out = NULL;
  size_t len = 0;
  FILE *w = open_memstream(&out, &len);
  kio_matrix_write(w, 0, &m);
  kio_matrix_resize(&m, 0, 0);
  kio_matrix_write(w, 0, &m);
  fclose(w);
  ck_assert_str_eq(out, " [\n  1 0.1 \n  -3.25e-10 1.234568e+08 ]\n [ ]\n");
  free(out);
  kio_matrix_free(&m);
}
END_TEST

/* Truncation anywhere in a binary FM / FV gives KIO_ERR with detail. */
START_TEST(binary_errors) {
  static mat_list l;
  load_ark("compressed/raw.ark", &l);
  char *buf = NULL;
  size_t len = 0;
  FILE *w = open_memstream(&buf, &len);
  kio_matrix_write(w, 1, &l.m[0]);
  fclose(w);
  kio_matrix m = {0};
  size_t cuts[] = {0, 1, 2, 3, 4, 7, 8, 12, 13, 100, len - 1};
  for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
    kio_clear_error();
    FILE *f = cuts[i] ? mem_in(buf, cuts[i]) : fopen("/dev/null", "rb");
    ck_assert_msg(kio_matrix_read(f, 1, &m) == KIO_ERR, "cut %zu", cuts[i]);
    ck_assert(kio_last_error()[0] != 0);
    fclose(f);
  }
  /* wrong token, wrong int size byte, negative size */
  unsigned char bad1[] = {'X', 'M', ' ', 4, 1, 0, 0, 0, 4, 1, 0, 0, 0, 0, 0, 0, 0};
  unsigned char bad2[] = {'F', 'M', ' ', 8, 1, 0, 0, 0, 4, 1, 0, 0, 0, 0, 0, 0, 0};
  unsigned char bad3[] = {'F', 'M', ' ', 4, 0xff, 0xff, 0xff, 0xff, 4, 1, 0, 0, 0};
  unsigned char bad4[] = {'F', 'V', ' ', 4, 1, 0, 0, 0, 0, 0, 0, 0};
  const unsigned char *bads[] = {bad1, bad2, bad3, bad4};
  size_t lens[] = {sizeof bad1, sizeof bad2, sizeof bad3, sizeof bad4};
  for (int i = 0; i < 4; i++) {
    kio_clear_error();
    FILE *f = mem_in(bads[i], lens[i]);
    ck_assert_msg(kio_matrix_read(f, 1, &m) == KIO_ERR, "bad%d", i + 1);
    fclose(f);
    ck_assert(kio_last_error()[0] != 0);
  }
  ck_assert(strstr(kio_last_error(), "FM") != NULL);  /* "Expected token FM, got FV" */
  kio_vector v = {0};
  FILE *f = mem_in(bad4, sizeof bad4 - 1);  /* truncated vector */
  ck_assert_int_eq(kio_vector_read(f, 1, &v), KIO_ERR);
  fclose(f);
  f = mem_in(bad1, sizeof bad1);
  ck_assert_int_eq(kio_vector_read(f, 1, &v), KIO_ERR);
  fclose(f);
  kio_vector_free(&v);
  kio_matrix_free(&m);
  free(buf);
  free_list(&l);
}
END_TEST

/* Holder range: rows r1..r2, cols c1..c2 inclusive, -1 = all; r2 may pass
 * the end by up to 3 (clipped, warning). */
START_TEST(holder_apply_range) {
  static mat_list l;
  load_ark("compressed/raw.ark", &l);
  const kio_matrix *src = &l.m[0];
  int R = src->rows, C = src->cols;
  kio_matrix m = {0};
  const kio_holder *h = &kio_matrix_holder;
  ck_assert_int_eq(h->has_header, 1);
  ck_assert(h->apply_range != NULL);
  struct { int r1, r2, c1, c2, ok, nr, nc, row0, col0; } cases[] = {
    {10, 19, -1, -1, 1, 10, C, 10, 0},
    {0, 4, 3, 7, 1, 5, 5, 0, 3},
    {-1, -1, 2, 2, 1, R, 1, 0, 2},
    {R - 5, R + 2, -1, -1, 1, 5, C, R - 5, 0},
    {R - 5, R + 3, -1, -1, 0, 0, 0, 0, 0},
    {5, 4, -1, -1, 0, 0, 0, 0, 0},
    {0, 1, 0, C, 0, 0, 0, 0, 0},
    {R, R + 1, -1, -1, 0, 0, 0, 0, 0},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    kio_matrix_resize(&m, R, C);
    memcpy(m.data, src->data, sizeof(float) * R * C);
    int w0 = kio_log_num_warnings();
    int rc = h->apply_range(&m, cases[k].r1, cases[k].r2, cases[k].c1, cases[k].c2);
    if (!cases[k].ok) {
      ck_assert_msg(rc == KIO_ERR, "case %zu accepted", k);
      continue;
    }
    ck_assert_msg(rc == KIO_OK, "case %zu: %s", k, kio_last_error());
    ck_assert_int_eq(m.rows, cases[k].nr);
    ck_assert_int_eq(m.cols, cases[k].nc);
    ck_assert_int_eq(kio_log_num_warnings(), w0 + (cases[k].r2 >= R));
    for (int i = 0; i < m.rows; i++)
      for (int j = 0; j < m.cols; j++)
        ck_assert(m.data[i * m.cols + j] ==
                  src->data[(i + cases[k].row0) * C + j + cases[k].col0]);
  }
  kio_matrix_free(&m);
  free_list(&l);
}
END_TEST

/* Holders read/write/free through the generic interface. */
START_TEST(holders_generic) {
  void *obj = calloc(1, kio_vector_holder.obj_size);
  FILE *f = mem_in("FV \4\2\0\0\0\0\0\200?\0\0\0@", 16);
  ck_assert_int_eq(kio_vector_holder.read(f, 1, obj), KIO_OK);
  fclose(f);
  kio_vector *v = obj;
  ck_assert(v->dim == 2 && v->data[0] == 1.0f && v->data[1] == 2.0f);
  char *out = NULL;
  size_t len = 0;
  FILE *w = open_memstream(&out, &len);
  kio_vector_holder.write(w, 0, obj);
  fclose(w);
  ck_assert_str_eq(out, " [ 1 2 ]\n");
  free(out);
  kio_vector_holder.free(obj);
  ck_assert(v->data == NULL && v->dim == 0);
  free(obj);
}
END_TEST

/* A 2000 x 400 FM (3.2 MB) reads back exactly (one fread into the buffer). */
START_TEST(big_matrix) {
  kio_matrix m = {0}, m2 = {0};
  kio_matrix_resize(&m, 2000, 400);
  for (size_t i = 0; i < 800000; i++) m.data[i] = (float)i * 0.5f - 7.0f;
  const char *p = tu_tmp_path("big.mat");
  FILE *w = fopen(p, "wb");
  kio_matrix_write(w, 1, &m);
  fclose(w);
  FILE *f = fopen(p, "rb");
  ck_assert_int_eq(kio_matrix_read(f, 1, &m2), KIO_OK);
  ck_assert_int_eq(getc(f), EOF);
  fclose(f);
  ck_assert(memcmp(m.data, m2.data, 800000 * sizeof(float)) == 0);
  /* buffer reuse: a smaller read keeps capacity */
  size_t cap = m2.cap;
  f = fopen("compressed/raw.ark", "rb");
  char key[128];
  int binary;
  ck_assert_int_eq(next_entry(f, key, sizeof key, &binary), 1);
  ck_assert_int_eq(kio_matrix_read(f, binary, &m2), KIO_OK);
  fclose(f);
  ck_assert_uint_eq(m2.cap, cap);
  kio_matrix_free(&m);
  kio_matrix_free(&m2);
  ck_assert(m.data == NULL && m.rows == 0);
}
END_TEST

/* Found by fuzzing (tests/fuzz): a header claiming 2^31 elements followed
 * by a few bytes must fail without allocating for the claim; objects larger
 * than the 1 M-element read chunk still read exactly (growing buffer). */
START_TEST(huge_claimed_sizes) {
  unsigned char fv[3 + 5 + 40] = {'F', 'V', ' ', 4, 0xff, 0xff, 0xff, 0x7f};
  unsigned char fm[3 + 10 + 40] = {'F', 'M', ' ', 4, 0x00, 0x00, 0x01, 0x00,
                                   4, 0x00, 0x80, 0x00, 0x00};  /* 65536 x 32768 */
  unsigned char dm[3 + 10 + 40] = {'D', 'M', ' ', 4, 0x00, 0x00, 0x01, 0x00,
                                   4, 0x00, 0x80, 0x00, 0x00};
  kio_vector v = {0};
  kio_dvector dv = {0};
  kio_matrix m = {0};
  kio_dmatrix d = {0};
  FILE *f = mem_in(fv, sizeof fv);
  ck_assert_int_eq(kio_vector_read(f, 1, &v), KIO_ERR);
  fclose(f);
  ck_assert(v.dim == 0 && v.cap <= (1u << 20));
  ck_assert(strstr(kio_last_error(), "truncated") != NULL);
  f = mem_in(fv, sizeof fv);
  ck_assert_int_eq(kio_dvector_read(f, 1, &dv), KIO_ERR);
  fclose(f);
  ck_assert(dv.dim == 0 && dv.cap <= (1u << 20));
  f = mem_in(fm, sizeof fm);
  ck_assert_int_eq(kio_matrix_read(f, 1, &m), KIO_ERR);
  fclose(f);
  ck_assert(m.rows == 0 && m.cols == 0 && m.cap <= (1u << 20));
  f = mem_in(dm, sizeof dm);
  ck_assert_int_eq(kio_matrix_read(f, 1, &m), KIO_ERR);
  fclose(f);
  ck_assert(m.rows == 0 && m.cap <= (1u << 20));
  f = mem_in(fm, sizeof fm);
  ck_assert_int_eq(kio_dmatrix_read(f, 1, &d), KIO_ERR);
  fclose(f);
  ck_assert(d.rows == 0 && d.cap <= (1u << 20));
  /* Text numbers: 'e' and sign at the end of the 128-byte number buffer
   * were written past it (fuzzing); a longer run is now an error, numbers
   * of up to 126 characters ("0.5000...0e-0") still read. */
  char txt[400];
  for (int len = 100; len <= 140; len++) {
    int k = snprintf(txt, sizeof txt, " [ 0.5");
    while (k < 3 + len - 3) txt[k++] = '0';  /* the number starts at txt + 3 */
    k += snprintf(txt + k, sizeof txt - k, "e-0 ]\n");
    f = mem_in(txt, (size_t)k);
    int rc = kio_matrix_read(f, 0, &m);
    fclose(f);
    if (len <= 126) {
      ck_assert_msg(rc == KIO_OK && m.rows == 1 && m.cols == 1 && m.data[0] == 0.5f, "len %d", len);
    } else {
      ck_assert_msg(rc == KIO_ERR, "len %d", len);
    }
  }
  /* 1100 x 1000 (past one chunk), float and double, through both readers */
  kio_matrix big = {0};
  kio_dmatrix dbig = {0};
  kio_matrix_resize(&big, 1100, 1000);
  kio_dmatrix_resize(&dbig, 1100, 1000);
  for (size_t i = 0; i < 1100000; i++) {
    big.data[i] = (float)i * 0.25f - 3.0f;
    dbig.data[i] = (double)i / 3.0;
  }
  char *buf = NULL;
  size_t len = 0;
  FILE *w = open_memstream(&buf, &len);
  kio_matrix_write(w, 1, &big);
  kio_dmatrix_write(w, 1, &dbig);
  fclose(w);
  f = mem_in(buf, len);
  ck_assert_int_eq(kio_matrix_read(f, 1, &m), KIO_OK);
  ck_assert(m.rows == 1100 && m.cols == 1000);
  ck_assert(memcmp(m.data, big.data, 1100000 * sizeof(float)) == 0);
  ck_assert_int_eq(kio_matrix_read(f, 1, &m), KIO_OK);  /* DM -> float */
  for (size_t i = 0; i < 1100000; i++) ck_assert(m.data[i] == (float)dbig.data[i]);
  ck_assert_int_eq(getc(f), EOF);
  fclose(f);
  f = mem_in(buf, len);
  ck_assert_int_eq(kio_dmatrix_read(f, 1, &d), KIO_OK);  /* FM -> double */
  for (size_t i = 0; i < 1100000; i++) ck_assert(d.data[i] == (double)big.data[i]);
  ck_assert_int_eq(kio_dmatrix_read(f, 1, &d), KIO_OK);
  ck_assert(memcmp(d.data, dbig.data, 1100000 * sizeof(double)) == 0);
  fclose(f);
  /* the same object cut short fails and leaves an empty matrix */
  f = mem_in(buf, 3 + 10 + 4100000);
  ck_assert_int_eq(kio_matrix_read(f, 1, &m), KIO_ERR);
  ck_assert(m.rows == 0 && m.cols == 0);
  fclose(f);
  free(buf);
  kio_matrix_free(&big);
  kio_dmatrix_free(&dbig);
  kio_matrix_free(&m);
  kio_dmatrix_free(&d);
  kio_vector_free(&v);
  kio_dvector_free(&dv);
}
END_TEST

/* ---- archive level (base/io/table-read.c) ---- */

static int same_bits(const kio_matrix *a, const kio_matrix *b) {
  return a->rows == b->rows && a->cols == b->cols &&
         memcmp(a->data, b->data, sizeof(float) * a->rows * a->cols) == 0;
}

/* feats/delta.ark read as an archive and through delta.scp (offsets). */
START_TEST(table_ark_vs_scp) {
  kio_seq_reader *a = NULL, *s = NULL;
  ck_assert_int_eq(kio_seq_open(&a, "ark:feats/delta.ark", &kio_matrix_holder), KIO_OK);
  ck_assert_int_eq(kio_seq_open(&s, "scp:feats/delta.scp", &kio_matrix_holder), KIO_OK);
  int n = 0;
  for (; !kio_seq_done(a); kio_seq_next(a), kio_seq_next(s), n++) {
    ck_assert(!kio_seq_done(s));
    ck_assert_str_eq(kio_seq_key(a), kio_seq_key(s));
    kio_matrix *ma = kio_seq_value(a), *ms = kio_seq_value(s);
    ck_assert(ma != NULL && ms != NULL);
    ck_assert_int_eq(ma->cols, 39);
    ck_assert_msg(same_bits(ma, ms), "%s differs", kio_seq_key(a));
  }
  ck_assert(kio_seq_done(s));
  ck_assert_int_eq(n, 40);
  ck_assert_int_eq(kio_seq_close(a), KIO_OK);
  ck_assert_int_eq(kio_seq_close(s), KIO_OK);
}
END_TEST

/* scp ranges "[10:19]", "[0:4,3:7]", ":" and the end tolerance. */
START_TEST(table_scp_ranges) {
  char cwd[4096], line[8192], key[256], rx[4096];
  ck_assert(getcwd(cwd, sizeof cwd) != NULL);
  FILE *in = fopen("feats/delta.scp", "r");
  ck_assert(fgets(line, sizeof line, in) != NULL);
  fclose(in);
  ck_assert_int_eq(sscanf(line, "%255s %4095s", key, rx), 2);
  kio_matrix full = {0};
  {
    kio_seq_reader *r = NULL;
    ck_assert_int_eq(kio_seq_open(&r, "ark:feats/delta.ark", &kio_matrix_holder), KIO_OK);
    ck_assert_str_eq(kio_seq_key(r), key);
    kio_matrix *m = kio_seq_value(r);
    ck_assert(m != NULL);
    kio_matrix_resize(&full, m->rows, m->cols);
    memcpy(full.data, m->data, sizeof(float) * m->rows * m->cols);
    kio_seq_close(r);
  }
  int R = full.rows, C = full.cols;
  const char *scp = tu_tmp_path("ranges.scp");
  FILE *w = fopen(scp, "w");
  fprintf(w, "a %s/%s[10:19]\n", cwd, rx);
  fprintf(w, "b %s/%s[0:4,3:7]\n", cwd, rx);
  fprintf(w, "c %s/%s[:,38:38]\n", cwd, rx);
  fprintf(w, "d %s/%s[%d:%d]\n", cwd, rx, R - 2, R + 2);
  fclose(w);
  struct { const char *key; int r0, nr, c0, nc; } want[] = {
    {"a", 10, 10, 0, C}, {"b", 0, 5, 3, 5}, {"c", 0, R, 38, 1}, {"d", R - 2, 2, 0, C}};
  char spec[600];
  snprintf(spec, sizeof spec, "scp:%s", scp);
  kio_seq_reader *s = NULL;
  ck_assert_int_eq(kio_seq_open(&s, spec, &kio_matrix_holder), KIO_OK);
  for (int k = 0; k < 4; k++, kio_seq_next(s)) {
    ck_assert(!kio_seq_done(s));
    ck_assert_str_eq(kio_seq_key(s), want[k].key);
    kio_matrix *m = kio_seq_value(s);
    ck_assert_msg(m != NULL, "%s: %s", want[k].key, kio_last_error());
    ck_assert_int_eq(m->rows, want[k].nr);
    ck_assert_int_eq(m->cols, want[k].nc);
    for (int i = 0; i < m->rows; i++)
      for (int j = 0; j < m->cols; j++)
        ck_assert(m->data[i * m->cols + j] ==
                  full.data[(i + want[k].r0) * C + j + want[k].c0]);
  }
  ck_assert(kio_seq_done(s));
  kio_seq_close(s);
  /* beyond the tolerance: the entry cannot be loaded */
  w = fopen(scp, "w");
  fprintf(w, "e %s/%s[%d:%d]\n", cwd, rx, R - 2, R + 3);
  fclose(w);
  ck_assert_int_eq(kio_seq_open(&s, spec, &kio_matrix_holder), KIO_OK);
  ck_assert_str_eq(kio_seq_key(s), "e");
  ck_assert(kio_seq_value(s) == NULL);
  kio_seq_close(s);
  kio_matrix_free(&full);
}
END_TEST

/* A truncated archive: entries before the damage read, then a read error. */
START_TEST(table_truncated_ark) {
  size_t len;
  unsigned char *buf = tu_read_file("compressed/method1.ark", &len);
  const char *p = tu_tmp_path("trunc.ark");
  FILE *w = fopen(p, "wb");
  fwrite(buf, 1, len - 100, w);
  fclose(w);
  free(buf);
  char spec[600];
  snprintf(spec, sizeof spec, "ark:%s", p);
  kio_seq_reader *s = NULL;
  ck_assert_int_eq(kio_seq_open(&s, spec, &kio_matrix_holder), KIO_OK);
  int n = 0;
  for (; !kio_seq_done(s); kio_seq_next(s)) n++;
  ck_assert_int_eq(n, 5);
  ck_assert_int_eq(kio_seq_close(s), KIO_ERR);
}
END_TEST

static void add_table_tests(TCase *tc) {
  tcase_add_test(tc, table_ark_vs_scp);
  tcase_add_test(tc, table_scp_ranges);
  tcase_add_test(tc, table_truncated_ark);
}

int main(void) {
  Suite *s = suite_create("matrix");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, binary_fm_roundtrip_bytes);
  tcase_add_test(tc, binary_dm_fv_dv_roundtrip);
  tcase_add_test(tc, text_matches_binary);
  tcase_add_test(tc, text_reader_rules);
  tcase_add_test(tc, text_vectors);
  tcase_add_test(tc, text_write_format);
  tcase_add_test(tc, binary_errors);
  tcase_add_test(tc, holder_apply_range);
  tcase_add_test(tc, holders_generic);
  tcase_add_test(tc, big_matrix);
  tcase_add_test(tc, huge_claimed_sizes);
  add_table_tests(tc);
  suite_add_tcase(s, tc);
  return tu_run_suite(s);
}
