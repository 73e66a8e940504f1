/* Command-line parsing with Kaldi ParseOptions semantics (reference 1.12):
 * --name=value before positional args, names case-insensitive with '_' == '-',
 * booleans "--x" / "--x=true|false|t|f|1|0", --config, --help, --print-args,
 * --verbose. */
#ifndef KIO_OPTIONS_H
#define KIO_OPTIONS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kio_opts kio_opts;  /* opaque */

kio_opts *kio_opts_new(const char *usage);
void kio_opts_free(kio_opts *o);
/* Register options; the pointer's current value is the default shown. */
void kio_opts_bool(kio_opts *o, const char *name, int *v, const char *help);
void kio_opts_int(kio_opts *o, const char *name, int32_t *v, const char *help);
void kio_opts_float(kio_opts *o, const char *name, float *v, const char *help);
void kio_opts_double(kio_opts *o, const char *name, double *v, const char *help);
/* *v must point to a malloc'd string (or NULL); parsing replaces it. */
void kio_opts_string(kio_opts *o, const char *name, char **v, const char *help);

enum { KIO_OPTS_OK = 0, KIO_OPTS_HELP = 1, KIO_OPTS_ERROR = -1 };
/* Sets the log program name, prints the command line (unless
 * --print-args=false), applies --verbose. HELP: usage printed, exit 0.
 * ERROR: message printed, exit 255 (Kaldi's fatal error). */
int kio_opts_parse(kio_opts *o, int argc, char **argv);
int kio_opts_num_args(const kio_opts *o);
/* 1-based, like Kaldi's GetArg. */
const char *kio_opts_arg(const kio_opts *o, int i);
const char *kio_opts_opt_arg(const kio_opts *o, int i); /* "" if absent */
void kio_opts_print_usage(const kio_opts *o);

/* Kaldi's shell escaping of one argument for --print-args, into a malloc'd string. */
char *kio_escape_arg(const char *arg);

#ifdef __cplusplus
}
#endif
#endif
