/* Running a recognised feature chain (feat.h) in-process: a producer thread
 * reads the first stage's input, takes each utterance through the stages as
 * the programs would, and writes the last stage's binary archive into a ring
 * read through a FILE*. Each stage logs under its program's name, with the
 * lines, counts and exit statuses of the bundle's programs (checked by
 * tests/cli/featpipe.sh). When a stage dies (ERROR), the stages after it see
 * the end of their input and finish; the stages before it are killed when
 * they next write (as by SIGPIPE; no final LOG line). */
#include "feat.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "feat-ops.h"
#include "feat-pool.h"
#include "feat-ring.h"
#include "io-internal.h"
#include "io.h"
#include "log.h"
#include "matrix.h"
#include "options.h"
#include "table.h"

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
  float *wt, *woff;           /* transform: W^T, offset of the current key */
  char *wkey;                 /* key (utt/spk) wt was built for; "" global */
  int32_t wrows, wcols;
  float wlogdet;
  int have_logdet;
  int logdet_type;
  double tot_t, tot_logdet;
  kio_fpool *pool;            /* the chain's workers (NULL: none) */
  int32_t *sel;               /* select-feats: source column per output */
  int32_t nsel;
  int sel_ready;
} stage_rt;

struct kio_feat {
  kio_feat_plan plan;
  kio_ring *ring;
  stage_rt *rt;
  int status;  /* wait status */
};

#define LOGAT(lvl, prog, func, file, line, ...) \
  do { kio_log_set_thread_program(prog); kio_logf((lvl), (func), (file), (line), __VA_ARGS__); } while (0)

static void print_command_lines(const kio_feat_plan *p) { kio_feat_print_command_lines(p); }

/* RandomAccessTableReaderMapped::HasKey. 1/0, or -1 after a fatal ERROR. */
static int mapped_has_key(stage_rt *s, const char *utt, const char **key) {
  *key = utt;
  if (s->u2s) {
    int h = kio_ra_has_key(s->u2s, utt);
    if (h < 0) return -1;
    if (h == 0) {
      /* transform-feats opens its reader with Open(), which leaves the
       * name Kaldi prints empty: "standard input". */
      const char *name = s->st->op == KIO_FEAT_TRANSFORM ? "standard input" : s->st->utt2spk;
      LOGAT(KIO_LOG_ERROR, s->st->prog, "HasKey", "util/kaldi-table-inl.h", 2639,
            "Attempting to read key %s, which is not present in utt2spk map or "
            "similar map being read from %s", utt, name);
      return -1;
    }
    kio_token *t = kio_ra_value(s->u2s, utt);
    if (!t) return -1;
    *key = t->s;
  }
  return kio_ra_has_key(s->tab, *key);
}

static void floor_warn(void *user, double var) {
  char a[32];
  LOGAT(KIO_LOG_WARNING, (const char *)user, "ApplyCmvn", "cmvn.cc", 88,
        "Flooring cepstral variance from %s to 1e-20", kio_fmt_g(a, var));
}

/* Stage results: pass the matrix on, drop the utterance, or die. */
enum { PASS = 0, DROP = 1, DIE = -1 };

static int do_cmvn(stage_rt *s, const char *utt, kio_matrix *m) {
  kio_feat_stage *st = s->st;
  const kio_dmatrix *stats = &s->gstats;
  if (!st->norm_means) { s->num_done++; return PASS; }
  if (st->table_is_rspec) {
    const char *key;
    int h = mapped_has_key(s, utt, &key);
    if (h < 0) return DIE;
    if (h == 0) {
      LOGAT(KIO_LOG_WARNING, st->prog, "main", "apply-cmvn.cc", 112,
            "No normalization statistics available for key %s, producing no "
            "output for this utterance", utt);
      s->num_err++;
      return DROP;
    }
    if (!(stats = kio_ra_value(s->tab, key))) return DIE;
  }
  int32_t dim = stats->cols - 1;
  const char *fn = st->reverse ? "ApplyCmvnReverse" : "ApplyCmvn";
  if (stats->rows > 2 || stats->rows < 1 || m->cols != dim) {
    LOGAT(KIO_LOG_ERROR, st->prog, fn, "cmvn.cc", st->reverse ? 125 : 70,
          "Dim mismatch: cmvn %dx%d, feats %dx%d", stats->rows, stats->cols, m->rows, m->cols);
    return DIE;
  }
  if (stats->rows == 1 && st->norm_vars) {
    LOGAT(KIO_LOG_ERROR, st->prog, fn, "cmvn.cc", st->reverse ? 130 : 75,
          "You requested variance normalization but no variance stats are supplied.");
    return DIE;
  }
  double count = stats->data[dim];
  if (count < 1.0) {
    char a[32];
    LOGAT(KIO_LOG_ERROR, st->prog, fn, "cmvn.cc", st->reverse ? 136 : 81,
          "Insufficient stats for cepstral mean and variance normalization: count = %s",
          kio_fmt_g(a, count));
    return DIE;
  }
  float stackbuf[2 * 64], *norm = dim <= 64 ? stackbuf : malloc(sizeof(float) * 2 * (size_t)dim);
  if (!norm) return DIE;
  int r = kio_featop_cmvn_norm(stats->data, stats->rows, dim, st->norm_vars, st->reverse,
                               norm, norm + dim, floor_warn, (void *)st->prog);
  if (r == KIO_FEATOP_NAN) {
    LOGAT(KIO_LOG_ERROR, st->prog, fn, "cmvn.cc", 97,
          "NaN or infinity in cepstral mean/variance computation");
  } else {
    kio_featop_cmvn_apply(m->data, m->rows, dim, st->norm_vars, norm, norm + dim);
    s->num_done++;
  }
  if (norm != stackbuf) free(norm);
  return r ? DIE : PASS;
}

static int ensure(kio_matrix *m, int32_t rows, int32_t cols) {
  size_t need = (size_t)rows * (size_t)cols;
  if (need > m->cap) {
    float *d = realloc(m->data, need * sizeof(float));
    if (!d) return KIO_ERR;
    m->data = d;
    m->cap = need;
  }
  m->rows = rows;
  m->cols = cols;
  return KIO_OK;
}

static void swap_mat(kio_matrix *a, kio_matrix *b) { kio_matrix t = *a; *a = *b; *b = t; }

struct delta_job { const float *in; int32_t frames, dim; int order; float **sc; int *sd; float *out; };
static void delta_part(void *arg, int32_t t0, int32_t t1) {
  struct delta_job *j = arg;
  kio_featop_deltas_range(j->in, j->frames, t0, t1, j->dim, j->order, j->sc, j->sd, j->out);
}

/* A splice-feats output not made: its transform-feats reads the spliced rows
 * from the splice's input (see do_splice). Up to SPLICE_FUSE_MAX spliced
 * dims (the edge rows are built on the stack). */
#define SPLICE_FUSE_MAX 4096
typedef struct { int active, left, right; } splice_view;

/* transform-feats on frames of one utterance: the hsw plan's chains (cls,
 * feat-gemm.c) or the plain ones (cls NULL). */
struct xform_job {
  const unsigned char *cls;
  const float *in, *w, *wt, *off; int32_t k, ws, M; float *out;
  const splice_view *sv; int32_t dim, T;  /* sv: in is the unspliced T x dim */
};

/* Frames [t0, t1) of out, frame t's input row at in + (t - base) * stride. */
static void xform_rows(const struct xform_job *j, const float *in, int32_t base, int32_t stride,
                       int32_t t0, int32_t t1) {
  if (!j->cls) {
    kio_featop_transform_rows(in + (size_t)(t0 - base) * stride, stride, t1 - t0, j->k, j->wt,
                              j->M, j->off, j->out + (size_t)t0 * j->M);
    return;
  }
  kio_featop_gemm_frames(j->cls, in, base, stride, t0, t1, j->k, j->w, j->ws, j->wt, j->M, j->out);
  if (j->off)
    for (int32_t t = t0; t < t1; t++)
      for (int32_t i = 0; i < j->M; i++) j->out[(size_t)t * j->M + i] += j->off[i];
}

static void xform_part(void *arg, int32_t t0, int32_t t1) {
  struct xform_job *j = arg;
  if (!j->sv) {
    xform_rows(j, j->in, 0, j->k, t0, t1);
    return;
  }
  /* Frame t's spliced row is input rows t - left .. t + right, contiguous
   * in the input when none is clamped: read in place. */
  int32_t L = j->sv->left, R = j->sv->right, dim = j->dim;
  int32_t a = t0 > L ? t0 : L, b = t1 < j->T - R ? t1 : j->T - R;
  /* The edge frames (clamped rows) around the interior [a, b): spliced into
   * a buffer, each run of them transformed as a block. */
  int32_t runs[2][2] = {{t0, t1}, {t1, t1}};
  if (a < b) {
    xform_rows(j, j->in, L, dim, a, b);
    runs[0][1] = a;
    runs[1][0] = b;
  }
  for (int r = 0; r < 2; r++) {
    int32_t e0 = runs[r][0], e1 = runs[r][1];
    if (e0 >= e1) continue;
    float rows[SPLICE_FUSE_MAX];  /* k <= SPLICE_FUSE_MAX (do_splice) */
    for (int32_t t0r = e0, n; t0r < e1; t0r += n) {
      n = SPLICE_FUSE_MAX / j->k < e1 - t0r ? SPLICE_FUSE_MAX / j->k : e1 - t0r;
      for (int32_t t = t0r; t < t0r + n; t++)
        for (int32_t c = -L; c <= R; c++) {
          int32_t f = t + c < 0 ? 0 : t + c >= j->T ? j->T - 1 : t + c;
          memcpy(rows + (size_t)(t - t0r) * j->k + (size_t)(c + L) * dim,
                 j->in + (size_t)f * dim, sizeof(float) * (size_t)dim);
        }
      xform_rows(j, rows, t0r, j->k, t0r, t0r + n);
    }
  }
}

static int do_deltas(stage_rt *s, const char *utt, kio_matrix *m, kio_matrix *tmp) {
  kio_feat_stage *st = s->st;
  if (m->rows == 0) {
    LOGAT(KIO_LOG_WARNING, st->prog, "main", "add-deltas.cc", 56, "Empty feature matrix for key %s", utt);
    return DROP;
  }
  int32_t dim = m->cols;
  if (st->truncate) {
    if (st->truncate > m->cols) {
      LOGAT(KIO_LOG_ERROR, st->prog, "main", "add-deltas.cc", 61,
            "Cannot truncate features as dimension %d is smaller than truncation dimension.", m->cols);
      return DIE;
    }
    dim = st->truncate;
    for (int32_t t = 1; t < m->rows; t++)  /* compact the kept columns */
      memmove(m->data + (size_t)t * dim, m->data + (size_t)t * m->cols, sizeof(float) * (size_t)dim);
    m->cols = dim;
  }
  if (ensure(tmp, m->rows, dim * (st->delta_order + 1)) != KIO_OK) return DIE;
  struct delta_job j = {m->data, m->rows, dim, st->delta_order, s->scales, s->sdims, tmp->data};
  kio_fpool_run(s->pool, m->rows, 8, delta_part, &j);
  swap_mat(m, tmp);
  s->num_done++;
  return PASS;
}

/* fuse: the next stage is a live transform-feats: it reads the spliced rows
 * in place (sv), nothing is copied. */
static int do_splice(stage_rt *s, kio_matrix *m, kio_matrix *tmp, int fuse, splice_view *sv) {
  kio_feat_stage *st = s->st;
  if (m->rows == 0) {
    LOGAT(KIO_LOG_ERROR, st->prog, "SpliceFrames", "feature-functions.cc", 211,
          "SpliceFrames: empty input");
    return DIE;
  }
  if (fuse && (int64_t)m->cols * (st->left + 1 + st->right) <= SPLICE_FUSE_MAX) {
    *sv = (splice_view){1, st->left, st->right};
    s->num_done++;
    return PASS;
  }
  if (ensure(tmp, m->rows, m->cols * (st->left + st->right + 1)) != KIO_OK) return DIE;
  kio_featop_splice(m->data, m->rows, m->cols, st->left, st->right, tmp->data);
  swap_mat(m, tmp);
  s->num_done++;
  return PASS;
}

/* Prepares W^T and the offset for a transform matrix (cached per key). */
static int prepare_transform(stage_rt *s, const char *key, const kio_matrix *w, int32_t fdim) {
  if (s->wkey && !strcmp(s->wkey, key) && s->wrows == w->rows && s->wcols == fdim) return KIO_OK;
  free(s->wt);
  free(s->wkey);
  s->wkey = strdup(key);
  s->wt = malloc(sizeof(float) * ((size_t)w->rows * (size_t)fdim + (size_t)w->rows + 1));
  if (!s->wt || !s->wkey) return KIO_ERR;
  for (int32_t j = 0; j < w->rows; j++)
    for (int32_t k = 0; k < fdim; k++) s->wt[(size_t)k * w->rows + j] = w->data[(size_t)j * w->cols + k];
  s->woff = NULL;
  if (w->cols == fdim + 1) {
    s->woff = s->wt + (size_t)w->rows * fdim;
    for (int32_t j = 0; j < w->rows; j++) s->woff[j] = w->data[(size_t)j * w->cols + fdim];
  }
  s->wrows = w->rows;
  s->wcols = fdim;
  s->have_logdet = 0;
  return KIO_OK;
}

static int do_transform(stage_rt *s, const char *utt, kio_matrix *m, kio_matrix *tmp,
                        const splice_view *sv) {
  kio_feat_stage *st = s->st;
  const kio_matrix *w = &s->gtrans;
  const char *key = "";
  if (st->table_is_rspec) {
    int h = mapped_has_key(s, utt, &key);
    if (h < 0) return DIE;
    if (h == 0) {
      LOGAT(KIO_LOG_WARNING, st->prog, "main", "transform-feats.cc", 87,
            "No fMLLR transform available for utterance %s, producing no output for "
            "this utterance", utt);
      s->num_err++;
      return DROP;
    }
    if (!(w = kio_ra_value(s->tab, key))) return DIE;
  }
  int32_t fdim = sv ? m->cols * (sv->left + 1 + sv->right) : m->cols;
  if (w->cols != fdim && w->cols != fdim + 1) {
    LOGAT(KIO_LOG_WARNING, st->prog, "main", "transform-feats.cc", 110,
          "Transform matrix for utterance %s has bad dimension %dx%d versus feat dim %d",
          utt, w->rows, w->cols, fdim);
    if (w->cols == fdim + 2)
      LOGAT(KIO_LOG_WARNING, st->prog, "main", "transform-feats.cc", 114,
            "[perhaps the transform was created by compose-transforms, and you forgot "
            "the --b-is-affine option?]");
    s->num_err++;
    return DROP;
  }
  if (prepare_transform(s, key, w, fdim) != KIO_OK || ensure(tmp, m->rows, w->rows) != KIO_OK)
    return DIE;
  /* Only the hsw profile has outputs with another chain than the plain one
   * (feat-gemm.c's plan); the others take the plain chains directly. */
  unsigned char *cls = kio_featop_profile() != KIO_FEATOP_HSW ? NULL
                       : kio_featop_gemm_plan(m->rows, fdim, w->rows, kio_featop_blas_threads());
  struct xform_job j = {cls, m->data, w->data, s->wt, s->woff, fdim, w->cols, w->rows, tmp->data,
                        sv, m->cols, m->rows};
  kio_fpool_run(s->pool, m->rows, 8, xform_part, &j);
  free(cls);
  s->num_done++;
  if (s->logdet_type == LD_UNKNOWN)
    s->logdet_type = w->rows == fdim ? LD_LOGDET : w->rows < fdim ? LD_PSEUDO : LD_DIMINC;
  if (s->logdet_type != LD_DIMINC) {
    if (!s->have_logdet) {
      s->wlogdet = (float)kio_featop_half_logdet(w->data, w->rows, w->cols, fdim);
      s->have_logdet = 1;
    }
    kio_feat_counts c = {.tot_t = s->tot_t, .tot_logdet = s->tot_logdet};
    kio_feat_logdet_add(st, &c, m->rows, s->wlogdet);
    s->tot_t = c.tot_t;
    s->tot_logdet = c.tot_logdet;
  }
  swap_mat(m, tmp);
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
        LOGAT(KIO_LOG_ERROR, s->st->prog, "main", "select-feats.cc", 79, "Invalid range start: %ld", a);
        return DIE;
      }
      if (b < 0 || b > dim_in - 1) {
        LOGAT(KIO_LOG_ERROR, s->st->prog, "main", "select-feats.cc", 82, "Invalid range end: %ld", b);
        return DIE;
      }
    } else {
      a = b = strtol(p, NULL, 10);
      if (a < 0 || a > dim_in - 1) {
        LOGAT(KIO_LOG_ERROR, s->st->prog, "main", "select-feats.cc", 103, "Invalid selection index: %ld", a);
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

static int do_select(stage_rt *s, kio_matrix *m, kio_matrix *tmp) {
  if (!s->sel_ready && select_init(s, m->cols) != PASS) return DIE;
  /* The selection was checked against the first utterance only; a later,
   * narrower one fails Kaldi's SubMatrix assertion (abort: status 134). */
  for (int32_t j = 0; j < s->nsel; j++)
    if (s->sel[j] >= m->cols) {
      LOGAT(KIO_LOG_ASSERT, s->st->prog, "SubMatrix", "kaldi-matrix.cc", 1644,
            "Assertion failed: (static_cast<UnsignedMatrixIndexT>(ro) < "
            "static_cast<UnsignedMatrixIndexT>(M.num_rows_) && "
            "static_cast<UnsignedMatrixIndexT>(co) < static_cast<UnsignedMatrixIndexT>(M.num_cols_) && "
            "static_cast<UnsignedMatrixIndexT>(r) <= static_cast<UnsignedMatrixIndexT>(M.num_rows_ - ro) && "
            "static_cast<UnsignedMatrixIndexT>(c) <= static_cast<UnsignedMatrixIndexT>(M.num_cols_ - co))");
      s->abort_status = (128 + SIGABRT) << 8;
      return DIE;
    }
  if (ensure(tmp, m->rows, s->nsel) != KIO_OK) return DIE;
  for (int32_t t = 0; t < m->rows; t++)
    for (int32_t j = 0; j < s->nsel; j++)
      tmp->data[(size_t)t * s->nsel + j] = m->data[(size_t)t * m->cols + s->sel[j]];
  swap_mat(m, tmp);
  s->num_done++;
  return PASS;
}

/* fuse: see do_splice; sv: the view it leaves for the transform after it. */
static int run_stage(stage_rt *s, const char *utt, kio_matrix *m, kio_matrix *tmp, int fuse,
                     splice_view *sv) {
  switch (s->st->op) {
    case KIO_FEAT_CMVN: return do_cmvn(s, utt, m);
    case KIO_FEAT_DELTAS: return do_deltas(s, utt, m, tmp);
    case KIO_FEAT_SPLICE: return do_splice(s, m, tmp, fuse, sv);
    case KIO_FEAT_TRANSFORM: {
      int r = do_transform(s, utt, m, tmp, sv->active ? sv : NULL);
      sv->active = 0;
      return r;
    }
    case KIO_FEAT_SELECT: return do_select(s, m, tmp);
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
          KIO_LOG_AT(KIO_LOG_ERROR, "Input", "kaldi-io.cc", 756, "Error opening input stream %s",
                     st->table);
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
  free(s->wt);
  free(s->wkey);
  free(s->sel);
}

static void *chain_thread(kio_ring *ring, void *arg) {
  kio_feat *h = arg;
  int n = h->plan.nstages;
  stage_rt *rt = h->rt;
  kio_fpool *pool = kio_fpool_new(kio_fpool_threads());
  for (int k = 0; k < n; k++) rt[k].pool = pool;
  /* Stage k opens its tables at its start; a failure kills it at once. */
  for (int k = 0; k < n; k++)
    if (stage_open(&rt[k]) != KIO_OK) { rt[k].dead = 1; rt[k].status = 255 << 8; }
  kio_seq_reader *rd = NULL;
  kio_matrix m = {0}, tmp = {0};
  splice_view sv = {0, 0, 0};
  int first_alive = !rt[0].dead;
  if (first_alive) {
    kio_log_set_thread_program(rt[0].st->prog);
    if (kio_seq_open(&rd, h->plan.input, &kio_matrix_holder) != KIO_OK) {
      rt[0].dead = 1;
      rt[0].status = 255 << 8;
    }
  }
  int dead_from = n;  /* the first dead stage: stages from it on get no input */
  for (int k = 0; k < n; k++) if (rt[k].dead) { dead_from = k; break; }
  while (rd && dead_from > 0 && !kio_seq_done(rd)) {
    kio_log_set_thread_program(rt[0].st->prog);
    const char *key = kio_seq_key(rd);
    if (kio_seq_take(rd, &m) != KIO_OK) {
      rt[0].dead = 1;
      rt[0].status = 255 << 8;
      dead_from = 0;
      break;
    }
    int k = 0;
    sv.active = 0;
    for (; k < n; k++) {
      if (k >= dead_from) { /* writing to a dead stage: killed */
        for (int j = 0; j < k; j++) if (!rt[j].dead) rt[j].killed = 1;
        break;
      }
      int fuse = k + 1 < dead_from && rt[k + 1].st->op == KIO_FEAT_TRANSFORM;
      int r = run_stage(&rt[k], key, &m, &tmp, fuse, &sv);
      if (r == DROP) break;
      if (r == DIE) {
        rt[k].dead = 1;
        rt[k].status = rt[k].abort_status ? rt[k].abort_status : 255 << 8;
        dead_from = k;
        break;
      }
    }
    if (k == n && kio_ring_put(ring, key, &m) != 0) {
      /* The reader left: the last stage is killed by SIGPIPE, so are the
       * others when they next write. */
      for (int j = 0; j < n; j++) if (!rt[j].dead) { rt[j].killed = 1; rt[j].status = (128 + SIGPIPE) << 8; }
      break;
    }
    kio_seq_next(rd);
    if (dead_from == 0 || rt[0].killed) break;
  }
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
  kio_matrix_free(&m);
  kio_matrix_free(&tmp);
  return NULL;
}

FILE *kio_feat_open(const char *cmd, kio_feat **out) {
  *out = NULL;
  const char *env = getenv("KIO_FEATS_PIPE");
  if (env && !strcmp(env, "0")) {
    KIO_VLOG(1, "Feature pipeline run as a pipe (KIO_FEATS_PIPE=0): %s", cmd);
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
  for (int k = 0; k < h->plan.nstages; k++) stage_free(&h->rt[k]);
  free(h->rt);
  kio_feat_plan_free(&h->plan);
  free(h);
  return status;
}
