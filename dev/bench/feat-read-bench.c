/* feat-read-bench: a features rspecifier read sequentially and nothing else
 * done with it (a sum of every value's bits, unless --checksum=false), as
 * the accumulating programs read their features: what the reading itself
 * costs, e.g. a feature-cache hit against the chain computed
 * (dev/bench/featcache-read-bench.sh).
 *
 *   feat-read-bench [--checksum=false] <feature-rspecifier>
 *
 * Prints one line: entries, frames, GB of features, seconds to the first
 * entry, seconds in all, GB/s, the checksum (the same for a hit, a miss and
 * the uncached chain). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/io/table.h"
#include "base/matrix/matrix.h"
#include "base/program/program.h"
#include "base/sys/log.h"
#include "base/sys/options.h"

int main(int argc, char *argv[]) {
  kio_program_start(argc, argv);
  const char *usage =
      "Read features sequentially, timed (the reading alone).\n"
      "Usage: feat-read-bench [options] <feature-rspecifier>\n";
  int sum_values = 1;
  kio_opts *po = kio_opts_new(usage);
  kio_opts_bool(po, "checksum", &sum_values, "Sum every value's bits (false: touch nothing)");
  kio_program_args(po, argc, argv, 1, 1);
  double t0 = kio_now_s(), first = -1;
  kio_seq_reader *r;
  if (kio_seq_open(&r, kio_opts_arg(po, 1), &kio_matrix_holder) != KIO_OK) kio_fatal_exit();
  long entries = 0, frames = 0;
  double bytes = 0;
  uint64_t sum = 0;
  for (; !kio_seq_done(r); kio_seq_next(r)) {
    const kio_matrix *m = kio_seq_value(r);
    if (!m) kio_fatal_exit();
    if (first < 0) first = kio_now_s() - t0;
    entries++;
    frames += m->rows;
    size_t n = (size_t)m->rows * (size_t)m->cols;
    bytes += (double)n * sizeof(float);
    uint32_t s = 0;
    const uint32_t *u = (const uint32_t *)(const void *)m->data;
    for (size_t i = 0; sum_values && i < n; i++) s += u[i];
    sum = sum * 1099511628211ULL + s;
  }
  int rc = kio_seq_close(r);
  double t = kio_now_s() - t0;
  printf("entries %ld frames %ld: %.3f GB, first entry %.3f s, %.3f s, %.2f GB/s, checksum %016" PRIx64
         "\n", entries, frames, bytes / 1e9, first, t, bytes / 1e9 / (t > 0 ? t : 1), sum);
  kio_opts_free(po);
  return rc == KIO_OK ? 0 : 255;
}
