/* gpu-feats, host part: the raw-matrix holder, the chain's tables and
 * constants, and the batches (raw bytes + per-utterance CMVN parameters,
 * computed exactly as base/feat/feat-chain.c does, with its warnings and
 * errors). The kernels are in feats-cuda.cu. */
#include "feats-impl.h"

#include <stdlib.h>
#include <string.h>

#include "base/matrix/compressed-matrix.h"
#include "base/feat/feat-check.h"
#include "base/feat/feat-ops.h"
#include "base/io/io.h"
#include "base/sys/log.h"
#include "base/matrix/blas-gemm.h"
#include "base/matrix/blas-profile.h"

/* ---- the raw-matrix holder (double matrices and tokens: base's holders) ---- */
static int raw_reserve(gfeat_raw *r, size_t n) {
  if (n <= r->cap) return KIO_OK;
  unsigned char *p = realloc(r->bytes, n);
  if (!p) { kio_set_error("Out of memory reading a %zu-byte matrix", n); return KIO_ERR; }
  r->bytes = p;
  r->cap = n;
  return KIO_OK;
}

static int raw_read(FILE *f, int binary, void *obj) {
  gfeat_raw *r = obj;
  r->rows = r->cols = 0;
  r->nbytes = 0;
  r->format = GFEAT_RAW_FLOAT;
  if (binary && kio_peek(f, 1) == 'C') {
    char tok[16];
    if (kio_read_token(f, 1, tok, sizeof tok) != KIO_OK) return KIO_ERR;
    int format = !strcmp(tok, "CM") ? 1 : !strcmp(tok, "CM2") ? 2 : !strcmp(tok, "CM3") ? 3 : 0;
    if (!format) {
      kio_set_error("Unexpected token %s, expecting CM, CM2 or CM3", tok);
      return KIO_ERR;
    }
    unsigned char hb[16];
    if (fread(hb, 1, 16, f) != 16) {
      kio_set_error("Failed to read compressed-matrix header (truncated)");
      return KIO_ERR;
    }
    int32_t rows, cols;
    memcpy(&rows, hb + 8, 4);
    memcpy(&cols, hb + 12, 4);
    if (cols == 0) return KIO_OK;  /* empty: nothing follows */
    if (rows < 0 || cols < 0 || (int64_t)rows * cols > INT32_MAX) {
      kio_set_error("Bad compressed-matrix size %d x %d", rows, cols);
      return KIO_ERR;
    }
    size_t n = (size_t)rows * (size_t)cols;
    size_t data = format == 1 ? (size_t)cols * 8 + n : format == 2 ? 2 * n : n;
    /* A corrupt header claims up to 2 GB: grow as the data arrives. */
    size_t done = 0;
    const size_t chunk = (size_t)1 << 24;
    while (done < data) {
      size_t k = data - done < chunk ? data - done : chunk;
      if (raw_reserve(r, 16 + done + k) != KIO_OK) return KIO_ERR;
      if (fread(r->bytes + 16 + done, 1, k, f) != k) {
        kio_set_error("Failed to read compressed-matrix data (%d x %d, CM%s): truncated", rows,
                      cols, format == 1 ? "" : format == 2 ? "2" : "3");
        return KIO_ERR;
      }
      done += k;
    }
    if (rows == 0) return KIO_OK;
    if (raw_reserve(r, 16) != KIO_OK) return KIO_ERR;
    memcpy(r->bytes, hb, 16);
    r->format = format;
    r->rows = rows;
    r->cols = cols;
    r->nbytes = 16 + data;
    return KIO_OK;
  }
  kio_matrix m = {0};
  int rc = kio_matrix_read(f, binary, &m);
  if (rc == KIO_OK && m.rows > 0) {
    size_t n = sizeof(float) * (size_t)m.rows * (size_t)m.cols;
    rc = raw_reserve(r, n);
    if (rc == KIO_OK) {
      memcpy(r->bytes, m.data, n);
      r->rows = m.rows;
      r->cols = m.cols;
      r->nbytes = n;
    }
  }
  kio_matrix_free(&m);
  return rc;
}

static int raw_write(FILE *f, int binary, const void *obj) {
  kio_matrix m = {0};
  int rc = gfeat_raw_to_matrix(obj, &m);
  if (rc == KIO_OK) rc = kio_matrix_write(f, binary, &m);
  kio_matrix_free(&m);
  return rc;
}

static void raw_free(void *obj) {
  gfeat_raw *r = obj;
  free(r->bytes);
  memset(r, 0, sizeof *r);
}

const kio_holder gfeat_raw_holder = {"Matrix<float>", sizeof(gfeat_raw), 1,
                                     raw_read, raw_write, raw_free, NULL};

int gfeat_raw_to_matrix(const gfeat_raw *r, kio_matrix *m) {
  if (r->format != GFEAT_RAW_FLOAT) return kio_cmatrix_decompress(r->format, r->bytes, r->bytes + 16, m);
  if (kio_matrix_resize(m, r->rows, r->cols) != KIO_OK) return KIO_ERR;
  size_t n = (size_t)r->rows * (size_t)r->cols;
  if (n) memcpy(m->data, r->bytes, sizeof(float) * n);
  return KIO_OK;
}

/* ---- the chain ---- */
int gfeat_supported(const kio_feat_plan *plan) {
  if (plan->nstages < 1 || plan->nstages > GFEAT_MAX_STAGES) {
    kio_set_error("%d stages", plan->nstages);
    return 0;
  }
  for (int k = 0; k < plan->nstages; k++) {
    const kio_feat_stage *s = &plan->stages[k];
    switch (s->op) {
      case KIO_FEAT_CMVN:
        if (k) { kio_set_error("apply-cmvn after another stage"); return 0; }
        break;
      case KIO_FEAT_DELTAS:
        if (s->truncate) { kio_set_error("add-deltas --truncate"); return 0; }
        if (s->delta_order < 0 || s->delta_order > GFEAT_MAX_ORDER) {
          kio_set_error("add-deltas --delta-order=%d", s->delta_order);
          return 0;
        }
        break;
      case KIO_FEAT_SPLICE:
      case KIO_FEAT_COPY:
        break;
      case KIO_FEAT_TRANSFORM:  /* global, or per utterance / speaker (fMLLR) */
        break;
      default:
        kio_set_error("%s", s->prog);
        return 0;
    }
  }
  return 1;
}

static int read_matrix_rx(const char *rx, int is_double, void *m) {
  kio_input *in = NULL;
  int binary;
  if (kio_input_open(&in, rx, &binary) != KIO_OK) return KIO_ERR;
  int r = is_double ? kio_dmatrix_read(kio_input_stream(in), binary, m)
                    : kio_matrix_read(kio_input_stream(in), binary, m);
  kio_input_close(in);
  if (r != KIO_OK)
    KIO_ERROR("Failed to read %s from %s: %s", is_double ? "Matrix<double>" : "Matrix<float>", rx,
              kio_last_error());
  return r;
}

int gfeat_chain_open(const kio_feat_plan *plan, gfeat_chain **out) {
  *out = NULL;
  if (!gfeat_supported(plan)) return KIO_ERR;
  gfeat_chain *c = calloc(1, sizeof *c);
  if (!c) { KIO_ERROR("Out of memory"); return KIO_ERR; }
  c->plan = plan;
  c->dead = -1;
  c->profile = kio_blas_profile();
  c->blas_threads = kio_blas_threads();
  int rc = KIO_OK;
  for (int k = 0; k < plan->nstages && rc == KIO_OK; k++) {
    const kio_feat_stage *s = &plan->stages[k];
    gfeat_stage *g = &c->st[c->nst];
    switch (s->op) {
      case KIO_FEAT_CMVN:
        c->cmvn = s;
        if (!s->table_is_rspec) rc = read_matrix_rx(s->table, 1, &c->gstats);
        else if (kio_ra_open(&c->tab, s->table, &kio_dmatrix_holder) != KIO_OK) rc = KIO_ERR;
        else if (s->utt2spk && kio_ra_open(&c->u2s, s->utt2spk, &kio_token_holder) != KIO_OK) rc = KIO_ERR;
        break;
      case KIO_FEAT_DELTAS: {
        float **sc = NULL;
        int *sd = NULL;
        g->op = GFEAT_OP_DELTAS;
        g->order = s->delta_order;
        g->window = s->delta_window;
        if (kio_featop_delta_scales(g->order, g->window, &sc, &sd) != 0) {
          KIO_ERROR("Out of memory");
          rc = KIO_ERR;
          break;
        }
        for (int i = 0; i <= g->order; i++) {
          g->soff[i] = g->ntaps;
          g->sdims[i] = sd[i];
          g->ntaps += sd[i];
        }
        g->scales = malloc(sizeof(float) * (size_t)g->ntaps);
        for (int i = 0; i <= g->order; i++) {
          if (g->scales) memcpy(g->scales + g->soff[i], sc[i], sizeof(float) * (size_t)sd[i]);
          free(sc[i]);
        }
        free(sc);
        free(sd);
        c->nst++;
        if (!g->scales) { KIO_ERROR("Out of memory"); rc = KIO_ERR; }
        break;
      }
      case KIO_FEAT_SPLICE:
        g->op = GFEAT_OP_SPLICE;
        g->left = s->left;
        g->right = s->right;
        c->nst++;
        break;
      case KIO_FEAT_TRANSFORM:
        g->op = GFEAT_OP_TRANSFORM;
        g->st = s;
        c->nst++;
        kio_log_set_thread_program(s->prog);
        if (!s->table_is_rspec) rc = read_matrix_rx(s->table, 0, &g->w);
        else if (kio_ra_open(&g->table, s->table, &kio_matrix_holder) != KIO_OK) rc = KIO_ERR;
        else if (s->utt2spk && kio_ra_open(&g->u2s, s->utt2spk, &kio_token_holder) != KIO_OK) rc = KIO_ERR;
        kio_log_set_thread_program(NULL);
        break;
      default:
        break;
    }
  }
  if (rc != KIO_OK) {
    gfeat_chain_free(c);
    return KIO_ERR;
  }
  *out = c;
  return KIO_OK;
}

void gfeat_chain_free(gfeat_chain *c) {
  if (!c) return;
  kio_ra_close(c->tab);
  kio_ra_close(c->u2s);
  kio_dmatrix_free(&c->gstats);
  for (int k = 0; k < c->nst; k++) {
    free(c->st[k].scales);
    kio_matrix_free(&c->st[k].w);
    kio_ra_close(c->st[k].table);
    kio_ra_close(c->st[k].u2s);
    free(c->st[k].ld_key);
  }
  for (size_t i = 0; i < c->nseen; i++) free(c->seen[i]);
  free(c->seen);
  free(c);
}

int32_t gfeat_chain_out_dim(const gfeat_chain *c, int32_t dim) {
  for (int k = 0; k < c->nst; k++) {
    const gfeat_stage *g = &c->st[k];
    if (g->op == GFEAT_OP_DELTAS) dim *= g->order + 1;
    else if (g->op == GFEAT_OP_SPLICE) dim *= g->left + g->right + 1;
    else if (g->table) return -1;  /* the utterance's matrix decides */
    else if (g->w.cols != dim && g->w.cols != dim + 1) return -1;
    else dim = g->w.rows;
  }
  return dim;
}

/* ---- batches ---- */
gfeat_batch *gfeat_batch_new(void) { return calloc(1, sizeof(gfeat_batch)); }

void gfeat_batch_clear(gfeat_batch *b) {
  b->n = 0;
  b->nbytes = 0;
  for (int k = 0; k < GFEAT_MAX_STAGES; k++) {
    b->st[k].npool = 0;
    b->st[k].ncls = 0;
    free(b->st[k].last_key);
    b->st[k].last_key = NULL;
  }
  b->frames = 0;
  b->in_dim = b->out_dim = 0;
  b->chain = NULL;
}

void gfeat_batch_free(gfeat_batch *b) {
  if (!b) return;
  free(b->utt);
  free(b->bytes);
  free(b->cmvn);
  for (int k = 0; k < GFEAT_MAX_STAGES; k++) {
    free(b->st[k].pool);
    free(b->st[k].ref);
    free(b->st[k].last_key);
    free(b->st[k].cls);
  }
  free(b);
}

int gfeat_batch_count(const gfeat_batch *b) { return b->n; }
int64_t gfeat_batch_frames(const gfeat_batch *b) { return b->frames; }
int32_t gfeat_batch_rows(const gfeat_batch *b, int i) { return b->utt[i].rows; }
int64_t gfeat_batch_row_off(const gfeat_batch *b, int i) { return b->utt[i].frame_off; }
int32_t gfeat_batch_dim(const gfeat_batch *b) { return b->out_dim; }

int32_t gfeat_batch_widest(const gfeat_batch *b) {
  const gfeat_chain *c = b->chain;
  int32_t dim = b->in_dim, wmax = dim;
  for (int k = 0; c && k < c->nst; k++) {
    const gfeat_stage *s = &c->st[k];
    dim = s->op == GFEAT_OP_DELTAS ? dim * (s->order + 1)
          : s->op == GFEAT_OP_SPLICE ? dim * (s->left + s->right + 1)
          : s->table ? (b->n > 0 ? b->st[k].ref[0].rows : dim) : s->w.rows;
    if (dim > wmax) wmax = dim;
  }
  return wmax;
}

size_t gfeat_batch_need(const gfeat_batch *b) {
  const size_t T = (size_t)(b->frames > 0 ? b->frames : 0), n = (size_t)b->n;
  size_t need = b->nbytes + 16 + n * (sizeof(gfeat_dutt) + 2 * sizeof(float) * (size_t)b->in_dim);
  need += 2 * sizeof(float) * T * (size_t)gfeat_batch_widest(b);  /* the two work matrices */
  need += sizeof(float) * T * (size_t)(b->out_dim > 0 ? b->out_dim : b->in_dim);  /* output */
  for (int k = 0; b->chain && k < b->chain->nst; k++)
    need += b->st[k].ncls + sizeof(float) * b->st[k].npool + n * sizeof(gfeat_wref);
  return need + need / 4;  /* the buffers' slack */
}

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return KIO_OK;
  size_t n = *cap ? *cap : 64;
  while (n < need) n *= 2;
  void *q = realloc(*p, n * elem);
  if (!q) { KIO_ERROR("Out of memory for a feature batch"); return KIO_ERR; }
  *p = q;
  *cap = n;
  return KIO_OK;
}

/* apply-cmvn's checks and parameters for one utterance (feat-chain.c's
 * do_cmvn): GFEAT_ADDED with norm filled, GFEAT_DROPPED, KIO_ERR. */
static int cmvn_params(gfeat_chain *c, const char *utt, const gfeat_raw *raw, float *norm) {
  const kio_feat_stage *st = c->cmvn;
  const kio_dmatrix *stats = &c->gstats;
  if (st->table_is_rspec) {
    const char *key;
    int r = kio_fchk_table_key(st, c->u2s, c->tab, utt, &key);
    if (r == KIO_FCHK_DIE) return KIO_ERR;
    if (r == KIO_FCHK_DROP) {
      if (c->counting) c->cnt[0].num_err++;
      return GFEAT_DROPPED;
    }
    if (!(stats = kio_ra_value(c->tab, key))) return KIO_ERR;
  }
  if (kio_fchk_cmvn(st, stats, raw->rows, raw->cols) != KIO_FCHK_PASS ||
      kio_fchk_cmvn_norm(st, stats, norm, norm + stats->cols - 1) != KIO_FCHK_PASS)
    return KIO_ERR;
  if (c->counting) c->cnt[0].num_done++;
  return GFEAT_ADDED;
}

/* transform-feats' counts for an utterance done (feat-chain.c's do_transform):
 * the logdet of its matrix w (input dimension dim), cached per table key. */
static int logdet(gfeat_stage *g, const kio_feat_stage *st, kio_feat_counts *n, const char *key,
                  const kio_matrix *w, int32_t rows, int32_t dim) {
  n->num_done++;
  if (n->logdet_type == KIO_FEAT_LD_UNKNOWN)
    n->logdet_type = w->rows == dim ? KIO_FEAT_LD_LOGDET
                     : w->rows < dim ? KIO_FEAT_LD_PSEUDO : KIO_FEAT_LD_DIMINC;
  if (n->logdet_type == KIO_FEAT_LD_DIMINC) return KIO_OK;
  if (!g->have_ld || (g->table && strcmp(g->ld_key, key))) {
    char *k = strdup(key);
    if (!k) { KIO_ERROR("Out of memory"); return KIO_ERR; }
    free(g->ld_key);
    g->ld_key = k;
    g->ld = (float)kio_featop_half_logdet(w->data, w->rows, w->cols, dim);
    g->have_ld = 1;
  }
  kio_feat_logdet_add(st, n, rows, g->ld);
  return KIO_OK;
}

/* The stages' checks after CMVN (feat-chain.c's do_deltas, do_splice,
 * do_transform), with each table transform's lookup (its matrix copied
 * into the batch's pool; refs[k] set, refs[k].rows = its rows for every
 * transform): the output dimension, or -1 (dropped) / -2 (error). */
static int32_t stage_checks(gfeat_chain *c, gfeat_batch *b, const char *utt, int32_t rows,
                            int32_t dim, gfeat_wref *refs) {
  int s = 0;
  for (int k = 0; k < c->plan->nstages; k++) {
    const kio_feat_stage *st = &c->plan->stages[k];
    kio_feat_counts *n = c->counting ? &c->cnt[k] : NULL;
    if (st->op == KIO_FEAT_CMVN) continue;
    if (st->op == KIO_FEAT_COPY) {
      if (n) n->num_done++;
      continue;
    }
    int si = s++;
    gfeat_stage *g = &c->st[si];
    if (g->op == GFEAT_OP_DELTAS) {
      int r = kio_fchk_deltas(st, utt, rows, dim);
      if (r == KIO_FCHK_DROP) return -1;
      if (r == KIO_FCHK_DIE) return c->dead = k, -2;
      if (n) n->num_done++;
      dim *= g->order + 1;
      continue;
    }
    if (g->op == GFEAT_OP_SPLICE) {
      if (kio_fchk_splice(st, rows) != KIO_FCHK_PASS) return c->dead = k, -2;
      if (n) n->num_done++;
      dim *= g->left + g->right + 1;
      continue;
    }
    const kio_matrix *w = &g->w;
    const char *key = utt;
    if (g->table) {  /* RandomAccessTableReaderMapped, as transform-feats */
      int r = kio_fchk_table_key(st, g->u2s, g->table, utt, &key);
      if (r == KIO_FCHK_DIE) return c->dead = k, -2;
      if (r == KIO_FCHK_DROP) {
        if (n) n->num_err++;
        return -1;
      }
      if (!(w = kio_ra_value(g->table, key))) return c->dead = k, -2;
    }
    if (kio_fchk_transform(st, utt, w, dim) != KIO_FCHK_PASS) {
      if (n) n->num_err++;
      return -1;
    }
    if (n && logdet(g, st, n, key, w, rows, dim) != KIO_OK) return -2;
    refs[si].rows = w->rows;
    refs[si].affine = w->cols == dim + 1;
    if (g->table && b) {
      gfeat_bstage *bs = &b->st[si];
      if (bs->last_key && !strcmp(bs->last_key, key)) {
        refs[si].off = bs->last_off;
      } else {
        size_t cnt = (size_t)w->rows * (size_t)w->cols;
        char *kc = strdup(key);
        if (!kc || grow((void **)&bs->pool, &bs->pcap, bs->npool + cnt + 1, sizeof(float)) != KIO_OK) {
          free(kc);
          return -2;
        }
        float *wt = bs->pool + bs->npool;
        for (int32_t r = 0; r < w->rows; r++)
          for (int32_t q = 0; q < w->cols; q++) wt[(size_t)q * w->rows + r] = w->data[(size_t)r * w->cols + q];
        free(bs->last_key);
        bs->last_key = kc;
        bs->last_off = refs[si].off = (int64_t)bs->npool;
        bs->npool += cnt;
      }
    }
    dim = w->rows;
  }
  return dim;
}

/* 1 when every table transform's output dimension is the batch's. */
static int same_rows(const gfeat_chain *c, const gfeat_batch *b, const gfeat_wref *refs) {
  for (int k = 0; k < c->nst; k++)
    if (c->st[k].table && b->n > 0 && b->st[k].ref[0].rows != refs[k].rows) return 0;
  return 1;
}

/* The stages' checks and counts for utterance key (b NULL: counts only):
 * GFEAT_ADDED with norm, refs and *out_dim set, GFEAT_DROPPED, KIO_ERR.
 * An utterance is counted once (the aligner may ask for a key again). */
static int check_utt(gfeat_chain *c, gfeat_batch *b, const char *key, const gfeat_raw *raw,
                     float *norm, gfeat_wref *refs, int32_t *out_dim) {
  int32_t in_dim = raw->cols;
  c->counting = !(c->nseen && !strcmp(c->seen[c->nseen - 1], key));
  if (c->counting) {
    char *k = strdup(key);
    if (!k || grow((void **)&c->seen, &c->seencap, c->nseen + 1, sizeof *c->seen) != KIO_OK) {
      free(k);
      return KIO_ERR;
    }
    c->seen[c->nseen++] = k;
  }
  int apply = c->cmvn && c->cmvn->norm_means;
  if (apply) {
    if (in_dim > 64) {
      KIO_ERROR("Feature dimension %d: more than the device path's 64", in_dim);
      return KIO_ERR;
    }
    int r = cmvn_params(c, key, raw, norm);
    if (r == KIO_ERR) c->dead = 0;
    if (r != GFEAT_ADDED) return r;
  } else if (c->cmvn && c->counting) {
    c->cnt[0].num_done++;  /* apply-cmvn --norm-means=false: passed on as is */
  }
  memset(refs, 0, sizeof(gfeat_wref) * GFEAT_MAX_STAGES);
  *out_dim = stage_checks(c, b, key, raw->rows, in_dim, refs);
  if (*out_dim == -1) return GFEAT_DROPPED;
  return *out_dim < 0 ? KIO_ERR : GFEAT_ADDED;
}

int gfeat_chain_check(gfeat_chain *c, const char *key, const gfeat_raw *raw) {
  float norm[2 * 64];
  gfeat_wref refs[GFEAT_MAX_STAGES];
  int32_t out_dim;
  return check_utt(c, NULL, key, raw, norm, refs, &out_dim);
}

int gfeat_batch_add(gfeat_chain *c, gfeat_batch *b, const char *key, const gfeat_raw *raw) {
  int32_t in_dim = raw->cols, out_dim;
  float norm[2 * 64];
  gfeat_wref refs[GFEAT_MAX_STAGES];
  int apply = c->cmvn && c->cmvn->norm_means;
  int r = check_utt(c, b, key, raw, norm, refs, &out_dim);
  if (r != GFEAT_ADDED) return r;
  if (b->n == 0 || b->frames == 0) {
    b->chain = c;
    b->in_dim = in_dim;
    b->out_dim = out_dim;
    b->apply_cmvn = apply;
    b->var_norm = apply && c->cmvn->norm_vars;
  } else if (raw->rows > 0 && (b->chain != c || b->in_dim != in_dim || b->out_dim != out_dim ||
                               !same_rows(c, b, refs))) {
    KIO_ERROR("Feature dimension changed from %dx%d to %dx%d (utterance %s): not done on the "
              "device", b->in_dim, b->out_dim, in_dim, out_dim, key);
    return KIO_ERR;
  }
  size_t boff = (b->nbytes + 15) & ~(size_t)15, n1 = (size_t)b->n + 1, ucap = (size_t)b->cap;
  if (grow((void **)&b->utt, &ucap, n1, sizeof(gfeat_dutt)) != KIO_OK) return KIO_ERR;
  for (int k = 0; k < c->nst; k++)  /* per-utterance refs: the utterances' capacity */
    if (c->st[k].table && (!b->st[k].ref || (size_t)b->cap < ucap)) {
      gfeat_wref *r = realloc(b->st[k].ref, sizeof *r * ucap);
      if (!r) { KIO_ERROR("Out of memory for a feature batch"); return KIO_ERR; }
      b->st[k].ref = r;
    }
  b->cap = (int)ucap;
  if (grow((void **)&b->bytes, &b->bcap, boff + raw->nbytes + 1, 1) != KIO_OK ||
      grow((void **)&b->cmvn, &b->ccap, n1 * 2 * (size_t)(in_dim > 0 ? in_dim : 1), sizeof(float)) != KIO_OK)
    return KIO_ERR;
  if (raw->nbytes) memcpy(b->bytes + boff, raw->bytes, raw->nbytes);
  b->nbytes = boff + raw->nbytes;
  if (apply) memcpy(b->cmvn + (size_t)b->n * 2 * in_dim, norm, sizeof(float) * 2 * (size_t)in_dim);
  /* Transforms: the utterance's matrix (tables) and, for profiles whose
   * sgemm kernels have more than one chain, transform-feats' chain per
   * (frame, row): base/matrix/blas-gemm.c's plan, a function of T, K, M
   * and the thread count only. */
  int32_t kd = in_dim;
  for (int k = 0; k < c->nst; k++) {
    const gfeat_stage *g = &c->st[k];
    gfeat_bstage *bs = &b->st[k];
    if (g->op == GFEAT_OP_DELTAS) { kd *= g->order + 1; continue; }
    if (g->op == GFEAT_OP_SPLICE) { kd *= g->left + g->right + 1; continue; }
    if (g->table) bs->ref[b->n] = refs[k];
    int32_t m = refs[k].rows;
    if (kio_blas_gemm_needs_plan(c->profile, kd) && raw->rows > 0) {
      size_t cnt = (size_t)raw->rows * (size_t)m;
      if (grow((void **)&bs->cls, &bs->clscap, bs->ncls + cnt, 1) != KIO_OK) return KIO_ERR;
      unsigned char *cls;
      if (kio_blas_gemm_plan(c->profile, raw->rows, kd, m, c->blas_threads, &cls) != KIO_OK) {
        KIO_ERROR("Out of memory");
        return KIO_ERR;
      }
      if (cls) memcpy(bs->cls + bs->ncls, cls, cnt);
      else memset(bs->cls + bs->ncls, KIO_GEMM_SEQ, cnt);
      free(cls);
      bs->ncls += cnt;
    }
    kd = m;
  }
  gfeat_dutt *u = &b->utt[b->n];
  u->frame_off = b->frames;
  u->byte_off = (int64_t)boff;
  u->rows = raw->rows;
  u->format = raw->format;
  b->n++;
  b->frames += raw->rows;
  return GFEAT_ADDED;
}
