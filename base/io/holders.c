/* Table holders for int32 vectors (alignments, reference 2.4) and floats
 * (scores), plus Kaldi's IsToken. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "io.h"
#include "base/sys/log.h"
#include "table.h"

int kio_is_token(const char *key) {
  if (!key || !*key) return 0;
  for (const unsigned char *p = (const unsigned char *)key; *p; p++) {
    /* non-ASCII bytes are allowed (accented letters), except 255 (nbsp) */
    if ((!isprint(*p) || isspace(*p)) && (isascii(*p) || *p == 255)) return 0;
  }
  return 1;
}

/* ---- std::vector<int32> (BasicVectorHolder) ---- */

static int iv_reserve(kio_int_vec *x, int32_t n) {
  int32_t *nv = realloc(x->v, (size_t)(n ? n : 1) * sizeof(int32_t));
  if (!nv) {
    kio_set_error("out of memory reading vector of %d ints", n);
    return KIO_ERR;
  }
  x->v = nv;
  return KIO_OK;
}

/* Text: the rest of the line holds whitespace-separated integers. */
static int iv_read_text(FILE *f, kio_int_vec *x) {
  int32_t cap = 0, n = 0;
  int c = getc_unlocked(f);
  if (c == EOF) {
    kio_set_error("BasicVectorHolder::Read, error reading line [eof]");
    return KIO_ERR;
  }
  x->n = 0;
  for (;;) {
    while (c != '\n' && c != EOF && isspace(c)) c = getc_unlocked(f);
    if (c == '\n' || c == EOF) break;
    int neg = 0, nd = 0;
    long long v = 0;
    if (c == '-' || c == '+') { neg = (c == '-'); c = getc_unlocked(f); }
    while (c != EOF && isdigit(c)) {
      if (v <= 1LL << 32) v = v * 10 + (c - '0');
      nd++;
      c = getc_unlocked(f);
    }
    if (neg) v = -v;
    if (!nd || v < INT32_MIN || v > INT32_MAX || (c != EOF && !isspace(c))) {
      kio_set_error("BasicVectorHolder::Read, could not interpret line "
                    "(bad integer at element %d)", n);
      while (c != '\n' && c != EOF) c = getc_unlocked(f);
      return KIO_ERR;
    }
    if (n == cap) {
      cap = cap ? 2 * cap : 64;
      if (iv_reserve(x, cap) != KIO_OK) return KIO_ERR;
    }
    x->v[n++] = (int32_t)v;
  }
  x->n = n;
  return KIO_OK;
}

static int iv_read(FILE *f, int binary, void *obj) {
  kio_int_vec *x = obj;
  if (!binary) return iv_read_text(f, x);
  long pos = ftell(f);
  int32_t size;
  x->n = 0;
  if (kio_read_int32(f, 1, &size) != KIO_OK || size < 0) goto bad;
  /* Grow while reading so a corrupt size cannot allocate gigabytes; read
   * the "04 i32" pairs in blocks (5 bytes each). */
  int32_t cap = size < 65536 ? size : 65536;
  if (iv_reserve(x, cap) != KIO_OK) return KIO_ERR;
  unsigned char blk[5 * 1024];
  for (int32_t i = 0; i < size;) {
    if (i == cap) {
      cap = (size - cap < cap) ? size : 2 * cap;
      if (iv_reserve(x, cap) != KIO_OK) return KIO_ERR;
    }
    int32_t k = size - i < 1024 ? size - i : 1024;
    if (k > cap - i) k = cap - i;
    if (fread_unlocked(blk, 5, (size_t)k, f) != (size_t)k) goto bad;
    for (int32_t j = 0; j < k; j++) {
      if (blk[5 * j] != 4) goto bad;
      memcpy(&x->v[i + j], blk + 5 * j + 1, 4);
    }
    i += k;
  }
  x->n = size;
  return KIO_OK;
bad:
  x->n = 0;
  kio_set_error("BasicVectorHolder::Read, read error or unexpected data at archive "
                "entry beginning at file position %ld", pos);
  return KIO_ERR;
}

static int iv_write(FILE *f, int binary, const void *obj) {
  const kio_int_vec *x = obj;
  if (binary) {
    unsigned char blk[5 * 1024];
    kio_write_int32(f, 1, x->n);
    for (int32_t i = 0; i < x->n;) {
      int32_t k = x->n - i < 1024 ? x->n - i : 1024;
      for (int32_t j = 0; j < k; j++) {
        blk[5 * j] = 4;
        memcpy(blk + 5 * j + 1, &x->v[i + j], 4);
      }
      fwrite_unlocked(blk, 5, (size_t)k, f);
      i += k;
    }
  } else {
    /* text: the values only (no size), each followed by a space, then \n */
    char buf[16];
    for (int32_t i = 0; i < x->n; i++) {
      int32_t v = x->v[i];
      char *p = buf + sizeof buf;
      uint32_t u = v < 0 ? 0u - (uint32_t)v : (uint32_t)v;
      *--p = ' ';
      do { *--p = (char)('0' + u % 10); u /= 10; } while (u);
      if (v < 0) *--p = '-';
      fwrite_unlocked(p, 1, (size_t)(buf + sizeof buf - p), f);
    }
    putc_unlocked('\n', f);
  }
  return ferror(f) ? KIO_ERR : KIO_OK;
}

static void iv_free(void *obj) {
  kio_int_vec *x = obj;
  free(x->v);
  x->v = NULL;
  x->n = 0;
}

const kio_holder kio_int_vec_holder = {
  "std::vector<int32>", sizeof(kio_int_vec), 1, iv_read, iv_write, iv_free, NULL
};

/* ---- float (BasicHolder<float>) ---- */

static int fl_read(FILE *f, int binary, void *obj) {
  float *x = obj;
  int c;
  if (!binary) {
    while ((c = getc_unlocked(f)) != EOF && isspace(c) && c != '\n') {}
    if (c != EOF) ungetc(c, f);
    if (c == '\n') {
      kio_set_error("Found newline but expected basic type.");
      return KIO_ERR;
    }
  }
  if (kio_read_float(f, binary, x) != KIO_OK) return KIO_ERR;
  if (!binary) {
    while ((c = getc_unlocked(f)) != EOF && isspace(c) && c != '\n') {}
    if (c != '\n') {
      kio_set_error("BasicHolder::Read, expected newline, got %s",
                    c == EOF ? "EOF" : "another character");
      if (c != EOF) ungetc(c, f);
      return KIO_ERR;
    }
  }
  return KIO_OK;
}

static int fl_write(FILE *f, int binary, const void *obj) {
  kio_write_float(f, binary, *(const float *)obj);
  if (!binary) putc_unlocked('\n', f);
  return ferror(f) ? KIO_ERR : KIO_OK;
}

static void fl_free(void *obj) { *(float *)obj = 0; }

const kio_holder kio_float_holder = {
  "float", sizeof(float), 1, fl_read, fl_write, fl_free, NULL
};

/* Single-token entries, e.g. utt2spk's speaker: one token per line. */
static int tok_read(FILE *f, int binary, void *obj) {
  kio_token *t = obj;
  (void)binary;
  int c;
  while ((c = getc_unlocked(f)) == ' ' || c == '\t') {}
  size_t n = 0;
  while (c != EOF && c != ' ' && c != '\t' && c != '\n' && c != '\r') {
    if (n + 1 >= t->cap) {
      size_t cap = t->cap ? 2 * t->cap : 64;
      char *s = realloc(t->s, cap);
      if (!s) return KIO_ERR;
      t->s = s;
      t->cap = cap;
    }
    t->s[n++] = (char)c;
    c = getc_unlocked(f);
  }
  if (!n) { kio_set_error("empty token"); return KIO_ERR; }
  t->s[n] = '\0';
  while (c == ' ' || c == '\t' || c == '\r') c = getc_unlocked(f);
  if (c != '\n' && c != EOF) { kio_set_error("junk after token"); return KIO_ERR; }
  return KIO_OK;
}
static int tok_write(FILE *f, int binary, const void *obj) {
  (void)binary;
  fprintf(f, "%s\n", ((const kio_token *)obj)->s);
  return KIO_OK;
}
static void tok_free(void *obj) { kio_token *t = obj; free(t->s); t->s = NULL; t->cap = 0; }
const kio_holder kio_token_holder = {"Token", sizeof(kio_token), 0, tok_read, tok_write, tok_free,
                                     NULL};
