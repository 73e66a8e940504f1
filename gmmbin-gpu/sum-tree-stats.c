/* sum-tree-stats: Kaldi's program (bin/sum-tree-stats.cc): the same usage,
 * options, output bytes, log line and exit codes. The files are read by
 * several threads (this process's CPU share) and added per event in
 * argument order (tree/tree-sum.c), so the sums round as Kaldi's. */
#include <limits.h>
#include <malloc.h>
#include <stdlib.h>

#include "base/io/io.h"
#include "base/program/program.h"
#include "base/sys/kaldi-msg.h"
#include "base/sys/log.h"
#include "base/sys/options.h"
#include "tree/tree-stats.h"

static const char *const kUsage =
    "Sum statistics for phonetic-context tree building.\n"
    "Usage:  sum-tree-stats [options] tree-accs-out tree-accs-in1 tree-accs-in2 ...\n"
    "e.g.: \n"
    " sum-tree-stats treeacc 1.treeacc 2.treeacc 3.treeacc\n";

int main(int argc, char **argv) {
  kio_program_start(argc, argv);
  /* each file's tables are freed after adding and the next file's made:
   * kept in the heap instead of mmap'ed afresh (page faults were a fifth of
   * the time) */
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  kio_opts *po = kio_opts_new(kUsage);
  int binary = 1;
  kio_opts_bool(po, "binary", &binary, "Write output in binary mode");
  kio_program_args(po, argc, argv, 2, INT_MAX);
  int n = kio_opts_num_args(po) - 1;
  const char **in = malloc(sizeof(char *) * (size_t)n);
  if (!in) {
    KIO_ERROR("out of memory");
    kio_fatal_exit();
  }
  for (int i = 0; i < n; i++) in[i] = kio_opts_arg(po, i + 2);
  tstat_table sum;
  if (tstat_sum(in, n, 0, &sum) != KIO_OK) kio_fatal_exit();
  if (tstat_write(kio_opts_arg(po, 1), binary, &sum) != KIO_OK) kio_fatal_exit();
  KIO_KALDI(TREE_SUM_WROTE, sum.n);
  size_t num = sum.n;
  tstat_free(&sum);
  free(in);
  kio_opts_free(po);
  return num != 0 ? 0 : 1;
}
