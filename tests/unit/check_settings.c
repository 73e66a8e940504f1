/* The settings table (base/sys/settings.h): earlier names, parsing and its
 * warnings, overrides, test hooks. Each test runs in a forked child, so the
 * table is read fresh from the environment each test sets first. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/sys/log.h"
#include "base/sys/settings.h"
#include "tests/lib/test-util.h"

START_TEST(unset_gives_defaults) {
  unsetenv("KALDI_GPU_FEATS_THREADS");
  unsetenv("KIO_FEATS_THREADS");
  tu_logcap_start();
  ck_assert_ptr_null(kio_setting_str(KIO_SET_FEATS_THREADS));
  ck_assert_int_eq(kio_setting_int(KIO_SET_FEATS_THREADS, 7, 1, 64), 7);
  ck_assert_int_eq(kio_setting_flag(KIO_SET_FEATS_PIPE, 1), 1);
  ck_assert_int_eq(tu_cap.warnings, 0);
}
END_TEST

START_TEST(earlier_name_warns_once) {
  unsetenv("KALDI_GPU_FEATS_THREADS");
  setenv("KIO_FEATS_THREADS", "3", 1);
  tu_logcap_start();
  ck_assert_int_eq(kio_setting_int(KIO_SET_FEATS_THREADS, 7, 1, 64), 3);
  ck_assert_int_eq(kio_setting_int(KIO_SET_FEATS_THREADS, 7, 1, 64), 3);
  ck_assert_int_eq(tu_cap.warnings, 1);
  ck_assert(strstr(tu_cap.last, "KALDI_GPU_FEATS_THREADS") != NULL);
}
END_TEST

START_TEST(new_name_wins) {
  setenv("KALDI_GPU_FEATS_THREADS", "5", 1);
  setenv("KIO_FEATS_THREADS", "3", 1);
  tu_logcap_start();
  ck_assert_int_eq(kio_setting_int(KIO_SET_FEATS_THREADS, 7, 1, 64), 5);
  ck_assert_int_eq(tu_cap.warnings, 0);
}
END_TEST

START_TEST(invalid_values_warn_and_default) {
  setenv("KALDI_GPU_FEATS_THREADS", "many", 1);
  setenv("KALDI_GPU_FEATS_PIPE", "perhaps", 1);
  setenv("KALDI_GPU_DEV_LIKELIHOODS", "fast", 1);
  setenv("KALDI_GPU_SERVICE_IDLE", "0", 1);
  tu_logcap_start();
  ck_assert_int_eq(kio_setting_int(KIO_SET_FEATS_THREADS, 7, 1, 64), 7);
  ck_assert(strstr(tu_cap.last, "KALDI_GPU_FEATS_THREADS=many") != NULL);
  ck_assert_int_eq(kio_setting_flag(KIO_SET_FEATS_PIPE, 1), 1);
  static const char *const kernels[] = {"exact", "gemm", NULL};
  ck_assert_int_eq(kio_setting_choice(KIO_SET_DEV_LIKELIHOODS, kernels, 0), 0);
  ck_assert(strstr(tu_cap.last, "one of exact, gemm") != NULL);
  ck_assert_int_eq(kio_setting_int(KIO_SET_SERVICE_IDLE, 60, 1, 1 << 30), 60);
  ck_assert_int_eq(tu_cap.warnings, 4);
  /* once per setting */
  ck_assert_int_eq(kio_setting_int(KIO_SET_FEATS_THREADS, 7, 1, 64), 7);
  ck_assert_int_eq(tu_cap.warnings, 4);
}
END_TEST

START_TEST(flags_and_choices) {
  setenv("KALDI_GPU_FEATS_PIPE", "No", 1);
  setenv("KALDI_GPU_FEATS_GPU", "on", 1);
  setenv("KALDI_GPU_DEV_LIKELIHOODS", "GEMM", 1);
  ck_assert_int_eq(kio_setting_flag(KIO_SET_FEATS_PIPE, 1), 0);
  ck_assert_int_eq(kio_setting_flag(KIO_SET_FEATS_GPU, 0), 1);
  static const char *const kernels[] = {"exact", "gemm", NULL};
  ck_assert_int_eq(kio_setting_choice(KIO_SET_DEV_LIKELIHOODS, kernels, 0), 1);
}
END_TEST

START_TEST(read_once_and_override) {
  setenv("KALDI_GPU_SERVICE", "yes", 1);
  ck_assert_str_eq(kio_setting_str(KIO_SET_SERVICE), "yes");
  setenv("KALDI_GPU_SERVICE", "no", 1);  /* too late: the table was read */
  ck_assert_str_eq(kio_setting_str(KIO_SET_SERVICE), "yes");
  kio_setting_override(KIO_SET_SERVICE, "no");
  ck_assert_str_eq(kio_setting_str(KIO_SET_SERVICE), "no");
  kio_setting_override(KIO_SET_SERVICE, NULL);
  ck_assert_ptr_null(kio_setting_str(KIO_SET_SERVICE));
  /* the value is ours: the caller's buffer may change or go away */
  char buf[64];
  snprintf(buf, sizeof buf, "%s", "/some/lib/libcublas.so.13");
  kio_setting_override(KIO_SET_CUBLAS, buf);
  snprintf(buf, sizeof buf, "%s", "ark:gunzip -c x.gz|");
  ck_assert_str_eq(kio_setting_str(KIO_SET_CUBLAS), "/some/lib/libcublas.so.13");
  kio_setting_override(KIO_SET_CUBLAS, NULL);
}
END_TEST

/* Test hooks never come through kio_setting_str; this suite links the test
 * builds' kio_test_hook, which reads them (the shipped one is checked by
 * tests/cli/settings-doc.sh through a shipped program). */
START_TEST(test_hooks) {
  setenv("KALDI_GPU_TEST_SERVICE_CPU", "2", 1);
  ck_assert_ptr_null(kio_setting_str(KIO_SET_TEST_SERVICE_CPU));
  ck_assert_str_eq(kio_test_hook(KIO_SET_TEST_SERVICE_CPU), "2");
  setenv("KALDI_GPU_FEATS_THREADS", "4", 1);
  ck_assert_ptr_null(kio_test_hook(KIO_SET_FEATS_THREADS));
}
END_TEST

START_TEST(every_row_is_well_formed) {
  for (int i = 0; i < KIO_SET_COUNT; i++) {
    const kio_setting_info *s = kio_setting_describe((kio_setting)i);
    ck_assert(s && s->name && s->help && *s->help);
    const char *want = s->audience == KIO_SET_FOR_USER ? "KALDI_GPU_"
                       : s->audience == KIO_SET_FOR_DEV ? "KALDI_GPU_DEV_"
                       : s->audience == KIO_SET_FOR_TEST ? "KALDI_GPU_TEST_" : "";
    ck_assert_msg(!strncmp(s->name, want, strlen(want)), "%s lacks the prefix %s", s->name, want);
    for (int j = 0; j < i; j++) ck_assert_str_ne(kio_setting_describe((kio_setting)j)->name, s->name);
  }
  ck_assert_ptr_null(kio_setting_describe(KIO_SET_COUNT));
}
END_TEST

int main(void) {
  Suite *s = suite_create("settings");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, unset_gives_defaults);
  tcase_add_test(tc, earlier_name_warns_once);
  tcase_add_test(tc, new_name_wins);
  tcase_add_test(tc, invalid_values_warn_and_default);
  tcase_add_test(tc, flags_and_choices);
  tcase_add_test(tc, read_once_and_override);
  tcase_add_test(tc, test_hooks);
  tcase_add_test(tc, every_row_is_well_formed);
  suite_add_tcase(s, tc);
  return tu_run_suite(s);
}
