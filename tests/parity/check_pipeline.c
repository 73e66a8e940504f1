/* gpu-align/align-pipeline: the batch pipeline on the CPU against Kaldi's
 * gmm-align-compiled outputs (kaldi/mono, noisy): the per-batch hook sees
 * every aligned utterance once, in input order, with Kaldi's alignment;
 * Kaldi's counters; a failing hook stops the run; the aligner's phase
 * times are filled. (Log lines and exit codes: tests/cli/align*.sh.) */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tests/lib/test-util.h"
#include "base/sys/log.h"
#include "base/io/table.h"
#include "gpu-align/align-pipeline.h"
#include "gpu-align/gpu-align.h"

#define MONO_GRAPHS "ark:gunzip -c graphs/mono.fsts.gz|"

static void mono_cfg(galign_pipeline_cfg *c, const char *feats, const char *ali, int batch) {
  memset(c, 0, sizeof *c);
  galign_opts_default(&c->opts);
  c->opts.transition_scale = 1.0f;
  c->opts.acoustic_scale = 0.1f;
  c->opts.self_loop_scale = 0.1f;
  c->opts.beam = 10.0f;
  c->opts.retry_beam = 40.0f;
  c->model_rxfilename = "models/mono/final.mdl";
  c->graphs_rspecifier = MONO_GRAPHS;
  c->feats_rspecifier = feats;
  c->ali_wspecifier = ali;
  c->use_gpu = GALIGN_GPU_NO;
  c->batch_size = batch;
}

/* What the hook saw: keys and alignments in call order. */
typedef struct {
  int calls, max_n, total, fail_at;
  char *keys[64];
  kio_int_vec ali[64];
} seen;

static int record(void *user, int n, const galign_pipeline_utt *u) {
  seen *s = user;
  s->calls++;
  if (n > s->max_n) s->max_n = n;
  for (int i = 0; i < n; i++) {
    ck_assert_int_lt(s->total, 64);
    ck_assert(u[i].res->ok);
    ck_assert_int_eq(u[i].res->num_frames, u[i].feats->rows);
    s->keys[s->total] = strdup(u[i].key);
    s->ali[s->total].n = u[i].feats->rows;
    s->ali[s->total].v = malloc((size_t)u[i].feats->rows * sizeof(int32_t));
    memcpy(s->ali[s->total].v, u[i].res->ali, (size_t)u[i].feats->rows * sizeof(int32_t));
    s->total++;
  }
  if (s->calls == s->fail_at) {
    KIO_ERROR("hook fails on purpose");
    return KIO_ERR;
  }
  return KIO_OK;
}

static void seen_free(seen *s) {
  for (int i = 0; i < s->total; i++) { free(s->keys[i]); free(s->ali[i].v); }
}

/* The hook's utterances equal Kaldi's archive, key by key, in order. */
static void check_against(const seen *s, const char *rspec, int want) {
  kio_seq_reader *r;
  ck_assert_int_eq(kio_seq_open(&r, rspec, &kio_int_vec_holder), KIO_OK);
  int k = 0;
  for (; !kio_seq_done(r); kio_seq_next(r), k++) {
    ck_assert_int_lt(k, s->total);
    ck_assert_str_eq(kio_seq_key(r), s->keys[k]);
    const kio_int_vec *a = kio_seq_value(r);
    ck_assert_ptr_nonnull(a);
    ck_assert_int_eq(a->n, s->ali[k].n);
    ck_assert(memcmp(a->v, s->ali[k].v, (size_t)a->n * sizeof(int32_t)) == 0);
  }
  ck_assert_int_eq(k, want);
  ck_assert_int_eq(s->total, want);
  kio_seq_close(r);
}

START_TEST(test_hook_mono) {
  const char *out = tu_tmp_path("mono.ali");
  char wspec[512];
  snprintf(wspec, sizeof wspec, "ark:%s", out);
  galign_pipeline_cfg cfg;
  mono_cfg(&cfg, "ark:feats/delta.ark", wspec, 7);
  galign_pipeline *p;
  ck_assert_int_eq(galign_pipeline_open(&p, &cfg), KIO_OK);
  ck_assert(!galign_pipeline_is_gpu(p));
  seen s = {0};
  ck_assert_int_eq(galign_pipeline_run(p, record, &s), KIO_OK);
  galign_pipeline_counts n;
  galign_pipeline_get_counts(p, &n);
  /* kaldi/mono/align.log: Done 40, errors on 0; -96.4077 over 14158 frames */
  ck_assert_int_eq(n.num_done, 40);
  ck_assert_int_eq(n.num_err, 0);
  ck_assert_int_eq(n.num_retry, 0);
  ck_assert_int_eq((int)n.frame_count, 14158);
  ck_assert(fabs(n.tot_like / (double)n.frame_count + 96.4077) < 1e-3);
  ck_assert_int_eq(s.calls, 6);  /* ceil(40 / 7) */
  ck_assert_int_eq(s.max_n, 7);
  check_against(&s, "ark:kaldi/mono/ali.ark", 40);
  ck_assert_int_eq(galign_pipeline_close(p), KIO_OK);
  galign_pipeline_free(p);
  /* the archive written on the way is Kaldi's */
  ck_assert(tu_files_equal(out, "kaldi/mono/ali.ark"));
  seen_free(&s);
}
END_TEST

START_TEST(test_noisy_counts_and_stats) {
  galign_pipeline_cfg cfg;
  mono_cfg(&cfg, "ark:noisy/delta.ark", "", 3);
  galign_pipeline *p;
  ck_assert_int_eq(galign_pipeline_open(&p, &cfg), KIO_OK);
  seen s = {0};
  ck_assert_int_eq(galign_pipeline_run(p, record, &s), KIO_OK);
  galign_pipeline_counts n;
  galign_pipeline_get_counts(p, &n);
  /* noisy/mono.align.log: Retried 10 out of 40; Done 39, errors on 1; 13895 frames */
  ck_assert_int_eq(n.num_done, 39);
  ck_assert_int_eq(n.num_err, 1);
  ck_assert_int_eq(n.num_retry, 10);
  ck_assert_int_eq((int)n.frame_count, 13895);
  ck_assert_int_eq(s.total, 39);
  ck_assert_int_le(s.max_n, 3);
  galign_aligner_stats st;
  galign_aligner_get_stats(galign_pipeline_aligner(p), &st);
  ck_assert(st.loglike_s > 0.0);
  ck_assert(st.viterbi_s > 0.0);
  ck_assert(st.backtrace_s > 0.0);
  ck_assert(st.copy_s == 0.0);
  ck_assert_int_eq(galign_pipeline_close(p), KIO_OK);
  galign_pipeline_free(p);
  seen_free(&s);
}
END_TEST

/* A hook that fails stops the run after that batch. */
START_TEST(test_hook_error) {
  galign_pipeline_cfg cfg;
  mono_cfg(&cfg, "ark:feats/delta.ark", "", 5);
  galign_pipeline *p;
  ck_assert_int_eq(galign_pipeline_open(&p, &cfg), KIO_OK);
  seen s = {0};
  s.fail_at = 2;
  int e0 = kio_log_num_errors();
  ck_assert_int_eq(galign_pipeline_run(p, record, &s), KIO_ERR);
  ck_assert_int_gt(kio_log_num_errors(), e0);
  ck_assert_int_eq(s.calls, 2);
  ck_assert_int_eq(s.total, 10);
  galign_pipeline_counts n;
  galign_pipeline_get_counts(p, &n);
  ck_assert_int_eq(n.num_done, 10);
  galign_pipeline_free(p);
  seen_free(&s);
}
END_TEST

/* Fatal errors: a missing model; a feature dimension that is not the
 * model's (the hook never sees an utterance). */
START_TEST(test_fatal) {
  galign_pipeline_cfg cfg;
  mono_cfg(&cfg, "ark:feats/delta.ark", "", 4);
  cfg.model_rxfilename = "models/none.mdl";
  galign_pipeline *p;
  ck_assert_int_eq(galign_pipeline_open(&p, &cfg), KIO_ERR);
  galign_pipeline_free(p);
  mono_cfg(&cfg, "ark:feats/lda.ark", "", 4);
  ck_assert_int_eq(galign_pipeline_open(&p, &cfg), KIO_OK);
  seen s = {0};
  ck_assert_int_eq(galign_pipeline_run(p, record, &s), KIO_ERR);
  ck_assert_int_eq(s.calls, 0);
  galign_pipeline_free(p);
}
END_TEST

int main(void) {
  Suite *s = suite_create("pipeline");
  TCase *tc = tcase_create("cpu");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_hook_mono);
  tcase_add_test(tc, test_noisy_counts_and_stats);
  tcase_add_test(tc, test_hook_error);
  tcase_add_test(tc, test_fatal);
  suite_add_tcase(s, tc);
  return tu_run_suite(s);
}
