/* Internal to train/: the trainer's state shared by the full-batch loop
 * (trainer.c) and the stochastic one (trn-stoch.c). */
#ifndef TRN_STOCH_H
#define TRN_STOCH_H

#include <stdint.h>

#include "gpu-acc/gpu-acc.h"
#include "train/trainer.h"

typedef struct {
  const trn_cfg *c;
  trn_data d;
  kio_tmodel tm;
  kio_am_gmm am;
  int gpu, threads;
  uint8_t *realign, *mllt;   /* per iteration 0..num_iters */
  int32_t *sil, nsil;        /* silence phones (gmm-boost-silence) */
  int32_t numgauss;          /* the --mix-up target of the next update */
  uint8_t *pick;             /* stochastic: the current batch's utterances */
  gacc_dev_feats *dfeats;    /* GPU: the features resident on the device, or NULL */
  gacc_acc *accs[16];        /* GPU: the accumulators kept from one iteration to the
                                next (rebound to each model), or NULL */
  gacc_acc **cpu_accs;       /* CPU: one accumulator per side-by-side job, kept from one
                                iteration to the next (rebound to each model) */
  int n_cpu_accs;
  gacc_stats *job_stats;     /* the jobs' statistics (nj), their buffers kept from one
                                iteration to the next */
  gacc_stats sum;            /* the jobs' sum, its buffers kept likewise */
  gacc_dev_sum *dsum;        /* GPU: the jobs' statistics on the device, summed there
                                (KALDI_GPU_DEV_TRAIN_SUM), or NULL */
  int dsum_off;              /* 1: summed on the host from now on (set once, logged) */
  int dsum_filled;           /* this iteration's jobs are in dsum's slots */
  int *dsum_slot;            /* nj: job j's slot (its rank in the glob's order) */
  double *job_like, *job_frames;  /* nj: the jobs' totals, with dsum */
  float last_like;
  double time_align, time_acc, time_est;
  double est_sum, est_trans, est_pdfs, est_mixup, est_occs, est_write;  /* time_est's parts */
} trn_ctx;

/* Every job's statistics with model am (acc.X.JOB.log); only the picked
 * utterances when t->pick is set. With dev_sum on the GPU path they may
 * stay on the device instead (t->dsum_filled set; stats[] untouched, the
 * jobs' totals in t->job_like and t->job_frames): trn_estimate with jobs
 * NULL sums them there. */
int trn_accumulate_jobs(trn_ctx *t, const kio_am_gmm *am, int x, gacc_stats *stats,
                        int dev_sum);
/* Job job's statistics with acc (zero: a new accumulator's) into out
 * (acc.X.JOB.log), or with slot >= 0 into that slot of t->dsum (its totals
 * into t->job_like and t->job_frames); with reset acc's are zeroed again
 * after (an accumulator serving several jobs in turn). */
int trn_acc_one(trn_ctx *t, int job, int x, gacc_acc *acc, int reset, int slot, gacc_stats *out);
/* trn_accumulate_jobs' GPU path (trn-gpu-jobs.c). */
int trn_gpu_accumulate_jobs(trn_ctx *t, const kio_am_gmm *am, int x, gacc_stats *stats,
                            int dev_sum);
/* gmm-sum-accs + gmm-est on jobs[0..nj) (NULL entries skipped; jobs NULL:
 * the nj jobs in t->dsum's slots) into t's model, written as x+1.mdl
 * (update.X.log); trace (or NULL): where the new model's Gaussians come
 * from (est.h). */
int trn_estimate(trn_ctx *t, const gacc_stats *const *jobs, int nj, int x, const trn_est_opts *eo,
                 int write_occs, const char *stats_desc, trn_est_trace *trace);
/* Realigns every job's (picked) utterances with t's model (align.X.JOB.log). */
int trn_realign_jobs(trn_ctx *t, int x, float beam, int32_t stage);

/* train_mono's pass 0 (equal alignment, statistics of all the data, the
 * first update: update.0.log). */
int trn_equal_pass(trn_ctx *t);
/* The MLLT step of iteration x through the hook: x.mdl and ali.JOB.gz
 * written, x.mdl and the features read back. */
int trn_mllt_step(trn_ctx *t, int x);

/* The stochastic schedule (trn_cfg.stoch_*). */
int trn_stoch_run(trn_ctx *t);

#endif
