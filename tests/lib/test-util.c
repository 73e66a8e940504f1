#include "test-util.h"

#include "base/sys/log.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

unsigned char *tu_read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 1 << 16, n = 0;
  unsigned char *buf = malloc(cap);
  size_t got;
  while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
    n += got;
    if (n == cap) {
      unsigned char *nb = realloc(buf, cap *= 2);
      if (!nb) { free(buf); buf = NULL; }
      else buf = nb;
    }
  }
  fclose(f);
  if (len) *len = n;
  return buf;
}

int tu_files_equal(const char *a, const char *b) {
  size_t la, lb;
  unsigned char *x = tu_read_file(a, &la), *y = tu_read_file(b, &lb);
  int eq = x && y && la == lb && memcmp(x, y, la) == 0;
  free(x);
  free(y);
  return eq;
}

static char tmp_dir[256];
static pid_t tmp_dir_owner;

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  remove(path);
  return 0;
}

/* Check forks a child per test and the children inherit this handler: only
 * the process that made the folder removes it, when it exits. */
static void remove_tmp_dir(void) {
  if (tmp_dir[0] && getpid() == tmp_dir_owner) nftw(tmp_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

const char *tu_tmp_path(const char *name) {
  static char bufs[8][512];
  static int next;
  char *dir = tmp_dir;
  if (!dir[0]) {
    snprintf(dir, sizeof tmp_dir, "/tmp/kio-test-%d", (int)getpid());
    if (mkdir(dir, 0700) == 0) {
      tmp_dir_owner = getpid();
      atexit(remove_tmp_dir);
    }
  }
  char *b = bufs[next++ & 7];
  snprintf(b, 512, "%s/%s", dir, name);
  return b;
}

int tu_run(const char *cmd, char **out) {
  char *full = malloc(strlen(cmd) + 16);
  sprintf(full, "(%s) 2>&1", cmd);
  FILE *p = popen(full, "r");
  free(full);
  if (!p) return -1;
  size_t cap = 4096, n = 0;
  char *buf = malloc(cap);
  int c;
  while ((c = fgetc(p)) != EOF) {
    if (n + 1 >= cap) buf = realloc(buf, cap *= 2);
    buf[n++] = (char)c;
  }
  buf[n] = 0;
  int st = pclose(p);
  if (out) *out = buf;
  else free(buf);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

int tu_run_suite(Suite *s) {
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int nf = srunner_ntests_failed(sr);
  srunner_free(sr);
  return nf == 0 ? 0 : 1;
}

#if KIO_HAVE_CUDA
int kio_cuda_device_count(void); /* device/cuda-util.cu */
#endif

int tu_gpu_available(void) {
  const char *why = "built without CUDA (./configure found no nvcc/cuBLAS)";
#if KIO_HAVE_CUDA
  pid_t pid = fork();
  if (pid == 0) _exit(kio_cuda_device_count() > 0 ? 0 : 1);
  int st = 0;
  waitpid(pid, &st, 0);
  if (WIFEXITED(st) && WEXITSTATUS(st) == 0) return 1;
  why = "no usable CUDA device on this machine";
#endif
  printf("SKIP: %s\n", why);
  if (getenv("KIO_REQUIRE_GPU") && atoi(getenv("KIO_REQUIRE_GPU"))) {
    printf("KIO_REQUIRE_GPU=1: a GPU was required\n");
    exit(1);
  }
  return 0;
}

tu_logcap tu_cap;

static void tu_logcap_handler(int level, const char *func, const char *file, int line,
                              const char *msg, void *user) {
  (void)func; (void)file; (void)line; (void)user;
  tu_cap.n++;
  if (level == KIO_LOG_WARNING) tu_cap.warnings++;
  if (level == KIO_LOG_ERROR) {
    tu_cap.errors++;
    snprintf(tu_cap.last_error, sizeof tu_cap.last_error, "%s", msg);
  }
  snprintf(tu_cap.last, sizeof tu_cap.last, "%s", msg);
}

void tu_logcap_start(void) {
  memset(&tu_cap, 0, sizeof tu_cap);
  kio_log_set_handler(tu_logcap_handler, NULL);
}

const char *tu_file_variant(const char *src, long len, long at, int c) {
  size_t n;
  unsigned char *b = tu_read_file(src, &n);
  ck_assert_ptr_nonnull(b);
  if (at >= 0) b[at] = (unsigned char)c;
  const char *p = tu_tmp_path("variant.ark");
  FILE *f = fopen(p, "wb");
  fwrite(b, 1, (size_t)len, f);
  fclose(f);
  free(b);
  return p;
}

void tu_text_put(tu_text *t, const char *s) {
  size_t k = strlen(s);
  if (t->n + k + 1 > t->cap) {
    t->cap = (t->n + k + 1) * 2;
    t->s = realloc(t->s, t->cap);
  }
  memcpy(t->s + t->n, s, k + 1);
  t->n += k;
}

void tu_log_into_text(int level, const char *func, const char *file, int line, const char *msg,
                      void *user) {
  char b[4096];
  snprintf(b, sizeof b, "%d %s %s:%d %s\n", level, func, file, line, msg);
  tu_text_put(user, b);
}

static int tu_saved_fd = -1;

void tu_stderr_start(void) {
  fflush(stderr);
  tu_saved_fd = dup(2);
  FILE *f = fopen(tu_tmp_path("stderr.txt"), "w");
  dup2(fileno(f), 2);
  fclose(f);
}

char *tu_stderr_end(void) {
  fflush(stderr);
  dup2(tu_saved_fd, 2);
  close(tu_saved_fd);
  size_t n = 0;
  unsigned char *b = tu_read_file(tu_tmp_path("stderr.txt"), &n);
  char *s = malloc(n + 1);
  if (b) memcpy(s, b, n);
  s[n] = 0;
  free(b);
  return s;
}
