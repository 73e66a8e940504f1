/* The model rspecifier "gmm-boost-silence ... - |" computed in process
 * (base/feat/feat-model.c) against Kaldi's program: its bytes (models
 * written by the Kaldi bundle's gmm-boost-silence: kaldi/mono/boost-1.25.mdl;
 * with --boost=1.0 Kaldi's output is its input, binary and text, checked
 * when the fixtures were made) and its stderr lines; the commands left to
 * the real pipe. tests/cli/boost-silence.sh runs a program with both. */
#include <stdlib.h>
#include <string.h>

#include "base/feat/feat.h"
#include "base/io/io.h"
#include "base/sys/settings.h"
#include "base/sys/log.h"
#include "tests/lib/test-util.h"

#define SIL "1:2:3:4:5:6:7:8:9:10"

/* What reading rx gives, through io.c as a program reads its model. */
static char *read_all(const char *rx, size_t *len) {
  kio_input *in = NULL;
  ck_assert_msg(kio_input_open(&in, rx, NULL) == KIO_OK, "%s: %s", rx, kio_last_error());
  char *buf = NULL;
  FILE *m = open_memstream(&buf, len);
  char b[65536];
  size_t n;
  while ((n = fread(b, 1, sizeof b, kio_input_stream(in))) > 0) fwrite(b, 1, n, m);
  fclose(m);
  ck_assert_int_eq(kio_input_close(in), KIO_OK);
  return buf;
}

static void same_bytes(const char *rx, const char *want) {
  size_t n, wn;
  char *got = read_all(rx, &n);
  unsigned char *w = tu_read_file(want, &wn);
  ck_assert_msg(w != NULL, "cannot read %s", want);
  ck_assert_msg(n == wn && !memcmp(got, w, n), "%s: %zu bytes, not those of %s (%zu)", rx, n,
                want, wn);
  free(got);
  free(w);
}

START_TEST(bytes_as_kaldi) {
  kio_model_stage *st;
  FILE *f = kio_model_stage_open("gmm-boost-silence --boost=1.25 " SIL " models/mono/final.mdl -", &st);
  ck_assert_msg(f != NULL, "not computed in process");
  kio_model_stage_close(st, f);
  same_bytes("gmm-boost-silence --boost=1.25 " SIL " models/mono/final.mdl - |",
             "kaldi/mono/boost-1.25.mdl");
  same_bytes("gmm-boost-silence --boost=1.0 " SIL " models/tri1/final.mdl - |",
             "models/tri1/final.mdl");
  same_bytes("gmm-boost-silence --binary=false --boost=1.0 " SIL " models/mono/final.mdl - |",
             "models/mono/final.txt.mdl");
  /* the boost matters: not the input's bytes */
  size_t n, wn;
  char *got = read_all("gmm-boost-silence --boost=1.25 " SIL " models/mono/final.mdl - |", &n);
  unsigned char *w = tu_read_file("models/mono/final.mdl", &wn);
  ck_assert(n != wn || memcmp(got, w, n) != 0);
  free(got);
  free(w);
}
END_TEST

START_TEST(lines_as_kaldi) {
  tu_stderr_start();
  size_t n;
  free(read_all("gmm-boost-silence --boost=1.25 1 models/tri1/final.mdl - |", &n));
  free(read_all("gmm-boost-silence --print-args=false --boost=1.0 " SIL
                " models/mono/final.mdl - |", &n));
  char *err = tu_stderr_end();
  /* Kaldi's program, version aside (each build has its own) */
  const char *want =
      "gmm-boost-silence --boost=1.25 1 models/tri1/final.mdl - \n"
      "WARNING (gmm-boost-silence[" KIO_VERSION "]:main():gmm-boost-silence.cc:82) The pdfs for "
      "the silence phones may be shared by other phones (note: this probably does not matter.)\n"
      "LOG (gmm-boost-silence[" KIO_VERSION "]:main():gmm-boost-silence.cc:93) Boosted weights "
      "for 5 pdfs, by factor of 1.25\n"
      "LOG (gmm-boost-silence[" KIO_VERSION "]:main():gmm-boost-silence.cc:103) Wrote model to -\n"
      "LOG (gmm-boost-silence[" KIO_VERSION "]:main():gmm-boost-silence.cc:93) Boosted weights "
      "for 10 pdfs, by factor of 1\n"
      "LOG (gmm-boost-silence[" KIO_VERSION "]:main():gmm-boost-silence.cc:103) Wrote model to -\n";
  ck_assert_str_eq(err, want);
  free(err);
}
END_TEST

START_TEST(unusual_left_to_the_pipe) {
  const char *t[] = {
    "gmm-boost-silence --boost=1.0 " SIL " models/mono/final.mdl out.mdl",  /* not stdout */
    "gmm-boost-silence --boost=1.0 " SIL " models/mono/missing.mdl -",     /* Kaldi's error */
    "gmm-boost-silence --boost=1.0 1:1 models/mono/final.mdl -",           /* Kaldi asserts */
    "gmm-boost-silence --boost=1.0 1::2 models/mono/final.mdl -",
    "gmm-boost-silence --boost=1.0 '' models/mono/final.mdl -",            /* Kaldi warns */
    "gmm-boost-silence --boost 1.0 " SIL " models/mono/final.mdl -",
    "gmm-boost-silence --boost=0x1p0 " SIL " models/mono/final.mdl -",
    "gmm-boost-silence --boost=0 " SIL " models/mono/final.mdl -",         /* log(0): Kaldi warns */
    "gmm-boost-silence --config=x.conf " SIL " models/mono/final.mdl -",
    "gmm-boost-silence " SIL " gunzip -c m.gz | -",
    "gmm-boost-silence " SIL " models/mono/final.mdl - | cat",
    "gmm-copy " SIL " models/mono/final.mdl -",
  };
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
    tu_logcap_start();
    kio_model_stage *st = (kio_model_stage *)1;
    FILE *f = kio_model_stage_open(t[i], &st);
    ck_assert_msg(f == NULL && st == NULL, "%s: computed in process", t[i]);
    ck_assert_msg(tu_cap.n == 0, "%s: logged %s", t[i], tu_cap.last);
  }
  /* the real pipe on request */
  kio_setting_override(KIO_SET_FEATS_PIPE, "0");
  kio_model_stage *st;
  ck_assert(kio_model_stage_open("gmm-boost-silence " SIL " models/mono/final.mdl -", &st) == NULL);
  kio_setting_override(KIO_SET_FEATS_PIPE, NULL);
  FILE *f = kio_model_stage_open("gmm-boost-silence " SIL " models/mono/final.mdl -", &st);
  ck_assert(f != NULL);
  kio_model_stage_close(st, f);
}
END_TEST

int main(void) {
  kio_feat_install();  /* as every program does at start */
  Suite *s = suite_create("boost");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, bytes_as_kaldi);
  tcase_add_test(tc, lines_as_kaldi);
  tcase_add_test(tc, unusual_left_to_the_pipe);
  suite_add_tcase(s, tc);
  return tu_run_suite(s);
}
