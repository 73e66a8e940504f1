/* wxfilename streams (reference 1.1): standard output, "| cmd" pipes and
 * files; and what becomes of them when the program dies of a fatal error or
 * is killed.
 *
 * A program's outputs are kept only if it finishes: every output opened
 * here is recorded, and kio_outputs_abandon() (called by kio_fatal_exit)
 * makes each one visibly incomplete instead of letting it end as if the run
 * had succeeded:
 *  - a regular file is removed (even one already closed: the run that wrote
 *    it failed). It is removed only if the path still names the file we
 *    wrote (symbolic links resolved at open).
 *  - an output pipe's command is killed (SIGKILL) while its input is still
 *    open: the command never sees the end of its input, so e.g.
 *    "gzip -c >x.gz" never writes its trailer and "gunzip -t x.gz" reports
 *    the truncation. A pipe already closed has finished its stream: too late
 *    (callers close their inputs first, see the table writer and the
 *    programs).
 *  - standard output, or a file that is not a regular one (FIFO, device):
 *    nothing can be taken back. A table writer registers a "mark" for it:
 *    the start of an entry cut short (a key and a lone '\0', a binary header
 *    without its 'B'), which every Kaldi archive reader rejects, so the
 *    program reading our archive fails instead of taking a short archive as
 *    complete.
 * A program can also die without running any code of ours: SIGKILL to its
 * process group (a job killer, scancel) or to it alone (the OOM killer). An
 * output pipe's command must then not see the end of its input either, or
 * gzip would close a valid stream holding part of the utterances. So the
 * command runs under a guard (GUARD below: a shell in a process group of its
 * own, which that SIGKILL does not reach) that holds the pipe's write end
 * too and learns of our end through a socket: "done" when the stream is
 * complete (kio_output_close), after which it lets the command see the end of
 * its input and reports its exit status; the end of the socket without
 * "done" (we died, however) makes it kill its process group, the command
 * with it. SIGPIPE is caught (a no-op handler), so that a write to a pipe or
 * standard output whose reader is gone fails with EPIPE and the table code
 * reports it (an ERROR naming the output) instead of the process vanishing;
 * caught, not ignored, so that the commands we start get the default action
 * back when they exec. */
#include "io.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "io-internal.h"
#include "base/sys/log.h"

extern char **environ;

#define KIO_STREAM_BUF (1 << 16)

/* What abandoning an output means; kept after close for regular files (to be
 * removed) and standard output (to be marked), freed otherwise. */
typedef struct out_rec {
  struct out_rec *next;
  kio_wx_kind kind;
  FILE *f;                /* NULL once closed */
  int regular;            /* KIO_WX_FILE on a regular file */
  char *path;             /* regular: the resolved path */
  dev_t dev;
  ino_t ino;
  pid_t pid;              /* pipe: its guard, leader of the command's group */
  char *mark;             /* bytes that make the stream visibly incomplete */
  size_t mark_len;
  int abandoned;
} out_rec;

struct kio_output {
  FILE *f;
  kio_wx_kind kind;
  char *name;
  char *buf;
  pid_t pid;              /* pipe: its guard */
  int ctl;                /* pipe: the guard's control socket */
  out_rec *rec;
};

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static out_rec *g_recs;

static void on_sigpipe(int sig) { (void)sig; }  /* the write returns EPIPE */

static void catch_if_default(int sig, void (*handler)(int), int flags) {
  struct sigaction old, sa;
  if (sigaction(sig, NULL, &old) != 0 || old.sa_handler != SIG_DFL ||
      (old.sa_flags & SA_SIGINFO))
    return;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = handler;
  sa.sa_flags = flags;
  sigemptyset(&sa.sa_mask);
  sigaction(sig, &sa, NULL);
}

static void install_sigpipe(void) { catch_if_default(SIGPIPE, on_sigpipe, SA_RESTART); }
static void rec_link(out_rec *r) {
  pthread_mutex_lock(&g_mu);
  r->next = g_recs;
  g_recs = r;
  pthread_mutex_unlock(&g_mu);
}

static void rec_unlink_free(out_rec *r) {
  if (!r) return;
  pthread_mutex_lock(&g_mu);
  for (out_rec **p = &g_recs; *p; p = &(*p)->next)
    if (*p == r) { *p = r->next; break; }
  pthread_mutex_unlock(&g_mu);
  free(r->path);
  free(r->mark);
  free(r);
}

/* The guard of an output pipe (see the top of the file), run as
 * sh -c GUARD sh CMD with fd 5 the pipe's read end, 3 its write end and 4
 * the control socket. The command runs as an asynchronous list (stdin
 * redirected explicitly: such a list's is /dev/null otherwise) and holds
 * none of the three beyond its input. */
static const char GUARD[] =
    "{ eval \"$1\"; } <&5 3>&- 4>&- 5<&- &\n"
    "exec 5<&- </dev/null\n"
    "if read -r m <&4 && [ \"$m\" = done ]; then\n"
    "  exec 3>&-\n"
    "  wait $!\n"
    "  echo $? >&4\n"
    "else\n"
    "  kill -9 0\n"
    "fi\n";

/* Starts cmd under its guard, leader of a process group of its own. Returns
 * the pipe's write end (close-on-exec, so later commands do not hold it
 * open) and the control socket (*ctl), or -1. */
static int spawn_writer(const char *cmd, pid_t *pid, int *ctl) {
  int p[2], sv[2], hi[3] = {-1, -1, -1};
  if (pipe2(p, O_CLOEXEC) != 0) return -1;
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    close(p[0]);
    close(p[1]);
    return -1;
  }
  /* above the child's fds 3-5, so that no dup2 overwrites a later source */
  const int src[3] = {p[0], p[1], sv[1]}, dst[3] = {5, 3, 4};
  int rc = 0;
  for (int i = 0; i < 3 && !rc; i++)
    if ((hi[i] = fcntl(src[i], F_DUPFD_CLOEXEC, 6)) < 0) rc = errno;
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t at;
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&at);
  for (int i = 0; i < 3 && !rc; i++) rc = posix_spawn_file_actions_adddup2(&fa, hi[i], dst[i]);
  if (!rc) rc = posix_spawnattr_setpgroup(&at, 0);
  if (!rc) rc = posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP);
  char *argv[] = { "sh", "-c", (char *)GUARD, "sh", (char *)cmd, NULL };
  if (!rc) rc = posix_spawn(pid, "/bin/sh", &fa, &at, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  for (int i = 0; i < 3; i++)
    if (hi[i] >= 0) close(hi[i]);
  close(p[0]);
  close(sv[1]);
  if (rc) {
    close(p[1]);
    close(sv[0]);
    errno = rc;
    return -1;
  }
  *ctl = sv[0];
  return p[1];
}

/* The command's wait status, as the guard reports it ("$?" of its wait:
 * 128 + the signal for a command killed by one); -1 if the guard did not. */
static int guard_status(int ctl) {
  char b[16];
  size_t n = 0;
  while (n < sizeof b - 1) {
    ssize_t r = read(ctl, b + n, sizeof b - 1 - n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    n += (size_t)r;
    if (memchr(b, '\n', n)) break;
  }
  b[n] = '\0';
  char *end;
  long e = strtol(b, &end, 10);
  if (end == b || *end != '\n' || e < 0 || e > 255) return -1;
  return e > 128 ? (int)(e - 128) : (int)(e << 8);
}

static int wait_status(pid_t pid) {
  int status;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  return status;
}

static void output_free(kio_output *out) {
  if (!out) return;
  free(out->name);
  free(out->buf);
  free(out);
}

/* Records the output for kio_outputs_abandon. */
static int output_record(kio_output *out) {
  out_rec *r = calloc(1, sizeof *r);
  if (!r) return KIO_ERR;
  r->kind = out->kind;
  r->f = out->f;
  r->pid = out->pid;
  if (out->kind == KIO_WX_FILE) {
    struct stat st;
    if (fstat(fileno(out->f), &st) == 0 && S_ISREG(st.st_mode)) {
      r->regular = 1;
      r->dev = st.st_dev;
      r->ino = st.st_ino;
      r->path = realpath(out->name, NULL);
      if (!r->path) r->path = strdup(out->name);
      if (!r->path) { free(r); return KIO_ERR; }
    }
  }
  out->rec = r;
  rec_link(r);
  return KIO_OK;
}

int kio_output_open_q(kio_output **pout, const char *wx, int binary,
                      int write_header, int quiet) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, install_sigpipe);
  *pout = NULL;
  kio_wx_kind kind = kio_classify_wxfilename(wx);
  if (kind == KIO_WX_INVALID) {
    KIO_WARN("Invalid output filename format %s", kio_printable_wx(wx));
    kio_set_error("invalid output filename format %s", kio_printable_wx(wx));
    goto fail;
  }
  kio_output *out = calloc(1, sizeof *out);
  if (!out || !(out->name = strdup(wx ? wx : ""))) {
    output_free(out);
    goto fail;
  }
  out->kind = kind;
  if (kind == KIO_WX_STDOUT) {
    out->f = stdout;
  } else if (kind == KIO_WX_PIPE) {
    kio_flush_shared_streams();
    out->ctl = -1;
    int fd = spawn_writer(wx + 1, &out->pid, &out->ctl);
    if (fd >= 0 && !(out->f = fdopen(fd, "w"))) {
      close(fd);
      kill(-out->pid, SIGKILL);
      close(out->ctl);
      wait_status(out->pid);
    }
    if (!out->f)
      KIO_WARN("Failed opening pipe for writing, command is: %s, errno is %s",
               wx + 1, strerror(errno));
  } else {
    out->f = fopen(wx, "wbe");
    if (!out->f) kio_set_error("failed to open %s: %s", wx, strerror(errno));
  }
  if (!out->f) {
    output_free(out);
    goto fail;
  }
  if (output_record(out) != KIO_OK) {
    kio_output_discard(out);
    kio_set_error("out of memory");
    goto fail;
  }
  if (kind != KIO_WX_STDOUT) {
    out->buf = malloc(KIO_STREAM_BUF);
    if (out->buf) setvbuf(out->f, out->buf, _IOFBF, KIO_STREAM_BUF);
  }
  if (binary && write_header) {
    fputc('\0', out->f);
    fputc('B', out->f);
  }
  *pout = out;
  return KIO_OK;
fail:
  if (!quiet) KIO_ERROR("Error opening output stream %s", kio_printable_wx(wx));
  return KIO_ERR;
}

int kio_output_open(kio_output **out, const char *wx, int binary, int write_header) {
  return kio_output_open_q(out, wx, binary, write_header, 0);
}

FILE *kio_output_stream(kio_output *out) { return out ? out->f : NULL; }
const char *kio_output_name(const kio_output *out) { return out ? out->name : ""; }

int kio_output_set_mark(kio_output *out, const char *mark, size_t len) {
  if (!out || !out->rec) return KIO_OK;
  char *m = malloc(len ? len : 1);
  if (!m) return KIO_ERR;
  memcpy(m, mark, len);
  pthread_mutex_lock(&g_mu);
  free(out->rec->mark);
  out->rec->mark = m;
  out->rec->mark_len = len;
  pthread_mutex_unlock(&g_mu);
  return KIO_OK;
}

int kio_output_close(kio_output *out) {
  if (!out) return KIO_OK;
  int ret = KIO_OK;
  if (fflush(out->f) != 0 || ferror(out->f)) ret = KIO_ERR;
  out_rec *r = out->rec;
  int keep = r && (r->regular || out->kind == KIO_WX_STDOUT);
  if (r) {  /* from here on the stream is being completed: let it be */
    pthread_mutex_lock(&g_mu);
    r->f = NULL;
    r->pid = 0;
    pthread_mutex_unlock(&g_mu);
  }
  if (out->kind == KIO_WX_PIPE) {
    /* The command sees the end of its input: from here on it finishes. Not
     * after a failed write: it would complete a stream with a hole. */
    if (ret != KIO_OK) kill(-out->pid, SIGKILL);
    else if (send(out->ctl, "done\n", 5, MSG_NOSIGNAL) != 5) ret = KIO_ERR;
    fclose(out->f);
    int status = guard_status(out->ctl);
    close(out->ctl);
    wait_status(out->pid);
    if (status != 0) {
      KIO_WARN("Pipe %s had nonzero return status %d", out->name, status);
      ret = KIO_ERR;
    }
  } else if (out->kind == KIO_WX_FILE) {
    if (fclose(out->f) != 0) ret = KIO_ERR;
  }
  if (!keep) rec_unlink_free(r);
  if (ret != KIO_OK)
    kio_set_error("error closing output %s", kio_printable_wx(out->name));
  output_free(out);
  return ret;
}

/* Makes one recorded output visibly incomplete (see the top of the file).
 * Called with g_mu held. */
static void abandon_rec(out_rec *r) {
  if (r->abandoned) return;
  r->abandoned = 1;
  if (r->kind == KIO_WX_PIPE && r->pid > 0) {
    kill(-r->pid, SIGKILL);
  } else if (r->regular) {
    struct stat st;
    if (stat(r->path, &st) == 0 && st.st_dev == r->dev && st.st_ino == r->ino)
      unlink(r->path);
  } else if (r->mark) {
    FILE *f = r->f ? r->f : r->kind == KIO_WX_STDOUT ? stdout : NULL;
    if (f) {
      fflush(f);
      fwrite(r->mark, 1, r->mark_len, f);
      fflush(f);
    }
  }
}

void kio_output_discard(kio_output *out) {
  if (!out) return;
  out_rec *r = out->rec;
  if (r) {
    pthread_mutex_lock(&g_mu);
    abandon_rec(r);
    r->f = NULL;
    pthread_mutex_unlock(&g_mu);
  }
  if (out->kind == KIO_WX_PIPE) {
    if (!r) kill(-out->pid, SIGKILL);
    fclose(out->f);  /* the command is dead: nothing reads what is flushed */
    close(out->ctl);
    wait_status(out->pid);
  } else if (out->kind == KIO_WX_FILE) {
    fclose(out->f);
  }
  rec_unlink_free(r);
  output_free(out);
}

void kio_outputs_abandon(void) {
  /* a reader that is gone must not kill us while we write marks */
  signal(SIGPIPE, SIG_IGN);
  pthread_mutex_lock(&g_mu);
  /* pipes first: no command may see the end of its input meanwhile */
  for (out_rec *r = g_recs; r; r = r->next)
    if (r->kind == KIO_WX_PIPE) abandon_rec(r);
  for (out_rec *r = g_recs; r; r = r->next)
    if (r->kind != KIO_WX_PIPE) abandon_rec(r);
  pthread_mutex_unlock(&g_mu);
}

void kio_fatal_exit(void) {
  kio_outputs_abandon();
  fflush(stdout);
  fflush(stderr);
  /* _exit: no atexit handler runs (no library, e.g. the CUDA runtime, is
   * torn down under a thread still working) and no stdio buffer of an
   * abandoned output is flushed. */
  _exit(255);
}
