/* ra-read-bench: the aligning programs' feature reading alone (gpu-align/
 * align-pipeline.c's lookups without the aligner): each key of a list
 * looked up in the features' random-access reader (has_key, then take, as
 * the pipeline does). What the job's reading costs, on a machine without a
 * GPU.
 *
 *   ra-read-bench [--threads=N] [--checksum=false] <key-list> <feature-rspecifier>
 *
 * key-list: a text file, a key first on each line (a graphs' or scp's keys).
 * --threads: the archive parsed ahead on N threads (kio_ra_open_ahead, as
 * the programs do by default); 0: kio_ra_open (one thread reading ahead for
 * sorted archives, as before). Prints one line: keys, found, frames,
 * seconds, GB/s of features, the time spent waiting in the lookups, and a
 * checksum of every value (the same for any --threads). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/io/io.h"
#include "base/io/table.h"
#include "base/matrix/matrix.h"
#include "base/program/program.h"
#include "base/sys/log.h"
#include "base/sys/options.h"

int main(int argc, char *argv[]) {
  kio_program_start(argc, argv);
  const char *usage =
      "The aligning programs' feature lookups (has_key, take), timed.\n"
      "Usage: ra-read-bench [options] <key-list> <feature-rspecifier>\n";
  int32_t threads = 0;
  int sum_values = 1;
  kio_opts *po = kio_opts_new(usage);
  kio_opts_int(po, "threads", &threads, "Threads parsing the feature archive ahead (0: none)");
  kio_opts_bool(po, "checksum", &sum_values,
                "Sum every value (false: the lookups alone, as the pipeline's reading thread)");
  kio_program_args(po, argc, argv, 2, 2);
  FILE *kf = fopen(kio_opts_arg(po, 1), "r");
  if (!kf) {
    KIO_ERROR("Cannot open key list %s", kio_opts_arg(po, 1));
    kio_fatal_exit();
  }
  double t0 = kio_now_s();
  kio_ra_reader *r;
  if ((threads > 0 ? kio_ra_open_ahead(&r, kio_opts_arg(po, 2), &kio_matrix_holder,
                                       kio_matrix_body_bytes, threads, 32 + 16 * threads)
                   : kio_ra_open(&r, kio_opts_arg(po, 2), &kio_matrix_holder)) != KIO_OK)
    kio_fatal_exit();
  kio_matrix m = {0, 0, NULL, 0};
  char line[4096];
  long keys = 0, found = 0, frames = 0;
  double bytes = 0, wait = 0;
  unsigned long long sum = 0;
  while (fgets(line, sizeof line, kf)) {
    char *key = strtok(line, " \t\r\n");
    if (!key) continue;
    keys++;
    double t1 = kio_now_s();
    int has = kio_ra_has_key(r, key);
    if (has < 0) kio_fatal_exit();
    const kio_matrix *v = &m;
    if (has) {
      int rc = kio_ra_take(r, key, &m);
      if (rc == 1) v = kio_ra_value(r, key);
      else if (rc != KIO_OK) v = NULL;
      if (!v) kio_fatal_exit();
    }
    wait += kio_now_s() - t1;
    if (!has) continue;
    found++;
    frames += v->rows;
    size_t n = (size_t)v->rows * (size_t)v->cols;
    bytes += (double)n * sizeof(float);
    for (size_t i = 0; sum_values && i < n; i++) {
      unsigned u;
      memcpy(&u, &v->data[i], sizeof u);
      sum = sum * 1099511628211ULL + u;
    }
  }
  fclose(kf);
  int rc = kio_ra_close(r);
  double t = kio_now_s() - t0;
  printf("keys %ld found %ld frames %ld: %.3f s, %.2f GB/s, lookups %.3f s, checksum %016llx "
         "(threads %d)\n", keys, found, frames, t, bytes / 1e9 / (t > 0 ? t : 1), wait, sum,
         threads);
  kio_matrix_free(&m);
  kio_opts_free(po);
  return rc == KIO_OK ? 0 : 255;
}
