/* align-equal-compiled: equally spaced alignments to start training
 * (reference 6.1-6.2), a drop-in for Kaldi's bin/align-equal-compiled. Only
 * graph topology is used; the work is tiny, so it runs on the CPU.
 *
 * Log lines carry Kaldi's own function/file/line so logs diff cleanly. */
#include <stdio.h>
#include <stdlib.h>

#include "base/model/fst.h"
#include "base/io/io.h"
#include "base/sys/kaldi-msg.h"
#include "base/sys/log.h"
#include "base/matrix/matrix.h"
#include "base/sys/options.h"
#include "base/io/table.h"
#include "gpu-align/gpu-align.h"
#include "base/program/program.h"


static const char *const kUsage =
    "Write an equally spaced alignment (for getting training started)"
    "Usage:  align-equal-compiled <graphs-rspecifier> <features-rspecifier> "
    "<alignments-wspecifier>\n"
    "e.g.: \n"
    " align-equal-compiled 1.mdl 1.fsts scp:train.scp ark:equal.ali\n";

int main(int argc, char **argv) {
  kio_program_start(argc, argv);
  kio_opts *po = kio_opts_new(kUsage);
  int binary = 1;  /* registered for compatibility; the wspecifier decides */
  kio_opts_bool(po, "binary", &binary, "Write output in binary mode");
  kio_program_args(po, argc, argv, 3, 3);

  kio_seq_reader *graphs = NULL;
  kio_ra_reader *feats = NULL;
  kio_writer *writer = NULL;
  kio_int_vec ali = {0, NULL};
  /* Opened in Kaldi's order, so the first bad specifier is the one reported. */
  if (kio_seq_open(&graphs, kio_opts_arg(po, 1), &kio_fst_holder) != KIO_OK ||
      kio_ra_open(&feats, kio_opts_arg(po, 2), &kio_matrix_holder) != KIO_OK ||
      kio_writer_open(&writer, kio_opts_arg(po, 3), &kio_int_vec_holder) != KIO_OK)
    goto fatal_exit;

  long done = 0, no_feat = 0, error = 0;
  size_t ali_cap = 0;
  int ret = -1;
  for (; !kio_seq_done(graphs); kio_seq_next(graphs)) {
    const char *key = kio_seq_key(graphs);
    if (!kio_ra_has_key(feats, key)) {
      KIO_KALDI(AEC_NO_FEATS, key);
      no_feat++;
      continue;
    }
    const kio_matrix *m = kio_ra_value(feats, key);
    const kio_fst *fst = m ? kio_seq_value(graphs) : NULL;
    if (!m || !fst) goto fatal_exit;  /* the reader logged the ERROR */
    if (m->rows == 0) {
      KIO_KALDI(AEC_ZERO_LENGTH, key);
      error++;
      continue;
    }
    if (fst->start < 0) {
      KIO_KALDI(AEC_EMPTY_GRAPH, key);
      error++;
      continue;
    }
    if ((size_t)m->rows > ali_cap) {
      int32_t *v = realloc(ali.v, (size_t)m->rows * sizeof *v);
      if (!v) {
        KIO_ERROR("out of memory for an alignment of %d frames", (int)m->rows);
        goto fatal_exit;
      }
      ali.v = v;
      ali_cap = (size_t)m->rows;
    }
    if (galign_equal_align(fst, m->rows, galign_key_seed(key), ali.v)) {
      ali.n = m->rows;
      if (!writer) {  /* empty wspecifier: Kaldi dies on the first Write */
        KIO_ERROR("Trying to use empty TableWriter (perhaps you passed the empty "
                  "string as an argument to a program?)");
        goto fatal_exit;
      }
      if (kio_writer_write(writer, key, &ali) != KIO_OK) goto fatal_exit;
      done++;
    } else {
      KIO_KALDI(AEC_NOT_ALIGNED, key);
      error++;
    }
  }

  if (done != 0 && no_feat == 0 && error == 0)
    KIO_KALDI(AEC_SUCCESS, done);
  else
    KIO_KALDI(AEC_COMPUTED, done, no_feat, error);
  ret = done != 0 ? 0 : 1;

  /* An error found when closing a table (Kaldi: in a destructor, after the
   * writer was closed) is fatal. The readers are closed first: after a
   * failed input the alignments are incomplete and the writer is not
   * closed (an output pipe's command would end its stream as complete). */
  int closed_ok = kio_ra_close(feats) == KIO_OK;
  closed_ok = kio_seq_close(graphs) == KIO_OK && closed_ok;
  if (!closed_ok || kio_writer_close(writer) != KIO_OK) kio_fatal_exit();
  free(ali.v);
  kio_opts_free(po);
  return ret;

fatal_exit:
  /* The ERROR is logged; the tables stay open (closing early, e.g. a pipe
   * cut short, must not add messages of its own), the outputs abandoned. */
  kio_fatal_exit();
}
