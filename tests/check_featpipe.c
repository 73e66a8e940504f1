/* The feature pipelines (base/feat*.c): which commands are recognised (and
 * with what plan), which are left to the real pipe; Kaldi's delta windows;
 * the sgemm emulation against a plain FMA chain on the shapes where the
 * kernels use one; reading a chain through io.c as a table. Archives equal
 * to Kaldi's are checked by tests/cli/featpipe.sh. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../base/feat.h"
#include "../base/feat-ops.h"
#include "../base/io.h"
#include "../base/log.h"
#include "../base/matrix.h"
#include "../base/table.h"
#include "test-util.h"

#define CMVNQ "apply-cmvn --print-args=false --utt2spk=ark:featpipe/utt2spk scp:featpipe/cmvn.scp scp:featpipe/feats.scp ark:-"
#define CMVN "apply-cmvn --utt2spk=ark:featpipe/utt2spk scp:featpipe/cmvn.scp scp:featpipe/feats.scp ark:-"

START_TEST(parse_recognised) {
  struct { const char *cmd; int n; kio_feat_op last; } t[] = {
    {CMVN " | add-deltas ark:- ark:- ", 2, KIO_FEAT_DELTAS},
    {CMVN " | splice-feats --left-context=3 --right-context=3 ark:- ark:- | "
          "transform-feats exp/final.mat ark:- ark:-", 3, KIO_FEAT_TRANSFORM},
    {CMVN " | transform-feats --utt2spk=ark:u ark,s,cs:exp/trans.1 ark:- ark:-", 2, KIO_FEAT_TRANSFORM},
    {"apply-cmvn --norm-vars=true --norm-means=true scp:c.scp scp:f.scp ark:-", 1, KIO_FEAT_CMVN},
    {"copy-feats --compress=false scp:f.scp ark:- | select-feats 0-12,20 ark:- ark:-", 2, KIO_FEAT_SELECT},
    {"add-deltas --delta-order=3 --delta-window=1 --print-args=false ark,s,cs:f.ark ark:-", 1, KIO_FEAT_DELTAS},
  };
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
    kio_feat_plan p;
    ck_assert_msg(kio_feat_parse(t[i].cmd, &p) == KIO_OK, "%s: %s", t[i].cmd, kio_last_error());
    ck_assert_int_eq(p.nstages, t[i].n);
    ck_assert_int_eq(p.stages[p.nstages - 1].op, t[i].last);
    kio_feat_plan_free(&p);
  }
  kio_feat_plan p;
  ck_assert(kio_feat_parse("apply-cmvn --norm-vars=true --utt2spk=ark:u scp:c.scp scp:f.scp ark:- | "
                           "add-deltas --delta-order=1 ark:- ark:-", &p) == KIO_OK);
  ck_assert_str_eq(p.input, "scp:f.scp");
  ck_assert(p.stages[0].norm_vars && p.stages[0].table_is_rspec);
  ck_assert_str_eq(p.stages[0].utt2spk, "ark:u");
  ck_assert_int_eq(p.stages[1].delta_order, 1);
  ck_assert_int_eq(p.stages[1].delta_window, 2);
  kio_feat_plan_free(&p);
}
END_TEST

START_TEST(parse_left_to_the_pipe) {
  const char *t[] = {
    CMVN " | add-deltas --foo=1 ark:- ark:-",           /* unknown option */
    CMVN " | add-deltas ark:- ark,t:-",                 /* text output */
    CMVN " | add-deltas ark:- ark:out.ark",             /* not to stdout */
    CMVN " | compute-cmvn-stats ark:- ark:-",           /* not ours */
    "apply-cmvn scp:c.scp ark:- ark:-",                 /* first stage reads stdin */
    "apply-cmvn scp:c.scp 'scp:f.scp' ark:-",           /* quoting */
    "apply-cmvn scp:c.scp scp:$F ark:-",                /* expansion */
    "apply-cmvn scp:c.scp scp:f.scp ark:- > x",         /* redirection */
    "apply-cmvn --config=c scp:c.scp scp:f.scp ark:-",  /* config files */
    "apply-cmvn --skip-dims=1:2 scp:c.scp scp:f.scp ark:-",
    "apply-cmvn --norm-vars=true --norm-means=false scp:c.scp scp:f.scp ark:-",
    "apply-cmvn --norm-vars=maybe scp:c.scp scp:f.scp ark:-",
    "apply-cmvn scp:c.scp scp:f.scp",                   /* missing argument */
    "apply-cmvn scp:c.scp scp:f.scp ark:- | ",          /* empty stage */
    "add-deltas --delta-window=0 scp:f.scp ark:-",
    "add-deltas --delta-order=x scp:f.scp ark:-",
    "select-feats 3-x scp:f.scp ark:-",
    "select-feats -3 scp:f.scp ark:-",
    "copy-feats --compress=true scp:f.scp ark:-",
    "gunzip -c x.gz", "",
  };
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
    kio_feat_plan p;
    ck_assert_msg(kio_feat_parse(t[i], &p) == KIO_ERR, "recognised: %s", t[i]);
  }
}
END_TEST

/* DeltaFeatures' windows for order 2, window 2: [-2..2]/10 and its
 * self-convolution /100, rounded as Kaldi's float code does. */
START_TEST(delta_scales) {
  float **sc;
  int *dims;
  ck_assert_int_eq(kio_featop_delta_scales(2, 2, &sc, &dims), 0);
  ck_assert_int_eq(dims[0], 1);
  ck_assert_int_eq(dims[1], 5);
  ck_assert_int_eq(dims[2], 9);
  ck_assert(sc[1][0] == -2.0f * 0.1f && sc[1][2] == 0.0f && sc[1][4] == 2.0f * 0.1f);
  ck_assert(fabsf(sc[2][4] + 0.1f) < 1e-7f && fabsf(sc[2][0] - 0.04f) < 1e-7f);
  for (int i = 0; i < 3; i++) free(sc[i]);
  free(sc);
  free(dims);
}
END_TEST

/* With fewer than 16 output rows and 8 frames or more per call, every
 * output is one plain FMA chain: the emulation must give exactly that. */
START_TEST(gemm_small_rows_is_one_chain) {
  setenv("KIO_BLAS_PROFILE", "hsw", 1);  /* the tiled model (forked test: cache fresh) */
  ck_assert_int_eq(kio_featop_profile(), KIO_FEATOP_HSW);
  int32_t T = 20, K = 13, M = 5;
  float in[20 * 13], w[5 * 13], wt[13 * 5], out[20 * 5];
  for (int i = 0; i < T * K; i++) in[i] = sinf((float)i) * 3.0f;
  for (int i = 0; i < M * K; i++) w[i] = cosf((float)i * 0.7f);
  for (int j = 0; j < M; j++)
    for (int k = 0; k < K; k++) wt[k * M + j] = w[j * K + k];
  ck_assert_int_eq(kio_featop_gemm_exact(in, T, K, w, K, wt, M, 1, out), 0);
  for (int t = 0; t < T; t++)
    for (int j = 0; j < M; j++) {
      float acc = 0.0f;
      for (int k = 0; k < K; k++) acc = fmaf(in[t * K + k], w[j * K + k], acc);
      ck_assert_msg(out[t * M + j] == acc, "t %d j %d", t, j);
    }
}
END_TEST

/* A chain read as a table through io.c: the keys and the deltas' shape;
 * the pipe's last stage status comes back as the close status. */
START_TEST(table_reads_chain) {
  tu_logcap_start();
  kio_seq_reader *r;
  ck_assert_int_eq(kio_seq_open(&r, "ark,s,cs:" CMVNQ " | add-deltas "
                                    "--print-args=false ark:- ark:- |", &kio_matrix_holder), KIO_OK);
  int n = 0;
  for (; !kio_seq_done(r); kio_seq_next(r), n++) {
    kio_matrix *m = kio_seq_value(r);
    ck_assert_ptr_nonnull(m);
    ck_assert_int_eq(m->cols, 39);
    ck_assert_int_gt(m->rows, 0);
  }
  ck_assert_int_eq(n, 12);
  ck_assert_int_eq(kio_seq_close(r), KIO_OK);
  /* A missing transform: the last stage dies (255), the table read fails. */
  ck_assert_int_eq(kio_seq_open(&r, "ark:" CMVNQ " | transform-feats "
                                    "--print-args=false featpipe/none.mat ark:- ark:- |",
                                &kio_matrix_holder), KIO_OK);
  for (; !kio_seq_done(r); kio_seq_next(r)) {}
  ck_assert_int_eq(kio_seq_close(r), KIO_ERR);
}
END_TEST

/* The two ways out of a chain: the Matrix<float> table reader takes the
 * entries as matrices (kio_feat_take), any other reader gets archive bytes
 * (here the raw stream, saved and read back as an archive): the same keys
 * and the same bits; a reader leaving early stops the chain. */
START_TEST(taken_equals_bytes) {
  tu_logcap_start();
  const char *rx = CMVNQ " | splice-feats --print-args=false --left-context=1 "
                   "--right-context=1 ark:- ark:- |";
  kio_input *in;
  ck_assert_int_eq(kio_input_open(&in, rx, NULL), KIO_OK);
  const char *path = tu_tmp_path("bytes.ark");
  FILE *out = fopen(path, "wb");
  char buf[1000];  /* small reads: entries cross them */
  size_t n, total = 0;
  while ((n = fread(buf, 1, sizeof buf, kio_input_stream(in))) > 0) {
    fwrite(buf, 1, n, out);
    total += n;
  }
  fclose(out);
  ck_assert_int_eq(kio_input_close(in), KIO_OK);
  ck_assert_uint_gt(total, 1000);
  char spec[600];
  snprintf(spec, sizeof spec, "ark:%s", path);
  char chain[600];
  snprintf(chain, sizeof chain, "ark,s,cs:%s", rx);
  kio_seq_reader *a, *b;
  ck_assert_int_eq(kio_seq_open(&a, spec, &kio_matrix_holder), KIO_OK);
  ck_assert_int_eq(kio_seq_open(&b, chain, &kio_matrix_holder), KIO_OK);
  int k = 0;
  for (; !kio_seq_done(a); kio_seq_next(a), kio_seq_next(b), k++) {
    ck_assert(!kio_seq_done(b));
    ck_assert_str_eq(kio_seq_key(a), kio_seq_key(b));
    kio_matrix *x = kio_seq_value(a), *y = kio_seq_value(b);
    ck_assert(x->rows == y->rows && x->cols == y->cols && x->cols == 39);
    ck_assert(!memcmp(x->data, y->data, sizeof(float) * (size_t)x->rows * x->cols));
  }
  ck_assert(kio_seq_done(b));
  ck_assert_int_eq(k, 12);
  ck_assert_int_eq(kio_seq_close(a), KIO_OK);
  ck_assert_int_eq(kio_seq_close(b), KIO_OK);
  /* Left after one entry: closes without an error of ours (the chain is
   * stopped as by SIGPIPE, which the reader does not count). */
  ck_assert_int_eq(kio_seq_open(&b, chain, &kio_matrix_holder), KIO_OK);
  ck_assert(!kio_seq_done(b));
  ck_assert_int_eq(kio_seq_close(b), KIO_OK);
}
END_TEST

/* splice-feats straight into transform-feats (skx: plain chains; hsw:
 * feat-gemm.c's plan): the transform reads the spliced rows in place, copies
 * only the clamped edge rows. Against the same chain with a copy-feats
 * between (the spliced matrix made), on utterances shorter than the context
 * too, with 1 and 3 workers. */
START_TEST(splice_into_transform) {
  setenv("KIO_BLAS_PROFILE", _i ? "hsw" : "skx", 1);
  setenv("KIO_FEATS_BLAS_THREADS", "2", 1);
  tu_logcap_start();
  const char *ark = tu_tmp_path("short.ark");
  char spec[600];
  snprintf(spec, sizeof spec, "ark:%s", ark);
  kio_writer *w;
  ck_assert_int_eq(kio_writer_open(&w, spec, &kio_matrix_holder), KIO_OK);
  int lens[] = {1, 2, 3, 6, 7, 8, 9, 23, 100};
  for (size_t i = 0; i < sizeof lens / sizeof *lens; i++) {
    kio_matrix m = {0};
    kio_matrix_resize(&m, lens[i], 13);
    for (int32_t e = 0; e < lens[i] * 13; e++) m.data[e] = sinf((float)(e + 7 * i)) * 4.0f;
    char key[16];
    snprintf(key, sizeof key, "u%zu", i);
    ck_assert_int_eq(kio_writer_write(w, key, &m), KIO_OK);
    kio_matrix_free(&m);
  }
  ck_assert_int_eq(kio_writer_close(w), KIO_OK);
  for (int workers = 1; workers <= 3; workers += 2) {
    setenv("KIO_FEATS_THREADS", workers == 1 ? "1" : "3", 1);
    char a[800], b[800];
    const char *sp = "splice-feats --print-args=false --left-context=3 --right-context=3";
    const char *tf = "transform-feats --print-args=false featpipe/final.mat ark:- ark:-";
    snprintf(a, sizeof a, "ark:%s %s ark:- | %s |", sp, spec, tf);
    snprintf(b, sizeof b, "ark:%s %s ark:- | copy-feats --print-args=false ark:- ark:- | %s |",
             sp, spec, tf);
    kio_seq_reader *ra, *rb;
    ck_assert_int_eq(kio_seq_open(&ra, a, &kio_matrix_holder), KIO_OK);
    ck_assert_int_eq(kio_seq_open(&rb, b, &kio_matrix_holder), KIO_OK);
    int k = 0;
    for (; !kio_seq_done(ra); kio_seq_next(ra), kio_seq_next(rb), k++) {
      ck_assert(!kio_seq_done(rb));
      kio_matrix *x = kio_seq_value(ra), *y = kio_seq_value(rb);
      ck_assert(x->rows == lens[k] && y->rows == lens[k] && x->cols == 40 && y->cols == 40);
      ck_assert_msg(!memcmp(x->data, y->data, sizeof(float) * (size_t)x->rows * 40), "utt %d", k);
    }
    ck_assert_int_eq(k, 9);
    ck_assert_int_eq(kio_seq_close(ra), KIO_OK);
    ck_assert_int_eq(kio_seq_close(rb), KIO_OK);
  }
}
END_TEST

/* select-feats checks its selection against the first utterance only; a
 * later narrower one fails Kaldi's assertion: output up to it, the stage
 * "aborts" (status 134), the table read fails. */
START_TEST(select_narrower_utterance) {
  tu_logcap_start();
  const char *ark = tu_tmp_path("mixed.ark");
  char spec[600];
  snprintf(spec, sizeof spec, "ark:%s", ark);
  kio_writer *w;
  ck_assert_int_eq(kio_writer_open(&w, spec, &kio_matrix_holder), KIO_OK);
  int cols[] = {13, 5, 13};
  for (int i = 0; i < 3; i++) {
    kio_matrix m = {0};
    kio_matrix_resize(&m, 2, cols[i]);
    char key[8];
    snprintf(key, sizeof key, "u%d", i);
    ck_assert_int_eq(kio_writer_write(w, key, &m), KIO_OK);
    kio_matrix_free(&m);
  }
  ck_assert_int_eq(kio_writer_close(w), KIO_OK);
  char rx[700];
  snprintf(rx, sizeof rx, "ark:select-feats --print-args=false 2,7 %s ark:- |", spec);
  kio_seq_reader *r;
  ck_assert_int_eq(kio_seq_open(&r, rx, &kio_matrix_holder), KIO_OK);
  int n = 0;
  for (; !kio_seq_done(r); kio_seq_next(r)) n++;
  ck_assert_int_eq(n, 1);
  ck_assert_int_eq(kio_seq_close(r), KIO_ERR);
  ck_assert_int_ge(tu_cap.errors, 1);
}
END_TEST

int main(void) {
  Suite *s = suite_create("featpipe");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, parse_recognised);
  tcase_add_test(tc, parse_left_to_the_pipe);
  tcase_add_test(tc, delta_scales);
  tcase_add_test(tc, gemm_small_rows_is_one_chain);
  tcase_add_test(tc, table_reads_chain);
  tcase_add_test(tc, taken_equals_bytes);
  tcase_add_loop_test(tc, splice_into_transform, 0, 2);
  tcase_add_test(tc, select_narrower_utterance);
  suite_add_tcase(s, tc);
  return tu_run_suite(s);
}
