/* The statistics per leaf of an EventMap (SplitStatsByMap, SumStatsVec,
 * ObjfGivenMap, SumNormalizer of build-tree-utils.cc) and the clusterings
 * of the leaves after splitting: ClusterEventMapRestrictedByMap and
 * ClusterEventMapToNClustersRestrictedByMap. */
#include <float.h>
#include <stdlib.h>
#include <string.h>

#include "base/sys/kaldi-msg.h"
#include "base/sys/log.h"
#include "tree/bt-internal.h"

static const double *st_of(const tstat_table *t, int32_t e) { return t->st + t->v[e].soff; }

/* ---- per-leaf sums (SplitStatsByMap + SumStatsVec) ---- */
static void leafsums_free(leafsums *l) {
  free(l->g);
  free(l->buf);
  free(l->any);
  memset(l, 0, sizeof *l);
}

static int event_leaf(const tstat_table *t, int32_t e, const kio_event_map *m, int32_t *leaf) {
  if (bt_em_map(m, t->ev + t->v[e].off, t->v[e].nev, leaf)) return KIO_OK;
  KIO_ERROR("SplitStatsByMap: could not map an event vector of the statistics; check that "
            "--context-width and --central-position match the stats, and that phones that "
            "are context-independent (CI) during stats accumulation do not share roots "
            "with non-CI phones.");
  return KIO_ERR;
}

static int leaf_sums(const tstat_table *t, const int32_t *idx, int32_t n, const kio_event_map *m,
                     int dim, leafsums *l) {
  int D = 2 * dim;
  memset(l, 0, sizeof *l);
  int32_t *leaf = malloc(sizeof(int32_t) * (size_t)(n + 1));
  if (!leaf) return KIO_ERR;
  for (int32_t i = 0; i < n; i++) {
    int32_t e = idx ? idx[i] : i;
    if (event_leaf(t, e, m, &leaf[i]) != KIO_OK || leaf[i] < 0) {
      free(leaf);
      return KIO_ERR;
    }
    if (leaf[i] + 1 > l->n) l->n = leaf[i] + 1;
  }
  l->g = calloc((size_t)l->n + 1, sizeof *l->g);
  l->buf = calloc((size_t)(l->n + 1) * D, sizeof(double));
  l->any = calloc((size_t)l->n + 1, 1);
  if (!l->g || !l->buf || !l->any) {
    free(leaf);
    leafsums_free(l);
    KIO_ERROR("out of memory");
    return KIO_ERR;
  }
  for (int32_t i = 0; i < n; i++) {
    int32_t e = idx ? idx[i] : i;
    bt_gauss *g = &l->g[leaf[i]];
    l->any[leaf[i]] = 1;
    if (t->v[e].is_null) continue;
    const double *x = st_of(t, e);
    g->st = l->buf + (size_t)leaf[i] * D;
    if (!g->present) {
      g->present = 1;
      g->count = 0.0 + t->v[e].count;
      g->var_floor = t->v[e].var_floor;
      for (int k = 0; k < D; k++) g->st[k] = 0.0 + x[k];
    } else {
      g->count += t->v[e].count;
      for (int k = 0; k < D; k++) g->st[k] += x[k];
    }
  }
  free(leaf);
  return KIO_OK;
}

int bt_objf_given_map(const tstat_table *t, const kio_event_map *m, int dim, float *objf) {
  leafsums l;
  if (leaf_sums(t, NULL, (int32_t)t->n, m, dim, &l) != KIO_OK) return KIO_ERR;
  float ans = 0.0f;
  for (int32_t i = 0; i < l.n; i++)
    if (l.g[i].present) ans += bt_objf(l.g[i].st, l.g[i].count, l.g[i].var_floor, dim);
  leafsums_free(&l);
  *objf = ans;
  return KIO_OK;
}

int bt_leaf_normalizers(const tstat_table *t, const kio_event_map *m, float *norm,
                        int32_t nleaves) {
  for (int32_t i = 0; i < nleaves; i++) norm[i] = 0.0f;
  for (size_t e = 0; e < t->n; e++) {
    int32_t leaf;
    if (event_leaf(t, (int32_t)e, m, &leaf) != KIO_OK) return KIO_ERR;
    if (leaf >= 0 && leaf < nleaves && !t->v[e].is_null) norm[leaf] += (float)t->v[e].count;
  }
  return KIO_OK;
}

float bt_sum_normalizer(const tstat_table *t, const int32_t *idx, int32_t n) {
  float ans = 0.0f;
  for (int32_t i = 0; i < n; i++) {
    int32_t e = idx ? idx[i] : i;
    if (!t->v[e].is_null) ans += (float)t->v[e].count;
  }
  return ans;
}

/* The statistics of each leaf of m (stub regions), as index lists. */
int bt_split_by_map(const tstat_table *t, const int32_t *idx, int32_t n,
                        const kio_event_map *m, int32_t ***lists, int32_t **sizes, int32_t *nl) {
  int32_t *leaf = malloc(sizeof(int32_t) * (size_t)(n + 1));
  int32_t L = 0;
  if (!leaf) return KIO_ERR;
  for (int32_t i = 0; i < n; i++) {
    if (event_leaf(t, idx ? idx[i] : i, m, &leaf[i]) != KIO_OK || leaf[i] < 0) {
      free(leaf);
      return KIO_ERR;
    }
    if (leaf[i] + 1 > L) L = leaf[i] + 1;
  }
  *lists = calloc((size_t)L + 1, sizeof **lists);
  *sizes = calloc((size_t)L + 1, sizeof **sizes);
  if (!*lists || !*sizes) {
    free(leaf);
    return KIO_ERR;
  }
  for (int32_t i = 0; i < n; i++) (*sizes)[leaf[i]]++;
  for (int32_t j = 0; j < L; j++) {
    (*lists)[j] = malloc(sizeof(int32_t) * (size_t)((*sizes)[j] + 1));
    if (!(*lists)[j]) {
      free(leaf);
      return KIO_ERR;
    }
    (*sizes)[j] = 0;
  }
  for (int32_t i = 0; i < n; i++) (*lists)[leaf[i]][(*sizes)[leaf[i]]++] = idx ? idx[i] : i;
  free(leaf);
  *nl = L;
  return KIO_OK;
}

void bt_lists_free(int32_t **lists, int32_t *sizes, int32_t n) {
  for (int32_t i = 0; lists && i < n; i++) free(lists[i]);
  free(lists);
  free(sizes);
}

/* ClusterEventMapRestrictedByMap (compart 0, thresh) or
 * ClusterEventMapToNClustersRestrictedByMap (compart 1, required): leaf
 * mapping into map[0..nmap) (-1: unchanged), *removed. *skip: the case
 * where Kaldi leaves the map as it is (with a warning ours does not know). */
int bt_cluster_restricted(const tstat_table *t, const kio_event_map *e_in,
                              const kio_event_map *e_restrict, int dim, float thresh,
                              int compart, int32_t required, int32_t *map, int32_t nmap,
                              int32_t *removed, int *skip) {
  int32_t **reg = NULL, *nreg = NULL, nr = 0;
  int rc = KIO_ERR;
  *removed = 0;
  *skip = 0;
  if (bt_split_by_map(t, NULL, (int32_t)t->n, e_restrict, &reg, &nreg, &nr) != KIO_OK) return KIO_ERR;
  if (compart && required < nr) {
    *skip = 1;
    bt_lists_free(reg, nreg, nr);
    return KIO_OK;
  }
  leafsums *ls = calloc((size_t)nr + 1, sizeof *ls);
  const bt_gauss **pts = calloc((size_t)nr + 1, sizeof *pts);
  bt_gauss **ptsw = calloc((size_t)nr + 1, sizeof *ptsw);
  int32_t **ix = calloc((size_t)nr + 1, sizeof *ix), *np = calloc((size_t)nr + 1, sizeof *np);
  int32_t **asg = calloc((size_t)nr + 1, sizeof *asg);
  int32_t nonempty_regions = 0, nonempty = 0, req = required;
  if (!ls || !pts || !ptsw || !ix || !np || !asg) goto out;
  for (int32_t i = 0; i < nr; i++) {
    if (!nreg[i]) {
      req--;
      continue;
    }
    nonempty_regions++;
    if (leaf_sums(t, reg[i], nreg[i], e_in, dim, &ls[i]) != KIO_OK) goto out;
    ix[i] = malloc(sizeof(int32_t) * (size_t)(ls[i].n + 1));
    ptsw[i] = malloc(sizeof(bt_gauss) * (size_t)(ls[i].n + 1));
    asg[i] = malloc(sizeof(int32_t) * (size_t)(ls[i].n + 1));
    if (!ix[i] || !ptsw[i] || !asg[i]) goto out;
    for (int32_t j = 0; j < ls[i].n; j++)
      if (ls[i].g[j].present) {
        ix[i][np[i]] = j;
        ptsw[i][np[i]++] = ls[i].g[j];
      }
    pts[i] = ptsw[i];
    nonempty += np[i];
  }
  if (compart) {
    if (kio_log_verbose() >= 1) {
      KIO_KALDI(BT_NONEMPTY_MAP, (int)nonempty_regions);
      KIO_KALDI(BT_NONEMPTY, (int)nonempty);
    }
    if (req > nonempty) {
      *skip = 1;
      rc = KIO_OK;
      goto out;
    }
    if (bt_cluster_bottom_up(pts, np, nr, dim, FLT_MAX, req, 1, asg) != KIO_OK) goto out;
  } else {
    for (int32_t i = 0; i < nr; i++) {
      if (!nreg[i]) continue;
      if (!np[i]) {
        KIO_WARN("ClusterBottomUp: nothing to cluster.");
        continue;
      }
      if (np[i] >= 65535) {
        KIO_ERROR("Too many leaves (%d) under one root to cluster", (int)np[i]);
        goto out;
      }
      if (bt_cluster_bottom_up(&pts[i], &np[i], 1, dim, thresh, 0, 0, &asg[i]) != KIO_OK)
        goto out;
    }
  }
  for (int32_t i = 0; i < nr; i++) {
    int32_t nclust = 0;
    for (int32_t j = 0; j < np[i]; j++) {
      if (asg[i][j] + 1 > nclust) nclust = asg[i][j] + 1;
      if (ix[i][j] < nmap) map[ix[i][j]] = ix[i][asg[i][j]];
    }
    *removed += np[i] - nclust;
  }
  rc = KIO_OK;
out:
  for (int32_t i = 0; i < nr; i++) {
    if (ls) leafsums_free(&ls[i]);
    if (ix) free(ix[i]);
    if (ptsw) free(ptsw[i]);
    if (asg) free(asg[i]);
  }
  free(ls);
  free(pts);
  free(ptsw);
  free(ix);
  free(np);
  free(asg);
  bt_lists_free(reg, nreg, nr);
  if (rc != KIO_OK && !*skip) KIO_ERROR("clustering the tree's leaves failed");
  return rc;
}

