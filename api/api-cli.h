/* For the programs (gmmbin-gpu/): the aligning programs' command-line
 * options (gpu-align/align-pipeline.h, galign_pipeline_cli) onto the public
 * library's options structs, so the programs do their work through
 * include/kaldi-gpu-align.h. Not part of the public library. */
#ifndef KGA_API_CLI_H
#define KGA_API_CLI_H

#include "include/kaldi-gpu-align.h"
#include "gpu-align/align-pipeline.h"

/* cfg as galign_pipeline_cli_apply left it (decoding options, --use-gpu,
 * --batch-size, --num-gpus, per-frame output, margin mode); the strings
 * are borrowed. Log lines to stderr in Kaldi's format. */
void kga_cli_options(const galign_pipeline_cfg *cfg, kga_aligner_opts *ao,
                     kga_archive_opts *xo);

#endif
