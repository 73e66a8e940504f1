/* rspecifier / wspecifier grammar (reference 1.6, Kaldi's Classify*specifier). */
#include <ctype.h>
#include <string.h>

#include "base/sys/log.h"
#include "table.h"

/* Calls fn(opt, len, ctx) for each field of s[0..n) split on ',' or ' ' (empty
 * fields included, as Kaldi's SplitStringToVector(..., false)). Stops at the
 * first nonzero return and passes it back. */
static int for_each_opt(const char *s, size_t n,
                        int (*fn)(const char *, size_t, void *), void *ctx) {
  size_t start = 0;
  for (size_t i = 0; i <= n; i++) {
    if (i == n || s[i] == ',' || s[i] == ' ') {
      int r = fn(s + start, i - start, ctx);
      if (r) return r;
      start = i + 1;
    }
  }
  return 0;
}

static int is(const char *o, size_t n, const char *name) {
  return strlen(name) == n && !memcmp(o, name, n);
}

static int rspec_opt(const char *o, size_t n, void *ctx) {
  kio_rspec *r = ctx;
  if (is(o, n, "b") || is(o, n, "t")) {}
  else if (is(o, n, "o")) r->once = 1;
  else if (is(o, n, "no")) r->once = 0;
  else if (is(o, n, "p")) r->permissive = 1;
  else if (is(o, n, "np")) r->permissive = 0;
  else if (is(o, n, "s")) r->sorted = 1;
  else if (is(o, n, "ns")) r->sorted = 0;
  else if (is(o, n, "cs")) r->called_sorted = 1;
  else if (is(o, n, "ncs")) r->called_sorted = 0;
  else if (is(o, n, "bg")) r->background = 1;
  else if (is(o, n, "ark") || is(o, n, "scp")) {
    if (r->kind != KIO_SPEC_INVALID) return 1; /* repeated or both */
    r->kind = is(o, n, "ark") ? KIO_SPEC_ARCHIVE : KIO_SPEC_SCRIPT;
  } else {
    return 1;
  }
  return 0;
}

static int copy_name(char *dst, size_t cap, const char *src, size_t n) {
  if (n >= cap) return KIO_ERR;
  memcpy(dst, src, n);
  dst[n] = '\0';
  return KIO_OK;
}

int kio_parse_rspecifier(const char *rspec, kio_rspec *out) {
  memset(out, 0, sizeof *out);
  const char *colon = rspec ? strchr(rspec, ':') : NULL;
  size_t len = rspec ? strlen(rspec) : 0;
  if (!colon || isspace((unsigned char)rspec[len - 1])) goto bad;
  if (for_each_opt(rspec, (size_t)(colon - rspec), rspec_opt, out)) goto bad;
  if (out->kind == KIO_SPEC_INVALID) goto bad;
  if (copy_name(out->filename, sizeof out->filename, colon + 1, strlen(colon + 1)))
    goto bad;
  return KIO_OK;
bad:
  memset(out, 0, sizeof *out);
  return KIO_ERR;
}

static int wspec_opt(const char *o, size_t n, void *ctx) {
  kio_wspec *w = ctx;
  if (is(o, n, "b")) w->binary = 1;
  else if (is(o, n, "t")) w->binary = 0;
  else if (is(o, n, "f")) w->flush = 1;
  else if (is(o, n, "nf")) w->flush = 0;
  else if (is(o, n, "p")) w->permissive = 1;
  else if (is(o, n, "ark")) {
    if (w->kind != KIO_SPEC_INVALID) return 1; /* "scp,ark" or repeated */
    w->kind = KIO_SPEC_ARCHIVE;
  } else if (is(o, n, "scp")) {
    if (w->kind == KIO_SPEC_INVALID) w->kind = KIO_SPEC_SCRIPT;
    else if (w->kind == KIO_SPEC_ARCHIVE) w->kind = KIO_SPEC_BOTH;
    else return 1;
  } else {
    return 1;
  }
  return 0;
}

int kio_parse_wspecifier(const char *wspec, kio_wspec *out) {
  memset(out, 0, sizeof *out);
  out->binary = 1;
  const char *colon = wspec ? strchr(wspec, ':') : NULL;
  size_t len = wspec ? strlen(wspec) : 0;
  if (!colon || isspace((unsigned char)wspec[len - 1])) goto bad;
  if (for_each_opt(wspec, (size_t)(colon - wspec), wspec_opt, out)) goto bad;
  const char *rest = colon + 1;
  switch (out->kind) {
    case KIO_SPEC_ARCHIVE:
      if (copy_name(out->archive, sizeof out->archive, rest, strlen(rest))) goto bad;
      break;
    case KIO_SPEC_SCRIPT:
      if (copy_name(out->script, sizeof out->script, rest, strlen(rest))) goto bad;
      break;
    case KIO_SPEC_BOTH: {
      const char *comma = strchr(rest, ',');
      if (!comma) goto bad;
      if (copy_name(out->archive, sizeof out->archive, rest, (size_t)(comma - rest)) ||
          copy_name(out->script, sizeof out->script, comma + 1, strlen(comma + 1)))
        goto bad;
      break;
    }
    default:
      goto bad;
  }
  return KIO_OK;
bad:
  memset(out, 0, sizeof *out);
  return KIO_ERR;
}
