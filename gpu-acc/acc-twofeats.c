/* gmm-acc-stats-twofeats's loop (gmmbin/gmm-acc-stats-twofeats.cc). Per
 * frame, as Kaldi: the posterior's pairs merged per pdf (ConvertPosteriorToPdfs'
 * order), each pdf's component posteriors from the first features scaled by
 * its weight and added with the second features into that pdf's statistics
 * (AccumulateForGmmTwofeats), then every pair's weight into the transition
 * counts. The arithmetic is the CPU accumulator's (Kaldi's bytes per
 * rounding profile). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "acc-internal.h"
#include "base/sys/kaldi-msg.h"
#include "base/sys/log.h"
#include "gpu-acc/mllt-postpipe.h"
#include "gpu-acc/mllt.h"
#include "gpu-acc/twofeats.h"

/* libstdc++'s unordered_map<int32, float>: bucket counts after the first
 * insertion and after each growth (_Prime_rehash_policy: 11 initial buckets
 * rounded up to 13, then the prime list's lower bound of twice the count). */
static const int kBuckets[] = {13, 29, 59, 127};
enum { MAP_MAX = 127, EMPTY = -1, BEFORE_BEGIN = -2 };

typedef struct {
  int32_t key[MAP_MAX];
  float val[MAP_MAX];
  int next[MAP_MAX], before[MAP_MAX];  /* before[b]: node before bucket b's run */
  int head, count, nb;
} pdf_map;

/* _M_insert_bucket_begin: a new key at the front of its bucket's run, or a
 * new run at the front of the list. */
static void map_link(pdf_map *m, int c) {
  int b = (int)((uint32_t)m->key[c] % (uint32_t)m->nb);
  if (m->before[b] != EMPTY) {
    int *link = m->before[b] == BEFORE_BEGIN ? &m->head : &m->next[m->before[b]];
    m->next[c] = *link;
    *link = c;
  } else {
    m->next[c] = m->head;
    m->head = c;
    if (m->next[c] >= 0) m->before[(uint32_t)m->key[m->next[c]] % (uint32_t)m->nb] = c;
    m->before[b] = BEFORE_BEGIN;
  }
}

/* _M_rehash_aux: the nodes relinked in list order into nb buckets. */
static void map_rehash(pdf_map *m, int nb) {
  int p = m->head;
  m->head = -1;
  m->nb = nb;
  for (int b = 0; b < nb; b++) m->before[b] = EMPTY;
  while (p >= 0) {
    int q = m->next[p];
    map_link(m, p);
    p = q;
  }
}

int gacc_pdf_post_order(const int32_t *pdf_of_pair, const float *w_of_pair, int n,
                        int32_t *pdf, float *w, int *beyond_127) {
  pdf_map m;
  m.head = -1;
  m.count = 0;
  m.nb = 0;
  int grow = 0;
  for (int i = 0; i < n; i++) {
    int32_t k = pdf_of_pair[i];
    int c;
    for (c = 0; c < m.count && m.key[c] != k; c++) {}
    if (c < m.count) {
      m.val[c] += w_of_pair[i];
      continue;
    }
    if (m.count == MAP_MAX) {
      /* a bucket count past the ones known here: first-occurrence order, flagged */
      *beyond_127 = 1;
      int u = 0;
      for (int j = 0; j < n; j++) {
        int v = 0;
        while (v < u && pdf[v] != pdf_of_pair[j]) v++;
        if (v == u) { pdf[u] = pdf_of_pair[j]; w[u++] = w_of_pair[j]; }
        else w[v] += w_of_pair[j];
      }
      int kept = 0;
      for (int j = 0; j < u; j++)
        if (w[j] != 0.0f) { pdf[kept] = pdf[j]; w[kept++] = w[j]; }
      return kept;
    }
    if (m.nb == 0 || m.count == m.nb) map_rehash(&m, kBuckets[grow++]);
    c = m.count++;
    m.key[c] = k;
    m.val[c] = w_of_pair[i];
    map_link(&m, c);
  }
  int out = 0;
  for (int c = m.head; c >= 0; c = m.next[c])
    if (m.val[c] != 0.0f) { pdf[out] = m.key[c]; w[out++] = m.val[c]; }
  return out;
}

static void quiet(int level, const char *func, const char *file, int line, const char *msg,
                  void *user) {
  (void)level; (void)func; (void)file; (void)line; (void)msg; (void)user;
}

typedef struct {
  const kio_tmodel *tm;
  const kio_am_gmm *am;
  gacc_stats *st;
  int32_t dim2;           /* 0 until the first file */
  float *post, *x2;       /* max components; first features' dim */
  double *xd;             /* 2 * dim2: x and x^2 of the second features */
  int32_t *pair_pdf, *pdf;
  float *pdf_w;
  size_t cap_pairs;
  int beyond_127;
} run_state;

static int check_tid(const run_state *s, int32_t tid, const char *key, int32_t t) {
  if (tid < 0 || tid > s->tm->num_tids) {
    KIO_ERROR("Transition-id %d out of range [0, %d] at frame %d of the posteriors for "
              "utterance %s", (int)tid, (int)s->tm->num_tids, (int)t, key);
    return KIO_ERR;
  }
  int32_t pdf = s->tm->tid2pdf[tid];
  if (pdf < 0 || pdf >= s->am->num_pdfs) {
    KIO_ERROR("Transition-id %d maps to pdf %d, but the model has %d pdfs (utterance %s)",
              (int)tid, (int)pdf, (int)s->am->num_pdfs, key);
    return KIO_ERR;
  }
  return KIO_OK;
}

/* The statistics, shaped by the model and the second features' dimension. */
static int init_stats(run_state *s, int32_t dim2) {
  gacc_stats_free(s->st);
  if (gacc_stats_init(s->st, s->tm, s->am) != KIO_OK) return KIO_ERR;
  if (dim2 != s->st->dim) {
    size_t gd = (size_t)s->st->num_gauss * (size_t)dim2;
    free(s->st->mean_acc);
    free(s->st->var_acc);
    s->st->mean_acc = calloc(gd ? gd : 1, sizeof(double));
    s->st->var_acc = calloc(gd ? gd : 1, sizeof(double));
    s->st->dim = dim2;
    if (!s->st->mean_acc || !s->st->var_acc) goto oom;
  }
  int32_t max_comp = 1;
  for (int32_t j = 0; j < s->am->num_pdfs; j++)
    if (s->am->pdfs[j].num_comp > max_comp) max_comp = s->am->pdfs[j].num_comp;
  s->dim2 = dim2;
  s->post = malloc(sizeof(float) * (size_t)max_comp);
  s->x2 = malloc(sizeof(float) * (size_t)(s->am->dim > 0 ? s->am->dim : 1));
  s->xd = malloc(sizeof(double) * 2 * (size_t)(dim2 > 0 ? dim2 : 1));
  if (!s->post || !s->x2 || !s->xd) goto oom;
  return KIO_OK;
oom:
  KIO_ERROR("Out of memory allocating statistics for %d pdfs", (int)s->am->num_pdfs);
  return KIO_ERR;
}

/* One frame's (pdf, weight) pairs of the GMM part: AccumulateForGmmTwofeats. */
static int frame_gmm(run_state *s, const char *key, int32_t t, const kio_matrix *f1,
                     const kio_matrix *f2, int32_t pdf, float weight, float *like) {
  const kio_diag_gmm *g = &s->am->pdfs[pdf];
  if (f1->cols != g->dim) {
    KIO_KALDI(MLLT_DIM, (int)f1->cols, (int)g->dim);
    return KIO_ERR;
  }
  if (f2->cols != s->dim2) {
    KIO_KALDI(TWOFEATS_DIM2, key, (int)f2->cols, (int)s->dim2);
    return KIO_ERR;
  }
  const float *x1 = f1->data + (size_t)t * f1->cols, *x2row = f2->data + (size_t)t * f2->cols;
  float l = gacc_cpu_component_posteriors(g, x1, s->x2, s->post);
  if (isnan(l) || isinf(l)) return gacc_bad_like(key, t);
  gacc_stats *st = s->st;
  int32_t D = s->dim2;
  double *xd = s->xd, *x2d = s->xd + D;
  for (int32_t d = 0; d < D; d++) {
    xd[d] = (double)x2row[d];
    x2d[d] = xd[d] * xd[d];
  }
  size_t g0 = (size_t)st->pdf_offset[pdf];
  for (int32_t m = 0; m < g->num_comp; m++) {
    double gm = (double)(s->post[m] * weight);
    /* post 0: Kaldi adds 0 * x, which leaves every (finite) sum as it is */
    if (gm == 0.0) continue;
    st->occ[g0 + (size_t)m] += gm;
    gacc_cpu_stats_row(st->mean_acc + (g0 + (size_t)m) * (size_t)D,
                       st->var_acc + (g0 + (size_t)m) * (size_t)D, gm, xd, x2d, D);
  }
  st->total_like += (double)(l * weight);
  st->total_frames += (double)weight;
  *like = l;
  return KIO_OK;
}

static int reserve_pairs(run_state *s, size_t n) {
  if (n <= s->cap_pairs) return KIO_OK;
  size_t c = n > 2 * s->cap_pairs ? n : 2 * s->cap_pairs;
  int32_t *a = realloc(s->pair_pdf, c * sizeof *a);
  if (a) s->pair_pdf = a;
  int32_t *b = realloc(s->pdf, c * sizeof *b);
  if (b) s->pdf = b;
  float *w = realloc(s->pdf_w, c * sizeof *w);
  if (w) s->pdf_w = w;
  if (!a || !b || !w) {
    KIO_ERROR("Out of memory");
    return KIO_ERR;
  }
  s->cap_pairs = c;
  return KIO_OK;
}

/* One file: *like, *weight are Kaldi's float sums of weight * like and weight. */
static int file(run_state *s, const char *key, const kio_matrix *f1, const kio_matrix *f2,
                const gacc_post *p, float *like, float *weight) {
  float tl = 0.0f, tw = 0.0f;
  for (int32_t t = 0; t < p->frames; t++) {
    int32_t j0 = p->off[t], n = p->off[t + 1] - j0;
    if (reserve_pairs(s, (size_t)n) != KIO_OK) return KIO_ERR;
    for (int32_t j = 0; j < n; j++) {
      if (check_tid(s, p->tid[j0 + j], key, t) != KIO_OK) return KIO_ERR;
      s->pair_pdf[j] = s->tm->tid2pdf[p->tid[j0 + j]];
    }
    int m = gacc_pdf_post_order(s->pair_pdf, p->w + j0, n, s->pdf, s->pdf_w, &s->beyond_127);
    for (int k = 0; k < m; k++) {
      float l = 0.0f;
      if (frame_gmm(s, key, t, f1, f2, s->pdf[k], s->pdf_w[k], &l) != KIO_OK)
        return KIO_ERR;
      tl += s->pdf_w[k] * l;
      tw += s->pdf_w[k];
    }
    for (int32_t j = 0; j < n; j++) s->st->tacc[p->tid[j0 + j]] += (double)p->w[j0 + j];
  }
  *like = tl;
  *weight = tw;
  return KIO_OK;
}

static int run(run_state *s, kio_seq_reader *f1r, kio_ra_reader *f2r, gacc_posts_in *posts,
               long *num_done) {
  long done = 0, no_post = 0, no_feats2 = 0, other = 0;
  double tot_like = 0.0, tot_t = 0.0;
  char b1[32], b2[32];
  for (; !kio_seq_done(f1r); kio_seq_next(f1r)) {
    const char *key = kio_seq_key(f1r);
    int has = kio_ra_has_key(f2r, key);
    if (has < 0) return KIO_ERR;
    if (!has) {
      KIO_KALDI(TWOFEATS_NO_FEATS2, key);
      no_feats2++;
      continue;
    }
    has = gacc_posts_has_key(posts, key);
    if (has < 0) return KIO_ERR;
    if (!has) {
      no_post++;
      continue;
    }
    const kio_matrix *f1 = kio_seq_value(f1r);
    if (!f1) return KIO_ERR;
    const kio_matrix *f2 = kio_ra_value(f2r, key);
    if (!f2) return KIO_ERR;
    if (f1->rows != f2->rows) {
      KIO_KALDI(TWOFEATS_ROWS);
      return KIO_ERR;
    }
    if (s->dim2 == 0) {
      if (init_stats(s, f2->cols) != KIO_OK) return KIO_ERR;
    }
    const gacc_post *p = gacc_posts_value(posts, key);
    if (!p) return KIO_ERR;
    if (p->frames != f1->rows) {
      KIO_KALDI(TWOFEATS_WRONG_SIZE, (int)p->frames, (int)f1->rows);
      other++;
      continue;
    }
    done++;
    float like, weight;
    if (file(s, key, f1, f2, p, &like, &weight) != KIO_OK) return KIO_ERR;
    KIO_KALDI(TWOFEATS_FILE, kio_fmt_g(b1, like / weight), kio_fmt_g(b2, weight));
    tot_like += like;
    tot_t += weight;
    if (done % 10 == 0) KIO_KALDI(TWOFEATS_SO_FAR, kio_fmt_g(b1, tot_like / tot_t));
  }
  if (gacc_posts_finish(posts) != KIO_OK) return KIO_ERR;
  if (s->beyond_127)
    KIO_WARN("Some frames' posteriors name more than 127 pdfs: their likelihoods were summed in "
             "an order that may differ from Kaldi's in the last bits (the statistics do not "
             "depend on it)");
  KIO_KALDI(TWOFEATS_DONE, done, no_post, no_feats2, other);
  KIO_KALDI(TWOFEATS_OVERALL, kio_fmt_g(b1, tot_like / tot_t), kio_fmt_g(b2, tot_t));
  *num_done = done;
  return KIO_OK;
}

int gacc_twofeats_run(const kio_tmodel *tm, const kio_am_gmm *am, const char *feats1_rspecifier,
                      const char *feats2_rspecifier, const char *posteriors_rspecifier,
                      gacc_stats *out, long *num_done) {
  run_state s = {0};
  s.tm = tm;
  s.am = am;
  s.st = out;
  memset(out, 0, sizeof *out);
  *num_done = 0;
  kio_seq_reader *f1 = NULL;
  kio_ra_reader *f2 = NULL;
  gacc_posts_in posts = {NULL, NULL};
  int rc = KIO_ERR;
  if (kio_seq_open(&f1, feats1_rspecifier, &kio_matrix_holder) != KIO_OK) return KIO_ERR;
  if (kio_ra_open(&f2, feats2_rspecifier, &kio_matrix_holder) != KIO_OK) {
    kio_seq_close(f1);
    return KIO_ERR;
  }
  if (gacc_posts_open(&posts, posteriors_rspecifier) != KIO_OK) {
    kio_ra_close(f2);
    kio_seq_close(f1);
    return KIO_ERR;
  }
  if (run(&s, f1, f2, &posts, num_done) != KIO_OK) {
    /* Kaldi prints nothing after its ERROR line */
    kio_log_handler h;
    void *u;
    kio_log_get_handler(&h, &u);
    kio_log_set_handler(quiet, NULL);
    gacc_posts_close(&posts);
    kio_ra_close(f2);
    kio_seq_close(f1);
    kio_log_set_handler(h, u);
    goto done;
  }
  /* A reader's failure at close (read error, failed pipe) is fatal; Kaldi
   * finds it in the destructors, after writing the statistics: here it
   * comes first, so that no statistics of failed inputs are written. */
  rc = KIO_OK;
  if (gacc_posts_close(&posts) != KIO_OK) rc = KIO_ERR;
  if (kio_ra_close(f2) != KIO_OK) rc = KIO_ERR;
  if (kio_seq_close(f1) != KIO_OK) rc = KIO_ERR;
  if (rc == KIO_OK && s.dim2 == 0) {
    /* nothing accumulated: Kaldi writes the transition counts and an empty
     * AccumAmDiagGmm */
    out->num_tids = tm->num_tids;
    out->tacc = calloc((size_t)tm->num_tids + 1, sizeof(double));
    if (!out->tacc) {
      KIO_ERROR("Out of memory");
      rc = KIO_ERR;
    }
  }
done:
  free(s.post);
  free(s.x2);
  free(s.xd);
  free(s.pair_pdf);
  free(s.pdf);
  free(s.pdf_w);
  return rc;
}
