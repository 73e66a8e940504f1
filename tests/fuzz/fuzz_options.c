/* libFuzzer harness: command-line parsing (kio_opts_parse) with options of
 * every type. Input: [CONFIG '\0'] ARG '\n' ARG '\n' ... ; when a NUL is
 * present, the bytes before it are written to a config file passed first as
 * --config=FILE. Usage and --print-args text go to stdout/stderr, so run.sh
 * runs this harness with -close_fd_mask=3. */
#include "fuzz-common.h"
#include "base/sys/options.h"

#define MAX_ARGS 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_init();
  const uint8_t *nul = memchr(data, 0, size);
  char cfg_arg[320] = "";
  const char *cfg_path = NULL;
  if (nul) {
    cfg_path = fuzz_temp_file(data, (size_t)(nul - data), ".conf");
    snprintf(cfg_arg, sizeof cfg_arg, "--config=%s", cfg_path);
    size -= (size_t)(nul - data) + 1;
    data = nul + 1;
  }
  char *text = malloc(size + 1);
  if (!text) return 0;
  memcpy(text, data, size);
  text[size] = '\0';
  char *argv[MAX_ARGS + 3];
  int argc = 0;
  argv[argc++] = "fuzz-prog";
  if (cfg_path) argv[argc++] = cfg_arg;
  for (char *save = NULL, *p = strtok_r(text, "\n", &save); p && argc < MAX_ARGS;
       p = strtok_r(NULL, "\n", &save))
    argv[argc++] = p;
  argv[argc] = NULL;

  int b = 0, i = 7;
  float fl = 0.5f;
  double d = 1.0;
  char *s = strdup("default");
  kio_opts *o = kio_opts_new("Usage: fuzz-prog [options] <a> <b>\n");
  kio_opts_bool(o, "binary", &b, "A bool");
  kio_opts_int(o, "beam-size", &i, "An int");
  kio_opts_float(o, "acoustic_scale", &fl, "A float");
  kio_opts_double(o, "retry-beam", &d, "A double");
  kio_opts_string(o, "name", &s, "A string");
  int r = kio_opts_parse(o, argc, argv);
  if (r == KIO_OPTS_OK) {
    int n = kio_opts_num_args(o);
    FUZZ_CHECK(n >= 0 && n <= argc);
    for (int k = 1; k <= n + 1; k++) (void)kio_opts_opt_arg(o, k);
    if (n >= 1) FUZZ_CHECK(kio_opts_arg(o, 1) != NULL);
    char *e = kio_escape_arg(argv[argc - 1]);
    free(e);
  }
  kio_opts_free(o);
  free(s);
  kio_log_set_verbose(0);
  free(text);
  if (cfg_path) unlink(cfg_path);
  return 0;
}
