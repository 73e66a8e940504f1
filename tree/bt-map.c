/* build-tree's inputs and EventMaps: Questions::Read
 * (build-tree-questions.cc), ReadRootsFile (build-tree.cc), GetStubMap
 * (build-tree-utils.cc), EventMap Map/Copy/MultiMap/Write (event-map.cc)
 * and ContextDependency::Write (context-dep.cc). */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "base/io/io.h"
#include "base/sys/kaldi-msg.h"
#include "base/sys/log.h"
#include "tree/build-tree.h"

/* ---- questions ---- */
static void key_free(bt_key_questions *k) {
  for (int32_t j = 0; j < k->nq; j++) free(k->q[j]);
  free(k->q);
  free(k->nqv);
  memset(k, 0, sizeof *k);
}

void bt_questions_free(bt_questions *q) {
  for (int32_t i = 0; i < q->nkeys; i++) key_free(&q->k[i]);
  free(q->k);
  memset(q, 0, sizeof *q);
}

static int cmp_i32(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x > y) - (x < y);
}

static int read_key_questions(FILE *f, int binary, bt_key_questions *k) {
  int32_t n;
  if (kio_expect_token(f, binary, "<QuestionsForKey>") != KIO_OK ||
      kio_read_int32(f, binary, &n) != KIO_OK)
    return KIO_ERR;
  if (n < 0 || n > (1 << 24)) {
    kio_set_error("bad number of questions %d", (int)n);
    return KIO_ERR;
  }
  k->q = calloc((size_t)n + 1, sizeof *k->q);
  k->nqv = calloc((size_t)n + 1, sizeof *k->nqv);
  if (!k->q || !k->nqv) {
    kio_set_error("out of memory");
    return KIO_ERR;
  }
  for (int32_t i = 0; i < n; i++) {
    if (kio_read_int_vector(f, binary, &k->q[i], &k->nqv[i]) != KIO_OK) return KIO_ERR;
    k->nq = i + 1;
  }
  if (kio_expect_token(f, binary, "<RefineClustersOptions>") != KIO_OK ||
      kio_read_int32(f, binary, &k->refine_iters) != KIO_OK ||
      kio_read_int32(f, binary, &k->refine_top_n) != KIO_OK ||
      kio_expect_token(f, binary, "</RefineClustersOptions>") != KIO_OK ||
      kio_expect_token(f, binary, "</QuestionsForKey>") != KIO_OK)
    return KIO_ERR;
  return KIO_OK;
}

static int questions_read_stream(FILE *f, int binary, bt_questions *q) {
  char tok[64];
  if (kio_expect_token(f, binary, "<Questions>") != KIO_OK) return KIO_ERR;
  for (;;) {
    if (kio_read_token(f, binary, tok, sizeof tok) != KIO_OK) return KIO_ERR;
    if (!strcmp(tok, "</Questions>")) return KIO_OK;
    if (strcmp(tok, "<Key>") != 0) {
      kio_set_error("Questions::Read, expecting <Key>, got %s", tok);
      return KIO_ERR;
    }
    int32_t key;
    if (kio_read_int32(f, binary, &key) != KIO_OK) return KIO_ERR;
    bt_key_questions k = {.key = key};
    int r = read_key_questions(f, binary, &k);
    /* SetQuestionsOf: a key given again replaces the earlier */
    int32_t at = q->nkeys;
    for (int32_t i = 0; i < q->nkeys; i++)
      if (q->k[i].key == key) at = i;
    if (at == q->nkeys) {
      bt_key_questions *nk = realloc(q->k, sizeof *nk * (size_t)(q->nkeys + 1));
      if (!nk) {
        key_free(&k);
        kio_set_error("out of memory");
        return KIO_ERR;
      }
      q->k = nk;
      q->nkeys++;
    } else {
      key_free(&q->k[at]);
    }
    q->k[at] = k;
    if (r != KIO_OK) return KIO_ERR;
    /* ConstIntegerSet and the splitter want sorted values */
    for (int32_t i = 0; i < k.nq; i++)
      qsort(k.q[i], (size_t)k.nqv[i], sizeof(int32_t), cmp_i32);
  }
}

static int cmp_key(const void *a, const void *b) {
  return cmp_i32(&((const bt_key_questions *)a)->key, &((const bt_key_questions *)b)->key);
}

int bt_questions_read(const char *rx, bt_questions *q) {
  memset(q, 0, sizeof *q);
  kio_input *in = NULL;
  int binary = 0;
  kio_clear_error();
  if (kio_input_open(&in, rx, &binary) != KIO_OK) return KIO_ERR;
  int r = questions_read_stream(kio_input_stream(in), binary, q);
  kio_input_close(in);
  if (r != KIO_OK) {
    KIO_ERROR("Error reading questions file %s, error is: %s", rx, kio_last_error());
    bt_questions_free(q);
    return KIO_ERR;
  }
  qsort(q->k, (size_t)q->nkeys, sizeof *q->k, cmp_key);
  return KIO_OK;
}

/* ---- roots ---- */
void bt_roots_free(bt_roots *r) {
  for (int32_t i = 0; i < r->nsets; i++) free(r->set[i]);
  free(r->set);
  free(r->nset);
  free(r->shared);
  free(r->split);
  memset(r, 0, sizeof *r);
}

/* istream >> std::string: the next whitespace-separated word. */
static const char *next_word(const char **p, size_t *len) {
  const char *s = *p;
  while (*s && isspace((unsigned char)*s)) s++;
  const char *w = s;
  while (*s && !isspace((unsigned char)*s)) s++;
  *len = (size_t)(s - w);
  *p = s;
  return *len ? w : NULL;
}

static int roots_push(bt_roots *r, int32_t *cap) {
  if (r->nsets < *cap) return KIO_OK;
  int32_t c = *cap ? 2 * *cap : 64;
  int32_t **s = realloc(r->set, sizeof *s * (size_t)c);
  if (s) r->set = s;
  int32_t *n = realloc(r->nset, sizeof *n * (size_t)c);
  if (n) r->nset = n;
  uint8_t *a = realloc(r->shared, (size_t)c);
  if (a) r->shared = a;
  uint8_t *b = realloc(r->split, (size_t)c);
  if (b) r->split = b;
  if (!s || !n || !a || !b) return KIO_ERR;
  *cap = c;
  return KIO_OK;
}

int bt_roots_read(const char *rx, bt_roots *r) {
  memset(r, 0, sizeof *r);
  kio_input *in = NULL;
  int binary = 0;
  if (kio_input_open(&in, rx, &binary) != KIO_OK) return KIO_ERR;
  FILE *f = kio_input_stream(in);
  char *line = NULL;
  size_t lcap = 0;
  ssize_t ll;
  long lineno = 0;
  int32_t cap = 0;
  int rc = KIO_OK;
  while ((ll = getline(&line, &lcap, f)) >= 0) {
    lineno++;
    if (ll > 0 && line[ll - 1] == '\n') line[--ll] = 0;
    const char *p = line;
    size_t n1, n2;
    const char *w1 = next_word(&p, &n1);
    const char *w2 = w1 ? next_word(&p, &n2) : NULL;
    if (!w1) {
      KIO_KALDI(BT_ROOTS_LINE1, lineno, line);
      rc = KIO_ERR;
      break;
    }
    /* Kaldi compares the first word here: "split" alone passes */
    if (!w2 && !((n1 == 5 && !strncmp(w1, "split", 5)) || (n1 == 9 && !strncmp(w1, "not-split", 9)))) {
      KIO_KALDI(BT_ROOTS_LINE2, lineno, line);
      rc = KIO_ERR;
      break;
    }
    if (!w2) n2 = 0;
    if (roots_push(r, &cap) != KIO_OK) {
      KIO_ERROR("out of memory reading %s", rx);
      rc = KIO_ERR;
      break;
    }
    int32_t i = r->nsets;
    r->shared[i] = n1 == 6 && !strncmp(w1, "shared", 6);
    r->split[i] = n2 == 5 && !strncmp(w2, "split", 5);
    r->set[i] = malloc(sizeof(int32_t) * ((size_t)ll / 2 + 1));
    r->nset[i] = 0;
    r->nsets++;
    if (!r->set[i]) {
      rc = KIO_ERR;
      break;
    }
    /* istream >> int32: stops at the first word that is not one */
    for (;;) {
      while (*p && isspace((unsigned char)*p)) p++;
      char *end;
      errno = 0;
      long v = strtol(p, &end, 10);
      if (end == p || errno || v < INT32_MIN || v > INT32_MAX) break;
      r->set[i][r->nset[i]++] = (int32_t)v;
      p = end;
    }
    qsort(r->set[i], (size_t)r->nset[i], sizeof(int32_t), cmp_i32);
    int bad = r->nset[i] == 0 || r->set[i][0] <= 0;
    for (int32_t j = 1; j < r->nset[i]; j++)
      if (r->set[i][j] == r->set[i][j - 1]) bad = 1;
    if (bad) {
      KIO_KALDI(BT_ROOTS_PHONES, lineno, line);
      rc = KIO_ERR;
      break;
    }
  }
  free(line);
  kio_input_close(in);
  if (rc == KIO_OK && r->nsets == 0) {
    KIO_KALDI(BT_ROOTS_EMPTY);
    rc = KIO_ERR;
  }
  if (rc != KIO_OK) bt_roots_free(r);
  return rc;
}

/* ---- event maps ---- */
kio_event_map *bt_em_const(int32_t answer) {
  kio_event_map *m = calloc(1, sizeof *m);
  if (m) {
    m->kind = KIO_EM_CONST;
    m->answer = answer;
  }
  return m;
}

void bt_em_free(kio_event_map *m) {
  if (!m) return;
  if (m->kind == KIO_EM_TABLE) {
    for (uint32_t i = 0; i < m->table_size; i++) bt_em_free(m->table[i]);
    free(m->table);
  } else if (m->kind == KIO_EM_SPLIT) {
    bt_em_free(m->yes);
    bt_em_free(m->no);
    free(m->set);
  }
  free(m);
}

static int ev_lookup(const int32_t *ev, int32_t nev, int32_t key, int32_t *val) {
  for (int32_t i = 0; i < nev; i++)
    if (ev[2 * i] == key) {
      *val = ev[2 * i + 1];
      return 1;
    }
  return 0;
}

static int in_set(const int32_t *s, int32_t n, int32_t v) {
  int32_t lo = 0, hi = n;
  while (lo < hi) {
    int32_t mid = lo + (hi - lo) / 2;
    if (s[mid] < v) lo = mid + 1;
    else hi = mid;
  }
  return lo < n && s[lo] == v;
}

int bt_em_map(const kio_event_map *m, const int32_t *ev, int32_t nev, int32_t *ans) {
  int32_t v;
  while (m) {
    if (m->kind == KIO_EM_CONST) {
      *ans = m->answer;
      return 1;
    }
    if (!ev_lookup(ev, nev, m->key, &v)) return 0;
    if (m->kind == KIO_EM_TABLE) {
      if (v < 0 || (uint32_t)v >= m->table_size) return 0;
      m = m->table[v];
    } else {
      m = in_set(m->set, m->set_size, v) ? m->yes : m->no;
    }
  }
  return 0;
}

kio_event_map *bt_em_copy(const kio_event_map *m, const int32_t *map, int32_t n) {
  if (!m) return NULL;
  if (m->kind == KIO_EM_CONST)
    return bt_em_const(m->answer >= 0 && m->answer < n && map[m->answer] >= 0 ? map[m->answer]
                                                                               : m->answer);
  kio_event_map *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->kind = m->kind;
  c->key = m->key;
  if (m->kind == KIO_EM_TABLE) {
    c->table = calloc(m->table_size ? m->table_size : 1, sizeof *c->table);
    if (!c->table) goto fail;
    c->table_size = m->table_size;
    for (uint32_t i = 0; i < m->table_size; i++)
      if (m->table[i] && !(c->table[i] = bt_em_copy(m->table[i], map, n))) goto fail;
  } else {
    c->set = malloc(sizeof(int32_t) * (size_t)(m->set_size ? m->set_size : 1));
    if (!c->set) goto fail;
    memcpy(c->set, m->set, sizeof(int32_t) * (size_t)m->set_size);
    c->set_size = m->set_size;
    if (!(c->yes = bt_em_copy(m->yes, map, n)) || !(c->no = bt_em_copy(m->no, map, n)))
      goto fail;
  }
  return c;
fail:
  bt_em_free(c);
  return NULL;
}

void bt_em_leaves(const kio_event_map *m, int32_t *out, int32_t *n) {
  if (!m) return;
  if (m->kind == KIO_EM_CONST) out[(*n)++] = m->answer;
  else if (m->kind == KIO_EM_TABLE)
    for (uint32_t i = 0; i < m->table_size; i++) bt_em_leaves(m->table[i], out, n);
  else {
    bt_em_leaves(m->yes, out, n);
    bt_em_leaves(m->no, out, n);
  }
}

int32_t bt_em_count_leaves(const kio_event_map *m) {
  if (!m) return 0;
  if (m->kind == KIO_EM_CONST) return 1;
  if (m->kind == KIO_EM_SPLIT) return bt_em_count_leaves(m->yes) + bt_em_count_leaves(m->no);
  int32_t s = 0;
  for (uint32_t i = 0; i < m->table_size; i++) s += bt_em_count_leaves(m->table[i]);
  return s;
}

static void em_write(FILE *f, int binary, const kio_event_map *m) {
  if (!m) {
    kio_write_token(f, binary, "NULL");
    return;
  }
  if (m->kind == KIO_EM_CONST) {
    kio_write_token(f, binary, "CE");
    kio_write_int32(f, binary, m->answer);
  } else if (m->kind == KIO_EM_TABLE) {
    kio_write_token(f, binary, "TE");
    kio_write_int32(f, binary, m->key);
    kio_write_uint32(f, binary, m->table_size);
    kio_write_token(f, binary, "(");
    for (uint32_t i = 0; i < m->table_size; i++) em_write(f, binary, m->table[i]);
    kio_write_token(f, binary, ")");
  } else {
    kio_write_token(f, binary, "SE");
    kio_write_int32(f, binary, m->key);
    kio_write_int_vector(f, binary, m->set, m->set_size);
    kio_write_token(f, binary, "{");
    em_write(f, binary, m->yes);
    em_write(f, binary, m->no);
    kio_write_token(f, binary, "}");
  }
  if (!binary && m->kind != KIO_EM_CONST) putc('\n', f);
}

int bt_ctx_dep_write(const char *wx, int binary, int32_t N, int32_t P, const kio_event_map *m) {
  kio_output *out = NULL;
  if (kio_output_open(&out, wx, binary, 1) != KIO_OK) return KIO_ERR;
  FILE *f = kio_output_stream(out);
  kio_write_token(f, binary, "ContextDependency");
  kio_write_int32(f, binary, N);
  kio_write_int32(f, binary, P);
  kio_write_token(f, binary, "ToPdf");
  em_write(f, binary, m);
  kio_write_token(f, binary, "EndContextDependency");
  return kio_output_close(out);
}

/* TableEventMap of key over children at values vals[0..n) (sorted). */
static kio_event_map *em_table(int32_t key, const int32_t *vals, kio_event_map **kids, int32_t n) {
  kio_event_map *m = calloc(1, sizeof *m);
  if (!m) return NULL;
  m->kind = KIO_EM_TABLE;
  m->key = key;
  m->table_size = n ? (uint32_t)vals[n - 1] + 1 : 0;
  m->table = calloc(m->table_size ? m->table_size : 1, sizeof *m->table);
  if (!m->table) {
    free(m);
    return NULL;
  }
  for (int32_t i = 0; i < n; i++) m->table[vals[i]] = kids[i];
  return m;
}

kio_event_map *bt_stub_map(int32_t P, const bt_roots *r, int32_t lo, int32_t hi,
                           const int32_t *phone2npdf, int32_t np, int32_t *num_leaves) {
  int32_t n = hi - lo, max_set = 0, top = 0;
  for (int32_t i = lo; i < hi; i++) {
    if (r->nset[i] > max_set) max_set = r->nset[i];
    if (r->set[i][r->nset[i] - 1] > top) top = r->set[i][r->nset[i] - 1];
  }
  if (n == 1) {
    if (r->shared[lo]) return bt_em_const((*num_leaves)++);
    int32_t max_len = 0;
    for (int32_t j = 0; j < r->nset[lo]; j++) {
      int32_t ph = r->set[lo][j];
      int32_t len = ph < np ? phone2npdf[ph] : -1;
      if (len <= 0) {
        KIO_ERROR("Phone %d of a not-shared root has no pdf-classes in the topology", (int)ph);
        return NULL;
      }
      if (j > 0 && len != max_len)
        KIO_WARN("Mismatching lengths within a phone set: %d vs. %d [unusual, but not "
                 "necessarily fatal]. ", (int)len, (int)max_len);
      if (len > max_len) max_len = len;
    }
    int32_t vals[256];
    kio_event_map *kids[256];
    if (max_len > 256) {
      KIO_ERROR("Too many pdf-classes (%d)", (int)max_len);
      return NULL;
    }
    for (int32_t p = 0; p < max_len; p++) {
      vals[p] = p;
      kids[p] = bt_em_const((*num_leaves)++);
    }
    return em_table(-1, vals, kids, max_len);
  }
  if (max_set == 1 && n <= 2 * top) {
    int32_t *vals = calloc((size_t)n, sizeof(int32_t));
    kio_event_map **kids = calloc((size_t)n, sizeof *kids);
    kio_event_map *m = NULL;
    if (vals && kids) {
      int ok = 1;
      for (int32_t i = 0; i < n && ok; i++) {
        vals[i] = r->set[lo + i][0];
        ok = (kids[i] = bt_stub_map(P, r, lo + i, lo + i + 1, phone2npdf, np, num_leaves)) != 0;
      }
      /* std::map order: by phone */
      for (int32_t i = 1; i < n && ok; i++)
        for (int32_t j = i; j > 0 && vals[j - 1] > vals[j]; j--) {
          int32_t t = vals[j];
          vals[j] = vals[j - 1];
          vals[j - 1] = t;
          kio_event_map *k = kids[j];
          kids[j] = kids[j - 1];
          kids[j - 1] = k;
        }
      if (ok) m = em_table(P, vals, kids, n);
      if (!m)
        for (int32_t i = 0; i < n; i++) bt_em_free(kids[i]);
    }
    free(vals);
    free(kids);
    return m;
  }
  int32_t half = lo + n / 2;
  kio_event_map *a = bt_stub_map(P, r, lo, half, phone2npdf, np, num_leaves);
  kio_event_map *b = a ? bt_stub_map(P, r, half, hi, phone2npdf, np, num_leaves) : NULL;
  kio_event_map *m = b ? calloc(1, sizeof *m) : NULL;
  int32_t cnt = 0;
  for (int32_t i = lo; i < half; i++) cnt += r->nset[i];
  if (m) m->set = malloc(sizeof(int32_t) * (size_t)cnt);
  if (!m || !m->set) {
    free(m);
    bt_em_free(a);
    bt_em_free(b);
    return NULL;
  }
  m->kind = KIO_EM_SPLIT;
  m->key = P;
  for (int32_t i = lo; i < half; i++)
    for (int32_t j = 0; j < r->nset[i]; j++) m->set[m->set_size++] = r->set[i][j];
  qsort(m->set, (size_t)m->set_size, sizeof(int32_t), cmp_i32);
  m->yes = a;
  m->no = b;
  return m;
}
