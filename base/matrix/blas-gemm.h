/* transform-feats' product in OpenBLAS sgemm's order: which chain of
 * blas-order.h (KIO_GEMM_SEQ, ...) each output gets. That depends on the
 * kernel tile holding the output, so on the kernel calls OpenBLAS's level-3
 * driver makes for Kaldi's shapes and thread count (blas-gemm.c models
 * OpenBLAS 0.3.21's drivers and the tiles of the Haswell, Nehalem and
 * Prescott kernels and SkylakeX's small-matrix kernel; Sandybridge and
 * SkylakeX's regular kernel give every output the SEQ chain). Host only. */
#ifndef KIO_BLAS_GEMM_H
#define KIO_BLAS_GEMM_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* May there be a plan for K under prof (chains other than SEQ: HSW, NHM,
 * SSE, SKX's small-matrix kernel from K = 32; or K over GEMM_Q, whose
 * blocks depend on the driver)? */
int kio_blas_gemm_needs_plan(int prof, int32_t K);

/* The threads Kaldi's OpenBLAS runs (KALDI_GPU_DEV_FEATS_BLAS_THREADS, else
 * OpenBLAS's own reading of OPENBLAS_NUM_THREADS, GOTO_NUM_THREADS,
 * OMP_NUM_THREADS, at most the CPUs this process may run on, at most 64). */
int kio_blas_threads(void);

/* The chain of every output of out (T x M) = in (T x K) * W^T under prof
 * with `threads` OpenBLAS threads: *cls = malloc'd T x M plan bytes
 * (frame-major; blas-order.h's kio_blas_gemm_out takes them), or NULL when
 * every output takes the SEQ chain in one K block (no plan needed:
 * kio_blas_gemm_needs_plan). KIO_ERR: out of memory. */
int kio_blas_gemm_plan(int prof, int32_t T, int32_t K, int32_t M, int threads,
                       unsigned char **cls);

#ifdef __cplusplus
}
#endif
#endif
