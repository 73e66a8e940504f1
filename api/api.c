/* The frame of every public call (api-internal.h) and the process-wide
 * parts of include/kaldi-gpu-align.h: version, status names, last error,
 * log routing, verbosity, cuBLAS choice, struct sizes.
 *
 * Log routing: the library's code logs through base/sys/log.h. The first
 * public call installs one handler for the process, which sends each line
 * to the callback of the call running on the logging thread; lines of
 * threads the library started itself (a few report directly) go to the
 * call that started last. Lines outside any call (a program's own) go to
 * the handler that was in place before, Kaldi's stderr format by default.
 * Nothing is printed at load time and CUDA is not touched. */
#include "api-internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/feat/feat.h"
#include "base/sys/log.h"
#include "base/sys/settings.h"

#define STR2(x) #x
#define STR(x) STR2(x)

const char *kga_version(void) {
  return STR(KGA_VERSION_MAJOR) "." STR(KGA_VERSION_MINOR) "." STR(KGA_VERSION_PATCH)
      " (Kaldi " KIO_VERSION ")";
}

const char *kga_status_string(int status) {
  switch (status) {
    case KGA_OK: return "success";
    case KGA_ERROR: return "Kaldi error";
    case KGA_EINVAL: return "invalid argument";
    case KGA_ENOMEM: return "out of memory";
    case KGA_ECANCELED: return "stopped by a callback";
    default: return "unknown status";
  }
}

int kga_parse_use_gpu(const char *s, kga_use_gpu *out) {
  galign_use_gpu m;
  if (!out || galign_parse_use_gpu(s, &m) != KIO_OK) return KGA_EINVAL;
  *out = (kga_use_gpu)m;
  return KGA_OK;
}

/* ---------------- log routing ---------------- */

static _Thread_local kga_call *t_call;
static _Thread_local char t_last_error[1024];
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
/* Calls running, most recent first (for lines of the library's threads). */
static kga_call **g_active;
static int g_nactive, g_cap_active;
static kio_log_handler g_outer;  /* the handler before ours */
static void *g_outer_user;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t g_archive_mu = PTHREAD_MUTEX_INITIALIZER;

static void deliver(kga_call *c, int level, const char *func, const char *file, int line,
                    const char *msg) {
  if (level <= KGA_LOG_ERROR && !c->err[0]) snprintf(c->err, sizeof c->err, "%s", msg);
  if (c->mute || !c->log) return;
  char stackbuf[2048];
  char *text = stackbuf;
  int n = kio_log_format(stackbuf, sizeof stackbuf, level, func, file, line, msg);
  if (n >= (int)sizeof stackbuf && (text = malloc((size_t)n + 1)) != NULL)
    kio_log_format(text, (size_t)n + 1, level, func, file, line, msg);
  if (!text) text = stackbuf;
  kga_log_line l = {level, kio_log_program(), func ? func : "", file ? file : "", line, msg,
                    text};
  c->log(c->log_user, &l);
  if (text != stackbuf) free(text);
}

/* Called by base/sys/log.c under its (recursive) mutex. */
static void route(int level, const char *func, const char *file, int line, const char *msg,
                  void *user) {
  (void)user;
  kga_call *c = t_call;
  if (!c) {
    pthread_mutex_lock(&g_mu);
    c = g_nactive ? g_active[g_nactive - 1] : NULL;
    pthread_mutex_unlock(&g_mu);
  }
  if (c) {
    deliver(c, level, func, file, line, msg);
  } else if (g_outer) {
    g_outer(level, func, file, line, msg, g_outer_user);
  } else {
    kio_log_print(level, func, file, line, msg);
  }
}

/* Once per process: the recipes' feature pipes computed in-process (what
 * a program's start does) and our log handler. */
static void init_once(void) {
  kio_feat_install();
  kio_log_get_handler(&g_outer, &g_outer_user);
  kio_log_set_handler(route, NULL);
}

void kga_call_begin(kga_call *c, kga_log_fn log, void *log_user) {
  pthread_once(&g_once, init_once);
  memset(c, 0, sizeof *c);
  c->log = log;
  c->log_user = log_user;
  c->prev = t_call;
  t_call = c;
  c->direct_before = kio_log_thread_direct();
  kio_log_set_thread_direct(1);  /* a pipeline beside us leaves our lines alone */
  kio_clear_error();
  pthread_mutex_lock(&g_mu);
  if (g_nactive == g_cap_active) {
    int cap = g_cap_active ? 2 * g_cap_active : 8;
    kga_call **a = realloc(g_active, (size_t)cap * sizeof *a);
    if (a) { g_active = a; g_cap_active = cap; }
  }
  if (g_nactive < g_cap_active) g_active[g_nactive++] = c;
  pthread_mutex_unlock(&g_mu);
}

int kga_call_end(kga_call *c, int status) {
  pthread_mutex_lock(&g_mu);
  for (int i = g_nactive - 1; i >= 0; i--)
    if (g_active[i] == c) {
      memmove(g_active + i, g_active + i + 1, (size_t)(g_nactive - i - 1) * sizeof *g_active);
      g_nactive--;
      break;
    }
  pthread_mutex_unlock(&g_mu);
  t_call = c->prev;
  kio_log_set_thread_direct(c->direct_before);
  if (status != KGA_OK) {
    const char *m = c->err[0] ? c->err : kio_last_error()[0] ? kio_last_error()
                                                              : kga_status_string(status);
    snprintf(t_last_error, sizeof t_last_error, "%s", m);
    /* a nested call's failure is its caller's too */
    if (c->prev && !c->prev->err[0]) snprintf(c->prev->err, sizeof c->prev->err, "%s", m);
  }
  return status;
}

int kga_call_fail(kga_call *c, int status, const char *fmt, ...) {
  if (!c->err[0]) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof c->err, fmt, ap);
    va_end(ap);
  }
  return status;
}

static pthread_t g_archive_owner;
static int g_archive_owned;

int kga_archive_lock(kga_call *c) {
  pthread_mutex_lock(&g_mu);
  int mine = g_archive_owned && pthread_equal(g_archive_owner, pthread_self());
  pthread_mutex_unlock(&g_mu);
  if (mine)
    return kga_call_fail(c, KGA_EINVAL, "an archive call from inside another one (a callback): "
                         "they run one at a time");
  pthread_mutex_lock(&g_archive_mu);
  pthread_mutex_lock(&g_mu);
  g_archive_owner = pthread_self();
  g_archive_owned = 1;
  pthread_mutex_unlock(&g_mu);
  return KGA_OK;
}

int kga_busy_take(kga_call *c, atomic_int *busy) {
  if (atomic_exchange(busy, 1))
    return kga_call_fail(c, KGA_EINVAL, "the handle is in use by another call (one call at a "
                         "time per handle)");
  return KGA_OK;
}

void kga_archive_unlock(void) {
  pthread_mutex_lock(&g_mu);
  g_archive_owned = 0;
  pthread_mutex_unlock(&g_mu);
  pthread_mutex_unlock(&g_archive_mu);
}

const char *kga_last_error(void) { return t_last_error; }

void kga_log_stderr(void *user, const kga_log_line *l) {
  (void)user;
  kio_log_print(l->level, l->func, l->file, l->line, l->msg);
}

void kga_set_verbose(int level) { kio_log_set_verbose(level); }

void kga_set_program_name(const char *name) { kio_log_set_program(name ? name : ""); }

int kga_set_cublas_library(const char *path) {
  if (!path || !*path) return KGA_EINVAL;
  kio_setting_override(KIO_SET_CUBLAS, path);
  return KGA_OK;
}

void kga_free(void *p) { free(p); }

size_t kga_sizeof(const char *t) {
  static const struct { const char *name; size_t size; } sizes[] = {
    {"kga_log_line", sizeof(kga_log_line)},
    {"kga_align_result", sizeof(kga_align_result)},
    {"kga_aligner_opts", sizeof(kga_aligner_opts)},
    {"kga_archive_opts", sizeof(kga_archive_opts)},
    {"kga_align_counts", sizeof(kga_align_counts)},
    {"kga_utt", sizeof(kga_utt)},
    {"kga_acc_opts", sizeof(kga_acc_opts)},
    {"kga_acc_counts", sizeof(kga_acc_counts)},
    {"kga_acc_utt", sizeof(kga_acc_utt)},
  };
  for (size_t i = 0; t && i < sizeof sizes / sizeof sizes[0]; i++)
    if (!strcmp(t, sizes[i].name)) return sizes[i].size;
  return 0;
}
