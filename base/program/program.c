#include "program.h"

#include "base/feat/feat.h"

void kio_program_start(int argc, char **argv) {
  (void)argc;
  (void)argv;
  kio_feat_install();
}
