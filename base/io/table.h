/* Kaldi tables: rspecifier/wspecifier parsing, sequential and random-access
 * readers, archive and ark,scp writers (reference 1.6-1.11), generic over a
 * "holder" that reads/writes one object type. */
#ifndef KIO_TABLE_H
#define KIO_TABLE_H

#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- specifier parsing ---- */
typedef enum { KIO_SPEC_INVALID = 0, KIO_SPEC_ARCHIVE, KIO_SPEC_SCRIPT, KIO_SPEC_BOTH } kio_spec_kind;

typedef struct {
  kio_spec_kind kind;   /* ARCHIVE or SCRIPT (never BOTH) */
  int once, sorted, called_sorted, permissive, background;
  char filename[4096];  /* rxfilename of archive or scp */
} kio_rspec;

typedef struct {
  kio_spec_kind kind;   /* ARCHIVE, SCRIPT or BOTH (ark,scp) */
  int binary, flush, permissive;
  char archive[4096];   /* wxfilename of the archive (ARCHIVE/BOTH) */
  char script[4096];    /* wxfilename of the scp (SCRIPT/BOTH) */
} kio_wspec;

/* Return KIO_OK or KIO_ERR (spec->kind = INVALID). No logging. */
int kio_parse_rspecifier(const char *rspec, kio_rspec *out);
int kio_parse_wspecifier(const char *wspec, kio_wspec *out);

/* ---- holders ---- */
typedef struct kio_holder {
  const char *name;        /* for messages, e.g. "Matrix<float>" */
  size_t obj_size;         /* bytes of the object struct */
  int has_header;          /* 1: object preceded by "\0B" in binary; 0: FST */
  /* Reads one object into obj (zeroed or previously read: implementations
   * may reuse its buffers). Returns KIO_OK or KIO_ERR (+kio_set_error). */
  int (*read)(FILE *f, int binary, void *obj);
  /* Writes the object body (the header, if any, is written by the table). */
  int (*write)(FILE *f, int binary, const void *obj);
  /* Frees buffers owned by obj (not obj itself); leaves it zeroed. */
  void (*free)(void *obj);
  /* Optional: apply a scp range "[r1:r2,c1:c2]" (matrices only); NULL = no ranges. */
  int (*apply_range)(void *obj, int32_t r1, int32_t r2, int32_t c1, int32_t c2);
} kio_holder;

/* Alignment-style int32 vectors (reference 2.4). Owner: the struct. */
typedef struct { int32_t n; int32_t *v; } kio_int_vec;
extern const kio_holder kio_int_vec_holder;
/* float table entries (scores). */
extern const kio_holder kio_float_holder;
/* One token per entry (utt2spk's speakers). Owner: the struct. */
typedef struct { char *s; size_t cap; } kio_token;
extern const kio_holder kio_token_holder;

/* ---- sequential reader ---- */
typedef struct kio_seq_reader kio_seq_reader;
/* Logs ERROR and returns KIO_ERR on a bad specifier or open failure. */
int kio_seq_open(kio_seq_reader **r, const char *rspecifier, const kio_holder *h);
int kio_seq_done(kio_seq_reader *r);
const char *kio_seq_key(kio_seq_reader *r);
/* Object of the current entry; owned by the reader, valid until next/close.
 * NULL (after logging ERROR) if an scp entry cannot be loaded. */
void *kio_seq_value(kio_seq_reader *r);
void kio_seq_next(kio_seq_reader *r);
/* Like kio_seq_value, but exchanges the current object with *obj (an object
 * of the holder's type, zeroed or previously read: the reader reuses its
 * buffers), so the caller owns the value without a copy. KIO_OK, or KIO_ERR
 * where kio_seq_value returns NULL. */
int kio_seq_take(kio_seq_reader *r, void *obj);
/* Reads a binary object's header from f and returns how many bytes of it
 * follow (as the holder's read reads them), or -1 when the header does not
 * tell (then the object is read whole). Silent. For a holder without Kaldi's
 * binary header (has_header 0) f is at the object's first byte and binary
 * is 1. */
typedef int64_t (*kio_body_bytes_fn)(FILE *f, int binary);
/* Reads the entries after the current one ahead on threads (up to window
 * of them at once) when the table is an archive in a regular file: one
 * scan of the headers (body_bytes sizes the holder's objects) finds where
 * each entry starts, each thread parses whole entries there with the
 * reader's own code, and the reader hands them out in order with their log
 * lines: values, messages and the point of a read error are those of
 * reading in order. Else (pipes, stdin, scp, offsets) nothing changes.
 * Call after kio_seq_open. 1: on, 0: not. */
int kio_seq_read_ahead(kio_seq_reader *r, kio_body_bytes_fn body_bytes, int threads,
                       int window);
/* Reports (ERROR, KIO_ERR) a read error or a failed pipe unless 'p'. */
int kio_seq_close(kio_seq_reader *r);

/* ---- random-access reader ---- */
typedef struct kio_ra_reader kio_ra_reader;
int kio_ra_open(kio_ra_reader **r, const char *rspecifier, const kio_holder *h);
/* 1 present, 0 absent, KIO_ERR (-1) after an ERROR where Kaldi throws
 * (duplicate key, s/cs order violation, invalid key); after that
 * kio_ra_value returns NULL and kio_ra_close fails. */
int kio_ra_has_key(kio_ra_reader *r, const char *key);
/* Object for key (must exist: call has_key first); owned by the reader, valid
 * until the next call on the reader. NULL after logging ERROR on failure. */
void *kio_ra_value(kio_ra_reader *r, const char *key);
/* Like kio_ra_value, but exchanges the object with *obj (as kio_seq_take).
 * KIO_OK; KIO_ERR where kio_ra_value returns NULL; 1 if this kind of table
 * keeps objects for later lookups (nothing done: use kio_ra_value). With
 * "s,cs" archives the key must not be looked up again (ERROR if it is). */
int kio_ra_take(kio_ra_reader *r, const char *key, void *obj);
/* An unsorted archive read ahead in a thread, as sorted ones and "bg" are
 * (the same lookups, the same messages at the same point). Call after
 * kio_ra_open, before any lookup. 1: on, 0: not (scp, already on). */
int kio_ra_read_ahead(kio_ra_reader *r);
/* kio_ra_open for archives read whole in order (sorted ones looked up in
 * order, or unsorted ones read ahead): an archive in a regular file is
 * parsed ahead on threads (up to window entries, as kio_seq_read_ahead;
 * the same lookups, values, messages and point of error); other archives
 * read ahead on one thread. threads <= 0: kio_ra_open. */
int kio_ra_open_ahead(kio_ra_reader **r, const char *rspecifier, const kio_holder *h,
                      kio_body_bytes_fn body_bytes, int threads, int window);
/* How r reads ahead: 2 on threads, 1 on one thread, 0 not (tests). */
int kio_ra_reads_ahead(const kio_ra_reader *r);
int kio_ra_close(kio_ra_reader *r);
/* kio_ra_close's ERROR for an input pipe read to its end that failed (also
 * printed by the device feature path, gpu-align/align-gfeat.c). */
void kio_ra_pipe_failed_error(const char *rspecifier);

/* ---- writer ---- */
typedef struct kio_writer kio_writer;
/* An empty wspecifier gives *w = NULL and KIO_OK (writer not open). */
int kio_writer_open(kio_writer **w, const char *wspecifier, const kio_holder *h);
int kio_writer_write(kio_writer *w, const char *key, const void *obj);
int kio_writer_close(kio_writer *w);
/* Instead of closing, on an error: abandons the writer's outputs (see
 * kio_output_discard in base/io/io.h) and frees it. Accepts NULL. */
void kio_writer_discard(kio_writer *w);

/* A key is valid if non-empty, printable, without whitespace. */
int kio_is_token(const char *key);

#ifdef __cplusplus
}
#endif
#endif
