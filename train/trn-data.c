/* The trainer's resident data: every job's features (through the features
 * rspecifier, the recipe's pipeline computed in process), training graphs
 * compiled from the transcripts once (train-graphs/, Kaldi's
 * compile-train-graphs), speakers and the current alignments. */
#include "train/trainer.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/io/io.h"
#include "base/io/table.h"
#include "base/sys/kaldi-msg.h"
#include "base/sys/log.h"
#include "train-graphs/train-graphs.h"
#include "train/trn-log.h"

char *trn_subst(const char *tmpl, int job, int iter) {
  size_t cap = strlen(tmpl) * 2 + 64, n = 0;
  char *out = malloc(cap);
  if (!out) return NULL;
  for (const char *p = tmpl; *p;) {
    char num[24];
    const char *rep = NULL;
    size_t skip = 0;
    if (!strncmp(p, "JOB", 3)) { snprintf(num, sizeof num, "%d", job); rep = num; skip = 3; }
    else if (!strncmp(p, "ITER", 4) && iter >= 0) {
      snprintf(num, sizeof num, "%d", iter);
      rep = num;
      skip = 4;
    }
    size_t add = rep ? strlen(rep) : 1;
    if (n + add + 1 > cap) {
      cap = 2 * (n + add + 1);
      char *o = realloc(out, cap);
      if (!o) { free(out); return NULL; }
      out = o;
    }
    if (rep) { memcpy(out + n, rep, add); n += add; p += skip; }
    else out[n++] = *p++;
  }
  out[n] = 0;
  return out;
}

static char *path2(const char *a, const char *b) {
  size_t n = strlen(a) + strlen(b) + 2;
  char *s = malloc(n);
  if (s) snprintf(s, n, "%s/%s", a, b);
  return s;
}

/* Keys sorted for lookups (index into d->u). */
static const trn_data *g_sort_d;
static int key_cmp(const void *a, const void *b) {
  return strcmp(g_sort_d->u[*(const int32_t *)a].key, g_sort_d->u[*(const int32_t *)b].key);
}
typedef struct { const trn_data *d; int32_t *idx; } key_index;
static int32_t key_find(const key_index *ki, const char *key) {
  int32_t lo = 0, hi = ki->d->n - 1;
  while (lo <= hi) {
    int32_t mid = (lo + hi) / 2;
    int c = strcmp(ki->d->u[ki->idx[mid]].key, key);
    if (c == 0) return ki->idx[mid];
    if (c < 0) lo = mid + 1; else hi = mid - 1;
  }
  return -1;
}

/* Features of one job, appended to d (grown as needed). */
static int load_feats(trn_data *d, int job, const char *rspec, int32_t *cap) {
  kio_seq_reader *r = NULL;
  if (kio_seq_open(&r, rspec, &kio_matrix_holder) != KIO_OK) return KIO_ERR;
  int rc = KIO_OK;
  for (; !kio_seq_done(r); kio_seq_next(r)) {
    if (d->n == *cap) {
      int32_t nc = *cap ? 2 * *cap : 1024;
      trn_utt *u = realloc(d->u, sizeof *u * (size_t)nc);
      kio_matrix *fs = realloc(d->feat_store, sizeof *fs * (size_t)nc);
      if (u) d->u = u;
      if (fs) d->feat_store = fs;
      if (!u || !fs) { KIO_ERROR("out of memory"); rc = KIO_ERR; break; }
      *cap = nc;
    }
    trn_utt *u = &d->u[d->n];
    memset(u, 0, sizeof *u);
    kio_matrix *m = &d->feat_store[d->n];
    memset(m, 0, sizeof *m);
    u->key = strdup(kio_seq_key(r));
    u->job = job;
    u->spk = -1;
    if (!u->key || kio_seq_take(r, m) != KIO_OK) { rc = KIO_ERR; break; }
    d->frames += m->rows;
    d->n++;
  }
  if (kio_seq_close(r) != KIO_OK) rc = KIO_ERR;
  return rc;
}

int trn_data_reload_feats(trn_data *d, const char *rspec_tmpl, int iter) {
  int32_t i = 0;
  for (int j = 0; j < d->nj; j++) {
    char *rs = trn_subst(rspec_tmpl, j + 1, iter);
    kio_seq_reader *r = NULL;
    if (!rs || kio_seq_open(&r, rs, &kio_matrix_holder) != KIO_OK) { free(rs); return KIO_ERR; }
    int rc = KIO_OK;
    for (; !kio_seq_done(r) && rc == KIO_OK; kio_seq_next(r), i++) {
      if (i >= d->n_store || d->store_job[i] != j || strcmp(d->store_key[i], kio_seq_key(r))) {
        KIO_ERROR("Features of %s: utterance %s is not the one read before", rs,
                  kio_seq_key(r));
        rc = KIO_ERR;
        break;
      }
      int32_t rows = d->feat_store[i].rows;
      if (kio_seq_take(r, &d->feat_store[i]) != KIO_OK) rc = KIO_ERR;
      else if (d->feat_store[i].rows != rows) {
        KIO_ERROR("Features of %s changed length in %s", kio_seq_key(r), rs);
        rc = KIO_ERR;
      }
    }
    if (kio_seq_close(r) != KIO_OK) rc = KIO_ERR;
    free(rs);
    if (rc != KIO_OK) return KIO_ERR;
  }
  return KIO_OK;
}

static int load_speakers(trn_data *d, const trn_cfg *c, const key_index *ki) {
  char **names = NULL;
  int32_t nn = 0, cap = 0;
  int rc = KIO_OK;
  for (int j = 0; j < d->nj && rc == KIO_OK; j++) {
    char rel[64];
    snprintf(rel, sizeof rel, "%d/utt2spk", j + 1);
    char *p = path2(c->sdata, rel);
    FILE *f = p ? fopen(p, "r") : NULL;
    if (!f) {
      KIO_ERROR("Could not open %s", p ? p : rel);
      free(p);
      rc = KIO_ERR;
      break;
    }
    char line[4096], utt[2048], spk[2048];
    while (fgets(line, sizeof line, f)) {
      if (sscanf(line, "%2047s %2047s", utt, spk) != 2) continue;
      int32_t ui = key_find(ki, utt);
      if (ui < 0) continue;
      /* utt2spk is sorted, so a speaker's lines are together (mostly); a
       * short linear look-back keeps it simple. */
      int32_t s = -1;
      for (int32_t k = nn - 1; k >= 0 && k >= nn - 8; k--)
        if (!strcmp(names[k], spk)) { s = k; break; }
      if (s < 0) {
        for (int32_t k = 0; k < nn - 8; k++)
          if (!strcmp(names[k], spk)) { s = k; break; }
      }
      if (s < 0) {
        if (nn == cap) {
          cap = cap ? 2 * cap : 256;
          char **nw = realloc(names, sizeof *nw * (size_t)cap);
          if (!nw) { rc = KIO_ERR; break; }
          names = nw;
        }
        names[nn] = strdup(spk);
        s = nn++;
      }
      d->u[ui].spk = s;
    }
    fclose(f);
    free(p);
  }
  for (int32_t k = 0; k < nn; k++) free(names[k]);
  free(names);
  /* utterances without a speaker line: a speaker each */
  for (int32_t i = 0; i < d->n; i++)
    if (d->u[i].spk < 0) d->u[i].spk = nn++;
  d->num_spk = nn;
  return rc;
}

/* One job's fsts.JOB.gz, written on a thread of its own once the job's
 * graphs are compiled: the gzip children of the jobs run side by side (as
 * the stock script's jobs do) while the next jobs compile, instead of one
 * after the other on the critical path. The thread owns the job's log
 * (compile_graphs.JOB.log) from then on and closes it. */
typedef struct {
  kio_writer *w;
  trn_log *lg;
  char **keys;
  tgraph_graph *g;        /* bytes only (the CSR forms are the store's) */
  int32_t n, cap;
  int rc;
  pthread_t th;
  int started;
} graph_out;

static void graph_out_clear(graph_out *o) {
  for (int32_t i = 0; i < o->n; i++) { free(o->keys[i]); tgraph_graph_free(&o->g[i]); }
  free(o->keys);
  free(o->g);
  o->keys = NULL;
  o->g = NULL;
  o->n = o->cap = 0;
}

static int graph_out_add(graph_out *o, const char *key, tgraph_graph *g) {
  if (o->n == o->cap) {
    int32_t nc = o->cap ? 2 * o->cap : 512;
    char **k = realloc(o->keys, sizeof *k * (size_t)nc);
    if (k) o->keys = k;
    tgraph_graph *gg = realloc(o->g, sizeof *gg * (size_t)nc);
    if (gg) o->g = gg;
    if (!k || !gg) { KIO_ERROR("out of memory"); return KIO_ERR; }
    o->cap = nc;
  }
  if (!(o->keys[o->n] = strdup(key))) { KIO_ERROR("out of memory"); return KIO_ERR; }
  o->g[o->n++] = *g;  /* the bytes are taken */
  memset(g, 0, sizeof *g);
  return KIO_OK;
}

static void *graph_out_thread(void *arg) {
  graph_out *o = arg;
  trn_log_use(o->lg);
  int rc = KIO_OK;
  for (int32_t i = 0; i < o->n && rc == KIO_OK; i++) {
    rc = kio_writer_write(o->w, o->keys[i], &o->g[i]);
    tgraph_graph_free(&o->g[i]);
  }
  if (rc == KIO_OK) rc = kio_writer_close(o->w);
  else kio_writer_discard(o->w);
  o->w = NULL;
  graph_out_clear(o);
  trn_log_use(NULL);
  trn_log_close(o->lg);
  o->lg = NULL;
  o->rc = rc;
  return NULL;
}

/* Writes on a thread of its own (on this one if none can be made). */
static void graph_out_start(graph_out *o) {
  o->started = pthread_create(&o->th, NULL, graph_out_thread, o) == 0;
  if (!o->started) graph_out_thread(o);
}

static int graph_out_finish(graph_out *o) {
  if (o->started) pthread_join(o->th, NULL);
  o->started = 0;
  if (o->w) kio_writer_discard(o->w);  /* never handed to a thread */
  o->w = NULL;
  graph_out_clear(o);
  trn_log_close(o->lg);
  o->lg = NULL;
  return o->rc;
}

static int load_graphs(trn_data *d, const trn_cfg *c, const kio_tmodel *tm, const key_index *ki) {
  char *tree_path = path2(c->dir, "tree"), *lex = path2(c->lang, "L.fst");
  char *dis = path2(c->lang, "phones/disambig.int");
  kio_ctx_dep tree;
  memset(&tree, 0, sizeof tree);
  int32_t *disambig = NULL, num_disambig = 0;
  tgraph_compiler *gc = NULL;
  int rc = KIO_ERR;
  tgraph_opts go;
  tgraph_opts_default(&go);
  go.transition_scale = 0.0f;  /* compile-train-graphs' defaults */
  go.self_loop_scale = 0.0f;
  double t_compile = 0.0;
  graph_out *outs = calloc((size_t)d->nj, sizeof *outs);
  if (!outs) { KIO_ERROR("out of memory"); goto done; }
  if (!tree_path || !lex || !dis || kio_ctx_dep_read(tree_path, &tree) != KIO_OK ||
      tgraph_read_disambig(dis, KIO_KM_CTG_DISAMBIG, &disambig, &num_disambig) != KIO_OK ||
      tgraph_create(&gc, tm, &tree, lex, disambig, num_disambig, &go) != KIO_OK)
    goto done;
  d->graph_store = calloc((size_t)(d->n ? d->n : 1), sizeof *d->graph_store);
  if (!d->graph_store) { KIO_ERROR("out of memory"); goto done; }
  enum { BATCH = 512 };
  kio_int_vec words[BATCH];
  char *keys[BATCH];
  tgraph_graph out[BATCH];
  memset(words, 0, sizeof words);
  memset(keys, 0, sizeof keys);
  rc = KIO_OK;
  for (int j = 0; j < d->nj && rc == KIO_OK; j++) {
    graph_out *go_j = &outs[j];
    char *rs = trn_subst(c->text_rspec, j + 1, -1);
    kio_seq_reader *r = NULL;
    if (!rs || kio_seq_open(&r, rs, &kio_int_vec_holder) != KIO_OK) { free(rs); rc = KIO_ERR; break; }
    /* with the graphs, compile_graphs.JOB.log: compile-train-graphs' lines,
     * as the stock script's job leaves them */
    char *wx = NULL, *logp = NULL, *cmd = NULL;
    if (asprintf(&wx, "ark:|gzip -c >%s/fsts.%d.gz", c->dir, j + 1) < 0) wx = NULL;
    if (asprintf(&logp, "%s/log/compile_graphs.%d.log", c->dir, j + 1) < 0) logp = NULL;
    if (wx && asprintf(&cmd, "compile-train-graphs --read-disambig-syms=%s %s %s/%d.mdl %s \"%s\" "
                       "\"%s\" (in process: gmm-train-gpu)", dis, tree_path, c->dir,
                       c->equal_align ? 0 : c->start_iter, lex, rs,
                       wx) < 0)
      cmd = NULL;
    if (!wx || !logp || !cmd ||
        (c->write_graphs && !(go_j->lg = trn_log_open(logp, "compile-train-graphs", cmd))))
      rc = KIO_ERR;
    free(logp);
    free(cmd);
    if (rc == KIO_OK) trn_log_use(go_j->lg);
    if (rc == KIO_OK && c->write_graphs &&
        kio_writer_open(&go_j->w, wx, &tgraph_graph_holder) != KIO_OK)
      rc = KIO_ERR;
    long num_succeed = 0, num_fail = 0;
    while (rc == KIO_OK && !kio_seq_done(r)) {
      int n = 0;
      for (; n < BATCH && !kio_seq_done(r); n++, kio_seq_next(r)) {
        free(keys[n]);
        keys[n] = strdup(kio_seq_key(r));
        if (!keys[n] || kio_seq_take(r, &words[n]) != KIO_OK) { rc = KIO_ERR; break; }
      }
      if (rc != KIO_OK) break;
      memset(out, 0, sizeof out);
      int what = TGRAPH_CSR | (go_j->w ? TGRAPH_BYTES : 0);
      double tc = kio_now_s();
      if (tgraph_compile(gc, n, words, what, c->threads, out) != KIO_OK) { rc = KIO_ERR; break; }
      t_compile += kio_now_s() - tc;
      for (int i = 0; i < n; i++) {
        int32_t ui = key_find(ki, keys[i]);
        if (ui >= 0 && !d->u[ui].graph) {
          d->graph_store[ui] = out[i].fst;
          memset(&out[i].fst, 0, sizeof out[i].fst);
          d->u[ui].graph = &d->graph_store[ui];
        }
        if (out[i].empty) {
          KIO_KALDI(CTG_EMPTY_GRAPH, keys[i]);
          num_fail++;
        } else {
          num_succeed++;
          if (go_j->w && rc == KIO_OK) rc = graph_out_add(go_j, keys[i], &out[i]);
        }
        tgraph_graph_free(&out[i]);
      }
    }
    if (rc == KIO_OK)
      KIO_KALDI(CTG_DONE, num_succeed, num_fail);
    if (r && kio_seq_close(r) != KIO_OK) rc = KIO_ERR;
    trn_log_use(NULL);
    if (rc == KIO_OK && go_j->w) graph_out_start(go_j);  /* the thread closes the log */
    else if (rc == KIO_OK) { trn_log_close(go_j->lg); go_j->lg = NULL; }
    free(wx);
    free(rs);
  }
  for (int i = 0; i < BATCH; i++) { free(keys[i]); free(words[i].v); }
done:;
  double tw = kio_now_s();
  for (int j = 0; outs && j < d->nj; j++)
    if (graph_out_finish(&outs[j]) != KIO_OK) rc = KIO_ERR;
  if (rc == KIO_OK)
    KIO_VLOG(1, "Graphs: compiling %.2f s, then waiting %.2f s for the fsts.JOB.gz writers",
             t_compile, kio_now_s() - tw);
  free(outs);
  tgraph_free(gc);
  free(disambig);
  kio_ctx_dep_free(&tree);
  free(tree_path);
  free(lex);
  free(dis);
  return rc;
}

static int load_ali(trn_data *d, const char *tmpl, const key_index *ki) {
  for (int j = 0; j < d->nj; j++) {
    char *rs = trn_subst(tmpl, j + 1, -1);
    kio_seq_reader *r = NULL;
    if (!rs || kio_seq_open(&r, rs, &kio_int_vec_holder) != KIO_OK) { free(rs); return KIO_ERR; }
    int rc = KIO_OK;
    for (; !kio_seq_done(r); kio_seq_next(r)) {
      /* job j's alignments serve job j's utterances only, as each job of
       * the scripts reads its own ali.JOB.gz (alignments made on another
       * split of the data leave the others without one) */
      int32_t ui = key_find(ki, kio_seq_key(r));
      if (ui < 0 || d->u[ui].job != j) continue;
      kio_int_vec v = {0, NULL};
      if (kio_seq_take(r, &v) != KIO_OK) { rc = KIO_ERR; break; }
      free(d->u[ui].ali);
      d->u[ui].ali = v.v;
      d->u[ui].ali_len = v.n;
    }
    if (kio_seq_close(r) != KIO_OK) rc = KIO_ERR;
    free(rs);
    if (rc != KIO_OK) return KIO_ERR;
  }
  return KIO_OK;
}

static int replicate(trn_data *d, int times) {
  if (times <= 1) return KIO_OK;
  int32_t n0 = d->n;
  trn_utt *u = malloc(sizeof *u * (size_t)n0 * (size_t)times);
  int32_t *js = malloc(sizeof(int32_t) * (size_t)(d->nj + 1));
  if (!u || !js) { free(u); free(js); KIO_ERROR("out of memory"); return KIO_ERR; }
  int32_t k = 0;
  for (int j = 0; j < d->nj; j++) {
    js[j] = k;
    for (int t = 0; t < times; t++)
      for (int32_t i = d->job_start[j]; i < d->job_start[j + 1]; i++) {
        u[k] = d->u[i];
        u[k].replica = t;
        if (t > 0) {
          size_t n = strlen(d->u[i].key) + 16;
          u[k].key = malloc(n);
          if (u[k].key) snprintf(u[k].key, n, "r%d-%s", t, d->u[i].key);
          u[k].spk = d->u[i].spk + t * d->num_spk;
          if (d->u[i].ali) {
            u[k].ali = malloc(sizeof(int32_t) * (size_t)d->u[i].ali_len);
            if (u[k].ali) memcpy(u[k].ali, d->u[i].ali, sizeof(int32_t) * (size_t)d->u[i].ali_len);
          }
          d->frames += d->u[i].feats->rows;
        }
        k++;
      }
  }
  js[d->nj] = k;
  free(d->u);
  free(d->job_start);
  d->u = u;
  d->job_start = js;
  d->n = k;
  d->num_spk *= times;
  return KIO_OK;
}

int trn_data_load(trn_data *d, const trn_cfg *c, const kio_tmodel *tm) {
  memset(d, 0, sizeof *d);
  d->nj = c->nj;
  d->job_start = calloc((size_t)c->nj + 1, sizeof(int32_t));
  if (!d->job_start) { KIO_ERROR("out of memory"); return KIO_ERR; }
  int32_t cap = 0;
  double t0 = kio_now_s();
  for (int j = 0; j < c->nj; j++) {
    d->job_start[j] = d->n;
    char *rs = trn_subst(c->feats, j + 1, -1);
    int rc = rs ? load_feats(d, j, rs, &cap) : KIO_ERR;
    free(rs);
    if (rc != KIO_OK) return KIO_ERR;
  }
  d->job_start[c->nj] = d->n;
  d->n_store = d->n;
  d->store_key = malloc(sizeof(char *) * (size_t)(d->n ? d->n : 1));
  d->store_job = malloc(sizeof(int32_t) * (size_t)(d->n ? d->n : 1));
  if (!d->store_key || !d->store_job) { KIO_ERROR("out of memory"); return KIO_ERR; }
  for (int32_t i = 0; i < d->n; i++) {
    d->u[i].feats = &d->feat_store[i];
    d->store_key[i] = d->u[i].key;
    d->store_job[i] = d->u[i].job;
  }
  double t1 = kio_now_s();
  key_index ki = { d, malloc(sizeof(int32_t) * (size_t)(d->n ? d->n : 1)) };
  if (!ki.idx) { KIO_ERROR("out of memory"); return KIO_ERR; }
  for (int32_t i = 0; i < d->n; i++) ki.idx[i] = i;
  g_sort_d = d;
  qsort(ki.idx, (size_t)d->n, sizeof(int32_t), key_cmp);
  int rc = load_speakers(d, c, &ki);
  if (rc == KIO_OK) rc = load_graphs(d, c, tm, &ki);
  double t2 = kio_now_s();
  if (rc == KIO_OK && c->ali_in && *c->ali_in) rc = load_ali(d, c->ali_in, &ki);
  free(ki.idx);
  if (rc == KIO_OK) rc = replicate(d, c->replicate);
  if (rc == KIO_OK)
    KIO_LOG("Resident: %d utterances, %lld frames of dimension %d in %d jobs (features %.1f s, "
            "graphs %.1f s)", (int)d->n, (long long)d->frames,
            d->n_store ? (int)d->feat_store[0].cols : 0, d->nj, t1 - t0, t2 - t1);
  return rc;
}

int trn_data_write_ali(const trn_data *d, const char *dir, int text) {
  for (int j = 0; j < d->nj; j++) {
    char wx[4200];
    snprintf(wx, sizeof wx, "ark%s:|gzip -c >%s/ali.%d.gz", text ? ",t" : "", dir, j + 1);
    kio_writer *w = NULL;
    if (kio_writer_open(&w, wx, &kio_int_vec_holder) != KIO_OK) return KIO_ERR;
    int rc = KIO_OK;
    for (int32_t i = d->job_start[j]; i < d->job_start[j + 1] && rc == KIO_OK; i++) {
      const trn_utt *u = &d->u[i];
      if (!u->ali || u->replica) continue;
      kio_int_vec v = { u->ali_len, u->ali };
      rc = kio_writer_write(w, u->key, &v);
    }
    if (rc != KIO_OK) { kio_writer_discard(w); return KIO_ERR; }
    if (kio_writer_close(w) != KIO_OK) return KIO_ERR;
  }
  return KIO_OK;
}

void trn_data_free(trn_data *d) {
  for (int32_t i = 0; i < d->n; i++) {
    free(d->u[i].key);
    free(d->u[i].ali);
  }
  for (int32_t i = 0; i < d->n_store; i++) {
    kio_matrix_free(&d->feat_store[i]);
    if (d->graph_store) kio_fst_free(&d->graph_store[i]);
  }
  free(d->u);
  free(d->feat_store);
  free(d->graph_store);
  free(d->store_key);
  free(d->store_job);
  free(d->job_start);
  memset(d, 0, sizeof *d);
}
