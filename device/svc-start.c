/* Where the GPU service lives and how a job reaches it (see svc-link.h):
 * its identity (host, binary, physical GPUs, device switches), the private
 * directory and its files, the start on first use and the service's own
 * start-up.
 *
 * Starting: one job at a time starts the service, under a lock that is
 * held only to decide (never while waiting for the service): the starter
 * writes the new service's pid and start time into the lock file, and the
 * jobs that come meanwhile wait for the same service, each for at most the
 * rest of the start wait (10 s). A service that exits at once is seen at
 * once (its pid); one that does not listen in time is killed. A failed start
 * leaves a marker (gpu-HOST-ID.failed, with the reason) for
 * KIO_SVC_FAILED_FOR seconds, during which jobs go on by themselves without
 * trying. */
#include "svc-link.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
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

#include "base/matrix/blas-profile.h"
#include "base/sys/log.h"
#include "base/sys/private-dir.h"
#include "base/sys/settings.h"
#include "svc-internal.h"

static void setwhy(char *why, size_t n, const char *fmt, ...) {
  if (!why || !n) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, n, fmt, ap);
  va_end(ap);
}

static double wall_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}


/* ---------------- identity ---------------- */

/* This host's name as it appears in file names (other characters become
 * '_'; at most 40 of them: the identity's hash holds the whole name). */
static void host_name(char *out, size_t n, char *full, size_t full_n) {
  const char *t = kio_test_hook(KIO_SET_TEST_HOSTNAME);
  char h[256] = "";
  if (t) snprintf(h, sizeof h, "%s", t);
  else if (gethostname(h, sizeof h - 1) != 0 || !h[0]) snprintf(h, sizeof h, "localhost");
  h[sizeof h - 1] = '\0';
  snprintf(full, full_n, "%s", h);
  size_t k = 0;
  for (const char *c = h; *c && k + 1 < n && k < 40; c++, k++)
    out[k] = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
                     *c == '.' || *c == '-' || *c == '_' ? *c : '_';
  out[k] = '\0';
}

/* The UUIDs of the GPUs this process sees, in CUDA's order, from the
 * driver API loaded at run time: cuInit loads the driver and enumerates the
 * devices but creates no context. A result without GPUs is "none (...)". */
typedef int (*cu_init_fn)(unsigned);
typedef int (*cu_count_fn)(int *);
typedef int (*cu_get_fn)(int *, int);
typedef int (*cu_uuid_fn)(unsigned char *, int);
static int driver_uuids(char *out, size_t n) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    snprintf(out, n, "none (no CUDA driver)");
    return -1;
  }
  cu_init_fn init = (cu_init_fn)dlsym(h, "cuInit");
  cu_count_fn count = (cu_count_fn)dlsym(h, "cuDeviceGetCount");
  cu_get_fn get = (cu_get_fn)dlsym(h, "cuDeviceGet");
  cu_uuid_fn uuid = (cu_uuid_fn)dlsym(h, "cuDeviceGetUuid_v2");  /* MIG instances too */
  if (!uuid) uuid = (cu_uuid_fn)dlsym(h, "cuDeviceGetUuid");
  int rc, nd = 0;
  if (!init || !count || !get || !uuid) {
    snprintf(out, n, "none (old CUDA driver)");
    return -1;
  }
  if ((rc = init(0)) != 0 || (rc = count(&nd)) != 0 || nd <= 0) {
    snprintf(out, n, "none (CUDA driver status %d, %d devices)", rc, nd);
    return -1;
  }
  size_t k = 0;
  out[0] = '\0';
  for (int i = 0; i < nd && k + 48 < n; i++) {
    int dev;
    unsigned char u[16];
    if ((rc = get(&dev, i)) != 0 || (rc = uuid(u, dev)) != 0) {
      snprintf(out, n, "none (CUDA driver status %d for device %d)", rc, i);
      return -1;
    }
    k += (size_t)snprintf(out + k, n - k,
                          "%sGPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
                          "%02x%02x%02x%02x%02x%02x", i ? "," : "", u[0], u[1], u[2], u[3],
                          u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14],
                          u[15]);
  }
  return 0;
  /* no dlclose: the CUDA runtime would load the driver again */
}

/* The cache of driver_uuids' answer in the private directory, one file per
 * view of the GPUs: this boot, this control group (device permissions
 * follow it: a Slurm job's cgroup admits its GPUs only), the device mask and
 * numbering, the driver. Only the first job of such a view asks the driver;
 * the service checks the answer with fresh UUIDs when it starts. */
static void gpu_cache_path(const char *dir, const char *host, char *out, size_t n) {
  static const char *const files[] = {"/proc/sys/kernel/random/boot_id", "/proc/self/cgroup",
                                      "/proc/driver/nvidia/version"};
  uint64_t h = KIO_FNV_START;
  char buf[4096];
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    int k = kio_read_small(files[i], buf, sizeof buf);
    h = kio_fnv1a(h, buf, k > 0 ? (size_t)k : 0);
    h = kio_fnv1a(h, "\1", 1);
  }
  static const kio_setting keyed[] = {KIO_SET_CUDA_VISIBLE_DEVICES, KIO_SET_CUDA_DEVICE_ORDER};
  for (size_t k = 0; k < sizeof keyed / sizeof keyed[0]; k++) {
    const char *v = kio_setting_str(keyed[k]);
    h = kio_fnv1a(h, v ? v : "\1", v ? strlen(v) : 1);
  }
  snprintf(out, n, "%s/gpus-%s-%016llx", dir, host, (unsigned long long)h);
}

/* The GPUs' UUIDs: a test's stand-in, the cache, or the driver (fresh:
 * always the driver). *how says which, *secs what it took. */
static void gpu_uuids(const char *dir, const char *host, int fresh, char *out, size_t n,
                      const char **how, double *secs) {
  double t0 = kio_now_s();
  const char *t = kio_test_hook(KIO_SET_TEST_GPU_UUIDS);
  char cache[PATH_MAX + 64];
  gpu_cache_path(dir, host, cache, sizeof cache);
  *how = "test stand-in";
  if (t) {
    snprintf(out, n, "%s", t);
  } else if (!fresh && kio_read_small(cache, out, n) > 0 && strchr(out, '\n')) {
    *strchr(out, '\n') = '\0';
    *how = "cached";
  } else {
    *how = "the driver";
    if (driver_uuids(out, n) == 0) {
      char line[4200];
      snprintf(line, sizeof line, "%s\n", out);
      kio_write_atomic(cache, line);
    }
  }
  *secs = kio_now_s() - t0;
}

/* dir_of(path) + rel into out; 0, or -1 if it does not fit. */
static int beside(char *out, size_t n, const char *path, const char *rel) {
  const char *slash = strrchr(path, '/');
  if (!slash) return -1;
  int w = snprintf(out, n, "%.*s%s", (int)(slash - path), path, rel);
  return w < 0 || (size_t)w >= n ? -1 : 0;
}

/* The service binary: $KALDI_GPU_SERVICE_BIN, else beside this program,
 * else (this code in the shared library, loaded by a program that is not
 * ours: a Python binding) beside that library or in its ../bin. */
static int service_bin(char *out, size_t n) {
  const char *e = kio_setting_str(KIO_SET_SERVICE_BIN);
  if (e) {
    snprintf(out, n, "%s", e);
    return 0;
  }
  static const char name[] = "/kaldi-gpu-service";
  char self[PATH_MAX];
  ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
  if (k <= 0) return -1;
  self[k] = '\0';
  if (beside(out, n, self, name) != 0) return -1;
  Dl_info di;
  if (access(out, X_OK) == 0 || !dladdr((void *)service_bin, &di) || !di.dli_fname ||
      !strcmp(di.dli_fname, self))
    return 0;
  char lib[PATH_MAX];
  if (beside(lib, sizeof lib, di.dli_fname, name) == 0 && access(lib, X_OK) == 0) {
    snprintf(out, n, "%s", lib);
    return 0;
  }
  if (beside(lib, sizeof lib, di.dli_fname, "/../bin/kaldi-gpu-service") == 0 &&
      access(lib, X_OK) == 0)
    snprintf(out, n, "%s", lib);
  return 0;
}

/* Everything the identity is made of, in words (desc) and hashed (*h). */
typedef struct {
  char host[48], full_host[256], bin[PATH_MAX], gpus[4096];
  const char *gpus_how;
  double gpus_s;
  uint64_t h;
} identity;

static int make_identity(const char *dir, int fresh, identity *id, char *why, size_t why_len) {
  memset(id, 0, sizeof *id);
  host_name(id->host, sizeof id->host, id->full_host, sizeof id->full_host);
  struct stat st;
  memset(&st, 0, sizeof st);
  if (service_bin(id->bin, sizeof id->bin) != 0 || stat(id->bin, &st) != 0) {
    setwhy(why, why_len, "no service program (kaldi-gpu-service) beside this program");
    return -1;
  }
  gpu_uuids(dir, id->host, fresh, id->gpus, sizeof id->gpus, &id->gpus_how, &id->gpus_s);
  uint64_t h = KIO_FNV_START;
  h = kio_fnv1a(h, id->full_host, strlen(id->full_host) + 1);
  h = kio_fnv1a(h, id->bin, strlen(id->bin));
  h = kio_fnv1a(h, &st.st_ino, sizeof st.st_ino);
  h = kio_fnv1a(h, &st.st_mtim, sizeof st.st_mtim);
  h = kio_fnv1a(h, id->gpus, strlen(id->gpus) + 1);
  /* The environment the service computes under: devices, and the rounding
   * profile its arithmetic follows (this job's: its Kaldi's, or
   * KALDI_GPU_BLAS_PROFILE; the service is started with it, spawn()). */
  static const kio_setting keyed[] = {KIO_SET_CUDA_VISIBLE_DEVICES, KIO_SET_CUDA_DEVICE_ORDER,
                                      KIO_SET_DEVICE};
  for (size_t k = 0; k < sizeof keyed / sizeof keyed[0]; k++) {
    const char *v = kio_setting_str(keyed[k]);
    h = kio_fnv1a(h, v ? v : "\1", v ? strlen(v) : 1);
  }
  const char *prof = kio_blas_profile_name(kio_blas_profile());
  h = kio_fnv1a(h, prof, strlen(prof) + 1);
  id->h = h;
  return 0;
}

int kio_svc_paths(kio_svc_paths_t *p, int fresh, char *why, size_t why_len) {
  if (kio_private_dir(p->dir, sizeof p->dir, why, why_len) != 0) return KIO_ERR;
  identity id;
  if (make_identity(p->dir, fresh, &id, why, why_len) != 0) return KIO_ERR;
  const size_t max = sizeof(((struct sockaddr_un *)0)->sun_path) - 1;
  int w = snprintf(p->sock, sizeof p->sock, "%s/gpu-%s-%016llx.sock", p->dir, id.host,
                   (unsigned long long)id.h);
  if (w > 0 && (size_t)w > max)  /* a long host name: its first characters */
    w = snprintf(p->sock, sizeof p->sock, "%s/gpu-%.8s-%016llx.sock", p->dir, id.host,
                 (unsigned long long)id.h);
  if (w < 0 || (size_t)w > max) {
    setwhy(why, why_len, "socket path too long under %s", p->dir);
    return KIO_ERR;
  }
  if (snprintf(p->log, sizeof p->log, "%s/service-%s.log", p->dir, id.host) >= (int)sizeof p->log) {
    setwhy(why, why_len, "log path too long under %s", p->dir);
    return KIO_ERR;
  }
  return KIO_OK;
}

void kio_svc_describe(char *buf, size_t n, int fresh) {
  char dir[PATH_MAX], why[256];
  identity id;
  if (kio_private_dir(dir, sizeof dir, why, sizeof why) != 0 ||
      make_identity(dir, fresh, &id, why, sizeof why) != 0) {
    snprintf(buf, n, "no identity: %s", why);
    return;
  }
  const char *cvd = kio_setting_str(KIO_SET_CUDA_VISIBLE_DEVICES);
  const char *dev = kio_setting_str(KIO_SET_DEVICE);
  snprintf(buf, n, "host %s; GPUs %s (%s, %.3f s); CUDA_VISIBLE_DEVICES=%s; "
           "KALDI_GPU_DEVICE=%s; service %s; identity %016llx", id.full_host, id.gpus,
           id.gpus_how, id.gpus_s, cvd ? cvd : "(unset)", dev ? dev : "(unset)", id.bin,
           (unsigned long long)id.h);
}

void kio_svc_forget_gpus(void) {
  char dir[PATH_MAX], host[48], full[256], cache[PATH_MAX + 64];
  if (kio_private_dir(dir, sizeof dir, NULL, 0) != 0) return;
  host_name(host, sizeof host, full, sizeof full);
  gpu_cache_path(dir, host, cache, sizeof cache);
  unlink(cache);
}

int kio_svc_wanted(void) {
  const char *e = kio_setting_str(KIO_SET_SERVICE);
  if (e && (!strcmp(e, "0") || !strcasecmp(e, "no") || !strcasecmp(e, "false"))) return 0;
  if (kio_test_hook(KIO_SET_TEST_SERVICE_FORCE)) return 1;  /* tests: without a device node */
  return access("/dev/nvidiactl", F_OK) == 0 || access("/dev/nvidia0", F_OK) == 0;
}

/* ---------------- connecting and starting ---------------- */

/* One non-blocking connect: the fd, or -1 with errno (EAGAIN: the
 * service's backlog is full, it accepts nothing). */
static int try_connect(const char *sock) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
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

/* try_connect, retried for at most limit_s while the service accepts
 * nothing (EAGAIN). */
static int connect_bounded(const char *sock, double limit_s) {
  double t0 = kio_now_s();
  for (;;) {
    int fd = try_connect(sock);
    if (fd >= 0 || errno != EAGAIN || kio_now_s() - t0 >= limit_s) return fd;
    sleep_ms(10);
  }
}

static int lock_bounded(int fd, double limit_s) {
  double t0 = kio_now_s();
  while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if ((errno != EWOULDBLOCK && errno != EINTR) || kio_now_s() - t0 >= limit_s) return -1;
    sleep_ms(10);
  }
  return 0;
}

/* A process that has not ended (a zombie has). */
static int alive(pid_t pid) {
  if (pid <= 0 || (kill(pid, 0) != 0 && errno != EPERM)) return 0;
  char p[64], st[512];
  snprintf(p, sizeof p, "/proc/%d/stat", (int)pid);
  if (kio_read_small(p, st, sizeof st) <= 0) return 1;
  const char *e = strrchr(st, ')');
  return !(e && e[1] == ' ' && e[2] == 'Z');
}

/* The start in progress, as the lock file records it ("PID TIME"). */
static void read_start(int lk, pid_t *pid, double *t) {
  char b[64] = "";
  ssize_t r = pread(lk, b, sizeof b - 1, 0);
  b[r > 0 ? r : 0] = '\0';
  int p = 0;
  double tt = 0;
  if (sscanf(b, "%d %lf", &p, &tt) != 2) p = 0;
  *pid = p;
  *t = tt;
}

static void write_start(int lk, pid_t pid, double t) {
  char b[64];
  int n = pid > 0 ? snprintf(b, sizeof b, "%d %.3f\n", (int)pid, t) : 0;
  if (ftruncate(lk, 0) == 0 && n > 0 && pwrite(lk, b, (size_t)n, 0) != n) {
    /* unreadable: treated as no start in progress */
  }
}

/* A start that failed less than KIO_SVC_FAILED_FOR s ago: 1 and its age
 * and reason. */
static int failed_recently(const char *marker, double *age, char *reason, size_t n) {
  struct stat st;
  if (stat(marker, &st) != 0) return 0;
  *age = wall_now() - ((double)st.st_mtim.tv_sec + 1e-9 * (double)st.st_mtim.tv_nsec);
  if (*age >= KIO_SVC_FAILED_FOR || *age < -60) return 0;
  if (kio_read_small(marker, reason, n) <= 0) snprintf(reason, n, "unknown reason");
  char *nl = strchr(reason, '\n');
  if (nl) *nl = '\0';
  return 1;
}

/* The sibling file of the socket with another ending (".lock", ".failed"). */
static void sibling(const char *sock, const char *ending, char *out, size_t n) {
  size_t len = strlen(sock);
  if (len > 5 && !strcmp(sock + len - 5, ".sock")) len -= 5;
  snprintf(out, n, "%.*s%s", (int)len, sock, ending);
}

/* Ends a child forked from the job without any exit processing. _exit
 * runs none natively, but under valgrind (its default --run-libc-freeres)
 * an exiting process first runs glibc's __libc_freeres, whose stdio clean-up
 * syncs every input stream: an lseek back over the unread part of each
 * stream's buffer. The child shares those open files with the job (fork
 * shares file offsets), so the job's archive readers would then read again
 * from an earlier offset. SIGKILL ends the process without running any of
 * its code (valgrind still writes its report; no code of the program's). */
static _Noreturn void child_end(void) {
  kill(getpid(), SIGKILL);
  _exit(1);  /* not reached */
}

/* Starts the service detached: a new session (no job's process group or
 * terminal), a grandchild that is no child of the job, no inherited
 * descriptors, stderr appended to the log. Its pid, or -1. */
static pid_t spawn(const kio_svc_paths_t *p, char *why, size_t why_len) {
  char bin[PATH_MAX], sockopt[PATH_MAX + 16], found[PATH_MAX], roundopt[64];
  if (service_bin(found, sizeof found) != 0 || !realpath(found, bin)) {
    setwhy(why, why_len, "cannot locate kaldi-gpu-service");
    return -1;
  }
  snprintf(sockopt, sizeof sockopt, "--socket=%s", p->sock);
  /* The service rounds as the jobs' Kaldi (part of its identity). */
  snprintf(roundopt, sizeof roundopt, "--rounding=%s", kio_blas_profile_name(kio_blas_profile()));
  int pp[2];
  if (pipe2(pp, O_CLOEXEC) != 0) {
    setwhy(why, why_len, "pipe failed: %s", strerror(errno));
    return -1;
  }
  pid_t pid = fork();
  if (pid < 0) {
    setwhy(why, why_len, "fork failed: %s", strerror(errno));
    close(pp[0]);
    close(pp[1]);
    return -1;
  }
  if (pid == 0) {
    /* Only async-signal-safe calls from here (the job has threads); every
     * end without exec is child_end(). The job reads the grandchild's pid
     * from the pipe (EOF: no pid) and ignores this child's status. */
    setsid();
    pid_t g = fork();
    if (g != 0) {
      if (g > 0 && write(pp[1], &g, sizeof g) != (ssize_t)sizeof g) {
        /* no pid: the job sees EOF */
      }
      child_end();
    }
    if (chdir("/") != 0) child_end();  /* hold no job's directory */
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    static const int deflt[] = {SIGTERM, SIGINT, SIGHUP, SIGPIPE};
    for (size_t i = 0; i < sizeof deflt / sizeof deflt[0]; i++) signal(deflt[i], SIG_DFL);
    int nul = open("/dev/null", O_RDWR);
    int lg = open(p->log, O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (nul >= 0) { dup2(nul, 0); dup2(nul, 1); }
    if (lg >= 0) dup2(lg, 2);
    for (int fd = 3; fd < 65536; fd++) close(fd);
    execl(bin, "kaldi-gpu-service", sockopt, roundopt, (char *)NULL);
    child_end();  /* the job sees the start fail (alive(), below) */
  }
  close(pp[1]);
  pid_t g = -1;
  ssize_t r;
  while ((r = read(pp[0], &g, sizeof g)) < 0 && errno == EINTR) {}
  close(pp[0]);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
  if (r != (ssize_t)sizeof g || g <= 0) {
    setwhy(why, why_len, "could not start kaldi-gpu-service");
    return -1;
  }
  return g;
}

static double start_wait(void) {
  const char *t = kio_test_hook(KIO_SET_TEST_SERVICE_START_WAIT);
  double w = t ? atof(t) : 10.0;
  return w > 0 ? w : 10.0;
}

static int wrap_job(int fd, kio_svc **out, char *why, size_t why_len) {
  if (!(*out = kio_svc_wrap(fd, 0))) {
    setwhy(why, why_len, "out of memory");
    return KIO_ERR;
  }
  return KIO_OK;
}

int kio_svc_connect(kio_svc **out, int may_start, char *why, size_t why_len) {
  *out = NULL;
  kio_svc_paths_t p;
  if (kio_svc_paths(&p, 0, why, why_len) != KIO_OK) return KIO_ERR;
  const double T = kio_svc_timeout();
  int fd = connect_bounded(p.sock, T);
  if (fd >= 0) return wrap_job(fd, out, why, why_len);
  if (errno == EAGAIN) {
    setwhy(why, why_len, "the GPU service accepted no connection for %g s", T);
    return KIO_ERR;
  }
  if (!may_start) {
    setwhy(why, why_len, "no GPU service running");
    return KIO_ERR;
  }
  char lockp[PATH_MAX + 8], failp[PATH_MAX + 8], reason[200];
  sibling(p.sock, ".lock", lockp, sizeof lockp);
  sibling(p.sock, ".failed", failp, sizeof failp);
  double age;
  if (failed_recently(failp, &age, reason, sizeof reason)) {
    setwhy(why, why_len, "its start failed %.0f s ago (%s), not tried again within %d s",
           age, reason, KIO_SVC_FAILED_FOR);
    return KIO_ERR;
  }
  int lk = open(lockp, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lk < 0 || lock_bounded(lk, T) != 0) {
    setwhy(why, why_len, "cannot lock %s: %s", lockp, strerror(errno));
    if (lk >= 0) close(lk);
    return KIO_ERR;
  }
  /* Under the lock: decide only. */
  fd = try_connect(p.sock);
  if (fd >= 0 || errno == EAGAIN) {  /* up meanwhile (busy: bounded) */
    close(lk);
    if (fd < 0) fd = connect_bounded(p.sock, T);
    if (fd >= 0) return wrap_job(fd, out, why, why_len);
    setwhy(why, why_len, "the GPU service accepted no connection for %g s", T);
    return KIO_ERR;
  }
  if (failed_recently(failp, &age, reason, sizeof reason)) {
    close(lk);
    setwhy(why, why_len, "its start failed %.0f s ago (%s), not tried again within %d s",
           age, reason, KIO_SVC_FAILED_FOR);
    return KIO_ERR;
  }
  const double W = start_wait();
  pid_t pid;
  double t0;
  read_start(lk, &pid, &t0);
  if (!(pid > 0 && wall_now() - t0 < W && alive(pid))) {  /* nobody starting it: us */
    unlink(p.sock);  /* stale: nobody answers on it */
    if ((pid = spawn(&p, why, why_len)) < 0) {
      close(lk);
      return KIO_ERR;
    }
    t0 = wall_now();
    write_start(lk, pid, t0);
  }
  flock(lk, LOCK_UN);
  /* The service listens at once (before it sets up the GPU); wait for it. */
  int died = 0, listening = 0;
  for (;;) {
    fd = try_connect(p.sock);
    if (fd >= 0 || errno == EAGAIN) {  /* listening (busy: bounded) */
      listening = 1;
      if (fd < 0) fd = connect_bounded(p.sock, T);
      break;
    }
    if (wall_now() - t0 >= W) break;
    if (!alive(pid)) {
      died = 1;
      break;
    }
    sleep_ms(10);
  }
  int locked = lock_bounded(lk, T) == 0;
  pid_t now_pid;
  double now_t;
  read_start(lk, &now_pid, &now_t);
  if (fd < 0 && !listening && locked && now_pid == pid) {
    /* This start failed: say so to the next jobs; a service still hanging
     * in its start is ended (it would listen later, unseen). */
    if (alive(pid)) kill(pid, SIGKILL);
    snprintf(reason, sizeof reason, died ? "the service exited at start"
                                         : "the service did not listen within %g s", W);
    char line[PATH_MAX + 300];
    if (snprintf(line, sizeof line, "%s; see %s\n", reason, p.log) < (int)sizeof line)
      kio_write_atomic(failp, line);
  }
  if (locked && now_pid == pid) write_start(lk, 0, 0);
  close(lk);
  if (fd >= 0) return wrap_job(fd, out, why, why_len);
  if (listening) {
    setwhy(why, why_len, "the GPU service accepted no connection for %g s", T);
    return KIO_ERR;
  }
  /* A job that saw its service die says so even when another job has
   * meanwhile started a new one (and so no failure is on record). */
  if (failed_recently(failp, &age, reason, sizeof reason))
    setwhy(why, why_len, "%s; not tried again within %d s", reason, KIO_SVC_FAILED_FOR);
  else if (died)
    setwhy(why, why_len, "the service exited at start (see %s)", p.log);
  else
    setwhy(why, why_len, "the GPU service did not start (see %s)", p.log);
  return KIO_ERR;
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
  if (!(*out = kio_svc_wrap(fd, 1))) return KIO_ERR;
  return KIO_OK;
}

/* Under a scheduler's job (Slurm: SLURM_JOB_ID; GridEngine: JOB_ID and
 * SGE_ROOT), the job's control groups, which the scheduler kills when the
 * job ends: the service leaves them where it may, i.e. it moves to the root
 * of every hierarchy (cgroup v1: each controller's; v2: the one), all or
 * none (one left is enough to be killed; a partial move leaves groups the
 * scheduler cannot remove). Only root may; a user's service stays, and the
 * jobs still using it go on by themselves when it is killed. Elsewhere
 * nothing is moved. *moved: 1 if it moved. */
static void leave_cgroups(char *what, size_t n, int *moved) {
  *moved = 0;
  const char *slurm = kio_setting_str(KIO_SET_SLURM_JOB_ID);
  const char *sge = kio_setting_str(KIO_SET_SGE_ROOT) ? kio_setting_str(KIO_SET_JOB_ID) : NULL;
  if (!slurm && !sge) return;
  char buf[8192];
  if (kio_read_small("/proc/self/cgroup", buf, sizeof buf) <= 0) return;
  enum { MAXH = 32 };
  char procs[MAXH][PATH_MAX], where[MAXH][256];
  int nh = 0, ok = 1;
  char *save = NULL;
  for (char *line = strtok_r(buf, "\n", &save); line && ok; line = strtok_r(NULL, "\n", &save)) {
    char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    if (!c2 || !strcmp(c2 + 1, "/")) continue;  /* at a root already */
    *c2 = '\0';
    const char *ctrl = c1 + 1;
    if (!strncmp(ctrl, "name=", 5)) ctrl += 5;
    if (nh == MAXH) { ok = 0; break; }
    snprintf(where[nh], sizeof where[nh], "%s:%s", *ctrl ? ctrl : "unified", c2 + 1);
    int w = snprintf(procs[nh], sizeof procs[nh], "/sys/fs/cgroup%s%s/cgroup.procs",
                     *ctrl ? "/" : "", ctrl);
    if (w < 0 || (size_t)w >= sizeof procs[nh] || access(procs[nh], W_OK) != 0) ok = 0;
    nh++;
  }
  size_t k = strlen(what);
  if (!nh) return;
  if (!ok) {
    snprintf(what + k, n - k, "; in the control groups of %s job %s, which this user cannot "
             "leave (if the scheduler ends the service with that job, the jobs still using "
             "it go on by themselves)", slurm ? "Slurm" : "GridEngine", slurm ? slurm : sge);
    return;
  }
  int done = 0;
  for (int i = 0; i < nh; i++) {
    int fd = open(procs[i], O_WRONLY | O_CLOEXEC);
    if (fd >= 0 && write(fd, "0\n", 2) == 2) done++;
    if (fd >= 0) close(fd);
  }
  *moved = done > 0;
  snprintf(what + k, n - k, "; moved out of the control groups of %s job %s (%d of %d: %s%s)",
           slurm ? "Slurm" : "GridEngine", slurm ? slurm : sge, done, nh, where[0],
           nh > 1 ? ", ..." : "");
}

int kio_svc_leave_job(char *what, size_t n) {
  /* The whole machine's CPUs (the kernel keeps those of our cpuset). */
  cpu_set_t was, all;
  long ncpu = sysconf(_SC_NPROCESSORS_CONF);
  CPU_ZERO(&all);
  for (long c = 0; c < ncpu && c < CPU_SETSIZE; c++) CPU_SET((int)c, &all);
  int had = sched_getaffinity(0, sizeof was, &was) == 0 ? CPU_COUNT(&was) : -1;
  int moved = 0;
  what[0] = '\0';
  leave_cgroups(what, n, &moved);  /* first: a cpuset left may allow more CPUs */
  char tail[PATH_MAX + 256];
  snprintf(tail, sizeof tail, "%s", what);
  sched_setaffinity(0, sizeof all, &all);
  cpu_set_t now;
  int has = sched_getaffinity(0, sizeof now, &now) == 0 ? CPU_COUNT(&now) : -1;
  snprintf(what, n, "CPU affinity %d of %ld CPUs (the starting job's: %d)%s", has, ncpu, had,
           tail);
  return moved;
}

int kio_svc_check_identity(const char *sock, char *gpus, size_t n, char *why, size_t why_len) {
  /* In a child: the driver's answer must not be this process's CUDA state
   * (the service sets its device mask from it before it initialises CUDA). */
  int pp[2];
  if (pipe2(pp, O_CLOEXEC) != 0) {
    setwhy(why, why_len, "pipe failed: %s", strerror(errno));
    return KIO_ERR;
  }
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    setwhy(why, why_len, "fork failed: %s", strerror(errno));
    close(pp[0]);
    close(pp[1]);
    return KIO_ERR;
  }
  if (pid == 0) {
    close(pp[0]);
    kio_svc_paths_t p;
    char dir[PATH_MAX], host[48], full[256], ids[4096];
    const char *how;
    double secs;
    char out[8400] = "";
    if (kio_svc_paths(&p, 1, NULL, 0) == KIO_OK && kio_private_dir(dir, sizeof dir, NULL, 0) == 0) {
      host_name(host, sizeof host, full, sizeof full);
      gpu_uuids(dir, host, 1, ids, sizeof ids, &how, &secs);
      snprintf(out, sizeof out, "%s\n%s\n", p.sock, ids);
    }
    size_t len = strlen(out);
    _exit(write(pp[1], out, len) == (ssize_t)len ? 0 : 1);
  }
  close(pp[1]);
  char buf[8400];
  size_t got = 0;
  ssize_t r;
  while (got < sizeof buf - 1 && ((r = read(pp[0], buf + got, sizeof buf - 1 - got)) > 0 ||
                                  (r < 0 && errno == EINTR)))
    if (r > 0) got += (size_t)r;
  buf[got] = '\0';
  close(pp[0]);
  int st;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
  char *nl = strchr(buf, '\n'), *nl2 = nl ? strchr(nl + 1, '\n') : NULL;
  if (!nl || !nl2) {
    setwhy(why, why_len, "could not work out the service's identity");
    return KIO_ERR;
  }
  *nl = *nl2 = '\0';
  snprintf(gpus, n, "%s", nl + 1);
  if (strcmp(buf, sock) != 0) {
    /* The job named another identity: its cached view of the GPUs is out of
     * date (or another binary started us); the next job asks the driver. */
    kio_svc_forget_gpus();
    setwhy(why, why_len, "this service's identity (GPUs %.120s) is not the one its socket "
           "names (the job's cached view of the GPUs was out of date: dropped)", gpus);
    return KIO_ERR;
  }
  return KIO_OK;
}
