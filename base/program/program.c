#include "program.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/feat/feat.h"
#include "base/io/io.h"
#include "base/matrix/blas-profile.h"
#include "base/sys/log.h"

void kio_program_start(int argc, char **argv) {
  kio_blas_query_main(argc, argv);  /* exits when run as the BLAS core query */
  kio_feat_install();
}

void kio_program_parse(kio_opts *po, int argc, char **argv, int min_args, int max_args) {
  int rc = kio_opts_parse(po, argc, argv);
  if (rc == KIO_OPTS_HELP) exit(0);
  if (rc != KIO_OPTS_OK) kio_fatal_exit();
  int n = kio_opts_num_args(po);
  if (n < min_args || n > max_args) {
    kio_opts_print_usage(po);
    exit(1);
  }
}

void kio_program_args(kio_opts *po, int argc, char **argv, int min_args, int max_args) {
  kio_program_parse(po, argc, argv, min_args, max_args);
  kio_log_ours();
}

void kio_program_exec_kaldi(const char *name, char **argv, const char *why) {
  char kaldi[4096];
  if (kio_find_kaldi_program(name, kaldi, sizeof kaldi)) {
    KIO_LOG("%s: running Kaldi's %s instead", why, kaldi);
    fflush(stderr);
    argv[0] = kaldi;
    execv(kaldi, argv);
    KIO_ERROR("Cannot run %s: %s", kaldi, strerror(errno));
  } else {
    KIO_ERROR("%s, and Kaldi's own %s is not on PATH", why, name);
  }
  kio_fatal_exit();
}
