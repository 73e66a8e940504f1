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
 * log-likelihoods (the profile prof's order), softmax per frame; writes
 * each frame's max and sum (mx_out, sum_out, frame order), counts
 * tacc[tid], sets *nonfinite when a feature is inf or NaN, and writes the
 * features and posteriors in sorted-frame order for the statistics: a row
 * of cap floats per dim (xs_t) and, with gam_out NULL, a row of cap floats
 * per component (gam_t; the cells kernel), else maxc posteriors per frame
 * (gam_out; the per-pdf kernel). */
void gacc_launch_chunks(unsigned grid, size_t shmem, cudaStream_t st, const int4 *chunks,
                        const int32_t *order, const float *feats, const int32_t *tid,
                        const int32_t *pdf_offset, const float *gconst, const float *mi,
                        const float *iv, int D, int chunk_cap, int prof, int maxc, double *tacc,
                        float *gam_out, float *mx_out, float *sum_out, float *xs_t,
                        float *gam_t, size_t cap, int *nonfinite);
/* The cells kernel, GACC_CELLS cells of one pdf per block: blocks[b] =
 * (pdf, first sorted frame, frames, first cell); adds each cell's
 * posterior-weighted sums in frame order to occ, mean and var, reading the
 * chunk kernel's xs_t and gam_t (rows of cap floats, cap a multiple of 4). */
void gacc_launch_cells(unsigned grid, cudaStream_t st, const int4 *blocks, const float *xs_t,
                       const float *gam_t, size_t cap, const int32_t *pdf_offset, int D, int prof,
                       const int *nonfinite, double *occ, double *mean, double *var);
/* The per-pdf statistics kernel (KALDI_GPU_DEV_ACC_STATS=tiled): the same
 * sums, one block per pdf of ranges, frames in tiles of tile. */
void gacc_launch_tiled(unsigned grid, size_t shmem, cudaStream_t st, const int4 *ranges,
                       const int32_t *order, const float *feats, const float *gam, int maxc,
                       const int32_t *pdf_offset, int D, int prof, int tile, double *occ,
                       double *mean, double *var);

#endif
