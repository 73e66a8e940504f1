/* Log files framed as utils/run.pl frames them ("# CMD", "# Started at
 * DATE", "#", the lines, "# Accounting: time=N threads=1", "# Ended (code
 * 0) at DATE, elapsed time N seconds"). */
#include "train/trn-log.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/sys/log.h"

struct trn_log {
  FILE *f;
  char *prog;
  time_t start;
  pthread_mutex_t mu;
};

static _Thread_local trn_log *t_log;
static trn_log *g_default;

static void stamp(char *buf, size_t n, time_t t) {
  struct tm tmv;
  gmtime_r(&t, &tmv);
  strftime(buf, n, "%a %b %e %H:%M:%S UTC %Y", &tmv);
}

static void handler(int level, const char *func, const char *file, int line, const char *msg,
                    void *user) {
  (void)user;
  trn_log *l = t_log ? t_log : __atomic_load_n(&g_default, __ATOMIC_ACQUIRE);
  if (l) {
    /* a line of another program (set by its code) keeps that name */
    const char *old = kio_log_thread_program();
    if (!old) kio_log_set_thread_program(l->prog);
    char stack[1024];
    int n = kio_log_format(stack, sizeof stack, level, func, file, line, msg);
    char *buf = stack;
    if (n >= (int)sizeof stack && (buf = malloc((size_t)n + 1)) != NULL)
      kio_log_format(buf, (size_t)n + 1, level, func, file, line, msg);
    if (!buf) buf = stack;
    kio_log_set_thread_program(old);
    pthread_mutex_lock(&l->mu);
    fputs(buf, l->f);
    fputc('\n', l->f);
    pthread_mutex_unlock(&l->mu);
    if (buf != stack) free(buf);
  }
  if (!l || level <= KIO_LOG_ERROR) kio_log_print(level, func, file, line, msg);
}

void trn_log_init(void) { kio_log_set_handler(handler, NULL); }

trn_log *trn_log_open(const char *path, const char *prog, const char *cmd) {
  trn_log *l = calloc(1, sizeof *l);
  if (l) l->prog = strdup(prog);
  if (!l || !l->prog || !(l->f = fopen(path, "w"))) {
    KIO_ERROR("Could not open log file %s", path);
    if (l) free(l->prog);
    free(l);
    return NULL;
  }
  pthread_mutex_init(&l->mu, NULL);
  char date[64];
  l->start = time(NULL);
  stamp(date, sizeof date, l->start);
  fprintf(l->f, "# %s \n# Started at %s\n#\n", cmd, date);
  return l;
}

void trn_log_use(trn_log *l) { t_log = l; }

void trn_log_set_default(trn_log *l) { __atomic_store_n(&g_default, l, __ATOMIC_RELEASE); }

void trn_log_raw(trn_log *l, const char *line) {
  pthread_mutex_lock(&l->mu);
  fprintf(l->f, "%s\n", line);
  pthread_mutex_unlock(&l->mu);
}

void trn_log_close(trn_log *l) {
  if (!l) return;
  if (t_log == l) t_log = NULL;
  trn_log *expect = l;  /* no longer the default, if it was (other threads set theirs) */
  __atomic_compare_exchange_n(&g_default, &expect, NULL, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
  time_t end = time(NULL);
  char date[64];
  stamp(date, sizeof date, end);
  long el = (long)(end - l->start);
  fprintf(l->f, "# Accounting: time=%ld threads=1\n# Ended (code 0) at %s, elapsed time %ld seconds\n",
          el, date, el);
  fclose(l->f);
  pthread_mutex_destroy(&l->mu);
  free(l->prog);
  free(l);
}
