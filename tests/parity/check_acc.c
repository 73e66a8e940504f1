/* Statistics accumulation (reference section 4) on the CPU against Kaldi's
 * own gmm-acc-stats-ali outputs: mono and tri2 stats, the text form, the
 * noisy set with a missing alignment, the overall likelihood of acc.log;
 * the expf clone against glibc; bad input. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/sys/settings.h"
#include "base/sys/log.h"
#include "base/matrix/matrix.h"
#include "base/model/model.h"
#include "base/io/table.h"
#include "gpu-acc/gpu-acc.h"
#include "tests/lib/test-util.h"

/* ---- captured log lines ---- */
static char g_log[8192];
static void capture(int level, const char *func, const char *file, int line,
                    const char *msg, void *user) {
  (void)file; (void)line; (void)user;
  size_t n = strlen(g_log);
  snprintf(g_log + n, sizeof g_log - n, "%d|%s|%s\n", level, func, msg);
}
static void capture_start(void) {
  g_log[0] = 0;
  kio_log_set_handler(capture, NULL);
}

#include "tests/lib/acc-run.h"

/* "Overall avg like per frame (Gaussian only) = X over T frames." of a log. */
static void check_overall(const char *logfile, const run_info *ri) {
  size_t len;
  char *text = (char *)tu_read_file(logfile, &len);
  ck_assert_ptr_nonnull(text);
  const char *p = strstr(text, "(Gaussian only) = ");
  ck_assert_ptr_nonnull(p);
  char want[64], got[96], buf[32];
  sscanf(p + strlen("(Gaussian only) = "), "%63s", want);
  snprintf(got, sizeof got, "%s", kio_fmt_g(buf, ri->tot_like / (double)ri->tot_t));
  ck_assert_str_eq(got, want);
  char frames[64];
  snprintf(frames, sizeof frames, " over %lld frames.", (long long)ri->tot_t);
  ck_assert_ptr_nonnull(strstr(p, frames));
  free(text);
}

/* Our stats, written as the program writes them, against Kaldi's file. */
static void compare_with_kaldi(const gacc_stats *ours, int binary, const char *kaldi_file,
                               const char *tmpname) {
  const char *path = tu_tmp_path(tmpname);
  ck_assert_int_eq(gacc_stats_write(path, binary, ours), KIO_OK);
  gacc_stats mine, ref;
  int fm, fr;
  ck_assert_int_eq(gacc_stats_read(path, &mine, &fm), KIO_OK);
  ck_assert_int_eq(gacc_stats_read(kaldi_file, &ref, &fr), KIO_OK);
  ck_assert_int_eq(fm, 1);
  ck_assert_int_eq(fr, 1);
  gacc_cmp c;
  gacc_stats_compare(&mine, &ref, 1e-6, 1, &c);
  ck_assert_msg(c.same_layout, "layout differs from %s", kaldi_file);
  ck_assert_msg(c.num_tacc_diff == 0, "%lld transition counts differ",
                (long long)c.num_tacc_diff);
  ck_assert_msg(c.num_over == 0, "%zu of %zu values differ by > 1e-6 (max %g)",
                c.num_over, c.num_values, c.max_rel);
  ck_assert_msg(c.like_rel <= 1e-6, "total_like differs: %.17g vs %.17g",
                mine.total_like, ref.total_like);
  ck_assert(c.frames_equal);
  printf("%s: %zu values, max rel diff %g; bytes %s\n", kaldi_file, c.num_values,
         c.max_rel, tu_files_equal(path, kaldi_file) ? "identical" : "differ");
  gacc_stats_free(&mine);
  gacc_stats_free(&ref);
}

START_TEST(mono_matches_kaldi) {
  gacc_stats s;
  run_info ri;
  ck_assert_int_eq(run_acc("cpu", "models/mono/final.mdl", "ark:feats/delta.ark",
                           "ark:kaldi/mono/ali.ark", 1, &s, &ri), KIO_OK);
  ck_assert_int_eq(ri.done, 40);
  ck_assert_int_eq(ri.err, 0);
  ck_assert(s.total_frames == 14158.0);
  compare_with_kaldi(&s, 1, "kaldi/mono/final.acc", "mono.acc");
  check_overall("kaldi/mono/acc.log", &ri);
  gacc_stats_free(&s);
}
END_TEST

START_TEST(mono_text_matches_kaldi) {
  gacc_stats s;
  run_info ri;
  ck_assert_int_eq(run_acc("cpu", "models/mono/final.mdl", "ark:feats/delta.ark",
                           "ark:kaldi/mono/ali.ark", 5, &s, &ri), KIO_OK);
  compare_with_kaldi(&s, 0, "kaldi/mono/final.txt.acc", "mono.txt.acc");
  /* token by token: words equal, numbers within 1e-6 relative */
  const char *path = tu_tmp_path("mono.txt.acc");
  size_t la, lb;
  char *a = (char *)tu_read_file(path, &la), *b = (char *)tu_read_file("kaldi/mono/final.txt.acc", &lb);
  ck_assert_ptr_nonnull(a);
  ck_assert_ptr_nonnull(b);
  char *sa, *sb;
  char *ta = strtok_r(a, " \n", &sa), *tb = strtok_r(b, " \n", &sb);
  size_t ntok = 0, nsame = 0;
  while (ta && tb) {
    char *ea, *eb;
    double va = strtod(ta, &ea), vb = strtod(tb, &eb);
    if (*ea == 0 && *eb == 0 && ea != ta && eb != tb) {
      double m = fabs(va) > fabs(vb) ? fabs(va) : fabs(vb);
      ck_assert_msg(va == vb || fabs(va - vb) <= 1e-6 * m, "token %zu: %s vs %s", ntok, ta, tb);
    } else {
      ck_assert_msg(!strcmp(ta, tb), "token %zu: %s vs %s", ntok, ta, tb);
    }
    nsame += !strcmp(ta, tb);
    ntok++;
    ta = strtok_r(NULL, " \n", &sa);
    tb = strtok_r(NULL, " \n", &sb);
  }
  ck_assert_msg(ta == NULL && tb == NULL, "different number of tokens (%zu compared)", ntok);
  printf("text: %zu tokens, %zu spelled identically\n", ntok, nsame);
  free(a);
  free(b);
  gacc_stats_free(&s);
}
END_TEST

START_TEST(tri2_matches_kaldi) {
  gacc_stats s;
  run_info ri;
  ck_assert_int_eq(run_acc("cpu", "models/tri2/final.mdl", "ark:feats/lda.ark",
                           "ark:kaldi/tri2/ali.ark", 3, &s, &ri), KIO_OK);
  ck_assert_int_eq(ri.done, 40);
  compare_with_kaldi(&s, 1, "kaldi/tri2/final.acc", "tri2.acc");
  check_overall("kaldi/tri2/acc.log", &ri);
  gacc_stats_free(&s);
}
END_TEST

START_TEST(noisy_matches_kaldi) {
  gacc_stats s;
  run_info ri;
  ck_assert_int_eq(run_acc("cpu", "models/mono/final.mdl", "ark:noisy/delta.ark",
                           "ark:noisy/mono.ali.ark", 8, &s, &ri), KIO_OK);
  ck_assert_int_eq(ri.done, 39);
  ck_assert_int_eq(ri.err, 1);
  compare_with_kaldi(&s, 1, "noisy/mono.acc", "noisy.acc");
  check_overall("noisy/mono.acc.log", &ri);
  gacc_stats_free(&s);
}
END_TEST

/* The softmax exp: glibc's expf algorithm. Over a wide sample of inputs
 * <= 0 (all the softmax sees) it must equal the C library's expf; the one
 * known near-halfway case where glibc 2.36 rounds the other way is listed. */
START_TEST(expf_matches_libc) {
#ifndef __GLIBC__
  printf("SKIP: not glibc\n");
  return;
#else
  size_t n = 0, bad = 0;
  for (uint64_t u = 0x80000000u; u <= 0xffffffffu; u += 97) {
    uint32_t b = (uint32_t)u;
    float x;
    memcpy(&x, &b, 4);
    if (isnan(x)) continue;
    float ours = gacc_expf_ref(x), theirs = expf(x);
    n++;
    if (memcmp(&ours, &theirs, 4) != 0 && x != -0x1.f8cbb2p+5f) {
      if (bad < 5) printf("expf(%a): ours %a, libc %a\n", x, ours, theirs);
      bad++;
    }
  }
  /* a dense stretch around the typical range of (L - max) */
  for (float x = -30.0f; x <= 0.0f; x = nextafterf(x, 1.0f)) {
    float ours = gacc_expf_ref(x), theirs = expf(x);
    n++;
    if (memcmp(&ours, &theirs, 4) != 0) bad++;
    if (x > -29.0f) break;  /* ~ 2^20 values are enough */
  }
  printf("expf: %zu inputs, %zu differ\n", n, bad);
  ck_assert_uint_eq(bad, 0);
  ck_assert(gacc_expf_ref(-INFINITY) == 0.0f);
  ck_assert(gacc_expf_ref(0.0f) == 1.0f);
  ck_assert(isnan(gacc_expf_ref(NAN)));
  ck_assert(gacc_expf_ref(-200.0f) == 0.0f);
#endif
}
END_TEST

/* A tiny hand-made model: 2 pdfs, dim 3, transition-ids 1..2 -> pdf 0, 1. */
typedef struct { kio_tmodel tm; kio_am_gmm am; } toy;
static void toy_init(toy *t) {
  memset(t, 0, sizeof *t);
  t->tm.num_tids = 2;
  t->tm.tid2pdf = calloc(3, sizeof(int32_t));
  t->tm.tid2pdf[1] = 0;
  t->tm.tid2pdf[2] = 1;
  t->tm.num_pdfs = 2;
  t->am.dim = 3;
  t->am.num_pdfs = 2;
  t->am.pdfs = calloc(2, sizeof(kio_diag_gmm));
  for (int j = 0; j < 2; j++) {
    kio_diag_gmm *g = &t->am.pdfs[j];
    g->num_comp = j + 1;
    g->dim = 3;
    g->weights = calloc((size_t)g->num_comp, sizeof(float));
    g->gconsts = calloc((size_t)g->num_comp, sizeof(float));
    g->means_invvars = calloc((size_t)g->num_comp * 3, sizeof(float));
    g->inv_vars = calloc((size_t)g->num_comp * 3, sizeof(float));
    for (int m = 0; m < g->num_comp; m++) {
      g->weights[m] = 1.0f / (float)g->num_comp;
      for (int d = 0; d < 3; d++) {
        g->means_invvars[m * 3 + d] = 0.5f * (float)(m + d);
        g->inv_vars[m * 3 + d] = 1.0f + 0.25f * (float)m;
      }
    }
    kio_diag_gmm_compute_gconsts(g);
  }
}
static void toy_free(toy *t) {
  free(t->tm.tid2pdf);
  for (int j = 0; j < 2; j++) {
    kio_diag_gmm *g = &t->am.pdfs[j];
    free(g->weights); free(g->gconsts); free(g->means_invvars); free(g->inv_vars);
  }
  free(t->am.pdfs);
}

START_TEST(bad_tid_is_error) {
  toy t;
  toy_init(&t);
  gacc_acc *acc;
  ck_assert_int_eq(gacc_new(&acc, "cpu", &t.tm, &t.am), KIO_OK);
  kio_matrix f = { 0, 0, NULL, 0 };
  kio_matrix_resize(&f, 2, 3);
  int32_t ali[2] = { 1, 3 };
  gacc_utt u = { "uttX", &f, ali };
  gacc_utt_result r;
  capture_start();
  ck_assert_int_eq(gacc_accumulate_batch(acc, 1, &u, &r), KIO_ERR);
  kio_log_set_handler(NULL, NULL);
  ck_assert_msg(strstr(g_log, "-2|") == g_log && strstr(g_log, "uttX") &&
                strstr(g_log, "Transition-id 3"), "log: %s", g_log);
  ali[1] = -1;
  capture_start();
  ck_assert_int_eq(gacc_accumulate_batch(acc, 1, &u, &r), KIO_ERR);
  kio_log_set_handler(NULL, NULL);
  ck_assert_ptr_nonnull(strstr(g_log, "uttX"));
  /* wrong feature dimension */
  kio_matrix_resize(&f, 2, 4);
  ali[1] = 2;
  capture_start();
  ck_assert_int_eq(gacc_accumulate_batch(acc, 1, &u, &r), KIO_ERR);
  kio_log_set_handler(NULL, NULL);
  ck_assert_msg(strstr(g_log, "uttX") && strstr(g_log, "dimension"), "log: %s", g_log);
  kio_matrix_free(&f);
  gacc_free(acc);
  capture_start();
  ck_assert_int_eq(gacc_new(&acc, "tpu", &t.tm, &t.am), KIO_ERR);
  kio_log_set_handler(NULL, NULL);
  ck_assert_ptr_nonnull(strstr(g_log, "tpu"));
  toy_free(&t);
}
END_TEST

/* tid 0 is accepted as Kaldi does: counted in tacc[0], accumulated for pdf 0. */
START_TEST(tid_zero_counts_pdf0) {
  toy t;
  toy_init(&t);
  gacc_acc *acc;
  ck_assert_int_eq(gacc_new(&acc, "cpu", &t.tm, &t.am), KIO_OK);
  kio_matrix f = { 0, 0, NULL, 0 };
  kio_matrix_resize(&f, 3, 3);
  for (int i = 0; i < 9; i++) f.data[i] = 0.1f * (float)i;
  int32_t ali[3] = { 0, 2, 0 };
  gacc_utt u = { "u", &f, ali };
  gacc_utt_result r;
  ck_assert_int_eq(gacc_accumulate_batch(acc, 1, &u, &r), KIO_OK);
  ck_assert_int_eq(r.frames, 3);
  gacc_stats s;
  memset(&s, 0, sizeof s);
  ck_assert_int_eq(gacc_get_stats(acc, &s), KIO_OK);
  ck_assert(s.tacc[0] == 2.0 && s.tacc[1] == 0.0 && s.tacc[2] == 1.0);
  ck_assert(s.occ[0] == 2.0);                 /* pdf 0 has one component */
  ck_assert(fabs(s.occ[1] + s.occ[2] - 1.0) < 1e-6);
  ck_assert(s.mean_acc[0] == (double)0.0f + (double)0.6f);
  ck_assert(s.total_frames == 3.0);
  /* per-frame likelihoods add up to the utterance's float sum */
  float ll[2], x2[3], like = 0.0f;
  for (int k = 0; k < 3; k++) {
    const float *x = f.data + 3 * k;
    for (int d = 0; d < 3; d++) x2[d] = x[d] * x[d];
    like += gacc_frame_posteriors(&t.am.pdfs[t.tm.tid2pdf[ali[k]]], x, x2, ll);
  }
  ck_assert(like == r.like);
  ck_assert(fabs(s.total_like - (double)r.like) < 1e-4);
  gacc_stats_free(&s);
  kio_matrix_free(&f);
  gacc_free(acc);
  toy_free(&t);
}
END_TEST

/* The asynchronous entry on the CPU backend is the synchronous one: the
 * same statistics bit for bit and the same likelihood totals, whatever the
 * batch size, with the caller's buffers overwritten after each call. */
START_TEST(async_cpu_equals_sync) {
  static const struct { const char *mdl, *feats, *alis; int batch; } cases[] = {
    { "models/mono/final.mdl", "ark:feats/delta.ark", "ark:kaldi/mono/ali.ark", 1 },
    { "models/mono/final.mdl", "ark:noisy/delta.ark", "ark:noisy/mono.ali.ark", 7 },
    { "models/tri2/final.mdl", "ark:feats/lda.ark", "ark:kaldi/tri2/ali.ark", 64 },
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    gacc_stats sy, as;
    run_info rs, ra;
    ck_assert_int_eq(run_acc_mode("cpu", cases[k].mdl, cases[k].feats, cases[k].alis,
                                  cases[k].batch, 0, &sy, &rs), KIO_OK);
    ck_assert_int_eq(run_acc_mode("cpu", cases[k].mdl, cases[k].feats, cases[k].alis,
                                  cases[k].batch, 1, &as, &ra), KIO_OK);
    ck_assert_int_eq(rs.done, ra.done);
    ck_assert(rs.done > 0);
    ck_assert_msg(rs.tot_like == ra.tot_like, "like: sync %.17g async %.17g", rs.tot_like,
                  ra.tot_like);
    ck_assert(rs.tot_t == ra.tot_t);
    ck_assert_msg(stats_identical(&sy, &as), "%s: stats differ", cases[k].feats);
    gacc_stats_free(&sy);
    gacc_stats_free(&as);
  }
}
END_TEST

/* Asynchronous entry, bad input: one ERROR naming the utterance, KIO_ERR;
 * the accumulator stays usable and the totals hold what was accepted. */
START_TEST(async_bad_tid_is_error) {
  toy t;
  toy_init(&t);
  gacc_acc *acc;
  ck_assert_int_eq(gacc_new(&acc, "cpu", &t.tm, &t.am), KIO_OK);
  kio_matrix f = { 0, 0, NULL, 0 };
  kio_matrix_resize(&f, 2, 3);
  for (int i = 0; i < 6; i++) f.data[i] = 0.25f * (float)i;
  int32_t ali[2] = { 1, 3 };
  gacc_utt u = { "uttA", &f, ali };
  int e0 = kio_log_num_errors();
  capture_start();
  ck_assert_int_eq(gacc_accumulate_batch_async(acc, 1, &u), KIO_ERR);
  ck_assert_int_eq(gacc_wait(acc), KIO_OK);
  kio_log_set_handler(NULL, NULL);
  ck_assert_int_eq(kio_log_num_errors() - e0, 1);
  ck_assert_msg(strstr(g_log, "uttA") && strstr(g_log, "Transition-id 3"), "log: %s", g_log);
  ali[1] = 2;
  ck_assert_int_eq(gacc_accumulate_batch_async(acc, 1, &u), KIO_OK);
  ck_assert_int_eq(gacc_wait(acc), KIO_OK);
  double like;
  int64_t frames;
  ck_assert_int_eq(gacc_get_totals(acc, &like, &frames), KIO_OK);
  ck_assert(frames == 2);
  gacc_utt_result r;
  ck_assert_int_eq(gacc_accumulate_batch(acc, 1, &u, &r), KIO_OK);
  ck_assert_int_eq(gacc_get_totals(acc, &like, &frames), KIO_OK);
  ck_assert(frames == 4);
  ck_assert(like == (double)r.like + (double)r.like);
  kio_matrix_free(&f);
  gacc_free(acc);
  toy_free(&t);
}
END_TEST

/* Nothing accumulated: the file still has the full layout, zero totals. */
START_TEST(empty_stats_written) {
  toy t;
  toy_init(&t);
  gacc_acc *acc;
  ck_assert_int_eq(gacc_new(&acc, "cpu", &t.tm, &t.am), KIO_OK);
  gacc_stats s;
  memset(&s, 0, sizeof s);
  ck_assert_int_eq(gacc_get_stats(acc, &s), KIO_OK);
  const char *path = tu_tmp_path("empty.acc");
  ck_assert_int_eq(gacc_stats_write(path, 1, &s), KIO_OK);
  gacc_stats back;
  int flags_ok;
  ck_assert_int_eq(gacc_stats_read(path, &back, &flags_ok), KIO_OK);
  ck_assert_int_eq(flags_ok, 1);
  ck_assert_int_eq(back.num_tids, 2);
  ck_assert_int_eq(back.num_pdfs, 2);
  ck_assert_int_eq(back.num_gauss, 3);
  ck_assert(back.total_frames == 0.0 && back.total_like == 0.0);
  gacc_stats_free(&back);
  capture_start();
  ck_assert_int_eq(gacc_stats_write("/nonexistent-dir/x.acc", 1, &s), KIO_ERR);
  kio_log_set_handler(NULL, NULL);
  ck_assert_ptr_nonnull(strstr(g_log, "/nonexistent-dir/x.acc"));
  gacc_stats_free(&s);
  gacc_free(acc);
  toy_free(&t);
}
END_TEST

/* Truncated and garbage stats files are read errors, not crashes. */
START_TEST(read_bad_files) {
  size_t len;
  unsigned char *data = tu_read_file("kaldi/mono/final.acc", &len);
  ck_assert_ptr_nonnull(data);
  const char *path = tu_tmp_path("trunc.acc");
  size_t cuts[] = { 1, 2, 10, 5000, len / 2, len - 20 };
  for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
    FILE *f = fopen(path, "wb");
    fwrite(data, 1, cuts[i], f);
    fclose(f);
    gacc_stats s;
    capture_start();
    int rc = gacc_stats_read(path, &s, NULL);
    kio_log_set_handler(NULL, NULL);
    ck_assert_msg(rc == KIO_ERR, "truncated at %zu read fine", cuts[i]);
  }
  free(data);
}
END_TEST

Suite *acc_suite(void) {
  Suite *s = suite_create("acc");
  TCase *t = tcase_create("kaldi");
  tcase_set_timeout(t, 120);
  tcase_add_test(t, mono_matches_kaldi);
  tcase_add_test(t, mono_text_matches_kaldi);
  tcase_add_test(t, tri2_matches_kaldi);
  tcase_add_test(t, noisy_matches_kaldi);
  tcase_add_test(t, async_cpu_equals_sync);
  suite_add_tcase(s, t);
  t = tcase_create("units");
  tcase_set_timeout(t, 60);
  tcase_add_test(t, expf_matches_libc);
  tcase_add_test(t, bad_tid_is_error);
  tcase_add_test(t, async_bad_tid_is_error);
  tcase_add_test(t, tid_zero_counts_pdf0);
  tcase_add_test(t, empty_stats_written);
  tcase_add_test(t, read_bad_files);
  suite_add_tcase(s, t);
  return s;
}

/* The fixtures' stats come from a Kaldi whose OpenBLAS rounds as the "skx"
 * profile (gpu-acc/acc-cpu-fast.c); tests/cli/acc-fast.sh checks the other
 * profiles and this CPU's own against Kaldi. */
int main(void) {
  kio_setting_override(KIO_SET_BLAS_PROFILE, "skx");
  return tu_run_suite(acc_suite());
}
