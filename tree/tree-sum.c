/* sum-tree-stats' sum (bin/sum-tree-stats.cc): Kaldi reads the files one
 * after the other into a std::map, the first entry of an event kept and
 * each later one added to it (GaussClusterable::Add: count, then the
 * matrix by daxpy with alpha 1, i.e. plain double additions), and writes
 * the map in event order. Here threads parse the files ahead (a window of
 * them, so memory stays bounded) while this thread adds them in argument
 * order into a hash-indexed table, sorted once at the end: each event
 * gets the same additions in the same order, so the same bits. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/io/io.h"
#include "base/sys/cpu-share.h"
#include "base/sys/log.h"
#include "tree/tree-stats.h"

typedef struct {
  const char *const *rx;
  int n, window;
  tstat_table *files;
  int *state;       /* 0 to parse, 1 parsed, -1 failed */
  int next, used;   /* next file to parse; files added so far */
  int stop;
  pthread_mutex_t mu;
  pthread_cond_t cv;
} sum_job;

static void *sum_worker(void *arg) {
  sum_job *j = arg;
  pthread_mutex_lock(&j->mu);
  for (;;) {
    while (!j->stop && j->next < j->n && j->next >= j->used + j->window)
      pthread_cond_wait(&j->cv, &j->mu);
    if (j->stop || j->next >= j->n) break;
    int i = j->next++;
    pthread_mutex_unlock(&j->mu);
    int rc = tstat_read(j->rx[i], &j->files[i]);
    pthread_mutex_lock(&j->mu);
    j->state[i] = rc == KIO_OK ? 1 : -1;
    pthread_cond_broadcast(&j->cv);
  }
  pthread_mutex_unlock(&j->mu);
  return NULL;
}

/* GaussClusterable::Add of file f (name rx) into sum; err: the message of
 * a failure (printed by the caller). */
static int add_file(tstat_table *sum, tstat_index *ix, const tstat_table *f, const char *rx,
                    char *err, size_t errcap) {
  long k = -1;
  for (size_t i = 0; i < f->n; i++) {
    const tstat_entry *e = &f->v[i];
    int created = 0;
    /* the files of one recipe share most events, in the same order: the
     * entry after the last one is the first guess */
    const tstat_entry *g = k >= 0 && (size_t)k + 1 < sum->n ? &sum->v[k + 1] : NULL;
    if (g && g->nev == e->nev &&
        memcmp(sum->ev + g->off, f->ev + e->off, 2 * (size_t)e->nev * sizeof(int32_t)) == 0)
      k++;
    else
      k = tstat_index_get(ix, sum, f->ev + e->off, e->nev, e->rows, e->cols, e->is_null,
                          &created);
    if (k < 0) {
      snprintf(err, errcap, "out of memory summing tree statistics");
      return KIO_ERR;
    }
    tstat_entry *d = &sum->v[k];
    size_t m = (size_t)e->rows * (size_t)e->cols;
    if (created) {  /* the first: Kaldi keeps the object as read */
      d->count = e->count;
      d->var_floor = e->var_floor;
      if (m) memcpy(sum->st + d->soff, f->st + e->soff, m * sizeof(double));
      continue;
    }
    if (d->is_null || e->is_null) {  /* Kaldi dereferences a null pointer here */
      snprintf(err, errcap, "Error reading tree statistics from %s: an event without "
               "statistics occurs more than once", rx);
      return KIO_ERR;
    }
    if (d->rows != e->rows || d->cols != e->cols) {  /* Kaldi asserts */
      snprintf(err, errcap, "Error reading tree statistics from %s: statistics of "
               "dimension %dx%d added to %dx%d", rx, (int)e->rows, (int)e->cols,
               (int)d->rows, (int)d->cols);
      return KIO_ERR;
    }
    d->count += e->count;
    double *y = sum->st + d->soff;
    const double *x = f->st + e->soff;
    for (size_t q = 0; q < m; q++) y[q] += x[q];
  }
  return KIO_OK;
}

static void quiet(int level, const char *func, const char *file, int line, const char *msg,
                  void *user) {
  (void)level; (void)func; (void)file; (void)line; (void)msg; (void)user;
}

int tstat_sum(const char *const *rx, int n, int threads, tstat_table *out) {
  memset(out, 0, sizeof *out);
  if (threads <= 0) threads = kio_cpu_share(0);
  if (threads > n) threads = n;
  /* a pipe or standard input can be read once and its WARNING is a line of
   * the log in Kaldi's order: then everything in order on this thread */
  for (int i = 0; i < n; i++) {
    kio_rx_kind k = kio_classify_rxfilename(rx[i]);
    if (k != KIO_RX_FILE && k != KIO_RX_OFFSET) threads = 1;
  }
  if (threads < 1) threads = 1;
  sum_job j = {.rx = rx, .n = n, .window = threads + 1};
  j.files = calloc((size_t)n, sizeof *j.files);
  j.state = calloc((size_t)n, sizeof *j.state);
  pthread_t *th = malloc(sizeof *th * (size_t)threads);
  if (!j.files || !j.state || !th) {
    free(j.files);
    free(j.state);
    free(th);
    KIO_ERROR("out of memory");
    return KIO_ERR;
  }
  pthread_mutex_init(&j.mu, NULL);
  pthread_cond_init(&j.cv, NULL);
  /* parsing threads would print a later file's error first: quiet while
   * they run; the first failure in order is reported after */
  kio_log_handler h = NULL;
  void *u = NULL;
  int started = 0;
  if (threads > 1) {
    kio_log_get_handler(&h, &u);
    kio_log_set_handler(quiet, NULL);
    for (int t = 0; t < threads; t++)
      if (pthread_create(&th[started], NULL, sum_worker, &j) == 0) started++;
  }
  tstat_index ix = {0};
  char err[512] = "";
  int failed_at = -1, rc = KIO_OK;
  for (int i = 0; i < n && rc == KIO_OK; i++) {
    int st;
    if (started) {
      pthread_mutex_lock(&j.mu);
      while (j.state[i] == 0) pthread_cond_wait(&j.cv, &j.mu);
      st = j.state[i];
      pthread_mutex_unlock(&j.mu);
    } else {
      st = tstat_read(rx[i], &j.files[i]) == KIO_OK ? 1 : -1;
    }
    if (st < 0) {
      failed_at = i;
      rc = KIO_ERR;
    } else {
      rc = add_file(out, &ix, &j.files[i], rx[i], err, sizeof err);
    }
    tstat_free(&j.files[i]);
    pthread_mutex_lock(&j.mu);
    j.used = i + 1;
    if (rc != KIO_OK) j.stop = 1;
    pthread_cond_broadcast(&j.cv);
    pthread_mutex_unlock(&j.mu);
  }
  for (int t = 0; t < started; t++) pthread_join(th[t], NULL);
  if (threads > 1) {
    kio_log_set_handler(h, u);
    if (failed_at >= 0) {  /* again, with its lines (a regular file) */
      tstat_table again;
      if (tstat_read(rx[failed_at], &again) == KIO_OK) {
        KIO_ERROR("Error reading tree statistics from %s", rx[failed_at]);
        tstat_free(&again);
      }
    }
  }
  if (err[0]) KIO_ERROR("%s", err);
  for (int i = 0; i < n; i++) tstat_free(&j.files[i]);
  free(j.files);
  free(j.state);
  free(th);
  tstat_index_free(&ix);
  pthread_mutex_destroy(&j.mu);
  pthread_cond_destroy(&j.cv);
  if (rc != KIO_OK) {
    tstat_free(out);
    return KIO_ERR;
  }
  tstat_sort(out);
  return KIO_OK;
}
