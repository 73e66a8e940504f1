/* The feature chain's per-utterance arithmetic and the workers that run it
 * (feat-pool.h). Jobs are computed in any order by any thread, each by one
 * thread with the same code, and committed in input order by the producer:
 * the results do not depend on the thread count. The producer reserves
 * every buffer a job writes, so computing one cannot fail. */
#include "feat-pool.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "base/sys/cpu-share.h"
#include "feat-ops.h"
#include "base/sys/log.h"
#include "base/sys/settings.h"

/* ---- transforms ---- */
kio_fxform *kio_fxform_new(const kio_matrix *w, int32_t k) {
  kio_fxform *x = calloc(1, sizeof *x);
  size_t n = (size_t)w->rows * (size_t)w->cols;
  if (!x) return NULL;
  x->w = malloc(sizeof(float) * (n ? n : 1));
  x->wt = malloc(sizeof(float) * ((size_t)w->rows * (size_t)k + (size_t)w->rows + 1));
  if (!x->w || !x->wt) {
    free(x->w);
    free(x->wt);
    free(x);
    return NULL;
  }
  x->refs = 1;
  x->rows = w->rows;
  x->k = k;
  x->ws = w->cols;
  if (n) memcpy(x->w, w->data, sizeof(float) * n);
  for (int32_t j = 0; j < w->rows; j++)
    for (int32_t c = 0; c < k; c++) x->wt[(size_t)c * w->rows + j] = w->data[(size_t)j * w->cols + c];
  if (w->cols == k + 1) {
    x->off = x->wt + (size_t)w->rows * k;
    for (int32_t j = 0; j < w->rows; j++) x->off[j] = w->data[(size_t)j * w->cols + k];
  }
  return x;
}

void kio_fxform_release(kio_fxform *x) {
  if (!x || --x->refs > 0) return;
  free(x->w);
  free(x->wt);
  free(x);
}

/* ---- one job ---- */
static int reserve(kio_matrix *m, size_t n) {
  if (n <= m->cap) return KIO_OK;
  float *d = realloc(m->data, n * sizeof(float));
  if (!d) return KIO_ERR;
  m->data = d;
  m->cap = n;
  return KIO_OK;
}

int kio_fjob_reserve(kio_fjob *j, size_t n) {
  return reserve(&j->a, n) == KIO_OK && reserve(&j->b, n) == KIO_OK ? KIO_OK : KIO_ERR;
}

float *kio_fjob_norm(kio_fjob *j, size_t n, size_t *off) {
  if (j->normlen + n > j->normcap) {
    size_t c = 2 * (j->normlen + n);
    float *p = realloc(j->norm, sizeof(float) * c);
    if (!p) return NULL;
    j->norm = p;
    j->normcap = c;
  }
  *off = j->normlen;
  j->normlen += n;
  return j->norm + *off;
}

/* A slot keeps its buffers for the next utterance, unless they are larger
 * than this (a long recording's): 4 x threads slots would otherwise each keep
 * the largest buffers they ever held. */
#define KEEP_BYTES ((size_t)16 << 20)

/* Clears the steps (releasing their transforms). Producer only. */
static void job_reset(kio_fjob *j) {
  for (int i = 0; i < j->nsteps; i++)
    if (j->steps[i].op == KIO_FEAT_TRANSFORM) {
      kio_fxform_release(j->steps[i].x);
      free(j->steps[i].cls);
      j->steps[i].cls = NULL;
    }
  j->nsteps = 0;
  j->normlen = 0;
  j->src = NULL;
  if (j->a.cap * sizeof(float) > KEEP_BYTES) kio_matrix_free(&j->a);
  if (j->b.cap * sizeof(float) > KEEP_BYTES) kio_matrix_free(&j->b);
  if (j->in.cap > KEEP_BYTES || j->in.m.cap * sizeof(float) > KEEP_BYTES) {
    kio_cmatrix_raw_holder.free(&j->in);
    memset(&j->in, 0, sizeof j->in);
  }
}

/* What a submitted job holds (its bound in the pool). */
static size_t job_bytes(const kio_fjob *j) {
  return (j->a.cap + j->b.cap + j->in.m.cap) * sizeof(float) + j->in.cap;
}

static void job_free(kio_fjob *j) {
  job_reset(j);
  free(j->key);
  kio_cmatrix_raw_holder.free(&j->in);
  kio_matrix_free(&j->a);
  kio_matrix_free(&j->b);
  free(j->steps);
  free(j->norm);
}

/* Up to SPLICE_FUSE_MAX spliced dims are read in place (feat-chain.c). */
#define SPLICE_FUSE_MAX 4096

/* transform-feats on an utterance: the plan's chains (cls; NULL: SEQ
 * everywhere) in the profile's order (feat-gemm.c); sv: in is the splice's
 * unspliced input. */
typedef struct {
  int prof;
  const unsigned char *cls;
  const kio_fxform *x;
  const float *in;
  float *out;
  const kio_fstep *sv;
  int32_t dim, T;
} xform_job;

/* Frames [t0, t1) of out, frame t's input row at in + (t - base) * stride. */
static void xform_rows(const xform_job *j, const float *in, int32_t base, int32_t stride,
                       int32_t t0, int32_t t1) {
  const kio_fxform *x = j->x;
  kio_featop_gemm_frames(j->prof, j->cls, in, base, stride, t0, t1, x->k, x->w, x->ws, x->wt,
                         x->rows, x->off, j->out);
}

static void xform_all(const xform_job *j) {
  int32_t T = j->T, k = j->x->k;
  if (!j->sv) {
    xform_rows(j, j->in, 0, k, 0, T);
    return;
  }
  /* Frame t's spliced row is input rows t - left .. t + right, contiguous
   * in the input when none is clamped: read in place. */
  int32_t L = j->sv->left, R = j->sv->right, dim = j->dim;
  int32_t a = L, b = T - R;
  /* The edge frames (clamped rows) around the interior [a, b): spliced into
   * a buffer, each run of them transformed as a block. */
  int32_t runs[2][2] = {{0, T}, {T, T}};
  if (a < b) {
    xform_rows(j, j->in, L, dim, a, b);
    runs[0][1] = a;
    runs[1][0] = b;
  }
  for (int r = 0; r < 2; r++) {
    int32_t e0 = runs[r][0], e1 = runs[r][1];
    float rows[SPLICE_FUSE_MAX];  /* k <= SPLICE_FUSE_MAX (feat-chain.c) */
    for (int32_t t0 = e0, n; t0 < e1; t0 += n) {
      n = SPLICE_FUSE_MAX / k < e1 - t0 ? SPLICE_FUSE_MAX / k : e1 - t0;
      for (int32_t t = t0; t < t0 + n; t++)
        for (int32_t c = -L; c <= R; c++) {
          int32_t f = t + c < 0 ? 0 : t + c >= T ? T - 1 : t + c;
          memcpy(rows + (size_t)(t - t0) * k + (size_t)(c + L) * dim, j->in + (size_t)f * dim,
                 sizeof(float) * (size_t)dim);
        }
      xform_rows(j, rows, t0, k, t0, t0 + n);
    }
  }
}

static void swap_mat(kio_matrix *a, kio_matrix *b) { kio_matrix t = *a; *a = *b; *b = t; }

/* Sets m's shape within its reserved buffer. */
static void shape(kio_matrix *m, int32_t rows, int32_t cols) {
  m->rows = rows;
  m->cols = cols;
}

static void job_run(kio_fjob *j) {
  kio_matrix *m = &j->a, *t = &j->b;
  if (j->src) memcpy(m->data, j->src, sizeof(float) * (size_t)m->rows * (size_t)m->cols);
  if (j->in.format)  /* fits: a was reserved for the input */
    kio_cmatrix_decompress(j->in.format, j->in.bytes, j->in.bytes + 16, m);
  const kio_fstep *sv = NULL;
  for (int i = 0; i < j->nsteps; i++) {
    const kio_fstep *s = &j->steps[i];
    switch (s->op) {
      case KIO_FEAT_CMVN: {
        const float *nm = j->norm + s->norm;
        kio_featop_cmvn_apply(m->data, m->rows, s->dim, s->var_norm, nm, nm + s->dim);
        break;
      }
      case KIO_FEAT_DELTAS:
        if (s->dim != m->cols) {  /* --truncate: compact the kept columns */
          for (int32_t r = 1; r < m->rows; r++)
            memmove(m->data + (size_t)r * s->dim, m->data + (size_t)r * m->cols,
                    sizeof(float) * (size_t)s->dim);
          m->cols = s->dim;
        }
        shape(t, m->rows, s->dim * (s->order + 1));
        kio_featop_deltas(m->data, m->rows, s->dim, s->order, s->scales, s->sdims, t->data);
        swap_mat(m, t);
        break;
      case KIO_FEAT_SPLICE:
        if (s->fused) {
          sv = s;
          break;
        }
        shape(t, m->rows, m->cols * (s->left + 1 + s->right));
        kio_featop_splice(m->data, m->rows, m->cols, s->left, s->right, t->data);
        swap_mat(m, t);
        break;
      case KIO_FEAT_TRANSFORM: {
        shape(t, m->rows, s->x->rows);
        xform_job xj = {s->profile, s->cls, s->x, m->data, t->data, sv, m->cols, m->rows};
        xform_all(&xj);
        sv = NULL;
        swap_mat(m, t);
        break;
      }
      case KIO_FEAT_SELECT:
        shape(t, m->rows, s->nsel);
        for (int32_t r = 0; r < m->rows; r++)
          for (int32_t c = 0; c < s->nsel; c++)
            t->data[(size_t)r * s->nsel + c] = m->data[(size_t)r * m->cols + s->sel[c]];
        swap_mat(m, t);
        break;
      default:
        break;
    }
  }
}

/* ---- the pool ---- */
size_t kio_fpool_max_bytes = (size_t)256 << 20;

/* Jobs are numbered in submission order; job n lives in slot n % window.
 * [head, tail): submitted, not committed; [next, tail): not started. */
struct kio_fpool {
  int nth, window;
  pthread_t *th;
  pthread_mutex_t mu;
  pthread_cond_t work, done;
  kio_fjob *jobs;
  unsigned char *finished;
  unsigned long head, next, tail;
  size_t inflight_bytes;  /* job_bytes of [head, tail) */
  int running, idle, pwait, stop, stopped;
  kio_fpool_commit commit;
  void *arg;
};

/* Takes the next queued job and computes it unlocked (by a worker, or by
 * the producer when its window is full). Called and returns locked. */
static void run_next(kio_fpool *p) {
  unsigned long n = p->next++;
  p->running++;
  pthread_mutex_unlock(&p->mu);
  job_run(&p->jobs[n % p->window]);
  pthread_mutex_lock(&p->mu);
  p->running--;
  p->finished[n % p->window] = 1;
}

static void *worker(void *arg) {
  kio_fpool *p = arg;
  pthread_mutex_lock(&p->mu);
  for (;;) {
    while (!p->stop && p->next == p->tail) {
      p->idle++;
      pthread_cond_wait(&p->work, &p->mu);
      p->idle--;
    }
    if (p->stop) break;
    run_next(p);
    if (p->pwait) pthread_cond_signal(&p->done);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

int kio_fpool_threads(void) {
  long long n = kio_setting_int(KIO_SET_FEATS_THREADS, 0, 1, 64);
  return n > 0 ? (int)n : kio_cpu_share(16);
}

kio_fpool *kio_fpool_new(int threads, int nstages, kio_fpool_commit commit, void *arg) {
  kio_fpool *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->work, NULL);
  pthread_cond_init(&p->done, NULL);
  p->window = threads > 1 ? 4 * threads : 1;
  p->commit = commit;
  p->arg = arg;
  p->jobs = calloc((size_t)p->window, sizeof *p->jobs);
  p->finished = calloc((size_t)p->window, 1);
  p->th = calloc((size_t)(threads > 1 ? threads - 1 : 1), sizeof *p->th);
  int ok = p->jobs && p->finished && p->th;
  for (int i = 0; ok && i < p->window; i++)
    ok = (p->jobs[i].steps = calloc((size_t)nstages + 1, sizeof(kio_fstep))) != NULL;
  if (!ok) {
    kio_fpool_free(p);
    return NULL;
  }
  /* Workers take no signals (as the producer: feat-ring.c). */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  for (int i = 0; i < threads - 1; i++) {
    if (pthread_create(&p->th[i], NULL, worker, p) != 0) break;
    p->nth++;
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  return p;
}

/* After a failed commit: nothing more starts; waits for the running jobs,
 * then drops the queued ones. Called locked. */
static void cancel(kio_fpool *p) {
  p->stopped = 1;
  p->next = p->tail;
  while (p->running > 0) {
    p->pwait = 1;
    pthread_cond_wait(&p->done, &p->mu);
    p->pwait = 0;
  }
  for (; p->head < p->tail; p->head++) job_reset(&p->jobs[p->head % p->window]);
}

/* Commits the finished jobs at the head, then, until fewer than `keep` jobs
 * are in flight: computes one not started, or waits. Called locked. */
static void advance(kio_fpool *p, unsigned long keep) {
  while (!p->stopped) {
    while (p->head < p->tail && p->finished[p->head % p->window]) {
      kio_fjob *j = &p->jobs[p->head % p->window];
      pthread_mutex_unlock(&p->mu);  /* the commit may wait for the reader */
      int r = p->commit(p->arg, j);
      job_reset(j);
      pthread_mutex_lock(&p->mu);
      p->finished[p->head % p->window] = 0;
      p->head++;
      p->inflight_bytes -= j->bytes;
      if (r) {
        cancel(p);
        return;
      }
    }
    /* keep == 1 (drain): everything; else room for one more job, and the
     * jobs in flight within the memory bound (one at least) */
    if (p->tail - p->head < keep && (keep == 1 || p->tail == p->head ||
                                     p->inflight_bytes <= kio_fpool_max_bytes))
      return;
    if (p->next < p->tail) {
      run_next(p);
      continue;
    }
    p->pwait = 1;
    pthread_cond_wait(&p->done, &p->mu);
    p->pwait = 0;
  }
}

kio_fjob *kio_fpool_slot(kio_fpool *p) {
  if (p->stopped) return NULL;
  if (p->nth) {
    pthread_mutex_lock(&p->mu);
    advance(p, (unsigned long)p->window);
    pthread_mutex_unlock(&p->mu);
    if (p->stopped) return NULL;
  }
  kio_fjob *j = &p->jobs[p->tail % p->window];
  job_reset(j);  /* a slot filled but not submitted (utterance dropped) */
  return j;
}

int kio_fpool_submit(kio_fpool *p) {
  kio_fjob *j = &p->jobs[p->tail % p->window];
  if (!p->nth) {
    job_run(j);
    int r = p->commit(p->arg, j);
    job_reset(j);
    if (r) p->stopped = 1;
    return p->stopped;
  }
  j->bytes = job_bytes(j);
  pthread_mutex_lock(&p->mu);
  p->finished[p->tail % p->window] = 0;
  p->tail++;
  p->inflight_bytes += j->bytes;
  if (p->idle) pthread_cond_signal(&p->work);
  pthread_mutex_unlock(&p->mu);
  return 0;
}

int kio_fpool_drain(kio_fpool *p) {
  if (p->nth) {
    pthread_mutex_lock(&p->mu);
    advance(p, 1);
    pthread_mutex_unlock(&p->mu);
  }
  return p->stopped;
}

void kio_fpool_free(kio_fpool *p) {
  if (!p) return;
  if (p->nth) {
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->nth; i++) pthread_join(p->th[i], NULL);
  }
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->work);
  pthread_cond_destroy(&p->done);
  for (int i = 0; p->jobs && i < p->window; i++) job_free(&p->jobs[i]);
  free(p->jobs);
  free(p->finished);
  free(p->th);
  free(p);
}
