/* CompressedMatrix (reference 2.3): Kaldi's CM/CM2/CM3 decompress bit-exactly
 * and our compression reproduces copy-feats --compress bytes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/io/io.h"
#include "base/sys/log.h"
#include "base/matrix/matrix.h"
#include "tests/lib/test-util.h"

static const int kFixtureMethods[] = {1, 2, 3, 5, 6, 7};

static int next_entry(FILE *f, char *key, size_t cap, int *binary) {
  int c;
  while ((c = getc(f)) == ' ' || c == '\n') {}
  if (c == EOF) return 0;
  size_t n = 0;
  do { if (n + 1 < cap) key[n++] = (char)c; } while ((c = getc(f)) != EOF && c != ' ');
  key[n] = 0;
  if (c != ' ') return -1;
  return kio_read_header(f, binary) == KIO_OK ? 1 : -1;
}

typedef struct { int n; char key[16][128]; kio_matrix m[16]; } mat_list;

static void load_ark(const char *path, mat_list *l) {
  FILE *f = fopen(path, "rb");
  ck_assert_msg(f != NULL, "open %s", path);
  memset(l, 0, sizeof *l);
  int binary, r;
  while (l->n < 16 && (r = next_entry(f, l->key[l->n], 128, &binary)) == 1) {
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

/* Every methodN.ark decompresses to exactly the floats of Kaldi's own
 * decompression methodN.decompressed.ark. */
START_TEST(decompress_bit_exact) {
  int method = kFixtureMethods[_i];
  char p1[64], p2[64];
  snprintf(p1, sizeof p1, "compressed/method%d.ark", method);
  snprintf(p2, sizeof p2, "compressed/method%d.decompressed.ark", method);
  static mat_list a, b;
  load_ark(p1, &a);
  load_ark(p2, &b);
  ck_assert_int_eq(a.n, 6);
  ck_assert_int_eq(a.n, b.n);
  for (int k = 0; k < a.n; k++) {
    ck_assert_str_eq(a.key[k], b.key[k]);
    ck_assert_int_eq(a.m[k].rows, b.m[k].rows);
    ck_assert_int_eq(a.m[k].cols, b.m[k].cols);
    size_t n = (size_t)a.m[k].rows * a.m[k].cols;
    for (size_t i = 0; i < n; i++)
      ck_assert_msg(memcmp(&a.m[k].data[i], &b.m[k].data[i], 4) == 0,
                    "method %d %s [%zu]: %.9g vs %.9g", method, a.key[k], i,
                    a.m[k].data[i], b.m[k].data[i]);
  }
  free_list(&a);
  free_list(&b);
}
END_TEST

/* Compressing raw.ark reproduces copy-feats --compress=true
 * --compression-method=N byte for byte. */
START_TEST(compress_matches_kaldi_bytes) {
  int method = kFixtureMethods[_i];
  static mat_list raw;
  load_ark("compressed/raw.ark", &raw);
  char *out = NULL;
  size_t len = 0;
  FILE *w = open_memstream(&out, &len);
  for (int k = 0; k < raw.n; k++) {
    fprintf(w, "%s ", raw.key[k]);
    fputc(0, w);
    fputc('B', w);
    ck_assert_int_eq(kio_matrix_write_compressed(w, &raw.m[k], method), KIO_OK);
  }
  fclose(w);
  char path[64];
  snprintf(path, sizeof path, "compressed/method%d.ark", method);
  size_t flen;
  unsigned char *want = tu_read_file(path, &flen);
  ck_assert_uint_eq(len, flen);
  size_t first = 0;
  while (first < len && (unsigned char)out[first] == want[first]) first++;
  ck_assert_msg(first == len, "method %d: first differing byte at %zu", method, first);
  free(want);
  free(out);
  free_list(&raw);
}
END_TEST

static void compress_roundtrip(const kio_matrix *m, int method, kio_matrix *out,
                               char expect_tok) {
  char *buf = NULL;
  size_t len = 0;
  FILE *w = open_memstream(&buf, &len);
  ck_assert_int_eq(kio_matrix_write_compressed(w, m, method), KIO_OK);
  fclose(w);
  ck_assert(buf[0] == 'C' && buf[1] == 'M');
  ck_assert_int_eq(buf[2], expect_tok);
  FILE *r = fmemopen(buf, len, "rb");
  ck_assert_int_eq(kio_matrix_read(r, 1, out), KIO_OK);
  ck_assert_int_eq(getc(r), EOF);
  fclose(r);
  free(buf);
  ck_assert_int_eq(out->rows, m->rows);
  ck_assert_int_eq(out->cols, m->cols);
}

/* Round trip within Kaldi's quantisation error, every method. */
START_TEST(roundtrip_error_bounds) {
  static mat_list raw;
  load_ark("compressed/raw.ark", &raw);
  kio_matrix d = {0};
  for (int k = 0; k < raw.n; k++) {
    const kio_matrix *m = &raw.m[k];
    size_t n = (size_t)m->rows * m->cols;
    float mn = m->data[0], mx = m->data[0];
    for (size_t i = 0; i < n; i++) {
      if (m->data[i] < mn) mn = m->data[i];
      if (m->data[i] > mx) mx = m->data[i];
    }
    float range = mx - mn;
    /* methods 1, 2: per-column 8-bit bands (64/128/63 steps) */
    for (int method = 1; method <= 2; method++) {
      compress_roundtrip(m, method, &d, m->rows > 8 || method == 2 ? ' ' : '2');
      for (int c = 0; c < m->cols; c++) {
        float cmn = m->data[c], cmx = m->data[c];
        for (int r = 0; r < m->rows; r++) {
          float x = m->data[r * m->cols + c];
          if (x < cmn) cmn = x;
          if (x > cmx) cmx = x;
        }
        float tol = (cmx - cmn) / 120 + 2 * range / 65535;
        for (int r = 0; r < m->rows; r++) {
          size_t i = (size_t)r * m->cols + c;
          ck_assert_msg(fabsf(d.data[i] - m->data[i]) <= tol, "m%d %s (%d,%d)",
                        method, raw.key[k], r, c);
        }
      }
    }
    compress_roundtrip(m, 3, &d, '2');
    for (size_t i = 0; i < n; i++)
      ck_assert(fabsf(d.data[i] - m->data[i]) <= range * (0.5f / 65535 + 1e-6f));
    compress_roundtrip(m, 5, &d, '3');
    for (size_t i = 0; i < n; i++)
      ck_assert(fabsf(d.data[i] - m->data[i]) <= range * (0.502f / 255));
  }
  /* 4: signed 16-bit integers, 6: bytes 0..255, 7: [0,1] in 1/255 steps */
  kio_matrix m = {0};
  kio_matrix_resize(&m, 20, 7);
  for (int i = 0; i < 140; i++) m.data[i] = (float)((i * 7919) % 65536 - 32768);
  compress_roundtrip(&m, 4, &d, '2');
  for (int i = 0; i < 140; i++) ck_assert(d.data[i] == m.data[i]);
  for (int i = 0; i < 140; i++) m.data[i] = (float)((i * 37) % 256);
  compress_roundtrip(&m, 6, &d, '3');
  for (int i = 0; i < 140; i++) ck_assert(fabsf(d.data[i] - m.data[i]) <= 1e-4f);
  for (int i = 0; i < 140; i++) m.data[i] = (float)((i * 37) % 1000) / 999.0f;
  compress_roundtrip(&m, 7, &d, '3');
  for (int i = 0; i < 140; i++) ck_assert(fabsf(d.data[i] - m.data[i]) <= 0.5f / 255 + 1e-6f);
  /* auto: <= 8 rows -> two-byte (CM2) */
  kio_matrix_resize(&m, 8, 3);
  for (int i = 0; i < 24; i++) m.data[i] = (float)i / 3.0f;
  compress_roundtrip(&m, 1, &d, '2');
  for (int i = 0; i < 24; i++) ck_assert(fabsf(d.data[i] - m.data[i]) <= 8.0f / 65535 + 1e-6f);
  kio_matrix_free(&m);
  kio_matrix_free(&d);
  free_list(&raw);
}
END_TEST

/* Pathological shapes: < 5 rows, constant matrix, single element, empty. */
START_TEST(edge_shapes) {
  kio_matrix m = {0}, d = {0};
  for (int rows = 1; rows <= 6; rows++) {
    kio_matrix_resize(&m, rows, 2);
    for (int i = 0; i < rows * 2; i++) m.data[i] = (float)(i % 3) - 1.0f;
    compress_roundtrip(&m, 2, &d, ' ');
    for (int i = 0; i < rows * 2; i++) ck_assert(fabsf(d.data[i] - m.data[i]) < 0.02f);
  }
  kio_matrix_resize(&m, 10, 4);
  for (int i = 0; i < 40; i++) m.data[i] = 5.0f;
  for (int method = 1; method <= 5; method += 2) {
    compress_roundtrip(&m, method, &d, method == 1 ? ' ' : method == 3 ? '2' : '3');
    for (int i = 0; i < 40; i++) ck_assert(fabsf(d.data[i] - 5.0f) < 1e-3f);
  }
  /* empty: "CM " + 16-byte header, read back as 0 x 0 */
  kio_matrix_resize(&m, 0, 0);
  char *buf = NULL;
  size_t len = 0;
  FILE *w = open_memstream(&buf, &len);
  ck_assert_int_eq(kio_matrix_write_compressed(w, &m, 1), KIO_OK);
  fclose(w);
  ck_assert_uint_eq(len, 3 + 16);
  FILE *r = fmemopen(buf, len, "rb");
  kio_matrix_resize(&d, 3, 3);
  ck_assert_int_eq(kio_matrix_read(r, 1, &d), KIO_OK);
  fclose(r);
  ck_assert(d.rows == 0 && d.cols == 0);
  free(buf);
  /* bad method, NaN/inf */
  kio_matrix_resize(&m, 10, 2);
  w = open_memstream(&buf, &len);
  ck_assert_int_eq(kio_matrix_write_compressed(w, &m, 0), KIO_ERR);
  ck_assert_int_eq(kio_matrix_write_compressed(w, &m, 8), KIO_ERR);
  m.data[3] = INFINITY;
  ck_assert_int_eq(kio_matrix_write_compressed(w, &m, 2), KIO_ERR);
  ck_assert(kio_last_error()[0] != 0);
  fclose(w);
  free(buf);
  kio_matrix_free(&m);
  kio_matrix_free(&d);
}
END_TEST

/* Truncated or malformed compressed objects: KIO_ERR with detail. */
START_TEST(malformed) {
  size_t flen;
  unsigned char *ark = tu_read_file("compressed/method1.ark", &flen);
  ck_assert(ark != NULL);
  const unsigned char *obj = (unsigned char *)memchr(ark, 0, flen) + 2;
  size_t objlen = 3 + 16 + 13 * 8 + 13 * 447;  /* first entry: 447 x 13 CM */
  kio_matrix m = {0};
  FILE *f = fmemopen((void *)obj, objlen, "rb");
  ck_assert_int_eq(kio_matrix_read(f, 1, &m), KIO_OK);
  fclose(f);
  ck_assert(m.rows == 447 && m.cols == 13);
  size_t cuts[] = {1, 2, 3, 10, 18, 19, 50, 200, objlen - 1};
  for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
    kio_clear_error();
    f = fmemopen((void *)obj, cuts[i], "rb");
    ck_assert_msg(kio_matrix_read(f, 1, &m) == KIO_ERR, "cut %zu", cuts[i]);
    ck_assert(kio_last_error()[0] != 0);
    fclose(f);
  }
  unsigned char bad[64];
  memcpy(bad, "CM4 ", 4);
  memset(bad + 4, 0, sizeof bad - 4);
  f = fmemopen(bad, sizeof bad, "rb");
  ck_assert_int_eq(kio_matrix_read(f, 1, &m), KIO_ERR);
  fclose(f);
  ck_assert(strstr(kio_last_error(), "CM4") != NULL);
  /* huge / negative sizes */
  memcpy(bad, "CM2 ", 4);
  int32_t dims[2] = {-5, 3};
  memcpy(bad + 12, dims, 8);
  f = fmemopen(bad, sizeof bad, "rb");
  ck_assert_int_eq(kio_matrix_read(f, 1, &m), KIO_ERR);
  fclose(f);
  dims[0] = 1 << 30;
  dims[1] = 1 << 30;
  memcpy(bad + 12, dims, 8);
  f = fmemopen(bad, sizeof bad, "rb");
  ck_assert_int_eq(kio_matrix_read(f, 1, &m), KIO_ERR);
  fclose(f);
  /* Found by fuzzing: a valid size claiming ~2 GB of data in a 64-byte
   * object; fails as truncated (the reader grows its buffer as data comes). */
  for (int fmt = 1; fmt <= 3; fmt++) {
    const char *tok = fmt == 1 ? "CM " : fmt == 2 ? "CM2 " : "CM3 ";
    size_t off = strlen(tok);
    int32_t big[2] = {46000, 46000};
    memset(bad, 0, sizeof bad);
    memcpy(bad, tok, off);
    memcpy(bad + off + 8, big, 8);
    kio_clear_error();
    f = fmemopen(bad, sizeof bad, "rb");
    ck_assert_int_eq(kio_matrix_read(f, 1, &m), KIO_ERR);
    fclose(f);
    ck_assert_msg(strstr(kio_last_error(), "truncated") != NULL, "%s", kio_last_error());
  }
  /* double reader accepts CM (Kaldi widens the float decompression) */
  kio_dmatrix dm = {0};
  f = fmemopen((void *)obj, objlen, "rb");
  ck_assert_int_eq(kio_dmatrix_read(f, 1, &dm), KIO_OK);
  fclose(f);
  f = fmemopen((void *)obj, objlen, "rb");
  ck_assert_int_eq(kio_matrix_read(f, 1, &m), KIO_OK);
  fclose(f);
  for (int i = 0; i < 447 * 13; i++) ck_assert(dm.data[i] == (double)m.data[i]);
  kio_dmatrix_free(&dm);
  kio_matrix_free(&m);
  free(ark);
}
END_TEST

int main(void) {
  Suite *s = suite_create("compressed");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 60);
  int nm = (int)(sizeof kFixtureMethods / sizeof kFixtureMethods[0]);
  tcase_add_loop_test(tc, decompress_bit_exact, 0, nm);
  tcase_add_loop_test(tc, compress_matches_kaldi_bytes, 0, nm);
  tcase_add_test(tc, roundtrip_error_bounds);
  tcase_add_test(tc, edge_shapes);
  tcase_add_test(tc, malformed);
  suite_add_tcase(s, tc);
  return tu_run_suite(s);
}
