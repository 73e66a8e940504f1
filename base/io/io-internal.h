/* Internal to base/: variants of the io.h functions used by the table code,
 * which reports failures with its own (Kaldi's table) messages. */
#ifndef KIO_IO_INTERNAL_H
#define KIO_IO_INTERNAL_H

#include "io.h"

/* Like kio_input_reopen but, when quiet, logs nothing on failure (the reason
 * is left in kio_last_error()). *in is closed and NULL on failure. */
int kio_input_reopen_q(kio_input **in, const char *rx, int *binary, int quiet);
/* Like kio_output_open; quiet: no ERROR line on failure. */
int kio_output_open_q(kio_output **out, const char *wx, int binary,
                      int write_header, int quiet);
/* 1 if the input is a pipe whose close reported a nonzero status. */
int kio_input_is_pipe(const kio_input *in);
/* 1 when the input is a pipe computed by the provider (kio_pipe_provider)
 * whose objects of holder h can be taken directly (kio_input_take) instead
 * of parsed from its bytes; only while nothing has been read from the
 * input's FILE*. */
int kio_input_can_take(const kio_input *in, const struct kio_holder *h);
/* The provider's take(): KIO_OK, KIO_EOF or KIO_ERR. */
int kio_input_take(kio_input *in, char **key, size_t *keycap, void *obj);
/* "standard input" for ""/"-", else rx (Kaldi's PrintableRxfilename). */
const char *kio_printable_rx(const char *rx);
const char *kio_printable_wx(const char *wx);
/* Reads one key: skips whitespace, reads up to whitespace/EOF into a growing
 * buffer. Returns KIO_OK, KIO_EOF (nothing before EOF) or KIO_ERR. */
int kio_read_word(FILE *f, char **buf, size_t *cap);
/* Before a pipe's command starts: what we wrote to the descriptors it
 * shares (stdout, stderr) goes first. Not fflush(NULL): the command gets
 * none of our buffers (it is spawned, not forked), and flushing every
 * stream waits for other threads' streams, e.g. output pipes blocked on a
 * slow reader (the trainer's fsts.JOB.gz writers). */
void kio_flush_shared_streams(void);

#endif
