/* gmm-sum-accs in process (sum-accs.h): files parsed by several threads,
 * added in argument order; the "gmm-sum-accs - FILES |" pipe of the steps
 * scripts recognised and its globs expanded as /bin/sh does. */
#include "train/sum-accs.h"

#include <glob.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/io/io.h"
#include "base/sys/cpu-share.h"
#include "base/sys/kaldi-msg.h"
#include "base/sys/log.h"
#include "base/sys/options.h"
#include "train/est.h"

/* ---- one file ---- */

/* One file's statistics as read (gacc_stats), plus what Kaldi's Read checks. */
typedef struct {
  gacc_stats s;
  size_t cap_g, cap_gd;  /* capacities of occ and of mean_acc/var_acc */
  int has_totals;        /* older accs end after the GMMs */
  float *stage;          /* binary float blocks, before conversion */
  size_t stage_cap;
} acc_file;

static int grow(double **p, size_t *cap, size_t need) {
  if (need <= *cap) return KIO_OK;
  size_t c = *cap ? *cap : 4096;
  while (c < need) c *= 2;
  double *q = realloc(*p, c * sizeof(double));
  if (!q) return KIO_ERR;
  *p = q;
  *cap = c;
  return KIO_OK;
}

/* ExpectToken without the stream position kio_expect_token takes first (a
 * system call per token: an eighth of the time of reading 16 files). */
static int expect(FILE *f, int binary, const char *token) {
  char buf[64];
  if (kio_read_token(f, binary, buf, sizeof buf)) return KIO_ERR;
  if (strcmp(buf, token) != 0) {
    kio_set_error("Expected token \"%s\", got instead \"%s\".", token, buf);
    return KIO_ERR;
  }
  return KIO_OK;
}

/* A binary float or double matrix (or vector: cols NULL) of exactly
 * rows x cols straight into dst; anything else (text, another size) through
 * the generic reader into tmp, then copied. stage: a float buffer of the
 * worker, grown as needed. */
static int read_block(FILE *f, int binary, int32_t rows, int32_t cols, int is_vec, double *dst,
                      float **stage, size_t *stage_cap, kio_dmatrix *tmp) {
  size_t n = (size_t)rows * (size_t)cols;
  int c = binary ? kio_peek(f, 1) : 0;
  if (c == 'F' || c == 'D') {
    char tok[8];
    int32_t r = 0, k = 1;
    if (kio_read_token(f, 1, tok, sizeof tok) || kio_read_int32(f, 1, &r) ||
        (!is_vec && kio_read_int32(f, 1, &k)))
      return KIO_ERR;
    if (strcmp(tok, is_vec ? (c == 'F' ? "FV" : "DV") : (c == 'F' ? "FM" : "DM")) != 0 ||
        r != rows || k != cols) {
      kio_set_error("a %s of %d x %d where the accumulator has %d x %d", tok, (int)r, (int)k,
                    (int)rows, (int)cols);
      return KIO_ERR;
    }
    if (c == 'D') {
      if (fread(dst, sizeof(double), n, f) != n) goto short_read;
      return KIO_OK;
    }
    if (n > *stage_cap) {
      float *p = realloc(*stage, n * sizeof(float));
      if (!p) { kio_set_error("out of memory"); return KIO_ERR; }
      *stage = p;
      *stage_cap = n;
    }
    if (fread(*stage, sizeof(float), n, f) != n) goto short_read;
    const float *s = *stage;
    for (size_t i = 0; i < n; i++) dst[i] = s[i];
    return KIO_OK;
  }
  if (is_vec) {
    kio_dvector v = { 0, NULL, 0 };
    int rc = kio_dvector_read(f, binary, &v);
    if (rc == KIO_OK && v.dim != rows) {
      kio_set_error("a vector of %d where the accumulator has %d", (int)v.dim, (int)rows);
      rc = KIO_ERR;
    }
    if (rc == KIO_OK) memcpy(dst, v.data, n * sizeof(double));
    kio_dvector_free(&v);
    return rc;
  }
  if (kio_dmatrix_read(f, binary, tmp)) return KIO_ERR;
  if (tmp->rows != rows || tmp->cols != cols) {
    kio_set_error("a matrix of %d x %d where the accumulator has %d x %d", (int)tmp->rows,
                  (int)tmp->cols, (int)rows, (int)cols);
    return KIO_ERR;
  }
  memcpy(dst, tmp->data, n * sizeof(double));
  return KIO_OK;
short_read:
  kio_set_error("Failed to read %s from stream: end of file", is_vec ? "vector" : "matrix");
  return KIO_ERR;
}

/* AccumDiagGmm::Read: only kGmmAll accumulators (what gmm-acc-stats-ali and
 * gmm-sum-accs write) are taken. */
static int read_gmm(FILE *f, int binary, acc_file *a, int32_t j, size_t *g, kio_dmatrix *tmp) {
  int32_t dim, M;
  uint16_t flags;
  char tok[64];
  if (expect(f, binary, "<GMMACCS>") || expect(f, binary, "<VECSIZE>") ||
      kio_read_int32(f, binary, &dim) || expect(f, binary, "<NUMCOMPONENTS>") ||
      kio_read_int32(f, binary, &M) || expect(f, binary, "<FLAGS>") ||
      kio_read_uint16(f, binary, &flags))
    return KIO_ERR;
  if (flags != 15) {
    kio_set_error("accumulator of pdf %d has flags %d (only 15, every statistic, is handled)",
                  (int)j, (int)flags);
    return KIO_ERR;
  }
  if (j == 0) a->s.dim = dim;
  if (dim != a->s.dim || M < 0 || dim < 0 || (int64_t)M * dim > ((int64_t)1 << 30)) {
    kio_set_error("accumulator of pdf %d has %d Gaussians of dimension %d (pdf 0: %d)", (int)j,
                  (int)M, (int)dim, (int)a->s.dim);
    return KIO_ERR;
  }
  size_t D = (size_t)dim, n0 = *g, n1 = n0 + (size_t)M;
  size_t cap_gd2 = a->cap_gd;
  if (grow(&a->s.occ, &a->cap_g, n1) || grow(&a->s.mean_acc, &a->cap_gd, n1 * D) ||
      grow(&a->s.var_acc, &cap_gd2, n1 * D) || cap_gd2 != a->cap_gd) {
    kio_set_error("out of memory");
    return KIO_ERR;
  }
  int seen = 0;
  for (;;) {
    if (kio_read_token(f, binary, tok, sizeof tok)) return KIO_ERR;
    if (!strcmp(tok, "</GMMACCS>")) break;
    int rc;
    if (!strcmp(tok, "<OCCUPANCY>")) {
      rc = read_block(f, binary, M, 1, 1, a->s.occ + n0, &a->stage, &a->stage_cap, tmp);
      seen |= 1;
    } else if (!strcmp(tok, "<MEANACCS>")) {
      rc = read_block(f, binary, M, dim, 0, a->s.mean_acc + n0 * D, &a->stage, &a->stage_cap,
                      tmp);
      seen |= 2;
    } else if (!strcmp(tok, "<DIAGVARACCS>")) {
      rc = read_block(f, binary, M, dim, 0, a->s.var_acc + n0 * D, &a->stage, &a->stage_cap,
                      tmp);
      seen |= 4;
    } else {
      kio_set_error("Unexpected token '%s' in model file ", tok);
      return KIO_ERR;
    }
    if (rc) return KIO_ERR;
  }
  if (seen != 7) {
    kio_set_error("the accumulator of pdf %d lacks statistics", (int)j);
    return KIO_ERR;
  }
  *g = n1;
  return KIO_OK;
}

/* Transition counts, then AccumAmDiagGmm::Read. */
static int read_body(FILE *f, int binary, acc_file *a) {
  kio_dvector tv = { 0, NULL, 0 };
  kio_dmatrix tmp = { 0, 0, NULL, 0 };
  int rc = KIO_ERR;
  a->has_totals = 0;
  a->s.total_like = a->s.total_frames = 0.0;
  if (kio_dvector_read(f, binary, &tv)) goto done;
  if (tv.dim < 1) {
    kio_set_error("empty transition statistics");
    goto done;
  }
  a->s.num_tids = tv.dim - 1;
  free(a->s.tacc);
  a->s.tacc = tv.data;
  tv.data = NULL;
  if (expect(f, binary, "<NUMPDFS>") || kio_read_int32(f, binary, &a->s.num_pdfs))
    goto done;
  if (a->s.num_pdfs <= 0 || a->s.num_pdfs > 10000000) {
    kio_set_error("bad number of pdfs %d", (int)a->s.num_pdfs);
    goto done;
  }
  int32_t *po = realloc(a->s.pdf_offset, sizeof(int32_t) * ((size_t)a->s.num_pdfs + 1));
  if (!po) { kio_set_error("out of memory"); goto done; }
  a->s.pdf_offset = po;
  size_t g = 0;
  for (int32_t j = 0; j < a->s.num_pdfs; j++) {
    po[j] = (int32_t)g;
    if (read_gmm(f, binary, a, j, &g, &tmp)) goto done;
    if (g > INT32_MAX) { kio_set_error("too many Gaussians"); goto done; }
  }
  po[a->s.num_pdfs] = (int32_t)g;
  a->s.num_gauss = (int32_t)g;
  if (kio_peek(f, binary) != EOF) {  /* the totals are optional, as in Kaldi */
    if (expect(f, binary, "<total_like>") ||
        kio_read_double(f, binary, &a->s.total_like) ||
        expect(f, binary, "<total_frames>") ||
        kio_read_double(f, binary, &a->s.total_frames))
      goto done;
    a->has_totals = 1;
  }
  rc = KIO_OK;
done:
  kio_dvector_free(&tv);
  kio_dmatrix_free(&tmp);
  return rc;
}

static int read_file(const char *rx, acc_file *a) {
  kio_input *in = NULL;
  int binary;
  if (kio_input_open(&in, rx, &binary) != KIO_OK) return KIO_ERR;
  kio_clear_error();
  if (read_body(kio_input_stream(in), binary, a) != KIO_OK) {
    KIO_ERROR("Error reading stats from %s: %s", rx, kio_last_error());
    kio_input_close(in);
    return KIO_ERR;
  }
  kio_input_close(in);  /* a failed pipe: its WARNING only, as Kaldi's ~Input */
  return KIO_OK;
}

/* ---- the ordered sum ---- */

/* Before file a (the k-th, name rx) is added into sum as
 * AccumAmDiagGmm::Read(add) adds it: the first file gives the layout, the
 * others must match it; the totals. */
static int check_file(gacc_stats *sum, const acc_file *a, int k, const char *rx) {
  const gacc_stats *s = &a->s;
  size_t G = (size_t)s->num_gauss, D = (size_t)s->dim;
  if (k == 0) {
    *sum = (gacc_stats){ .num_tids = s->num_tids, .num_pdfs = s->num_pdfs, .dim = s->dim,
                         .num_gauss = s->num_gauss };
    sum->pdf_offset = malloc(sizeof(int32_t) * ((size_t)s->num_pdfs + 1));
    sum->tacc = calloc((size_t)s->num_tids + 1, sizeof(double));
    sum->occ = calloc(G ? G : 1, sizeof(double));
    sum->mean_acc = calloc(G * D > 0 ? G * D : 1, sizeof(double));
    sum->var_acc = calloc(G * D > 0 ? G * D : 1, sizeof(double));
    if (!sum->pdf_offset || !sum->tacc || !sum->occ || !sum->mean_acc || !sum->var_acc) {
      KIO_ERROR("out of memory summing statistics");
      return KIO_ERR;
    }
    memcpy(sum->pdf_offset, s->pdf_offset, sizeof(int32_t) * ((size_t)s->num_pdfs + 1));
  }
  if (s->num_tids != sum->num_tids) {
    KIO_ERROR("Error reading stats from %s: adding transition statistics of dimension %d "
              "to %d", rx, (int)s->num_tids + 1, (int)sum->num_tids + 1);
    return KIO_ERR;
  }
  if (s->num_pdfs != sum->num_pdfs) {
    KIO_ERROR("Error reading stats from %s: adding accumulators but num-pdfs do not match: "
              "%d vs. %d", rx, (int)sum->num_pdfs, (int)s->num_pdfs);
    return KIO_ERR;
  }
  if (s->dim != sum->dim ||
      memcmp(s->pdf_offset, sum->pdf_offset, sizeof(int32_t) * ((size_t)s->num_pdfs + 1))) {
    KIO_ERROR("Error reading stats from %s: the Gaussians or dimension of its accumulators "
              "differ from the files before it (statistics of another model?)", rx);
    return KIO_ERR;
  }
  if (a->has_totals) {
    sum->total_like += s->total_like;
    sum->total_frames += s->total_frames;
  }
  return KIO_OK;
}

/* The statistics are added in ADD_SLICES parts (element ranges) that the
 * threads waiting for their own turn take too: every element still gets
 * the files in order. */
enum { ADD_SLICES = 8 };

static void add_range(double *dst, const double *src, size_t len, int sl) {
  size_t b = len * (size_t)sl / ADD_SLICES, e = len * (size_t)(sl + 1) / ADD_SLICES;
  for (size_t i = b; i < e; i++) dst[i] += src[i];
}

static void add_slice(gacc_stats *sum, const gacc_stats *s, int sl) {
  size_t G = (size_t)s->num_gauss, GD = G * (size_t)s->dim;
  add_range(sum->tacc, s->tacc, (size_t)s->num_tids + 1, sl);
  add_range(sum->occ, s->occ, G, sl);
  add_range(sum->mean_acc, s->mean_acc, GD, sl);
  add_range(sum->var_acc, s->var_acc, GD, sl);
}

typedef struct {
  const char *const *rx;
  int n;
  const char *prog;
  gacc_stats *sum;
  pthread_mutex_t mu;
  pthread_cond_t turn;
  int next_read;   /* next file to parse */
  int next_add;    /* next file to add into sum */
  int failed;      /* a file failed: no more reading */
  kio_log_deferred **logs;  /* per file */
  const gacc_stats *adding;  /* the file being added (NULL: none) */
  int slice_next, slices_done;
} sum_job;

/* Under j->mu: takes one slice of the file being added, if any is left. */
static int help_add(sum_job *j) {
  if (!j->adding || j->slice_next >= ADD_SLICES) return 0;
  int sl = j->slice_next++;
  const gacc_stats *f = j->adding;
  pthread_mutex_unlock(&j->mu);
  add_slice(j->sum, f, sl);
  pthread_mutex_lock(&j->mu);
  if (++j->slices_done == ADD_SLICES) pthread_cond_broadcast(&j->turn);
  return 1;
}

static void *sum_worker(void *arg) {
  sum_job *j = arg;
  acc_file a;
  memset(&a, 0, sizeof a);
  const char *saved = kio_log_thread_program();  /* the caller's, on the calling thread */
  if (j->prog) kio_log_set_thread_program(j->prog);
  for (;;) {
    pthread_mutex_lock(&j->mu);
    int k = j->failed ? j->n : j->next_read++;
    pthread_mutex_unlock(&j->mu);
    if (k >= j->n) break;
    kio_log_defer(&j->logs[k]);
    int rc = read_file(j->rx[k], &a);
    pthread_mutex_lock(&j->mu);
    while (j->next_add != k && !j->failed)
      if (!help_add(j)) pthread_cond_wait(&j->turn, &j->mu);
    int go = !j->failed;
    pthread_mutex_unlock(&j->mu);
    /* our turn: the files before k are in the sum */
    if (go && rc == KIO_OK) rc = check_file(j->sum, &a, k, j->rx[k]);
    kio_log_defer(NULL);
    pthread_mutex_lock(&j->mu);
    if (go && rc == KIO_OK) {
      j->adding = &a.s;
      j->slice_next = j->slices_done = 0;
      pthread_cond_broadcast(&j->turn);
      while (j->slices_done < ADD_SLICES)
        if (!help_add(j)) pthread_cond_wait(&j->turn, &j->mu);
      j->adding = NULL;
    }
    if (go) {
      if (rc != KIO_OK) j->failed = 1;
      else j->next_add = k + 1;
    }
    pthread_cond_broadcast(&j->turn);
    pthread_mutex_unlock(&j->mu);
  }
  gacc_stats_free(&a.s);
  free(a.stage);
  kio_log_set_thread_program(saved);
  return NULL;
}

int trn_sum_accs(const char *const *rx, int n, int threads, const char *prog, gacc_stats *sum) {
  memset(sum, 0, sizeof *sum);
  if (n <= 0) {
    KIO_ERROR("no statistics to sum");
    return KIO_ERR;
  }
  if (threads <= 0) threads = kio_cpu_share(0);
  if (threads > n) threads = n;
  sum_job j = { .rx = rx, .n = n, .prog = prog, .sum = sum };
  j.logs = calloc((size_t)n, sizeof *j.logs);
  pthread_t *th = malloc(sizeof *th * (size_t)threads);
  if (!j.logs || !th) {
    free(j.logs);
    free(th);
    KIO_ERROR("out of memory");
    return KIO_ERR;
  }
  pthread_mutex_init(&j.mu, NULL);
  pthread_cond_init(&j.turn, NULL);
  int started = 0;
  for (int t = 1; t < threads; t++)  /* this thread is the first worker */
    if (pthread_create(&th[started], NULL, sum_worker, &j) == 0) started++;
  sum_worker(&j);
  for (int t = 0; t < started; t++) pthread_join(th[t], NULL);
  /* the lines of the files up to the first failure, in order, as Kaldi's
   * one-by-one reading prints them; nothing of the files after it */
  const char *saved = kio_log_thread_program();
  if (prog) kio_log_set_thread_program(prog);
  for (int k = 0; k < n; k++) {
    if (k <= j.next_add) kio_log_replay(&j.logs[k]);
    else kio_log_discard(&j.logs[k]);
  }
  kio_log_set_thread_program(saved);
  int rc = j.failed ? KIO_ERR : KIO_OK;
  if (rc != KIO_OK) gacc_stats_free(sum);
  pthread_mutex_destroy(&j.mu);
  pthread_cond_destroy(&j.turn);
  free(j.logs);
  free(th);
  return rc;
}

void trn_sum_accs_log(const char *prog, int n, const gacc_stats *sum, const char *out_name) {
  char a[32], b[32], c[32];
  /* TotCount() and TotLogLike() return float: a float division */
  float tot_count = (float)sum->total_frames, avg = (float)sum->total_like / tot_count;
  /* TotStatsCount(): the double sums before they are written as float */
  double tsc = 0.0;
  for (int32_t j = 0; j < sum->num_pdfs; j++)
    tsc += trn_est_dsum(sum->occ + sum->pdf_offset[j], sum->pdf_offset[j + 1] - sum->pdf_offset[j]);
  KIO_KALDI_AS(prog, SUM_ACCS_SUMMED, n, kio_fmt_g(a, tot_count), kio_fmt_g(b, avg));
  KIO_KALDI_AS(prog, SUM_ACCS_TOTAL, kio_fmt_g(c, (float)tsc));
  KIO_KALDI_AS(prog, SUM_ACCS_WRITTEN, out_name);
}

void trn_sum_accs_round(gacc_stats *s) {
  size_t G = (size_t)s->num_gauss, GD = G * (size_t)s->dim;
  for (size_t i = 0; i < G; i++) s->occ[i] = (double)(float)s->occ[i];
  for (size_t i = 0; i < GD; i++) {
    s->mean_acc[i] = (double)(float)s->mean_acc[i];
    s->var_acc[i] = (double)(float)s->var_acc[i];
  }
}

/* ---- the trainer's jobs, in memory ---- */

/* "1.acc" < "10.acc" < "2.acc": the C locale's order of the file names. */
static int glob_cmp(const void *a, const void *b) {
  char x[24], y[24];
  snprintf(x, sizeof x, "%d.acc", *(const int *)a);
  snprintf(y, sizeof y, "%d.acc", *(const int *)b);
  return strcmp(x, y);
}

/* The jobs' means and variances summed over slices of the elements taken
 * by threads; each job's file holds floats, the sum starts from 0.0 as
 * Kaldi's. */
enum { SUM_SLICE = 8192 };
typedef struct {
  gacc_stats *const *jobs;
  const int *order;
  int n;
  gacc_stats *out;
  size_t len, next;
  pthread_mutex_t mu;
} job_sum;

static void *job_sum_worker(void *arg) {
  job_sum *js = arg;
  for (;;) {
    pthread_mutex_lock(&js->mu);
    size_t a = js->next;
    js->next = a + SUM_SLICE < js->len ? a + SUM_SLICE : js->len;
    size_t b = js->next;
    pthread_mutex_unlock(&js->mu);
    if (a >= b) break;
    double *m = js->out->mean_acc, *v = js->out->var_acc;
    for (size_t i = a; i < b; i++) m[i] = v[i] = 0.0;
    for (int k = 0; k < js->n; k++) {
      const gacc_stats *s = js->jobs[js->order[k] - 1];
      for (size_t i = a; i < b; i++) {
        m[i] += (double)(float)s->mean_acc[i];
        v[i] += (double)(float)s->var_acc[i];
      }
    }
    /* written as float and read back (gmm-sum-accs' lines need only the
     * occupancies' double sums) */
    for (size_t i = a; i < b; i++) {
      m[i] = (double)(float)m[i];
      v[i] = (double)(float)v[i];
    }
  }
  return NULL;
}

/* out shaped as f (its buffers reused where they fit), values unset. */
static int shape_like(gacc_stats *out, const gacc_stats *f) {
  size_t np1 = (size_t)f->num_pdfs + 1, G = (size_t)f->num_gauss;
  size_t GD = G * (size_t)(f->dim > 0 ? f->dim : 0);
  size_t old_gd = (size_t)out->num_gauss * (size_t)(out->dim > 0 ? out->dim : 0);
  int fresh = !out->tacc;
  void *p;
  if (fresh || out->num_pdfs != f->num_pdfs) {
    if (!(p = realloc(out->pdf_offset, sizeof(int32_t) * np1))) return KIO_ERR;
    out->pdf_offset = p;
  }
  if (fresh || out->num_tids != f->num_tids) {
    if (!(p = realloc(out->tacc, sizeof(double) * ((size_t)f->num_tids + 1)))) return KIO_ERR;
    out->tacc = p;
  }
  if (fresh || (size_t)out->num_gauss != G) {
    if (!(p = realloc(out->occ, sizeof(double) * (G ? G : 1)))) return KIO_ERR;
    out->occ = p;
  }
  if (fresh || old_gd != GD) {
    if (!(p = realloc(out->mean_acc, sizeof(double) * (GD ? GD : 1)))) return KIO_ERR;
    out->mean_acc = p;
    if (!(p = realloc(out->var_acc, sizeof(double) * (GD ? GD : 1)))) return KIO_ERR;
    out->var_acc = p;
  }
  out->num_tids = f->num_tids;
  out->num_pdfs = f->num_pdfs;
  out->dim = f->dim;
  out->num_gauss = f->num_gauss;
  memcpy(out->pdf_offset, f->pdf_offset, sizeof(int32_t) * np1);
  return KIO_OK;
}

void trn_sum_glob_order(int nj, int *order) {
  for (int j = 0; j < nj; j++) order[j] = j + 1;
  qsort(order, (size_t)(nj > 0 ? nj : 0), sizeof *order, glob_cmp);
}

int trn_est_sum_dev(gacc_dev_sum *ds, const double *like, const double *frames, int nj,
                    gacc_stats *out, int log_lines) {
  int *order = malloc(sizeof(int) * (size_t)(nj > 0 ? nj : 1));
  if (!order) { KIO_ERROR("out of memory"); return KIO_ERR; }
  trn_sum_glob_order(nj, order);
  if (nj < 1 || gacc_dev_sum_fetch(ds, out) != KIO_OK) {
    free(order);
    if (nj < 1) KIO_ERROR("no statistics to sum");
    return KIO_ERR;
  }
  out->total_like = out->total_frames = 0.0;
  for (int k = 0; k < nj; k++) {
    out->total_like += like[order[k] - 1];
    out->total_frames += frames[order[k] - 1];
  }
  free(order);
  /* as trn_est_sum_jobs: the lines from the occupancies' double sums, then
   * the occupancies as written and read back */
  if (log_lines) trn_sum_accs_log(kio_log_thread_program(), nj, out, "-");
  size_t G = (size_t)out->num_gauss;
  for (size_t g = 0; g < G; g++) out->occ[g] = (double)(float)out->occ[g];
  return KIO_OK;
}

int trn_est_sum_jobs(gacc_stats *const *jobs, int nj, gacc_stats *out, int log_lines) {
  int *order = malloc(sizeof(int) * (size_t)(nj > 0 ? nj : 1));
  if (!order) { KIO_ERROR("out of memory"); return KIO_ERR; }
  int n = 0;
  for (int j = 0; j < nj; j++)
    if (jobs[j]) order[n++] = j + 1;
  qsort(order, (size_t)n, sizeof *order, glob_cmp);
  if (n == 0) {
    free(order);
    gacc_stats_free(out);
    KIO_ERROR("no statistics to sum");
    return KIO_ERR;
  }
  const gacc_stats *f = jobs[order[0] - 1];
  size_t G = (size_t)f->num_gauss, D = (size_t)f->dim;
  /* out's buffers kept from an earlier sum where they fit: every value is
   * set below (the means and variances by the slices' workers) */
  if (shape_like(out, f) != KIO_OK) {
    free(order);
    gacc_stats_free(out);
    KIO_ERROR("out of memory");
    return KIO_ERR;
  }
  memset(out->tacc, 0, sizeof(double) * ((size_t)f->num_tids + 1));
  memset(out->occ, 0, sizeof(double) * G);
  out->total_like = out->total_frames = 0.0;
  for (int k = 0; k < n; k++) {
    const gacc_stats *s = jobs[order[k] - 1];
    if (s->num_tids != f->num_tids || s->num_gauss != f->num_gauss || s->dim != f->dim ||
        s->num_pdfs != f->num_pdfs) {
      free(order);
      gacc_stats_free(out);
      KIO_ERROR("Adding accumulators but num-pdfs do not match: %d vs. %d",
                (int)f->num_pdfs, (int)s->num_pdfs);
      return KIO_ERR;
    }
  }
  for (int k = 0; k < n; k++) {
    const gacc_stats *s = jobs[order[k] - 1];
    for (int32_t t = 0; t <= s->num_tids; t++) out->tacc[t] += s->tacc[t];
    for (size_t g = 0; g < G; g++) out->occ[g] += (double)(float)s->occ[g];
    out->total_like += s->total_like;
    out->total_frames += s->total_frames;
  }
  /* The means and variances, by far the most, on threads over slices of
   * the elements: each element still gets the jobs in glob order. */
  job_sum js = { jobs, order, n, out, G * D, 0, PTHREAD_MUTEX_INITIALIZER };
  int threads = trn_est_threads((int)(G * D / SUM_SLICE) + 1);
  pthread_t *th = threads > 1 ? malloc(sizeof *th * (size_t)threads) : NULL;
  int started = 0;
  while (th && started < threads - 1 &&
         pthread_create(&th[started], NULL, job_sum_worker, &js) == 0)
    started++;
  job_sum_worker(&js);
  for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
  free(th);
  /* gmm-sum-accs' lines come from the double sums; the sum is written
   * (float) and read back by gmm-est. */
  if (log_lines) trn_sum_accs_log(kio_log_thread_program(), n, out, "-");
  for (size_t g = 0; g < G; g++) out->occ[g] = (double)(float)out->occ[g];
  free(order);
  return KIO_OK;
}

/* ---- the steps scripts' pipe ---- */

/* The characters a word may hold for us to know what the shell makes of it
 * (no quoting, expansion, redirection or control characters). */
static int plain_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         strchr("_-./,:+=@%^*?[]", c) != NULL;
}

static int byte_cmp(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Is byte order the order /bin/sh lists a glob's matches in? dash sorts by
 * bytes; bash (and others) by the locale's collation, which is byte order
 * only in the C/POSIX locale. */
static int glob_order_is_bytes(void) {
  char buf[PATH_MAX];
  ssize_t len = readlink("/bin/sh", buf, sizeof buf - 1);
  if (len > 0) {
    buf[len] = 0;
    const char *b = strrchr(buf, '/');
    if (!strcmp(b ? b + 1 : buf, "dash")) return 1;
  }
  const char *names[] = { "LC_ALL", "LC_COLLATE", "LANG" };
  for (int i = 0; i < 3; i++) {
    const char *v = getenv(names[i]);
    if (v && *v) return !strcmp(v, "C") || !strcmp(v, "POSIX");
  }
  return 1;  /* nothing set: the C locale */
}

void trn_sum_accs_free_files(char **files, int n) {
  for (int i = 0; files && i < n; i++) free(files[i]);
  free(files);
}

static int push(char ***files, int *n, int *cap, const char *w, size_t len) {
  if (*n == *cap) {
    int c = *cap ? 2 * *cap : 32;
    char **p = realloc(*files, sizeof(char *) * (size_t)c);
    if (!p) return KIO_ERR;
    *files = p;
    *cap = c;
  }
  char *s = strndup(w, len);
  if (!s) return KIO_ERR;
  (*files)[(*n)++] = s;
  return KIO_OK;
}

int trn_sum_accs_pipe(const char *rx, char ***files_out, int *n_out) {
  size_t len = strlen(rx);
  if (len < 2 || rx[len - 1] != '|') return 0;
  len--;  /* Kaldi runs what precedes the last '|' through popen */
  const char *p = rx;
  const char *end = rx + len;
  int word = 0, n = 0, cap = 0, ok = 1, globbed = 0;
  char **files = NULL;
  while (ok) {
    while (p < end && (*p == ' ' || *p == '\t')) p++;
    if (p == end) break;
    const char *w = p;
    while (p < end && *p != ' ' && *p != '\t') {
      if (!plain_char(*p)) ok = 0;
      p++;
    }
    size_t wl = (size_t)(p - w);
    if (!ok) break;
    if (word == 0) ok = wl == 12 && !strncmp(w, "gmm-sum-accs", 12);
    else if (word == 1) ok = wl == 1 && w[0] == '-';
    else if (w[0] == '-' || strchr("=:+%^@", w[0]) != NULL) ok = 0;  /* options, stdin */
    else if (strcspn(w, "*?[") < wl) {
      char *pat = strndup(w, wl);
      glob_t g;
      ok = pat != NULL;
      if (ok) {
        int r = glob(pat, GLOB_NOSORT, NULL, &g);
        if (r == 0) {
          qsort(g.gl_pathv, g.gl_pathc, sizeof(char *), byte_cmp);
          for (size_t i = 0; ok && i < g.gl_pathc; i++)
            ok = push(&files, &n, &cap, g.gl_pathv[i], strlen(g.gl_pathv[i])) == KIO_OK;
          globfree(&g);
        } else if (r == GLOB_NOMATCH) {  /* the shell passes the word itself */
          ok = push(&files, &n, &cap, w, wl) == KIO_OK;
        } else {
          ok = 0;
        }
      }
      free(pat);
      globbed = 1;
    } else {
      ok = push(&files, &n, &cap, w, wl) == KIO_OK;
    }
    word++;
  }
  if (!ok || word < 3 || n < 1 || (globbed && !glob_order_is_bytes())) {
    trn_sum_accs_free_files(files, n);
    return 0;
  }
  *files_out = files;
  *n_out = n;
  return 1;
}

void trn_sum_accs_echo(const char *prog, char *const *args, int n) {
  flockfile(stderr);
  fprintf(stderr, "%s ", prog);
  for (int i = 0; i < n; i++) {
    char *e = kio_escape_arg(args[i]);
    fprintf(stderr, "%s ", e ? e : args[i]);
    free(e);
  }
  fputc('\n', stderr);
  funlockfile(stderr);
  fflush(stderr);
}
