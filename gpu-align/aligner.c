/* The aligner: backend choice (CPU or CUDA), batches of utterances, CPU
 * worker threads (one utterance per task), results. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include "../base/cpu-share.h"
#include "../base/cuda-util.h"
#include "../base/log.h"
#include "../base/svc-link.h"
#include "align-cpu.h"
#include "align-cuda.h"
#include "align-remote.h"

#define GALIGN_ERRLEN 256
#define GALIGN_MAX_THREADS 64

struct galign_aligner {
  int is_gpu;             /* the GPU: the service's or our own context */
  galign_use_gpu mode;
  galign_remote *remote;  /* batches go to the GPU service */
  galign_opts opts;
  galign_gmm gmm;
  galign_cuda *cuda;
  int nthreads;
  galign_cpu_ws *ws[GALIGN_MAX_THREADS];
};

int galign_parse_use_gpu(const char *s, galign_use_gpu *out) {
  if (!s) return KIO_ERR;
  if (!strcmp(s, "yes")) *out = GALIGN_GPU_YES;
  else if (!strcmp(s, "no")) *out = GALIGN_GPU_NO;
  else if (!strcmp(s, "optional")) *out = GALIGN_GPU_OPTIONAL;
  else if (!strcmp(s, "wait")) *out = GALIGN_GPU_WAIT;
  else return KIO_ERR;
  return KIO_OK;
}

/* Threads for CPU alignment: $GALIGN_CPU_THREADS, else this job's share of
 * the online CPUs (base/cpu-share.h; at most 16). */
static int cpu_threads(void) {
  const char *e = getenv("GALIGN_CPU_THREADS");
  long n = e && *e ? strtol(e, NULL, 10) : 0;
  if (n <= 0) n = kio_cpu_share(16);
  if (n < 1) n = 1;
  if (n > GALIGN_MAX_THREADS) n = GALIGN_MAX_THREADS;
  return (int)n;
}

/* Our own backend, as --use-gpu says, after the service was not usable
 * (why: its reason, "" if it was not tried). Puts the LOG line that says
 * which into line (the caller logs it, so that it names the caller). */
static int local_backend(galign_aligner *a, const char *why, char *line, size_t n) {
  char note[320] = "";
  if (why[0]) snprintf(note, sizeof note, " (GPU service not usable: %s)", why);
  if (a->mode == GALIGN_GPU_NO) {
    snprintf(line, n, "Aligning on the CPU (--use-gpu=no).");
    return KIO_OK;
  }
  if (a->mode == GALIGN_GPU_OPTIONAL && kio_cuda_device_count() <= 0) {
    snprintf(line, n, "No GPU found; aligning on the CPU.%s", note);
    return KIO_OK;
  }
  if (galign_cuda_new(&a->cuda, a->mode == GALIGN_GPU_WAIT, &a->gmm, &a->opts) == KIO_OK) {
    a->is_gpu = 1;
    snprintf(line, n, "Using GPU: %s%s", galign_cuda_device_desc(a->cuda), note);
    return KIO_OK;
  }
  if (a->mode != GALIGN_GPU_OPTIONAL) return KIO_ERR;
  snprintf(line, n, "GPU not usable; aligning on the CPU.%s", note);
  return KIO_OK;
}

int galign_aligner_new(galign_aligner **out, galign_use_gpu mode, const kio_tmodel *tm,
                       const kio_am_gmm *am, const galign_opts *o) {
  *out = NULL;
  galign_aligner *a = calloc(1, sizeof *a);
  if (!a) { KIO_ERROR("Out of memory"); return KIO_ERR; }
  a->opts = *o;
  a->mode = mode;
  if (galign_gmm_init(&a->gmm, am) != KIO_OK) { free(a); return KIO_ERR; }
  a->nthreads = cpu_threads();
  char why[256] = "";
  if (mode != GALIGN_GPU_NO && kio_svc_wanted()) {
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
int galign_aligner_is_remote(const galign_aligner *a) { return a && a->remote; }

int32_t galign_aligner_num_pdfs(const galign_aligner *a) { return a->gmm.num_pdfs; }

void galign_aligner_free(galign_aligner *a) {
  if (!a) return;
  galign_remote_free(a->remote);
  galign_cuda_free(a->cuda);
  for (int i = 0; i < GALIGN_MAX_THREADS; i++) galign_cpu_ws_free(a->ws[i]);
  galign_gmm_free(&a->gmm);
  free(a);
}

void galign_result_free(galign_result *r) {
  if (!r) return;
  free(r->ali);
  free(r->per_frame);
  memset(r, 0, sizeof *r);
}

/* ---- CPU batch: a shared counter hands out utterances to the threads ---- */
typedef struct {
  galign_aligner *a;
  const int *idx; int m;
  const galign_graph *const *graphs;
  const kio_matrix *const *feats;
  int want_pf;
  galign_result *results;
  int *rc;                 /* per task */
  char (*err)[GALIGN_ERRLEN];
  int next;                /* next task (under lock) */
  pthread_mutex_t lock;
} cpu_job;

typedef struct { cpu_job *job; galign_cpu_ws *ws; } cpu_worker;

static void *cpu_worker_main(void *arg) {
  cpu_worker *wk = arg;
  cpu_job *j = wk->job;
  for (;;) {
    pthread_mutex_lock(&j->lock);
    int k = j->next < j->m ? j->next++ : -1;
    pthread_mutex_unlock(&j->lock);
    if (k < 0) break;
    int i = j->idx[k];
    j->err[k][0] = '\0';
    j->rc[k] = galign_cpu_align_one(wk->ws, &j->a->gmm, j->graphs[i], j->feats[i], &j->a->opts,
                                    j->want_pf, &j->results[i], j->err[k], GALIGN_ERRLEN);
  }
  return NULL;
}

static int cpu_run(galign_aligner *a, const int *idx, int m, const galign_graph *const *graphs,
                   const kio_matrix *const *feats, int want_pf, galign_result *results) {
  if (m <= 0) return KIO_OK;
  int nt = a->nthreads < m ? a->nthreads : m;
  for (int t = 0; t < nt; t++) {
    if (!a->ws[t] && !(a->ws[t] = galign_cpu_ws_new())) {
      KIO_ERROR("Out of memory");
      return KIO_ERR;
    }
  }
  cpu_job j;
  memset(&j, 0, sizeof j);
  j.a = a; j.idx = idx; j.m = m; j.graphs = graphs; j.feats = feats;
  j.want_pf = want_pf; j.results = results;
  j.rc = malloc((size_t)m * sizeof *j.rc);
  j.err = malloc((size_t)m * sizeof *j.err);
  if (!j.rc || !j.err) {
    free(j.rc); free(j.err);
    KIO_ERROR("Out of memory");
    return KIO_ERR;
  }
  pthread_mutex_init(&j.lock, NULL);
  cpu_worker wk[GALIGN_MAX_THREADS];
  pthread_t th[GALIGN_MAX_THREADS];
  int started = 0;
  for (int t = 0; t < GALIGN_MAX_THREADS; t++) { wk[t].job = &j; wk[t].ws = a->ws[t]; }
  /* The calling thread is worker 0. */
  for (int t = 1; t < nt; t++) {
    if (pthread_create(&th[t], NULL, cpu_worker_main, &wk[t]) != 0) break;
    started = t;
  }
  cpu_worker_main(&wk[0]);
  for (int t = 1; t <= started; t++) pthread_join(th[t], NULL);
  pthread_mutex_destroy(&j.lock);
  /* Report the first failure in input order, as a sequential run would. */
  int rc = KIO_OK;
  for (int k = 0; k < m; k++) {
    if (j.rc[k] != KIO_OK) {
      KIO_ERROR("%s", j.err[k]);
      rc = KIO_ERR;
      break;
    }
  }
  free(j.rc);
  free(j.err);
  return rc;
}

/* Utterances longer than this many frames are aligned by the CPU path in a
 * GPU run (GALIGN_GPU_LONG_FRAMES overrides; default 5 minutes): the device
 * path holds frames x reachable pdfs likelihoods and ~128 tokens per frame
 * for an utterance (an hour: gigabytes), the CPU path's memory follows the
 * tokens alive (viterbi-cpu.c) and it runs long utterances in parallel. */
static int32_t gpu_long_frames(void) {
  const char *e = getenv("GALIGN_GPU_LONG_FRAMES");
  long v = e && *e ? strtol(e, NULL, 10) : 0;
  return v > 0 && v < INT32_MAX ? (int32_t)v : 30000;
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
    galign_remote_free(a->remote);
    a->remote = NULL;
    a->is_gpu = 0;
    char line[640];
    if (local_backend(a, why, line, sizeof line) != KIO_OK) return KIO_ERR;
    KIO_LOG("%s", line);
  }
  int *idx = malloc((size_t)n * sizeof *idx);
  uint8_t *redo = calloc((size_t)n, 1);
  if (!idx || !redo) {
    free(idx); free(redo);
    KIO_ERROR("Out of memory");
    return KIO_ERR;
  }
  int m = 0, rc = KIO_OK;
  if (a->is_gpu) {
    rc = gpu_run(a, n, graphs, feats, want_per_frame, results, redo);
    if (rc == KIO_OK)
      for (int i = 0; i < n; i++)
        if (redo[i]) idx[m++] = i;
  } else {
    for (int i = 0; i < n; i++) idx[m++] = i;
  }
  if (rc == KIO_OK) rc = cpu_run(a, idx, m, graphs, feats, want_per_frame, results);
  free(idx);
  free(redo);
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
