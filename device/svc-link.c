/* The link to the per-user GPU service: paths, start on first use, framed
 * messages and their encoding (see svc-link.h). */
#include "svc-link.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/sys/log.h"
#include "base/sys/settings.h"

enum { MSG_MAGIC = 0x3153474b };  /* "KGS1" */
/* Largest message accepted (a batch of features and graphs). */
#define MAX_MSG ((uint64_t)16 << 30)

struct kio_svc {
  int fd;
  uint8_t *rbuf;
  size_t rcap;
  char err[160];
};

static void setwhy(char *why, size_t n, const char *fmt, ...) {
  if (!why || !n) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, n, fmt, ap);
  va_end(ap);
}

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

/* ---------------- transport ---------------- */

static int write_all_iov(int fd, struct iovec *iov, int n) {
  while (n > 0) {
    /* sendmsg with MSG_NOSIGNAL: a service that went away is an error
     * to handle (fallback), not a SIGPIPE that kills the job */
    struct msghdr mh;
    memset(&mh, 0, sizeof mh);
    mh.msg_iov = iov;
    mh.msg_iovlen = (size_t)(n > IOV_MAX ? IOV_MAX : n);
    ssize_t w = sendmsg(fd, &mh, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
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

static int read_all(int fd, void *p, size_t n) {
  uint8_t *b = p;
  while (n > 0) {
    ssize_t r = read(fd, b, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return r == 0 ? 1 : -1;  /* 1: the peer closed */
    b += r;
    n -= (size_t)r;
  }
  return 0;
}

int kio_svc_send(kio_svc *s, uint32_t type, const kio_msg *m) {
  if (m->failed) { snprintf(s->err, sizeof s->err, "out of memory"); return KIO_ERR; }
  uint32_t hdr[4] = {MSG_MAGIC, type, (uint32_t)(m->total & 0xffffffffu),
                     (uint32_t)((uint64_t)m->total >> 32)};
  struct iovec stack[64], *iov = stack;
  int n = m->nseg + 1;
  if (n > 64 && !(iov = malloc((size_t)n * sizeof *iov))) {
    snprintf(s->err, sizeof s->err, "out of memory");
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
  int rc = write_all_iov(s->fd, iov, k);
  if (iov != stack) free(iov);
  if (rc != 0) {
    snprintf(s->err, sizeof s->err, "write to the GPU service failed: %s", strerror(errno));
    return KIO_ERR;
  }
  return KIO_OK;
}

int kio_svc_recv(kio_svc *s, uint32_t expect, uint32_t *type, kio_msg_reader *payload) {
  uint32_t hdr[4];
  memset(payload, 0, sizeof *payload);
  int rc = read_all(s->fd, hdr, sizeof hdr);
  if (rc != 0) {
    snprintf(s->err, sizeof s->err, "%s", rc > 0 ? "the GPU service closed the connection"
                                                 : "read from the GPU service failed");
    return KIO_ERR;
  }
  uint64_t len = (uint64_t)hdr[2] | ((uint64_t)hdr[3] << 32);
  if (hdr[0] != MSG_MAGIC || len > MAX_MSG || (expect && hdr[1] != expect)) {
    snprintf(s->err, sizeof s->err, "unexpected message from the GPU service (type %u)",
             (unsigned)hdr[1]);
    return KIO_ERR;
  }
  if (len > s->rcap) {
    free(s->rbuf);
    s->rcap = 0;
    /* 8-aligned (malloc is), so arrays can be used in place */
    if (!(s->rbuf = malloc(len))) {
      snprintf(s->err, sizeof s->err, "out of memory (%llu bytes)", (unsigned long long)len);
      return KIO_ERR;
    }
    s->rcap = len;
  }
  if (len && read_all(s->fd, s->rbuf, len) != 0) {
    snprintf(s->err, sizeof s->err, "the GPU service connection broke mid-message");
    return KIO_ERR;
  }
  if (type) *type = hdr[1];
  payload->p = s->rbuf;
  payload->len = len;
  return KIO_OK;
}

const char *kio_svc_error(const kio_svc *s) { return s ? s->err : ""; }

void kio_svc_close(kio_svc *s) {
  if (!s) return;
  if (s->fd >= 0) close(s->fd);
  free(s->rbuf);
  free(s);
}

static kio_svc *wrap(int fd) {
  kio_svc *s = calloc(1, sizeof *s);
  if (!s) { close(fd); return NULL; }
  s->fd = fd;
  return s;
}

/* ---------------- paths and identity ---------------- */

static uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
  const uint8_t *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

/* The service binary: $KALDI_GPU_SERVICE_BIN, else beside this program. */
static int service_bin(char *out, size_t n) {
  const char *e = kio_setting_str(KIO_SET_SERVICE_BIN);
  if (e) {
    snprintf(out, n, "%s", e);
    return 0;
  }
  char self[PATH_MAX];
  ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
  if (k <= 0) return -1;
  self[k] = '\0';
  char *slash = strrchr(self, '/');
  if (!slash) return -1;
  *slash = '\0';
  static const char name[] = "/kaldi-gpu-service";
  size_t len = strlen(self);
  if (len + sizeof name > n) return -1;
  memcpy(out, self, len);
  memcpy(out + len, name, sizeof name);
  return 0;
}

static int private_dir(char *dir, size_t n, char *why, size_t why_len) {
  const char *e = kio_setting_str(KIO_SET_SERVICE_DIR);
  const char *xdg = kio_setting_str(KIO_SET_XDG_RUNTIME_DIR);
  struct stat st;
  if (e && *e) snprintf(dir, n, "%s", e);
  else if (xdg && *xdg && stat(xdg, &st) == 0 && S_ISDIR(st.st_mode))
    snprintf(dir, n, "%s/kaldi-gpu", xdg);
  else
    snprintf(dir, n, "/tmp/kaldi-gpu-%u", (unsigned)getuid());
  if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
    setwhy(why, why_len, "cannot create %s: %s", dir, strerror(errno));
    return -1;
  }
  if (lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != getuid() ||
      (st.st_mode & 077)) {
    setwhy(why, why_len, "%s is not a private directory of this user (0700)", dir);
    return -1;
  }
  /* absolute: the service runs from / */
  char abs[PATH_MAX];
  if (dir[0] != '/' && realpath(dir, abs)) snprintf(dir, n, "%s", abs);
  return 0;
}

int kio_svc_paths(char *dir, size_t dir_len, char *sock, size_t sock_len, char *why,
                  size_t why_len) {
  if (private_dir(dir, dir_len, why, why_len) != 0) return KIO_ERR;
  char bin[PATH_MAX];
  struct stat st;
  memset(&st, 0, sizeof st);
  if (service_bin(bin, sizeof bin) != 0 || stat(bin, &st) != 0) {
    setwhy(why, why_len, "no service program (kaldi-gpu-service) beside this program");
    return KIO_ERR;
  }
  uint64_t h = 1469598103934665603ull;
  h = fnv1a(h, bin, strlen(bin));
  h = fnv1a(h, &st.st_ino, sizeof st.st_ino);
  h = fnv1a(h, &st.st_mtim, sizeof st.st_mtim);
  /* The environment the service computes under: devices, and the rounding
   * profile (KALDI_GPU_BLAS_PROFILE) its arithmetic follows. */
  static const kio_setting keyed[] = { KIO_SET_CUDA_VISIBLE_DEVICES, KIO_SET_DEVICE, KIO_SET_BLAS_PROFILE };
  for (size_t k = 0; k < sizeof keyed / sizeof keyed[0]; k++) {
    const char *v = kio_setting_str(keyed[k]);
    h = fnv1a(h, v ? v : "\1", v ? strlen(v) : 1);
  }
  int w = snprintf(sock, sock_len, "%s/gpu-%016llx.sock", dir, (unsigned long long)h);
  if (w < 0 || (size_t)w >= sizeof(((struct sockaddr_un *)0)->sun_path) || (size_t)w >= sock_len) {
    setwhy(why, why_len, "socket path too long under %s", dir);
    return KIO_ERR;
  }
  return KIO_OK;
}

int kio_svc_wanted(void) {
  const char *e = kio_setting_str(KIO_SET_SERVICE);
  if (e && (!strcmp(e, "0") || !strcasecmp(e, "no") || !strcasecmp(e, "false"))) return 0;
  if (kio_test_hook(KIO_SET_TEST_SERVICE_FORCE)) return 1;  /* tests: without a device node */
  return access("/dev/nvidiactl", F_OK) == 0 || access("/dev/nvidia0", F_OK) == 0;
}

static int try_connect(const char *sock) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  struct sockaddr_un a;
  memset(&a, 0, sizeof a);
  a.sun_family = AF_UNIX;
  snprintf(a.sun_path, sizeof a.sun_path, "%s", sock);
  if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

/* Starts the service detached (its own session, no inherited descriptors),
 * stderr appended to DIR/service.log. */
static int spawn(const char *dir, const char *sock, char *why, size_t why_len) {
  char bin[PATH_MAX], logp[PATH_MAX + 32], sockopt[PATH_MAX + 16];
  char found[PATH_MAX];
  if (service_bin(found, sizeof found) != 0 || !realpath(found, bin)) {
    setwhy(why, why_len, "cannot locate kaldi-gpu-service");
    return -1;
  }
  snprintf(logp, sizeof logp, "%s/service.log", dir);
  snprintf(sockopt, sizeof sockopt, "--socket=%s", sock);
  pid_t pid = fork();
  if (pid < 0) {
    setwhy(why, why_len, "fork failed: %s", strerror(errno));
    return -1;
  }
  if (pid == 0) {
    /* First child: a new session, then a grandchild that is no child of the job. */
    setsid();
    pid_t g = fork();
    if (g != 0) _exit(g < 0 ? 1 : 0);
    if (chdir("/") != 0) _exit(1);  /* hold no job's directory */
    signal(SIGPIPE, SIG_IGN);
    int nul = open("/dev/null", O_RDWR);
    int lg = open(logp, O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (nul >= 0) { dup2(nul, 0); dup2(nul, 1); }
    if (lg >= 0) dup2(lg, 2);
    long maxfd = sysconf(_SC_OPEN_MAX);
    for (long fd = 3; fd < (maxfd > 0 && maxfd < 65536 ? maxfd : 65536); fd++) close((int)fd);
    setenv("KALDI_GPU_SERVICE", "no", 1);  /* the service itself never recurses */
    execl(bin, "kaldi-gpu-service", sockopt, (char *)NULL);
    _exit(127);
  }
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
  return 0;
}

int kio_svc_connect(kio_svc **out, int may_start, char *why, size_t why_len) {
  *out = NULL;
  char dir[PATH_MAX], sock[PATH_MAX];
  if (kio_svc_paths(dir, sizeof dir, sock, sizeof sock, why, why_len) != KIO_OK) return KIO_ERR;
  int fd = try_connect(sock);
  if (fd < 0 && may_start) {
    /* One starter at a time: the others wait here, then find it running. */
    char lockp[PATH_MAX + 8];
    snprintf(lockp, sizeof lockp, "%s.lock", sock);
    int lk = open(lockp, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (lk < 0 || flock(lk, LOCK_EX) != 0) {
      setwhy(why, why_len, "cannot lock %s: %s", lockp, strerror(errno));
      if (lk >= 0) close(lk);
      return KIO_ERR;
    }
    fd = try_connect(sock);
    if (fd < 0) {
      unlink(sock);  /* stale: nobody answers on it */
      if (spawn(dir, sock, why, why_len) == 0) {
        /* The service binds at once (before it sets up the GPU); wait for it. */
        for (int i = 0; i < 1000 && fd < 0; i++) {
          struct timespec ts = {0, 10 * 1000 * 1000};
          nanosleep(&ts, NULL);
          fd = try_connect(sock);
        }
        if (fd < 0) setwhy(why, why_len, "the GPU service did not start (see %s/service.log)", dir);
      }
    }
    close(lk);  /* releases the lock */
  } else if (fd < 0) {
    setwhy(why, why_len, "no GPU service running");
  }
  if (fd < 0) return KIO_ERR;
  if (!(*out = wrap(fd))) {
    setwhy(why, why_len, "out of memory");
    return KIO_ERR;
  }
  return KIO_OK;
}

/* ---------------- the service's side ---------------- */

int kio_svc_listen(const char *sock, char *why, size_t why_len) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    setwhy(why, why_len, "socket: %s", strerror(errno));
    return -1;
  }
  struct sockaddr_un a;
  memset(&a, 0, sizeof a);
  a.sun_family = AF_UNIX;
  snprintf(a.sun_path, sizeof a.sun_path, "%s", sock);
  mode_t old = umask(077);
  int rc = bind(fd, (struct sockaddr *)&a, sizeof a);
  umask(old);
  if (rc != 0 || listen(fd, 256) != 0) {
    setwhy(why, why_len, "cannot listen on %s: %s", sock, strerror(errno));
    close(fd);
    return -1;
  }
  return fd;
}

int kio_svc_accept(int listen_fd, kio_svc **out) {
  *out = NULL;
  int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
  if (fd < 0) return KIO_ERR;
  struct ucred cr;
  socklen_t len = sizeof cr;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0 || cr.uid != geteuid()) {
    close(fd);
    return KIO_ERR;
  }
  if (!(*out = wrap(fd))) return KIO_ERR;
  return KIO_OK;
}
