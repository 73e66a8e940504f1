/* GaussClusterable's objective (clusterable-classes.cc) and the bottom-up
 * clusterings of cluster-utils.cc (ClusterBottomUp and its compartmentalized
 * form), with Kaldi's float/double mix and libstdc++'s priority_queue
 * (push_heap/pop_heap) so that equal distances pop in Kaldi's order. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/sys/log.h"
#include "tree/bt-internal.h"

float bt_objf(const double *st, double count, double var_floor, int dim) {
  if (count <= 0.0) {
    if (count < -0.1) KIO_WARN("GaussClusterable::Objf(), count is negative %g", count);
    return 0.0f;
  }
  /* per frame: -0.5 var / floored var per dimension, then the log-det of
   * the floored variances (VectorBase<double>::SumLog) */
  double sum_log = 0.0, prod = 1.0, per_frame = 0.0;
  for (int d = 0; d < dim; d++) {
    double mean = st[d] / count, var = st[dim + d] / count - mean * mean;
    double fl = var < var_floor ? var_floor : var;
    per_frame += -0.5 * var / fl;
    prod *= fl;
    if (prod < 1.0e-10 || prod > 1.0e+10) {
      sum_log += log(prod);
      prod = 1.0;
    }
  }
  if (prod != 1.0) sum_log += log(prod);
  per_frame += -0.5 * (sum_log + 1.8378770664093454835606594728112 * dim);
  if (isnan(per_frame)) {
    KIO_WARN("GaussClusterable::Objf(), objf is NaN");
    return 0.0f;
  }
  return (float)(per_frame * count);
}

/* Clusterable::Distance: objf(a) + objf(b) - objf(a + b), in float, >= 0. */
static float distance(const bt_gauss *a, const bt_gauss *b, int dim, double *tmp) {
  int n = 2 * dim;
  for (int k = 0; k < n; k++) tmp[k] = a->st[k] + b->st[k];
  float oc = bt_objf(tmp, a->count + b->count, a->var_floor, dim);
  float ans = bt_objf(a->st, a->count, a->var_floor, dim) + bt_objf(b->st, b->count, b->var_floor, dim);
  ans = ans - oc;
  if (ans < 0) {
    if (fabsf(ans) > 0.01 * (1.0 + fabsf(oc)))
      KIO_WARN("Negative number returned (badly defined Clusterable class?): ans= %g", ans);
    ans = 0;
  }
  return ans;
}

static void gauss_add(bt_gauss *a, const bt_gauss *b, int dim) {
  a->count += b->count;
  for (int k = 0; k < 2 * dim; k++) a->st[k] += b->st[k];
}

/* ---- libstdc++'s heap (std::push_heap / std::pop_heap) ---- */
typedef struct {
  float d;
  int32_t c, i, j;
} qel;
typedef struct {
  qel *v;
  size_t n, cap;
  int by_dist_only; /* compartmentalized: operator> compares dist only */
} heap;

/* std::greater: a > b */
static int gt(const heap *h, const qel *a, const qel *b) {
  if (h->by_dist_only) return a->d > b->d;
  if (a->d != b->d) return a->d > b->d;
  if (a->i != b->i) return a->i > b->i;
  return a->j > b->j;
}

static void sift_up(heap *h, size_t hole, size_t top, qel v) {
  size_t parent = (hole - 1) / 2;
  while (hole > top && gt(h, &h->v[parent], &v)) {
    h->v[hole] = h->v[parent];
    hole = parent;
    parent = (hole - 1) / 2;
  }
  h->v[hole] = v;
}

static int heap_push(heap *h, qel e) {
  if (h->n == h->cap) {
    size_t c = h->cap ? 2 * h->cap : 256;
    qel *nv = realloc(h->v, c * sizeof *nv);
    if (!nv) return KIO_ERR;
    h->v = nv;
    h->cap = c;
  }
  h->v[h->n] = e;
  h->n++;
  sift_up(h, h->n - 1, 0, e);
  return KIO_OK;
}

static qel heap_pop(heap *h) {
  qel top = h->v[0];
  if (h->n > 1) {
    size_t len = h->n - 1;
    qel v = h->v[len];
    h->v[len] = h->v[0];
    size_t hole = 0, child = 0;
    while (child < (len - 1) / 2) {
      child = 2 * (child + 1);
      if (gt(h, &h->v[child], &h->v[child - 1])) child--;
      h->v[hole] = h->v[child];
      hole = child;
    }
    if ((len & 1) == 0 && child == (len - 2) / 2) {
      child = 2 * (child + 1);
      h->v[hole] = h->v[child - 1];
      hole = child - 1;
    }
    sift_up(h, hole, 0, v);
  }
  h->n--;
  return top;
}

/* ---- ClusterBottomUp / ClusterBottomUpCompartmentalized ---- */
typedef struct {
  int32_t n;
  bt_gauss *cl;  /* copies of the points; present 0 after a merge */
  int32_t *asg;
  float *dist;   /* (i * (i - 1)) / 2 + j, j < i */
} comp;

static float *dref(comp *c, int32_t i, int32_t j) { return &c->dist[(size_t)i * (i - 1) / 2 + j]; }

typedef struct {
  comp *c;
  int32_t nc, nclusters, min_clust;
  float thresh;
  int compart;
  heap h;
  int dim;
  double *tmp;
  float ans;
} clusterer;

static int set_distance(clusterer *k, int32_t ci, int32_t i, int32_t j) {
  comp *c = &k->c[ci];
  float d = distance(&c->cl[i], &c->cl[j], k->dim, k->tmp);
  *dref(c, i, j) = d;
  if (d < k->thresh && heap_push(&k->h, (qel){d, ci, i, j}) != KIO_OK) return KIO_ERR;
  return KIO_OK;
}

static int reconstruct(clusterer *k) {
  k->h.n = 0;
  for (int32_t ci = 0; ci < k->nc; ci++) {
    comp *c = &k->c[ci];
    for (int32_t i = 0; i < c->n; i++) {
      if (!c->cl[i].present) continue;
      for (int32_t j = 0; j < i; j++) {
        if (!c->cl[j].present) continue;
        if (k->compart) {
          if (set_distance(k, ci, i, j) != KIO_OK) return KIO_ERR;
        } else {
          float d = *dref(c, i, j);
          if (d <= k->thresh && heap_push(&k->h, (qel){d, ci, i, j}) != KIO_OK) return KIO_ERR;
        }
      }
    }
  }
  return KIO_OK;
}

static int merge(clusterer *k, int32_t ci, int32_t i, int32_t j) {
  comp *c = &k->c[ci];
  gauss_add(&c->cl[i], &c->cl[j], k->dim);
  c->cl[j].present = 0;
  c->asg[j] = i;
  k->ans -= *dref(c, i, j);
  k->nclusters--;
  for (int32_t m = 0; m < c->n; m++) {
    if (m == i || !c->cl[m].present) continue;
    if (set_distance(k, ci, m < i ? i : m, m < i ? m : i) != KIO_OK) return KIO_ERR;
    /* ClusterBottomUp checks the queue's size after each distance */
    if (!k->compart && k->h.n >= (size_t)c->n * (size_t)c->n && reconstruct(k) != KIO_OK)
      return KIO_ERR;
  }
  if (k->compart && k->h.n >= (size_t)((int64_t)k->nclusters * k->nclusters) &&
      reconstruct(k) != KIO_OK)
    return KIO_ERR;
  return KIO_OK;
}

/* Renumber: surviving clusters numbered in index order, chains followed. */
static void renumber(comp *c, int32_t *out) {
  int32_t *map = malloc(sizeof(int32_t) * (size_t)(c->n ? c->n : 1));
  int32_t next = 0;
  for (int32_t i = 0; i < c->n; i++) map[i] = c->cl[i].present ? next++ : -1;
  for (int32_t i = 0; i < c->n; i++) {
    int32_t ii = i;
    while (c->asg[ii] != ii) ii = c->asg[ii];
    out[i] = map[ii];
  }
  free(map);
}

int bt_cluster_bottom_up(const bt_gauss *const *points, const int32_t *npoints, int32_t ncomp,
                         int dim, float thresh, int32_t min_clust, int compartmentalized,
                         int32_t **assignments) {
  clusterer k = {.nc = ncomp, .min_clust = min_clust, .thresh = thresh,
                 .compart = compartmentalized, .dim = dim};
  k.h.by_dist_only = compartmentalized;
  int rc = KIO_ERR;
  k.c = calloc((size_t)ncomp, sizeof *k.c);
  k.tmp = malloc(sizeof(double) * 2 * (size_t)dim);
  if (!k.c || !k.tmp) goto out;
  for (int32_t ci = 0; ci < ncomp; ci++) {
    comp *c = &k.c[ci];
    c->n = npoints[ci];
    k.nclusters += c->n;
    c->cl = calloc((size_t)c->n + 1, sizeof *c->cl);
    c->asg = malloc(sizeof(int32_t) * ((size_t)c->n + 1));
    c->dist = malloc(sizeof(float) * ((size_t)c->n * (c->n - 1) / 2 + 1));
    if (!c->cl || !c->asg || !c->dist) goto out;
    for (int32_t i = 0; i < c->n; i++) {
      c->cl[i] = points[ci][i];
      c->cl[i].st = malloc(sizeof(double) * 2 * (size_t)dim);
      if (!c->cl[i].st) goto out;
      memcpy(c->cl[i].st, points[ci][i].st, sizeof(double) * 2 * (size_t)dim);
      c->cl[i].present = 1;
      c->asg[i] = i;
    }
  }
  for (int32_t ci = 0; ci < ncomp; ci++) {
    comp *c = &k.c[ci];
    for (int32_t i = 0; i < c->n; i++)
      for (int32_t j = 0; j < i; j++) {
        if (compartmentalized) {
          if (set_distance(&k, ci, i, j) != KIO_OK) goto out;
        } else {
          float d = distance(&c->cl[i], &c->cl[j], dim, k.tmp);
          *dref(c, i, j) = d;
          if (d <= thresh && heap_push(&k.h, (qel){d, ci, i, j}) != KIO_OK) goto out;
        }
      }
  }
  while (k.nclusters > k.min_clust && k.h.n) {
    qel e = heap_pop(&k.h);
    comp *c = &k.c[e.c];
    if (!c->cl[e.i].present || !c->cl[e.j].present) continue;
    float cached = *dref(c, e.i, e.j);
    if (fabsf(cached - e.d) <= 1.0e-05 * fabsf(e.d) && merge(&k, e.c, e.i, e.j) != KIO_OK)
      goto out;
  }
  for (int32_t ci = 0; ci < ncomp; ci++) renumber(&k.c[ci], assignments[ci]);
  rc = KIO_OK;
out:
  if (rc != KIO_OK) KIO_ERROR("out of memory clustering the tree's leaves");
  if (k.c)
    for (int32_t ci = 0; ci < ncomp; ci++) {
      for (int32_t i = 0; i < k.c[ci].n && k.c[ci].cl; i++) free(k.c[ci].cl[i].st);
      free(k.c[ci].cl);
      free(k.c[ci].asg);
      free(k.c[ci].dist);
    }
  free(k.c);
  free(k.tmp);
  free(k.h.v);
  return rc;
}
