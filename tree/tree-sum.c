/* sum-tree-stats' sum (bin/sum-tree-stats.cc): Kaldi reads the files one
 * after the other into a std::map, the first entry of an event kept and
 * each later one added to it (GaussClusterable::Add: count, then the
 * matrix by daxpy with alpha 1, i.e. plain double additions). Here the
 * files are parsed by several threads; each file's entries are put in
 * event order (a stable sort: they normally are already), and a k-way
 * merge adds, per event, in argument order and within a file in file
 * order: the same additions in the same order, so the same bits. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/io/io.h"
#include "base/sys/cpu-share.h"
#include "base/sys/log.h"
#include "tree/tree-stats.h"

typedef struct {
  const char *const *rx;
  int n;
  tstat_table *files;
  size_t **order;   /* per file: entry indices in event order */
  atomic_int next;
  atomic_int failed;
} sum_job;

static const tstat_table *sort_table;
static int by_event(const void *x, const void *y) {
  const tstat_entry *a = &sort_table->v[*(const size_t *)x], *b = &sort_table->v[*(const size_t *)y];
  int c = tstat_event_cmp(sort_table->ev + a->off, a->nev, sort_table->ev + b->off, b->nev);
  if (c) return c;
  return *(const size_t *)x < *(const size_t *)y ? -1 : 1;  /* stable */
}
static pthread_mutex_t sort_lock = PTHREAD_MUTEX_INITIALIZER;

/* entry indices of t in event order (identity when already sorted) */
static size_t *event_order(const tstat_table *t) {
  size_t *o = malloc((t->n ? t->n : 1) * sizeof *o);
  if (!o) return NULL;
  int sorted = 1;
  for (size_t i = 0; i < t->n; i++) {
    o[i] = i;
    if (i && tstat_event_cmp(t->ev + t->v[i - 1].off, t->v[i - 1].nev, t->ev + t->v[i].off,
                             t->v[i].nev) > 0)
      sorted = 0;
  }
  if (!sorted) {  /* not what acc-tree-stats writes; rare, so one at a time */
    pthread_mutex_lock(&sort_lock);
    sort_table = t;
    qsort(o, t->n, sizeof *o, by_event);
    pthread_mutex_unlock(&sort_lock);
  }
  return o;
}

static void *sum_worker(void *arg) {
  sum_job *j = arg;
  for (;;) {
    int i = atomic_fetch_add(&j->next, 1);
    if (i >= j->n || atomic_load(&j->failed)) break;
    if (tstat_read(j->rx[i], &j->files[i]) != KIO_OK) {
      atomic_store(&j->failed, 1);
      break;
    }
    j->order[i] = event_order(&j->files[i]);
    if (!j->order[i]) {
      KIO_ERROR("out of memory");
      atomic_store(&j->failed, 1);
      break;
    }
  }
  return NULL;
}

/* Appends entry e of table s to out (its event and statistics copied). */
static int append(tstat_table *out, const tstat_table *s, const tstat_entry *e) {
  size_t m = e->is_null ? 0 : (size_t)e->rows * (size_t)e->cols;
  if (out->n == out->cap) {
    size_t c = out->cap ? 2 * out->cap : 4096;
    tstat_entry *v = realloc(out->v, c * sizeof *v);
    if (!v) return KIO_ERR;
    out->v = v;
    out->cap = c;
  }
  if (out->ev_n + 2 * (size_t)e->nev > out->ev_cap) {
    size_t c = out->ev_cap ? out->ev_cap : 16384;
    while (c < out->ev_n + 2 * (size_t)e->nev) c *= 2;
    int32_t *p = realloc(out->ev, c * sizeof *p);
    if (!p) return KIO_ERR;
    out->ev = p;
    out->ev_cap = c;
  }
  if (out->st_n + m > out->st_cap) {
    size_t c = out->st_cap ? out->st_cap : 1 << 20;
    while (c < out->st_n + m) c *= 2;
    double *p = realloc(out->st, c * sizeof *p);
    if (!p) return KIO_ERR;
    out->st = p;
    out->st_cap = c;
  }
  tstat_entry *d = &out->v[out->n++];
  *d = *e;
  d->off = out->ev_n;
  d->soff = out->st_n;
  memcpy(out->ev + out->ev_n, s->ev + e->off, 2 * (size_t)e->nev * sizeof(int32_t));
  out->ev_n += 2 * (size_t)e->nev;
  if (m) memcpy(out->st + out->st_n, s->st + e->soff, m * sizeof(double));
  out->st_n += m;
  return KIO_OK;
}

/* GaussClusterable::Add(src) into the last entry of out. */
static int add_last(tstat_table *out, const tstat_table *s, const tstat_entry *e,
                    const char *rx) {
  tstat_entry *d = &out->v[out->n - 1];
  if (d->is_null || e->is_null) {  /* Kaldi dereferences a null pointer here */
    KIO_ERROR("Error reading tree statistics from %s: an event without statistics "
              "occurs in more than one input", rx);
    return KIO_ERR;
  }
  if (d->rows != e->rows || d->cols != e->cols) {
    KIO_ERROR("Error reading tree statistics from %s: statistics of dimension %dx%d added "
              "to %dx%d", rx, (int)e->rows, (int)e->cols, (int)d->rows, (int)d->cols);
    return KIO_ERR;
  }
  d->count += e->count;
  double *y = out->st + d->soff;
  const double *x = s->st + e->soff;
  size_t m = (size_t)e->rows * (size_t)e->cols;
  for (size_t k = 0; k < m; k++) y[k] += x[k];
  return KIO_OK;
}

static int merge(const char *const *rx, int n, tstat_table *files, size_t **order,
                 tstat_table *out) {
  size_t *pos = calloc((size_t)n, sizeof *pos);
  if (!pos) goto oom;
  for (;;) {
    /* the smallest event at the files' heads (n is small: a scan) */
    int best = -1;
    const tstat_entry *be = NULL;
    for (int i = 0; i < n; i++) {
      if (pos[i] == files[i].n) continue;
      const tstat_entry *e = &files[i].v[order[i][pos[i]]];
      if (best < 0 ||
          tstat_event_cmp(files[i].ev + e->off, e->nev, files[best].ev + be->off, be->nev) < 0) {
        best = i;
        be = e;
      }
    }
    if (best < 0) break;
    const int32_t *key = files[best].ev + be->off;
    int32_t nkey = be->nev;
    int first = 1;
    for (int i = best; i < n; i++)
      while (pos[i] < files[i].n) {
        const tstat_entry *e = &files[i].v[order[i][pos[i]]];
        if (tstat_event_cmp(files[i].ev + e->off, e->nev, key, nkey) != 0) break;
        if (first) {
          if (append(out, &files[i], e) != KIO_OK) goto oom;
          key = out->ev + out->v[out->n - 1].off;  /* files[best] moves on below */
          first = 0;
        } else if (add_last(out, &files[i], e, rx[i]) != KIO_OK) {
          free(pos);
          return KIO_ERR;
        }
        pos[i]++;
      }
  }
  free(pos);
  return KIO_OK;
oom:
  free(pos);
  KIO_ERROR("out of memory summing tree statistics");
  return KIO_ERR;
}

static void quiet(int level, const char *func, const char *file, int line, const char *msg,
                  void *user) {
  (void)level; (void)func; (void)file; (void)line; (void)msg; (void)user;
}

/* Reads the files from the first on, in this thread, with the log lines,
 * until one fails: Kaldi's lines up to its one ERROR. */
static void read_in_order(sum_job *j) {
  j->next = 0;
  j->failed = 0;
  for (int i = 0; i < j->n; i++) {
    tstat_free(&j->files[i]);
    free(j->order[i]);
    j->order[i] = NULL;
  }
  sum_worker(j);
}

int tstat_sum(const char *const *rx, int n, int threads, tstat_table *out) {
  memset(out, 0, sizeof *out);
  if (threads <= 0) threads = kio_cpu_share(0);
  if (threads > n) threads = n;
  /* a pipe or standard input is read once, and its WARNING is a line of the
   * log: those files in order, one thread */
  for (int i = 0; i < n; i++)
    if (kio_classify_rxfilename(rx[i]) != KIO_RX_FILE &&
        kio_classify_rxfilename(rx[i]) != KIO_RX_OFFSET)
      threads = 1;
  if (threads < 1) threads = 1;
  sum_job j = {rx, n, calloc((size_t)n, sizeof(tstat_table)), calloc((size_t)n, sizeof(size_t *)),
               0, 0};
  pthread_t *th = malloc(sizeof *th * (size_t)threads);
  if (!j.files || !j.order || !th) {
    free(j.files);
    free(j.order);
    free(th);
    KIO_ERROR("out of memory");
    return KIO_ERR;
  }
  /* in parallel the first error to show could be a later file's: quiet,
   * then on a failure read again in order for the lines */
  kio_log_handler h = NULL;
  void *u = NULL;
  if (threads > 1) {
    kio_log_get_handler(&h, &u);
    kio_log_set_handler(quiet, NULL);
  }
  int started = 0;
  for (int t = 1; t < threads; t++)  /* this thread is the first worker */
    if (pthread_create(&th[started], NULL, sum_worker, &j) == 0) started++;
  sum_worker(&j);
  for (int t = 0; t < started; t++) pthread_join(th[t], NULL);
  free(th);
  if (threads > 1) {
    kio_log_set_handler(h, u);
    if (atomic_load(&j.failed)) read_in_order(&j);
  }
  int rc = atomic_load(&j.failed) ? KIO_ERR : merge(rx, n, j.files, j.order, out);
  for (int i = 0; i < n; i++) {
    tstat_free(&j.files[i]);
    free(j.order[i]);
  }
  free(j.files);
  free(j.order);
  if (rc != KIO_OK) tstat_free(out);
  return rc;
}
