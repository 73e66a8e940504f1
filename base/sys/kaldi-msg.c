/* The table of Kaldi's messages (kaldi-msg.h) and the calls that print them. */
#include "kaldi-msg.h"

#include <stdarg.h>

const kio_kaldi_msg kio_kaldi_msgs[KIO_KM_COUNT] = {
#define KIO_KMSG(id, lv, func, file, line, fmt) {#id, KIO_KLV_##lv, func, file, line, fmt},
#include "base/sys/kaldi-messages.def"
#undef KIO_KMSG
};

static void vlog_id(kio_kaldi_id id, const char *fmt, va_list ap) {
  const kio_kaldi_msg *m = &kio_kaldi_msgs[id];
  kio_vlogf(m->level, m->func, m->file, m->line, fmt, ap);
}

void kio_kaldi_logf(kio_kaldi_id id, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vlog_id(id, fmt, ap);
  va_end(ap);
}

void kio_kaldi_logf_as(const char *prog, kio_kaldi_id id, const char *fmt, ...) {
  const char *old = kio_log_thread_program();
  kio_log_set_thread_program(prog);
  va_list ap;
  va_start(ap, fmt);
  vlog_id(id, fmt, ap);
  va_end(ap);
  kio_log_set_thread_program(old);
}

void kio_kaldi_print(kio_kaldi_id id, const char *msg) {
  const kio_kaldi_msg *m = &kio_kaldi_msgs[id];
  kio_logf(m->level, m->func, m->file, m->line, "%s", msg);
}
