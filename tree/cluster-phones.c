/* cluster-phones' questions (AutomaticallyObtainQuestions of
 * tree/build-tree.cc): the phone sets' statistics clustered top-down by
 * TreeCluster (cluster-utils.cc) with ClusterKMeans (10 tries, glibc's
 * rand() drawn in Kaldi's order) and RefineClusters, then
 * ObtainSetsOfPhones. Objectives rounded as Kaldi's (bt_objf). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/sys/cpu-share.h"
#include "base/sys/log.h"
#include "tree/cluster-phones.h"

/* A Gaussian's statistics with storage (Clusterable*). */
typedef struct {
  double count, vf;
  double *st;
} gs;

static int D2;   /* 2 * dim of the current run (one run at a time) */
static int DIM;

static int gs_new(gs *g) {
  g->count = 0;
  g->vf = 0;
  g->st = calloc((size_t)D2 + 1, sizeof(double));
  return g->st ? KIO_OK : KIO_ERR;
}
static void gs_copy(gs *d, const gs *s) { /* Copy(): zero + s */
  d->count = 0.0 + s->count;
  d->vf = s->vf;
  for (int k = 0; k < D2; k++) d->st[k] = 0.0 + s->st[k];
}
static void gs_add(gs *d, const gs *s) {
  d->count += s->count;
  for (int k = 0; k < D2; k++) d->st[k] += s->st[k];
}
static void gs_sub(gs *d, const gs *s) {
  d->count -= s->count;
  for (int k = 0; k < D2; k++) d->st[k] -= s->st[k];
}
static float gs_objf(const gs *g) { return bt_objf(g->st, g->count, g->vf, DIM); }

static _Thread_local double *g_tmp;  /* each thread's scratch (tries run on threads) */
/* ObjfPlus / ObjfMinus: a copy of a with b added or subtracted. */
static float objf_pm(const gs *a, const gs *b, int sign) {
  double c = 0.0 + a->count;
  c = sign > 0 ? c + b->count : c - b->count;
  for (int k = 0; k < D2; k++)
    g_tmp[k] = sign > 0 ? (0.0 + a->st[k]) + b->st[k] : (0.0 + a->st[k]) - b->st[k];
  return bt_objf(g_tmp, c, a->vf, DIM);
}

/* ---- RefineClusters with 2 clusters (top_n 2: each point's own cluster
 * and the other) ---- */
typedef struct {
  int32_t clust, time;
  float objf;
} pinfo;

static float refine(gs *const *pts, int32_t n, gs *cl, int32_t *asg, int32_t num_iters) {
  pinfo *info = malloc(sizeof(pinfo) * 2 * (size_t)n);
  int32_t *mine = malloc(sizeof(int32_t) * (size_t)n);
  if (!info || !mine) {
    free(info);
    free(mine);
    return -1.0f;
  }
  int32_t ctime[2] = {0, 0}, t = 0;
  float cobjf[2] = {gs_objf(&cl[0]), gs_objf(&cl[1])}, ans = 0;
  for (int32_t p = 0; p < n; p++) {
    int32_t my = asg[p], other = 1 - my;
    float oobjf = cobjf[other], plus = objf_pm(&cl[other], pts[p], 1);
    float dist = oobjf - plus;
    info[2 * p] = (pinfo){other, 0, -(dist - cobjf[other])};
    info[2 * p + 1] = (pinfo){my, 0, objf_pm(&cl[my], pts[p], -1)};
    mine[p] = 1;
  }
  for (int32_t it = 0; it < num_iters; it++) {
    int32_t cur = t;
    for (int32_t p = 0; p < n; p++) {
      int32_t si = mine[p];
      pinfo *self = &info[2 * p + si];
      if (self->time < ctime[self->clust]) {
        self->time = t;
        self->objf = objf_pm(&cl[self->clust], pts[p], -1);
      }
      float own = cobjf[self->clust], own_minus = self->objf;
      int32_t oi = 1 - si;
      pinfo *o = &info[2 * p + oi];
      if (o->time < ctime[o->clust]) {
        o->time = t;
        o->objf = objf_pm(&cl[o->clust], pts[p], 1);
      }
      float impr = o->objf + own_minus - cobjf[o->clust] - own;
      if (impr > 0) {
        ans += impr;
        t++;
        int32_t oc = self->clust, nc = o->clust;
        mine[p] = oi;
        asg[p] = nc;
        gs_sub(&cl[oc], pts[p]);
        gs_add(&cl[nc], pts[p]);
        cobjf[oc] = gs_objf(&cl[oc]);
        ctime[oc] = t;
        cobjf[nc] = gs_objf(&cl[nc]);
        ctime[nc] = t;
      }
    }
    if (t == cur) break;
  }
  free(info);
  free(mine);
  return ans;
}

static int32_t gcd(int32_t m, int32_t n) {
  while (n) {
    int32_t r = m % n;
    m = n;
    n = r;
  }
  return m < 0 ? -m : m;
}

/* ClusterKMeansOnce's one random draw: a skip coprime to n. */
static int32_t draw_skip(int32_t n) {
  int32_t skip = 1;
  if (n > 1) {
    skip = 1 + (rand() % (n - 1));
    while (gcd(skip, n) != 1) {
      if (skip == n - 1) skip = 0;
      skip++;
    }
  }
  return skip;
}

/* ClusterKMeansOnce with 2 clusters from skip: the improvement; cl, asg
 * out. */
static float kmeans_once(gs *const *pts, int32_t n, int32_t skip, gs *cl, int32_t *asg) {
  if (!g_tmp && !(g_tmp = malloc(sizeof(double) * ((size_t)D2 + 1)))) return -1e30f;
  int have[2] = {0, 0};
  for (int32_t i = 0, j = 0, c = 0; c != n; i = (i + skip) % n, j = (j + 1) % 2, c++) {
    if (!have[j]) {
      gs_copy(&cl[j], pts[i]);
      have[j] = 1;
    } else {
      gs_add(&cl[j], pts[i]);
    }
    asg[i] = j;
  }
  gs all;
  if (gs_new(&all) != KIO_OK) return -1e30f;
  gs_copy(&all, &cl[0]);
  gs_add(&all, &cl[1]);
  float ans = 0.0f;
  ans += gs_objf(&cl[0]);
  ans += gs_objf(&cl[1]);
  ans = ans - gs_objf(&all);
  free(all.st);
  for (int32_t it = 0; it < 20; it++) {
    float impr = refine(pts, n, cl, asg, 100);
    if (impr < 0 && impr == -1.0f) return -1e30f;
    ans += impr;
    if (impr == 0) break;
  }
  return ans;
}

/* ---- TreeCluster ---- */
typedef struct tnode {
  int is_leaf;
  int32_t index;
  struct tnode *parent;
  gs total;
  gs **points;
  int32_t *pidx, np;
  float best;
  gs cl[2];
  int32_t *asg;
  struct tnode *kids[2];
} tnode;

typedef struct {
  tnode **leaf, **nonleaf;
  int32_t nleaf, nnonleaf;
  /* the queue of (gain, node): largest first */
  tnode **q;
  int32_t nq;
  int tie;  /* equal gains met: Kaldi's order is its nodes' addresses */
} tree;

/* ClusterKMeans' 10 tries: the draws made in Kaldi's order first, then
 * the tries (independent given their draws) on threads. */
typedef struct {
  gs *const *pts;
  int32_t n, skip;
  gs cl[2];
  int32_t *asg;
  float ans;
} ktry;

typedef struct {
  ktry *k;
  int first, step;
} tgroup;

static void *group_worker(void *arg) {
  tgroup *g = arg;
  for (int i = g->first; i < 10; i += g->step)
    g->k[i].ans = kmeans_once(g->k[i].pts, g->k[i].n, g->k[i].skip, g->k[i].cl, g->k[i].asg);
  free(g_tmp);
  g_tmp = NULL;
  return NULL;
}

static int g_threads = 1;

static int find_best(tree *t, tnode *nd) {
  nd->best = 0;
  if (nd->np <= 1) return KIO_OK;
  ktry k[10];
  memset(k, 0, sizeof k);
  int ok = gs_new(&nd->cl[0]) == KIO_OK && gs_new(&nd->cl[1]) == KIO_OK &&
           (nd->asg = malloc(sizeof(int32_t) * (size_t)nd->np));
  for (int i = 0; i < 10; i++) {
    k[i] = (ktry){.pts = nd->points, .n = nd->np, .skip = draw_skip(nd->np)};
    k[i].asg = malloc(sizeof(int32_t) * (size_t)nd->np);
    ok = ok && k[i].asg && gs_new(&k[i].cl[0]) == KIO_OK && gs_new(&k[i].cl[1]) == KIO_OK;
  }
  if (ok) {
    /* small nodes: not worth a thread */
    int th = nd->np < 8 ? 1 : g_threads;
    tgroup gr[10];
    pthread_t tid[10];
    int started[10] = {0};
    for (int w = 1; w < th; w++) {
      gr[w] = (tgroup){k, w, th};
      started[w] = pthread_create(&tid[w], NULL, group_worker, &gr[w]) == 0;
    }
    for (int i = 0; i < 10; i++)
      if (i % th == 0 || !started[i % th])
        k[i].ans = kmeans_once(k[i].pts, k[i].n, k[i].skip, k[i].cl, k[i].asg);
    for (int w = 1; w < th; w++)
      if (started[w]) pthread_join(tid[w], NULL);
  }
  float best = 0;
  for (int i = 0; ok && i < 10; i++) {
    if (k[i].ans == -1e30f) ok = 0;
    else if (i == 0 || k[i].ans > best) {
      best = k[i].ans;
      gs_copy(&nd->cl[0], &k[i].cl[0]);
      gs_copy(&nd->cl[1], &k[i].cl[1]);
      memcpy(nd->asg, k[i].asg, sizeof(int32_t) * (size_t)nd->np);
    }
  }
  for (int i = 0; i < 10; i++) {
    free(k[i].asg);
    free(k[i].cl[0].st);
    free(k[i].cl[1].st);
  }
  if (!ok) return KIO_ERR;
  nd->best = best;
  if (best > 0) {
    for (int32_t i = 0; i < t->nq; i++)
      if (t->q[i]->best == best) t->tie = 1;
    t->q[t->nq++] = nd;
  }
  return KIO_OK;
}

static int do_split(tree *t, tnode *nd) {
  for (int i = 0; i < 2; i++) {
    tnode *c = calloc(1, sizeof *c);
    if (!c) return KIO_ERR;
    nd->kids[i] = c;
    c->is_leaf = 1;
    c->parent = nd;
    c->total = nd->cl[i];
    c->points = malloc(sizeof(gs *) * (size_t)nd->np);
    c->pidx = malloc(sizeof(int32_t) * (size_t)nd->np);
    if (!c->points || !c->pidx) return KIO_ERR;
    if (i == 0) {
      c->index = nd->index;
      t->leaf[c->index] = c;
    } else {
      c->index = t->nleaf;
      t->leaf[t->nleaf++] = c;
    }
  }
  for (int32_t i = 0; i < nd->np; i++) {
    tnode *c = nd->kids[nd->asg[i]];
    c->points[c->np] = nd->points[i];
    c->pidx[c->np++] = nd->pidx[i];
  }
  nd->is_leaf = 0;
  nd->index = t->nnonleaf;
  t->nonleaf[t->nnonleaf++] = nd;
  for (int i = 0; i < 2; i++) {
    if (nd->kids[i]->np == 0) KIO_WARN("Warning: tree clustering: leaf with no data");
    if (find_best(t, nd->kids[i]) != KIO_OK) return KIO_ERR;
  }
  return KIO_OK;
}

static void free_node(tnode *n) {
  if (!n) return;
  free(n->total.st);
  if (n->is_leaf) {
    free(n->cl[0].st);
    free(n->cl[1].st);
  }
  free(n->points);
  free(n->pidx);
  free(n->asg);
  free(n);
}

static int cmp_vec(const void *a, const void *b) {
  const int32_t *x = *(int32_t *const *)a, *y = *(int32_t *const *)b;
  int32_t i = 0;
  for (;; i++) {
    if (x[0] == i || y[0] == i) return (x[0] > i) - (y[0] > i);
    if (x[1 + i] != y[1 + i]) return x[1 + i] < y[1 + i] ? -1 : 1;
  }
}

/* The same sets together, the first position first. */
static int cmp_vec_pos(const void *a, const void *b) {
  int c = cmp_vec(a, b);
  if (c) return c;
  const int32_t *x = *(int32_t *const *)a, *y = *(int32_t *const *)b;
  return (x[1 + x[0]] > y[1 + y[0]]) - (x[1 + x[0]] < y[1 + y[0]]);
}

static int cmp_i32(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x > y) - (x < y);
}

int cp_questions(gs_point *pts_in, int32_t n, int dim, const int32_t *const *sets,
                 const int32_t *nsets, int32_t ***out, int32_t *nout, int *tie) {
  DIM = dim;
  D2 = 2 * dim;
  *tie = 0;
  int rc = KIO_ERR;
  g_threads = kio_cpu_share(10);
  g_tmp = malloc(sizeof(double) * ((size_t)D2 + 1));
  gs *pts = calloc((size_t)n, sizeof *pts);
  gs **pp = malloc(sizeof(gs *) * (size_t)n);
  tree t = {0};
  t.leaf = calloc((size_t)n + 1, sizeof *t.leaf);
  t.nonleaf = calloc((size_t)n + 1, sizeof *t.nonleaf);
  t.q = calloc(2 * (size_t)n + 2, sizeof *t.q);
  int32_t **raw = NULL, nraw = 0;
  if (!g_tmp || !pts || !pp || !t.leaf || !t.nonleaf || !t.q) goto out;
  for (int32_t i = 0; i < n; i++) {
    pts[i] = (gs){pts_in[i].count, pts_in[i].var_floor, pts_in[i].st};
    pp[i] = &pts[i];
  }
  tnode *top = calloc(1, sizeof *top);
  if (!top) goto out;
  top->is_leaf = 1;
  t.leaf[t.nleaf++] = top;
  top->points = malloc(sizeof(gs *) * (size_t)n);
  top->pidx = malloc(sizeof(int32_t) * (size_t)n);
  if (!top->points || !top->pidx || gs_new(&top->total) != KIO_OK) goto out;
  for (int32_t i = 0; i < n; i++) {
    top->points[i] = pp[i];
    top->pidx[i] = i;
    if (i == 0) gs_copy(&top->total, pp[0]);
    else gs_add(&top->total, pp[i]);
  }
  top->np = n;
  if (find_best(&t, top) != KIO_OK) goto out;
  while (t.nleaf < n && t.nq) {
    int32_t b = 0;
    for (int32_t i = 1; i < t.nq; i++)
      if (t.q[i]->best > t.q[b]->best) b = i;
    tnode *nd = t.q[b];
    t.q[b] = t.q[--t.nq];
    if (do_split(&t, nd) != KIO_OK) goto out;
  }
  *tie = t.tie;
  /* ObtainSetsOfPhones */
  int32_t L = t.nleaf, NL = t.nnonleaf, S = L + NL;
  int32_t *parent = malloc(sizeof(int32_t) * (size_t)S), *leafof = malloc(sizeof(int32_t) * (size_t)n);
  raw = calloc((size_t)S + (size_t)n, sizeof *raw);
  int32_t *rawn = calloc((size_t)S + (size_t)n, sizeof *rawn);
  size_t totp = 0;
  for (int32_t i = 0; i < n; i++) totp += (size_t)nsets[i];
  if (!parent || !leafof || !raw || !rawn) goto out;
  for (int32_t l = 0; l < L; l++) {
    tnode *pa = t.leaf[l]->parent;
    parent[l] = !pa ? 0 : pa->is_leaf ? pa->index : S - 1 - pa->index;
    for (int32_t k = 0; k < t.leaf[l]->np; k++) leafof[t.leaf[l]->pidx[k]] = l;
  }
  for (int32_t j = 0; j < NL; j++) {
    tnode *pa = t.nonleaf[j]->parent;
    parent[S - 1 - j] = !pa ? S - 1 - j : S - 1 - pa->index;
  }
  for (int32_t j = 0; j < S; j++) {
    raw[j] = malloc(sizeof(int32_t) * (totp + 1));
    if (!raw[j]) goto out;
  }
  for (int32_t i = 0; i < n; i++)
    for (int32_t k = 0; k < nsets[i]; k++) raw[leafof[i]][rawn[leafof[i]]++] = sets[i][k];
  for (int32_t j = 0; j < S; j++) {
    qsort(raw[j], (size_t)rawn[j], sizeof(int32_t), cmp_i32);
    if (parent[j] < S - 1)
      for (int32_t k = 0; k < rawn[j]; k++) raw[parent[j]][rawn[parent[j]]++] = raw[j][k];
  }
  nraw = S;
  for (int32_t i = 0; i < n; i++) {
    raw[nraw] = malloc(sizeof(int32_t) * ((size_t)nsets[i] + 1));
    if (!raw[nraw]) goto out;
    memcpy(raw[nraw], sets[i], sizeof(int32_t) * (size_t)nsets[i]);
    rawn[nraw++] = nsets[i];
  }
  /* the bundle's order: the clusters from the top down (output indices
   * descending), then the phone sets; empty sets and repeats dropped (the
   * first kept) */
  int32_t **v = malloc(sizeof(int32_t *) * (size_t)nraw), **srt = malloc(sizeof(int32_t *) * (size_t)nraw);
  if (!v || !srt) goto out;
  for (int32_t i = 0; i < nraw; i++) {
    int32_t r = i < S ? S - 1 - i : i;
    v[i] = malloc(sizeof(int32_t) * ((size_t)rawn[r] + 2));
    if (!v[i]) goto out;
    v[i][0] = rawn[r];
    memcpy(v[i] + 1, raw[r], sizeof(int32_t) * (size_t)rawn[r]);
    v[i][1 + rawn[r]] = i;  /* the position, after the phones */
    srt[i] = v[i];
  }
  qsort(srt, (size_t)nraw, sizeof *srt, cmp_vec_pos);
  uint8_t *drop = calloc((size_t)nraw, 1);
  if (!drop) goto out;
  for (int32_t i = 0; i < nraw; i++)
    if (srt[i][0] == 0 || (i && !cmp_vec(&srt[i], &srt[i - 1]))) drop[srt[i][1 + srt[i][0]]] = 1;
  free(srt);
  int32_t m = 0;
  for (int32_t i = 0; i < nraw; i++) {
    if (drop[i]) {
      free(v[i]);
      continue;
    }
    v[m++] = v[i];
  }
  free(drop);
  *out = v;
  *nout = m;
  free(parent);
  free(leafof);
  free(rawn);
  rc = KIO_OK;
out:
  if (rc != KIO_OK) KIO_ERROR("out of memory clustering the phones");
  for (int32_t i = 0; i < nraw; i++) free(raw[i]);
  free(raw);
  for (int32_t i = 0; i < t.nleaf; i++) free_node(t.leaf[i]);
  for (int32_t i = 0; i < t.nnonleaf; i++) free_node(t.nonleaf[i]);
  free(t.leaf);
  free(t.nonleaf);
  free(t.q);
  free(pts);
  free(pp);
  free(g_tmp);
  return rc;
}
