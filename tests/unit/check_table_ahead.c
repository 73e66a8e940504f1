/* Sequential archive readers reading ahead on threads (kio_seq_read_ahead,
 * base/io/table-ahead.c) against the same reader reading in order: the same
 * keys and values, the same log lines (level, place, text) in the same
 * order, the same end (EOF or a read error at the same key) and close
 * status, for float, double, compressed and text entries mixed, an archive
 * cut at many points, corrupt headers and sizes, and a reader closed early.
 * Random-access readers opened with kio_ra_open_ahead (the features of the
 * aligning programs) against kio_ra_open likewise: sorted, doubly sorted
 * and unsorted archives looked up with present, skipped, absent and
 * out-of-order keys, cut and corrupt archives, scp with offsets. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/io/table.h"
#include "base/matrix/compressed-matrix.h"
#include "base/matrix/matrix.h"
#include "base/sys/log.h"
#include "tests/lib/test-util.h"

/* What a reader gave: keys and values, lines, how it ended. */
typedef struct {
  tu_text out, lines;
  int opened, ahead, close_rc, ended_done;
} result;

static void read_all(const char *spec, int threads, int window, int stop_after, result *res) {
  memset(res, 0, sizeof *res);
  tu_text_put(&res->out, "");
  tu_text_put(&res->lines, "");
  kio_log_set_handler(tu_log_into_text, &res->lines);
  kio_seq_reader *r;
  res->opened = kio_seq_open(&r, spec, &kio_matrix_holder) == KIO_OK;
  if (!res->opened) {
    kio_log_set_handler(NULL, NULL);
    return;
  }
  if (threads > 0) res->ahead = kio_seq_read_ahead(r, kio_matrix_body_bytes, threads, window);
  kio_matrix m = {0, 0, NULL, 0};
  int n = 0;
  for (; !kio_seq_done(r) && n != stop_after; kio_seq_next(r), n++) {
    char b[256];
    /* value and take alternate: both hand out the entry read ahead */
    const kio_matrix *v = &m;
    if (n % 2) v = kio_seq_value(r);
    else ck_assert_int_eq(kio_seq_take(r, &m), KIO_OK);
    ck_assert_ptr_nonnull(v);
    snprintf(b, sizeof b, "%s %dx%d:", kio_seq_key(r), v->rows, v->cols);
    tu_text_put(&res->out, b);
    for (size_t i = 0; i < (size_t)v->rows * v->cols; i++) {
      snprintf(b, sizeof b, " %a", v->data[i]);
      tu_text_put(&res->out, b);
    }
    tu_text_put(&res->out, "\n");
  }
  res->ended_done = kio_seq_done(r);
  res->close_rc = kio_seq_close(r);
  kio_matrix_free(&m);
  kio_log_set_handler(NULL, NULL);
}

static void free_result(result *r) {
  free(r->out.s);
  free(r->lines.s);
}

/* Reads spec in order and ahead (threads x window), expects the same. */
static void same_both_ways(const char *spec, int stop_after, int expect_lines) {
  result a;
  read_all(spec, 0, 0, stop_after, &a);
  if (expect_lines >= 0) ck_assert_int_eq(expect_lines > 0, a.lines.n > 0);
  const int threads[] = {1, 2, 4, 3}, windows[] = {1, 3, 64, 7};
  for (int i = 0; i < 4; i++) {
    result b;
    read_all(spec, threads[i], windows[i], stop_after, &b);
    ck_assert_int_eq(a.opened, b.opened);
    if (a.opened) ck_assert_int_eq(b.ahead, 1);
    ck_assert_str_eq(a.out.s, b.out.s);
    ck_assert_str_eq(a.lines.s, b.lines.s);
    ck_assert_int_eq(a.close_rc, b.close_rc);
    ck_assert_int_eq(a.ended_done, b.ended_done);
    free_result(&b);
  }
  free_result(&a);
}

/* An archive of n entries of every kind: binary float (most), double,
 * compressed, text, empty; returns its path and each entry's offset. */
static const char *make_mixed(int n, long *offs) {
  const char *p = tu_tmp_path("mixed.ark");
  FILE *f = fopen(p, "wb");
  ck_assert_ptr_nonnull(f);
  for (int i = 0; i < n; i++) {
    offs[i] = ftell(f);
    int rows = i % 9 == 4 ? 0 : 1 + (i * 7) % 23, cols = 3;
    kio_matrix m = {0, 0, NULL, 0};
    ck_assert_int_eq(kio_matrix_resize(&m, rows, cols), KIO_OK);
    for (int k = 0; k < rows * cols; k++) m.data[k] = (float)(i * 100 + k) / 7.0f;
    fprintf(f, "utt%04d ", i);
    if (i % 17 == 5) {
      ck_assert_int_eq(kio_matrix_write(f, 0, &m), KIO_OK);  /* text */
    } else {
      fputc('\0', f);
      fputc('B', f);
      if (i % 13 == 7 && rows > 0) {
        ck_assert_int_eq(kio_matrix_write_compressed(f, &m, KIO_CM_AUTO), KIO_OK);
      } else if (i % 11 == 3) {
        kio_dmatrix d = {0, 0, NULL, 0};
        ck_assert_int_eq(kio_dmatrix_resize(&d, rows, cols), KIO_OK);
        for (int k = 0; k < rows * cols; k++) d.data[k] = m.data[k] * 1.25;
        ck_assert_int_eq(kio_dmatrix_write(f, 1, &d), KIO_OK);
        kio_dmatrix_free(&d);
      } else {
        ck_assert_int_eq(kio_matrix_write(f, 1, &m), KIO_OK);
      }
    }
    kio_matrix_free(&m);
  }
  offs[n] = ftell(f);
  fclose(f);
  return p;
}

enum { N = 300 };

START_TEST(mixed_entries) {
  long offs[N + 1];
  char p[1024];  /* tu_tmp_path's buffers rotate: a copy */
  snprintf(p, sizeof p, "%s", make_mixed(N, offs));
  char spec[1200];
  snprintf(spec, sizeof spec, "ark:%s", p);
  same_both_ways(spec, -1, 0);
  snprintf(spec, sizeof spec, "ark,s,cs:%s", p);
  same_both_ways(spec, -1, 0);
}
END_TEST

START_TEST(cut_archives) {
  long offs[N + 1];
  char p[1024];  /* tu_tmp_path's buffers rotate: a copy */
  snprintf(p, sizeof p, "%s", make_mixed(N, offs));
  char spec[1200];
  /* cut inside keys, headers, bodies of every kind and at boundaries (a
   * text matrix cut short ends quietly, in order as ahead) */
  for (int i = 1; i < N; i += 7) {
    const long cuts[] = {offs[i], offs[i] + 3, offs[i] + 9, offs[i] + 13, offs[i] + 20,
                         (offs[i] + offs[i + 1]) / 2, offs[i + 1] - 1};
    for (int c = 0; c < 7; c++) {
      const char *v = tu_file_variant(p, cuts[c], -1, 0);
      snprintf(spec, sizeof spec, "ark:%s", v);
      same_both_ways(spec, -1, c == 5 && i % 17 != 5 ? 1 : -1);
      if (i % 3 == 1) {  /* permissive: the error ignored at close, the same way */
        snprintf(spec, sizeof spec, "ark,p:%s", v);
        same_both_ways(spec, -1, -1);
      }
    }
  }
}
END_TEST

START_TEST(corrupt_headers) {
  long offs[N + 1];
  char p[1024];  /* tu_tmp_path's buffers rotate: a copy */
  snprintf(p, sizeof p, "%s", make_mixed(N, offs));
  char spec[1200];
  /* a byte of an entry's header changed: the token, the size bytes, the
   * binary marker, the separator after the key */
  for (int i = 2; i < N; i += 11) {
    const long at[] = {offs[i] + 8, offs[i] + 9, offs[i] + 10, offs[i] + 11, offs[i] + 14,
                       offs[i] + 16, offs[i] + 18, offs[i] + 20};
    const int to[] = {'\n', 'X', 0, 'Z', 0x7f, 9, 0xff, 0x40};
    for (int c = 0; c < 8; c++) {
      snprintf(spec, sizeof spec, "ark:%s", tu_file_variant(p, offs[N], at[c], to[c]));
      same_both_ways(spec, -1, -1);
    }
  }
}
END_TEST

START_TEST(closed_early) {
  long offs[N + 1];
  char p[1024];  /* tu_tmp_path's buffers rotate: a copy */
  snprintf(p, sizeof p, "%s", make_mixed(N, offs));
  char spec[1200];
  /* entries past where the reader stops are never reported, even if bad */
  snprintf(spec, sizeof spec, "ark:%s", tu_file_variant(p, (offs[40] + offs[41]) / 2, -1, 0));
  for (int stop = 1; stop < 40; stop += 6) same_both_ways(spec, stop, 0);
  snprintf(spec, sizeof spec, "ark:%s", p);
  same_both_ways(spec, 2, 0);
}
END_TEST

START_TEST(not_for_every_table) {
  long offs[N + 1];
  char p[1024];  /* tu_tmp_path's buffers rotate: a copy */
  snprintf(p, sizeof p, "%s", make_mixed(N, offs));
  char spec[1200];
  kio_seq_reader *r;
  /* pipes, scp and offsets are read in order */
  snprintf(spec, sizeof spec, "ark:cat %s |", p);
  ck_assert_int_eq(kio_seq_open(&r, spec, &kio_matrix_holder), KIO_OK);
  ck_assert_int_eq(kio_seq_read_ahead(r, kio_matrix_body_bytes, 2, 8), 0);
  ck_assert_int_eq(kio_seq_close(r), KIO_OK);
  ck_assert_int_eq(kio_seq_open(&r, "scp:feats/lda.scp", &kio_matrix_holder), KIO_OK);
  ck_assert_int_eq(kio_seq_read_ahead(r, kio_matrix_body_bytes, 2, 8), 0);
  ck_assert_int_eq(kio_seq_close(r), KIO_OK);
  snprintf(spec, sizeof spec, "ark:%s:%ld", p, offs[5]);
  ck_assert_int_eq(kio_seq_open(&r, spec, &kio_matrix_holder), KIO_OK);
  ck_assert_int_eq(kio_seq_read_ahead(r, kio_matrix_body_bytes, 2, 8), 0);
  ck_assert_int_eq(kio_seq_close(r), KIO_OK);
  /* the fixture's features, both ways */
  same_both_ways("ark:feats/lda.ark", -1, 0);
  same_both_ways("ark:feats/delta.ark", -1, 0);
}
END_TEST

/* ---- random-access readers parsed ahead on threads ---- */

/* Looks up keys[0..n) in turn (has_key, then value or take alternately),
 * as kio_ra_open (threads 0) or kio_ra_open_ahead; stops at an error. */
static void ra_lookups(const char *spec, const char *const *keys, int n, int threads, int window,
                       result *res) {
  memset(res, 0, sizeof *res);
  tu_text_put(&res->out, "");
  tu_text_put(&res->lines, "");
  kio_log_set_handler(tu_log_into_text, &res->lines);
  kio_ra_reader *r;
  res->opened = (threads > 0 ? kio_ra_open_ahead(&r, spec, &kio_matrix_holder,
                                                 kio_matrix_body_bytes, threads, window)
                             : kio_ra_open(&r, spec, &kio_matrix_holder)) == KIO_OK;
  if (!res->opened) {
    kio_log_set_handler(NULL, NULL);
    return;
  }
  res->ahead = kio_ra_reads_ahead(r);
  kio_matrix m = {0, 0, NULL, 0};
  for (int i = 0; i < n; i++) {
    char b[256];
    int has = kio_ra_has_key(r, keys[i]);
    snprintf(b, sizeof b, "%s has %d", keys[i], has);
    tu_text_put(&res->out, b);
    if (has != 1) {
      tu_text_put(&res->out, "\n");
      if (has < 0) break;
      continue;
    }
    const kio_matrix *v = &m;
    if (i % 2) {
      v = kio_ra_value(r, keys[i]);
    } else {
      int t = kio_ra_take(r, keys[i], &m);
      if (t == 1) v = kio_ra_value(r, keys[i]);
      else if (t != KIO_OK) v = NULL;
    }
    if (!v) {
      tu_text_put(&res->out, " no value\n");
      break;
    }
    snprintf(b, sizeof b, " %dx%d:", v->rows, v->cols);
    tu_text_put(&res->out, b);
    for (size_t k = 0; k < (size_t)v->rows * v->cols; k++) {
      snprintf(b, sizeof b, " %a", v->data[k]);
      tu_text_put(&res->out, b);
    }
    tu_text_put(&res->out, "\n");
  }
  res->close_rc = kio_ra_close(r);
  kio_matrix_free(&m);
  kio_log_set_handler(NULL, NULL);
}

/* The same lookups without and with threads; ahead: what
 * kio_ra_reads_ahead must say with threads. */
static void ra_same_both_ways(const char *spec, const char *const *keys, int n, int ahead) {
  result a;
  ra_lookups(spec, keys, n, 0, 0, &a);
  const int threads[] = {1, 2, 4, 3}, windows[] = {1, 3, 64, 7};
  for (int i = 0; i < 4; i++) {
    result b;
    ra_lookups(spec, keys, n, threads[i], windows[i], &b);
    ck_assert_int_eq(a.opened, b.opened);
    if (b.opened) ck_assert_int_eq(b.ahead, ahead);
    ck_assert_str_eq(a.out.s, b.out.s);
    ck_assert_str_eq(a.lines.s, b.lines.s);
    ck_assert_int_eq(a.close_rc, b.close_rc);
    free_result(&b);
  }
  free_result(&a);
}

/* Key lists: every key in order; every third with absent ones between; a
 * few out of order (an ERROR for "cs", found again for "s" and unsorted). */
static char **key_list(int kind, int *n) {
  char **k = malloc(sizeof *k * (N * 2 + 8));
  *n = 0;
  char b[32];
  for (int i = 0; i < N; i++) {
    if (kind == 1 && i % 3) continue;
    snprintf(b, sizeof b, "utt%04d", i);
    k[(*n)++] = strdup(b);
    if (kind == 1 && i % 2) {
      snprintf(b, sizeof b, "utt%04d_x", i);  /* absent, between two present */
      k[(*n)++] = strdup(b);
    }
    if (kind == 2 && i % 50 == 49) {
      snprintf(b, sizeof b, "utt%04d", i - 30);  /* back */
      k[(*n)++] = strdup(b);
    }
  }
  if (kind == 1) k[(*n)++] = strdup("zzz");  /* past the end */
  return k;
}

static void free_keys(char **k, int n) {
  for (int i = 0; i < n; i++) free(k[i]);
  free(k);
}

static void ra_all_kinds(const char *path, int ahead) {
  const char *flags[] = {"ark", "ark,s", "ark,s,cs", "ark,p", "ark,s,cs,p"};
  char spec[1200];
  for (int kind = 0; kind < 3; kind++) {
    int n;
    char **keys = key_list(kind, &n);
    for (int f = 0; f < 5; f++) {
      snprintf(spec, sizeof spec, "%s:%s", flags[f], path);
      ra_same_both_ways(spec, (const char *const *)keys, n, ahead);
    }
    free_keys(keys, n);
  }
}

START_TEST(ra_mixed_entries) {
  long offs[N + 1];
  char p[1024];
  snprintf(p, sizeof p, "%s", make_mixed(N, offs));
  ra_all_kinds(p, 2);
  /* keys out of the archive's order: the "s" order ERROR, the same way */
  char q[1024];
  snprintf(q, sizeof q, "%s", tu_file_variant(p, offs[N], offs[60] + 3, '9'));
  ra_all_kinds(q, 2);
}
END_TEST

START_TEST(ra_cut_and_corrupt) {
  long offs[N + 1];
  char p[1024];
  snprintf(p, sizeof p, "%s", make_mixed(N, offs));
  int n;
  char **keys = key_list(1, &n);
  char spec[1200];
  for (int i = 1; i < N; i += 23) {
    const long cuts[] = {offs[i] + 3, offs[i] + 13, (offs[i] + offs[i + 1]) / 2};
    for (int c = 0; c < 3; c++) {
      const char *v = tu_file_variant(p, cuts[c], -1, 0);
      snprintf(spec, sizeof spec, "ark,s,cs:%s", v);
      ra_same_both_ways(spec, (const char *const *)keys, n, 2);
      snprintf(spec, sizeof spec, "ark:%s", v);
      ra_same_both_ways(spec, (const char *const *)keys, n, 2);
    }
    const long at[] = {offs[i] + 9, offs[i] + 11, offs[i] + 16};
    const int to[] = {'X', 'Z', 0xff};
    for (int c = 0; c < 3; c++) {
      snprintf(spec, sizeof spec, "ark,s,cs:%s", tu_file_variant(p, offs[N], at[c], to[c]));
      ra_same_both_ways(spec, (const char *const *)keys, n, 2);
    }
  }
  free_keys(keys, n);
}
END_TEST

START_TEST(ra_not_for_every_table) {
  long offs[N + 1];
  char p[1024];
  snprintf(p, sizeof p, "%s", make_mixed(N, offs));
  int n;
  char **keys = key_list(1, &n);
  char spec[1200];
  /* pipes read ahead on one thread; scp (offsets) and offsets not ahead */
  snprintf(spec, sizeof spec, "ark,s,cs:cat %s |", p);
  ra_same_both_ways(spec, (const char *const *)keys, n, 1);
  snprintf(spec, sizeof spec, "ark,s,cs:%s:%ld", p, offs[5]);
  ra_same_both_ways(spec, (const char *const *)keys, n, 1);
  const char *scp = tu_tmp_path("offsets.scp");
  FILE *f = fopen(scp, "w");
  ck_assert_ptr_nonnull(f);
  for (int i = 0; i < N; i += 2) fprintf(f, "utt%04d %s:%ld\n", i, p, offs[i] + 8);
  fclose(f);
  snprintf(spec, sizeof spec, "scp,s,cs:%s", scp);
  ra_same_both_ways(spec, (const char *const *)keys, n, 0);
  snprintf(spec, sizeof spec, "scp,p:%s", scp);
  ra_same_both_ways(spec, (const char *const *)keys, n, 0);
  free_keys(keys, n);
  /* the fixture's features */
  const char *lda[] = {"a", "en-029-f1-00014", "en-029-f1-00056", "en-029-f1-00057",
                       "en-029-f1-00077", "zz"};
  ra_same_both_ways("ark,s,cs:feats/lda.ark", lda, 6, 2);
}
END_TEST

int main(void) {
  Suite *s = suite_create("table_ahead");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, mixed_entries);
  tcase_add_test(tc, cut_archives);
  tcase_add_test(tc, corrupt_headers);
  tcase_add_test(tc, closed_early);
  tcase_add_test(tc, not_for_every_table);
  tcase_add_test(tc, ra_mixed_entries);
  tcase_add_test(tc, ra_cut_and_corrupt);
  tcase_add_test(tc, ra_not_for_every_table);
  suite_add_tcase(s, tc);
  return tu_run_suite(s);
}
