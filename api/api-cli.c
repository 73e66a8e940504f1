/* The aligning programs' options onto the public structs (api-cli.h). */
#include "api-cli.h"

void kga_cli_options(const galign_pipeline_cfg *cfg, kga_aligner_opts *ao,
                     kga_archive_opts *xo) {
  kga_aligner_opts_init(ao);
  ao->beam = cfg->opts.beam;
  ao->retry_beam = cfg->opts.retry_beam;
  ao->transition_scale = cfg->opts.transition_scale;
  ao->acoustic_scale = cfg->opts.acoustic_scale;
  ao->self_loop_scale = cfg->opts.self_loop_scale;
  ao->careful = cfg->opts.careful;
  ao->num_gpus = cfg->opts.num_gpus;
  ao->use_gpu = (kga_use_gpu)cfg->use_gpu;
  ao->batch_size = cfg->batch_size;
  ao->log = kga_log_stderr;
  kga_archive_opts_init(xo);
  xo->alignments_wspecifier = cfg->ali_wspecifier;
  xo->scores_wspecifier = cfg->scores_wspecifier;
  xo->per_frame_wspecifier = cfg->per_frame_wspecifier;
  if (cfg->margin_mode == 1) xo->prior_alignments_rspecifier = cfg->prior_rspecifier;
  xo->margin_from_output = cfg->margin_mode == 2;
  xo->margin = cfg->margin;
}
