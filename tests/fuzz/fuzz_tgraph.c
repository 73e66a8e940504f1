/* libFuzzer harness: the training-graph compiler (train-graphs/) on a
 * lexicon FST and a transcript taken from the input. Layout: the input
 * minus its trailer is the lexicon (any form kio_fst_read reads; if it does
 * not read, the fixtures' L.fst is used); the trailer is the last byte n
 * (mod 17) preceded by n 16-bit word ids. The model (mono or tri1 fixture)
 * is picked by the first byte. Determinization is capped (max_states), so
 * a non-determinizable lexicon fails instead of running forever. A graph
 * that compiles is checked for CSR consistency. Run from the repository
 * root (tests/fuzz/run.sh does). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz-common.h"
#include "base/model/model.h"
#include "base/io/table.h"
#include "train-graphs/train-graphs.h"

static kio_tmodel g_tm[2];
static kio_ctx_dep g_tree[2];
static int32_t g_dis[64], g_ndis;
static char g_lex[64];

static void load(void) {
  static int done;
  if (done) return;
  done = 1;
  const char *m[2] = {"mono", "tri1"};
  for (int i = 0; i < 2; i++) {
    char p[128];
    snprintf(p, sizeof p, "tests/data/models/%s/final.mdl", m[i]);
    if (kio_model_read(p, &g_tm[i], NULL) != KIO_OK) abort();
    snprintf(p, sizeof p, "tests/data/models/%s/tree", m[i]);
    if (kio_ctx_dep_read(p, &g_tree[i]) != KIO_OK) abort();
  }
  FILE *f = fopen("tests/data/models/disambig.int", "r");
  if (!f) abort();
  int x;
  while (g_ndis < 64 && fscanf(f, "%d", &x) == 1) g_dis[g_ndis++] = x;
  fclose(f);
  snprintf(g_lex, sizeof g_lex, "/tmp/fuzz_tgraph.%d.fst", (int)getpid());
}

static void check(const kio_fst *g) {
  FUZZ_CHECK(g->num_states > 0 && g->start >= 0 && g->start < g->num_states);
  FUZZ_CHECK(g->arc_start[0] == 0 && g->arc_start[g->num_states] == g->num_arcs);
  for (int32_t k = 0; k < g->num_arcs; k++)
    FUZZ_CHECK(g->arcs[k].nextstate >= 0 && g->arcs[k].nextstate < g->num_states);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_init();
  load();
  if (size < 2) return 0;
  int n = data[size - 1] % 17;
  if ((size_t)(2 * n + 2) > size) return 0;
  int32_t words[16];
  for (int i = 0; i < n; i++) {
    const uint8_t *p = data + size - 1 - 2 * (n - i);
    words[i] = (int32_t)(p[0] | p[1] << 8) % 5000;  /* mostly real word ids */
  }
  size_t lex_len = size - 1 - 2 * (size_t)n;
  int which = data[0] & 1;
  FILE *f = fopen(g_lex, "wb");
  FUZZ_CHECK(f);
  FUZZ_CHECK(fwrite(data, 1, lex_len, f) == lex_len);
  fclose(f);
  tgraph_opts o;
  tgraph_opts_default(&o);
  o.transition_scale = o.self_loop_scale = (data[0] & 2) ? 0.0f : 1.0f;
  o.reorder = !(data[0] & 4);
  o.max_states = 2000;
  /* Compilers of the fixtures' lexicon, kept (one per model and options). */
  static tgraph_compiler *real[2][8];
  tgraph_compiler *c = NULL, *own = NULL;
  if (tgraph_create(&own, &g_tm[which], &g_tree[which], g_lex, g_dis, g_ndis, &o) == KIO_OK) {
    c = own;
  } else {
    tgraph_compiler **r = &real[which][(data[0] >> 1) & 7];
    if (!*r && tgraph_create(r, &g_tm[which], &g_tree[which], "tests/data/models/L.fst", g_dis,
                             g_ndis, &o) != KIO_OK)
      abort();  /* the fixtures' lexicon always reads */
    c = *r;
  }
  kio_int_vec w = {n, words};
  tgraph_graph g;
  memset(&g, 0, sizeof g);
  if (tgraph_compile_one(c, &w, TGRAPH_BYTES | TGRAPH_CSR, &g) == KIO_OK && !g.empty) {
    check(&g.fst);
    FUZZ_CHECK(g.len > 0);
  }
  tgraph_graph_free(&g);
  tgraph_free(own);
  unlink(g_lex);
  return 0;
}
