/* Host emulation of the little CUDA the gpu-align .cu files use, so their
 * logic (packing, offsets, kernels, result handling) can be tested on a
 * machine without a GPU. Force-included (g++ -include) when compiling the
 * .cu files as C++; see run.sh.
 *
 * Blocks run one after another. The threads of a block run as cooperative
 * coroutines (ucontext, one stack each) on the calling host thread, in
 * rounds: thread 0 runs until it calls __syncthreads() or returns, then
 * thread 1, ...; the next round starts when every thread has arrived or
 * returned. So a barrier's meaning holds (shared-memory tiles written by all
 * threads, then read by others), and a thread that returned early counts as
 * arrived at every later barrier. Not a model of warp lockstep: code that
 * relies on implicit warp synchrony (no barrier) sees threads run one by
 * one. Launches from several host threads are serialized. */
#ifndef GALIGN_CUDA_EMU_H
#define GALIGN_CUDA_EMU_H
#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <stdlib.h>
#include <functional>

#undef __shared__
#define __shared__ static /* one copy: blocks run one after another */
#undef __launch_bounds__
#define __launch_bounds__(...)

extern uint3 galign_emu_block_idx, galign_emu_thread_idx;
extern dim3 galign_emu_block_dim, galign_emu_grid_dim;
#define blockIdx galign_emu_block_idx
#define threadIdx galign_emu_thread_idx
#define blockDim galign_emu_block_dim
#define gridDim galign_emu_grid_dim

/* Runs body once per thread of each of grid blocks of block threads (1-D).
 * Aborts on block > GALIGN_EMU_MAX_THREADS or on a launch from a kernel. */
#define GALIGN_EMU_MAX_THREADS 1024
void galign_emu_run(unsigned grid, unsigned block, const std::function<void()> &body);
/* Switches to the next thread of the block (no-op outside a kernel). */
void galign_emu_syncthreads(void);
static inline void __syncthreads(void) { galign_emu_syncthreads(); }

/* Atomics: threads never run at the same time, so plain read-modify-write
 * is exact. Templates, so that a .cu file's own non-template stand-in (e.g.
 * gpu-acc's atomicAdd(double *, double)) is no redefinition and wins. */
static inline int atomicOr(int *p, int v) { int o = *p; *p |= v; return o; }
template <class T, class U> static inline T atomicAdd(T *p, U v) { T o = *p; *p = (T)(o + v); return o; }
template <class T, class U> static inline T atomicMax(T *p, U v) { T o = *p; if ((T)v > o) *p = (T)v; return o; }
template <class T, class U> static inline T atomicMin(T *p, U v) { T o = *p; if ((T)v < o) *p = (T)v; return o; }
template <class T, class U> static inline T atomicExch(T *p, U v) { T o = *p; *p = (T)v; return o; }

/* Counts launches so tests can see the device path ran. */
extern long galign_emu_launches;

/* Dynamic shared memory: one buffer, shared by the threads of the running
 * block (blocks run one after another). */
extern float galign_emu_smem[];
#define GALIGN_EMU_SMEM_BYTES (256 * 1024)
#define GALIGN_DYN_SMEM(type, name) type *name = (type *)galign_emu_smem
#define GALIGN_LAUNCH_SMEM(kernel, grid, block, smem, stream, ...)               \
  do {                                                                           \
    if ((size_t)(smem) > GALIGN_EMU_SMEM_BYTES) abort();                          \
    GALIGN_LAUNCH(kernel, grid, block, stream, __VA_ARGS__);                     \
  } while (0)

/* The arguments are evaluated by each thread (as before), inside the
 * lambda: keep them free of side effects. */
#define GALIGN_LAUNCH(kernel, grid, block, stream, ...)                          \
  do {                                                                           \
    (void)(stream);                                                              \
    galign_emu_run((unsigned)(grid), (unsigned)(block),                          \
                   [&]() { kernel(__VA_ARGS__); });                              \
  } while (0)
#endif
