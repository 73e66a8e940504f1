#include "program.h"

#include "base/feat/feat.h"
#include "base/matrix/blas-profile.h"

void kio_program_start(int argc, char **argv) {
  kio_blas_query_main(argc, argv);  /* exits when run as the BLAS core query */
  kio_feat_install();
}
