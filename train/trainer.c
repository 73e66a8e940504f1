/* The training loop: pass 0 (equal alignment, train_mono), then per
 * iteration realignment when the schedule says so, MLLT through the
 * script's hook, accumulation per job, the jobs' statistics summed as
 * gmm-sum-accs sums the job files, gmm-est in process. */
#include "train/trainer.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/sys/cpu-share.h"
#include "base/sys/kaldi-msg.h"
#include "base/sys/log.h"
#include "base/sys/settings.h"
#include "device/gpu.h"
#include "device/cuda-util.h"
#include "gpu-acc/gpu-acc.h"
#include "train/trn-log.h"
#include "train/trn-pass.h"
#include "train/trn-stoch.h"

void trn_cfg_default(trn_cfg *c) {
  memset(c, 0, sizeof *c);
  c->nj = 1;
  c->num_iters = 35;
  c->realign_iters = "10 20 30";
  c->mllt_iters = "";
  c->max_iter_inc = 25;
  c->power = 0.25f;
  galign_opts_default(&c->align);
  c->align.transition_scale = 1.0f;
  c->align.acoustic_scale = 0.1f;
  c->align.self_loop_scale = 0.1f;
  c->align.beam = 10.0f;
  c->align.retry_beam = 40.0f;
  c->align.no_service = 1;
  c->boost_silence = 1.0f;
  c->silence_csl = "";
  trn_est_opts_default(&c->est);
  c->use_gpu = GALIGN_GPU_OPTIONAL;
  c->stoch_memory = 1.0;
  c->stoch_speaker = 1;
  c->replicate = 1;
}

/* "1 2 3" -> flags[0..n) */
static int parse_iters(const char *s, uint8_t *flags, int n) {
  memset(flags, 0, (size_t)n);
  const char *p = s ? s : "";
  while (*p) {
    char *end;
    long v = strtol(p, &end, 10);
    if (end == p) {
      if (*p == ' ' || *p == '\t' || *p == ',') { p++; continue; }
      KIO_ERROR("Bad iteration list '%s'", s);
      return KIO_ERR;
    }
    if (v >= 0 && v < n) flags[v] = 1;
    p = end;
  }
  return KIO_OK;
}

static char *fmt(const char *f, const char *a, int x) {
  size_t n = strlen(f) + strlen(a) + 32;
  char *s = malloc(n);
  if (s) snprintf(s, n, f, a, x);
  return s;
}

static int write_model(const char *dir, int x, const kio_tmodel *tm, const kio_am_gmm *am) {
  char *p = fmt("%s/%d.mdl", dir, x);
  int rc = p ? kio_model_write(p, 1, tm, am) : KIO_ERR;
  free(p);
  return rc;
}

static void remove_file(const char *dir, const char *pat, int x) {
  char *p = fmt(pat, dir, x);
  if (p) unlink(p);
  free(p);
}

/* Where the training runs: the device layer's choice for the job (the
 * trainer does not use the GPU service: it holds its models itself). */
static int pick_backend(galign_use_gpu mode, int *gpu) {
  char line[512] = "";
  kio_gpu *g = NULL;
  *gpu = 0;
  if (kio_gpu_choose(mode, "", "training", &g, NULL, NULL, line, sizeof line) != KIO_OK)
    return KIO_ERR;
  if (g) {
    *gpu = 1;
    KIO_LOG("Training on GPU: %s", kio_gpu_desc(g));
  } else {
    KIO_LOG("%s", line);
  }
  return KIO_OK;
}

/* The device started on a thread of its own (CUDA's start-up, ~0.3 s on
 * an H200) while the features and graphs are read; its log lines are held
 * and logged when it is joined, after the data's. */
typedef struct {
  galign_use_gpu mode;
  int gpu, rc, threaded;
  double secs;
  pthread_t th;
  kio_log_deferred *lines;
} dev_start;

static void *dev_start_run(void *arg) {
  dev_start *s = arg;
  double t0 = kio_now_s();
  kio_log_defer(&s->lines);
  s->rc = pick_backend(s->mode, &s->gpu);
  kio_log_defer(NULL);
  s->secs = kio_now_s() - t0;
  return NULL;
}

static void dev_start_begin(dev_start *s, galign_use_gpu mode) {
  memset(s, 0, sizeof *s);
  s->mode = mode;
  s->rc = KIO_ERR;
  /* the CPU path has nothing to start */
  s->threaded = mode != GALIGN_GPU_NO && pthread_create(&s->th, NULL, dev_start_run, s) == 0;
  if (!s->threaded) dev_start_run(s);
}

/* KIO_OK with *gpu set, or KIO_ERR (its ERROR logged now); waited: the
 * seconds spent waiting here. */
static int dev_start_end(dev_start *s, int *gpu, double *waited) {
  double t0 = kio_now_s();
  if (s->threaded) pthread_join(s->th, NULL);
  s->threaded = 0;
  *waited = kio_now_s() - t0;
  kio_log_replay(&s->lines);
  *gpu = s->gpu;
  return s->rc;
}

/* The features on the device once (GPU path), for every iteration's
 * accumulation and realignment; again after an MLLT step changed them.
 * Without room the batches upload them as before (one LOG line). */
static void make_dev_feats(trn_ctx *t) {
  gacc_dev_feats_free(t->dfeats);
  t->dfeats = NULL;
  if (!t->gpu) return;
  char why[256];
  double t0 = kio_now_s();
  if (gacc_dev_feats_new(&t->dfeats, t->d.n_store, t->d.feat_store, why, sizeof why) != KIO_OK)
    KIO_LOG("Features not resident on the GPU (each batch uploads its own): %s", why);
  else
    KIO_LOG("Features resident on the GPU: %d utterances, %.2f GiB (%.2f s)", (int)t->d.n_store,
            (double)gacc_dev_feats_bytes(t->dfeats) / 1073741824.0, kio_now_s() - t0);
}

/* ---- accumulation of every job ---- */

typedef struct {
  trn_ctx *t;
  int job;
  const kio_am_gmm *am;
  gacc_stats *out;
  gacc_acc **slot;  /* its accumulator in trn_ctx.cpu_accs */
  int x, rc;
} acc_job;

/* (trn-stoch.h) */
int trn_acc_one(trn_ctx *t, int job, int x, gacc_acc *acc, int reset, int slot,
                gacc_stats *out) {
  const trn_cfg *c = t->c;
  char *logp = fmt("%s/log/acc.%d", c->dir, x), path[4200], cmd[8600];
  if (!logp) return KIO_ERR;
  snprintf(path, sizeof path, "%s.%d.log", logp, job + 1);
  free(logp);
  snprintf(cmd, sizeof cmd, "gmm-acc-stats-ali %s/%d.mdl \"<features of job %d>\" "
           "\"<alignments of job %d>\" %s/%d.%d.acc (in process: gmm-train-gpu)", c->dir, x,
           job + 1, job + 1, c->dir, x, job + 1);
  trn_log *lg = trn_log_open(path, "gmm-acc-stats-ali", cmd);
  if (!lg) return KIO_ERR;
  trn_log_use(lg);
  trn_range r = { &t->d, t->d.job_start[job], t->d.job_start[job + 1], t->pick };
  int rc = trn_accumulate(&r, acc, 1);
  if (rc == KIO_OK)
    rc = slot >= 0 ? gacc_stash_stats(acc, t->dsum, slot, &t->job_like[job], &t->job_frames[job])
                   : gacc_get_stats(acc, out);
  if (rc == KIO_OK && reset) rc = gacc_reset_stats(acc);
  trn_log_use(NULL);
  trn_log_close(lg);
  return rc;
}

/* The CPU path's job on accumulator *slot: the one kept from an earlier
 * job rebound to this iteration's model (its buffers kept, zeroed: a new
 * accumulator's statistics), else a new one. */
static void *acc_thread(void *arg) {
  acc_job *j = arg;
  gacc_acc **acc = j->slot;
  j->rc = KIO_OK;
  if (!*acc || gacc_dim(*acc) != j->am->dim ||
      gacc_rebind(*acc, &j->t->tm, j->am, 0) != KIO_OK) {
    gacc_free(*acc);
    *acc = NULL;
    j->rc = gacc_new(acc, "cpu", &j->t->tm, j->am);
  }
  if (j->rc == KIO_OK) j->rc = trn_acc_one(j->t, j->job, j->x, *acc, 0, -1, j->out);
  if (j->rc != KIO_OK) {  /* statistics unspecified: not kept */
    gacc_free(*acc);
    *acc = NULL;
  }
  return NULL;
}

/* Statistics of every job (stats[j], shaped here). CPU: jobs side by side
 * on the process's threads, an accumulator each; GPU: a few accumulators
 * side by side (gpu_accumulate_jobs; the model uploaded and the staging
 * buffers made once per iteration for each), each fetching and resetting
 * its statistics between the jobs it serves. */
int trn_accumulate_jobs(trn_ctx *t, const kio_am_gmm *am, int x, gacc_stats *stats,
                        int dev_sum) {
  int nj = t->d.nj;
  t->dsum_filled = 0;
  if (t->gpu) return trn_gpu_accumulate_jobs(t, am, x, stats, dev_sum);
  int par = t->threads < 1 ? 1 : t->threads;
  if (par > nj) par = nj > 0 ? nj : 1;
  if (!t->cpu_accs) {
    t->cpu_accs = calloc((size_t)par, sizeof *t->cpu_accs);
    if (!t->cpu_accs) { KIO_ERROR("out of memory"); return KIO_ERR; }
    t->n_cpu_accs = par;
  }
  if (par > t->n_cpu_accs) par = t->n_cpu_accs;
  acc_job *jobs = calloc((size_t)nj, sizeof *jobs);
  pthread_t *th = calloc((size_t)nj, sizeof *th);
  if (!jobs || !th) { free(jobs); free(th); KIO_ERROR("out of memory"); return KIO_ERR; }
  int rc = KIO_OK;
  for (int j0 = 0; j0 < nj; j0 += par) {
    int j1 = j0 + par < nj ? j0 + par : nj;
    for (int j = j0; j < j1; j++) {
      jobs[j] = (acc_job){ t, j, am, &stats[j], &t->cpu_accs[j - j0], x, KIO_ERR };
      if (j == j1 - 1 || pthread_create(&th[j], NULL, acc_thread, &jobs[j]) != 0) {
        acc_thread(&jobs[j]);
        th[j] = 0;
      }
    }
    for (int j = j0; j < j1; j++) {
      if (th[j]) pthread_join(th[j], NULL);
      if (jobs[j].rc != KIO_OK) rc = KIO_ERR;
    }
    if (rc != KIO_OK) break;
  }
  free(jobs);
  free(th);
  return rc;
}

/* ---- estimation (update.X.log) ---- */

int trn_estimate(trn_ctx *t, const gacc_stats *const *jobs, int nj, int x, const trn_est_opts *eo,
                 int write_occs, const char *stats_desc, trn_est_trace *trace) {
  const trn_cfg *c = t->c;
  char path[4200], cmd[8600], occs[4200] = "";
  snprintf(path, sizeof path, "%s/log/update.%d.log", c->dir, x);
  if (write_occs) snprintf(occs, sizeof occs, "%s/%d.occs", c->dir, x + 1);
  snprintf(cmd, sizeof cmd, "gmm-est%s%s --mix-up=%d --power=%g %s/%d.mdl \"%s\" %s/%d.mdl "
           "(in process: gmm-train-gpu)", write_occs ? " --write-occs=" : "", occs,
           (int)eo->mix_up, (double)eo->power, c->dir, x, stats_desc, c->dir, x + 1);
  trn_log *lg = trn_log_open(path, "gmm-est", cmd);
  if (!lg) return KIO_ERR;
  trn_log_use(lg);
  gacc_stats *sum = &t->sum;  /* its buffers kept from the last update */
  kio_log_set_thread_program("gmm-sum-accs");
  double t0 = kio_now_s();
  int rc;
  if (jobs) {
    rc = trn_est_sum_jobs((gacc_stats *const *)jobs, nj, sum, 1);
  } else {  /* on the device: the accumulated model's shape */
    rc = gacc_stats_reshape(sum, &t->tm, &t->am, 0);
    if (rc == KIO_OK) rc = trn_est_sum_dev(t->dsum, t->job_like, t->job_frames, nj, sum, 1);
    t->dsum_filled = 0;
  }
  double t1 = kio_now_s();
  kio_log_set_thread_program(NULL);
  trn_est_report rep = {0};  /* a failed update leaves last_like 0 */
  if (rc == KIO_OK) rc = trn_est_update_traced(eo, sum, &t->tm, &t->am, occs, &rep, trace);
  double t2 = kio_now_s();
  if (rc == KIO_OK) rc = write_model(c->dir, x + 1, &t->tm, &t->am);
  t->est_sum += t1 - t0;
  t->est_trans += rep.secs_trans;
  t->est_pdfs += rep.secs_pdfs;
  t->est_mixup += rep.secs_mixup;
  t->est_occs += rep.secs_occs;
  t->est_write += kio_now_s() - t2;
  if (rc == KIO_OK) {
    char mdl[4096];  /* a longer path could not have been written */
    snprintf(mdl, sizeof mdl, "%s/%d.mdl", c->dir, x + 1);
    KIO_KALDI(EST_WRITTEN, mdl);
  }
  t->last_like = rep.tot_t > 0 ? rep.tot_like / rep.tot_t : 0.0f;
  trn_log_use(NULL);
  trn_log_close(lg);
  return rc;
}

/* ---- realignment of every job (align.X.JOB.log) ---- */

/* The aligner reads the resident features on the device too. */
static int register_dev_feats(trn_ctx *t, galign_aligner *a) {
  int32_t n = t->d.n_store;
  const kio_matrix **fp = malloc(sizeof *fp * (size_t)(n ? n : 1));
  if (!fp) { KIO_ERROR("out of memory"); return KIO_ERR; }
  for (int32_t i = 0; i < n; i++) fp[i] = &t->d.feat_store[i];
  const float *base;
  const int64_t *row_off;
  gacc_dev_feats_rows(t->dfeats, &base, &row_off);
  int rc = galign_aligner_set_dev_feats(a, n, fp, base, row_off);
  free(fp);
  return rc;
}

/* All jobs are aligned in one pass (batches across jobs), with job 1's log
 * in use (the model's lines and any of the aligner's); then each job's log
 * gets its lines. */
int trn_realign_jobs(trn_ctx *t, int x, float beam, int32_t stage) {
  const trn_cfg *c = t->c;
  galign_opts o = c->align;
  o.beam = beam;
  kio_am_gmm boosted;
  memset(&boosted, 0, sizeof boosted);
  galign_aligner *a = NULL;
  double t_align = 0.0, t_setup = 0.0;
  trn_ali_note *note = calloc((size_t)(t->d.n ? t->d.n : 1), sizeof *note);
  if (!note) { KIO_ERROR("out of memory"); return KIO_ERR; }
  int rc = KIO_OK;
  for (int j = 0; j < t->d.nj && rc == KIO_OK; j++) {
    char path[4200], cmd[8600];
    snprintf(path, sizeof path, "%s/log/align.%d.%d.log", c->dir, x, j + 1);
    snprintf(cmd, sizeof cmd, "gmm-align-compiled --transition-scale=%g --acoustic-scale=%g "
             "--self-loop-scale=%g --beam=%g --retry-beam=%g --careful=%s \"gmm-boost-silence "
             "--boost=%g %s %s/%d.mdl - |\" \"<graphs of job %d>\" \"<features of job %d>\" "
             "\"ark:|gzip -c >%s/ali.%d.gz\" (in process: gmm-train-gpu)",
             (double)o.transition_scale, (double)o.acoustic_scale, (double)o.self_loop_scale,
             (double)o.beam, (double)o.retry_beam, o.careful ? "true" : "false",
             (double)c->boost_silence, c->silence_csl, c->dir, x, j + 1, j + 1, c->dir, j + 1);
    trn_log *lg = trn_log_open(path, "gmm-align-compiled", cmd);
    if (!lg) { rc = KIO_ERR; break; }
    trn_log_use(lg);
    trn_log_set_default(lg);
    if (j == 0) {
      /* one model and aligner for all jobs, one pass over them all */
      double t0 = kio_now_s();
      rc = trn_boost_silence(&t->tm, &t->am, t->sil, t->nsil, c->boost_silence, &boosted);
      const kio_am_gmm *am = c->boost_silence != 1.0f ? &boosted : &t->am;
      if (rc == KIO_OK)
        rc = galign_aligner_new(&a, t->gpu ? GALIGN_GPU_YES : GALIGN_GPU_NO, &t->tm, am, &o);
      if (rc == KIO_OK && t->dfeats) rc = register_dev_feats(t, a);
      double t1 = kio_now_s();
      trn_range all = { &t->d, 0, t->d.n, t->pick };
      if (rc == KIO_OK) rc = trn_align(&t->d, &all, a, &t->tm, &o, t->threads, stage, note);
      t_align = kio_now_s() - t0;
      t_setup = t1 - t0;
    } else {
      trn_boost_lines(&t->tm, t->sil, t->nsil, c->boost_silence);
    }
    trn_range r = { &t->d, t->d.job_start[j], t->d.job_start[j + 1], t->pick };
    if (rc == KIO_OK) trn_align_lines(&t->d, &r, note, &o);
    trn_log_set_default(NULL);
    trn_log_use(NULL);
    trn_log_close(lg);
  }
  if (rc == KIO_OK) {  /* in the trainer's log, not a job's */
    galign_aligner_stats st;
    galign_aligner_get_stats(a, &st);
    KIO_VLOG(1, "Realignment: %.3f s (model and aligner %.3f s; aligner's phases: likelihoods "
             "%.3f s, Viterbi %.3f s, backtrace %.3f s, host copies %.3f s; %lld utterances from "
             "resident features)", t_align, t_setup, st.loglike_s, st.viterbi_s,
             st.backtrace_s, st.copy_s, (long long)galign_aligner_dev_feat_utts(a));
  }
  galign_aligner_free(a);
  kio_am_gmm_free(&boosted);
  free(note);
  return rc;
}

/* ---- the loop ---- */

int trn_equal_pass(trn_ctx *t) {
  const trn_cfg *c = t->c;
  gacc_stats *stats = calloc((size_t)t->d.nj, sizeof *stats);
  const gacc_stats **sp = calloc((size_t)t->d.nj, sizeof *sp);
  if (!stats || !sp) { free(stats); free(sp); KIO_ERROR("out of memory"); return KIO_ERR; }
  int rc = KIO_OK;
  /* GPU: one accumulator for every job, reset between jobs, as in the
   * iterations (a fresh one's statistics, without 16 set-ups) */
  gacc_acc *shared = NULL;
  if (t->gpu) {
    rc = gacc_new(&shared, "gpu", &t->tm, &t->am);
    if (rc == KIO_OK) gacc_use_dev_feats(shared, t->dfeats);
  }
  for (int j = 0; j < t->d.nj && rc == KIO_OK; j++) {
    char path[4200];
    snprintf(path, sizeof path, "%s/log/align.0.%d.log", c->dir, j + 1);
    trn_log *lg = trn_log_open(path, "align-equal-compiled",
                               "align-equal-compiled \"<graphs>\" \"<features>\" ark,t:- | "
                               "gmm-acc-stats-ali --binary=true 0.mdl \"<features>\" ark:- "
                               "0.JOB.acc (in process: gmm-train-gpu)");
    if (!lg) { rc = KIO_ERR; break; }
    trn_log_use(lg);
    trn_range r = { &t->d, t->d.job_start[j], t->d.job_start[j + 1], NULL };
    rc = trn_equal_align(&t->d, &r);
    gacc_acc *acc = shared;
    kio_log_set_thread_program("gmm-acc-stats-ali");
    if (rc == KIO_OK && !shared) rc = gacc_new(&acc, "cpu", &t->tm, &t->am);
    if (rc == KIO_OK) rc = trn_accumulate(&r, acc, 1);
    if (rc == KIO_OK) rc = gacc_get_stats(acc, &stats[j]);
    if (rc == KIO_OK && shared) rc = gacc_reset_stats(shared);
    kio_log_set_thread_program(NULL);
    if (!shared) gacc_free(acc);
    trn_log_use(NULL);
    trn_log_close(lg);
    sp[j] = &stats[j];
  }
  gacc_free(shared);
  trn_est_opts eo = c->est;
  eo.min_gaussian_occupancy = 3.0f;
  eo.mix_up = t->numgauss;
  eo.power = c->power;
  if (rc == KIO_OK) rc = trn_estimate(t, sp, t->d.nj, 0, &eo, 0, "gmm-sum-accs - 0.*.acc |", NULL);
  for (int j = 0; j < t->d.nj; j++) gacc_stats_free(&stats[j]);
  free(stats);
  free(sp);
  return rc;
}

int trn_mllt_step(trn_ctx *t, int x) {
  const trn_cfg *c = t->c;
  if (!c->mllt_hook || !*c->mllt_hook) {
    KIO_ERROR("--mllt-iters given without --mllt-hook");
    return KIO_ERR;
  }
  /* the hook reads the model and the current alignments from the directory */
  if (write_model(c->dir, x, &t->tm, &t->am) != KIO_OK ||
      trn_data_write_ali(&t->d, c->dir, c->ali_text, NULL) != KIO_OK)
    return KIO_ERR;
  char *cmd = fmt("ITER=%2$d %1$s", c->mllt_hook, x);
  KIO_LOG("Iteration %d: MLLT: %s", x, c->mllt_hook);
  int st = cmd ? system(cmd) : -1;
  free(cmd);
  if (st != 0) {
    KIO_ERROR("The MLLT step of iteration %d failed (exit status %d): %s", x, st, c->mllt_hook);
    return KIO_ERR;
  }
  char *mdl = fmt("%s/%d.mdl", c->dir, x);
  kio_tmodel_free(&t->tm);
  kio_am_gmm_free(&t->am);
  int rc = mdl ? kio_model_read(mdl, &t->tm, &t->am) : KIO_ERR;
  free(mdl);
  if (rc == KIO_OK) rc = trn_data_reload_feats(&t->d, c->mllt_feats, x);
  if (rc == KIO_OK) make_dev_feats(t);
  return rc;
}

static int full_iteration(trn_ctx *t, int x) {
  const trn_cfg *c = t->c;
  /* the graphs compiled beside the iterations before this one (the wait:
   * the Graphs: line) */
  if (t->realign[x] && trn_graphs_ready(&t->d) != KIO_OK) return KIO_ERR;
  double t0 = kio_now_s();
  if (t->realign[x] && trn_realign_jobs(t, x, x == 1 && c->first_beam > 0 ? c->first_beam
                                                                          : c->align.beam, x) !=
                           KIO_OK)
    return KIO_ERR;
  double t1 = kio_now_s();
  if (t->mllt[x] && trn_mllt_step(t, x) != KIO_OK) return KIO_ERR;
  double t2 = kio_now_s();
  int nj = t->d.nj, rc;
  if (!t->job_stats) t->job_stats = calloc((size_t)nj, sizeof *t->job_stats);
  gacc_stats *stats = t->job_stats;  /* buffers kept from the last iteration */
  const gacc_stats **sp = calloc((size_t)nj, sizeof *sp);
  if (!stats || !sp) { free(sp); KIO_ERROR("out of memory"); return KIO_ERR; }
  rc = trn_accumulate_jobs(t, &t->am, x, stats, 1);
  double t3 = kio_now_s();
  for (int j = 0; j < nj; j++) sp[j] = &stats[j];
  trn_est_opts eo = c->est;
  eo.mix_up = t->numgauss;
  eo.power = c->power;
  char desc[64];
  snprintf(desc, sizeof desc, "gmm-sum-accs - %d.*.acc |", x);
  if (rc == KIO_OK) rc = trn_estimate(t, t->dsum_filled ? NULL : sp, nj, x, &eo, 1, desc, NULL);
  free(sp);
  if (rc != KIO_OK) return KIO_ERR;
  double t4 = kio_now_s();
  char re[48] = "", ml[48] = "";
  if (t->realign[x]) snprintf(re, sizeof re, "realignment %.2f s, ", t1 - t0);
  if (t->mllt[x]) snprintf(ml, sizeof ml, "MLLT %.2f s, ", t2 - t1);
  KIO_LOG("Iteration %d: %s%saccumulation %.2f s, update %.2f s (%.2f s in all); avg like per "
          "frame %g", x, re, ml, t3 - t2, t4 - t3, t4 - t0, (double)t->last_like);
  t->time_align += t1 - t0;
  t->time_acc += t3 - t2;
  t->time_est += t4 - t3;
  return KIO_OK;
}

static int finish(trn_ctx *t, int last) {
  const trn_cfg *c = t->c;
  char *f1 = fmt("%s/final.mdl", c->dir, 0), *f2 = fmt("%s/final.occs", c->dir, 0);
  char l1[32], l2[32];
  snprintf(l1, sizeof l1, "%d.mdl", last);
  snprintf(l2, sizeof l2, "%d.occs", last);
  int rc = f1 && f2 ? KIO_OK : KIO_ERR;
  if (rc == KIO_OK) {
    unlink(f1);
    unlink(f2);
    if (symlink(l1, f1) != 0 || symlink(l2, f2) != 0) {
      KIO_ERROR("Could not make the links %s and %s", f1, f2);
      rc = KIO_ERR;
    }
  }
  free(f1);
  free(f2);
  if (rc == KIO_OK) rc = trn_data_write_ali(&t->d, c->dir, c->ali_text, c->phone_stats ? &t->tm : NULL);
  return rc;
}

int trn_run(const trn_cfg *c) {
  trn_ctx t;
  memset(&t, 0, sizeof t);
  t.c = c;
  trn_log_init();
  int rc = KIO_ERR;
  int n = c->num_iters + 1 > 1 ? c->num_iters + 1 : 2;
  t.realign = calloc((size_t)n, 1);
  t.mllt = calloc((size_t)n, 1);
  if (!t.realign || !t.mllt) { KIO_ERROR("out of memory"); goto done; }
  if (parse_iters(c->realign_iters, t.realign, n) != KIO_OK ||
      parse_iters(c->mllt_iters, t.mllt, n) != KIO_OK)
    goto done;
  t.threads = c->threads > 0 ? c->threads : kio_cpu_share(0);
  /* silence phones (gmm-boost-silence's list), sorted */
  for (const char *p = c->silence_csl; p && *p;) {
    char *end;
    long v = strtol(p, &end, 10);
    if (end == p) { p++; continue; }
    int32_t *ns = realloc(t.sil, sizeof(int32_t) * (size_t)(t.nsil + 1));
    if (!ns) goto done;
    t.sil = ns;
    t.sil[t.nsil++] = (int32_t)v;
    p = end;
  }
  for (int32_t i = 1; i < t.nsil; i++)
    for (int32_t k = i; k > 0 && t.sil[k - 1] > t.sil[k]; k--) {
      int32_t tmp = t.sil[k]; t.sil[k] = t.sil[k - 1]; t.sil[k - 1] = tmp;
    }
  /* the features and the device first: they need nothing of the experiment
   * directory, so with --start-after they are ready when the script's
   * stages (tree, first model, alignments) are done */
  double ts0 = kio_now_s();
  dev_start ds;
  dev_start_begin(&ds, c->use_gpu);
  int loaded = trn_data_load_feats(&t.d, c);
  double ts1 = kio_now_s(), waited;
  if (dev_start_end(&ds, &t.gpu, &waited) != KIO_OK || loaded != KIO_OK) goto done;
  double ts2 = kio_now_s();
  make_dev_feats(&t);
  double ts3 = kio_now_s();
  /* the graphs beside the iterations before the first realignment (the
   * equal-alignment pass and the stochastic mode need them at once) */
  int beside = c->stoch_batch <= 0.0 && !c->equal_align &&
               kio_setting_int(KIO_SET_DEV_TRAIN_GRAPHS_BESIDE, 1, 0, 1) != 0;
  trn_start_times st;
  int go = trn_start_rest(&t.d, c, &t.tm, &t.am, beside, &st);
  if (go != KIO_OK) {
    if (go == TRN_START_STOP) rc = KIO_OK;  /* stopped before training, as asked */
    goto done;
  }
  double ts6 = kio_now_s();
  if (st.at_model)
    KIO_VLOG(1, "Start-up: %.2f s (the wait aside): features %.2f s, device %.2f s beside them "
             "(waited %.2f s for it), features on the device %.2f s; waiting for the script's "
             "stages %.2f s (for its first model %.2f s: model %.2f s, speakers and the graphs' "
             "start %.2f s beside its last stage); then alignments %.2f s",
             (ts6 - ts0) - st.wait, ts1 - ts0, ds.secs, waited, ts3 - ts2, st.wait,
             st.wait_model, st.model, st.graphs, st.rest);
  else
    KIO_VLOG(1, "Start-up: %.2f s (the wait aside): features %.2f s, device %.2f s beside them "
             "(waited %.2f s for it), features on the device %.2f s; waiting for the script's "
             "stages %.2f s; then model %.2f s, speakers, graphs and alignments %.2f s",
             (ts6 - ts0) - st.wait, ts1 - ts0, ds.secs, waited, ts3 - ts2, st.wait, st.model,
             st.rest);
  t.numgauss = c->start_gauss;
  double t0 = kio_now_s();
  if (c->stoch_batch > 0.0) {
    rc = trn_stoch_run(&t);
  } else {
    rc = KIO_OK;
    if (c->equal_align) rc = trn_equal_pass(&t);
    int x = c->equal_align ? 1 : c->start_iter;
    for (; rc == KIO_OK && x < c->num_iters; x++) {
      rc = full_iteration(&t, x);
      /* graphs that failed beside the iterations stop the run at once */
      if (rc == KIO_OK && trn_graphs_failed(&t.d)) rc = trn_graphs_ready(&t.d);
      if (rc != KIO_OK) break;
      remove_file(c->dir, "%s/%d.mdl", x);
      remove_file(c->dir, "%s/%d.occs", x);
      if (x <= c->max_iter_inc) t.numgauss += c->inc_gauss;
    }
    if (rc == KIO_OK) rc = trn_graphs_ready(&t.d);
    if (rc == KIO_OK) rc = finish(&t, c->num_iters);
  }
  if (rc == KIO_OK) {
    KIO_LOG("Trained in %.1f s (realignment %.1f s, accumulation %.1f s, estimation %.1f s)",
            kio_now_s() - t0, t.time_align, t.time_acc, t.time_est);
    KIO_VLOG(1, "Estimation, all updates: summing the jobs' statistics %.3f s, transitions "
             "%.3f s, pdfs %.3f s, mixing up %.3f s, occupancies %.3f s, "
             "writing the models %.3f s", t.est_sum, t.est_trans, t.est_pdfs,
             t.est_mixup, t.est_occs, t.est_write);
  }
  if (rc == KIO_OK) rc = trn_graphs_wait(&t.d);  /* the fsts.JOB.gz writers, done by now */
done:
  for (int k = 0; k < (int)(sizeof t.accs / sizeof t.accs[0]); k++) gacc_free(t.accs[k]);
  for (int k = 0; k < t.n_cpu_accs; k++) gacc_free(t.cpu_accs[k]);
  free(t.cpu_accs);
  if (t.job_stats)
    for (int j = 0; j < t.d.nj; j++) gacc_stats_free(&t.job_stats[j]);
  free(t.job_stats);
  gacc_stats_free(&t.sum);
  gacc_dev_sum_free(t.dsum);
  free(t.dsum_slot);
  free(t.job_like);
  free(t.job_frames);
  gacc_dev_feats_free(t.dfeats);
  trn_data_free(&t.d);
  kio_tmodel_free(&t.tm);
  kio_am_gmm_free(&t.am);
  free(t.realign);
  free(t.mllt);
  free(t.sil);
  free(t.pick);
  return rc;
}
