/* OpenBLAS's level-1 calls that Kaldi's model updates make (cblas_sdot,
 * cblas_saxpy), in the order and fusing of the profile's kernels
 * (blas-order.h's KIO_BLAS_SKX, ...). Host only.
 *
 * sdot is reproduced for the SkylakeX, Haswell/Zen and Prescott kernels;
 * Sandybridge and Nehalem take the Haswell order (their kernels do not
 * fuse, so a last bit may differ there). gmm-est uses sdot for its
 * objective log lines only. */
#ifndef KIO_BLAS_LEVEL1_H
#define KIO_BLAS_LEVEL1_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* cblas_sdot(n, x, 1, y, 1) under profile prof. */
float kio_blas_sdot(int prof, int32_t n, const float *x, const float *y);

/* cblas_saxpy(n, a, x, 1, y, 1): y += a * x under profile prof. */
void kio_blas_saxpy(int prof, int32_t n, float a, const float *x, float *y);

/* VectorBase<float>::Sum() and VectorBase<double>::Sum(): Kaldi's
 * cblas_sdot / cblas_ddot with a stride-0 one, i.e. the kernels' strided
 * loops, whose order differs between cores (the Prescott/Core2 assembly
 * against the C loop of the Nehalem to SkylakeX builds). */
float kio_blas_ssum(int prof, int32_t n, const float *x);
double kio_blas_dsum(int prof, int32_t n, const double *x);

#ifdef __cplusplus
}
#endif
#endif
