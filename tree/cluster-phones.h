/* cluster-phones' questions (prefix cp_): Kaldi's AutomaticallyObtainQuestions
 * (tree/build-tree.cc) on the phone sets' summed statistics. */
#ifndef TREE_CLUSTER_PHONES_H
#define TREE_CLUSTER_PHONES_H

#include <stdint.h>

#include "tree/build-tree.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef bt_gauss gs_point;

/* TreeCluster of the n sets' statistics pts (each set's phones sorted in
 * sets[i][0..nsets[i])) and ObtainSetsOfPhones: *nout questions, each a
 * malloc'ed array [count, phones...], sorted and unique as Kaldi writes
 * them. Draws glibc's rand() as Kaldi's ClusterKMeans does (the process's
 * sequence from its start). *tie = 1 where two splits' gains were equal:
 * Kaldi then orders them by their nodes' addresses, which ours cannot
 * follow. */
int cp_questions(gs_point *pts, int32_t n, int dim, const int32_t *const *sets,
                 const int32_t *nsets, int32_t ***out, int32_t *nout, int *tie);

#ifdef __cplusplus
}
#endif
#endif
