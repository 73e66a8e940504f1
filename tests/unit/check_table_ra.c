/* Random-access archive readers with read-ahead (base/io/table-ra.c): "s",
 * "s,cs" and "bg" archives are read by a thread into a small queue. The
 * lookups must behave exactly as without it: sorted requests, skipped and
 * absent keys, out-of-order requests, a truncated archive (WARNING only when
 * the caller gets there, ERROR at close), failing pipes, 'p'; unsorted
 * archives read ahead on request (kio_ra_read_ahead) likewise. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/sys/log.h"
#include "base/io/table.h"
#include "tests/lib/test-util.h"

#define ALI_ARK "kaldi/mono/ali.ark"

/* Captured log lines (tests/lib/test-util.c). */
#define cap tu_cap
#define cap_start tu_logcap_start

typedef struct { int n; char **keys; kio_int_vec *v; } ali_set;

static void read_all(const char *rspec, ali_set *s) {
  memset(s, 0, sizeof *s);
  kio_seq_reader *r;
  ck_assert_int_eq(kio_seq_open(&r, rspec, &kio_int_vec_holder), KIO_OK);
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
  ck_assert_int_eq(kio_seq_close(r), KIO_OK);
}

static void free_set(ali_set *s) {
  for (int i = 0; i < s->n; i++) {
    free(s->keys[i]);
    free(s->v[i].v);
  }
  free(s->keys);
  free(s->v);
}

static void assert_vec(const kio_int_vec *x, const kio_int_vec *want) {
  ck_assert_ptr_nonnull(x);
  ck_assert_int_eq(x->n, want->n);
  ck_assert(memcmp(x->v, want->v, x->n * sizeof(int32_t)) == 0);
}

/* A sorted archive of n entries (keys k00000..., vectors of varying length):
 * longer than the read-ahead queue, so its slots and objects are reused. */
static const char *make_big(int n, ali_set *s) {
  const char *p = tu_tmp_path("big.ark");
  char spec[1200];
  snprintf(spec, sizeof spec, "ark:%s", p);
  kio_writer *w;
  ck_assert_int_eq(kio_writer_open(&w, spec, &kio_int_vec_holder), KIO_OK);
  memset(s, 0, sizeof *s);
  s->keys = calloc(n, sizeof *s->keys);
  s->v = calloc(n, sizeof *s->v);
  for (int i = 0; i < n; i++) {
    char key[32];
    snprintf(key, sizeof key, "k%05d", i);
    s->keys[i] = strdup(key);
    s->v[i].n = (i * 37) % 300;
    s->v[i].v = malloc((s->v[i].n + 1) * sizeof(int32_t));
    for (int j = 0; j < s->v[i].n; j++) s->v[i].v[j] = i * 1000 + j;
    ck_assert_int_eq(kio_writer_write(w, key, &s->v[i]), KIO_OK);
  }
  s->n = n;
  ck_assert_int_eq(kio_writer_close(w), KIO_OK);
  return p;
}

/* Opens spec; ahead: an unsorted archive read ahead (kio_ra_read_ahead). */
static int ra_open(kio_ra_reader **r, const char *spec, int ahead) {
  int rc = kio_ra_open(r, spec, &kio_int_vec_holder);
  if (rc == KIO_OK && ahead) ck_assert_int_eq(kio_ra_read_ahead(*r), 1);
  return rc;
}

/* Sorted requests, every key: value, and take where the table allows it. */
START_TEST(sorted_requests) {
  ali_set a, b;
  read_all("ark:" ALI_ARK, &a);
  const char *big = make_big(500, &b);
  const char *opts[] = {"ark,s,cs:", "ark,s:", "ark,bg:", "ark,s,cs,bg:", "ark,cs,s,o:"};
  for (int use_big = 0; use_big < 2; use_big++) {
    const ali_set *s = use_big ? &b : &a;
    for (size_t o = 0; o < sizeof opts / sizeof *opts; o++) {
      for (int take = 0; take < 2; take++) {
        char spec[1200];
        snprintf(spec, sizeof spec, "%s%s", opts[o], use_big ? big : ALI_ARK);
        kio_ra_reader *r;
        ck_assert_int_eq(kio_ra_open(&r, spec, &kio_int_vec_holder), KIO_OK);
        kio_int_vec mine = {0, NULL};
        for (int i = 0; i < s->n; i++) {
          ck_assert_int_eq(kio_ra_has_key(r, s->keys[i]), 1);
          int t = take ? kio_ra_take(r, s->keys[i], &mine) : 1;
          if (t == KIO_OK) {
            assert_vec(&mine, &s->v[i]);
          } else {
            ck_assert_int_eq(t, 1);
            assert_vec(kio_ra_value(r, s->keys[i]), &s->v[i]);
          }
        }
        ck_assert_int_eq(kio_ra_has_key(r, "zzz"), 0);
        ck_assert_int_eq(kio_ra_close(r), KIO_OK);
        kio_int_vec_holder.free(&mine);
      }
    }
  }
  /* bg on an unsorted table: random order still works */
  char spec[1200];
  snprintf(spec, sizeof spec, "ark,bg:%s", big);
  kio_ra_reader *r;
  ck_assert_int_eq(kio_ra_open(&r, spec, &kio_int_vec_holder), KIO_OK);
  for (int k = 0; k < b.n; k++) {
    int i = (k * 7) % b.n;
    ck_assert_int_eq(kio_ra_has_key(r, b.keys[i]), 1);
    assert_vec(kio_ra_value(r, b.keys[i]), &b.v[i]);
  }
  ck_assert_int_eq(kio_ra_close(r), KIO_OK);
  free_set(&a);
  free_set(&b);
}
END_TEST

/* Keys skipped over (more than the queue holds), absent keys, early close. */
START_TEST(skipped_and_absent_keys) {
  ali_set b;
  const char *big = make_big(200, &b);
  char spec[1200];
  snprintf(spec, sizeof spec, "ark,s,cs:%s", big);
  cap_start();
  kio_ra_reader *r;
  ck_assert_int_eq(kio_ra_open(&r, spec, &kio_int_vec_holder), KIO_OK);
  ck_assert_int_eq(kio_ra_has_key(r, b.keys[0]), 1);
  assert_vec(kio_ra_value(r, b.keys[0]), &b.v[0]);
  ck_assert_int_eq(kio_ra_has_key(r, b.keys[2]), 1);          /* one skipped */
  assert_vec(kio_ra_value(r, b.keys[2]), &b.v[2]);
  ck_assert_int_eq(kio_ra_has_key(r, "k00050x"), 0);         /* absent, between */
  ck_assert_int_eq(kio_ra_has_key(r, b.keys[51]), 1);
  assert_vec(kio_ra_value(r, b.keys[51]), &b.v[51]);
  ck_assert_int_eq(kio_ra_has_key(r, b.keys[51]), 1);         /* same key again */
  ck_assert_int_eq(kio_ra_has_key(r, b.keys[120]), 1);
  ck_assert_int_eq(cap.errors + cap.warnings, 0);
  ck_assert_int_eq(kio_ra_close(r), KIO_OK);                  /* early close */
  /* Value() of an absent key: ERROR, then fatal */
  ck_assert_int_eq(kio_ra_open(&r, spec, &kio_int_vec_holder), KIO_OK);
  ck_assert_ptr_null(kio_ra_value(r, "k00010x"));
  ck_assert_ptr_nonnull(strstr(cap.last_error, "Value() called but no such key k00010x"));
  ck_assert_int_eq(kio_ra_has_key(r, b.keys[11]), KIO_ERR);
  ck_assert_int_eq(kio_ra_close(r), KIO_ERR);
  /* s only: earlier keys stay available after a later one was read */
  snprintf(spec, sizeof spec, "ark,s:%s", big);
  ck_assert_int_eq(kio_ra_open(&r, spec, &kio_int_vec_holder), KIO_OK);
  ck_assert_int_eq(kio_ra_has_key(r, b.keys[150]), 1);
  assert_vec(kio_ra_value(r, b.keys[3]), &b.v[3]);
  ck_assert_int_eq(kio_ra_has_key(r, "k00003x"), 0);
  ck_assert_int_eq(kio_ra_has_key(r, b.keys[199]), 1);
  ck_assert_int_eq(kio_ra_has_key(r, "zzz"), 0);
  ck_assert_int_eq(kio_ra_close(r), KIO_OK);
  kio_log_set_handler(NULL, NULL);
  free_set(&b);
}
END_TEST

START_TEST(out_of_order_requests) {
  ali_set a;
  read_all("ark:" ALI_ARK, &a);
  const char *opts[] = {"ark,s,cs:" ALI_ARK, "ark,s,cs,bg:" ALI_ARK};
  for (int o = 0; o < 2; o++) {
    cap_start();
    kio_ra_reader *r;
    ck_assert_int_eq(kio_ra_open(&r, opts[o], &kio_int_vec_holder), KIO_OK);
    ck_assert_int_eq(kio_ra_has_key(r, a.keys[5]), 1);
    ck_assert_int_eq(kio_ra_has_key(r, a.keys[2]), KIO_ERR);
    ck_assert_int_eq(cap.errors, 1);
    ck_assert_ptr_nonnull(strstr(cap.last_error, "You provided the \"cs\" option but are not "
                                                 "calling with keys in sorted order"));
    ck_assert_ptr_null(kio_ra_value(r, a.keys[6]));
    ck_assert_int_eq(kio_ra_close(r), KIO_ERR);
  }
  /* a taken key asked for again */
  kio_ra_reader *r;
  ck_assert_int_eq(kio_ra_open(&r, "ark,s,cs:" ALI_ARK, &kio_int_vec_holder), KIO_OK);
  kio_int_vec mine = {0, NULL};
  ck_assert_int_eq(kio_ra_take(r, a.keys[4], &mine), KIO_OK);
  assert_vec(&mine, &a.v[4]);
  ck_assert_int_eq(kio_ra_has_key(r, a.keys[4]), KIO_ERR);
  ck_assert_int_eq(kio_ra_close(r), KIO_ERR);
  kio_int_vec_holder.free(&mine);
  kio_log_set_handler(NULL, NULL);
  free_set(&a);
}
END_TEST

/* ALI_ARK cut in the middle of its third entry. */
static const char *make_truncated(void) {
  size_t n;
  unsigned char *b = tu_read_file(ALI_ARK, &n);
  ck_assert_ptr_nonnull(b);
  long pos = 0;
  int found = 0;
  for (size_t i = 1; i < n && found < 2; i++)
    if (b[i] == 'e' && !memcmp(b + i, "en-029-", 7) && b[i - 1] != ' ') { found++; pos = (long)i; }
  ck_assert_int_eq(found, 2);
  const char *p = tu_tmp_path("trunc.ark");
  FILE *f = fopen(p, "wb");
  fwrite(b, 1, (size_t)pos + 40, f);
  fclose(f);
  free(b);
  return p;
}

START_TEST(truncated_archive) {
  ali_set a;
  read_all("ark:" ALI_ARK, &a);
  const char *p = make_truncated();
  const char *opts[] = {"ark,s,cs:", "ark,s:", "ark,bg:", "ark:"};
  for (int o = 0; o < 4; o++) {
    char spec[1200];
    snprintf(spec, sizeof spec, "%s%s", opts[o], p);
    /* the error is never reached: no message at all, close succeeds */
    cap_start();
    kio_ra_reader *r;
    ck_assert_int_eq(ra_open(&r, spec, o == 3), KIO_OK);
    ck_assert_int_eq(kio_ra_has_key(r, a.keys[0]), 1);
    assert_vec(kio_ra_value(r, a.keys[0]), &a.v[0]);
    ck_assert_int_eq(kio_ra_close(r), KIO_OK);
    ck_assert_int_eq(cap.warnings + cap.errors, 0);
    /* reached: one WARNING when read, keys after it absent, ERROR at close */
    ck_assert_int_eq(ra_open(&r, spec, o == 3), KIO_OK);
    ck_assert_int_eq(kio_ra_has_key(r, a.keys[1]), 1);
    ck_assert_int_eq(cap.warnings, 0);
    ck_assert_int_eq(kio_ra_has_key(r, a.keys[5]), 0);
    ck_assert_int_eq(cap.warnings, 1);
    ck_assert_int_eq(cap.errors, 0);
    ck_assert_int_eq(kio_ra_close(r), KIO_ERR);
    ck_assert_int_eq(cap.errors, 1);
    ck_assert_ptr_nonnull(strstr(cap.last_error, p));
    ck_assert_ptr_nonnull(strstr(cap.last_error, a.keys[2]));
    /* permissive: a WARNING instead */
    snprintf(spec, sizeof spec, "%s%s", o == 0 ? "ark,s,cs,p:" : o == 3 ? "ark,p:" : "ark,s,p:", p);
    cap_start();
    ck_assert_int_eq(ra_open(&r, spec, o == 3), KIO_OK);
    ck_assert_int_eq(kio_ra_has_key(r, a.keys[9]), 0);
    ck_assert_int_eq(kio_ra_close(r), KIO_OK);
    ck_assert_int_eq(cap.errors, 0);
    ck_assert_ptr_nonnull(strstr(cap.last, "Error state detected closing reader"));
  }
  kio_log_set_handler(NULL, NULL);
  free_set(&a);
}
END_TEST

START_TEST(failing_pipes) {
  ali_set a;
  read_all("ark:" ALI_ARK, &a);
  const char *opts[] = {"ark,s,cs:", "ark,s:", "ark,bg:", "ark:"};
  for (int o = 0; o < 4; o++) {
    char spec[1200];
    /* a pipe that fails after writing everything: all keys; read to its end,
     * so its output may be cut short: an ERROR at close (Kaldi only warns) */
    snprintf(spec, sizeof spec, "%scat %s; exit 1 |", opts[o], ALI_ARK);
    cap_start();
    kio_ra_reader *r;
    ck_assert_int_eq(ra_open(&r, spec, o == 3), KIO_OK);
    for (int i = 0; i < a.n; i++) assert_vec(kio_ra_value(r, a.keys[i]), &a.v[i]);
    ck_assert_int_eq(kio_ra_has_key(r, "zzz"), 0);
    ck_assert_int_eq(kio_ra_close(r), KIO_ERR);
    ck_assert_int_eq(cap.errors, 1);
    ck_assert_int_eq(cap.warnings, 1);
    char want[1400];
    snprintf(want, sizeof want, "Error closing RandomAccessTableReader: rspecifier is %s "
             "(input pipe failed)", spec);
    ck_assert_str_eq(cap.last, want);
    /* the same pipe, not read to its end: it may have died of SIGPIPE */
    cap_start();
    ck_assert_int_eq(ra_open(&r, spec, o == 3), KIO_OK);
    assert_vec(kio_ra_value(r, a.keys[0]), &a.v[0]);
    ck_assert_int_eq(kio_ra_close(r), KIO_OK);
    ck_assert_int_eq(cap.errors, 0);
    /* closed early: the thread and the pipe are stopped, no error */
    snprintf(spec, sizeof spec, "%sfor i in 1 2 3 4 5 6 7 8; do cat %s; done |", opts[o],
             "feats/delta.ark");
    ck_assert_int_eq(ra_open(&r, spec, o == 3), KIO_OK);
    ck_assert_int_eq(kio_ra_close(r), KIO_OK);
    /* a pipe that fails at once (read to its end: fatal) */
    snprintf(spec, sizeof spec, "%sfalse |", opts[o]);
    cap_start();
    ck_assert_int_eq(ra_open(&r, spec, o == 3), KIO_OK);
    ck_assert_int_eq(kio_ra_has_key(r, "a"), 0);
    ck_assert_int_eq(kio_ra_close(r), KIO_ERR);
    ck_assert_int_eq(cap.warnings, 1);
    ck_assert_int_eq(cap.errors, 1);
    /* a pipe that writes garbage then fails: read error at close */
    snprintf(spec, sizeof spec, "%shead -c 300 %s; exit 3 |", opts[o], ALI_ARK);
    cap_start();
    ck_assert_int_eq(ra_open(&r, spec, o == 3), KIO_OK);
    ck_assert_int_eq(kio_ra_has_key(r, a.keys[39]), 0);
    ck_assert_int_eq(kio_ra_close(r), KIO_ERR);
    ck_assert_int_eq(cap.errors, 1);
  }
  kio_log_set_handler(NULL, NULL);
  free_set(&a);
}
END_TEST

int main(void) {
  Suite *s = suite_create("table_ra");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, sorted_requests);
  tcase_add_test(tc, skipped_and_absent_keys);
  tcase_add_test(tc, out_of_order_requests);
  tcase_add_test(tc, truncated_archive);
  tcase_add_test(tc, failing_pipes);
  suite_add_tcase(s, tc);
  return tu_run_suite(s);
}
