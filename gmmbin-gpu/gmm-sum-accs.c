/* gmm-sum-accs: Kaldi's program (gmmbin/gmm-sum-accs.cc): the same usage,
 * options, output bytes, log lines and exit codes. The input files are read
 * by several threads (this process's CPU share) and added in argument order
 * (train/sum-accs.h), so the sums round as Kaldi's. */
#include <limits.h>
#include <stdlib.h>

#include "base/io/io.h"
#include "base/program/program.h"
#include "base/sys/log.h"
#include "base/sys/options.h"
#include "gpu-acc/gpu-acc.h"
#include "train/sum-accs.h"

static const char *const kUsage =
    "Sum multiple accumulated stats files for GMM training.\n"
    "Usage: gmm-sum-accs [options] <stats-out> <stats-in1> <stats-in2> ...\n"
    "E.g.: gmm-sum-accs 1.acc 1.1.acc 1.2.acc\n";

int main(int argc, char **argv) {
  kio_program_start(argc, argv);
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
  const char *out = kio_opts_arg(po, 1);
  gacc_stats sum;
  if (trn_sum_accs(in, n, 0, NULL, &sum) != KIO_OK) kio_fatal_exit();
  if (gacc_stats_write(out, binary, &sum) != KIO_OK) kio_fatal_exit();
  trn_sum_accs_log(NULL, n, &sum, out);
  gacc_stats_free(&sum);
  free(in);
  kio_opts_free(po);
  return 0;
}
