/* The batch pipeline of the aligning programs (see align-pipeline.h):
 * reading in batches (graph archives read ahead by their own thread;
 * a batch is handed over early when the worker is idle, see DYN_MIN),
 * graph preparation and alignment in a worker thread,
 * emission in input order with captured log lines replayed where Kaldi
 * prints them, and the per-batch hook. */
#include "align-pipeline.h"
#include "align-pipeline-impl.h"
#include "align-source.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/sys/cpu-share.h"
#include "device/cuda-util.h"
#include "base/model/fst.h"
#include "base/sys/kaldi-msg.h"
#include "base/sys/log.h"
#include "base/sys/options.h"
#include "base/sys/settings.h"
#include "device/svc-link.h"
#include "base/io/table.h"

/* Kaldi's locations of the lines the pipeline prints for its program. */

/* ---------------- captured log lines (align-batch.h) ---------------- */

/* galign_t_capture: where this thread's log lines go (NULL: print now).
 * Threads the aligner starts itself have no capture of their own and use
 * g_align_capture. */
_Thread_local event_list *galign_t_capture;
static _Thread_local int t_is_main;
static event_list *volatile g_align_capture;
/* The handler in place before the pipeline's (NULL: the default): lines
 * printed now go there. */
static kio_log_handler g_prev_handler;
static void *g_prev_user;

/* Called by base/sys/log.c under its (recursive) mutex. A line printed now goes
 * through base/sys/log.c's default handler: with the mutex held, no other
 * thread sees the handler removed for that moment. */
static void capture_handler(int level, const char *func, const char *file, int line,
                            const char *msg, void *user) {
  (void)user;
  event_list *l = galign_t_capture;
  if (!l && !t_is_main && !kio_log_thread_direct()) l = g_align_capture;
  if (l) {
    /* the aligning batch's list is shared by the worker and the aligner's
     * own threads (long utterances) */
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    const char *tp = kio_log_thread_program();
    event e = {-1, level, line, strdup(func ? func : ""), strdup(file ? file : ""),
               strdup(msg), tp ? strdup(tp) : NULL};
    pthread_mutex_lock(&mu);
    int ok = e.func && e.file && e.msg && (!tp || e.prog) && galign_ev_push(l, e) == 0;
    pthread_mutex_unlock(&mu);
    if (ok) return;
    free(e.func); free(e.file); free(e.msg); free(e.prog);
  }
  kio_log_set_handler(g_prev_handler, g_prev_user);
  kio_logf(level, func, file ? file : "", line, "%s", msg);
  kio_log_set_handler(capture_handler, NULL);
}

/* Dynamic batching: a batch is handed over early, once it holds this many
 * utterances (or --batch-size if smaller), if the aligner is idle (or, for
 * the first batch, ready): the GPU starts early and the tail after the last
 * read is small. Builds for tests may lower it (-DGALIGN_DYN_MIN=1). */
#ifndef GALIGN_DYN_MIN
#define GALIGN_DYN_MIN 64
#endif
enum { DYN_MIN = GALIGN_DYN_MIN };

/* 1 if nothing is being aligned (or prepared to align) now. */
static int worker_idle(galign_pipeline *p) {
  if (p->init_running) return atomic_load(&p->init_done);
  return !p->running || atomic_load(&p->wb_done);
}

/* Reads up to batch_size utterances that reach alignment (steps 2.1-2.2 of
 * reference 5.1; 2.3 is done by the worker), fewer once DYN_MIN are read
 * and the worker is idle; warnings and errors go to b->events in order.
 * Only the batch boundaries depend on timing: output order never does. */
static void read_batch(galign_pipeline *p, batch *b) {
  galign_ev_clear(&b->events);
  b->nslots = 0;
  b->fatal = 0;
  b->prepped = 0;
  galign_t_capture = &b->events;
  if (p->gf) galign_gfeat_begin(b->gfb);
  double t0 = kio_now_s(), t1;
  int min_n = p->cfg.batch_size < DYN_MIN ? p->cfg.batch_size : DYN_MIN;
  while (!b->fatal && b->nslots < p->cfg.batch_size &&
         !(b->nslots >= min_n && worker_idle(p)) && !galign_gs_done(p) &&
         !(p->gf && galign_gfeat_full(p->gf, b->gfb))) {
    slot *s = galign_peek_slot(b);
    if (p->tr || p->by_key) {  /* features in order: align-source.c */
      int r = !s ? KIO_ERR
              : p->tr ? galign_source_read(p->fseq, p->trans, s, &p->n.num_err)
                      : galign_source_read_graph(p->fseq, p->gra, s, &p->n.num_err);
      event e = {b->nslots, 0, 0, NULL, NULL, NULL, NULL};
      if (r == 1 && galign_ev_push(&b->events, e) == 0) b->nslots++;
      else if (r != 0) { b->fatal = 1; break; }
      kio_seq_next(p->fseq);
      continue;
    }
    const char *key = galign_gs_key(p);
    if (!s) { KIO_ERROR("Out of memory reading utterance %s", key); b->fatal = 1; break; }
    t1 = kio_now_s();
    int same = galign_gs_next_same(p, key);  /* waits for the graph thread */
    double t2 = kio_now_s();
    p->t_graphs += t2 - t1;
    int has = p->gf ? galign_gfeat_read(p->gf, &b->gfb, key, &s->feats, &s->gf_index)
                    : kio_ra_has_key(p->feats, key), got = p->gf && has == 1;
    if (!p->gf) s->gf_index = -1;
    if (has == 1 && !p->gf) {
      /* The features are moved into the slot, unless the reader keeps them. */
      int rc = same ? 1 : kio_ra_take(p->feats, key, &s->feats);
      if (rc == 1) {
        const kio_matrix *m = kio_ra_value(p->feats, key);
        rc = !m ? KIO_ERR : galign_copy_matrix(&s->feats, m);
        if (m && rc != KIO_OK) KIO_ERROR("Out of memory reading utterance %s", key);
      }
      got = rc == KIO_OK;
    }
    p->t_feats += kio_now_s() - t2;
    if (!has) {
      p->n.num_err++;
      KIO_KALDI(GAC_NO_FEATS, key);
    } else {
      if (!got || galign_gs_take(p, &s->raw) != KIO_OK) { b->fatal = 1; break; }
      if (s->feats.rows == 0) {
        KIO_KALDI(GAC_ZERO_LENGTH, key);
        p->n.num_err++;
      } else {
        char *k = strdup(key);
        if (!k) { KIO_ERROR("Out of memory reading utterance %s", key); b->fatal = 1; break; }
        free(s->key);
        s->key = k;
        s->prior = galign_prior_table_get(p->priors, key);
        s->empty = s->raw.num_states == 0 || s->raw.start < 0;
        b->nslots++;
        event e = {b->nslots - 1, 0, 0, NULL, NULL, NULL, NULL};
        if (galign_ev_push(&b->events, e) != 0) { KIO_ERROR("Out of memory"); b->fatal = 1; break; }
      }
    }
    t1 = kio_now_s();
    galign_gs_next(p);
    p->t_graphs += kio_now_s() - t1;
  }
  p->t_read += kio_now_s() - t0;
  galign_t_capture = NULL;
}

/* ---------------- alignment worker ---------------- */

/* Graph preparation (AddTransitionProbs, careful mode, pdf lists) of slots
 * i = first, first + step, ...; each slot's log lines are kept with it. */
typedef struct { galign_pipeline *p; batch *b; int first, step; } prep_job;

static void *prep_main(void *arg) {
  prep_job *j = arg;
  for (int i = j->first; i < j->b->nslots; i += j->step) {
    slot *s = &j->b->slots[i];
    galign_ev_clear(&s->prep_lines);
    s->prep_rc = KIO_OK;
    galign_t_capture = &s->prep_lines;
    if (j->p->tr) s->prep_rc = galign_source_compile(&j->p->cfg, s);
    if (s->prep_rc == KIO_OK && s->raw.num_states != 0)
      s->prep_rc = galign_graph_prepare(&s->raw, j->p->tm, &j->p->cfg.opts, &s->graph);
    galign_t_capture = NULL;
    if (s->prep_rc == KIO_OK && s->raw.num_states != 0 && j->p->cfg.margin_mode)
      s->band_status = galign_band_build(&s->graph, s->prior ? s->prior->v : NULL,
                                         s->prior ? s->prior->n : 0, s->feats.rows,
                                         j->p->cfg.margin);
  }
  return NULL;
}

static void prep_batch(galign_pipeline *p, batch *b) {
  enum { MAX_PREP = 16 };
  int nt = p->prep_threads < MAX_PREP ? p->prep_threads : MAX_PREP;
  if (nt > b->nslots / 8) nt = b->nslots / 8;  /* threads only pay for many graphs */
  if (nt < 1) nt = 1;
  prep_job jobs[MAX_PREP] = {{NULL, NULL, 0, 1}};  /* all set below; cppcheck cannot tell */
  pthread_t th[MAX_PREP];
  int started = 0;
  for (int t = 0; t < nt; t++) jobs[t] = (prep_job){p, b, t, nt};
  for (int t = 1; t < nt; t++, started++)
    if (pthread_create(&th[t], NULL, prep_main, &jobs[t]) != 0) break;
  prep_main(&jobs[0]);
  for (int t = 1; t <= started; t++) pthread_join(th[t], NULL);
  for (int t = started + 1; t < nt; t++) prep_main(&jobs[t]);  /* threads not started */
  b->first_bad = b->nslots;
  for (int i = 0; i < b->nslots; i++)
    if (b->slots[i].prep_rc != KIO_OK) { b->first_bad = i; break; }
}

/* The utterances of a prepared batch that reach the aligner, in b->graphs,
 * b->feats (grown by grow_lists). Utterances after a failed preparation
 * are never reached (Kaldi dies there); with beams that make no sense
 * nothing is aligned. */
static void collect(galign_pipeline *p, batch *b) {
  b->nalign = 0;
  if (p->beams_ok)
    for (int i = 0; i < b->first_bad; i++) {
      if (b->slots[i].empty) continue;
      b->graphs[b->nalign] = &b->slots[i].graph;
      b->feats[b->nalign] = &b->slots[i].feats;
      b->res_slot[b->nalign] = i;
      b->nalign++;
    }
}

static void *align_main(void *arg) {
  galign_pipeline *p = arg;
  batch *b = p->wb;
  double t0 = kio_now_s();
  if (!b->prepped) prep_batch(p, b);
  double t1 = kio_now_s();
  p->t_prep += t1 - t0;
  collect(p, b);
  galign_t_capture = &b->align_lines;
  g_align_capture = &b->align_lines;
  b->align_rc = KIO_OK;
  b->gf_rc = p->gf && b->nalign > 0 ? galign_gfeat_run(p->gf, p->aligner, b) : KIO_OK;
  if (b->nalign > 0 && b->gf_rc == KIO_OK)
    b->align_rc = galign_align_batch(p->aligner, b->nalign, b->graphs, b->feats,
                                     p->want_per_frame, b->res);
  if (p->gf) galign_gfeat_done(p->aligner);
  g_align_capture = NULL;
  galign_t_capture = NULL;
  p->t_align += kio_now_s() - t1;
  atomic_store(&p->wb_done, 1);
  return NULL;
}

/* The batch's lists and results for its slots. KIO_ERR without memory. */
static int grow_lists(batch *b) {
  if (b->nslots > b->res_cap) {
    if (galign_grow((void **)&b->graphs, b->nslots, sizeof *b->graphs) ||
        galign_grow((void **)&b->feats, b->nslots, sizeof *b->feats) ||
        galign_grow((void **)&b->res_slot, b->nslots, sizeof *b->res_slot) ||
        galign_grow((void **)&b->utts, b->nslots, sizeof *b->utts) ||
        galign_grow((void **)&b->res, b->nslots, sizeof *b->res)) {
      return KIO_ERR;
    }
    memset(b->res + b->res_cap, 0, (size_t)(b->nslots - b->res_cap) * sizeof *b->res);
    b->res_cap = b->nslots;
  }
  return KIO_OK;
}

/* Starts preparing and aligning b in the worker thread. */
static int align_start(galign_pipeline *p, batch *b) {
  galign_ev_clear(&b->align_lines);
  b->nalign = 0;
  if (grow_lists(b) != KIO_OK) {
    KIO_ERROR("Out of memory");
    return KIO_ERR;
  }
  p->wb = b;
  atomic_store(&p->wb_done, 0);
  if (pthread_create(&p->thread, NULL, align_main, p) != 0) {
    align_main(p);  /* no thread: align synchronously */
    return KIO_OK;
  }
  p->running = 1;
  return KIO_OK;
}

static void align_wait(galign_pipeline *p) {
  if (!p->running) return;
  pthread_join(p->thread, NULL);
  p->running = 0;
}

/* Creates our own CUDA context while the model is read, unless the GPU
 * service will be used (then this process never touches CUDA). */
static void *warm_main(void *arg) {
  (void)arg;
  if (!kio_svc_wanted()) kio_cuda_warm_up();
  return NULL;
}

static void warm_join(galign_pipeline *p) {
  if (p->warm_running) pthread_join(p->warm_thread, NULL);
  p->warm_running = 0;
}

static void *init_main(void *arg) {
  galign_pipeline *p = arg;
  warm_join(p);
  if (p->cfg.warm_wait) p->cfg.warm_wait(p->cfg.warm_user);
  galign_t_capture = &p->init_lines;
  p->init_rc = galign_aligner_new(&p->aligner, p->cfg.use_gpu, p->tm, p->am, &p->cfg.opts);
  if (p->cfg.aligner) *p->cfg.aligner = p->aligner;  /* the caller's from now on */
  galign_t_capture = NULL;
  atomic_store(&p->init_done, 1);
  return NULL;
}

/* Waits for the aligner; prints its lines. KIO_OK if it was created. */
static int init_wait(galign_pipeline *p) {
  if (p->init_running) pthread_join(p->init_thread, NULL);
  p->init_running = 0;
  galign_ev_replay(&p->init_lines);
  galign_ev_free(&p->init_lines);
  return p->init_rc;
}

/* Ends the capture: threads joined, handler removed. */
static void stop(galign_pipeline *p) {
  if (p->init_running) pthread_join(p->init_thread, NULL);
  warm_join(p);
  p->init_running = 0;
  align_wait(p);
  galign_gq_join(p);
  if (t_is_main) kio_log_set_handler(g_prev_handler, g_prev_user);
  t_is_main = 0;
  galign_t_capture = NULL;
}

/* ---------------- emission ---------------- */

/* One utterance aligned alone, to find the one that makes a batch fail as
 * Kaldi would (the worker is idle). */
static int align_alone(galign_pipeline *p, slot *s, galign_result *r) {
  const galign_graph *g = &s->graph;
  const kio_matrix *f = &s->feats;
  event_list lines = {0};
  galign_t_capture = &lines;
  g_align_capture = &lines;
  int rc = galign_align_batch(p->aligner, 1, &g, &f, p->want_per_frame, r);
  g_align_capture = NULL;
  galign_t_capture = NULL;
  galign_ev_replay(&lines);
  galign_ev_free(&lines);
  return rc;
}

/* Prints and writes everything Kaldi does for batch b, in order, then calls
 * the hook. KIO_ERR on a fatal error, after the lines Kaldi prints first. */
static int emit_batch(galign_pipeline *p, batch *b) {
  char buf1[32], buf2[32];
  const galign_opts *o = &p->cfg.opts;
  int rc = KIO_OK, nutt = 0;
  galign_t_capture = NULL;
  if (b->gf_rc != KIO_OK) {  /* no features: fatal (the ERROR is in align_lines) */
    galign_ev_replay(&b->align_lines);
    return KIO_ERR;
  }
  /* Lines of a failed batch are reproduced below, utterance by utterance. */
  if (b->align_rc == KIO_OK) galign_ev_replay(&b->align_lines);
  /* Result of each slot: where it sits in b->res. */
  int *pos = malloc((size_t)(b->nslots ? b->nslots : 1) * sizeof *pos);
  if (!pos) { KIO_ERROR("Out of memory"); rc = KIO_ERR; goto done; }
  for (int i = 0; i < b->nslots; i++) pos[i] = -1;
  for (int k = 0; k < b->nalign; k++) pos[b->res_slot[k]] = k;
  for (int i = 0; i < b->events.n; i++) {
    const event *e = &b->events.v[i];
    if (e->slot < 0) { galign_ev_replay_one(e); continue; }
    slot *s = &b->slots[e->slot];
    galign_ev_replay(&s->prep_lines);
    if (s->prep_rc != KIO_OK) { rc = KIO_ERR; goto done; }  /* AddTransitionProbs failed */
    if (!p->tr && !p->by_key) KIO_KALDI(GAC_KEY, s->key);
    if (!p->beams_ok) {
      KIO_KALDI(ALIGN_BEAMS, kio_fmt_g(buf1, o->beam), kio_fmt_g(buf2, o->retry_beam));
      rc = KIO_ERR;
      goto done;
    }
    galign_pipeline_utt u = {s->key, &s->feats, NULL, &s->graph};
    if (s->empty) {
      KIO_KALDI(ALIGN_EMPTY_GRAPH, s->key);
      p->n.num_err++;
      if (p->cfg.each && p->cfg.each(p->cfg.each_user, &u, GALIGN_UTT_EMPTY_GRAPH)) goto halt;
      continue;
    }
    galign_result *r = &b->res[pos[e->slot]];
    if (b->align_rc != KIO_OK && align_alone(p, s, r) != KIO_OK) { rc = KIO_ERR; goto done; }
    if (p->cfg.margin_mode) galign_margin_count(&p->mc, s->band_status, r->band_failed);
    if (r->retried) {
      p->n.num_retry++;
      KIO_KALDI(ALIGN_RETRY, s->key, kio_fmt_g(buf1, o->retry_beam));
    }
    u.res = r;
    if (!r->ok) {
      KIO_KALDI(ALIGN_FAILED, s->key, (int)s->feats.rows);
      p->n.num_err++;
      if (p->cfg.each && p->cfg.each(p->cfg.each_user, &u, GALIGN_UTT_FAILED)) goto halt;
      continue;
    }
    p->n.num_done++;
    p->n.tot_like += r->like;
    p->n.frame_count += s->feats.rows;
    double t0 = kio_now_s();
    kio_int_vec ali = {s->feats.rows, r->ali};
    kio_vector v = {s->feats.rows, r->per_frame, (size_t)s->feats.rows};
    if ((p->ali && kio_writer_write(p->ali, s->key, &ali) != KIO_OK) ||
        (p->scores && kio_writer_write(p->scores, s->key, &r->score) != KIO_OK) ||
        (p->per_frame && kio_writer_write(p->per_frame, s->key, &v) != KIO_OK)) {
      rc = KIO_ERR;
      goto done;
    }
    p->t_write += kio_now_s() - t0;
    if (p->cfg.each && p->cfg.each(p->cfg.each_user, &u, GALIGN_UTT_ALIGNED)) goto halt;
    b->utts[nutt++] = u;
  }
  if (p->hook && nutt > 0) {
    double t0 = kio_now_s();
    rc = p->hook(p->user, nutt, b->utts);
    p->t_hook += kio_now_s() - t0;
  }
  if (b->fatal) rc = KIO_ERR;  /* reading failed after these utterances */
  if (rc == KIO_OK && p->cfg.progress && p->cfg.progress(p->cfg.each_user, &p->n)) goto halt;
  goto done;
halt:
  p->stopped = 1;
  rc = KIO_ERR;
done:
  for (int k = 0; k < b->nalign; k++) galign_result_free(&b->res[k]);
  free(pos);
  return rc;
}

/* ---------------- interface ---------------- */

/* The features' archive (regular file) parsed ahead on threads, as
 * gmm-acc-stats-ali's: looked up in the graphs' order, which is the
 * archive's for a sorted one, so reading overlaps the alignment (one thread
 * parsing 97.5 h was the job's bound). The same values and messages. */
static int read_threads(void) {
  return (int)kio_setting_int(KIO_SET_DEV_READ_THREADS, kio_cpu_share(8), 0, 64);
}

static int feats_open(galign_pipeline *p) {
  int threads = read_threads();
  return kio_ra_open_ahead(&p->feats, p->cfg.feats_rspecifier, &kio_matrix_holder,
                           kio_matrix_body_bytes, threads, 32 + 16 * threads);
}

int galign_pipeline_open(galign_pipeline **out, const galign_pipeline_cfg *cfg) {
  galign_pipeline *p = calloc(1, sizeof *p);
  *out = p;
  if (!p) { KIO_ERROR("Out of memory"); return KIO_ERR; }
  p->t_start = kio_now_s();
  p->cfg = *cfg;
  if (!p->cfg.scores_wspecifier) p->cfg.scores_wspecifier = "";
  if (!p->cfg.per_frame_wspecifier) p->cfg.per_frame_wspecifier = "";
  if (p->cfg.batch_size < 1) p->cfg.batch_size = 1;
  p->cur = &p->bufs[0];
  p->next = &p->bufs[1];
  p->closed = 1;  /* nothing open yet */
  p->tm = cfg->tm ? cfg->tm : &p->own_tm;
  p->am = cfg->am ? cfg->am : &p->own_am;
  if (cfg->aligner && *cfg->aligner) {
    p->aligner = *cfg->aligner;
    p->init_done = 1;
  } else if (cfg->use_gpu != GALIGN_GPU_NO && !cfg->warm_wait &&
             pthread_create(&p->warm_thread, NULL, warm_main, NULL) == 0) {
    p->warm_running = 1;
  }
  if ((!cfg->tm && kio_model_read(cfg->model_rxfilename, &p->own_tm, &p->own_am) != KIO_OK) ||
      galign_margin_open(&p->cfg, &p->priors) != KIO_OK) {  /* before the outputs */
    warm_join(p);
    return KIO_ERR;
  }
  const galign_opts *o = &p->cfg.opts;
  p->want_per_frame = p->cfg.per_frame_wspecifier[0] != '\0' || p->cfg.want_per_frame;
  p->beams_ok = !((o->retry_beam != 0 && o->retry_beam <= o->beam) || o->beam <= 0);
  p->prep_threads = kio_cpu_share(0);  /* this job's share of the cores */
  /* From here on log lines are routed by capture_handler: lines of other
   * threads are kept and printed where Kaldi would print them. */
  t_is_main = 1;
  galign_t_capture = NULL;
  kio_log_get_handler(&g_prev_handler, &g_prev_user);
  kio_log_set_handler(capture_handler, NULL);
  if (p->aligner) p->init_rc = KIO_OK;  /* the caller's */
  else if (pthread_create(&p->init_thread, NULL, init_main, p) == 0) p->init_running = 1;
  else init_main(p);
  /* Kaldi creates nothing before the tables: the aligner's lines come first. */
  event_list open_lines = {0};
  galign_t_capture = &open_lines;
  p->closed = 0;
  p->tr = p->cfg.transcripts_rspecifier && p->cfg.transcripts_rspecifier[0] && p->cfg.compile;
  p->by_key = !p->tr && p->cfg.features_order;
  if (!p->tr && !p->by_key && p->cfg.gpu_feats && galign_gfeat_wanted() && init_wait(p) == KIO_OK) {
    /* the backend decides: the aligner first (its lines still come first) */
    event_list quiet = {0};
    galign_t_capture = &quiet;  /* errors of the chain's tables: the CPU chain reports them */
    p->gf = galign_gfeat_open(p->cfg.feats_rspecifier, p->aligner);
    galign_t_capture = &open_lines;
    for (int i = 0; i < quiet.n; i++)
      if (quiet.v[i].level > 0) galign_ev_replay_one(&quiet.v[i]);
    galign_ev_free(&quiet);
  }
  int open_ok =
      (p->tr || p->by_key
           ? kio_seq_open(&p->fseq, p->cfg.feats_rspecifier, &kio_matrix_holder) == KIO_OK &&
                 (p->tr ? kio_ra_open(&p->trans, p->cfg.transcripts_rspecifier,
                                      &kio_int_vec_holder)
                        : kio_ra_open(&p->gra, p->cfg.graphs_rspecifier, &kio_fst_holder)) ==
                     KIO_OK
             : kio_seq_open(&p->graphs, p->cfg.graphs_rspecifier, &kio_fst_holder) == KIO_OK &&
                   (p->gf ? (galign_gfeat_start(p->gf), 1)  /* where the CPU chain starts */
                          : feats_open(p) == KIO_OK)) &&
      kio_writer_open(&p->ali, p->cfg.ali_wspecifier, &kio_int_vec_holder) == KIO_OK &&
      kio_writer_open(&p->scores, p->cfg.scores_wspecifier, &kio_float_holder) == KIO_OK &&
      kio_writer_open(&p->per_frame, p->cfg.per_frame_wspecifier, &kio_vector_holder) == KIO_OK;
  if (open_ok && !p->tr && !p->by_key) {
    /* an archive of binary graphs in a regular file is parsed on threads
     * too (one thread parsing them was the job's bound); the queue's
     * thread then takes them in order. Finding where each graph ends reads
     * it once more (~40% of parsing it, serial): not worth it on fewer
     * than 3 cores. */
    int threads = read_threads();
    if (threads >= 3)
      kio_seq_read_ahead(p->graphs, kio_fst_body_bytes, threads, 32 + 16 * threads);
    open_ok = galign_gq_open(p) == KIO_OK;
  }
  if (open_ok && p->fseq) {  /* features in order: parsed ahead likewise */
    int threads = read_threads();
    if (threads > 0) kio_seq_read_ahead(p->fseq, kio_matrix_body_bytes, threads, 32 + 16 * threads);
  }
  galign_t_capture = NULL;
  if (open_ok) read_batch(p, p->cur);
  int init_rc = init_wait(p);
  galign_ev_replay(&open_lines);
  galign_ev_free(&open_lines);
  if (init_rc != KIO_OK || !open_ok) { stop(p); return KIO_ERR; }
  p->t_setup = kio_now_s() - p->t_start - p->t_read;  /* the first batch overlapped it */
  return KIO_OK;
}

const kio_tmodel *galign_pipeline_tmodel(const galign_pipeline *p) { return p->tm; }
const kio_am_gmm *galign_pipeline_am(const galign_pipeline *p) { return p->am; }
int galign_pipeline_stopped(const galign_pipeline *p) { return p && p->stopped; }
int galign_pipeline_is_gpu(const galign_pipeline *p) {
  return p && galign_aligner_is_gpu(p->aligner);
}
const galign_aligner *galign_pipeline_aligner(const galign_pipeline *p) { return p->aligner; }

int galign_pipeline_run(galign_pipeline *p, galign_pipeline_hook hook, void *user) {
  p->hook = hook;
  p->user = user;
  batch *cur = p->cur, *next = p->next;
  int rc = align_start(p, cur);
  while (rc == KIO_OK) {
    int more = !cur->fatal && !galign_gs_done(p);
    if (more) {
      galign_aligner_expect_more(p->aligner);  /* through the GPU service: its memory made ready */
      read_batch(p, next);  /* overlaps the alignment of cur */
    }
    if (more && !next->fatal && p->running && !atomic_load(&p->wb_done)) {
      /* The worker is still busy: prepare next's graphs here, so that the
       * worker goes from cur's alignment straight to next's. */
      double t0 = kio_now_s();
      prep_batch(p, next);
      next->prepped = 1;
      /* through the GPU service: next goes to it now, so that it aligns
       * next right after cur (the same lists the worker will pass) */
      if (!p->gf && grow_lists(next) == KIO_OK) {
        collect(p, next);
        if (next->nalign > 0)
          galign_aligner_send_ahead(p->aligner, next->nalign, next->graphs, next->feats,
                                    p->want_per_frame);
      }
      p->t_prep_main += kio_now_s() - t0;
    }
    align_wait(p);
    if (more && cur->align_rc == KIO_OK && !next->fatal) {
      /* Start aligning next before emitting cur (unless cur needs the
       * aligner again to locate a fatal error). */
      rc = align_start(p, next);
      if (rc == KIO_OK) rc = emit_batch(p, cur);
    } else {
      rc = emit_batch(p, cur);
      if (rc != KIO_OK || !more) break;
      rc = align_start(p, next);
    }
    batch *t = cur; cur = next; next = t;
  }
  stop(p);
  /* The features read to their end: the device chain's final lines where
   * the CPU chain's end (before the program's summary). */
  if (rc == KIO_OK) galign_gfeat_finish(p->gf);
  return rc;
}

void galign_pipeline_get_counts(const galign_pipeline *p, galign_pipeline_counts *c) {
  *c = p->n;
}

void galign_pipeline_log_summary(const galign_pipeline *p) {
  if (kio_log_verbose() >= 1) {
    galign_aligner_stats st;
    galign_aligner_get_stats(p->aligner, &st);
    char hook[64] = "";
    if (p->hook) snprintf(hook, sizeof hook, ", per-batch hook %.3f s", p->t_hook);
    int gpu = galign_aligner_is_gpu(p->aligner);
    KIO_VLOG(1, "Time: setup (model, tables%s) %.3f s, reading %.3f s (graphs %.3f s, "
             "features %.3f s), then overlapped with reading: graph preparation %.3f s, "
             "alignment %.3f s (on the %s; phases summed over the aligner's threads: "
             "likelihoods %.3f s, Viterbi %.3f s, best path %.3f s, staging copies "
             "%.3f s); writing %.3f s%s, total %.3f s",
             gpu ? ", GPU" : "", p->t_setup, p->t_read, p->t_graphs, p->t_feats,
             p->t_prep + p->t_prep_main,
             p->t_align, gpu ? "GPU" : "CPU", st.loglike_s, st.viterbi_s, st.backtrace_s,
             st.copy_s, p->t_write, hook, kio_now_s() - p->t_start);
  }
  if (p->gf) {
    int64_t u, f;
    galign_gfeat_stats(p->gf, &u, &f);
    KIO_VLOG(1, "Features computed on the GPU: %lld utterances, %lld frames; likelihoods "
             "of %lld utterances read them on the device", (long long)u, (long long)f,
             (long long)galign_aligner_dev_feat_utts(p->aligner));
  }
  if (p->cfg.margin_mode) galign_margin_log(p->cfg.margin, &p->mc);
  char buf[32];
  kio_fmt_g(buf, p->n.tot_like / (double)p->n.frame_count);
  long long frames = p->n.frame_count;
  long retried = p->n.num_retry, done = p->n.num_done, err = p->n.num_err;
  if (p->tr) {  /* gmm-align */
    KIO_KALDI(GA_OVERALL, buf, frames);
    KIO_KALDI(GA_RETRIED, retried, done + err);
    KIO_KALDI(GA_DONE, done, err);
  } else {
    KIO_KALDI(GAC_OVERALL, buf, frames);
    KIO_KALDI(GAC_RETRIED, retried, done + err);
    KIO_KALDI(GAC_DONE, done, err);
  }
}

int galign_pipeline_close(galign_pipeline *p) {
  if (!p || p->closed) return KIO_OK;
  p->closed = 1;
  galign_gq_join(p);  /* the graph reader is closed below */
  /* Readers first (Kaldi closes the writers first): after an input failed
   * (a read error or a failed pipe seen at the end) the outputs are
   * incomplete and are discarded, not closed, so that no output pipe's
   * command sees the end of its input and ends its stream as complete. */
  int failed = 0;
  if (p->trans && kio_ra_close(p->trans) != KIO_OK) failed = 1;
  if (p->gra && kio_ra_close(p->gra) != KIO_OK) failed = 1;
  if (p->fseq && kio_seq_close(p->fseq) != KIO_OK) failed = 1;
  if (p->feats && kio_ra_close(p->feats) != KIO_OK) failed = 1;
  if (p->gf && galign_gfeat_close(p->gf) != KIO_OK) failed = 1;
  if (p->graphs && kio_seq_close(p->graphs) != KIO_OK) failed = 1;
  if (failed) {
    kio_writer_discard(p->per_frame);
    kio_writer_discard(p->scores);
    kio_writer_discard(p->ali);
  } else {
    if (kio_writer_close(p->per_frame) != KIO_OK) failed = 1;
    if (kio_writer_close(p->scores) != KIO_OK) failed = 1;
    if (kio_writer_close(p->ali) != KIO_OK) failed = 1;
  }
  p->per_frame = p->scores = p->ali = NULL;
  p->feats = NULL;
  p->graphs = NULL;
  p->trans = NULL;
  p->gra = NULL;
  p->fseq = NULL;
  return failed ? KIO_ERR : KIO_OK;
}

void galign_pipeline_free(galign_pipeline *p) {
  if (!p) return;
  stop(p);
  galign_pipeline_close(p);
  galign_gq_free(p);
  for (int i = 0; i < 2; i++) {
    galign_gfeat_batch_free(p->bufs[i].gfb);
    galign_batch_free(&p->bufs[i]);
  }
  galign_gfeat_free(p->gf);
  galign_ev_free(&p->init_lines);
  if (!p->cfg.aligner) galign_aligner_free(p->aligner);  /* else the caller's */
  galign_prior_table_free(p->priors);
  kio_tmodel_free(&p->own_tm);
  kio_am_gmm_free(&p->own_am);
  free(p);
}

void galign_pipeline_discard(galign_pipeline *p) {
  if (!p) return;
  stop(p);
  if (!p->closed) {
    /* the readers (their errors no longer matter), then the outputs
     * abandoned as a fatal exit abandons them */
    p->closed = 1;
    galign_gq_join(p);
    kio_ra_close(p->trans);
    kio_ra_close(p->gra);
    kio_seq_close(p->fseq);
    kio_ra_close(p->feats);
    if (p->gf) galign_gfeat_close(p->gf);
    kio_seq_close(p->graphs);
    kio_writer_discard(p->per_frame);
    kio_writer_discard(p->scores);
    kio_writer_discard(p->ali);
    p->per_frame = p->scores = p->ali = NULL;
    p->trans = p->gra = p->feats = NULL;
    p->fseq = p->graphs = NULL;
  }
  galign_pipeline_free(p);
}
