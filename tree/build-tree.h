/* Decision-tree building (prefix bt_): Kaldi's BuildTree of build-tree
 * (tree/build-tree.cc, build-tree-utils.cc, cluster-utils.cc,
 * clusterable-classes.cc) on the statistics of tree-stats.h, with Kaldi's
 * float/double arithmetic and orders, so the same decisions are made. */
#ifndef TREE_BUILD_TREE_H
#define TREE_BUILD_TREE_H

#include <stdint.h>

#include "base/model/model.h"
#include "tree/tree-stats.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Gaussian statistics (GaussClusterable): count, var_floor and 2 x dim
 * sums in st (row 0: x, row 1: x^2); present 0 is Kaldi's NULL. */
typedef struct {
  double count, var_floor;
  double *st;
  int present;
} bt_gauss;

/* GaussClusterable::Objf, rounded as Kaldi's (float SumLog of the floored
 * variances). */
float bt_objf(const double *st, double count, double var_floor, int dim);

/* ---- questions (Questions of build-tree-questions.cc) ---- */
typedef struct {
  int32_t key;
  int32_t nq;
  int32_t **q;   /* question i: nqv[i] sorted values */
  int32_t *nqv;
  int32_t refine_iters, refine_top_n;
} bt_key_questions;
typedef struct {
  int32_t nkeys;  /* sorted by key */
  bt_key_questions *k;
} bt_questions;
/* Questions::Read of rxfilename; ERROR naming it as Kaldi does. */
int bt_questions_read(const char *rx, bt_questions *q);
void bt_questions_free(bt_questions *q);

/* ---- roots (ReadRootsFile) ---- */
typedef struct {
  int32_t nsets;
  int32_t **set, *nset;  /* sorted phones */
  uint8_t *shared, *split;
} bt_roots;
int bt_roots_read(const char *rx, bt_roots *r);
void bt_roots_free(bt_roots *r);

/* ---- event maps (kio_event_map of base/model) ---- */
kio_event_map *bt_em_const(int32_t answer);
void bt_em_free(kio_event_map *m);
/* EventMap::Map on event (pairs sorted by key): 1 and *ans, or 0. */
int bt_em_map(const kio_event_map *m, const int32_t *ev, int32_t nev, int32_t *ans);
/* EventMap::Copy(new_leaves): leaves a with a < n and map[a] >= 0 become
 * CE map[a]. */
kio_event_map *bt_em_copy(const kio_event_map *m, const int32_t *map, int32_t n);
/* All answers reachable (MultiMap of an empty event), appended. */
void bt_em_leaves(const kio_event_map *m, int32_t *out, int32_t *n);
int32_t bt_em_count_leaves(const kio_event_map *m);
/* ContextDependency::Write of (N, P, m) into wxfilename. */
int bt_ctx_dep_write(const char *wx, int binary, int32_t N, int32_t P, const kio_event_map *m);
/* GetStubMap; NULL after an ERROR (Kaldi asserts). */
kio_event_map *bt_stub_map(int32_t P, const bt_roots *r, int32_t lo, int32_t hi,
                           const int32_t *phone2npdf, int32_t nphone2npdf, int32_t *num_leaves);

/* ---- BuildTree ---- */
typedef struct {
  float thresh, cluster_thresh;
  int32_t max_leaves, P;
  int round_num_leaves;
  int threads;  /* <= 0: this process's CPU share */
} bt_opts;

/* The tree, or NULL after an ERROR. Logs Kaldi's lines. *fallback = 1
 * (NULL returned, nothing logged) where Kaldi's behaviour is not one ours
 * reproduces: the caller runs Kaldi's program instead. */
kio_event_map *bt_build_tree(const bt_questions *q, const bt_roots *r, const int32_t *phone2npdf,
                             int32_t nphone2npdf, const tstat_table *stats, const bt_opts *o,
                             int *fallback);

/* Leaves' statistics summed (SplitStatsByMap + SumStatsVec): per leaf
 * count (float SumNormalizer order) into norm[0..nleaves). */
int bt_leaf_normalizers(const tstat_table *t, const kio_event_map *m, float *norm,
                        int32_t nleaves);

#ifdef __cplusplus
}
#endif
#endif
