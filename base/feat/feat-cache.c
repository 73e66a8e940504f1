/* The feature chain's output kept between runs (feat-cache.h).
 *
 * Key: the chain as parsed (every stage and option value), the rounding
 * (profile and OpenBLAS thread count: transform-feats' product depends on
 * both; the feature threads do not change a bit), this build's feature code
 * (KIO_FEAT_CODE_ID, a hash of base/'s sources made by the Makefile), and
 * every input file's absolute path, device, inode, size, mtime and ctime
 * (a rewrite always changes ctime: no user can set it back). The scp files
 * are read to find the archives they name; an input that is not a regular
 * file (a pipe, standard input) makes the chain not cacheable. Only chains
 * with a transform-feats stage are kept (kio_fcache_worth: why).
 *
 * Entry file DIR/<fnv1a of the key>.fc, 8-byte aligned throughout:
 *   header (magic, version, sizes, checksums), the key text (compared in
 *   full on every hit: the hash only names the file), the stages' counts,
 *   then per output entry: keylen, rows, cols, 0, key, data.
 * A hit checks everything (magic, version, key, sizes, a checksum of every
 * byte) before it hands out anything; any failure removes the entry and
 * the chain runs as on a miss. Writers write a temporary file and rename
 * it into place under DIR/lock (flock), after removing entries not used
 * for a day and, oldest use first, those the budget has no room for. A hit
 * sets its entry's mtime: the order of use. */
#include "feat-cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "feat-hash.h"
#include "feat-pool.h"
#include "base/io/io.h"
#include "base/io/table.h"
#include "base/sys/log.h"
#include "base/sys/private-dir.h"
#include "base/sys/settings.h"
#include "base/sys/version.h"

#ifndef KIO_FEAT_CODE_ID
#define KIO_FEAT_CODE_ID __DATE__ " " __TIME__
#endif

#define FC_MAGIC "KGAFCACH"
#define FC_VERSION 1u
#define FC_MAX_AGE_S (24 * 3600)
#define PAD8(n) (((n) + 7) & ~(uint64_t)7)

typedef struct {
  char magic[8];
  uint32_t version, nstages;
  uint64_t key_len, nentries, file_size, body_sum, hdr_sum;
} fc_header;

typedef struct {
  int64_t num_done, num_err;
  int32_t logdet_type, had_input;
  double tot_t, tot_logdet;
} fc_counts;

typedef struct {
  uint32_t key_len;
  int32_t rows, cols;
  uint32_t zero;
} fc_entry;

typedef struct { char *s; size_t n, cap; int oom; } sbuf;

struct kio_fcache {
  char path[PATH_MAX + 32], tmp[PATH_MAX + 32], dir[PATH_MAX];
  sbuf key;
  int nstages;
  uint64_t budget;
  /* miss */
  FILE *w;
  int anon;  /* w has no name yet (O_TMPFILE): a writer that dies leaves nothing */
  uint64_t written, nentries, sum;
  /* hit */
  int hit;
  int threads, hash_threads;  /* the threads a hit's checksum may use, and used */
  const unsigned char *map;
  size_t map_len, pos, body;
};

static void sb_add(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_add(sbuf *b, const char *fmt, ...) {
  if (b->oom) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? b->cap - b->n : 0, fmt, ap);
    va_end(ap);
    if (n < 0) { b->oom = 1; return; }
    if (b->s && b->n + (size_t)n < b->cap) { b->n += (size_t)n; return; }
    size_t cap = (b->cap + (size_t)n + 1) * 2;
    char *s = realloc(b->s, cap);
    if (!s) { b->oom = 1; return; }
    b->s = s;
    b->cap = cap;
  }
}

/* ---- the key ---- */

typedef struct { char **v; size_t n, cap; } strv;

static int strv_add(strv *f, const char *s, size_t n) {
  if (f->n == f->cap) {
    size_t cap = f->cap ? f->cap * 2 : 16;
    char **v = realloc(f->v, cap * sizeof *v);
    if (!v) return KIO_ERR;
    f->v = v;
    f->cap = cap;
  }
  if (!(f->v[f->n] = strndup(s, n))) return KIO_ERR;
  f->n++;
  return KIO_OK;
}

static void strv_free(strv *f) {
  for (size_t i = 0; i < f->n; i++) free(f->v[i]);
  free(f->v);
}

/* An rxfilename the chain reads: its file, or why it cannot be cached. */
static int add_rx(strv *f, const char *rx, size_t n, char *why, size_t wl) {
  char tmp[PATH_MAX];
  if (n >= sizeof tmp) { snprintf(why, wl, "a file name too long"); return KIO_ERR; }
  memcpy(tmp, rx, n);
  tmp[n] = '\0';
  switch (kio_classify_rxfilename(tmp)) {
    case KIO_RX_FILE: break;
    case KIO_RX_OFFSET: n = (size_t)(strrchr(tmp, ':') - tmp); break;
    default: snprintf(why, wl, "input not a file: %.200s", tmp); return KIO_ERR;
  }
  return strv_add(f, tmp, n) == KIO_OK ? KIO_OK : (snprintf(why, wl, "out of memory"), KIO_ERR);
}

/* An rspecifier's file and, for an scp, every file its lines name. */
static int add_rspec(strv *f, const char *rspec, char *why, size_t wl) {
  kio_rspec r;
  if (kio_parse_rspecifier(rspec, &r) != KIO_OK) {
    snprintf(why, wl, "rspecifier not understood: %.200s", rspec);
    return KIO_ERR;
  }
  if (kio_classify_rxfilename(r.filename) != KIO_RX_FILE) {
    snprintf(why, wl, "input not a file: %.200s", r.filename);
    return KIO_ERR;
  }
  if (add_rx(f, r.filename, strlen(r.filename), why, wl) != KIO_OK) return KIO_ERR;
  if (r.kind != KIO_SPEC_SCRIPT) return KIO_OK;
  FILE *s = fopen(r.filename, "r");
  if (!s) { snprintf(why, wl, "cannot read %.200s", r.filename); return KIO_ERR; }
  char *line = NULL;
  size_t cap = 0;
  ssize_t len;
  int ret = KIO_OK;
  while (ret == KIO_OK && (len = getline(&line, &cap, s)) >= 0) {
    char *p = line, *e = line + len;
    while (p < e && (*p == ' ' || *p == '\t')) p++;
    while (p < e && *p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') p++;  /* the key */
    while (p < e && (*p == ' ' || *p == '\t')) p++;
    while (e > p && (e[-1] == '\n' || e[-1] == '\r' || e[-1] == ' ' || e[-1] == '\t')) e--;
    if (p == e) continue;  /* the reader's own error, if any, happens in the chain */
    if (e[-1] == ']') {  /* a matrix range: the file before it */
      char *b = e - 1;
      while (b > p && *b != '[') b--;
      e = b;
    }
    ret = add_rx(f, p, (size_t)(e - p), why, wl);
  }
  free(line);
  fclose(s);
  return ret;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The key text into c->key; KIO_ERR with why when not cacheable. */
static int make_key(kio_fcache *c, const kio_feat_plan *p, int profile, int blas_threads,
                    char *why, size_t wl) {
  sbuf *k = &c->key;
  sb_add(k, "%s feature cache %u\ncode %s\nrounding %d %d\ninput %s\n", KIO_PLUGIN_ID,
         FC_VERSION, KIO_FEAT_CODE_ID, profile, blas_threads, p->input);
  strv files = {0};
  int ret = add_rspec(&files, p->input, why, wl);
  for (int i = 0; ret == KIO_OK && i < p->nstages; i++) {
    const kio_feat_stage *s = &p->stages[i];
    sb_add(k, "stage %d %s print-args=%d utt2spk=%s table=%s/%d means=%d vars=%d reverse=%d "
           "order=%d window=%d truncate=%d left=%d right=%d select=%s\n",
           (int)s->op, s->prog, s->print_args, s->utt2spk ? s->utt2spk : "", s->table ? s->table : "",
           s->table_is_rspec, s->norm_means, s->norm_vars, s->reverse, s->delta_order,
           s->delta_window, s->truncate, s->left, s->right, s->selection ? s->selection : "");
    if (s->utt2spk) ret = add_rspec(&files, s->utt2spk, why, wl);
    if (ret == KIO_OK && s->table)
      ret = s->table_is_rspec ? add_rspec(&files, s->table, why, wl)
                              : add_rx(&files, s->table, strlen(s->table), why, wl);
  }
  if (ret == KIO_OK) qsort(files.v, files.n, sizeof *files.v, cmp_str);
  for (size_t i = 0; ret == KIO_OK && i < files.n; i++) {
    if (i && !strcmp(files.v[i], files.v[i - 1])) continue;
    char abs[PATH_MAX];
    struct stat st;
    if (!realpath(files.v[i], abs) || stat(abs, &st) != 0 || !S_ISREG(st.st_mode)) {
      snprintf(why, wl, "input not a regular file: %.200s", files.v[i]);
      ret = KIO_ERR;
      break;
    }
    sb_add(k, "file %s %llu %llu %lld %lld.%09ld %lld.%09ld\n", abs,
           (unsigned long long)st.st_dev, (unsigned long long)st.st_ino, (long long)st.st_size,
           (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec, (long long)st.st_ctim.tv_sec,
           st.st_ctim.tv_nsec);
  }
  strv_free(&files);
  if (ret == KIO_OK && k->oom) { snprintf(why, wl, "out of memory"); ret = KIO_ERR; }
  return ret;
}

/* ---- the folder and its budget ---- */

/* 0: the folder in dir (created); -1: unusable (why). Not for a disabled
 * cache (the caller checks). */
static int cache_dir(char *dir, size_t n, char *why, size_t wl) {
  const char *s = kio_setting_str(KIO_SET_FEATS_CACHE);
  if (s && *s) {
    snprintf(dir, n, "%s", s);
  } else {
    char pd[PATH_MAX - 16];
    if (kio_private_dir(pd, sizeof pd, why, wl) != 0) return -1;
    snprintf(dir, n, "%s/featcache", pd);
  }
  struct stat st;
  if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
    snprintf(why, wl, "cannot create %.200s: %s", dir, strerror(errno));
    return -1;
  }
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != getuid()) {
    snprintf(why, wl, "%.200s is not a folder of this user", dir);
    return -1;
  }
  char abs[PATH_MAX];
  if (realpath(dir, abs)) snprintf(dir, n, "%s", abs);
  return 0;
}

/* "123", "64K", "1.5G": bytes; -1 when it does not parse. */
static long long parse_bytes(const char *s) {
  char *e;
  double v = strtod(s, &e);
  double mul = 1;
  switch (*e) {
    case 'k': case 'K': mul = 1024.0; e++; break;
    case 'm': case 'M': mul = 1024.0 * 1024; e++; break;
    case 'g': case 'G': mul = 1024.0 * 1024 * 1024; e++; break;
    default: break;
  }
  if (e == s || *e || !(v >= 0) || v * mul > 9e18) return -1;
  return (long long)(v * mul);
}

typedef struct { char name[64]; int64_t mtime; uint64_t size; } fc_file;  /* mtime in ns */

/* The folder's entries (*.fc) and their bytes; temporary files a dead
 * writer left and entries not used for a day are removed on the way. */
static size_t scan(const char *dir, fc_file **out, uint64_t *total, int prune) {
  *out = NULL;
  *total = 0;
  DIR *d = opendir(dir);
  if (!d) return 0;
  size_t n = 0, cap = 0;
  time_t now = time(NULL);
  struct dirent *de;
  while ((de = readdir(d))) {
    size_t l = strlen(de->d_name);
    int entry = l > 3 && l < 64 && !strcmp(de->d_name + l - 3, ".fc");
    int tmp = !strncmp(de->d_name, "tmp.", 4);
    if (!entry && !tmp) continue;
    struct stat st;
    if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
    if (prune && now - st.st_mtime > FC_MAX_AGE_S) {
      unlinkat(dirfd(d), de->d_name, 0);
      continue;
    }
    if (!entry) continue;
    if (n == cap) {
      fc_file *v = realloc(*out, (cap = cap ? cap * 2 : 32) * sizeof *v);
      if (!v) break;
      *out = v;
    }
    snprintf((*out)[n].name, sizeof (*out)[n].name, "%s", de->d_name);
    (*out)[n].mtime = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
    (*out)[n].size = (uint64_t)st.st_blocks * 512;
    *total += (*out)[n].size;
    n++;
  }
  closedir(d);
  return n;
}

/* KALDI_GPU_FEATS_CACHE_MAX, else the smaller of 20% of the memory and
 * half of what the folder's file system has free (the cache's own entries
 * counted as free: it does not shrink itself as it fills). */
static uint64_t budget(const char *dir, uint64_t in_cache) {
  const char *s = kio_setting_str(KIO_SET_FEATS_CACHE_MAX);
  long long b = s && *s ? parse_bytes(s) : -1;
  if (b >= 0) return (uint64_t)b;
  long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGE_SIZE);
  uint64_t mem = pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz / 5 : 0;
  struct statvfs v;
  uint64_t disk = statvfs(dir, &v) == 0 ? ((uint64_t)v.f_bavail * v.f_frsize + in_cache) / 2 : 0;
  return mem < disk ? mem : disk;
}

static int cmp_mtime(const void *a, const void *b) {
  const fc_file *x = a, *y = b;
  return x->mtime < y->mtime ? -1 : x->mtime > y->mtime;
}

/* ---- hit ---- */

/* The mapped entry checked from end to end; KIO_OK or why. The entries'
 * headers are walked first (every size checked against the file), then
 * their bytes hashed on several threads, the hashes combined in order: the
 * same checksum as one pass over the file. */
static int validate(kio_fcache *c, const char **why) {
  const unsigned char *m = c->map;
  size_t len = c->map_len;
  fc_header h;
  if (len < sizeof h) return *why = "truncated", KIO_ERR;
  memcpy(&h, m, sizeof h);
  if (memcmp(h.magic, FC_MAGIC, 8) || h.version != FC_VERSION) return *why = "not an entry of this version", KIO_ERR;
  if (h.hdr_sum != kio_fnv1a(KIO_FNV_START, &h, offsetof(fc_header, hdr_sum)))
    return *why = "header checksum", KIO_ERR;
  if (h.file_size != len) return *why = "truncated", KIO_ERR;
  if (h.nstages != (uint32_t)c->nstages || h.key_len != c->key.n ||
      sizeof h + PAD8(h.key_len) > len || memcmp(m + sizeof h, c->key.s, c->key.n))
    return *why = "another key with the same hash", KIO_ERR;
  size_t pos = sizeof h + PAD8(h.key_len);
  if ((uint64_t)h.nstages * sizeof(fc_counts) > len - pos) return *why = "truncated", KIO_ERR;
  uint64_t head_sum =
      kio_fhash_mix(kio_fhash_bytes(KIO_FNV_START, m + sizeof h, PAD8(h.key_len)),
                    kio_fhash_bytes(KIO_FNV_START, m + pos, h.nstages * sizeof(fc_counts)));
  pos += h.nstages * sizeof(fc_counts);
  c->body = pos;
  /* Each entry is at least a header: no more of them than that. */
  if (h.nentries > (len - pos) / sizeof(fc_entry)) return *why = "checksum", KIO_ERR;
  kio_fhash_span *v = malloc((h.nentries ? (size_t)h.nentries : 1) * sizeof *v);
  if (!v) return *why = "out of memory", KIO_ERR;
  size_t n = 0;
  while (pos < len) {
    fc_entry e;
    if (len - pos < sizeof e) return free(v), *why = "truncated", KIO_ERR;
    memcpy(&e, m + pos, sizeof e);
    uint64_t hb = sizeof e + PAD8(e.key_len);
    uint64_t db = PAD8((uint64_t)sizeof(float) * (uint32_t)e.rows * (uint32_t)e.cols);
    if (e.rows < 0 || e.cols < 0 || (e.rows && (uint64_t)e.cols > len / 4 / (uint64_t)e.rows) ||
        e.zero || e.key_len == 0 || hb > len - pos ||
        db > len - pos - hb || memchr(m + pos + sizeof e, '\0', e.key_len))
      return free(v), *why = "bad entry", KIO_ERR;
    if (n == h.nentries) return free(v), *why = "checksum", KIO_ERR;
    v[n++] = (kio_fhash_span){pos, hb, db, 0, 0};
    pos += hb + db;
  }
  if (n != h.nentries) return free(v), *why = "checksum", KIO_ERR;
  c->hash_threads = kio_fhash_spans(m, v, n, len - c->body, c->threads);
  uint64_t sum = KIO_FNV_START;
  for (size_t i = 0; i < n; i++) sum = kio_fhash_mix(kio_fhash_mix(sum, v[i].hs), v[i].ds);
  free(v);
  if (kio_fhash_mix(sum, head_sum) != h.body_sum) return *why = "checksum", KIO_ERR;
  return KIO_OK;
}

static int try_hit(kio_fcache *c, char *how, size_t hl) {
  int fd = open(c->path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  struct stat st;
  void *m = MAP_FAILED;
  if (fstat(fd, &st) == 0 && st.st_size > 0)
    m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (m == MAP_FAILED) {
    close(fd);
    return 0;
  }
  c->map = m;
  c->map_len = (size_t)st.st_size;
  const char *why = NULL;
  if (validate(c, &why) != KIO_OK) {
    munmap(m, c->map_len);
    c->map = NULL;
    close(fd);
    unlink(c->path);
    snprintf(how, hl, "miss: the entry was invalid (%s), removed", why);
    return 0;
  }
  futimens(fd, NULL);  /* the entry's last use: the budget removes the oldest first */
  close(fd);
  c->pos = c->body;
  c->hit = 1;
  return 1;
}

int kio_fcache_hit(const kio_fcache *c) { return c->hit; }

int kio_fcache_next(kio_fcache *c, const char **key, int32_t *rows, int32_t *cols,
                    const float **data) {
  if (c->pos >= c->map_len) return KIO_EOF;
  fc_entry e;
  memcpy(&e, c->map + c->pos, sizeof e);
  *key = (const char *)c->map + c->pos + sizeof e;
  *rows = e.rows;
  *cols = e.cols;
  *data = (const float *)(const void *)(c->map + c->pos + sizeof e + PAD8(e.key_len));
  c->pos += sizeof e + PAD8(e.key_len) + PAD8((uint64_t)sizeof(float) * (uint32_t)e.rows * (uint32_t)e.cols);
  return KIO_OK;
}

void kio_fcache_counts(const kio_fcache *c, int k, kio_feat_counts *out) {
  fc_counts r;
  memcpy(&r, c->map + c->body - (size_t)(c->nstages - k) * sizeof r, sizeof r);
  *out = (kio_feat_counts){r.num_done, r.num_err, r.logdet_type, r.tot_t, r.tot_logdet, r.had_input};
}

int kio_fcache_entries(const kio_fcache *c) {
  fc_header h;
  memcpy(&h, c->map, sizeof h);
  return (int)h.nentries;
}

/* ---- miss ---- */

static void abandon(kio_fcache *c) {
  if (!c->w) return;
  fclose(c->w);
  c->w = NULL;
  if (!c->anon) unlink(c->tmp);
}

static const char zeros[8];

static int start_write(kio_fcache *c) {
  int fd = open(c->dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  c->anon = fd >= 0;
  if (!c->anon) {  /* a file system without O_TMPFILE: a named one (a dead writer's goes after a day) */
    snprintf(c->tmp, sizeof c->tmp, "%s/tmp.XXXXXX", c->dir);
    fd = mkstemp(c->tmp);
    if (fd < 0) return KIO_ERR;
  }
  c->w = fdopen(fd, "wb");
  if (!c->w) {
    close(fd);
    if (!c->anon) unlink(c->tmp);
    return KIO_ERR;
  }
  setvbuf(c->w, NULL, _IOFBF, 1 << 20);
  fc_header h;
  memset(&h, 0, sizeof h);
  fc_counts z = {0};
  fwrite(&h, sizeof h, 1, c->w);
  fwrite(c->key.s, 1, c->key.n, c->w);
  fwrite(zeros, 1, PAD8(c->key.n) - c->key.n, c->w);
  for (int k = 0; k < c->nstages; k++) fwrite(&z, sizeof z, 1, c->w);
  c->written = sizeof h + PAD8(c->key.n) + (uint64_t)c->nstages * sizeof z;
  c->sum = KIO_FNV_START;
  if (ferror(c->w) || c->written > c->budget) abandon(c);
  return c->w ? KIO_OK : KIO_ERR;
}

void kio_fcache_put(kio_fcache *c, const char *key, const kio_matrix *m) {
  if (!c->w) return;
  int32_t rows = m->rows, cols = m->cols;
  if (!rows || !cols) rows = cols = 0;  /* the archive's 0 x 0 */
  size_t kl = strlen(key);
  uint64_t db = (uint64_t)sizeof(float) * (uint32_t)rows * (uint32_t)cols;
  fc_entry e = {(uint32_t)kl, rows, cols, 0};
  uint64_t hb = sizeof e + PAD8(kl);
  if (c->written + hb + PAD8(db) > c->budget) {  /* past the budget: nothing kept */
    abandon(c);
    return;
  }
  unsigned char head[sizeof e + 264];
  uint64_t hs;
  if (hb <= sizeof head) {
    memcpy(head, &e, sizeof e);
    memcpy(head + sizeof e, key, kl);
    memset(head + sizeof e + kl, 0, PAD8(kl) - kl);
    hs = kio_fhash_bytes(KIO_FNV_START, head, hb);
    fwrite(head, 1, hb, c->w);
  } else {
    unsigned char *b = calloc(1, hb);
    if (!b) { abandon(c); return; }
    memcpy(b, &e, sizeof e);
    memcpy(b + sizeof e, key, kl);
    hs = kio_fhash_bytes(KIO_FNV_START, b, hb);
    fwrite(b, 1, hb, c->w);
    free(b);
  }
  uint64_t ds;
  if (db % 8) {  /* an odd number of floats: the hash sees the padding too */
    uint64_t h = KIO_FNV_START;
    const unsigned char *p = (const unsigned char *)m->data;
    size_t i = 0;
    for (; i + 8 <= db; i += 8) {
      uint64_t w;
      memcpy(&w, p + i, 8);
      h = kio_fhash_mix(h, w);
    }
    unsigned char last[8] = {0};
    memcpy(last, p + i, db - i);
    uint64_t w;
    memcpy(&w, last, 8);
    h = kio_fhash_mix(h, w);
    ds = kio_fhash_mix(kio_fnv1a(h, NULL, 0), PAD8(db));
  } else {
    ds = kio_fhash_bytes(KIO_FNV_START, m->data, db);
  }
  fwrite(m->data, 1, db, c->w);
  fwrite(zeros, 1, PAD8(db) - db, c->w);
  c->sum = kio_fhash_mix(kio_fhash_mix(c->sum, hs), ds);
  c->written += hb + PAD8(db);
  c->nentries++;
  if (ferror(c->w)) abandon(c);
}

/* Makes room under the folder's lock and renames the entry into place. */
static void publish(kio_fcache *c) {
  char lock[PATH_MAX + 16];
  snprintf(lock, sizeof lock, "%s/lock", c->dir);
  int lfd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lfd < 0 || flock(lfd, LOCK_EX) != 0) {
    if (lfd >= 0) close(lfd);
    unlink(c->tmp);
    return;
  }
  fc_file *v;
  uint64_t total;
  size_t n = scan(c->dir, &v, &total, 1);
  const char *mine = strrchr(c->path, '/') + 1;
  for (size_t i = 0; i < n; i++)
    if (!strcmp(v[i].name, mine)) total -= v[i].size;  /* replaced by ours */
  if (v) qsort(v, n, sizeof *v, cmp_mtime);
  uint64_t need = PAD8(c->written);
  for (size_t i = 0; i < n && total + need > c->budget; i++) {
    if (!strcmp(v[i].name, mine)) continue;
    char p[PATH_MAX + 80];
    snprintf(p, sizeof p, "%s/%s", c->dir, v[i].name);
    if (unlink(p) == 0) total -= v[i].size;
  }
  free(v);
  if (total + need > c->budget || rename(c->tmp, c->path) != 0) unlink(c->tmp);
  flock(lfd, LOCK_UN);
  close(lfd);
}

void kio_fcache_finish(kio_fcache *c, int clean, const kio_feat_counts *counts) {
  if (!c->w) return;
  if (!clean) {
    abandon(c);
    return;
  }
  fc_header h;
  memset(&h, 0, sizeof h);
  size_t koff = sizeof h;
  size_t coff = koff + PAD8(c->key.n);
  fc_counts *r = calloc((size_t)c->nstages, sizeof *r);
  if (!r) { abandon(c); return; }
  for (int k = 0; k < c->nstages; k++)
    r[k] = (fc_counts){counts[k].num_done, counts[k].num_err, counts[k].logdet_type,
                       counts[k].had_input, counts[k].tot_t, counts[k].tot_logdet};
  size_t rb = (size_t)c->nstages * sizeof *r;
  char *kp = calloc(1, PAD8(c->key.n) + 1);
  if (!kp) { free(r); abandon(c); return; }
  memcpy(kp, c->key.s, c->key.n);
  uint64_t head_sum = kio_fhash_mix(kio_fhash_bytes(KIO_FNV_START, kp, PAD8(c->key.n)),
                                    kio_fhash_bytes(KIO_FNV_START, r, rb));
  free(kp);
  memcpy(h.magic, FC_MAGIC, 8);
  h.version = FC_VERSION;
  h.nstages = (uint32_t)c->nstages;
  h.key_len = c->key.n;
  h.nentries = c->nentries;
  h.file_size = c->written;
  h.body_sum = kio_fhash_mix(c->sum, head_sum);
  h.hdr_sum = kio_fnv1a(KIO_FNV_START, &h, offsetof(fc_header, hdr_sum));
  int ok = fseek(c->w, (long)coff, SEEK_SET) == 0 && fwrite(r, 1, rb, c->w) == rb &&
           fseek(c->w, 0, SEEK_SET) == 0 && fwrite(&h, sizeof h, 1, c->w) == 1;
  free(r);
  ok = fflush(c->w) == 0 && ok;
  if (ok && c->anon) {  /* a name for the finished file, then renamed into place */
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fileno(c->w));
    snprintf(c->tmp, sizeof c->tmp, "%s/tmp.%d.%llx", c->dir, (int)getpid(),
             (unsigned long long)kio_fnv1a(c->sum, &c, sizeof c));
    ok = linkat(AT_FDCWD, proc, AT_FDCWD, c->tmp, AT_SYMLINK_FOLLOW) == 0;
    c->anon = !ok;
  }
  ok = fclose(c->w) == 0 && ok;
  c->w = NULL;
  if (!ok) {
    if (!c->anon) unlink(c->tmp);
    return;
  }
  publish(c);
}

/* ---- open / free ---- */

/* A hit is not free: it checksums and copies every byte of the output, and
 * a miss writes them all. Measured on a GPU host (16 jobs of a training
 * stage at once), a chain of apply-cmvn and add-deltas read back from the
 * cache was no faster than computed, and storing it made the stage's first
 * run about 13% slower; transform-feats' matrix product (the LDA product
 * after splice-feats, MLLT, fMLLR) was most of an accumulation job's time.
 * So only a chain with a transform-feats stage is kept; apply-cmvn,
 * add-deltas, splice-feats, select-feats, copy-feats and decompression
 * alone are computed every time. */
int kio_fcache_worth(const kio_feat_plan *p) {
  for (int i = 0; i < p->nstages; i++)
    if (p->stages[i].op == KIO_FEAT_TRANSFORM) return 1;
  return 0;
}

kio_fcache *kio_fcache_open(const kio_feat_plan *p, int profile, int blas_threads, char *how,
                            size_t hl) {
  char dir[PATH_MAX], why[400] = "";
  const char *set = kio_setting_str(KIO_SET_FEATS_CACHE);
  if (set && !strcmp(set, "0")) {
    snprintf(how, hl, "disabled (KALDI_GPU_FEATS_CACHE=0)");
    return NULL;
  }
  /* Before the folder is made or any input is read: such a chain leaves no
   * trace in the cache. */
  if (!kio_fcache_worth(p)) {
    snprintf(how, hl, "not used: no transform-feats stage, computing is as cheap as reading back");
    return NULL;
  }
  int d = cache_dir(dir, sizeof dir, why, sizeof why);
  if (d < 0) {
    snprintf(how, hl, "not cacheable: %s", why);
    return NULL;
  }
  kio_fcache *c = calloc(1, sizeof *c);
  if (!c) {
    snprintf(how, hl, "not cacheable: out of memory");
    return NULL;
  }
  snprintf(c->dir, sizeof c->dir, "%s", dir);
  c->nstages = p->nstages;
  if (make_key(c, p, profile, blas_threads, why, sizeof why) != KIO_OK) {
    snprintf(how, hl, "not cacheable: %s", why);
    kio_fcache_free(c);
    return NULL;
  }
  snprintf(c->path, sizeof c->path, "%s/%016llx.fc", dir,
           (unsigned long long)kio_fnv1a(KIO_FNV_START, c->key.s, c->key.n));
  snprintf(how, hl, "miss");
  c->threads = kio_fpool_threads();
  if (try_hit(c, how, hl)) {
    snprintf(how, hl, "hit %s, %d entries, checked on %d thread%s", c->path,
             kio_fcache_entries(c), c->hash_threads, c->hash_threads == 1 ? "" : "s");
    return c;
  }
  fc_file *v;
  uint64_t total;
  scan(c->dir, &v, &total, 0);
  free(v);
  c->budget = budget(c->dir, total);
  if (start_write(c) != KIO_OK) {
    snprintf(how, hl, "not cacheable: no room in %s (budget %llu bytes)", c->dir,
             (unsigned long long)c->budget);
    kio_fcache_free(c);
    return NULL;
  }
  size_t l = strlen(how);
  snprintf(how + l, hl - l, ", writing %s", c->path);
  return c;
}

void kio_fcache_free(kio_fcache *c) {
  if (!c) return;
  abandon(c);
  if (c->map) munmap((void *)c->map, c->map_len);
  free(c->key.s);
  free(c);
}
