/* acc-tree-stats' accumulation (hmm/tree-accu.cc AccumulateTreeStats and
 * AccumulateTreeStatsInfo). Per utterance the alignment is split into
 * phones (SplitToPhones); for each phone the window of context_width
 * phones around it (0 outside the utterance; only the central one when it
 * is context-independent) plus (kPdfClass = -1, pdf-class) is the event of
 * each of its frames, whose statistics get count += 1, x, and x*x (the
 * product in float: VectorBase<double>::AddVec2 of a float vector with
 * alpha 1), in frame order: Kaldi's additions, so its bits. The events
 * are kept in a hash table (Kaldi: a std::map) and sorted once at the
 * end. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/io/io.h"
#include "base/sys/kaldi-msg.h"
#include "base/sys/log.h"
#include "tree/tree-stats.h"

struct tstat_acc {
  tstat_acc_opts o;
  double var_floor;
  int32_t *ci, nci;        /* sorted */
  int32_t *map, nmap;      /* phone map, empty: none */
  tstat_table t;           /* the statistics, in order of creation */
  tstat_index ix;
  int32_t *ends, *phones, cap;  /* per utterance */
  int32_t *ev;             /* one event: 1 + context_width pairs */
};

static int cmp_int(const void *x, const void *y) {
  int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
  return a < b ? -1 : a > b;
}

/* SplitStringToIntegers(s, ":", false): every field an integer, else
 * nothing. */
static int parse_ci(const char *s, int32_t **out, int32_t *n) {
  size_t len = strlen(s), cap = 1;
  for (size_t i = 0; i < len; i++) cap += s[i] == ':';
  int32_t *v = malloc(cap * sizeof *v);
  if (!v) return KIO_ERR;
  int32_t k = 0;
  const char *p = s;
  for (;;) {
    const char *e = strchr(p, ':');
    size_t fl = e ? (size_t)(e - p) : strlen(p);
    char buf[64];
    char *end = NULL;
    if (fl == 0 || fl >= sizeof buf) { k = 0; break; }
    memcpy(buf, p, fl);
    buf[fl] = 0;
    errno = 0;
    long long x = strtoll(buf, &end, 10);
    if (end == buf || *end != 0 || errno || x != (int32_t)x) { k = 0; break; }
    v[k++] = (int32_t)x;
    if (!e) break;
    p = e + 1;
  }
  *out = v;
  *n = k;
  return KIO_OK;
}

static void quiet(int level, const char *func, const char *file, int line, const char *msg,
                  void *user) {
  (void)level; (void)func; (void)file; (void)line; (void)msg; (void)user;
}

/* ReadPhoneMap (ReadIntegerVectorVectorSimple: lines of integers). */
static int read_phone_map(const char *rx, int32_t **map, int32_t *n) {
  kio_input *in = NULL;
  *map = NULL;
  *n = 0;
  kio_log_handler h;
  void *u;
  kio_log_get_handler(&h, &u);
  kio_log_set_handler(quiet, NULL);  /* Kaldi's one line says it */
  int opened = kio_input_open(&in, rx, NULL);
  kio_log_set_handler(h, u);
  if (opened != KIO_OK) {
    KIO_KALDI(TREE_PHONE_MAP_READ, rx);
    return KIO_ERR;
  }
  FILE *f = kio_input_stream(in);
  char *line = NULL;
  size_t lcap = 0;
  int32_t *m = NULL, nm = 0;
  long ln = 0;
  int rc = KIO_OK;
  while (rc == KIO_OK && getline(&line, &lcap, f) >= 0) {
    long long v[3];
    int nv = 0, bad = 0;
    for (char *p = line, *tok; (tok = strtok(p, " \t\r\n")) != NULL; p = NULL) {
      char *end;
      errno = 0;
      long long x = strtoll(tok, &end, 10);
      if (*end || errno || x != (int32_t)x) { bad = 1; break; }
      if (nv < 3) v[nv] = x;
      nv++;
    }
    if (bad) {  /* not a line of integers: the read fails */
      KIO_KALDI(TREE_PHONE_MAP_READ, rx);
      rc = KIO_ERR;
      break;
    }
    if (nv != 2 || v[0] <= 0 || v[1] <= 0 || (v[0] < nm && m[v[0]] != -1)) {
      KIO_KALDI(TREE_PHONE_MAP_LINE, rx, ln);
      rc = KIO_ERR;
      break;
    }
    if (v[0] >= nm) {
      int32_t *q = realloc(m, sizeof *q * (size_t)(v[0] + 1));
      if (!q) { KIO_ERROR("out of memory"); rc = KIO_ERR; break; }
      for (int32_t i = nm; i <= v[0]; i++) q[i] = -1;
      m = q;
      nm = (int32_t)v[0] + 1;
    }
    m[v[0]] = (int32_t)v[1];
    ln++;
  }
  free(line);
  if (kio_input_close(in) != KIO_OK && rc == KIO_OK) {
    KIO_KALDI(TREE_PHONE_MAP_READ, rx);
    rc = KIO_ERR;
  }
  if (rc == KIO_OK && nm == 0) {
    KIO_KALDI(TREE_PHONE_MAP_EMPTY, rx);
    rc = KIO_ERR;
  }
  if (rc != KIO_OK) {
    free(m);
    return KIO_ERR;
  }
  *map = m;
  *n = nm;
  return KIO_OK;
}

int tstat_acc_new(tstat_acc **out, const tstat_acc_opts *o) {
  *out = NULL;
  if (o->central_position < 0 || o->context_width <= o->central_position) {
    KIO_KALDI(TREE_INVALID_CONTEXT, (int)o->central_position, (int)o->context_width);
    return KIO_ERR;
  }
  tstat_acc *a = calloc(1, sizeof *a);
  if (!a) { KIO_ERROR("out of memory"); return KIO_ERR; }
  a->o = *o;
  a->var_floor = o->var_floor;
  a->ev = malloc(sizeof *a->ev * 2 * ((size_t)o->context_width + 1));
  if (!a->ev) {
    KIO_ERROR("out of memory");
    tstat_acc_free(a);
    return KIO_ERR;
  }
  if (o->phone_map[0] && read_phone_map(o->phone_map, &a->map, &a->nmap) != KIO_OK) {
    tstat_acc_free(a);
    return KIO_ERR;
  }
  if (o->ci_phones[0]) {
    if (parse_ci(o->ci_phones, &a->ci, &a->nci) != KIO_OK) {
      KIO_ERROR("out of memory");
      tstat_acc_free(a);
      return KIO_ERR;
    }
    qsort(a->ci, (size_t)a->nci, sizeof *a->ci, cmp_int);
    int bad = a->nci == 0 || a->ci[0] == 0;
    for (int32_t i = 1; i < a->nci; i++) bad |= a->ci[i] == a->ci[i - 1];
    if (bad) {
      KIO_KALDI(TREE_INVALID_CI, o->ci_phones);
      tstat_acc_free(a);
      return KIO_ERR;
    }
  }
  *out = a;
  return KIO_OK;
}

void tstat_acc_free(tstat_acc *a) {
  if (!a) return;
  free(a->ci);
  free(a->map);
  tstat_free(&a->t);
  tstat_index_free(&a->ix);
  free(a->ends);
  free(a->phones);
  free(a->ev);
  free(a);
}

/* GaussClusterable::AddStats(x, 1.0) */
static void add_frame(tstat_acc *a, long ei, const float *x) {
  tstat_entry *e = &a->t.v[ei];
  double *s0 = a->t.st + e->soff, *s1 = s0 + e->cols;
  e->count += 1.0;
  for (int32_t d = 0; d < e->cols; d++) {
    float sq = x[d] * x[d];
    s0[d] += (double)x[d];
    s1[d] += (double)sq;
  }
}

static int map_phone(const tstat_acc *a, int32_t p, int32_t *out) {
  if (p == 0 || a->nmap == 0) {
    *out = p;
    return KIO_OK;
  }
  if (p < 0 || p >= a->nmap) {
    KIO_KALDI(TREE_MAP_RANGE, (int)p);
    return KIO_ERR;
  }
  *out = a->map[p];
  return KIO_OK;
}

int tstat_acc_utt(tstat_acc *a, const kio_tmodel *tm, const char *key, const int32_t *ali,
                  int32_t n, const kio_matrix *x) {
  for (int32_t t = 0; t < n; t++)
    if (ali[t] < 1 || ali[t] > tm->num_tids) {  /* Kaldi asserts */
      KIO_ERROR("Transition-id %d out of range [1, %d] at frame %d of the alignment of "
                "utterance %s", (int)ali[t], (int)tm->num_tids, (int)t, key);
      return KIO_ERR;
    }
  if (n > a->cap) {
    int32_t *e = realloc(a->ends, sizeof *e * (size_t)n), *p;
    if (e) a->ends = e;
    p = e ? realloc(a->phones, sizeof *p * (size_t)n) : NULL;
    if (!p) { KIO_ERROR("out of memory"); return KIO_ERR; }
    a->phones = p;
    a->cap = n;
  }
  int ok;
  int32_t m = kio_split_to_phones(tm, ali, n, a->ends, &ok);
  if (!ok) {
    KIO_KALDI(TREE_BAD_ALI);
    return KIO_OK;
  }
  for (int32_t k = 0; k < m; k++)
    if (map_phone(a, kio_tid_to_phone(tm, ali[k ? a->ends[k - 1] : 0]), &a->phones[k]) != KIO_OK)
      return KIO_ERR;
  const int32_t N = a->o.context_width, P = a->o.central_position;
  int32_t *ev = a->ev;
  for (int32_t c = 0; c < m; c++) {  /* the window starting at c - P */
    int32_t central = a->phones[c];
    int ctx_dep = !a->nci || !bsearch(&central, a->ci, (size_t)a->nci, sizeof *a->ci, cmp_int);
    int32_t ne = 1;
    for (int32_t j = 0; j < N; j++) {
      if (!ctx_dep && j != P) continue;
      int32_t q = c - P + j;
      ev[2 * ne] = j;
      ev[2 * ne + 1] = q >= 0 && q < m ? a->phones[q] : 0;
      ne++;
    }
    ev[0] = -1;  /* kPdfClass, the smallest key: first once sorted */
    int32_t b = c ? a->ends[c - 1] : 0, last_class = -2;
    long ei = -1;
    for (int32_t t = b; t < a->ends[c]; t++) {
      int32_t pc = kio_tid_to_pdf_class(tm, ali[t]);
      if (pc != last_class) {
        ev[1] = pc;
        int created;
        ei = tstat_index_get(&a->ix, &a->t, ev, ne, 2, x->cols, 0, &created);
        if (ei < 0) { KIO_ERROR("out of memory"); return KIO_ERR; }
        if (created) a->t.v[ei].var_floor = a->var_floor;
        if (a->t.v[ei].cols != x->cols) {  /* Kaldi asserts */
          KIO_ERROR("Features of dimension %d for utterance %s, statistics of dimension %d",
                    (int)x->cols, key, (int)a->t.v[ei].cols);
          return KIO_ERR;
        }
        last_class = pc;
      }
      add_frame(a, ei, x->data + (size_t)t * (size_t)x->cols);
    }
  }
  return KIO_OK;
}

int tstat_acc_take(tstat_acc *a, tstat_table *out) {
  tstat_sort(&a->t);
  *out = a->t;
  memset(&a->t, 0, sizeof a->t);
  tstat_index_free(&a->ix);
  return KIO_OK;
}
