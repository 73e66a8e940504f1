/* Accumulation through the GPU service (device/svc-link.h): the job's backend
 * of gacc_acc and the service's handler. The job checks every utterance
 * itself first (so fatal errors read exactly as on the other backends) and
 * keeps the per-utterance sums; the service keeps the statistics on its
 * device and runs the same accumulator code a local GPU run would.
 * Wire format:
 *   HELLO:       u32 protocol, u32 kind (acc), f32 the job's timeout, array
 *                model bytes
 *   ACC:         u32 n, u32 flags, u32 region, then per utterance str key,
 *                i32 rows, cols, the features (KIO_SVC_ACC_SHM: u64 their
 *                offset in the job's shared-memory region; else an array),
 *                array transition-ids. The regions (sealed memfds,
 *                GACC_REMOTE_REGIONS a connection, gpu-align/align-shm.h)
 *                are taken in turn, request k region k mod REGIONS; each
 *                comes with the first request that uses it (again when it
 *                grew), and the service is done with it once it answers
 *                the request. Batches of less than SHM_MIN bytes of
 *                features go inline.
 *   ACCUMULATED: i32 status, log lines, then (status KIO_OK) per utterance
 *                f32 like, i32 frames
 *   STATS / STATS_ARE: i32 status, log lines, arrays tacc, occ, mean_acc,
 *                var_acc, f64 total_like, total_frames
 * An asynchronous entry sends its batch and returns. gmm-acc-stats-ali's
 * entry (start-take) keeps up to two ACC requests unanswered
 * (KALDI_GPU_DEV_SERVICE_ACC_INFLIGHT): the next batch is copied into the
 * other region and sent while the service accumulates the one before, and
 * the pipeline collects the older (gacc_wait_first) after sending the
 * newer; the other entries collect a batch's reply before the next is
 * sent. A checkpoint's STATS goes between two requests without waiting:
 * its reply comes in order, covering the requests before it.
 *
 * A lost service (gone, silent for the timeout, or unable to do a batch)
 * must not cost the job its statistics, and the service's are lost with it:
 * which of the batches in flight it had added is unknowable. So the job
 * keeps a copy of every batch it sent since a checkpoint: the service's
 * statistics fetched (STATS) into the job's own (a->st) whenever the kept
 * batches pass a bound (max(128 MB, 4 x the statistics), so the
 * checkpoints cost little). On a loss the job goes on from the checkpoint
 * on its own GPU context or the CPU (as --use-gpu allows, as the aligner
 * does): it redoes the kept batches, in order, then the rest. The sums are
 * added in the same order as in an undisturbed run, so the statistics are
 * the same bits.
 *
 * The one pass (gacc_new_remote_fused): the batches go with the aligner's
 * own requests (align-remote.c, FUSE): the service accumulates each
 * request's aligned utterances from the features it already holds, after
 * answering it, while the job reads on. Each ALIGNED reply ends with the
 * outcome of the previous request's accumulation and, when asked for at the
 * first request of a batch, the statistics of everything before it (a
 * checkpoint at a batch boundary); the job's take entry matches its batch
 * with the aligner's records (the same utterances, in order), keeps it
 * (features taken, not copied) and reads those ends. FUSED-STATS at the end:
 * STATS on the aligner's connection, answered by STATS_ARE with the same
 * part.
 *   accumulation part: u32 has_done [u32 seq, i32 status, log lines, u32 n,
 *                n x (f32 like, i32 frames)], u32 stats (0 none, 1 here,
 *                2 failed) [arrays tacc, occ, mean_acc, var_acc, f64
 *                total_like, total_frames] */
#include <stdlib.h>
#include <string.h>

#include "device/svc-link.h"
#include "base/sys/settings.h"
#include "gpu-align/align-remote.h"
#include "gpu-align/align-shm.h"
#include "acc-internal.h"
#include "acc-remote-impl.h"
#include "acc-remote.h"


int gacc_new_remote(gacc_acc **out, const kio_tmodel *tm, const kio_am_gmm *am,
                    gacc_on_loss on_loss, char *why, size_t why_len) {
  *out = NULL;
  gacc_remote *r = calloc(1, sizeof *r);
  if (!r) { snprintf(why, why_len, "out of memory"); return KIO_ERR; }
  r->on_loss = on_loss;
  char *model = NULL;
  size_t len = 0;
  kio_log_deferred *quiet = NULL;
  kio_log_defer(&quiet);
  int rc = gacc_new(out, "cpu", tm, am);  /* the shape, the checks, the checkpoint */
  if (rc == KIO_OK) rc = kio_model_to_bytes(tm, am, &model, &len);
  kio_log_defer(NULL);
  kio_log_discard(&quiet);
  if (rc != KIO_OK) {
    snprintf(why, why_len, "cannot set up the model");
    goto fail;
  }
  r->keep_limit = gacc_keep_limit(&(*out)->st);
  for (int k = 0; k < GACC_REMOTE_REGIONS; k++) r->shm[k].fd = -1;
  r->inflight = (int)kio_setting_int(KIO_SET_DEV_SERVICE_ACC_INFLIGHT, GACC_REMOTE_INFLIGHT, 1,
                                     GACC_REMOTE_INFLIGHT);
  r->shm_min = SHM_MIN;
  const char *t = kio_test_hook(KIO_SET_TEST_SERVICE_SHM);
  if (t) r->shm_min = (size_t)strtoull(t, NULL, 10);
  r->shm_off = r->shm_min == 0;
  if (kio_svc_connect(&r->svc, 1, why, why_len) != KIO_OK) goto fail;
  kio_msg_put_u32(&r->msg, KIO_SVC_PROTOCOL);
  kio_msg_put_u32(&r->msg, KIO_SVC_KIND_ACC);
  kio_msg_put_f32(&r->msg, (float)kio_svc_timeout());  /* the heartbeats this job needs */
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
  for (int k = 0; k < GACC_REMOTE_REGIONS; k++) galign_shm_release(&r->shm[k]);
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
  if (r->nreq)
    KIO_VLOG(2, "Accumulating through the GPU service (%s): %d requests (%d with the features "
             "taken, not copied; up to %d in flight; %d checkpoints asked for behind a request "
             "in flight; %d region(s) faulted in ahead); waiting for replies %.3f s, keeping "
             "the batches %.3f s, shared memory copies %.3f s", r->desc, r->nreq, r->ntaken,
             r->most, r->nstats_ahead, r->nwarm, r->t_wait, r->t_keep, r->t_fill);
  if (r->link) {  /* the aligner's requests no longer ask for accumulation */
    pthread_mutex_lock(&r->link->mu);
    r->link->on = 0;
    pthread_mutex_unlock(&r->link->mu);
    galign_acc_link_put(r->link);
  }
  kio_svc_close(r->svc);
  for (int k = 0; k < GACC_REMOTE_REGIONS; k++) galign_shm_release(&r->shm[k]);
  kio_msg_free(&r->msg);
  gacc_kept_free_all(r);
  for (int i = 0; i < r->nspare; i++) kio_matrix_free(&r->spare[i]);
  free(r->spare);
  free(r);
  a->remote = NULL;
}

/* The text of a failed reply's lines, for the LOG line of the loss. */
static int lost_batch(gacc_acc *a, kio_msg_reader *rd, const char *what) {
  char text[160], why[220];
  if (kio_rd_log_text(rd, text, sizeof text) != KIO_OK || !text[0])
    snprintf(text, sizeof text, "no reason given");
  snprintf(why, sizeof why, "the service could not %s: %s", what, text);
  return gacc_remote_fall_back(a, why);
}

static int fused_wait(gacc_acc *a);
static int read_stats(gacc_acc *a, kio_msg_reader *rd);

/* The reply awaited first is read: KIO_OK, or the service given up
 * (gacc_remote_fall_back's status; a->remote is then NULL). */
/* The start of every reply: received (the wait timed), its status, its
 * log lines held in *lines with *lrc their reading status; 0. Or the
 * service given up (what: what it could not do): 1, with *rc the
 * fall-back's status, the collection's result. */
static int recv_reply(gacc_acc *a, uint32_t type, const char *what, kio_msg_reader *rd,
                      kio_log_deferred **lines, int *lrc, int *rc) {
  gacc_remote *r = a->remote;
  double t0 = kio_now_s();
  int got = kio_svc_recv(r->svc, type, NULL, rd);
  r->t_wait += kio_now_s() - t0;
  if (got != KIO_OK) {
    *rc = gacc_remote_fall_back(a, kio_svc_error(r->svc));
    return 1;
  }
  if (kio_rd_i32(rd) != KIO_OK) {
    *rc = lost_batch(a, rd, what);
    return 1;
  }
  *lines = NULL;
  kio_log_defer(lines);
  *lrc = kio_rd_log_lines(rd);
  kio_log_defer(NULL);
  return 0;
}

static int collect_acc(gacc_acc *a, kept *k) {
  gacc_remote *r = a->remote;
  int n = k->n;
  kio_msg_reader rd;
  kio_log_deferred *lines;
  int lrc, rc;
  if (recv_reply(a, KIO_SVC_ACCUMULATED, "accumulate a batch", &rd, &lines, &lrc, &rc)) return rc;
  gacc_utt_result *u = malloc((size_t)(n > 0 ? n : 1) * sizeof *u);
  for (int i = 0; i < n && u; i++) {
    u[i].like = kio_rd_f32(&rd);
    u[i].frames = kio_rd_i32(&rd);
  }
  if (lrc != KIO_OK || rd.bad || !u) {
    kio_log_discard(&lines);
    free(u);
    return gacc_remote_fall_back(a, u ? "malformed reply from the GPU service" : "out of memory");
  }
  kio_log_replay(&lines);
  for (int i = 0; i < n; i++) {
    if (k->res) k->res[i] = u[i];
    a->like_sum += (double)u[i].like;
    a->frames_sum += u[i].frames;
  }
  free(u);
  k->pending = 0;
  k->res = NULL;
  r->nacc--;
  return KIO_OK;
}

/* A STATS reply: the service's statistics of the ACC requests before it
 * (seq of them, all collected) into a->st, a checkpoint: their kept
 * batches are no longer needed. */
static int collect_stats(gacc_acc *a, uint32_t seq) {
  gacc_remote *r = a->remote;
  kio_msg_reader rd;
  kio_log_deferred *lines;
  int lrc, rc;
  if (recv_reply(a, KIO_SVC_STATS_ARE, "return the statistics", &rd, &lines, &lrc, &rc)) return rc;
  if (lrc != KIO_OK || read_stats(a, &rd) != KIO_OK) {
    kio_log_discard(&lines);
    return gacc_remote_fall_back(a, "malformed reply from the GPU service");
  }
  kio_log_replay(&lines);
  r->ck_like = a->like_sum;
  r->ck_frames = a->frames_sum;
  while (r->kept_first && !r->kept_first->pending && r->kept_first->seq_first < seq) {
    kept *k = r->kept_first;
    r->kept_first = k->next;
    r->kept_bytes -= k->bytes;
    gacc_kept_drop(r, k);
  }
  if (!r->kept_first) r->kept_last = NULL;
  r->stats_asked = 0;
  return KIO_OK;
}

/* Reads the reply awaited first (the queue's head leaves it once read). */
static int collect_one(gacc_acc *a) {
  gacc_remote *r = a->remote;
  kept *k = r->q[r->qhead].k;
  uint32_t seq = r->q[r->qhead].seq;
  int rc = k ? collect_acc(a, k) : collect_stats(a, seq);
  if (rc == KIO_OK && a->remote) {
    r->qhead = (r->qhead + 1) % ACC_QUEUE;
    r->qn--;
  }
  return rc;
}

/* Collects every reply awaited. */
int gacc_remote_wait(gacc_acc *a) {
  gacc_remote *r = a->remote;
  if (r->link) return fused_wait(a);
  r->in_wait_all = 1;
  int rc = KIO_OK;
  while (rc == KIO_OK && a->remote && r->qn > 0) rc = collect_one(a);
  if (a->remote) r->in_wait_all = 0;
  return rc;
}

int gacc_remote_wait_first(gacc_acc *a) {
  gacc_remote *r = a->remote;
  if (r->link) return fused_wait(a);
  r->in_wait_first = 1;
  int rc = KIO_OK;
  while (rc == KIO_OK && a->remote && r->nacc > 0) {
    int acc = r->q[r->qhead].k != NULL;
    rc = collect_one(a);
    if (acc) break;
  }
  if (a->remote) r->in_wait_first = 0;
  return rc;
}

int gacc_remote_inflight(const gacc_acc *a) {
  return a->remote && !a->remote->link ? a->remote->inflight : 1;
}

/* The statistics of a reply (arrays, totals) into a->st. KIO_ERR if
 * malformed (a->st untouched). */
static int read_stats(gacc_acc *a, kio_msg_reader *rd) {
  gacc_stats *out = &a->st;
  size_t gd = (size_t)out->num_gauss * (size_t)out->dim, n1, n2, n3, n4;
  const double *tacc = kio_rd_arr(rd, sizeof(double), (size_t)out->num_tids + 1, &n1);
  const double *occ = kio_rd_arr(rd, sizeof(double), (size_t)out->num_gauss, &n2);
  const double *mean = kio_rd_arr(rd, sizeof(double), gd, &n3);
  const double *var = kio_rd_arr(rd, sizeof(double), gd, &n4);
  double total_like = kio_rd_f64(rd), total_frames = kio_rd_f64(rd);
  if (rd->bad || n1 != (size_t)out->num_tids + 1 || n2 != (size_t)out->num_gauss ||
      n3 != gd || n4 != gd)
    return KIO_ERR;
  out->total_like = total_like;
  out->total_frames = total_frames;
  memcpy(out->tacc, tacc, n1 * sizeof(double));
  memcpy(out->occ, occ, n2 * sizeof(double));
  memcpy(out->mean_acc, mean, n3 * sizeof(double));
  memcpy(out->var_acc, var, n4 * sizeof(double));
  return KIO_OK;
}

/* Asks for the service's statistics of the ACC requests sent so far (a
 * checkpoint), read in turn with the replies (collect_stats). */
static int ask_stats(gacc_acc *a) {
  gacc_remote *r = a->remote;
  kio_msg_reset(&r->msg);
  if (kio_svc_send(r->svc, KIO_SVC_STATS, &r->msg) != KIO_OK)
    return gacc_remote_fall_back(a, kio_svc_error(r->svc));
  int tail = (r->qhead + r->qn) % ACC_QUEUE;
  r->q[tail].k = NULL;
  r->q[tail].seq = r->nsent;
  r->qn++;
  r->stats_asked = 1;
  if (r->nacc > 0) r->nstats_ahead++;
  return KIO_OK;
}

/* ---------------- the one pass (fused) ---------------- */

int gacc_new_remote_fused(gacc_acc **out, const galign_aligner *al, const kio_tmodel *tm,
                          const kio_am_gmm *am, gacc_on_loss on_loss, char *why,
                          size_t why_len) {
  *out = NULL;
  galign_remote *gr = galign_aligner_remote(al);
  if (!gr || galign_remote_nconn(gr) != 1) {
    snprintf(why, why_len, "the aligner is not on one connection to the GPU service");
    return KIO_ERR;
  }
  gacc_remote *r = calloc(1, sizeof *r);
  galign_acc_link *l = r ? galign_acc_link_new() : NULL;
  if (!l) {
    free(r);
    snprintf(why, why_len, "out of memory");
    return KIO_ERR;
  }
  r->on_loss = on_loss;
  r->al = al;
  kio_log_deferred *quiet = NULL;
  kio_log_defer(&quiet);
  int rc = gacc_new(out, "cpu", tm, am);  /* the shape, the checks, the checkpoint */
  kio_log_defer(NULL);
  kio_log_discard(&quiet);
  if (rc != KIO_OK) snprintf(why, why_len, "cannot set up the model");
  else rc = galign_remote_fuse(gr, l, why, why_len);
  if (rc != KIO_OK) {
    galign_acc_link_put(l);
    free(r);
    gacc_free(*out);
    *out = NULL;
    return KIO_ERR;
  }
  r->link = l;
  r->keep_limit = gacc_keep_limit(&(*out)->st);
  snprintf(r->desc, sizeof r->desc, "%s", galign_remote_desc(gr));
  (*out)->remote = r;
  (*out)->is_gpu = 1;
  return KIO_OK;
}

/* The accumulation part of a reply (request seq, or the final STATS): the
 * outcome of an accumulation into the sums, the statistics as a
 * checkpoint (everything before request seq; final: everything). */
static int apply_tail(gacc_acc *a, const uint8_t *p, size_t len, uint32_t seq, int final) {
  gacc_remote *r = a->remote;
  kio_msg_reader rd = {p, len, 0, 0};
  if (kio_rd_u32(&rd)) {
    kio_rd_u32(&rd);  /* the request it was (they come in order) */
    int32_t status = kio_rd_i32(&rd);
    if (!rd.bad && status != KIO_OK) return lost_batch(a, &rd, "accumulate a batch");
    kio_log_deferred *lines = NULL;
    kio_log_defer(&lines);
    int lrc = kio_rd_log_lines(&rd);
    kio_log_defer(NULL);
    /* the same additions in the same order as utterance by utterance (a
     * malformed part gives up the service: the sums go back to the
     * checkpoint's) */
    uint32_t n = kio_rd_u32(&rd);
    for (uint32_t i = 0; i < n && !rd.bad; i++) {
      a->like_sum += (double)kio_rd_f32(&rd);
      a->frames_sum += kio_rd_i32(&rd);
    }
    if (lrc != KIO_OK || rd.bad) {
      kio_log_discard(&lines);
      return gacc_remote_fall_back(a, "malformed reply from the GPU service");
    }
    kio_log_replay(&lines);
  }
  uint32_t st = kio_rd_u32(&rd);
  if (rd.bad || st > 2) return gacc_remote_fall_back(a, "malformed reply from the GPU service");
  if (st == 2) return gacc_remote_fall_back(a, "the service could not return the statistics");
  if (st == 1) {
    if (read_stats(a, &rd) != KIO_OK)
      return gacc_remote_fall_back(a, "malformed reply from the GPU service");
    r->ck_like = a->like_sum;
    r->ck_frames = a->frames_sum;
    while (r->kept_first && (final || r->kept_first->seq_first < seq)) {
      kept *k = r->kept_first;
      r->kept_first = k->next;
      r->kept_bytes -= k->bytes;
      gacc_kept_drop(r, k);
    }
    if (!r->kept_first) r->kept_last = NULL;
  }
  return KIO_OK;
}

/* The take entry of a fused accumulator: the aligner's records must be
 * these utterances in order (the service accumulated them); the batch is
 * kept, and the records' ends read. Anything else: the service is given
 * up, the job goes on from its last statistics. */
static int fused_take(gacc_acc *a, int n, const gacc_utt *utts, kio_matrix *const *feats) {
  gacc_remote *r = a->remote;
  for (int i = 0; i < n; i++)
    if (gacc_check_utt(a, &utts[i]) != KIO_OK) return KIO_ERR;
  galign_acc_rec *recs = NULL, **end = &recs;
  int pos = 0, match = 1;
  uint32_t first_seq = 0;
  while (pos < n && match) {
    galign_acc_rec *x = galign_acc_link_pop(r->link);
    if (!x) { match = 0; break; }
    *end = x;
    end = &x->next;
    if (x->n == 0) continue;  /* a request with nothing aligned */
    if (x->n > n - pos) match = 0;
    for (int j = 0; j < x->n && match; j++)
      if (x->feats[j] != utts[pos + j].feats) match = 0;
    if (!first_seq) first_seq = x->seq;
    pos += x->n;
  }
  kept *k = gacc_keep_batch(r, n, utts, feats);
  int rc = KIO_OK;
  if (k) k->seq_first = first_seq;
  if (!k) {
    rc = gacc_remote_fall_back(a, "out of memory keeping a batch");
    if (rc == KIO_OK) rc = gacc_accumulate_batch_take(a, n, utts, feats);
  } else if (!match) {
    rc = gacc_remote_fall_back(a, "the aligner lost the GPU service");  /* redoes this batch too */
  }
  for (galign_acc_rec *x = recs, *next; x; x = next) {
    next = x->next;
    if (rc == KIO_OK && a->remote) rc = apply_tail(a, x->tail, x->tail_len, x->seq, 0);
    galign_acc_rec_free(x);
  }
  if (rc == KIO_OK && a->remote && r->kept_bytes >= r->keep_limit) {
    pthread_mutex_lock(&r->link->mu);
    r->link->want_stats = 1;
    pthread_mutex_unlock(&r->link->mu);
  }
  return rc;
}

/* The end of a fused accumulator's batches (the aligner idle): the ends
 * of requests no batch took, then STATS on the aligner's connection. */
static int fused_wait(gacc_acc *a) {
  gacc_remote *r = a->remote;
  galign_acc_rec *x;
  while ((x = galign_acc_link_pop(r->link))) {
    int rc = x->n > 0 ? gacc_remote_fall_back(a, "the aligner's batches are not the accumulator's")
                      : apply_tail(a, x->tail, x->tail_len, x->seq, 0);
    galign_acc_rec_free(x);
    if (rc != KIO_OK || !a->remote) return rc;  /* the rest went with the link */
  }
  galign_remote *gr = galign_aligner_remote(r->al);
  if (!gr) return gacc_remote_fall_back(a, "the aligner lost the GPU service");
  kio_svc *s = galign_remote_svc(gr);
  kio_msg_reader rd;
  kio_msg_reset(&r->msg);
  if (kio_svc_send(s, KIO_SVC_STATS, &r->msg) != KIO_OK ||
      kio_svc_recv(s, KIO_SVC_STATS_ARE, NULL, &rd) != KIO_OK)
    return gacc_remote_fall_back(a, kio_svc_error(s));
  return apply_tail(a, rd.p, rd.len, 0, 1);
}

static int send_all(gacc_acc *a, int n, const gacc_utt *utts, kio_matrix *const *feats,
                    gacc_utt_result *res, int entry, int depth);

/* The take entry: on a connection of its own the batch is kept with the
 * features taken (no copy of them on the caller's thread), as a fused
 * accumulator keeps it. */
int gacc_remote_take(gacc_acc *a, int n, const gacc_utt *utts, kio_matrix *const *feats) {
  if (!a->remote->link)
    return n <= 0 ? gacc_remote_wait(a) : send_all(a, n, utts, feats, NULL, 2, 1);
  if (n <= 0) return KIO_OK;
  return fused_take(a, n, utts, feats);
}

enum { GONE = 2 };  /* send_batch: the service was lost before the batch went */

/* The kept batch's features copied into the shared-memory region g: their
 * offsets (64-byte aligned), or NULL: they go inline (a small batch, no
 * memfd here, or no memory). The service is done with the region: the
 * request that used it before was answered. */
static size_t *shm_fill(gacc_remote *r, galign_shm *g, int n, const kept *k) {
  size_t bytes = 0;
  for (int i = 0; i < n; i++)
    bytes += ((size_t)k->mats[i].rows * (size_t)k->mats[i].cols * sizeof(float) + 63) / 64 * 64;
  if (r->shm_off || n <= 0 || bytes < r->shm_min || bytes > SHM_MAX) return NULL;
  if (galign_shm_reserve(g, bytes, bytes < SHM_LEAST ? bytes : SHM_LEAST) != KIO_OK) {
    r->shm_off = 1;
    return NULL;
  }
  size_t *offs = malloc((size_t)n * sizeof *offs);
  const kio_matrix **ptr = malloc((size_t)n * sizeof *ptr);
  if (!offs || !ptr) {
    free(offs);
    free(ptr);
    return NULL;
  }
  size_t o = 0;
  for (int i = 0; i < n; i++) {
    offs[i] = o;
    ptr[i] = &k->mats[i];
    o += ((size_t)k->mats[i].rows * (size_t)k->mats[i].cols * sizeof(float) + 63) / 64 * 64;
  }
  int rc = galign_shm_fill(g->map, ptr, offs, n, bytes);
  free(ptr);
  if (rc != KIO_OK) {  /* inline */
    free(offs);
    return NULL;
  }
  r->shm_last = bytes;
  return offs;
}

/* Sends a batch (checked first, kept: its features taken from feats, or
 * copied when feats is NULL) once fewer than depth ACC requests are
 * unanswered; its results go to res when collected. GONE: the service was
 * lost before (the job goes on by itself already): the caller's entry does
 * the batch on the new backend. */
static int send_batch(gacc_acc *a, int n, const gacc_utt *utts, kio_matrix *const *feats,
                      gacc_utt_result *res, int depth) {
  gacc_remote *r = a->remote;
  while (r->nacc >= depth) {  /* also frees the region this request takes */
    if (collect_one(a) != KIO_OK) return KIO_ERR;
    if (!a->remote) return GONE;
  }
  for (int i = 0; i < n; i++)
    if (gacc_check_utt(a, &utts[i]) != KIO_OK) return KIO_ERR;
  if (r->kept_first && r->kept_bytes >= r->keep_limit && !r->stats_asked) {
    if (ask_stats(a) != KIO_OK) return KIO_ERR;
    if (!a->remote) return GONE;
  }
  double t0 = kio_now_s();
  kept *k = gacc_keep_batch(r, n, utts, feats);
  r->t_keep += kio_now_s() - t0;
  if (!k)
    return gacc_remote_fall_back(a, "out of memory keeping a batch") == KIO_OK ? GONE : KIO_ERR;
  r->ntaken += k->owns;
  const uint32_t region = r->nsent % GACC_REMOTE_REGIONS;
  galign_shm *g = &r->shm[region];
  t0 = kio_now_s();
  size_t *offs = shm_fill(r, g, n, k);
  r->t_fill += kio_now_s() - t0;
  r->nreq++;
  kio_msg *m = &r->msg;
  kio_msg_reset(m);
  kio_msg_put_u32(m, (uint32_t)n);
  kio_msg_put_u32(m, offs ? KIO_SVC_ACC_SHM : 0);
  kio_msg_put_u32(m, region);
  for (int i = 0; i < n; i++) {
    const kio_matrix *f = k->utts[i].feats;
    kio_msg_put_str(m, k->utts[i].key);
    kio_msg_put_i32(m, f->rows);
    kio_msg_put_i32(m, f->cols);
    if (offs) kio_msg_put_u64(m, offs[i]);
    else kio_msg_put_ref(m, f->data, (size_t)f->rows * (size_t)f->cols, sizeof(float));
    kio_msg_put_ref(m, k->utts[i].ali, (size_t)f->rows, sizeof(int32_t));
  }
  const int shm = offs != NULL;
  free(offs);
  int fd = -1;  /* a region goes with its first request (again when it grew) */
  if (shm && !g->sent) fd = g->fd;
  if (shm) g->sent = 1;
  /* in flight from here: a loss redoes it, its results into res */
  k->pending = 1;
  k->res = res;
  k->seq_first = r->nsent++;
  int tail = (r->qhead + r->qn) % ACC_QUEUE;
  r->q[tail].k = k;
  r->q[tail].seq = k->seq_first;
  r->qn++;
  if (++r->nacc > r->most) r->most = r->nacc;
  if ((fd >= 0 ? kio_svc_send_fd(r->svc, KIO_SVC_ACC, m, fd)
               : kio_svc_send(r->svc, KIO_SVC_ACC, m)) != KIO_OK)
    return gacc_remote_fall_back(a, kio_svc_error(r->svc));
  /* the next region, not made yet, faulted in while the job reads on (a
   * fresh page costs its first write ~10x a copy), sized as this request */
  galign_shm *next = &r->shm[r->nsent % GACC_REMOTE_REGIONS];
  const size_t least = r->shm_last < SHM_LEAST ? r->shm_last : SHM_LEAST;
  if (shm && r->inflight > 1 && !next->map) r->nwarm += galign_shm_warm(next, r->shm_last, least);
  return KIO_OK;
}

/* Utterances [first, end) that fit one request (KIO_SVC_MAX_REQUEST): at
 * least one. */
static int request_end(int first, int n, const gacc_utt *utts) {
  uint64_t bytes = 64;
  int i = first;
  for (; i < n; i++) {
    const kio_matrix *f = utts[i].feats;
    uint64_t u = 64 + strlen(utts[i].key) + 4 * (uint64_t)f->rows * ((uint64_t)f->cols + 1);
    if (i > first && bytes + u > KIO_SVC_MAX_REQUEST) break;
    bytes += u;
  }
  return i;
}

/* A batch in requests the service accepts; the last one stays in flight.
 * entry: which entry of the accumulator a lost service hands the rest to
 * (0 batch, 1 start, 2 async: take when feats is given). With feats the
 * features are taken as each request is kept (start and async). depth:
 * ACC requests that may be unanswered once a request is sent (the
 * pipeline's start-take entry: r->inflight; the others 1: the batch before
 * is collected first). */
static int send_all(gacc_acc *a, int n, const gacc_utt *utts, kio_matrix *const *feats,
                    gacc_utt_result *res, int entry, int depth) {
  if (a->remote->link) {  /* only the take entry goes with the aligner's requests */
    if (entry == 2) return fused_take(a, n, utts, NULL);
    if (gacc_remote_fall_back(a, "a batch that was not aligned through the service") != KIO_OK)
      return KIO_ERR;
    return gacc_accumulate_batch(a, n, utts, res);
  }
  for (int first = 0; first < n;) {
    int end = request_end(first, n, utts), m = end - first;
    gacc_utt_result *r = res ? res + first : NULL;
    int rc = a->remote ? send_batch(a, m, utts + first, feats ? feats + first : NULL, r, depth)
                       : GONE;
    if (rc == GONE) {
      if (entry == 2 && feats)
        return gacc_accumulate_batch_take(a, n - first, utts + first, feats + first);
      rc = entry == 2 ? gacc_accumulate_batch_async(a, n - first, utts + first)
                      : gacc_accumulate_batch(a, n - first, utts + first, r);
      return rc;
    }
    if (rc != KIO_OK) return KIO_ERR;
    first = end;
  }
  return entry == 0 && a->remote ? gacc_remote_wait(a) : KIO_OK;
}

int gacc_remote_batch(gacc_acc *a, int n, const gacc_utt *utts, gacc_utt_result *res) {
  if (n <= 0) return KIO_OK;
  return send_all(a, n, utts, NULL, res, 0, 1);
}

int gacc_remote_start(gacc_acc *a, int n, const gacc_utt *utts, gacc_utt_result *res) {
  if (n <= 0) return gacc_remote_wait(a);
  return send_all(a, n, utts, NULL, res, 1, 1);
}

int gacc_remote_start_take(gacc_acc *a, int n, const gacc_utt *utts, kio_matrix *const *feats,
                           gacc_utt_result *res) {
  if (n <= 0) return gacc_remote_wait(a);
  return send_all(a, n, utts, feats, res, 1, a->remote->link ? 1 : a->remote->inflight);
}

int gacc_remote_async(gacc_acc *a, int n, const gacc_utt *utts) {
  if (n <= 0) return gacc_remote_wait(a);
  return send_all(a, n, utts, NULL, NULL, 2, 1);
}

int gacc_remote_stats(gacc_acc *a, gacc_stats *out) {
  if (gacc_remote_wait(a) != KIO_OK) return KIO_ERR;
  if (a->remote && !a->remote->link) {  /* the last checkpoint: everything */
    if (ask_stats(a) != KIO_OK) return KIO_ERR;
    if (a->remote && gacc_remote_wait(a) != KIO_OK) return KIO_ERR;
  }
  if (!a->remote) return gacc_get_stats(a, out);  /* lost: ours */
  /* the checkpoint brought the service's statistics into a->st */
  const gacc_stats *s = &a->st;
  size_t gd = (size_t)s->num_gauss * (size_t)s->dim;
  memcpy(out->tacc, s->tacc, sizeof(double) * ((size_t)s->num_tids + 1));
  memcpy(out->occ, s->occ, sizeof(double) * (size_t)s->num_gauss);
  memcpy(out->mean_acc, s->mean_acc, sizeof(double) * gd);
  memcpy(out->var_acc, s->var_acc, sizeof(double) * gd);
  out->total_like = s->total_like;
  out->total_frames = s->total_frames;
  return KIO_OK;
}
