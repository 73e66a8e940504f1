/* Command-line parsing with Kaldi's ParseOptions semantics (reference 1.12). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/sys/log.h"
#include "base/sys/options.h"
#include "tests/lib/test-util.h"

/* stderr captured to a temp file (tests/lib/test-util.c). */
#define capture_start tu_stderr_start
#define capture_end tu_stderr_end

typedef struct {
  int careful, binary;
  int32_t beam_int;
  float beam;
  double scale;
  char *name;
} vals;

static kio_opts *make(vals *v) {
  v->careful = 0;
  v->binary = 1;
  v->beam_int = 10;
  v->beam = 10.0f;
  v->scale = 0.1;
  v->name = strdup("abc");
  kio_opts *o = kio_opts_new("Align features given model.\nUsage: prog [options] a b\n");
  kio_opts_bool(o, "careful", &v->careful, "If true, do 'careful' alignment");
  kio_opts_bool(o, "binary", &v->binary, "Write output in binary mode");
  kio_opts_int(o, "max-active", &v->beam_int, "Max active");
  kio_opts_float(o, "beam", &v->beam, "Decoding beam");
  kio_opts_double(o, "transition_scale", &v->scale, "Transition-probability scale");
  kio_opts_string(o, "rand-prune-name", &v->name, "A string");
  return o;
}

static int parse(kio_opts *o, char **s) {
  int n = 0;
  while (s[n]) n++;
  return kio_opts_parse(o, n, s);
}

START_TEST(basic_parse_and_print_args) {
  vals v;
  kio_opts *o = make(&v);
  char *argv[] = {"/path/to/gmm-align-compiled", "--careful=true", "--BEAM=12.5",
                  "--Transition-Scale=2", "--max_active=0x10", "--rand-prune-name=x y",
                  "--binary=F", "--verbose=2", "a.mdl", "ark:gunzip -c g.gz|", "--beam=3", NULL};
  capture_start();
  ck_assert_int_eq(parse(o, argv), KIO_OPTS_OK);
  char *s = capture_end();
  ck_assert_str_eq(s, "/path/to/gmm-align-compiled --careful=true --BEAM=12.5 "
                      "--Transition-Scale=2 --max_active=0x10 '--rand-prune-name=x y' "
                      "--binary=F --verbose=2 a.mdl 'ark:gunzip -c g.gz|' --beam=3 \n");
  free(s);
  ck_assert_str_eq(kio_log_program(), "gmm-align-compiled");
  ck_assert_int_eq(v.careful, 1);
  ck_assert_int_eq(v.binary, 0);
  ck_assert(v.beam == 12.5f);
  ck_assert(v.scale == 2.0);
  ck_assert_int_eq(v.beam_int, 16);
  ck_assert_str_eq(v.name, "x y");
  ck_assert_int_eq(kio_log_verbose(), 2);
  ck_assert_int_eq(kio_opts_num_args(o), 3); /* options stop at the first positional */
  ck_assert_str_eq(kio_opts_arg(o, 1), "a.mdl");
  ck_assert_str_eq(kio_opts_arg(o, 3), "--beam=3");
  ck_assert_str_eq(kio_opts_opt_arg(o, 4), "");
  kio_opts_free(o);
  free(v.name);
  kio_log_set_verbose(0);
}
END_TEST

START_TEST(bool_forms_and_double_dash) {
  const char *t[] = {"--careful", "--careful=TRUE", "--careful=t", "--careful=1"};
  for (int i = 0; i < 4; i++) {
    vals v;
    kio_opts *o = make(&v);
    char *argv[] = {"p", "--print-args=false", (char *)t[i], "--", "--x", "--", NULL};
    capture_start();
    ck_assert_int_eq(parse(o, argv), KIO_OPTS_OK);
    char *s = capture_end();
    ck_assert_str_eq(s, "");
    free(s);
    ck_assert_int_eq(v.careful, 1);
    ck_assert_int_eq(kio_opts_num_args(o), 2);
    ck_assert_str_eq(kio_opts_arg(o, 1), "--x");
    ck_assert_str_eq(kio_opts_arg(o, 2), "--");
    kio_opts_free(o);
    free(v.name);
  }
  /* a "--" after the first positional is dropped once */
  vals v;
  kio_opts *o = make(&v);
  char *argv[] = {"p", "--print-args=0", "a", "--", "b", "--", NULL};
  ck_assert_int_eq(parse(o, argv), KIO_OPTS_OK);
  ck_assert_int_eq(kio_opts_num_args(o), 3);
  ck_assert_str_eq(kio_opts_arg(o, 2), "b");
  ck_assert_str_eq(kio_opts_arg(o, 3), "--");
  kio_opts_free(o);
  free(v.name);
}
END_TEST

START_TEST(errors) {
  const char *bad[] = {"--nosuch=1", "--careful=yes", "--careful=", "--beam=", "--beam=abc",
                       "--max-active=x", "--rand-prune-name", "--=3", "--config=no/such"};
  const char *msg[] = {"Invalid option --nosuch=1",
                       "Invalid format for boolean argument [expected true or false]: yes",
                       "Invalid option --careful=", "Invalid floating-point option \"\"",
                       "Invalid floating-point option \"abc\"", "Invalid integer option \"x\"",
                       "Invalid option --rand-prune-name", "Invalid option (no key): --=3",
                       "Cannot open config file: no/such"};
  int usage[] = {1, 1, 0, 1, 1, 1, 0, 1, 0};
  for (int i = 0; i < 9; i++) {
    vals v;
    kio_opts *o = make(&v);
    char *argv[] = {"prog", (char *)bad[i], "a", NULL};
    capture_start();
    ck_assert_int_eq(parse(o, argv), KIO_OPTS_ERROR);
    char *s = capture_end();
    ck_assert_msg(strstr(s, msg[i]) != NULL, "%s: %s", bad[i], s);
    ck_assert_msg((strstr(s, "Standard options:") != NULL) == usage[i], "%s: %s", bad[i], s);
    if (usage[i]) ck_assert_ptr_nonnull(strstr(s, "\nCommand line was: prog "));
    ck_assert_ptr_nonnull(strstr(s, "ERROR (prog["));
    free(s);
    kio_opts_free(o);
    free(v.name);
  }
}
END_TEST

START_TEST(usage_layout) {
  vals v;
  kio_opts *o = make(&v);
  capture_start();
  kio_opts_print_usage(o);
  char *s = capture_end();
  ck_assert_str_eq(s,
    "\nAlign features given model.\nUsage: prog [options] a b\n\n"
    "Options:\n"
    "  --beam                      : Decoding beam (float, default = 10)\n"
    "  --binary                    : Write output in binary mode (bool, default = true)\n"
    "  --careful                   : If true, do 'careful' alignment (bool, default = false)\n"
    "  --max-active                : Max active (int, default = 10)\n"
    "  --rand-prune-name           : A string (string, default = \"abc\")\n"
    "  --transition_scale          : Transition-probability scale (double, default = 0.1)\n"
    "\n"
    "Standard options:\n"
    "  --config                    : Configuration file to read (this option may be "
    "repeated) (string, default = \"\")\n"
    "  --help                      : Print out usage message (bool, default = false)\n"
    "  --print-args                : Print the command line arguments (to stderr) "
    "(bool, default = true)\n"
    "  --verbose                   : Verbose level (higher->more logging) (int, default = 0)\n"
    "\n");
  free(s);
  /* --help prints the usage and asks the caller to exit 0; no echo */
  char *argv[] = {"prog", "--beam=3", "--help", NULL};
  capture_start();
  ck_assert_int_eq(parse(o, argv), KIO_OPTS_HELP);
  s = capture_end();
  ck_assert(strncmp(s, "\nAlign features", 15) == 0);
  ck_assert_ptr_null(strstr(s, "Command line was"));
  free(s);
  kio_opts_free(o);
  free(v.name);
}
END_TEST

START_TEST(config_files) {
  const char *cfg = tu_tmp_path("a.conf"), *cfg2 = tu_tmp_path("b.conf");
  FILE *f = fopen(cfg, "w");
  fprintf(f, "# a comment\n\n  --beam=20   # trailing\n--careful\n--rand_prune_name= q r \n"
             "--max-active=7\n");
  fclose(f);
  vals v;
  kio_opts *o = make(&v);
  char opt[600];
  snprintf(opt, sizeof opt, "--config=%s", cfg);
  /* command-line options win over the config, wherever --config is */
  char *argv[] = {"prog", "--print-args=false", "--max-active=3", opt, "x", NULL};
  ck_assert_int_eq(parse(o, argv), KIO_OPTS_OK);
  ck_assert(v.beam == 20.0f);
  ck_assert_int_eq(v.careful, 1);
  ck_assert_str_eq(v.name, "q r");
  ck_assert_int_eq(v.beam_int, 3);
  kio_opts_free(o);
  free(v.name);
  /* a config line without "--" or with an unknown option is an error */
  f = fopen(cfg2, "w");
  fprintf(f, "beam=3\n");
  fclose(f);
  snprintf(opt, sizeof opt, "--config=%s", cfg2);
  o = make(&v);
  char *argv2[] = {"prog", opt, NULL};
  capture_start();
  ck_assert_int_eq(parse(o, argv2), KIO_OPTS_ERROR);
  char *s = capture_end();
  ck_assert_ptr_nonnull(strstr(s, "line 1 does not look like a line from a Kaldi"));
  free(s);
  kio_opts_free(o);
  free(v.name);
  f = fopen(cfg2, "w");
  fprintf(f, "--bogus=3\n");
  fclose(f);
  o = make(&v);
  capture_start();
  ck_assert_int_eq(parse(o, argv2), KIO_OPTS_ERROR);
  s = capture_end();
  ck_assert_ptr_nonnull(strstr(s, "Invalid option --bogus=3 in config file"));
  free(s);
  kio_opts_free(o);
  free(v.name);
}
END_TEST

START_TEST(escaping) {
  struct { const char *in, *out; } t[] = {
    {"abc", "abc"}, {"", "''"}, {"ark:foo.ark", "ark:foo.ark"},
    {"--a=[1,2]~#^_-+=:./", "--a=[1,2]~#^_-+=:./"}, {"a b", "'a b'"},
    {"ark:gunzip -c x|", "'ark:gunzip -c x|'"}, {"it's", "\"it's\""},
    {"it's $HOME", "'it'\\''s $HOME'"}, {"a\"b", "'a\"b'"}, {"x*", "'x*'"},
    {"caf\xc3\xa9", "'caf\xc3\xa9'"},
  };
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
    char *e = kio_escape_arg(t[i].in);
    ck_assert_str_eq(e, t[i].out);
    free(e);
  }
}
END_TEST

int main(void) {
  Suite *s = suite_create("options");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, basic_parse_and_print_args);
  tcase_add_test(tc, bool_forms_and_double_dash);
  tcase_add_test(tc, errors);
  tcase_add_test(tc, usage_layout);
  tcase_add_test(tc, config_files);
  tcase_add_test(tc, escaping);
  suite_add_tcase(s, tc);
  return tu_run_suite(s);
}
