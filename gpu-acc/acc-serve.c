/* Accumulation through the GPU service, the service's side (the wire
 * format and the job's side: acc-remote.c): an ACC connection's batches
 * and statistics, and the accumulation of a fused alignment connection's
 * requests (the one pass). Everything runs the accumulator code a local
 * run runs, on the service's device. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "device/svc-link.h"
#include "acc-internal.h"
#include "acc-remote.h"
#include "gpu-align/align-shm.h"

struct gacc_serve {
  int cap;
  gacc_utt *utts;
  kio_matrix *feats;
  gacc_utt_result *res;
  gacc_stats st;
  kio_log_deferred *lines;
  /* fused: the accumulation running (seq, n), the one ended (its outcome
   * for the next reply), and whether one ever failed */
  int running, ended, failed;
  uint32_t run_seq, end_seq;
  int run_n, end_n, end_rc;
  kio_log_deferred *flines;
  int fd;                 /* a region received, not mapped yet (-1) */
  struct { const uint8_t *map; size_t len; } reg[GACC_REMOTE_REGIONS];
                          /* the job's shared memory (ACC_SHM requests) */
  int n_shm;              /* requests through it */
};

gacc_serve *gacc_serve_new(void) {
  gacc_serve *s = calloc(1, sizeof(gacc_serve));
  if (s) s->fd = -1;
  return s;
}

void gacc_serve_give_fd(gacc_serve *s, int fd) {
  if (fd < 0) return;
  if (s->fd >= 0) close(s->fd);
  s->fd = fd;
}

/* The region received becomes region k's mapping (sealed against
 * shrinking: the job cannot pull pages from under the accumulator). */
static int serve_map(gacc_serve *s, uint32_t k) {
  int fd = s->fd;
  s->fd = -1;
  const uint8_t *p;
  size_t len;
  if (galign_shm_map_received(fd, &p, &len) != KIO_OK) return KIO_ERR;
  if (s->reg[k].map) munmap((void *)s->reg[k].map, s->reg[k].len);
  s->reg[k].map = p;
  s->reg[k].len = len;
  return KIO_OK;
}

int gacc_serve_shm_requests(const gacc_serve *s) { return s ? s->n_shm : 0; }

void gacc_serve_free(gacc_serve *s) {
  if (!s) return;
  if (s->fd >= 0) close(s->fd);
  for (int k = 0; k < GACC_REMOTE_REGIONS; k++)
    if (s->reg[k].map) munmap((void *)s->reg[k].map, s->reg[k].len);
  kio_log_discard(&s->lines);
  kio_log_discard(&s->flines);
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

int gacc_serve_acc(gacc_serve *s, gacc_acc *a, kio_msg_reader *req, kio_msg *reply,
                   int *batch_rc) {
  kio_log_discard(&s->lines);
  *batch_rc = KIO_OK;
  uint32_t n = kio_rd_u32(req), flags = kio_rd_u32(req), region = kio_rd_u32(req);
  const int shm = (flags & KIO_SVC_ACC_SHM) != 0;
  if (req->bad || region >= GACC_REMOTE_REGIONS) return KIO_ERR;
  if (shm && s->fd >= 0 && serve_map(s, region) != KIO_OK) return KIO_ERR;
  const uint8_t *map = s->reg[region].map;
  const size_t map_len = s->reg[region].len;
  /* an utterance takes more than 32 bytes of the request: a count the
   * payload cannot hold allocates nothing */
  if (req->bad || n > req->len / 32 || (flags & ~(uint32_t)KIO_SVC_ACC_SHM) || (shm && !map))
    return KIO_ERR;
  s->n_shm += shm;
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
    const float *x;
    if (shm) {  /* an offset into the shared memory, checked */
      uint64_t off = kio_rd_u64(req);
      uint64_t fb = (uint64_t)(rows > 0 ? rows : 0) * (uint64_t)(cols > 0 ? cols : 0) * 4;
      int in = off % 8 == 0 && off <= map_len && fb <= map_len - off;
      x = in ? (const float *)(map + off) : NULL;
      nf = in ? (size_t)rows * (size_t)cols : (size_t)-1;
    } else {
      x = kio_rd_arr(req, sizeof(float), req->len, &nf);
    }
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
  *batch_rc = rc;
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

/* The statistics into a reply, by reference: the reply is sent before they
 * change. */
static void put_stats(kio_msg *m, const gacc_stats *st) {
  size_t gd = (size_t)st->num_gauss * (size_t)st->dim;
  kio_msg_put_ref(m, st->tacc, (size_t)st->num_tids + 1, sizeof(double));
  kio_msg_put_ref(m, st->occ, (size_t)st->num_gauss, sizeof(double));
  kio_msg_put_ref(m, st->mean_acc, gd, sizeof(double));
  kio_msg_put_ref(m, st->var_acc, gd, sizeof(double));
  kio_msg_put_f64(m, st->total_like);
  kio_msg_put_f64(m, st->total_frames);
}


int gacc_serve_stats(gacc_serve *s, gacc_acc *a, kio_msg *reply, int *batch_rc) {
  kio_log_discard(&s->lines);
  kio_log_defer(&s->lines);
  int rc = gacc_get_stats(a, &s->st);
  kio_log_defer(NULL);
  *batch_rc = rc;
  kio_msg_reset(reply);
  kio_msg_put_i32(reply, rc);
  kio_msg_put_lines(reply, s->lines);
  if (rc != KIO_OK) return KIO_OK;
  put_stats(reply, &s->st);
  return KIO_OK;
}

/* ---- fused connections (the one pass) ---- */

static int serve_grow(gacc_serve *s, int n) {
  if (n <= s->cap) return KIO_OK;
  gacc_utt *u = realloc(s->utts, (size_t)n * sizeof *u);
  if (u) s->utts = u;
  kio_matrix *f = realloc(s->feats, (size_t)n * sizeof *f);
  if (f) s->feats = f;
  gacc_utt_result *r = realloc(s->res, (size_t)n * sizeof *r);
  if (r) s->res = r;
  if (!u || !f || !r) return KIO_ERR;
  s->cap = n;
  return KIO_OK;
}

int gacc_serve_fused_start(gacc_serve *s, gacc_acc *a, int n, const kio_matrix *const *feats,
                           const int32_t *const *ali, uint32_t seq) {
  if (n <= 0) return 0;
  int rc = s->failed || !feats || !ali || serve_grow(s, n) != KIO_OK ? KIO_ERR : KIO_OK;
  if (rc == KIO_OK) {
    /* the job knows the keys; a failure here is redone there, with them */
    for (int i = 0; i < n; i++) s->utts[i] = (gacc_utt){"", feats[i], ali[i]};
    kio_log_discard(&s->flines);
    kio_log_defer(&s->flines);
    rc = gacc_accumulate_batch_start(a, n, s->utts, s->res);
    kio_log_defer(NULL);
  }
  if (rc != KIO_OK) {  /* told with the next reply */
    s->failed = s->ended = 1;
    s->end_rc = KIO_ERR;
    s->end_seq = seq;
    s->end_n = 0;
    return 0;
  }
  s->running = 1;
  s->run_seq = seq;
  s->run_n = n;
  return 1;
}

int gacc_serve_fused_end(gacc_serve *s, gacc_acc *a) {
  if (!s->running) return s->failed ? KIO_ERR : KIO_OK;
  kio_log_defer(&s->flines);
  int rc = gacc_wait(a);
  kio_log_defer(NULL);
  s->running = 0;
  s->ended = 1;
  s->end_rc = rc;
  s->end_seq = s->run_seq;
  s->end_n = rc == KIO_OK ? s->run_n : 0;
  if (rc != KIO_OK) s->failed = 1;
  return rc;
}

void gacc_serve_fused_put(gacc_serve *s, gacc_acc *a, kio_msg *m, int stats) {
  kio_msg_put_u32(m, (uint32_t)s->ended);
  if (s->ended) {
    kio_msg_put_u32(m, s->end_seq);
    kio_msg_put_i32(m, s->end_rc);
    kio_msg_put_lines(m, s->flines);
    kio_msg_put_u32(m, (uint32_t)s->end_n);
    for (int i = 0; i < s->end_n; i++) {
      kio_msg_put_f32(m, s->res[i].like);
      kio_msg_put_i32(m, s->res[i].frames);
    }
  }
  kio_log_discard(&s->flines);
  s->ended = 0;
  int rc = KIO_ERR;
  if (stats && !s->failed) {
    kio_log_deferred *quiet = NULL;
    kio_log_defer(&quiet);
    rc = gacc_get_stats(a, &s->st);
    kio_log_defer(NULL);
    kio_log_discard(&quiet);
    if (rc != KIO_OK) s->failed = 1;
  }
  kio_msg_put_u32(m, !stats ? 0 : rc == KIO_OK ? 1 : 2);
  if (!stats || rc != KIO_OK) return;
  put_stats(m, &s->st);
}
