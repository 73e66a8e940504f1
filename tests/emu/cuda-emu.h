/* Host emulation of the little CUDA the gpu-align .cu files use, so their
 * logic (packing, offsets, kernels, result handling) can be tested on a
 * machine without a GPU. Force-included (g++ -include) when compiling the
 * .cu files as C++; see run.sh. Kernels run block by block, thread by thread,
 * sequentially: valid for kernels whose only __syncthreads() follows a
 * thread-0 write of shared state (as ours). Not a model of GPU concurrency. */
#ifndef GALIGN_CUDA_EMU_H
#define GALIGN_CUDA_EMU_H
#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <stdlib.h>

#undef __shared__
#define __shared__ static
#undef __launch_bounds__
#define __launch_bounds__(...)

extern uint3 galign_emu_block_idx, galign_emu_thread_idx;
extern dim3 galign_emu_block_dim, galign_emu_grid_dim;
#define blockIdx galign_emu_block_idx
#define threadIdx galign_emu_thread_idx
#define blockDim galign_emu_block_dim
#define gridDim galign_emu_grid_dim
static inline void __syncthreads(void) {}
static inline int atomicOr(int *p, int v) { int o = *p; *p |= v; return o; }
/* Counts launches so tests can see the device path ran. */
extern long galign_emu_launches;

/* Dynamic shared memory: one buffer; fine while each thread only reads
 * what it wrote itself (our kernels) since threads run one after another. */
extern float galign_emu_smem[];
#define GALIGN_EMU_SMEM_BYTES (256 * 1024)
#define GALIGN_DYN_SMEM(type, name) type *name = (type *)galign_emu_smem
#define GALIGN_LAUNCH_SMEM(kernel, grid, block, smem, stream, ...)               \
  do {                                                                           \
    if ((size_t)(smem) > GALIGN_EMU_SMEM_BYTES) abort();                          \
    GALIGN_LAUNCH(kernel, grid, block, stream, __VA_ARGS__);                     \
  } while (0)

#define GALIGN_LAUNCH(kernel, grid, block, stream, ...)                          \
  do {                                                                           \
    (void)(stream);                                                              \
    unsigned g_ = (unsigned)(grid), b_ = (unsigned)(block);                      \
    galign_emu_launches++;                                                       \
    galign_emu_grid_dim = dim3(g_);                                              \
    galign_emu_block_dim = dim3(b_);                                             \
    for (unsigned bi_ = 0; bi_ < g_; bi_++)                                      \
      for (unsigned ti_ = 0; ti_ < b_; ti_++) {                                  \
        galign_emu_block_idx.x = bi_; galign_emu_block_idx.y = 0; galign_emu_block_idx.z = 0; \
        galign_emu_thread_idx.x = ti_; galign_emu_thread_idx.y = 0; galign_emu_thread_idx.z = 0; \
        kernel(__VA_ARGS__);                                                     \
      }                                                                          \
  } while (0)
#endif
