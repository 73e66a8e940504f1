/* train-graphs: the compiler's C interface against Kaldi's own graphs of
 * the fixtures (graphs/M.fsts.gz from kaldi/text.int): bytes and CSR form,
 * one and several threads, and its failures (a word the lexicon lacks, a
 * disambiguation symbol that is a phone, a lexicon that is not an FST). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/model/fst.h"
#include "base/io/io.h"
#include "base/sys/log.h"
#include "base/model/model.h"
#include "base/io/table.h"
#include "train-graphs/train-graphs.h"
#include "tests/lib/test-util.h"

typedef struct {
  kio_tmodel tm;
  kio_ctx_dep tree;
  int32_t *dis, ndis;
} model;

static void load(model *m, const char *name) {
  char p[256];
  memset(m, 0, sizeof *m);
  snprintf(p, sizeof p, "models/%s/final.mdl", name);
  ck_assert_int_eq(kio_model_read(p, &m->tm, NULL), KIO_OK);
  snprintf(p, sizeof p, "models/%s/tree", name);
  ck_assert_int_eq(kio_ctx_dep_read(p, &m->tree), KIO_OK);
  FILE *f = fopen("models/disambig.int", "r");
  ck_assert_ptr_nonnull(f);
  int x;
  m->dis = malloc(64 * sizeof *m->dis);
  while (m->ndis < 64 && fscanf(f, "%d", &x) == 1) m->dis[m->ndis++] = x;
  fclose(f);
}
static void unload(model *m) {
  kio_tmodel_free(&m->tm);
  kio_ctx_dep_free(&m->tree);
  free(m->dis);
}

/* All transcripts of kaldi/text.int. */
static int read_text(kio_int_vec **w, char ***keys) {
  kio_seq_reader *r;
  ck_assert_int_eq(kio_seq_open(&r, "ark:kaldi/text.int", &kio_int_vec_holder), KIO_OK);
  int n = 0;
  *w = calloc(64, sizeof **w);
  *keys = calloc(64, sizeof **keys);
  for (; !kio_seq_done(r) && n < 64; kio_seq_next(r), n++) {
    (*keys)[n] = strdup(kio_seq_key(r));
    ck_assert_int_eq(kio_seq_take(r, &(*w)[n]), KIO_OK);
  }
  ck_assert_int_eq(kio_seq_close(r), KIO_OK);
  return n;
}

static void check_model(const char *name, int threads) {
  model m;
  load(&m, name);
  tgraph_opts o;
  tgraph_opts_default(&o);
  o.transition_scale = o.self_loop_scale = 0.0f;
  tgraph_compiler *c;
  ck_assert_int_eq(tgraph_create(&c, &m.tm, &m.tree, "models/L.fst", m.dis, m.ndis, &o), KIO_OK);
  kio_int_vec *w;
  char **keys;
  int n = read_text(&w, &keys);
  ck_assert_int_eq(n, 40);
  tgraph_graph *g = calloc((size_t)n, sizeof *g);
  ck_assert_int_eq(tgraph_compile(c, n, w, TGRAPH_BYTES | TGRAPH_CSR, threads, g), KIO_OK);

  /* Kaldi's archive, entry by entry: "key " + the FST's bytes. */
  char cmd[256];
  snprintf(cmd, sizeof cmd, "ark:gunzip -c graphs/%s.fsts.gz|", name);
  kio_seq_reader *r;
  ck_assert_int_eq(kio_seq_open(&r, cmd, &kio_fst_holder), KIO_OK);
  const char *raw = tu_tmp_path("kaldi.ark");
  snprintf(cmd, sizeof cmd, "gunzip -c graphs/%s.fsts.gz > %s", name, raw);
  ck_assert_int_eq(tu_run(cmd, NULL), 0);
  size_t len;
  unsigned char *ark = tu_read_file(raw, &len);
  ck_assert_ptr_nonnull(ark);
  size_t pos = 0;
  for (int i = 0; i < n; i++, kio_seq_next(r)) {
    ck_assert(!kio_seq_done(r));
    ck_assert_str_eq(kio_seq_key(r), keys[i]);
    size_t kl = strlen(keys[i]);
    ck_assert(pos + kl + 1 + g[i].len <= len);
    ck_assert(memcmp(ark + pos, keys[i], kl) == 0 && ark[pos + kl] == ' ');
    ck_assert_msg(memcmp(ark + pos + kl + 1, g[i].bytes, g[i].len) == 0,
                  "%s: utterance %s differs from Kaldi's graph", name, keys[i]);
    pos += kl + 1 + g[i].len;
    const kio_fst *k = kio_seq_value(r);
    ck_assert_ptr_nonnull(k);
    ck_assert_int_eq(k->num_states, g[i].fst.num_states);
    ck_assert_int_eq(k->num_arcs, g[i].fst.num_arcs);
    ck_assert_int_eq(k->start, g[i].fst.start);
    ck_assert(memcmp(k->arc_start, g[i].fst.arc_start,
                     (size_t)(k->num_states + 1) * sizeof(int32_t)) == 0);
    ck_assert(memcmp(k->arcs, g[i].fst.arcs, (size_t)k->num_arcs * sizeof(kio_arc)) == 0);
    ck_assert(!g[i].empty);
    tgraph_graph_free(&g[i]);
  }
  ck_assert_uint_eq(pos, len);
  ck_assert(kio_seq_done(r));
  ck_assert_int_eq(kio_seq_close(r), KIO_OK);
  free(ark);
  for (int i = 0; i < n; i++) {
    free(w[i].v);
    free(keys[i]);
  }
  free(w);
  free(keys);
  free(g);
  tgraph_free(c);
  unload(&m);
}

START_TEST(mono_one_thread) { check_model("mono", 1); }
END_TEST
START_TEST(tri1_threads) { check_model("tri1", 3); }
END_TEST
START_TEST(tri2_threads) { check_model("tri2", 0); }
END_TEST

START_TEST(oov_word_fails) {
  model m;
  load(&m, "tri1");
  tgraph_opts o;
  tgraph_opts_default(&o);
  tgraph_compiler *c;
  ck_assert_int_eq(tgraph_create(&c, &m.tm, &m.tree, "models/L.fst", m.dis, m.ndis, &o), KIO_OK);
  int32_t good[2] = {4132, 2184}, bad[2] = {1, 99999};
  kio_int_vec w[3] = {{2, good}, {2, bad}, {0, NULL}};
  tgraph_graph g[3];
  memset(g, 0, sizeof g);
  tu_logcap_start();
  ck_assert_int_eq(tgraph_compile(c, 3, w, TGRAPH_BYTES, 2, g), KIO_ERR);
  ck_assert_str_eq(tu_cap.last, "Assertion failed: (phone2word_fst.Start() != kNoStateId)");
  for (int i = 0; i < 3; i++) tgraph_graph_free(&g[i]);
  /* The empty transcript alone compiles (a graph of optional silence). */
  ck_assert_int_eq(tgraph_compile(c, 1, &w[2], TGRAPH_CSR, 1, g), KIO_OK);
  ck_assert(!g[0].empty);
  ck_assert_int_gt(g[0].fst.num_states, 1);
  tgraph_graph_free(&g[0]);
  kio_log_set_handler(NULL, NULL);
  tgraph_free(c);
  unload(&m);
}
END_TEST

START_TEST(bad_inputs) {
  model m;
  load(&m, "tri1");
  tgraph_opts o;
  tgraph_opts_default(&o);
  tgraph_compiler *c = NULL;
  tu_logcap_start();
  int32_t phone = 5;
  ck_assert_int_eq(tgraph_create(&c, &m.tm, &m.tree, "models/L.fst", &phone, 1, &o), KIO_ERR);
  ck_assert_str_eq(tu_cap.last_error, "Disambiguation symbol 5 is also a phone.");
  ck_assert_int_eq(tgraph_create(&c, &m.tm, &m.tree, "models/topo", m.dis, m.ndis, &o), KIO_ERR);
  ck_assert_int_eq(tgraph_create(&c, &m.tm, &m.tree, "/nonexistent", m.dis, m.ndis, &o), KIO_ERR);
  o.rm_eps = 1;
  ck_assert_int_eq(tgraph_create(&c, &m.tm, &m.tree, "models/L.fst", m.dis, m.ndis, &o), KIO_ERR);
  ck_assert_ptr_null(c);
  kio_log_set_handler(NULL, NULL);
  unload(&m);
}
END_TEST

int main(void) {
  Suite *s = suite_create("tgraph");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, mono_one_thread);
  tcase_add_test(tc, tri1_threads);
  tcase_add_test(tc, tri2_threads);
  tcase_add_test(tc, oov_word_fails);
  tcase_add_test(tc, bad_inputs);
  suite_add_tcase(s, tc);
  return tu_run_suite(s);
}
