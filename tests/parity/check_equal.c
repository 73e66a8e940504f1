/* Equal alignment (reference 6.3): the glibc rand() clone against the real
 * glibc, the key hash, small hand-made graphs, and Kaldi's own equal
 * alignments of the fixture graphs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/model/fst.h"
#include "base/sys/log.h"
#include "base/matrix/matrix.h"
#include "base/io/table.h"
#include "gpu-align/gpu-align.h"
#include "tests/lib/test-util.h"

/* ---- captured log lines ---- */
static char g_log[8192];
static int g_levels[64], g_nlines;
static void capture(int level, const char *func, const char *file, int line,
                    const char *msg, void *user) {
  (void)file; (void)line; (void)user;
  size_t n = strlen(g_log);
  snprintf(g_log + n, sizeof g_log - n, "%s|%s\n", func, msg);
  if (g_nlines < 64) g_levels[g_nlines++] = level;
}
static void capture_start(void) {
  g_log[0] = 0;
  g_nlines = 0;
  kio_log_set_handler(capture, NULL);
}

/* ---- generator vs the C library ---- */
START_TEST(rand_matches_glibc) {
#ifndef __GLIBC__
  printf("SKIP: not glibc; cannot compare with its rand()\n");
  return;
#else
  const uint32_t seeds[] = {0, 1, 2, 42, 12345, 761839, 0x7ffffffeu, 0x7fffffffu,
                            0x80000000u, 0x80000001u, 0xdeadbeefu, 0xfffffffeu,
                            0xffffffffu, 3478547083u, 4088958468u};
  for (size_t i = 0; i < sizeof seeds / sizeof seeds[0]; i++) {
    galign_rand g;
    galign_srand(&g, seeds[i]);
    srand(seeds[i]);
    for (int k = 0; k < 10000; k++) {
      int32_t ours = galign_rand_next(&g), theirs = rand();
      ck_assert_msg(ours == theirs, "seed %u, number %d: ours %d, glibc %d",
                    seeds[i], k, ours, theirs);
    }
  }
#endif
}
END_TEST

START_TEST(rand_reseed_restarts) {
  galign_rand a, b;
  galign_srand(&a, 7);
  int32_t first = galign_rand_next(&a);
  for (int i = 0; i < 100; i++) galign_rand_next(&a);
  galign_srand(&a, 7);
  ck_assert_int_eq(galign_rand_next(&a), first);
  galign_srand(&a, 0);
  galign_srand(&b, 1);  /* glibc: seed 0 behaves as 1 */
  for (int i = 0; i < 50; i++) ck_assert_int_eq(galign_rand_next(&a), galign_rand_next(&b));
}
END_TEST

/* Values from an independent computation (Python, signed bytes, mod 2^64). */
START_TEST(key_seed_hash) {
  ck_assert_uint_eq(galign_key_seed(""), 0);
  ck_assert_uint_eq(galign_key_seed("a"), 97);
  ck_assert_uint_eq(galign_key_seed("ab"), 761839);
  ck_assert_uint_eq(galign_key_seed("en-029-f1-00056"), 3478547083u);
  ck_assert_uint_eq(galign_key_seed("spk-0001_utt-00042-x"), 4088958468u);
  ck_assert_uint_eq(galign_key_seed("\xe9t\xe9"), 2877477214u);  /* chars >= 0x80 are negative */
}
END_TEST

/* ---- hand-made graphs ---- */
/* Builds an FST from (src, dst, ilabel) triples; finals: list ended by -1. */
static void make_fst(kio_fst *g, int ns, int start, int na, const int (*arcs)[3],
                     const int *finals) {
  memset(g, 0, sizeof *g);
  g->num_states = ns;
  g->num_arcs = na;
  g->start = start;
  g->arc_start = calloc((size_t)ns + 1, sizeof(int32_t));
  g->arcs = calloc((size_t)na + 1, sizeof(kio_arc));
  g->final = malloc((size_t)ns * sizeof(float));
  for (int s = 0; s < ns; s++) g->final[s] = INFINITY;
  for (const int *f = finals; *f >= 0; f++) g->final[*f] = 0.0f;
  int k = 0;  /* arcs must be given grouped by source state, in order */
  for (int s = 0; s < ns; s++) {
    g->arc_start[s] = k;
    while (k < na && arcs[k][0] == s) {
      g->arcs[k] = (kio_arc){arcs[k][2], 0, 0.0f, arcs[k][1]};
      k++;
    }
  }
  g->arc_start[ns] = k;
  ck_assert_int_eq(k, na);
}
static void free_fst(kio_fst *g) {
  free(g->arc_start);
  free(g->arcs);
  free(g->final);
}

/* 0 -1-> 1 (loop 2) -3-> 2 (loop 4) -0-> 3 final; entered-state self-loops
 * as in Kaldi's reordered training graphs; one epsilon arc. */
static const int chain_arcs[][3] = {{0, 1, 1}, {1, 1, 2}, {1, 2, 3}, {2, 2, 4}, {2, 3, 0}};
static const int chain_final[] = {3, -1};

START_TEST(chain_even_split) {
  kio_fst g;
  make_fst(&g, 4, 0, 5, chain_arcs, chain_final);
  int32_t ali[16];
  capture_start();
  ck_assert_int_eq(galign_equal_align(&g, 6, 123, ali), 1);
  const int32_t want6[] = {1, 2, 2, 3, 4, 4};  /* 2 labels + 4 extra over 2 loops */
  for (int i = 0; i < 6; i++) ck_assert_int_eq(ali[i], want6[i]);
  ck_assert_int_eq(galign_equal_align(&g, 7, 99, ali), 1);
  const int32_t want7[] = {1, 2, 2, 2, 3, 4, 4};  /* remainder to the earliest */
  for (int i = 0; i < 7; i++) ck_assert_int_eq(ali[i], want7[i]);
  ck_assert_int_eq(galign_equal_align(&g, 2, 5, ali), 1);  /* no extra frames */
  ck_assert_int_eq(ali[0], 1);
  ck_assert_int_eq(ali[1], 3);
  ck_assert_int_eq(g_nlines, 0);
  kio_log_set_handler(NULL, NULL);
  free_fst(&g);
}
END_TEST

START_TEST(too_few_frames) {
  kio_fst g;
  make_fst(&g, 4, 0, 5, chain_arcs, chain_final);
  int32_t ali[4];
  capture_start();
  ck_assert_int_eq(galign_equal_align(&g, 1, 77, ali), 0);
  ck_assert_str_eq(g_log,
                   "EqualAlign|EqualAlign: the randomly constructed paths lengths: "
                   "2,2,2,2,2,2,2,2,2,2\n"
                   "EqualAlign|EqualAlign: utterance has too few frames 1 to align.\n");
  ck_assert_int_eq(g_levels[0], KIO_LOG_WARNING);
  ck_assert_int_eq(g_levels[1], KIO_LOG_WARNING);
  kio_log_set_handler(NULL, NULL);
  free_fst(&g);
}
END_TEST

START_TEST(no_self_loops) {
  static const int arcs[][3] = {{0, 1, 1}, {1, 2, 3}};
  static const int fin[] = {2, -1};
  kio_fst g;
  make_fst(&g, 3, 0, 2, arcs, fin);
  int32_t ali[8];
  capture_start();
  ck_assert_int_eq(galign_equal_align(&g, 2, 1, ali), 1);  /* exact length is fine */
  ck_assert_int_eq(g_nlines, 0);
  ck_assert_int_eq(galign_equal_align(&g, 5, 1, ali), 0);
  ck_assert_str_eq(g_log, "EqualAlign|No self-loops on chosen path; cannot match length.\n");
  kio_log_set_handler(NULL, NULL);
  free_fst(&g);
}
END_TEST

START_TEST(not_coaccessible_is_error) {
  /* State 4 is a dead end (Kaldi would abort on its assertion). */
  static const int arcs[][3] = {{0, 1, 1}, {0, 4, 7}, {1, 1, 2}, {1, 2, 3},
                                {2, 2, 4}, {2, 3, 0}};
  kio_fst g;
  make_fst(&g, 5, 0, 6, arcs, chain_final);
  int32_t ali[16];
  capture_start();
  ck_assert_int_eq(galign_equal_align(&g, 10, 3, ali), 0);
  ck_assert_int_eq(g_nlines, 1);
  ck_assert_int_eq(g_levels[0], KIO_LOG_ERROR);
  ck_assert_ptr_nonnull(strstr(g_log, "co-accessible"));
  /* An arc to a state that does not exist is an error, not a crash. */
  g.arcs[1].nextstate = 99;
  capture_start();
  ck_assert_int_eq(galign_equal_align(&g, 10, 3, ali), 0);
  ck_assert_int_eq(g_levels[0], KIO_LOG_ERROR);
  kio_log_set_handler(NULL, NULL);
  free_fst(&g);
}
END_TEST

START_TEST(empty_fst) {
  kio_fst g;
  make_fst(&g, 4, -1, 5, chain_arcs, chain_final);
  int32_t ali[4];
  capture_start();
  ck_assert_int_eq(galign_equal_align(&g, 3, 1, ali), 0);
  ck_assert_str_eq(g_log, "EqualAlign|Empty input fst.\n");
  kio_log_set_handler(NULL, NULL);
  free_fst(&g);
}
END_TEST

/* Several choices per state: the walk must terminate, produce exactly
 * `length` labels, and be deterministic in the seed. */
START_TEST(branching_deterministic) {
  static const int arcs[][3] = {{0, 1, 1}, {0, 2, 5}, {0, 0, 9}, {1, 1, 2}, {1, 3, 3},
                                {1, 0, 0}, {2, 2, 6}, {2, 3, 7}, {3, 3, 4}, {3, 1, 8}};
  static const int fin[] = {3, -1};
  kio_fst g;
  make_fst(&g, 4, 0, 10, arcs, fin);
  int32_t a[200], b[200];
  kio_log_set_handler(capture, NULL);
  for (uint32_t seed = 0; seed < 50; seed++) {
    g_log[0] = 0;
    int ok = galign_equal_align(&g, 200, seed, a);
    ck_assert_int_eq(galign_equal_align(&g, 200, seed, b), ok);
    if (ok) {
      ck_assert_int_eq(memcmp(a, b, sizeof a), 0);
      for (int i = 0; i < 200; i++) ck_assert(a[i] >= 1 && a[i] <= 9);
    }
  }
  kio_log_set_handler(NULL, NULL);
  free_fst(&g);
}
END_TEST

/* ---- Kaldi's equal alignments of the fixture graphs ---- */
/* Aligns every graph of graphs_rspec whose key has features and compares
 * with Kaldi's archive entry by entry (same keys, same order). */
static int compare_with_kaldi(const char *graphs_rspec, const char *feats_rspec,
                              const char *ali_rspec) {
  kio_seq_reader *graphs = NULL, *kali = NULL;
  kio_ra_reader *feats = NULL;
  ck_assert_int_eq(kio_seq_open(&graphs, graphs_rspec, &kio_fst_holder), KIO_OK);
  ck_assert_int_eq(kio_ra_open(&feats, feats_rspec, &kio_matrix_holder), KIO_OK);
  ck_assert_int_eq(kio_seq_open(&kali, ali_rspec, &kio_int_vec_holder), KIO_OK);
  int n = 0;
  for (; !kio_seq_done(graphs); kio_seq_next(graphs)) {
    const char *key = kio_seq_key(graphs);
    if (!kio_ra_has_key(feats, key)) continue;
    const kio_matrix *m = kio_ra_value(feats, key);
    const kio_fst *g = kio_seq_value(graphs);
    ck_assert_ptr_nonnull(m);
    ck_assert_ptr_nonnull(g);
    if (m->rows == 0 || g->start < 0) continue;
    int32_t *ali = malloc((size_t)m->rows * sizeof *ali);
    int ok = galign_equal_align(g, m->rows, galign_key_seed(key), ali);
    if (ok) {
      ck_assert_msg(!kio_seq_done(kali), "%s: Kaldi's archive has no more entries", key);
      ck_assert_str_eq(kio_seq_key(kali), key);
      const kio_int_vec *want = kio_seq_value(kali);
      ck_assert_ptr_nonnull(want);
      ck_assert_int_eq(want->n, m->rows);
      for (int32_t i = 0; i < m->rows; i++)
        ck_assert_msg(ali[i] == want->v[i], "%s frame %d: ours %d, Kaldi %d", key,
                      (int)i, (int)ali[i], (int)want->v[i]);
      kio_seq_next(kali);
      n++;
    }
    free(ali);
  }
  ck_assert_msg(kio_seq_done(kali), "Kaldi aligned more utterances than we did");
  ck_assert_int_eq(kio_seq_close(kali), KIO_OK);
  ck_assert_int_eq(kio_ra_close(feats), KIO_OK);
  ck_assert_int_eq(kio_seq_close(graphs), KIO_OK);
  return n;
}

START_TEST(mono_graphs_match_kaldi) {
  int n = compare_with_kaldi("ark:gunzip -c graphs/mono.fsts.gz|", "ark:feats/delta.ark",
                             "ark:kaldi/mono/ali-equal.ark");
  ck_assert_int_eq(n, 40);
}
END_TEST

START_TEST(edge_graphs_match_kaldi) {
  capture_start();
  int n = compare_with_kaldi("ark:gunzip -c edge/mono.fsts.gz|", "ark:edge/feats.ark",
                             "ark:edge/ali-equal.ark");
  kio_log_set_handler(NULL, NULL);
  ck_assert_int_eq(n, 1);
  /* The 8-frame utterance: ten attempts, Kaldi's path lengths. */
  ck_assert_str_eq(g_log,
                   "EqualAlign|EqualAlign: the randomly constructed paths lengths: "
                   "60,66,74,80,75,82,77,97,74,86\n"
                   "EqualAlign|EqualAlign: utterance has too few frames 8 to align.\n");
}
END_TEST

Suite *equal_suite(void) {
  Suite *s = suite_create("equal");
  TCase *t = tcase_create("rand");
  tcase_add_test(t, rand_matches_glibc);
  tcase_add_test(t, rand_reseed_restarts);
  tcase_add_test(t, key_seed_hash);
  suite_add_tcase(s, t);
  t = tcase_create("synthetic");
  tcase_add_test(t, chain_even_split);
  tcase_add_test(t, too_few_frames);
  tcase_add_test(t, no_self_loops);
  tcase_add_test(t, not_coaccessible_is_error);
  tcase_add_test(t, empty_fst);
  tcase_add_test(t, branching_deterministic);
  suite_add_tcase(s, t);
  t = tcase_create("kaldi");
  tcase_set_timeout(t, 60);
  tcase_add_test(t, mono_graphs_match_kaldi);
  tcase_add_test(t, edge_graphs_match_kaldi);
  suite_add_tcase(s, t);
  return s;
}

int main(void) { return tu_run_suite(equal_suite()); }
