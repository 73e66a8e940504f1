/* Shared pieces of the table readers: archive entries (reference 1.7) and
 * scp lines, ranges and object loading (reference 1.8). */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "io-internal.h"
#include "base/sys/log.h"
#include "table-internal.h"

void *kio_obj_new(const kio_holder *h) { return calloc(1, h->obj_size ? h->obj_size : 1); }

void kio_obj_delete(const kio_holder *h, void *obj) {
  if (!obj) return;
  h->free(obj);
  free(obj);
}

void kio_obj_swap(void *a, void *b, size_t n) {
  unsigned char tmp[256], *x = a, *y = b;
  while (n > 0) {
    size_t k = n < sizeof tmp ? n : sizeof tmp;
    memcpy(tmp, x, k); memcpy(x, y, k); memcpy(y, tmp, k);
    x += k; y += k; n -= k;
  }
}

int kio_ark_read_entry(FILE *f, const char *archive, const kio_holder *h,
                       char **key, size_t *keycap, void *obj) {
  const char *name = kio_printable_rx(archive);
  int r = kio_read_word(f, key, keycap);
  if (r == KIO_EOF && !ferror(f)) return KIO_EOF;
  if (r != KIO_OK) {
    KIO_WARN("Error reading archive %s", name);
    return KIO_ERR;
  }
  int c = getc_unlocked(f);
  if (c == EOF) {
    if (ferror(f)) {
      KIO_WARN("Error reading archive %s", name);
      return KIO_ERR;
    }
    return KIO_EOF; /* as Kaldi: a key that ends the file ends the archive */
  }
  if (c != ' ' && c != '\t' && c != '\n') {
    KIO_WARN("Invalid archive file format: expected space after key %s, got "
             "character %c, reading %s", *key, isprint(c) ? c : '?', name);
    return KIO_ERR;
  }
  if (c == '\n') ungetc(c, f); /* tab/space consumed, newline left */
  int binary = 1;
  kio_clear_error();
  if ((h->has_header && kio_read_header(f, &binary) != KIO_OK) ||
      h->read(f, binary, obj) != KIO_OK) {
    KIO_WARN("Object read failed, reading archive %s (key %s): %s", name, *key,
             kio_last_error());
    return KIO_ERR;
  }
  return KIO_OK;
}

static int is_white(int c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

int kio_scp_next_line(FILE *f, char **line, size_t *cap, char **key, char **rest) {
  ssize_t n = getline(line, cap, f);
  if (n < 0) return ferror(f) ? KIO_ERR : KIO_EOF;
  char *s = *line;
  if (n > 0 && s[n - 1] == '\n') s[--n] = '\0';
  /* A NUL would cut key or rxfilename short ("" = stdin): corrupt line. */
  if (memchr(s, '\0', (size_t)n)) return KIO_ERR;
  /* Kaldi's SplitStringOnFirstSpace: key, then the rest trimmed. */
  char *p = s;
  while (*p && is_white((unsigned char)*p)) p++;
  char *k = p;
  while (*p && !is_white((unsigned char)*p)) p++;
  char *kend = p;
  while (*p && is_white((unsigned char)*p)) p++;
  char *r = p, *e = s + n;
  while (e > r && is_white((unsigned char)e[-1])) e--;
  if (kend == k || e == r) return KIO_ERR;
  /* Copy the key out so that both parts can be NUL-terminated in place:
   * move the key to the start of the buffer (it is before rest). */
  size_t kl = (size_t)(kend - k);
  *e = '\0';
  memmove(s, k, kl);
  s[kl] = '\0';
  *key = s;
  *rest = r;
  return KIO_OK;
}

int kio_scp_split_range(const char *rest, char **rx, char **range) {
  size_t n = strlen(rest);
  *rx = *range = NULL;
  if (n == 0 || rest[n - 1] != ']') {
    *rx = strdup(rest);
    *range = strdup("");
  } else {
    const char *b = strchr(rest, '[');
    /* exactly one '[', text before it and inside it */
    if (!b || strchr(b + 1, '[') || b == rest || b + 2 >= rest + n) return KIO_ERR;
    *rx = strndup(rest, (size_t)(b - rest));
    *range = strndup(b + 1, (size_t)(rest + n - 1 - (b + 1)));
  }
  if (!*rx || !*range) {
    free(*rx);
    free(*range);
    *rx = *range = NULL;
    return KIO_ERR;
  }
  return KIO_OK;
}

/* "a:b" -> a, b; ":" -> -1, -1. */
static int parse_span(const char *s, size_t n, int32_t *a, int32_t *b) {
  if (n == 1 && s[0] == ':') { *a = *b = -1; return KIO_OK; }
  char tmp[64];
  if (n == 0 || n >= sizeof tmp) return KIO_ERR;
  memcpy(tmp, s, n);
  tmp[n] = '\0';
  char *colon = strchr(tmp, ':');
  if (!colon || strchr(colon + 1, ':')) return KIO_ERR;
  *colon = '\0';
  char *e1, *e2;
  errno = 0;
  long x = strtol(tmp, &e1, 10), y = strtol(colon + 1, &e2, 10);
  if (errno || e1 == tmp || *e1 || e2 == colon + 1 || *e2 || x < INT32_MIN ||
      x > INT32_MAX || y < INT32_MIN || y > INT32_MAX || x < 0 || y < 0)
    return KIO_ERR;
  *a = (int32_t)x;
  *b = (int32_t)y;
  return KIO_OK;
}

static int apply_range(const kio_holder *h, void *obj, const char *range) {
  int32_t r1, r2, c1 = -1, c2 = -1;
  const char *comma = strchr(range, ',');
  if (!h->apply_range) {
    kio_set_error("ranges are not supported for %s objects", h->name);
    return KIO_ERR;
  }
  if ((comma ? parse_span(range, (size_t)(comma - range), &r1, &r2)
             : parse_span(range, strlen(range), &r1, &r2)) != KIO_OK ||
      (comma && parse_span(comma + 1, strlen(comma + 1), &c1, &c2) != KIO_OK)) {
    kio_set_error("Invalid range specifier for matrix: %s", range);
    return KIO_ERR;
  }
  return h->apply_range(obj, r1, r2, c1, c2);
}

int kio_scp_load(kio_input **in, const char *rx, const char *range,
                 const kio_holder *h, void *obj) {
  int binary = 1;
  kio_clear_error();
  if (kio_input_reopen_q(in, rx, h->has_header ? &binary : NULL, 1) != KIO_OK) {
    KIO_WARN("Failed to open file %s: %s", kio_printable_rx(rx), kio_last_error());
    return KIO_ERR;
  }
  if (h->read(kio_input_stream(*in), binary, obj) != KIO_OK) {
    KIO_WARN("Failed to load object from %s: %s", kio_printable_rx(rx), kio_last_error());
    return KIO_ERR;
  }
  if (range && *range && apply_range(h, obj, range) != KIO_OK) {
    KIO_WARN("Failed to load object from %s[%s]: %s", kio_printable_rx(rx), range,
             kio_last_error());
    return KIO_ERR;
  }
  return KIO_OK;
}
