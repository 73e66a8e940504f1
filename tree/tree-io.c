/* The treeacc format: ReadBuildTreeStats / WriteBuildTreeStats
 * (tree/build-tree-utils.cc) of GaussClusterable (tree/clusterable-classes.cc):
 *   "BTS" uint32 count, then per entry: "EV" uint32 n, n x (int32 key,
 *   int32 value) (text: a newline after them), bool present, and if
 *   present "GCL" double count, double var_floor, a double matrix;
 *   text files end with a newline. */
#include <stdlib.h>
#include <string.h>

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

static int read_entry(FILE *f, int binary, tstat_table *t, kio_dmatrix *tmp) {
  uint32_t nev;
  if (expect(f, binary, "EV") || kio_read_uint32(f, binary, &nev)) return KIO_ERR;
  if (nev > (1u << 20)) {
    kio_set_error("implausible event size %u", (unsigned)nev);
    return KIO_ERR;
  }
  if (grow((void **)&t->v, &t->cap, t->n + 1, sizeof *t->v) ||
      grow((void **)&t->ev, &t->ev_cap, t->ev_n + 2 * (size_t)nev, sizeof *t->ev))
    return KIO_ERR;
  tstat_entry *e = &t->v[t->n];
  memset(e, 0, sizeof *e);
  e->nev = (int32_t)nev;
  e->off = t->ev_n;
  for (uint32_t i = 0; i < 2 * nev; i++)
    if (kio_read_int32(f, binary, &t->ev[t->ev_n + i])) return KIO_ERR;
  int present;
  if (kio_read_bool(f, binary, &present)) return KIO_ERR;
  e->is_null = !present;
  if (present) {
    if (expect(f, binary, "GCL") || kio_read_double(f, binary, &e->count) ||
        kio_read_double(f, binary, &e->var_floor) || kio_dmatrix_read(f, binary, tmp))
      return KIO_ERR;
    size_t m = (size_t)tmp->rows * (size_t)tmp->cols;
    if (grow((void **)&t->st, &t->st_cap, t->st_n + m, sizeof *t->st)) return KIO_ERR;
    e->rows = tmp->rows;
    e->cols = tmp->cols;
    e->soff = t->st_n;
    if (m) memcpy(t->st + t->st_n, tmp->data, m * sizeof(double));
    t->st_n += m;
  }
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
