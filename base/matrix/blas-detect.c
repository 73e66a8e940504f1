/* Which BLAS the Kaldi in use runs, and which OpenBLAS core (blas-profile.h).
 *
 * The Kaldi program: the first of gmm-est, gmm-sum-accs, copy-feats found on
 * PATH (dynamically linked ELF programs only: a wrapper script is passed
 * over, and so are our own drop-ins of those names, which hold our
 * identification string), else under $KALDI_ROOT/src. Its BLAS: the library the dynamic
 * loader resolves for it, as ldd shows it (the program run with
 * LD_TRACE_LOADED_OBJECTS=1: the loader lists the libraries and exits, so
 * RUNPATH, LD_LIBRARY_PATH and ld.so.cache count as for Kaldi). Its core:
 * openblas_get_corename() of that library, asked in a child process (one of
 * our own programs run as "kaldi-gpu-blas-query", kio_blas_query_main) with
 * this environment and OPENBLAS_NUM_THREADS=1, so that OpenBLAS starts no
 * threads of its own and OPENBLAS_CORETYPE counts as it does for Kaldi.
 * Costs two short child processes, once per process, unless their answer
 * is kept in the private directory for the same program, library and
 * environment (KALDI_GPU_DEV_BLAS_CACHE=0: asked anew every time). */
#include "blas-profile.h"

#include <dlfcn.h>
#include <limits.h>
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/sys/private-dir.h"
#include "base/sys/settings.h"
#include "base/sys/version.h"

extern char **environ;

#define QUERY_NAME "kaldi-gpu-blas-query"

static int g_self_query;  /* kio_program_start ran: our executable answers queries */

__attribute__((format(printf, 3, 4)))
static void setwhy(char *why, size_t n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (why && n) vsnprintf(why, n, fmt, ap);
  va_end(ap);
}

/* 1: a dynamically linked ELF program (it has an interpreter), 0: an ELF
 * without one (static), -1: not an ELF file. */
static int elf_dynamic(const char *path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  unsigned char h[64];
  int r = -1;
  if (read(fd, h, sizeof h) == (ssize_t)sizeof h && !memcmp(h, "\177ELF", 4) && h[4] == 2 &&
      h[5] == 1) {  /* 64-bit, little-endian: the x86-64 Kaldi builds */
    uint64_t phoff;
    uint16_t phentsize, phnum;
    memcpy(&phoff, h + 32, 8);
    memcpy(&phentsize, h + 54, 2);
    memcpy(&phnum, h + 56, 2);
    r = 0;
    for (uint16_t i = 0; i < phnum && phentsize >= 4; i++) {
      uint32_t type;
      if (pread(fd, &type, 4, (off_t)(phoff + (uint64_t)i * phentsize)) != 4) break;
      if (type == 3) { r = 1; break; }  /* PT_INTERP */
    }
  }
  close(fd);
  return r;
}

/* 1: one of our programs ("kaldi-gpu-align " and a version digit in it,
 * as tools/check-recipe.sh tells them), 0: not, or unreadable. */
static int ours(const char *path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  struct stat st;
  int r = 0;
  if (fstat(fd, &st) == 0 && st.st_size > 0) {
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m != MAP_FAILED) {
      static const char id[] = KIO_PLUGIN_NAME " ";
      const char *p = m, *end = p + st.st_size;
      while (!r && (p = memmem(p, (size_t)(end - p), id, sizeof id - 1)) != NULL) {
        p += sizeof id - 1;
        r = p < end && *p >= '0' && *p <= '9';
      }
      munmap(m, (size_t)st.st_size);
    }
  }
  close(fd);
  return r;
}

static const char *const kaldi_progs[] = {"gmm-est", "gmm-sum-accs", "copy-feats"};

int kio_find_kaldi_program(const char *name, char *out, size_t n) {
  const char *path = kio_setting_str(KIO_SET_PATH);
  while (path) {
    const char *end = strchr(path, ':');
    size_t len = end ? (size_t)(end - path) : strlen(path);
    if (snprintf(out, n, "%.*s/%s", (int)len, len ? path : ".", name) < (int)n &&
        access(out, X_OK) == 0 && !ours(out))
      return 1;
    path = end ? end + 1 : NULL;
  }
  return 0;
}

/* The Kaldi program to ask (prog), or 0 with why. */
static int find_kaldi(char *prog, size_t n, char *why, size_t why_len) {
  char skipped[4096] = "";
  const char *path = kio_setting_str(KIO_SET_PATH);
  while (path) {
    const char *end = strchr(path, ':');
    size_t len = end ? (size_t)(end - path) : strlen(path);
    char dir[4096];
    snprintf(dir, sizeof dir, "%.*s", (int)(len < sizeof dir - 1 ? len : sizeof dir - 1), path);
    if (!dir[0]) snprintf(dir, sizeof dir, ".");
    for (size_t k = 0; k < sizeof kaldi_progs / sizeof kaldi_progs[0]; k++) {
      if (snprintf(prog, n, "%s/%s", dir, kaldi_progs[k]) >= (int)n) continue;
      if (access(prog, X_OK) != 0) continue;
      if (elf_dynamic(prog) == 1) {
        if (!ours(prog)) return 1;
        continue;
      }
      if (!skipped[0]) snprintf(skipped, sizeof skipped, "%s", prog);
    }
    path = end ? end + 1 : NULL;
  }
  const char *root = kio_setting_str(KIO_SET_KALDI_ROOT);
  if (root) {
    static const char *const sub[] = {"src/gmmbin/gmm-est", "src/featbin/copy-feats"};
    for (size_t k = 0; k < 2; k++) {
      if (snprintf(prog, n, "%s/%s", root, sub[k]) >= (int)n) continue;
      if (access(prog, X_OK) == 0 && elf_dynamic(prog) == 1) return 1;
    }
  }
  if (skipped[0])
    setwhy(why, why_len, "the reference: %s is no dynamically linked program, and no other Kaldi "
           "program (gmm-est) is on PATH or under KALDI_ROOT", skipped);
  else
    setwhy(why, why_len, "the reference: no Kaldi program (gmm-est) on PATH or under "
           "KALDI_ROOT");
  return 0;
}

/* Runs argv with envp, stdout into out (NUL-terminated, truncated to n),
 * stdin and stderr /dev/null. Returns the exit status, or -1. */
static int run_capture(const char *path, char *const argv[], char *const envp[], char *out,
                       size_t n) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return -1;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid;
  int rc = posix_spawn(&pid, path, &fa, NULL, argv, envp);
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    return -1;
  }
  size_t got = 0;
  for (;;) {
    char buf[4096];
    ssize_t r = read(fds[0], buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    size_t take = (size_t)r < n - 1 - got ? (size_t)r : n - 1 - got;
    memcpy(out + got, buf, take);
    got += take;
  }
  out[got] = 0;
  close(fds[0]);
  int st;
  while (waitpid(pid, &st, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* environ with name=value in place of any name=... (malloc'd array). */
static char **env_with(const char *name, const char *value, char *buf, size_t n) {
  size_t cnt = 0, nl = strlen(name);
  while (environ && environ[cnt]) cnt++;
  char **e = malloc((cnt + 2) * sizeof *e);
  if (!e) return NULL;
  size_t k = 0;
  for (size_t i = 0; i < cnt; i++)
    if (strncmp(environ[i], name, nl) || environ[i][nl] != '=') e[k++] = environ[i];
  snprintf(buf, n, "%s=%s", name, value);
  e[k++] = buf;
  e[k] = NULL;
  return e;
}

/* The BLAS library among the program's, by its name: which kind. */
enum { LIB_NONE, LIB_OPENBLAS, LIB_BLAS, LIB_MKL, LIB_ATLAS, LIB_OTHER };
static int lib_kind(const char *soname) {
  if (!strncmp(soname, "libopenblas", 11)) return LIB_OPENBLAS;
  if (!strncmp(soname, "libmkl", 6)) return LIB_MKL;
  if (!strncmp(soname, "libatlas", 8) || !strncmp(soname, "libsatlas", 9) ||
      !strncmp(soname, "libtatlas", 9))
    return LIB_ATLAS;
  if (!strncmp(soname, "libblis", 7) || !strncmp(soname, "libflexiblas", 12)) return LIB_OTHER;
  if (!strncmp(soname, "libblas.", 8) || !strncmp(soname, "libcblas.", 9)) return LIB_BLAS;
  return LIB_NONE;
}

/* From the loader's list: the BLAS the program gets (lib: its path, or
 * "not found"; soname: its name). Prefers OpenBLAS, then a generic libblas
 * (which may be OpenBLAS under another name), then the rest. */
static int pick_blas(char *list, char *soname, size_t sn, char *lib, size_t ln) {
  int best = LIB_NONE;
  static const int rank[] = {0, 5, 4, 3, 3, 2};
  for (char *line = strtok(list, "\n"); line; line = strtok(NULL, "\n")) {
    while (*line == ' ' || *line == '\t') line++;
    char name[512], target[4096] = "";
    if (sscanf(line, "%511s => %4095s", name, target) < 1) continue;
    int k = lib_kind(name);
    if (k == LIB_NONE || rank[k] <= rank[best]) continue;
    best = k;
    snprintf(soname, sn, "%s", name);
    char real[4096];
    if (!strcmp(target, "not")) snprintf(lib, ln, "not found");
    else if (target[0] == '/' && realpath(target, real)) snprintf(lib, ln, "%s", real);
    else snprintf(lib, ln, "%s", target[0] == '/' ? target : name);
  }
  return best;
}

/* Asks lib for its OpenBLAS core (and configuration line): 0 with core
 * set, 3 when it is no OpenBLAS, else failure. */
static int ask_in_process(const char *lib, kio_blas_found *f);

static int ask_core(const char *lib, kio_blas_found *f) {
  if (!g_self_query) return ask_in_process(lib, f);  /* not one of our programs: a library user */
  char ebuf[64], out[1024], name[] = QUERY_NAME, libc[4096];
  char **envp = env_with("OPENBLAS_NUM_THREADS", "1", ebuf, sizeof ebuf);
  if (!envp) return 2;
  snprintf(libc, sizeof libc, "%s", lib);
  char *argv[] = {name, libc, NULL};  /* our own program, answering as the query */
  int rc = run_capture("/proc/self/exe", argv, envp, out, sizeof out);
  free(envp);
  if (rc == -1) return ask_in_process(lib, f);  /* could not run: ask here */
  if (rc != 0) return rc;
  for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
    if (!strncmp(line, "core ", 5)) snprintf(f->core, sizeof f->core, "%s", line + 5);
    if (!strncmp(line, "config ", 7)) snprintf(f->config, sizeof f->config, "%s", line + 7);
  }
  return f->core[0] ? 0 : 2;
}

/* The same in this process (OpenBLAS then starts its threads here). */
static int ask_in_process(const char *lib, kio_blas_found *f) {
  void *h = dlopen(lib, RTLD_LAZY | RTLD_LOCAL);
  if (!h) return 2;
  const char *(*core)(void) = (const char *(*)(void))dlsym(h, "openblas_get_corename");
  const char *(*cfg)(void) = (const char *(*)(void))dlsym(h, "openblas_get_config");
  if (!core) return 3;
  snprintf(f->core, sizeof f->core, "%s", core());
  if (cfg) snprintf(f->config, sizeof f->config, "%s", cfg());
  return 0;
}

/* What the two child processes found: the loader's BLAS (kind, soname,
 * f->lib) and, for an OpenBLAS, ask_core's answer (f->core, f->config). */
typedef struct {
  int listed;  /* the loader listed the program's libraries */
  int kind;
  char soname[512];
  int ask_rc;  /* ask_core's return; -1: not asked */
} probe;

static void probe_run(kio_blas_found *f, probe *pr) {
  memset(pr, 0, sizeof *pr);
  pr->ask_rc = -1;
  char ebuf[64], list[16384];
  char **envp = env_with("LD_TRACE_LOADED_OBJECTS", "1", ebuf, sizeof ebuf);
  char *argv[] = {f->prog, NULL};
  int rc = envp ? run_capture(f->prog, argv, envp, list, sizeof list) : -1;
  free(envp);
  if (rc != 0) return;
  pr->listed = 1;
  pr->kind = pick_blas(list, pr->soname, sizeof pr->soname, f->lib, sizeof f->lib);
  if ((pr->kind == LIB_OPENBLAS || pr->kind == LIB_BLAS) && strcmp(f->lib, "not found"))
    pr->ask_rc = ask_core(f->lib, f);
}

/* ---- the probe's answer kept in the private directory ----
 * Keyed by everything the loader and OpenBLAS decide from: the program
 * (path and file identity: its RUNPATH), the loader's cache, LD_LIBRARY_PATH
 * (and its directories' change times), LD_PRELOAD, OPENBLAS_CORETYPE and
 * this boot (the CPU); the library found is checked again on use, and an
 * answer older than an hour is asked again. */
enum { CACHE_MAX_AGE_S = 3600 };

static uint64_t hash_stat(uint64_t h, const char *path) {
  struct stat st;
  if (stat(path, &st) != 0) return kio_fnv1a(h, "\1", 1);
  long long v[5] = {(long long)st.st_dev, (long long)st.st_ino, (long long)st.st_size,
                    (long long)st.st_mtim.tv_sec, (long long)st.st_mtim.tv_nsec};
  return kio_fnv1a(h, v, sizeof v);
}

static uint64_t hash_str(uint64_t h, const char *s) {
  return s ? kio_fnv1a(kio_fnv1a(h, s, strlen(s)), "\0", 1) : kio_fnv1a(h, "\1", 1);
}

/* The library's identity as the cache keeps it. */
static void lib_id(const char *lib, char *out, size_t n) {
  struct stat st;
  if (stat(lib, &st) != 0) { snprintf(out, n, "-"); return; }
  snprintf(out, n, "%llu.%llu.%lld.%lld.%ld", (unsigned long long)st.st_dev,
           (unsigned long long)st.st_ino, (long long)st.st_size, (long long)st.st_mtim.tv_sec,
           (long)st.st_mtim.tv_nsec);
}

static int cache_file(const char *prog, char *out, size_t n) {
  if (!kio_setting_flag(KIO_SET_DEV_BLAS_CACHE, 1)) return -1;
  char dir[PATH_MAX], buf[256];
  if (kio_private_dir(dir, sizeof dir, NULL, 0) != 0) return -1;
  uint64_t h = hash_str(KIO_FNV_START, "blas-probe 1");
  int k = kio_read_small("/proc/sys/kernel/random/boot_id", buf, sizeof buf);
  if (k <= 0) return -1;  /* no boot identity: the CPU cannot be told */
  h = hash_str(h, buf);
  h = hash_str(hash_stat(h, prog), prog);
  h = hash_stat(h, "/etc/ld.so.cache");
  static const kio_setting env[] = {KIO_SET_LD_LIBRARY_PATH, KIO_SET_LD_PRELOAD,
                                    KIO_SET_OPENBLAS_CORETYPE};
  for (size_t i = 0; i < sizeof env / sizeof env[0]; i++) h = hash_str(h, kio_setting_str(env[i]));
  const char *lp = kio_setting_str(KIO_SET_LD_LIBRARY_PATH);
  while (lp && *lp) {  /* a library added to one of them changes its time */
    const char *end = strchr(lp, ':');
    size_t len = end ? (size_t)(end - lp) : strlen(lp);
    char d[PATH_MAX];
    snprintf(d, sizeof d, "%.*s", (int)(len < sizeof d - 1 ? len : sizeof d - 1), lp);
    h = hash_stat(h, d[0] ? d : ".");
    lp = end ? end + 1 : NULL;
  }
  return snprintf(out, n, "%s/blas-%016llx", dir, (unsigned long long)h) < (int)n ? 0 : -1;
}

/* One "name value" line of the cache text. */
static int field(const char *text, const char *name, char *out, size_t n) {
  size_t nl = strlen(name);
  for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
    if (!strncmp(p, name, nl) && p[nl] == ' ') {
      const char *v = p + nl + 1, *e = strchr(v, '\n');
      size_t len = e ? (size_t)(e - v) : strlen(v);
      if (len >= n) return 0;
      memcpy(out, v, len);
      out[len] = '\0';
      return 1;
    }
  }
  return 0;
}

static int cache_read(const char *path, kio_blas_found *f, probe *pr) {
  struct stat st;
  char text[8192], v[64], id[128];
  if (stat(path, &st) != 0 || time(NULL) - st.st_mtime > CACHE_MAX_AGE_S ||
      time(NULL) < st.st_mtime || kio_read_small(path, text, sizeof text) <= 0)
    return 0;
  memset(pr, 0, sizeof *pr);
  pr->listed = 1;
  if (!field(text, "kind", v, sizeof v) || sscanf(v, "%d", &pr->kind) != 1 ||
      !field(text, "ask", v, sizeof v) || sscanf(v, "%d", &pr->ask_rc) != 1 ||
      !field(text, "soname", pr->soname, sizeof pr->soname) ||
      !field(text, "lib", f->lib, sizeof f->lib) || !field(text, "libid", v, sizeof v))
    return 0;
  field(text, "core", f->core, sizeof f->core);
  field(text, "config", f->config, sizeof f->config);
  lib_id(f->lib, id, sizeof id);
  if (strcmp(id, v)) {  /* the library changed: ask again */
    f->lib[0] = f->core[0] = f->config[0] = '\0';
    return 0;
  }
  return 1;
}

static void cache_write(const char *path, const kio_blas_found *f, const probe *pr) {
  /* only settled answers: a run that failed may work next time */
  if (!pr->listed || !strcmp(f->lib, "not found") || !f->lib[0] ||
      (pr->ask_rc != -1 && pr->ask_rc != 0 && pr->ask_rc != 3) || strchr(f->lib, '\n') ||
      strchr(f->config, '\n'))
    return;
  char id[128], text[8192];
  lib_id(f->lib, id, sizeof id);
  if (!strcmp(id, "-")) return;
  snprintf(text, sizeof text, "kind %d\nask %d\nsoname %s\nlib %s\nlibid %s\ncore %s\nconfig %s\n",
           pr->kind, pr->ask_rc, pr->soname, f->lib, id, f->core, f->config);
  kio_write_atomic(path, text);
}

int kio_blas_detect(kio_blas_found *f, char *why, size_t why_len, int *how) {
  memset(f, 0, sizeof *f);
  *how = KIO_BLAS_NO_KALDI;
  if (!find_kaldi(f->prog, sizeof f->prog, why, why_len)) return -1;
  const char *base = strrchr(f->prog, '/') ? strrchr(f->prog, '/') + 1 : f->prog;
  *how = KIO_BLAS_UNMATCHED;
  probe pr;
  char cpath[PATH_MAX + 64];
  int cached = cache_file(f->prog, cpath, sizeof cpath) == 0;
  if (!cached || !cache_read(cpath, f, &pr)) {
    probe_run(f, &pr);
    if (cached) cache_write(cpath, f, &pr);
  }
  if (!pr.listed) {
    setwhy(why, why_len, "the reference: the dynamic loader could not list the libraries of %s",
           f->prog);
    return -1;
  }
  int kind = pr.kind;
  const char *soname = pr.soname;
  char what[2 * sizeof f->prog + 8];
  snprintf(what, sizeof what, "%s at %s", base, f->prog);
  if (kind == LIB_NONE) {
    setwhy(why, why_len, "the reference: %s loads no BLAS library we know (BLAS linked into the "
           "program?)", what);
    return -1;
  }
  if (!strcmp(f->lib, "not found")) {
    setwhy(why, why_len, "the reference: the loader finds no %s for %s", soname, what);
    return -1;
  }
  if (kind == LIB_MKL || kind == LIB_ATLAS || kind == LIB_OTHER) {
    setwhy(why, why_len, "the reference: %s uses %s (%s), whose rounding we do not reproduce",
           what, kind == LIB_MKL ? "Intel MKL" : kind == LIB_ATLAS ? "ATLAS" : "BLIS/FlexiBLAS",
           f->lib);
    return -1;
  }
  int rc = pr.ask_rc;
  if (rc == 3) {
    setwhy(why, why_len, "the reference: %s uses %s, which is no OpenBLAS (%s)", what, f->lib,
           soname);
    return -1;
  }
  if (rc != 0) {
    setwhy(why, why_len, "the reference: %s of %s could not be asked for its OpenBLAS core",
           f->lib, what);
    return -1;
  }
  char ver[64] = "OpenBLAS", v[48];
  if (sscanf(f->config, "OpenBLAS %47s", v) == 1) snprintf(ver, sizeof ver, "OpenBLAS %s", v);
  int p = kio_blas_profile_parse(f->core);
  if (p < 0 || !strcasecmp(f->core, "plain")) {
    char core[80];
    snprintf(core, sizeof core, "%s", f->core);
    setwhy(why, why_len, "the reference: %s at %s reports core %s, whose kernels we do not "
           "reproduce (SkylakeX, Cooperlake, SapphireRapids, Haswell, Zen, Sandybridge, "
           "Nehalem, Prescott)", ver, f->lib, core);
    return -1;
  }
  *how = KIO_BLAS_BY_KALDI;
  char tail[128] = "";
  if (strcmp(ver, "OpenBLAS") && strcmp(ver, "OpenBLAS 0.3.21"))
    snprintf(tail, sizeof tail, "; orders checked on OpenBLAS 0.3.21");
  char detail[4600];
  snprintf(detail, sizeof detail, "%s reports core %s%s", ver, f->core, tail);
  setwhy(why, why_len, "%s of %s: %s", f->lib, what, detail);
  return p;
}

void kio_blas_query_main(int argc, char **argv) {
  g_self_query = 1;
  if (argc < 2 || !argv[0]) return;
  const char *base = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
  if (strcmp(base, QUERY_NAME)) return;
  void *h = dlopen(argv[1], RTLD_LAZY | RTLD_LOCAL);
  if (!h) _exit(2);
  const char *(*core)(void) = (const char *(*)(void))dlsym(h, "openblas_get_corename");
  const char *(*cfg)(void) = (const char *(*)(void))dlsym(h, "openblas_get_config");
  if (!core) _exit(3);
  printf("core %s\n", core());
  if (cfg) printf("config %s\n", cfg());
  fflush(stdout);
  _exit(0);
}
