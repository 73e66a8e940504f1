/* A small pool of threads for the device accumulator's per-frame host work
 * (pdf lookup, counting sort, log-likelihoods, checks). gacc_par_run runs
 * one function on every thread of the pool, the caller's included, and
 * returns when all are done. Callers split the work so that every value is
 * computed as one thread would compute it (each frame's value is a function
 * of that frame; sums stay on one thread in frame order), so the results do
 * not depend on the number of threads. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "acc-internal.h"
#include "base/sys/cpu-share.h"
#include "base/sys/settings.h"

struct gacc_par {
  int n;  /* threads, the caller's included */
  pthread_t *th;
  int started;  /* workers running */
  pthread_mutex_t run_mu;  /* held by the caller of a run */
  pthread_mutex_t mu;
  pthread_cond_t go, done;
  unsigned long gen;  /* bumped for each run */
  int left, stop;
  gacc_par_fn fn;
  void *arg;
};

typedef struct {
  gacc_par *p;
  int t;
} par_self;

static void *par_main(void *arg) {
  par_self *s = arg;
  gacc_par *p = s->p;
  const int t = s->t;
  free(s);
  unsigned long seen = 0;
  pthread_mutex_lock(&p->mu);
  for (;;) {
    while (!p->stop && p->gen == seen) pthread_cond_wait(&p->go, &p->mu);
    if (p->stop) break;
    seen = p->gen;
    gacc_par_fn fn = p->fn;
    void *a = p->arg;
    pthread_mutex_unlock(&p->mu);
    fn(a, t, p->n);
    pthread_mutex_lock(&p->mu);
    if (--p->left == 0) pthread_cond_signal(&p->done);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

/* Extra threads of the live pools of this process: accumulators side by
 * side (the GPU service's clients) share the job's cores instead of each
 * taking all of them. */
static pthread_mutex_t g_held_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_held;

int gacc_par_threads(void) {
  int set = (int)kio_setting_int(KIO_SET_DEV_ACC_HOST_THREADS, 0, 0, 256);
  if (set > 0) return set;
  int want = kio_cpu_share(16);
  pthread_mutex_lock(&g_held_mu);
  int n = want - g_held;
  pthread_mutex_unlock(&g_held_mu);
  return n > 1 ? n : 1;
}

gacc_par *gacc_par_new(int threads) {
  gacc_par *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->n = threads < 1 ? 1 : threads;
  if (p->n == 1) return p;
  p->th = calloc((size_t)p->n, sizeof *p->th);
  if (!p->th || pthread_mutex_init(&p->run_mu, NULL) || pthread_mutex_init(&p->mu, NULL) ||
      pthread_cond_init(&p->go, NULL) || pthread_cond_init(&p->done, NULL)) {
    free(p->th);
    free(p);
    return NULL;
  }
  int k = 1;
  for (; k < p->n; k++) {
    par_self *s = malloc(sizeof *s);
    if (!s) break;
    *s = (par_self){p, k};
    if (pthread_create(&p->th[k], NULL, par_main, s) != 0) {
      free(s);
      break;
    }
  }
  p->started = k - 1;
  p->n = k;  /* fewer threads if some could not start: the same results */
  pthread_mutex_lock(&g_held_mu);
  g_held += p->started;
  pthread_mutex_unlock(&g_held_mu);
  return p;
}

void gacc_par_run(gacc_par *p, gacc_par_fn fn, void *arg) {
  /* no pool, one thread, or the pool busy with another thread's run (the
   * caller's and the worker's entries may meet): the caller does it all */
  if (!p || p->n == 1 || pthread_mutex_trylock(&p->run_mu) != 0) {
    fn(arg, 0, 1);
    return;
  }
  pthread_mutex_lock(&p->mu);
  p->fn = fn;
  p->arg = arg;
  p->left = p->n - 1;
  p->gen++;
  pthread_cond_broadcast(&p->go);
  pthread_mutex_unlock(&p->mu);
  fn(arg, 0, p->n);
  pthread_mutex_lock(&p->mu);
  while (p->left > 0) pthread_cond_wait(&p->done, &p->mu);
  pthread_mutex_unlock(&p->mu);
  pthread_mutex_unlock(&p->run_mu);
}

int gacc_par_size(const gacc_par *p) { return p ? p->n : 1; }

void gacc_par_free(gacc_par *p) {
  if (!p) return;
  if (p->th) {
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    for (int k = 1; k <= p->started; k++) pthread_join(p->th[k], NULL);
    pthread_mutex_lock(&g_held_mu);
    g_held -= p->started;
    pthread_mutex_unlock(&g_held_mu);
    pthread_cond_destroy(&p->go);
    pthread_cond_destroy(&p->done);
    pthread_mutex_destroy(&p->mu);
    pthread_mutex_destroy(&p->run_mu);
    free(p->th);
  }
  free(p);
}

void gacc_par_range(size_t n, int t, int nt, size_t *lo, size_t *hi) {
  *lo = n / (size_t)nt * (size_t)t + ((size_t)t < n % (size_t)nt ? (size_t)t : n % (size_t)nt);
  *hi = *lo + n / (size_t)nt + ((size_t)t < n % (size_t)nt ? 1 : 0);
}

/* ---------------- the counting sort by pdf ---------------- */

/* The frames are cut into s->parts ranges, fixed for a batch (a run that
 * falls back to fewer threads does several parts per thread): part q counts
 * its frames per pdf, then writes them at the start of its pdf's run plus
 * the frames of that pdf in parts before q: the stable order of the serial
 * sort. */
typedef struct {
  gacc_sorter *s;
  int32_t n;
  const int32_t *pdf;
  int32_t *count, *order;
} sort_arg;

static void count_part(void *arg, int t, int nt) {
  sort_arg *a = arg;
  const int32_t np = a->s->num_pdfs;
  for (int q = t; q < a->s->parts; q += nt) {
    int32_t *h = a->s->hist + (size_t)q * (size_t)np;
    size_t lo, hi;
    gacc_par_range((size_t)a->n, q, a->s->parts, &lo, &hi);
    for (int32_t j = 0; j < np; j++) h[j] = 0;
    for (size_t i = lo; i < hi; i++) h[a->pdf[i]]++;
  }
}

int gacc_sort_count(gacc_sorter *s, gacc_par *p, int32_t n, const int32_t *pdf,
                    int32_t *count) {
  const int32_t np = s->num_pdfs;
  int parts = gacc_par_size(p);
  if ((size_t)parts > ((size_t)n + 255) / 256) parts = n > 256 ? (int)(((size_t)n + 255) / 256) : 1;
  size_t need = (size_t)parts * (size_t)(np > 0 ? np : 1);
  if (need > s->cap) {
    int32_t *h = realloc(s->hist, need * sizeof *h);
    if (!h) return KIO_ERR;
    s->hist = h;
    s->cap = need;
  }
  s->parts = parts;
  sort_arg a = {s, n, pdf, count, NULL};
  if (parts == 1) count_part(&a, 0, 1);
  else gacc_par_run(p, count_part, &a);
  count[0] = 0;
  for (int32_t j = 0; j < np; j++) {
    int32_t c = 0;
    for (int q = 0; q < parts; q++) c += s->hist[(size_t)q * (size_t)np + j];
    count[j + 1] = c;
  }
  return KIO_OK;
}

static void scatter_part(void *arg, int t, int nt) {
  sort_arg *a = arg;
  const int32_t np = a->s->num_pdfs;
  for (int q = t; q < a->s->parts; q += nt) {
    int32_t *h = a->s->hist + (size_t)q * (size_t)np;  /* now: where part q writes */
    size_t lo, hi;
    gacc_par_range((size_t)a->n, q, a->s->parts, &lo, &hi);
    for (size_t i = lo; i < hi; i++) a->order[h[a->pdf[i]]++] = (int32_t)i;
  }
}

void gacc_sort_scatter(gacc_sorter *s, gacc_par *p, int32_t n, const int32_t *pdf,
                       const int32_t *start, int32_t *order) {
  const int32_t np = s->num_pdfs;
  for (int32_t j = 0; j < np; j++) {
    int32_t at = start[j];
    for (int q = 0; q < s->parts; q++) {
      int32_t *h = s->hist + (size_t)q * (size_t)np + j;
      int32_t c = *h;
      *h = at;
      at += c;
    }
  }
  sort_arg a = {s, n, pdf, NULL, order};
  if (s->parts == 1) scatter_part(&a, 0, 1);
  else gacc_par_run(p, scatter_part, &a);
}

void gacc_rows_copy_part(void *arg, int t, int nt) {
  const gacc_rows_copy *g = arg;
  size_t lo, hi, pos = 0;
  gacc_par_range(g->bytes, t, nt, &lo, &hi);
  for (int i = g->i0; i < g->i1 && pos < hi; i++) {
    size_t b = g->row * (size_t)g->mats[i].rows, s = lo > pos ? lo : pos;
    size_t e = hi < pos + b ? hi : pos + b;
    if (s < e) memcpy(g->dst + s, (const char *)g->mats[i].data + (s - pos), e - s);
    pos += b;
  }
}
