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
  /* a job compiled before the gate opened (trn_graphs_gate): its lines
   * before its log (the transcripts' reader's) and in it, its log's path
   * and header, logged and written once the gate opens */
  int pending;
  kio_log_deferred *pre, *lines;
  char *logp, *cmd;
} graph_out;

static void graph_out_clear(graph_out *o) {
  for (int32_t i = 0; i < o->n; i++) { free(o->keys[i]); tgraph_graph_free(&o->g[i]); }
  free(o->keys);
  free(o->g);
  free(o->wx);
  kio_log_discard(&o->pre);
  kio_log_discard(&o->lines);
  free(o->logp);
  free(o->cmd);
  o->logp = o->cmd = NULL;  /* pending is left: the compiling thread reads it */
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

/* The compilation of every job on a thread of its own, beside the
 * iterations that need only the alignments (trn_graphs_start ..
 * trn_graphs_ready). It owns a copy of the transition model (the loop
 * updates the model in place) and of the key index, writes the graphs into
 * d->graph_store only (got[i]: utterance i's is there) and the main thread
 * points the utterances at them once the thread is joined. */
typedef struct trn_graph_bg {
  trn_data *d;
  const trn_cfg *c;
  kio_tmodel tm;
  kio_ctx_dep tree;
  int32_t *disambig, num_disambig;
  tgraph_compiler *gc;
  char *tree_path, *lex, *dis;
  trn_key_index ki;
  uint8_t *got;
  graph_out *outs;
  int nice, writer_nice;
  pthread_t th;
  int beside;             /* on a thread of its own (set before it starts) */
  int threaded;           /* that thread is to be joined */
  int rc;
  int done, stop;         /* atomics: the thread has finished; give up */
  double t0, t1, t_compile, t_texts;
  /* Started before the script's stages are done (trn_graphs_gate): jobs
   * compiled before the gate opens keep their lines and graphs in memory
   * (no log, no fsts.JOB.gz: a script that stops there leaves none) */
  int gate;               /* atomic: GATE_CLOSED, GATE_OPEN or GATE_STOP */
  pthread_mutex_t gmu;
  pthread_cond_t gcv;
  int n_before;           /* atomic: jobs compiled before it opened */
  int n_at_gate;          /* -1: not gated; else n_before when it opened */
  double t_gate;          /* when it opened */
} graph_bg;

enum { GATE_OPEN = 0, GATE_CLOSED = 1, GATE_STOP = 2 };

static int gate_state(graph_bg *b) { return __atomic_load_n(&b->gate, __ATOMIC_ACQUIRE); }

/* A job compiled before the gate opened, now logged and written as it would
 * have been then: the lines before its log, its log (opened now) with its
 * lines, and its writer. */
static int flush_job(graph_out *o) {
  o->pending = 0;
  kio_log_replay(&o->pre);
  int rc = o->rc;
  if (o->logp && !(o->lg = trn_log_open(o->logp, "compile-train-graphs", o->cmd))) rc = KIO_ERR;
  trn_log_use(o->lg);
  kio_log_replay(&o->lines);
  trn_log_use(NULL);
  free(o->logp);
  free(o->cmd);
  o->logp = o->cmd = NULL;
  if (rc == KIO_OK && o->wx) graph_out_start(o);  /* the thread closes the log */
  else if (rc == KIO_OK) { trn_log_close(o->lg); o->lg = NULL; }
  return rc;
}

/* Jobs 0..nj-1 still pending, flushed if the gate is open. */
static int flush_pending(graph_bg *b, int nj) {
  if (gate_state(b) != GATE_OPEN) return KIO_OK;
  int rc = KIO_OK;
  for (int j = 0; j < nj; j++)
    if (b->outs[j].pending && flush_job(&b->outs[j]) != KIO_OK) rc = KIO_ERR;
  return rc;
}

static int compile_jobs(graph_bg *b) {
  trn_data *d = b->d;
  const trn_cfg *c = b->c;
  graph_out *outs = b->outs;
  enum { BATCH = 512 };
  kio_int_vec words[BATCH];
  char *keys[BATCH];
  tgraph_graph out[BATCH];
  memset(words, 0, sizeof words);
  memset(keys, 0, sizeof keys);
  text_pool texts;
  int rc = text_pool_start(&texts, c->text_rspec, d->nj, c->threads > 0 ? c->threads : kio_cpu_share(0));
  int j = 0;
  for (; j < d->nj && rc == KIO_OK; j++) {
    graph_out *go_j = &outs[j];
    if (flush_pending(b, j) != KIO_OK) { rc = KIO_ERR; break; }
    /* open is final; closed may still become stop: deferred until known */
    int gate = gate_state(b);
    if (gate == GATE_STOP) { rc = KIO_ERR; break; }
    int defer = gate == GATE_CLOSED;
    if (defer) kio_log_defer(&go_j->pre);
    char *rs = NULL;
    kio_seq_reader *r = text_take(&texts, j, &rs);
    if (defer) kio_log_defer(&go_j->lines);
    if (!r) {
      free(rs);
      rc = KIO_ERR;
      if (defer) { kio_log_defer(NULL); go_j->pending = 1; go_j->rc = rc; j++; }
      break;
    }
    /* with the graphs, compile_graphs.JOB.log: compile-train-graphs' lines,
     * as the stock script's job leaves them */
    char *wx = NULL, *logp = NULL, *cmd = NULL;
    if (asprintf(&wx, "ark:|gzip -c >%s/fsts.%d.gz", c->dir, j + 1) < 0) wx = NULL;
    if (asprintf(&logp, "%s/log/compile_graphs.%d.log", c->dir, j + 1) < 0) logp = NULL;
    if (wx && asprintf(&cmd, "compile-train-graphs --read-disambig-syms=%s %s %s/%d.mdl %s \"%s\" "
                       "\"%s\" (in process: gmm-train-gpu)", b->dis, b->tree_path, c->dir,
                       c->equal_align ? 0 : c->start_iter, b->lex, rs,
                       wx) < 0)
      cmd = NULL;
    if (!wx || !logp || !cmd) {
      KIO_ERROR("out of memory");
      rc = KIO_ERR;
    } else if (c->write_graphs && defer) {  /* opened when the gate opens */
      go_j->logp = logp;
      go_j->cmd = cmd;
      logp = cmd = NULL;
    } else if (c->write_graphs && !(go_j->lg = trn_log_open(logp, "compile-train-graphs", cmd))) {
      rc = KIO_ERR;
    }
    free(logp);
    free(cmd);
    if (rc == KIO_OK) trn_log_use(go_j->lg);
    if (rc == KIO_OK && c->write_graphs) {  /* the writer opens it on its thread */
      go_j->wx = wx;
      go_j->nice = b->writer_nice;
      wx = NULL;
    }
    long num_succeed = 0, num_fail = 0;
    while (rc == KIO_OK && !kio_seq_done(r)) {
      if (__atomic_load_n(&b->stop, __ATOMIC_ACQUIRE)) { rc = KIO_ERR; break; }
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
      if (tgraph_compile(b->gc, n, words, what, c->threads, out) != KIO_OK) { rc = KIO_ERR; break; }
      b->t_compile += kio_now_s() - tc;
      for (int i = 0; i < n; i++) {
        int32_t ui = trn_key_find(&b->ki, keys[i]);
        if (ui >= 0 && !b->got[ui]) {
          d->graph_store[ui] = out[i].fst;
          memset(&out[i].fst, 0, sizeof out[i].fst);
          b->got[ui] = 1;
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
    if (defer) {  /* flush_job logs and writes it */
      kio_log_defer(NULL);
      go_j->pending = 1;
      go_j->rc = rc;
      __atomic_add_fetch(&b->n_before, 1, __ATOMIC_ACQ_REL);
    } else if (rc == KIO_OK && go_j->wx) {
      graph_out_start(go_j);  /* the thread closes the log */
    } else if (rc == KIO_OK) {
      trn_log_close(go_j->lg);
      go_j->lg = NULL;
    }
    free(wx);
    free(rs);
  }
  for (int i = 0; i < BATCH; i++) { free(keys[i]); free(words[i].v); }
  text_pool_end(&texts);
  b->t_texts = texts.wait_s;
  b->t1 = kio_now_s();
  /* jobs compiled before the gate: logged and written once it opens (a
   * failed one's ERROR too), dropped if the script stops */
  pthread_mutex_lock(&b->gmu);
  while (gate_state(b) == GATE_CLOSED) pthread_cond_wait(&b->gcv, &b->gmu);
  pthread_mutex_unlock(&b->gmu);
  if (gate_state(b) == GATE_STOP) return KIO_ERR;  /* no ERROR: not to be trained */
  if (flush_pending(b, j) != KIO_OK) rc = KIO_ERR;
  return rc;
}

static void *graph_bg_main(void *arg) {
  graph_bg *b = arg;
  if (b->beside) lower_thread_priority(b->nice);  /* the compiler's threads inherit it */
  b->rc = compile_jobs(b);
  __atomic_store_n(&b->done, 1, __ATOMIC_RELEASE);
  return NULL;
}

static void graph_bg_free(graph_bg *b) {
  if (!b) return;
  tgraph_free(b->gc);
  kio_tmodel_free(&b->tm);
  free(b->disambig);
  kio_ctx_dep_free(&b->tree);
  free(b->tree_path);
  free(b->lex);
  free(b->dis);
  free(b->ki.idx);
  free(b->got);
  pthread_mutex_destroy(&b->gmu);
  pthread_cond_destroy(&b->gcv);
  free(b);
}

/* A deep copy of a transition model (through its binary form). */
static int tmodel_copy(const kio_tmodel *src, kio_tmodel *dst) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  int rc = f && kio_tmodel_write(f, 1, src) == KIO_OK ? KIO_OK : KIO_ERR;
  if (f && fclose(f) != 0) rc = KIO_ERR;
  memset(dst, 0, sizeof *dst);
  if (rc == KIO_OK) {
    FILE *g = fmemopen(buf, len, "rb");
    rc = g && kio_tmodel_read(g, 1, dst) == KIO_OK ? KIO_OK : KIO_ERR;
    if (g) fclose(g);
  }
  free(buf);
  if (rc != KIO_OK) KIO_ERROR("Could not copy the transition model");
  return rc;
}

int trn_graphs_start(trn_data *d, const trn_cfg *c, const kio_tmodel *tm, const trn_key_index *ki,
                     int background, int gated) {
  graph_bg *b = calloc(1, sizeof *b);
  if (!b) { KIO_ERROR("out of memory"); return KIO_ERR; }
  pthread_mutex_init(&b->gmu, NULL);
  pthread_cond_init(&b->gcv, NULL);
  b->n_at_gate = -1;
  b->d = d;
  b->c = c;
  b->t0 = kio_now_s();
  b->writer_nice = (int)kio_setting_int(KIO_SET_DEV_TRAIN_WRITER_NICE, 10, 0, 19);
  b->nice = (int)kio_setting_int(KIO_SET_DEV_TRAIN_GRAPHS_NICE, 5, 0, 19);
  b->tree_path = path2(c->dir, "tree");
  b->lex = path2(c->lang, "L.fst");
  b->dis = path2(c->lang, "phones/disambig.int");
  size_t n = (size_t)(d->n ? d->n : 1);
  b->ki.d = d;
  b->ki.idx = malloc(sizeof(int32_t) * n);
  b->got = calloc(n, 1);
  b->outs = calloc((size_t)d->nj, sizeof *b->outs);
  d->graph_store = calloc(n, sizeof *d->graph_store);
  d->gbg = b;
  if (!b->tree_path || !b->lex || !b->dis || !b->ki.idx || !b->got || !b->outs ||
      !d->graph_store) {
    KIO_ERROR("out of memory");
    b->rc = KIO_ERR;
    b->done = 1;
    return KIO_ERR;
  }
  memcpy(b->ki.idx, ki->idx, sizeof(int32_t) * (size_t)d->n);
  tgraph_opts go;
  tgraph_opts_default(&go);
  go.transition_scale = 0.0f;  /* compile-train-graphs' defaults */
  go.self_loop_scale = 0.0f;
  if (tmodel_copy(tm, &b->tm) != KIO_OK || kio_ctx_dep_read(b->tree_path, &b->tree) != KIO_OK ||
      tgraph_read_disambig(b->dis, KIO_KM_CTG_DISAMBIG, &b->disambig, &b->num_disambig) != KIO_OK ||
      tgraph_create(&b->gc, &b->tm, &b->tree, b->lex, b->disambig, b->num_disambig, &go) != KIO_OK) {
    b->rc = KIO_ERR;
    b->done = 1;
    return KIO_ERR;
  }
  b->beside = background != 0;
  b->gate = b->beside && gated ? GATE_CLOSED : GATE_OPEN;
  b->threaded = b->beside && pthread_create(&b->th, NULL, graph_bg_main, b) == 0;
  if (!b->threaded) {
    b->beside = 0;  /* no thread: compiled here, now */
    b->gate = GATE_OPEN;
    graph_bg_main(b);
  }
  return b->threaded ? KIO_OK : b->rc;
}

int trn_graphs_failed(const trn_data *d) {
  const graph_bg *b = d->gbg;
  return b && __atomic_load_n(&b->done, __ATOMIC_ACQUIRE) && b->rc != KIO_OK;
}

void trn_graphs_gate(trn_data *d, int open) {
  graph_bg *b = d->gbg;
  if (!b) return;
  pthread_mutex_lock(&b->gmu);
  if (gate_state(b) == GATE_CLOSED) {
    b->t_gate = kio_now_s();
    b->n_at_gate = __atomic_load_n(&b->n_before, __ATOMIC_ACQUIRE);
    if (!open) __atomic_store_n(&b->stop, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&b->gate, open ? GATE_OPEN : GATE_STOP, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&b->gcv);
  }
  pthread_mutex_unlock(&b->gmu);
}

int trn_graphs_at_gate(const trn_data *d) { return d->gbg ? d->gbg->n_at_gate : -1; }

int trn_graphs_discard(trn_data *d) {
  graph_bg *b = d->gbg;
  if (!b) return 0;
  trn_graphs_gate(d, 0);
  if (b->threaded) pthread_join(b->th, NULL);
  b->threaded = 0;
  int n = __atomic_load_n(&b->n_before, __ATOMIC_ACQUIRE);
  trn_graphs_ready(d);  /* failed (stopped): frees it, writes nothing */
  return n;
}

void trn_graphs_abandon(trn_data *d) {
  if (d->gbg) __atomic_store_n(&d->gbg->stop, 1, __ATOMIC_RELEASE);
  trn_graphs_gate(d, 0);
  trn_graphs_wait(d);
}

int trn_graphs_ready(trn_data *d) {
  graph_bg *b = d->gbg;
  if (!b) return d->gw_rc;
  double tw = kio_now_s();
  int beside = b->beside;
  if (b->threaded) pthread_join(b->th, NULL);
  b->threaded = 0;
  double waited = kio_now_s() - tw;
  int rc = b->rc;
  for (int32_t i = 0; b->got && i < d->n; i++)
    if (b->got[i]) d->u[i].graph = &d->graph_store[i];
  if (rc == KIO_OK) {
    /* the writers go on beside the training (trn_graphs_wait) */
    d->gw = b->outs;
    d->gw_t0 = b->t1;
    b->outs = NULL;
    char early[160] = "";
    if (b->t_gate > 0.0)
      snprintf(early, sizeof early, ", started at the first model %.2f s before the alignments "
               "(%d of %d jobs compiled by then)", b->t_gate - b->t0, b->n_at_gate, d->nj);
    KIO_VLOG(1, "Graphs: %.2f s%s%s: compiling %.2f s, waiting %.2f s for the transcripts' "
             "readers, the rest %.2f s (the compilation at niceness +%d, the fsts.JOB.gz writers "
             "+%d more); waited for them %.2f s", b->t1 - b->t0,
             beside ? " beside the iterations" : "", early,
             b->t_compile, b->t_texts, b->t1 - b->t0 - b->t_compile - b->t_texts,
             beside ? b->nice : 0, b->writer_nice, waited);
  } else {
    for (int j = 0; b->outs && j < d->nj; j++) graph_out_finish(&b->outs[j]);
    free(b->outs);
    b->outs = NULL;
  }
  d->gw_rc = rc;
  d->gbg = NULL;
  graph_bg_free(b);
  return rc;
}

int trn_graphs_wait(trn_data *d) {
  int rc = trn_graphs_ready(d);
  if (!d->gw) return rc;
  double t0 = kio_now_s(), last = d->gw_t0;
  for (int j = 0; j < d->nj; j++) {
    if (graph_out_finish(&d->gw[j]) != KIO_OK) rc = KIO_ERR;
    if (d->gw[j].t_end > last) last = d->gw[j].t_end;
  }
  free(d->gw);
  d->gw = NULL;
  d->gw_rc = rc;
  if (rc == KIO_OK)
    KIO_VLOG(1, "Graphs: the fsts.JOB.gz writers finished %.2f s after the compilation "
             "(waited for: %.2f s)", last - d->gw_t0, kio_now_s() - t0);
  return rc;
}
