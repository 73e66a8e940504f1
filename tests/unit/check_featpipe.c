/* The feature pipelines (base/feat*.c): which commands are recognised (and
 * with what plan), which are left to the real pipe; Kaldi's delta windows;
 * the sgemm emulation against a plain FMA chain on the shapes where the
 * kernels use one; reading a chain through io.c as a table; which chains
 * the feature cache keeps. Archives equal
 * to Kaldi's are checked by tests/cli/featpipe.sh. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/sys/settings.h"
#include "base/feat/feat.h"
#include "base/feat/feat-cache.h"
#include "base/feat/feat-ops.h"
#include "base/matrix/blas-gemm.h"
#include "base/matrix/blas-profile.h"
#include "base/matrix/blas-order.h"
#include "base/feat/feat-pool.h"
#include "base/io/io.h"
#include "base/sys/log.h"
#include "base/matrix/matrix.h"
#include "base/io/table.h"
#include "tests/lib/test-util.h"

#define CMVNQ "apply-cmvn --print-args=false --utt2spk=ark:featpipe/utt2spk scp:featpipe/cmvn.scp scp:featpipe/feats.scp ark:-"
#define CMVN "apply-cmvn --utt2spk=ark:featpipe/utt2spk scp:featpipe/cmvn.scp scp:featpipe/feats.scp ark:-"

START_TEST(parse_recognised) {
  /* cache: kio_fcache_worth, only chains with a matrix product are kept */
  struct { const char *cmd; int n; kio_feat_op last; int cache; } t[] = {
    {CMVN " | add-deltas ark:- ark:- ", 2, KIO_FEAT_DELTAS, 0},
    {CMVN " | splice-feats --left-context=3 --right-context=3 ark:- ark:- | "
          "transform-feats exp/final.mat ark:- ark:-", 3, KIO_FEAT_TRANSFORM, 1},
    {CMVN " | transform-feats --utt2spk=ark:u ark,s,cs:exp/trans.1 ark:- ark:-", 2, KIO_FEAT_TRANSFORM, 1},
    {CMVN " | splice-feats ark:- ark:- | transform-feats exp/final.mat ark:- ark:- | "
          "select-feats 0-9 ark:- ark:-", 4, KIO_FEAT_SELECT, 1},
    {CMVN " | splice-feats --left-context=3 --right-context=3 ark:- ark:-", 2, KIO_FEAT_SPLICE, 0},
    {"apply-cmvn --norm-vars=true --norm-means=true scp:c.scp scp:f.scp ark:-", 1, KIO_FEAT_CMVN, 0},
    {"copy-feats --compress=false scp:f.scp ark:- | select-feats 0-12,20 ark:- ark:-", 2, KIO_FEAT_SELECT, 0},
    {"add-deltas --delta-order=3 --delta-window=1 --print-args=false ark,s,cs:f.ark ark:-", 1, KIO_FEAT_DELTAS, 0},
  };
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
    kio_feat_plan p;
    ck_assert_msg(kio_feat_parse(t[i].cmd, &p) == KIO_OK, "%s: %s", t[i].cmd, kio_last_error());
    ck_assert_int_eq(p.nstages, t[i].n);
    ck_assert_int_eq(p.stages[p.nstages - 1].op, t[i].last);
    ck_assert_msg(kio_fcache_worth(&p) == t[i].cache, "%s: worth caching %d", t[i].cmd, !t[i].cache);
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

/* SkylakeX/Cooperlake (blas-gemm.c): a product with M*T <= 1200, K >= 32
 * and M*T*K <= 1e6 goes to the small-matrix kernel (REDUCE_4 on the rows of
 * 4-row tiles and the 4-frame tiles, GCC's reduction elsewhere), whatever
 * the threads; a larger one is one SEQ chain (no plan) up to GEMM_Q, then
 * blocked at SkylakeX's 448 or Cooperlake's 320. The plan and its
 * execution (kio_featop_gemm_frames) must give the chains' own values. */
START_TEST(gemm_skx_small_and_blocks) {
  enum { T = 7, K = 40, M = 6 };
  float in[T * K], w[M * K], wt[K * M], out[T * M];
  for (int i = 0; i < T * K; i++) in[i] = sinf((float)i) * 3.0f;
  for (int i = 0; i < M * K; i++) w[i] = cosf((float)i * 0.7f);
  for (int j = 0; j < M; j++)
    for (int k = 0; k < K; k++) wt[k * M + j] = w[j * K + k];
  for (int th = 1; th <= 16; th *= 16) {
    unsigned char *cls;
    ck_assert_int_eq(kio_blas_gemm_plan(KIO_BLAS_SKX, T, K, M, th, &cls), KIO_OK);
    ck_assert_ptr_nonnull(cls);
    for (int t = 0; t < T; t++)
      for (int j = 0; j < M; j++)
        ck_assert_int_eq(cls[t * M + j], j < 4 || t < 4 ? KIO_GEMM_L16R : KIO_GEMM_L16G);
    kio_featop_gemm_frames(KIO_BLAS_SKX, cls, in, 0, K, 0, T, K, w, K, wt, M, NULL, out);
    free(cls);
    for (int t = 0; t < T; t++)
      for (int j = 0; j < M; j++) {
        int type = j < 4 || t < 4 ? KIO_GEMM_L16R : KIO_GEMM_L16G;
        float want = kio_blas_gemm_chain(type, 1, in + t * K, 1, w + j * K, 1, K);
        ck_assert_msg(out[t * M + j] == want, "t %d j %d", t, j);
      }
  }
  unsigned char *cls = (unsigned char *)1;
  ck_assert_int_eq(kio_blas_gemm_plan(KIO_BLAS_SKX, 31, K, 40, 2, &cls), KIO_OK);  /* M*T 1240 */
  ck_assert_ptr_null(cls);
  ck_assert_int_eq(kio_blas_gemm_plan(KIO_BLAS_CPL, 3, 31, 4, 2, &cls), KIO_OK);   /* K 31 */
  ck_assert_ptr_null(cls);
  ck_assert_int_eq(kio_blas_gemm_q(KIO_BLAS_SKX), 448);
  ck_assert_int_eq(kio_blas_gemm_q(KIO_BLAS_CPL), 320);
  ck_assert_int_eq(kio_blas_gemm_plan(KIO_BLAS_CPL, 100, 400, 40, 1, &cls), KIO_OK);
  ck_assert_ptr_nonnull(cls);  /* K 400 > 320: blocks, so a plan */
  free(cls);
  ck_assert_int_eq(kio_blas_gemm_plan(KIO_BLAS_SKX, 100, 400, 40, 1, &cls), KIO_OK);
  ck_assert_ptr_null(cls);
}
END_TEST

/* With fewer than 16 output rows and 8 frames or more per call, every
 * output of the Haswell kernel is one plain FMA chain: the plan and its
 * execution must give exactly that. */
START_TEST(gemm_small_rows_is_one_chain) {
  int32_t T = 20, K = 13, M = 5;
  float in[20 * 13], w[5 * 13], wt[13 * 5], out[20 * 5];
  for (int i = 0; i < T * K; i++) in[i] = sinf((float)i) * 3.0f;
  for (int i = 0; i < M * K; i++) w[i] = cosf((float)i * 0.7f);
  for (int j = 0; j < M; j++)
    for (int k = 0; k < K; k++) wt[k * M + j] = w[j * K + k];
  unsigned char *cls;
  ck_assert_int_eq(kio_blas_gemm_plan(KIO_BLAS_HSW, T, K, M, 1, &cls), KIO_OK);
  ck_assert_ptr_nonnull(cls);
  kio_featop_gemm_frames(KIO_BLAS_HSW, cls, in, 0, K, 0, T, K, w, K, wt, M, NULL, out);
  free(cls);
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

/* The chain's output read as raw bytes (the way any reader but the matrix
 * tables reads it) and saved to path; returns the byte count. */
static size_t save_chain_bytes(const char *rx, const char *path) {
  kio_input *in;
  ck_assert_int_eq(kio_input_open(&in, rx, NULL), KIO_OK);
  FILE *out = fopen(path, "wb");
  ck_assert_ptr_nonnull(out);
  char buf[1000];  /* small reads: entries cross them */
  size_t n, total = 0;
  while ((n = fread(buf, 1, sizeof buf, kio_input_stream(in))) > 0) {
    fwrite(buf, 1, n, out);
    total += n;
  }
  fclose(out);
  ck_assert_int_eq(kio_input_close(in), KIO_OK);
  return total;
}

/* The two ways out of a chain: the Matrix<float> table reader takes the
 * entries as matrices (kio_feat_take), any other reader gets archive bytes
 * (here the raw stream, saved and read back as an archive): the same keys
 * and the same bits; a reader leaving early stops the chain. */
START_TEST(taken_equals_bytes) {
  tu_logcap_start();
  const char *rx = CMVNQ " | splice-feats --print-args=false --left-context=1 "
                   "--right-context=1 ark:- ark:- |";
  const char *path = tu_tmp_path("bytes.ark");
  ck_assert_uint_gt(save_chain_bytes(rx, path), 1000);
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

/* The random-access reader over a chain (the aligners read features so)
 * takes the matrices too: for every mode (sorted + called sorted, sorted,
 * unsorted; read ahead on a thread or not) the values equal the archive
 * bytes read back from a file, keys skipped and missing keys included. */
START_TEST(random_access_takes) {
  tu_logcap_start();
  const char *rx = CMVNQ " | add-deltas --print-args=false ark:- ark:- |";
  const char *path = tu_tmp_path("ra-bytes.ark");
  ck_assert_uint_gt(save_chain_bytes(rx, path), 1000);
  char spec[600];
  snprintf(spec, sizeof spec, "ark:%s", path);
  char keys[12][64];
  int nk = 0;
  kio_seq_reader *a;
  ck_assert_int_eq(kio_seq_open(&a, spec, &kio_matrix_holder), KIO_OK);
  for (; !kio_seq_done(a) && nk < 12; kio_seq_next(a)) snprintf(keys[nk++], 64, "%s", kio_seq_key(a));
  ck_assert_int_eq(kio_seq_close(a), KIO_OK);
  ck_assert_int_eq(nk, 12);
  kio_ra_reader *ref;
  ck_assert_int_eq(kio_ra_open(&ref, spec, &kio_matrix_holder), KIO_OK);
  const char *modes[] = {"ark,s,cs:", "ark,s:", "ark:", "ark,bg:"};
  for (size_t mi = 0; mi < sizeof modes / sizeof modes[0]; mi++) {
    char chain[600];
    snprintf(chain, sizeof chain, "%s%s", modes[mi], rx);
    kio_ra_reader *r;
    ck_assert_int_eq(kio_ra_open(&r, chain, &kio_matrix_holder), KIO_OK);
    int seen = 0;
    for (int i = 0; i < nk; i += (mi == 1 ? 1 : 2)) {  /* every key, or every other one */
      ck_assert_int_eq(kio_ra_has_key(r, keys[i]), 1);
      const kio_matrix *y = kio_ra_value(r, keys[i]);
      ck_assert_ptr_nonnull(y);
      ck_assert_int_eq(kio_ra_has_key(ref, keys[i]), 1);
      const kio_matrix *x = kio_ra_value(ref, keys[i]);
      ck_assert_ptr_nonnull(x);
      ck_assert(x->rows == y->rows && x->cols == y->cols && x->cols == 39 && x->rows > 0);
      ck_assert(!memcmp(x->data, y->data, sizeof(float) * (size_t)x->rows * x->cols));
      /* a key between this one and the next, in no table */
      char miss[sizeof keys[0] + 2];
      snprintf(miss, sizeof miss, "%.63sx", keys[i]);
      ck_assert_int_eq(kio_ra_has_key(r, miss), 0);
      seen++;
    }
    ck_assert_int_ge(seen, 6);
    ck_assert_int_eq(kio_ra_close(r), KIO_OK);
  }
  ck_assert_int_eq(kio_ra_close(ref), KIO_OK);
}
END_TEST

/* splice-feats straight into transform-feats (skx: plain chains; hsw:
 * feat-gemm.c's plan): the transform reads the spliced rows in place, copies
 * only the clamped edge rows. Against the same chain with a copy-feats
 * between (the spliced matrix made), on utterances shorter than the context
 * too, with 1 and 3 workers. */
START_TEST(splice_into_transform) {
  kio_setting_override(KIO_SET_BLAS_PROFILE, _i ? "hsw" : "skx");
  kio_setting_override(KIO_SET_DEV_FEATS_BLAS_THREADS, "2");
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
    kio_setting_override(KIO_SET_FEATS_THREADS, workers == 1 ? "1" : "3");
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

/* ---- the chain on several threads: the same bytes, lines and status ---- */
#define PN_UTT 300  /* 30 speakers of 10 utterances */

/* Writes par.ark (13-dim features: CM, every 7th FM), utt2spk (full, and
 * without u150), CMVN stats (s01 missing) and per-speaker fMLLR transforms
 * 40 x 41 (s02 and s20 missing) into the test's temp directory. */
static void par_inputs(void) {
  FILE *f = fopen(tu_tmp_path("par.ark"), "wb");
  FILE *u = fopen(tu_tmp_path("par.u2s"), "w"), *um = fopen(tu_tmp_path("par-miss.u2s"), "w");
  ck_assert(f && u && um);
  for (int i = 0; i < PN_UTT; i++) {
    kio_matrix m = {0};
    int32_t T = 1 + (i * 37) % 80;
    kio_matrix_resize(&m, T, 13);
    for (int32_t e = 0; e < T * 13; e++) m.data[e] = sinf((float)(e * 3 + i)) * 5.0f + (float)(e % 13);
    fprintf(f, "u%03d ", i);
    fwrite("\0B", 1, 2, f);
    ck_assert_int_eq(i % 7 ? kio_matrix_write_compressed(f, &m, 1) : kio_matrix_write(f, 1, &m), KIO_OK);
    kio_matrix_free(&m);
    fprintf(u, "u%03d s%02d\n", i, i / 10);
    if (i != 150) fprintf(um, "u%03d s%02d\n", i, i / 10);
  }
  ck_assert(!fclose(f) && !fclose(u) && !fclose(um));
  char spec[600];
  kio_writer *w;
  snprintf(spec, sizeof spec, "ark:%s", tu_tmp_path("par-cmvn.ark"));
  ck_assert_int_eq(kio_writer_open(&w, spec, &kio_dmatrix_holder), KIO_OK);
  for (int s = 0; s < PN_UTT / 10; s++) {
    if (s == 1) continue;
    kio_dmatrix st = {0};
    kio_dmatrix_resize(&st, 2, 14);
    for (int d = 0; d < 13; d++) {
      double mean = d + 0.1 * s, var = 1.0 + 0.05 * d;
      st.data[d] = 200.0 * mean;
      st.data[14 + d] = 200.0 * (var + mean * mean);
    }
    st.data[13] = 200.0;
    char key[8];
    snprintf(key, sizeof key, "s%02d", s);
    ck_assert_int_eq(kio_writer_write(w, key, &st), KIO_OK);
    kio_dmatrix_free(&st);
  }
  ck_assert_int_eq(kio_writer_close(w), KIO_OK);
  snprintf(spec, sizeof spec, "ark:%s", tu_tmp_path("par-trans.ark"));
  ck_assert_int_eq(kio_writer_open(&w, spec, &kio_matrix_holder), KIO_OK);
  for (int s = 0; s < PN_UTT / 10; s++) {
    if (s == 2 || s == 20) continue;
    kio_matrix x = {0};
    kio_matrix_resize(&x, 40, 41);
    for (int r = 0; r < 40; r++)
      for (int c = 0; c < 41; c++)
        x.data[r * 41 + c] = (r == c) + 0.01f * sinf((float)(r * 41 + c + 100 * s));
    char key[8];
    snprintf(key, sizeof key, "s%02d", s);
    ck_assert_int_eq(kio_writer_write(w, key, &x), KIO_OK);
    kio_matrix_free(&x);
  }
  ck_assert_int_eq(kio_writer_close(w), KIO_OK);
}

/* apply-cmvn | splice | LDA | per-speaker fMLLR (SAT's chain) on par.ark;
 * u2s: the fMLLR stage's utt2spk. Or (deltas) apply-cmvn with variance
 * normalisation on the utt2spk without u150 | add-deltas | copy-feats. */
static void par_cmd(char *cmd, size_t n, int deltas, const char *u2s) {
  char cmvn[1200];
  snprintf(cmvn, sizeof cmvn, "apply-cmvn %s--utt2spk=ark:%s ark:%s ark:%s ark:-",
           deltas ? "--norm-vars=true " : "", tu_tmp_path(deltas ? "par-miss.u2s" : "par.u2s"),
           tu_tmp_path("par-cmvn.ark"), tu_tmp_path("par.ark"));
  if (deltas)
    snprintf(cmd, n, "%s | add-deltas ark:- ark:- | copy-feats ark:- ark:-", cmvn);
  else
    snprintf(cmd, n, "%s | splice-feats --left-context=3 --right-context=3 ark:- ark:- | "
             "transform-feats featpipe/final.mat ark:- ark:- | transform-feats --utt2spk=ark:%s "
             "ark:%s ark:- ark:-", cmvn, tu_tmp_path(u2s), tu_tmp_path("par-trans.ark"));
}

typedef struct { char *out; size_t len; } par_buf;
static int par_has(const par_buf *b, const char *s) { return memmem(b->out, b->len, s, strlen(s)) != NULL; }
static void par_add(par_buf *b, const void *p, size_t n) {
  b->out = realloc(b->out, b->len + n + 1);
  memcpy(b->out + b->len, p, n);
  b->len += n;
  b->out[b->len] = 0;
}

/* The chain's archive bytes, then its stderr and status (scenario 0-2); or
 * (3) the first 40 entries taken by the table reader, which then closes. */
static par_buf par_run(int scenario, const char *threads) {
  kio_setting_override(KIO_SET_FEATS_THREADS, threads);
  char cmd[4000];
  par_cmd(cmd, sizeof cmd, scenario == 1, scenario == 2 ? "par-miss.u2s" : "par.u2s");
  par_buf b = {0};
  tu_stderr_start();
  if (scenario < 3) {
    kio_feat *h;
    FILE *f = kio_feat_open(cmd, &h);
    ck_assert_ptr_nonnull(f);
    char buf[3000];  /* reads across entries */
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) par_add(&b, buf, n);
    char st[64];
    snprintf(st, sizeof st, "\nstatus %d\n", kio_feat_close(h, f));
    par_add(&b, st, strlen(st));
  } else {
    char rx[4100];
    snprintf(rx, sizeof rx, "ark:%s |", cmd);
    kio_seq_reader *r;
    ck_assert_int_eq(kio_seq_open(&r, rx, &kio_matrix_holder), KIO_OK);
    for (int i = 0; i < 40 && !kio_seq_done(r); kio_seq_next(r), i++) {
      kio_matrix *m = kio_seq_value(r);
      par_add(&b, kio_seq_key(r), strlen(kio_seq_key(r)) + 1);
      par_add(&b, m->data, sizeof(float) * (size_t)m->rows * (size_t)m->cols);
    }
    ck_assert(!kio_seq_done(r));
    ck_assert_int_eq(kio_seq_close(r), KIO_OK);  /* a reader that left: no error */
  }
  char *err = tu_stderr_end();
  par_add(&b, "\n--stderr--\n", 12);
  par_add(&b, err, strlen(err));
  free(err);
  return b;
}

/* Utterance-parallel chain (feat-pool.c): with 1, 2, 3 and 7 threads the
 * same archive bytes, stderr (byte for byte, in order) and status (also
 * with the in-flight memory bound at 1 byte), for
 *   0: SAT's chain, a speaker without CMVN stats, two without fMLLR;
 *   1: CVN on an utt2spk lacking u150 (apply-cmvn dies mid-stream, its
 *      successors finish) | add-deltas | copy-feats;
 *   2: SAT's chain whose last stage lacks u150 (dies: 255; the stages
 *      before it are killed on their next write);
 *   3: SAT's chain, the reader leaving after 40 entries (SIGPIPE; the
 *      missing speakers come before: the lines do not depend on how far the
 *      chain got, at most ring + window entries ahead, far from the end). */
START_TEST(threads_same_output) {
  par_inputs();
  kio_blas_profile();  /* its one LOG line: before the captured runs */
  par_buf ref = par_run(_i, "1");
  const char *expect[] = {"status 0\n", "Copied 140 feature matrices.", "status 65280\n",
                          "nonzero return status 36096"};
  const char *err = memmem(ref.out, ref.len, "--stderr--", 10);
  ck_assert_msg(par_has(&ref, expect[_i]), "scenario %d: no '%s' in:\n%s", _i, expect[_i], err);
  ck_assert_msg(par_has(&ref, "No normalization statistics available for key u019"), "%d", _i);
  if (_i != 1) ck_assert(par_has(&ref, "No fMLLR transform available for utterance u020"));
  ck_assert_uint_gt(ref.len, 40 * 1000);
  const char *counts[] = {"2", "3", "7"};
  for (int c = 0; c < 3; c++) {
    par_buf b = par_run(_i, counts[c]);
    ck_assert_msg(b.len == ref.len && !memcmp(b.out, ref.out, ref.len),
                  "scenario %d, %s threads: output differs from 1 thread's", _i, counts[c]);
    free(b.out);
  }
  /* The memory bound at its extreme (one job in flight at a time, the
   * producer waiting on it): the same again, without a hang. */
  size_t keep = kio_fpool_max_bytes;
  kio_fpool_max_bytes = 1;
  par_buf b = par_run(_i, "7");
  kio_fpool_max_bytes = keep;
  ck_assert_msg(b.len == ref.len && !memcmp(b.out, ref.out, ref.len),
                "scenario %d, 7 threads, 1-byte bound: output differs from 1 thread's", _i);
  free(b.out);
  free(ref.out);
}
END_TEST

int main(void) {
  kio_feat_install();  /* as every program does at start */
  Suite *s = suite_create("featpipe");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, parse_recognised);
  tcase_add_test(tc, parse_left_to_the_pipe);
  tcase_add_test(tc, delta_scales);
  tcase_add_test(tc, gemm_small_rows_is_one_chain);
  tcase_add_test(tc, gemm_skx_small_and_blocks);
  tcase_add_test(tc, table_reads_chain);
  tcase_add_test(tc, taken_equals_bytes);
  tcase_add_test(tc, random_access_takes);
  tcase_add_loop_test(tc, splice_into_transform, 0, 2);
  tcase_add_test(tc, select_narrower_utterance);
  tcase_add_loop_test(tc, threads_same_output, 0, 4);
  suite_add_tcase(s, tc);
  return tu_run_suite(s);
}
