/* rxfilename/wxfilename streams (reference 1.1, 1.5) and Kaldi's basic
 * binary/text value I/O (reference 1.2-1.4), on stdio for speed. */
#include "io.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gzip-input.h"
#include "io-internal.h"
#include "base/sys/log.h"
#include "table.h"

#define KIO_STREAM_BUF (1 << 16)
#define KIO_PIPE_BUF (1 << 20)  /* pipes: fewer wake-ups of reader and writer */

/* Set once at program start (kio_input_set_pipe_provider), before any input
 * is opened; NULL: every pipe is run by popen. */
static const kio_pipe_provider *pipe_provider;

struct kio_input {
  FILE *f;
  kio_rx_kind kind;
  char *name;      /* the rxfilename as given */
  char *filename;  /* KIO_RX_OFFSET: the file part, for reuse */
  char *buf;       /* stdio buffer (files/pipes) */
  kio_gzip *gz;    /* KIO_RX_PIPE decompressed in-process (gzip-input.c) */
  void *prov;      /* KIO_RX_PIPE computed in-process by the pipe provider */
};

const char *kio_printable_rx(const char *rx) {
  return (!rx || !*rx || !strcmp(rx, "-")) ? "standard input" : rx;
}
const char *kio_printable_wx(const char *wx) {
  return (!wx || !*wx || !strcmp(wx, "-")) ? "standard output" : wx;
}

static int looks_like_specifier(const char *s) {
  if ((s[0] != 'a' && s[0] != 's') || !strchr(s, ':')) return 0;
  kio_rspec r;
  kio_wspec w;
  return kio_parse_rspecifier(s, &r) == KIO_OK ||
         kio_parse_wspecifier(s, &w) == KIO_OK;
}

/* "name:DIGITS" with at least one digit after the last ':'. */
static int has_offset_suffix(const char *s, size_t n) {
  if (n == 0 || !isdigit((unsigned char)s[n - 1])) return 0;
  const char *d = s + n - 1;
  while (d > s && isdigit((unsigned char)*d)) d--;
  return *d == ':';
}

kio_rx_kind kio_classify_rxfilename(const char *rx) {
  if (!rx || !*rx || !strcmp(rx, "-")) return KIO_RX_STDIN;
  size_t n = strlen(rx);
  if (rx[0] == '|') return KIO_RX_INVALID;
  if (rx[n - 1] == '|') return KIO_RX_PIPE;
  if (isspace((unsigned char)rx[0]) || isspace((unsigned char)rx[n - 1]))
    return KIO_RX_INVALID;
  if (looks_like_specifier(rx)) return KIO_RX_INVALID;
  if (has_offset_suffix(rx, n)) return KIO_RX_OFFSET;
  if (strchr(rx, '|')) {
    KIO_WARN("Trying to classify rxfilename with pipe symbol in the wrong "
             "place (pipe without | at the end?): %s", rx);
    return KIO_RX_INVALID;
  }
  return KIO_RX_FILE;
}

kio_wx_kind kio_classify_wxfilename(const char *wx) {
  if (!wx || !*wx || !strcmp(wx, "-")) return KIO_WX_STDOUT;
  size_t n = strlen(wx);
  if (wx[0] == '|') return KIO_WX_PIPE;
  if (isspace((unsigned char)wx[0]) || isspace((unsigned char)wx[n - 1]))
    return KIO_WX_INVALID;
  if (wx[n - 1] == '|') return KIO_WX_INVALID;
  if (looks_like_specifier(wx)) return KIO_WX_INVALID;
  if (has_offset_suffix(wx, n)) return KIO_WX_INVALID;
  if (strchr(wx, '|')) {
    KIO_WARN("Trying to classify wxfilename with pipe symbol in the wrong "
             "place (pipe without | at the beginning?): %s", wx);
    return KIO_WX_INVALID;
  }
  return KIO_WX_FILE;
}

static char *dupstr(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

static void input_free(kio_input *in) {
  if (!in) return;
  free(in->name);
  free(in->filename);
  free(in->buf);
  free(in);
}

static void set_big_buffer(FILE *f, char **buf, size_t size) {
  *buf = malloc(size);
  if (*buf) setvbuf(f, *buf, _IOFBF, size);
}

/* Splits "file:123" (already classified) into the file name and offset. */
static int split_offset(const char *rx, char **file, long long *off) {
  const char *c = strrchr(rx, ':');
  errno = 0;
  char *end;
  unsigned long long v = strtoull(c + 1, &end, 10);
  if (errno || *end || v > (unsigned long long)LLONG_MAX) {
    kio_set_error("cannot get offset from filename %s", rx);
    return KIO_ERR;
  }
  *off = (long long)v;
  *file = malloc((size_t)(c - rx) + 1);
  if (!*file) return KIO_ERR;
  memcpy(*file, rx, (size_t)(c - rx));
  (*file)[c - rx] = '\0';
  return KIO_OK;
}

static int seek_to(kio_input *in, long long off) {
  if (fseeko(in->f, (off_t)off, SEEK_SET) != 0) {
    kio_set_error("failed to seek to offset %lld in %s", off, in->filename);
    return KIO_ERR;
  }
  return KIO_OK;
}

/* Opens a fresh stream for rx (no header). */
void kio_flush_shared_streams(void) {
  fflush(stdout);
  fflush(stderr);
}

static int input_open_raw(kio_input **out, const char *rx) {
  kio_rx_kind kind = kio_classify_rxfilename(rx);
  *out = NULL;
  if (kind == KIO_RX_INVALID) {
    KIO_WARN("Invalid input filename format %s", kio_printable_rx(rx));
    kio_set_error("invalid input filename format %s", kio_printable_rx(rx));
    return KIO_ERR;
  }
  kio_input *in = calloc(1, sizeof *in);
  if (!in || !(in->name = dupstr(rx ? rx : ""))) {
    input_free(in);
    kio_set_error("out of memory");
    return KIO_ERR;
  }
  in->kind = kind;
  long long off = 0;
  switch (kind) {
    case KIO_RX_STDIN:
      in->f = stdin;
      break;
    case KIO_RX_PIPE: {
      size_t n = strlen(rx);
      char *cmd = malloc(n);
      if (!cmd) break;
      memcpy(cmd, rx, n - 1);
      cmd[n - 1] = '\0';
      /* "gunzip -c FILE |": zlib in a thread instead of a child process. */
      if ((in->f = kio_gzip_open(cmd, &in->gz))) {
        free(cmd);
        break;
      }
      /* A command the registered provider computes itself (the feature
       * chains: apply-cmvn ... | add-deltas ... etc.). */
      if (pipe_provider && (in->f = pipe_provider->open(cmd, &in->prov))) {
        free(cmd);
        break;
      }
      kio_flush_shared_streams();
      in->f = popen(cmd, "re");  /* "e": later commands do not inherit it */
      if (!in->f) {
        KIO_WARN("Failed opening pipe for reading, command is: %s, errno is %s",
                 cmd, strerror(errno));
        kio_set_error("failed opening pipe for reading: %s", cmd);
      }
      free(cmd);
      break;
    }
    case KIO_RX_OFFSET:
      if (split_offset(rx, &in->filename, &off) != KIO_OK) break;
      in->f = fopen(in->filename, "rb");
      if (!in->f) kio_set_error("failed to open %s: %s", in->filename, strerror(errno));
      break;
    default:
      in->f = fopen(rx, "rb");
      if (!in->f) kio_set_error("failed to open %s: %s", rx, strerror(errno));
      break;
  }
  if (!in->f) {
    input_free(in);
    return KIO_ERR;
  }
  if (kind == KIO_RX_PIPE) {
#ifdef F_SETPIPE_SZ
    if (!in->gz && !in->prov) (void)fcntl(fileno(in->f), F_SETPIPE_SZ, KIO_PIPE_BUF);  /* best effort */
#endif
    set_big_buffer(in->f, &in->buf, KIO_PIPE_BUF);
  } else if (kind != KIO_RX_STDIN) {
    set_big_buffer(in->f, &in->buf, KIO_STREAM_BUF);
  }
  if (kind == KIO_RX_OFFSET && seek_to(in, off) != KIO_OK) {
    kio_input_close(in);
    return KIO_ERR;
  }
  *out = in;
  return KIO_OK;
}

int kio_read_header(FILE *f, int *binary) {
  int c = getc_unlocked(f);
  if (c != 0) {
    if (c != EOF) ungetc(c, f);
    *binary = 0;
    return KIO_OK;
  }
  c = getc_unlocked(f);
  if (c != 'B') {
    if (c != EOF) ungetc(c, f);
    kio_set_error("binary header \\0 not followed by B");
    return KIO_ERR;
  }
  *binary = 1;
  return KIO_OK;
}

int kio_input_reopen_q(kio_input **in, const char *rx, int *binary, int quiet) {
  kio_input *cur = *in;
  int ok = KIO_OK;
  if (cur && cur->kind == KIO_RX_OFFSET &&
      kio_classify_rxfilename(rx) == KIO_RX_OFFSET) {
    char *file = NULL;
    long long off;
    if (split_offset(rx, &file, &off) == KIO_OK && !strcmp(file, cur->filename)) {
      free(file);
      char *nm = dupstr(rx);
      if (nm) { free(cur->name); cur->name = nm; }
      clearerr(cur->f);
      ok = seek_to(cur, off);
      goto header;
    }
    free(file);
  }
  kio_input_close(cur);
  *in = NULL;
  ok = input_open_raw(&cur, rx);
  *in = cur;
header:
  if (ok == KIO_OK && binary) ok = kio_read_header(cur->f, binary);
  if (ok != KIO_OK) {
    if (!quiet) KIO_ERROR("Error opening input stream %s", kio_printable_rx(rx));
    kio_input_close(*in);
    *in = NULL;
  }
  return ok;
}

int kio_input_open(kio_input **in, const char *rx, int *binary) {
  *in = NULL;
  return kio_input_reopen_q(in, rx, binary, 0);
}

int kio_input_reopen(kio_input **in, const char *rx, int *binary) {
  return kio_input_reopen_q(in, rx, binary, 0);
}

FILE *kio_input_stream(kio_input *in) { return in ? in->f : NULL; }
const char *kio_input_name(const kio_input *in) { return in ? in->name : ""; }
int kio_input_is_pipe(const kio_input *in) { return in && in->kind == KIO_RX_PIPE; }
void kio_input_set_pipe_provider(const kio_pipe_provider *p) { pipe_provider = p; }
int kio_input_can_take(const kio_input *in, const struct kio_holder *h) {
  return in && in->prov && pipe_provider->take && pipe_provider->take_holder == h;
}
int kio_input_take(kio_input *in, char **key, size_t *keycap, void *obj) {
  return pipe_provider->take(in->prov, key, keycap, obj);
}

void kio_pipe_status_warn(const char *name, int status) {
  kio_logf(KIO_LOG_WARNING, "kio_input_close", __FILE__, __LINE__,
           "Pipe %s had nonzero return status %d", name, status);
}

int kio_input_close(kio_input *in) {
  if (!in) return KIO_OK;
  int ret = KIO_OK;
  if (in->kind == KIO_RX_PIPE) {
    /* The in-process gunzip gives the wait status the child would have. */
    int status = in->gz ? kio_gzip_close(in->gz, in->f)
                 : in->prov ? pipe_provider->close(in->prov, in->f) : pclose(in->f);
    if (status != 0) {
      kio_pipe_status_warn(in->name, status);
      ret = KIO_ERR;
    }
  } else if (in->kind != KIO_RX_STDIN) {
    fclose(in->f);
  }
  input_free(in);
  return ret;
}

/* ---------------- basic values ---------------- */

static long file_pos(FILE *f) { return ftell(f); }

static int skip_ws(FILE *f) {
  int c;
  while ((c = getc_unlocked(f)) != EOF && isspace(c)) {}
  if (c != EOF) ungetc(c, f);
  return c;
}

static const char *char_str(int c, char *buf) {
  if (c == EOF) return "EOF";
  if (isprint(c)) snprintf(buf, 8, "%c", c);
  else snprintf(buf, 8, "[%d]", c);
  return buf;
}

int kio_read_word(FILE *f, char **buf, size_t *cap) {
  int c = skip_ws(f);
  if (c == EOF) return KIO_EOF;
  size_t n = 0;
  while ((c = getc_unlocked(f)) != EOF && !isspace(c)) {
    if (c == '\0') { /* a C string cannot hold it: the key would be cut short */
      if (*buf) (*buf)[n] = '\0';  /* callers print the key read so far */
      kio_set_error("NUL byte in key");
      return KIO_ERR;
    }
    if (n + 1 >= *cap) {
      size_t nc = *cap ? *cap * 2 : 64;
      char *nb = realloc(*buf, nc);
      if (!nb) { kio_set_error("out of memory"); return KIO_ERR; }
      *buf = nb;
      *cap = nc;
    }
    (*buf)[n++] = (char)c;
  }
  if (c != EOF) ungetc(c, f);
  (*buf)[n] = '\0';
  return KIO_OK;
}

/* Reads a whitespace-delimited word into buf; 0 if none (EOF) or too long. */
static int read_word_fixed(FILE *f, char *buf, size_t cap) {
  if (skip_ws(f) == EOF || cap == 0) return 0;
  size_t n = 0;
  int c;
  while ((c = getc_unlocked(f)) != EOF && !isspace(c)) {
    if (n + 1 >= cap) { buf[n] = '\0'; return 0; }
    buf[n++] = (char)c;
  }
  if (c != EOF) ungetc(c, f);
  buf[n] = '\0';
  return n > 0;
}

int kio_read_token(FILE *f, int binary, char *buf, size_t cap) {
  (void)binary; /* '>>' skips whitespace in both modes */
  if (!read_word_fixed(f, buf, cap)) {
    kio_set_error("ReadToken, failed to read token at file position %ld", file_pos(f));
    return KIO_ERR;
  }
  int c = getc_unlocked(f);
  if (c == EOF || !isspace(c)) {
    char cb[8];
    kio_set_error("ReadToken, expected space after token, saw instead %s, "
                  "at file position %ld", char_str(c, cb), file_pos(f));
    return KIO_ERR;
  }
  return KIO_OK;
}

int kio_expect_token(FILE *f, int binary, const char *token) {
  char buf[256];
  (void)binary;
  long pos = file_pos(f);
  if (!read_word_fixed(f, buf, sizeof buf) || getc_unlocked(f) == EOF) {
    kio_set_error("Failed to read token [started at file position %ld], expected %s",
                  pos, token);
    return KIO_ERR;
  }
  if (strcmp(buf, token) != 0 && !(token[0] == '<' && !strcmp(buf, token + 1))) {
    kio_set_error("Expected token \"%s\", got instead \"%s\".", token, buf);
    return KIO_ERR;
  }
  return KIO_OK;
}

void kio_write_token(FILE *f, int binary, const char *token) {
  (void)binary;
  fputs(token, f);
  putc_unlocked(' ', f);
}

int kio_peek(FILE *f, int binary) {
  if (!binary) skip_ws(f);
  int c = getc_unlocked(f);
  if (c != EOF) ungetc(c, f);
  return c;
}

int kio_peek_token(FILE *f, int binary) {
  if (!binary) skip_ws(f);
  int c = getc_unlocked(f);
  if (c != '<') {
    if (c != EOF) ungetc(c, f);
    return c;
  }
  int d = getc_unlocked(f);
  if (d != EOF) ungetc(d, f);
  ungetc('<', f); /* stdio guarantees one pushback; the '<' was re-buffered */
  return d;
}

/* Binary integer: length byte then raw little-endian bytes. */
static int read_bin_int(FILE *f, int len_expected, void *dst, int size) {
  int c = getc_unlocked(f);
  if (c == EOF) {
    kio_set_error("ReadBasicType: encountered end of stream.");
    return KIO_ERR;
  }
  if ((signed char)c != len_expected) {
    kio_set_error("ReadBasicType: did not get expected integer type, %d vs. %d.  "
                  "You can change this code to successfully read it later, if needed.",
                  (int)(signed char)c, len_expected);
    return KIO_ERR;
  }
  if (fread_unlocked(dst, (size_t)size, 1, f) != 1) {
    kio_set_error("Read failure in ReadBasicType, file position is %ld", file_pos(f));
    return KIO_ERR;
  }
  return KIO_OK;
}

/* Text integer as C++ '>>': whitespace, optional sign, digits; range checked. */
static int read_text_int(FILE *f, long long lo, long long hi, long long *v) {
  skip_ws(f);
  int c = getc_unlocked(f), neg = 0, nd = 0;
  unsigned long long acc = 0;
  if (c == '-' || c == '+') { neg = (c == '-'); c = getc_unlocked(f); }
  while (c != EOF && isdigit(c)) {
    if (acc < (1ULL << 62)) acc = acc * 10 + (unsigned)(c - '0');
    nd++;
    c = getc_unlocked(f);
  }
  if (c != EOF) ungetc(c, f);
  long long x = neg ? -(long long)acc : (long long)acc;
  if (!nd || acc >= (1ULL << 62) || x < lo || x > hi) {
    char cb[8];
    kio_set_error("Read failure in ReadBasicType, file position is %ld, next char is %s",
                  file_pos(f), char_str(c, cb));
    return KIO_ERR;
  }
  *v = x;
  return KIO_OK;
}

int kio_read_int32(FILE *f, int binary, int32_t *v) {
  if (binary) return read_bin_int(f, 4, v, 4);
  long long x;
  if (read_text_int(f, INT32_MIN, INT32_MAX, &x) != KIO_OK) return KIO_ERR;
  *v = (int32_t)x;
  return KIO_OK;
}

int kio_read_uint32(FILE *f, int binary, uint32_t *v) {
  if (binary) return read_bin_int(f, -4, v, 4);
  long long x;
  if (read_text_int(f, 0, UINT32_MAX, &x) != KIO_OK) return KIO_ERR;
  *v = (uint32_t)x;
  return KIO_OK;
}

int kio_read_uint16(FILE *f, int binary, uint16_t *v) {
  if (binary) return read_bin_int(f, -2, v, 2);
  long long x;
  if (read_text_int(f, 0, UINT16_MAX, &x) != KIO_OK) return KIO_ERR;
  *v = (uint16_t)x;
  return KIO_OK;
}

void kio_write_int32(FILE *f, int binary, int32_t v) {
  if (binary) { putc_unlocked(4, f); fwrite_unlocked(&v, 4, 1, f); }
  else fprintf(f, "%" PRId32 " ", v);
}
void kio_write_uint32(FILE *f, int binary, uint32_t v) {
  if (binary) { putc_unlocked(0xFC, f); fwrite_unlocked(&v, 4, 1, f); }
  else fprintf(f, "%" PRIu32 " ", v);
}
void kio_write_uint16(FILE *f, int binary, uint16_t v) {
  if (binary) { putc_unlocked(0xFE, f); fwrite_unlocked(&v, 2, 1, f); }
  else fprintf(f, "%u ", (unsigned)v);
}

/* Text real: the longest prefix that looks like a number (or inf/nan),
 * converted with strtod; like '>>' the rest of the stream is left alone. */
static int read_text_real(FILE *f, double *v) {
  char buf[64];
  size_t n = 0;
  skip_ws(f);
  int c = getc_unlocked(f);
  if (c == '-' || c == '+') { buf[n++] = (char)c; c = getc_unlocked(f); }
  if (c != EOF && (c == 'i' || c == 'I' || c == 'n' || c == 'N')) {
    while (c != EOF && isalpha(c) && n < 12) { buf[n++] = (char)c; c = getc_unlocked(f); }
  } else {
    int seen_e = 0;
    while (c != EOF && n < sizeof buf - 1) {
      if (isdigit(c) || c == '.') {
      } else if ((c == 'e' || c == 'E') && !seen_e) {
        seen_e = 1;
      } else if ((c == '-' || c == '+') && (buf[n - 1] == 'e' || buf[n - 1] == 'E')) {
      } else {
        break;
      }
      buf[n++] = (char)c;
      c = getc_unlocked(f);
    }
  }
  if (c != EOF) ungetc(c, f);
  buf[n] = '\0';
  char *end;
  double x = n ? strtod(buf, &end) : 0;
  if (!n || *end) {
    kio_set_error("Read failure in ReadBasicType, file position is %ld, read \"%s\"",
                  file_pos(f), buf);
    return KIO_ERR;
  }
  *v = x;
  return KIO_OK;
}

int kio_read_float(FILE *f, int binary, float *v) {
  if (binary) {
    int c = getc_unlocked(f);
    if (c == 4) {
      if (fread_unlocked(v, 4, 1, f) == 1) return KIO_OK;
    } else if (c == 8) {
      double d;
      if (fread_unlocked(&d, 8, 1, f) == 1) { *v = (float)d; return KIO_OK; }
    } else {
      kio_set_error("ReadBasicType: expected float, saw %d, at file position %ld",
                    c, file_pos(f));
      return KIO_ERR;
    }
    kio_set_error("Read failure in ReadBasicType, file position is %ld", file_pos(f));
    return KIO_ERR;
  }
  double d;
  if (read_text_real(f, &d) != KIO_OK) return KIO_ERR;
  *v = (float)d;
  return KIO_OK;
}

int kio_read_double(FILE *f, int binary, double *v) {
  if (binary) {
    int c = getc_unlocked(f);
    if (c == 8) {
      if (fread_unlocked(v, 8, 1, f) == 1) return KIO_OK;
    } else if (c == 4) {
      float x;
      if (fread_unlocked(&x, 4, 1, f) == 1) { *v = x; return KIO_OK; }
    } else {
      kio_set_error("ReadBasicType: expected float, saw %d, at file position %ld",
                    c, file_pos(f));
      return KIO_ERR;
    }
    kio_set_error("Read failure in ReadBasicType, file position is %ld", file_pos(f));
    return KIO_ERR;
  }
  return read_text_real(f, v);
}

void kio_write_text_real(FILE *f, double v) {
  if (isnan(v)) fputs(signbit(v) ? "-nan" : "nan", f);
  else if (isinf(v)) fputs(v < 0 ? "-inf" : "inf", f);
  else fprintf(f, "%.7g", v);
}

void kio_write_float(FILE *f, int binary, float v) {
  if (binary) { putc_unlocked(4, f); fwrite_unlocked(&v, 4, 1, f); }
  else { kio_write_text_real(f, v); putc_unlocked(' ', f); }
}

void kio_write_double(FILE *f, int binary, double v) {
  if (binary) { putc_unlocked(8, f); fwrite_unlocked(&v, 8, 1, f); }
  else { kio_write_text_real(f, v); putc_unlocked(' ', f); }
}

int kio_read_bool(FILE *f, int binary, int *v) {
  if (!binary) skip_ws(f);
  int c = getc_unlocked(f);
  if (c == 'T' || c == 'F') { *v = (c == 'T'); return KIO_OK; }
  if (c != EOF) ungetc(c, f);
  char cb[8];
  kio_set_error("Read failure in ReadBasicType<bool>, file position is %ld, next char is %s",
                file_pos(f), char_str(c, cb));
  return KIO_ERR;
}

void kio_write_bool(FILE *f, int binary, int v) {
  putc_unlocked(v ? 'T' : 'F', f);
  if (!binary) putc_unlocked(' ', f);
}

int kio_read_int_vector(FILE *f, int binary, int32_t **v, int32_t *n) {
  *v = NULL;
  *n = 0;
  if (binary) {
    int c = getc_unlocked(f);
    int32_t cnt;
    if (c != 4) {
      kio_set_error("ReadIntegerVector: expected to see type of size 4, saw instead %d, "
                    "at file position %ld", c, file_pos(f));
      return KIO_ERR;
    }
    if (fread_unlocked(&cnt, 4, 1, f) != 1 || cnt < 0) goto bad;
    /* Grow in 1M-element steps as data arrives (fuzzing: a corrupt count
     * must not allocate 8 GB before the read fails). */
    int32_t *a = NULL;
    for (int32_t got = 0, cap = 0; got < cnt;) {
      int32_t k = cnt - got < (1 << 20) ? cnt - got : (1 << 20);
      if (got + k > cap) {
        cap = cnt - got - k < cap ? cnt : (cap ? 2 * cap : k);
        if (cap < got + k) cap = got + k;
        int32_t *na = realloc(a, (size_t)cap * 4);
        if (!na) { free(a); goto bad; }
        a = na;
      }
      if (fread_unlocked(a + got, 4, (size_t)k, f) != (size_t)k) { free(a); goto bad; }
      got += k;
    }
    *v = a;
    *n = cnt;
    return KIO_OK;
  }
  if (skip_ws(f) != '[') {
    kio_set_error("ReadIntegerVector: expected to see [, at file position %ld", file_pos(f));
    return KIO_ERR;
  }
  getc_unlocked(f);
  int32_t cnt = 0, cap = 0, *a = NULL;
  while (skip_ws(f) != ']') {
    long long x;
    if (read_text_int(f, INT32_MIN, INT32_MAX, &x) != KIO_OK) { free(a); goto bad; }
    if (cnt == cap) {
      cap = cap ? cap * 2 : 16;
      int32_t *na = realloc(a, (size_t)cap * 4);
      if (!na) { free(a); goto bad; }
      a = na;
    }
    a[cnt++] = (int32_t)x;
  }
  getc_unlocked(f);
  *v = a;
  *n = cnt;
  return KIO_OK;
bad:
  kio_set_error("ReadIntegerVector: read failure at file position %ld", file_pos(f));
  return KIO_ERR;
}

void kio_write_int_vector(FILE *f, int binary, const int32_t *v, int32_t n) {
  if (binary) {
    putc_unlocked(4, f);
    fwrite_unlocked(&n, 4, 1, f);
    if (n > 0) fwrite_unlocked(v, 4, (size_t)n, f);
  } else {
    fputs("[ ", f);
    for (int32_t i = 0; i < n; i++) fprintf(f, "%" PRId32 " ", v[i]);
    fputs("]\n", f);
  }
}
