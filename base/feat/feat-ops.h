/* Internal to base/: the arithmetic of the feature programs, on row-major
 * float matrices, in Kaldi's (and its OpenBLAS build's) operation order, so
 * results are bit-identical. Used by feat-chain.c; the GPU path would port
 * these loops as they are (same order). */
#ifndef KIO_FEAT_OPS_H
#define KIO_FEAT_OPS_H

#include <stdint.h>

#define KIO_FEATOP_NAN 1

/* The rounding profile (OpenBLAS kernels) these functions follow:
 * base/matrix/blas-profile.h's kio_blas_profile(). */
/* 1 when the AVX2+FMA code may be used (not with KALDI_GPU_DEV_NO_SIMD=1; simd.h). */
int kio_featop_simd(void);

typedef void (*kio_featop_warn)(void *user, double var);
/* Per-dimension offset and scale from CMVN stats (rows x (dim+1) doubles,
 * row 0 sums and count, row 1 sums of squares). warn: "Flooring" lines.
 * 0, or KIO_FEATOP_NAN ("NaN or infinity" error). The caller checks the
 * dims and count first. */
int kio_featop_cmvn_norm(const double *stats, int32_t rows, int32_t dim, int var_norm,
                         int reverse, float *offset, float *scale,
                         kio_featop_warn warn, void *user);
void kio_featop_cmvn_apply(float *x, int32_t frames, int32_t dim, int var_norm,
                           const float *offset, const float *scale);

/* DeltaFeatures' windows: (*scales)[i] of (*dims)[i] taps, i = 0..order. */
int kio_featop_delta_scales(int order, int window, float ***scales, int **dims);
/* out: frames x dim*(order+1); kio_featop_deltas_range: output frames
 * [t0, t1) only (all of in is read). */
void kio_featop_deltas(const float *in, int32_t frames, int32_t dim, int order,
                       float *const *scales, const int *sdims, float *out);
void kio_featop_deltas_range(const float *in, int32_t frames, int32_t t0, int32_t t1, int32_t dim,
                             int order, float *const *scales, const int *sdims, float *out);
/* out: frames x dim*(left+1+right). */
void kio_featop_splice(const float *in, int32_t frames, int32_t dim, int left, int right,
                       float *out);
/* out = in (frames x k) * W^T with wt = W's linear part transposed (k x
 * rows), then + offset (rows) if not NULL; every output the SEQ chain
 * (blas-order.h), fused or mul then add, K in one block. */
void kio_featop_transform(int fused, const float *in, int32_t frames, int32_t k, const float *wt,
                          int32_t rows, const float *offset, float *out);
/* The same for output frames [t0, t1) only (in and out are whole). */
void kio_featop_transform_range(int fused, const float *in, int32_t t0, int32_t t1, int32_t k,
                                const float *wt, int32_t rows, const float *offset, float *out);
/* The same for T frames whose inputs start stride floats apart (stride < k:
 * overlapping rows, e.g. splice-feats' output read from its input). */
void kio_featop_transform_rows(int fused, const float *in, int32_t stride, int32_t T, int32_t k,
                               const float *wt, int32_t rows, const float *offset, float *out);
/* transform-feats' product in the profile's OpenBLAS sgemm order
 * (feat-gemm.c): frames [t0, t1) of out (T x M, whole), frame t's input at
 * in + (t - base) * stride (base <= t0; stride < k: overlapping rows,
 * splice-feats read in place); cls: base/matrix/blas-gemm.h's plan for the
 * whole utterance (NULL: SEQ everywhere); W rows x k (row stride ws), wt
 * its transpose (k x M; NULL: scalar code); + off (M) if not NULL. */
void kio_featop_gemm_frames(int prof, const unsigned char *cls, const float *in, int32_t base,
                            int32_t stride, int32_t t0, int32_t t1, int32_t k, const float *w,
                            int32_t ws, const float *wt, int32_t M, const float *off,
                            float *out);
/* 0.5 * log det(L L^T), L = first k columns of W (row stride ws). */
double kio_featop_half_logdet(const float *w, int32_t rows, int32_t ws, int32_t k);

/* The AVX-512 kernels (feat-simd.c; x86-64 only, called when simd.h says
 * KIO_SIMD_AVX512): the same results as the functions above. */
void kio_featop_transform_avx512(int fused, const float *in, int32_t stride, int32_t T,
                                 int32_t k, const float *wt, int32_t M, const float *off,
                                 float *out);
void kio_featop_deltas_avx512(const float *in, int32_t frames, int32_t t0, int32_t t1,
                              int32_t dim, int order, float *const *scales, const int *sdims,
                              float *out);
/* The vector CMVN kernels' offset/scale pattern: offset and scale repeated
 * to lcm(dim, lanes) values in offp/scp (1024 floats each). Returns that
 * length, or 0 when it exceeds 1024 (the kernels then go row by row). */
int32_t kio_featop_cmvn_pattern(int32_t dim, int32_t lanes, const float *offset,
                                const float *scale, float *offp, float *scp);
void kio_featop_cmvn_apply_avx512(float *x, int32_t frames, int32_t dim, int var_norm,
                                  const float *offset, const float *scale);

#endif
