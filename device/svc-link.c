/* The link to the per-user GPU service: framed messages, their encoding,
 * and the transport with its bounds (see svc-link.h; where the service is
 * and how it starts: svc-start.c). */
#include "svc-link.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/sys/log.h"
#include "base/sys/settings.h"
#include "svc-internal.h"

/* ---------------- messages ---------------- */

void kio_msg_reset(kio_msg *m) {
  m->len = 0;
  m->nseg = 0;
  m->total = 0;
  m->failed = 0;
}

void kio_msg_free(kio_msg *m) {
  free(m->buf);
  free(m->seg);
  memset(m, 0, sizeof *m);
}

static int add_seg(kio_msg *m, size_t off, size_t len, const void *ref) {
  if (m->nseg == m->cap_seg) {
    int cap = m->cap_seg ? 2 * m->cap_seg : 16;
    void *s = realloc(m->seg, (size_t)cap * sizeof *m->seg);
    if (!s) { m->failed = 1; return -1; }
    m->seg = s;
    m->cap_seg = cap;
  }
  m->seg[m->nseg].off = off;
  m->seg[m->nseg].len = len;
  m->seg[m->nseg].ref = ref;
  m->nseg++;
  return 0;
}

/* Appends n inline bytes (p may be NULL: zeros). */
static void put_bytes(kio_msg *m, const void *p, size_t n) {
  if (m->failed || n == 0) return;
  if (m->len + n > m->cap) {
    size_t cap = m->cap ? m->cap : 256;
    while (cap < m->len + n) cap *= 2;
    uint8_t *b = realloc(m->buf, cap);
    if (!b) { m->failed = 1; return; }
    m->buf = b;
    m->cap = cap;
  }
  if (p) memcpy(m->buf + m->len, p, n);
  else memset(m->buf + m->len, 0, n);
  /* extend the last inline segment, or start one */
  if (m->nseg > 0 && !m->seg[m->nseg - 1].ref &&
      m->seg[m->nseg - 1].off + m->seg[m->nseg - 1].len == m->len)
    m->seg[m->nseg - 1].len += n;
  else if (add_seg(m, m->len, n, NULL) != 0)
    return;
  m->len += n;
  m->total += n;
}

static void pad8(kio_msg *m) {
  size_t r = m->total % 8;
  if (r) put_bytes(m, NULL, 8 - r);
}

void kio_msg_put_u32(kio_msg *m, uint32_t v) { put_bytes(m, &v, 4); }
void kio_msg_put_i32(kio_msg *m, int32_t v) { put_bytes(m, &v, 4); }
void kio_msg_put_f32(kio_msg *m, float v) { put_bytes(m, &v, 4); }
void kio_msg_put_f64(kio_msg *m, double v) { pad8(m); put_bytes(m, &v, 8); }
void kio_msg_put_u64(kio_msg *m, uint64_t v) { pad8(m); put_bytes(m, &v, 8); }

void kio_msg_put_str(kio_msg *m, const char *s) {
  size_t n = strlen(s);
  kio_msg_put_u64(m, n);
  put_bytes(m, s, n);
  put_bytes(m, NULL, 1);  /* the NUL the reader relies on */
  pad8(m);
}

void kio_msg_put_arr(kio_msg *m, const void *p, size_t n, size_t sz) {
  kio_msg_put_u64(m, n);
  put_bytes(m, p, n * sz);
  pad8(m);
}

void kio_msg_put_ref(kio_msg *m, const void *p, size_t n, size_t sz) {
  kio_msg_put_u64(m, n);
  if (m->failed) return;
  size_t bytes = n * sz;
  if (bytes > 0) {
    if (add_seg(m, 0, bytes, p) != 0) return;
    m->total += bytes;
  }
  pad8(m);
}

/* ---------------- reading ---------------- */

static const void *rd(kio_msg_reader *r, size_t n) {
  if (r->bad || n > r->len - r->pos) { r->bad = 1; return NULL; }
  const void *p = r->p + r->pos;
  r->pos += n;
  return p;
}

static void rd_align8(kio_msg_reader *r) {
  size_t a = (r->pos + 7) & ~(size_t)7;
  if (a > r->len) r->bad = 1;
  else r->pos = a;
}

#define RD_SCALAR(name, type, align)                 \
  type name(kio_msg_reader *r) {                     \
    type v = 0;                                      \
    if (align) rd_align8(r);                         \
    const void *p = rd(r, sizeof v);                 \
    if (p) memcpy(&v, p, sizeof v);                  \
    return v;                                        \
  }
RD_SCALAR(kio_rd_u32, uint32_t, 0)
RD_SCALAR(kio_rd_i32, int32_t, 0)
RD_SCALAR(kio_rd_f32, float, 0)
RD_SCALAR(kio_rd_f64, double, 1)
RD_SCALAR(kio_rd_u64, uint64_t, 1)

const char *kio_rd_str(kio_msg_reader *r) {
  uint64_t n = kio_rd_u64(r);
  if (r->bad || n >= r->len) { r->bad = 1; return ""; }
  const char *s = rd(r, (size_t)n + 1);
  if (!s || s[n] != '\0' || memchr(s, '\0', (size_t)n)) { r->bad = 1; return ""; }
  rd_align8(r);
  return s;
}

const void *kio_rd_arr(kio_msg_reader *r, size_t sz, size_t max_n, size_t *n) {
  uint64_t c = kio_rd_u64(r);
  *n = 0;
  if (r->bad || c > max_n || (sz && c > (r->len - r->pos) / sz)) { r->bad = 1; return NULL; }
  const void *p = rd(r, (size_t)c * sz);
  if (!p && c) return NULL;
  rd_align8(r);
  if (r->bad) return NULL;
  *n = (size_t)c;
  return p;
}

/* ---------------- log lines ---------------- */

static void put_line(void *user, int level, const char *func, const char *file, int line,
                     const char *msg) {
  kio_msg *m = user;
  kio_msg_put_i32(m, level);
  kio_msg_put_i32(m, line);
  kio_msg_put_str(m, func ? func : "");
  kio_msg_put_str(m, file ? file : "");
  kio_msg_put_str(m, msg);
}

static void count_line(void *user, int level, const char *func, const char *file, int line,
                       const char *msg) {
  (void)level; (void)func; (void)file; (void)line; (void)msg;
  (*(uint32_t *)user)++;
}

void kio_msg_put_lines(kio_msg *m, const kio_log_deferred *lines) {
  uint32_t n = 0;
  kio_log_deferred_each(lines, count_line, &n);
  kio_msg_put_u32(m, n);
  kio_log_deferred_each(lines, put_line, m);
}

int kio_rd_log_lines(kio_msg_reader *r) {
  uint32_t n = kio_rd_u32(r);
  for (uint32_t i = 0; i < n && !r->bad; i++) {
    int32_t level = kio_rd_i32(r), line = kio_rd_i32(r);
    const char *func = kio_rd_str(r), *file = kio_rd_str(r), *msg = kio_rd_str(r);
    if (r->bad) break;
    /* deferred lines keep func/file pointers: give them a lasting copy */
    kio_logf(level, kio_log_intern(func), kio_log_intern(file), line, "%s", msg);
  }
  return r->bad ? KIO_ERR : KIO_OK;
}

int kio_rd_log_text(kio_msg_reader *r, char *buf, size_t n) {
  size_t k = 0;
  if (n) buf[0] = '\0';
  uint32_t cnt = kio_rd_u32(r);
  for (uint32_t i = 0; i < cnt && !r->bad; i++) {
    kio_rd_i32(r);
    kio_rd_i32(r);
    kio_rd_str(r);
    kio_rd_str(r);
    const char *msg = kio_rd_str(r);
    if (r->bad || k + 1 >= n) continue;
    int w = snprintf(buf + k, n - k, "%s%s", k ? "; " : "", msg);
    k = w < 0 ? k : k + (size_t)w < n ? k + (size_t)w : n - 1;
  }
  return r->bad ? KIO_ERR : KIO_OK;
}

/* ---------------- transport ----------------
 * Sockets are non-blocking; every wait is a poll bounded by the connection's
 * timeouts, restarted by any progress. Sends are serialised (a heartbeat may
 * come from another thread). */

static double remaining(double limit_s, double since) {
  if (limit_s < 0) return -1;
  double left = limit_s - (kio_now_s() - since);
  return left > 0 ? left : 0;
}

/* Waits for events on fd for at most limit_s after since (< 0: forever).
 * 1 ready, 0 timed out, -1 error. */
static int wait_fd(int fd, short events, double limit_s, double since) {
  for (;;) {
    double left = remaining(limit_s, since);
    int ms = left < 0 ? -1 : left > 1e6 ? 1000000000 : (int)(left * 1000.0 + 0.999);
    struct pollfd p = {fd, events, 0};
    int r = poll(&p, 1, ms);
    if (r > 0) return 1;
    if (r == 0) return 0;
    if (errno != EINTR) return -1;
  }
}

/* Writes iov[0..n) completely, fd (>= 0) passed with the first bytes. 0,
 * -1 (errno), or -2 (no progress for stall_s). */
static int write_all_iov(kio_svc *s, struct iovec *iov, int n, int fd) {
  double since = kio_now_s();
  union { char buf[CMSG_SPACE(sizeof(int))]; struct cmsghdr align; } cm;
  while (n > 0) {
    /* sendmsg with MSG_NOSIGNAL: a peer that went away is an error to
     * handle (fallback), not a SIGPIPE that kills the job */
    struct msghdr mh;
    memset(&mh, 0, sizeof mh);
    mh.msg_iov = iov;
    mh.msg_iovlen = (size_t)(n > IOV_MAX ? IOV_MAX : n);
    if (fd >= 0) {
      memset(&cm, 0, sizeof cm);
      mh.msg_control = cm.buf;
      mh.msg_controllen = sizeof cm.buf;
      struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int));
      memcpy(CMSG_DATA(c), &fd, sizeof fd);
    }
    ssize_t w = sendmsg(s->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) fd = -1;  /* it went with these bytes */
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
      int r = wait_fd(s->fd, POLLOUT, s->stall_s, since);
      if (r == 0) return -2;  /* for stall_s */
      if (r < 0) return -1;
      continue;
    }
    since = kio_now_s();
    s->last_io = since;
    size_t left = (size_t)w;
    while (n > 0 && left >= iov->iov_len) {
      left -= iov->iov_len;
      iov++;
      n--;
    }
    if (n > 0) {
      iov->iov_base = (char *)iov->iov_base + left;
      iov->iov_len -= left;
    }
  }
  return 0;
}

/* Reads exactly n bytes. 0; 1 the peer closed before any byte; -1 error or
 * closed mid-way; -2 timed out (first_s for the first byte, then stall_s
 * without progress: the bound that expired in *fired). */
static int read_all(kio_svc *s, void *p, size_t n, double first_s, double *fired) {
  uint8_t *b = p;
  int any = 0;
  double since = kio_now_s();
  while (n > 0) {
    /* a descriptor may come with the bytes (kio_svc_take_fd); one is kept */
    union { char buf[CMSG_SPACE(sizeof(int))]; struct cmsghdr align; } cm;
    struct iovec v = {b, n};
    struct msghdr mh;
    memset(&mh, 0, sizeof mh);
    mh.msg_iov = &v;
    mh.msg_iovlen = 1;
    mh.msg_control = cm.buf;
    mh.msg_controllen = sizeof cm.buf;
    ssize_t r = recvmsg(s->fd, &mh, MSG_CMSG_CLOEXEC);
    for (struct cmsghdr *c = r > 0 ? CMSG_FIRSTHDR(&mh) : NULL; c; c = CMSG_NXTHDR(&mh, c))
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
          c->cmsg_len >= CMSG_LEN(sizeof(int))) {
        int got;
        memcpy(&got, CMSG_DATA(c), sizeof got);
        if (s->rx_fd >= 0) close(s->rx_fd);
        s->rx_fd = got;
      }
    if (r > 0) {
      b += r;
      n -= (size_t)r;
      any = 1;
      since = kio_now_s();
      s->last_io = since;
      continue;
    }
    if (r == 0) return any ? -1 : 1;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
    double lim = any ? s->stall_s : first_s;
    int w = wait_fd(s->fd, POLLIN, lim, since);
    if (w == 0) {
      *fired = lim;
      return -2;
    }
    if (w < 0) return -1;
  }
  return 0;
}

/* A receive's failure (the receiving thread's reason). */
static void rx_error(kio_svc *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void rx_error(kio_svc *s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(s->rerr, sizeof s->rerr, fmt, ap);
  va_end(ap);
  s->err_rx = 1;
}

/* A send's failure (with send_mu held). */
static void tx_error(kio_svc *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void tx_error(kio_svc *s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(s->err, sizeof s->err, fmt, ap);
  va_end(ap);
  s->err_rx = 0;
}

static void set_io_error(kio_svc *s, int rc, int sending, double fired) {
  int e = errno;
  if (rc == -2 && sending)
    tx_error(s, "no sign of life from the %s for %g s", s->peer, fired);
  else if (rc == -2)
    rx_error(s, "no sign of life from the %s for %g s", s->peer, fired);
  else if (sending)
    tx_error(s, "write to the %s failed: %s", s->peer, strerror(e));
  else
    rx_error(s, "read from the %s failed: %s", s->peer, strerror(e));
}

/* Finishes a heartbeat another thread began (with s->send_mu held). */
static int finish_heartbeat(kio_svc *s) {
  if (!s->hb_left) return 0;
  struct iovec v = {s->hb + (sizeof s->hb - s->hb_left), s->hb_left};
  s->hb_left = 0;
  return write_all_iov(s, &v, 1, -1);
}

static int send_msg(kio_svc *s, uint32_t type, const kio_msg *m, int fd);
int kio_svc_send(kio_svc *s, uint32_t type, const kio_msg *m) { return send_msg(s, type, m, -1); }
int kio_svc_send_fd(kio_svc *s, uint32_t type, const kio_msg *m, int fd) {
  return send_msg(s, type, m, fd);
}

int kio_svc_take_fd(kio_svc *s) {
  int fd = s->rx_fd;
  s->rx_fd = -1;
  return fd;
}

static int send_msg(kio_svc *s, uint32_t type, const kio_msg *m, int fd) {
  if (m->failed) {
    pthread_mutex_lock(&s->send_mu);
    tx_error(s, "out of memory");
    pthread_mutex_unlock(&s->send_mu);
    return KIO_ERR;
  }
  uint32_t hdr[4] = {MSG_MAGIC, type, (uint32_t)(m->total & 0xffffffffu),
                     (uint32_t)((uint64_t)m->total >> 32)};
  struct iovec stack[64], *iov = stack;
  int n = m->nseg + 1;
  if (n > 64 && !(iov = malloc((size_t)n * sizeof *iov))) {
    pthread_mutex_lock(&s->send_mu);
    tx_error(s, "out of memory");
    pthread_mutex_unlock(&s->send_mu);
    return KIO_ERR;
  }
  iov[0].iov_base = hdr;
  iov[0].iov_len = sizeof hdr;
  int k = 1;
  for (int i = 0; i < m->nseg; i++) {
    if (m->seg[i].len == 0) continue;
    iov[k].iov_base = m->seg[i].ref ? (void *)m->seg[i].ref : (void *)(m->buf + m->seg[i].off);
    iov[k].iov_len = m->seg[i].len;
    k++;
  }
  pthread_mutex_lock(&s->send_mu);
  s->sending = 1;
  int rc = finish_heartbeat(s);
  if (rc == 0) rc = write_all_iov(s, iov, k, fd);
  if (rc != 0) set_io_error(s, rc, 1, s->stall_s);
  s->sending = 0;
  pthread_mutex_unlock(&s->send_mu);
  if (iov != stack) free(iov);
  return rc == 0 ? KIO_OK : KIO_ERR;
}

void kio_svc_heartbeat(kio_svc *s) {
  if (pthread_mutex_trylock(&s->send_mu) != 0) return;  /* a message is going out */
  if (!s->hb_left && !s->broken) {
    uint32_t hdr[4] = {MSG_MAGIC, KIO_SVC_BUSY, 0, 0};
    memcpy(s->hb, hdr, sizeof hdr);
    ssize_t w = send(s->fd, s->hb, sizeof s->hb, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) s->broken = 1;
    else if (w < (ssize_t)sizeof s->hb) s->hb_left = sizeof s->hb - (size_t)(w > 0 ? w : 0);
    if (w > 0) s->last_io = kio_now_s();
  }
  pthread_mutex_unlock(&s->send_mu);
}

/* The payload buffer grows with the bytes that arrive (a peer that claims a
 * huge length and sends little costs little). */
static int read_payload(kio_svc *s, uint64_t len, double *fired) {
  size_t got = 0;
  while (got < len) {
    if (got == s->rcap) {
      size_t cap = s->rcap < 65536 ? 65536 : 2 * s->rcap;
      if (cap > len) cap = (size_t)len;
      /* 8-aligned (malloc is), so arrays can be used in place */
      uint8_t *b = realloc(s->rbuf, cap);
      if (!b) {
        rx_error(s, "out of memory (%zu bytes)", cap);
        return -3;
      }
      s->rbuf = b;
      s->rcap = cap;
    }
    size_t want = (size_t)(len < s->rcap ? len : s->rcap) - got;
    int rc = read_all(s, s->rbuf + got, want, s->stall_s, fired);
    if (rc != 0) return rc == 1 ? -1 : rc;
    got += want;
  }
  return 0;
}

int kio_svc_recv(kio_svc *s, uint32_t expect, uint32_t *type, kio_msg_reader *payload) {
  uint32_t hdr[4];
  memset(payload, 0, sizeof *payload);
  uint64_t len;
  double fired = 0;
  for (;;) {
    int rc = read_all(s, hdr, sizeof hdr, s->wait_s, &fired);
    if (rc != 0) {
      if (rc == 1) rx_error(s, "the %s closed the connection", s->peer);
      else set_io_error(s, rc, 0, fired);
      return KIO_ERR;
    }
    len = (uint64_t)hdr[2] | ((uint64_t)hdr[3] << 32);
    if (hdr[0] == MSG_MAGIC && hdr[1] == KIO_SVC_BUSY && len == 0) continue;
    break;
  }
  if (hdr[0] != MSG_MAGIC || (expect && hdr[1] != expect)) {
    rx_error(s, "unexpected message from the %s (type %u)", s->peer,
             (unsigned)hdr[1]);
    return KIO_ERR;
  }
  if (len > s->max_len) {
    rx_error(s, "message of %llu bytes from the %s refused (limit %llu)",
             (unsigned long long)len, s->peer, (unsigned long long)s->max_len);
    return KIO_ERR;
  }
  int rc = len ? read_payload(s, len, &fired) : 0;
  if (rc != 0) {
    if (rc == -2) set_io_error(s, -2, 0, fired);
    else if (rc == -1) rx_error(s, "the %s connection broke mid-message", s->peer);
    return KIO_ERR;
  }
  if (type) *type = hdr[1];
  payload->p = s->rbuf;
  payload->len = len;
  return KIO_OK;
}

const char *kio_svc_error(const kio_svc *s) { return !s ? "" : s->err_rx ? s->rerr : s->err; }

void kio_svc_swap_payload(kio_svc *s, uint8_t **buf, size_t *cap) {
  uint8_t *b = s->rbuf;
  size_t c = s->rcap;
  s->rbuf = *buf;
  s->rcap = *buf ? *cap : 0;
  *buf = b;
  *cap = c;
}

void kio_svc_set_timeouts(kio_svc *s, double wait_s, double stall_s) {
  s->wait_s = wait_s;
  s->stall_s = stall_s;
}

void kio_svc_set_limit(kio_svc *s, uint64_t max_len) { s->max_len = max_len; }

double kio_svc_timeout(void) {
  return (double)kio_setting_int(KIO_SET_SERVICE_TIMEOUT, 30, 1, 1 << 20);
}

void kio_svc_shutdown(kio_svc *s) { shutdown(s->fd, SHUT_RDWR); }

double kio_svc_quiet_for(const kio_svc *s) { return kio_now_s() - s->last_io; }

void kio_svc_close(kio_svc *s) {
  if (!s) return;
  if (s->fd >= 0) close(s->fd);
  if (s->rx_fd >= 0) close(s->rx_fd);
  pthread_mutex_destroy(&s->send_mu);
  free(s->rbuf);
  free(s);
}

kio_svc *kio_svc_wrap(int fd, int service_side) {
  kio_svc *s = calloc(1, sizeof *s);
  if (!s) { close(fd); return NULL; }
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0) {
    close(fd);
    free(s);
    return NULL;
  }
  s->fd = fd;
  s->rx_fd = -1;
  pthread_mutex_init(&s->send_mu, NULL);
  s->last_io = kio_now_s();
  if (service_side) {
    s->peer = "job";
    s->wait_s = s->stall_s = -1;
    s->max_len = KIO_SVC_MAX_HELLO;
  } else {
    s->peer = "GPU service";
    s->wait_s = s->stall_s = kio_svc_timeout();
    s->max_len = UINT64_MAX;  /* replies: what this job asked for */
  }
  return s;
}

