/* Kaldi rxfilename / wxfilename streams and basic binary/text value I/O.
 *
 * kio_input: "" or "-" (stdin), "cmd |" (popen), "file:OFFSET" (seek; the
 * same open file is reused by kio_input_reopen), plain file.
 * kio_output: "" or "-" (stdout), "| cmd" (sh -c, as popen, but in a
 * process group of its own: see base/io/output.c), plain file.
 * Closing a pipe checks its exit status (nonzero -> WARNING + KIO_ERR).
 * A write to a pipe or standard output whose reader is gone fails (EPIPE:
 * SIGPIPE is caught once an output is open) instead of killing the process. */
#ifndef KIO_IO_H
#define KIO_IO_H

#include <stdint.h>
#include <stdio.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  KIO_RX_INVALID = 0, KIO_RX_STDIN, KIO_RX_PIPE, KIO_RX_OFFSET, KIO_RX_FILE
} kio_rx_kind;
typedef enum {
  KIO_WX_INVALID = 0, KIO_WX_STDOUT, KIO_WX_PIPE, KIO_WX_FILE
} kio_wx_kind;

kio_rx_kind kio_classify_rxfilename(const char *rx);
kio_wx_kind kio_classify_wxfilename(const char *wx);

typedef struct kio_input kio_input;   /* opaque */
typedef struct kio_output kio_output; /* opaque */

/* Opens rx; if binary != NULL, reads the header ("\0B" -> 1, else 0; a 0x00
 * byte not followed by 'B' is an error). Logs ERROR naming rx on failure. */
int kio_input_open(kio_input **in, const char *rx, int *binary);
/* Like open, but if *in is already open on the same underlying file of a
 * "file:OFFSET" form, only seeks. *in may be NULL (then opens). */
int kio_input_reopen(kio_input **in, const char *rx, int *binary);
FILE *kio_input_stream(kio_input *in);
const char *kio_input_name(const kio_input *in);
/* Closes; returns KIO_ERR (after a WARNING "Pipe X had nonzero return status
 * N") when a pipe failed. Accepts NULL. */
int kio_input_close(kio_input *in);
/* kio_input_close's WARNING for a pipe that ended with wait status status
 * (also printed by the device feature path, gpu-align/align-gfeat.c). */
void kio_pipe_status_warn(const char *name, int status);

/* An in-process stand-in for some input pipes ("CMD |"): it recognises the
 * commands it can compute itself and gives a stream of the bytes they would
 * print (the recipes' feature chains, base/feat). Registered once at program
 * start, before any input is opened; this layer never knows what it is.
 * Without one every pipe runs through popen. */
struct kio_holder;
typedef struct kio_pipe_provider {
  /* A stream of what cmd would print, *state set; NULL: not one it computes. */
  FILE *(*open)(const char *cmd, void **state);
  /* Frees state; returns the wait status the command would have ended with. */
  int (*close)(void *state, FILE *f);
  /* Optional (NULL): table readers of take_holder's objects take them from
   * take() as computed instead of parsing the stream's bytes. KIO_OK,
   * KIO_EOF or KIO_ERR, as a table reader's next entry. */
  const struct kio_holder *take_holder;
  int (*take)(void *state, char **key, size_t *keycap, void *obj);
} kio_pipe_provider;
void kio_input_set_pipe_provider(const kio_pipe_provider *p);

/* Opens wx; writes "\0B" if binary && write_header. */
int kio_output_open(kio_output **out, const char *wx, int binary, int write_header);
FILE *kio_output_stream(kio_output *out);
const char *kio_output_name(const kio_output *out);
/* Flushes and closes; KIO_ERR on write failure or failed pipe. Accepts NULL. */
int kio_output_close(kio_output *out);
/* Instead of closing, on an error: abandons this output as
 * kio_outputs_abandon does (file removed, pipe's command killed, mark
 * written) and frees it. Accepts NULL. */
void kio_output_discard(kio_output *out);
/* Bytes written to this output (standard output, FIFO or device: what cannot
 * be removed or killed) when it is abandoned, to make it visibly incomplete;
 * the table writer's mark is an archive entry cut short. KIO_ERR: no memory. */
int kio_output_set_mark(kio_output *out, const char *mark, size_t len);

/* ---- fatal errors: Kaldi's exit status 255, no output left as if complete ----
 * Abandons every output opened through kio_output_open, open or closed:
 * regular files are removed, output pipes' commands are killed before they
 * see the end of their input (gzip writes no trailer), standard output and
 * other streams get their mark (kio_output_set_mark). See base/output.c. */
void kio_outputs_abandon(void);
/* The end of a program after a fatal error's ERROR line: abandons the
 * outputs, flushes stdout and stderr, exits with status 255 (no atexit
 * handlers run). The one place where programs die of a fatal error. */
void kio_fatal_exit(void) __attribute__((noreturn));

/* Reads "\0B" if present: sets *binary. Returns KIO_ERR on a 0x00 not followed
 * by 'B'. Used by table readers for each archive object. */
int kio_read_header(FILE *f, int *binary);

/* ---- basic values (reference 1.2-1.4); all return KIO_OK or KIO_ERR and set
 * kio_set_error() detail on failure. ---- */
int kio_read_token(FILE *f, int binary, char *buf, size_t cap);
int kio_expect_token(FILE *f, int binary, const char *token);
void kio_write_token(FILE *f, int binary, const char *token);
/* Next char without consuming (text: after skipping whitespace); EOF -> -1. */
int kio_peek(FILE *f, int binary);
/* If next char is '<' returns the following char (nothing consumed). */
int kio_peek_token(FILE *f, int binary);

int kio_read_int32(FILE *f, int binary, int32_t *v);
void kio_write_int32(FILE *f, int binary, int32_t v);
int kio_read_uint32(FILE *f, int binary, uint32_t *v);
void kio_write_uint32(FILE *f, int binary, uint32_t v);
int kio_read_uint16(FILE *f, int binary, uint16_t *v);
void kio_write_uint16(FILE *f, int binary, uint16_t v);
int kio_read_float(FILE *f, int binary, float *v);   /* accepts a double */
void kio_write_float(FILE *f, int binary, float v);
int kio_read_double(FILE *f, int binary, double *v); /* accepts a float */
void kio_write_double(FILE *f, int binary, double v);
int kio_read_bool(FILE *f, int binary, int *v);
void kio_write_bool(FILE *f, int binary, int v);
/* WriteIntegerVector format (1.4); *v malloc'd, owned by the caller. */
int kio_read_int_vector(FILE *f, int binary, int32_t **v, int32_t *n);
void kio_write_int_vector(FILE *f, int binary, const int32_t *v, int32_t n);
/* Writes a float/double as C++ "<<" with precision 7 (text mode). */
void kio_write_text_real(FILE *f, double v);

#ifdef __cplusplus
}
#endif
#endif
