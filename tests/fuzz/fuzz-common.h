/* Shared bits of the libFuzzer harnesses (tests/fuzz/fuzz_*.c). */
#ifndef KIO_FUZZ_COMMON_H
#define KIO_FUZZ_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/sys/log.h"

/* Library messages are expected on bad input: count them, print nothing. */
static inline void fuzz_quiet_log(int level, const char *func, const char *file, int line,
                           const char *msg, void *user) {
  (void)level; (void)func; (void)file; (void)line; (void)msg; (void)user;
}

static inline void fuzz_init(void) {
  static int done;
  if (done) return;
  done = 1;
  if (!getenv("FUZZ_VERBOSE")) kio_log_set_handler(fuzz_quiet_log, NULL);
}

/* With FUZZ_VERBOSE set (replaying one input by hand), says why a read
 * failed. */
static inline void fuzz_report(const char *what, int rc) {
  if (getenv("FUZZ_VERBOSE"))
    fprintf(stderr, "%s: %s%s\n", what, rc == KIO_OK ? "OK" : "failed: ",
            rc == KIO_OK ? "" : kio_last_error());
}

/* A read-only FILE* over a copy of the input (fmemopen refuses size 0 on
 * some libcs, so an empty input gets a 1-byte buffer and is read as EOF by
 * opening it on a zero-length prefix of that buffer via "r" after seek). */
static inline FILE *fuzz_open_mem(const uint8_t *data, size_t size, void **copy) {
  *copy = malloc(size ? size : 1);
  if (!*copy) return NULL;
  if (size) memcpy(*copy, data, size);
  FILE *f = fmemopen(*copy, size ? size : 1, "rb");
  if (f && !size) fseek(f, 0, SEEK_END);
  return f;
}

static inline void fuzz_close_mem(FILE *f, void *copy) {
  if (f) fclose(f);
  free(copy);
}

/* Writes the input to a per-process temporary file and returns its path. */
static inline const char *fuzz_temp_file(const uint8_t *data, size_t size, const char *suffix) {
  static char path[256];
  const char *dir = getenv("TMPDIR");
  snprintf(path, sizeof path, "%s/kio-fuzz-%ld%s", dir && *dir ? dir : "/tmp",
           (long)getpid(), suffix);
  FILE *f = fopen(path, "wb");
  if (!f) abort();
  if (size && fwrite(data, 1, size, f) != size) abort();
  if (fclose(f) != 0) abort();
  return path;
}

#define FUZZ_CHECK(cond)                                                        \
  do {                                                                          \
    if (!(cond)) {                                                              \
      fprintf(stderr, "FUZZ_CHECK failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__); \
      abort();                                                                  \
    }                                                                           \
  } while (0)

#endif
