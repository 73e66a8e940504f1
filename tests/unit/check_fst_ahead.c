/* Archives of training graphs read ahead on threads (kio_seq_read_ahead
 * with kio_fst_body_bytes) against the same reader reading in order: the
 * same keys and graphs, the same log lines, the same end and close status,
 * for binary vector FSTs mixed with text ones, an archive cut at many
 * points and corrupt arc counts; and the size kio_fst_body_bytes finds for
 * each entry (the rest of a binary one, -1 for a text one). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/io/table.h"
#include "base/model/fst.h"
#include "base/sys/log.h"
#include "tests/lib/test-util.h"

typedef struct {
  tu_text out, lines;
  int opened, ahead, close_rc, ended_done;
} result;

static void put_fst(tu_text *t, const char *key, const kio_fst *g) {
  char b[128];
  snprintf(b, sizeof b, "%s %d %d %d:", key, g->num_states, g->num_arcs, g->start);
  tu_text_put(t, b);
  for (int s = 0; s < g->num_states; s++) {
    snprintf(b, sizeof b, " %a/%d", g->final[s], g->arc_start[s + 1]);
    tu_text_put(t, b);
  }
  for (int a = 0; a < g->num_arcs; a++) {
    const kio_arc *c = &g->arcs[a];
    snprintf(b, sizeof b, " %d,%d,%a,%d", c->ilabel, c->olabel, c->weight, c->nextstate);
    tu_text_put(t, b);
  }
  tu_text_put(t, "\n");
}

static void read_all(const char *spec, int threads, int window, result *res) {
  memset(res, 0, sizeof *res);
  tu_text_put(&res->out, "");
  tu_text_put(&res->lines, "");
  kio_log_set_handler(tu_log_into_text, &res->lines);
  kio_seq_reader *r;
  res->opened = kio_seq_open(&r, spec, &kio_fst_holder) == KIO_OK;
  if (!res->opened) {
    kio_log_set_handler(NULL, NULL);
    return;
  }
  if (threads > 0) res->ahead = kio_seq_read_ahead(r, kio_fst_body_bytes, threads, window);
  kio_fst g = {0};
  for (int n = 0; !kio_seq_done(r); kio_seq_next(r), n++) {
    const kio_fst *v = &g;
    if (n % 2) v = kio_seq_value(r);
    else ck_assert_int_eq(kio_seq_take(r, &g), KIO_OK);
    ck_assert_ptr_nonnull(v);
    put_fst(&res->out, kio_seq_key(r), v);
  }
  res->ended_done = kio_seq_done(r);
  res->close_rc = kio_seq_close(r);
  kio_fst_free(&g);
  kio_log_set_handler(NULL, NULL);
}

static void free_result(result *r) {
  free(r->out.s);
  free(r->lines.s);
}

static void same_both_ways(const char *spec) {
  result a;
  read_all(spec, 0, 0, &a);
  const int threads[] = {1, 2, 4, 3}, windows[] = {1, 3, 64, 7};
  for (int i = 0; i < 4; i++) {
    result b;
    read_all(spec, threads[i], windows[i], &b);
    ck_assert_int_eq(a.opened, b.opened);
    if (a.opened) ck_assert_int_eq(b.ahead, 1);
    ck_assert_str_eq(a.out.s, b.out.s);
    ck_assert_str_eq(a.lines.s, b.lines.s);
    ck_assert_int_eq(a.close_rc, b.close_rc);
    ck_assert_int_eq(a.ended_done, b.ended_done);
    free_result(&b);
  }
  free_result(&a);
}

enum { MAXN = 64 };

/* The fixture's tri2 graphs (40) as an archive, every seventh one in text
 * form; each entry's offset, the offset of its FST, and the end. */
static const char *make_graphs(int *n, long *offs, long *body) {
  kio_seq_reader *r;
  ck_assert_int_eq(kio_seq_open(&r, "ark:gunzip -c graphs/tri2.fsts.gz|", &kio_fst_holder),
                   KIO_OK);
  const char *p = tu_tmp_path("graphs.ark");
  FILE *f = fopen(p, "wb");
  ck_assert_ptr_nonnull(f);
  int i = 0;
  for (; !kio_seq_done(r) && i < MAXN; kio_seq_next(r), i++) {
    const kio_fst *g = kio_seq_value(r);
    ck_assert_ptr_nonnull(g);
    offs[i] = ftell(f);
    fprintf(f, "%s ", kio_seq_key(r));
    body[i] = ftell(f);
    ck_assert_int_eq(kio_fst_holder.write(f, i % 7 != 3, g), KIO_OK);
  }
  offs[i] = ftell(f);
  ck_assert_int_eq(kio_seq_close(r), KIO_OK);
  fclose(f);
  *n = i;
  return p;
}

START_TEST(body_sizes) {
  int n;
  long offs[MAXN + 1], body[MAXN];
  const char *p = make_graphs(&n, offs, body);
  ck_assert_int_ge(n, 20);
  FILE *f = fopen(p, "rb");
  int binary = 0;
  for (int i = 0; i < n; i++) {
    ck_assert_int_eq(fseek(f, body[i], SEEK_SET), 0);
    int64_t k = kio_fst_body_bytes(f, 1);
    if (i % 7 == 3) {
      ck_assert_int_eq(k, -1);  /* text: read whole in order */
      continue;
    }
    binary++;
    ck_assert_int_ge(k, 0);
    ck_assert_int_eq(ftell(f) + k, offs[i + 1]);
  }
  ck_assert_int_gt(binary, n / 2);
  fclose(f);
}
END_TEST

START_TEST(same_graphs) {
  int n;
  long offs[MAXN + 1], body[MAXN];
  char spec[1200];
  snprintf(spec, sizeof spec, "ark:%s", make_graphs(&n, offs, body));
  same_both_ways(spec);
}
END_TEST

START_TEST(cut_and_corrupt) {
  int n;
  long offs[MAXN + 1], body[MAXN];
  char p[1024], spec[1200];
  snprintf(p, sizeof p, "%s", make_graphs(&n, offs, body));
  for (int i = 1; i < n; i += 3) {
    /* cut in the key, the header, the first state, the middle, the last byte */
    const long cuts[] = {offs[i] + 2, body[i] + 10, body[i] + 60, (offs[i] + offs[i + 1]) / 2,
                         offs[i + 1] - 1};
    for (int c = 0; c < 5; c++) {
      snprintf(spec, sizeof spec, "ark:%s", tu_file_variant(p, cuts[c], -1, 0));
      same_both_ways(spec);
    }
  }
  /* the arc count of a state (past the header: 4-byte magic, "vector",
   * "standard", version, flags, properties, start, states, arcs) made huge,
   * negative or off by a little */
  const long hdr = 4 + 4 + 6 + 4 + 8 + 4 + 4 + 8 + 8 + 8 + 8;
  for (int i = 0; i < n; i += 5) {
    if (i % 7 == 3) continue;
    const long narcs_hi = body[i] + hdr + 4 + 7, narcs_lo = body[i] + hdr + 4;
    snprintf(spec, sizeof spec, "ark:%s", tu_file_variant(p, offs[n], narcs_hi, 0x7f));
    same_both_ways(spec);
    snprintf(spec, sizeof spec, "ark:%s", tu_file_variant(p, offs[n], narcs_hi, 0xff));
    same_both_ways(spec);
    snprintf(spec, sizeof spec, "ark:%s", tu_file_variant(p, offs[n], narcs_lo, 0x01));
    same_both_ways(spec);
  }
}
END_TEST

int main(void) {
  Suite *s = suite_create("fst_ahead");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, body_sizes);
  tcase_add_test(tc, same_graphs);
  tcase_add_test(tc, cut_and_corrupt);
  suite_add_tcase(s, tc);
  return tu_run_suite(s);
}
