/* Kaldi-format logging (reference 1.12) and the per-thread error detail. */
#include "log.h"
#include "base/sys/version.h"

#include <execinfo.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static char g_program[256];
static atomic_int g_verbose;
static atomic_int g_num_warnings, g_num_errors;
static kio_log_handler g_handler;
static void *g_handler_user;
/* recursive: a handler may itself log without deadlocking */
static pthread_mutex_t g_mutex = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static pthread_once_t g_stderr_once = PTHREAD_ONCE_INIT;

static _Thread_local char t_error[1024];
static _Thread_local const char *t_program; /* per-thread override */

struct kio_log_deferred {
  struct kio_log_deferred *next;
  int level, line;
  const char *func, *file;  /* __func__ / __FILE__: static strings */
  char msg[];
};
static _Thread_local kio_log_deferred **t_defer;

void kio_log_defer(kio_log_deferred **list) { t_defer = list; }

void kio_log_replay(kio_log_deferred **list) {
  kio_log_deferred *d = *list;
  *list = NULL;
  while (d) {
    kio_log_deferred *next = d->next;
    kio_logf(d->level, d->func, d->file, d->line, "%s", d->msg);
    free(d);
    d = next;
  }
}

void kio_log_discard(kio_log_deferred **list) {
  kio_log_deferred *d = *list;
  *list = NULL;
  while (d) {
    kio_log_deferred *next = d->next;
    free(d);
    d = next;
  }
}

void kio_log_deferred_each(const kio_log_deferred *list,
                           void (*fn)(void *user, int level, const char *func,
                                      const char *file, int line, const char *msg),
                           void *user) {
  for (const kio_log_deferred *d = list; d; d = d->next)
    fn(user, d->level, d->func, d->file, d->line, d->msg);
}

const char *kio_log_intern(const char *s) {
  static struct interned { struct interned *next; char s[]; } *head;
  static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  pthread_mutex_lock(&mu);
  struct interned *i = head;
  while (i && strcmp(i->s, s)) i = i->next;
  if (!i && (i = malloc(sizeof *i + strlen(s) + 1))) {
    strcpy(i->s, s);
    i->next = head;
    head = i;
  }
  pthread_mutex_unlock(&mu);
  return i ? i->s : NULL;
}

/* Appends a line to the thread's deferred list; 0 if it could not. */
static int defer_line(int level, const char *func, const char *file, int line,
                      const char *msg) {
  size_t n = strlen(msg) + 1;
  kio_log_deferred *d = malloc(sizeof *d + n);
  if (!d) return 0;
  d->next = NULL;
  d->level = level;
  d->line = line;
  d->func = func;
  d->file = file;
  memcpy(d->msg, msg, n);
  kio_log_deferred **p = t_defer;
  while (*p) p = &(*p)->next;
  *p = d;
  return 1;
}

static const char *base_name(const char *p) {
  if (!p) return "";
  const char *s = strrchr(p, '/');
  return s ? s + 1 : p;
}

/* Kaldi's GetShortFileName: the last two path components, so that
 * "fstext/fstext-utils-inl.h" from the Kaldi message table prints as Kaldi does, and
 * our own "base/io/io.c" shows its directory. */
static const char *short_file_name(const char *p) {
  if (!p) return "";
  const char *prev = p, *last = p;
  while ((p = strpbrk(p, "\\/")) != NULL) {
    ++p;
    prev = last;
    last = p;
  }
  return prev;
}

void kio_log_set_program(const char *argv0) {
  pthread_mutex_lock(&g_mutex);
  snprintf(g_program, sizeof g_program, "%s", base_name(argv0));
  pthread_mutex_unlock(&g_mutex);
}

void kio_log_ours(void) {
  KIO_LOG(KIO_PLUGIN_ID " (GPU plugin program, not Kaldi's own %s)", g_program);
}

const char *kio_log_program(void) { return t_program ? t_program : g_program; }
void kio_log_set_thread_program(const char *name) { t_program = name; }
static _Thread_local int t_direct;
static _Thread_local int t_num_logged; /* WARNING and worse, this thread */
void kio_log_set_thread_direct(int on) { t_direct = on; }
int kio_log_thread_direct(void) { return t_direct; }
const char *kio_log_thread_program(void) { return t_program; }
void kio_log_set_verbose(int verbose) { atomic_store(&g_verbose, verbose); }
int kio_log_verbose(void) { return atomic_load(&g_verbose); }

void kio_log_set_handler(kio_log_handler h, void *user) {
  pthread_mutex_lock(&g_mutex);
  g_handler = h;
  g_handler_user = user;
  pthread_mutex_unlock(&g_mutex);
}

void kio_log_get_handler(kio_log_handler *h, void **user) {
  pthread_mutex_lock(&g_mutex);
  *h = g_handler;
  *user = g_handler_user;
  pthread_mutex_unlock(&g_mutex);
}

int kio_log_num_warnings(void) { return atomic_load(&g_num_warnings); }
int kio_log_num_errors(void) { return atomic_load(&g_num_errors); }
int kio_log_thread_num_warnings(void) { return t_num_logged; }

/* Kaldi sets stderr to line buffering; one line per message. */
static void init_stderr(void) { setvbuf(stderr, NULL, _IOLBF, 0); }

/* ERROR / ASSERTION_FAILED are followed by a blank line and a stack trace,
 * as Kaldi prints them (nobody parses it; it helps humans). */
static void print_stack_trace(void) {
  void *frames[32];
  int n = backtrace(frames, 32);
  char **syms = backtrace_symbols(frames, n);
  fputs("\n\n[ Stack-Trace: ]\n", stderr);
  if (syms) {
    for (int i = 2; i < n; i++) fprintf(stderr, "%s\n", syms[i]);
    free(syms);
  }
}

static void level_name(char *prefix, size_t n, int level) {
  if (level > 0)
    snprintf(prefix, n, "VLOG[%d]", level);
  else
    snprintf(prefix, n, "%s",
             level == KIO_LOG_INFO ? "LOG"
             : level == KIO_LOG_WARNING ? "WARNING"
             : level == KIO_LOG_ASSERT ? "ASSERTION_FAILED" : "ERROR");
}

int kio_log_format(char *buf, size_t n, int level, const char *func, const char *file,
                   int line, const char *msg) {
  char prefix[32];
  level_name(prefix, sizeof prefix, level);
  return snprintf(buf, n, "%s (%s[%s]:%s():%s:%d) %s", prefix, kio_log_program(), KIO_VERSION,
                  func ? func : "", file ? file : "", line, msg);
}

void kio_log_print(int level, const char *func, const char *file, int line, const char *msg) {
  char prefix[32];
  level_name(prefix, sizeof prefix, level);
  pthread_once(&g_stderr_once, init_stderr);
  flockfile(stderr);
  fprintf(stderr, "%s (%s[%s]:%s():%s:%d) %s", prefix, kio_log_program(), KIO_VERSION,
          func ? func : "", file ? file : "", line, msg);
  if (level < KIO_LOG_WARNING) print_stack_trace();
  fputc('\n', stderr);
  funlockfile(stderr);
  fflush(stderr);
}

void kio_vlogf(int level, const char *func, const char *file, int line,
               const char *fmt, va_list ap) {
  char stackbuf[2048];
  char *msg = stackbuf;
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(stackbuf, sizeof stackbuf, fmt, ap);
  if (n >= (int)sizeof stackbuf) {
    msg = malloc((size_t)n + 1);
    if (msg) vsnprintf(msg, (size_t)n + 1, fmt, ap2);
    else msg = stackbuf; /* truncated is better than nothing */
  }
  va_end(ap2);
  if (t_defer && defer_line(level, func, file, line, msg)) {
    if (msg != stackbuf) free(msg);
    return;
  }
  if (level <= KIO_LOG_WARNING) t_num_logged++;
  if (level == KIO_LOG_WARNING) atomic_fetch_add(&g_num_warnings, 1);
  else if (level < KIO_LOG_WARNING) atomic_fetch_add(&g_num_errors, 1);
  const char *fname = short_file_name(file);
  pthread_mutex_lock(&g_mutex);
  if (g_handler) g_handler(level, func, fname, line, msg, g_handler_user);
  else kio_log_print(level, func, fname, line, msg);
  pthread_mutex_unlock(&g_mutex);
  if (msg != stackbuf) free(msg);
}

void kio_logf(int level, const char *func, const char *file, int line,
              const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  kio_vlogf(level, func, file, line, fmt, ap);
  va_end(ap);
}

void kio_set_error(const char *fmt, ...) {
  char tmp[sizeof t_error];
  va_list ap;
  va_start(ap, fmt);
  /* via tmp so that kio_set_error("%s ...", kio_last_error()) works */
  vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  memcpy(t_error, tmp, sizeof tmp);
}

const char *kio_last_error(void) { return t_error; }
void kio_clear_error(void) { t_error[0] = '\0'; }

const char *kio_fmt_g(char *buf, double v) {
  if (isnan(v)) strcpy(buf, signbit(v) ? "-nan" : "nan");
  else if (isinf(v)) strcpy(buf, v < 0 ? "-inf" : "inf");
  else snprintf(buf, 32, "%g", v);
  return buf;
}

double kio_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
