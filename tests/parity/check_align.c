/* gpu-align: graph preparation, GMM likelihoods, the FasterDecoder core (hand
 * made graphs), and the CPU aligner against Kaldi's gmm-align-compiled
 * outputs (tests/data/kaldi, noisy, edge). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "base/sys/settings.h"
#include "tests/lib/test-util.h"
#include "base/sys/log.h"
#include "gpu-align/gpu-align.h"
#include "gpu-align/align-cpu.h"
#include "gpu-align/viterbi-core.h"

/* ---- a tiny graph builder ---- */
typedef struct {
  int32_t ns, na, start;
  int32_t arc_start[64];
  kio_arc arcs[256];
  float final[64];
  int32_t arc_pdf[256];
} tgraph;

typedef struct { int32_t from, il, ol; float w; int32_t to, pdf; } tarc;

/* Arcs must be given grouped by source state in increasing order. */
static void tg_build(tgraph *g, int32_t ns, int32_t start, const tarc *a, int32_t na) {
  memset(g, 0, sizeof *g);
  g->ns = ns; g->na = na; g->start = start;
  int32_t k = 0;
  for (int32_t s = 0; s < ns; s++) {
    g->arc_start[s] = k;
    for (int32_t i = 0; i < na; i++)
      if (a[i].from == s) {
        kio_arc x = { a[i].il, a[i].ol, a[i].w, a[i].to };
        g->arcs[k] = x;
        g->arc_pdf[k] = a[i].il ? a[i].pdf : -1;
        k++;
      }
    g->final[s] = INFINITY;
  }
  g->arc_start[ns] = k;
}

static galign_core_graph tg_view(tgraph *g, int32_t n_used) {
  galign_core_graph v = { g->ns, g->start, n_used, g->arc_start, g->arcs, g->final, g->arc_pdf,
                          NULL, NULL, NULL };
  return v;
}

typedef struct {
  galign_core_ws w;
  galign_tok tok[4096];
  galign_elem p0[64], p1[64];
  int32_t se[64], ub[64], bl[2000], st[1024];
} tws;

static void tws_init(tws *t, int32_t states, int32_t hash) {
  memset(&t->w, 0, sizeof t->w);
  t->w.tok = t->tok; t->w.tok_cap = 4096;
  t->w.pool[0] = t->p0; t->w.pool[1] = t->p1;
  t->w.state_elem = t->se; t->w.used_bucket = t->ub; t->w.bucket_last = t->bl;
  t->w.stack = t->st; t->w.stack_cap = 1024;
  t->w.state_cap = states; t->w.hash_cap = hash;
  galign_core_ws_reset(&t->w);
}

static tws W;

START_TEST(test_core_linear) {
  /* 0 -1-> 0, 0 -2-> 1, 1 -3-> 1, 1 -4-> 2; final(2) = 0.5. pdf: tid 1,2 -> 0; 3,4 -> 1 */
  tarc a[] = { {0, 1, 0, 0.1f, 0, 0}, {0, 2, 0, 0.2f, 1, 0}, {1, 3, 0, 0.1f, 1, 1},
               {1, 4, 0, 0.3f, 2, 1} };
  tgraph g;
  tg_build(&g, 3, 0, a, 4);
  g.final[2] = 0.5f;
  galign_core_graph v = tg_view(&g, 2);
  float ll[] = { -1, -5, -1, -6, -7, -2, -8, -1 };  /* T=4 x 2 pdfs */
  tws_init(&W, 3, 1000);
  int32_t ali[4];
  float pf[4];
  galign_core_out out;
  int retried;
  int st = galign_core_align(&W.w, &v, ll, 4, 10.0f, 0.0f, 0.1f, ali, pf, &out, &retried);
  ck_assert_int_eq(st, GALIGN_CORE_OK);
  ck_assert_int_eq(out.ok, 1);
  ck_assert_int_eq(retried, 0);
  int32_t want[] = { 1, 2, 3, 4 };
  for (int i = 0; i < 4; i++) ck_assert_int_eq(ali[i], want[i]);
  double g_cost = 0.1 + 0.2 + 0.1 + 0.3 + 0.5, ac = 0.1 * (1 + 1 + 2 + 1);
  ck_assert_float_eq_tol(out.score, -(g_cost + ac), 1e-5);
  ck_assert_float_eq_tol(out.like, -(g_cost + ac) / 0.1, 1e-4);
  float want_pf[] = { -1, -1, -2, -1 };
  for (int i = 0; i < 4; i++) ck_assert_float_eq_tol(pf[i], want_pf[i], 1e-4);
}
END_TEST

START_TEST(test_core_epsilon) {
  /* 0 -1-> 1; 1 -eps/1.0-> 2; 1 -2-> 3; 2 -3-> 3; final(3)=0. tid3's pdf (1) is much better. */
  tarc a[] = { {0, 1, 7, 0.0f, 1, 0}, {1, 0, 0, 1.0f, 2, 0}, {1, 2, 0, 0.0f, 3, 0},
               {2, 3, 0, 0.0f, 3, 1} };
  tgraph g;
  tg_build(&g, 4, 0, a, 4);
  g.final[3] = 0.0f;
  galign_core_graph v = tg_view(&g, 2);
  float ll[] = { -1, -50, -100, -1 };
  tws_init(&W, 4, 1000);
  int32_t ali[2];
  galign_core_out out;
  int retried;
  ck_assert_int_eq(galign_core_align(&W.w, &v, ll, 2, 10.0f, 0.0f, 1.0f, ali, NULL, &out,
                                     &retried), GALIGN_CORE_OK);
  ck_assert_int_eq(out.ok, 1);
  ck_assert_int_eq(ali[0], 1);
  ck_assert_int_eq(ali[1], 3);
  ck_assert_float_eq_tol(out.score, -(1.0 + 1 + 1), 1e-5);
}
END_TEST

START_TEST(test_core_negative_epsilon_cycle) {
  /* 0 -1-> 1; 1 -eps/-1-> 1: Kaldi's decoder relaxes this forever; ours
   * must stop with GALIGN_CORE_EPSLOOP (a fatal error in the programs). */
  tarc a[] = { {0, 1, 0, 0.0f, 1, 0}, {1, 0, 0, -1.0f, 1, 0} };
  tgraph g;
  tg_build(&g, 2, 0, a, 2);
  g.final[1] = 0.0f;
  galign_core_graph v = tg_view(&g, 1);
  float ll[] = { -1 };
  tws_init(&W, 2, 1000);
  int32_t ali[1];
  galign_core_out out;
  int retried;
  ck_assert_int_eq(galign_core_align(&W.w, &v, ll, 1, 10.0f, 0.0f, 1.0f, ali, NULL, &out,
                                     &retried), GALIGN_CORE_EPSLOOP);
}
END_TEST

START_TEST(test_core_tie) {
  /* Two arcs into state 1 with equal cost: the first (file order) is kept. */
  tarc a[] = { {0, 5, 0, 0.5f, 1, 0}, {0, 6, 0, 0.5f, 1, 0}, {1, 7, 0, 0.0f, 2, 0} };
  tgraph g;
  tg_build(&g, 3, 0, a, 3);
  g.final[2] = 0.0f;
  galign_core_graph v = tg_view(&g, 1);
  float ll[] = { -1, -1 };
  tws_init(&W, 3, 1000);
  int32_t ali[2];
  galign_core_out out;
  int retried;
  ck_assert_int_eq(galign_core_align(&W.w, &v, ll, 2, 10.0f, 0.0f, 1.0f, ali, NULL, &out,
                                     &retried), GALIGN_CORE_OK);
  ck_assert_int_eq(out.ok, 1);
  ck_assert_int_eq(ali[0], 5);
  /* Same with the arcs swapped. */
  tarc b[] = { {0, 6, 0, 0.5f, 1, 0}, {0, 5, 0, 0.5f, 1, 0}, {1, 7, 0, 0.0f, 2, 0} };
  tg_build(&g, 3, 0, b, 3);
  g.final[2] = 0.0f;
  v = tg_view(&g, 1);
  ck_assert_int_eq(galign_core_align(&W.w, &v, ll, 2, 10.0f, 0.0f, 1.0f, ali, NULL, &out,
                                     &retried), GALIGN_CORE_OK);
  ck_assert_int_eq(ali[0], 6);
}
END_TEST

START_TEST(test_core_retry_fail) {
  /* Needs exactly 3 frames; given 2: retried, then fails. */
  tarc a[] = { {0, 1, 0, 0.0f, 1, 0}, {1, 2, 0, 0.0f, 2, 0}, {2, 3, 0, 0.0f, 3, 0} };
  tgraph g;
  tg_build(&g, 4, 0, a, 3);
  g.final[3] = 0.0f;
  galign_core_graph v = tg_view(&g, 1);
  float ll[] = { -1, -1 };
  tws_init(&W, 4, 1000);
  int32_t ali[2];
  galign_core_out out;
  int retried;
  ck_assert_int_eq(galign_core_align(&W.w, &v, ll, 2, 10.0f, 40.0f, 1.0f, ali, NULL, &out,
                                     &retried), GALIGN_CORE_OK);
  ck_assert_int_eq(out.ok, 0);
  ck_assert_int_eq(retried, 1);
  /* The workspace is clean afterwards: the same graph with 3 frames aligns. */
  float ll3[] = { -1, -1, -1 };
  int32_t ali3[3];
  ck_assert_int_eq(galign_core_align(&W.w, &v, ll3, 3, 10.0f, 40.0f, 1.0f, ali3, NULL, &out,
                                     &retried), GALIGN_CORE_OK);
  ck_assert_int_eq(out.ok, 1);
  ck_assert_int_eq(retried, 0);
  ck_assert_int_eq(ali3[2], 3);
}
END_TEST

START_TEST(test_core_cutoff) {
  /* Start fans out by epsilons to 30 states with costs 1..30 (list order =
   * insertion order). beam 1: 21st smallest = 20 > 0 + 1 -> cutoff 20,
   * adaptive beam 20.5. With 20 states: no pruning at all. */
  tarc a[40];
  for (int i = 0; i < 30; i++) { tarc x = { 0, 0, 0, (float)(i + 1), 1 + i, 0 }; a[i] = x; }
  tgraph g;
  tg_build(&g, 31, 0, a, 30);
  galign_core_graph v = tg_view(&g, 1);
  tws_init(&W, 31, 1000);
  ck_assert_int_eq(galign_core_begin(&W.w, &v), GALIGN_CORE_OK);
  galign_core_cutoff(&W.w, 1.0f);
  ck_assert(W.w.cutoff == 20.0);
  ck_assert(W.w.adaptive_beam == 20.5f);
  ck_assert_int_eq(W.w.stat_max_toks, 31);
  galign_core_clear_list(&W.w);
  tg_build(&g, 20, 0, a, 19);
  v = tg_view(&g, 1);
  ck_assert_int_eq(galign_core_begin(&W.w, &v), GALIGN_CORE_OK);
  galign_core_cutoff(&W.w, 1.0f);
  ck_assert(isinf(W.w.cutoff));
  ck_assert(isinf(W.w.adaptive_beam));
  galign_core_clear_list(&W.w);
  /* 25 states, costs 0..24 with beam 30: 21st (20) < 0 + 30 -> beam cutoff. */
  tg_build(&g, 26, 0, a, 25);
  v = tg_view(&g, 1);
  ck_assert_int_eq(galign_core_begin(&W.w, &v), GALIGN_CORE_OK);
  galign_core_cutoff(&W.w, 30.0f);
  ck_assert(W.w.cutoff == 30.0);
  ck_assert(W.w.adaptive_beam == 30.0f);
  galign_core_clear_list(&W.w);
}
END_TEST

START_TEST(test_core_hashlist_order) {
  /* Kaldi's HashList with 10 buckets: inserting 5, 3, 15, 7, 13 gives the
   * list 5 15 3 13 7 (grouped by bucket, buckets in order of first use). */
  tws_init(&W, 20, 1000);
  W.w.hash_size = 10;
  int32_t keys[] = { 5, 3, 15, 7, 13 };
  for (int i = 0; i < 5; i++) ck_assert_int_ge(galign_core_insert(&W.w, keys[i], 0), 0);
  int32_t want[] = { 5, 15, 3, 13, 7 }, n = 0;
  for (int32_t e = W.w.head; e >= 0; e = W.w.pool[W.w.cur][e].next, n++)
    ck_assert_int_eq(W.w.pool[W.w.cur][e].state, want[n]);
  ck_assert_int_eq(n, 5);
  ck_assert_int_eq(W.w.pool[W.w.cur][W.w.tail].state, 7);
  ck_assert_int_eq(W.w.state_elem[15], 2);
  galign_core_clear_list(&W.w);
  for (int i = 0; i < 20; i++) ck_assert_int_eq(W.w.state_elem[i], -1);
  for (int i = 0; i < 1000; i++) ck_assert_int_eq(W.w.bucket_last[i], -1);
}
END_TEST

START_TEST(test_core_nospace) {
  tarc a[] = { {0, 1, 0, 0.1f, 0, 0}, {0, 2, 0, 0.2f, 1, 0}, {1, 3, 0, 0.1f, 1, 0},
               {1, 4, 0, 0.3f, 2, 0} };
  tgraph g;
  tg_build(&g, 3, 0, a, 4);
  g.final[2] = 0.0f;
  galign_core_graph v = tg_view(&g, 1);
  float ll[8] = { -1, -1, -1, -1, -1, -1, -1, -1 };
  tws_init(&W, 3, 1000);
  W.w.tok_cap = 5;
  int32_t ali[8];
  galign_core_out out;
  int retried;
  ck_assert_int_eq(galign_core_align(&W.w, &v, ll, 8, 10.0f, 0.0f, 1.0f, ali, NULL, &out,
                                     &retried), GALIGN_CORE_NOSPACE);
  ck_assert_int_eq(W.w.need_tok, 1);
  W.w.tok_cap = 4096;
  ck_assert_int_eq(galign_core_align(&W.w, &v, ll, 8, 10.0f, 0.0f, 1.0f, ali, NULL, &out,
                                     &retried), GALIGN_CORE_OK);
  ck_assert_int_eq(out.ok, 1);
}
END_TEST


/* ---- graph preparation ---- */
/* A 2-state transition model: ts 1 = tids 1 (self-loop, -0.5) and 2 (-1.0),
 * ts 2 = tids 3 (self-loop, -0.25) and 4 (-2.0); pdfs 7 and 3. */
typedef struct {
  kio_tmodel tm;
  float lp[5], nonloop[3];
  int32_t ts[5], pdf[5];
  uint8_t loop[5];
} fake_tm;

static void fake_tm_init(fake_tm *f) {
  memset(f, 0, sizeof *f);
  float lp[5] = { 0, -0.5f, -1.0f, -0.25f, -2.0f };
  int32_t ts[5] = { 0, 1, 1, 2, 2 }, pdf[5] = { 0, 7, 7, 3, 3 };
  uint8_t loop[5] = { 0, 1, 0, 1, 0 };
  memcpy(f->lp, lp, sizeof lp); memcpy(f->ts, ts, sizeof ts);
  memcpy(f->pdf, pdf, sizeof pdf); memcpy(f->loop, loop, sizeof loop);
  f->nonloop[1] = logf((float)(1.0 - expf(-0.5f)));
  f->nonloop[2] = logf((float)(1.0 - expf(-0.25f)));
  f->tm.num_tids = 4; f->tm.num_pdfs = 8;
  f->tm.log_probs = f->lp; f->tm.tid2ts = f->ts; f->tm.tid2pdf = f->pdf;
  f->tm.tid_is_self_loop = f->loop; f->tm.nonloop_log_prob = f->nonloop;
}

typedef struct { int32_t as[8]; kio_arc arcs[8]; float fin[4]; kio_fst f; } small_fst;

/* 0 -1-> 0 (w .1), 0 -2-> 1 (w .2), 1 -eps/.3-> 2, 1 -4-> 2; final(2) = .5 */
static void small_fst_init(small_fst *s) {
  memset(s, 0, sizeof *s);
  kio_arc a[4] = { { 1, 0, 0.1f, 0 }, { 2, 9, 0.2f, 1 }, { 0, 0, 0.3f, 2 }, { 4, 0, 0.0f, 2 } };
  memcpy(s->arcs, a, sizeof a);
  s->as[0] = 0; s->as[1] = 2; s->as[2] = 4; s->as[3] = 4;
  s->fin[0] = INFINITY; s->fin[1] = INFINITY; s->fin[2] = 0.5f;
  s->f.num_states = 3; s->f.num_arcs = 4; s->f.start = 0;
  s->f.arc_start = s->as; s->f.arcs = s->arcs; s->f.final = s->fin;
}

START_TEST(test_graph_transition_probs) {
  fake_tm ft; fake_tm_init(&ft);
  small_fst sf; small_fst_init(&sf);
  galign_opts o; galign_opts_default(&o);
  o.transition_scale = 1.0f; o.self_loop_scale = 0.1f;
  galign_graph g; memset(&g, 0, sizeof g);
  ck_assert_int_eq(galign_graph_prepare(&sf.f, &ft.tm, &o, &g), KIO_OK);
  ck_assert_int_eq(g.fst.num_states, 3);
  ck_assert_int_eq(g.fst.num_arcs, 4);
  /* self-loop: w - 0.1 * logp; forward: w - (0.1 * nonloop + (logp - nonloop)) */
  ck_assert_float_eq_tol(g.fst.arcs[0].weight, 0.1 + 0.1 * 0.5, 1e-6);
  double nl1 = log(1.0 - exp(-0.5)), nl2 = log(1.0 - exp(-0.25));
  ck_assert_float_eq_tol(g.fst.arcs[1].weight, 0.2 - (0.1 * nl1 + (-1.0 - nl1)), 1e-6);
  ck_assert(g.fst.arcs[2].weight == 0.3f);  /* epsilon untouched */
  ck_assert_float_eq_tol(g.fst.arcs[3].weight, -(0.1 * nl2 + (-2.0 - nl2)), 1e-6);
  ck_assert(g.fst.final[2] == 0.5f);
  /* equal scales: w - scale * logp */
  o.transition_scale = o.self_loop_scale = 2.0f;
  ck_assert_int_eq(galign_graph_prepare(&sf.f, &ft.tm, &o, &g), KIO_OK);
  ck_assert(g.fst.arcs[1].weight == 0.2f + -(-1.0f * 2.0f));
  /* pdfs used: 3 and 7, sorted; arc_pdf compact */
  ck_assert_int_eq(g.num_pdfs_used, 2);
  ck_assert_int_eq(g.pdfs_used[0], 3);
  ck_assert_int_eq(g.pdfs_used[1], 7);
  ck_assert_int_eq(g.arc_pdf[0], 1);
  ck_assert_int_eq(g.arc_pdf[2], -1);
  ck_assert_int_eq(g.arc_pdf[3], 0);
  /* invalid symbol */
  sf.arcs[3].ilabel = 5;
  int errs = kio_log_num_errors();
  ck_assert_int_eq(galign_graph_prepare(&sf.f, &ft.tm, &o, &g), KIO_ERR);
  ck_assert_int_eq(kio_log_num_errors(), errs + 1);
  galign_graph_free(&g);
}
END_TEST

START_TEST(test_graph_careful) {
  fake_tm ft; fake_tm_init(&ft);
  small_fst sf; small_fst_init(&sf);
  galign_opts o; galign_opts_default(&o);
  o.careful = 1;
  galign_graph g; memset(&g, 0, sizeof g);
  ck_assert_int_eq(galign_graph_prepare(&sf.f, &ft.tm, &o, &g), KIO_OK);
  const kio_fst *f = &g.fst;
  ck_assert_int_eq(f->num_states, 7);
  ck_assert_int_eq(f->num_arcs, 4 + 1 + 4 + 1);
  ck_assert_int_eq(f->start, 0);
  for (int s = 0; s < 6; s++) ck_assert(isinf(f->final[s]));
  ck_assert(f->final[6] == 0.0f);
  /* state 2 lost its finality to an arc 0:0/0.5 -> 6 */
  ck_assert_int_eq(f->arc_start[3] - f->arc_start[2], 1);
  kio_arc a = f->arcs[f->arc_start[2]];
  ck_assert_int_eq(a.ilabel, 0); ck_assert_int_eq(a.nextstate, 6); ck_assert(a.weight == 0.5f);
  /* the copy: states 3..5 mirror 0..2 without the finality arc */
  ck_assert_int_eq(f->arc_start[4] - f->arc_start[3], 2);
  ck_assert_int_eq(f->arcs[f->arc_start[3] + 1].nextstate, 4);
  ck_assert(f->arcs[f->arc_start[3] + 1].weight == f->arcs[1].weight);
  ck_assert_int_eq(f->arc_start[6] - f->arc_start[5], 0);
  /* state 6: 0:0/0 -> 3 (copy of the start) */
  ck_assert_int_eq(f->arc_start[7] - f->arc_start[6], 1);
  a = f->arcs[f->arc_start[6]];
  ck_assert_int_eq(a.ilabel, 0); ck_assert_int_eq(a.nextstate, 3); ck_assert(a.weight == 0.0f);
  galign_graph_free(&g);
}
END_TEST

START_TEST(test_use_gpu_and_beams) {
  galign_use_gpu m;
  ck_assert_int_eq(galign_parse_use_gpu("yes", &m), KIO_OK); ck_assert_int_eq(m, GALIGN_GPU_YES);
  ck_assert_int_eq(galign_parse_use_gpu("no", &m), KIO_OK); ck_assert_int_eq(m, GALIGN_GPU_NO);
  ck_assert_int_eq(galign_parse_use_gpu("optional", &m), KIO_OK);
  ck_assert_int_eq(m, GALIGN_GPU_OPTIONAL);
  ck_assert_int_eq(galign_parse_use_gpu("wait", &m), KIO_OK); ck_assert_int_eq(m, GALIGN_GPU_WAIT);
  ck_assert_int_eq(galign_parse_use_gpu("true", &m), KIO_ERR);
  /* Beams that make no sense are fatal before anything is aligned. */
  kio_am_gmm am; memset(&am, 0, sizeof am);
  am.dim = 2;
  galign_opts o; galign_opts_default(&o);
  o.beam = 10; o.retry_beam = 5;
  galign_aligner *a;
  ck_assert_int_eq(galign_aligner_new(&a, GALIGN_GPU_NO, NULL, &am, &o), KIO_OK);
  galign_result r; memset(&r, 0, sizeof r);
  ck_assert_int_eq(galign_align_batch(a, 0, NULL, NULL, 0, &r), KIO_ERR);
  galign_aligner_free(a);
}
END_TEST

/* ---- Kaldi fixtures ---- */
#include "base/io/table.h"
#include "base/matrix/matrix.h"

typedef struct {
  int n;
  char **keys;
  galign_graph *graphs;
  kio_matrix *feats;
} utt_set;

static void utt_set_free(utt_set *u) {
  for (int i = 0; i < u->n; i++) {
    free(u->keys[i]);
    galign_graph_free(&u->graphs[i]);
    kio_matrix_free(&u->feats[i]);
  }
  free(u->keys); free(u->graphs); free(u->feats);
  memset(u, 0, sizeof *u);
}

/* Graphs (archive order) with their features; like gmm-align-compiled,
 * graphs without features or with zero-length features are skipped. */
static void load_set(const char *graphs_rs, const char *feats_rs, const kio_tmodel *tm,
                     const galign_opts *o, utt_set *u) {
  memset(u, 0, sizeof *u);
  kio_seq_reader *gr;
  kio_ra_reader *fr;
  ck_assert_int_eq(kio_seq_open(&gr, graphs_rs, &kio_fst_holder), KIO_OK);
  ck_assert_int_eq(kio_ra_open(&fr, feats_rs, &kio_matrix_holder), KIO_OK);
  int cap = 0;
  for (; !kio_seq_done(gr); kio_seq_next(gr)) {
    const char *key = kio_seq_key(gr);
    if (!kio_ra_has_key(fr, key)) continue;
    const kio_matrix *m = kio_ra_value(fr, key);
    ck_assert_ptr_nonnull(m);
    if (m->rows == 0) continue;
    const kio_fst *fst = kio_seq_value(gr);
    ck_assert_ptr_nonnull(fst);
    if (u->n == cap) {
      cap = cap ? 2 * cap : 64;
      u->keys = realloc(u->keys, cap * sizeof *u->keys);
      u->graphs = realloc(u->graphs, cap * sizeof *u->graphs);
      u->feats = realloc(u->feats, cap * sizeof *u->feats);
    }
    int i = u->n++;
    u->keys[i] = strdup(key);
    memset(&u->graphs[i], 0, sizeof u->graphs[i]);
    memset(&u->feats[i], 0, sizeof u->feats[i]);
    ck_assert_int_eq(galign_graph_prepare(fst, tm, o, &u->graphs[i]), KIO_OK);
    ck_assert_int_eq(kio_matrix_resize(&u->feats[i], m->rows, m->cols), KIO_OK);
    memcpy(u->feats[i].data, m->data, (size_t)m->rows * m->cols * sizeof(float));
  }
  ck_assert_int_eq(kio_seq_close(gr), KIO_OK);
  ck_assert_int_eq(kio_ra_close(fr), KIO_OK);
}

typedef struct {
  double secs, cpu_secs;
  int n_ok, n_retried, n_failed;
  double tot_like;
  int64_t frames;
  int64_t st_frames, st_toks;
  int32_t st_max;
} run_stats;

static galign_result *run_align(const char *mdl, const utt_set *u, const galign_opts *o,
                                run_stats *rs) {
  kio_tmodel tm; kio_am_gmm am;
  memset(&tm, 0, sizeof tm); memset(&am, 0, sizeof am);
  ck_assert_int_eq(kio_model_read(mdl, &tm, &am), KIO_OK);
  galign_aligner *a;
  ck_assert_int_eq(galign_aligner_new(&a, GALIGN_GPU_NO, &tm, &am, o), KIO_OK);
  galign_result *res = calloc((size_t)u->n, sizeof *res);
  const galign_graph **gp = malloc((size_t)u->n * sizeof *gp);
  const kio_matrix **fp = malloc((size_t)u->n * sizeof *fp);
  for (int i = 0; i < u->n; i++) { gp[i] = &u->graphs[i]; fp[i] = &u->feats[i]; }
  struct timespec t0, t1, c0, c1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
  ck_assert_int_eq(galign_align_batch(a, u->n, gp, fp, 1, res), KIO_OK);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
  memset(rs, 0, sizeof *rs);
  rs->secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  rs->cpu_secs = (double)(c1.tv_sec - c0.tv_sec) + 1e-9 * (double)(c1.tv_nsec - c0.tv_nsec);
  for (int i = 0; i < u->n; i++) {
    rs->n_retried += res[i].retried;
    if (res[i].ok) {
      rs->n_ok++;
      rs->tot_like += res[i].like;
      rs->frames += res[i].num_frames;
    } else {
      rs->n_failed++;
    }
  }
  galign_aligner_cpu_stats(a, &rs->st_frames, &rs->st_toks, &rs->st_max);
  galign_aligner_free(a);
  kio_tmodel_free(&tm);
  kio_am_gmm_free(&am);
  free(gp); free(fp);
  return res;
}

/* Counts of a substring in a file; and the overall likelihood it logs. */
static int count_in_file(const char *path, const char *what, double *overall) {
  size_t len;
  char *buf = (char *)tu_read_file(path, &len);
  ck_assert_ptr_nonnull(buf);
  buf = realloc(buf, len + 1);
  buf[len] = 0;
  int n = 0;
  for (char *p = buf; (p = strstr(p, what)); p++) n++;
  if (overall) {
    char *p = strstr(buf, "Overall log-likelihood per frame is ");
    ck_assert_ptr_nonnull(p);
    *overall = strtod(p + strlen("Overall log-likelihood per frame is "), NULL);
  }
  free(buf);
  return n;
}

/* Compares with Kaldi's alignment archive: same set of aligned utterances
 * and frame agreement; returns the fraction of agreeing frames. */
static double compare_ali(const utt_set *u, const galign_result *res, const char *ali_rs) {
  kio_ra_reader *ar;
  ck_assert_int_eq(kio_ra_open(&ar, ali_rs, &kio_int_vec_holder), KIO_OK);
  int64_t tot = 0, agree = 0;
  int mism = 0;
  for (int i = 0; i < u->n; i++) {
    int has = kio_ra_has_key(ar, u->keys[i]);
    if (has != res[i].ok) {
      printf("  %s: kaldi %s, ours %s\n", u->keys[i], has ? "aligned" : "failed",
             res[i].ok ? "aligned" : "failed");
      mism++;
      continue;
    }
    if (!has) continue;
    const kio_int_vec *v = kio_ra_value(ar, u->keys[i]);
    ck_assert_ptr_nonnull(v);
    ck_assert_int_eq(v->n, res[i].num_frames);
    int64_t a = 0;
    for (int32_t t = 0; t < v->n; t++) a += v->v[t] == res[i].ali[t];
    if (a != v->n) printf("  %s: %lld of %d frames differ\n", u->keys[i], (long long)(v->n - a), v->n);
    fflush(stdout);
    tot += v->n;
    agree += a;
  }
  ck_assert_int_eq(kio_ra_close(ar), KIO_OK);
  ck_assert_int_eq(mism, 0);
  return tot ? (double)agree / (double)tot : 1.0;
}

/* Per-utterance scores ("KEY value" lines) within 1e-4 relative. */
static void compare_scores(const utt_set *u, const galign_result *res, const char *path) {
  FILE *f = fopen(path, "r");
  ck_assert_ptr_nonnull(f);
  char key[256], txt[64], ours[64];
  double v;
  int n = 0, same_text = 0;
  double worst = 0;
  while (fscanf(f, "%255s %63s", key, txt) == 2) {
    v = strtod(txt, NULL);
    for (int i = 0; i < u->n; i++) {
      if (strcmp(u->keys[i], key)) continue;
      ck_assert(res[i].ok);
      snprintf(ours, sizeof ours, "%.7g", res[i].score);
      same_text += !strcmp(ours, txt);
      if (strcmp(ours, txt)) printf("  score text %s: kaldi %s ours %s\n", key, txt, ours);
      double rel = fabs(res[i].score - v) / fmax(fabs(v), 1e-3);
      if (rel > worst) worst = rel;
      if (rel > 1e-4) printf("  score %s: kaldi %g, ours %g\n", key, v, res[i].score);
      ck_assert(rel <= 1e-4);
      n++;
    }
  }
  fclose(f);
  printf("  %d scores (%d print identically), worst relative difference %.2e\n", n, same_text,
         worst);
  fflush(stdout);
  ck_assert_int_gt(n, 0);
  /* Our likelihoods follow the reference BLAS's float operation order, so
   * the 7-digit texts are identical, not just close. */
  ck_assert_int_eq(same_text, n);
}

typedef struct {
  const char *name, *model, *graphs, *feats, *ali, *log, *scores;
  float beam, retry;
  int careful;
} fixture;

static const fixture FIX[] = {
  { "mono", "models/mono/final.mdl", "ark:gunzip -c graphs/mono.fsts.gz|", "ark:feats/delta.ark",
    "ark:kaldi/mono/ali.ark", "kaldi/mono/align.log", "kaldi/mono/scores.txt", 10, 40, 0 },
  { "tri1", "models/tri1/final.mdl", "ark:gunzip -c graphs/tri1.fsts.gz|", "ark:feats/delta.ark",
    "ark:kaldi/tri1/ali.ark", "kaldi/tri1/align.log", "kaldi/tri1/scores.txt", 10, 40, 0 },
  { "tri2", "models/tri2/final.mdl", "ark:gunzip -c graphs/tri2.fsts.gz|", "ark:feats/lda.ark",
    "ark:kaldi/tri2/ali.ark", "kaldi/tri2/align.log", "kaldi/tri2/scores.txt", 10, 40, 0 },
  { "mono careful", "models/mono/final.mdl", "ark:gunzip -c graphs/mono.fsts.gz|",
    "ark:feats/delta.ark", "ark:kaldi/mono/ali-careful.ark", "kaldi/mono/align-careful.log",
    NULL, 10, 40, 1 },
  { "tri1 careful", "models/tri1/final.mdl", "ark:gunzip -c graphs/tri1.fsts.gz|",
    "ark:feats/delta.ark", "ark:kaldi/tri1/ali-careful.ark", "kaldi/tri1/align-careful.log",
    NULL, 10, 40, 1 },
  { "tri2 careful", "models/tri2/final.mdl", "ark:gunzip -c graphs/tri2.fsts.gz|",
    "ark:feats/lda.ark", "ark:kaldi/tri2/ali-careful.ark", "kaldi/tri2/align-careful.log",
    NULL, 10, 40, 1 },
  { "mono beam200", "models/mono/final.mdl", "ark:gunzip -c graphs/mono.fsts.gz|",
    "ark:feats/delta.ark", "ark:kaldi/mono/ali-beam200.ark", "kaldi/mono/align-beam200.log",
    NULL, 200, 0, 0 },
  { "tri1 beam200", "models/tri1/final.mdl", "ark:gunzip -c graphs/tri1.fsts.gz|",
    "ark:feats/delta.ark", "ark:kaldi/tri1/ali-beam200.ark", "kaldi/tri1/align-beam200.log",
    NULL, 200, 0, 0 },
  { "tri2 beam200", "models/tri2/final.mdl", "ark:gunzip -c graphs/tri2.fsts.gz|",
    "ark:feats/lda.ark", "ark:kaldi/tri2/ali-beam200.ark", "kaldi/tri2/align-beam200.log",
    NULL, 200, 0, 0 },
  { "noisy mono", "models/mono/final.mdl", "ark:gunzip -c graphs/mono.fsts.gz|",
    "ark:noisy/delta.ark", "ark:noisy/mono.ali.ark", "noisy/mono.align.log", NULL, 10, 40, 0 },
  { "noisy tri1", "models/tri1/final.mdl", "ark:gunzip -c graphs/tri1.fsts.gz|",
    "ark:noisy/delta.ark", "ark:noisy/tri1.ali.ark", "noisy/tri1.align.log", NULL, 10, 40, 0 },
  { "noisy mono exact", "models/mono/final.mdl", "ark:gunzip -c graphs/mono.fsts.gz|",
    "ark:noisy/delta.ark", "ark:noisy/mono.ali-exact.ark", "noisy/mono.align-exact.log", NULL,
    1000, 0, 0 },
  { "edge", "models/mono/final.mdl", "ark:gunzip -c edge/mono.fsts.gz|", "ark:edge/feats.ark",
    "ark:edge/ali.ark", "edge/align.log", NULL, 10, 40, 0 },
  { "edge long (89 s)", "models/mono/final.mdl", "ark:gunzip -c edge/long.fsts.gz|",
    "ark:edge/long.ark", "ark:edge/long.ali.txt", "edge/long.align.log", NULL, 10, 40, 0 },
};

static void opts_for(const fixture *f, galign_opts *o) {
  galign_opts_default(o);
  o->transition_scale = 1.0f;
  o->acoustic_scale = 0.1f;
  o->self_loop_scale = 0.1f;
  o->beam = f->beam;
  o->retry_beam = f->retry;
  o->careful = f->careful;
}

START_TEST(test_kaldi_fixture) {
  const fixture *f = &FIX[_i];
  galign_opts o;
  opts_for(f, &o);
  kio_tmodel tm; memset(&tm, 0, sizeof tm);
  ck_assert_int_eq(kio_model_read(f->model, &tm, NULL), KIO_OK);
  utt_set u;
  load_set(f->graphs, f->feats, &tm, &o, &u);
  run_stats rs;
  galign_result *res = run_align(f->model, &u, &o, &rs);
  double kaldi_like;
  int k_retry = count_in_file(f->log, "Retrying utterance", &kaldi_like);
  int k_fail = count_in_file(f->log, "Did not successfully decode", NULL);
  double agree = compare_ali(&u, res, f->ali);
  double like = rs.tot_like / (double)rs.frames;
  printf("%s: %d utts, agreement %.4f%% of frames; retried %d (kaldi %d), failed %d (kaldi %d); "
         "like/frame %.6f (kaldi %g); %.2f us/frame, tokens/frame %.1f (max %d)\n",
         f->name, u.n, 100.0 * agree, rs.n_retried, k_retry, rs.n_failed, k_fail, like,
         kaldi_like, 1e6 * rs.secs / (double)rs.frames,
         (double)rs.st_toks / (double)(rs.st_frames ? rs.st_frames : 1), rs.st_max);
  fflush(stdout);
  ck_assert(agree >= 0.999);
  ck_assert_int_eq(rs.n_retried, k_retry);
  ck_assert_int_eq(rs.n_failed, k_fail);
  ck_assert(fabs(like - kaldi_like) <= 1e-4 * fabs(kaldi_like));
  if (f->scores) compare_scores(&u, res, f->scores);
  /* per-frame acoustic loglikes = LL(t, pdf of the aligned tid) */
  galign_gmm gmm;
  kio_am_gmm am; memset(&am, 0, sizeof am);
  kio_tmodel tm2; memset(&tm2, 0, sizeof tm2);
  ck_assert_int_eq(kio_model_read(f->model, &tm2, &am), KIO_OK);
  ck_assert_int_eq(galign_gmm_init(&gmm, &am), KIO_OK);
  double worst_pf = 0;
  for (int i = 0; i < u.n && i < 5; i++) {
    if (!res[i].ok) continue;
    kio_matrix ll; memset(&ll, 0, sizeof ll);
    ck_assert_int_eq(galign_cpu_loglikes(&gmm, &u.feats[i], u.graphs[i].pdfs_used,
                                         u.graphs[i].num_pdfs_used, &ll), KIO_OK);
    for (int32_t t = 0; t < res[i].num_frames; t++) {
      int32_t pdf = tm.tid2pdf[res[i].ali[t]], k = 0;
      while (u.graphs[i].pdfs_used[k] != pdf) k++;
      double want = ll.data[(size_t)t * ll.cols + k];
      double d = fabs(res[i].per_frame[t] - want) / fmax(1.0, fabs(want));
      if (d > worst_pf) worst_pf = d;
    }
    kio_matrix_free(&ll);
  }
  ck_assert(worst_pf < 1e-3);
  galign_gmm_free(&gmm);
  kio_am_gmm_free(&am);
  kio_tmodel_free(&tm2);
  for (int i = 0; i < u.n; i++) galign_result_free(&res[i]);
  free(res);
  utt_set_free(&u);
  kio_tmodel_free(&tm);
}
END_TEST

/* The AVX2 likelihoods equal the portable scalar emulation bit for bit. */
START_TEST(test_loglike_paths) {
  static const char *mdl[] = { "models/mono/final.mdl", "models/tri2/final.mdl" };
  static const char *fe[] = { "ark:feats/delta.ark", "ark:feats/lda.ark" };
  for (int w = 0; w < 2; w++) {
    kio_tmodel tm; kio_am_gmm am;
    memset(&tm, 0, sizeof tm); memset(&am, 0, sizeof am);
    ck_assert_int_eq(kio_model_read(mdl[w], &tm, &am), KIO_OK);
    galign_gmm g;
    ck_assert_int_eq(galign_gmm_init(&g, &am), KIO_OK);
    kio_seq_reader *r;
    ck_assert_int_eq(kio_seq_open(&r, fe[w], &kio_matrix_holder), KIO_OK);
    const kio_matrix *m = kio_seq_value(r);
    float *s = malloc((size_t)galign_gmm_max_comp(&g) * sizeof(float));
    float x2[64];
    int64_t n = 0, same = 0;
    for (int32_t t = 0; t < m->rows; t += 7) {
      const float *x = m->data + (size_t)t * m->cols;
      for (int32_t d = 0; d < m->cols; d++) x2[d] = x[d] * x[d];
      for (int32_t j = 0; j < g.num_pdfs; j++) {
        float a = galign_gmm_loglike(&g, j, x, x2, s), b = galign_gmm_loglike_scalar(&g, j, x, x2, s);
        same += memcmp(&a, &b, sizeof a) == 0;
        n++;
      }
    }
    ck_assert_int_eq(same, n);
    free(s);
    kio_seq_close(r);
    galign_gmm_free(&g);
    kio_am_gmm_free(&am);
    kio_tmodel_free(&tm);
  }
}
END_TEST

/* Speed and tokens alive on one thread (printed, not asserted). */
START_TEST(test_speed) {
  static const int which[] = { 0, 2 };
  static const float beams[] = { 10, 40 };
  kio_setting_override(KIO_SET_CPU_THREADS, "1");
  for (int w = 0; w < 2; w++) {
    const fixture *f = &FIX[which[w]];
    kio_tmodel tm; memset(&tm, 0, sizeof tm);
    ck_assert_int_eq(kio_model_read(f->model, &tm, NULL), KIO_OK);
    for (int b = 0; b < 2; b++) {
      galign_opts o;
      opts_for(f, &o);
      o.beam = beams[b];
      o.retry_beam = 0;
      utt_set u;
      load_set(f->graphs, f->feats, &tm, &o, &u);
      run_stats rs;
      galign_result *res = run_align(f->model, &u, &o, &rs);
      printf("speed %s beam %g, 1 thread: %.2f us/frame CPU (%.0fx real time; wall %.2f us), "
             "tokens/frame mean %.1f max %d, %d failed\n", f->name, o.beam,
             1e6 * rs.cpu_secs / (double)rs.frames, (double)rs.frames / 100.0 / rs.cpu_secs,
             1e6 * rs.secs / (double)rs.frames,
             (double)rs.st_toks / (double)rs.st_frames, rs.st_max, rs.n_failed);
      fflush(stdout);
      for (int i = 0; i < u.n; i++) galign_result_free(&res[i]);
      free(res);
      utt_set_free(&u);
    }
    kio_tmodel_free(&tm);
  }
}
END_TEST

static void add_fixture_tests(Suite *s) {
  TCase *tc = tcase_create("kaldi");
  tcase_set_timeout(tc, 600);
  tcase_add_loop_test(tc, test_kaldi_fixture, 0, (int)(sizeof FIX / sizeof FIX[0]));
  tcase_add_test(tc, test_loglike_paths);
  tcase_add_test(tc, test_speed);
  suite_add_tcase(s, tc);
}

static Suite *suite(void) {
  Suite *s = suite_create("align");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, test_core_linear);
  tcase_add_test(tc, test_core_epsilon);
  tcase_add_test(tc, test_core_negative_epsilon_cycle);
  tcase_add_test(tc, test_core_tie);
  tcase_add_test(tc, test_core_retry_fail);
  tcase_add_test(tc, test_core_cutoff);
  tcase_add_test(tc, test_core_hashlist_order);
  tcase_add_test(tc, test_core_nospace);
  tcase_add_test(tc, test_graph_transition_probs);
  tcase_add_test(tc, test_graph_careful);
  tcase_add_test(tc, test_use_gpu_and_beams);
  suite_add_tcase(s, tc);
  add_fixture_tests(s);
  return s;
}

int main(void) { return tu_run_suite(suite()); }
