/* Kaldi-style logging: "LOG (prog[version]:func():file:line) msg" on stderr.
 *
 * Libraries report through kio_log*() and return status codes; the handler
 * decides what is printed (programs install none and get Kaldi's format).
 * Errors inside libraries are logged once, at the point where the file/key
 * is known, then propagated as KIO_ERR without further logging. */
#ifndef KIO_LOG_H
#define KIO_LOG_H

#include <stdarg.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Version string printed in log lines; the Kaldi build our fixtures came from. */
#define KIO_VERSION "5.5.1181~2-f4007"

/* Status codes returned by every library function that can fail. */
enum { KIO_OK = 0, KIO_ERR = -1, KIO_EOF = -2 };

/* Levels: > 0 is VLOG[n]. */
enum { KIO_LOG_INFO = 0, KIO_LOG_WARNING = -1, KIO_LOG_ERROR = -2, KIO_LOG_ASSERT = -3 };

typedef void (*kio_log_handler)(int level, const char *func, const char *file,
                                int line, const char *msg, void *user);

/* The first LOG line of each of our programs, once its arguments are
 * accepted: "kaldi-gpu-align VERSION (GPU plugin program, not Kaldi's own
 * PROGRAM)", so a log reader can tell ours from Kaldi's. Tests that compare
 * logs with Kaldi's leave out lines from this function (kio_log_ours). */
void kio_log_ours(void);
/* Program name (basename of argv[0]) shown in log lines. */
void kio_log_set_program(const char *argv0);
const char *kio_log_program(void);
/* This thread's lines carry name instead (NULL: the program's again); for
 * in-process stand-ins of other programs (base/feat/feat-chain.c). name must
 * outlive its use. */
void kio_log_set_thread_program(const char *name);
/* The calling thread's override (NULL: none), e.g. to keep it with a
 * captured line that another thread prints later. */
const char *kio_log_thread_program(void);
/* 1: this thread's lines belong to its own caller (a library call running
 * beside a pipeline): a component capturing the lines of threads it does
 * not know (the pipeline's aligner threads) leaves them alone. */
void kio_log_set_thread_direct(int on);
int kio_log_thread_direct(void);
void kio_log_set_verbose(int verbose);
int kio_log_verbose(void);
/* NULL restores the default (stderr, Kaldi format). */
void kio_log_set_handler(kio_log_handler h, void *user);
/* The handler in place (NULL: the default), e.g. to put it back after a
 * temporary one. */
void kio_log_get_handler(kio_log_handler *h, void **user);
/* What the default handler does: the line on stderr in Kaldi's format,
 * ERROR and ASSERTION_FAILED followed by the stack-trace block. */
void kio_log_print(int level, const char *func, const char *file, int line, const char *msg);
/* The line as kio_log_print prints it (without the stack trace) into buf;
 * snprintf's return value. */
int kio_log_format(char *buf, size_t n, int level, const char *func, const char *file,
                   int line, const char *msg);
/* Counters of WARNING / ERROR lines logged since start (for tests). */
int kio_log_num_warnings(void);
int kio_log_num_errors(void);
/* WARNING, ERROR and ASSERTION_FAILED lines logged by the calling thread
 * (e.g. whether a producer thread's run was clean). */
int kio_log_thread_num_warnings(void);

void kio_logf(int level, const char *func, const char *file, int line,
              const char *fmt, ...) __attribute__((format(printf, 5, 6)));
void kio_vlogf(int level, const char *func, const char *file, int line,
               const char *fmt, va_list ap);

#define KIO_LOG(...) kio_logf(KIO_LOG_INFO, __func__, __FILE__, __LINE__, __VA_ARGS__)
#define KIO_WARN(...) kio_logf(KIO_LOG_WARNING, __func__, __FILE__, __LINE__, __VA_ARGS__)
#define KIO_ERROR(...) kio_logf(KIO_LOG_ERROR, __func__, __FILE__, __LINE__, __VA_ARGS__)
#define KIO_VLOG(n, ...) \
  do { if (kio_log_verbose() >= (n)) kio_logf((n), __func__, __FILE__, __LINE__, __VA_ARGS__); } while (0)
/* Lines that claim a place in Kaldi's sources come from one table:
 * base/sys/kaldi-msg.h (KIO_KALDI). kio_logf with an explicit place is for
 * lines passed on (deferred, from another thread or process). */

/* Deferred log lines (read-ahead threads): while kio_log_defer(&list) is in
 * effect in a thread, its log lines are stored in list (not printed, not
 * counted); kio_log_replay logs them later from the thread that consumes the
 * work, as if logged then, and empties list; kio_log_discard drops them. */
typedef struct kio_log_deferred kio_log_deferred;
void kio_log_defer(kio_log_deferred **list); /* NULL: log normally again */
void kio_log_replay(kio_log_deferred **list);
void kio_log_discard(kio_log_deferred **list);
/* Calls fn for each deferred line in order (e.g. to send them elsewhere). */
void kio_log_deferred_each(const kio_log_deferred *list,
                           void (*fn)(void *user, int level, const char *func,
                                      const char *file, int line, const char *msg),
                           void *user);
/* A copy of s that lives as long as the process (one per distinct string):
 * for func/file names of lines that arrive from another process, since
 * deferred lines keep those pointers. NULL if out of memory. */
const char *kio_log_intern(const char *s);

/* Detail of the last low-level read/parse failure in this thread (e.g.
 * "expected token <DiagGMM>, got FM"). Low-level readers set it instead of
 * logging; the caller that knows the file/key logs one ERROR including it. */
void kio_set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
const char *kio_last_error(void);
void kio_clear_error(void);

/* Formats a float/double as C++ ostream does by default (%g, 6 significant
 * digits; "inf", "-inf", "nan", "-nan"), into buf (>= 32 bytes). */
const char *kio_fmt_g(char *buf, double v);

/* Monotonic clock in seconds, for the timing lines (VLOG) and time splits. */
double kio_now_s(void);

#ifdef __cplusplus
}
#endif
#endif
