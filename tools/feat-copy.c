/* feat-copy: reads a features rspecifier through our table code (so a
 * recognised feature pipeline runs in-process, see base/feat.h) and writes
 * the matrices unchanged, as Kaldi's copy-feats does. For the feature
 * pipeline tests (tests/cli/featpipe.sh) and tools/feat-bench.sh. */
#include <stdio.h>
#include <stdlib.h>

#include "../base/io.h"
#include "../base/log.h"
#include "../base/matrix.h"
#include "../base/options.h"
#include "../base/table.h"

int main(int argc, char *argv[]) {
  const char *usage =
      "Copy features read through the in-process feature pipelines.\n"
      "Usage: feat-copy [options] <feature-rspecifier> <feature-wspecifier>\n"
      "e.g.: feat-copy \"ark:apply-cmvn scp:cmvn.scp scp:feats.scp ark:- | add-deltas ark:- ark:- |\" ark:out.ark\n";
  kio_log_set_program(argv[0]);
  kio_opts *po = kio_opts_new(usage);
  int rc = kio_opts_parse(po, argc, argv);
  if (rc == KIO_OPTS_HELP) exit(0);
  if (rc != KIO_OPTS_OK) exit(255);
  if (kio_opts_num_args(po) != 2) {
    kio_opts_print_usage(po);
    exit(1);
  }
  kio_seq_reader *r;
  kio_writer *w;
  if (kio_seq_open(&r, kio_opts_arg(po, 1), &kio_matrix_holder) != KIO_OK) kio_fatal_exit();
  if (kio_writer_open(&w, kio_opts_arg(po, 2), &kio_matrix_holder) != KIO_OK || !w) kio_fatal_exit();
  long n = 0;
  for (; !kio_seq_done(r); kio_seq_next(r)) {
    const void *m = kio_seq_value(r);
    if (!m) kio_fatal_exit();
    if (kio_writer_write(w, kio_seq_key(r), m) != KIO_OK) kio_fatal_exit();
    n++;
  }
  if (kio_seq_close(r) != KIO_OK) kio_fatal_exit();
  if (kio_writer_close(w) != KIO_OK) kio_fatal_exit();
  KIO_LOG("Copied %ld feature matrices.", n);
  kio_opts_free(po);
  return n ? 0 : 1;
}
