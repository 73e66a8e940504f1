/* Logging (reference 1.12): Kaldi's line format, levels, handler, counters,
 * per-thread error detail, C++-style %g formatting. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/sys/log.h"
#include "tests/lib/test-util.h"

/* stderr captured to a temp file (tests/lib/test-util.c). */
#define capture_start tu_stderr_start
#define capture_end tu_stderr_end

START_TEST(default_format) {
  kio_log_set_program("/some/dir/gmm-align-compiled");
  ck_assert_str_eq(kio_log_program(), "gmm-align-compiled");
  capture_start();
  int line = __LINE__ + 1;
  KIO_LOG("Overall log-likelihood per frame is %g over %d frames.", -96.1235, 123456);
  KIO_WARN("Did not successfully decode file %s, len = %d", "utt7", 412);
  kio_logf(KIO_LOG_INFO, "main", "gmm-align-compiled.cc", 135, "Done %d", 3);
  kio_logf(KIO_LOG_INFO, "EqualAlign", "fstext/fstext-utils-inl.h", 930, "x");
  kio_logf(KIO_LOG_INFO, "f", "/a/b/c/d.cc", 1, "y");
  char *s = capture_end();
  char want[1024];
  snprintf(want, sizeof want,
           "LOG (gmm-align-compiled[" KIO_VERSION "]:default_format_fn():unit/check_log.c:%d) "
           "Overall log-likelihood per frame is -96.1235 over 123456 frames.\n"
           "WARNING (gmm-align-compiled[" KIO_VERSION "]:default_format_fn():unit/check_log.c:%d) "
           "Did not successfully decode file utt7, len = 412\n"
           "LOG (gmm-align-compiled[" KIO_VERSION "]:main():gmm-align-compiled.cc:135) Done 3\n"
           "LOG (gmm-align-compiled[" KIO_VERSION "]:EqualAlign():fstext/fstext-utils-inl.h:930) x\n"
           "LOG (gmm-align-compiled[" KIO_VERSION "]:f():c/d.cc:1) y\n",
           line, line + 1);
  ck_assert_str_eq(s, want);
  free(s);
}
END_TEST

START_TEST(levels_and_counters) {
  kio_log_set_program("prog");
  int w0 = kio_log_num_warnings(), e0 = kio_log_num_errors();
  capture_start();
  kio_log_set_verbose(1);
  KIO_VLOG(1, "v1");
  KIO_VLOG(2, "v2 hidden");
  kio_log_set_verbose(2);
  KIO_VLOG(2, "v2 shown");
  KIO_ERROR("bad %s", "thing");
  kio_logf(KIO_LOG_ASSERT, "f", "a/b.c", 7, "Assertion failed: (x)");
  KIO_WARN("w");
  char *s = capture_end();
  ck_assert_ptr_nonnull(strstr(s, "VLOG[1] (prog[" KIO_VERSION "]:"));
  ck_assert_ptr_null(strstr(s, "v2 hidden"));
  ck_assert_ptr_nonnull(strstr(s, "VLOG[2] (prog["));
  ck_assert_ptr_nonnull(strstr(s, ") bad thing\n\n[ Stack-Trace: ]\n"));
  ck_assert_ptr_nonnull(strstr(s, "ASSERTION_FAILED (prog[" KIO_VERSION "]:f():a/b.c:7) "
                                  "Assertion failed: (x)\n\n"));
  ck_assert_int_eq(kio_log_num_warnings(), w0 + 1);
  ck_assert_int_eq(kio_log_num_errors(), e0 + 2);
  kio_log_set_verbose(0);
  free(s);
}
END_TEST

typedef struct { int n; int level; char file[64]; char msg[256]; } cap_t;
static void handler(int level, const char *func, const char *file, int line,
                    const char *msg, void *user) {
  (void)func; (void)line;
  cap_t *c = user;
  c->n++;
  c->level = level;
  snprintf(c->file, sizeof c->file, "%s", file);
  snprintf(c->msg, sizeof c->msg, "%s", msg);
}

START_TEST(custom_handler_and_long_message) {
  cap_t c = {0};
  kio_log_set_handler(handler, &c);
  KIO_WARN("x=%d", 5);
  ck_assert_int_eq(c.n, 1);
  ck_assert_int_eq(c.level, KIO_LOG_WARNING);
  ck_assert_str_eq(c.file, "unit/check_log.c");
  ck_assert_str_eq(c.msg, "x=5");
  char big[5000];
  memset(big, 'a', sizeof big - 1);
  big[sizeof big - 1] = 0;
  KIO_LOG("%s", big);
  ck_assert_int_eq((int)strlen(c.msg), 255);
  kio_log_set_handler(NULL, NULL);
}
END_TEST

static void *thread_fn(void *arg) {
  (void)arg;
  kio_set_error("in thread %d", 2);
  return strcmp(kio_last_error(), "in thread 2") == 0 ? (void *)1 : NULL;
}

START_TEST(error_detail_thread_local) {
  kio_clear_error();
  ck_assert_str_eq(kio_last_error(), "");
  kio_set_error("main %s", "detail");
  pthread_t t;
  void *ok;
  pthread_create(&t, NULL, thread_fn, NULL);
  pthread_join(t, &ok);
  ck_assert_ptr_nonnull(ok);
  ck_assert_str_eq(kio_last_error(), "main detail");
  /* formatting from its own previous value is safe */
  kio_set_error("%s; more", kio_last_error());
  ck_assert_str_eq(kio_last_error(), "main detail; more");
}
END_TEST

START_TEST(fmt_g_like_ostream) {
  char b[32];
  ck_assert_str_eq(kio_fmt_g(b, 0.1), "0.1");
  ck_assert_str_eq(kio_fmt_g(b, -96.12345678), "-96.1235");
  ck_assert_str_eq(kio_fmt_g(b, 123456), "123456");
  ck_assert_str_eq(kio_fmt_g(b, 1234567), "1.23457e+06");
  ck_assert_str_eq(kio_fmt_g(b, 1e-7), "1e-07");
  ck_assert_str_eq(kio_fmt_g(b, 0), "0");
  ck_assert_str_eq(kio_fmt_g(b, 10.0f), "10");
  ck_assert_str_eq(kio_fmt_g(b, 1.0 / 0.0), "inf");
  ck_assert_str_eq(kio_fmt_g(b, -1.0 / 0.0), "-inf");
  ck_assert_str_eq(kio_fmt_g(b, __builtin_nan("")), "nan");
  ck_assert_str_eq(kio_fmt_g(b, -__builtin_nan("")), "-nan");
}
END_TEST

static void *spam(void *arg) {
  for (int i = 0; i < 200; i++) KIO_LOG("thread %ld line %d %s", (long)(intptr_t)arg, i,
                                        "abcdefghijklmnopqrstuvwxyz0123456789");
  return NULL;
}

/* Lines from concurrent threads never interleave. */
START_TEST(concurrent_lines_intact) {
  kio_log_set_program("p");
  capture_start();
  pthread_t t[4];
  for (long i = 0; i < 4; i++) pthread_create(&t[i], NULL, spam, (void *)(intptr_t)i);
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  char *s = capture_end();
  int lines = 0;
  for (char *l = strtok(s, "\n"); l; l = strtok(NULL, "\n"), lines++) {
    ck_assert_msg(strncmp(l, "LOG (p[", 7) == 0, "bad line: %s", l);
    size_t n = strlen(l);
    ck_assert(n > 36 && !strcmp(l + n - 36, "abcdefghijklmnopqrstuvwxyz0123456789"));
  }
  ck_assert_int_eq(lines, 800);
  free(s);
}
END_TEST

int main(void) {
  Suite *s = suite_create("log");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, default_format);
  tcase_add_test(tc, levels_and_counters);
  tcase_add_test(tc, custom_handler_and_long_message);
  tcase_add_test(tc, error_detail_thread_local);
  tcase_add_test(tc, fmt_g_like_ostream);
  tcase_add_test(tc, concurrent_lines_intact);
  suite_add_tcase(s, tc);
  return tu_run_suite(s);
}
