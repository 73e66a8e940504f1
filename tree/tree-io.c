/* The treeacc format: ReadBuildTreeStats / WriteBuildTreeStats
 * (tree/build-tree-utils.cc) of GaussClusterable (tree/clusterable-classes.cc):
 *   "BTS" uint32 count, then per entry: "EV" uint32 n, n x (int32 key,
 *   int32 value) (text: a newline after them), bool present, and if
 *   present "GCL" double count, double var_floor, a double matrix;
 *   text files end with a newline. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/io/io.h"
#include "base/sys/log.h"
#include "tree/tree-stats.h"

void tstat_free(tstat_table *t) {
  free(t->v);
  free(t->ev);
  free(t->st);
  memset(t, 0, sizeof *t);
}

int tstat_event_cmp(const int32_t *a, int32_t na, const int32_t *b, int32_t nb) {
  int32_t n = na < nb ? na : nb;
  for (int32_t i = 0; i < 2 * n; i++)
    if (a[i] != b[i]) return a[i] < b[i] ? -1 : 1;
  return na < nb ? -1 : na > nb;
}

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return KIO_OK;
  size_t c = *cap ? *cap : 1024;
  while (c < need) c *= 2;
  void *q = realloc(*p, c * elem);
  if (!q) {
    kio_set_error("out of memory");
    return KIO_ERR;
  }
  *p = q;
  *cap = c;
  return KIO_OK;
}

void tstat_index_free(tstat_index *ix) {
  free(ix->slot);
  ix->slot = NULL;
  ix->nslot = 0;
}

static uint64_t hash_ev(const int32_t *ev, int32_t n) {
  uint64_t h = 1469598103934665603ull;
  for (int32_t i = 0; i < 2 * n; i++) {
    h ^= (uint32_t)ev[i];
    h *= 1099511628211ull;
  }
  return h ^ (h >> 29);
}

static int rehash(tstat_index *ix, const tstat_table *t, size_t nslot) {
  uint32_t *s = calloc(nslot, sizeof *s);
  if (!s) return KIO_ERR;
  for (size_t i = 0; i < t->n; i++) {
    const tstat_entry *e = &t->v[i];
    size_t k = hash_ev(t->ev + e->off, e->nev) & (nslot - 1);
    while (s[k]) k = (k + 1) & (nslot - 1);
    s[k] = (uint32_t)(i + 1);
  }
  free(ix->slot);
  ix->slot = s;
  ix->nslot = nslot;
  return KIO_OK;
}

long tstat_index_get(tstat_index *ix, tstat_table *t, const int32_t *ev, int32_t nev,
                     int32_t rows, int32_t cols, int is_null, int *created) {
  *created = 0;
  if (2 * (t->n + 1) > ix->nslot && rehash(ix, t, ix->nslot ? 2 * ix->nslot : 4096) != KIO_OK)
    return -1;
  size_t k = hash_ev(ev, nev) & (ix->nslot - 1);
  for (; ix->slot[k]; k = (k + 1) & (ix->nslot - 1)) {
    const tstat_entry *e = &t->v[ix->slot[k] - 1];
    if (e->nev == nev && memcmp(t->ev + e->off, ev, 2 * (size_t)nev * sizeof *ev) == 0)
      return (long)ix->slot[k] - 1;
  }
  if (t->n >= UINT32_MAX - 1) return -1;
  size_t m = is_null ? 0 : (size_t)rows * (size_t)cols;
  if (grow((void **)&t->v, &t->cap, t->n + 1, sizeof *t->v) ||
      grow((void **)&t->ev, &t->ev_cap, t->ev_n + 2 * (size_t)nev, sizeof *t->ev) ||
      grow((void **)&t->st, &t->st_cap, t->st_n + m, sizeof *t->st))
    return -1;
  t->v[t->n] = (tstat_entry){.nev = nev, .is_null = is_null, .rows = is_null ? 0 : rows,
                             .cols = is_null ? 0 : cols, .off = t->ev_n, .soff = t->st_n};
  memcpy(t->ev + t->ev_n, ev, 2 * (size_t)nev * sizeof *ev);
  t->ev_n += 2 * (size_t)nev;
  if (m) memset(t->st + t->st_n, 0, m * sizeof *t->st);
  t->st_n += m;
  ix->slot[k] = (uint32_t)(++t->n);
  *created = 1;
  return (long)t->n - 1;
}

static const tstat_table *sort_t;
static int by_event(const void *x, const void *y) {
  const tstat_entry *a = x, *b = y;
  return tstat_event_cmp(sort_t->ev + a->off, a->nev, sort_t->ev + b->off, b->nev);
}

void tstat_sort(tstat_table *t) {
  static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
  for (size_t i = 1; i < t->n; i++) {  /* often made in order already */
    if (tstat_event_cmp(t->ev + t->v[i - 1].off, t->v[i - 1].nev, t->ev + t->v[i].off,
                        t->v[i].nev) <= 0)
      continue;
    pthread_mutex_lock(&lock);  /* qsort has no context argument */
    sort_t = t;
    qsort(t->v, t->n, sizeof *t->v, by_event);
    pthread_mutex_unlock(&lock);
    return;
  }
}

/* ExpectToken without kio_expect_token's stream position (a system call
 * per token). */
static int expect(FILE *f, int binary, const char *token) {
  char buf[64];
  if (kio_read_token(f, binary, buf, sizeof buf)) return KIO_ERR;
  if (strcmp(buf, token) != 0) {
    kio_set_error("Expected token \"%s\", got instead \"%s\".", token, buf);
    return KIO_ERR;
  }
  return KIO_OK;
}

/* The binary layout's fixed parts read whole: "EV " and the count. */
static int bin_bytes(FILE *f, void *dst, size_t n, const char *what) {
  if (fread_unlocked(dst, 1, n, f) == n) return KIO_OK;
  kio_set_error("unexpected end of file reading %s", what);
  return KIO_ERR;
}

static int read_event(FILE *f, int binary, uint32_t *nev, int32_t **ev, tstat_table *t) {
  if (binary) {
    unsigned char h[8];
    if (bin_bytes(f, h, 8, "an event")) return KIO_ERR;
    if (memcmp(h, "EV \xFC", 4) != 0) {
      kio_set_error("Expected token \"EV\" and a uint32 count");
      return KIO_ERR;
    }
    memcpy(nev, h + 4, 4);
  } else if (expect(f, binary, "EV") || kio_read_uint32(f, binary, nev)) {
    return KIO_ERR;
  }
  if (*nev > (1u << 20)) {
    kio_set_error("implausible event size %u", (unsigned)*nev);
    return KIO_ERR;
  }
  if (grow((void **)&t->ev, &t->ev_cap, t->ev_n + 2 * (size_t)*nev, sizeof *t->ev))
    return KIO_ERR;
  *ev = t->ev + t->ev_n;
  if (binary) {
    unsigned char b[10 * 64];
    for (uint32_t i = 0; i < *nev; i += 64) {
      uint32_t k = *nev - i < 64 ? *nev - i : 64;
      if (bin_bytes(f, b, 10 * (size_t)k, "an event")) return KIO_ERR;
      for (uint32_t j = 0; j < 2 * k; j++) {
        if (b[5 * j] != 4) {
          kio_set_error("ReadBasicType: did not get expected integer type, %d vs. 4",
                        (int)(signed char)b[5 * j]);
          return KIO_ERR;
        }
        memcpy(&(*ev)[2 * i + j], b + 5 * j + 1, 4);
      }
    }
    return KIO_OK;
  }
  for (uint32_t i = 0; i < 2 * *nev; i++)
    if (kio_read_int32(f, binary, &(*ev)[i])) return KIO_ERR;
  return KIO_OK;
}

/* A binary "DM" of rows x cols straight into the table; else the generic
 * reader (FM, text) through tmp. */
static int read_stats(FILE *f, int binary, tstat_table *t, tstat_entry *e, kio_dmatrix *tmp) {
  if (binary && kio_peek(f, 1) == 'D') {
    unsigned char h[13];
    int32_t r, c;
    if (bin_bytes(f, h, 13, "a matrix")) return KIO_ERR;
    memcpy(&r, h + 4, 4);
    memcpy(&c, h + 9, 4);
    if (memcmp(h, "DM ", 3) != 0 || h[3] != 4 || h[8] != 4 || r < 0 || c < 0 ||
        (r == 0) != (c == 0)) {
      kio_set_error("bad double matrix header");
      return KIO_ERR;
    }
    size_t m = (size_t)r * (size_t)c;
    if (grow((void **)&t->st, &t->st_cap, t->st_n + m, sizeof *t->st)) return KIO_ERR;
    if (m && fread_unlocked(t->st + t->st_n, sizeof(double), m, f) != m) {
      kio_set_error("unexpected end of file reading a matrix");
      return KIO_ERR;
    }
    e->rows = r;
    e->cols = c;
  } else {
    if (kio_dmatrix_read(f, binary, tmp)) return KIO_ERR;
    size_t m = (size_t)tmp->rows * (size_t)tmp->cols;
    if (grow((void **)&t->st, &t->st_cap, t->st_n + m, sizeof *t->st)) return KIO_ERR;
    if (m) memcpy(t->st + t->st_n, tmp->data, m * sizeof(double));
    e->rows = tmp->rows;
    e->cols = tmp->cols;
  }
  e->soff = t->st_n;
  t->st_n += (size_t)e->rows * (size_t)e->cols;
  return KIO_OK;
}

static int read_entry(FILE *f, int binary, tstat_table *t, kio_dmatrix *tmp) {
  uint32_t nev;
  int32_t *ev;
  if (grow((void **)&t->v, &t->cap, t->n + 1, sizeof *t->v) ||
      read_event(f, binary, &nev, &ev, t))
    return KIO_ERR;
  tstat_entry *e = &t->v[t->n];
  memset(e, 0, sizeof *e);
  e->nev = (int32_t)nev;
  e->off = t->ev_n;
  int present;
  if (kio_read_bool(f, binary, &present)) return KIO_ERR;
  e->is_null = !present;
  if (present && (expect(f, binary, "GCL") || kio_read_double(f, binary, &e->count) ||
                  kio_read_double(f, binary, &e->var_floor) ||
                  read_stats(f, binary, t, e, tmp)))
    return KIO_ERR;
  t->ev_n += 2 * (size_t)nev;
  t->n++;
  return KIO_OK;
}

int tstat_read(const char *rx, tstat_table *t) {
  kio_input *in = NULL;
  int binary = 0;
  memset(t, 0, sizeof *t);
  if (kio_input_open(&in, rx, &binary) != KIO_OK) return KIO_ERR;
  FILE *f = kio_input_stream(in);
  struct stat sb;
  if (binary && fstat(fileno(f), &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size > 0) {
    /* sized once from the file (growing by doubling copied each file twice) */
    size_t z = (size_t)sb.st_size;
    if (grow((void **)&t->st, &t->st_cap, z / sizeof(double), sizeof *t->st) ||
        grow((void **)&t->v, &t->cap, z / 64 + 1, sizeof *t->v) ||
        grow((void **)&t->ev, &t->ev_cap, z / 16 + 1, sizeof *t->ev)) {
      KIO_ERROR("out of memory reading %s", rx);
      kio_input_close(in);
      tstat_free(t);
      return KIO_ERR;
    }
  }
  kio_dmatrix tmp = {0};
  uint32_t n = 0;
  int rc = expect(f, binary, "BTS") || kio_read_uint32(f, binary, &n) ? KIO_ERR : KIO_OK;
  for (uint32_t i = 0; i < n && rc == KIO_OK; i++) rc = read_entry(f, binary, t, &tmp);
  kio_dmatrix_free(&tmp);
  if (rc != KIO_OK) {
    KIO_ERROR("Error reading tree statistics from %s: %s", rx, kio_last_error());
    kio_input_close(in);
    tstat_free(t);
    return KIO_ERR;
  }
  if (kio_input_close(in) != KIO_OK) {
    KIO_ERROR("Error reading tree statistics from %s", rx);
    tstat_free(t);
    return KIO_ERR;
  }
  return KIO_OK;
}

int tstat_write(const char *wx, int binary, const tstat_table *t) {
  kio_output *out = NULL;
  if (kio_output_open(&out, wx, binary, 1) != KIO_OK) return KIO_ERR;
  FILE *f = kio_output_stream(out);
  kio_write_token(f, binary, "BTS");
  kio_write_uint32(f, binary, (uint32_t)t->n);
  for (size_t i = 0; i < t->n; i++) {
    const tstat_entry *e = &t->v[i];
    kio_write_token(f, binary, "EV");
    kio_write_uint32(f, binary, (uint32_t)e->nev);
    for (int32_t k = 0; k < 2 * e->nev; k++) kio_write_int32(f, binary, t->ev[e->off + k]);
    if (!binary) putc_unlocked('\n', f);
    kio_write_bool(f, binary, !e->is_null);
    if (e->is_null) continue;
    kio_write_token(f, binary, "GCL");
    kio_write_double(f, binary, e->count);
    kio_write_double(f, binary, e->var_floor);
    kio_dmatrix m = {e->rows, e->cols, t->st + e->soff, 0};
    kio_dmatrix_write(f, binary, &m);
  }
  if (!binary) putc_unlocked('\n', f);
  if (ferror(f)) {
    KIO_ERROR("WriteBuildTreeStats: write failed.");
    kio_output_discard(out);
    return KIO_ERR;
  }
  return kio_output_close(out);
}
