#include "private-dir.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/sys/settings.h"

int kio_private_dir(char *dir, size_t n, char *why, size_t why_len) {
  const char *e = kio_setting_str(KIO_SET_SERVICE_DIR);
  const char *xdg = kio_setting_str(KIO_SET_XDG_RUNTIME_DIR);
  struct stat st;
  if (e && *e) snprintf(dir, n, "%s", e);
  else if (xdg && *xdg && stat(xdg, &st) == 0 && S_ISDIR(st.st_mode))
    snprintf(dir, n, "%s/kaldi-gpu", xdg);
  else
    snprintf(dir, n, "/tmp/kaldi-gpu-%u", (unsigned)getuid());
  if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
    if (why && why_len) snprintf(why, why_len, "cannot create %s: %s", dir, strerror(errno));
    return -1;
  }
  if (lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != getuid() ||
      (st.st_mode & 077)) {
    if (why && why_len)
      snprintf(why, why_len, "%s is not a private directory of this user (0700)", dir);
    return -1;
  }
  char abs[PATH_MAX];  /* absolute: the service runs from / */
  if (dir[0] != '/' && realpath(dir, abs)) snprintf(dir, n, "%s", abs);
  return 0;
}

int kio_read_small(const char *path, char *buf, size_t n) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  size_t got = 0;
  while (got < n - 1) {
    ssize_t r = read(fd, buf + got, n - 1 - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += (size_t)r;
  }
  close(fd);
  buf[got] = '\0';
  return (int)got;
}

void kio_write_atomic(const char *path, const char *text) {
  char tmp[PATH_MAX + 32];
  snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return;
  size_t n = strlen(text);
  int ok = write(fd, text, n) == (ssize_t)n;
  close(fd);
  if (!ok || rename(tmp, path) != 0) unlink(tmp);
}

uint64_t kio_fnv1a(uint64_t h, const void *p, size_t n) {
  const uint8_t *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}
