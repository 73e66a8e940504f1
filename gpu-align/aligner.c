/* The aligner: backend choice (CPU or CUDA), batches of utterances, CPU
 * worker threads (one utterance per task), results. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include "base/sys/cpu-share.h"
#include "device/gpu.h"
#include "base/sys/log.h"
#include "device/svc-link.h"
#include "align-cpu.h"
#include "align-cuda.h"
#include "align-remote.h"
#include "base/sys/settings.h"

#define GALIGN_ERRLEN 256
#define GALIGN_MAX_THREADS 64

struct galign_aligner {
  int is_gpu;             /* the GPU: the service's or our own context */
  galign_use_gpu mode;
  galign_remote *remote;  /* batches go to the GPU service */
  pthread_mutex_t remote_mu;  /* remote replaced (lost) vs sent ahead to */
  galign_opts opts;
  galign_gmm gmm;
  galign_cuda *cuda;
  int nthreads;
  galign_cpu_ws *ws[GALIGN_MAX_THREADS];
  /* per worker thread: device likelihoods in chunks for long utterances */
  galign_cuda_chunks *chunks[GALIGN_MAX_THREADS];
};

int galign_parse_use_gpu(const char *s, galign_use_gpu *out) {
  return kio_gpu_parse_mode(s, out);
}

/* Threads for CPU alignment: $KALDI_GPU_CPU_THREADS, else this job's share of
 * the online CPUs (base/sys/cpu-share.h; at most 16). */
static int cpu_threads(void) {
  long n = (long)kio_setting_int(KIO_SET_CPU_THREADS, 0, 1, 1 << 20);
  if (n <= 0) n = kio_cpu_share(16);
  if (n < 1) n = 1;
  if (n > GALIGN_MAX_THREADS) n = GALIGN_MAX_THREADS;
  return (int)n;
}

/* Creates our own CUDA aligner on the job's device (kio_gpu_choose). */
static int try_device(void *user, kio_gpu *g) {
  galign_aligner *a = user;
  return galign_cuda_new(&a->cuda, g, a->mode, &a->gmm, &a->opts);
}

/* Our own backend, as --use-gpu says, after the service was not usable
 * (why: its reason, "" if it was not tried): the device layer's fall-back
 * order (kio_gpu_choose). Puts the LOG line that says which into line (the
 * caller logs it, so that it names the caller). */
static int local_backend(galign_aligner *a, const char *why, char *line, size_t n) {
  kio_gpu *g = NULL;
  if (kio_gpu_choose(a->mode, why, "aligning", &g, try_device, a, line, n) != KIO_OK)
    return KIO_ERR;
  a->is_gpu = g != NULL;
  return KIO_OK;
}

int galign_aligner_new(galign_aligner **out, galign_use_gpu mode, const kio_tmodel *tm,
                       const kio_am_gmm *am, const galign_opts *o) {
  *out = NULL;
  galign_aligner *a = calloc(1, sizeof *a);
  if (!a) { KIO_ERROR("Out of memory"); return KIO_ERR; }
  pthread_mutex_init(&a->remote_mu, NULL);
  a->opts = *o;
  a->mode = mode;
  if (galign_gmm_init(&a->gmm, am) != KIO_OK) {
    pthread_mutex_destroy(&a->remote_mu);
    free(a);
    return KIO_ERR;
  }
  a->nthreads = cpu_threads();
  char why[256] = "";
  if (mode != GALIGN_GPU_NO && !o->no_service && kio_svc_wanted()) {
    if (galign_remote_new(&a->remote, tm, am, o, why, sizeof why) == KIO_OK) {
      a->is_gpu = 1;
      KIO_LOG("Using GPU: %s (through the GPU service)", galign_remote_desc(a->remote));
      *out = a;
      return KIO_OK;
    }
  }
  char line[640];
  if (local_backend(a, why, line, sizeof line) != KIO_OK) {
    galign_aligner_free(a);
    return KIO_ERR;
  }
  KIO_LOG("%s", line);
  *out = a;
  return KIO_OK;
}

int galign_aligner_is_gpu(const galign_aligner *a) { return a && a->is_gpu; }

kio_gpu_acct *galign_aligner_acct(const galign_aligner *a) {
  return a && a->cuda ? galign_cuda_acct(a->cuda) : NULL;
}

/* The chunk buffers of long utterances (device likelihoods; they read the
 * model's device arrays), grown again when needed. */
static void chunks_free(galign_aligner *a) {
  for (int i = 0; i < GALIGN_MAX_THREADS; i++) {
    galign_cuda_chunks_free(a->chunks[i]);
    a->chunks[i] = NULL;
  }
}

void galign_aligner_trim(galign_aligner *a) {
  if (!a || !a->cuda) return;
  galign_cuda_trim(a->cuda);
  chunks_free(a);  /* long utterances' chunk buffers too */
}
/* Declared here: gpu_long_frames() is defined with the GPU run below. */
static int32_t gpu_long_frames(void);

size_t galign_aligner_batch_need(const galign_aligner *a, int n, const galign_graph *const *graphs,
                                 const kio_matrix *const *feats) {
  if (!a || !a->cuda || n <= 0) return SIZE_MAX;
  const int32_t lim = gpu_long_frames();
  int32_t *rows = malloc((size_t)n * sizeof *rows);
  if (!rows) return SIZE_MAX;
  int has_long = 0;
  for (int i = 0; i < n; i++) {
    rows[i] = feats[i]->rows;
    has_long |= rows[i] > lim;
  }
  /* long utterances take chunk buffers of the host threads' own: no plan */
  size_t need = has_long ? SIZE_MAX : galign_cuda_batch_need(a->cuda, n, graphs, rows);
  free(rows);
  return need;
}

int galign_rebind(galign_aligner *a, const kio_tmodel *tm, const kio_am_gmm *am,
                  const galign_opts *o) {
  (void)tm;
  if (!a || a->remote) {
    KIO_ERROR("Only an aligner of its own backend can be rebound to another model");
    return KIO_ERR;
  }
  galign_gmm g;
  if (galign_gmm_init(&g, am) != KIO_OK) return KIO_ERR;
  chunks_free(a);
  if (a->cuda && galign_cuda_rebind(a->cuda, &g, o) != KIO_OK) {
    galign_gmm_free(&g);
    return KIO_ERR;
  }
  galign_gmm_free(&a->gmm);
  a->gmm = g;
  a->opts = *o;
  return KIO_OK;
}

void galign_unbind(galign_aligner *a) {
  if (!a || a->remote) return;
  chunks_free(a);
  galign_gmm_free(&a->gmm);
  memset(&a->gmm, 0, sizeof a->gmm);
}

int galign_aligner_is_remote(const galign_aligner *a) { return a && a->remote; }
galign_remote *galign_aligner_remote(const galign_aligner *a) { return a ? a->remote : NULL; }

int32_t galign_aligner_num_pdfs(const galign_aligner *a) { return a->gmm.num_pdfs; }

void galign_aligner_free(galign_aligner *a) {
  if (!a) return;
  galign_remote_free(a->remote);
  for (int i = 0; i < GALIGN_MAX_THREADS; i++) galign_cuda_chunks_free(a->chunks[i]);
  galign_cuda_free(a->cuda);
  for (int i = 0; i < GALIGN_MAX_THREADS; i++) galign_cpu_ws_free(a->ws[i]);
  galign_gmm_free(&a->gmm);
  pthread_mutex_destroy(&a->remote_mu);
  free(a);
}

void galign_result_free(galign_result *r) {
  if (!r) return;
  free(r->ali);
  free(r->per_frame);
  memset(r, 0, sizeof *r);
}

/* ---- host decoder jobs: a shared counter hands out utterances to the
 * threads; likelihoods from the GMM (CPU path) or from the device in
 * chunks (long utterances of a GPU run, dev = 1) ---- */
typedef struct cpu_job cpu_job;
typedef struct { cpu_job *job; int t; } cpu_worker;

struct cpu_job {
  galign_aligner *a;
  const int *idx; int m;
  const galign_graph *const *graphs;
  const kio_matrix *const *feats;
  int want_pf, dev;
  galign_result *results;
  int *rc;                 /* per task */
  char (*err)[GALIGN_ERRLEN];
  int next;                /* next task (under lock) */
  pthread_mutex_t lock;
  int nt, started, caller; /* threads; started: th[1..started]; caller: the
                              calling thread is worker 0 (in job_finish) */
  pthread_t th[GALIGN_MAX_THREADS];
  cpu_worker wk[GALIGN_MAX_THREADS];
};

/* Device likelihoods for the long utterances of worker thread t: its chunk
 * source, or NULL for the CPU's (the same numbers) when device memory ran
 * out and the job's mode allows. KIO_ERR (err filled) otherwise. */
static int chunks_for(galign_aligner *a, int t, galign_ll_source **src, char *err, size_t n) {
  double waited = 0;
  char why[200];
  *src = NULL;
  for (;;) {
    kio_gpu_catch();
    int rc = a->chunks[t] ? KIO_OK : galign_cuda_chunks_new(a->cuda, &a->chunks[t]);
    int oom = kio_gpu_caught(why, sizeof why);
    if (rc == KIO_OK) {
      *src = galign_cuda_chunks_source(a->chunks[t]);
      return KIO_OK;
    }
    if (!oom) break;
    kio_gpu_action act = kio_gpu_out_of_memory(galign_cuda_acct(a->cuda), why, 0, &waited);
    if (act == KIO_GPU_USE_CPU) return KIO_OK;
    if (act != KIO_GPU_RETRY) break;
  }
  snprintf(err, n, "No device likelihoods for a long utterance");
  return KIO_ERR;
}

/* One long utterance with device likelihoods in chunks; when device memory
 * runs out, as the job's mode says: wait and retry, or the CPU's
 * likelihoods, or the error. */
static int align_long(galign_aligner *a, int t, galign_ll_source *src, cpu_job *j, int i,
                      char *err) {
  double waited = 0;
  char why[200];
  for (;;) {
    kio_gpu_catch();
    int rc = galign_cpu_align_src(a->ws[t], &a->gmm, j->graphs[i], j->feats[i], &a->opts,
                                  j->want_pf, src, &j->results[i], err, GALIGN_ERRLEN);
    int oom = kio_gpu_caught(why, sizeof why);
    if (rc == KIO_OK || !oom) return rc;
    kio_gpu_action act = kio_gpu_out_of_memory(galign_cuda_acct(a->cuda), why, 0, &waited);
    if (act == KIO_GPU_RETRY) continue;
    err[0] = '\0';
    if (act == KIO_GPU_USE_CPU)
      return galign_cpu_align_src(a->ws[t], &a->gmm, j->graphs[i], j->feats[i], &a->opts,
                                  j->want_pf, NULL, &j->results[i], err, GALIGN_ERRLEN);
    snprintf(err, GALIGN_ERRLEN, "%s", why);
    return KIO_ERR;
  }
}

static void *cpu_worker_main(void *arg) {
  cpu_worker *wk = arg;
  cpu_job *j = wk->job;
  galign_aligner *a = j->a;
  galign_ll_source *src = NULL;
  int src_failed = 0;
  char src_err[GALIGN_ERRLEN] = "";
  if (j->dev) src_failed = chunks_for(a, wk->t, &src, src_err, sizeof src_err) != KIO_OK;
  for (;;) {
    pthread_mutex_lock(&j->lock);
    int k = j->next < j->m ? j->next++ : -1;
    pthread_mutex_unlock(&j->lock);
    if (k < 0) break;
    int i = j->idx[k];
    j->err[k][0] = '\0';
    if (src_failed) {
      snprintf(j->err[k], GALIGN_ERRLEN, "%s", src_err);
      j->rc[k] = KIO_ERR;
      continue;
    }
    j->rc[k] = src ? align_long(a, wk->t, src, j, i, j->err[k])
                   : galign_cpu_align_src(a->ws[wk->t], &a->gmm, j->graphs[i], j->feats[i],
                                          &a->opts, j->want_pf, NULL, &j->results[i], j->err[k],
                                          GALIGN_ERRLEN);
  }
  return NULL;
}

/* Starts the threads of a job over utterances idx[0..m) (m > 0). With
 * caller, the calling thread becomes worker 0 in job_finish; without, all
 * workers are new threads and the caller is free until job_finish. */
static int job_start(cpu_job *j, galign_aligner *a, const int *idx, int m,
                     const galign_graph *const *graphs, const kio_matrix *const *feats,
                     int want_pf, galign_result *results, int dev, int caller) {
  memset(j, 0, sizeof *j);
  int nt = a->nthreads < m ? a->nthreads : m;
  for (int t = 0; t < nt; t++) {
    if (!a->ws[t] && !(a->ws[t] = galign_cpu_ws_new())) {
      KIO_ERROR("Out of memory");
      return KIO_ERR;
    }
  }
  j->a = a; j->idx = idx; j->m = m; j->graphs = graphs; j->feats = feats;
  j->want_pf = want_pf; j->results = results; j->dev = dev; j->nt = nt; j->caller = caller;
  j->rc = malloc((size_t)m * sizeof *j->rc);
  j->err = malloc((size_t)m * sizeof *j->err);
  if (!j->rc || !j->err) {
    free(j->rc); free(j->err);
    KIO_ERROR("Out of memory");
    return KIO_ERR;
  }
  pthread_mutex_init(&j->lock, NULL);
  for (int t = 0; t < nt; t++) { j->wk[t].job = j; j->wk[t].t = t; }
  j->started = -1;
  for (int t = caller ? 1 : 0; t < nt; t++) {
    if (pthread_create(&j->th[t], NULL, cpu_worker_main, &j->wk[t]) != 0) break;
    j->started = t;
  }
  if (!caller && j->started < 0) cpu_worker_main(&j->wk[0]); /* no thread: do it now */
  return KIO_OK;
}

/* Waits for the job (working in it first when the caller is worker 0). */
static void job_finish(cpu_job *j) {
  if (j->caller) cpu_worker_main(&j->wk[0]);
  for (int t = j->caller ? 1 : 0; t <= j->started; t++) pthread_join(j->th[t], NULL);
  pthread_mutex_destroy(&j->lock);
}

/* Logs the first failure in input order over the finished jobs, as a
 * sequential run would report it, and frees them. KIO_ERR if any failed. */
static int jobs_report(cpu_job *const *jobs, int nj) {
  const char *first = NULL;
  int first_i = -1;
  for (int q = 0; q < nj; q++)
    for (int k = 0; jobs[q] && k < jobs[q]->m; k++)
      if (jobs[q]->rc[k] != KIO_OK && (first_i < 0 || jobs[q]->idx[k] < first_i)) {
        first_i = jobs[q]->idx[k];
        first = jobs[q]->err[k];
      }
  if (first) KIO_ERROR("%s", first);
  for (int q = 0; q < nj; q++)
    if (jobs[q]) { free(jobs[q]->rc); free(jobs[q]->err); }
  return first ? KIO_ERR : KIO_OK;
}

static int cpu_run(galign_aligner *a, const int *idx, int m, const galign_graph *const *graphs,
                   const kio_matrix *const *feats, int want_pf, galign_result *results) {
  if (m <= 0) return KIO_OK;
  cpu_job j;
  if (job_start(&j, a, idx, m, graphs, feats, want_pf, results, 0, 1) != KIO_OK) return KIO_ERR;
  job_finish(&j);
  cpu_job *jobs[1] = {&j};
  return jobs_report(jobs, 1);
}

/* Utterances longer than this many frames are decoded on host threads with
 * likelihoods from the device in frame chunks (loglike-chunks-cuda.cu),
 * while the rest of the batch runs on the device; KALDI_GPU_DEV_LONG_FRAMES
 * overrides. Why 6000 (one minute) and not more: the device decoder runs an
 * utterance on one GPU thread, far slower per frame than a host core, and a
 * batch lasts as long as its longest utterance; the chunked path decodes at
 * the CPU decoder's speed, beside the batch, its memory follows the tokens
 * alive (viterbi-cpu.c) and a chunk's likelihoods (~16 MB), not T x pdfs.
 * Below a minute the chunk latency and the thread are not worth it. */
static int32_t gpu_long_frames(void) {
  return (int32_t)kio_setting_int(KIO_SET_DEV_LONG_FRAMES, 6000, 1, INT32_MAX - 1);
}

/* The GPU part of a batch: the utterances of at most gpu_long_frames();
 * the others and those the device hands back get redo[i] = 1. */
static int gpu_run(galign_aligner *a, int n, const galign_graph *const *graphs,
                   const kio_matrix *const *feats, int want_pf, galign_result *results,
                   uint8_t *redo) {
  const int32_t lim = gpu_long_frames();
  int ns = 0, num_redo = 0;
  for (int i = 0; i < n; i++) ns += feats[i]->rows <= lim;
  if (ns == n)
    return galign_cuda_align_batch(a->cuda, n, graphs, feats, want_pf, results, redo, &num_redo);
  int *pos = malloc((size_t)(ns ? ns : 1) * sizeof *pos);
  const galign_graph **sg = malloc((size_t)(ns ? ns : 1) * sizeof *sg);
  const kio_matrix **sf = malloc((size_t)(ns ? ns : 1) * sizeof *sf);
  galign_result *sr = calloc((size_t)(ns ? ns : 1), sizeof *sr);
  uint8_t *sredo = calloc((size_t)(ns ? ns : 1), 1);
  int rc = KIO_OK;
  if (!pos || !sg || !sf || !sr || !sredo) {
    KIO_ERROR("Out of memory");
    rc = KIO_ERR;
  } else {
    int k = 0;
    for (int i = 0; i < n; i++) {
      redo[i] = feats[i]->rows > lim;
      if (redo[i]) continue;
      pos[k] = i;
      sg[k] = graphs[i];
      sf[k] = feats[i];
      sr[k] = results[i];  /* its buffers are reused */
      memset(&results[i], 0, sizeof results[i]);
      k++;
    }
    if (ns > 0) rc = galign_cuda_align_batch(a->cuda, ns, sg, sf, want_pf, sr, sredo, &num_redo);
    for (k = 0; k < ns; k++) {
      results[pos[k]] = sr[k];
      redo[pos[k]] = sredo[k];
    }
  }
  free(pos); free(sg); free(sf); free(sr); free(sredo);
  return rc;
}

/* A GPU run: the long utterances (over gpu_long_frames()) start on host
 * threads with device likelihoods in chunks, the others run as device
 * batches in this thread meanwhile; then those the device handed back
 * (workspace, invalid likelihood) are redone by the CPU path. Without the
 * exact likelihood kernel (KALDI_GPU_DEV_LIKELIHOODS=gemm, large models) long
 * utterances take the CPU path. */
static int gpu_batch(galign_aligner *a, int n, const galign_graph *const *graphs,
                     const kio_matrix *const *feats, int want_pf, galign_result *results) {
  const int32_t lim = gpu_long_frames();
  const int chunked = galign_cuda_chunks_usable(a->cuda);
  int *lidx = malloc((size_t)n * sizeof *lidx), *ridx = malloc((size_t)n * sizeof *ridx);
  uint8_t *redo = calloc((size_t)n, 1);
  if (!lidx || !ridx || !redo) {
    free(lidx); free(ridx); free(redo);
    KIO_ERROR("Out of memory");
    return KIO_ERR;
  }
  int ml = 0, mr = 0, rc = KIO_OK;
  int64_t lframes = 0;
  for (int i = 0; chunked && i < n; i++)
    if (feats[i]->rows > lim) lidx[ml++] = i, lframes += feats[i]->rows;
  cpu_job lj, rj;
  cpu_job *jobs[2] = {NULL, NULL};
  if (ml > 0) {
    if (job_start(&lj, a, lidx, ml, graphs, feats, want_pf, results, 1, 0) != KIO_OK) rc = KIO_ERR;
    else jobs[0] = &lj;
  }
  /* redo[i] = 1 for the long ones too: they are not in the device batch */
  if (rc == KIO_OK) rc = gpu_run(a, n, graphs, feats, want_pf, results, redo);
  if (jobs[0]) job_finish(&lj);
  for (int i = 0; rc == KIO_OK && i < n; i++)
    if (redo[i] && !(chunked && feats[i]->rows > lim)) ridx[mr++] = i;
  if (rc == KIO_OK && mr > 0) {
    if (job_start(&rj, a, ridx, mr, graphs, feats, want_pf, results, 0, 1) != KIO_OK) {
      rc = KIO_ERR;
    } else {
      job_finish(&rj);
      jobs[1] = &rj;
    }
  }
  int rep = jobs_report(jobs, 2);
  if (rc == KIO_OK) rc = rep;
  if (ml > 0 && kio_log_verbose() >= 1) {
    int64_t nch = 0;
    size_t peak = 0;
    for (int t = 0; t < GALIGN_MAX_THREADS; t++) {
      int64_t c1;
      size_t p1;
      galign_cuda_chunks_stats(a->chunks[t], &c1, &p1);
      nch += c1;
      if (p1 > peak) peak = p1;
    }
    KIO_VLOG(1, "Long utterances: %d (%lld frames) decoded with device likelihoods in chunks "
             "(%lld chunks so far; device buffers of a thread at most %.1f MB)", ml,
             (long long)lframes, (long long)nch, peak / 1048576.0);
  }
  free(lidx); free(ridx); free(redo);
  return rc;
}

void galign_aligner_expect_more(galign_aligner *a) {
  if (!a) return;
  pthread_mutex_lock(&a->remote_mu);
  if (a->remote) galign_remote_expect_more(a->remote);
  pthread_mutex_unlock(&a->remote_mu);
}

void galign_aligner_send_ahead(galign_aligner *a, int n, const galign_graph *const *graphs,
                               const kio_matrix *const *feats, int want_per_frame) {
  if (!a) return;
  pthread_mutex_lock(&a->remote_mu);
  if (a->remote) galign_remote_send_ahead(a->remote, n, graphs, feats, want_per_frame);
  pthread_mutex_unlock(&a->remote_mu);
}

int galign_align_batch(galign_aligner *a, int n, const galign_graph *const *graphs,
                       const kio_matrix *const *feats, int want_per_frame,
                       galign_result *results) {
  const galign_opts *o = &a->opts;
  if ((o->retry_beam != 0.0f && o->retry_beam <= o->beam) || o->beam <= 0.0f) {
    char b1[32], b2[32];
    KIO_ERROR("Beams do not make sense: beam %s, retry-beam %s", kio_fmt_g(b1, o->beam),
              kio_fmt_g(b2, o->retry_beam));
    return KIO_ERR;
  }
  if (n <= 0) return KIO_OK;
  if (a->remote) {
    int rc = galign_remote_align(a->remote, n, graphs, feats, want_per_frame, results);
    if (rc != GALIGN_REMOTE_LOST) return rc;
    /* The service went away: this batch and the rest run here, with the
     * same results. */
    char why[256];
    snprintf(why, sizeof why, "lost: %s", galign_remote_error(a->remote));
    pthread_mutex_lock(&a->remote_mu);
    galign_remote_free(a->remote);
    a->remote = NULL;
    pthread_mutex_unlock(&a->remote_mu);
    a->is_gpu = 0;
    char line[640];
    if (local_backend(a, why, line, sizeof line) != KIO_OK) return KIO_ERR;
    KIO_LOG("%s", line);
  }
  if (a->is_gpu) return gpu_batch(a, n, graphs, feats, want_per_frame, results);
  int *idx = malloc((size_t)n * sizeof *idx);
  if (!idx) {
    KIO_ERROR("Out of memory");
    return KIO_ERR;
  }
  for (int i = 0; i < n; i++) idx[i] = i;
  int rc = cpu_run(a, idx, n, graphs, feats, want_per_frame, results);
  free(idx);
  return rc;
}

void galign_aligner_get_stats(const galign_aligner *a, galign_aligner_stats *s) {
  memset(s, 0, sizeof *s);
  if (!a) return;
  /* CPU workspaces (all of the CPU path; the utterances the GPU path hands
   * back to the CPU), summed over threads. */
  for (int i = 0; i < GALIGN_MAX_THREADS; i++)
    if (a->ws[i]) galign_cpu_ws_times(a->ws[i], s);
  /* GPU: likelihood and decoder kernels timed with CUDA events; the decoder
   * kernel includes the device backtrace, so backtrace_s stays CPU-only. */
  if (a->cuda) {
    double ll = 0, dec = 0;
    double stage = 0;
    galign_cuda_times(a->cuda, &ll, &dec, NULL, &stage);
    s->loglike_s += ll;
    s->viterbi_s += dec;
    s->copy_s += stage;
    galign_cuda_retry_stats(a->cuda, &s->host_retries, &s->host_retry_s);
  }
}

/* Statistics of the CPU workspaces (tests and benchmarks). */
void galign_aligner_cpu_stats(const galign_aligner *a, int64_t *frames, int64_t *toks,
                              int32_t *max_toks) {
  *frames = 0; *toks = 0; *max_toks = 0;
  for (int i = 0; i < GALIGN_MAX_THREADS; i++) {
    if (!a->ws[i]) continue;
    int64_t f, t; int32_t mx;
    galign_cpu_ws_stats(a->ws[i], &f, &t, &mx);
    *frames += f; *toks += t;
    if (mx > *max_toks) *max_toks = mx;
  }
}

/* gpu-feats on our own context (align-gfeat.c). */
int galign_aligner_cuda_device(const galign_aligner *a) {
  return a && a->cuda && !a->remote ? galign_cuda_device(a->cuda) : -1;
}

int galign_aligner_set_dev_feats(galign_aligner *a, int n, const kio_matrix *const *feats,
                                 const float *d_base, const int64_t *row_off) {
  if (!a || !a->cuda || a->remote) return KIO_OK;
  return galign_cuda_set_dev_feats(a->cuda, n, feats, d_base, row_off);
}

int64_t galign_aligner_dev_feat_utts(const galign_aligner *a) {
  return a && a->cuda ? galign_cuda_dev_feat_utts(a->cuda) : 0;
}
