/* The jobs' statistics summed on the device (gpu-acc/acc-jobsum.cu, the
 * trainer's GPU path) against trn_est_sum_jobs on the host (train/sum-accs.c,
 * the CPU path and gmm-sum-accs): the same bits, lines aside. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/io/table.h"
#include "base/sys/log.h"
#include "base/sys/settings.h"
#include "gpu-acc/acc-internal.h"
#include "gpu-acc/gpu-acc.h"
#include "train/sum-accs.h"
#include "tests/lib/test-util.h"

#include "tests/lib/acc-utts.h"

enum { NJ = 11 }; /* jobs */

/* Every value and total the same bits, the same shape. */
static int same_sums(const gacc_stats *x, const gacc_stats *y) {
  size_t gd = (size_t)x->num_gauss * (size_t)x->dim;
  return x->num_tids == y->num_tids && x->num_gauss == y->num_gauss && x->dim == y->dim &&
         x->num_pdfs == y->num_pdfs &&
         !memcmp(x->pdf_offset, y->pdf_offset, sizeof(int32_t) * ((size_t)x->num_pdfs + 1)) &&
         !memcmp(x->tacc, y->tacc, sizeof(double) * ((size_t)x->num_tids + 1)) &&
         !memcmp(x->occ, y->occ, sizeof(double) * (size_t)x->num_gauss) &&
         !memcmp(x->mean_acc, y->mean_acc, sizeof(double) * gd) &&
         !memcmp(x->var_acc, y->var_acc, sizeof(double) * gd) &&
         !memcmp(&x->total_like, &y->total_like, sizeof(double)) &&
         !memcmp(&x->total_frames, &y->total_frames, sizeof(double));
}

/* NJ jobs of d (utterances cut in NJ ranges) on one device accumulator,
 * reset between them as the trainer's: each job's statistics fetched to
 * the host (jobs[j]) and stashed in its slot of *ds (its rank in the
 * glob's order); then the host's sum and the device's, compared. */
static void sum_both(const acc_utts *d, gacc_acc *acc, gacc_dev_sum **ds) {
  ck_assert_int_ge(d->n, NJ);  /* every job has utterances */
  ck_assert_int_eq(gacc_rebind(acc, &d->tm, &d->am, 0), KIO_OK);
  gacc_stats jobs[NJ], host, dev;
  memset(jobs, 0, sizeof jobs);
  memset(&host, 0, sizeof host);
  memset(&dev, 0, sizeof dev);
  gacc_stats *jp[NJ];
  double like[NJ], frames[NJ];
  int order[NJ], slot[NJ];
  trn_sum_glob_order(NJ, order);
  ck_assert_int_eq(order[0], 1);
  ck_assert_int_eq(order[1], 10);  /* 1, 10, 11, 2, ...: not 1 .. NJ */
  for (int k = 0; k < NJ; k++) slot[order[k] - 1] = k;
  gacc_stats shape;
  ck_assert_int_eq(gacc_stats_init(&shape, &d->tm, &d->am), KIO_OK);
  char why[256];
  ck_assert_msg(gacc_dev_sum_reserve(ds, NJ, &shape, why, sizeof why) == KIO_OK, "%s", why);
  gacc_utt_result res[MAXU];
  for (int j = 0; j < NJ; j++) {
    int lo = d->n * j / NJ, hi = d->n * (j + 1) / NJ;
    ck_assert_int_eq(gacc_accumulate_batch(acc, hi - lo, d->u + lo, res), KIO_OK);
    ck_assert_int_eq(gacc_get_stats(acc, &jobs[j]), KIO_OK);
    ck_assert_int_eq(gacc_stash_stats(acc, *ds, slot[j], &like[j], &frames[j]), KIO_OK);
    ck_assert(like[j] == jobs[j].total_like && frames[j] == jobs[j].total_frames);
    ck_assert_int_eq(gacc_reset_stats(acc), KIO_OK);
    jp[j] = &jobs[j];
  }
  ck_assert_int_eq(trn_est_sum_jobs(jp, NJ, &host, 0), KIO_OK);
  ck_assert_int_eq(gacc_stats_reshape(&dev, &d->tm, &d->am, 0), KIO_OK);
  ck_assert_int_eq(trn_est_sum_dev(*ds, like, frames, NJ, &dev, 0), KIO_OK);
  ck_assert(host.total_frames > 0);
  ck_assert_msg(same_sums(&host, &dev), "the device's sum of %d jobs is not the host's", NJ);
  for (int j = 0; j < NJ; j++) gacc_stats_free(&jobs[j]);
  gacc_stats_free(&host);
  gacc_stats_free(&dev);
  gacc_stats_free(&shape);
}

/* tri2 (LDA features), tri1, mono, tri1 again through one accumulator and
 * one device sum (reshaped larger, smaller, larger: its memory kept where
 * it suffices). */
START_TEST(dev_sum_equals_host) {
  kio_gpu *g = NULL;
  ck_assert_int_eq(kio_gpu_job(&g, 0), KIO_OK);
  printf("GPU: %s\n", kio_gpu_desc(g));
  acc_utts mono, tri1, tri2;
  utts_load(&mono, "models/mono/final.mdl", "ark:feats/delta.ark", "ark:kaldi/mono/ali.ark");
  utts_load(&tri1, "models/tri1/final.mdl", "ark:feats/delta.ark", "ark:kaldi/tri1/ali.ark");
  utts_load(&tri2, "models/tri2/final.mdl", "ark:feats/lda.ark", "ark:kaldi/tri2/ali.ark");
  gacc_acc *acc = NULL, *acc2 = NULL;
  ck_assert_int_eq(gacc_new(&acc, "gpu", &tri2.tm, &tri2.am), KIO_OK);
  ck_assert_int_eq(gacc_new(&acc2, "gpu", &tri1.tm, &tri1.am), KIO_OK);
  gacc_dev_sum *ds = NULL;
  sum_both(&tri2, acc, &ds);
  sum_both(&tri1, acc2, &ds);
  sum_both(&mono, acc2, &ds);
  sum_both(&tri1, acc2, &ds);
  gacc_dev_sum_free(ds);
  gacc_free(acc);
  gacc_free(acc2);
  acc_utts_free(&mono);
  acc_utts_free(&tri1);
  acc_utts_free(&tri2);
}
END_TEST

/* A random double: any sign, magnitudes 1e-6 .. 1e6, full mantissa (so
 * that rounding to float and the order of the additions show). */
static double rnd(unsigned *seed) {
  double m = (double)rand_r(seed) / RAND_MAX + (double)rand_r(seed) / RAND_MAX / 4294967296.0;
  int e = rand_r(seed) % 13 - 6;
  double v = m;
  for (; e > 0; e--) v *= 10.0;
  for (; e < 0; e++) v /= 10.0;
  return rand_r(seed) % 2 ? -v : v;
}

/* Statistics that no accumulation makes (non-integer transition counts,
 * any values), loaded into a device accumulator (gacc_cuda_load) and
 * stashed: the host's sum of the same values, and the occupancies before
 * their rounding are the double sums of their floats in the glob's order. */
START_TEST(dev_sum_random_values) {
  acc_utts tri1;
  utts_load(&tri1, "models/tri1/final.mdl", "ark:feats/delta.ark", "ark:kaldi/tri1/ali.ark");
  gacc_acc *acc = NULL;
  ck_assert_int_eq(gacc_new(&acc, "gpu", &tri1.tm, &tri1.am), KIO_OK);
  gacc_stats jobs[NJ], host, dev, raw;
  memset(jobs, 0, sizeof jobs);
  memset(&host, 0, sizeof host);
  memset(&dev, 0, sizeof dev);
  memset(&raw, 0, sizeof raw);
  gacc_stats *jp[NJ];
  double like[NJ], frames[NJ];
  int order[NJ], slot[NJ];
  trn_sum_glob_order(NJ, order);
  for (int k = 0; k < NJ; k++) slot[order[k] - 1] = k;
  gacc_dev_sum *ds = NULL;
  char why[256];
  ck_assert_int_eq(gacc_stats_init(&jobs[0], &tri1.tm, &tri1.am), KIO_OK);
  ck_assert_msg(gacc_dev_sum_reserve(&ds, NJ, &jobs[0], why, sizeof why) == KIO_OK, "%s", why);
  unsigned seed = 7;
  for (int j = 0; j < NJ; j++) {
    gacc_stats *s = &jobs[j];
    if (j) ck_assert_int_eq(gacc_stats_init(s, &tri1.tm, &tri1.am), KIO_OK);
    size_t gd = (size_t)s->num_gauss * (size_t)s->dim;
    for (int32_t t = 0; t <= s->num_tids; t++) s->tacc[t] = fabs(rnd(&seed));
    for (int32_t g = 0; g < s->num_gauss; g++) s->occ[g] = fabs(rnd(&seed));
    for (size_t i = 0; i < gd; i++) s->mean_acc[i] = rnd(&seed);
    for (size_t i = 0; i < gd; i++) s->var_acc[i] = fabs(rnd(&seed));
    s->total_like = rnd(&seed);
    s->total_frames = (double)(rand_r(&seed) % 100000);
    ck_assert_int_eq(gacc_cuda_load(acc->cuda, s), KIO_OK);
    acc->st.total_like = s->total_like;
    acc->st.total_frames = s->total_frames;
    ck_assert_int_eq(gacc_stash_stats(acc, ds, slot[j], &like[j], &frames[j]), KIO_OK);
    jp[j] = s;
  }
  ck_assert_int_eq(trn_est_sum_jobs(jp, NJ, &host, 0), KIO_OK);
  ck_assert_int_eq(gacc_stats_reshape(&dev, &tri1.tm, &tri1.am, 0), KIO_OK);
  ck_assert_int_eq(trn_est_sum_dev(ds, like, frames, NJ, &dev, 0), KIO_OK);
  ck_assert_msg(same_sums(&host, &dev), "the device's sum of random statistics is not the host's");
  ck_assert_int_eq(gacc_stats_reshape(&raw, &tri1.tm, &tri1.am, 0), KIO_OK);
  ck_assert_int_eq(gacc_dev_sum_fetch(ds, &raw), KIO_OK);
  int rounded = 0;
  for (int32_t g = 0; g < raw.num_gauss; g++) {
    double o = 0.0;
    for (int k = 0; k < NJ; k++) o += (double)(float)jobs[order[k] - 1].occ[g];
    ck_assert_msg(!memcmp(&o, &raw.occ[g], sizeof o), "occupancy %d before rounding", (int)g);
    rounded += (double)(float)o != o;
  }
  ck_assert_int_gt(rounded, 0);  /* the rounding after the lines shows */
  for (int j = 0; j < NJ; j++) gacc_stats_free(&jobs[j]);
  gacc_stats_free(&host);
  gacc_stats_free(&dev);
  gacc_stats_free(&raw);
  gacc_dev_sum_free(ds);
  gacc_free(acc);
  acc_utts_free(&tri1);
}
END_TEST

static void quiet(int level, const char *func, const char *file, int line, const char *msg,
                  void *arg) {
  (void)func; (void)file; (void)line; (void)msg;
  if (level == KIO_LOG_ERROR) ++*(int *)arg;
}

/* A slot out of range, a CPU accumulator, another shape: refused (ERROR,
 * KIO_ERR), nothing written. */
START_TEST(dev_sum_refuses_misfits) {
  acc_utts mono, tri1;
  utts_load(&mono, "models/mono/final.mdl", "ark:feats/delta.ark", "ark:kaldi/mono/ali.ark");
  utts_load(&tri1, "models/tri1/final.mdl", "ark:feats/delta.ark", "ark:kaldi/tri1/ali.ark");
  gacc_stats shape;
  ck_assert_int_eq(gacc_stats_init(&shape, &mono.tm, &mono.am), KIO_OK);
  gacc_dev_sum *ds = NULL;
  char why[256];
  ck_assert_int_eq(gacc_dev_sum_reserve(&ds, 2, &shape, why, sizeof why), KIO_OK);
  gacc_acc *gpu = NULL, *cpu = NULL, *other = NULL;
  ck_assert_int_eq(gacc_new(&gpu, "gpu", &mono.tm, &mono.am), KIO_OK);
  ck_assert_int_eq(gacc_new(&cpu, "cpu", &mono.tm, &mono.am), KIO_OK);
  ck_assert_int_eq(gacc_new(&other, "gpu", &tri1.tm, &tri1.am), KIO_OK);
  double like, frames;
  int errors = 0;
  kio_log_set_handler(quiet, &errors);
  ck_assert_int_eq(gacc_stash_stats(gpu, ds, 2, &like, &frames), KIO_ERR);
  ck_assert_int_eq(gacc_stash_stats(gpu, ds, -1, &like, &frames), KIO_ERR);
  ck_assert_int_eq(gacc_stash_stats(cpu, ds, 0, &like, &frames), KIO_ERR);
  ck_assert_int_eq(gacc_stash_stats(other, ds, 0, &like, &frames), KIO_ERR);
  kio_log_set_handler(NULL, NULL);
  ck_assert_int_eq(errors, 4);
  ck_assert_int_eq(gacc_stash_stats(gpu, ds, 1, &like, &frames), KIO_OK);
  gacc_free(gpu);
  gacc_free(cpu);
  gacc_free(other);
  gacc_dev_sum_free(ds);
  gacc_stats_free(&shape);
  acc_utts_free(&mono);
  acc_utts_free(&tri1);
}
END_TEST

static Suite *jobsum_suite(void) {
  Suite *s = suite_create("gpu_jobsum");
  TCase *t = tcase_create("gpu");
  tcase_set_timeout(t, 300);
  tcase_add_test(t, dev_sum_equals_host);
  tcase_add_test(t, dev_sum_random_values);
  tcase_add_test(t, dev_sum_refuses_misfits);
  suite_add_tcase(s, t);
  return s;
}

int main(void) {
  if (!tu_gpu_available()) return TU_EXIT_SKIP;
  kio_setting_override(KIO_SET_BLAS_PROFILE, "skx");
  return tu_run_suite(jobsum_suite());
}
