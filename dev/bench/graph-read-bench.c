/* graph-read-bench: the aligning programs' graph reading alone (the
 * pipeline's graph queue: each entry of a graph archive taken in order),
 * what the job's reading of graphs costs, on a machine without a GPU.
 *
 *   graph-read-bench [--threads=N] <graphs-rspecifier>
 *   graph-read-bench --scan <graph-archive-file>
 *
 * --threads: the archive parsed ahead on N threads (kio_seq_read_ahead with
 * kio_fst_body_bytes, as the programs do by default); 0: read in order on
 * the calling thread. Prints one line: graphs, states, arcs, seconds, GB/s
 * of graph bytes (16 per arc, 12 per state), and a checksum of every arc
 * (the same for any --threads). --scan: only the read-ahead's serial part,
 * finding where each entry ends (keys and kio_fst_body_bytes, as
 * base/io/table-ahead.c's scan), on a plain file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/io/table.h"
#include "base/model/fst.h"
#include "base/program/program.h"
#include "base/sys/log.h"
#include "base/sys/options.h"

int main(int argc, char *argv[]) {
  kio_program_start(argc, argv);
  const char *usage =
      "The aligning programs' graph reading (in order, take), timed.\n"
      "Usage: graph-read-bench [options] <graphs-rspecifier>\n";
  int32_t threads = 0;
  kio_opts *po = kio_opts_new(usage);
  kio_opts_int(po, "threads", &threads, "Threads parsing the graph archive ahead (0: none)");
  int scan = 0;
  kio_opts_bool(po, "scan", &scan, "Only find where each entry ends (the serial part)");
  kio_program_args(po, argc, argv, 1, 1);
  double t0 = kio_now_s();
  if (scan) {
    FILE *f = fopen(kio_opts_arg(po, 1), "rb");
    if (!f) return 255;
    setvbuf(f, NULL, _IOFBF, 512);
    char key[1024];
    long long n = 0, bytes = 0;
    while (fscanf(f, "%1023s", key) == 1 && getc(f) == ' ') {
      int64_t b = kio_fst_body_bytes(f, 1);
      if (b < 0 || fseeko(f, (off_t)b, SEEK_CUR) != 0) break;
      n++;
      bytes += b;
    }
    double t = kio_now_s() - t0;
    printf("scan: graphs %lld, %.3f s, %.2f GB/s of graph bodies\n", n, t, (double)bytes / 1e9 / t);
    fclose(f);
    kio_opts_free(po);
    return 0;
  }
  kio_seq_reader *r;
  if (kio_seq_open(&r, kio_opts_arg(po, 1), &kio_fst_holder) != KIO_OK) return 255;
  int ahead = threads > 0 && kio_seq_read_ahead(r, kio_fst_body_bytes, threads, 32 + 16 * threads);
  kio_fst g = {0};
  long long n = 0, states = 0, arcs = 0;
  unsigned long long sum = 0;
  for (; !kio_seq_done(r); kio_seq_next(r), n++) {
    if (kio_seq_take(r, &g) != KIO_OK) return 255;
    states += g.num_states;
    arcs += g.num_arcs;
    for (int32_t k = 0; k < g.num_arcs; k++)
      sum = sum * 1000003u + (unsigned)g.arcs[k].ilabel * 31u + (unsigned)g.arcs[k].nextstate;
  }
  int rc = kio_seq_close(r);
  double t = kio_now_s() - t0;
  double gb = (16.0 * (double)arcs + 12.0 * (double)states) / 1e9;
  printf("graphs %lld, states %lld, arcs %lld, %.3f s, %.2f GB/s (%s), checksum %016llx\n", n,
         states, arcs, t, gb / t, ahead ? "read ahead on threads" : "in order", sum);
  kio_fst_free(&g);
  kio_opts_free(po);
  return rc == KIO_OK ? 0 : 255;
}
