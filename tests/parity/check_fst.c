/* kio_fst: Kaldi's training-graph archives read through the OpenFst bridge,
 * checked against an independent parse of the raw OpenFst vector layout
 * (reference 8); writer round trips; text form; const FSTs; bad input. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/model/fst.h"
#include "base/sys/log.h"
#include "base/io/table.h"
#include "tests/lib/test-util.h"

/* ---- independent raw parser ---- */
typedef struct {
  char key[128];
  size_t off, len;       /* object bytes within the archive buffer */
  kio_fst g;
} raw_entry;

static unsigned char *gunzip_all(const char *path, size_t *n) {
  char cmd[512];
  snprintf(cmd, sizeof cmd, "gunzip -c %s", path);
  FILE *p = popen(cmd, "r");
  ck_assert_ptr_nonnull(p);
  size_t cap = 1 << 20, len = 0, got;
  unsigned char *b = malloc(cap);
  while ((got = fread(b + len, 1, cap - len, p)) > 0) {
    len += got;
    if (len == cap) b = realloc(b, cap *= 2);
  }
  ck_assert_int_eq(pclose(p), 0);
  *n = len;
  return b;
}

#define GET(T, p) ({ T v_; memcpy(&v_, (p), sizeof v_); (p) += sizeof v_; v_; })

static int parse_raw(const unsigned char *b, size_t n, raw_entry **out) {
  size_t cap = 64, ne = 0, i = 0;
  raw_entry *e = calloc(cap, sizeof *e);
  while (i < n) {
    if (ne == cap) e = realloc(e, (cap *= 2) * sizeof *e);
    raw_entry *r = &e[ne];
    memset(r, 0, sizeof *r);
    size_t k = 0;
    while (b[i] != ' ') r->key[k++] = (char)b[i++];
    i++;
    r->off = i;
    const unsigned char *p = b + i;
    ck_assert_int_eq(GET(int32_t, p), 2125659606);
    int32_t l = GET(int32_t, p);
    ck_assert(l == 6 && !memcmp(p, "vector", 6));
    p += l;
    l = GET(int32_t, p);
    ck_assert(l == 8 && !memcmp(p, "standard", 8));
    p += l;
    ck_assert_int_eq(GET(int32_t, p), 2);
    ck_assert_int_eq(GET(int32_t, p), 0);
    (void)GET(uint64_t, p);
    int64_t start = GET(int64_t, p), ns = GET(int64_t, p);
    (void)GET(int64_t, p);
    kio_fst *g = &r->g;
    g->start = (int32_t)start;
    g->num_states = (int32_t)ns;
    g->arc_start = malloc(sizeof(int32_t) * (ns + 1));
    g->final = malloc(sizeof(float) * (ns ? ns : 1));
    size_t acap = 1024;
    g->arcs = malloc(acap * sizeof(kio_arc));
    int32_t na = 0;
    for (int64_t s = 0; s < ns; s++) {
      g->arc_start[s] = na;
      g->final[s] = GET(float, p);
      int64_t narcs = GET(int64_t, p);
      for (int64_t a = 0; a < narcs; a++) {
        if ((size_t)na == acap) g->arcs = realloc(g->arcs, (acap *= 2) * sizeof(kio_arc));
        kio_arc *x = &g->arcs[na++];
        x->ilabel = GET(int32_t, p);
        x->olabel = GET(int32_t, p);
        x->weight = GET(float, p);
        x->nextstate = GET(int32_t, p);
      }
    }
    g->arc_start[ns] = na;
    g->num_arcs = na;
    r->len = (size_t)(p - (b + i));
    i += r->len;
    ne++;
  }
  *out = e;
  return (int)ne;
}

static void free_raw(raw_entry *e, int n) {
  for (int i = 0; i < n; i++) kio_fst_free(&e[i].g);
  free(e);
}

static void assert_same(const kio_fst *a, const kio_fst *b) {
  ck_assert_int_eq(a->num_states, b->num_states);
  ck_assert_int_eq(a->num_arcs, b->num_arcs);
  ck_assert_int_eq(a->start, b->start);
  ck_assert(!memcmp(a->arc_start, b->arc_start, sizeof(int32_t) * (a->num_states + 1)));
  ck_assert(!memcmp(a->final, b->final, sizeof(float) * a->num_states));
  ck_assert(!memcmp(a->arcs, b->arcs, sizeof(kio_arc) * a->num_arcs));
}

static const char *k_graphs[] = {"graphs/mono.fsts.gz", "graphs/tri1.fsts.gz",
                                 "graphs/tri2.fsts.gz", "edge/mono.fsts.gz"};

/* Reads the archive through popen, keys by hand, objects with kio_fst_read. */
START_TEST(test_archive) {
  size_t n;
  unsigned char *b = gunzip_all(k_graphs[_i], &n);
  raw_entry *raw;
  int nraw = parse_raw(b, n, &raw);
  ck_assert_int_eq(nraw, _i == 3 ? 4 : 40);
  char cmd[512];
  snprintf(cmd, sizeof cmd, "gunzip -c %s", k_graphs[_i]);
  FILE *p = popen(cmd, "r");
  kio_fst g = {0};
  int count = 0;
  long eps = 0, arcs = 0;
  for (;;) {
    char key[128];
    int c, k = 0;
    while ((c = getc(p)) != EOF && c != ' ') key[k++] = (char)c;
    if (c == EOF) { ck_assert_int_eq(k, 0); break; }
    key[k] = 0;
    ck_assert_int_lt(count, nraw);
    ck_assert_str_eq(key, raw[count].key);
    ck_assert_int_eq(kio_fst_read(p, &g), KIO_OK);
    assert_same(&g, &raw[count].g);
    for (int32_t a = 0; a < g.num_arcs; a++) eps += g.arcs[a].ilabel == 0;
    arcs += g.num_arcs;
    int nfinal = 0;
    for (int32_t s = 0; s < g.num_states; s++) nfinal += g.final[s] != INFINITY;
    ck_assert_int_ge(nfinal, 1);
    ck_assert_int_eq(g.start, 0);
    count++;
  }
  ck_assert_int_eq(pclose(p), 0);
  ck_assert_int_eq(count, nraw);
  if (_i == 1 || _i == 2) ck_assert_int_gt(eps, 0);
  printf("%s: %d graphs, %ld arcs, %ld epsilon\n", k_graphs[_i], count, arcs, eps);
  /* first mono graph: its key is the first utterance */
  if (_i == 0) ck_assert_str_eq(raw[0].key, "en-029-f1-00014");
  kio_fst_free(&g);
  free_raw(raw, nraw);
  free(b);
}
END_TEST

/* The same through the table reader (rspecifier with a pipe). */
START_TEST(test_table_reader) {
  size_t n;
  unsigned char *b = gunzip_all("graphs/tri1.fsts.gz", &n);
  raw_entry *raw;
  int nraw = parse_raw(b, n, &raw);
  kio_seq_reader *r = NULL;
  ck_assert_int_eq(kio_seq_open(&r, "ark:gunzip -c graphs/tri1.fsts.gz|", &kio_fst_holder), KIO_OK);
  int count = 0;
  for (; !kio_seq_done(r); kio_seq_next(r), count++) {
    ck_assert_str_eq(kio_seq_key(r), raw[count].key);
    const kio_fst *g = kio_seq_value(r);
    ck_assert_ptr_nonnull(g);
    assert_same(g, &raw[count].g);
  }
  ck_assert_int_eq(kio_seq_close(r), KIO_OK);
  ck_assert_int_eq(count, 40);
  free_raw(raw, nraw);
  free(b);
}
END_TEST

/* kio_fst_write reproduces OpenFst's bytes except the properties word. */
START_TEST(test_write_roundtrip) {
  size_t n;
  unsigned char *b = gunzip_all(k_graphs[_i], &n);
  raw_entry *raw;
  int nraw = parse_raw(b, n, &raw);
  kio_fst g = {0}, c = {0};
  for (int i = 0; i < nraw; i++) {
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    ck_assert_int_eq(kio_fst_write(m, &raw[i].g), KIO_OK);
    fclose(m);
    ck_assert_uint_eq(len, raw[i].len);
    const size_t props = 4 + 4 + 6 + 4 + 8 + 4 + 4;
    ck_assert(!memcmp(buf, b + raw[i].off, props));
    ck_assert(!memcmp(buf + props + 8, b + raw[i].off + props + 8, len - props - 8));
    m = fmemopen(buf, len, "r");
    ck_assert_int_eq(kio_fst_read(m, &g), KIO_OK);
    ck_assert_int_eq(getc(m), EOF);
    fclose(m);
    assert_same(&g, &raw[i].g);
    ck_assert_int_eq(kio_fst_copy(&c, &g), KIO_OK);
    assert_same(&c, &raw[i].g);
    free(buf);
  }
  kio_fst_free(&g);
  kio_fst_free(&c);
  free_raw(raw, nraw);
  free(b);
}
END_TEST

START_TEST(test_text_form) {
  size_t n;
  unsigned char *b = gunzip_all("graphs/tri2.fsts.gz", &n);
  raw_entry *raw;
  int nraw = parse_raw(b, n, &raw);
  kio_fst g = {0};
  for (int i = 0; i < nraw; i += 7) {
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    ck_assert_int_eq(kio_fst_holder.write(m, 0, &raw[i].g), KIO_OK);
    fputs("next-key", m);
    fclose(m);
    m = fmemopen(buf, len, "r");
    ck_assert_int_eq(kio_fst_holder.read(m, 0, &g), KIO_OK);
    char rest[16] = {0};
    ck_assert_ptr_nonnull(fgets(rest, sizeof rest, m));
    ck_assert_str_eq(rest, "next-key");
    fclose(m);
    free(buf);
    const kio_fst *r = &raw[i].g;
    ck_assert_int_eq(g.num_states, r->num_states);
    ck_assert_int_eq(g.num_arcs, r->num_arcs);
    ck_assert_int_eq(g.start, r->start);
    ck_assert(!memcmp(g.arc_start, r->arc_start, sizeof(int32_t) * (r->num_states + 1)));
    for (int32_t a = 0; a < r->num_arcs; a++) {
      ck_assert_int_eq(g.arcs[a].ilabel, r->arcs[a].ilabel);
      ck_assert_int_eq(g.arcs[a].olabel, r->arcs[a].olabel);
      ck_assert_int_eq(g.arcs[a].nextstate, r->arcs[a].nextstate);
      ck_assert(fabsf(g.arcs[a].weight - r->arcs[a].weight) <= 1e-5f * fabsf(r->arcs[a].weight));
    }
    for (int32_t s = 0; s < r->num_states; s++)
      ck_assert(g.final[s] == r->final[s] ||
                fabsf(g.final[s] - r->final[s]) <= 1e-5f * fabsf(r->final[s]));
  }
  /* hand-written: start state 2, states out of order, tabs, final weights */
  const char *txt = " \n2\t0\t5\t7\t0.5\n0 1 3 0\n2 1 4 4\n1\n0\t2.25\n\nREST";
  FILE *m = fmemopen((void *)txt, strlen(txt), "r");
  ck_assert_int_eq(kio_fst_read(m, &g), KIO_OK);
  char rest[8] = {0};
  ck_assert_ptr_nonnull(fgets(rest, sizeof rest, m));
  ck_assert_str_eq(rest, "REST");
  fclose(m);
  ck_assert_int_eq(g.num_states, 3);
  ck_assert_int_eq(g.start, 2);
  ck_assert_int_eq(g.num_arcs, 3);
  ck_assert_int_eq(g.arc_start[0], 0);
  ck_assert_int_eq(g.arc_start[1], 1);
  ck_assert_int_eq(g.arc_start[2], 1);
  ck_assert_int_eq(g.arc_start[3], 3);
  ck_assert_int_eq(g.arcs[0].ilabel, 3);
  ck_assert_int_eq(g.arcs[1].ilabel, 5);
  ck_assert(g.arcs[1].weight == 0.5f);
  ck_assert_int_eq(g.arcs[2].olabel, 4);
  ck_assert(g.final[0] == 2.25f && g.final[1] == 0.0f && g.final[2] == INFINITY);
  /* bad lines */
  const char *bad[] = {"\n0 1 2\n\n", "\n0 x 1 1\n\n", "\n0 1 1 1 Infinity\n\n",
                       "\n-1 0 1 1\n\n", "\n0 1 1 1 1 1\n\n", "  x\n0 1 1 1\n\n"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    m = fmemopen((void *)bad[i], strlen(bad[i]), "r");
    ck_assert_msg(kio_fst_read(m, &g) == KIO_ERR, "accepted %s", bad[i]);
    fclose(m);
  }
  kio_fst_free(&g);
  free_raw(raw, nraw);
  free(b);
}
END_TEST

static int read_mem(const unsigned char *buf, size_t len, kio_fst *g) {
  FILE *m = fmemopen((void *)buf, len ? len : 1, "r");
  if (len == 0) { getc(m); }
  int r = kio_fst_read(m, g);
  fclose(m);
  return r;
}

START_TEST(test_bad_binary) {
  size_t n;
  unsigned char *b = gunzip_all("graphs/mono.fsts.gz", &n);
  raw_entry *raw;
  int nraw = parse_raw(b, n, &raw);
  ck_assert_int_gt(nraw, 0);
  const unsigned char *obj = b + raw[0].off;
  size_t len = raw[0].len;
  kio_fst g = {0};
  ck_assert_int_eq(read_mem(obj, len, &g), KIO_OK);
  /* every truncation fails cleanly */
  for (size_t cut = 0; cut < len; cut += (cut < 100 ? 1 : 97))
    ck_assert_msg(read_mem(obj, cut, &g) == KIO_ERR, "truncated at %zu accepted", cut);
  ck_assert_uint_gt(len, 200);
  unsigned char *c = malloc(len + 64);
  /* bad magic */
  memcpy(c, obj, len); c[0] ^= 1;
  ck_assert_int_eq(read_mem(c, len, &g), KIO_ERR);
  /* arc type "log" */
  memcpy(c, obj, len); memcpy(c + 4 + 4 + 6 + 4, "log\0\0\0\0\0", 8);
  c[14] = 3;
  ck_assert_int_eq(read_mem(c, len, &g), KIO_ERR);
  /* huge state count */
  const size_t ns_off = 4 + 4 + 6 + 4 + 8 + 4 + 4 + 8 + 8;
  memcpy(c, obj, len); c[ns_off + 5] = 0x40;
  ck_assert_int_eq(read_mem(c, len, &g), KIO_ERR);
  /* arc to a state that does not exist: first arc's nextstate */
  const size_t arc0 = ns_off + 8 + 8 + 4 + 8;
  memcpy(c, obj, len); c[arc0 + 12 + 2] = 0x7f;
  ck_assert_int_eq(read_mem(c, len, &g), KIO_ERR);
  /* negative number of arcs in state 0 */
  memcpy(c, obj, len); memset(c + ns_off + 8 + 8 + 4, 0xff, 8);
  ck_assert_int_eq(read_mem(c, len, &g), KIO_ERR);
  /* start state out of range */
  memcpy(c, obj, len); c[ns_off - 8 + 3] = 0x10;
  ck_assert_int_eq(read_mem(c, len, &g), KIO_ERR);
  /* empty stream */
  ck_assert_int_eq(read_mem(obj, 0, &g), KIO_ERR);
  /* no state count in the header (-1): OpenFst's own VectorFst reader runs
   * to the end of the stream; same arrays */
  memcpy(c, obj, len); memset(c + ns_off, 0xff, 8);
  ck_assert_int_eq(read_mem(c, len, &g), KIO_OK);
  assert_same(&g, &raw[0].g);
  /* ... and still rejects an arc to a missing state */
  c[arc0 + 12 + 2] = 0x7f;
  ck_assert_int_eq(read_mem(c, len, &g), KIO_ERR);
  free(c);
  kio_fst_free(&g);
  free_raw(raw, nraw);
  free(b);
}
END_TEST

/* Builds OpenFst's ConstFst layout for g (aligned: version 1 + padding). */
static unsigned char *make_const(const kio_fst *g, int aligned, size_t lead, size_t *len) {
  char *buf = NULL;
  size_t n = 0;
  FILE *m = open_memstream(&buf, &n);
  for (size_t i = 0; i < lead; i++) fputc('x', m);
  int32_t i32;
  int64_t i64;
#define W(v) fwrite(&(v), sizeof(v), 1, m)
  i32 = 2125659606; W(i32);
  i32 = 5; W(i32); fwrite("const", 1, 5, m);
  i32 = 8; W(i32); fwrite("standard", 1, 8, m);
  i32 = aligned ? 1 : 2; W(i32);
  i32 = aligned ? 4 : 0; W(i32);
  i64 = 1; W(i64);
  i64 = g->start; W(i64);
  i64 = g->num_states; W(i64);
  i64 = g->num_arcs; W(i64);
  fflush(m);
  while (aligned && n % 16) { fputc(0, m); fflush(m); }
  for (int32_t s = 0; s < g->num_states; s++) {
    uint32_t u[4] = {(uint32_t)g->arc_start[s], (uint32_t)(g->arc_start[s + 1] - g->arc_start[s]), 0, 0};
    W(g->final[s]);
    fwrite(u, 4, 4, m);
  }
  fflush(m);
  while (aligned && n % 16) { fputc(0, m); fflush(m); }
  fwrite(g->arcs, sizeof(kio_arc), (size_t)g->num_arcs, m);
  fputs("KEY2 ", m);
#undef W
  fclose(m);
  *len = n;
  return (unsigned char *)buf;
}

START_TEST(test_const) {
  size_t n;
  unsigned char *b = gunzip_all("graphs/tri1.fsts.gz", &n);
  raw_entry *raw;
  int nraw = parse_raw(b, n, &raw);
  kio_fst g = {0};
  for (int aligned = 0; aligned < 2; aligned++) {
    for (int i = 0; i < nraw; i += 13) {
      size_t len, lead = 3 + (size_t)i;
      unsigned char *c = make_const(&raw[i].g, aligned, lead, &len);
      FILE *m = fmemopen(c, len, "r");
      fseek(m, (long)lead, SEEK_SET);
      ck_assert_int_eq(kio_fst_read(m, &g), KIO_OK);
      char rest[8] = {0};
      ck_assert_ptr_nonnull(fgets(rest, sizeof rest, m));
      ck_assert_str_eq(rest, "KEY2 ");
      fclose(m);
      assert_same(&g, &raw[i].g);
      /* corrupt a state's arc position: rejected, not dereferenced */
      size_t st0 = lead + 4 + 4 + 5 + 4 + 8 + 4 + 4 + 8 + 8 + 8 + 8;
      while (aligned && st0 % 16) st0++;
      c[st0 + 20 + 4 + 2] = 0x7f; /* state 1 pos */
      m = fmemopen(c, len, "r");
      fseek(m, (long)lead, SEEK_SET);
      ck_assert_int_eq(kio_fst_read(m, &g), KIO_ERR);
      fclose(m);
      free(c);
    }
  }
  kio_fst_free(&g);
  free_raw(raw, nraw);
  free(b);
}
END_TEST

int main(void) {
  Suite *s = suite_create("fst");
  TCase *tc = tcase_create("fst");
  tcase_set_timeout(tc, 120);
  tcase_add_loop_test(tc, test_archive, 0, 4);
  tcase_add_test(tc, test_table_reader);
  tcase_add_loop_test(tc, test_write_roundtrip, 0, 3);
  tcase_add_test(tc, test_text_form);
  tcase_add_test(tc, test_bad_binary);
  tcase_add_test(tc, test_const);
  suite_add_tcase(s, tc);
  return tu_run_suite(s);
}
