/* The CUDA accumulator against the CPU one: bit-identical statistics (the
 * same operations in the same order, gpu-acc/acc-cuda.cu), the same
 * per-utterance and total likelihoods, any batch size; and the written file
 * against Kaldi's, byte for byte. The asynchronous entry against the synchronous one. Skips (77) without a usable GPU; CUDA is first used
 * inside the forked tests. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/sys/settings.h"
#include "device/cuda-util.h"
#include "base/sys/log.h"
#include "base/matrix/matrix.h"
#include "base/model/model.h"
#include "base/io/table.h"
#include "gpu-acc/acc-internal.h"
#include "gpu-acc/gpu-acc.h"
#include "base/matrix/blas-profile.h"
#include "tests/lib/test-util.h"

static void select_gpu(void) {
  kio_gpu *g = NULL;
  ck_assert_int_eq(kio_gpu_job(&g, 0), KIO_OK);
  printf("GPU: %s\n", kio_gpu_desc(g));
}

#include "tests/lib/acc-run.h"

static void gpu_vs_cpu(const char *mdl, const char *feats, const char *alis,
                       int gpu_batch, const char *kaldi_acc) {
  select_gpu();
  gacc_stats c, g;
  run_info rc, rg;
  ck_assert_int_eq(run_acc("cpu", mdl, feats, alis, 1, &c, &rc), KIO_OK);
  ck_assert_int_eq(run_acc("gpu", mdl, feats, alis, gpu_batch, &g, &rg), KIO_OK);
  ck_assert_int_eq(rc.done, rg.done);
  ck_assert(rc.tot_t == rg.tot_t);
  /* likelihoods are formed on the host from the device's max and sum: the
   * same floats, so the same sums */
  ck_assert_msg(rc.tot_like == rg.tot_like, "utterance likelihoods: cpu %.17g gpu %.17g",
                rc.tot_like, rg.tot_like);
  ck_assert_msg(c.total_like == g.total_like, "total_like: cpu %.17g gpu %.17g",
                c.total_like, g.total_like);
  ck_assert(c.total_frames == g.total_frames);
  gacc_cmp cmp;
  gacc_stats_compare(&g, &c, 1e-9, 0, &cmp);
  ck_assert(cmp.same_layout);
  ck_assert_msg(cmp.num_tacc_diff == 0, "%lld transition counts differ",
                (long long)cmp.num_tacc_diff);
  ck_assert_msg(cmp.num_over == 0, "%zu of %zu values differ by > 1e-9 (max %g)",
                cmp.num_over, cmp.num_values, cmp.max_rel);
  printf("%s: gpu vs cpu max rel diff %g over %zu values\n", mdl, cmp.max_rel,
         cmp.num_values);
  ck_assert_msg(stats_identical(&g, &c), "%s (batch %d): GPU stats not bit-identical to "
                "the CPU path's", mdl, gpu_batch);
  /* the written file against Kaldi's */
  const char *path = tu_tmp_path("gpu.acc");
  ck_assert_int_eq(gacc_stats_write(path, 1, &g), KIO_OK);
  gacc_stats mine, ref;
  ck_assert_int_eq(gacc_stats_read(path, &mine, NULL), KIO_OK);
  ck_assert_int_eq(gacc_stats_read(kaldi_acc, &ref, NULL), KIO_OK);
  gacc_stats_compare(&mine, &ref, 1e-6, 1, &cmp);
  ck_assert(cmp.same_layout && cmp.num_tacc_diff == 0);
  ck_assert_msg(cmp.num_over == 0, "%zu values differ from %s by > 1e-6", cmp.num_over,
                kaldi_acc);
  ck_assert_msg(tu_files_equal(path, kaldi_acc), "GPU stats: bytes differ from %s",
                kaldi_acc);
  gacc_stats_free(&mine);
  gacc_stats_free(&ref);
  gacc_stats_free(&c);
  gacc_stats_free(&g);
}

START_TEST(mono_gpu_equals_cpu) {
  gpu_vs_cpu("models/mono/final.mdl", "ark:feats/delta.ark", "ark:kaldi/mono/ali.ark", 16,
             "kaldi/mono/final.acc");
}
END_TEST

START_TEST(tri2_gpu_equals_cpu) {
  gpu_vs_cpu("models/tri2/final.mdl", "ark:feats/lda.ark", "ark:kaldi/tri2/ali.ark", 64,
             "kaldi/tri2/final.acc");
}
END_TEST

START_TEST(noisy_gpu_equals_cpu) {
  gpu_vs_cpu("models/mono/final.mdl", "ark:noisy/delta.ark", "ark:noisy/mono.ali.ark", 1,
             "noisy/mono.acc");
}
END_TEST

/* dims 4 and 8: SkylakeX's small-m sgemv kernel (base/matrix/sgemv-skx-small.h) */
START_TEST(mono4_gpu_equals_cpu) {
  gpu_vs_cpu("models/mono4/final.mdl", "ark:feats/delta4.ark", "ark:kaldi/mono/ali.ark", 16,
             "kaldi/mono4/final.acc");
}
END_TEST

START_TEST(mono8_gpu_equals_cpu) {
  gpu_vs_cpu("models/mono8/final.mdl", "ark:feats/delta8.ark", "ark:kaldi/mono/ali.ark", 16,
             "kaldi/mono8/final.acc");
}
END_TEST

/* Every rounding profile (base/matrix/blas-profile.h): the GPU statistics
 * are the CPU path's bit for bit (the CPU path itself is checked against
 * Kaldi under each profile by tests/cli/rounding.sh). _i: the profile. */
START_TEST(profiles_gpu_equals_cpu) {
  kio_setting_override(KIO_SET_BLAS_PROFILE, kio_blas_profile_name(_i));
  kio_blas_profile_reset();
  select_gpu();
  static const char *const m[][3] = {
    {"models/mono/final.mdl", "ark:noisy/delta.ark", "ark:noisy/mono.ali.ark"},
    {"models/tri2/final.mdl", "ark:feats/lda.ark", "ark:kaldi/tri2/ali.ark"},
    {"models/mono8/final.mdl", "ark:feats/delta8.ark", "ark:kaldi/mono/ali.ark"}};
  for (int k = 0; k < 3; k++) {
    gacc_stats c, g;
    run_info rc, rg;
    ck_assert_int_eq(run_acc("cpu", m[k][0], m[k][1], m[k][2], 1, &c, &rc), KIO_OK);
    ck_assert_int_eq(run_acc("gpu", m[k][0], m[k][1], m[k][2], 16, &g, &rg), KIO_OK);
    ck_assert_msg(rc.tot_like == rg.tot_like, "%s %s: likelihoods cpu %.17g gpu %.17g",
                  kio_blas_profile_name(_i), m[k][0], rc.tot_like, rg.tot_like);
    ck_assert_msg(stats_identical(&g, &c), "%s %s: GPU stats not bit-identical to the CPU's",
                  kio_blas_profile_name(_i), m[k][0]);
    gacc_stats_free(&c);
    gacc_stats_free(&g);
  }
  kio_setting_override(KIO_SET_BLAS_PROFILE, "skx");
  kio_blas_profile_reset();
}
END_TEST

/* Both statistics kernels (KALDI_GPU_DEV_ACC_STATS: cells, tiled) give the
 * CPU path's bits, with a batch of every utterance (the silence pdf's
 * frames over many unrolled steps) and of one. _i: the kernel. */
START_TEST(kernels_gpu_equals_cpu) {
  static const char *const kinds[] = {"cells", "tiled"};
  kio_setting_override(KIO_SET_DEV_ACC_STATS, kinds[_i]);
  select_gpu();
  static const char *const m[][3] = {
    {"models/mono/final.mdl", "ark:noisy/delta.ark", "ark:noisy/mono.ali.ark"},
    {"models/tri2/final.mdl", "ark:feats/lda.ark", "ark:kaldi/tri2/ali.ark"}};
  static const int batch[] = {1000, 1};
  for (int k = 0; k < 2; k++)
    for (int b = 0; b < 2; b++) {
      gacc_stats c, g;
      run_info rc, rg;
      ck_assert_int_eq(run_acc("cpu", m[k][0], m[k][1], m[k][2], 1, &c, &rc), KIO_OK);
      ck_assert_int_eq(run_acc("gpu", m[k][0], m[k][1], m[k][2], batch[b], &g, &rg), KIO_OK);
      ck_assert(rc.tot_like == rg.tot_like);
      ck_assert_msg(stats_identical(&g, &c), "%s kernel, %s, batch %d: GPU stats not "
                    "bit-identical to the CPU's", kinds[_i], m[k][0], batch[b]);
      gacc_stats_free(&c);
      gacc_stats_free(&g);
    }
  kio_setting_override(KIO_SET_DEV_ACC_STATS, NULL);
}
END_TEST

/* Batch boundaries do not matter (one utterance per batch vs all at once). */
START_TEST(gpu_batches_agree) {
  select_gpu();
  gacc_stats a, b;
  run_info ra, rb;
  ck_assert_int_eq(run_acc("gpu", "models/mono/final.mdl", "ark:feats/delta.ark",
                           "ark:kaldi/mono/ali.ark", 1, &a, &ra), KIO_OK);
  ck_assert_int_eq(run_acc("gpu", "models/mono/final.mdl", "ark:feats/delta.ark",
                           "ark:kaldi/mono/ali.ark", 40, &b, &rb), KIO_OK);
  gacc_cmp cmp;
  gacc_stats_compare(&a, &b, 1e-9, 0, &cmp);
  ck_assert(cmp.same_layout && cmp.num_tacc_diff == 0 && cmp.num_over == 0);
  ck_assert_msg(stats_identical(&a, &b), "batch 1 vs 40: stats not bit-identical");
  ck_assert(ra.tot_like == rb.tot_like);
  gacc_stats_free(&a);
  gacc_stats_free(&b);
}
END_TEST

/* The asynchronous entry (worker thread, double-buffered staging, caller's
 * buffers overwritten right after each call) against the synchronous one:
 * the same likelihoods and totals bit for bit (formed on the host in the
 * same order), the same transition counts, and the GMM statistics equal up
 * to the order of the device's double atomics (1e-9 relative, as between
 * any two GPU runs; bit-identical where the order happens to match). */
START_TEST(gpu_async_equals_sync) {
  static const struct { const char *mdl, *feats, *alis; int batch; } cases[] = {
    { "models/mono/final.mdl", "ark:feats/delta.ark", "ark:kaldi/mono/ali.ark", 16 },
    { "models/mono/final.mdl", "ark:noisy/delta.ark", "ark:noisy/mono.ali.ark", 1 },
    { "models/tri2/final.mdl", "ark:feats/lda.ark", "ark:kaldi/tri2/ali.ark", 64 },
    { "models/tri2/final.mdl", "ark:feats/lda.ark", "ark:kaldi/tri2/ali.ark", 3 },
  };
  select_gpu();
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    gacc_stats sy, as, cpu;
    run_info rs, ra, rc;
    ck_assert_int_eq(run_acc_mode("gpu", cases[k].mdl, cases[k].feats, cases[k].alis,
                                  cases[k].batch, 0, &sy, &rs), KIO_OK);
    ck_assert_int_eq(run_acc_mode("gpu", cases[k].mdl, cases[k].feats, cases[k].alis,
                                  cases[k].batch, 1, &as, &ra), KIO_OK);
    ck_assert_int_eq(run_acc_mode("cpu", cases[k].mdl, cases[k].feats, cases[k].alis,
                                  cases[k].batch, 0, &cpu, &rc), KIO_OK);
    ck_assert_int_eq(rs.done, ra.done);
    ck_assert(rs.done > 0);
    ck_assert_msg(rs.tot_like == ra.tot_like && rc.tot_like == ra.tot_like,
                  "like sums: sync %.17g async %.17g cpu %.17g", rs.tot_like, ra.tot_like,
                  rc.tot_like);
    ck_assert(rs.tot_t == ra.tot_t && rc.tot_t == ra.tot_t);
    ck_assert_msg(sy.total_like == as.total_like && cpu.total_like == as.total_like,
                  "total_like: sync %.17g async %.17g", sy.total_like, as.total_like);
    ck_assert(sy.total_frames == as.total_frames);
    gacc_cmp cmp;
    gacc_stats_compare(&as, &sy, 1e-9, 0, &cmp);
    ck_assert(cmp.same_layout);
    ck_assert_msg(cmp.num_tacc_diff == 0, "%lld transition counts differ",
                  (long long)cmp.num_tacc_diff);
    ck_assert_msg(cmp.num_over == 0, "%zu of %zu values differ by > 1e-9 (max %g)",
                  cmp.num_over, cmp.num_values, cmp.max_rel);
    printf("%s batch %d: async vs sync %s (max rel diff %g)\n", cases[k].feats,
           cases[k].batch, stats_identical(&as, &sy) ? "identical" : "differ", cmp.max_rel);
    gacc_stats_free(&sy);
    gacc_stats_free(&as);
    gacc_stats_free(&cpu);
  }
}
END_TEST

/* The mono model and a GPU accumulator for it (the test fails otherwise). */
static void new_mono_gpu_acc(kio_tmodel *tm, kio_am_gmm *am, gacc_acc **acc) {
  select_gpu();
  memset(tm, 0, sizeof *tm);
  memset(am, 0, sizeof *am);
  ck_assert_int_eq(kio_model_read("models/mono/final.mdl", tm, am), KIO_OK);
  ck_assert_int_eq(gacc_new(acc, "gpu", tm, am), KIO_OK);
}

/* An invalid log-likelihood found by the worker is logged by the thread
 * that waits (not the worker), naming the frame and the utterance (whose
 * key buffer the caller has already overwritten); the next asynchronous
 * call reports it the same way. */
static pthread_t g_main;
static int g_bad, g_bad_other_thread;
static void catch_bad(int level, const char *func, const char *file, int line,
                      const char *msg, void *user) {
  (void)func; (void)file; (void)line; (void)user;
  if (level != KIO_LOG_ERROR) return;
  if (strstr(msg, "frame 1 of utterance uttNaN")) g_bad++;
  if (!pthread_equal(pthread_self(), g_main)) g_bad_other_thread++;
}

START_TEST(gpu_async_bad_like_logged_at_wait) {
  kio_tmodel tm;
  kio_am_gmm am;
  gacc_acc *acc;
  new_mono_gpu_acc(&tm, &am, &acc);
  kio_matrix f = { 0, 0, NULL, 0 };
  ck_assert_int_eq(kio_matrix_resize(&f, 3, am.dim), KIO_OK);
  for (int32_t i = 0; i < 3 * am.dim; i++) f.data[i] = 0.01f * (float)i;
  f.data[am.dim + 2] = NAN;  /* frame 1 */
  int32_t ali[3] = { 1, 1, 2 };
  char key[16] = "uttNaN";
  gacc_utt u = { key, &f, ali };
  g_main = pthread_self();
  g_bad = g_bad_other_thread = 0;
  kio_log_set_handler(catch_bad, NULL);
  for (int round = 0; round < 2; round++) {
    strcpy(key, "uttNaN");
    f.data[am.dim + 2] = NAN;
    ck_assert_int_eq(gacc_accumulate_batch_async(acc, 1, &u), KIO_OK);
    strcpy(key, "overwritten");
    f.data[am.dim + 2] = 0.0f;
    if (round == 0) {
      ck_assert_int_eq(gacc_wait(acc), KIO_ERR);
    } else {  /* reported by the next call, before it takes its batch */
      ck_assert_int_eq(gacc_accumulate_batch_async(acc, 1, &u), KIO_ERR);
    }
    ck_assert_int_eq(g_bad, round + 1);
    ck_assert_int_eq(gacc_wait(acc), KIO_OK);  /* reported once */
  }
  kio_log_set_handler(NULL, NULL);
  ck_assert_int_eq(g_bad_other_thread, 0);
  kio_matrix_free(&f);
  gacc_free(acc);
  kio_tmodel_free(&tm);
  kio_am_gmm_free(&am);
}
END_TEST

static int g_errors;
static void quiet(int level, const char *func, const char *file, int line,
                  const char *msg, void *user) {
  (void)func; (void)file; (void)line; (void)user;
  if (level == KIO_LOG_ERROR && strstr(msg, "uttG")) g_errors++;
}

/* Bad input is refused before anything reaches the device. */
START_TEST(gpu_bad_tid_is_error) {
  kio_tmodel tm;
  kio_am_gmm am;
  gacc_acc *acc;
  new_mono_gpu_acc(&tm, &am, &acc);
  ck_assert(gacc_is_gpu(acc));
  kio_matrix f = { 0, 0, NULL, 0 };
  kio_matrix_resize(&f, 2, am.dim);
  int32_t ali[2] = { 1, tm.num_tids + 1 };
  gacc_utt u = { "uttG", &f, ali };
  gacc_utt_result r;
  kio_log_set_handler(quiet, NULL);
  ck_assert_int_eq(gacc_accumulate_batch(acc, 1, &u, &r), KIO_ERR);
  ck_assert_int_eq(gacc_accumulate_batch_async(acc, 1, &u), KIO_ERR);
  kio_log_set_handler(NULL, NULL);
  ck_assert_int_eq(g_errors, 2);
  /* an empty utterance is fine */
  kio_matrix e = { 0, 0, NULL, 0 };
  gacc_utt ue = { "empty", &e, ali };
  ck_assert_int_eq(gacc_accumulate_batch(acc, 1, &ue, &r), KIO_OK);
  ck_assert_int_eq(r.frames, 0);
  ck_assert_int_eq(gacc_accumulate_batch_async(acc, 1, &ue), KIO_OK);
  double like;
  int64_t frames;
  ck_assert_int_eq(gacc_get_totals(acc, &like, &frames), KIO_OK);
  ck_assert(like == 0.0 && frames == 0);
  kio_matrix_free(&f);
  gacc_free(acc);
  kio_tmodel_free(&tm);
  kio_am_gmm_free(&am);
}
END_TEST

/* A job that lost the GPU service goes on from the service's statistics on
 * a context of its own (gpu-acc/acc-remote.c): statistics loaded into a
 * new device accumulator (gacc_cuda_load), then the rest of the
 * utterances, give the bits of one accumulator over all of them. */
/* Up to MAXU utterances of the mono fixtures (features, alignments). */
#include "tests/lib/acc-utts.h"

/* The statistics of two accumulators are the same bits (totals included). */
static void assert_same_stats(gacc_acc *a, gacc_acc *b, const char *what) {
  gacc_stats sa, sb;
  memset(&sa, 0, sizeof sa);
  memset(&sb, 0, sizeof sb);
  ck_assert_int_eq(gacc_get_stats(a, &sa), KIO_OK);
  ck_assert_int_eq(gacc_get_stats(b, &sb), KIO_OK);
  ck_assert_msg(sa.total_like == sb.total_like && sa.total_frames == sb.total_frames,
                "%s: totals differ", what);
  ck_assert_msg(stats_identical(&sa, &sb), "%s differ", what);
  gacc_stats_free(&sa);
  gacc_stats_free(&sb);
}

START_TEST(gpu_continues_from_loaded_stats) {
  select_gpu();
  acc_utts d;
  mono_load(&d);
  gacc_utt_result res[MAXU];
  int n = d.n, half = n / 2;
  gacc_acc *all, *first, *rest;
  ck_assert_int_eq(gacc_new(&all, "cpu", &d.tm, &d.am), KIO_OK);
  ck_assert_int_eq(gacc_accumulate_batch(all, n, d.u, res), KIO_OK);
  ck_assert_int_eq(gacc_new(&first, "cpu", &d.tm, &d.am), KIO_OK);
  ck_assert_int_eq(gacc_accumulate_batch(first, half, d.u, res), KIO_OK);
  ck_assert_int_eq(gacc_new(&rest, "gpu", &d.tm, &d.am), KIO_OK);
  ck_assert_int_eq(gacc_cuda_load(rest->cuda, &first->st), KIO_OK);
  rest->st.total_like = first->st.total_like;
  rest->st.total_frames = first->st.total_frames;
  ck_assert_int_eq(gacc_accumulate_batch(rest, n - half, d.u + half, res), KIO_OK);
  assert_same_stats(all, rest, "continued statistics and one run's");
  gacc_free(all);
  gacc_free(first);
  gacc_free(rest);
  acc_utts_free(&d);
}
END_TEST

/* A frame whose posterior is 0 leaves a sum as it is, -0 included: the
 * device adds +0 terms for such frames only where no sum starts at -0.
 * Features scaled up make many posteriors exactly 0; every sum starts at
 * -0 on both paths, which must then agree bit for bit (and keep some -0). */
START_TEST(gpu_zero_posteriors_keep_negative_zero) {
  select_gpu();
  acc_utts d;
  mono_load(&d);
  for (int i = 0; i < d.n; i++)
    for (size_t k = 0; k < (size_t)d.m[i].rows * (size_t)d.m[i].cols; k++) d.m[i].data[k] *= 8.0f;
  gacc_utt_result res[MAXU];
  gacc_acc *cpu, *gpu;
  ck_assert_int_eq(gacc_new(&cpu, "cpu", &d.tm, &d.am), KIO_OK);
  ck_assert_int_eq(gacc_new(&gpu, "gpu", &d.tm, &d.am), KIO_OK);
  gacc_stats *st = &cpu->st;
  const size_t gd = (size_t)st->num_gauss * (size_t)st->dim;
  for (size_t k = 0; k < gd; k++) st->mean_acc[k] = st->var_acc[k] = -0.0;
  for (int32_t k = 0; k < st->num_gauss; k++) st->occ[k] = -0.0;
  ck_assert_int_eq(gacc_cuda_load(gpu->cuda, st), KIO_OK);
  ck_assert_int_eq(gacc_accumulate_batch(cpu, d.n, d.u, res), KIO_OK);
  ck_assert_int_eq(gacc_accumulate_batch(gpu, d.n, d.u, res), KIO_OK);
  assert_same_stats(cpu, gpu, "statistics from -0 sums");
  /* Gaussians of pdfs that had frames, yet all of them posterior 0 */
  char *seen = calloc((size_t)st->num_pdfs, 1);
  for (int i = 0; i < d.n; i++)
    for (int32_t t = 0; t < d.m[i].rows; t++) seen[d.tm.tid2pdf[d.a[i][t]]] = 1;
  size_t neg0 = 0;
  for (int32_t j = 0; j < st->num_pdfs; j++)
    for (int32_t g = st->pdf_offset[j]; seen[j] && g < st->pdf_offset[j + 1]; g++)
      neg0 += st->occ[g] == 0.0 && signbit(st->occ[g]) &&
              signbit(st->mean_acc[(size_t)g * (size_t)st->dim]);
  free(seen);
  ck_assert_msg(neg0 > 0, "no Gaussian with frames kept its -0: the case was not exercised");
  gacc_free(cpu);
  gacc_free(gpu);
  acc_utts_free(&d);
}
END_TEST

/* One accumulator for two jobs in turn (the trainer's GPU path): after
 * gacc_reset_stats the second job's statistics and totals are those of a
 * fresh accumulator, bit for bit. */
START_TEST(gpu_reset_serves_another_job) {
  select_gpu();
  acc_utts d;
  mono_load(&d);
  gacc_utt_result res[MAXU];
  int half = d.n / 2;
  gacc_acc *shared, *fresh;
  ck_assert_int_eq(gacc_new(&shared, "gpu", &d.tm, &d.am), KIO_OK);
  ck_assert_int_eq(gacc_new(&fresh, "gpu", &d.tm, &d.am), KIO_OK);
  ck_assert_int_eq(gacc_accumulate_batch(shared, half, d.u, res), KIO_OK);
  gacc_stats s1, s2, sf;
  memset(&s1, 0, sizeof s1);
  memset(&s2, 0, sizeof s2);
  memset(&sf, 0, sizeof sf);
  ck_assert_int_eq(gacc_get_stats(shared, &s1), KIO_OK);
  ck_assert_int_eq(gacc_reset_stats(shared), KIO_OK);
  ck_assert_int_eq(gacc_accumulate_batch(shared, d.n - half, d.u + half, res), KIO_OK);
  ck_assert_int_eq(gacc_accumulate_batch(fresh, d.n - half, d.u + half, res), KIO_OK);
  ck_assert_int_eq(gacc_get_stats(shared, &s2), KIO_OK);
  ck_assert_int_eq(gacc_get_stats(fresh, &sf), KIO_OK);
  ck_assert(s1.total_frames > 0 && s2.total_frames > 0);
  ck_assert(s2.total_like == sf.total_like && s2.total_frames == sf.total_frames);
  ck_assert_msg(stats_identical(&s2, &sf), "statistics after a reset differ from a fresh run's");
  double like, like_f;
  int64_t frames, frames_f;
  ck_assert_int_eq(gacc_get_totals(shared, &like, &frames), KIO_OK);
  ck_assert_int_eq(gacc_get_totals(fresh, &like_f, &frames_f), KIO_OK);
  ck_assert(like == like_f && frames == frames_f);
  gacc_timing tm;
  gacc_get_timing(shared, &tm);
  ck_assert_int_eq(tm.batches, 2);
  ck_assert_int_eq(tm.frames, (long)(s1.total_frames + s2.total_frames));
  gacc_stats_free(&s1);
  gacc_stats_free(&s2);
  gacc_stats_free(&sf);
  gacc_free(shared);
  gacc_free(fresh);
  acc_utts_free(&d);
}
END_TEST

/* The trainer's device path: accumulators side by side on threads, each
 * with host threads of its own (gacc_set_host_threads), each serving
 * several jobs in turn (fetch, reset): every job's statistics and totals are
 * those of a fresh accumulator given that job alone, bit for bit. */
enum { SIDE_JOBS = 5, SIDE_ACCS = 2 };
typedef struct {
  const acc_utts *d;
  gacc_acc *acc;
  int first, rc;            /* jobs first, first + SIDE_ACCS, ... */
  gacc_stats st[SIDE_JOBS];
} side_worker;

static void side_job_range(const acc_utts *d, int j, int *lo, int *n) {
  *lo = d->n * j / SIDE_JOBS;
  *n = d->n * (j + 1) / SIDE_JOBS - *lo;
}

static void *side_main(void *arg) {
  side_worker *w = arg;
  gacc_utt_result res[MAXU];
  w->rc = KIO_OK;
  for (int j = w->first; j < SIDE_JOBS && w->rc == KIO_OK; j += SIDE_ACCS) {
    int lo, n;
    side_job_range(w->d, j, &lo, &n);
    if (gacc_accumulate_batch(w->acc, n, w->d->u + lo, res) != KIO_OK ||
        gacc_get_stats(w->acc, &w->st[j]) != KIO_OK || gacc_reset_stats(w->acc) != KIO_OK)
      w->rc = KIO_ERR;
  }
  return NULL;
}

START_TEST(gpu_side_by_side_jobs) {
  select_gpu();
  acc_utts d;
  mono_load(&d);
  side_worker w[SIDE_ACCS];
  memset(w, 0, sizeof w);
  pthread_t th[SIDE_ACCS];
  for (int k = 0; k < SIDE_ACCS; k++) {
    w[k].d = &d;
    w[k].first = k;
    ck_assert_int_eq(gacc_new(&w[k].acc, "gpu", &d.tm, &d.am), KIO_OK);
    gacc_set_host_threads(w[k].acc, k + 2);  /* 2 and 3 threads */
    ck_assert_int_eq(pthread_create(&th[k], NULL, side_main, &w[k]), 0);
  }
  for (int k = 0; k < SIDE_ACCS; k++) {
    pthread_join(th[k], NULL);
    ck_assert_int_eq(w[k].rc, KIO_OK);
    gacc_timing tm;
    gacc_get_timing(w[k].acc, &tm);
    ck_assert_int_eq(tm.host_threads, k + 2);
  }
  gacc_utt_result res[MAXU];
  for (int j = 0; j < SIDE_JOBS; j++) {
    int lo, n;
    side_job_range(&d, j, &lo, &n);
    gacc_acc *fresh;
    ck_assert_int_eq(gacc_new(&fresh, "gpu", &d.tm, &d.am), KIO_OK);
    ck_assert_int_eq(gacc_accumulate_batch(fresh, n, d.u + lo, res), KIO_OK);
    gacc_stats sf;
    memset(&sf, 0, sizeof sf);
    ck_assert_int_eq(gacc_get_stats(fresh, &sf), KIO_OK);
    const gacc_stats *sj = &w[j % SIDE_ACCS].st[j];
    ck_assert(sf.total_frames > 0);
    ck_assert(sj->total_like == sf.total_like && sj->total_frames == sf.total_frames);
    ck_assert_msg(stats_identical(sj, &sf), "job %d: side by side differs from alone", j);
    gacc_stats_free(&sf);
    gacc_free(fresh);
  }
  for (int k = 0; k < SIDE_ACCS; k++) {
    for (int j = 0; j < SIDE_JOBS; j++) gacc_stats_free(&w[k].st[j]);
    gacc_free(w[k].acc);
  }
  acc_utts_free(&d);
}
END_TEST

/* The service's pooled accumulator, the trainer's kept ones (gacc_rebind):
 * rebound to more pdfs and Gaussians (tri1 after mono), to fewer (mono),
 * to the same model, its statistics and totals are a fresh accumulator's,
 * bit for bit, though its earlier ones were not zero; fetched each time
 * into one gacc_stats (reshaped, as the trainer's per-job statistics) they
 * are those fetched into fresh ones, offsets included; another dimension
 * is refused. */
static void rebind_check(const char *backend) {
  acc_utts a, b;
  utts_load(&a, "models/mono/final.mdl", "ark:feats/delta.ark", "ark:kaldi/mono/ali.ark");
  utts_load(&b, "models/tri1/final.mdl", "ark:feats/delta.ark", "ark:kaldi/tri1/ali.ark");
  ck_assert_int_eq(a.am.dim, b.am.dim);
  ck_assert_int_lt(a.am.num_pdfs, b.am.num_pdfs);
  gacc_utt_result res[MAXU];
  gacc_acc *pooled, *fa, *fb;
  ck_assert_int_eq(gacc_new(&pooled, backend, &a.tm, &a.am), KIO_OK);
  ck_assert_int_eq(gacc_new(&fa, backend, &a.tm, &a.am), KIO_OK);
  ck_assert_int_eq(gacc_new(&fb, backend, &b.tm, &b.am), KIO_OK);
  ck_assert_int_eq(gacc_accumulate_batch(fa, a.n, a.u, res), KIO_OK);
  ck_assert_int_eq(gacc_accumulate_batch(fb, b.n, b.u, res), KIO_OK);
  ck_assert_int_eq(gacc_accumulate_batch(pooled, a.n / 2, a.u, res), KIO_OK);
  const acc_utts *order[] = {&b, &a, &a, &b};
  gacc_acc *fresh[] = {fb, fa, fa, fb};
  gacc_stats kept = {0};  /* reused: first holding the half job's statistics */
  ck_assert_int_eq(gacc_get_stats(pooled, &kept), KIO_OK);
  for (int k = 0; k < 4; k++) {
    const acc_utts *d = order[k];
    gacc_unbind(pooled);
    ck_assert_int_eq(gacc_rebind(pooled, &d->tm, &d->am, k == 2), KIO_OK);
    ck_assert_int_eq(gacc_accumulate_batch(pooled, d->n, d->u, res), KIO_OK);
    gacc_stats fs = {0};
    ck_assert_int_eq(gacc_get_stats(pooled, &kept), KIO_OK);
    ck_assert_int_eq(gacc_get_stats(fresh[k], &fs), KIO_OK);
    ck_assert_msg(kept.num_pdfs == fs.num_pdfs && stats_identical(&kept, &fs) &&
                      !memcmp(kept.pdf_offset, fs.pdf_offset,
                              sizeof(int32_t) * ((size_t)fs.num_pdfs + 1)),
                  "step %d: statistics fetched into reused ones differ from fresh ones'", k);
    gacc_stats_free(&fs);
    assert_same_stats(pooled, fresh[k], k == 0 ? "rebound to more Gaussians"
                                        : k == 1 ? "rebound to fewer Gaussians"
                                        : k == 2 ? "rebound to the same model"
                                                 : "rebound to more Gaussians again");
    double l1, l2;
    int64_t f1, f2;
    ck_assert_int_eq(gacc_get_totals(pooled, &l1, &f1), KIO_OK);
    ck_assert_int_eq(gacc_get_totals(fresh[k], &l2, &f2), KIO_OK);
    ck_assert(l1 == l2 && f1 == f2 && f1 > 0);
  }
  kio_tmodel tm2 = {0};
  kio_am_gmm am2 = {0};
  ck_assert_int_eq(kio_model_read("models/tri2/final.mdl", &tm2, &am2), KIO_OK);
  ck_assert_int_ne(am2.dim, a.am.dim);
  gacc_unbind(pooled);
  kio_log_set_handler(quiet, NULL);
  ck_assert_int_eq(gacc_rebind(pooled, &tm2, &am2, 0), KIO_ERR);
  kio_log_set_handler(NULL, NULL);
  gacc_stats_free(&kept);
  gacc_free(pooled);
  gacc_free(fa);
  gacc_free(fb);
  kio_tmodel_free(&tm2);
  kio_am_gmm_free(&am2);
  acc_utts_free(&a);
  acc_utts_free(&b);
}

START_TEST(gpu_rebind_equals_fresh) {
  select_gpu();
  rebind_check("gpu");
}
END_TEST

START_TEST(cpu_rebind_equals_fresh) { rebind_check("cpu"); }
END_TEST

/* The per-frame host work (pdf lookup, counting sort, likelihoods, checks)
 * on 1, 2, 3 and 7 threads of the accumulator's pool: the CPU path's
 * statistics, totals and per-utterance likelihoods bit for bit, with
 * batches of one utterance, of a few and of everything, through the
 * synchronous and the asynchronous entry. */
START_TEST(host_threads_gpu_equals_cpu) {
  static const char *const threads[] = {"1", "2", "3", "7"};
  static const char *const m[][3] = {
    {"models/mono/final.mdl", "ark:noisy/delta.ark", "ark:noisy/mono.ali.ark"},
    {"models/tri2/final.mdl", "ark:feats/lda.ark", "ark:kaldi/tri2/ali.ark"}};
  static const int batch[] = {1, 5, 1000};
  select_gpu();
  for (int k = 0; k < 2; k++) {
    gacc_stats c;
    run_info rc;
    ck_assert_int_eq(run_acc("cpu", m[k][0], m[k][1], m[k][2], 1, &c, &rc), KIO_OK);
    for (size_t t = 0; t < sizeof threads / sizeof threads[0]; t++) {
      kio_setting_override(KIO_SET_DEV_ACC_HOST_THREADS, threads[t]);
      for (int b = 0; b < 3; b++)
        for (int async = 0; async < 2; async++) {
          gacc_stats g;
          run_info rg;
          ck_assert_int_eq(run_acc_mode("gpu", m[k][0], m[k][1], m[k][2], batch[b], async, &g,
                                        &rg), KIO_OK);
          ck_assert_int_eq(rc.done, rg.done);
          ck_assert_msg(rc.tot_like == rg.tot_like && rc.tot_t == rg.tot_t,
                        "%s, %s threads, batch %d%s: utterance likelihoods %.17g vs the "
                        "CPU's %.17g", m[k][0], threads[t], batch[b], async ? " async" : "",
                        rg.tot_like, rc.tot_like);
          ck_assert_msg(c.total_like == g.total_like && c.total_frames == g.total_frames,
                        "%s, %s threads, batch %d: total_like %.17g vs the CPU's %.17g",
                        m[k][0], threads[t], batch[b], g.total_like, c.total_like);
          ck_assert_msg(stats_identical(&g, &c), "%s, %s threads, batch %d%s: statistics not "
                        "bit-identical to the CPU's", m[k][0], threads[t], batch[b],
                        async ? " async" : "");
          gacc_stats_free(&g);
        }
    }
    gacc_stats_free(&c);
  }
  kio_setting_override(KIO_SET_DEV_ACC_HOST_THREADS, NULL);
}
END_TEST

/* The checks and the likelihoods run on several threads, but the ERROR
 * names the first bad utterance of the batch and its first bad frame, as
 * one thread finds them. */
static char g_first_err[512];
static int g_n_err;
static void first_error(int level, const char *func, const char *file, int line,
                        const char *msg, void *user) {
  (void)func; (void)file; (void)line; (void)user;
  if (level != KIO_LOG_ERROR) return;
  if (!g_n_err++) snprintf(g_first_err, sizeof g_first_err, "%s", msg);
}

START_TEST(host_threads_first_error) {
  select_gpu();
  kio_setting_override(KIO_SET_DEV_ACC_HOST_THREADS, "4");
  acc_utts d;
  mono_load(&d);
  ck_assert_int_ge(d.n, 32);
  gacc_utt_result res[MAXU];
  char want[256];
  for (int kind = 0; kind < 2; kind++) {
    gacc_acc *acc;
    ck_assert_int_eq(gacc_new(&acc, "gpu", &d.tm, &d.am), KIO_OK);
    int32_t save[2][2];
    const int uu[2] = {9, 29}, ff[2] = {5, 2};
    for (int e = 0; e < 2; e++) {
      int u = uu[e], f = ff[e];
      ck_assert_int_gt(d.m[u].rows, f);
      if (kind == 0) {  /* a transition-id out of range */
        save[e][0] = d.a[u][f];
        d.a[u][f] = d.tm.num_tids + 1;
      } else {  /* an invalid log-likelihood */
        memcpy(&save[e][0], &d.m[u].data[(size_t)f * d.am.dim], sizeof(float));
        d.m[u].data[(size_t)f * d.am.dim] = NAN;
      }
    }
    g_n_err = 0;
    kio_log_set_handler(first_error, NULL);
    ck_assert_int_eq(gacc_accumulate_batch(acc, d.n, d.u, res), KIO_ERR);
    kio_log_set_handler(NULL, NULL);
    ck_assert_int_eq(g_n_err, 1);
    if (kind == 0)
      snprintf(want, sizeof want, "at frame 5 of the alignment for utterance %s", d.keys[9]);
    else
      snprintf(want, sizeof want, "frame 5 of utterance %s", d.keys[9]);
    ck_assert_msg(strstr(g_first_err, want), "got '%s', want '%s'", g_first_err, want);
    for (int e = 0; e < 2; e++) {
      int u = uu[e], f = ff[e];
      if (kind == 0) d.a[u][f] = save[e][0];
      else memcpy(&d.m[u].data[(size_t)f * d.am.dim], &save[e][0], sizeof(float));
    }
    gacc_free(acc);
  }
  acc_utts_free(&d);
  kio_setting_override(KIO_SET_DEV_ACC_HOST_THREADS, NULL);
}
END_TEST

/* Resident features (gacc_dev_feats): batches read from the device copy
 * give the uploaded batches' statistics bit for bit; a batch with one
 * matrix outside the copy is uploaded as before. */
START_TEST(gpu_dev_feats_equal_upload) {
  select_gpu();
  acc_utts d;
  mono_load(&d);
  gacc_utt_result res[MAXU];
  int half = d.n / 2;
  gacc_dev_feats *f = NULL;
  char why[256];
  /* the first half resident, in reverse order (the device rows need not
   * follow the batches' order) */
  kio_matrix rev[MAXU];
  for (int i = 0; i < half; i++) rev[i] = d.m[half - 1 - i];
  ck_assert_msg(gacc_dev_feats_new(&f, half, rev, why, sizeof why) == KIO_OK, "%s", why);
  const float *base;
  const int64_t *row_off;
  gacc_dev_feats_rows(f, &base, &row_off);
  ck_assert(base != NULL && row_off[0] == 0 && row_off[1] == rev[0].rows);
  gacc_acc *up, *dev;
  ck_assert_int_eq(gacc_new(&up, "gpu", &d.tm, &d.am), KIO_OK);
  ck_assert_int_eq(gacc_new(&dev, "gpu", &d.tm, &d.am), KIO_OK);
  gacc_use_dev_feats(dev, f);
  /* all resident, then a batch that reaches past them */
  ck_assert_int_eq(gacc_accumulate_batch(up, half, d.u, res), KIO_OK);
  ck_assert_int_eq(gacc_accumulate_batch(dev, half, d.u, res), KIO_OK);
  ck_assert_int_eq(gacc_accumulate_batch(up, d.n - half + 1, d.u + half - 1, res), KIO_OK);
  ck_assert_int_eq(gacc_accumulate_batch(dev, d.n - half + 1, d.u + half - 1, res), KIO_OK);
  assert_same_stats(up, dev, "statistics from uploaded and resident features");
  gacc_timing tu, td;
  gacc_get_timing(up, &tu);
  gacc_get_timing(dev, &td);
  ck_assert_int_eq(tu.resident, 0);
  ck_assert_int_eq(td.resident, 1);  /* the first batch; the second was uploaded */
  ck_assert_int_eq(td.batches, 2);
  gacc_free(up);
  gacc_free(dev);
  gacc_dev_feats_free(f);
  acc_utts_free(&d);
}
END_TEST

Suite *gpu_acc_suite(void) {
  Suite *s = suite_create("gpu_acc");
  TCase *t = tcase_create("gpu");
  tcase_set_timeout(t, 300);
  tcase_add_test(t, mono_gpu_equals_cpu);
  tcase_add_test(t, tri2_gpu_equals_cpu);
  tcase_add_test(t, noisy_gpu_equals_cpu);
  tcase_add_test(t, mono4_gpu_equals_cpu);
  tcase_add_test(t, mono8_gpu_equals_cpu);
  tcase_add_loop_test(t, profiles_gpu_equals_cpu, 0, KIO_BLAS_NPROF);
  tcase_add_loop_test(t, kernels_gpu_equals_cpu, 0, 2);
  tcase_add_test(t, gpu_batches_agree);
  tcase_add_test(t, gpu_bad_tid_is_error);
  tcase_add_test(t, gpu_async_equals_sync);
  tcase_add_test(t, gpu_async_bad_like_logged_at_wait);
  tcase_add_test(t, gpu_continues_from_loaded_stats);
  tcase_add_test(t, gpu_zero_posteriors_keep_negative_zero);
  tcase_add_test(t, gpu_reset_serves_another_job);
  tcase_add_test(t, gpu_side_by_side_jobs);
  tcase_add_test(t, gpu_rebind_equals_fresh);
  tcase_add_test(t, cpu_rebind_equals_fresh);
  tcase_add_test(t, gpu_dev_feats_equal_upload);
  tcase_add_test(t, host_threads_gpu_equals_cpu);
  tcase_add_test(t, host_threads_first_error);
  suite_add_tcase(s, t);
  return s;
}


int main(void) {
  if (!tu_gpu_available()) return TU_EXIT_SKIP;
  /* the fixtures' Kaldi rounds as the "skx" profile (base/matrix/blas-profile.h) */
  kio_setting_override(KIO_SET_BLAS_PROFILE, "skx");
  return tu_run_suite(gpu_acc_suite());
}
