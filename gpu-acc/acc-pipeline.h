/* gmm-acc-stats-ali's loop (reference section 4), shared by the program and
 * the public library: features read in order, alignments looked up by key,
 * utterances accumulated in batches on the backend --use-gpu chooses (the
 * GPU service, a GPU context of our own or the CPU; small jobs stay on the
 * CPU), with Kaldi's messages in Kaldi's order and its closing lines.
 *
 * Usage: gacc_pipeline_run() once per input (the accumulator is created at
 * the first call and kept: statistics add up); gacc_get_stats() and
 * gacc_stats_write() then give gmm-acc-stats-ali's file. A KIO_ERR is
 * Kaldi's fatal error (ERROR logged): a program calls kio_fatal_exit(). */
#ifndef GACC_ACC_PIPELINE_H
#define GACC_ACC_PIPELINE_H

#include <stdint.h>
#include "base/model/model.h"
#include "gpu-acc.h"
#include "gpu-align/gpu-align.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  const char *feats_rspecifier;
  const char *ali_rspecifier;
  galign_use_gpu use_gpu;
  double t_start;      /* kio_now_s() when the run began (model read), for
                          the VLOG[1] time line; 0: the call's start */
  /* Called after each batch's messages with the run's counts so far;
   * nonzero stops the run (KIO_ERR, nothing logged, *stopped = 1). */
  int (*progress)(void *user, int64_t done, int64_t errors, int64_t frames);
  void *user;
} gacc_pipeline_cfg;

typedef struct {
  int32_t num_done, num_err;
  double tot_like;     /* sum of the utterances' float likelihoods */
  int64_t tot_t;       /* their frames */
  int stopped;         /* the progress callback stopped the run */
} gacc_pipeline_counts;

/* Reads the whole input and accumulates it into *acc (created here when
 * NULL, as --use-gpu says, with its LOG line; the caller frees it). Logs
 * gmm-acc-stats-ali's per-utterance and closing lines ("Done N files, M
 * with errors.", "Overall avg like per frame ..."), then closes the readers
 * (a failed input is a fatal error, before any statistics are written). */
int gacc_pipeline_run(gacc_acc **acc, const kio_tmodel *tm, const kio_am_gmm *am,
                      const gacc_pipeline_cfg *cfg, gacc_pipeline_counts *out);

/* The accumulator --use-gpu asks for (the GPU service, a context of our
 * own, else the CPU), with its LOG line; whole_input: frames are all there
 * is to accumulate, and a small job then stays on the CPU (faster than a
 * GPU round trip). */
int gacc_pipeline_new_acc(gacc_acc **acc, galign_use_gpu mode, const kio_tmodel *tm,
                          const kio_am_gmm *am, int whole_input, int64_t frames);

#ifdef __cplusplus
}
#endif
#endif
