/* Tables (reference 1.7-1.11, 2.4): alignment archives
 * against Kaldi's fixtures, pipes, ark,scp offsets, random access modes,
 * error reporting (truncated archives, bad scp lines, failed pipes). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/io/io.h"
#include "base/sys/log.h"
#include "base/matrix/matrix.h"
#include "base/io/table.h"
#include "tests/lib/test-util.h"

#define ALI_ARK "kaldi/mono/ali.ark"
#define ALI_TXT "kaldi/mono/ali.txt"

/* Captured log lines (tests/lib/test-util.c). */
#define cap tu_cap
#define cap_start tu_logcap_start

/* ---- helpers ---- */

typedef struct { int n; char **keys; kio_int_vec *v; } ali_set;

static int read_all(const char *rspec, ali_set *s) {
  memset(s, 0, sizeof *s);
  kio_seq_reader *r;
  if (kio_seq_open(&r, rspec, &kio_int_vec_holder) != KIO_OK) return KIO_ERR;
  for (; !kio_seq_done(r); kio_seq_next(r)) {
    kio_int_vec *x = kio_seq_value(r);
    ck_assert_ptr_nonnull(x);
    s->keys = realloc(s->keys, (s->n + 1) * sizeof *s->keys);
    s->v = realloc(s->v, (s->n + 1) * sizeof *s->v);
    s->keys[s->n] = strdup(kio_seq_key(r));
    s->v[s->n].n = x->n;
    s->v[s->n].v = malloc((x->n + 1) * sizeof(int32_t));
    if (x->n) memcpy(s->v[s->n].v, x->v, x->n * sizeof(int32_t));
    s->n++;
  }
  return kio_seq_close(r);
}

static void free_set(ali_set *s) {
  for (int i = 0; i < s->n; i++) {
    free(s->keys[i]);
    free(s->v[i].v);
  }
  free(s->keys);
  free(s->v);
}

static void assert_same(const ali_set *a, const ali_set *b) {
  ck_assert_int_eq(a->n, b->n);
  for (int i = 0; i < a->n; i++) {
    ck_assert_str_eq(a->keys[i], b->keys[i]);
    ck_assert_int_eq(a->v[i].n, b->v[i].n);
    ck_assert(memcmp(a->v[i].v, b->v[i].v, a->v[i].n * sizeof(int32_t)) == 0);
  }
}

static void write_all(const char *wspec, const ali_set *s) {
  kio_writer *w;
  ck_assert_int_eq(kio_writer_open(&w, wspec, &kio_int_vec_holder), KIO_OK);
  for (int i = 0; i < s->n; i++)
    ck_assert_int_eq(kio_writer_write(w, s->keys[i], &s->v[i]), KIO_OK);
  ck_assert_int_eq(kio_writer_close(w), KIO_OK);
}

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  fputs(text, f);
  fclose(f);
}

/* ---- alignments against Kaldi ---- */

START_TEST(alignments_binary_text_identical) {
  ali_set a, b;
  ck_assert_int_eq(read_all("ark:" ALI_ARK, &a), KIO_OK);
  ck_assert_int_eq(read_all("ark:" ALI_TXT, &b), KIO_OK);
  ck_assert_int_eq(a.n, 40);
  ck_assert_str_eq(a.keys[0], "en-029-f1-00014");
  ck_assert_int_eq(a.v[0].v[0], 3);
  ck_assert_int_eq(a.v[0].v[1], 11);
  assert_same(&a, &b);
  free_set(&a);
  free_set(&b);
}
END_TEST

START_TEST(alignments_write_back_byte_identical) {
  ali_set a;
  ck_assert_int_eq(read_all("ark:" ALI_ARK, &a), KIO_OK);
  char ws[1200];
  const char *pa = tu_tmp_path("ali.ark"), *pt = tu_tmp_path("ali.txt");
  snprintf(ws, sizeof ws, "ark:%s", pa);
  write_all(ws, &a);
  snprintf(ws, sizeof ws, "ark,t,f:%s", pt);
  write_all(ws, &a);
  ck_assert(tu_files_equal(pa, ALI_ARK));
  ck_assert(tu_files_equal(pt, ALI_TXT));
  /* other fixture alignments too */
  const char *more[] = {"kaldi/mono/ali-equal.ark", "kaldi/tri1/ali.ark", "kaldi/tri2/ali.ark"};
  for (int i = 0; i < 3; i++) {
    ali_set m;
    snprintf(ws, sizeof ws, "ark:%s", more[i]);
    ck_assert_int_eq(read_all(ws, &m), KIO_OK);
    snprintf(ws, sizeof ws, "ark:%s", pa);
    write_all(ws, &m);
    ck_assert_msg(tu_files_equal(pa, more[i]), "%s", more[i]);
    free_set(&m);
  }
  free_set(&a);
}
END_TEST

START_TEST(gzip_pipes) {
  const char *gz = tu_tmp_path("ali.ark.gz");
  char cmd[1200], spec[1200];
  snprintf(cmd, sizeof cmd, "gzip -c %s > %s", ALI_ARK, gz);
  ck_assert_int_eq(tu_run(cmd, NULL), 0);
  ali_set a, b;
  ck_assert_int_eq(read_all("ark:" ALI_ARK, &a), KIO_OK);
  snprintf(spec, sizeof spec, "ark:gunzip -c %s|", gz);
  ck_assert_int_eq(read_all(spec, &b), KIO_OK);
  assert_same(&a, &b);
  free_set(&b);
  /* writing through an output pipe */
  const char *gz2 = tu_tmp_path("out.ark.gz"), *plain = tu_tmp_path("out.ark");
  snprintf(spec, sizeof spec, "ark:| gzip -c > %s", gz2);
  write_all(spec, &a);
  snprintf(cmd, sizeof cmd, "gunzip -c %s > %s", gz2, plain);
  ck_assert_int_eq(tu_run(cmd, NULL), 0);
  ck_assert(tu_files_equal(plain, ALI_ARK));
  free_set(&a);
}
END_TEST

START_TEST(ark_scp_offsets_and_random_access) {
  ali_set a;
  ck_assert_int_eq(read_all("ark:" ALI_ARK, &a), KIO_OK);
  const char *pa = tu_tmp_path("b.ark"), *ps = tu_tmp_path("b.scp");
  char spec[1200];
  snprintf(spec, sizeof spec, "ark,scp:%s,%s", pa, ps);
  write_all(spec, &a);
  ck_assert(tu_files_equal(pa, ALI_ARK));
  /* offsets point right after "KEY " */
  FILE *f = fopen(ps, "r");
  char key[256], rx[1100];
  int lines = 0;
  while (fscanf(f, "%255s %1099s", key, rx) == 2) {
    char *colon = strrchr(rx, ':');
    ck_assert_ptr_nonnull(colon);
    *colon = 0;
    ck_assert_str_eq(rx, pa);
    long off = atol(colon + 1);
    FILE *g = fopen(pa, "rb");
    fseek(g, off - (long)strlen(key) - 1, SEEK_SET);
    char buf[256] = {0};
    ck_assert_int_eq((int)fread(buf, 1, strlen(key) + 3, g), (int)strlen(key) + 3);
    ck_assert(memcmp(buf, key, strlen(key)) == 0 && buf[strlen(key)] == ' ' &&
              buf[strlen(key) + 1] == 0 && buf[strlen(key) + 2] == 'B');
    fclose(g);
    lines++;
  }
  fclose(f);
  ck_assert_int_eq(lines, 40);
  /* sequential scp */
  ali_set b;
  snprintf(spec, sizeof spec, "scp:%s", ps);
  ck_assert_int_eq(read_all(spec, &b), KIO_OK);
  assert_same(&a, &b);
  free_set(&b);
  /* random access scp, reverse order, plus absent keys */
  kio_ra_reader *r;
  ck_assert_int_eq(kio_ra_open(&r, spec, &kio_int_vec_holder), KIO_OK);
  for (int i = a.n - 1; i >= 0; i--) {
    ck_assert_int_eq(kio_ra_has_key(r, a.keys[i]), 1);
    kio_int_vec *x = kio_ra_value(r, a.keys[i]);
    ck_assert_ptr_nonnull(x);
    ck_assert_int_eq(x->n, a.v[i].n);
    ck_assert(memcmp(x->v, a.v[i].v, x->n * sizeof(int32_t)) == 0);
  }
  ck_assert_int_eq(kio_ra_has_key(r, "nosuchkey"), 0);
  ck_assert_int_eq(kio_ra_close(r), KIO_OK);
  free_set(&a);
}
END_TEST

/* Each random-access archive mode returns the right objects. */
static void check_ra(const char *spec, const ali_set *a, int sorted_calls) {
  kio_ra_reader *r;
  ck_assert_int_eq(kio_ra_open(&r, spec, &kio_int_vec_holder), KIO_OK);
  for (int k = 0; k < a->n; k++) {
    int i = sorted_calls ? k : (k * 7) % a->n; /* 7 coprime with 40 */
    ck_assert_int_eq(kio_ra_has_key(r, a->keys[i]), 1);
    kio_int_vec *x = kio_ra_value(r, a->keys[i]);
    ck_assert_ptr_nonnull(x);
    ck_assert_int_eq(x->n, a->v[i].n);
    ck_assert(memcmp(x->v, a->v[i].v, x->n * sizeof(int32_t)) == 0);
    if (!sorted_calls) ck_assert_int_eq(kio_ra_has_key(r, "zzz-absent"), 0);
  }
  ck_assert_int_eq(kio_ra_close(r), KIO_OK);
}

START_TEST(random_access_archive_modes) {
  ali_set a;
  ck_assert_int_eq(read_all("ark:" ALI_ARK, &a), KIO_OK);
  check_ra("ark:" ALI_ARK, &a, 0);
  check_ra("ark:" ALI_TXT, &a, 0);
  check_ra("ark,s:" ALI_ARK, &a, 0);
  check_ra("ark,s,cs:" ALI_ARK, &a, 1);
  check_ra("ark,o:" ALI_ARK, &a, 1);
  check_ra("ark,s,o:" ALI_ARK, &a, 1);
  /* cs: a key before the current archive key is absent, then later ones found */
  kio_ra_reader *r;
  ck_assert_int_eq(kio_ra_open(&r, "ark,s,cs:" ALI_ARK, &kio_int_vec_holder), KIO_OK);
  ck_assert_int_eq(kio_ra_has_key(r, a.keys[3]), 1);
  ck_assert_int_eq(kio_ra_has_key(r, a.keys[3]), 1);
  ck_assert_int_eq(kio_ra_has_key(r, "en-029-f1-00100x"), 0);
  ck_assert_int_eq(kio_ra_has_key(r, a.keys[39]), 1);
  ck_assert_int_eq(kio_ra_has_key(r, "zzz"), 0);
  ck_assert_int_eq(kio_ra_close(r), KIO_OK);
  free_set(&a);
}
END_TEST

START_TEST(sorted_order_errors) {
  ali_set a;
  ck_assert_int_eq(read_all("ark:" ALI_ARK, &a), KIO_OK);
  /* an archive in reverse order */
  ali_set rev = a;
  rev.keys = malloc(a.n * sizeof *rev.keys);
  rev.v = malloc(a.n * sizeof *rev.v);
  for (int i = 0; i < a.n; i++) {
    rev.keys[i] = a.keys[a.n - 1 - i];
    rev.v[i] = a.v[a.n - 1 - i];
  }
  const char *p = tu_tmp_path("rev.ark");
  char spec[1200];
  snprintf(spec, sizeof spec, "ark:%s", p);
  write_all(spec, &rev);
  free(rev.keys);
  free(rev.v);
  /* unsorted mode copes */
  kio_ra_reader *r;
  ck_assert_int_eq(kio_ra_open(&r, spec, &kio_int_vec_holder), KIO_OK);
  ck_assert_int_eq(kio_ra_has_key(r, a.keys[0]), 1);
  ck_assert_int_eq(kio_ra_has_key(r, a.keys[39]), 1);
  ck_assert_int_eq(kio_ra_close(r), KIO_OK);
  /* s: out-of-order archive is fatal */
  cap_start();
  snprintf(spec, sizeof spec, "ark,s:%s", p);
  ck_assert_int_eq(kio_ra_open(&r, spec, &kio_int_vec_holder), KIO_OK);
  ck_assert_int_eq(kio_ra_has_key(r, a.keys[1]), 0); /* first key read is larger */
  ck_assert_int_eq(kio_ra_has_key(r, "zzz"), KIO_ERR);
  ck_assert_ptr_nonnull(strstr(cap.last_error, "not in sorted order"));
  ck_assert_ptr_null(kio_ra_value(r, a.keys[1]));
  ck_assert_int_eq(kio_ra_close(r), KIO_ERR);
  snprintf(spec, sizeof spec, "ark,s,cs:%s", p);
  ck_assert_int_eq(kio_ra_open(&r, spec, &kio_int_vec_holder), KIO_OK);
  ck_assert_int_eq(kio_ra_has_key(r, "zzz"), KIO_ERR);
  ck_assert_int_eq(kio_ra_close(r), KIO_ERR);
  /* cs: keys requested out of order */
  cap_start();
  ck_assert_int_eq(kio_ra_open(&r, "ark,s,cs:" ALI_ARK, &kio_int_vec_holder), KIO_OK);
  ck_assert_int_eq(kio_ra_has_key(r, a.keys[5]), 1);
  ck_assert_int_eq(kio_ra_has_key(r, a.keys[2]), KIO_ERR);
  ck_assert_ptr_nonnull(strstr(cap.last_error, "You provided the \"cs\" option but are not "
                                               "calling with keys in sorted order"));
  ck_assert_int_eq(kio_ra_close(r), KIO_ERR);
  /* scp with s but unsorted -> open fails */
  const char *ps = tu_tmp_path("rev.scp");
  write_text(ps, "b x.ark:1\na x.ark:2\n");
  snprintf(spec, sizeof spec, "scp,s:%s", ps);
  ck_assert_int_eq(kio_ra_open(&r, spec, &kio_int_vec_holder), KIO_ERR);
  ck_assert_ptr_null(r);
  snprintf(spec, sizeof spec, "scp:%s", ps);
  ck_assert_int_eq(kio_ra_open(&r, spec, &kio_int_vec_holder), KIO_OK);
  ck_assert_int_eq(kio_ra_has_key(r, "a"), 1); /* not loaded without p */
  ck_assert_int_eq(kio_ra_has_key(r, "bad key"), KIO_ERR);
  ck_assert_int_eq(kio_ra_close(r), KIO_ERR);
  kio_log_set_handler(NULL, NULL);
  free_set(&a);
}
END_TEST

START_TEST(duplicates_and_once) {
  const char *p = tu_tmp_path("dup.ark"), *ps = tu_tmp_path("dup.scp");
  write_text(p, "a 1 2 \nb 3 \na 4 \n");
  write_text(ps, "a x:1\nb x:2\na x:3\n");
  char spec[1200];
  kio_ra_reader *r;
  cap_start();
  snprintf(spec, sizeof spec, "ark:%s", p);
  ck_assert_int_eq(kio_ra_open(&r, spec, &kio_int_vec_holder), KIO_OK);
  ck_assert_int_eq(kio_ra_has_key(r, "a"), 1);
  ck_assert_int_eq(kio_ra_has_key(r, "c"), KIO_ERR);
  ck_assert_ptr_nonnull(strstr(cap.last_error, "duplicate key a"));
  ck_assert_int_eq(kio_ra_close(r), KIO_ERR);
  snprintf(spec, sizeof spec, "scp:%s", ps);
  ck_assert_int_eq(kio_ra_open(&r, spec, &kio_int_vec_holder), KIO_ERR);
  ck_assert_ptr_nonnull(strstr(cap.last, "Error opening RandomAccessTableReader"));
  /* sequential readers do not care about duplicates */
  ali_set s;
  snprintf(spec, sizeof spec, "ark:%s", p);
  ck_assert_int_eq(read_all(spec, &s), KIO_OK);
  ck_assert_int_eq(s.n, 3);
  ck_assert_int_eq(s.v[2].v[0], 4);
  ck_assert_int_eq(s.v[0].n, 2);
  free_set(&s);
  /* once: a second Value() for a key is an error */
  write_text(p, "a 1 \nb 2 \nc 3 \n");
  snprintf(spec, sizeof spec, "ark,o:%s", p);
  ck_assert_int_eq(kio_ra_open(&r, spec, &kio_int_vec_holder), KIO_OK);
  ck_assert_ptr_nonnull(kio_ra_value(r, "b"));
  ck_assert_ptr_nonnull(kio_ra_value(r, "a"));
  ck_assert_ptr_null(kio_ra_value(r, "b"));
  ck_assert_int_eq(kio_ra_close(r), KIO_ERR);
  /* absent key in Value() is fatal */
  snprintf(spec, sizeof spec, "ark:%s", p);
  ck_assert_int_eq(kio_ra_open(&r, spec, &kio_int_vec_holder), KIO_OK);
  ck_assert_ptr_null(kio_ra_value(r, "zz"));
  ck_assert_ptr_nonnull(strstr(cap.last_error, "no such key zz"));
  ck_assert_int_eq(kio_ra_close(r), KIO_ERR);
  kio_log_set_handler(NULL, NULL);
}
END_TEST

/* Truncates ALI_ARK in the middle of its third entry. */
static const char *make_truncated(long *cut) {
  size_t n;
  unsigned char *b = tu_read_file(ALI_ARK, &n);
  /* find the start of the 3rd key */
  long pos = 0;
  int found = 0;
  for (size_t i = 1; i < n && found < 2; i++)
    if (b[i] == 'e' && !memcmp(b + i, "en-029-", 7) && b[i - 1] != ' ') { found++; pos = (long)i; }
  ck_assert_int_eq(found, 2);
  *cut = pos + 40;
  const char *p = tu_tmp_path("trunc.ark");
  FILE *f = fopen(p, "wb");
  fwrite(b, 1, (size_t)*cut, f);
  fclose(f);
  free(b);
  return p;
}

START_TEST(truncated_archive) {
  long cut;
  const char *p = make_truncated(&cut);
  ali_set a;
  ck_assert_int_eq(read_all("ark:" ALI_ARK, &a), KIO_OK);
  char spec[1200];
  cap_start();
  snprintf(spec, sizeof spec, "ark:%s", p);
  kio_seq_reader *r;
  ck_assert_int_eq(kio_seq_open(&r, spec, &kio_int_vec_holder), KIO_OK);
  int n = 0;
  for (; !kio_seq_done(r); kio_seq_next(r)) n++;
  ck_assert_int_eq(n, 2);
  ck_assert_int_eq(cap.errors, 0); /* reported at close, not before */
  ck_assert_int_eq(cap.warnings, 1);
  ck_assert_int_eq(kio_seq_close(r), KIO_ERR);
  ck_assert_int_eq(cap.errors, 1);
  ck_assert_ptr_nonnull(strstr(cap.last_error, p));
  ck_assert_ptr_nonnull(strstr(cap.last_error, a.keys[2]));
  /* permissive: no error at close */
  cap_start();
  snprintf(spec, sizeof spec, "ark,p:%s", p);
  ck_assert_int_eq(kio_seq_open(&r, spec, &kio_int_vec_holder), KIO_OK);
  for (; !kio_seq_done(r); kio_seq_next(r)) {}
  ck_assert_int_eq(kio_seq_close(r), KIO_OK);
  ck_assert_int_eq(cap.errors, 0);
  /* random access: keys after the error are absent; error at close */
  snprintf(spec, sizeof spec, "ark:%s", p);
  kio_ra_reader *ra;
  ck_assert_int_eq(kio_ra_open(&ra, spec, &kio_int_vec_holder), KIO_OK);
  ck_assert_int_eq(kio_ra_has_key(ra, a.keys[1]), 1);
  ck_assert_int_eq(kio_ra_has_key(ra, a.keys[5]), 0);
  ck_assert_int_eq(kio_ra_has_key(ra, a.keys[0]), 1);
  ck_assert_int_eq(kio_ra_close(ra), KIO_ERR);
  ck_assert_ptr_nonnull(strstr(cap.last_error, a.keys[2]));
  /* text archive with a bad integer */
  const char *pt = tu_tmp_path("bad.txt");
  write_text(pt, "a 1 2 \nb 3 x 4 \nc 5 \n");
  snprintf(spec, sizeof spec, "ark:%s", pt);
  ck_assert_int_eq(kio_seq_open(&r, spec, &kio_int_vec_holder), KIO_OK);
  ck_assert_str_eq(kio_seq_key(r), "a");
  kio_seq_next(r);
  ck_assert(kio_seq_done(r));
  ck_assert_int_eq(kio_seq_close(r), KIO_ERR);
  ck_assert_ptr_nonnull(strstr(cap.last_error, "key b"));
  /* key not followed by a space */
  /* (an error in the very first entry makes the open fail, as in Kaldi) */
  write_text(pt, "a\r 1\n");
  ck_assert_int_eq(kio_seq_open(&r, spec, &kio_int_vec_holder), KIO_ERR);
  ck_assert_ptr_null(r);
  write_text(pt, "b 1 \na\r 1\n");
  ck_assert_int_eq(kio_seq_open(&r, spec, &kio_int_vec_holder), KIO_OK);
  kio_seq_next(r);
  ck_assert(kio_seq_done(r));
  ck_assert_int_eq(kio_seq_close(r), KIO_ERR);
  /* binary header broken */
  write_text(pt, "b 1 \na \001");
  ck_assert_int_eq(kio_seq_open(&r, spec, &kio_int_vec_holder), KIO_OK);
  kio_seq_next(r);
  ck_assert(kio_seq_done(r));
  ck_assert_int_eq(kio_seq_close(r), KIO_ERR);
  write_text(pt, "a \001");
  ck_assert_int_eq(kio_seq_open(&r, spec, &kio_int_vec_holder), KIO_ERR);
  ck_assert_ptr_nonnull(strstr(cap.last_error, "Error constructing TableReader"));
  kio_log_set_handler(NULL, NULL);
  free_set(&a);
}
END_TEST

START_TEST(scp_errors) {
  const char *ps = tu_tmp_path("bad.scp");
  char spec[1200];
  ali_set a;
  ck_assert_int_eq(read_all("ark:" ALI_ARK, &a), KIO_OK);
  cap_start();
  /* a line with a key only */
  write_text(ps, "en-029-f1-00014 " ALI_ARK ":16\nonlykey\n");
  snprintf(spec, sizeof spec, "scp:%s", ps);
  kio_seq_reader *r;
  ck_assert_int_eq(kio_seq_open(&r, spec, &kio_int_vec_holder), KIO_OK);
  kio_int_vec *x = kio_seq_value(r);
  ck_assert_ptr_nonnull(x);
  ck_assert_int_eq(x->n, a.v[0].n);
  kio_seq_next(r);
  ck_assert(kio_seq_done(r));
  ck_assert_int_eq(kio_seq_close(r), KIO_ERR);
  kio_ra_reader *ra;
  ck_assert_int_eq(kio_ra_open(&ra, spec, &kio_int_vec_holder), KIO_ERR);
  /* empty line */
  write_text(ps, "a " ALI_ARK ":16\n\nb " ALI_ARK ":16\n");
  ck_assert_int_eq(kio_ra_open(&ra, spec, &kio_int_vec_holder), KIO_ERR);
  /* entries pointing at missing files / bad offsets: fatal unless p */
  write_text(ps, "a " ALI_ARK ":16\nb no/such/file\nc " ALI_ARK ":17\nd " ALI_ARK
                 ":16[0:3]\ne " ALI_ARK ":16  \n");
  ck_assert_int_eq(kio_seq_open(&r, spec, &kio_int_vec_holder), KIO_OK);
  ck_assert_ptr_nonnull(kio_seq_value(r));
  kio_seq_next(r);
  ck_assert_str_eq(kio_seq_key(r), "b");
  int e0 = cap.errors;
  ck_assert_ptr_null(kio_seq_value(r));
  ck_assert_int_eq(cap.errors, e0 + 1);
  ck_assert_ptr_nonnull(strstr(cap.last_error, "no/such/file"));
  ck_assert_int_eq(kio_seq_close(r), KIO_OK);
  snprintf(spec, sizeof spec, "scp,p:%s", ps);
  ali_set s;
  ck_assert_int_eq(read_all(spec, &s), KIO_OK);
  ck_assert_int_eq(s.n, 2); /* b, c (offset inside an object), d (range) skipped */
  ck_assert_str_eq(s.keys[0], "a");
  ck_assert_str_eq(s.keys[1], "e");
  free_set(&s);
  ck_assert_int_eq(kio_ra_open(&ra, spec, &kio_int_vec_holder), KIO_OK);
  ck_assert_int_eq(kio_ra_has_key(ra, "a"), 1);
  ck_assert_int_eq(kio_ra_has_key(ra, "b"), 0);
  ck_assert_int_eq(kio_ra_has_key(ra, "c"), 0);
  ck_assert_int_eq(kio_ra_has_key(ra, "e"), 1);
  ck_assert_int_eq(kio_ra_close(ra), KIO_OK);
  snprintf(spec, sizeof spec, "scp:%s", ps);
  ck_assert_int_eq(kio_ra_open(&ra, spec, &kio_int_vec_holder), KIO_OK);
  ck_assert_int_eq(kio_ra_has_key(ra, "b"), 1);
  ck_assert_ptr_null(kio_ra_value(ra, "b"));
  ck_assert_ptr_nonnull(strstr(cap.last_error, "Could not get item for key b"));
  ck_assert_int_eq(kio_ra_close(ra), KIO_ERR);
  kio_log_set_handler(NULL, NULL);
  free_set(&a);
}
END_TEST

START_TEST(missing_files_and_failed_pipes) {
  cap_start();
  kio_seq_reader *r;
  kio_ra_reader *ra;
  kio_writer *w;
  ck_assert_int_eq(kio_seq_open(&r, "ark:no/such.ark", &kio_int_vec_holder), KIO_ERR);
  ck_assert_ptr_null(r);
  ck_assert_str_eq(cap.last_error, "Error constructing TableReader: rspecifier is ark:no/such.ark");
  ck_assert_int_eq(kio_seq_open(&r, "scp:no/such.scp", &kio_int_vec_holder), KIO_ERR);
  ck_assert_int_eq(kio_seq_open(&r, "bogus", &kio_int_vec_holder), KIO_ERR);
  ck_assert_int_eq(kio_ra_open(&ra, "ark:no/such.ark", &kio_int_vec_holder), KIO_ERR);
  ck_assert_int_eq(kio_ra_open(&ra, "scp:no/such.scp", &kio_int_vec_holder), KIO_ERR);
  ck_assert_int_eq(kio_writer_open(&w, "ark:no/such/dir/x.ark", &kio_int_vec_holder), KIO_ERR);
  ck_assert_int_eq(kio_writer_open(&w, "ark,scp:a.ark", &kio_int_vec_holder), KIO_ERR);
  ck_assert_ptr_null(w);
  /* a failing input pipe: reported at close */
  cap_start();
  ck_assert_int_eq(kio_seq_open(&r, "ark:false |", &kio_int_vec_holder), KIO_OK);
  ck_assert(kio_seq_done(r));
  ck_assert_int_eq(cap.errors, 0);
  ck_assert_int_eq(kio_seq_close(r), KIO_ERR);
  ck_assert_int_eq(cap.errors, 1);
  ali_set s;
  ck_assert_int_eq(read_all("ark:cat " ALI_ARK "; exit 1 |", &s), KIO_ERR);
  ck_assert_int_eq(s.n, 40);
  free_set(&s);
  ck_assert_int_eq(read_all("ark,p:cat " ALI_ARK "; exit 1 |", &s), KIO_OK);
  free_set(&s);
  /* closed before the end: the writer may have died of SIGPIPE; not an error */
  ck_assert_int_eq(kio_seq_open(&r, "ark:cat " ALI_ARK "; exit 1 |", &kio_int_vec_holder),
                   KIO_OK);
  ck_assert(!kio_seq_done(r));
  ck_assert_int_eq(kio_seq_close(r), KIO_OK);
  /* random access: a failed pipe read to its end is an error too (Kaldi's
   * RA Close only warns: the pipe's output may have been cut short) */
  int w0 = cap.warnings;
  ck_assert_int_eq(kio_ra_open(&ra, "ark:false |", &kio_int_vec_holder), KIO_OK);
  ck_assert_int_eq(kio_ra_has_key(ra, "a"), 0);
  ck_assert_int_eq(kio_ra_close(ra), KIO_ERR);
  ck_assert_int_eq(cap.warnings, w0 + 1);
  ck_assert_str_eq(cap.last, "Error closing RandomAccessTableReader: rspecifier is "
                             "ark:false | (input pipe failed)");
  kio_log_set_handler(NULL, NULL);
}
END_TEST

START_TEST(scores_float_holder) {
  kio_seq_reader *r;
  ck_assert_int_eq(kio_seq_open(&r, "ark:kaldi/mono/scores.txt", &kio_float_holder), KIO_OK);
  const char *p = tu_tmp_path("scores.txt"), *pb = tu_tmp_path("scores.ark");
  char spec[1200], spec2[1200];
  snprintf(spec, sizeof spec, "ark,t:%s", p);
  snprintf(spec2, sizeof spec2, "ark:%s", pb);
  kio_writer *w, *wb;
  ck_assert_int_eq(kio_writer_open(&w, spec, &kio_float_holder), KIO_OK);
  ck_assert_int_eq(kio_writer_open(&wb, spec2, &kio_float_holder), KIO_OK);
  int n = 0;
  for (; !kio_seq_done(r); kio_seq_next(r), n++) {
    float *x = kio_seq_value(r);
    if (n == 0) ck_assert(*x == -4418.898f);
    ck_assert_int_eq(kio_writer_write(w, kio_seq_key(r), x), KIO_OK);
    ck_assert_int_eq(kio_writer_write(wb, kio_seq_key(r), x), KIO_OK);
  }
  ck_assert_int_eq(n, 40);
  ck_assert_int_eq(kio_seq_close(r), KIO_OK);
  ck_assert_int_eq(kio_writer_close(w), KIO_OK);
  ck_assert_int_eq(kio_writer_close(wb), KIO_OK);
  ck_assert(tu_files_equal(p, "kaldi/mono/scores.txt"));
  size_t len;
  unsigned char *b = tu_read_file(pb, &len);
  ck_assert(memcmp(b, "en-029-f1-00014 \0B\x04", 19) == 0);
  ck_assert_uint_eq(len, 40 * (16 + 7));
  free(b);
  kio_ra_reader *ra;
  ck_assert_int_eq(kio_ra_open(&ra, spec2, &kio_float_holder), KIO_OK);
  float *x = kio_ra_value(ra, "en-029-f1-00056");
  ck_assert_ptr_nonnull(x);
  ck_assert(*x == -1998.65f);
  ck_assert_int_eq(kio_ra_close(ra), KIO_OK);
}
END_TEST

START_TEST(writers_scp_and_closed) {
  kio_writer *w;
  ck_assert_int_eq(kio_writer_open(&w, "", &kio_int_vec_holder), KIO_OK);
  ck_assert_ptr_null(w);
  int32_t v[] = {5, 6};
  kio_int_vec x = {2, v};
  ck_assert_int_eq(kio_writer_write(w, "a", &x), KIO_OK);
  ck_assert_int_eq(kio_writer_close(w), KIO_OK);
  /* scp: writes each object to the file the scp names */
  const char *ps = tu_tmp_path("w.scp"), *f1 = tu_tmp_path("w1.ali"), *f2 = tu_tmp_path("w2.ali");
  char text[2400], spec[1200];
  snprintf(text, sizeof text, "u2 %s\nu1 %s\n", f2, f1);
  write_text(ps, text);
  snprintf(spec, sizeof spec, "scp,t:%s", ps);
  ck_assert_int_eq(kio_writer_open(&w, spec, &kio_int_vec_holder), KIO_OK);
  ck_assert_int_eq(kio_writer_write(w, "u1", &x), KIO_OK);
  cap_start();
  ck_assert_int_eq(kio_writer_write(w, "u3", &x), KIO_ERR);
  ck_assert_int_eq(kio_writer_write(w, "bad key", &x), KIO_ERR);
  kio_log_set_handler(NULL, NULL);
  ck_assert_int_eq(kio_writer_close(w), KIO_OK);
  size_t n;
  unsigned char *b = tu_read_file(f1, &n);
  ck_assert_uint_eq(n, 5);
  ck_assert(memcmp(b, "5 6 \n", 5) == 0);
  free(b);
  snprintf(spec, sizeof spec, "scp,p:%s", ps);
  ck_assert_int_eq(kio_writer_open(&w, spec, &kio_int_vec_holder), KIO_OK);
  ck_assert_int_eq(kio_writer_write(w, "u3", &x), KIO_OK);
  ck_assert_int_eq(kio_writer_write(w, "u2", &x), KIO_OK);
  ck_assert_int_eq(kio_writer_close(w), KIO_OK);
  b = tu_read_file(f2, &n);
  ck_assert_uint_eq(n, 2 + 5 + 10);
  ck_assert(memcmp(b, "\0B\x04\x02\0\0\0\x04\x05\0\0\0", 12) == 0);
  free(b);
  /* and the scp reads back */
  snprintf(spec, sizeof spec, "scp:%s", ps);
  kio_ra_reader *ra;
  ck_assert_int_eq(kio_ra_open(&ra, spec, &kio_int_vec_holder), KIO_OK);
  kio_int_vec *y = kio_ra_value(ra, "u1");
  ck_assert(y && y->n == 2 && y->v[1] == 6);
  y = kio_ra_value(ra, "u2");
  ck_assert(y && y->n == 2 && y->v[0] == 5);
  ck_assert_int_eq(kio_ra_close(ra), KIO_OK);
  /* empty alignments, text and binary */
  const char *pe = tu_tmp_path("empty.txt");
  snprintf(spec, sizeof spec, "ark,t:%s", pe);
  kio_int_vec e = {0, NULL};
  ck_assert_int_eq(kio_writer_open(&w, spec, &kio_int_vec_holder), KIO_OK);
  ck_assert_int_eq(kio_writer_write(w, "utt1", &e), KIO_OK);
  ck_assert_int_eq(kio_writer_write(w, "utt2", &x), KIO_OK);
  ck_assert_int_eq(kio_writer_close(w), KIO_OK);
  b = tu_read_file(pe, &n);
  ck_assert_uint_eq(n, 16);
  ck_assert(memcmp(b, "utt1 \nutt2 5 6 \n", 16) == 0);
  free(b);
  ali_set s;
  snprintf(spec, sizeof spec, "ark:%s", pe);
  ck_assert_int_eq(read_all(spec, &s), KIO_OK);
  ck_assert_int_eq(s.n, 2);
  ck_assert_int_eq(s.v[0].n, 0);
  free_set(&s);
}
END_TEST

START_TEST(features_ark_vs_scp) {
  kio_seq_reader *r;
  kio_ra_reader *ra;
  ck_assert_int_eq(kio_seq_open(&r, "ark:feats/delta.ark", &kio_matrix_holder), KIO_OK);
  ck_assert_int_eq(kio_ra_open(&ra, "scp:feats/delta.scp", &kio_matrix_holder), KIO_OK);
  int n = 0;
  for (; !kio_seq_done(r); kio_seq_next(r), n++) {
    kio_matrix *a = kio_seq_value(r), *b = kio_ra_value(ra, kio_seq_key(r));
    ck_assert(a && b && a->rows == b->rows && a->cols == 39 && b->cols == 39);
    ck_assert(memcmp(a->data, b->data, (size_t)a->rows * a->cols * sizeof(float)) == 0);
  }
  ck_assert_int_eq(n, 40);
  ck_assert_int_eq(kio_seq_close(r), KIO_OK);
  ck_assert_int_eq(kio_ra_close(ra), KIO_OK);
}
END_TEST

/* kio_ra_take / kio_seq_take: s,cs and scp readers hand their object out
 * (reusing the caller's buffers); others keep it (1); s,cs: no second take. */
START_TEST(take_moves_objects) {
  const char *specs[] = {"ark,s,cs:feats/delta.ark", "scp:feats/delta.scp", "ark:feats/delta.ark"};
  for (int k = 0; k < 3; k++) {
    kio_seq_reader *r; kio_ra_reader *ra;
    ck_assert_int_eq(kio_seq_open(&r, "ark:feats/delta.ark", &kio_matrix_holder), KIO_OK);
    ck_assert_int_eq(kio_ra_open(&ra, specs[k], &kio_matrix_holder), KIO_OK);
    kio_matrix a = {0}, b = {0};
    char last[64] = "";
    for (; !kio_seq_done(r); kio_seq_next(r)) {
      snprintf(last, sizeof last, "%s", kio_seq_key(r));
      ck_assert_int_eq(kio_ra_has_key(ra, last), 1);
      ck_assert_int_eq(kio_ra_take(ra, last, &b), k == 2 ? 1 : KIO_OK);
      ck_assert_int_eq(kio_seq_take(r, &a), KIO_OK);
      if (k == 2) continue;
      ck_assert(a.rows > 0 && a.rows == b.rows && a.cols == 39 && b.cols == 39);
      ck_assert(memcmp(a.data, b.data, (size_t)a.rows * a.cols * sizeof(float)) == 0);
    }
    if (k == 0) ck_assert_ptr_null(kio_ra_value(ra, last));  /* taken already */
    ck_assert_int_eq(kio_seq_close(r), KIO_OK);
    ck_assert_int_eq(kio_ra_close(ra), k == 0 ? KIO_ERR : KIO_OK);
    kio_matrix_free(&a); kio_matrix_free(&b);
  }
}
END_TEST

/* Corrupted archives (random byte changes, truncations) must never crash or
 * hang: every reader ends and reports through its status. */
START_TEST(fuzz_corrupt_archives) {
  const char *srcs[] = {ALI_ARK, ALI_TXT, "kaldi/mono/scores.txt"};
  const kio_holder *hs[] = {&kio_int_vec_holder, &kio_int_vec_holder, &kio_float_holder};
  const char *p = tu_tmp_path("fuzz.ark");
  char spec[1200];
  cap_start();
  srand(1234);
  for (int it = 0; it < 150; it++) {
    int which = it % 3;
    size_t n;
    unsigned char *b = tu_read_file(srcs[which], &n);
    size_t len = n;
    if (it % 5 == 0) len = (size_t)rand() % n;
    int flips = 1 + rand() % 8;
    for (int k = 0; k < flips && len > 0; k++) {
      size_t at = (size_t)rand() % len;
      int mode = rand() % 4;
      b[at] = mode == 0 ? 0 : mode == 1 ? 0xFF : mode == 2 ? ' ' : (unsigned char)rand();
    }
    FILE *f = fopen(p, "wb");
    fwrite(b, 1, len, f);
    fclose(f);
    free(b);
    snprintf(spec, sizeof spec, "ark:%s", p);
    kio_seq_reader *r;
    if (kio_seq_open(&r, spec, hs[which]) != KIO_OK) ck_assert_ptr_null(r);
    int count = 0;
    for (; r && !kio_seq_done(r) && count < 100000; kio_seq_next(r)) {
      ck_assert_ptr_nonnull(kio_seq_value(r));
      count++;
    }
    kio_seq_close(r);
    kio_ra_reader *ra;
    snprintf(spec, sizeof spec, "ark,s,cs:%s", p);
    ck_assert_int_eq(kio_ra_open(&ra, spec, hs[which]), KIO_OK);
    kio_ra_has_key(ra, "en-029-f1-00119");
    kio_ra_has_key(ra, "zzz");
    kio_ra_close(ra);
    snprintf(spec, sizeof spec, "ark:%s", p);
    ck_assert_int_eq(kio_ra_open(&ra, spec, hs[which]), KIO_OK);
    kio_ra_has_key(ra, "zzz");
    kio_ra_close(ra);
  }
  kio_log_set_handler(NULL, NULL);
}
END_TEST

/* scp entries that are commands, plus ranges on matrices (Kaldi's tolerance:
 * the end row may pass the last row by up to 3). */
START_TEST(scp_pipes_and_ranges) {
  const char *ps = tu_tmp_path("pipes.scp");
  write_text(ps, "u1 printf '1 2 3 \\n' |\nu2 false |\nu3 printf '7 \\n' |\n");
  char spec[1200];
  snprintf(spec, sizeof spec, "scp,p:%s", ps);
  ali_set s;
  cap_start();
  ck_assert_int_eq(read_all(spec, &s), KIO_OK);
  ck_assert_int_eq(s.n, 2);
  ck_assert_str_eq(s.keys[1], "u3");
  ck_assert_int_eq(s.v[0].n, 3);
  ck_assert_int_eq(s.v[0].v[2], 3);
  ck_assert_int_eq(s.v[1].v[0], 7);
  free_set(&s);
  /* ranges through random access on the feature scp */
  write_text(ps, "a feats/delta.ark:16[2:5]\nb feats/delta.ark:16[2:5,3:4]\n"
                 "c feats/delta.ark:16\nd feats/delta.ark:16[0:449]\n"
                 "e feats/delta.ark:16[0:450]\nf feats/delta.ark:16[:,1:1]\n");
  snprintf(spec, sizeof spec, "scp:%s", ps);
  kio_ra_reader *ra;
  ck_assert_int_eq(kio_ra_open(&ra, spec, &kio_matrix_holder), KIO_OK);
  kio_matrix *c = kio_ra_value(ra, "c");
  ck_assert_ptr_nonnull(c);
  int32_t rows = c->rows, cols = c->cols;
  ck_assert_int_eq(rows, 447);
  float *full = malloc((size_t)rows * cols * sizeof(float));
  memcpy(full, c->data, (size_t)rows * cols * sizeof(float));
  kio_matrix *m = kio_ra_value(ra, "a");
  ck_assert(m && m->rows == 4 && m->cols == 39);
  ck_assert(m->data[0] == full[2 * cols]);
  m = kio_ra_value(ra, "b");
  ck_assert(m && m->rows == 4 && m->cols == 2);
  ck_assert(m->data[3] == full[3 * cols + 4]);
  m = kio_ra_value(ra, "c"); /* reloaded in full after the ranged ones */
  ck_assert(m && m->rows == rows && m->cols == cols);
  m = kio_ra_value(ra, "d");
  ck_assert(m && m->rows == rows);
  m = kio_ra_value(ra, "f");
  ck_assert(m && m->rows == rows && m->cols == 1 && m->data[1] == full[cols + 1]);
  ck_assert_ptr_null(kio_ra_value(ra, "e"));
  ck_assert_int_eq(kio_ra_close(ra), KIO_ERR);
  free(full);
  kio_log_set_handler(NULL, NULL);
}
END_TEST

int main(void) {
  Suite *s = suite_create("table");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, alignments_binary_text_identical);
  tcase_add_test(tc, alignments_write_back_byte_identical);
  tcase_add_test(tc, gzip_pipes);
  tcase_add_test(tc, ark_scp_offsets_and_random_access);
  tcase_add_test(tc, random_access_archive_modes);
  tcase_add_test(tc, sorted_order_errors);
  tcase_add_test(tc, duplicates_and_once);
  tcase_add_test(tc, truncated_archive);
  tcase_add_test(tc, scp_errors);
  tcase_add_test(tc, missing_files_and_failed_pipes);
  tcase_add_test(tc, scores_float_holder);
  tcase_add_test(tc, writers_scp_and_closed);
  tcase_add_test(tc, features_ark_vs_scp);
  tcase_add_test(tc, take_moves_objects);
  tcase_add_test(tc, fuzz_corrupt_archives);
  tcase_add_test(tc, scp_pipes_and_ranges);
  suite_add_tcase(s, tc);
  return tu_run_suite(s);
}
