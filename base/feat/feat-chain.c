/* Running a recognised feature chain (feat.h) in-process: a producer thread
 * reads the first stage's input, takes each utterance through the stages as
 * the programs would, and writes the last stage's binary archive into a ring
 * read through a FILE*. Each stage logs under its program's name, with the
 * lines, counts and exit statuses of the bundle's programs (checked by
 * tests/cli/featpipe.sh). When a stage dies (ERROR), the stages after it see
 * the end of their input and finish; the stages before it are killed when
 * they next write (as by SIGPIPE; no final LOG line).
 *
 * Everything that logs, counts or depends on order runs here, on the
 * producer, utterance after utterance: it needs only the matrices' shapes.
 * The arithmetic (decompression, CMVN, deltas, splice, transform, select)
 * is recorded as a job and computed by feat-pool.c's workers; the jobs'
 * results go to the ring in input order. */
#include "feat.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "feat-cache.h"
#include "feat-check.h"
#include "feat-ops.h"
#include "feat-pool.h"
#include "feat-ring.h"
#include "base/io/io-internal.h"
#include "base/io/io.h"
#include "base/sys/kaldi-msg.h"
#include "base/sys/log.h"
#include "base/matrix/matrix.h"
#include "base/sys/options.h"
#include "base/io/table.h"
#include "base/sys/settings.h"
#include "base/matrix/blas-gemm.h"
#include "base/matrix/blas-profile.h"

/* ---- per-stage run-time state ---- */
enum { LD_UNKNOWN = KIO_FEAT_LD_UNKNOWN, LD_LOGDET = KIO_FEAT_LD_LOGDET,
       LD_PSEUDO = KIO_FEAT_LD_PSEUDO, LD_DIMINC = KIO_FEAT_LD_DIMINC };
typedef struct {
  kio_feat_stage *st;
  int dead, killed, status;
  int abort_status;           /* a stage that dies by a failed assertion: 134 */
  long num_done, num_err;
  kio_ra_reader *tab, *u2s;
  kio_dmatrix gstats;         /* apply-cmvn with an rxfilename */
  kio_matrix gtrans;          /* transform-feats with an rxfilename */
  float **scales;             /* add-deltas */
  int *sdims;
  kio_fxform *x;              /* transform: W prepared for the current key */
  char *wkey;                 /* key (utt/spk) x was built for; "" global */
  float wlogdet;
  int have_logdet;
  int logdet_type;
  double tot_t, tot_logdet;
  int32_t *sel;               /* select-feats: source column per output */
  int32_t nsel;
  int sel_ready;
} stage_rt;

struct kio_feat {
  kio_feat_plan plan;
  kio_ring *ring;
  int profile, blas_threads;  /* transform-feats' rounding (blas-profile.h, blas-gemm.h) */
  stage_rt *rt;
  int status;  /* wait status */
  kio_fcache *cache;  /* a hit to hand out, or the entry a miss writes (feat-cache.h) */
  kio_ring *pring;    /* the producer's ring */
};

static void print_command_lines(const kio_feat_plan *p) { kio_feat_print_command_lines(p); }

/* Stage results: pass the matrix on, drop the utterance, or die. */
enum { PASS = KIO_FCHK_PASS, DROP = KIO_FCHK_DROP, DIE = KIO_FCHK_DIE };

/* One utterance on its way through the stages: its shape after the stages
 * so far and the job recording their arithmetic. */
typedef struct {
  int32_t rows, cols;
  kio_fjob *j;
} utt_state;

/* The next step of u's job, output rows x cols (made: written to a new
 * matrix, whose buffers are reserved here). */
static kio_fstep *add_step(utt_state *u, kio_feat_op op, int32_t rows, int32_t cols, int made) {
  if (made && kio_fjob_reserve(u->j, (size_t)rows * (size_t)cols) != KIO_OK) return NULL;
  kio_fstep *st = &u->j->steps[u->j->nsteps++];
  memset(st, 0, sizeof *st);
  st->op = op;
  u->rows = rows;
  u->cols = cols;
  return st;
}

static int do_cmvn(stage_rt *s, const char *utt, utt_state *u) {
  kio_feat_stage *st = s->st;
  const kio_dmatrix *stats = &s->gstats;
  if (!st->norm_means) { s->num_done++; return PASS; }
  if (st->table_is_rspec) {
    const char *key;
    int r = kio_fchk_table_key(st, s->u2s, s->tab, utt, &key);
    if (r == DROP) s->num_err++;
    if (r != PASS) return r;
    if (!(stats = kio_ra_value(s->tab, key))) return DIE;
  }
  if (kio_fchk_cmvn(st, stats, u->rows, u->cols) != PASS) return DIE;
  int32_t dim = stats->cols - 1;
  size_t off;
  float *norm = kio_fjob_norm(u->j, 2 * (size_t)dim, &off);
  if (!norm || kio_fchk_cmvn_norm(st, stats, norm, norm + dim) != PASS) return DIE;
  kio_fstep *step = add_step(u, KIO_FEAT_CMVN, u->rows, u->cols, 0);  /* in place */
  if (!step) return DIE;
  step->var_norm = st->norm_vars;
  step->dim = dim;
  step->norm = off;
  s->num_done++;
  return PASS;
}

static int do_deltas(stage_rt *s, const char *utt, utt_state *u) {
  kio_feat_stage *st = s->st;
  int r = kio_fchk_deltas(st, utt, u->rows, u->cols);
  if (r != PASS) return r;
  int32_t dim = st->truncate ? st->truncate : u->cols;
  kio_fstep *step = add_step(u, KIO_FEAT_DELTAS, u->rows, dim * (st->delta_order + 1), 1);
  if (!step) return DIE;
  step->dim = dim;
  step->order = st->delta_order;
  step->scales = s->scales;
  step->sdims = s->sdims;
  s->num_done++;
  return PASS;
}

/* A splice-feats output not made: its transform-feats reads the spliced rows
 * from the splice's input (feat-pool.c). Up to SPLICE_FUSE_MAX spliced dims
 * (the edge rows are built on the stack). */
#define SPLICE_FUSE_MAX 4096

/* fuse: the next stage is a live transform-feats (it comes right after). */
static int do_splice(stage_rt *s, utt_state *u, int fuse) {
  kio_feat_stage *st = s->st;
  if (kio_fchk_splice(st, u->rows) != PASS) return DIE;
  int64_t cols = (int64_t)u->cols * (st->left + 1 + st->right);
  fuse = fuse && cols <= SPLICE_FUSE_MAX;
  /* fused: nothing made, but the shape is the spliced one all the same */
  kio_fstep *step = add_step(u, KIO_FEAT_SPLICE, u->rows, (int32_t)cols, !fuse);
  if (!step) return DIE;
  step->left = st->left;
  step->right = st->right;
  step->fused = fuse;
  s->num_done++;
  return PASS;
}

/* W prepared for key (cached while the key and shape stay the same). */
static int prepare_transform(stage_rt *s, const char *key, const kio_matrix *w, int32_t fdim) {
  if (s->wkey && !strcmp(s->wkey, key) && s->x->rows == w->rows && s->x->k == fdim) return KIO_OK;
  kio_fxform_release(s->x);  /* jobs in flight keep their reference */
  free(s->wkey);
  s->wkey = strdup(key);
  s->x = kio_fxform_new(w, fdim);
  if (!s->x || !s->wkey) return KIO_ERR;
  s->have_logdet = 0;
  return KIO_OK;
}

static int do_transform(stage_rt *s, const char *utt, utt_state *u, const kio_feat *h) {
  kio_feat_stage *st = s->st;
  const kio_matrix *w = &s->gtrans;
  const char *key = "";
  if (st->table_is_rspec) {
    int r = kio_fchk_table_key(st, s->u2s, s->tab, utt, &key);
    if (r == DROP) s->num_err++;
    if (r != PASS) return r;
    if (!(w = kio_ra_value(s->tab, key))) return DIE;
  }
  int32_t fdim = u->cols, T = u->rows;
  if (kio_fchk_transform(st, utt, w, fdim) != PASS) {
    s->num_err++;
    return DROP;
  }
  if (prepare_transform(s, key, w, fdim) != KIO_OK) return DIE;
  kio_fstep *step = add_step(u, KIO_FEAT_TRANSFORM, T, w->rows, 1);
  if (!step) return DIE;
  step->x = s->x;
  s->x->refs++;
  step->profile = h->profile;
  step->blas_threads = h->blas_threads;
  if (kio_blas_gemm_plan(h->profile, T, fdim, w->rows, h->blas_threads, &step->cls) != KIO_OK)
    return DIE;
  s->num_done++;
  if (s->logdet_type == LD_UNKNOWN)
    s->logdet_type = w->rows == fdim ? LD_LOGDET : w->rows < fdim ? LD_PSEUDO : LD_DIMINC;
  if (s->logdet_type != LD_DIMINC) {
    if (!s->have_logdet) {
      s->wlogdet = (float)kio_featop_half_logdet(w->data, w->rows, w->cols, fdim);
      s->have_logdet = 1;
    }
    kio_feat_counts c = {.tot_t = s->tot_t, .tot_logdet = s->tot_logdet};
    kio_feat_logdet_add(st, &c, T, s->wlogdet);
    s->tot_t = c.tot_t;
    s->tot_logdet = c.tot_logdet;
  }
  return PASS;
}
/* select-feats: the selection is checked against the first utterance. */
static int select_init(stage_rt *s, int32_t dim_in) {
  const char *p = s->st->selection;
  s->sel_ready = 1;
  while (*p) {
    const char *e = strchr(p, ',');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    const char *dash = memchr(p, '-', n);
    long a, b;
    if (dash) {
      size_t dpos = (size_t)(dash - p);
      a = strtol(p, NULL, 10);  /* Kaldi reads token.substr(0, len - p - 1) */
      char tmpb[32];
      size_t l = n - dpos - 1 < 31 ? n - dpos - 1 : 31;
      if (n - dpos - 1 < dpos) {
        memcpy(tmpb, p, n - dpos - 1);
        tmpb[n - dpos - 1] = '\0';
        a = strtol(tmpb, NULL, 10);
      }
      (void)l;
      b = strtol(dash + 1, NULL, 10);
      if (a < 0 || a > dim_in - 1) {
        KIO_KALDI_AS(s->st->prog, SELECT_RANGE_START, a);
        return DIE;
      }
      if (b < 0 || b > dim_in - 1) {
        KIO_KALDI_AS(s->st->prog, SELECT_RANGE_END, b);
        return DIE;
      }
    } else {
      a = b = strtol(p, NULL, 10);
      if (a < 0 || a > dim_in - 1) {
        KIO_KALDI_AS(s->st->prog, SELECT_INDEX, a);
        return DIE;
      }
    }
    long step = a > b ? -1 : 1;
    for (long i = a;; i += step) {
      int32_t *ns = realloc(s->sel, sizeof(int32_t) * (size_t)(s->nsel + 1));
      if (!ns) return DIE;
      s->sel = ns;
      s->sel[s->nsel++] = (int32_t)i;
      if (i == b) break;
    }
    p += n;
    if (*p == ',') p++;
  }
  return PASS;
}

static int do_select(stage_rt *s, utt_state *u) {
  if (!s->sel_ready && select_init(s, u->cols) != PASS) return DIE;
  /* The selection was checked against the first utterance only; a later,
   * narrower one fails Kaldi's SubMatrix assertion (abort: status 134). */
  for (int32_t j = 0; j < s->nsel; j++)
    if (s->sel[j] >= u->cols) {
      KIO_KALDI_AS(s->st->prog, SUBMATRIX_ASSERT);
      s->abort_status = (128 + SIGABRT) << 8;
      return DIE;
    }
  kio_fstep *step = add_step(u, KIO_FEAT_SELECT, u->rows, s->nsel, 1);
  if (!step) return DIE;
  step->sel = s->sel;  /* fixed from the first utterance on */
  step->nsel = s->nsel;
  s->num_done++;
  return PASS;
}

static int run_stage(stage_rt *s, const char *utt, utt_state *u, int fuse, const kio_feat *h) {
  kio_log_set_thread_program(s->st->prog);  /* its tables' messages too */
  switch (s->st->op) {
    case KIO_FEAT_CMVN: return do_cmvn(s, utt, u);
    case KIO_FEAT_DELTAS: return do_deltas(s, utt, u);
    case KIO_FEAT_SPLICE: return do_splice(s, u, fuse);
    case KIO_FEAT_TRANSFORM: return do_transform(s, utt, u, h);
    case KIO_FEAT_SELECT: return do_select(s, u);
    default: s->num_done++; return PASS;
  }
}

/* Opens what a stage opens at its start. KIO_ERR after its ERROR line. */
static int stage_open(stage_rt *s) {
  kio_feat_stage *st = s->st;
  kio_log_set_thread_program(st->prog);
  switch (st->op) {
    case KIO_FEAT_CMVN:
    case KIO_FEAT_TRANSFORM: {
      const kio_holder *h = st->op == KIO_FEAT_CMVN ? &kio_dmatrix_holder : &kio_matrix_holder;
      if (!st->table_is_rspec) {
        kio_input *in = NULL;
        int binary;
        if (kio_input_reopen_q(&in, st->table, &binary, 1) != KIO_OK) {
          KIO_KALDI(KALDI_IO_INPUT_OPEN, st->table);
          return KIO_ERR;
        }
        int r = st->op == KIO_FEAT_CMVN
                    ? kio_dmatrix_read(kio_input_stream(in), binary, &s->gstats)
                    : kio_matrix_read(kio_input_stream(in), binary, &s->gtrans);
        kio_input_close(in);
        if (r != KIO_OK) {
          KIO_ERROR("Failed to read %s from %s: %s", st->op == KIO_FEAT_CMVN ? "Matrix<double>"
                    : "Matrix<float>", st->table, kio_last_error());
          return KIO_ERR;
        }
      } else if (kio_ra_open(&s->tab, st->table, h) != KIO_OK) {
        return KIO_ERR;
      }
      if (st->utt2spk && st->table_is_rspec && kio_ra_open(&s->u2s, st->utt2spk, &kio_token_holder) != KIO_OK)
        return KIO_ERR;
      return KIO_OK;
    }
    case KIO_FEAT_DELTAS:
      return kio_featop_delta_scales(st->delta_order, st->delta_window, &s->scales, &s->sdims) == 0
                 ? KIO_OK : KIO_ERR;
    default:
      return KIO_OK;
  }
}

static void stage_finish(stage_rt *s) {
  if (s->dead || s->killed) return;
  kio_feat_counts c = {s->num_done, s->num_err, s->logdet_type, s->tot_t, s->tot_logdet, s->sel_ready};
  s->status = kio_feat_final_log(s->st, &c);
}

static void stage_free(stage_rt *s) {
  kio_ra_close(s->tab);
  kio_ra_close(s->u2s);
  kio_dmatrix_free(&s->gstats);
  kio_matrix_free(&s->gtrans);
  if (s->scales)
    for (int i = 0; i <= s->st->delta_order; i++) free(s->scales[i]);
  free(s->scales);
  free(s->sdims);
  kio_fxform_release(s->x);
  free(s->wkey);
  free(s->sel);
}

/* The pool's commit: the job's result into the cache entry being written
 * and the ring (input order). */
static int commit(void *arg, kio_fjob *j) {
  kio_feat *h = arg;
  if (h->cache) kio_fcache_put(h->cache, j->key, &j->a);
  return kio_ring_put(h->pring, j->key, &j->a);
}

/* The reader left: the last stage is killed by SIGPIPE, so are the others
 * when they next write. */
static void reader_left(stage_rt *rt, int n) {
  for (int j = 0; j < n; j++) if (!rt[j].dead) { rt[j].killed = 1; rt[j].status = (128 + SIGPIPE) << 8; }
}

/* Reads the next entry into a job: its key, the input as stored, a
 * reserved for the decompressed matrix. */
static int read_entry(kio_seq_reader *rd, kio_fjob *j, utt_state *u) {
  const char *key = kio_seq_key(rd);
  size_t kl = strlen(key);
  if (kl + 1 > j->keycap) {
    char *k = realloc(j->key, kl + 1);
    if (!k) return KIO_ERR;
    j->key = k;
    j->keycap = kl + 1;
  }
  memcpy(j->key, key, kl + 1);
  if (kio_seq_take(rd, &j->in) != KIO_OK) return KIO_ERR;
  if (!j->in.format) {  /* a plain matrix: it is the job's input as it is */
    kio_matrix t = j->a;
    j->a = j->in.m;
    j->in.m = t;
  }
  *u = (utt_state){j->in.rows, j->in.cols, j};
  return kio_fjob_reserve(j, (size_t)u->rows * (size_t)u->cols);
}

/* A hit's commit: the copied entry into the ring (input order). */
static int commit_hit(void *arg, kio_fjob *j) {
  kio_feat *h = arg;
  return kio_ring_put(h->pring, j->key, &j->a);
}

/* A hit: the stored entries into the ring, then the stages' final lines
 * from their stored counts, as the run that wrote them printed them (a
 * reader that leaves early kills the stages: no final lines). The copies
 * out of the stored file run on the chain's pool (one thread: here). */
static void *cached_thread(kio_ring *ring, void *arg) {
  kio_feat *h = arg;
  int n = h->plan.nstages;
  h->pring = ring;
  kio_fpool *pool = kio_fpool_new(kio_fpool_threads(), 0, commit_hit, h);
  const char *key;
  const float *data;
  int32_t rows, cols;
  int left = !pool;
  if (!pool) h->status = 255 << 8;  /* out of memory: as a stage that died */
  while (!left && kio_fcache_next(h->cache, &key, &rows, &cols, &data) == KIO_OK) {
    kio_fjob *j = kio_fpool_slot(pool);
    if (!j) {
      left = 1;
      h->status = (128 + SIGPIPE) << 8;
      break;
    }
    size_t kl = strlen(key);
    if (kl + 1 > j->keycap) {
      char *k = realloc(j->key, kl + 1);
      if (!k) {
        left = 1;
        h->status = 255 << 8;
        break;
      }
      j->key = k;
      j->keycap = kl + 1;
    }
    memcpy(j->key, key, kl + 1);
    if (kio_matrix_setsize(&j->a, rows, cols) != KIO_OK) {  /* every element copied by the job */
      left = 1;
      h->status = 255 << 8;
      break;
    }
    j->src = data;
    if (kio_fpool_submit(pool) != 0) {
      left = 1;
      h->status = (128 + SIGPIPE) << 8;
    }
  }
  if (!left && kio_fpool_drain(pool) != 0) {
    left = 1;
    h->status = (128 + SIGPIPE) << 8;
  }
  kio_fpool_free(pool);
  for (int k = 0; !left && k < n; k++) {
    kio_feat_counts c;
    kio_fcache_counts(h->cache, k, &c);
    kio_log_set_thread_program(h->plan.stages[k].prog);
    kio_feat_final_log(&h->plan.stages[k], &c);  /* 0: only clean runs are stored */
  }
  kio_log_set_thread_program(NULL);
  return NULL;
}

static void *chain_thread(kio_ring *ring, void *arg) {
  kio_feat *h = arg;
  int n = h->plan.nstages;
  stage_rt *rt = h->rt;
  /* Read here, before any worker runs: they are cached on first use. */
  h->profile = kio_blas_profile();
  h->blas_threads = kio_blas_threads();
  char how[600];
  h->cache = kio_fcache_open(&h->plan, h->profile, h->blas_threads, how, sizeof how);
  KIO_VLOG(1, "Feature cache: %s", how);
  if (h->cache && kio_fcache_hit(h->cache)) return cached_thread(ring, h);
  h->pring = ring;
  int warnings = kio_log_thread_num_warnings();
  kio_fpool *pool = kio_fpool_new(kio_fpool_threads(), n, commit, h);
  /* Stage k opens its tables at its start; a failure kills it at once. */
  for (int k = 0; k < n; k++)
    if (stage_open(&rt[k]) != KIO_OK) { rt[k].dead = 1; rt[k].status = 255 << 8; }
  kio_seq_reader *rd = NULL;
  int first_alive = !rt[0].dead;
  if (first_alive) {
    kio_log_set_thread_program(rt[0].st->prog);
    if (!pool || kio_seq_open(&rd, h->plan.input, &kio_cmatrix_raw_holder) != KIO_OK) {
      rt[0].dead = 1;
      rt[0].status = 255 << 8;
    }
  }
  int dead_from = n;  /* the first dead stage: stages from it on get no input */
  for (int k = 0; k < n; k++) if (rt[k].dead) { dead_from = k; break; }
  while (rd && dead_from > 0 && !kio_seq_done(rd)) {
    kio_log_set_thread_program(rt[0].st->prog);
    kio_fjob *j = kio_fpool_slot(pool);
    if (!j) {
      reader_left(rt, n);
      break;
    }
    utt_state u;
    if (read_entry(rd, j, &u) != KIO_OK) {
      rt[0].dead = 1;
      rt[0].status = 255 << 8;
      dead_from = 0;
      break;
    }
    int k = 0;
    for (; k < n; k++) {
      if (k >= dead_from) { /* writing to a dead stage: killed */
        for (int i = 0; i < k; i++) if (!rt[i].dead) rt[i].killed = 1;
        break;
      }
      int fuse = k + 1 < dead_from && rt[k + 1].st->op == KIO_FEAT_TRANSFORM;
      int r = run_stage(&rt[k], j->key, &u, fuse, h);
      if (r == DROP) break;
      if (r == DIE) {
        rt[k].dead = 1;
        rt[k].status = rt[k].abort_status ? rt[k].abort_status : 255 << 8;
        dead_from = k;
        break;
      }
    }
    if (k == n && kio_fpool_submit(pool) != 0) {
      reader_left(rt, n);
      break;
    }
    kio_log_set_thread_program(rt[0].st->prog);  /* the input is the first stage's */
    kio_seq_next(rd);
    if (dead_from == 0 || rt[0].killed) break;
  }
  /* What was decided before the end goes out (unless the reader left). */
  if (pool && kio_fpool_drain(pool) != 0) reader_left(rt, n);
  if (rd) {
    kio_log_set_thread_program(rt[0].st->prog);
    if (kio_seq_close(rd) != KIO_OK && !rt[0].dead && !rt[0].killed) {
      rt[0].dead = 1;
      rt[0].status = 255 << 8;
    }
  }
  for (int k = 0; k < n; k++) {
    if (rt[k].killed && !rt[k].status) rt[k].status = (128 + SIGPIPE) << 8;
    stage_finish(&rt[k]);
    if (!rt[k].dead && !rt[k].killed) rt[k].status <<= 8;
  }
  kio_log_set_thread_program(NULL);
  kio_fpool_free(pool);
  h->status = rt[n - 1].status;
  if (h->cache) {  /* only a clean run's output is kept: no line of it is lost on a hit */
    int clean = pool && kio_log_thread_num_warnings() == warnings;
    kio_feat_counts *c = calloc(n > 0 ? (size_t)n : 1, sizeof *c);
    for (int k = 0; k < n; k++) {
      clean = clean && !rt[k].dead && !rt[k].killed && !rt[k].status && !rt[k].num_err;
      if (c) c[k] = (kio_feat_counts){rt[k].num_done, rt[k].num_err, rt[k].logdet_type,
                                      rt[k].tot_t, rt[k].tot_logdet, rt[k].sel_ready};
    }
    kio_fcache_finish(h->cache, clean && c, c);
    free(c);
  }
  return NULL;
}

FILE *kio_feat_open(const char *cmd, kio_feat **out) {
  *out = NULL;
  if (!kio_setting_flag(KIO_SET_FEATS_PIPE, 1)) {
    KIO_VLOG(1, "Feature pipeline run as a pipe (KALDI_GPU_FEATS_PIPE=0): %s", cmd);
    return NULL;
  }
  kio_feat *h = calloc(1, sizeof *h);
  if (!h) return NULL;
  if (kio_feat_parse(cmd, &h->plan) != KIO_OK) {
    KIO_VLOG(1, "Feature pipeline run as a pipe (%s): %s", kio_last_error(), cmd);
    free(h);
    return NULL;
  }
  h->rt = calloc((size_t)h->plan.nstages, sizeof *h->rt);
  if (!h->rt) {
    kio_feat_plan_free(&h->plan);
    free(h);
    return NULL;
  }
  for (int k = 0; k < h->plan.nstages; k++) h->rt[k].st = &h->plan.stages[k];
  KIO_VLOG(1, "Feature pipeline computed in-process (%d stages): %s", h->plan.nstages, cmd);
  print_command_lines(&h->plan);
  FILE *f = kio_ring_start(chain_thread, h, &h->ring);
  if (!f) {
    free(h->rt);
    kio_feat_plan_free(&h->plan);
    free(h);
    return NULL;
  }
  *out = h;
  return f;
}

int kio_feat_take(kio_feat *h, char **key, size_t *keycap, kio_matrix *m) {
  return kio_ring_take(h->ring, key, keycap, m);
}

int kio_feat_close(kio_feat *h, FILE *f) {
  fclose(f);  /* stops and joins the producer */
  int status = h->status;
  kio_fcache_free(h->cache);
  for (int k = 0; k < h->plan.nstages; k++) stage_free(&h->rt[k]);
  free(h->rt);
  kio_feat_plan_free(&h->plan);
  free(h);
  return status;
}

/* The provider's state: a feature chain or a model stage (feat-model.c). */
typedef struct {
  kio_feat *feat;
  kio_model_stage *model;
} provided;

static FILE *provider_open(const char *cmd, void **state) {
  provided *p = calloc(1, sizeof *p);
  *state = p;
  if (!p) return NULL;
  FILE *f = kio_model_stage_open(cmd, &p->model);
  if (!f) f = kio_feat_open(cmd, &p->feat);
  if (!f) {
    free(p);
    *state = NULL;
  }
  return f;
}
static int provider_close(void *state, FILE *f) {
  provided *p = state;
  int status = p->model ? kio_model_stage_close(p->model, f) : kio_feat_close(p->feat, f);
  free(p);
  return status;
}
static int provider_take(void *state, char **key, size_t *keycap, void *obj) {
  provided *p = state;
  if (p->feat) return kio_feat_take(p->feat, key, keycap, obj);
  KIO_ERROR("A model is not a table of matrices");
  return KIO_ERR;
}

void kio_feat_install(void) {
  static const kio_pipe_provider provider = {
      provider_open, provider_close, &kio_matrix_holder, provider_take};
  kio_input_set_pipe_provider(&provider);
}
