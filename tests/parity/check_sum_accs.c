/* gmm-sum-accs in process (train/sum-accs.h) against Kaldi's gmm-sum-accs
 * output (kaldi/mono/sum.acc: final.acc, final.txt.acc, final.acc) with 1
 * to 8 threads and many files (the threads' turns and shared additions);
 * the first failing file in argument order is the one reported, whatever
 * the thread that met it; the shell-glob recogniser of gmm-est's pipe. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/sys/log.h"
#include "gpu-acc/gpu-acc.h"
#include "train/sum-accs.h"
#include "tests/lib/test-util.h"

static const char *const kFix[] = {"kaldi/mono/final.acc", "kaldi/mono/final.txt.acc",
                                   "kaldi/mono/final.acc"};

START_TEST(sum_matches_kaldi_any_threads) {
  for (int threads = 1; threads <= 8; threads++) {
    gacc_stats s;
    ck_assert_int_eq(trn_sum_accs(kFix, 3, threads, NULL, &s), KIO_OK);
    const char *out = tu_tmp_path("sum.acc");
    ck_assert_int_eq(gacc_stats_write(out, 1, &s), KIO_OK);
    ck_assert_msg(tu_files_equal(out, "kaldi/mono/sum.acc"), "%d threads: differs", threads);
    gacc_stats_free(&s);
  }
}
END_TEST

/* 24 files, the three fixtures in turn: any thread count gives the bytes of
 * one thread (every element's additions in argument order). */
START_TEST(many_files_same_bits) {
  const char *rx[24];
  for (int i = 0; i < 24; i++) rx[i] = kFix[i % 3];
  const char *ref = tu_tmp_path("ref.acc");
  gacc_stats s;
  ck_assert_int_eq(trn_sum_accs(rx, 24, 1, NULL, &s), KIO_OK);
  ck_assert_int_eq(gacc_stats_write(ref, 1, &s), KIO_OK);
  gacc_stats_free(&s);
  for (int threads = 2; threads <= 8; threads += 3) {
    ck_assert_int_eq(trn_sum_accs(rx, 24, threads, NULL, &s), KIO_OK);
    const char *out = tu_tmp_path("many.acc");
    ck_assert_int_eq(gacc_stats_write(out, 1, &s), KIO_OK);
    ck_assert_msg(tu_files_equal(out, ref), "%d threads: differs from one thread", threads);
    gacc_stats_free(&s);
  }
}
END_TEST

/* Files 3 (missing) and 5 (another model) fail: only file 3's ERROR. */
START_TEST(first_failure_in_order) {
  const char *rx[8] = {kFix[0], kFix[1], kFix[2], "kaldi/mono/no-such.acc", kFix[0],
                       "kaldi/tri2/final.acc", kFix[0], kFix[0]};
  for (int threads = 1; threads <= 8; threads *= 2) {
    tu_logcap_start();
    gacc_stats s;
    ck_assert_int_eq(trn_sum_accs(rx, 8, threads, NULL, &s), KIO_ERR);
    ck_assert_int_eq(tu_cap.errors, 1);
    ck_assert_msg(strstr(tu_cap.last_error, "no-such.acc") != NULL, "%d threads: %s", threads,
                  tu_cap.last_error);
  }
  /* the other model's file alone after good ones */
  const char *rx2[3] = {kFix[0], "kaldi/tri2/final.acc", "kaldi/mono/no-such.acc"};
  tu_logcap_start();
  gacc_stats s;
  ck_assert_int_eq(trn_sum_accs(rx2, 3, 3, NULL, &s), KIO_ERR);
  ck_assert_int_eq(tu_cap.errors, 1);
  ck_assert_ptr_nonnull(strstr(tu_cap.last_error, "tri2/final.acc"));
}
END_TEST

START_TEST(pipe_recognised) {
  char **f;
  int n;
  ck_assert_int_eq(trn_sum_accs_pipe("gmm-sum-accs - kaldi/mono/final.acc kaldi/mono4/final.acc|",
                                     &f, &n), 1);
  ck_assert_int_eq(n, 2);
  ck_assert_str_eq(f[1], "kaldi/mono4/final.acc");
  trn_sum_accs_free_files(f, n);
  /* a glob: the matches in byte order; no match: the word itself */
  ck_assert_int_eq(trn_sum_accs_pipe("gmm-sum-accs  -  kaldi/mono*/final.acc kaldi/x*.acc |",
                                     &f, &n), 1);
  ck_assert_int_eq(n, 4);
  ck_assert_str_eq(f[0], "kaldi/mono/final.acc");
  ck_assert_str_eq(f[1], "kaldi/mono4/final.acc");
  ck_assert_str_eq(f[2], "kaldi/mono8/final.acc");
  ck_assert_str_eq(f[3], "kaldi/x*.acc");
  trn_sum_accs_free_files(f, n);
  /* anything else runs as a pipe */
  const char *other[] = {
      "gmm-sum-accs - a.acc", "gmm-sum-accs a.acc b.acc |", "gmm-sum-accs - |",
      "gmm-sum-accs --binary=false - a.acc |", "gmm-sum-accs - 'a b.acc' |",
      "gmm-sum-accs - $dir/a.acc |", "gmm-sum-accs - a.acc > x |", "gmm-sum-accs - - |",
      "/bin/gmm-sum-accs - a.acc |", "gmm-sum-accs - a.acc | gzip |", "gmm-sum-accs - ~/a.acc |",
      "gmm-sum-accs - a.acc; rm b |", "gmm-sum-accs - a\\ b.acc |"};
  for (size_t i = 0; i < sizeof other / sizeof other[0]; i++)
    ck_assert_msg(trn_sum_accs_pipe(other[i], &f, &n) == 0, "recognised: %s", other[i]);
}
END_TEST

Suite *sum_accs_suite(void) {
  Suite *s = suite_create("sum_accs");
  TCase *t = tcase_create("kaldi");
  tcase_set_timeout(t, 120);
  tcase_add_test(t, sum_matches_kaldi_any_threads);
  tcase_add_test(t, many_files_same_bits);
  tcase_add_test(t, first_failure_in_order);
  tcase_add_test(t, pipe_recognised);
  suite_add_tcase(s, t);
  return s;
}

int main(void) {
  /* byte order is then the shell's glob order whatever /bin/sh is */
  setenv("LC_ALL", "C", 1);
  return tu_run_suite(sum_accs_suite());
}
