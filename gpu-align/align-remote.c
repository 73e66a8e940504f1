/* Alignment through the GPU service: the job's backend (see align-remote.h;
 * the service's handler of a request: align-serve.c; the wire format:
 * align-remote.h). */
#include "align-pack.h"
#include "align-remote.h"
#include "align-shm.h"
#include "align-split.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/sys/log.h"
#include "base/sys/settings.h"

enum { MAX_CONN = 16 };

/* A request of a batch: utterances [first, first + n) on connection c,
 * its flags and sequence number (fused), its reply's log lines. */
typedef struct {
  int first, n, c;
  uint32_t flags, seq;
  kio_log_deferred *lines;
} req_part;

/* A batch's requests: parts[beg[c] .. beg[c + 1]) go on connection c,
 * sent[c] and got[c] of them sent and answered. */
typedef struct {
  int active, n, want_pf, k;
  const void *id;               /* its first graph: which batch it is */
  const galign_graph **graphs;  /* a batch sent ahead: its lists (copies) */
  const kio_matrix **feats;
  req_part *parts;
  int nparts, cap;
  int beg[MAX_CONN + 1], sent[MAX_CONN], got[MAX_CONN];
  double t_end[MAX_CONN];       /* when each connection's last reply was read */
  int failed;                   /* sending ahead failed on connection
                                   fail_c: why in err */
  int fail_c;
  char err[200];
} batch_plan;

struct galign_remote {
  int nconn;
  /* the batch being aligned, and the next one sent ahead of it
   * (galign_remote_send_ahead, on every connection); sends, both plans and
   * the shared memory under mu (a receive is not: one thread receives) */
  pthread_mutex_t mu;
  pthread_cond_t cv;      /* the current batch's requests all out, or it ended */
  int ended;              /* galign_remote_align calls ended */
  batch_plan cur, ahead;
  pthread_t sender;       /* sending ahead (sender_main), not joined yet */
  int sender_started, sender_done, abandon;
  int send_n, send_pf;    /* what it sends */
  int send_ended;         /* behind call send_ended + 1 (calls ended then) */
  galign_acc_link *link;  /* fused (connection 0 only; NULL: not) */
  int inflight;           /* requests a connection may have unanswered */
  uint64_t req_bytes;     /* a batch goes in requests of about this size */
  galign_shm shm[MAX_CONN][KIO_SVC_REGIONS];
  int shm_next[MAX_CONN];
  size_t shm_last[MAX_CONN];  /* the last request's bytes in shared memory */
  int warm_pending[MAX_CONN]; /* more batches follow: warm the region after the next request */
  int shm_off;            /* shared memory not usable here: inline */
  int bad_offset;         /* a test hook's malformed offset (align-pack.h) */
  size_t shm_min;         /* smaller requests' arrays go inline */
  kio_svc *svc[MAX_CONN];
  kio_msg msg[MAX_CONN];
  /* where the time goes (--verbose=2, at the end) */
  int nreq, nbatch, nahead, nwarm;
  double t_fill, t_send, t_wait;
  double t_wait_c[MAX_CONN];  /* of t_wait, and frames aligned, per connection */
  int64_t frames_c[MAX_CONN];
  /* each connection's share of a batch's frames (align-split.h), balanced
   * (balance) from when the replies came: read from connection first_rx
   * on; t_prev_end: the previous call's end; late_s: a test hook's delay */
  double share[MAX_CONN], t_prev_end, late_s;
  int balance, first_rx;
  uint64_t sent_bytes, shm_bytes, shm_graph_bytes;
  char desc[160];
  char err[200];
};

static void join_sender(galign_remote *r, int all);

/* ---------------- the job's side ---------------- */

static void put_opts(kio_msg *m, const galign_opts *o) {
  kio_msg_put_f32(m, o->beam);
  kio_msg_put_f32(m, o->retry_beam);
  kio_msg_put_f32(m, o->transition_scale);
  kio_msg_put_f32(m, o->self_loop_scale);
  kio_msg_put_f32(m, o->acoustic_scale);
  kio_msg_put_i32(m, o->careful);
}

/* After a request sent with status sent: the service's READY, its refusal
 * or a broken connection as why; *desc: the reply's text (valid until the
 * connection's next receive). */
static int recv_ready(kio_svc *svc, int sent, const char **desc, char *why, size_t why_len) {
  kio_msg_reader rd;
  if (sent != KIO_OK || kio_svc_recv(svc, KIO_SVC_READY, NULL, &rd) != KIO_OK) {
    snprintf(why, why_len, "%s", kio_svc_error(svc));
    return KIO_ERR;
  }
  int32_t status = kio_rd_i32(&rd);
  *desc = kio_rd_str(&rd);
  if (rd.bad || status != KIO_OK) {
    snprintf(why, why_len, "%s", rd.bad ? "malformed reply" : *desc);
    return KIO_ERR;
  }
  return KIO_OK;
}

/* Opens one connection and hands it the model and options. */
static int open_conn(galign_remote *r, int c, const char *model, size_t len,
                     const galign_opts *o, char *why, size_t why_len) {
  if (kio_svc_connect(&r->svc[c], 1, why, why_len) != KIO_OK) return KIO_ERR;
  kio_msg *m = &r->msg[c];
  kio_msg_reset(m);
  kio_msg_put_u32(m, KIO_SVC_PROTOCOL);
  kio_msg_put_u32(m, KIO_SVC_KIND_ALIGN);
  kio_msg_put_f32(m, (float)kio_svc_timeout());  /* the heartbeats this job needs */
  put_opts(m, o);
  kio_msg_put_ref(m, model, len, 1);
  int rc = kio_svc_send(r->svc[c], KIO_SVC_HELLO, m);
  kio_msg_reset(m);
  const char *desc = NULL;
  if (recv_ready(r->svc[c], rc, &desc, why, why_len) != KIO_OK) return KIO_ERR;
  if (c == 0) snprintf(r->desc, sizeof r->desc, "%s", desc);
  return KIO_OK;
}

int galign_remote_new(galign_remote **out, const kio_tmodel *tm, const kio_am_gmm *am,
                      const galign_opts *o, char *why, size_t why_len) {
  *out = NULL;
  galign_remote *r = calloc(1, sizeof *r);
  if (!r) { snprintf(why, why_len, "out of memory"); return KIO_ERR; }
  pthread_mutex_init(&r->mu, NULL);
  pthread_cond_init(&r->cv, NULL);
  for (int c = 0; c < MAX_CONN; c++)
    for (int k = 0; k < KIO_SVC_REGIONS; k++) r->shm[c][k].fd = -1;
  /* Several requests in flight: the job fills and sends the next while the
   * service aligns one, reads a reply while it aligns the next, and the
   * service accumulates one while it aligns the next. */
  r->inflight = (int)kio_setting_int(KIO_SET_DEV_SERVICE_INFLIGHT, 2, 1, KIO_SVC_MAX_INFLIGHT);
  /* One request per batch by default: a device batch costs the Viterbi
   * search its longest utterance's frames one after another, so small ones
   * cost (docs/benchmarks.md: 86 device batches took 2.1 s of Viterbi
   * where 27 took 1.1 s); batches overlap by being sent ahead instead. */
  r->req_bytes = (uint64_t)kio_setting_int(KIO_SET_DEV_SERVICE_REQUEST_KB, 1 << 20, 1,
                                           (long long)(KIO_SVC_MAX_REQUEST >> 10)) << 10;
  r->shm_min = SHM_MIN;
  const char *t = kio_test_hook(KIO_SET_TEST_SERVICE_SHM);
  if (t) r->shm_min = (size_t)strtoull(t, NULL, 10);
  r->shm_off = r->shm_min == 0;
  const char *bad = kio_test_hook(KIO_SET_TEST_SERVICE_BAD_OFFSET);
  if (bad) r->bad_offset = atoi(bad);
  r->balance = (int)kio_setting_int(KIO_SET_DEV_SERVICE_BALANCE, 0, 0, 1);
  const char *late = kio_test_hook(KIO_SET_TEST_SERVICE_LATE);
  if (late) r->late_s = strtod(late, NULL);
  char *model = NULL;
  size_t len = 0;
  kio_log_deferred *quiet = NULL;  /* serialising never fails on a read model */
  kio_log_defer(&quiet);
  int rc = kio_model_to_bytes(tm, am, &model, &len);
  kio_log_defer(NULL);
  kio_log_discard(&quiet);
  if (rc != KIO_OK) {
    snprintf(why, why_len, "cannot serialise the model");
    galign_remote_free(r);
    return KIO_ERR;
  }
  int want = o->num_gpus < 1 ? 1 : o->num_gpus > MAX_CONN ? MAX_CONN : o->num_gpus;
  for (r->nconn = 0; r->nconn < want; r->nconn++)
    if (open_conn(r, r->nconn, model, len, o, why, why_len) != KIO_OK) break;
  free(model);
  if (r->nconn == 0) {
    galign_remote_free(r);
    return KIO_ERR;
  }
  for (int c = 0; c < r->nconn; c++) r->share[c] = 1.0 / r->nconn;
  if (r->nconn > 1) {
    char d[sizeof r->desc];
    snprintf(d, sizeof d, "%s", r->desc);
    snprintf(r->desc, sizeof r->desc, "%.120s, %d connections", d, r->nconn);
  }
  *out = r;
  return KIO_OK;
}

void galign_remote_free(galign_remote *r) {
  if (!r) return;
  join_sender(r, 1);
  if (r->nreq) {
    /* with several connections: each one's frames and the job's wait on it */
    char per[MAX_CONN * 72] = "";
    for (int c = 0, o = 0; r->nconn > 1 && c < r->nconn && o < (int)sizeof per; c++)
      o += snprintf(per + o, sizeof per - (size_t)o,
                    "%s connection %d: %lld frames, last share %.3f, waited %.3f s",
                    c ? ";" : " (", c + 1, (long long)r->frames_c[c], r->share[c], r->t_wait_c[c]);
    if (per[0]) snprintf(per + strlen(per), sizeof per - strlen(per), ")");
    KIO_VLOG(2, "Through the GPU service: %d requests in %d batches (%d sent ahead); %.1f MB on "
             "the socket, %.1f MB through shared memory (graphs %.1f MB; %d region(s) faulted in "
             "ahead); sending %.3f s (packing and shared memory copies %.3f s), waiting for "
             "replies %.3f s%s", r->nreq, r->nbatch, r->nahead, r->sent_bytes / 1e6,
             r->shm_bytes / 1e6, r->shm_graph_bytes / 1e6, r->nwarm, r->t_send, r->t_fill,
             r->t_wait, per);
  }
  galign_acc_link_put(r->link);
  batch_plan *pl[2] = {&r->cur, &r->ahead};
  for (int i = 0; i < 2; i++) {
    for (int j = 0; j < pl[i]->nparts; j++) kio_log_discard(&pl[i]->parts[j].lines);
    free(pl[i]->parts);
    free(pl[i]->graphs);
    free(pl[i]->feats);
  }
  pthread_cond_destroy(&r->cv);
  pthread_mutex_destroy(&r->mu);
  for (int c = 0; c < MAX_CONN; c++) {
    kio_svc_close(r->svc[c]);
    kio_msg_free(&r->msg[c]);
    for (int k = 0; k < KIO_SVC_REGIONS; k++) galign_shm_release(&r->shm[c][k]);
  }
  free(r);
}

const char *galign_remote_desc(const galign_remote *r) { return r->desc; }
const char *galign_remote_error(const galign_remote *r) { return r->err; }
int galign_remote_nconn(const galign_remote *r) { return r ? r->nconn : 0; }
kio_svc *galign_remote_svc(galign_remote *r) { return r ? r->svc[0] : NULL; }

int galign_remote_fuse(galign_remote *r, galign_acc_link *l, char *why, size_t why_len) {
  if (r->nconn != 1 || r->link) {
    snprintf(why, why_len, "not one connection");
    return KIO_ERR;
  }
  kio_msg *m = &r->msg[0];
  kio_msg_reset(m);
  const char *desc = NULL;
  if (recv_ready(r->svc[0], kio_svc_send(r->svc[0], KIO_SVC_FUSE, m), &desc, why, why_len) != KIO_OK)
    return KIO_ERR;
  pthread_mutex_lock(&l->mu);
  l->refs++;
  pthread_mutex_unlock(&l->mu);
  r->link = l;
  return KIO_OK;
}

/* The flags of request p on a fused connection (first: the first request
 * of a batch, where the statistics may be asked for: they then cover whole
 * batches). Called in sending order. */
static void fused_flags(galign_remote *r, req_part *p, int first) {
  p->flags = 0;
  p->seq = 0;
  galign_acc_link *l = r->link;
  if (!l || p->c != 0) return;
  pthread_mutex_lock(&l->mu);
  if (l->on) {
    p->flags = KIO_SVC_ALIGN_ACC;
    p->seq = ++l->seq;
    if (first && l->want_stats) {
      p->flags |= KIO_SVC_ALIGN_STATS;
      l->want_stats = 0;
    }
  }
  pthread_mutex_unlock(&l->mu);
}

/* The accumulation part of a fused reply (rd at its start), as a record for
 * the accumulator: the aligned utterances of [first, first + n). */
static int fused_record(galign_remote *r, const req_part *p, kio_msg_reader *rd,
                        const kio_matrix *const *feats, const galign_result *results) {
  const int first = p->first, n = p->n;
  galign_acc_link *l = r->link;
  pthread_mutex_lock(&l->mu);
  int on = l->on;
  pthread_mutex_unlock(&l->mu);
  if (!on) return KIO_OK;  /* nobody reads it */
  galign_acc_rec *rec = calloc(1, sizeof *rec);
  if (!rec) return KIO_ERR;
  rec->seq = p->flags & KIO_SVC_ALIGN_ACC ? p->seq : 0;
  rec->tail_len = rd->len - rd->pos;
  rec->feats = malloc((size_t)(n > 0 ? n : 1) * sizeof *rec->feats);
  rec->tail = malloc(rec->tail_len ? rec->tail_len : 1);
  if (!rec->feats || !rec->tail) {
    galign_acc_rec_free(rec);
    return KIO_ERR;
  }
  memcpy(rec->tail, rd->p + rd->pos, rec->tail_len);
  if (rec->seq)
    for (int i = first; i < first + n; i++)
      if (results[i].ok) rec->feats[rec->n++] = feats[i];
  pthread_mutex_lock(&l->mu);
  if (l->last) l->last->next = rec;
  else l->head = rec;
  l->last = rec;
  pthread_mutex_unlock(&l->mu);
  return KIO_OK;
}

static int lost(galign_remote *r, const char *why) {
  snprintf(r->err, sizeof r->err, "%s", why);
  return GALIGN_REMOTE_LOST;
}

/* Sends request p as one ALIGN request on its connection: its arrays
 * (graphs and features) through the connection's next region of shared
 * memory, or inline (small requests, no memfd here). */
static int send_chunk(galign_remote *r, const req_part *p, const galign_graph *const *graphs,
                      const kio_matrix *const *feats, int want_per_frame) {
  const int c = p->c, first = p->first, n = p->n;
  kio_msg *m = &r->msg[c];
  size_t gbytes = 0;
  size_t fbytes = galign_pack_shm_bytes(graphs + first, feats + first, n, &gbytes);
  galign_shm *sh = &r->shm[c][r->shm_next[c]];
  if (r->shm_off || fbytes < r->shm_min || fbytes > SHM_MAX) sh = NULL;
  size_t least = r->req_bytes < SHM_LEAST ? (size_t)r->req_bytes : SHM_LEAST;
  if (sh && galign_shm_reserve(sh, fbytes, least) != KIO_OK) {
    r->shm_off = 1;  /* no memfd here: inline from now on */
    sh = NULL;
  }
  double t0 = kio_now_s();
  uint32_t flags = p->flags | (sh ? KIO_SVC_ALIGN_SHM : 0);
  if (galign_pack_request(m, sh ? sh->map : NULL, fbytes, graphs + first, feats + first, n,
                          want_per_frame, flags, p->seq, (uint32_t)r->shm_next[c],
                          sh ? r->bad_offset : 0) != KIO_OK)
    return KIO_ERR;
  if (sh) r->bad_offset = 0;  /* once */
  if (sh) {
    r->shm_bytes += fbytes;
    r->shm_graph_bytes += gbytes;
  }
  r->t_fill += kio_now_s() - t0;
  int fd = -1;
  if (sh) {
    r->shm_next[c] = (r->shm_next[c] + 1) % (r->inflight + 1);  /* fewer to fill first */
    if (!sh->sent) fd = sh->fd;  /* the region's first request brings it */
    sh->sent = 1;
    r->shm_last[c] = fbytes;
    if (r->warm_pending[c]) r->nwarm += galign_shm_warm(&r->shm[c][r->shm_next[c]], fbytes, least);
    r->warm_pending[c] = 0;
  }
  int rc = fd >= 0 ? kio_svc_send_fd(r->svc[c], KIO_SVC_ALIGN, m, fd)
                   : kio_svc_send(r->svc[c], KIO_SVC_ALIGN, m);
  r->nreq++;
  r->sent_bytes += m->total;
  r->t_send += kio_now_s() - t0;
  return rc;
}

/* Receives the reply to request p: its lines into p->lines (logged once the
 * whole batch is in), the results. KIO_OK or GALIGN_REMOTE_LOST. */
static int recv_chunk(galign_remote *r, req_part *p, const kio_matrix *const *feats,
                      int want_per_frame, galign_result *results) {
  const int c = p->c, first = p->first, n = p->n;
  kio_log_deferred **lines = &p->lines;
  kio_msg_reader rd;
  double t0 = kio_now_s();
  int got = kio_svc_recv(r->svc[c], KIO_SVC_ALIGNED, NULL, &rd);
  r->t_wait += kio_now_s() - t0;
  r->t_wait_c[c] += kio_now_s() - t0;
  if (got != KIO_OK) return lost(r, kio_svc_error(r->svc[c]));
  int32_t status = kio_rd_i32(&rd);
  if (status != KIO_OK) {
    char text[160], why[200];
    if (kio_rd_log_text(&rd, text, sizeof text) != KIO_OK || !text[0])
      snprintf(text, sizeof text, "no reason given");
    snprintf(why, sizeof why, "the service could not align a batch: %s", text);
    return lost(r, why);
  }
  /* The lines come first, as the aligner printed them before returning. */
  kio_log_defer(lines);
  int lrc = kio_rd_log_lines(&rd);
  kio_log_defer(NULL);
  if (lrc != KIO_OK) return lost(r, "malformed reply from the GPU service");
  for (int i = first; i < first + n; i++) {
    galign_result *res = &results[i];
    int32_t ok = kio_rd_i32(&rd), retried = kio_rd_i32(&rd), band_failed = kio_rd_i32(&rd);
    int32_t frames = kio_rd_i32(&rd);
    float like = kio_rd_f32(&rd), score = kio_rd_f32(&rd);
    size_t na = 0, npf = 0;
    const int32_t *ali = kio_rd_arr(&rd, sizeof(int32_t), (size_t)feats[i]->rows, &na);
    const float *pf = kio_rd_arr(&rd, sizeof(float), (size_t)feats[i]->rows, &npf);
    if (rd.bad || frames != feats[i]->rows || (ok && na != (size_t)frames) ||
        (ok && want_per_frame && npf != (size_t)frames))
      return lost(r, "malformed reply from the GPU service");
    res->ok = ok;
    res->retried = retried;
    res->band_failed = band_failed;
    res->num_frames = frames;
    res->like = like;
    res->score = score;
    if (na) {
      int32_t *a = realloc(res->ali, na * sizeof *a);
      if (!a) return lost(r, "out of memory");
      memcpy(a, ali, na * sizeof *a);
      res->ali = a;
    }
    if (npf) {
      float *p = realloc(res->per_frame, npf * sizeof *p);
      if (!p) return lost(r, "out of memory");
      memcpy(p, pf, npf * sizeof *p);
      res->per_frame = p;
    }
  }
  if (c == 0 && r->link && fused_record(r, p, &rd, feats, results) != KIO_OK)
    return lost(r, "out of memory");
  for (int i = first; i < first + n; i++) r->frames_c[c] += feats[i]->rows;
  return KIO_OK;
}

/* Splits utterances [from, to) of connection c into requests of about
 * r->req_bytes, none over KIO_SVC_MAX_REQUEST, appended to *parts: k even
 * parts, the first and the last of them halved (k + 1 requests), since
 * the first one's transfer and the last one's reply are what the service
 * cannot overlap with other work of the batch. KIO_OK, or
 * GALIGN_REMOTE_LOST (one utterance too large, out of memory). */
static int split_chunk(galign_remote *r, int c, int from, int to,
                       const galign_graph *const *graphs, const kio_matrix *const *feats,
                       batch_plan *pl) {
  req_part **parts = &pl->parts;
  int *nparts = &pl->nparts, *cap = &pl->cap;
  uint64_t total = 0;
  for (int i = from; i < to; i++) total += galign_pack_utt_bytes(graphs[i], feats[i]);
  uint64_t k = (total + r->req_bytes - 1) / r->req_bytes, done = 0, cum = 0;
  if (k < 1) k = 1;
  int i = from;
  while (i < to) {
    /* part done ends where the bytes so far pass (done + 1/2) / k of all
     * (k > 1), (done + 1) / k (one part) */
    uint64_t num = k > 1 ? 2 * done + 1 : 2, den = 2 * k;
    uint64_t bytes = 64, goal = num >= den ? total : total / den * num + total % den * num / den;
    int first = i;
    for (; i < to; i++) {
      uint64_t u = galign_pack_utt_bytes(graphs[i], feats[i]);
      if (i > first && (bytes + u > KIO_SVC_MAX_REQUEST || cum + u / 2 > goal)) break;
      bytes += u;
      cum += u;
    }
    if (bytes > KIO_SVC_MAX_REQUEST)
      return lost(r, "an utterance too large for a request to the GPU service");
    if (*nparts == *cap) {
      *cap = *cap ? 2 * *cap : 4 * MAX_CONN;
      req_part *np = realloc(*parts, (size_t)*cap * sizeof *np);
      if (!np) return lost(r, "out of memory");
      *parts = np;
    }
    (*parts)[(*nparts)++] = (req_part){first, i - first, c, 0, 0, NULL};
    done++;
  }
  return KIO_OK;
}

/* Plans the requests of a batch into pl: contiguous chunks of about equal
 * frames, one per connection (so the devices work together), each in
 * requests (split_chunk). KIO_OK or GALIGN_REMOTE_LOST. */
static int plan_batch(galign_remote *r, batch_plan *pl, int n, const galign_graph *const *graphs,
                      const kio_matrix *const *feats, int want_per_frame) {
  for (int i = 0; i < pl->nparts; i++) kio_log_discard(&pl->parts[i].lines);
  pl->nparts = 0;
  pl->n = n;
  pl->id = n > 0 ? (const void *)graphs[0] : NULL;
  pl->want_pf = want_per_frame;
  pl->failed = 0;
  pl->fail_c = 0;
  int k = r->nconn < n ? r->nconn : n;
  int start[MAX_CONN + 1];
  /* equal shares when fewer utterances than connections, or not balancing */
  galign_split_starts(feats, n, k == r->nconn && r->balance ? r->share : NULL, k, start);
  int rc = KIO_OK, c;
  for (c = 0; c < k && rc == KIO_OK; c++) {
    pl->beg[c] = pl->nparts;
    rc = split_chunk(r, c, start[c], start[c + 1], graphs, feats, pl);
  }
  pl->k = rc == KIO_OK ? k : 0;
  pl->beg[pl->k] = pl->nparts;
  for (c = 0; c < pl->k; c++) pl->sent[c] = pl->got[c] = pl->beg[c];
  pl->active = rc == KIO_OK;
  return rc;
}

/* Requests unanswered on connection c (both plans). */
static int unanswered(const galign_remote *r, int c) {
  int u = 0;
  if (r->cur.active && c < r->cur.k) u += r->cur.sent[c] - r->cur.got[c];
  if (r->ahead.active && c < r->ahead.k) u += r->ahead.sent[c] - r->ahead.got[c];
  return u;
}

/* Sends what the window allows of pl's requests on connection c (under
 * r->mu). KIO_OK, or KIO_ERR with the link's reason in why. */
static int send_some(galign_remote *r, batch_plan *pl, int c, const galign_graph *const *graphs,
                     const kio_matrix *const *feats, char *why, size_t why_len) {
  while (pl->sent[c] < pl->beg[c + 1] && unanswered(r, c) < r->inflight) {
    req_part *p = &pl->parts[pl->sent[c]];
    fused_flags(r, p, pl->sent[c] == pl->beg[c]);
    int rc = send_chunk(r, p, graphs, feats, pl->want_pf);
    pl->sent[c]++;
    if (rc != KIO_OK) {
      snprintf(why, why_len, "%s", kio_svc_error(r->svc[c]));
      return KIO_ERR;
    }
  }
  return KIO_OK;
}

/* 1 if the batch sent ahead is this one (the same utterances). */
static int is_ahead(const galign_remote *r, int n, const galign_graph *const *graphs,
                    const kio_matrix *const *feats, int want_per_frame) {
  const batch_plan *a = &r->ahead;
  return a->n == n && a->want_pf == want_per_frame &&
         !memcmp(a->graphs, graphs, (size_t)n * sizeof *graphs) &&
         !memcmp(a->feats, feats, (size_t)n * sizeof *feats);
}

/* 1 if all of the current batch's requests are out, on every connection. */
static int cur_all_sent(const galign_remote *r) {
  if (!r->cur.active) return 0;
  for (int c = 0; c < r->cur.k; c++)
    if (r->cur.sent[c] != r->cur.beg[c + 1]) return 0;
  return 1;
}

/* Sending ahead, on a thread of its own (the caller reads the next batch
 * meanwhile: the shared-memory copies and the transfer stay off its path).
 * Only behind a batch being aligned, once all of its requests are out on
 * every connection, so each connection's replies stay in order; not if
 * that batch ends first or the next galign_remote_align begins (abandon).
 * Each connection gets what its window allows (with several GPUs each one
 * goes from its part of batch k to its part of k+1 without waiting). */
static void *sender_main(void *arg) {
  galign_remote *r = arg;
  batch_plan *a = &r->ahead;
  pthread_mutex_lock(&r->mu);
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += 1;  /* a bound in case nobody signals */
  int ready = 0;
  while (!r->abandon && r->ended == r->send_ended &&
         !(ready = cur_all_sent(r)))
    if (pthread_cond_timedwait(&r->cv, &r->mu, &until) != 0) break;
  /* the batch being aligned may be this one (the call it was to follow
   * ended before it was asked for) */
  if (ready && !r->abandon && r->ended == r->send_ended && r->cur.id != (const void *)a->graphs[0] &&
      plan_batch(r, a, r->send_n, a->graphs, a->feats, r->send_pf) == KIO_OK) {
    r->nbatch++;
    r->nahead++;
    for (int c = 0; c < a->k && !a->failed; c++)
      if (send_some(r, a, c, a->graphs, a->feats, a->err, sizeof a->err) != KIO_OK) {
        a->failed = 1;
        a->fail_c = c;
      }
  } else {
    a->active = 0;
  }
  r->sender_done = 1;
  pthread_mutex_unlock(&r->mu);
  return NULL;
}

/* Ends the sending ahead (waits for a send in progress): all, or (a call
 * beginning) the one behind an earlier call, which sent this call's batch
 * or never will; one behind this call (the caller's next batch) goes on.
 * Not under mu. */
static void join_sender(galign_remote *r, int all) {
  pthread_mutex_lock(&r->mu);
  int mine = r->sender_started && (all || r->send_ended != r->ended);
  pthread_t t = r->sender;
  if (mine) {
    r->sender_started = 0;
    r->abandon = 1;
    pthread_cond_broadcast(&r->cv);
  }
  pthread_mutex_unlock(&r->mu);
  if (!mine) return;
  pthread_join(t, NULL);
  pthread_mutex_lock(&r->mu);
  r->abandon = 0;
  pthread_mutex_unlock(&r->mu);
}

void galign_remote_expect_more(galign_remote *r) {
  if (!r) return;
  pthread_mutex_lock(&r->mu);
  size_t least = r->req_bytes < SHM_LEAST ? (size_t)r->req_bytes : SHM_LEAST;
  for (int c = 0; c < r->nconn && !r->shm_off; c++) {
    /* the region the next request takes, sized as the last one; before
     * the first request, after it */
    if (r->shm_last[c])
      r->nwarm += galign_shm_warm(&r->shm[c][r->shm_next[c]], r->shm_last[c], least);
    else r->warm_pending[c] = 1;
  }
  pthread_mutex_unlock(&r->mu);
}

void galign_remote_send_ahead(galign_remote *r, int n, const galign_graph *const *graphs,
                              const kio_matrix *const *feats, int want_per_frame) {
  if (!r || n <= 0) return;
  pthread_mutex_lock(&r->mu);
  if (r->sender_started && r->sender_done) {  /* the last one's thread, done */
    pthread_t t = r->sender;
    r->sender_started = 0;
    pthread_mutex_unlock(&r->mu);
    pthread_join(t, NULL);
    pthread_mutex_lock(&r->mu);
  }
  batch_plan *a = &r->ahead;
  int ok = !r->sender_started && !a->active;
  if (ok) {  /* the lists copied: the caller's arrays may be rewritten */
    const galign_graph **g = realloc(a->graphs, (size_t)n * sizeof *g);
    if (g) a->graphs = g;
    const kio_matrix **f = realloc(a->feats, (size_t)n * sizeof *f);
    if (f) a->feats = f;
    ok = g && f;
  }
  if (ok) {
    memcpy(a->graphs, graphs, (size_t)n * sizeof *graphs);
    memcpy(a->feats, feats, (size_t)n * sizeof *feats);
    r->send_n = n;
    r->send_pf = want_per_frame;
    r->send_ended = r->ended;
    r->sender_done = 0;
    r->sender_started = pthread_create(&r->sender, NULL, sender_main, r) == 0;
  }
  pthread_mutex_unlock(&r->mu);
}

int galign_remote_align(galign_remote *r, int n, const galign_graph *const *graphs,
                        const kio_matrix *const *feats, int want_per_frame,
                        galign_result *results) {
  /* Each connection's requests, up to r->inflight of them unanswered: a
   * reply is read while the service works on the next request. Replies
   * come in the order of the requests. Their log lines are kept and logged
   * in input order once the whole batch is in (a batch the service loses
   * is aligned again here, with its own lines). */
  join_sender(r, 0);  /* this batch may have been sent ahead */
  pthread_mutex_lock(&r->mu);
  batch_plan *pl = &r->cur;
  int rc = KIO_OK;
  if (r->ahead.active) {
    if (!is_ahead(r, n, graphs, feats, want_per_frame)) {
      rc = lost(r, "another batch than the one sent ahead to the GPU service");
    } else {  /* the batch sent ahead becomes the current one */
      batch_plan t = r->cur;
      r->cur = r->ahead;
      r->ahead = t;
      r->ahead.active = 0;
      if (pl->failed) {
        char why[200];
        snprintf(why, sizeof why, "%s", pl->err);
        /* its answers before the failure say why, if the service failed */
        int fc = pl->fail_c;
        while (rc == KIO_OK && pl->got[fc] < pl->sent[fc] - 1) {
          pthread_mutex_unlock(&r->mu);
          rc = recv_chunk(r, &pl->parts[pl->got[fc]], feats, want_per_frame, results);
          pthread_mutex_lock(&r->mu);
          pl->got[fc]++;
        }
        if (rc == KIO_OK) rc = lost(r, why);
      }
    }
  } else {
    rc = plan_batch(r, pl, n, graphs, feats, want_per_frame);
    if (rc == KIO_OK) r->nbatch++;
  }
  int more = rc == KIO_OK;
  while (more && rc == KIO_OK) {
    more = 0;
    for (int c = 0; c < pl->k && rc == KIO_OK; c++) {
      char why[200];
      if (send_some(r, pl, c, graphs, feats, why, sizeof why) == KIO_OK) {
        if (pl->sent[c] == pl->beg[c + 1]) pthread_cond_broadcast(&r->cv);  /* may send ahead */
        continue;
      }
      /* a service that failed an earlier request and closed: its answer,
       * waiting here, says why */
      pthread_mutex_unlock(&r->mu);
      while (rc == KIO_OK && pl->got[c] < pl->sent[c] - 1)
        rc = recv_chunk(r, &pl->parts[pl->got[c]++], feats, want_per_frame, results);
      pthread_mutex_lock(&r->mu);
      if (rc == KIO_OK) rc = lost(r, why);
    }
    /* from first_rx on (galign_split_balance) */
    for (int j = 0; j < pl->k && rc == KIO_OK; j++) {
      int c = (j + r->first_rx) % pl->k;
      if (pl->got[c] == pl->sent[c]) continue;
      pthread_mutex_unlock(&r->mu);  /* the next batch may be sent meanwhile */
      if (r->late_s > 0 && pl->k > 1 && c == pl->k - 1) usleep((useconds_t)(r->late_s * 1e6));
      rc = recv_chunk(r, &pl->parts[pl->got[c]], feats, want_per_frame, results);
      pthread_mutex_lock(&r->mu);
      pl->got[c]++;
      if (pl->got[c] == pl->beg[c + 1]) pl->t_end[c] = kio_now_s();
      more = 1;
    }
  }
  double now = kio_now_s();
  /* the shares of the next batches (align-split.h); replies are read from
   * connection first_rx on, turning batch by batch */
  if (rc == KIO_OK && r->balance && pl->k > 1 && pl->k == r->nconn && r->t_prev_end > 0)
    galign_split_balance(r->share, pl->k, r->first_rx % pl->k, pl->t_end, now - r->t_prev_end);
  r->t_prev_end = now;
  r->first_rx = r->nconn > 0 ? (r->first_rx + 1) % r->nconn : 0;
  /* parts are in input order: connections' chunks in order, each in order */
  for (int i = 0; i < pl->nparts; i++) {
    if (rc == KIO_OK) kio_log_replay(&pl->parts[i].lines);
    else kio_log_discard(&pl->parts[i].lines);
  }
  pl->nparts = 0;
  pl->active = 0;
  r->ended++;
  pthread_cond_broadcast(&r->cv);
  pthread_mutex_unlock(&r->mu);
  return rc;
}
