/* In-process "gunzip -c PATH |" (see gzip-input.h). The gunzip child was the
 * end-to-end bottleneck of the aligner; zlib inflate is faster and saves the
 * pipe copies. A producer thread keeps the parallelism the child gave: it
 * inflates into a ring of GZ_NBUF buffers, the fopencookie read copies out,
 * so the rest of io.c (stdio buffers, parsers) is unchanged.
 *
 * Behaviour follows GNU gzip 1.12 (checked against the real gunzip):
 *  - members are decoded one after another; after a member, no more input:
 *    OK; zero bytes up to EOF: silently OK; anything else that is not a
 *    gzip magic: "decompression OK, trailing garbage ignored", status 2;
 *  - header checks (method, encrypted/reserved flags, FHCRC) with gzip's
 *    messages; deflate data errors: "invalid compressed data--format
 *    violated"; trailer: "--crc error" and/or "--length error"; input ending
 *    early: "unexpected end of file"; all status 1 and end of output.
 *  - gzip writes decoded data in 32 KiB windows and, on a format error,
 *    drops its last partial window; zlib also detects some corruptions at a
 *    different point than gzip's own inflater. So before a format error the
 *    number of bytes delivered may differ from gzip's (never data after the
 *    error point). On truncated input both deliver all decodable bytes.
 *  - a later member in compress/pack/LZH format (gzip would decode it; only
 *    made by concatenating such files) is treated as trailing garbage.
 * The raw deflate stream is inflated (windowBits -15) and the gzip header
 * and trailer are parsed here, to give gzip's exact messages (zlib's gzip
 * wrapper would stop at the CRC and never report both CRC and length). */
#include "gzip-input.h"
#include "base/sys/settings.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define GZ_NBUF 4
#define GZ_BUFSZ (1 << 20)
#define GZ_INSZ (1 << 20)

/* Wait statuses, as pclose() would return them for gunzip. */
#define GZ_OK 0
#define GZ_ERROR (1 << 8)
#define GZ_WARNING (2 << 8)
#define GZ_STOPPED (-1) /* the reader went away; internal */

struct kio_gzip {
  int fd;
  int err_fd; /* gzip's messages (stderr; -1: none) */
  char *name;
  pthread_t thread;
  int started;
  pthread_mutex_t mu;
  pthread_cond_t can_read, can_write;
  unsigned char *ring[GZ_NBUF];
  size_t len[GZ_NBUF];
  int head, count;  /* published buffers: head .. head + count - 1 */
  size_t rpos;      /* reader's position in ring[head] */
  int done;         /* producer finished, status is final */
  int status;
  int killed;       /* output came after the reader left (gunzip: SIGPIPE) */
  int final_status; /* set by the cookie close */
  atomic_int stop;  /* the reader closed the stream */
  /* producer only: buffer being filled, input buffer, inflater */
  int wr;
  size_t wlen;
  unsigned char *in;
  size_t in_len, in_pos;
  int in_eof, read_errno;
  z_stream zs;
  int zs_init;
};

/* gzip's stderr line, written at once. */
static void gzin_msg(kio_gzip *g, const char *fmt, ...) {
  if (g->err_fd < 0) return;
  char buf[8192];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  size_t len = (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1, off = 0;
  while (off < len) {
    ssize_t w = write(g->err_fd, buf + off, len - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;
    off += (size_t)w;
  }
}

/* Refills the input buffer when empty: 1 data available, 0 EOF, -1 read
 * error (errno kept for the message). */
static int gzin_fill(kio_gzip *g) {
  if (g->in_pos < g->in_len) return 1;
  if (g->in_eof) return 0;
  ssize_t n;
  do n = read(g->fd, g->in, GZ_INSZ); while (n < 0 && errno == EINTR);
  g->in_pos = g->in_len = 0;
  if (n <= 0) {
    g->in_eof = 1;
    if (n < 0) g->read_errno = errno ? errno : EIO;
    return n < 0 ? -1 : 0;
  }
  g->in_len = (size_t)n;
  return 1;
}

static int gzin_byte(kio_gzip *g) {
  return gzin_fill(g) > 0 ? g->in[g->in_pos++] : -1;
}

/* gzip's read_error(): a read failure or input ending where more is needed. */
static int gzin_eof_error(kio_gzip *g) {
  if (g->read_errno)
    gzin_msg(g, "\ngzip: %s: %s\n", g->name, strerror(g->read_errno));
  else
    gzin_msg(g, "\ngzip: %s: unexpected end of file\n", g->name);
  return GZ_ERROR;
}

/* Publishes the full buffer, then waits for a free one to fill: gunzip
 * blocked on a full pipe. The reader leaving meanwhile kills it (SIGPIPE). */
static int gzin_next_buffer(kio_gzip *g) {
  pthread_mutex_lock(&g->mu);
  g->len[g->wr] = g->wlen;
  g->count++;
  g->wr = (g->wr + 1) % GZ_NBUF;
  g->wlen = 0;
  pthread_cond_signal(&g->can_read);
  while (g->count == GZ_NBUF && !atomic_load(&g->stop))
    pthread_cond_wait(&g->can_write, &g->mu);
  int full = g->count == GZ_NBUF;
  pthread_mutex_unlock(&g->mu);
  return full ? GZ_STOPPED : GZ_OK;
}

/* Skips n bytes (n < 0: up to and including a NUL) of the header, adding
 * them to the header CRC. */
static int gzin_skip(kio_gzip *g, long n, uLong *hcrc) {
  for (long i = 0; n < 0 || i < n; i++) {
    int c = gzin_byte(g);
    if (c < 0) return gzin_eof_error(g);
    unsigned char b = (unsigned char)c;
    *hcrc = crc32(*hcrc, &b, 1);
    if (n < 0 && c == 0) break;
  }
  return GZ_OK;
}

#define GZ_END 1 /* gzin_header: no further member (status GZ_OK) */

/* Reads a member's magic and header (gzip's get_method). part: 1 for the
 * first member. Returns GZ_OK (header read), GZ_END, GZ_ERROR, GZ_WARNING. */
static int gzin_header(kio_gzip *g, int part) {
  int b0 = gzin_byte(g), b1;
  if (b0 < 0) return gzin_eof_error(g);
  /* gzip reads the second byte with get_byte (EOF is an error) unless the
   * first is 0 (try_byte: trailing zeros may end the file). */
  b1 = gzin_byte(g);
  if (b1 < 0 && (b0 != 0 || g->read_errno)) return gzin_eof_error(g);
  if (!(b0 == 0x1f && (b1 == 0x8b || b1 == 0x9e))) {
    if (part == 1) {
      gzin_msg(g, "\ngzip: %s: not in gzip format\n", g->name);
      return GZ_ERROR;
    }
    if (b0 == 0) {
      while (b1 == 0) b1 = gzin_byte(g);
      if (b1 < 0) return g->read_errno ? gzin_eof_error(g) : GZ_END;
    }
    gzin_msg(g, "\ngzip: %s: decompression OK, trailing garbage ignored\n", g->name);
    return GZ_WARNING;
  }
  unsigned char h[10] = {(unsigned char)b0, (unsigned char)b1};
  for (int i = 2; i < 10; i++) {
    int c = gzin_byte(g);
    if (c < 0) return gzin_eof_error(g);
    h[i] = (unsigned char)c;
    if (i == 2 && c != 8) {
      gzin_msg(g, "gzip: %s: unknown method %d -- not supported\n", g->name, c);
      return GZ_ERROR;
    }
    if (i == 3 && (c & 0x20)) {
      gzin_msg(g, "gzip: %s is encrypted -- not supported\n", g->name);
      return GZ_ERROR;
    }
    if (i == 3 && (c & 0xc0)) {
      gzin_msg(g, "gzip: %s has flags 0x%x -- not supported\n", g->name, c);
      return GZ_ERROR;
    }
  }
  int flags = h[3], r;
  uLong hcrc = crc32(crc32(0L, Z_NULL, 0), h, 10);
  if (flags & 0x04) { /* FEXTRA: 2-byte length, then data */
    int lo = gzin_byte(g), hi = lo < 0 ? -1 : gzin_byte(g);
    if (hi < 0) return gzin_eof_error(g);
    unsigned char lb[2] = {(unsigned char)lo, (unsigned char)hi};
    hcrc = crc32(hcrc, lb, 2);
    if ((r = gzin_skip(g, lo | (hi << 8), &hcrc)) != GZ_OK) return r;
  }
  if ((flags & 0x08) && (r = gzin_skip(g, -1, &hcrc)) != GZ_OK) return r; /* FNAME */
  if ((flags & 0x10) && (r = gzin_skip(g, -1, &hcrc)) != GZ_OK) return r; /* FCOMMENT */
  if (flags & 0x02) { /* FHCRC */
    int lo = gzin_byte(g), hi = lo < 0 ? -1 : gzin_byte(g);
    if (hi < 0) return gzin_eof_error(g);
    unsigned want = (unsigned)(lo | (hi << 8)), got = (unsigned)(hcrc & 0xffff);
    if (want != got) {
      gzin_msg(g, "gzip: %s: header checksum 0x%04x != computed checksum 0x%04x\n",
             g->name, want, got);
      return GZ_ERROR;
    }
  }
  return GZ_OK;
}

/* Inflates one member's deflate data into the ring and checks its trailer. */
static int gzin_member(kio_gzip *g) {
  if (inflateReset(&g->zs) != Z_OK) return GZ_ERROR;
  uLong crc = crc32(0L, Z_NULL, 0);
  uint32_t total = 0;
  for (;;) {
    if (g->in_pos == g->in_len && gzin_fill(g) < 0) return gzin_eof_error(g);
    unsigned char *out = g->ring[g->wr] + g->wlen;
    size_t room = GZ_BUFSZ - g->wlen;
    g->zs.next_in = g->in + g->in_pos;
    g->zs.avail_in = (uInt)(g->in_len - g->in_pos);
    g->zs.next_out = out;
    g->zs.avail_out = (uInt)room;
    int r = inflate(&g->zs, Z_NO_FLUSH);
    size_t got = room - g->zs.avail_out;
    g->in_pos = g->in_len - g->zs.avail_in;
    crc = crc32(crc, out, (uInt)got);
    total += (uint32_t)got;
    g->wlen += got;
    /* Output once the reader has gone: gunzip dies of SIGPIPE writing it. */
    if (got && atomic_load(&g->stop)) return GZ_STOPPED;
    if (r == Z_STREAM_END) break;
    if (r == Z_MEM_ERROR) {
      gzin_msg(g, "gzip: memory exhausted\n");
      return GZ_ERROR;
    }
    if (r != Z_OK && r != Z_BUF_ERROR) { /* Z_DATA_ERROR */
      gzin_msg(g, "\ngzip: %s: invalid compressed data--format violated\n", g->name);
      return GZ_ERROR;
    }
    /* No progress possible with output room left: the input ended. */
    if (r == Z_BUF_ERROR && g->zs.avail_out > 0 && g->in_pos == g->in_len && g->in_eof)
      return gzin_eof_error(g);
    if (g->wlen == GZ_BUFSZ && gzin_next_buffer(g) != GZ_OK) return GZ_STOPPED;
  }
  unsigned char t[8];
  for (int i = 0; i < 8; i++) {
    int c = gzin_byte(g);
    if (c < 0) return gzin_eof_error(g);
    t[i] = (unsigned char)c;
  }
  uint32_t want_crc = (uint32_t)t[0] | (uint32_t)t[1] << 8 | (uint32_t)t[2] << 16 |
                      (uint32_t)t[3] << 24;
  uint32_t want_len = (uint32_t)t[4] | (uint32_t)t[5] << 8 | (uint32_t)t[6] << 16 |
                      (uint32_t)t[7] << 24;
  int ret = GZ_OK;
  if (want_crc != (uint32_t)crc) {
    gzin_msg(g, "\ngzip: %s: invalid compressed data--crc error\n", g->name);
    ret = GZ_ERROR;
  }
  if (want_len != total) {
    gzin_msg(g, "\ngzip: %s: invalid compressed data--length error\n", g->name);
    ret = GZ_ERROR;
  }
  return ret;
}

/* gzip's decompression loop over members. */
static int gzin_run(kio_gzip *g) {
  for (int part = 1;; part++) {
    int r = gzin_header(g, part);
    if (r == GZ_END) return GZ_OK;
    if (r != GZ_OK) return r;
    if ((r = gzin_member(g)) != GZ_OK) return r;
    int f = gzin_fill(g); /* more input: another member (or garbage) */
    if (f < 0) return gzin_eof_error(g);
    if (f == 0) return GZ_OK;
  }
}

static void *gzin_thread(void *arg) {
  kio_gzip *g = arg;
  int status = gzin_run(g);
  pthread_mutex_lock(&g->mu);
  int pending = g->wlen > 0;
  if (pending) { /* a free buffer is always there while one is filled */
    g->len[g->wr] = g->wlen;
    g->count++;
    g->wlen = 0;
  }
  /* Output still to write when the reader had gone: killed writing it. */
  g->killed = status == GZ_STOPPED || (pending && atomic_load(&g->stop));
  g->status = status == GZ_STOPPED ? GZ_OK : status;
  g->done = 1;
  pthread_cond_broadcast(&g->can_read);
  pthread_mutex_unlock(&g->mu);
  return NULL;
}

static ssize_t gzin_cookie_read(void *cookie, char *buf, size_t size) {
  kio_gzip *g = cookie;
  pthread_mutex_lock(&g->mu);
  while (g->count == 0 && !g->done) pthread_cond_wait(&g->can_read, &g->mu);
  if (g->count == 0) {
    pthread_mutex_unlock(&g->mu);
    return 0;
  }
  int slot = g->head;
  pthread_mutex_unlock(&g->mu);
  /* A published buffer is not touched by the producer until released. */
  size_t n = g->len[slot] - g->rpos;
  if (n > size) n = size;
  memcpy(buf, g->ring[slot] + g->rpos, n);
  g->rpos += n;
  if (g->rpos == g->len[slot]) {
    pthread_mutex_lock(&g->mu);
    g->head = (g->head + 1) % GZ_NBUF;
    g->count--;
    g->rpos = 0;
    pthread_cond_signal(&g->can_write);
    pthread_mutex_unlock(&g->mu);
  }
  return (ssize_t)n;
}

/* Like pclose on a pipe. The producer goes on after the reader left, as
 * gunzip would, until it has output to write: then it stops, as gunzip
 * killed by SIGPIPE, whose status through popen's "sh -c" is 128 + SIGPIPE
 * (gunzip is a script that execs gzip, run by dash in a child):
 * "Pipe ... had nonzero return status 36096", and gunzip prints nothing. A
 * reader that left after all the output gets gunzip's own status. */
static int gzin_cookie_close(void *cookie) {
  kio_gzip *g = cookie;
  if (!g->started) {
    g->final_status = GZ_ERROR;
    return 0;
  }
  pthread_mutex_lock(&g->mu);
  atomic_store(&g->stop, 1);
  pthread_cond_broadcast(&g->can_write);
  pthread_mutex_unlock(&g->mu);
  pthread_join(g->thread, NULL);
  g->final_status = g->killed ? (128 + SIGPIPE) << 8 : g->status;
  return 0;
}

/* Not seekable, like the pipe (ftell gives -1, errno ESPIPE). */
static int gzin_cookie_seek(void *cookie, off64_t *off, int whence) {
  (void)cookie, (void)off, (void)whence;
  errno = ESPIPE;
  return -1;
}

static void gzin_free(kio_gzip *g) {
  if (!g) return;
  if (g->zs_init) inflateEnd(&g->zs);
  if (g->fd >= 0) close(g->fd);
  for (int i = 0; i < GZ_NBUF; i++) free(g->ring[i]);
  free(g->in);
  free(g->name);
  pthread_mutex_destroy(&g->mu);
  pthread_cond_destroy(&g->can_read);
  pthread_cond_destroy(&g->can_write);
  free(g);
}

FILE *kio_gzip_fdopen(int fd, const char *name, int err_fd, kio_gzip **out) {
  *out = NULL;
  kio_gzip *g = calloc(1, sizeof *g);
  if (!g) {
    close(fd);
    return NULL;
  }
  g->fd = fd;
  g->err_fd = err_fd;
  pthread_mutex_init(&g->mu, NULL);
  pthread_cond_init(&g->can_read, NULL);
  pthread_cond_init(&g->can_write, NULL);
  atomic_init(&g->stop, 0);
  int ok = (g->name = strdup(name)) && (g->in = malloc(GZ_INSZ));
  for (int i = 0; ok && i < GZ_NBUF; i++) ok = (g->ring[i] = malloc(GZ_BUFSZ)) != NULL;
  if (ok) ok = (g->zs_init = inflateInit2(&g->zs, -15) == Z_OK);
  cookie_io_functions_t io = {gzin_cookie_read, NULL, gzin_cookie_seek, gzin_cookie_close};
  FILE *f = ok ? fopencookie(g, "r", io) : NULL;
  if (!f) {
    gzin_free(g);
    return NULL;
  }
  /* The producer takes no signals: handlers keep running on the caller's
   * threads, as they did with a child process. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  g->started = pthread_create(&g->thread, NULL, gzin_thread, g) == 0;
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (!g->started) {
    fclose(f);
    gzin_free(g);
    return NULL;
  }
  *out = g;
  return f;
}

int kio_gzip_close(kio_gzip *g, FILE *f) {
  fclose(f); /* gzin_cookie_close joins the producer */
  int status = g->final_status;
  gzin_free(g);
  return status;
}

static int is_path_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         (c && strchr("._/+,:=@%-", c));
}

int kio_gzip_parse_cmd(const char *cmd, char **path) {
  const char *tok[4] = {0};
  size_t len[4] = {0};
  int n = 0;
  *path = NULL;
  for (const char *p = cmd;;) {
    while (*p == ' ') p++;
    if (!*p) break;
    if (n == 4) return 0;
    tok[n] = p;
    while (*p && *p != ' ') p++;
    len[n] = (size_t)(p - tok[n]);
    n++;
  }
#define GZ_TOK(i, s) (len[i] == strlen(s) && !memcmp(tok[i], s, len[i]))
  int match = (n == 3 && GZ_TOK(0, "gunzip") && GZ_TOK(1, "-c")) ||
              (n == 3 && GZ_TOK(0, "gzip") && (GZ_TOK(1, "-cd") || GZ_TOK(1, "-dc"))) ||
              (n == 2 && GZ_TOK(0, "zcat"));
#undef GZ_TOK
  if (!match) return 0;
  const char *p = tok[n - 1];
  size_t l = len[n - 1];
  if (p[0] == '-') return 0;
  for (size_t i = 0; i < l; i++)
    if (!is_path_char(p[i])) return 0;
  if (!(*path = malloc(l + 1))) return 0;
  memcpy(*path, p, l);
  (*path)[l] = '\0';
  return 1;
}

FILE *kio_gzip_open(const char *cmd, kio_gzip **g) {
  *g = NULL;
  if (kio_setting_flag(KIO_SET_GUNZIP_PIPE, 0)) return NULL;
  if (kio_setting_str(KIO_SET_GZIP)) return NULL; /* gzip would take options from it */
  char *path;
  if (!kio_gzip_parse_cmd(cmd, &path)) return NULL;
  /* Anything gunzip would complain about before decoding (missing file,
   * directory, empty, not gzip, compress/pack/zip formats) goes to the real
   * gunzip, which prints its own message. */
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  struct stat st;
  unsigned char m[2];
  if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || pread(fd, m, 2, 0) != 2 ||
      m[0] != 0x1f || (m[1] != 0x8b && m[1] != 0x9e)) {
    if (fd >= 0) close(fd);
    free(path);
    return NULL;
  }
  FILE *f = kio_gzip_fdopen(fd, path, STDERR_FILENO, g);
  free(path);
  return f;
}
