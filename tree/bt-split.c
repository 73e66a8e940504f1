/* BuildTree (tree/build-tree.cc) and its steps of build-tree-utils.cc:
 * SplitDecisionTree with DecisionTreeSplitter / FindBestSplitForKey /
 * ComputeInitialSplit (AddToClustersOptimized), ClusterEventMapRestrictedByMap,
 * ClusterEventMapToNClustersRestrictedByMap and RenumberEventMap. Sums are
 * made in Kaldi's orders (the statistics' order, values ascending) and the
 * objectives rounded as Kaldi's, so every comparison decides the same. */
#include <float.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/sys/cpu-share.h"
#include "base/sys/kaldi-msg.h"
#include "base/sys/log.h"
#include "tree/bt-internal.h"

typedef struct {
  const tstat_table *t;
  const bt_questions *q;
  int dim;
  double *sum;      /* values x (2 dim) */
  double *cnt, *vf;
  uint8_t *present;
  int32_t vcap;
  double *c0, *c1;  /* 2 dim each */
} ctx;

static int lookup(const tstat_table *t, int32_t e, int32_t key, int32_t *val) {
  const int32_t *ev = t->ev + t->v[e].off;
  for (int32_t i = 0; i < t->v[e].nev; i++)
    if (ev[2 * i] == key) {
      *val = ev[2 * i + 1];
      return 1;
    }
  return 0;
}

static const double *st_of(const tstat_table *t, int32_t e) { return t->st + t->v[e].soff; }

/* FindBestSplitForKey without refinement: the best question's gain (float)
 * and its index (-1: none). */
static float best_split_for_key(ctx *c, const int32_t *idx, int32_t n, const bt_key_questions *kq,
                                int32_t *best_q) {
  const tstat_table *t = c->t;
  int D = 2 * c->dim;
  *best_q = -1;
  if (n <= 1) return 0.0f;
  int32_t vmax = -1, v;
  for (int32_t i = 0; i < n; i++) {
    if (!lookup(t, idx[i], kq->key, &v)) return 0.0f;
    if (v > vmax) vmax = v;
  }
  int32_t V = vmax + 1;
  if (V > c->vcap) {
    int32_t cap = V + 64;
    double *s = realloc(c->sum, sizeof(double) * (size_t)cap * (size_t)D);
    if (s) c->sum = s;
    double *a = realloc(c->cnt, sizeof(double) * (size_t)cap);
    if (a) c->cnt = a;
    double *b = realloc(c->vf, sizeof(double) * (size_t)cap);
    if (b) c->vf = b;
    uint8_t *p = realloc(c->present, (size_t)cap);
    if (p) c->present = p;
    if (!s || !a || !b || !p) return -1.0f;
    c->vcap = cap;
  }
  memset(c->present, 0, (size_t)V);
  for (int32_t i = 0; i < n; i++) {
    int32_t e = idx[i];
    if (t->v[e].is_null) continue;
    lookup(t, e, kq->key, &v);
    double *s = c->sum + (size_t)v * D;
    const double *x = st_of(t, e);
    if (!c->present[v]) {
      c->present[v] = 1;
      c->cnt[v] = 0.0 + t->v[e].count;
      c->vf[v] = t->v[e].var_floor;
      for (int k = 0; k < D; k++) s[k] = 0.0 + x[k];
    } else {
      c->cnt[v] += t->v[e].count;
      for (int k = 0; k < D; k++) s[k] += x[k];
    }
  }
  /* the total (SumClusterable) in c1's place first */
  double *tot = malloc(sizeof(double) * (size_t)D);
  if (!tot) return -1.0f;
  double tcnt = 0, tvf = 0;
  int32_t num_total = 0, first = -1;
  for (v = 0; v < V; v++) {
    if (!c->present[v]) continue;
    const double *s = c->sum + (size_t)v * D;
    if (first < 0) {
      first = v;
      tcnt = 0.0 + c->cnt[v];
      tvf = c->vf[v];
      for (int k = 0; k < D; k++) tot[k] = 0.0 + s[k];
    } else {
      tcnt += c->cnt[v];
      for (int k = 0; k < D; k++) tot[k] += s[k];
    }
    num_total++;
  }
  if (first < 0) {
    free(tot);
    return 0.0f;
  }
  float unsplit = bt_objf(tot, tcnt, tvf, c->dim);
  float best = 0.0f;
  uint8_t *asg = malloc((size_t)V);
  if (!asg) {
    free(tot);
    return -1.0f;
  }
  for (int32_t qi = 0; qi < kq->nq; qi++) {
    memset(asg, 0, (size_t)V);
    for (int32_t j = 0; j < kq->nqv[qi]; j++)
      if (kq->q[qi][j] >= 0 && kq->q[qi][j] < V) asg[kq->q[qi][j]] = 1;
    int32_t n1 = 0;
    for (v = 0; v < V; v++) n1 += c->present[v] && asg[v];
    int32_t n0 = num_total - n1, sub = n0 > num_total - n0 ? 0 : n1 > num_total - n1 ? 1 : -1;
    double *cl[2] = {c->c0, c->c1};
    double ccnt[2] = {0, 0}, cvf[2] = {0, 0};
    int has[2] = {0, 0};
    if (sub >= 0) {
      memcpy(cl[sub], tot, sizeof(double) * (size_t)D);
      for (int k = 0; k < D; k++) cl[sub][k] = 0.0 + tot[k];
      ccnt[sub] = 0.0 + tcnt;
      cvf[sub] = tvf;
      has[sub] = 1;
    }
    for (v = 0; v < V; v++) {
      if (!c->present[v]) continue;
      int a = asg[v];
      const double *s = c->sum + (size_t)v * D;
      if (a != sub) {
        if (!has[a]) {
          has[a] = 1;
          ccnt[a] = 0.0 + c->cnt[v];
          cvf[a] = c->vf[v];
          for (int k = 0; k < D; k++) cl[a][k] = 0.0 + s[k];
        } else {
          ccnt[a] += c->cnt[v];
          for (int k = 0; k < D; k++) cl[a][k] += s[k];
        }
        if (sub >= 0) {
          ccnt[sub] -= c->cnt[v];
          for (int k = 0; k < D; k++) cl[sub][k] -= s[k];
        }
      }
    }
    float objf = 0.0f;
    for (int a = 0; a < 2; a++)
      if (has[a]) objf += bt_objf(cl[a], ccnt[a], cvf[a], c->dim);
    float change = objf - unsplit;
    if (change > best) {
      best = change;
      *best_q = qi;
    }
  }
  free(asg);
  free(tot);
  return best;
}

/* ---- DecisionTreeSplitter ---- */
typedef struct {
  float best;
  int32_t leaf, kq, q;    /* key's index in the questions, question index */
  int32_t yes, no;        /* children (node indices), -1: a leaf */
  int32_t *idx, n;        /* the statistics while a leaf */
  struct pre *pre;        /* its split worked out ahead (a wave), or NULL */
} node;

/* A leaf's split done ahead: the two children's statistics and best
 * splits (their leaf numbers are given when Kaldi's order splits it). */
typedef struct pre {
  node y, n;
} pre;

typedef struct {
  node *v;
  int32_t n, cap;
} nodes;

static int find_best_split(ctx *c, node *nd) {
  nd->best = 0.0f;
  nd->kq = nd->q = -1;
  for (int32_t k = 0; k < c->q->nkeys; k++) {
    int32_t qi;
    float g = best_split_for_key(c, nd->idx, nd->n, &c->q->k[k], &qi);
    if (g < 0) return KIO_ERR;
    if (g > nd->best) {
      nd->best = g;
      nd->kq = k;
      nd->q = qi;
    }
  }
  return KIO_OK;
}

static int32_t new_node(nodes *ns, const node *from) {
  if (ns->n == ns->cap) {
    int32_t cap = ns->cap ? 2 * ns->cap : 1024;
    node *nv = realloc(ns->v, sizeof *nv * (size_t)cap);
    if (!nv) return -1;
    ns->v = nv;
    ns->cap = cap;
  }
  ns->v[ns->n] = *from;
  return ns->n++;
}

static int set_has(const int32_t *s, int32_t n, int32_t v) {
  for (int32_t i = 0; i < n; i++)
    if (s[i] == v) return 1;
  return 0;
}

/* DoSplitInternal's work, apart from the tree: the leaf's statistics by
 * its best question, and each side's best split. */
static int split_leaf(ctx *c, const node *nd, pre *out) {
  const bt_key_questions *kq = &c->q->k[nd->kq];
  const int32_t *ys = kq->q[nd->q];
  int32_t nys = kq->nqv[nd->q], key = kq->key;
  memset(out, 0, sizeof *out);
  out->y.idx = malloc(sizeof(int32_t) * (size_t)(nd->n + 1));
  out->n.idx = malloc(sizeof(int32_t) * (size_t)(nd->n + 1));
  if (!out->y.idx || !out->n.idx) return KIO_ERR;
  int32_t v;
  for (int32_t k = 0; k < nd->n; k++) {
    lookup(c->t, nd->idx[k], key, &v);
    if (set_has(ys, nys, v)) out->y.idx[out->y.n++] = nd->idx[k];
    else out->n.idx[out->n.n++] = nd->idx[k];
  }
  out->y.yes = out->y.no = out->n.yes = out->n.no = -1;
  if (find_best_split(c, &out->y) != KIO_OK || find_best_split(c, &out->n) != KIO_OK)
    return KIO_ERR;
  return KIO_OK;
}

static void pre_free(pre *p) {
  if (!p) return;
  free(p->y.idx);
  free(p->n.idx);
  free(p);
}

/* DecisionTreeSplitter::DoSplit: down to the leaf with the best split
 * (yes first on a tie), split it, best splits updated on the way up. */
static int do_split(ctx *c, nodes *ns, int32_t i, int32_t *next_leaf) {
  node *nd = &ns->v[i];
  if (nd->yes >= 0) {
    int32_t ch = ns->v[nd->yes].best >= ns->v[nd->no].best ? nd->yes : nd->no;
    if (do_split(c, ns, ch, next_leaf) != KIO_OK) return KIO_ERR;
    nd = &ns->v[i];
    float a = ns->v[nd->yes].best, b = ns->v[nd->no].best;
    nd->best = a > b ? a : b;
    return KIO_OK;
  }
  pre *p = nd->pre;
  if (!p) {
    p = malloc(sizeof *p);
    if (!p || split_leaf(c, nd, p) != KIO_OK) {
      pre_free(p);
      return KIO_ERR;
    }
  }
  nd->pre = NULL;
  p->y.leaf = nd->leaf;
  p->n.leaf = (*next_leaf)++;
  free(nd->idx);
  nd->idx = NULL;
  nd->leaf = -1;
  int32_t y = new_node(ns, &p->y);
  if (y >= 0) p->y.idx = NULL;  /* the node owns it now */
  int32_t o = y < 0 ? -1 : new_node(ns, &p->n);
  if (o < 0) {
    pre_free(p);
    return KIO_ERR;
  }
  free(p);
  nd = &ns->v[i];
  nd->yes = y;
  nd->no = o;
  float a = ns->v[y].best, b = ns->v[o].best;
  nd->best = a > b ? a : b;
  return KIO_OK;
}

/* The leaf do_split(i) would split. */
static int32_t next_leaf_of(const nodes *ns, int32_t i) {
  while (ns->v[i].yes >= 0) {
    const node *nd = &ns->v[i];
    i = ns->v[nd->yes].best >= ns->v[nd->no].best ? nd->yes : nd->no;
  }
  return i;
}

/* ---- waves: leaves likely split next, worked out on threads ---- */
typedef struct {
  ctx *c;
  nodes *ns;
  int32_t *task, ntask;
  int32_t next;
  pthread_mutex_t mu;
  int failed;
} wave;

static void *wave_worker(void *arg) {
  wave *w = arg;
  ctx c = {.t = w->c->t, .q = w->c->q, .dim = w->c->dim};
  c.c0 = malloc(sizeof(double) * 2 * (size_t)(c.dim + 1));
  c.c1 = malloc(sizeof(double) * 2 * (size_t)(c.dim + 1));
  for (;;) {
    pthread_mutex_lock(&w->mu);
    int32_t k = w->failed ? w->ntask : w->next++;
    pthread_mutex_unlock(&w->mu);
    if (k >= w->ntask) break;
    node *nd = &w->ns->v[w->task[k]];
    pre *p = malloc(sizeof *p);
    if (!c.c0 || !c.c1 || !p || split_leaf(&c, nd, p) != KIO_OK) {
      pre_free(p);
      pthread_mutex_lock(&w->mu);
      w->failed = 1;
      pthread_mutex_unlock(&w->mu);
      break;
    }
    nd->pre = p;
  }
  free(c.sum);
  free(c.cnt);
  free(c.vf);
  free(c.present);
  free(c.c0);
  free(c.c1);
  return NULL;
}

static const nodes *g_sort_ns;
static int by_gain(const void *a, const void *b) {
  float x = g_sort_ns->v[*(const int32_t *)a].best, y = g_sort_ns->v[*(const int32_t *)b].best;
  return (x < y) - (x > y);
}

/* Splits worked out ahead for the leaves with the largest gains above
 * thresh (need among them): the results are what do_split would compute,
 * so only time changes. */
static int run_wave(ctx *c, nodes *ns, int32_t need, float thresh, int32_t remaining,
                    int threads) {
  int32_t *task = malloc(sizeof(int32_t) * (size_t)(ns->n + 1)), nt = 0;
  if (!task) return KIO_ERR;
  for (int32_t i = 0; i < ns->n; i++)
    if (ns->v[i].yes < 0 && ns->v[i].idx && !ns->v[i].pre && ns->v[i].best > thresh &&
        ns->v[i].best > 0 && i != need)
      task[nt++] = i;
  g_sort_ns = ns;
  qsort(task, (size_t)nt, sizeof(int32_t), by_gain);
  /* a few per thread: the largest gains are split soonest, so little of
   * this is ever thrown away */
  int32_t k = 4 * threads - 1;
  if (remaining > 0 && k > remaining - 1) k = remaining - 1;
  if (nt > k) nt = k > 0 ? k : 0;
  task[nt++] = need;
  wave w = {.c = c, .ns = ns, .task = task, .ntask = nt};
  pthread_mutex_init(&w.mu, NULL);
  if (threads > nt) threads = nt;
  pthread_t th[64];
  int started = 0;
  for (int t = 1; t < threads && t < 64; t++)
    if (pthread_create(&th[started], NULL, wave_worker, &w) == 0) started++;
  wave_worker(&w);
  for (int t = 0; t < started; t++) pthread_join(th[t], NULL);
  pthread_mutex_destroy(&w.mu);
  free(task);
  return w.failed ? KIO_ERR : KIO_OK;
}

static kio_event_map *node_map(const ctx *c, const nodes *ns, int32_t i) {
  const node *nd = &ns->v[i];
  if (nd->yes < 0) return bt_em_const(nd->leaf);
  kio_event_map *m = calloc(1, sizeof *m);
  if (!m) return NULL;
  const bt_key_questions *kq = &c->q->k[nd->kq];
  m->kind = KIO_EM_SPLIT;
  m->key = kq->key;
  m->set = malloc(sizeof(int32_t) * (size_t)(kq->nqv[nd->q] + 1));
  if (m->set) {
    /* ConstIntegerSet: sorted (already) and unique */
    for (int32_t k = 0; k < kq->nqv[nd->q]; k++)
      if (!m->set_size || m->set[m->set_size - 1] != kq->q[nd->q][k])
        m->set[m->set_size++] = kq->q[nd->q][k];
    m->yes = node_map(c, ns, nd->yes);
    m->no = m->yes ? node_map(c, ns, nd->no) : NULL;
  }
  if (!m->set || !m->yes || !m->no) {
    bt_em_free(m);
    return NULL;
  }
  return m;
}

/* EventMap::Copy(new_leaves) with maps for leaves (sub[a] copied). */
static kio_event_map *copy_subst(const kio_event_map *m, kio_event_map **sub, int32_t n) {
  if (m->kind == KIO_EM_CONST) {
    if (m->answer >= 0 && m->answer < n && sub[m->answer]) return bt_em_copy(sub[m->answer], NULL, 0);
    return bt_em_const(m->answer);
  }
  kio_event_map *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  *c = *m;
  c->table = NULL;
  c->set = NULL;
  c->yes = c->no = NULL;
  c->table_size = 0;
  c->set_size = 0;
  if (m->kind == KIO_EM_TABLE) {
    c->table = calloc(m->table_size + 1, sizeof *c->table);
    if (!c->table) goto fail;
    c->table_size = m->table_size;
    for (uint32_t i = 0; i < m->table_size; i++)
      if (m->table[i] && !(c->table[i] = copy_subst(m->table[i], sub, n))) goto fail;
  } else {
    c->set = malloc(sizeof(int32_t) * (size_t)(m->set_size + 1));
    if (!c->set) goto fail;
    memcpy(c->set, m->set, sizeof(int32_t) * (size_t)m->set_size);
    c->set_size = m->set_size;
    if (!(c->yes = copy_subst(m->yes, sub, n)) || !(c->no = copy_subst(m->no, sub, n))) goto fail;
  }
  return c;
fail:
  bt_em_free(c);
  return NULL;
}


static int cmp_i32(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x > y) - (x < y);
}

/* RenumberEventMap */
static kio_event_map *renumber(const kio_event_map *m, int32_t *num_leaves) {
  int32_t n = 0, cnt = bt_em_count_leaves(m);
  int32_t *lv = malloc(sizeof(int32_t) * (size_t)(cnt + 1));
  if (!lv) return NULL;
  bt_em_leaves(m, lv, &n);
  qsort(lv, (size_t)n, sizeof(int32_t), cmp_i32);
  int32_t top = n ? lv[n - 1] + 1 : 0, cur = 0;
  int32_t *map = malloc(sizeof(int32_t) * (size_t)(top + 1));
  if (!map) {
    free(lv);
    return NULL;
  }
  for (int32_t i = 0; i < top; i++) map[i] = -1;
  for (int32_t i = 0; i < n; i++)
    if (i == 0 || lv[i] != lv[i - 1]) map[lv[i]] = cur++;
  kio_event_map *r = bt_em_copy(m, map, top);
  *num_leaves = cur;
  free(lv);
  free(map);
  return r;
}

typedef struct {
  ctx *c;
  nodes *ns;
  const int32_t *bld;
  int32_t n, next;
  pthread_mutex_t mu;
  int failed;
} roots_job;

static void *roots_worker(void *arg) {
  roots_job *j = arg;
  ctx c = {.t = j->c->t, .q = j->c->q, .dim = j->c->dim};
  c.c0 = malloc(sizeof(double) * 2 * (size_t)(c.dim + 1));
  c.c1 = malloc(sizeof(double) * 2 * (size_t)(c.dim + 1));
  for (;;) {
    pthread_mutex_lock(&j->mu);
    int32_t k = j->failed ? j->n : j->next++;
    pthread_mutex_unlock(&j->mu);
    if (k >= j->n) break;
    if (!c.c0 || !c.c1 || find_best_split(&c, &j->ns->v[j->bld[k]]) != KIO_OK) {
      pthread_mutex_lock(&j->mu);
      j->failed = 1;
      pthread_mutex_unlock(&j->mu);
      break;
    }
  }
  free(c.sum);
  free(c.cnt);
  free(c.vf);
  free(c.present);
  free(c.c0);
  free(c.c1);
  return NULL;
}

/* Each root's FindBestSplit, on threads. */
static int builders_best(ctx *c, nodes *ns, const int32_t *bld, int32_t n, int threads) {
  roots_job j = {.c = c, .ns = ns, .bld = bld, .n = n};
  pthread_mutex_init(&j.mu, NULL);
  pthread_t th[64];
  int started = 0;
  for (int t = 1; t < threads && t < n && t < 64; t++)
    if (pthread_create(&th[started], NULL, roots_worker, &j) == 0) started++;
  roots_worker(&j);
  for (int t = 0; t < started; t++) pthread_join(th[t], NULL);
  pthread_mutex_destroy(&j.mu);
  return j.failed ? KIO_ERR : KIO_OK;
}

static char *g(char *b, float v) { return (char *)kio_fmt_g(b, v); }

kio_event_map *bt_build_tree(const bt_questions *q, const bt_roots *r, const int32_t *p2n,
                             int32_t np, const tstat_table *t, const bt_opts *o, int *fallback) {
  *fallback = 0;
  float thresh = o->thresh, cluster_thresh = o->cluster_thresh;
  for (int32_t k = 0; k < q->nkeys; k++)
    if (q->k[k].refine_iters > 0) *fallback = 1; /* RefineClusters: not ours */
  if (thresh < 0 || cluster_thresh == 0) *fallback = 1;
  if (*fallback) return NULL;
  if (!(thresh > 0 || o->max_leaves > 0) || t->n == 0) {
    KIO_ERROR("BuildTree: needs --thresh > 0 or --max-leaves > 0, and statistics");
    return NULL;
  }
  int dim = -1;
  for (size_t e = 0; e < t->n; e++) {
    if (t->v[e].is_null) continue;
    if (dim < 0) dim = t->v[e].cols;
    if (t->v[e].rows != 2 || t->v[e].cols != dim) {
      KIO_ERROR("The tree statistics have entries of different dimensions");
      return NULL;
    }
  }
  if (dim < 0) dim = 0;
  ctx c = {.t = t, .q = q, .dim = dim};
  nodes ns = {0};
  kio_event_map *stub = NULL, *split = NULL, *clustered = NULL, *rounded = NULL, *fin = NULL;
  kio_event_map **subs = NULL;
  int32_t *filt = NULL, **reg = NULL, *nreg = NULL, nr = 0, *bld = NULL, *map = NULL;
  char b1[32], b2[32];
  c.c0 = malloc(sizeof(double) * 2 * (size_t)(dim + 1));
  c.c1 = malloc(sizeof(double) * 2 * (size_t)(dim + 1));
  if (!c.c0 || !c.c1) goto out;
  int threads = o->threads > 0 ? o->threads : kio_cpu_share(0);
  if (threads > 64) threads = 64;
  int32_t num_leaves = 0;
  stub = bt_stub_map(o->P, r, 0, r->nsets, p2n, np, &num_leaves);
  if (!stub) goto out;
  KIO_KALDI(BT_BEFORE, (int)num_leaves);
  /* FilterStatsByKey: the phones of not-split roots left out */
  filt = malloc(sizeof(int32_t) * (t->n + 1));
  if (!filt) goto out;
  int32_t nf = 0, v;
  for (size_t e = 0; e < t->n; e++) {
    if (!lookup(t, (int32_t)e, o->P, &v)) {
      KIO_ERROR("SplitStats: key %d is not present in an event vector of the statistics",
                (int)o->P);
      goto out;
    }
    int keep = 1;
    for (int32_t i = 0; i < r->nsets && keep; i++)
      if (!r->split[i] && set_has(r->set[i], r->nset[i], v)) keep = 0;
    if (keep) filt[nf++] = (int32_t)e;
  }
  if (bt_split_by_map(t, filt, nf, stub, &reg, &nreg, &nr) != KIO_OK) goto out;
  if (nr == 0) {
    KIO_ERROR("BuildTree: no statistics of phones whose roots are split");
    goto out;
  }
  bld = malloc(sizeof(int32_t) * (size_t)nr);
  if (!bld) goto out;
  for (int32_t i = 0; i < nr; i++) {
    node b = {.leaf = i, .yes = -1, .no = -1, .idx = reg[i], .n = nreg[i]};
    reg[i] = NULL;
    if ((bld[i] = new_node(&ns, &b)) < 0) goto out;
  }
  /* the roots' best splits: a wave of their own */
  if (builders_best(&c, &ns, bld, nr, threads) != KIO_OK) goto out;
  float like_impr = 0.0f, smallest = 1.0e+20f;
  int32_t count = 0;
  for (;;) {
    int32_t top = 0;
    for (int32_t i = 1; i < nr; i++)  /* the priority_queue's top: the largest (gain, i) */
      if (ns.v[bld[i]].best >= ns.v[bld[top]].best) top = i;
    float best = ns.v[bld[top]].best;
    if (!(best > thresh && (o->max_leaves <= 0 || num_leaves < o->max_leaves))) break;
    if (best < smallest) smallest = best;
    like_impr += best;
    int32_t leaf = next_leaf_of(&ns, bld[top]);
    if (!ns.v[leaf].pre &&
        run_wave(&c, &ns, leaf, thresh, o->max_leaves > 0 ? o->max_leaves - num_leaves : 0,
                 threads) != KIO_OK)
      goto out;
    if (do_split(&c, &ns, bld[top], &num_leaves) != KIO_OK) goto out;
    count++;
  }
  KIO_KALDI(BT_SPLIT, (int)count, (int)num_leaves);
  subs = calloc((size_t)nr, sizeof *subs);
  if (!subs) goto out;
  for (int32_t i = 0; i < nr; i++)
    if (!(subs[i] = node_map(&c, &ns, bld[i]))) goto out;
  if (!(split = copy_subst(stub, subs, nr))) goto out;
  if (cluster_thresh < 0.0f) {
    KIO_KALDI(BT_CLUSTER_THRESH, g(b1, smallest));
    cluster_thresh = smallest;
  }
  float normalizer = bt_sum_normalizer(t, NULL, (int32_t)t->n), nfilt = bt_sum_normalizer(t, filt, nf);
  if (kio_log_verbose() >= 1) {
    KIO_KALDI(BT_AFTER_SPLIT, (int)num_leaves, g(b1, like_impr / normalizer), g(b2, normalizer));
    KIO_KALDI(BT_SPLIT_PHONES, g(b1, like_impr / nfilt), g(b2, nfilt));
  }
  float before, after;
  if (bt_objf_given_map(t, split, dim, &before) != KIO_OK) goto out;
  int32_t removed = 0, removed2 = 0, nmap = num_leaves;
  int skip;
  map = malloc(sizeof(int32_t) * (size_t)(nmap + 1));
  if (!map) goto out;
  for (int32_t i = 0; i < nmap; i++) map[i] = -1;
  if (bt_cluster_restricted(t, split, stub, dim, cluster_thresh, 0, 0, map, nmap, &removed,
                         &skip) != KIO_OK)
    goto out;
  if (!(clustered = bt_em_copy(split, map, nmap))) goto out;
  KIO_KALDI(BT_REMOVED, (int)removed);
  if (o->round_num_leaves) {
    int32_t required = ((num_leaves - removed) / 8) * 8;
    for (int32_t i = 0; i < nmap; i++) map[i] = -1;
    if (bt_cluster_restricted(t, clustered, stub, dim, 0, 1, required, map, nmap, &removed2,
                           &skip) != KIO_OK)
      goto out;
    if (skip) {
      *fallback = 1;
      goto out;
    }
    if (!(rounded = bt_em_copy(clustered, map, nmap))) goto out;
    if (removed2 > 0) KIO_KALDI(BT_ROUNDED, (int)removed2);
    if (num_leaves - removed - removed2 != required)
      KIO_KALDI(BT_EXPECTED, (int)num_leaves, (int)removed, (int)removed2, (int)required);
  }
  int32_t final_leaves = 0;
  if (!(fin = renumber(rounded ? rounded : clustered, &final_leaves))) goto out;
  if (o->round_num_leaves && final_leaves != ((num_leaves - removed) / 8) * 8)
    KIO_KALDI(BT_REQUIRED, (int)final_leaves, (int)(((num_leaves - removed) / 8) * 8));
  if (bt_objf_given_map(t, fin, dim, &after) != KIO_OK) goto out;
  if (kio_log_verbose() >= 1) {
    KIO_KALDI(BT_OBJF_CHANGE, g(b1, (after - before) / normalizer));
    KIO_KALDI(BT_OBJF_SPLIT, g(b1, (after - before) / nfilt));
    KIO_KALDI(BT_NUM_LEAVES, (int)final_leaves);
  }
out:
  if (!fin && !*fallback && kio_log_num_errors() == 0) KIO_ERROR("BuildTree failed (out of memory)");
  for (int32_t i = 0; i < ns.n; i++) {
    free(ns.v[i].idx);
    pre_free(ns.v[i].pre);
  }
  free(ns.v);
  for (int32_t i = 0; subs && i < nr; i++) bt_em_free(subs[i]);
  free(subs);
  bt_lists_free(reg, nreg, nr);
  free(bld);
  free(filt);
  free(map);
  free(c.sum);
  free(c.cnt);
  free(c.vf);
  free(c.present);
  free(c.c0);
  free(c.c1);
  bt_em_free(stub);
  bt_em_free(split);
  bt_em_free(clustered);
  bt_em_free(rounded);
  return fin;
}
