/* gmm-align-compiled: drop-in replacement of Kaldi's gmmbin/gmm-align-compiled
 * (reference section 5). Utterances are read in batches and aligned through
 * gpu-align (CPU or CUDA); messages and outputs are then emitted in input
 * order exactly as Kaldi prints them one utterance at a time.
 *
 * Pipeline: the main thread reads batch k+1 while a worker thread prepares
 * the graphs of batch k (several threads) and aligns it; then the main
 * thread writes batch k. Log lines produced while reading, preparing or
 * aligning are captured (per thread) and replayed at the point where Kaldi
 * would have printed them, so the log is identical to Kaldi's sequential one. */
#include <execinfo.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../base/fst.h"
#include "../base/log.h"
#include "../base/matrix.h"
#include "../base/model.h"
#include "../base/options.h"
#include "../base/table.h"
#include "../gpu-align/gpu-align.h"

#define PROG_FILE "gmm-align-compiled.cc"
#define WRAP_FILE "decoder-wrappers.cc"

/* ---------------- captured log lines ---------------- */

typedef struct {
  int slot;                 /* >= 0: utterance slot; -1: a log line */
  int level, line;
  char *func, *file, *msg;
} event;
typedef struct { event *v; int n, cap; } event_list;

/* Where this thread's log lines go: NULL = print now. Threads the aligner
 * starts itself have no capture of their own and use g_align_capture. */
static _Thread_local event_list *t_capture;
static _Thread_local int t_is_main;
static event_list *volatile g_align_capture;

static int ev_push(event_list *l, event e) {
  if (l->n == l->cap) {
    int cap = l->cap ? 2 * l->cap : 64;
    event *v = realloc(l->v, (size_t)cap * sizeof *v);
    if (!v) return -1;
    l->v = v;
    l->cap = cap;
  }
  l->v[l->n++] = e;
  return 0;
}

static void ev_clear(event_list *l) {
  for (int i = 0; i < l->n; i++) {
    free(l->v[i].func);
    free(l->v[i].file);
    free(l->v[i].msg);
  }
  l->n = 0;
}

/* Kaldi's line format (the same as base/log.c's default handler). */
static void print_line(int level, const char *func, const char *file, int line,
                       const char *msg) {
  char prefix[32];
  if (level > 0) snprintf(prefix, sizeof prefix, "VLOG[%d]", level);
  else snprintf(prefix, sizeof prefix, "%s",
                level == KIO_LOG_INFO ? "LOG" : level == KIO_LOG_WARNING ? "WARNING"
                : level == KIO_LOG_ASSERT ? "ASSERTION_FAILED" : "ERROR");
  flockfile(stderr);
  fprintf(stderr, "%s (%s[%s]:%s():%s:%d) %s", prefix, kio_log_program(), KIO_VERSION,
          func ? func : "", file ? file : "", line, msg);
  if (level < KIO_LOG_WARNING) {
    void *frames[32];
    int n = backtrace(frames, 32);
    fputs("\n\n[ Stack-Trace: ]\n", stderr);
    fflush(stderr);
    if (n > 2) backtrace_symbols_fd(frames + 2, n - 2, fileno(stderr));
  }
  fputc('\n', stderr);
  funlockfile(stderr);
  fflush(stderr);
}

/* Called by base/log.c under its mutex: never log from here. */
static void capture_handler(int level, const char *func, const char *file, int line,
                            const char *msg, void *user) {
  (void)user;
  event_list *l = t_capture;
  if (!l && !t_is_main) l = g_align_capture;
  if (l) {
    event e = {-1, level, line, strdup(func ? func : ""), strdup(file ? file : ""),
               strdup(msg)};
    if (e.func && e.file && e.msg && ev_push(l, e) == 0) return;
    free(e.func); free(e.file); free(e.msg);
  }
  print_line(level, func, file, line, msg);
}

static void replay(const event *e) { print_line(e->level, e->func, e->file, e->line, e->msg); }

/* ---------------- batches ---------------- */

typedef struct {
  char *key;
  int empty;              /* graph without start state */
  kio_matrix feats;       /* owned copies: the readers keep one object only */
  kio_fst raw;
  galign_graph graph;     /* raw prepared by the worker */
  int prep_rc;
  event_list prep_lines;  /* logged while preparing (Kaldi: before "LOG KEY") */
} slot;

typedef struct {
  event_list events;      /* lines and utterance slots in Kaldi's order */
  slot *slots;
  int nslots, cap;
  int fatal;              /* reading ended with a fatal error (in events) */
  /* preparation and alignment (worker thread) */
  int first_bad;          /* first slot whose graph preparation failed */
  const galign_graph **graphs;
  const kio_matrix **feats;
  galign_result *res;
  int *res_slot, nalign;
  int align_rc;
  event_list align_lines;
} batch;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Copies m into dst, reusing dst's buffer. */
static int copy_matrix(kio_matrix *dst, const kio_matrix *m) {
  size_t n = (size_t)m->rows * (size_t)m->cols;
  if (n > dst->cap) {
    float *d = realloc(dst->data, n * sizeof(float));
    if (!d) return KIO_ERR;
    dst->data = d;
    dst->cap = n;
  }
  if (n) memcpy(dst->data, m->data, n * sizeof(float));
  dst->rows = m->rows;
  dst->cols = m->cols;
  return KIO_OK;
}

static slot *new_slot(batch *b) {
  if (b->nslots == b->cap) {
    int cap = b->cap ? 2 * b->cap : 64;
    slot *s = realloc(b->slots, (size_t)cap * sizeof *s);
    if (!s) return NULL;
    memset(s + b->cap, 0, (size_t)(cap - b->cap) * sizeof *s);
    b->slots = s;
    b->cap = cap;
  }
  return &b->slots[b->nslots++];
}

typedef struct {
  kio_seq_reader *graphs;
  kio_ra_reader *feats;
  int batch_size;
  double t_read, t_graphs, t_feats;  /* total; in the graph / feature reader */
} reader_ctx;

/* Reads up to batch_size utterances that reach alignment (steps 2.1-2.2 of
 * reference 5.1; 2.3 is done by the worker); warnings and errors go to
 * b->events in order. */
static void read_batch(reader_ctx *c, batch *b, int *num_err) {
  ev_clear(&b->events);
  b->nslots = 0;
  b->fatal = 0;
  t_capture = &b->events;
  double t0 = now();
  while (!b->fatal && b->nslots < c->batch_size && !kio_seq_done(c->graphs)) {
    const char *key = kio_seq_key(c->graphs);
    double t1 = now();
    int has = kio_ra_has_key(c->feats, key);
    const kio_matrix *m = has ? kio_ra_value(c->feats, key) : NULL;
    c->t_feats += now() - t1;
    if (!has) {
      (*num_err)++;
      KIO_LOG_AT(KIO_LOG_WARNING, "main", PROG_FILE, 103, "No features for utterance %s", key);
    } else {
      const kio_fst *g = m ? kio_seq_value(c->graphs) : NULL;
      if (!g) { b->fatal = 1; break; }
      if (m->rows == 0) {
        KIO_LOG_AT(KIO_LOG_WARNING, "main", PROG_FILE, 112, "Zero-length utterance: %s", key);
        (*num_err)++;
      } else {
        slot *s = new_slot(b);
        char *k = strdup(key);
        if (!s || !k || copy_matrix(&s->feats, m) != KIO_OK || kio_fst_copy(&s->raw, g) != KIO_OK) {
          free(k);
          KIO_ERROR("Out of memory reading utterance %s", key);
          b->fatal = 1;
          break;
        }
        free(s->key);
        s->key = k;
        s->empty = g->num_states == 0 || g->start < 0;
        event e = {b->nslots - 1, 0, 0, NULL, NULL, NULL};
        if (ev_push(&b->events, e) != 0) { KIO_ERROR("Out of memory"); b->fatal = 1; break; }
      }
    }
    t1 = now();
    kio_seq_next(c->graphs);
    c->t_graphs += now() - t1;
  }
  c->t_read = now() - t0 + c->t_read;
  t_capture = NULL;
}

/* ---------------- alignment worker ---------------- */

typedef struct {
  galign_aligner *aligner;
  const kio_tmodel *tm;
  galign_opts opts;
  int want_per_frame, beams_ok, prep_threads;
  batch *b;
  pthread_t thread;
  int running;
  double t_prep, t_align;  /* summed over batches (one runs at a time) */
} align_ctx;

/* Graph preparation (AddTransitionProbs, careful mode, pdf lists) of slots
 * i = first, first + step, ...; each slot's log lines are kept with it. */
typedef struct { align_ctx *a; batch *b; int first, step; } prep_job;

static void *prep_main(void *arg) {
  prep_job *j = arg;
  for (int i = j->first; i < j->b->nslots; i += j->step) {
    slot *s = &j->b->slots[i];
    ev_clear(&s->prep_lines);
    s->prep_rc = KIO_OK;
    if (s->raw.num_states == 0) continue;
    t_capture = &s->prep_lines;
    s->prep_rc = galign_graph_prepare(&s->raw, j->a->tm, &j->a->opts, &s->graph);
    t_capture = NULL;
  }
  return NULL;
}

static void prep_batch(align_ctx *a, batch *b) {
  enum { MAX_PREP = 16 };
  int nt = a->prep_threads < MAX_PREP ? a->prep_threads : MAX_PREP;
  if (nt > b->nslots / 8) nt = b->nslots / 8;  /* threads only pay for many graphs */
  if (nt < 1) nt = 1;
  prep_job jobs[MAX_PREP] = {{NULL, NULL, 0, 1}};
  pthread_t th[MAX_PREP];
  int started = 0;
  for (int t = 0; t < nt; t++) jobs[t] = (prep_job){a, b, t, nt};
  for (int t = 1; t < nt; t++, started++)
    if (pthread_create(&th[t], NULL, prep_main, &jobs[t]) != 0) break;
  prep_main(&jobs[0]);
  for (int t = 1; t <= started; t++) pthread_join(th[t], NULL);
  for (int t = started + 1; t < nt; t++) prep_main(&jobs[t]);  /* threads not started */
  b->first_bad = b->nslots;
  for (int i = 0; i < b->nslots; i++)
    if (b->slots[i].prep_rc != KIO_OK) { b->first_bad = i; break; }
}

static void *align_main(void *arg) {
  align_ctx *a = arg;
  batch *b = a->b;
  double t0 = now();
  prep_batch(a, b);
  double t1 = now();
  a->t_prep += t1 - t0;
  /* Utterances after a failed preparation are never reached (Kaldi dies
   * there); with beams that make no sense nothing is aligned. */
  b->nalign = 0;
  if (a->beams_ok)
    for (int i = 0; i < b->first_bad; i++) {
      if (b->slots[i].empty) continue;
      b->graphs[b->nalign] = &b->slots[i].graph;
      b->feats[b->nalign] = &b->slots[i].feats;
      b->res_slot[b->nalign] = i;
      b->nalign++;
    }
  t_capture = &b->align_lines;
  g_align_capture = &b->align_lines;
  b->align_rc = KIO_OK;
  if (b->nalign > 0)
    b->align_rc = galign_align_batch(a->aligner, b->nalign, b->graphs, b->feats,
                                     a->want_per_frame, b->res);
  g_align_capture = NULL;
  t_capture = NULL;
  a->t_align += now() - t1;
  return NULL;
}

static int grow(void **p, int n, size_t elem) {
  void *q = realloc(*p, (size_t)(n ? n : 1) * elem);
  if (!q) return KIO_ERR;
  *p = q;
  return KIO_OK;
}

/* Starts preparing and aligning b in the worker thread. */
static int align_start(align_ctx *a, batch *b) {
  ev_clear(&b->align_lines);
  b->nalign = 0;
  if (grow((void **)&b->graphs, b->nslots, sizeof *b->graphs) ||
      grow((void **)&b->feats, b->nslots, sizeof *b->feats) ||
      grow((void **)&b->res_slot, b->nslots, sizeof *b->res_slot) ||
      grow((void **)&b->res, b->nslots, sizeof *b->res))
    return KIO_ERR;
  memset(b->res, 0, (size_t)b->nslots * sizeof *b->res);
  a->b = b;
  if (pthread_create(&a->thread, NULL, align_main, a) != 0) {
    align_main(a);  /* no thread: align synchronously */
    return KIO_OK;
  }
  a->running = 1;
  return KIO_OK;
}

static void align_wait(align_ctx *a) {
  if (!a->running) return;
  pthread_join(a->thread, NULL);
  a->running = 0;
}

/* Creating the aligner (CUDA start-up, model upload) overlaps opening the
 * tables and reading the first batch. */
typedef struct {
  align_ctx *a;
  galign_use_gpu mode;
  const kio_am_gmm *am;
  int rc, running;
  pthread_t thread;
  event_list lines;
} init_job;
static init_job g_init;

static void *init_main(void *arg) {
  init_job *j = arg;
  t_capture = &j->lines;
  j->rc = galign_aligner_new(&j->a->aligner, j->mode, j->a->tm, j->am, &j->a->opts);
  t_capture = NULL;
  return NULL;
}

static void init_start(align_ctx *a, galign_use_gpu mode, const kio_am_gmm *am) {
  g_init.a = a;
  g_init.mode = mode;
  g_init.am = am;
  if (pthread_create(&g_init.thread, NULL, init_main, &g_init) == 0) g_init.running = 1;
  else init_main(&g_init);
}

/* Waits for the aligner; prints its lines. KIO_OK if it was created. */
static int init_wait(void) {
  if (g_init.running) pthread_join(g_init.thread, NULL);
  g_init.running = 0;
  for (int i = 0; i < g_init.lines.n; i++) replay(&g_init.lines.v[i]);
  ev_clear(&g_init.lines);
  free(g_init.lines.v);
  g_init.lines.v = NULL;
  g_init.lines.cap = 0;
  return g_init.rc;
}

/* Kaldi's fatal error: ERROR line(s) already printed; what() then exit 255. */
static void fatal_exit(align_ctx *a) {
  if (g_init.running) pthread_join(g_init.thread, NULL);
  g_init.running = 0;
  align_wait(a);
  fputs("kaldi::KaldiFatalError", stderr);
  fflush(stderr);
  exit(255);
}

/* ---------------- emission ---------------- */

typedef struct {
  kio_writer *ali, *scores, *per_frame;
  int num_done, num_err, num_retry;
  double tot_like;
  int64_t frame_count;
  double t_write;
  galign_opts opts;
  int beams_ok;
} out_ctx;

/* Writes everything Kaldi prints and writes for batch b, in order. Exits on
 * fatal errors (as Kaldi would, after the same lines). */
static void emit_batch(out_ctx *o, align_ctx *a, batch *b) {
  char buf1[32], buf2[32];
  t_capture = NULL;
  /* Lines of a failed batch are reproduced below, utterance by utterance. */
  if (b->align_rc == KIO_OK)
    for (int i = 0; i < b->align_lines.n; i++) replay(&b->align_lines.v[i]);
  /* Result of each slot: where it sits in b->res. */
  int *pos = b->nslots ? malloc((size_t)b->nslots * sizeof *pos) : NULL;
  if (b->nslots && !pos) { KIO_ERROR("Out of memory"); fatal_exit(a); }
  for (int i = 0; i < b->nslots; i++) pos[i] = -1;
  for (int k = 0; k < b->nalign; k++) pos[b->res_slot[k]] = k;
  for (int i = 0; i < b->events.n; i++) {
    const event *e = &b->events.v[i];
    if (e->slot < 0) { replay(e); continue; }
    slot *s = &b->slots[e->slot];
    for (int j = 0; j < s->prep_lines.n; j++) replay(&s->prep_lines.v[j]);
    if (s->prep_rc != KIO_OK) fatal_exit(a);  /* AddTransitionProbs failed */
    KIO_LOG_AT(KIO_LOG_INFO, "main", PROG_FILE, 127, "%s", s->key);
    if (!o->beams_ok) {
      KIO_LOG_AT(KIO_LOG_ERROR, "AlignUtteranceWrapper", WRAP_FILE, 594,
                 "Beams do not make sense: beam %s, retry-beam %s",
                 kio_fmt_g(buf1, o->opts.beam), kio_fmt_g(buf2, o->opts.retry_beam));
      fatal_exit(a);
    }
    if (s->empty) {
      KIO_LOG_AT(KIO_LOG_WARNING, "AlignUtteranceWrapper", WRAP_FILE, 599,
                 "Empty decoding graph for %s", s->key);
      o->num_err++;
      continue;
    }
    galign_result *r = &b->res[pos[e->slot]];
    if (b->align_rc != KIO_OK) {
      /* The batch died on a fatal error: find the utterance that causes it by
       * aligning one at a time (the worker is idle: the caller waited). */
      const galign_graph *g = &s->graph;
      const kio_matrix *f = &s->feats;
      event_list lines = {0};
      t_capture = &lines;
      g_align_capture = &lines;
      int rc = galign_align_batch(a->aligner, 1, &g, &f, o->per_frame != NULL, r);
      g_align_capture = NULL;
      t_capture = NULL;
      for (int j = 0; j < lines.n; j++) replay(&lines.v[j]);
      ev_clear(&lines);
      free(lines.v);
      if (rc != KIO_OK) fatal_exit(a);
    }
    if (r->retried) {
      o->num_retry++;
      KIO_LOG_AT(KIO_LOG_WARNING, "AlignUtteranceWrapper", WRAP_FILE, 617,
                 "Retrying utterance %s with beam %s", s->key,
                 kio_fmt_g(buf1, o->opts.retry_beam));
    }
    if (!r->ok) {
      KIO_LOG_AT(KIO_LOG_WARNING, "AlignUtteranceWrapper", WRAP_FILE, 626,
                 "Did not successfully decode file %s, len = %d", s->key, (int)s->feats.rows);
      o->num_err++;
      galign_result_free(r);
      continue;
    }
    o->num_done++;
    o->tot_like += r->like;
    o->frame_count += s->feats.rows;
    double t0 = now();
    kio_int_vec ali = {s->feats.rows, r->ali};
    if (o->ali && kio_writer_write(o->ali, s->key, &ali) != KIO_OK) fatal_exit(a);
    if (o->scores && kio_writer_write(o->scores, s->key, &r->score) != KIO_OK) fatal_exit(a);
    if (o->per_frame) {
      kio_vector v = {s->feats.rows, r->per_frame, (size_t)s->feats.rows};
      if (kio_writer_write(o->per_frame, s->key, &v) != KIO_OK) fatal_exit(a);
    }
    o->t_write += now() - t0;
    galign_result_free(r);
  }
  free(pos);
  if (b->fatal) fatal_exit(a);
}

static void batch_free(batch *b) {
  for (int i = 0; i < b->cap; i++) {
    free(b->slots[i].key);
    kio_matrix_free(&b->slots[i].feats);
    kio_fst_free(&b->slots[i].raw);
    galign_graph_free(&b->slots[i].graph);
    ev_clear(&b->slots[i].prep_lines);
    free(b->slots[i].prep_lines.v);
  }
  free(b->slots);
  ev_clear(&b->events);
  free(b->events.v);
  ev_clear(&b->align_lines);
  free(b->align_lines.v);
  free(b->graphs);
  free(b->feats);
  free(b->res);
  free(b->res_slot);
}

/* Closes readers/writers in the order Kaldi's destructors run. The first
 * failure ends the program as the C++ runtime would (ERROR, then abort). */
static void close_all(out_ctx *o, kio_seq_reader *graphs, kio_ra_reader *feats) {
  int failed = 0;
  if (kio_writer_close(o->per_frame) != KIO_OK) failed = 1;
  if (kio_writer_close(o->scores) != KIO_OK) failed = 1;
  if (kio_writer_close(o->ali) != KIO_OK) failed = 1;
  if (kio_ra_close(feats) != KIO_OK) failed = 1;
  if (kio_seq_close(graphs) != KIO_OK) failed = 1;
  if (failed) {
    fputs("terminate called after throwing an instance of 'kaldi::KaldiFatalError'\n"
          "  what():  kaldi::KaldiFatalError\n", stderr);
    fflush(stderr);
    exit(134);
  }
}

int main(int argc, char *argv[]) {
  const char *usage =
      "Align features given [GMM-based] models.\n"
      "Usage:   gmm-align-compiled [options] <model-in> <graphs-rspecifier> "
      "<feature-rspecifier> <alignments-wspecifier> [scores-wspecifier]\n"
      "e.g.: \n"
      " gmm-align-compiled 1.mdl ark:graphs.fsts scp:train.scp ark:1.ali\n"
      "or:\n"
      " compile-train-graphs tree 1.mdl lex.fst 'ark:sym2int.pl -f 2- words.txt text|' \\\n"
      "   ark:- | gmm-align-compiled 1.mdl ark:- scp:train.scp t, ark:1.ali\n";
  galign_opts opts;
  galign_opts_default(&opts);
  char *per_frame_wspecifier = strdup("");
  char *use_gpu = strdup("optional");
  int32_t batch_size = 2048;

  kio_opts *po = kio_opts_new(usage);
  kio_opts_float(po, "beam", &opts.beam, "Decoding beam used in alignment");
  kio_opts_float(po, "retry-beam", &opts.retry_beam, "Decoding beam for second try at alignment");
  kio_opts_bool(po, "careful", &opts.careful,
                "If true, do 'careful' alignment, which is better at detecting "
                "alignment failure (involves loop to start of decoding graph).");
  kio_opts_float(po, "transition-scale", &opts.transition_scale,
                 "Transition-probability scale [relative to acoustics]");
  kio_opts_float(po, "acoustic-scale", &opts.acoustic_scale,
                 "Scaling factor for acoustic likelihoods");
  kio_opts_float(po, "self-loop-scale", &opts.self_loop_scale,
                 "Scale of self-loop versus non-self-loop log probs [relative to acoustics]");
  kio_opts_string(po, "write-per-frame-acoustic-loglikes", &per_frame_wspecifier,
                  "Wspecifier for table of vectors containing the acoustic log-likelihoods "
                  "per frame for each utterance. E.g. ark:foo/per_frame_logprobs.1.ark");
  kio_opts_string(po, "use-gpu", &use_gpu,
                  "yes|no|optional|wait: align on a CUDA GPU (optional: if one is usable, "
                  "else on the CPU)");
  kio_opts_int(po, "batch-size", &batch_size,
               "Number of utterances aligned together (affects only speed and memory)");
  /* Early returns free what main owns (so leak checkers stay quiet). */
#define RETURN(rc) do { kio_opts_free(po); free(per_frame_wspecifier); free(use_gpu); return (rc); } while (0)
  int prc = kio_opts_parse(po, argc, argv);
  if (prc == KIO_OPTS_HELP) RETURN(0);
  if (prc != KIO_OPTS_OK) { fputs("kaldi::KaldiFatalError", stderr); RETURN(255); }
  if (kio_opts_num_args(po) < 4 || kio_opts_num_args(po) > 5) {
    kio_opts_print_usage(po);
    RETURN(1);
  }
  t_is_main = 1;
  galign_use_gpu mode;
  if (galign_parse_use_gpu(use_gpu, &mode) != KIO_OK) {
    KIO_ERROR("Invalid value --use-gpu=%s: use yes|no|optional|wait", use_gpu);
    fputs("kaldi::KaldiFatalError", stderr);
    RETURN(255);
  }
  if (batch_size < 1) {
    KIO_ERROR("Invalid value --batch-size=%d: must be >= 1", (int)batch_size);
    fputs("kaldi::KaldiFatalError", stderr);
    RETURN(255);
  }
  const char *model_in = kio_opts_arg(po, 1), *fst_rspecifier = kio_opts_arg(po, 2),
             *feature_rspecifier = kio_opts_arg(po, 3), *ali_wspecifier = kio_opts_arg(po, 4),
             *scores_wspecifier = kio_opts_opt_arg(po, 5);

  align_ctx actx = {0};
  double t_start = now();
  kio_tmodel tm = {0};
  kio_am_gmm am = {0};
  if (kio_model_read(model_in, &tm, &am) != KIO_OK) fatal_exit(&actx);
  actx.want_per_frame = per_frame_wspecifier[0] != '\0';
  actx.tm = &tm;
  actx.opts = opts;
  /* From here on log lines are routed by capture_handler: lines of other
   * threads are kept and printed where Kaldi would print them. */
  kio_log_set_handler(capture_handler, NULL);
  init_start(&actx, mode, &am);

  reader_ctx rc = {0};
  rc.batch_size = batch_size;
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  actx.prep_threads = ncpu > 1 ? (int)ncpu : 1;
  out_ctx o = {0};
  o.opts = opts;
  o.beams_ok = !((opts.retry_beam != 0 && opts.retry_beam <= opts.beam) || opts.beam <= 0);
  actx.beams_ok = o.beams_ok;
  /* Kaldi creates nothing before the tables: the aligner's lines come first. */
  event_list open_lines = {0};
  t_capture = &open_lines;
  int open_ok =
      kio_seq_open(&rc.graphs, fst_rspecifier, &kio_fst_holder) == KIO_OK &&
      kio_ra_open(&rc.feats, feature_rspecifier, &kio_matrix_holder) == KIO_OK &&
      kio_writer_open(&o.ali, ali_wspecifier, &kio_int_vec_holder) == KIO_OK &&
      kio_writer_open(&o.scores, scores_wspecifier, &kio_float_holder) == KIO_OK &&
      kio_writer_open(&o.per_frame, per_frame_wspecifier, &kio_vector_holder) == KIO_OK;
  t_capture = NULL;
  batch bufs[2];
  memset(bufs, 0, sizeof bufs);
  batch *cur = &bufs[0], *next = &bufs[1];
  if (open_ok) read_batch(&rc, cur, &o.num_err);
  int init_rc = init_wait();
  for (int i = 0; i < open_lines.n; i++) replay(&open_lines.v[i]);
  ev_clear(&open_lines);
  free(open_lines.v);
  if (init_rc != KIO_OK || !open_ok) fatal_exit(&actx);
  double t_setup = now() - t_start - rc.t_read;  /* the first batch overlapped it */
  if (align_start(&actx, cur) != KIO_OK) { KIO_ERROR("Out of memory"); fatal_exit(&actx); }
  for (;;) {
    int more = !cur->fatal && !kio_seq_done(rc.graphs);
    if (more) read_batch(&rc, next, &o.num_err);  /* overlaps the alignment of cur */
    align_wait(&actx);
    if (more && cur->align_rc == KIO_OK && !next->fatal) {
      /* Start aligning next before writing cur (unless cur needs the aligner
       * again to locate a fatal error). */
      if (align_start(&actx, next) != KIO_OK) { KIO_ERROR("Out of memory"); fatal_exit(&actx); }
      emit_batch(&o, &actx, cur);
    } else {
      emit_batch(&o, &actx, cur);
      if (!more) break;
      if (align_start(&actx, next) != KIO_OK) { KIO_ERROR("Out of memory"); fatal_exit(&actx); }
    }
    batch *t = cur; cur = next; next = t;
  }
  kio_log_set_handler(NULL, NULL);

  KIO_VLOG(1, "Time: setup (model, tables%s) %.3f s, reading %.3f s (graphs %.3f s, "
           "features %.3f s), then overlapped "
           "with reading: graph preparation %.3f s, alignment %.3f s (on the %s); "
           "writing %.3f s, total %.3f s",
           galign_aligner_is_gpu(actx.aligner) ? ", GPU" : "", t_setup, rc.t_read, rc.t_graphs, rc.t_feats, actx.t_prep,
           actx.t_align, galign_aligner_is_gpu(actx.aligner) ? "GPU" : "CPU",
           o.t_write, now() - t_start);
  char buf[32];
  KIO_LOG_AT(KIO_LOG_INFO, "main", PROG_FILE, 135,
             "Overall log-likelihood per frame is %s over %lld frames.",
             kio_fmt_g(buf, o.tot_like / (double)o.frame_count), (long long)o.frame_count);
  KIO_LOG_AT(KIO_LOG_INFO, "main", PROG_FILE, 137, "Retried %d out of %d utterances.",
             o.num_retry, o.num_done + o.num_err);
  KIO_LOG_AT(KIO_LOG_INFO, "main", PROG_FILE, 139, "Done %d, errors on %d", o.num_done,
             o.num_err);
  close_all(&o, rc.graphs, rc.feats);
  batch_free(&bufs[0]);
  batch_free(&bufs[1]);
  galign_aligner_free(actx.aligner);
  kio_tmodel_free(&tm);
  kio_am_gmm_free(&am);
  RETURN(o.num_done != 0 ? 0 : 1);
#undef RETURN
}
