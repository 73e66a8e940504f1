/* The estimation's threads (train/est.h: the jobs' sum over slices of the
 * statistics, the pdfs' updates) against one thread, on the fixture's
 * statistics (kaldi/tri2/final.acc, eleven jobs made of it, each scaled
 * its own way): the same sums, model, occupancies and log lines whatever
 * the number, and the sums those of the jobs in the shell glob's order;
 * a sum into an earlier one's buffers equals a fresh one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/matrix/blas-profile.h"
#include "base/model/model.h"
#include "base/sys/log.h"
#include "gpu-acc/gpu-acc.h"
#include "train/est.h"
#include "tests/lib/test-util.h"

enum { NJ = 11 };

static void make_jobs(gacc_stats *jobs) {
  for (int j = 0; j < NJ; j++) {
    int flags_ok = 0;
    ck_assert_int_eq(gacc_stats_read("kaldi/tri2/final.acc", &jobs[j], &flags_ok), KIO_OK);
    double f = 1.0 / (double)(j + 3);  /* each job its own values */
    size_t gd = (size_t)jobs[j].num_gauss * (size_t)jobs[j].dim;
    for (size_t i = 0; i < gd; i++) {
      jobs[j].mean_acc[i] *= f;
      jobs[j].var_acc[i] *= f;
    }
    for (int32_t g = 0; g < jobs[j].num_gauss; g++) jobs[j].occ[g] *= f;
    for (int32_t t = 0; t <= jobs[j].num_tids; t++) jobs[j].tacc[t] *= f;
  }
}

/* One estimation with n threads: the sum (kept in *sum), the model file
 * and the occupancies written under tag, the log lines in *lines. */
static void estimate(int n, gacc_stats *jobs, gacc_stats *sum, const char *tag, tu_text *lines) {
  trn_est_set_threads(n);
  gacc_stats *jp[NJ];
  for (int j = 0; j < NJ; j++) jp[j] = &jobs[j];
  kio_log_set_handler(tu_log_into_text, lines);
  ck_assert_int_eq(trn_est_sum_jobs(jp, NJ, sum, 1), KIO_OK);
  kio_tmodel tm;
  kio_am_gmm am;
  memset(&tm, 0, sizeof tm);
  memset(&am, 0, sizeof am);
  ck_assert_int_eq(kio_model_read("models/tri2/final.mdl", &tm, &am), KIO_OK);
  trn_est_opts o;
  trn_est_opts_default(&o);
  o.mix_up = sum->num_gauss * 2;  /* mixing up too */
  o.power = 0.25f;
  char name[64];
  snprintf(name, sizeof name, "%s.occs", tag);
  char *occs = strdup(tu_tmp_path(name));
  trn_est_report r;
  ck_assert_int_eq(trn_est_update(&o, sum, &tm, &am, occs, &r), KIO_OK);
  kio_log_set_handler(NULL, NULL);
  snprintf(name, sizeof name, "%s.mdl", tag);
  ck_assert_int_eq(kio_model_write(tu_tmp_path(name), 1, &tm, &am), KIO_OK);
  free(occs);
  kio_tmodel_free(&tm);
  kio_am_gmm_free(&am);
  trn_est_set_threads(0);
}

static int same_doubles(const double *a, const double *b, size_t n) {
  return memcmp(a, b, sizeof(double) * n) == 0;
}

START_TEST(threads_same_bits) {
  gacc_stats jobs[NJ];
  make_jobs(jobs);
  (void)kio_blas_profile();  /* its one line (once a process) before the comparisons */
  gacc_stats ref;
  memset(&ref, 0, sizeof ref);
  tu_text ref_lines = {0};
  estimate(1, jobs, &ref, "t1", &ref_lines);
  ck_assert_msg(ref.num_gauss * ref.dim > 8192, "the fixture is one slice of the sum: %d x %d",
                (int)ref.num_gauss, (int)ref.dim);
  size_t gd = (size_t)ref.num_gauss * (size_t)ref.dim;
  const int counts[] = {2, 4, 7};
  for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
    char tag[16];
    snprintf(tag, sizeof tag, "t%d", counts[k]);
    gacc_stats s;
    memset(&s, 0, sizeof s);
    tu_text lines = {0};
    estimate(counts[k], jobs, &s, tag, &lines);
    ck_assert_msg(same_doubles(s.mean_acc, ref.mean_acc, gd) &&
                      same_doubles(s.var_acc, ref.var_acc, gd) &&
                      same_doubles(s.occ, ref.occ, (size_t)ref.num_gauss) &&
                      same_doubles(s.tacc, ref.tacc, (size_t)ref.num_tids + 1) &&
                      s.total_like == ref.total_like && s.total_frames == ref.total_frames,
                  "%d threads: the jobs' sum differs from one thread's", counts[k]);
    const char *what[] = {"mdl", "occs"};
    for (int w = 0; w < 2; w++) {
      char name[32], a[4200], b[4200];
      snprintf(name, sizeof name, "t1.%s", what[w]);
      snprintf(a, sizeof a, "%s", tu_tmp_path(name));
      snprintf(name, sizeof name, "%s.%s", tag, what[w]);
      snprintf(b, sizeof b, "%s", tu_tmp_path(name));
      ck_assert_msg(tu_files_equal(a, b), "%d threads: the %s file differs from one thread's",
                    counts[k], what[w]);
    }
    if (!lines.s || !ref_lines.s || strcmp(lines.s, ref_lines.s) != 0)
      fprintf(stderr, "%d threads:\n%s\n--- one thread:\n%s\n", counts[k], lines.s ? lines.s : "",
              ref_lines.s ? ref_lines.s : "");
    ck_assert_msg(lines.s && ref_lines.s && strcmp(lines.s, ref_lines.s) == 0,
                  "%d threads: the log lines differ (printed above)", counts[k]);
    gacc_stats_free(&s);
    free(lines.s);
  }
  /* and the sum is the jobs' in the glob's order (1, 10, 11, 2, ..., 9),
   * each element computed here on its own */
  static const int glob[NJ] = {1, 10, 11, 2, 3, 4, 5, 6, 7, 8, 9};
  for (size_t i = 0; i < gd; i++) {
    double m = 0.0, v = 0.0;
    for (int k = 0; k < NJ; k++) {
      m += (double)(float)jobs[glob[k] - 1].mean_acc[i];
      v += (double)(float)jobs[glob[k] - 1].var_acc[i];
    }
    ck_assert_msg((double)(float)m == ref.mean_acc[i] && (double)(float)v == ref.var_acc[i],
                  "element %zu: not the jobs' sum", i);
  }
  gacc_stats_free(&ref);
  free(ref_lines.s);
  for (int j = 0; j < NJ; j++) gacc_stats_free(&jobs[j]);
}
END_TEST

/* The first np pdfs of s (a smaller model's statistics), values kept. */
static void first_pdfs(const gacc_stats *s, int32_t np, gacc_stats *out) {
  memset(out, 0, sizeof *out);
  int32_t G = s->pdf_offset[np];
  size_t gd = (size_t)G * (size_t)s->dim;
  *out = (gacc_stats){ .num_tids = s->num_tids, .num_pdfs = np, .dim = s->dim, .num_gauss = G,
                       .total_like = s->total_like, .total_frames = s->total_frames };
  out->pdf_offset = malloc(sizeof(int32_t) * ((size_t)np + 1));
  out->tacc = malloc(sizeof(double) * ((size_t)s->num_tids + 1));
  out->occ = malloc(sizeof(double) * (size_t)G);
  out->mean_acc = malloc(sizeof(double) * gd);
  out->var_acc = malloc(sizeof(double) * gd);
  ck_assert(out->pdf_offset && out->tacc && out->occ && out->mean_acc && out->var_acc);
  memcpy(out->pdf_offset, s->pdf_offset, sizeof(int32_t) * ((size_t)np + 1));
  memcpy(out->tacc, s->tacc, sizeof(double) * ((size_t)s->num_tids + 1));
  memcpy(out->occ, s->occ, sizeof(double) * (size_t)G);
  memcpy(out->mean_acc, s->mean_acc, sizeof(double) * gd);
  memcpy(out->var_acc, s->var_acc, sizeof(double) * gd);
}

static int same_sum(const gacc_stats *x, const gacc_stats *y) {
  size_t gd = (size_t)x->num_gauss * (size_t)x->dim;
  return x->num_tids == y->num_tids && x->num_pdfs == y->num_pdfs && x->dim == y->dim &&
         x->num_gauss == y->num_gauss &&
         !memcmp(x->pdf_offset, y->pdf_offset, sizeof(int32_t) * ((size_t)x->num_pdfs + 1)) &&
         same_doubles(x->tacc, y->tacc, (size_t)x->num_tids + 1) &&
         same_doubles(x->occ, y->occ, (size_t)x->num_gauss) &&
         same_doubles(x->mean_acc, y->mean_acc, gd) && same_doubles(x->var_acc, y->var_acc, gd) &&
         !memcmp(&x->total_like, &y->total_like, sizeof(double)) &&
         x->total_frames == y->total_frames;
}

/* The trainer keeps the sum's buffers from one update to the next: a sum
 * into the last one's (larger, smaller, then larger again: the model
 * changed between) is the sum into a fresh one, bit for bit, on one thread
 * and on several. */
START_TEST(reused_sum_equals_fresh) {
  gacc_stats big[NJ], small[NJ];
  make_jobs(big);
  for (int j = 0; j < NJ; j++) first_pdfs(&big[j], big[j].num_pdfs / 2, &small[j]);
  ck_assert_int_lt(small[0].num_gauss, big[0].num_gauss);
  gacc_stats *bp[NJ], *sp[NJ];
  for (int j = 0; j < NJ; j++) {
    bp[j] = &big[j];
    sp[j] = &small[j];
  }
  const int counts[] = {1, 3};
  for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
    trn_est_set_threads(counts[c]);
    gacc_stats kept;
    memset(&kept, 0, sizeof kept);
    gacc_stats *const *order[] = {bp, sp, bp, bp};
    for (int k = 0; k < 4; k++) {
      gacc_stats fresh;
      memset(&fresh, 0, sizeof fresh);
      ck_assert_int_eq(trn_est_sum_jobs(order[k], NJ, &kept, 0), KIO_OK);
      ck_assert_int_eq(trn_est_sum_jobs(order[k], NJ, &fresh, 0), KIO_OK);
      ck_assert_msg(same_sum(&kept, &fresh), "%d thread(s), sum %d: into the last one's buffers "
                    "it differs from a fresh sum", counts[c], k);
      gacc_stats_free(&fresh);
    }
    gacc_stats_free(&kept);
  }
  trn_est_set_threads(0);
  for (int j = 0; j < NJ; j++) {
    gacc_stats_free(&big[j]);
    gacc_stats_free(&small[j]);
  }
}
END_TEST

Suite *est_threads_suite(void) {
  Suite *s = suite_create("est_threads");
  TCase *t = tcase_create("bits");
  tcase_set_timeout(t, 300);
  tcase_add_test(t, threads_same_bits);
  tcase_add_test(t, reused_sum_equals_fresh);
  suite_add_tcase(s, t);
  return s;
}

int main(void) { return tu_run_suite(est_threads_suite()); }
