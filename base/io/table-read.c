/* Sequential table readers over archives and scp files (reference 1.9). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io-internal.h"
#include "base/sys/log.h"
#include "table-internal.h"

enum { S_HAVE_LINE, S_HAVE_OBJECT, S_EOF, S_ERROR };

struct kio_seq_reader {
  const kio_holder *h;
  kio_rspec spec;
  char *rspecifier;
  int state;
  kio_input *in;      /* archive, or the scp file */
  kio_input *take_in; /* archive from an in-process pipe provider, objects taken directly */
  kio_seq_ahead *ahead; /* archive entries read ahead on threads */
  char *key;          /* current key (archive: growing buffer) */
  size_t keycap;
  void *obj;
  char *err_key;      /* key at which a read error happened (for the message) */
  /* scp only */
  char *line;
  size_t linecap;
  kio_input *data_in; /* the object file currently open */
  char *data_rx, *range;          /* of the current line */
  char *loaded_rx, *loaded_range; /* what obj holds, if S_HAVE_OBJECT */
};

static void set_err_key(kio_seq_reader *r, const char *key) {
  free(r->err_key);
  r->err_key = key ? strdup(key) : NULL;
}

static void ark_next(kio_seq_reader *r) {
  int ret = r->ahead     ? kio_ahead_next(r->ahead, r->obj, &r->key, &r->keycap)
            : r->take_in ? kio_input_take(r->take_in, &r->key, &r->keycap, r->obj)
                         : kio_ark_read_entry(kio_input_stream(r->in), r->spec.filename,
                                              r->h, &r->key, &r->keycap, r->obj);
  if (ret == KIO_OK) {
    r->state = S_HAVE_OBJECT;
  } else if (ret == KIO_EOF) {
    r->state = S_EOF;
  } else {
    r->state = S_ERROR;
    set_err_key(r, r->key);
  }
}

/* Loads the object of the current scp line unless obj already holds it. */
static int scp_ensure_loaded(kio_seq_reader *r) {
  if (r->state == S_HAVE_OBJECT && r->loaded_rx && !strcmp(r->loaded_rx, r->data_rx) &&
      !strcmp(r->loaded_range, r->range))
    return KIO_OK;
  free(r->loaded_rx);
  free(r->loaded_range);
  r->loaded_rx = r->loaded_range = NULL;
  r->state = S_HAVE_LINE;
  if (kio_scp_load(&r->data_in, r->data_rx, r->range, r->h, r->obj) != KIO_OK)
    return KIO_ERR;
  r->loaded_rx = strdup(r->data_rx);
  r->loaded_range = strdup(r->range);
  if (!r->loaded_rx || !r->loaded_range) return KIO_ERR;
  r->state = S_HAVE_OBJECT;
  return KIO_OK;
}

static void scp_next_line(kio_seq_reader *r) {
  char *key, *rest;
  int ret = kio_scp_next_line(kio_input_stream(r->in), &r->line, &r->linecap, &key, &rest);
  if (ret == KIO_EOF) {
    r->state = S_EOF;
    return;
  }
  if (ret != KIO_OK) {
    KIO_WARN("We got an invalid line in the scp file. It should look like: "
             "some_key 1.ark:10, got: %s", r->line ? r->line : "");
    r->state = S_ERROR;
    set_err_key(r, NULL);
    return;
  }
  char *rx, *range;
  if (kio_scp_split_range(rest, &rx, &range) != KIO_OK) {
    KIO_WARN("Reading rspecifier '%s', cannot make sense of scp line %s %s",
             r->rspecifier, key, rest);
    r->state = S_ERROR;
    set_err_key(r, key);
    return;
  }
  free(r->data_rx);
  free(r->range);
  r->data_rx = rx;
  r->range = range;
  r->key = key; /* points into r->line */
  if (r->state != S_HAVE_OBJECT) r->state = S_HAVE_LINE;
}

static void scp_next(kio_seq_reader *r) {
  for (;;) {
    scp_next_line(r);
    if (r->state == S_EOF || r->state == S_ERROR) return;
    if (!r->spec.permissive) return; /* loaded lazily by value() */
    if (scp_ensure_loaded(r) == KIO_OK) return;
    /* permissive: unreadable entries are skipped */
  }
}

int kio_seq_open(kio_seq_reader **pr, const char *rspecifier, const kio_holder *h) {
  *pr = NULL;
  kio_seq_reader *r = calloc(1, sizeof *r);
  if (!r) return KIO_ERR;
  r->h = h;
  r->rspecifier = strdup(rspecifier ? rspecifier : "");
  r->obj = kio_obj_new(h);
  if (!r->rspecifier || !r->obj) goto fail;
  if (kio_parse_rspecifier(rspecifier, &r->spec) != KIO_OK) {
    KIO_WARN("Invalid rspecifier %s", rspecifier ? rspecifier : "");
    goto fail;
  }
  kio_clear_error();
  if (kio_input_reopen_q(&r->in, r->spec.filename, NULL, 1) != KIO_OK) {
    if (r->spec.kind == KIO_SPEC_SCRIPT)
      KIO_WARN("Failed to open script file %s (%s)", kio_printable_rx(r->spec.filename),
               kio_last_error());
    else
      KIO_WARN("Failed to open stream %s (%s)", kio_printable_rx(r->spec.filename),
               kio_last_error());
    goto fail;
  }
  r->state = S_HAVE_LINE;
  /* Float matrices from our own feature chain: taken as they are, not
   * written as archive bytes and parsed back (the same values). */
  if (r->spec.kind == KIO_SPEC_ARCHIVE && kio_input_can_take(r->in, h)) r->take_in = r->in;
  if (r->spec.kind == KIO_SPEC_ARCHIVE) ark_next(r);
  else scp_next(r);
  /* As Kaldi: an error on the very first entry makes the open fail. */
  if (r->state == S_ERROR) {
    if (r->spec.kind == KIO_SPEC_ARCHIVE)
      KIO_WARN("Error beginning to read archive file (wrong filename?): %s",
               kio_printable_rx(r->spec.filename));
    goto fail;
  }
  *pr = r;
  return KIO_OK;
fail:
  KIO_ERROR("Error constructing TableReader: rspecifier is %s", rspecifier ? rspecifier : "");
  r->state = S_HAVE_LINE;
  r->spec.permissive = 1; /* nothing more to report */
  kio_seq_close(r);
  return KIO_ERR;
}

int kio_seq_done(kio_seq_reader *r) {
  return !r || r->state == S_EOF || r->state == S_ERROR;
}

const char *kio_seq_key(kio_seq_reader *r) {
  return kio_seq_done(r) ? "" : r->key;
}

void *kio_seq_value(kio_seq_reader *r) {
  if (kio_seq_done(r)) {
    KIO_ERROR("Value() called at the end of table %s", r ? r->rspecifier : "");
    return NULL;
  }
  if (r->spec.kind == KIO_SPEC_SCRIPT && scp_ensure_loaded(r) != KIO_OK) {
    KIO_ERROR("Failed to load object from %s (to suppress this error, add the "
              "permissive (p, ) option to the rspecifier.",
              kio_printable_rx(r->data_rx));
    return NULL;
  }
  return r->obj;
}

void kio_seq_next(kio_seq_reader *r) {
  if (kio_seq_done(r)) return;
  if (r->spec.kind == KIO_SPEC_ARCHIVE) ark_next(r);
  else scp_next(r);
}

int kio_seq_close(kio_seq_reader *r) {
  if (!r) return KIO_OK;
  kio_ahead_stop(r->ahead);
  int pipe_failed = kio_input_close(r->in) != KIO_OK;
  kio_input_close(r->data_in);
  int ret = KIO_OK;
  /* A failed pipe counts only if we read to its end: a reader closed early
   * may have killed its writer (SIGPIPE), as Kaldi's Close(). */
  if (r->state == S_ERROR || (r->state == S_EOF && pipe_failed)) {
    const char *name = kio_printable_rx(r->spec.filename);
    int scp = r->spec.kind == KIO_SPEC_SCRIPT;
    if (r->spec.permissive) {
      KIO_WARN("Error detected closing TableReader for %s %s but ignoring it as "
               "permissive mode specified.", scp ? "scp file" : "archive", name);
    } else {
      char detail[600] = "";
      if (r->state == S_ERROR && r->err_key)
        snprintf(detail, sizeof detail, " (read error at key %.500s)", r->err_key);
      else if (r->state == S_EOF)
        snprintf(detail, sizeof detail, " (input pipe failed)");
      if (scp)
        KIO_ERROR("TableReader: reading script file failed: from scp %s%s", name, detail);
      else
        KIO_ERROR("TableReader: error detected closing archive %s%s", name, detail);
      ret = KIO_ERR;
    }
  }
  if (r->obj) kio_obj_delete(r->h, r->obj);
  if (r->spec.kind == KIO_SPEC_ARCHIVE) free(r->key);
  free(r->rspecifier);
  free(r->err_key);
  free(r->line);
  free(r->data_rx);
  free(r->range);
  free(r->loaded_rx);
  free(r->loaded_range);
  free(r);
  return ret;
}


int kio_seq_take(kio_seq_reader *r, void *obj) {
  void *v = kio_seq_value(r);
  if (!v) return KIO_ERR;
  kio_obj_swap(v, obj, r->h->obj_size);
  /* scp: what r->obj holds now is no longer the loaded entry. */
  free(r->loaded_rx);
  free(r->loaded_range);
  r->loaded_rx = r->loaded_range = NULL;
  return KIO_OK;
}

int kio_seq_read_ahead(kio_seq_reader *r, kio_body_bytes_fn body_bytes, int threads,
                       int window) {
  if (!r || r->ahead || r->take_in || r->spec.kind != KIO_SPEC_ARCHIVE ||
      r->state != S_HAVE_OBJECT || kio_classify_rxfilename(r->spec.filename) != KIO_RX_FILE)
    return 0;
  return kio_ahead_start(&r->ahead, r->spec.filename, r->spec.filename, r->h, body_bytes,
                         kio_input_stream(r->in), threads, window);
}
