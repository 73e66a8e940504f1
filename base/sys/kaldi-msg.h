/* The Kaldi messages we reproduce: one table (kaldi-messages.def: an id, the
 * level, Kaldi's function, source file and line, the printf format) and one
 * macro that prints them, so that every line in Kaldi's format that claims
 * a place in Kaldi's sources comes from the table.
 *
 *   KIO_KALDI(ACC_NO_ALI, key);            the line, in this thread's program
 *   KIO_KALDI_AS(prog, CMVN_FLOOR, buf);   as program prog (a stand-in of
 *                                          another program; restored after)
 *
 * Each id has a format array of its own (kio_kmf_ID), so the compiler checks
 * the arguments of every use against the table's format. Our own messages
 * (no Kaldi counterpart) stay KIO_LOG/KIO_WARN/KIO_ERROR (log.h). */
#ifndef KIO_KALDI_MSG_H
#define KIO_KALDI_MSG_H

#include "base/sys/log.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The table's LEVEL column. */
enum {
  KIO_KLV_LOG = KIO_LOG_INFO,
  KIO_KLV_WARNING = KIO_LOG_WARNING,
  KIO_KLV_ERROR = KIO_LOG_ERROR,
  KIO_KLV_ASSERT = KIO_LOG_ASSERT,
  KIO_KLV_VLOG1 = 1, /* VLOG[1]: print only with --verbose >= 1 */
  KIO_KLV_VLOG2 = 2  /* VLOG[2]: print only with --verbose >= 2 */
};

typedef enum {
#define KIO_KMSG(id, lv, func, file, line, fmt) KIO_KM_##id,
#include "base/sys/kaldi-messages.def"
#undef KIO_KMSG
  KIO_KM_COUNT
} kio_kaldi_id;

typedef struct {
  const char *id;  /* "ACC_NO_ALI" */
  int level;       /* KIO_LOG_* */
  const char *func, *file;
  int line;
  const char *fmt;
} kio_kaldi_msg;

/* The table, indexed by kio_kaldi_id. */
extern const kio_kaldi_msg kio_kaldi_msgs[KIO_KM_COUNT];

/* The format of each id as an array the compiler can check calls against. */
#define KIO_KMSG(id, lv, func, file, line, fmt) static const char kio_kmf_##id[] = fmt;
#include "base/sys/kaldi-messages.def"
#undef KIO_KMSG

/* Message id with its format (the table's, passed by the macros). */
void kio_kaldi_logf(kio_kaldi_id id, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The same as program prog (NULL: the process's), the thread's program
 * restored after. */
void kio_kaldi_logf_as(const char *prog, kio_kaldi_id id, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Message id with its text already formatted (a line made in one thread and
 * printed in another). */
void kio_kaldi_print(kio_kaldi_id id, const char *msg);

#define KIO_KALDI(id, ...) kio_kaldi_logf(KIO_KM_##id, kio_kmf_##id, ##__VA_ARGS__)
#define KIO_KALDI_AS(prog, id, ...) \
  kio_kaldi_logf_as((prog), KIO_KM_##id, kio_kmf_##id, ##__VA_ARGS__)

#ifdef __cplusplus
}
#endif
#endif
