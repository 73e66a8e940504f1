/* The trainer's training graphs: compiled once from every job's
 * transcripts (train-graphs/, Kaldi's compile-train-graphs) and kept
 * resident, and written as the stock scripts leave them (fsts.JOB.gz with
 * compile_graphs.JOB.log) by writer threads that finish in the background. */
#include "train/trainer.h"

#include <errno.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/io/io.h"
#include "base/io/table.h"
#include "base/sys/cpu-share.h"
#include "base/sys/kaldi-msg.h"
#include "base/sys/log.h"
#include "base/sys/settings.h"
#include "train-graphs/train-graphs.h"
#include "train/trn-log.h"

static char *path2(const char *a, const char *b) {
  size_t n = strlen(a) + strlen(b) + 2;
  char *s = malloc(n);
  if (s) snprintf(s, n, "%s/%s", a, b);
  return s;
}

/* One job's fsts.JOB.gz, written on a thread of its own once the job's
 * graphs are compiled: the gzip children of the jobs run side by side (as
 * the stock script's jobs do) while the next jobs compile, instead of one
 * after the other on the critical path. The thread owns the job's log
 * (compile_graphs.JOB.log) from then on and closes it. It runs, and starts
 * its gzip, at a lower priority (KALDI_GPU_DEV_TRAIN_WRITER_NICE; the child
 * inherits the thread's niceness): the compilation of the later jobs, which
 * the training waits for, comes first, and the writers take the cycles it
 * leaves, then finish beside the first iterations. */
typedef struct trn_graph_out {
  char *wx;               /* the writer's wspecifier (NULL: no fsts.JOB.gz) */
  int nice;               /* niceness added on the writer's thread */
  kio_writer *w;
  trn_log *lg;
  char **keys;
  tgraph_graph *g;        /* bytes only (the CSR forms are the store's) */
  int32_t n, cap;
  int rc;
  pthread_t th;
  int started;
  double t_end;           /* when the thread finished */
} graph_out;

static void graph_out_clear(graph_out *o) {
  for (int32_t i = 0; i < o->n; i++) { free(o->keys[i]); tgraph_graph_free(&o->g[i]); }
  free(o->keys);
  free(o->g);
  free(o->wx);
  o->wx = NULL;
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

/* Lowers the calling thread's priority by inc (Linux: niceness is per
 * thread, and a child process inherits its creator's). */
static void lower_thread_priority(int inc) {
  if (inc <= 0) return;
  id_t tid = (id_t)syscall(SYS_gettid);
  errno = 0;
  int cur = getpriority(PRIO_PROCESS, tid);
  if (cur == -1 && errno != 0) return;
  int want = cur + inc > 19 ? 19 : cur + inc;
  (void)setpriority(PRIO_PROCESS, tid, want);  /* a refusal only costs speed */
}

static void *graph_out_thread(void *arg) {
  graph_out *o = arg;
  lower_thread_priority(o->nice);
  trn_log_use(o->lg);
  int rc = kio_writer_open(&o->w, o->wx, &tgraph_graph_holder) == KIO_OK ? KIO_OK : KIO_ERR;
  for (int32_t i = 0; i < o->n && rc == KIO_OK; i++) {
    rc = kio_writer_write(o->w, o->keys[i], &o->g[i]);
    tgraph_graph_free(&o->g[i]);
  }
  if (rc == KIO_OK) rc = kio_writer_close(o->w);
  else if (o->w) kio_writer_discard(o->w);
  o->w = NULL;
  graph_out_clear(o);
  trn_log_use(NULL);
  trn_log_close(o->lg);
  o->lg = NULL;
  o->rc = rc;
  o->t_end = kio_now_s();
  return NULL;
}

/* Writes on a thread of its own (on this one if none can be made). */
static void graph_out_start(graph_out *o) {
  o->started = pthread_create(&o->th, NULL, graph_out_thread, o) == 0;
  if (!o->started) {
    o->nice = 0;  /* this thread compiles the next jobs */
    graph_out_thread(o);
  }
}

static int graph_out_finish(graph_out *o) {
  if (o->started) pthread_join(o->th, NULL);
  o->started = 0;
  graph_out_clear(o);
  trn_log_close(o->lg);
  o->lg = NULL;
  return o->rc;
}

/* The jobs' transcripts (in the scripts a pipe each, `sym2int.pl ... <
 * text |`) opened on threads, a few jobs ahead of the compilation: opening
 * one waits for its command to start and give its first line, which took
 * longer than compiling the job. Only the opening moves: the main thread
 * reads and closes each reader as before, and an opener's log lines are
 * deferred and logged when the job's turn comes, where the serial loop
 * logged them; a job never reached (an earlier one failed) leaves none. */
typedef struct {
  kio_seq_reader *r;
  char *rs;
  kio_log_deferred *lines;
  int state;  /* 0: not opened yet, 1: open, 2: failed, 3: taken */
} text_job;

typedef struct {
  const char *tmpl;
  text_job *jobs;
  int nj, ahead, next, taken, stop, nth;
  pthread_t *th;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  double wait_s;  /* the main thread's wait for openers */
} text_pool;

static void text_open(text_pool *p, int job) {
  text_job *tj = &p->jobs[job];
  kio_log_defer(&tj->lines);
  kio_seq_reader *r = NULL;
  char *rs = trn_subst(p->tmpl, job + 1, -1);
  int ok = rs && kio_seq_open(&r, rs, &kio_int_vec_holder) == KIO_OK;
  kio_log_defer(NULL);
  pthread_mutex_lock(&p->mu);
  tj->r = r;
  tj->rs = rs;
  tj->state = ok ? 1 : 2;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
}

static void *text_worker(void *arg) {
  text_pool *p = arg;
  pthread_mutex_lock(&p->mu);
  for (;;) {
    while (!p->stop && p->next < p->nj && p->next >= p->taken + p->ahead)
      pthread_cond_wait(&p->cv, &p->mu);
    if (p->stop || p->next >= p->nj) break;
    int job = p->next++;
    pthread_mutex_unlock(&p->mu);
    text_open(p, job);
    pthread_mutex_lock(&p->mu);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

/* Openers: as many as the jobs opened ahead, at most threads. Without
 * threads the jobs are opened by text_take. */
static int text_pool_start(text_pool *p, const char *tmpl, int nj, int threads) {
  memset(p, 0, sizeof *p);
  p->tmpl = tmpl;
  p->nj = nj;
  p->ahead = threads > 1 ? threads : 1;
  p->jobs = calloc((size_t)nj, sizeof *p->jobs);
  p->th = calloc((size_t)p->ahead, sizeof *p->th);
  if (!p->jobs || !p->th) { KIO_ERROR("out of memory"); return KIO_ERR; }
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv, NULL);
  int want = nj < p->ahead ? nj : p->ahead;
  while (p->nth < want && pthread_create(&p->th[p->nth], NULL, text_worker, p) == 0) p->nth++;
  return KIO_OK;
}

/* Job job's reader (NULL if it could not be opened; its lines logged). */
static kio_seq_reader *text_take(text_pool *p, int job, char **rs) {
  text_job *tj = &p->jobs[job];
  double t0 = kio_now_s();
  pthread_mutex_lock(&p->mu);
  if (p->nth == 0 && tj->state == 0) {
    p->next = job + 1;
    pthread_mutex_unlock(&p->mu);
    text_open(p, job);
    pthread_mutex_lock(&p->mu);
  }
  while (tj->state == 0) pthread_cond_wait(&p->cv, &p->mu);
  kio_seq_reader *r = tj->r;
  *rs = tj->rs;
  tj->r = NULL;
  tj->rs = NULL;
  tj->state = 3;
  p->taken = job + 1;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  p->wait_s += kio_now_s() - t0;
  kio_log_replay(&tj->lines);
  return r;
}

/* Stops the openers; readers opened but never taken are closed unheard. */
static void text_pool_end(text_pool *p) {
  if (!p->jobs || !p->th) { free(p->jobs); free(p->th); return; }
  pthread_mutex_lock(&p->mu);
  p->stop = 1;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  for (int i = 0; i < p->nth; i++) pthread_join(p->th[i], NULL);
  for (int j = 0; j < p->nj; j++) {
    text_job *tj = &p->jobs[j];
    kio_log_deferred *quiet = NULL;
    kio_log_defer(&quiet);
    kio_seq_close(tj->r);
    kio_log_defer(NULL);
    kio_log_discard(&quiet);
    kio_log_discard(&tj->lines);
    free(tj->rs);
  }
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->cv);
  free(p->jobs);
  free(p->th);
}

int trn_graphs_load(trn_data *d, const trn_cfg *c, const kio_tmodel *tm, const trn_key_index *ki) {
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
  double t_compile = 0.0, t_loop = kio_now_s();
  const int writer_nice = (int)kio_setting_int(KIO_SET_DEV_TRAIN_WRITER_NICE, 10, 0, 19);
  text_pool texts;
  memset(&texts, 0, sizeof texts);
  int texts_on = 0;
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
  texts_on = 1;
  rc = text_pool_start(&texts, c->text_rspec, d->nj, c->threads > 0 ? c->threads : kio_cpu_share(0));
  for (int j = 0; j < d->nj && rc == KIO_OK; j++) {
    graph_out *go_j = &outs[j];
    char *rs = NULL;
    kio_seq_reader *r = text_take(&texts, j, &rs);
    if (!r) { free(rs); rc = KIO_ERR; break; }
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
    if (rc == KIO_OK && c->write_graphs) {  /* the writer opens it on its thread */
      go_j->wx = wx;
      go_j->nice = writer_nice;
      wx = NULL;
    }
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
      int what = TGRAPH_CSR | (go_j->wx ? TGRAPH_BYTES : 0);
      double tc = kio_now_s();
      if (tgraph_compile(gc, n, words, what, c->threads, out) != KIO_OK) { rc = KIO_ERR; break; }
      t_compile += kio_now_s() - tc;
      for (int i = 0; i < n; i++) {
        int32_t ui = trn_key_find(ki, keys[i]);
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
          if (go_j->wx && rc == KIO_OK) rc = graph_out_add(go_j, keys[i], &out[i]);
        }
        tgraph_graph_free(&out[i]);
      }
    }
    if (rc == KIO_OK)
      KIO_KALDI(CTG_DONE, num_succeed, num_fail);
    if (r && kio_seq_close(r) != KIO_OK) rc = KIO_ERR;
    trn_log_use(NULL);
    if (rc == KIO_OK && go_j->wx) graph_out_start(go_j);  /* the thread closes the log */
    else if (rc == KIO_OK) { trn_log_close(go_j->lg); go_j->lg = NULL; }
    free(wx);
    free(rs);
  }
  for (int i = 0; i < BATCH; i++) { free(keys[i]); free(words[i].v); }
done:;
  if (texts_on) text_pool_end(&texts);
  if (rc == KIO_OK && outs) {
    /* the writers go on beside the training (trn_graphs_wait) */
    d->gw = outs;
    d->gw_t0 = kio_now_s();
    KIO_VLOG(1, "Graphs: %.2f s: compiling %.2f s, waiting %.2f s for the transcripts' readers, "
             "the rest %.2f s (the fsts.JOB.gz writers at niceness +%d)", d->gw_t0 - t_loop,
             t_compile, texts.wait_s, d->gw_t0 - t_loop - t_compile - texts.wait_s,
             writer_nice);
    outs = NULL;
  }
  for (int j = 0; outs && j < d->nj; j++) graph_out_finish(&outs[j]);
  free(outs);
  tgraph_free(gc);
  free(disambig);
  kio_ctx_dep_free(&tree);
  free(tree_path);
  free(lex);
  free(dis);
  return rc;
}


int trn_graphs_wait(trn_data *d) {
  if (!d->gw) return KIO_OK;
  double t0 = kio_now_s(), last = d->gw_t0;
  int rc = KIO_OK;
  for (int j = 0; j < d->nj; j++) {
    if (graph_out_finish(&d->gw[j]) != KIO_OK) rc = KIO_ERR;
    if (d->gw[j].t_end > last) last = d->gw[j].t_end;
  }
  free(d->gw);
  d->gw = NULL;
  if (rc == KIO_OK)
    KIO_VLOG(1, "Graphs: the fsts.JOB.gz writers finished %.2f s after the compilation "
             "(waited for: %.2f s)", last - d->gw_t0, kio_now_s() - t0);
  return rc;
}
