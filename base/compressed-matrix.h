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
/* The decompression alone: format 1 (CM), 2 (CM2) or 3 (CM3), the 16-byte
 * header (min, range, rows, cols) and the data bytes that follow it, checked
 * by the caller; rows or cols <= 0 give an empty m. KIO_ERR only when m
 * cannot be resized. */
int kio_cmatrix_decompress(int format, const unsigned char *header, const unsigned char *data,
                           kio_matrix *m);

#ifdef __cplusplus
}
#endif
#endif
