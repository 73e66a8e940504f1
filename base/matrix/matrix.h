/* Kaldi Matrix / Vector (float, double), CompressedMatrix (CM, CM2, CM3).
 * Row-major, no padding: element (r, c) is data[r * cols + c].
 * Owner of data: the struct; kio_*_free releases it and zeroes the struct. */
#ifndef KIO_MATRIX_H
#define KIO_MATRIX_H

#include <stdint.h>
#include <stdio.h>
#include "base/io/table.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct { int32_t rows, cols; float *data; size_t cap; } kio_matrix;
typedef struct { int32_t rows, cols; double *data; size_t cap; } kio_dmatrix;
typedef struct { int32_t dim; float *data; size_t cap; } kio_vector;
typedef struct { int32_t dim; double *data; size_t cap; } kio_dvector;

/* Resize (reusing capacity), contents zeroed. */
int kio_matrix_resize(kio_matrix *m, int32_t rows, int32_t cols);
int kio_dmatrix_resize(kio_dmatrix *m, int32_t rows, int32_t cols);
int kio_vector_resize(kio_vector *v, int32_t dim);
int kio_dvector_resize(kio_dvector *v, int32_t dim);
/* Resize (reusing capacity), contents undefined: for a caller that writes
 * every element next. */
int kio_matrix_setsize(kio_matrix *m, int32_t rows, int32_t cols);
void kio_matrix_free(kio_matrix *m);
void kio_dmatrix_free(kio_dmatrix *m);
void kio_vector_free(kio_vector *v);
void kio_dvector_free(kio_dvector *v);

/* Object bodies (no "\0B"). Float readers accept FM, DM and CM/CM2/CM3
 * (decompressed bit-exactly as Kaldi); double readers accept DM and FM. */
int kio_matrix_read(FILE *f, int binary, kio_matrix *m);
int kio_matrix_write(FILE *f, int binary, const kio_matrix *m);
int kio_dmatrix_read(FILE *f, int binary, kio_dmatrix *m);
int kio_dmatrix_write(FILE *f, int binary, const kio_dmatrix *m);
int kio_vector_read(FILE *f, int binary, kio_vector *v);
int kio_vector_write(FILE *f, int binary, const kio_vector *v);
int kio_dvector_read(FILE *f, int binary, kio_dvector *v);
int kio_dvector_write(FILE *f, int binary, const kio_dvector *v);
/* Writes m compressed with Kaldi's compression-method (1..7; 1 = auto). */
int kio_matrix_write_compressed(FILE *f, const kio_matrix *m, int method);

/* Holders: kio_matrix (features), kio_vector (per-frame loglikes),
 * kio_dmatrix (CMVN statistics). */
extern const kio_holder kio_matrix_holder;
/* kio_matrix_holder's kio_body_bytes_fn (table.h): the bytes after a
 * binary float, double or compressed matrix's header; -1 for anything
 * else (read whole). */
int64_t kio_matrix_body_bytes(FILE *f, int binary);
extern const kio_holder kio_vector_holder;
extern const kio_holder kio_dmatrix_holder;

#ifdef __cplusplus
}
#endif
#endif
