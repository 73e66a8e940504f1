/* wxfilename streams (reference 1.1): standard output, "| cmd" pipes and
 * files; and what becomes of them when the program dies of a fatal error.
 *
 * A program's outputs are kept only if it finishes: every output opened
 * here is recorded, and kio_outputs_abandon() (called by kio_fatal_exit)
 * makes each one visibly incomplete instead of letting it end as if the run
 * had succeeded:
 *  - a regular file is removed (even one already closed: the run that wrote
 *    it failed). It is removed only if the path still names the file we
 *    wrote (symbolic links resolved at open).
 *  - an output pipe's command runs in a process group of its own, which is
 *    killed (SIGKILL) while we still hold the write end: the command never
 *    sees the end of its input, so e.g. "gzip -c >x.gz" never writes its
 *    trailer and "gunzip -t x.gz" reports the truncation. A pipe already
 *    closed has finished its stream: too late (callers close their inputs
 *    first, see the table writer and the programs).
 *  - standard output, or a file that is not a regular one (FIFO, device):
 *    nothing can be taken back. A table writer registers a "mark" for it:
 *    the start of an entry cut short (a key and a lone '\0', a binary header
 *    without its 'B'), which every Kaldi archive reader rejects, so the
 *    program reading our archive fails instead of taking a short archive as
 *    complete.
 * Because the pipe's command is in another process group, it no longer gets
 * the terminal's or a job killer's signals to our group: SIGHUP, SIGINT,
 * SIGQUIT and SIGTERM are caught (when their action is the default) to kill
 * the pipes' groups the same way before dying of the signal. SIGPIPE is
 * caught too (a no-op handler), so that a write to a pipe or standard output
 * whose reader is gone fails with EPIPE and the table code reports it (an
 * ERROR naming the output) instead of the process vanishing; caught, not
 * ignored, so that the commands we start get the default action back when
 * they exec. */
#include "io.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
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
  pid_t pid;              /* pipe: the command's shell, leader of its group */
  char *mark;             /* bytes that make the stream visibly incomplete */
  size_t mark_len;
  int abandoned;
} out_rec;

struct kio_output {
  FILE *f;
  kio_wx_kind kind;
  char *name;
  char *buf;
  pid_t pid;              /* pipe: the command's shell */
  out_rec *rec;
};

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static out_rec *g_recs;

/* Process groups of the open output pipes, read by the signal handler. */
enum { MAX_PIPE_GROUPS = 64 };
static volatile sig_atomic_t g_groups[MAX_PIPE_GROUPS];
_Static_assert(sizeof(pid_t) <= sizeof(sig_atomic_t), "pid_t fits a sig_atomic_t");

static void kill_pipe_groups(void) {
  for (int i = 0; i < MAX_PIPE_GROUPS; i++) {
    pid_t g = (pid_t)g_groups[i];
    if (g > 0) kill(-g, SIGKILL);
  }
}

static void on_fatal_signal(int sig) {
  int saved = errno;
  kill_pipe_groups();
  errno = saved;
  /* SA_RESETHAND restored the default action: die of the signal itself
   * (it is blocked until this handler returns). */
  raise(sig);
}

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
static void install_forwarding(void) {
  static const int sigs[] = { SIGHUP, SIGINT, SIGQUIT, SIGTERM };
  for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
    catch_if_default(sigs[i], on_fatal_signal, SA_RESETHAND);
}

static void group_add(pid_t pid) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, install_forwarding);
  pthread_mutex_lock(&g_mu);
  for (int i = 0; i < MAX_PIPE_GROUPS; i++)
    if (g_groups[i] == 0) { g_groups[i] = pid; break; }
  /* more pipes than slots: only kio_outputs_abandon kills the others */
  pthread_mutex_unlock(&g_mu);
}

static void group_remove(pid_t pid) {
  pthread_mutex_lock(&g_mu);
  for (int i = 0; i < MAX_PIPE_GROUPS; i++)
    if (g_groups[i] == pid) g_groups[i] = 0;
  pthread_mutex_unlock(&g_mu);
}

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

/* "sh -c cmd" reading from a new pipe, leader of a process group of its
 * own; as popen(cmd, "w") otherwise. Returns the write end (close-on-exec,
 * so later commands do not hold it open) or -1. */
static int spawn_writer(const char *cmd, pid_t *pid) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return -1;
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t at;
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&at);
  if (fds[0] == STDIN_FILENO) {  /* stdin was closed: move the read end */
    int fd = fcntl(fds[0], F_DUPFD_CLOEXEC, 3);
    close(fds[0]);
    fds[0] = fd;
  }
  int rc = fds[0] < 0 ? errno : 0;
  if (!rc) rc = posix_spawn_file_actions_adddup2(&fa, fds[0], STDIN_FILENO);
  if (!rc) rc = posix_spawnattr_setpgroup(&at, 0);
  if (!rc) rc = posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP);
  char *argv[] = { "sh", "-c", (char *)cmd, NULL };
  if (!rc) rc = posix_spawn(pid, "/bin/sh", &fa, &at, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  if (fds[0] >= 0) close(fds[0]);
  if (rc) {
    close(fds[1]);
    errno = rc;
    return -1;
  }
  return fds[1];
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
    fflush(NULL);
    int fd = spawn_writer(wx + 1, &out->pid);
    if (fd >= 0 && !(out->f = fdopen(fd, "w"))) {
      close(fd);
      kill(-out->pid, SIGKILL);
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
  if (kind == KIO_WX_PIPE) group_add(out->pid);
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
    /* the command sees the end of its input: from here on it finishes */
    fclose(out->f);
    group_remove(out->pid);
    int status = wait_status(out->pid);
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
    kill(r->pid, SIGKILL);  /* in case it left its group */
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
    group_remove(out->pid);
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
