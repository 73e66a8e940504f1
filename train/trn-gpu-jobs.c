/* The GPU path's accumulation of every job: a few device accumulators side
 * by side, each serving jobs in turn, their statistics fetched to the host
 * or left in the slots of the device sum (gacc_dev_sum), and the
 * iteration's split of the device time for the trainer's log. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/sys/cpu-share.h"
#include "base/sys/log.h"
#include "base/sys/settings.h"
#include "gpu-acc/gpu-acc.h"
#include "train/sum-accs.h"
#include "train/trn-stoch.h"

/* The GPU's time in an iteration's accumulation (--verbose): the
 * accumulators' phases in this iteration (their totals less before[k]),
 * added up (side by side, they may exceed the wall time; then "the rest" is
 * negative). */
static void log_acc_timing(gacc_acc *const *accs, const gacc_timing *before, int n,
                           double total) {
  gacc_timing tm, one;
  memset(&tm, 0, sizeof tm);
  int used = 0;
  for (int k = 0; k < n; k++) {
    if (!accs[k]) continue;
    used++;
    gacc_get_timing(accs[k], &one);
    const gacc_timing *b = &before[k];
    tm.batches += one.batches - b->batches;
    tm.frames += one.frames - b->frames;
    tm.resident += one.resident - b->resident;
    tm.setup += one.setup - b->setup;
    tm.sort += one.sort - b->sort;
    tm.stage += one.stage - b->stage;
    tm.wait += one.wait - b->wait;
    tm.like += one.like - b->like;
    tm.fetch += one.fetch - b->fetch;
    tm.host_threads = one.host_threads;
  }
  KIO_VLOG(1, "GPU accumulation: %.3f s for %ld batches (%ld from resident features), %ld "
           "frames: set-up %.3f s, host sort %.3f s, staging/upload %.3f s, waiting for the "
           "device %.3f s, likelihoods on the host %.3f s, fetching and resetting statistics "
           "%.3f s, the rest (host batches, lines) %.3f s; %d accumulator(s) side by side "
           "(phases added up), %d host threads each", total, tm.batches,
           tm.resident, tm.frames, tm.setup, tm.sort, tm.stage, tm.wait, tm.like, tm.fetch,
           total - (tm.setup + tm.sort + tm.stage + tm.wait + tm.like + tm.fetch), used,
           tm.host_threads);
}

/* The GPU path's accumulators side by side: each takes the next job not
 * taken, accumulates it on its own stream and host threads, fetches and
 * resets its statistics, and so on; after a failed job no job is started. */
typedef struct {
  trn_ctx *t;
  const kio_am_gmm *am;
  gacc_stats *stats;
  int x, nj, next, failed, host_threads;
  int dev_sum;            /* the jobs' statistics into t->dsum's slots */
  pthread_mutex_t mu;
} gpu_jobs;

typedef struct {
  gpu_jobs *q;
  gacc_acc **acc;         /* its slot in trn_ctx.accs */
  gacc_timing before;     /* its timing before this iteration */
  int rc;
} gpu_worker;

/* The worker's accumulator for this iteration's model: the one kept from
 * the last iteration rebound to it (the same statistics as a new one's:
 * check_gpu_acc gpu_rebind_equals_fresh), else a new one. */
static int gpu_worker_acc(gpu_worker *w) {
  gpu_jobs *q = w->q;
  if (*w->acc && gacc_dim(*w->acc) == q->am->dim &&
      gacc_rebind(*w->acc, &q->t->tm, q->am, 0) == KIO_OK) {
    gacc_get_timing(*w->acc, &w->before);
  } else {
    gacc_free(*w->acc);
    *w->acc = NULL;
    memset(&w->before, 0, sizeof w->before);
    if (gacc_new(w->acc, "gpu", &q->t->tm, q->am) != KIO_OK) return KIO_ERR;
    if (q->host_threads > 0) gacc_set_host_threads(*w->acc, q->host_threads);
  }
  gacc_use_dev_feats(*w->acc, q->t->dfeats);  /* new ones after an MLLT step */
  return KIO_OK;
}

static void *gpu_worker_main(void *arg) {
  gpu_worker *w = arg;
  gpu_jobs *q = w->q;
  w->rc = gpu_worker_acc(w);
  for (;;) {
    pthread_mutex_lock(&q->mu);
    if (w->rc != KIO_OK) q->failed = 1;
    int j = q->failed || q->next >= q->nj ? -1 : q->next++;
    pthread_mutex_unlock(&q->mu);
    if (j < 0) break;
    w->rc = trn_acc_one(q->t, j, q->x, *w->acc, 1, q->dev_sum ? q->t->dsum_slot[j] : -1,
                    &q->stats[j]);
  }
  gacc_unbind(*w->acc);  /* the model changes before the next iteration */
  return NULL;
}

/* The jobs' sum on the device for this iteration's model am: t->dsum made
 * or reshaped for nj slots, job j's slot its rank in the glob's order. 0
 * when the sum stays on the host (KALDI_GPU_DEV_TRAIN_SUM=0, or no device
 * memory: from then on, one line in the trainer's log). */
static int dev_sum_ready(trn_ctx *t, const kio_am_gmm *am) {
  if (t->dsum_off) return 0;
  const int nj = t->d.nj;
  char why[256] = "KALDI_GPU_DEV_TRAIN_SUM=0";
  if (kio_setting_int(KIO_SET_DEV_TRAIN_SUM, 1, 0, 1) != 0) {
    if (!t->dsum_slot) {
      int *order = malloc(sizeof(int) * (size_t)nj);
      t->dsum_slot = malloc(sizeof(int) * (size_t)nj);
      t->job_like = calloc((size_t)nj, sizeof(double));
      t->job_frames = calloc((size_t)nj, sizeof(double));
      if (!order || !t->dsum_slot || !t->job_like || !t->job_frames) {
        free(order);
        KIO_ERROR("out of memory");
        return -1;
      }
      trn_sum_glob_order(nj, order);
      for (int k = 0; k < nj; k++) t->dsum_slot[order[k] - 1] = k;
      free(order);
    }
    gacc_stats shape;
    memset(&shape, 0, sizeof shape);
    shape.num_tids = t->tm.num_tids;
    shape.num_pdfs = am->num_pdfs;
    shape.dim = am->dim;
    for (int32_t j = 0; j < am->num_pdfs; j++) shape.num_gauss += am->pdfs[j].num_comp;
    if (gacc_dev_sum_reserve(&t->dsum, nj, &shape, why, sizeof why) == KIO_OK) return 1;
  }
  t->dsum_off = 1;
  KIO_LOG("The jobs' statistics summed on the host from now on: %s", why);
  return 0;
}

/* KALDI_GPU_DEV_TRAIN_ACC_STREAMS accumulators (at most the jobs), the
 * host threads shared among them. Each job's statistics are those of one
 * accumulator serving it alone (the device path's kernels add each cell in
 * the job's frame order), so they are the same bits however the jobs are
 * spread. */
int trn_gpu_accumulate_jobs(trn_ctx *t, const kio_am_gmm *am, int x, gacc_stats *stats,
                            int dev_sum) {
  double t0 = kio_now_s();
  int nj = t->d.nj;
  if (dev_sum && (dev_sum = dev_sum_ready(t, am)) < 0) return KIO_ERR;
  int k = (int)kio_setting_int(KIO_SET_DEV_TRAIN_ACC_STREAMS, 4, 1, 16);
  if (k > nj) k = nj;
  int share = kio_cpu_share(16);
  gpu_jobs q = { t, am, stats, x, nj, 0, 0, share / k > 1 ? share / k : 1, dev_sum,
                 PTHREAD_MUTEX_INITIALIZER };
  if (k == 1) q.host_threads = 0;  /* alone: the accumulator's own default */
  gpu_worker *w = calloc((size_t)k, sizeof *w);
  pthread_t *th = calloc((size_t)k, sizeof *th);
  gacc_acc **used = calloc((size_t)k, sizeof *used);
  gacc_timing *before = calloc((size_t)k, sizeof *before);
  int *on = calloc((size_t)k, sizeof *on);  /* worker i's thread started */
  if (!w || !th || !used || !before || !on) {
    free(w); free(th); free(used); free(before); free(on);
    KIO_ERROR("out of memory");
    return KIO_ERR;
  }
  /* worker 0 on this thread; one whose thread cannot start takes no job */
  for (int i = 0; i < k; i++) {
    w[i].q = &q;
    w[i].acc = &t->accs[i];
  }
  for (int i = 1; i < k; i++) on[i] = pthread_create(&th[i], NULL, gpu_worker_main, &w[i]) == 0;
  on[0] = 1;
  gpu_worker_main(&w[0]);
  int rc = KIO_OK;
  for (int i = 0; i < k; i++) {
    if (!on[i]) continue;
    if (i > 0) pthread_join(th[i], NULL);
    if (w[i].rc != KIO_OK) rc = KIO_ERR;
    used[i] = *w[i].acc;
    before[i] = w[i].before;
  }
  if (rc == KIO_OK) log_acc_timing(used, before, k, kio_now_s() - t0);
  t->dsum_filled = rc == KIO_OK && dev_sum;
  free(on);
  free(w);
  free(th);
  free(used);
  free(before);
  return rc;
}
