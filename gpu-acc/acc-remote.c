/* Accumulation through the GPU service (device/svc-link.h): the job's backend
 * of gacc_acc and the service's handler. The job checks every utterance
 * itself first (so fatal errors read exactly as on the other backends) and
 * keeps the per-utterance sums; the service keeps the statistics on its
 * device and runs the same accumulator code a local GPU run would.
 * Wire format:
 *   HELLO:       u32 protocol, u32 kind (acc), array model bytes
 *   ACC:         u32 n, then per utterance str key, i32 rows, cols, arrays
 *                features, transition-ids
 *   ACCUMULATED: i32 status, log lines, then per utterance f32 like, i32 frames
 *   STATS / STATS_ARE: i32 status, log lines, arrays tacc, occ, mean_acc,
 *                var_acc, f64 total_like, total_frames
 * One batch at a time is in flight: an asynchronous entry sends its batch
 * and returns; the reply is collected before the next batch is sent. */
#include <stdlib.h>
#include <string.h>

#include "device/svc-link.h"
#include "acc-internal.h"
#include "acc-remote.h"

struct gacc_remote {
  kio_svc *svc;
  kio_msg msg;
  int pending;            /* utterances of the batch in flight (0: none) */
  gacc_utt_result *res;   /* where its results go (NULL: only the sums) */
  char desc[160];
};

static int lost(gacc_remote *r) {
  KIO_ERROR("Lost the GPU service during accumulation: %s", kio_svc_error(r->svc));
  return KIO_ERR;
}

int gacc_new_remote(gacc_acc **out, const kio_tmodel *tm, const kio_am_gmm *am, char *why,
                    size_t why_len) {
  *out = NULL;
  gacc_remote *r = calloc(1, sizeof *r);
  if (!r) { snprintf(why, why_len, "out of memory"); return KIO_ERR; }
  char *model = NULL;
  size_t len = 0;
  kio_log_deferred *quiet = NULL;
  kio_log_defer(&quiet);
  int rc = gacc_new(out, "cpu", tm, am);  /* the shape, the checks, the sums */
  if (rc == KIO_OK) rc = kio_model_to_bytes(tm, am, &model, &len);
  kio_log_defer(NULL);
  kio_log_discard(&quiet);
  if (rc != KIO_OK) {
    snprintf(why, why_len, "cannot set up the model");
    goto fail;
  }
  if (kio_svc_connect(&r->svc, 1, why, why_len) != KIO_OK) goto fail;
  kio_msg_put_u32(&r->msg, KIO_SVC_PROTOCOL);
  kio_msg_put_u32(&r->msg, KIO_SVC_KIND_ACC);
  kio_msg_put_ref(&r->msg, model, len, 1);
  kio_msg_reader rd;
  if (kio_svc_send(r->svc, KIO_SVC_HELLO, &r->msg) != KIO_OK ||
      kio_svc_recv(r->svc, KIO_SVC_READY, NULL, &rd) != KIO_OK) {
    snprintf(why, why_len, "%s", kio_svc_error(r->svc));
    goto fail;
  }
  int32_t status = kio_rd_i32(&rd);
  const char *desc = kio_rd_str(&rd);
  if (rd.bad || status != KIO_OK) {
    snprintf(why, why_len, "%s", rd.bad ? "malformed reply" : desc);
    goto fail;
  }
  snprintf(r->desc, sizeof r->desc, "%s", desc);
  free(model);
  kio_msg_reset(&r->msg);
  (*out)->remote = r;
  (*out)->is_gpu = 1;
  return KIO_OK;
fail:
  free(model);
  kio_svc_close(r->svc);
  kio_msg_free(&r->msg);
  free(r);
  gacc_free(*out);
  *out = NULL;
  return KIO_ERR;
}

const char *gacc_remote_desc(const gacc_acc *a) { return a->remote ? a->remote->desc : ""; }

void gacc_remote_free(gacc_acc *a) {
  gacc_remote *r = a->remote;
  if (!r) return;
  kio_svc_close(r->svc);
  kio_msg_free(&r->msg);
  free(r);
  a->remote = NULL;
}

/* Collects the reply of the batch in flight, if any. */
int gacc_remote_wait(gacc_acc *a) {
  gacc_remote *r = a->remote;
  if (!r->pending) return KIO_OK;
  int n = r->pending;
  r->pending = 0;
  kio_msg_reader rd;
  if (kio_svc_recv(r->svc, KIO_SVC_ACCUMULATED, NULL, &rd) != KIO_OK) return lost(r);
  int32_t status = kio_rd_i32(&rd);
  if (kio_rd_log_lines(&rd) != KIO_OK) return lost(r);
  if (status != KIO_OK) return KIO_ERR;
  for (int i = 0; i < n; i++) {
    gacc_utt_result u;
    u.like = kio_rd_f32(&rd);
    u.frames = kio_rd_i32(&rd);
    if (rd.bad) return lost(r);
    if (r->res) r->res[i] = u;
    a->like_sum += (double)u.like;
    a->frames_sum += u.frames;
  }
  return KIO_OK;
}

/* Sends a batch (checked first); its results go to res when collected. */
static int send_batch(gacc_acc *a, int n, const gacc_utt *utts, gacc_utt_result *res) {
  gacc_remote *r = a->remote;
  if (gacc_remote_wait(a) != KIO_OK) return KIO_ERR;
  for (int i = 0; i < n; i++)
    if (gacc_check_utt(a, &utts[i]) != KIO_OK) return KIO_ERR;
  kio_msg *m = &r->msg;
  kio_msg_reset(m);
  kio_msg_put_u32(m, (uint32_t)n);
  for (int i = 0; i < n; i++) {
    const kio_matrix *f = utts[i].feats;
    kio_msg_put_str(m, utts[i].key);
    kio_msg_put_i32(m, f->rows);
    kio_msg_put_i32(m, f->cols);
    kio_msg_put_ref(m, f->data, (size_t)f->rows * (size_t)f->cols, sizeof(float));
    kio_msg_put_ref(m, utts[i].ali, (size_t)f->rows, sizeof(int32_t));
  }
  if (kio_svc_send(r->svc, KIO_SVC_ACC, m) != KIO_OK) return lost(r);
  r->pending = n;
  r->res = res;
  return KIO_OK;
}

int gacc_remote_batch(gacc_acc *a, int n, const gacc_utt *utts, gacc_utt_result *res) {
  if (n <= 0) return KIO_OK;
  if (send_batch(a, n, utts, res) != KIO_OK) return KIO_ERR;
  return gacc_remote_wait(a);
}

int gacc_remote_start(gacc_acc *a, int n, const gacc_utt *utts, gacc_utt_result *res) {
  if (n <= 0) return gacc_remote_wait(a);
  return send_batch(a, n, utts, res);
}

int gacc_remote_async(gacc_acc *a, int n, const gacc_utt *utts) {
  if (n <= 0) return gacc_remote_wait(a);
  return send_batch(a, n, utts, NULL);
}

int gacc_remote_stats(gacc_acc *a, gacc_stats *out) {
  gacc_remote *r = a->remote;
  if (gacc_remote_wait(a) != KIO_OK) return KIO_ERR;
  kio_msg_reset(&r->msg);
  kio_msg_reader rd;
  if (kio_svc_send(r->svc, KIO_SVC_STATS, &r->msg) != KIO_OK ||
      kio_svc_recv(r->svc, KIO_SVC_STATS_ARE, NULL, &rd) != KIO_OK)
    return lost(r);
  int32_t status = kio_rd_i32(&rd);
  if (kio_rd_log_lines(&rd) != KIO_OK) return lost(r);
  if (status != KIO_OK) return KIO_ERR;
  size_t gd = (size_t)out->num_gauss * (size_t)out->dim, n1, n2, n3, n4;
  const double *tacc = kio_rd_arr(&rd, sizeof(double), (size_t)out->num_tids + 1, &n1);
  const double *occ = kio_rd_arr(&rd, sizeof(double), (size_t)out->num_gauss, &n2);
  const double *mean = kio_rd_arr(&rd, sizeof(double), gd, &n3);
  const double *var = kio_rd_arr(&rd, sizeof(double), gd, &n4);
  double total_like = kio_rd_f64(&rd), total_frames = kio_rd_f64(&rd);
  if (rd.bad || n1 != (size_t)out->num_tids + 1 || n2 != (size_t)out->num_gauss || n3 != gd ||
      n4 != gd)
    return lost(r);
  out->total_like = total_like;
  out->total_frames = total_frames;
  memcpy(out->tacc, tacc, n1 * sizeof(double));
  memcpy(out->occ, occ, n2 * sizeof(double));
  memcpy(out->mean_acc, mean, n3 * sizeof(double));
  memcpy(out->var_acc, var, n4 * sizeof(double));
  return KIO_OK;
}

/* ---------------- the service's side ---------------- */

struct gacc_serve {
  int cap;
  gacc_utt *utts;
  kio_matrix *feats;
  gacc_utt_result *res;
  gacc_stats st;
  kio_log_deferred *lines;
};

gacc_serve *gacc_serve_new(void) { return calloc(1, sizeof(gacc_serve)); }

void gacc_serve_free(gacc_serve *s) {
  if (!s) return;
  kio_log_discard(&s->lines);
  free(s->utts);
  free(s->feats);
  free(s->res);
  gacc_stats_free(&s->st);
  free(s);
}

int gacc_serve_hello(kio_msg_reader *req, const void **model, size_t *model_len) {
  *model = kio_rd_arr(req, 1, req->len, model_len);
  return req->bad ? KIO_ERR : KIO_OK;
}

int gacc_serve_acc(gacc_serve *s, gacc_acc *a, kio_msg_reader *req, kio_msg *reply) {
  kio_log_discard(&s->lines);
  uint32_t n = kio_rd_u32(req);
  if (req->bad || n > (1u << 24)) return KIO_ERR;
  if ((int)n > s->cap) {
    gacc_utt *u = realloc(s->utts, n * sizeof *u);
    if (u) s->utts = u;
    kio_matrix *f = realloc(s->feats, n * sizeof *f);
    if (f) s->feats = f;
    gacc_utt_result *r = realloc(s->res, n * sizeof *r);
    if (r) s->res = r;
    if (!u || !f || !r) return KIO_ERR;
    s->cap = (int)n;
  }
  for (uint32_t i = 0; i < n; i++) {
    const char *key = kio_rd_str(req);
    int32_t rows = kio_rd_i32(req), cols = kio_rd_i32(req);
    size_t nf, na;
    const float *x = kio_rd_arr(req, sizeof(float), req->len, &nf);
    const int32_t *ali = kio_rd_arr(req, sizeof(int32_t), req->len, &na);
    if (req->bad || rows < 0 || cols < 0 || nf != (size_t)rows * (size_t)cols ||
        na != (size_t)rows)
      return KIO_ERR;
    s->feats[i] = (kio_matrix){rows, cols, (float *)x, 0};
    s->utts[i] = (gacc_utt){key, &s->feats[i], ali};
  }
  kio_log_defer(&s->lines);
  int rc = gacc_accumulate_batch(a, (int)n, s->utts, s->res);
  kio_log_defer(NULL);
  kio_msg_reset(reply);
  kio_msg_put_i32(reply, rc);
  kio_msg_put_lines(reply, s->lines);
  if (rc == KIO_OK)
    for (uint32_t i = 0; i < n; i++) {
      kio_msg_put_f32(reply, s->res[i].like);
      kio_msg_put_i32(reply, s->res[i].frames);
    }
  return KIO_OK;
}

int gacc_serve_stats(gacc_serve *s, gacc_acc *a, kio_msg *reply) {
  kio_log_discard(&s->lines);
  kio_log_defer(&s->lines);
  int rc = gacc_get_stats(a, &s->st);
  kio_log_defer(NULL);
  kio_msg_reset(reply);
  kio_msg_put_i32(reply, rc);
  kio_msg_put_lines(reply, s->lines);
  if (rc != KIO_OK) return KIO_OK;
  size_t gd = (size_t)s->st.num_gauss * (size_t)s->st.dim;
  kio_msg_put_ref(reply, s->st.tacc, (size_t)s->st.num_tids + 1, sizeof(double));
  kio_msg_put_ref(reply, s->st.occ, (size_t)s->st.num_gauss, sizeof(double));
  kio_msg_put_ref(reply, s->st.mean_acc, gd, sizeof(double));
  kio_msg_put_ref(reply, s->st.var_acc, gd, sizeof(double));
  kio_msg_put_f64(reply, s->st.total_like);
  kio_msg_put_f64(reply, s->st.total_frames);
  return KIO_OK;
}
