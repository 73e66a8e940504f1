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

#endif
