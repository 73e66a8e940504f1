/* Shared inside tree/ between the build-tree files. */
#ifndef TREE_BT_INTERNAL_H
#define TREE_BT_INTERNAL_H

#include "tree/build-tree.h"

/* ClusterBottomUp (compartmentalized 0: one compartment, merges while
 * distance <= thresh) or ClusterBottomUpCompartmentalized (down to min_clust
 * clusters in all): points[c][0..npoints[c]) present; assignments[c] gets
 * each point's cluster, numbered per compartment. */
int bt_cluster_bottom_up(const bt_gauss *const *points, const int32_t *npoints, int32_t ncomp,
                         int dim, float thresh, int32_t min_clust, int compartmentalized,
                         int32_t **assignments);

/* Per-leaf sums of statistics. */
typedef struct {
  int32_t n;       /* leaves (max answer + 1) */
  bt_gauss *g;     /* present: some non-NULL statistics reached it */
  double *buf;
  uint8_t *any;    /* some statistics (NULL or not) reached it */
} leafsums;

/* ObjfGivenMap: the float sum of the leaves' objectives. */
int bt_objf_given_map(const tstat_table *t, const kio_event_map *m, int dim, float *objf);
/* SumNormalizer of the entries idx[0..n) (idx NULL: 0..n). */
float bt_sum_normalizer(const tstat_table *t, const int32_t *idx, int32_t n);
/* SplitStatsByMap as index lists per leaf (*nl leaves); ERROR if an event
 * does not map. */
int bt_split_by_map(const tstat_table *t, const int32_t *idx, int32_t n, const kio_event_map *m,
                 int32_t ***lists, int32_t **sizes, int32_t *nl);
void bt_lists_free(int32_t **lists, int32_t *sizes, int32_t n);
/* ClusterEventMapRestrictedByMap (compart 0, thresh) or
 * ClusterEventMapToNClustersRestrictedByMap (compart 1, required): leaf
 * mapping into map[0..nmap) (-1: unchanged), *removed; *skip where Kaldi
 * leaves the map as it is. */
int bt_cluster_restricted(const tstat_table *t, const kio_event_map *e_in,
                       const kio_event_map *e_restrict, int dim, float thresh, int compart,
                       int32_t required, int32_t *map, int32_t nmap, int32_t *removed, int *skip);

#endif
