/* The GPU service's loop, connections, model cache and pools (see
 * gpu-service.h).
 *
 * Lifecycle: every wait has a bound. A job must send its HELLO, and the
 * rest of any message it starts, within the stall time
 * (KALDI_GPU_SERVICE_TIMEOUT); between requests a job may think as long as
 * it likes, but a connection without traffic does not keep the service up
 * past its idle time. While a request is worked on, a ticker thread sends
 * the job a heartbeat every second, so the job can tell a long batch from a
 * stopped service. SIGTERM/SIGINT, the idle exit and a broken device
 * context end the service promptly: the socket goes first (the next job
 * starts a fresh service), connections without work in flight are closed
 * at once (their jobs go on by themselves), work in flight gets a few
 * seconds to finish. A context with a sticky error (kernel fault, ECC) is
 * found after a failed batch or before a connection is served; the
 * process then restarts this way, since only a new process gets a working
 * context. */
#include "gpu-service.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "device/cuda-util.h"
#include "gpu-service/admission.h"
#include "gpu-service/svc-acc.h"
#include "gpu-service/svc-align.h"
#include "gpu-service/svc-fused.h"
#include "gpu-service/svc-models.h"
#include "gpu-service/svc-reader.h"
#include "base/sys/log.h"
#include "device/svc-link.h"
#include "gpu-acc/acc-remote.h"
#include "gpu-acc/gpu-acc.h"
#include "gpu-align/align-remote.h"
#include "gpu-align/gpu-align.h"
#include "base/sys/settings.h"

typedef gsvc_model model_entry;

enum { MAX_DEV = 16 };

/* A connection, registered while its thread runs. */
typedef struct conn {
  struct conn *next;
  kio_svc *s;
  _Atomic int busy;      /* requests received and not yet answered: heartbeats
                            go out */
  double beat;           /* seconds between heartbeats: a quarter of the job's
                            timeout, at most 1 */
  _Atomic unsigned answers;  /* replies sent; the ticker's last look at them: */
  unsigned seen_answers;     /* the count and when it changed (-1: stuck) */
  double seen_at;
} conn;

static struct {
  pthread_mutex_t mu;
  conn *conns;
  int active;            /* connections being served */
  int ndev;              /* devices served (CUDA ordinals in dev_id) */
  int dev_id[MAX_DEV];
  char dev_desc[MAX_DEV][200];
  double last_activity;
  int use_cpu;
  int drop_after;        /* tests: close each connection after this many batches */
  int verbose;           /* a LOG line per connection with its times */
  int device_ok;
  char desc[200];        /* the device, or why it is not usable */
  double stall_s;        /* a job's silence allowed inside a message */
  double stuck_s;        /* a busy connection's silence before its heartbeats stop */
  _Atomic int broken;    /* a device context broke: restart */
  char broken_why[240];
  int batches;           /* tests: batches begun, all connections */
  int break_after, stop_after;
  double slow_s;
  volatile sig_atomic_t stop;
} g = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void sleep_s(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  nanosleep(&ts, NULL);
}

/* The device context broke (sticky error): stop serving, so the next job
 * starts a fresh service. */
static void mark_broken(const char *why) {
  pthread_mutex_lock(&g.mu);
  if (!g.broken) {
    snprintf(g.broken_why, sizeof g.broken_why, "%s", why);
    g.broken = 1;
  }
  pthread_mutex_unlock(&g.mu);
}

/* After a batch failed on device d's context (or before a connection is
 * served there): does the context still work? */
static void check_device(void) {
  char why[200];
  if (!g.use_cpu && kio_cuda_context_broken(why, sizeof why)) mark_broken(why);
}

void gsvc_cuda_break_context(void);  /* fault-cuda.cu */

/* Test faults, before each batch (tests/cli/service.sh): the whole service
 * stops (SIGSTOP) or is slow, or its device context breaks. 1: the batch
 * must fail as on a broken context. */
static int test_faults(void) {
  pthread_mutex_lock(&g.mu);
  int n = ++g.batches;
  pthread_mutex_unlock(&g.mu);
  if (g.stop_after && n == g.stop_after + 1) raise(SIGSTOP);
  if (g.slow_s > 0) sleep_s(g.slow_s);
  if (g.break_after && n > g.break_after) {
    if (!g.use_cpu) {  /* a GPU: break its context for real, the batch runs into it */
      gsvc_cuda_break_context();
      return 0;
    }
    mark_broken("the device context is broken (test hook KALDI_GPU_TEST_SERVICE_BREAK)");
    return 1;
  }
  return 0;
}

/* The reply to a request the service could not do: a status other than
 * KIO_OK and the reason as a log line (the job logs it in its own LOG line
 * and does the work itself). */
static void failed_reply(kio_msg *m, const char *why) {
  kio_log_deferred *lines = NULL;
  kio_log_defer(&lines);
  KIO_LOG("%s", why);
  kio_log_defer(NULL);
  kio_msg_reset(m);
  kio_msg_put_i32(m, KIO_ERR);
  kio_msg_put_lines(m, lines);
  kio_log_discard(&lines);
}

static void on_signal(int sig) {
  (void)sig;
  g.stop = 1;
}

/* ---------------- models and pools ---------------- */

/* Frees models, aligners and accumulators unused for idle_s (negative:
 * all). */
static void evict(double idle_s) {
  int n = gsvc_align_shed(-1, idle_s);
  if (n && g.verbose) KIO_LOG("%d idle aligner(s) freed", n);
  n = gsvc_acc_shed(-1, idle_s);
  if (n && g.verbose) KIO_LOG("%d idle accumulator(s) freed", n);
  gsvc_model_evict(idle_s);
}

/* ---------------- one connection ---------------- */

static int send_ready(kio_svc *s, kio_msg *m, int status, const char *desc) {
  kio_msg_reset(m);
  kio_msg_put_i32(m, status);
  kio_msg_put_str(m, desc);
  return kio_svc_send(s, KIO_SVC_READY, m);
}

static int reply(conn *c, uint32_t type, kio_msg *m) {
  int rc = kio_svc_send(c->s, type, m);
  c->answers++;
  if (c->busy > 0) c->busy--;
  return rc;
}

/* The reader's question before each receive: read no more? */
static int reading_stops(void) { return g.broken || g.stop; }

/* The accumulation of a fused connection's request ends (svc-fused.c); a
 * failed one: is the device still well? */
static void fused_end(gsvc_fused *f, int d) {
  if (gsvc_fused_end(f, d) != KIO_OK) check_device();
}

/* The alignment requests of a connection, until it closes. */
static void serve_align(conn *c, kio_msg *m, model_entry *e, const galign_opts *o, int d) {
  kio_svc *s = c->s;
  char why[200] = "";
  double t_new = kio_now_s();
  int kind = GSVC_ALIGN_NEW;
  galign_aligner *a = gsvc_align_get(d, e->id, &e->tm, &e->am, o, g.use_cpu, &kind, why);
  t_new = kio_now_s() - t_new;
  if (!a) {
    check_device();
    send_ready(s, m, KIO_ERR, why);
    return;
  }
  galign_aligner_stats st0;
  galign_aligner_get_stats(a, &st0);
  int64_t pl_alloc0, pl_free0;
  double pl_alloc_s0, pl_free_s0;
  kio_cuda_host_stats(&pl_alloc0, &pl_alloc_s0, &pl_free0, &pl_free_s0);
  galign_serve *sv = galign_serve_new();
  int ok = sv && send_ready(s, m, KIO_OK, g.dev_desc[d]) == KIO_OK;
  c->busy = 0;
  if (!ok) {
    galign_serve_free(sv);
    gsvc_align_end(d, e->id, o, a, 0, 0);
    return;
  }
  kio_svc_set_timeouts(s, -1, g.stall_s);
  kio_svc_set_limit(s, KIO_SVC_MAX_REQUEST);
  /* Requests are read ahead (the job keeps several in flight), two parsed
   * requests alternate: the accumulation of one reads its features and
   * alignments while the next is aligned. */
  galign_serve *sv2 = galign_serve_new_sharing(sv);
  gsvc_reader *rdr = sv2 ? gsvc_reader_start(s, &c->busy, reading_stops) : NULL;
  if (!rdr) KIO_WARN("Cannot start a connection's reader: out of memory or threads");
  galign_serve *svs[2] = {sv, sv2};
  int cur = 0;
  gsvc_fused f = {0};
  gsvc_request *q;
  int served = 0, failed = 0;
  double t0 = kio_now_s(), busy = 0, t_mem = 0, t_batch = 0, t_acc_end = 0;
  while (rdr && (!g.drop_after || served < g.drop_after) && (q = gsvc_reader_next(rdr))) {
    served++;
    if (g.broken || g.stop) {  /* requests read ahead are the job's to redo */
      gsvc_reader_done(rdr, q);
      break;
    }
    kio_msg_reader rd = {q->buf, q->len, 0, 0};
    uint32_t type = q->type;
    double t1 = kio_now_s();
    if (type != KIO_SVC_ALIGN) fused_end(&f, d);  /* statistics cover every request before */
    if (type == KIO_SVC_FUSE) {
      why[0] = '\0';
      int frc = f.acc ? KIO_ERR
                      : gsvc_fuse(&f, d, e->id, &e->tm, &e->am, g.use_cpu, why, sizeof why);
      gsvc_reader_answering(rdr);
      int src = send_ready(s, m, frc, frc == KIO_OK ? g.dev_desc[d] : why[0] ? why : "fused already");
      c->answers++;
      if (c->busy > 0) c->busy--;
      gsvc_reader_done(rdr, q);
      if (src != KIO_OK) break;
      continue;
    }
    if (type == KIO_SVC_STATS && f.acc) {
      kio_msg_reset(m);
      gacc_serve_fused_put(f.sv, f.acc, m, 1);
      gsvc_reader_done(rdr, q);
      gsvc_reader_answering(rdr);
      if (reply(c, KIO_SVC_STATS_ARE, m) != KIO_OK) break;
      continue;
    }
    if (type != KIO_SVC_ALIGN) {
      gsvc_reader_done(rdr, q);
      break;
    }
    galign_serve *cv = svs[cur];
    int batch_rc = KIO_OK;
    if (test_faults()) {
      fused_end(&f, d);
      failed_reply(m, g.broken_why);
      batch_rc = KIO_ERR;
    } else {
      galign_serve_give_fd(cv, q->fd);  /* the job's shared memory */
      q->fd = -1;
      if (galign_serve_parse(cv, a, &rd) != KIO_OK) {
        fused_end(&f, d);
        KIO_WARN("Malformed alignment request; closing the connection");
        gsvc_reader_done(rdr, q);
        break;
      }
      const size_t need = galign_serve_need(cv, a);
      /* the previous request's accumulation goes on beside this alignment
       * if the device memory allows both now; else it ends first */
      double t2 = kio_now_s();
      if (!gsvc_mem_fits_align(d, a, need)) fused_end(&f, d);
      gsvc_mem_begin_align(d, a, need);  /* waits its turn for device memory */
      double t3 = kio_now_s();
      batch_rc = KIO_OK;
      galign_serve_run(cv, a, m, &batch_rc);
      double t4 = kio_now_s();
      gsvc_mem_end_align(d, a);
      fused_end(&f, d);  /* its outcome goes with this reply */
      t_mem += t3 - t2;
      t_batch += t4 - t3;
      t_acc_end += kio_now_s() - t4;
      if (f.acc) gacc_serve_fused_put(f.sv, f.acc, m, galign_serve_flags(cv, NULL) &
                                                         KIO_SVC_ALIGN_STATS);
    }
    busy += kio_now_s() - t1;
    if (batch_rc != KIO_OK) {
      failed = 1;
      check_device();
    }
    gsvc_reader_answering(rdr);
    if (reply(c, KIO_SVC_ALIGNED, m) != KIO_OK || failed) {
      gsvc_reader_done(rdr, q);
      break;
    }
    gsvc_fused_start(&f, cv, d, &q->buf, &q->cap);  /* its payload kept while it runs */
    gsvc_reader_done(rdr, q);
    cur ^= 1;
  }
  double t_end = kio_now_s();
  const int fused = f.acc != NULL;
  gsvc_fused_free(&f, d, g.broken, g.verbose);
  f.t_wait += kio_now_s() - t_end;
  int most = rdr ? gsvc_reader_most(rdr) : 0;
  gsvc_reader_stop(rdr);
  if (g.verbose)
    KIO_LOG("align connection (device %d): %.3f s setting up (%s), %d requests "
            "(up to %d in flight), %.3f s aligning, %.3f s connected; %d accumulated here, "
            "%.3f s waiting for them%s%s%s", d, t_new, gsvc_align_kind_name(kind), served, most,
            busy, kio_now_s() - t0, f.started, f.t_wait, fused ? " (" : "",
            fused ? gsvc_acc_kind_name(f.kind) : "", fused ? ")" : "");
  if (g.verbose && kio_log_verbose() >= 2) {  /* the device's share of the aligning time (events on its stream) */
    galign_aligner_stats st1;
    galign_aligner_get_stats(a, &st1);
    KIO_LOG("align connection (device %d): likelihoods %.3f s, Viterbi %.3f s, staging %.3f s; "
            "%lld retried on host threads in %.3f s; of the aligning: %.3f s waiting for device "
            "memory (and earlier accumulations), %.3f s in the aligner, %.3f s trimming and "
            "ending accumulations", d, st1.loglike_s - st0.loglike_s,
            st1.viterbi_s - st0.viterbi_s, st1.copy_s - st0.copy_s,
            (long long)(st1.host_retries - st0.host_retries), st1.host_retry_s - st0.host_retry_s,
            t_mem, t_batch, t_acc_end);
    int64_t pl_alloc, pl_free;
    double pl_alloc_s, pl_free_s;
    kio_cuda_host_stats(&pl_alloc, &pl_alloc_s, &pl_free, &pl_free_s);
    char pool[240];
    kio_cuda_host_describe(pool, sizeof pool);
    KIO_LOG("align connection (device %d): while connected, the service's page-locked "
            "allocations %lld (%.3f s), frees %lld (%.3f s); now %s", d,
            (long long)(pl_alloc - pl_alloc0), pl_alloc_s - pl_alloc_s0,
            (long long)(pl_free - pl_free0), pl_free_s - pl_free_s0, pool);
  }
  galign_serve_free(sv2);
  galign_serve_free(sv);
  /* an aligner keeps no state between batches; one that failed is not trusted */
  gsvc_align_end(d, e->id, o, a, failed || g.broken, g.verbose);
}

/* The accumulation requests of a connection: one job's statistics, on an
 * accumulator of the device's pool or a new one. */
static void serve_acc(conn *c, kio_msg *m, model_entry *e, int d) {
  kio_svc *s = c->s;
  char why[200] = "";
  double t_new = kio_now_s();
  int kind = GSVC_ACC_NEW;
  gacc_acc *a = gsvc_acc_get(d, e->id, &e->tm, &e->am, g.use_cpu, &kind, why);
  t_new = kio_now_s() - t_new;
  if (!a) {
    check_device();
    send_ready(s, m, KIO_ERR, why);
    return;
  }
  gacc_timing t_start;  /* the split covers this connection only */
  gacc_get_timing(a, &t_start);
  gacc_serve *sv = gacc_serve_new();
  int ok = sv && send_ready(s, m, KIO_OK, g.dev_desc[d]) == KIO_OK;
  int failed = !ok;
  c->busy = 0;
  if (ok) {
    kio_svc_set_timeouts(s, -1, g.stall_s);
    kio_svc_set_limit(s, KIO_SVC_MAX_REQUEST);
    /* Requests are read ahead (the job sends its next batch while this one
     * is accumulated): the next one's transfer overlaps the work. */
    gsvc_reader *rdr = gsvc_reader_start(s, &c->busy, reading_stops);
    if (!rdr) KIO_WARN("Cannot start a connection's reader: out of memory or threads");
    gsvc_request *q;
    int served = 0;
    double t0 = kio_now_s(), busy = 0, t_next = 0;
    for (;;) {
      if (!rdr || (g.drop_after && served >= g.drop_after)) break;
      double tq = kio_now_s();
      q = gsvc_reader_next(rdr);
      t_next += kio_now_s() - tq;
      if (!q) break;
      served++;
      if (g.broken || g.stop) {  /* requests read ahead are the job's to redo */
        gsvc_reader_done(rdr, q);
        break;
      }
      kio_msg_reader rd = {q->buf, q->len, 0, 0};
      uint32_t type = q->type, reply_type;
      double t1 = kio_now_s();
      int batch_rc = KIO_OK;
      if (type == KIO_SVC_ACC) {
        reply_type = KIO_SVC_ACCUMULATED;
        gacc_serve_give_fd(sv, q->fd);  /* the job's shared memory */
        q->fd = -1;
        if (test_faults()) {
          failed_reply(m, g.broken_why);
          batch_rc = KIO_ERR;
        } else {
          gsvc_mem_begin_acc(d, a);  /* waits its turn for device memory */
          int bad = gacc_serve_acc(sv, a, &rd, m, &batch_rc) != KIO_OK;
          gsvc_mem_end_acc(d, a);
          if (bad) {
            KIO_WARN("Malformed accumulation request; closing the connection");
            gsvc_reader_done(rdr, q);
            break;
          }
        }
      } else if (type == KIO_SVC_STATS) {
        gacc_serve_stats(sv, a, m, &batch_rc);
        reply_type = KIO_SVC_STATS_ARE;
      } else {
        gsvc_reader_done(rdr, q);
        break;
      }
      gsvc_reader_done(rdr, q);
      busy += kio_now_s() - t1;
      if (batch_rc != KIO_OK) {
        failed = 1;
        check_device();
      }
      gsvc_reader_answering(rdr);
      /* after a failure the statistics are not trusted: the job redoes them */
      if (reply(c, reply_type, m) != KIO_OK || batch_rc != KIO_OK) break;
    }
    int most = rdr ? gsvc_reader_most(rdr) : 0;
    gsvc_reader_stop(rdr);
    if (g.verbose)
      gsvc_acc_log(d, served, most, gacc_serve_shm_requests(sv), t_new, busy, t_next,
                   kio_now_s() - t0, a, kind, &t_start);
  }
  gacc_serve_free(sv);
  /* one whose batch failed is not trusted; a broken context's is of no use */
  gsvc_acc_end(d, e->id, a, failed || g.broken, g.verbose);
}

static void *conn_main(void *arg) {
  conn *c = arg;
  kio_svc *s = c->s;
  kio_msg m = {0};
  kio_msg_reader rd;
  /* the HELLO must come within the stall time: a silent client does not
   * keep the service (or its thread) */
  kio_svc_set_timeouts(s, g.stall_s, g.stall_s);
  if (kio_svc_recv(s, KIO_SVC_HELLO, NULL, &rd) != KIO_OK) {
    if (strstr(kio_svc_error(s), "refused")) KIO_WARN("%s; closing the connection", kio_svc_error(s));
    goto out;
  }
  c->busy = 1;  /* the job waits for READY: heartbeats while the model is set up */
  uint32_t proto = kio_rd_u32(&rd), kind = kio_rd_u32(&rd);
  float job_timeout = kio_rd_f32(&rd);
  c->beat = job_timeout > 0 && job_timeout / 4 < 1.0f ? job_timeout / 4 : 1.0;
  galign_opts o;
  galign_opts_default(&o);
  const void *model = NULL;
  size_t len = 0;
  int ok = !rd.bad && proto == KIO_SVC_PROTOCOL &&
           ((kind == KIO_SVC_KIND_ALIGN && galign_serve_hello(&rd, &o, &model, &len) == KIO_OK) ||
            (kind == KIO_SVC_KIND_ACC && gacc_serve_hello(&rd, &model, &len) == KIO_OK));
  if (!ok) {
    char why[160];
    if (proto != KIO_SVC_PROTOCOL)
      snprintf(why, sizeof why, "the job speaks protocol %u, this service %u (another version "
               "of the service)", (unsigned)proto, (unsigned)KIO_SVC_PROTOCOL);
    else
      snprintf(why, sizeof why, "unsupported request (another version of the service?)");
    send_ready(s, &m, KIO_ERR, why);
    goto out;
  }
  if (!g.device_ok) {
    send_ready(s, &m, KIO_ERR, g.desc);
    goto out;
  }
  kio_log_deferred *lines = NULL;
  kio_log_defer(&lines);
  model_entry *e = gsvc_model_get(model, len);
  kio_log_defer(NULL);
  kio_log_discard(&lines);
  if (!e) {
    send_ready(s, &m, KIO_ERR, "the service could not read the model");
    goto out;
  }
  /* The device with the fewest connections; this thread works on it. */
  int d = gsvc_mem_pick(g.ndev);
  int usable = g.use_cpu || gsvc_mem_enter(d) == KIO_OK;
  if (usable) check_device();  /* health before each connection, not only at start */
  if (!usable) {
    send_ready(s, &m, KIO_ERR, "cannot use the device");
  } else if (g.broken) {
    send_ready(s, &m, KIO_ERR, g.broken_why);
  } else if (kind == KIO_SVC_KIND_ALIGN) {
    serve_align(c, &m, e, &o, d);
  } else {
    serve_acc(c, &m, e, d);
  }
  gsvc_mem_leave(d);
  gsvc_model_put(e);
out:
  kio_msg_free(&m);
  pthread_mutex_lock(&g.mu);
  for (conn **pp = &g.conns; *pp; pp = &(*pp)->next)
    if (*pp == c) { *pp = c->next; break; }
  g.active--;
  g.last_activity = kio_now_s();
  pthread_mutex_unlock(&g.mu);
  kio_svc_close(s);
  free(c);
  return NULL;
}

static void start_connection(kio_svc *s) {
  conn *c = calloc(1, sizeof *c);
  if (!c) { kio_svc_close(s); return; }
  c->s = s;
  c->beat = 1.0;
  pthread_attr_t at;
  pthread_attr_init(&at);
  pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
  pthread_t th;
  pthread_mutex_lock(&g.mu);
  c->next = g.conns;
  g.conns = c;
  g.active++;
  g.last_activity = kio_now_s();
  pthread_mutex_unlock(&g.mu);
  if (pthread_create(&th, &at, conn_main, c) != 0) conn_main(c);
  pthread_attr_destroy(&at);
}

/* Heartbeats: every connection with a request being worked on hears from
 * the service every second, or four times within its job's timeout if that
 * is shorter. */
static void *ticker_main(void *arg) {
  (void)arg;
  for (;;) {
    sleep_s(0.05);
    pthread_mutex_lock(&g.mu);
    const double now = kio_now_s();
    for (conn *c = g.conns; c; c = c->next) {
      /* A connection that answers nothing for stuck_s gets no more
       * heartbeats: a wedged thread must not keep its job waiting for ever
       * (the job gives up after its timeout and goes on by itself). */
      unsigned a = c->answers;
      if (!c->busy || a != c->seen_answers || c->seen_at == 0) {
        c->seen_answers = a;
        c->seen_at = now;
      }
      if (c->busy && g.stuck_s > 0 && now - c->seen_at > g.stuck_s) {
        if (c->seen_at > 0)
          KIO_WARN("A connection answered nothing for %.0f s: no more heartbeats", g.stuck_s);
        c->seen_at = -1;
        continue;
      }
      if (c->busy && c->seen_at > 0 && kio_svc_quiet_for(c->s) >= c->beat) kio_svc_heartbeat(c->s);
    }
    pthread_mutex_unlock(&g.mu);
  }
  return NULL;
}

/* ---------------- the loop ---------------- */

/* The devices to serve: every visible one, or $KALDI_GPU_DEVICE alone; a
 * context is created on each now, so that jobs never wait for one. */
static void start_devices(void) {
  kio_log_deferred *lines = NULL;
  kio_log_defer(&lines);
  int n = kio_cuda_device_count();
  const char *one = kio_setting_str(KIO_SET_DEVICE);
  g.ndev = 0;
  if (one) {
    g.dev_id[g.ndev++] = atoi(one);
  } else {
    for (int d = 0; d < n && g.ndev < MAX_DEV; d++) g.dev_id[g.ndev++] = d;
  }
  g.device_ok = g.ndev > 0;
  for (int k = 0; k < g.ndev && g.device_ok; k++) {
    g.device_ok = gsvc_mem_open(k, g.dev_id[k], g.dev_desc[k], sizeof g.dev_desc[k]) == KIO_OK;
    if (g.device_ok) snprintf(g.desc, sizeof g.desc, "%s", g.dev_desc[k]);
  }
  kio_log_defer(NULL);
  if (g.device_ok) kio_log_replay(&lines);  /* each device's memory */
  if (!g.device_ok) {
    g.desc[0] = '\0';
    kio_log_deferred_each(lines, gsvc_join_line, g.desc);
    if (!g.desc[0]) snprintf(g.desc, sizeof g.desc, "no usable GPU");
    g.ndev = 1;
  }
  kio_log_discard(&lines);
}

static int count_active(int *busy) {
  pthread_mutex_lock(&g.mu);
  int n = g.active, b = 0;
  for (conn *c = g.conns; c; c = c->next) b += c->busy != 0;
  pthread_mutex_unlock(&g.mu);
  if (busy) *busy = b;
  return n;
}

/* Closes the connections (all, or those without work in flight). */
static void shut_connections(int all) {
  pthread_mutex_lock(&g.mu);
  for (conn *c = g.conns; c; c = c->next)
    if (all || !c->busy) kio_svc_shutdown(c->s);
  pthread_mutex_unlock(&g.mu);
}

/* Idle: nothing worked on, no connection heard from for idle_s, none
 * opened or closed for idle_s. */
static int is_idle(double idle_s) {
  pthread_mutex_lock(&g.mu);
  int idle = kio_now_s() - g.last_activity > idle_s;
  for (conn *c = g.conns; c && idle; c = c->next)
    if (c->busy || kio_svc_quiet_for(c->s) <= idle_s) idle = 0;
  pthread_mutex_unlock(&g.mu);
  return idle;
}

int gsvc_serve(const gsvc_config *cfg) {
  signal(SIGPIPE, SIG_IGN);
  signal(SIGTERM, on_signal);
  signal(SIGINT, on_signal);
  signal(SIGHUP, SIG_IGN);  /* no terminal: a hang-up of the starting job's is not ours */
  char why[256] = "";
  int lfd = cfg->listen_fd > 0 ? cfg->listen_fd : kio_svc_listen(cfg->socket, why, sizeof why);
  if (lfd < 0) {
    KIO_ERROR("%s", why);
    return 1;
  }
  struct stat sockst;
  int have_ino = stat(cfg->socket, &sockst) == 0;
  g.use_cpu = cfg->use_cpu;
  g.drop_after = cfg->drop_after;
  g.verbose = cfg->verbose;
  g.stall_s = cfg->stall_s > 0 ? cfg->stall_s : 30;
  g.stuck_s = (double)kio_setting_int(KIO_SET_DEV_SERVICE_STUCK_S, 180, 0, 1 << 30);
  g.break_after = cfg->break_after;
  g.stop_after = cfg->stop_after;
  g.slow_s = cfg->slow_s;
  /* idle aligners first: a new one costs more than a new accumulator */
  gsvc_mem_on_pressure(gsvc_align_on_pressure, "aligner(s)");
  gsvc_mem_on_pressure(gsvc_acc_on_pressure, "accumulator(s)");
  /* Jobs may connect already; they wait for READY while the devices start. */
  if (cfg->refuse) {
    g.device_ok = 0;
    g.ndev = 1;
    snprintf(g.desc, sizeof g.desc, "%s", cfg->refuse);
  } else if (g.use_cpu) {
    g.device_ok = 1;
    g.ndev = cfg->use_cpu > 1 && cfg->use_cpu <= MAX_DEV ? cfg->use_cpu : 1;
    snprintf(g.desc, sizeof g.desc, "the CPU (service test mode)");
    for (int d = 0; d < g.ndev; d++) {
      g.dev_id[d] = d;
      snprintf(g.dev_desc[d], sizeof g.dev_desc[d], "%s", g.desc);
    }
  } else {
    /* leave the cores to the jobs; KALDI_GPU_DEV_SERVICE_SYNC=spin measures
     * what the blocking waits cost */
    static const char *const syncs[] = {"block", "spin", NULL};
    if (kio_setting_choice(KIO_SET_DEV_SERVICE_SYNC, syncs, 0) == 0) kio_cuda_prefer_blocking_sync();
    start_devices();
  }
  for (int d = 0; d < g.ndev && g.ndev > 1; d++) {
    char raw[200];
    snprintf(raw, sizeof raw, "%s", g.dev_desc[d]);
    snprintf(g.dev_desc[d], sizeof g.dev_desc[d], "%.150s (device %d of %d)", raw, d + 1,
             g.ndev);
  }
  KIO_LOG("Serving %s on %s (pid %d); %d device(s): %s", g.device_ok ? "jobs" : "refusals",
          cfg->socket, (int)getpid(), g.ndev, g.desc);
  if (!g.device_ok && cfg->failed_marker) {
    /* jobs need not start another service to learn the same */
    FILE *f = fopen(cfg->failed_marker, "w");
    if (f) {
      fprintf(f, "the service has no usable GPU: %s\n", g.desc);
      fclose(f);
    }
  }
  pthread_t tick;
  pthread_attr_t at;
  pthread_attr_init(&at);
  pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
  if (pthread_create(&tick, &at, ticker_main, NULL) != 0)
    KIO_WARN("No heartbeat thread: jobs may give up on long batches");
  pthread_attr_destroy(&at);
  g.last_activity = kio_now_s();
  /* Without a device there is nothing to keep: refuse for a moment, then go. */
  double idle_s = g.device_ok ? (double)cfg->idle_s : 2.0;
  for (;;) {
    struct pollfd p = {lfd, POLLIN, 0};
    int r = poll(&p, 1, 250);
    if (r > 0 && (p.revents & POLLIN) && !g.stop && !g.broken) {
      kio_svc *s;
      if (kio_svc_accept(lfd, &s) == KIO_OK) start_connection(s);
      continue;
    }
    evict(idle_s);
    gsvc_mem_idle();
    if (g.stop || g.broken || is_idle(idle_s)) break;
  }
  /* Remove the socket first (if it is still ours), so new jobs start a new
   * service. */
  struct stat now_st;
  if (have_ino && stat(cfg->socket, &now_st) == 0 && now_st.st_ino == sockst.st_ino)
    unlink(cfg->socket);
  const char *end = g.stop ? "Stopped by a signal" : g.broken ? "Restarting" : NULL;
  if (g.broken) KIO_LOG("%s: exiting, so that the next job starts a fresh service", g.broken_why);
  if (end) {
    /* Jobs without work in flight go on by themselves at once; work in
     * flight gets a few seconds. */
    close(lfd);
    shut_connections(0);
    for (double t0 = kio_now_s(); count_active(NULL) && kio_now_s() - t0 < 5.0;) {
      shut_connections(0);
      sleep_s(0.02);
    }
    shut_connections(1);
    for (double t0 = kio_now_s(); count_active(NULL) && kio_now_s() - t0 < 1.0;) sleep_s(0.02);
    KIO_LOG("%s: exiting", end);
    fflush(stderr);
    /* threads may still be inside the device (a broken context): no teardown */
    _exit(0);
  }
  /* Idle: serve whoever is already queued, close silent connections. */
  for (;;) {
    struct pollfd p = {lfd, POLLIN, 0};
    if (poll(&p, 1, 0) > 0 && (p.revents & POLLIN)) {
      kio_svc *s;
      if (kio_svc_accept(lfd, &s) == KIO_OK) start_connection(s);
      continue;
    }
    if (is_idle(idle_s)) shut_connections(0);
    if (!count_active(NULL)) break;
    sleep_s(0.02);
  }
  close(lfd);
  evict(-1.0);
  KIO_LOG("Idle for %d s: exiting", (int)idle_s);
  return 0;
}
