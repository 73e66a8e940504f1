/* The aligner of include/kaldi-gpu-align.h: gmm-align-compiled's pipeline
 * (gpu-align/align-pipeline.h) for archives, galign_align_batch for
 * utterances in memory; the backend (gpu-align/gpu-align.h) is made at the
 * first call and kept. */
#include "api-internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/sys/cpu-share.h"
#include "base/sys/kaldi-msg.h"
#include "base/sys/log.h"
#include "device/cuda-util.h"
#include "device/svc-link.h"
#include "gpu-align/align-pipeline.h"


void kga_aligner_opts_init(kga_aligner_opts *o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  galign_opts g;
  galign_opts_default(&g);
  o->beam = g.beam;
  o->retry_beam = g.retry_beam;
  o->transition_scale = g.transition_scale;
  o->acoustic_scale = g.acoustic_scale;
  o->self_loop_scale = g.self_loop_scale;
  o->careful = g.careful;
  o->use_gpu = KGA_GPU_OPTIONAL;
  o->num_gpus = 1;
  o->batch_size = 8192;
}

void kga_archive_opts_init(kga_archive_opts *o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->order = KGA_ORDER_GRAPHS;
  o->device_features = 1;
}

/* The CUDA context is created while the model is read and the tables are
 * opened (a GPU service, when one will be used, needs none here). */
static void *warm_main(void *arg) {
  (void)arg;
  if (!kio_svc_wanted()) kio_cuda_warm_up();
  return NULL;
}

void kga_aligner_warm_wait(void *arg) {
  kga_aligner *al = arg;
  pthread_mutex_lock(&al->warm_mu);
  if (al->warm_running) pthread_join(al->warm, NULL);
  al->warm_running = 0;
  pthread_mutex_unlock(&al->warm_mu);
}

int kga_aligner_check_opts(kga_call *c, const kga_aligner_opts *o) {
  if (o->use_gpu < KGA_GPU_NO || o->use_gpu > KGA_GPU_WAIT)
    return kga_call_fail(c, KGA_EINVAL, "use_gpu %d: not one of no, yes, optional, wait",
                         (int)o->use_gpu);
  if (o->batch_size < 1) return kga_call_fail(c, KGA_EINVAL, "batch_size must be >= 1");
  if (o->num_gpus < 1) return kga_call_fail(c, KGA_EINVAL, "num_gpus must be >= 1");
  return KGA_OK;
}

int kga_aligner_init(kga_aligner *al, const char *model_rxfilename, const kga_aligner_opts *o) {
  memset(al, 0, sizeof *al);
  al->o = *o;
  galign_opts_default(&al->gopts);
  al->gopts.beam = o->beam;
  al->gopts.retry_beam = o->retry_beam;
  al->gopts.transition_scale = o->transition_scale;
  al->gopts.acoustic_scale = o->acoustic_scale;
  al->gopts.self_loop_scale = o->self_loop_scale;
  al->gopts.careful = o->careful;
  al->gopts.num_gpus = o->num_gpus;
  al->use_gpu = (galign_use_gpu)o->use_gpu;
  pthread_mutex_init(&al->warm_mu, NULL);
  if (al->use_gpu != GALIGN_GPU_NO && pthread_create(&al->warm, NULL, warm_main, NULL) == 0)
    al->warm_running = 1;
  if (kio_model_read(model_rxfilename, &al->tm, &al->am) != KIO_OK) {
    kga_aligner_warm_wait(al);
    return KIO_ERR;
  }
  return KIO_OK;
}

void kga_aligner_fini(kga_aligner *al) {
  kga_aligner_warm_wait(al);
  galign_aligner_free(al->backend);
  kio_tmodel_free(&al->tm);
  kio_am_gmm_free(&al->am);
  pthread_mutex_destroy(&al->warm_mu);
}

void kga_aligner_refresh(kga_aligner *al) {
  if (!al->model_changed) return;
  galign_aligner_free(al->backend);
  al->backend = NULL;
  al->model_changed = 0;
}

int kga_aligner_new(kga_aligner **out, const char *model_rxfilename, const kga_aligner_opts *o) {
  kga_call c;
  kga_aligner_opts d;
  if (!o) { kga_aligner_opts_init(&d); o = &d; }
  kga_call_begin(&c, o->log, o->log_user);
  if (!out || !model_rxfilename) return kga_call_end(&c, KGA_EINVAL);
  *out = NULL;
  int st = kga_aligner_check_opts(&c, o);
  if (st != KGA_OK) return kga_call_end(&c, st);
  kga_aligner *al = malloc(sizeof *al);
  if (!al) return kga_call_end(&c, KGA_ENOMEM);
  if (kga_aligner_init(al, model_rxfilename, o) != KIO_OK) {
    kga_aligner_fini(al);
    free(al);
    return kga_call_end(&c, KGA_ERROR);
  }
  *out = al;
  return kga_call_end(&c, KGA_OK);
}

void kga_aligner_free(kga_aligner *al) {
  if (!al) return;
  kga_call c;
  kga_call_begin(&c, al->o.log, al->o.log_user);
  kga_aligner_fini(al);
  free(al);
  kga_call_end(&c, KGA_OK);
}

int kga_aligner_is_gpu(const kga_aligner *al) { return al && galign_aligner_is_gpu(al->backend); }
int32_t kga_aligner_dim(const kga_aligner *al) { return al ? al->am.dim : 0; }
int32_t kga_aligner_num_pdfs(const kga_aligner *al) { return al ? al->am.num_pdfs : 0; }
int32_t kga_aligner_num_transition_ids(const kga_aligner *al) { return al ? al->tm.num_tids : 0; }

/* ---------------- silence boost (kalpy's boost_silence) ---------------- */

static int sorted_unique(const int32_t *v, int n) {
  for (int i = 1; i < n; i++)
    if (v[i] <= v[i - 1]) return 0;
  return 1;
}

static int in_sorted(const int32_t *v, int n, int32_t x) {
  int lo = 0, hi = n;
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2;
    if (v[mid] < x) lo = mid + 1;
    else hi = mid;
  }
  return lo < n && v[lo] == x;
}

/* Kaldi's GetPdfsForPhones (hmm-utils.cc): the pdfs of transition-states
 * whose phone is listed, marked in is_pdf; GetPhonesForPdfs for one pdf:
 * whether a phone not listed also uses it. */
static int pdf_shared(const kio_tmodel *tm, int32_t pdf, const int32_t *phones, int n) {
  for (int32_t ts = 0; ts < tm->num_tuples; ts++) {
    const kio_tuple *t = &tm->tuples[ts];
    if ((t->forward_pdf == pdf || t->self_loop_pdf == pdf) && !in_sorted(phones, n, t->phone))
      return 1;
  }
  return 0;
}

int kga_aligner_boost_silence(kga_aligner *al, const int32_t *phones, int n, float factor,
                              int only_silence) {
  if (!al) return KGA_EINVAL;
  kga_call c;
  kga_call_begin(&c, al->o.log, al->o.log_user);
  if (n < 0 || (n > 0 && !phones)) return kga_call_end(&c, KGA_EINVAL);
  if (!sorted_unique(phones, n))  /* Kaldi asserts it (GetPdfsForPhones) */
    return kga_call_end(&c, kga_call_fail(&c, KGA_EINVAL, "silence phones must be sorted and "
                                          "unique"));
  int st = kga_busy_take(&c, &al->busy);
  if (st != KGA_OK) return kga_call_end(&c, st);
  const kio_tmodel *tm = &al->tm;
  uint8_t *is_pdf = calloc((size_t)al->am.num_pdfs + 1, 1);
  if (!is_pdf) return kga_call_end(&c, KGA_ENOMEM);
  for (int32_t ts = 0; ts < tm->num_tuples; ts++) {
    const kio_tuple *t = &tm->tuples[ts];
    if (!in_sorted(phones, n, t->phone)) continue;
    if (t->forward_pdf >= 0 && t->forward_pdf < al->am.num_pdfs) is_pdf[t->forward_pdf] = 1;
    if (t->self_loop_pdf >= 0 && t->self_loop_pdf < al->am.num_pdfs) is_pdf[t->self_loop_pdf] = 1;
  }
  int rc = KGA_OK;
  for (int32_t pdf = 0; pdf < al->am.num_pdfs && rc == KGA_OK; pdf++) {
    if (!is_pdf[pdf] || (only_silence && pdf_shared(tm, pdf, phones, n))) continue;
    kio_diag_gmm *g = &al->am.pdfs[pdf];
    for (int32_t m = 0; m < g->num_comp; m++) g->weights[m] = g->weights[m] * factor;
    if (kio_diag_gmm_compute_gconsts(g) != KIO_OK) rc = KGA_ERROR;
    al->model_changed = 1;
  }
  free(is_pdf);
  kga_busy_give(&al->busy);
  return kga_call_end(&c, rc);
}

/* ---------------- archives ---------------- */

/* The batch's results so far (o->results): they point into the batch,
 * which lives until the pipeline's progress call ends it. */
typedef struct {
  const kga_archive_opts *o;
  kga_align_result *batch;
  int n, cap;
} each_ctx;

static void batch_clear(each_ctx *e) {
  for (int i = 0; i < e->n; i++) free((void *)e->batch[i].words);
  e->n = 0;
}

/* The pipeline's cfg.each: one utterance to the caller's result callback,
 * and into the batch for its results callback. */
static int each(void *user, const galign_pipeline_utt *u, int status) {
  each_ctx *e = user;
  const kga_archive_opts *o = e->o;
  if (!o->result && !o->results) return 0;
  if (o->results && e->n == e->cap) {
    int cap = e->cap ? 2 * e->cap : 256;
    kga_align_result *b = realloc(e->batch, (size_t)cap * sizeof *b);
    if (!b) { KIO_ERROR("Out of memory"); return 1; }
    e->batch = b;
    e->cap = cap;
  }
  kga_align_result r;
  memset(&r, 0, sizeof r);
  r.key = u->key;
  r.status = status;
  r.num_frames = u->feats->rows;
  int32_t *w = NULL;
  if (u->res) {
    r.retried = u->res->retried;
    r.like = u->res->like;
    r.score = u->res->score;
    if (u->res->ok) {
      r.ali = u->res->ali;
      if (o->flags & KGA_WANT_PER_FRAME) r.per_frame = u->res->per_frame;
      if ((o->flags & KGA_WANT_WORDS) &&
          kga_words_on_path(&u->graph->fst, r.ali, r.num_frames, &w, &r.num_words) != KIO_OK)
        KIO_WARN("No path of the graph of %s carries its alignment: no words", u->key);
      r.words = w;
    }
  }
  int stop = o->result ? o->result(o->user, &r) != 0 : 0;
  if (o->results) e->batch[e->n++] = r;  /* words freed with the batch */
  else free(w);
  return stop;
}

/* The pipeline's cfg.progress, at the end of each batch. */
static int progress(void *user, const galign_pipeline_counts *n) {
  each_ctx *e = user;
  const kga_archive_opts *o = e->o;
  int stop = 0;
  if (o->results && e->n > 0) stop = o->results(o->user, e->n, e->batch) != 0;
  batch_clear(e);
  if (!stop && o->progress) stop = o->progress(o->user, n->num_done, n->num_err, n->frame_count);
  return stop != 0;
}

int kga_archive_run(kga_call *c, kga_aligner *al, const char *graphs, const char *feats,
                    const kga_archive_opts *o, int gpu_feats, const kga_archive_ext *ext,
                    kga_align_counts *counts) {
  if (o->order != KGA_ORDER_GRAPHS && o->order != KGA_ORDER_FEATURES)
    return kga_call_fail(c, KGA_EINVAL, "order %d: not KGA_ORDER_GRAPHS or _FEATURES", o->order);
  int margin_mode = o->prior_alignments_rspecifier && o->prior_alignments_rspecifier[0] ? 1
                    : o->margin_from_output                                            ? 2
                                                                                       : 0;
  if (margin_mode && (o->margin < 0 || o->order != KGA_ORDER_GRAPHS))
    return kga_call_fail(c, KGA_EINVAL, "margin mode needs margin >= 0 and graphs order");
  kga_aligner_refresh(al);
  galign_pipeline_cfg cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.model_rxfilename = "";
  cfg.graphs_rspecifier = graphs;
  cfg.feats_rspecifier = feats;
  cfg.ali_wspecifier = o->alignments_wspecifier ? o->alignments_wspecifier : "";
  cfg.scores_wspecifier = o->scores_wspecifier;
  cfg.per_frame_wspecifier = o->per_frame_wspecifier;
  cfg.opts = al->gopts;
  cfg.use_gpu = al->use_gpu;
  cfg.batch_size = al->o.batch_size;
  cfg.margin_mode = margin_mode;
  cfg.prior_rspecifier = o->prior_alignments_rspecifier;
  cfg.margin = o->margin;
  cfg.gpu_feats = gpu_feats && o->device_features;
  cfg.features_order = o->order == KGA_ORDER_FEATURES;
  cfg.want_per_frame = (o->flags & KGA_WANT_PER_FRAME) != 0;
  cfg.tm = &al->tm;
  cfg.am = &al->am;
  cfg.aligner = &al->backend;
  cfg.warm_wait = kga_aligner_warm_wait;
  cfg.warm_user = al;
  each_ctx ec = {o, NULL, 0, 0};
  cfg.each = each;
  cfg.progress = progress;
  cfg.each_user = &ec;
  galign_pipeline *p = NULL;
  int ok = galign_pipeline_open(&p, &cfg) == KIO_OK &&
           (!ext || !ext->after_open || ext->after_open(ext->u, p) == KIO_OK) &&
           galign_pipeline_run(p, ext ? ext->hook : NULL, ext ? ext->u : NULL) == KIO_OK &&
           (!ext || !ext->before_summary || ext->before_summary(ext->u) == KIO_OK);
  if (ok) {
    galign_pipeline_log_summary(p);
    if (ext && ext->after_summary) ext->after_summary(ext->u);
  }
  galign_pipeline_counts n;
  if (p) galign_pipeline_get_counts(p, &n);
  else memset(&n, 0, sizeof n);
  if (counts) {
    counts->done = n.num_done;
    counts->errors = n.num_err;
    counts->retried = n.num_retry;
    counts->frames = n.frame_count;
    counts->total_like = n.tot_like;
  }
  batch_clear(&ec);  /* a batch cut short */
  free(ec.batch);
  double t0 = kio_now_s();
  if (ok) ok = galign_pipeline_close(p) == KIO_OK;
  if (!ok) {
    int stopped = galign_pipeline_stopped(p);
    c->mute = 1;  /* Kaldi prints nothing after its ERROR */
    galign_pipeline_discard(p);
    return stopped ? KGA_ECANCELED : !p ? KGA_ENOMEM : KGA_ERROR;
  }
  galign_pipeline_free(p);
  if (!ext)
    KIO_VLOG(2, "Closing and freeing took %.3f s", kio_now_s() - t0);
  return KGA_OK;
}

int kga_align_archive(kga_aligner *al, const char *graphs, const char *feats,
                      const kga_archive_opts *o, kga_align_counts *counts) {
  if (!al) return KGA_EINVAL;
  kga_call c;
  kga_call_begin(&c, al->o.log, al->o.log_user);
  kga_archive_opts d;
  if (!o) { kga_archive_opts_init(&d); o = &d; }
  if (!graphs || !feats) return kga_call_end(&c, KGA_EINVAL);
  int st = kga_busy_take(&c, &al->busy);
  if (st != KGA_OK) return kga_call_end(&c, st);
  st = kga_archive_lock(&c);
  if (st == KGA_OK) {
    st = kga_archive_run(&c, al, graphs, feats, o, 1, NULL, counts);
    kga_archive_unlock();
  }
  kga_busy_give(&al->busy);
  return kga_call_end(&c, st);
}

/* ---------------- utterances in memory ---------------- */

static int ensure_backend(kga_aligner *al) {
  kga_aligner_refresh(al);
  if (al->backend) return KIO_OK;
  kga_aligner_warm_wait(al);
  return galign_aligner_new(&al->backend, al->use_gpu, &al->tm, &al->am, &al->gopts);
}

/* Graph preparation (AddTransitionProbs, careful mode) on the job's share
 * of the cores; each graph's lines kept and logged in order afterwards. */
typedef struct {
  kga_aligner *al;
  const kga_utt *utts;
  const int *idx;
  galign_graph *graphs;
  kio_log_deferred **lines;
  int *rc;
  int m, first, step;
} prep_job;

static void *prep_main(void *arg) {
  prep_job *j = arg;
  for (int k = j->first; k < j->m; k += j->step) {
    kio_log_defer(&j->lines[k]);
    j->rc[k] = galign_graph_prepare(&j->utts[j->idx[k]].graph->fst, &j->al->tm, &j->al->gopts,
                                    &j->graphs[k]);
    kio_log_defer(NULL);
  }
  return NULL;
}

static int prep_all(kga_aligner *al, const kga_utt *utts, const int *idx, int m,
                    galign_graph *graphs) {
  enum { MAX_PREP = 16 };
  kio_log_deferred **lines = calloc((size_t)m, sizeof *lines);
  int *rc = calloc((size_t)m, sizeof *rc);
  if (!lines || !rc) {
    free(lines);
    free(rc);
    KIO_ERROR("Out of memory");
    return KIO_ERR;
  }
  int nt = kio_cpu_share(MAX_PREP);
  if (nt > m / 8) nt = m / 8;  /* threads only pay for many graphs */
  if (nt < 1) nt = 1;
  prep_job jobs[MAX_PREP];
  pthread_t th[MAX_PREP];
  int started = 0;
  for (int t = 0; t < nt; t++) jobs[t] = (prep_job){al, utts, idx, graphs, lines, rc, m, t, nt};
  for (int t = 1; t < nt; t++, started++)
    if (pthread_create(&th[t], NULL, prep_main, &jobs[t]) != 0) break;
  prep_main(&jobs[0]);
  for (int t = 1; t <= started; t++) pthread_join(th[t], NULL);
  for (int t = started + 1; t < nt; t++) prep_main(&jobs[t]);
  int out = KIO_OK;
  for (int k = 0; k < m; k++) {
    if (out == KIO_OK) kio_log_replay(&lines[k]);
    else kio_log_discard(&lines[k]);
    if (rc[k] != KIO_OK) out = KIO_ERR;  /* Kaldi dies at the first */
  }
  free(lines);
  free(rc);
  return out;
}

static const char *utt_key(const kga_utt *u, int i, char *buf, size_t n) {
  if (u->key) return u->key;
  snprintf(buf, n, "utterance %d", i);
  return buf;
}

/* One chunk of at most batch_size utterances, from index base. */
static int align_chunk(kga_aligner *al, const kga_utt *utts, int base, int n, unsigned flags,
                       kga_align_result *out) {
  int *idx = malloc((size_t)n * sizeof *idx);
  galign_graph *graphs = calloc((size_t)n, sizeof *graphs);
  const galign_graph **gp = malloc((size_t)n * sizeof *gp);
  kio_matrix *mats = calloc((size_t)n, sizeof *mats);
  const kio_matrix **mp = malloc((size_t)n * sizeof *mp);
  galign_result *res = calloc((size_t)n, sizeof *res);
  char kb[32];
  int m = 0, rc = KIO_ERR;
  if (!idx || !graphs || !gp || !mats || !mp || !res) { KIO_ERROR("Out of memory"); goto out; }
  for (int i = base; i < base + n; i++) {
    const kga_utt *u = &utts[i];
    const char *key = utt_key(u, i, kb, sizeof kb);
    out[i].key = u->key;
    out[i].num_frames = u->rows;
    if (u->rows == 0) {
      KIO_KALDI(GAC_ZERO_LENGTH, key);
      out[i].status = KGA_UTT_NO_FRAMES;
    } else if (u->graph->fst.num_states == 0 || u->graph->fst.start < 0) {
      KIO_KALDI(ALIGN_EMPTY_GRAPH, key);
      out[i].status = KGA_UTT_EMPTY_GRAPH;
    } else {
      idx[m++] = i;
    }
  }
  if (prep_all(al, utts, idx, m, graphs) != KIO_OK) goto out;
  for (int k = 0; k < m; k++) {
    const kga_utt *u = &utts[idx[k]];
    mats[k] = (kio_matrix){u->rows, u->cols, (float *)u->feats, 0};
    mp[k] = &mats[k];
    gp[k] = &graphs[k];
  }
  if (m > 0 && galign_align_batch(al->backend, m, gp, mp, (flags & KGA_WANT_PER_FRAME) != 0,
                                  res) != KIO_OK)
    goto out;
  char b1[32];
  for (int k = 0; k < m; k++) {
    int i = idx[k];
    kga_align_result *r = &out[i];
    const char *key = utt_key(&utts[i], i, kb, sizeof kb);
    r->retried = res[k].retried;
    r->like = res[k].like;
    r->score = res[k].score;
    if (res[k].retried)
      KIO_KALDI(ALIGN_RETRY, key, kio_fmt_g(b1, al->gopts.retry_beam));
    if (!res[k].ok) {
      KIO_KALDI(ALIGN_FAILED, key, (int)utts[i].rows);
      r->status = KGA_UTT_FAILED;
      continue;
    }
    r->status = KGA_UTT_ALIGNED;
    r->ali = res[k].ali;
    res[k].ali = NULL;
    if (flags & KGA_WANT_PER_FRAME) {
      r->per_frame = res[k].per_frame;
      res[k].per_frame = NULL;
    }
    if (flags & KGA_WANT_WORDS) {
      int32_t *w = NULL;
      if (kga_words_on_path(&graphs[k].fst, r->ali, r->num_frames, &w, &r->num_words) != KIO_OK)
        KIO_WARN("No path of the graph of %s carries its alignment: no words", key);
      r->words = w;
    }
  }
  rc = KIO_OK;
out:
  for (int k = 0; k < n && graphs; k++) galign_graph_free(&graphs[k]);
  for (int k = 0; k < n && res; k++) galign_result_free(&res[k]);
  free(idx); free(graphs); free(gp); free(mats); free(mp); free(res);
  return rc;
}

int kga_align_batch(kga_aligner *al, int n, const kga_utt *utts, unsigned flags,
                    kga_align_result *out) {
  if (!al) return KGA_EINVAL;
  kga_call c;
  kga_call_begin(&c, al->o.log, al->o.log_user);
  if (n < 0 || (n > 0 && (!utts || !out))) return kga_call_end(&c, KGA_EINVAL);
  if (n > 0) memset(out, 0, (size_t)n * sizeof *out);
  for (int i = 0; i < n; i++)
    if (!utts[i].graph || utts[i].rows < 0 || utts[i].cols < 0 || (utts[i].rows > 0 && !utts[i].feats))
      return kga_call_end(&c, kga_call_fail(&c, KGA_EINVAL, "utterance %d: no graph, or "
                                            "features missing or of negative size", i));
  const galign_opts *g = &al->gopts;
  if ((g->retry_beam != 0 && g->retry_beam <= g->beam) || g->beam <= 0) {
    char b1[32], b2[32];
    KIO_KALDI(ALIGN_BEAMS, kio_fmt_g(b1, g->beam), kio_fmt_g(b2, g->retry_beam));
    return kga_call_end(&c, KGA_ERROR);
  }
  int st = kga_busy_take(&c, &al->busy);
  if (st != KGA_OK) return kga_call_end(&c, st);
  if (n > 0 && ensure_backend(al) != KIO_OK) st = KGA_ERROR;
  for (int base = 0; base < n && st == KGA_OK; base += al->o.batch_size) {
    int m = n - base < al->o.batch_size ? n - base : al->o.batch_size;
    if (align_chunk(al, utts, base, m, flags, out) != KIO_OK) {
      kga_align_results_free(out, n);
      st = KGA_ERROR;
    }
  }
  kga_busy_give(&al->busy);
  return kga_call_end(&c, st);
}

void kga_align_results_free(kga_align_result *r, int n) {
  for (int i = 0; r && i < n; i++) {
    free((void *)r[i].ali);
    free((void *)r[i].per_frame);
    free((void *)r[i].words);
    memset(&r[i], 0, sizeof r[i]);
  }
}
