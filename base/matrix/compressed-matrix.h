/* Internal to base/: Kaldi CompressedMatrix (reference 2.3), shared between
 * matrix.c (readers) and compressed-matrix.c (codec). Not a public API. */
#ifndef KIO_COMPRESSED_MATRIX_H
#define KIO_COMPRESSED_MATRIX_H

#include <stdio.h>
#include "matrix.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Kaldi's CompressionMethod enum (compressed-matrix.h). */
enum {
  KIO_CM_AUTO = 1, KIO_CM_SPEECH_FEATURE = 2, KIO_CM_TWO_BYTE_AUTO = 3,
  KIO_CM_TWO_BYTE_SIGNED_INT = 4, KIO_CM_ONE_BYTE_AUTO = 5,
  KIO_CM_ONE_BYTE_UNSIGNED_INT = 6, KIO_CM_ONE_BYTE_ZERO_ONE = 7
};

/* Reads a binary CM/CM2/CM3 object (token included; the caller has peeked
 * 'C') and decompresses it bit-exactly as Kaldi's CopyToMat<float> into m.
 * KIO_ERR + kio_set_error() on a bad token, truncated data or bad sizes. */
int kio_cmatrix_read_float(FILE *f, kio_matrix *m);
/* The same without decompressing: *format 1-3, (*buf)[0..16) the header,
 * the data after it; *buf (*cap bytes) grows and is reused by later reads. */
int kio_cmatrix_read_raw(FILE *f, int *format, unsigned char **buf, size_t *cap);
/* Reads a CM/CM2/CM3 object's token and header and returns how many bytes
 * of it follow (as kio_cmatrix_read_raw reads them); -1 where that read
 * fails. Silent (kio_matrix_body_bytes). */
int64_t kio_cmatrix_body_bytes(FILE *f);
/* The decompression alone: format 1 (CM), 2 (CM2) or 3 (CM3), the 16-byte
 * header (min, range, rows, cols) and the data bytes that follow it, checked
 * by the caller; rows or cols <= 0 give an empty m. KIO_ERR only when m
 * cannot be resized. */
int kio_cmatrix_decompress(int format, const unsigned char *header, const unsigned char *data,
                           kio_matrix *m);

/* A Matrix<float> table entry as read, decompressed later (feat-chain.c
 * does it on its workers): format 1-3: bytes = kio_cmatrix_read_raw's;
 * format 0 (FM, DM, text, or after a scp range): m holds the matrix. rows x
 * cols: the shape kio_matrix_read would have given. */
typedef struct {
  int format;
  int32_t rows, cols;
  unsigned char *bytes;
  size_t cap;
  kio_matrix m;
} kio_cmatrix_raw;
/* Its holder: the same errors as kio_matrix_holder's; scp ranges decompress. */
extern const kio_holder kio_cmatrix_raw_holder;

#ifdef __cplusplus
}
#endif
#endif
