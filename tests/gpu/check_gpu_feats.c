/* The device feature chain (gpu-feats) against the CPU in-process chain
 * (base/feat/feat-chain.c, itself bit-identical to Kaldi's programs) and, where
 * the fixtures have them, Kaldi's own archives: deltas, CVN, reverse CVN,
 * LDA (splice + transform) with the hsw profile at 1 and 2 OpenBLAS
 * threads and the skx profile, uncompressed float input (the fixtures'
 * 13-dim features), odd sizes (T = 1, T below the delta window, every
 * compression format), one to all utterances per batch, dropped utterances
 * (missing CMVN stats). Byte for byte. Skips (exit 77) without a usable
 * GPU; tests/emu/run.sh runs it on the host emulation of CUDA. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/sys/settings.h"
#include "base/matrix/blas-profile.h"
#include "base/matrix/compressed-matrix.h"
#include "device/cuda-util.h"
#include "base/feat/feat.h"
#include "base/io/io.h"
#include "base/sys/log.h"
#include "base/matrix/matrix.h"
#include "base/io/table.h"
#include "gpu-feats/gpu-feats.h"
#include "tests/lib/test-util.h"

typedef struct {
  int n, cap;
  char **keys;
  kio_matrix *m;
} mats;

static void mats_add(mats *s, const char *key, const kio_matrix *m) {
  if (s->n == s->cap) {
    s->cap = s->cap ? 2 * s->cap : 64;
    s->keys = realloc(s->keys, sizeof(char *) * s->cap);
    s->m = realloc(s->m, sizeof(kio_matrix) * s->cap);
    ck_assert(s->keys && s->m);
  }
  s->keys[s->n] = strdup(key);
  memset(&s->m[s->n], 0, sizeof(kio_matrix));
  ck_assert_int_eq(kio_matrix_resize(&s->m[s->n], m->rows, m->cols), KIO_OK);
  memcpy(s->m[s->n].data, m->data, sizeof(float) * (size_t)m->rows * m->cols);
  s->n++;
}

static void mats_free(mats *s) {
  for (int i = 0; i < s->n; i++) {
    free(s->keys[i]);
    kio_matrix_free(&s->m[i]);
  }
  free(s->keys);
  free(s->m);
  memset(s, 0, sizeof *s);
}

static void read_all(const char *rspec, mats *out) {
  kio_seq_reader *r = NULL;
  ck_assert_int_eq(kio_seq_open(&r, rspec, &kio_matrix_holder), KIO_OK);
  for (; !kio_seq_done(r); kio_seq_next(r)) {
    const kio_matrix *m = kio_seq_value(r);
    ck_assert(m);
    mats_add(out, kio_seq_key(r), m);
  }
  ck_assert_int_eq(kio_seq_close(r), KIO_OK);
}

static void expect_same(const char *what, const char *key, const kio_matrix *a, const kio_matrix *b) {
  ck_assert_msg(a->rows == b->rows && a->cols == b->cols, "%s %s: %dx%d vs %dx%d", what, key,
                a->rows, a->cols, b->rows, b->cols);
  size_t n = (size_t)a->rows * a->cols;
  for (size_t i = 0; i < n; i++)
    if (memcmp(&a->data[i], &b->data[i], sizeof(float)))
      ck_abort_msg("%s %s: element (%zu, %zu): %.9g vs %.9g", what, key, i / a->cols,
                   i % a->cols, a->data[i], b->data[i]);
}

/* Runs pipe (a features rspecifier's command without "ark:" and "|") on the
 * device in batches of bs utterances (0: all) and compares every output
 * with the CPU chain's, and with ref (an archive of Kaldi's) if not NULL.
 * Returns the number of utterances dropped. */
static int run_case(const char *pipe, int bs, const char *ref) {
  char rspec[2048];
  snprintf(rspec, sizeof rspec, "ark:%s |", pipe);
  mats cpu = {0};
  read_all(rspec, &cpu);
  if (ref) {
    mats k = {0};
    read_all(ref, &k);
    ck_assert_int_eq(k.n, cpu.n);
    for (int i = 0; i < k.n; i++) {
      ck_assert_str_eq(k.keys[i], cpu.keys[i]);
      expect_same("CPU chain vs Kaldi", k.keys[i], &cpu.m[i], &k.m[i]);
    }
    mats_free(&k);
  }
  kio_feat_plan plan;
  ck_assert_msg(kio_feat_parse(pipe, &plan) == KIO_OK, "parse: %s", kio_last_error());
  ck_assert_msg(gfeat_supported(&plan), "unsupported: %s", kio_last_error());
  gfeat_chain *c = NULL;
  ck_assert_int_eq(gfeat_chain_open(&plan, &c), KIO_OK);
  gfeat_cuda *dev = NULL;
  ck_assert_int_eq(gfeat_cuda_new(&dev, c, NULL), KIO_OK);
  gfeat_batch *b = gfeat_batch_new();
  kio_seq_reader *r = NULL;
  ck_assert_int_eq(kio_seq_open(&r, plan.input, &gfeat_raw_holder), KIO_OK);
  int next = 0, dropped = 0, nb = 0;
  char **bkeys = calloc(cpu.n + 1, sizeof(char *));
  kio_matrix *out = calloc(cpu.n + 1, sizeof(kio_matrix));
  for (;;) {
    int done = kio_seq_done(r);
    if (!done) {
      const gfeat_raw *raw = kio_seq_value(r);
      ck_assert(raw);
      int rc = gfeat_batch_add(c, b, kio_seq_key(r), raw);
      ck_assert_int_ge(rc, 0);
      if (rc == GFEAT_DROPPED) dropped++;
      else bkeys[gfeat_batch_count(b) - 1] = strdup(kio_seq_key(r));
      kio_seq_next(r);
    }
    int n = gfeat_batch_count(b);
    if (n > 0 && (done || (bs > 0 && n >= bs))) {
      ck_assert_int_eq(gfeat_cuda_run_host(dev, b, out), KIO_OK);
      for (int i = 0; i < n; i++) {
        ck_assert_msg(next < cpu.n, "device has more utterances than the CPU chain");
        ck_assert_str_eq(bkeys[i], cpu.keys[next]);
        expect_same("device vs CPU chain", bkeys[i], &out[i], &cpu.m[next]);
        next++;
        free(bkeys[i]);
      }
      gfeat_batch_clear(b);
      nb++;
    }
    if (done) break;
  }
  ck_assert_int_eq(next, cpu.n);
  ck_assert_int_eq(kio_seq_close(r), KIO_OK);
  int64_t batches = 0, frames = 0;
  gfeat_cuda_stats(dev, &batches, &frames);
  ck_assert_int_eq(batches, nb);
  for (int i = 0; i < cpu.n + 1; i++) kio_matrix_free(&out[i]);
  free(out);
  free(bkeys);
  gfeat_batch_free(b);
  gfeat_cuda_free(dev);
  gfeat_chain_free(c);
  kio_feat_plan_free(&plan);
  mats_free(&cpu);
  return dropped;
}

#define CMVN "apply-cmvn --utt2spk=ark:featpipe/utt2spk scp:featpipe/cmvn.scp scp:featpipe/feats.scp ark:-"
#define SPLICE "splice-feats --left-context=3 --right-context=3 ark:- ark:-"

static void profile(const char *prof, const char *threads) {
  kio_setting_override(KIO_SET_BLAS_PROFILE, prof);
  kio_blas_profile_reset();
  kio_setting_override(KIO_SET_DEV_FEATS_BLAS_THREADS, threads);
  kio_gpu *g = NULL;
  ck_assert_int_eq(kio_gpu_job(&g, 0), KIO_OK);
}

/* Kaldi's references in featpipe/ were made on an AVX2 host: hsw. */
START_TEST(deltas_hsw) {
  profile("hsw", "1");
  ck_assert_int_eq(run_case(CMVN " | add-deltas ark:- ark:-", 0, "ark:featpipe/delta.ark"), 0);
  ck_assert_int_eq(run_case(CMVN " | add-deltas ark:- ark:-", 1, NULL), 0);
  ck_assert_int_eq(run_case(CMVN " | add-deltas ark:- ark:-", 5, NULL), 0);
}
END_TEST

START_TEST(cvn_reverse_hsw) {
  profile("hsw", "1");
  run_case("apply-cmvn --norm-vars=true --utt2spk=ark:featpipe/utt2spk scp:featpipe/cmvn.scp "
           "scp:featpipe/feats.scp ark:- | add-deltas --delta-order=1 --delta-window=3 ark:- ark:-",
           4, "ark:featpipe/cvn.ark");
  run_case("apply-cmvn --reverse=true --norm-vars=true --utt2spk=ark:featpipe/utt2spk "
           "scp:featpipe/cmvn.scp scp:featpipe/feats.scp ark:-", 0, "ark:featpipe/reverse.ark");
}
END_TEST

START_TEST(lda_hsw_1) {
  profile("hsw", "1");
  run_case(CMVN " | " SPLICE " | transform-feats featpipe/final.mat ark:- ark:-", 0,
           "ark:featpipe/lda1.ark");
  run_case(CMVN " | " SPLICE " | transform-feats featpipe/final.mat ark:- ark:-", 3, NULL);
}
END_TEST

START_TEST(lda_hsw_2) {
  profile("hsw", "2");
  run_case(CMVN " | " SPLICE " | transform-feats featpipe/final.mat ark:- ark:-", 0,
           "ark:featpipe/lda2.ark");
  run_case(CMVN " | " SPLICE " | transform-feats featpipe/final.mat ark:- ark:-", 7, NULL);
}
END_TEST

/* SAT: LDA+MLLT then per-speaker fMLLR (utt2spk); one speaker has no
 * transform (its utterances dropped, as transform-feats does). */
#define SAT CMVN " | " SPLICE " | transform-feats featpipe/final.mat ark:- ark:- | " \
  "transform-feats --utt2spk=ark:featpipe/utt2spk ark:featpipe/trans.ark ark:- ark:-"
START_TEST(sat_hsw_2) {
  profile("hsw", "2");
  ck_assert_int_gt(run_case(SAT, 0, "ark:featpipe/sat.ark"), 0);
  run_case(SAT, 5, NULL);
}
END_TEST

START_TEST(sat_skx) {
  profile("skx", "1");
  ck_assert_int_gt(run_case(SAT, 1, NULL), 0);
  run_case(SAT, 5, NULL);
}
END_TEST

START_TEST(skx) {
  profile("skx", "1");
  run_case(CMVN " | add-deltas ark:- ark:-", 0, NULL);
  run_case(CMVN " | " SPLICE " | transform-feats featpipe/final.mat ark:- ark:-", 2, NULL);
  run_case(CMVN " | copy-feats ark:- ark:- | " SPLICE, 0, NULL);
}
END_TEST

/* The other profiles (unfused chains; Prescott's and Nehalem's edge tiles
 * in the plan): device = CPU chain, at 2 and 16 OpenBLAS threads. _i:
 * snb, nhm, sse. */
START_TEST(profiles) {
  const char *p = kio_blas_profile_name(KIO_BLAS_SNB + _i);
  for (int th = 0; th < 2; th++) {
    profile(p, th ? "16" : "2");
    run_case(CMVN " | add-deltas ark:- ark:-", 3, NULL);
    run_case(CMVN " | " SPLICE " | transform-feats featpipe/final.mat ark:- ark:-", 5, NULL);
    ck_assert_int_gt(run_case(SAT, 4, NULL), 0);
  }
}
END_TEST

START_TEST(dropped) {
  profile("skx", "1");
  int d = run_case("apply-cmvn --utt2spk=ark:featpipe/utt2spk scp:featpipe/cmvn-miss.scp "
                   "scp:featpipe/feats.scp ark:- | add-deltas ark:- ark:-", 3, NULL);
  ck_assert_int_gt(d, 0);
}
END_TEST

/* The fixtures' features (an AVX-512 host's Kaldi: skx): their first 13
 * columns (uncompressed floats) through add-deltas and the tri2 LDA+MLLT
 * give feats/delta.ark and feats/lda.ark. */
START_TEST(fixtures_skx) {
  profile("skx", "1");
  const char *p13 = tu_tmp_path("feats13.ark");
  char cmd[4096];
  mats all = {0};
  read_all("ark:feats/delta.ark", &all);
  FILE *f = fopen(p13, "wb");
  ck_assert(f);
  for (int i = 0; i < all.n; i++) {
    kio_matrix m = {0};
    ck_assert_int_eq(kio_matrix_resize(&m, all.m[i].rows, 13), KIO_OK);
    for (int32_t t = 0; t < m.rows; t++)
      memcpy(m.data + (size_t)t * 13, all.m[i].data + (size_t)t * all.m[i].cols, 13 * sizeof(float));
    fprintf(f, "%s ", all.keys[i]);
    fwrite("\0B", 1, 2, f);
    ck_assert_int_eq(kio_matrix_write(f, 1, &m), KIO_OK);
    kio_matrix_free(&m);
  }
  fclose(f);
  mats_free(&all);
  snprintf(cmd, sizeof cmd, "add-deltas ark:%s ark:-", p13);
  run_case(cmd, 16, "ark:feats/delta.ark");
  snprintf(cmd, sizeof cmd,
           "splice-feats --left-context=3 --right-context=3 ark:%s ark:- | "
           "transform-feats models/tri2/final.mat ark:- ark:-", p13);
  run_case(cmd, 0, "ark:feats/lda.ark");
}
END_TEST

/* Odd sizes and every storage format: the first utterance of each
 * speaker cut to T = 1, 2, 3, 4, 7, 9, 13 frames, written as CM (auto: CM
 * above 8 rows, CM2 below), CM2, CM3 and uncompressed. */
static const char *write_odd(void) {
  mats src = {0};
  read_all("scp:featpipe/feats.scp", &src);
  const char *ark = tu_tmp_path("odd.ark"), *u2s = tu_tmp_path("odd.utt2spk");
  static char arkbuf[512], u2sbuf[512];
  snprintf(arkbuf, sizeof arkbuf, "%s", ark);
  snprintf(u2sbuf, sizeof u2sbuf, "%s", u2s);
  FILE *f = fopen(arkbuf, "wb"), *g = fopen(u2sbuf, "w");
  ck_assert(f && g);
  static const int lens[] = {1, 2, 3, 4, 7, 9, 13};
  static const int methods[] = {0, KIO_CM_AUTO, KIO_CM_TWO_BYTE_AUTO, KIO_CM_ONE_BYTE_AUTO};
  for (int i = 0; i < src.n; i += 4)
    for (size_t l = 0; l < sizeof lens / sizeof *lens; l++)
      for (size_t k = 0; k < sizeof methods / sizeof *methods; k++) {
        kio_matrix m = {0};
        int32_t T = lens[l] < src.m[i].rows ? lens[l] : src.m[i].rows;
        ck_assert_int_eq(kio_matrix_resize(&m, T, src.m[i].cols), KIO_OK);
        memcpy(m.data, src.m[i].data, sizeof(float) * (size_t)T * m.cols);
        char key[256], spk[256];
        snprintf(key, sizeof key, "%s-t%d-m%d", src.keys[i], T, methods[k]);
        snprintf(spk, sizeof spk, "%s", src.keys[i]);
        *strrchr(spk, '-') = '\0';
        fprintf(f, "%s ", key);
        fwrite("\0B", 1, 2, f);
        if (methods[k]) ck_assert_int_eq(kio_matrix_write_compressed(f, &m, methods[k]), KIO_OK);
        else ck_assert_int_eq(kio_matrix_write(f, 1, &m), KIO_OK);
        fprintf(g, "%s %s\n", key, spk);
        kio_matrix_free(&m);
      }
  fclose(f);
  fclose(g);
  mats_free(&src);
  return arkbuf;
}

START_TEST(odd_sizes) {
  const char *profs[] = {"skx", "cpl", "hsw", "sse", "nhm"};
  for (int p = 0; p < 5; p++) {
    /* the profile is read once per process: a child per profile */
    pid_t pid = fork();
    if (pid == 0) {
      profile(profs[p], "2");
      const char *ark = write_odd();
      const char *u2s = tu_tmp_path("odd.utt2spk");
      char u2sbuf[512], cmd[4096], wide[1024];
      snprintf(u2sbuf, sizeof u2sbuf, "%s", u2s);
      /* a transform of 13 x 41 = 533 inputs (affine, 23 rows): beyond
       * feat-gemm.c's model (one chain) and fewer frames per block; with
       * these short utterances SkylakeX's small-matrix kernel (both of its
       * reductions: 23 rows) */
      const char *wm = tu_tmp_path("wide.mat");
      kio_matrix w = {0};
      ck_assert_int_eq(kio_matrix_resize(&w, 23, 534), KIO_OK);
      for (int i = 0; i < 23 * 534; i++) w.data[i] = (float)((i * 7919) % 1001 - 500) / 4096.0f;
      FILE *wf = fopen(wm, "wb");
      ck_assert(wf);
      fwrite("\0B", 1, 2, wf);
      ck_assert_int_eq(kio_matrix_write(wf, 1, &w), KIO_OK);
      fclose(wf);
      kio_matrix_free(&w);
      snprintf(wide, sizeof wide, "splice-feats --left-context=20 --right-context=20 ark:- ark:- | "
               "transform-feats %s ark:- ark:-", wm);
      const char *tails[] = {
        "add-deltas ark:- ark:-",
        "add-deltas --delta-order=3 --delta-window=4 ark:- ark:-",
        SPLICE " | transform-feats featpipe/final.mat ark:- ark:-",
        "splice-feats --left-context=9 --right-context=1 ark:- ark:-",
        wide,
      };
      for (size_t t = 0; t < sizeof tails / sizeof *tails; t++) {
        snprintf(cmd, sizeof cmd,
                 "apply-cmvn --norm-vars=%s --utt2spk=ark:%s scp:featpipe/cmvn.scp ark:%s ark:- | %s",
                 t & 1 ? "true" : "false", u2sbuf, ark, tails[t]);
        run_case(cmd, t == 0 ? 0 : 5 + (int)t, NULL);
      }
      exit(0);
    }
    int st = 0;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "profile %s failed", profs[p]);
  }
}
END_TEST

START_TEST(unsupported) {
  kio_feat_plan plan;
  const char *no[] = {
    CMVN " | select-feats 0-5 ark:- ark:-",
    CMVN " | add-deltas --truncate=5 ark:- ark:-",
    CMVN " | add-deltas ark:- ark:- | apply-cmvn --utt2spk=ark:featpipe/utt2spk "
    "scp:featpipe/cmvn.scp ark:- ark:-",
  };
  for (size_t i = 0; i < sizeof no / sizeof *no; i++) {
    ck_assert_int_eq(kio_feat_parse(no[i], &plan), KIO_OK);
    ck_assert_msg(!gfeat_supported(&plan), "supported: %s", no[i]);
    kio_feat_plan_free(&plan);
  }
}
END_TEST

/* The host decompression equals compressed-matrix.c's (the kernels' model). */
START_TEST(raw_holder) {
  kio_seq_reader *a = NULL, *b = NULL;
  ck_assert_int_eq(kio_seq_open(&a, "scp:featpipe/feats.scp", &kio_matrix_holder), KIO_OK);
  ck_assert_int_eq(kio_seq_open(&b, "scp:featpipe/feats.scp", &gfeat_raw_holder), KIO_OK);
  kio_matrix m = {0};
  int n = 0;
  for (; !kio_seq_done(a); kio_seq_next(a), kio_seq_next(b), n++) {
    ck_assert(!kio_seq_done(b));
    const gfeat_raw *r = kio_seq_value(b);
    ck_assert(r && r->format == GFEAT_RAW_CM);
    ck_assert_int_eq(gfeat_raw_to_matrix(r, &m), KIO_OK);
    expect_same("raw holder", kio_seq_key(a), &m, kio_seq_value(a));
  }
  ck_assert_int_eq(n, 12);
  kio_matrix_free(&m);
  kio_seq_close(a);
  kio_seq_close(b);
}
END_TEST

static Suite *gpu_feats_suite(void) {
  Suite *s = suite_create("gpu_feats");
  TCase *t = tcase_create("host");
  tcase_add_test(t, unsupported);
  tcase_add_test(t, raw_holder);
  suite_add_tcase(s, t);
  t = tcase_create("device");
  tcase_set_timeout(t, 600);
  tcase_add_test(t, deltas_hsw);
  tcase_add_test(t, cvn_reverse_hsw);
  tcase_add_test(t, lda_hsw_1);
  tcase_add_test(t, lda_hsw_2);
  tcase_add_test(t, skx);
  tcase_add_test(t, sat_hsw_2);
  tcase_add_test(t, sat_skx);
  tcase_add_loop_test(t, profiles, 0, 3);
  tcase_add_test(t, dropped);
  tcase_add_test(t, fixtures_skx);
  tcase_add_test(t, odd_sizes);
  suite_add_tcase(s, t);
  return s;
}

int main(void) {
  kio_feat_install();  /* as every program does at start */
  /* Probes in a child: CUDA is never initialised in this (forking) parent. */
  if (!tu_gpu_available()) exit(TU_EXIT_SKIP);
  return tu_run_suite(gpu_feats_suite());
}
