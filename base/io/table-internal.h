/* Internal to the table code (table-*.c): archive entry reading and scp
 * entry loading shared by the sequential and random-access readers. */
#ifndef KIO_TABLE_INTERNAL_H
#define KIO_TABLE_INTERNAL_H

#include <stddef.h>
#include <stdio.h>

#include "io.h"
#include "table.h"

/* A holder object on the heap (zeroed). NULL on allocation failure. */
void *kio_obj_new(const kio_holder *h);
void kio_obj_delete(const kio_holder *h, void *obj);
/* Swaps the bytes of two holder objects of n bytes (the take functions). */
void kio_obj_swap(void *a, void *b, size_t n);

/* Reads one archive entry "KEY OBJECT" (reference 1.7) into *key (growing
 * buffer) and obj. Returns KIO_OK, KIO_EOF, or KIO_ERR after a WARNING that
 * names the archive and the key. */
int kio_ark_read_entry(FILE *f, const char *archive, const kio_holder *h,
                       char **key, size_t *keycap, void *obj);

/* One scp line split at the first whitespace run (both parts trimmed).
 * Returns KIO_OK, KIO_EOF, or KIO_ERR (invalid line; *line holds it). */
int kio_scp_next_line(FILE *f, char **line, size_t *cap, char **key, char **rest);

/* Splits "rx[range]" into rx and range (range "" when absent). Both are
 * malloc'd. KIO_ERR if a trailing ']' cannot be parsed as "x[y]". */
int kio_scp_split_range(const char *rest, char **rx, char **range);

/* Loads the object named by an scp entry (data rxfilename + range) into obj,
 * reusing *in for "file:offset" entries of the same file. On failure logs a
 * WARNING ("Failed to load object from ...") and returns KIO_ERR. */
int kio_scp_load(kio_input **in, const char *rx, const char *range,
                 const kio_holder *h, void *obj);

/* Entries of an archive in a regular file read ahead on threads
 * (table-ahead.c, kio_seq_read_ahead). kio_ahead_start: from cur's
 * position (cur: the reader's stream on path; archive: the name for
 * messages); 1 if started, 0 if it does not apply or failed (nothing
 * changed). kio_ahead_next: the next entry in order, its log lines logged
 * now; its value swapped into obj, its key copied into *key; KIO_OK,
 * KIO_EOF or KIO_ERR (*key: the key at the error), as
 * kio_ark_read_entry. */
typedef struct kio_seq_ahead kio_seq_ahead;
int kio_ahead_start(kio_seq_ahead **a, const char *path, const char *archive,
                    const kio_holder *h, kio_body_bytes_fn body_bytes, FILE *cur,
                    int threads, int window);
int kio_ahead_next(kio_seq_ahead *a, void *obj, char **key, size_t *keycap);
void kio_ahead_stop(kio_seq_ahead *a);

#endif
