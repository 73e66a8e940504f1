/* The GPU accumulator's kernels as its driver (acc-cuda.cu) launches them:
 * acc-kernels.cu (the chunk and cells kernels), acc-tiled.cu (the per-pdf
 * statistics kernel). CUDA C++ only (int4, cudaStream_t). */
#ifndef GACC_ACC_KERNELS_H
#define GACC_ACC_KERNELS_H

#include <stddef.h>
#include <stdint.h>

/* chunk kernel: threads per block, most frames per chunk, the shared
 * memory a chunk's (and a stats tile's) frames may take */
enum { GACC_THREADS = 256, GACC_MAX_CHUNK = 64, GACC_SHMEM = 44 * 1024 };
/* cells kernel: cells of one pdf per block (one per thread on a GPU) */
enum { GACC_CELLS = 128 };

/* The chunk kernel, one block per chunk: chunks[b] = (pdf, first sorted
 * frame, frames); the chunk's rows of feats (order: sorted frame -> frame)
 * staged in shmem bytes of shared memory (chunk_cap frames of D), their
 * log-likelihoods (the profile prof's order), softmax per frame; writes the
 * posteriors (gam_out, maxc a frame, sorted order), each frame's max and
 * sum (mx_out, sum_out, frame order), the features in sorted order
 * (xs_out) and counts tacc[tid]. */
void gacc_launch_chunks(unsigned grid, size_t shmem, cudaStream_t st, const int4 *chunks,
                        const int32_t *order, const float *feats, const int32_t *tid,
                        const int32_t *pdf_offset, const float *gconst, const float *mi,
                        const float *iv, int D, int chunk_cap, int prof, int maxc, double *tacc,
                        float *gam_out, float *mx_out, float *sum_out, float *xs_out);
/* The cells kernel, GACC_CELLS cells of one pdf per block: blocks[b] =
 * (pdf, first sorted frame, frames, first cell); adds each cell's
 * posterior-weighted sums in frame order to occ, mean and var. */
void gacc_launch_cells(unsigned grid, cudaStream_t st, const int4 *blocks, const float *xs,
                       const float *gam, int maxc, const int32_t *pdf_offset, int D, int prof,
                       double *occ, double *mean, double *var);
/* The per-pdf statistics kernel (KALDI_GPU_DEV_ACC_STATS=tiled): the same
 * sums, one block per pdf of ranges, frames in tiles of tile. */
void gacc_launch_tiled(unsigned grid, size_t shmem, cudaStream_t st, const int4 *ranges,
                       const int32_t *order, const float *feats, const float *gam, int maxc,
                       const int32_t *pdf_offset, int D, int prof, int tile, double *occ,
                       double *mean, double *var);

#endif
