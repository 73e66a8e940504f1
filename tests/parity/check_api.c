/* The public library (include/kaldi-gpu-align.h) on the CPU against Kaldi's
 * outputs (tests/data/kaldi, noisy, edge): archive calls give
 * gmm-align-compiled's archive bytes, scores and log lines (through the log
 * callback, nothing on stderr), results in input order; kalpy's order;
 * in-memory batches (graphs as OpenFst bytes or CSR arrays, features in any
 * order) give the same alignments, with the transcript as words; the
 * accumulator and the fused pass give gmm-acc-stats-ali's bytes; errors
 * come back as statuses with the ERROR line's message; callbacks stop a
 * call; outputs of a failed call are abandoned. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "include/kaldi-gpu-align.h"
#include "tests/lib/test-util.h"
#include "base/io/table.h"
#include "base/sys/log.h"
#include "base/matrix/matrix.h"
#include "base/model/fst.h"
#include "base/model/model.h"

#define MONO "models/mono/final.mdl"
#define MONO_GRAPHS "ark:gunzip -c graphs/mono.fsts.gz|"

/* ---------------- helpers ---------------- */

/* Log lines the callback received, as "LEVEL msg" (the cli tests' form). */
typedef struct {
  char **lines;
  int n, errors;
  char first_error[1024];
} logbook;

static void record_line(void *user, const kga_log_line *l) {
  logbook *b = user;
  const char *lvl = l->level == KGA_LOG_INFO ? "LOG" : l->level == KGA_LOG_WARNING ? "WARNING"
                    : l->level == KGA_LOG_ERROR ? "ERROR" : l->level > 0 ? "VLOG" : "ASSERT";
  if (l->level == KGA_LOG_ERROR && !b->errors++)
    snprintf(b->first_error, sizeof b->first_error, "%s", l->msg);
  /* the text is Kaldi's whole line, ending with the message */
  size_t tl = strlen(l->text), ml = strlen(l->msg);
  ck_assert(tl >= ml && !strcmp(l->text + tl - ml, l->msg));
  ck_assert(!strncmp(l->text, lvl, strlen(lvl)) || l->level > 0 || l->level == KGA_LOG_ASSERT);
  b->lines = realloc(b->lines, (size_t)(b->n + 1) * sizeof *b->lines);
  size_t len = strlen(lvl) + ml + 2;
  b->lines[b->n] = malloc(len);
  snprintf(b->lines[b->n++], len, "%s %s", lvl, l->msg);
}

static void logbook_free(logbook *b) {
  for (int i = 0; i < b->n; i++) free(b->lines[i]);
  free(b->lines);
  memset(b, 0, sizeof *b);
}

static int has_line(const logbook *b, const char *s) {
  for (int i = 0; i < b->n; i++)
    if (!strcmp(b->lines[i], s)) return 1;
  return 0;
}

/* The messages of a Kaldi log file, "LEVEL msg", without the command line
 * and the stack traces. */
static int kaldi_log(const char *path, char ***out) {
  FILE *f = fopen(path, "r");
  ck_assert_ptr_nonnull(f);
  char line[4096];
  int n = 0, first = 1;
  *out = NULL;
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = 0;
    if (first) { first = 0; continue; }
    const char *lvl = !strncmp(line, "LOG (", 5) ? "LOG" : !strncmp(line, "WARNING (", 9)
                      ? "WARNING" : !strncmp(line, "ERROR (", 7) ? "ERROR" : NULL;
    if (!lvl) continue;
    const char *msg = strstr(line, ") ");
    ck_assert_ptr_nonnull(msg);
    *out = realloc(*out, (size_t)(n + 1) * sizeof **out);
    size_t len = strlen(lvl) + strlen(msg + 2) + 2;
    (*out)[n] = malloc(len);
    snprintf((*out)[n++], len, "%s %s", lvl, msg + 2);
  }
  fclose(f);
  return n;
}

/* Every utterance of an archive call, as the result callback saw it. */
typedef struct {
  int n, aligned, failed, retried, stop_at, progress_calls, batched;
  char *keys[64];
  int status[64];
  int32_t *ali[64], nf[64], *words[64], nw[64];
  float like[64];
  int per_frame_ok;
} results;

static int on_result(void *user, const kga_align_result *r) {
  results *s = user;
  ck_assert_int_lt(s->n, 64);
  int i = s->n++;
  s->keys[i] = strdup(r->key);
  s->status[i] = r->status;
  s->nf[i] = r->num_frames;
  s->like[i] = r->like;
  if (r->retried) s->retried++;
  if (r->status == KGA_UTT_ALIGNED) {
    s->aligned++;
    ck_assert_ptr_nonnull(r->ali);
    s->ali[i] = malloc(sizeof(int32_t) * (size_t)r->num_frames);
    memcpy(s->ali[i], r->ali, sizeof(int32_t) * (size_t)r->num_frames);
    if (r->per_frame) s->per_frame_ok++;
    if (r->words) {
      s->words[i] = malloc(sizeof(int32_t) * (size_t)r->num_words);
      memcpy(s->words[i], r->words, sizeof(int32_t) * (size_t)r->num_words);
      s->nw[i] = r->num_words;
    }
  } else {
    ck_assert_ptr_null(r->ali);
    if (r->status == KGA_UTT_FAILED) s->failed++;
  }
  return s->stop_at && s->n == s->stop_at;
}

/* The batch form: the same utterances, in the same order, a batch at once. */
static int on_results(void *user, int n, const kga_align_result *r) {
  results *s = user;
  ck_assert_int_gt(n, 0);
  ck_assert_int_le(s->batched + n, s->n);
  for (int i = 0; i < n; i++) {
    int k = s->batched++;
    ck_assert_str_eq(r[i].key, s->keys[k]);
    ck_assert_int_eq(r[i].status, s->status[k]);
    if (r[i].status == KGA_UTT_ALIGNED)
      ck_assert(!memcmp(r[i].ali, s->ali[k], sizeof(int32_t) * (size_t)r[i].num_frames));
    if (r[i].words) ck_assert(!memcmp(r[i].words, s->words[k], sizeof(int32_t) * (size_t)r[i].num_words));
  }
  return 0;
}

static int on_progress(void *user, int64_t done, int64_t errors, int64_t frames) {
  results *s = user;
  ck_assert_int_le(done + errors, s->n);
  ck_assert(frames >= 0);
  s->progress_calls++;
  return 0;
}

static void results_free(results *s) {
  for (int i = 0; i < s->n; i++) { free(s->keys[i]); free(s->ali[i]); free(s->words[i]); }
}

/* Kaldi's alignments, in archive order. */
typedef struct { int n; char *keys[64]; kio_int_vec v[64]; } ali_set;
static void read_alis(const char *rspec, ali_set *a) {
  memset(a, 0, sizeof *a);
  kio_seq_reader *r;
  ck_assert_int_eq(kio_seq_open(&r, rspec, &kio_int_vec_holder), KIO_OK);
  for (; !kio_seq_done(r); kio_seq_next(r)) {
    const kio_int_vec *v = kio_seq_value(r);
    ck_assert_ptr_nonnull(v);
    a->keys[a->n] = strdup(kio_seq_key(r));
    a->v[a->n].n = v->n;
    a->v[a->n].v = malloc(sizeof(int32_t) * (size_t)(v->n ? v->n : 1));
    memcpy(a->v[a->n].v, v->v, sizeof(int32_t) * (size_t)v->n);
    a->n++;
  }
  kio_seq_close(r);
}
static void ali_set_free(ali_set *a) {
  for (int i = 0; i < a->n; i++) { free(a->keys[i]); free(a->v[i].v); }
}
static const kio_int_vec *ali_of(const ali_set *a, const char *key) {
  for (int i = 0; i < a->n; i++)
    if (!strcmp(a->keys[i], key)) return &a->v[i];
  return NULL;
}

static void aligner_opts(kga_aligner_opts *o, logbook *b) {
  kga_aligner_opts_init(o);
  o->beam = 10;
  o->retry_beam = 40;
  o->acoustic_scale = 0.1f;
  o->self_loop_scale = 0.1f;
  o->use_gpu = KGA_GPU_NO;
  o->batch_size = 7;
  o->log = b ? record_line : NULL;
  o->log_user = b;
}

/* ---------------- archives ---------------- */

START_TEST(test_archive_mono) {
  logbook b = {0};
  kga_set_program_name("gmm-align-compiled");
  kga_aligner_opts o;
  aligner_opts(&o, &b);
  tu_stderr_start();
  kga_aligner *al;
  ck_assert_int_eq(kga_aligner_new(&al, MONO, &o), KGA_OK);
  ck_assert_int_eq(kga_aligner_dim(al), 39);
  kga_archive_opts x;
  kga_archive_opts_init(&x);
  char ali_ws[600], sc_ws[600];
  snprintf(ali_ws, sizeof ali_ws, "ark:%s", tu_tmp_path("mono.ali"));
  snprintf(sc_ws, sizeof sc_ws, "ark,t:%s", tu_tmp_path("scores.txt"));
  x.alignments_wspecifier = ali_ws;
  x.scores_wspecifier = sc_ws;
  x.flags = KGA_WANT_PER_FRAME | KGA_WANT_WORDS;
  results r = {0};
  x.result = on_result;
  x.results = on_results;
  x.progress = on_progress;
  x.user = &r;
  kga_align_counts n;
  ck_assert_int_eq(kga_align_archive(al, MONO_GRAPHS, "ark:feats/delta.ark", &x, &n), KGA_OK);
  ck_assert_int_eq(r.batched, 40);
  kga_aligner_free(al);
  char *err = tu_stderr_end();
  ck_assert_str_eq(err, "");  /* nothing printed: everything went to the callback */
  free(err);
  ck_assert_int_eq(n.done, 40);
  ck_assert_int_eq(n.errors, 0);
  ck_assert_int_eq((int)n.frames, 14158);
  ck_assert(tu_files_equal(tu_tmp_path("mono.ali"), "kaldi/mono/ali.ark"));
  ck_assert(tu_files_equal(tu_tmp_path("scores.txt"), "kaldi/mono/scores.txt"));
  ck_assert_int_eq(r.aligned, 40);
  ck_assert_int_eq(r.per_frame_ok, 40);
  ck_assert_int_ge(r.progress_calls, 6);  /* batches of at most 7 */
  ali_set k;
  read_alis("ark:kaldi/mono/ali.ark", &k);
  for (int i = 0; i < 40; i++) {
    ck_assert_str_eq(r.keys[i], k.keys[i]);
    ck_assert_int_eq(r.nf[i], k.v[i].n);
    ck_assert(!memcmp(r.ali[i], k.v[i].v, sizeof(int32_t) * (size_t)r.nf[i]));
  }
  /* the words of a training graph's path are its transcript */
  ali_set t;
  read_alis("ark,t:kaldi/text.int", &t);
  for (int i = 0; i < 40; i++) {
    const kio_int_vec *w = ali_of(&t, r.keys[i]);
    ck_assert_ptr_nonnull(w);
    ck_assert_int_eq(r.nw[i], w->n);
    ck_assert(!memcmp(r.words[i], w->v, sizeof(int32_t) * (size_t)w->n));
  }
  /* Kaldi's log lines in Kaldi's order (ours also says which backend and
   * which rounding) */
  char **want;
  int nw = kaldi_log("kaldi/mono/align.log", &want), j = 0;
  for (int i = 0; i < b.n; i++) {
    if (!strcmp(b.lines[i], "LOG Aligning on the CPU (--use-gpu=no).")) continue;
    if (!strncmp(b.lines[i], "LOG Rounding as OpenBLAS ", 25)) continue;
    ck_assert_int_lt(j, nw);
    ck_assert_str_eq(b.lines[i], want[j]);
    j++;
  }
  ck_assert_int_eq(j, nw);
  for (int i = 0; i < nw; i++) free(want[i]);
  free(want);
  ali_set_free(&k);
  ali_set_free(&t);
  results_free(&r);
  logbook_free(&b);
}
END_TEST

START_TEST(test_archive_noisy) {
  /* noisy/tri1.align.log: 40 retried, 39 failed; the one aligned = Kaldi's */
  logbook b = {0};
  kga_aligner_opts o;
  aligner_opts(&o, &b);
  kga_aligner *al;
  ck_assert_int_eq(kga_aligner_new(&al, "models/tri1/final.mdl", &o), KGA_OK);
  kga_archive_opts x;
  kga_archive_opts_init(&x);
  results r = {0};
  x.result = on_result;
  x.results = on_results;
  x.user = &r;
  kga_align_counts n;
  ck_assert_int_eq(kga_align_archive(al, "ark:gunzip -c graphs/tri1.fsts.gz|",
                                     "ark:noisy/delta.ark", &x, &n), KGA_OK);
  ck_assert_int_eq(r.batched, 40);
  ck_assert_int_eq(r.n, 40);
  ck_assert_int_eq(r.retried, 40);
  ck_assert_int_eq(r.failed, 39);
  ck_assert_int_eq((int)n.retried, 40);
  ck_assert_int_eq((int)n.errors, 39);
  ali_set k;
  read_alis("ark:noisy/tri1.ali.ark", &k);
  ck_assert_int_eq(k.n, 1);
  for (int i = 0; i < r.n; i++) {
    const kio_int_vec *v = ali_of(&k, r.keys[i]);
    ck_assert_int_eq(r.status[i] == KGA_UTT_ALIGNED, v != NULL);
    if (v) ck_assert(!memcmp(r.ali[i], v->v, sizeof(int32_t) * (size_t)v->n));
  }
  ck_assert(has_line(&b, "LOG Retried 40 out of 40 utterances."));
  kga_aligner_free(al);
  ali_set_free(&k);
  results_free(&r);
  logbook_free(&b);
}
END_TEST

START_TEST(test_archive_features_order) {
  /* kalpy's align_utterances: features in order, zero-length features and
   * keys without a graph skipped; edge/ali.ark has the aligned ones */
  logbook b = {0};
  kga_aligner_opts o;
  aligner_opts(&o, &b);
  kga_aligner *al;
  ck_assert_int_eq(kga_aligner_new(&al, MONO, &o), KGA_OK);
  kga_archive_opts x;
  kga_archive_opts_init(&x);
  x.order = KGA_ORDER_FEATURES;
  results r = {0};
  x.result = on_result;
  x.user = &r;
  ck_assert_int_eq(kga_align_archive(al, "ark:gunzip -c edge/mono.fsts.gz|",
                                     "ark:edge/feats.ark", &x, NULL), KGA_OK);
  kio_seq_reader *f;
  ck_assert_int_eq(kio_seq_open(&f, "ark:edge/feats.ark", &kio_matrix_holder), KIO_OK);
  ali_set k;
  read_alis("ark:edge/ali.ark", &k);
  int i = 0, skipped = 0;
  for (; !kio_seq_done(f); kio_seq_next(f)) {
    const kio_matrix *m = kio_seq_value(f);
    const char *key = kio_seq_key(f);
    char buf[256];
    snprintf(buf, sizeof buf, "WARNING Skipping %s due to zero-length features", key);
    if (m->rows == 0) { ck_assert(has_line(&b, buf)); skipped++; continue; }
    snprintf(buf, sizeof buf, "WARNING Skipping %s due to missing training graph", key);
    if (has_line(&b, buf)) { skipped++; continue; }
    ck_assert_int_lt(i, r.n);
    ck_assert_str_eq(r.keys[i], key);
    const kio_int_vec *v = ali_of(&k, key);
    ck_assert_int_eq(r.status[i] == KGA_UTT_ALIGNED, v != NULL);
    if (v) ck_assert(!memcmp(r.ali[i], v->v, sizeof(int32_t) * (size_t)v->n));
    i++;
  }
  ck_assert_int_eq(i, r.n);
  ck_assert_int_ge(skipped, 1);
  kio_seq_close(f);
  kga_aligner_free(al);
  ali_set_free(&k);
  results_free(&r);
  logbook_free(&b);
}
END_TEST

START_TEST(test_errors) {
  logbook b = {0};
  kga_aligner_opts o;
  aligner_opts(&o, &b);
  tu_stderr_start();
  kga_aligner *al = (kga_aligner *)&o;
  ck_assert_int_eq(kga_aligner_new(&al, "models/none/final.mdl", &o), KGA_ERROR);
  ck_assert_ptr_null(al);
  ck_assert_int_eq(b.errors, 1);
  ck_assert_str_eq(kga_last_error(), b.first_error);  /* the ERROR line's message */
  ck_assert_ptr_nonnull(strstr(kga_last_error(), "models/none/final.mdl"));
  /* a fatal error in the middle: the mono model on 40-dim features */
  logbook b2 = {0};
  aligner_opts(&o, &b2);
  ck_assert_int_eq(kga_aligner_new(&al, MONO, &o), KGA_OK);
  kga_archive_opts x;
  kga_archive_opts_init(&x);
  char ws[600];
  snprintf(ws, sizeof ws, "ark:%s", tu_tmp_path("bad.ali"));
  x.alignments_wspecifier = ws;
  ck_assert_int_eq(kga_align_archive(al, MONO_GRAPHS, "ark:feats/lda.ark", &x, NULL), KGA_ERROR);
  ck_assert_int_eq(b2.errors, 1);
  ck_assert_str_eq(kga_last_error(), b2.first_error);
  ck_assert_str_eq(b2.lines[b2.n - 1] + strlen("ERROR "), b2.first_error);  /* last line */
  ck_assert_int_ne(access(tu_tmp_path("bad.ali"), F_OK), 0);  /* abandoned as Kaldi's */
  /* the handle goes on working after it */
  ck_assert_int_eq(kga_align_archive(al, MONO_GRAPHS, "ark:feats/delta.ark", NULL, NULL), KGA_OK);
  /* bad arguments */
  ck_assert_int_eq(kga_align_archive(al, NULL, "ark:feats/delta.ark", NULL, NULL), KGA_EINVAL);
  x.order = 7;
  ck_assert_int_eq(kga_align_archive(al, MONO_GRAPHS, "ark:feats/delta.ark", &x, NULL),
                   KGA_EINVAL);
  ck_assert_ptr_nonnull(strstr(kga_last_error(), "order"));
  kga_aligner_free(al);
  kga_use_gpu g;
  ck_assert_int_eq(kga_parse_use_gpu("maybe", &g), KGA_EINVAL);
  ck_assert_int_eq(kga_parse_use_gpu("wait", &g), KGA_OK);
  ck_assert_int_eq(g, KGA_GPU_WAIT);
  /* no log callback: nothing is printed either */
  aligner_opts(&o, NULL);
  ck_assert_int_eq(kga_aligner_new(&al, "models/none/final.mdl", &o), KGA_ERROR);
  ck_assert_ptr_nonnull(strstr(kga_last_error(), "models/none/final.mdl"));
  char *err = tu_stderr_end();
  ck_assert_str_eq(err, "");
  free(err);
  logbook_free(&b);
  logbook_free(&b2);
}
END_TEST

START_TEST(test_cancel) {
  kga_aligner_opts o;
  aligner_opts(&o, NULL);
  kga_aligner *al;
  ck_assert_int_eq(kga_aligner_new(&al, MONO, &o), KGA_OK);
  kga_archive_opts x;
  kga_archive_opts_init(&x);
  char ws[600];
  snprintf(ws, sizeof ws, "ark:%s", tu_tmp_path("cut.ali"));
  x.alignments_wspecifier = ws;
  results r = {0};
  r.stop_at = 3;
  x.result = on_result;
  x.user = &r;
  ck_assert_int_eq(kga_align_archive(al, MONO_GRAPHS, "ark:feats/delta.ark", &x, NULL),
                   KGA_ECANCELED);
  ck_assert_int_eq(r.n, 3);
  ck_assert_int_ne(access(tu_tmp_path("cut.ali"), F_OK), 0);
  kga_aligner_free(al);
  results_free(&r);
}
END_TEST

/* Calls made from a result callback: the same handle is busy; another
 * archive call would wait for this one; another handle's in-memory call
 * works (and its lines stay its own). */
typedef struct { kga_aligner *self, *other; const kga_utt *u; int checked; } reentry;

static int on_result_reenter(void *user, const kga_align_result *r) {
  (void)r;
  reentry *e = user;
  if (e->checked++) return 0;
  kga_align_result out;
  ck_assert_int_eq(kga_align_batch(e->self, 1, e->u, 0, &out), KGA_EINVAL);
  ck_assert_ptr_nonnull(strstr(kga_last_error(), "in use"));
  ck_assert_int_eq(kga_align_archive(e->other, MONO_GRAPHS, "ark:feats/delta.ark", NULL, NULL),
                   KGA_EINVAL);
  ck_assert_int_eq(kga_align_batch(e->other, 1, e->u, 0, &out), KGA_OK);
  ck_assert_int_eq(out.status, KGA_UTT_ALIGNED);
  kga_align_results_free(&out, 1);
  return 0;
}

/* ---------------- in memory ---------------- */

typedef struct {
  int n;
  char *keys[64];
  kga_graph *g[64];
  kio_matrix f[64];
} mem_set;

/* Graphs as OpenFst bytes (or CSR arrays), features as float arrays. */
static void read_mem(mem_set *s, const char *graphs, const char *feats, int arrays) {
  memset(s, 0, sizeof *s);
  kio_seq_reader *gr;
  kio_ra_reader *fr;
  ck_assert_int_eq(kio_seq_open(&gr, graphs, &kio_fst_holder), KIO_OK);
  ck_assert_int_eq(kio_ra_open(&fr, feats, &kio_matrix_holder), KIO_OK);
  for (; !kio_seq_done(gr); kio_seq_next(gr)) {
    const char *key = kio_seq_key(gr);
    const kio_fst *g = kio_seq_value(gr);
    const kio_matrix *m = kio_ra_value(fr, key);
    ck_assert_ptr_nonnull(m);
    int i = s->n++;
    s->keys[i] = strdup(key);
    if (arrays) {
      int32_t *il = malloc(sizeof(int32_t) * (size_t)g->num_arcs + 4);
      int32_t *ol = malloc(sizeof(int32_t) * (size_t)g->num_arcs + 4);
      int32_t *ns = malloc(sizeof(int32_t) * (size_t)g->num_arcs + 4);
      float *w = malloc(sizeof(float) * (size_t)g->num_arcs + 4);
      for (int32_t a = 0; a < g->num_arcs; a++) {
        il[a] = g->arcs[a].ilabel; ol[a] = g->arcs[a].olabel;
        w[a] = g->arcs[a].weight; ns[a] = g->arcs[a].nextstate;
      }
      ck_assert_int_eq(kga_graph_from_arrays(&s->g[i], g->num_states, g->start, g->final,
                                             g->arc_start, il, ol, w, ns), KGA_OK);
      free(il); free(ol); free(ns); free(w);
    } else {
      char *buf = NULL;
      size_t len = 0;
      FILE *f = open_memstream(&buf, &len);
      ck_assert_int_eq(kio_fst_write(f, g), KIO_OK);
      fclose(f);
      ck_assert_int_eq(kga_graph_from_openfst(&s->g[i], buf, len), KGA_OK);
      free(buf);
    }
    ck_assert_int_eq(kga_graph_num_arcs(s->g[i]), g->num_arcs);
    ck_assert_int_eq(kio_matrix_resize(&s->f[i], m->rows, m->cols), KIO_OK);
    memcpy(s->f[i].data, m->data, sizeof(float) * (size_t)m->rows * (size_t)m->cols);
  }
  kio_seq_close(gr);
  kio_ra_close(fr);
}

static void mem_free(mem_set *s) {
  for (int i = 0; i < s->n; i++) {
    free(s->keys[i]);
    kga_graph_free(s->g[i]);
    kio_matrix_free(&s->f[i]);
  }
}

/* Aligns s in memory, in the order perm (any order: each utterance on its
 * own), and checks against Kaldi's archive. */
static void check_batch(kga_aligner *al, const mem_set *s, const int *perm, const char *ref) {
  kga_utt u[64];
  for (int k = 0; k < s->n; k++) {
    int i = perm[k];
    u[k] = (kga_utt){s->keys[i], s->g[i], s->f[i].data, s->f[i].rows, s->f[i].cols};
  }
  kga_align_result res[64];
  ck_assert_int_eq(kga_align_batch(al, s->n, u, KGA_WANT_WORDS | KGA_WANT_PER_FRAME, res), KGA_OK);
  ali_set k, t;
  read_alis(ref, &k);
  read_alis("ark,t:kaldi/text.int", &t);
  for (int j = 0; j < s->n; j++) {
    const kio_int_vec *v = ali_of(&k, u[j].key);
    ck_assert_ptr_nonnull(v);
    ck_assert_int_eq(res[j].status, KGA_UTT_ALIGNED);
    ck_assert_int_eq(res[j].num_frames, v->n);
    ck_assert(!memcmp(res[j].ali, v->v, sizeof(int32_t) * (size_t)v->n));
    ck_assert_ptr_nonnull(res[j].per_frame);
    const kio_int_vec *w = ali_of(&t, u[j].key);
    ck_assert_int_eq(res[j].num_words, w->n);
    ck_assert(!memcmp(res[j].words, w->v, sizeof(int32_t) * (size_t)w->n));
  }
  kga_align_results_free(res, s->n);
  ali_set_free(&k);
  ali_set_free(&t);
}

START_TEST(test_batch) {
  kga_aligner_opts o;
  aligner_opts(&o, NULL);
  o.batch_size = 16;  /* three chunks */
  kga_aligner *al;
  ck_assert_int_eq(kga_aligner_new(&al, MONO, &o), KGA_OK);
  mem_set s, a;
  read_mem(&s, MONO_GRAPHS, "ark:feats/delta.ark", 0);
  read_mem(&a, MONO_GRAPHS, "ark:feats/delta.ark", 1);
  ck_assert_int_eq(s.n, 40);
  int perm[64];
  for (int i = 0; i < s.n; i++) perm[i] = (i * 17 + 5) % 40;  /* speakers mixed */
  check_batch(al, &s, perm, "ark:kaldi/mono/ali.ark");
  check_batch(al, &a, perm, "ark:kaldi/mono/ali.ark");
  /* per-utterance outcomes: no frames, empty graph; a wrong dimension is fatal */
  kga_graph *empty;
  ck_assert_int_eq(kga_graph_from_arrays(&empty, 0, -1, NULL, NULL, NULL, NULL, NULL, NULL),
                   KGA_OK);
  kga_utt u[3] = {{"z", s.g[0], NULL, 0, 39}, {"e", empty, s.f[0].data, s.f[0].rows, 39},
                  {NULL, s.g[1], s.f[1].data, s.f[1].rows, 39}};
  kga_align_result r[3];
  ck_assert_int_eq(kga_align_batch(al, 3, u, 0, r), KGA_OK);
  ck_assert_int_eq(r[0].status, KGA_UTT_NO_FRAMES);
  ck_assert_int_eq(r[1].status, KGA_UTT_EMPTY_GRAPH);
  ck_assert_int_eq(r[2].status, KGA_UTT_ALIGNED);
  ck_assert_ptr_null(r[2].words);
  kga_align_results_free(r, 3);
  kga_utt bad = {"x", s.g[0], s.f[0].data, s.f[0].rows / 3, 117};
  ck_assert_int_eq(kga_align_batch(al, 1, &bad, 0, r), KGA_ERROR);
  ck_assert_str_ne(kga_last_error(), "");
  kga_graph *junk;
  ck_assert_int_eq(kga_graph_from_openfst(&junk, "junk", 4), KGA_EINVAL);
  ck_assert_ptr_null(junk);
  kga_graph_free(empty);
  mem_free(&s);
  mem_free(&a);
  kga_aligner_free(al);
}
END_TEST

/* ---------------- statistics ---------------- */

START_TEST(test_acc) {
  kga_acc_opts o;
  kga_acc_opts_init(&o);
  o.use_gpu = KGA_GPU_NO;
  kga_acc *acc;
  ck_assert_int_eq(kga_acc_new(&acc, MONO, &o), KGA_OK);
  kga_acc_counts n;
  ck_assert_int_eq(kga_acc_archive(acc, "ark:feats/delta.ark", "ark:kaldi/mono/ali.ark", NULL,
                                   NULL, &n), KGA_OK);
  ck_assert_int_eq(n.done, 40);
  ck_assert_int_eq((int)n.frames, 14158);
  ck_assert_int_eq(kga_acc_write(acc, tu_tmp_path("mono.acc"), 1), KGA_OK);
  ck_assert(tu_files_equal(tu_tmp_path("mono.acc"), "kaldi/mono/final.acc"));
  ck_assert_int_eq(kga_acc_write(acc, tu_tmp_path("mono.txt.acc"), 0), KGA_OK);
  ck_assert(tu_files_equal(tu_tmp_path("mono.txt.acc"), "kaldi/mono/final.txt.acc"));
  void *mem;
  size_t len, flen;
  unsigned char *file = tu_read_file("kaldi/mono/final.acc", &flen);
  ck_assert_int_eq(kga_acc_write_mem(acc, 1, &mem, &len), KGA_OK);
  ck_assert(len == flen && !memcmp(mem, file, len));
  kga_free(mem);
  /* the same in memory, after a reset */
  ck_assert_int_eq(kga_acc_reset(acc), KGA_OK);
  mem_set s;
  read_mem(&s, MONO_GRAPHS, "ark:feats/delta.ark", 0);
  ali_set k;
  read_alis("ark:kaldi/mono/ali.ark", &k);
  kga_acc_utt u[64];
  float likes[64];
  /* delta.ark's order, which the statistics' sums follow */
  kio_seq_reader *fr;
  ck_assert_int_eq(kio_seq_open(&fr, "ark:feats/delta.ark", &kio_matrix_holder), KIO_OK);
  int m = 0;
  for (; !kio_seq_done(fr); kio_seq_next(fr), m++) {
    int i = 0;
    while (strcmp(s.keys[i], kio_seq_key(fr))) i++;
    const kio_int_vec *v = ali_of(&k, s.keys[i]);
    u[m] = (kga_acc_utt){s.keys[i], s.f[i].data, s.f[i].rows, s.f[i].cols, v->v, v->n};
  }
  kio_seq_close(fr);
  ck_assert_int_eq(kga_acc_batch(acc, 20, u, likes), KGA_OK);
  ck_assert_int_eq(kga_acc_batch(acc, m - 20, u + 20, likes + 20), KGA_OK);
  ck_assert_int_eq(kga_acc_write_mem(acc, 1, &mem, &len), KGA_OK);
  ck_assert(len == flen && !memcmp(mem, file, len));
  kga_free(mem);
  kga_acc_get_counts(acc, &n);
  ck_assert_int_eq(n.done, 40);
  ck_assert(fabs(n.total_like / (double)n.frames + 95.5459) < 1e-4);  /* acc.log */
  /* a wrong-size alignment is skipped, as gmm-acc-stats-ali does */
  u[0].ali_len--;
  ck_assert_int_eq(kga_acc_batch(acc, 1, u, likes), KGA_OK);
  kga_acc_get_counts(acc, &n);
  ck_assert_int_eq(n.errors, 1);
  free(file);
  ali_set_free(&k);
  mem_free(&s);
  kga_acc_free(acc);
}
END_TEST

START_TEST(test_fused) {
  kga_aligner_opts o;
  aligner_opts(&o, NULL);
  kga_fused *f;
  ck_assert_int_eq(kga_fused_new(&f, MONO, &o), KGA_OK);
  kga_archive_opts x;
  kga_archive_opts_init(&x);
  char ws[600];
  snprintf(ws, sizeof ws, "ark:%s", tu_tmp_path("fused.ali"));
  x.alignments_wspecifier = ws;
  kga_align_counts n;
  ck_assert_int_eq(kga_fused_archive(f, MONO_GRAPHS, "ark:feats/delta.ark", &x, &n), KGA_OK);
  ck_assert_int_eq(n.done, 40);
  ck_assert(tu_files_equal(tu_tmp_path("fused.ali"), "kaldi/mono/ali.ark"));
  ck_assert_int_eq(kga_fused_write(f, tu_tmp_path("fused.acc"), 1), KGA_OK);
  ck_assert(tu_files_equal(tu_tmp_path("fused.acc"), "kaldi/mono/final.acc"));
  x.order = KGA_ORDER_FEATURES;
  ck_assert_int_eq(kga_fused_archive(f, MONO_GRAPHS, "ark:feats/delta.ark", &x, NULL),
                   KGA_EINVAL);
  kga_fused_free(f);
}
END_TEST

/* ---------------- silence boost ---------------- */

START_TEST(test_boost) {
  /* the boost in memory = a model file whose silence GMMs' weights were
   * scaled (read back: gconsts recomputed, as Kaldi's gmm-boost-silence
   * writes them). Mono: the silence phones 1..10 share no pdf. */
  kio_tmodel tm;
  kio_am_gmm am;
  memset(&tm, 0, sizeof tm);
  memset(&am, 0, sizeof am);
  ck_assert_int_eq(kio_model_read(MONO, &tm, &am), KIO_OK);
  const float factor = 1.25f;
  char *is_sil = calloc((size_t)am.num_pdfs, 1);  /* each pdf once (shared roots) */
  for (int32_t ts = 0; ts < tm.num_tuples; ts++)
    if (tm.tuples[ts].phone <= 10)
      is_sil[tm.tuples[ts].forward_pdf] = is_sil[tm.tuples[ts].self_loop_pdf] = 1;
  for (int32_t j = 0; j < am.num_pdfs; j++)
    for (int32_t c = 0; is_sil[j] && c < am.pdfs[j].num_comp; c++) am.pdfs[j].weights[c] *= factor;
  free(is_sil);
  ck_assert_int_eq(kio_model_write(tu_tmp_path("boost.mdl"), 1, &tm, &am), KIO_OK);
  kio_tmodel_free(&tm);
  kio_am_gmm_free(&am);
  kga_aligner_opts o;
  aligner_opts(&o, NULL);
  kga_aligner *a, *b;
  ck_assert_int_eq(kga_aligner_new(&a, MONO, &o), KGA_OK);
  ck_assert_int_eq(kga_aligner_new(&b, tu_tmp_path("boost.mdl"), &o), KGA_OK);
  mem_set s;
  read_mem(&s, MONO_GRAPHS, "ark:feats/delta.ark", 0);
  kga_utt u[64];
  for (int i = 0; i < s.n; i++)
    u[i] = (kga_utt){s.keys[i], s.g[i], s.f[i].data, s.f[i].rows, s.f[i].cols};
  kga_align_result r0[64], ra[64], rb[64];
  ck_assert_int_eq(kga_align_batch(a, s.n, u, 0, r0), KGA_OK);  /* backend made, then boosted */
  int32_t sil[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, unsorted[2] = {2, 1};
  ck_assert_int_eq(kga_aligner_boost_silence(a, unsorted, 2, factor, 1), KGA_EINVAL);
  ck_assert_int_eq(kga_aligner_boost_silence(a, sil, 10, factor, 1), KGA_OK);
  ck_assert_int_eq(kga_align_batch(a, s.n, u, 0, ra), KGA_OK);
  ck_assert_int_eq(kga_align_batch(b, s.n, u, 0, rb), KGA_OK);
  int changed = 0;
  for (int i = 0; i < s.n; i++) {
    ck_assert_int_eq(ra[i].status, rb[i].status);
    ck_assert(!memcmp(&ra[i].like, &rb[i].like, sizeof(float)));
    ck_assert(!memcmp(ra[i].ali, rb[i].ali, sizeof(int32_t) * (size_t)ra[i].num_frames));
    changed += memcmp(&ra[i].like, &r0[i].like, sizeof(float)) != 0;
  }
  ck_assert_int_gt(changed, 0);  /* the boost did something */
  kga_align_results_free(r0, s.n);
  kga_align_results_free(ra, s.n);
  kga_align_results_free(rb, s.n);
  mem_free(&s);
  kga_aligner_free(a);
  kga_aligner_free(b);
}
END_TEST

START_TEST(test_reentry) {
  kga_aligner_opts o;
  aligner_opts(&o, NULL);
  kga_aligner *a, *b;
  ck_assert_int_eq(kga_aligner_new(&a, MONO, &o), KGA_OK);
  ck_assert_int_eq(kga_aligner_new(&b, MONO, &o), KGA_OK);
  mem_set s;
  read_mem(&s, MONO_GRAPHS, "ark:feats/delta.ark", 0);
  kga_utt u = {s.keys[0], s.g[0], s.f[0].data, s.f[0].rows, s.f[0].cols};
  reentry e = {a, b, &u, 0};
  kga_archive_opts x;
  kga_archive_opts_init(&x);
  x.result = on_result_reenter;
  x.user = &e;
  ck_assert_int_eq(kga_align_archive(a, MONO_GRAPHS, "ark:feats/delta.ark", &x, NULL), KGA_OK);
  ck_assert_int_eq(e.checked, 40);
  mem_free(&s);
  kga_aligner_free(a);
  kga_aligner_free(b);
}
END_TEST

START_TEST(test_misc) {
  ck_assert_ptr_nonnull(strstr(kga_version(), "Kaldi 5.5"));
  ck_assert_int_eq(kga_sizeof("kga_aligner_opts"), sizeof(kga_aligner_opts));
  ck_assert_int_eq(kga_sizeof("kga_align_result"), sizeof(kga_align_result));
  ck_assert_int_eq(kga_sizeof("nothing"), 0);
  ck_assert_str_eq(kga_status_string(KGA_ECANCELED), "stopped by a callback");
  ck_assert_int_eq(kga_set_cublas_library(NULL), KGA_EINVAL);
}
END_TEST

int main(void) {
  Suite *s = suite_create("api");
  TCase *tc = tcase_create("api");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, test_archive_mono);
  tcase_add_test(tc, test_archive_noisy);
  tcase_add_test(tc, test_archive_features_order);
  tcase_add_test(tc, test_errors);
  tcase_add_test(tc, test_cancel);
  tcase_add_test(tc, test_batch);
  tcase_add_test(tc, test_acc);
  tcase_add_test(tc, test_fused);
  tcase_add_test(tc, test_boost);
  tcase_add_test(tc, test_reentry);
  tcase_add_test(tc, test_misc);
  suite_add_tcase(s, tc);
  return tu_run_suite(s);
}
