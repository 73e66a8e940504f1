/* The command-line options the aligning programs share (align-pipeline.h):
 * decoding options, --write-per-frame-acoustic-loglikes, --use-gpu,
 * --batch-size, --num-gpus, and margin mode (--prior-alignments, --margin,
 * or KALDI_GPU_MARGIN for unchanged recipes: align-margin.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/sys/log.h"
#include "base/sys/options.h"
#include "align-margin.h"
#include "align-pipeline.h"
#include "base/sys/settings.h"
#include "device/gpu.h"

void galign_pipeline_cli_register(kio_opts *po, galign_pipeline_cli *cli,
                                  galign_pipeline_cfg *cfg) {
  galign_opts_default(&cfg->opts);
  cli->per_frame_wspecifier = strdup("");
  cli->use_gpu = strdup("optional");
  cli->batch_size = 8192;  /* a cap (batches start early, see DYN_MIN); best on an H200 (docs/benchmarks.md) */
  galign_opts_register(po, &cfg->opts);
  kio_opts_string(po, "write-per-frame-acoustic-loglikes", &cli->per_frame_wspecifier,
                  "Wspecifier for table of vectors containing the acoustic log-likelihoods "
                  "per frame for each utterance. E.g. ark:foo/per_frame_logprobs.1.ark");
  kio_opts_string(po, "use-gpu", &cli->use_gpu,
                  "yes|no|optional|wait: align on a CUDA GPU (optional: if one is usable, "
                  "else on the CPU)");
  cli->gpu_memory = strdup("");
  kio_opts_string(po, "gpu-memory", &cli->gpu_memory,
                  "Device memory this job may use: bytes with K/M/G, or a percentage of the "
                  "device (default: KALDI_GPU_MEMORY, else 2G; affects only speed)");
  kio_opts_int(po, "batch-size", &cli->batch_size,
               "Number of utterances aligned together (affects only speed and memory)");
  kio_opts_int(po, "num-gpus", &cfg->opts.num_gpus,
               "GPUs a batch is split over, through the GPU service (affects only speed)");
  cli->prior_rspecifier = strdup("");
  cli->margin = 64;
  kio_opts_string(po, "prior-alignments", &cli->prior_rspecifier,
                  "Rspecifier of previous alignments: search only a band of --margin frames "
                  "around each (utterances whose prior does not fit get the full search). "
                  "Empty: full search, unless KALDI_GPU_MARGIN=N is set (then the prior is "
                  "read from the file the alignments will replace)");
  kio_opts_int(po, "margin", &cli->margin,
               "Frames on each side of the prior alignment that the band covers "
               "(with --prior-alignments)");
}

int galign_pipeline_cli_apply(const galign_pipeline_cli *cli, galign_pipeline_cfg *cfg) {
  if (galign_parse_use_gpu(cli->use_gpu, &cfg->use_gpu) != KIO_OK) {
    KIO_ERROR("Invalid value --use-gpu=%s: use yes|no|optional|wait", cli->use_gpu);
    return KIO_ERR;
  }
  if (kio_gpu_set_job_memory(cli->gpu_memory) != KIO_OK) return KIO_ERR;
  if (cli->batch_size < 1) {
    KIO_ERROR("Invalid value --batch-size=%d: must be >= 1", (int)cli->batch_size);
    return KIO_ERR;
  }
  if (cfg->opts.num_gpus < 1 || cfg->opts.num_gpus > 16) {
    KIO_ERROR("Invalid value --num-gpus=%d: must be 1..16", (int)cfg->opts.num_gpus);
    return KIO_ERR;
  }
  if (cli->margin < 0) {
    KIO_ERROR("Invalid value --margin=%d: must be >= 0", (int)cli->margin);
    return KIO_ERR;
  }
  cfg->per_frame_wspecifier = cli->per_frame_wspecifier;
  cfg->batch_size = cli->batch_size;
  cfg->prior_rspecifier = cli->prior_rspecifier;
  cfg->margin = cli->margin;
  cfg->margin_mode = cli->prior_rspecifier[0] != '\0';
  const char *env = kio_setting_str(KIO_SET_MARGIN);
  if (!cfg->margin_mode && env && *env) {
    /* Unchanged recipes: the prior is the file the output will replace,
     * read by galign_margin_open before the output is opened. */
    char *end;
    errno = 0;
    long m = strtol(env, &end, 10);
    if (*end || errno || m < 0 || m > 1000000) {
      KIO_LOG("KALDI_GPU_MARGIN=%s is not a number of frames: full search", env);
    } else {
      cfg->margin = (int32_t)m;
      cfg->margin_mode = 2;
    }
  }
  return KIO_OK;
}

int galign_margin_open(const galign_pipeline_cfg *cfg, galign_prior_table **priors) {
  *priors = NULL;
  if (cfg->margin_mode == 1) return galign_prior_table_read(priors, cfg->prior_rspecifier);
  if (cfg->margin_mode == 2) return galign_prior_from_output(cfg->ali_wspecifier, priors);
  return KIO_OK;
}

void galign_pipeline_cli_free(galign_pipeline_cli *cli) {
  free(cli->per_frame_wspecifier);
  free(cli->use_gpu);
  free(cli->gpu_memory);
  free(cli->prior_rspecifier);
  cli->per_frame_wspecifier = cli->use_gpu = cli->gpu_memory = cli->prior_rspecifier = NULL;
}
