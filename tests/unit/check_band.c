/* gpu-align margin mode: laying a prior alignment onto a graph (places in
 * the topological order of the strongly connected components, the forward
 * state sets, the band's bounds and the fallback statuses) and the decoder
 * staying inside the band. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "tests/lib/test-util.h"
#include "base/sys/log.h"
#include "gpu-align/align-margin.h"
#include "gpu-align/viterbi-core.h"

typedef struct { int32_t from, il, to, pdf; } tarc;

/* A prepared-looking graph (weights 0) from arcs grouped by source state. */
static void build(galign_graph *g, int32_t ns, const tarc *a, int32_t na, int32_t final_state) {
  memset(g, 0, sizeof *g);
  kio_fst *f = &g->fst;
  f->num_states = ns;
  f->num_arcs = na;
  f->start = 0;
  f->arc_start = calloc((size_t)ns + 1, sizeof *f->arc_start);
  f->arcs = calloc((size_t)na, sizeof *f->arcs);
  f->final = malloc((size_t)ns * sizeof *f->final);
  g->arc_pdf = malloc((size_t)na * sizeof *g->arc_pdf);
  int32_t k = 0;
  for (int32_t s = 0; s < ns; s++) {
    f->arc_start[s] = k;
    f->final[s] = s == final_state ? 0.0f : INFINITY;
    for (int32_t i = 0; i < na; i++)
      if (a[i].from == s) {
        kio_arc x = {a[i].il, a[i].il, 0.0f, a[i].to};
        f->arcs[k] = x;
        g->arc_pdf[k++] = a[i].il ? a[i].pdf : -1;
      }
  }
  f->arc_start[ns] = k;
  g->num_pdfs_used = 2;
}

/* 0 -1-> 1 (loop 1), 1 -2-> 2, 1 -eps-> 4; 2 -3-> 3, 3 -4-> 2 (a cycle,
 * like the silence HMM's), 3 -5-> 4 (loop 5); 4 final. */
static const tarc CYC[] = {
  {0, 1, 1, 0}, {1, 1, 1, 0}, {1, 2, 2, 0}, {1, 0, 4, 0}, {2, 3, 3, 0},
  {3, 4, 2, 0}, {3, 5, 4, 0}, {4, 5, 4, 0}};

START_TEST(test_band_places_and_bounds) {
  galign_graph g;
  build(&g, 5, CYC, 8, 4);
  const int32_t prior[8] = {1, 1, 2, 3, 4, 3, 5, 5};
  ck_assert_int_eq(galign_band_build(&g, prior, 8, 8, 0), GALIGN_BAND_OK);
  ck_assert_int_eq(g.band_T, 8);
  const int32_t *p = g.topo_pos;
  ck_assert_int_lt(p[0], p[1]);
  ck_assert_int_lt(p[1], p[2]);
  ck_assert_int_eq(p[2], p[3]);  /* one component */
  ck_assert_int_lt(p[3], p[4]);
  /* Forward sets: {0} {1,4} {1,4} {2} {3} {2} {3} {4} {4}. */
  const int32_t lo[9] = {p[0], p[1], p[1], p[2], p[3], p[2], p[3], p[4], p[4]};
  const int32_t hi[9] = {p[0], p[4], p[4], p[2], p[3], p[2], p[3], p[4], p[4]};
  for (int k = 0; k <= 8; k++) {
    ck_assert_int_eq(g.band_lo[k], lo[k]);
    ck_assert_int_eq(g.band_hi[k], hi[k]);
  }
  /* Margin 2: the window's minimum two frames back, maximum two ahead. */
  ck_assert_int_eq(galign_band_build(&g, prior, 8, 8, 2), GALIGN_BAND_OK);
  for (int k = 0; k <= 8; k++) {
    ck_assert_int_eq(g.band_lo[k], lo[k - 2 > 0 ? k - 2 : 0]);
    ck_assert_int_eq(g.band_hi[k], hi[k + 2 < 8 ? k + 2 : 8]);
  }
  galign_graph_free(&g);
}
END_TEST

START_TEST(test_band_fallbacks) {
  galign_graph g;
  build(&g, 5, CYC, 8, 4);
  const int32_t prior[8] = {1, 1, 2, 3, 4, 3, 5, 5};
  ck_assert_int_eq(galign_band_build(&g, NULL, 0, 8, 64), GALIGN_BAND_NO_PRIOR);
  ck_assert_int_eq(galign_band_build(&g, prior, 8, 9, 64), GALIGN_BAND_LENGTH);
  ck_assert_int_eq(g.band_T, 0);
  const int32_t bad[8] = {1, 1, 2, 3, 9, 3, 5, 5};
  ck_assert_int_eq(galign_band_build(&g, bad, 8, 8, 64), GALIGN_BAND_NOT_IN_GRAPH);
  ck_assert_int_eq(g.band_T, 0);
  const int32_t nofinal[4] = {1, 1, 2, 3};  /* ends in state 3, not final */
  ck_assert_int_eq(galign_band_build(&g, nofinal, 4, 4, 64), GALIGN_BAND_NOT_IN_GRAPH);
  const int32_t eps[2] = {1, 5};  /* through the epsilon arc 1 -> 4 */
  ck_assert_int_eq(galign_band_build(&g, eps, 2, 2, 0), GALIGN_BAND_OK);
  galign_graph_free(&g);
  /* A loop from the final state back to the start (careful alignment). */
  tarc loop[9];
  memcpy(loop, CYC, sizeof CYC);
  loop[8] = (tarc){4, 0, 0, 0};
  build(&g, 5, loop, 9, 4);
  ck_assert_int_eq(galign_band_build(&g, prior, 8, 8, 64), GALIGN_BAND_CYCLIC);
  ck_assert_int_eq(g.band_T, 0);
  galign_graph_free(&g);
}
END_TEST

/* Two branches: 0 -1-> 1 (loop 1, pdf 0), 0 -2-> 2 (loop 2, pdf 1); both final. */
static const tarc TWO[] = {{0, 1, 1, 0}, {0, 2, 2, 1}, {1, 1, 1, 0}, {2, 2, 2, 1}};

static int decode(const galign_graph *g, int banded, const float *ll, int32_t T, int32_t *ali) {
  galign_core_graph cg = {g->fst.num_states, g->fst.start, 2, g->fst.arc_start, g->fst.arcs,
                          g->fst.final, g->arc_pdf, banded ? g->topo_pos : NULL,
                          banded ? g->band_lo : NULL, banded ? g->band_hi : NULL};
  galign_core_ws w;
  memset(&w, 0, sizeof w);
  w.state_cap = 16;
  w.hash_cap = galign_core_hash_cap(16);
  w.tok_cap = 1024;
  w.stack_cap = 64;
  w.tok = malloc(1024 * sizeof *w.tok);
  w.pool[0] = calloc(16, sizeof(galign_elem));
  w.pool[1] = calloc(16, sizeof(galign_elem));
  w.state_elem = malloc(16 * sizeof(int32_t));
  w.used_bucket = malloc(16 * sizeof(int32_t));
  w.bucket_last = malloc((size_t)w.hash_cap * sizeof(int32_t));
  w.stack = malloc(64 * sizeof(int32_t));
  galign_core_ws_reset(&w);
  galign_core_out out;
  int retried = 0;
  int st = galign_core_align(&w, &cg, ll, T, 10.0f, 0.0f, 1.0f, ali, NULL, &out, &retried);
  free(w.tok); free(w.pool[0]); free(w.pool[1]); free(w.state_elem);
  free(w.used_bucket); free(w.bucket_last); free(w.stack);
  ck_assert_int_eq(st, GALIGN_CORE_OK);
  return out.ok;
}

START_TEST(test_band_decoder_stays_inside) {
  galign_graph g;
  build(&g, 3, TWO, 4, -1);
  g.fst.final[1] = g.fst.final[2] = 0.0f;
  /* pdf 1 is better on every frame: the full search takes branch 2. */
  const float ll[3 * 2] = {-5.0f, -1.0f, -5.0f, -1.0f, -5.0f, -1.0f};
  int32_t ali[3];
  ck_assert(decode(&g, 0, ll, 3, ali));
  ck_assert_int_eq(ali[0], 2);
  const int32_t prior[3] = {1, 1, 1};
  ck_assert_int_eq(galign_band_build(&g, prior, 3, 3, 0), GALIGN_BAND_OK);
  ck_assert(decode(&g, 1, ll, 3, ali));
  for (int t = 0; t < 3; t++) ck_assert_int_eq(ali[t], 1);
  galign_graph_free(&g);
}
END_TEST

START_TEST(test_prior_table) {
  galign_prior_table *t = NULL;
  ck_assert_int_eq(galign_prior_table_read(&t, "ark:kaldi/mono/ali.ark"), KIO_OK);
  ck_assert_int_eq(galign_prior_table_size(t), 40);
  const kio_int_vec *v = galign_prior_table_get(t, "en-029-f1-00014");
  ck_assert_ptr_nonnull(v);
  ck_assert_int_gt(v->n, 0);
  ck_assert_ptr_null(galign_prior_table_get(t, "no-such-key"));
  galign_prior_table_free(t);
  tu_logcap_start();
  ck_assert_int_eq(galign_prior_table_read(&t, "ark:no/such/file.ark"), KIO_ERR);
  ck_assert_ptr_null(t);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("band");
  TCase *tc = tcase_create("band");
  tcase_add_test(tc, test_band_places_and_bounds);
  tcase_add_test(tc, test_band_fallbacks);
  tcase_add_test(tc, test_band_decoder_stays_inside);
  tcase_add_test(tc, test_prior_table);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return tu_run_suite(suite()); }
