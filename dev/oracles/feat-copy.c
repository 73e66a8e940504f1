/* feat-copy: reads a features rspecifier through our table code (so a
 * recognised feature pipeline runs in-process, see base/feat/feat.h) and writes
 * the matrices unchanged, as Kaldi's copy-feats does. For the feature
 * pipeline tests (tests/cli/featpipe.sh) and tools/feat-bench.sh. With
 * --keys=FILE the features are read by random access, the keys being the
 * first words of FILE's lines, as the aligning programs read them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/io/io.h"
#include "base/sys/log.h"
#include "base/matrix/matrix.h"
#include "base/sys/options.h"
#include "base/io/table.h"
#include "base/program/program.h"

int main(int argc, char *argv[]) {
  kio_program_start(argc, argv);
  const char *usage =
      "Copy features read through the in-process feature pipelines.\n"
      "Usage: feat-copy [options] <feature-rspecifier> <feature-wspecifier>\n"
      "e.g.: feat-copy \"ark:apply-cmvn scp:cmvn.scp scp:feats.scp ark:- | add-deltas ark:- ark:- |\" ark:out.ark\n";
  kio_log_set_program(argv[0]);
  kio_opts *po = kio_opts_new(usage);
  char *keys = strdup("");
  kio_opts_string(po, "keys", &keys, "Read by random access, these keys (first word of each line)");
  kio_program_parse(po, argc, argv, 2, 2);
  kio_writer *w;
  long n = 0;
  if (*keys) {
    kio_ra_reader *ra;
    FILE *kf = fopen(keys, "r");
    if (!kf) { KIO_ERROR("Cannot open %s", keys); kio_fatal_exit(); }
    if (kio_ra_open(&ra, kio_opts_arg(po, 1), &kio_matrix_holder) != KIO_OK) kio_fatal_exit();
    if (kio_writer_open(&w, kio_opts_arg(po, 2), &kio_matrix_holder) != KIO_OK || !w) kio_fatal_exit();
    char line[4096], key[4096];
    while (fgets(line, sizeof line, kf)) {
      if (sscanf(line, "%4095s", key) != 1) continue;
      int h = kio_ra_has_key(ra, key);
      if (h < 0) kio_fatal_exit();
      if (h == 0) { KIO_WARN("No features for %s", key); continue; }
      const void *m = kio_ra_value(ra, key);
      if (!m || kio_writer_write(w, key, m) != KIO_OK) kio_fatal_exit();
      n++;
    }
    fclose(kf);
    if (kio_ra_close(ra) != KIO_OK || kio_writer_close(w) != KIO_OK) kio_fatal_exit();
    KIO_LOG("Copied %ld feature matrices.", n);
    kio_opts_free(po);
    free(keys);
    return n ? 0 : 1;
  }
  kio_seq_reader *r;
  if (kio_seq_open(&r, kio_opts_arg(po, 1), &kio_matrix_holder) != KIO_OK) kio_fatal_exit();
  if (kio_writer_open(&w, kio_opts_arg(po, 2), &kio_matrix_holder) != KIO_OK || !w) kio_fatal_exit();
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
  free(keys);
  return n ? 0 : 1;
}
