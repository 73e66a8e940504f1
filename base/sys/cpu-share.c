/* Default thread counts under concurrent jobs: see cpu-share.h. */
#include "cpu-share.h"

#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

int kio_cpu_count(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

int kio_cpu_instances(void) {
  struct stat self;
  if (stat("/proc/self/exe", &self) != 0) return 1;
  DIR *d = opendir("/proc");
  if (!d) return 1;
  int n = 0;
  struct dirent *e;
  char path[64];
  while ((e = readdir(d)) != NULL) {
    if (!isdigit((unsigned char)e->d_name[0])) continue;
    snprintf(path, sizeof path, "/proc/%.20s/exe", e->d_name);
    struct stat st;
    /* stat follows the link: the executable file itself. */
    if (stat(path, &st) == 0 && st.st_dev == self.st_dev && st.st_ino == self.st_ino) n++;
  }
  closedir(d);
  return n > 0 ? n : 1;
}

int kio_cpu_share(int max_threads) {
  int share = kio_cpu_count() / kio_cpu_instances();
  if (share < 1) share = 1;
  if (max_threads > 0 && share > max_threads) share = max_threads;
  return share;
}
