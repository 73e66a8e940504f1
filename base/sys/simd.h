/* Which vector code the bit-exact CPU kernels of base/ may use (feat-ops,
 * feat-gemm, feat-simd, compressed-matrix): chosen at run time from the CPU
 * (no -march flags; each kernel carries its own target attribute).
 * KALDI_GPU_DEV_NO_SIMD=1 forces the scalar code, KALDI_GPU_DEV_SIMD_MAX=avx2 stops at AVX2
 * (what an AVX2-only host runs); every level gives the same bits. */
#ifndef KIO_SIMD_H
#define KIO_SIMD_H

enum { KIO_SIMD_NONE = 0, KIO_SIMD_AVX2 = 1, KIO_SIMD_AVX512 = 2 };

/* The highest usable level: AVX2 needs avx2+fma, AVX512 also avx512f. */
int kio_simd_level(void);
/* Tests: caps the level (KIO_SIMD_NONE..AVX512) below what the CPU has;
 * -1 returns to the automatic choice. Not thread-safe against running
 * kernels. */
void kio_simd_set(int level);

#endif
