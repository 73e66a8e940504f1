/* Internal interface between the gpu-acc front (acc-cpu.c) and the CUDA
 * backend (acc-cuda.cu, or acc-cuda-nocuda.c in builds without CUDA). */
#ifndef GACC_ACC_INTERNAL_H
#define GACC_ACC_INTERNAL_H

#include "gpu-acc.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gacc_cuda gacc_cuda;  /* device copy of model and stats */

/* Uploads the model (flattened Gaussians) and zeroed statistics shaped like
 * shape. KIO_ERR (logged) on any CUDA failure. */
int gacc_cuda_new(gacc_cuda **c, const gacc_stats *shape, const kio_am_gmm *am);
void gacc_cuda_free(gacc_cuda *c);

/* Accumulates n_frames frames (rows of feats, n_frames x dim, row-major;
 * pdf[t] and tid[t] already validated). For every frame returns the softmax
 * maximum mx[t] and sum sum[t], so that the host forms the log-likelihood
 * mx + logf(sum) with the C library's logf exactly as the CPU path. */
int gacc_cuda_accumulate(gacc_cuda *c, int32_t n_frames, const float *feats,
                         const int32_t *tid, const int32_t *pdf,
                         float *mx, float *sum);

/* Copies tacc, occ, mean_acc, var_acc into out (already shaped). */
int gacc_cuda_fetch(gacc_cuda *c, gacc_stats *out);

#ifdef __cplusplus
}
#endif
#endif
