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

#endif
