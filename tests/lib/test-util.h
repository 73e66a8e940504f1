/* Helpers shared by the Check suites. Suites run with cwd = tests/data. */
#ifndef TEST_UTIL_H
#define TEST_UTIL_H
#include <check.h>
#include <stddef.h>
#include <stdint.h>

/* Whole file into a malloc'd buffer (NULL on failure); *len set. */
unsigned char *tu_read_file(const char *path, size_t *len);
/* 1 if the two files have identical bytes. */
int tu_files_equal(const char *a, const char *b);
/* A fresh path under a per-process temp dir (static buffer, rotates over 8). */
const char *tu_tmp_path(const char *name);
/* Runs a shell command, returns its exit status (0..255) and, if out != NULL,
 * its combined stdout+stderr (malloc'd). */
int tu_run(const char *cmd, char **out);
/* Runs the suite: srunner with CK_FORK default; returns the process exit code. */
int tu_run_suite(Suite *s);
/* GPU suites: 1 if a CUDA device is usable, checked in a child process so
 * CUDA is never initialised before Check forks. When none is found prints
 * "SKIP: <why>" and returns 0 (KIO_REQUIRE_GPU=1 makes that a failure). */
int tu_gpu_available(void);
#define TU_EXIT_SKIP 77

/* Log lines captured through kio_log_set_handler (nothing is printed). */
typedef struct { int n, warnings, errors; char last[2048], last_error[2048]; } tu_logcap;
extern tu_logcap tu_cap;
/* Clears tu_cap and installs the capturing handler. */
void tu_logcap_start(void);
/* The first len bytes of file src, with the byte at offset at (if >= 0) set
 * to c, as a temp file (tu_tmp_path("variant.ark")): cut and corrupted
 * archives for the readers' tests. */
const char *tu_file_variant(const char *src, long len, long at, int c);
/* A growing string; tu_log_into_text, a kio_log handler, appends each log
 * line to the tu_text given as its user ("LEVEL FUNC FILE:LINE MSG\n"). */
typedef struct { char *s; size_t n, cap; } tu_text;
void tu_text_put(tu_text *t, const char *s);
void tu_log_into_text(int level, const char *func, const char *file, int line, const char *msg,
                      void *user);
/* Redirects stderr (fd 2) to a temp file / restores it and returns what was
 * written (malloc'd), for tests of the printed format itself. */
void tu_stderr_start(void);
char *tu_stderr_end(void);
#endif
