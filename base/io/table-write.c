/* Table writers (reference 1.11): ark, scp (write to the files an existing
 * scp names), ark,scp (archive + "KEY ARCHIVE:OFFSET" lines). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "io-internal.h"
#include "base/sys/log.h"
#include "table-internal.h"

typedef struct { char *key, *wx; } scp_entry;

struct kio_writer {
  const kio_holder *h;
  kio_wspec spec;
  char *wspecifier;
  kio_output *ark, *scp;
  int write_error;
  scp_entry *entries; /* SCRIPT: sorted (key, wxfilename) */
  size_t n;
};

static int cmp_scp(const void *a, const void *b) {
  return strcmp(((const scp_entry *)a)->key, ((const scp_entry *)b)->key);
}

/* Reads the scp whose files a "scp:" writer writes to. */
static int read_scp(kio_writer *w) {
  kio_input *in = NULL;
  int binary;
  size_t cap = 0, linecap = 0;
  char *line = NULL, *key, *rest;
  kio_clear_error();
  if (kio_input_reopen_q(&in, w->spec.script, &binary, 1) != KIO_OK) {
    KIO_WARN("Error opening script file: %s (%s)", kio_printable_rx(w->spec.script),
             kio_last_error());
    return KIO_ERR;
  }
  int ret;
  while ((ret = kio_scp_next_line(kio_input_stream(in), &line, &linecap, &key, &rest)) ==
         KIO_OK) {
    if (w->n == cap) {
      cap = cap ? 2 * cap : 256;
      scp_entry *ne = realloc(w->entries, cap * sizeof *ne);
      if (!ne) { ret = KIO_ERR; break; }
      w->entries = ne;
    }
    w->entries[w->n].key = strdup(key);
    w->entries[w->n].wx = strdup(rest);
    w->n++;
    if (!w->entries[w->n - 1].key || !w->entries[w->n - 1].wx) { ret = KIO_ERR; break; }
  }
  if (ret == KIO_ERR && line) KIO_WARN("Invalid line in script file: \"%s\"", line);
  free(line);
  if (kio_input_close(in) != KIO_OK || ret != KIO_EOF || binary) {
    KIO_WARN("Failed to read script file %s", kio_printable_rx(w->spec.script));
    return KIO_ERR;
  }
  qsort(w->entries, w->n, sizeof *w->entries, cmp_scp);
  for (size_t i = 0; i + 1 < w->n; i++)
    if (!strcmp(w->entries[i].key, w->entries[i + 1].key)) {
      KIO_WARN("Script file %s contains duplicate key: %s",
               kio_printable_rx(w->spec.script), w->entries[i].key);
      return KIO_ERR;
    }
  return KIO_OK;
}

static void writer_free(kio_writer *w) {
  for (size_t i = 0; i < w->n; i++) {
    free(w->entries[i].key);
    free(w->entries[i].wx);
  }
  free(w->entries);
  free(w->wspecifier);
  free(w);
}

/* What the archive (and scp) say if the program dies of a fatal error while
 * they go to standard output or a stream that cannot be removed: an entry
 * cut short after its key (a '\0' not followed by 'B' where the object's
 * binary header starts), which Kaldi's archive readers and ours reject, and
 * an scp line without a filename. The key names the program. */
static int set_marks(kio_writer *w) {
  const char *prog = kio_log_program();
  size_t n = strlen(prog) + 64;
  char *mark = malloc(n);
  if (!mark) return KIO_ERR;
  int len = snprintf(mark, n, "\n%s:fatal-error:incomplete-output ", prog);
  /* archive: the key, its space and the '\0' */
  int rc = kio_output_set_mark(w->ark, mark, (size_t)len + 1);
  /* scp: the key alone on its line */
  mark[len - 1] = '\n';
  if (rc == KIO_OK) rc = kio_output_set_mark(w->scp, mark + 1, (size_t)len - 1);
  free(mark);
  return rc;
}

int kio_writer_open(kio_writer **pw, const char *wspecifier, const kio_holder *h) {
  *pw = NULL;
  if (!wspecifier || !*wspecifier) return KIO_OK; /* not open: writes skipped */
  kio_writer *w = calloc(1, sizeof *w);
  if (!w) return KIO_ERR;
  w->h = h;
  if (!(w->wspecifier = strdup(wspecifier))) goto fail;
  if (kio_parse_wspecifier(wspecifier, &w->spec) != KIO_OK) {
    KIO_WARN("Invalid wspecifier %s", wspecifier);
    goto fail;
  }
  kio_clear_error();
  if (w->spec.kind == KIO_SPEC_SCRIPT) {
    if (read_scp(w) != KIO_OK) goto fail;
  } else {
    if (w->spec.kind == KIO_SPEC_BOTH &&
        kio_classify_wxfilename(w->spec.archive) != KIO_WX_FILE)
      KIO_WARN("When writing to both archive and script, the script file will generally "
               "not be interpreted correctly unless the archive is an actual file: "
               "wspecifier = %s", wspecifier);
    if (kio_output_open_q(&w->ark, w->spec.archive, w->spec.binary, 0, 1) != KIO_OK) {
      KIO_WARN("Failed to open stream: %s", kio_printable_wx(w->spec.archive));
      goto fail;
    }
    if (w->spec.kind == KIO_SPEC_BOTH &&
        kio_output_open_q(&w->scp, w->spec.script, 0, 0, 1) != KIO_OK) {
      KIO_WARN("Failed to open stream: %s", kio_printable_wx(w->spec.script));
      goto fail;
    }
  }
  if (set_marks(w) != KIO_OK) goto fail;
  *pw = w;
  return KIO_OK;
fail:
  KIO_ERROR("Failed to open table for writing with wspecifier: %s: errno is %s",
            wspecifier, strerror(errno));
  kio_output_discard(w->ark);
  kio_output_discard(w->scp);
  writer_free(w);
  return KIO_ERR;
}

/* Header (binary, objects that have one) + holder output. */
static int write_object(kio_writer *w, FILE *f, const void *obj) {
  if (w->spec.binary && w->h->has_header) {
    putc_unlocked('\0', f);
    putc_unlocked('B', f);
  }
  return w->h->write(f, w->spec.binary, obj) == KIO_OK && !ferror(f) ? KIO_OK : KIO_ERR;
}

static int write_scp_entry(kio_writer *w, const char *key, const void *obj) {
  size_t lo = 0, hi = w->n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (strcmp(w->entries[mid].key, key) < 0) lo = mid + 1;
    else hi = mid;
  }
  if (lo == w->n || strcmp(w->entries[lo].key, key)) {
    if (w->spec.permissive) return KIO_OK;
    KIO_ERROR("Script file %s has no entry for key %s", kio_printable_rx(w->spec.script),
              key);
    return KIO_ERR;
  }
  const char *wx = w->entries[lo].wx;
  kio_output *out;
  if (kio_output_open_q(&out, wx, w->spec.binary, 0, 1) != KIO_OK) {
    KIO_ERROR("Failed to open stream: %s (writing key %s)", kio_printable_wx(wx), key);
    return KIO_ERR;
  }
  int ok = write_object(w, kio_output_stream(out), obj);
  if (ok != KIO_OK) kio_output_discard(out);
  if (ok != KIO_OK || kio_output_close(out) != KIO_OK) {
    KIO_ERROR("Failed to write data to %s (key %s)", kio_printable_wx(wx), key);
    return KIO_ERR;
  }
  return KIO_OK;
}

int kio_writer_write(kio_writer *w, const char *key, const void *obj) {
  if (!w) return KIO_OK;
  if (!kio_is_token(key)) {
    KIO_ERROR("Using invalid key %s", key ? key : "");
    return KIO_ERR;
  }
  if (w->spec.kind == KIO_SPEC_SCRIPT) return write_scp_entry(w, key, obj);
  if (w->write_error) {
    KIO_ERROR("Attempting to write to invalid stream %s",
              kio_printable_wx(w->spec.archive));
    return KIO_ERR;
  }
  FILE *f = kio_output_stream(w->ark);
  fputs(key, f);
  putc_unlocked(' ', f);
  off_t pos = w->scp ? ftello(f) : 0; /* offset right after "KEY " */
  if (write_object(w, f, obj) != KIO_OK) {
    KIO_ERROR("Write failure to %s (key %s)", kio_printable_wx(w->spec.archive), key);
    w->write_error = 1;
    return KIO_ERR;
  }
  if (w->spec.flush) fflush(f);
  if (w->scp) {
    FILE *s = kio_output_stream(w->scp);
    fprintf(s, "%s %s:%lld\n", key, w->spec.archive, (long long)pos);
    if (w->spec.flush) fflush(s);
    if (ferror(s)) {
      KIO_ERROR("Write failure to %s (key %s)", kio_printable_wx(w->spec.script), key);
      w->write_error = 1;
      return KIO_ERR;
    }
  }
  return KIO_OK;
}

int kio_writer_close(kio_writer *w) {
  if (!w) return KIO_OK;
  int ret = KIO_OK;
  if (w->write_error) {  /* not closed: a pipe's command would end its stream */
    kio_output_discard(w->ark);
    kio_output_discard(w->scp);
    ret = KIO_ERR;
  } else {
    if (kio_output_close(w->ark) != KIO_OK) ret = KIO_ERR;
    if (kio_output_close(w->scp) != KIO_OK) ret = KIO_ERR;
  }
  if (ret != KIO_OK)
    KIO_ERROR("Error closing TableWriter: wspecifier is %s", w->wspecifier);
  writer_free(w);
  return ret;
}

void kio_writer_discard(kio_writer *w) {
  if (!w) return;
  kio_output_discard(w->ark);
  kio_output_discard(w->scp);
  writer_free(w);
}
