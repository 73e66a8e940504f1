/* gmm-acc-stats-ali: Kaldi's program (gmmbin/gmm-acc-stats-ali.cc, reference
 * section 4) with the accumulation on a CUDA GPU when one is usable.
 * Same arguments, options, messages, output file and exit codes. The work
 * (features in order, alignments by key, batches on the backend --use-gpu
 * chooses, Kaldi's messages in Kaldi's order) goes through the public
 * library (include/kaldi-gpu-align.h: kga_acc_archive, kga_acc_write); the
 * command line and the fatal exit are the program's own (base/). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/io/io.h"
#include "base/program/program.h"
#include "base/sys/log.h"
#include "base/sys/options.h"
#include "device/gpu.h"
#include "include/kaldi-gpu-align.h"

int main(int argc, char *argv[]) {
  kio_program_start(argc, argv);
  const char *usage =
      "Accumulate stats for GMM training.\n"
      "Usage:  gmm-acc-stats-ali [options] <model-in> <feature-rspecifier> "
      "<alignments-rspecifier> <stats-out>\n"
      "e.g.:\n gmm-acc-stats-ali 1.mdl scp:train.scp ark:1.ali 1.acc\n";
  int binary = 1;
  char *use_gpu = strdup("optional");
  kio_opts *po = kio_opts_new(usage);
  kio_opts_bool(po, "binary", &binary, "Write output in binary mode");
  kio_opts_string(po, "use-gpu", &use_gpu,
                  "yes|no|optional|wait: accumulate on a CUDA GPU (optional: if one "
                  "is usable, else on the CPU)");
  char *gpu_memory = strdup("");
  kio_opts_string(po, "gpu-memory", &gpu_memory,
                  "Device memory this job may use: bytes with K/M/G, or a percentage of the "
                  "device (default: KALDI_GPU_MEMORY, else 2G; affects only speed)");
  kio_program_args(po, argc, argv, 4, 4);
  kga_acc_opts o;
  kga_acc_opts_init(&o);
  if (kga_parse_use_gpu(use_gpu, &o.use_gpu) != KGA_OK) {
    KIO_ERROR("Invalid value --use-gpu=%s: use yes|no|optional|wait", use_gpu);
    kio_fatal_exit();
  }
  o.log = kga_log_stderr;
  if (kio_gpu_set_job_memory(gpu_memory) != KIO_OK) kio_fatal_exit();
  const char *model_in = kio_opts_arg(po, 1), *feature_rspecifier = kio_opts_arg(po, 2),
             *ali_rspecifier = kio_opts_arg(po, 3), *accs_wxfilename = kio_opts_arg(po, 4);

  kga_acc *acc;
  kga_acc_counts n;
  /* An error the readers detect when closed (read error, failed pipe) is
   * fatal before the statistics are written (Kaldi finds it in the
   * destructors, after writing them). */
  if (kga_acc_new(&acc, model_in, &o) != KGA_OK ||
      kga_acc_archive(acc, feature_rspecifier, ali_rspecifier, NULL, NULL, &n) != KGA_OK ||
      kga_acc_write(acc, accs_wxfilename, binary) != KGA_OK)
    kio_fatal_exit();
  kga_acc_free(acc);
  kio_opts_free(po);
  free(use_gpu);
  free(gpu_memory);
  return n.done != 0 ? 0 : 1;
}
