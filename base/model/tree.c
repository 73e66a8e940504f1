/* ContextDependency (tree) reading and pdf computation (reference 3.3,
 * Kaldi tree/context-dep.cc, tree/event-map.cc). */
#include <stdlib.h>
#include <string.h>

#include "base/io/io.h"
#include "base/sys/log.h"
#include "model.h"

/* Deeper than any real tree; keeps corrupt input from exhausting the stack. */
#define EM_MAX_DEPTH 10000
#define EM_MAX_TABLE (1u << 24)

static void em_free(kio_event_map *m) {
  if (!m) return;
  if (m->kind == KIO_EM_TABLE) {
    for (uint32_t i = 0; i < m->table_size; i++) em_free(m->table[i]);
    free(m->table);
  } else if (m->kind == KIO_EM_SPLIT) {
    em_free(m->yes);
    em_free(m->no);
    free(m->set);
  }
  free(m);
}

void kio_ctx_dep_free(kio_ctx_dep *cd) {
  if (!cd) return;
  em_free(cd->to_pdf);
  memset(cd, 0, sizeof *cd);
}

static int cmp_i32(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x > y) - (x < y);
}

/* EventMap::Read: dispatch on the next char. *out = NULL for "NULL". */
static int em_read(FILE *f, int binary, int depth, kio_event_map **out) {
  *out = NULL;
  if (depth > EM_MAX_DEPTH) {
    kio_set_error("EventMap nested too deeply");
    return KIO_ERR;
  }
  int c = kio_peek(f, binary);
  if (c == 'N') return kio_expect_token(f, binary, "NULL");
  if (c != 'C' && c != 'T' && c != 'S') {
    kio_set_error("EventMap::read, was not expecting character %s",
                  c < 0 ? "EOF" : (char[]){(char)c, 0});
    return KIO_ERR;
  }
  kio_event_map *m = calloc(1, sizeof *m);
  if (!m) { kio_set_error("out of memory"); return KIO_ERR; }
  if (c == 'C') {
    m->kind = KIO_EM_CONST;
    if (kio_expect_token(f, binary, "CE") != KIO_OK ||
        kio_read_int32(f, binary, &m->answer) != KIO_OK)
      goto fail;
  } else if (c == 'T') {
    m->kind = KIO_EM_TABLE;
    uint32_t size;
    if (kio_expect_token(f, binary, "TE") != KIO_OK ||
        kio_read_int32(f, binary, &m->key) != KIO_OK ||
        kio_read_uint32(f, binary, &size) != KIO_OK)
      goto fail;
    if (size > EM_MAX_TABLE) {
      kio_set_error("EventMap table too large (%u)", size);
      goto fail;
    }
    /* Grown while reading (fuzzing: nested tables of corrupt sizes must not
     * allocate 128 MB each before a child fails). */
    uint32_t cap = size < 1024 ? (size ? size : 1) : 1024;
    m->table = calloc(cap, sizeof *m->table);
    if (!m->table) { kio_set_error("out of memory"); goto fail; }
    if (kio_expect_token(f, binary, "(") != KIO_OK) goto fail;
    for (uint32_t i = 0; i < size; i++) {
      if (i == cap) {
        uint32_t nc = size - cap < cap ? size : 2 * cap;
        kio_event_map **nt = realloc(m->table, nc * sizeof *nt);
        if (!nt) { kio_set_error("out of memory"); goto fail; }
        memset(nt + cap, 0, (nc - cap) * sizeof *nt);
        m->table = nt;
        cap = nc;
      }
      m->table_size = i + 1;
      if (em_read(f, binary, depth + 1, &m->table[i]) != KIO_OK) goto fail;
    }
    if (kio_expect_token(f, binary, ")") != KIO_OK) goto fail;
  } else {
    m->kind = KIO_EM_SPLIT;
    if (kio_expect_token(f, binary, "SE") != KIO_OK ||
        kio_read_int32(f, binary, &m->key) != KIO_OK ||
        kio_read_int_vector(f, binary, &m->set, &m->set_size) != KIO_OK)
      goto fail;
    /* ConstIntegerSet keeps a sorted, unique copy */
    if (m->set_size > 1) {
      qsort(m->set, (size_t)m->set_size, sizeof(int32_t), cmp_i32);
      int32_t n = 1;
      for (int32_t i = 1; i < m->set_size; i++)
        if (m->set[i] != m->set[n - 1]) m->set[n++] = m->set[i];
      m->set_size = n;
    }
    if (kio_expect_token(f, binary, "{") != KIO_OK ||
        em_read(f, binary, depth + 1, &m->yes) != KIO_OK ||
        em_read(f, binary, depth + 1, &m->no) != KIO_OK ||
        kio_expect_token(f, binary, "}") != KIO_OK)
      goto fail;
  }
  *out = m;
  return KIO_OK;
fail:
  em_free(m);
  return KIO_ERR;
}

static int ctx_dep_read_stream(FILE *f, int binary, kio_ctx_dep *cd) {
  char tok[64];
  if (kio_expect_token(f, binary, "ContextDependency") != KIO_OK ||
      kio_read_int32(f, binary, &cd->context_width) != KIO_OK ||
      kio_read_int32(f, binary, &cd->central_position) != KIO_OK ||
      kio_read_token(f, binary, tok, sizeof tok) != KIO_OK)
    return KIO_ERR;
  if (cd->context_width < 1 || cd->context_width > 64 || cd->central_position < 0 ||
      cd->central_position >= cd->context_width) {
    kio_set_error("ContextDependency: bad context width %d / central position %d",
                  (int)cd->context_width, (int)cd->central_position);
    return KIO_ERR;
  }
  if (!strcmp(tok, "ToLength")) { /* old format: read and discard */
    kio_event_map *tl = NULL;
    int r = em_read(f, binary, 0, &tl);
    em_free(tl);
    if (r != KIO_OK || kio_read_token(f, binary, tok, sizeof tok) != KIO_OK) return KIO_ERR;
  }
  if (strcmp(tok, "ToPdf") != 0) {
    kio_set_error("Got unexpected token %s reading context-dependency object.", tok);
    return KIO_ERR;
  }
  if (em_read(f, binary, 0, &cd->to_pdf) != KIO_OK) return KIO_ERR;
  return kio_expect_token(f, binary, "EndContextDependency");
}

int kio_ctx_dep_read(const char *rxfilename, kio_ctx_dep *cd) {
  kio_input *in = NULL;
  int binary = 0;
  kio_ctx_dep_free(cd);
  kio_clear_error();
  if (kio_input_open(&in, rxfilename, &binary) != KIO_OK) return KIO_ERR;
  if (ctx_dep_read_stream(kio_input_stream(in), binary, cd) != KIO_OK) {
    KIO_ERROR("Failed to read tree from %s: %s", rxfilename, kio_last_error());
    kio_ctx_dep_free(cd);
    kio_input_close(in);
    return KIO_ERR;
  }
  kio_input_close(in); /* a failed pipe only warns, as in ReadKaldiObject */
  return KIO_OK;
}

/* Event: (-1 -> pdf_class), (k -> phones[k]) for k < n. */
static int ev_lookup(int32_t key, const int32_t *phones, int32_t n, int32_t pdf_class,
                     int32_t *val) {
  if (key == -1) { *val = pdf_class; return 1; }
  if (key >= 0 && key < n) { *val = phones[key]; return 1; }
  return 0;
}

static int set_contains(const int32_t *set, int32_t n, int32_t v) {
  int32_t lo = 0, hi = n;
  while (lo < hi) {
    int32_t mid = lo + (hi - lo) / 2;
    if (set[mid] < v) lo = mid + 1;
    else hi = mid;
  }
  return lo < n && set[lo] == v;
}

int kio_ctx_dep_compute(const kio_ctx_dep *cd, const int32_t *phones,
                        int32_t pdf_class, int32_t *pdf) {
  const kio_event_map *m = cd->to_pdf;
  int32_t n = cd->context_width, v;
  for (int32_t i = 0; i < n; i++)
    if (phones[i] < 0) return 0;
  while (m) {
    switch (m->kind) {
      case KIO_EM_CONST:
        *pdf = m->answer;
        return 1;
      case KIO_EM_TABLE:
        if (!ev_lookup(m->key, phones, n, pdf_class, &v) || v < 0 ||
            (uint32_t)v >= m->table_size)
          return 0;
        m = m->table[v];
        break;
      case KIO_EM_SPLIT:
        if (!ev_lookup(m->key, phones, n, pdf_class, &v)) return 0;
        m = set_contains(m->set, m->set_size, v) ? m->yes : m->no;
        break;
      default:
        return 0;
    }
  }
  return 0;
}
