/* The CUDA runtime behind the device layer (device/gpu.h): device choice,
 * contexts, the stream-ordered pool, page-locked host memory, error checks.
 * Callable from C; implemented in cuda-util.cu (or the no-CUDA stand-ins,
 * or tests/emu's host emulation). Device code allocates device memory
 * through kio_gpu_alloc (gpu.h), never here: these are the raw calls the
 * device layer makes. */
#ifndef KIO_CUDA_UTIL_H
#define KIO_CUDA_UTIL_H

#include <stddef.h>
#include "gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Number of usable CUDA devices (0 when built without CUDA or none present).
 * Initialises the CUDA runtime: never call it in a Check parent process. */
int kio_cuda_device_count(void);
/* Picks the device: named_dev if >= 0 (the GPU service), else
 * $KALDI_GPU_DEVICE, else the only one, else, as Kaldi, the one with the
 * largest fraction of free memory whose context can be created (the
 * contexts opened to look are released again: call it once per process,
 * before anything is allocated). Makes it current, describes it ("NVIDIA
 * H200, 132 SMs, 139.8 GiB") and returns 0. With wait_s > 0, while every
 * device is busy (exclusive mode) it retries every 5 s with Kaldi's
 * warnings, for at most wait_s seconds, then returns KIO_GPU_GAVE_UP (a
 * WARNING logged); no device at all is an error either way (KIO_ERR,
 * logged). */
int kio_cuda_choose(double wait_s, int named_dev, char *desc, int desc_len, int *dev);
/* Makes dev current in the calling thread: 0, or -1 (nothing logged). */
int kio_cuda_bind(int dev);
/* dev's free and total memory: 0, or -1. */
int kio_cuda_mem_info(int dev, size_t *free_b, size_t *total_b);
/* Device memory from the current device's stream-ordered pool, without the
 * implicit synchronisation of cudaMalloc/cudaFree (which wait for, or
 * stall, every stream of the process: in the GPU service every other job's
 * work). Allocated and freed in the order of stream (a cudaStream_t): free
 * it on the stream whose work used it last (or after that stream is
 * synchronised). Returns 0, 1 for out of memory, -1 for another error (msg
 * says which). Logs nothing. */
int kio_cuda_raw_alloc(void **p, size_t bytes, void *stream, char *msg, size_t n);
void kio_cuda_raw_free(void *p, void *stream);
/* The pool of device dev: give what it keeps for reuse back to the driver;
 * keep at most bytes of freed memory from now on (the release threshold). */
void kio_cuda_pool_trim(int dev);
void kio_cuda_pool_keep(int dev, size_t bytes);
/* Creates the CUDA context of the device kio_cuda_choose would pick when
 * one is named or there is only one, so that a later choice is quick
 * (~0.2 s on an H200; a program can do it in a thread while it reads its
 * inputs). Silent: logs nothing, failures are left for kio_cuda_choose. */
void kio_cuda_warm_up(void);
/* Contexts this process creates from now on wait for the device by
 * sleeping (cudaDeviceScheduleBlockingSync) instead of spinning a core. The
 * GPU service calls it first: its 16 connection threads would otherwise
 * spin while their batches run, taking the cores the recipe's jobs (graph
 * compilation, feature pipelines) need. */
void kio_cuda_prefer_blocking_sync(void);
/* 1 when KALDI_GPU_DEV_CUDA_SYNC=1: synchronise and check after every launch. */
int kio_cuda_debug_sync(void);
/* 0 when the context of the calling thread's current device still works;
 * 1 (the error's text in why) when it has a sticky error (a kernel fault,
 * an uncorrectable ECC error, ...): every later call on it fails, and only
 * a new process gets a working context. Cheap (no synchronisation): the GPU
 * service asks after a failed batch. */
int kio_cuda_context_broken(char *why, int why_len);
/* Page-locked host blocks from a process-wide pool (pinned-pool.h);
 * kio_cuda_host_free waits for stream (a cudaStream_t, the block's last
 * user; NULL: none) first. KIO_OK, or KIO_ERR with an ERROR logged. NULL
 * frees nothing. */
int kio_cuda_host_alloc(void **p, size_t bytes);
void kio_cuda_host_free(void *p, void *stream);
/* The cache's blocks given back to the driver (an idle GPU service). */
void kio_cuda_host_trim(void);
/* The driver's page-locked allocations and frees so far (process-wide):
 * how many and the seconds they took. */
void kio_cuda_host_stats(int64_t *allocs, double *alloc_s, int64_t *frees, double *free_s);
/* One slab of the page-locked reserve ($KALDI_GPU_DEV_HOST_RESERVE_MB) pinned
 * with device current, if the pool holds less: 1 pinned, 0 nothing to do,
 * -1 failed (no more tries). For an idle GPU service: pinning stalls the
 * device. */
int kio_cuda_host_grow(int device);
/* The pool's state in words, for the service's log. */
void kio_cuda_host_describe(char *buf, size_t n);

/* What `kaldi-gpu-service --describe` shows (tools/check-recipe.sh). */
typedef struct {
  int driver, runtime; /* CUDA versions (1000 * major + 10 * minor), 0: none */
  int count;           /* visible devices */
  char why[256];       /* when count is 0: the runtime's reason */
} kio_cuda_env;
void kio_cuda_env_info(kio_cuda_env *e);
/* One visible device and the code of this build it runs: code_arch is the
 * architecture (10 * major + minor) of the kernel code the runtime picked
 * (SASS built for the device or for an older one of its family, or the
 * driver's compilation of the PTX: from_ptx); 0 with why when this build
 * has none for the device. Creates the device's context. */
typedef struct {
  char name[256];
  int major, minor, sms;
  double mem_gib;
  int code_arch, from_ptx;
  char why[256];
} kio_cuda_dev_info;
int kio_cuda_device_info(int dev, kio_cuda_dev_info *d);
/* The device code this build carries: "sm_75 sm_80 ... + PTX compute_121"
 * ("" without CUDA). */
const char *kio_cuda_build_archs(void);

#ifdef __cplusplus
}

#include <cuda_runtime.h>
/* Checks a CUDA runtime call; on failure logs ERROR with the call text (an
 * out-of-memory failure goes through kio_gpu_nomem_call: held inside
 * kio_gpu_catch) and returns KIO_ERR from the enclosing function. */
#define KIO_CUDA_TRY(call)                                                   \
  do {                                                                       \
    cudaError_t kio_e_ = (call);                                             \
    if (kio_e_ != cudaSuccess) {                                             \
      if (kio_e_ == cudaErrorMemoryAllocation) {                             \
        cudaGetLastError();                                                  \
        kio_gpu_nomem_call(#call, __func__, __FILE__, __LINE__);             \
      } else {                                                               \
        kio_logf(KIO_LOG_ERROR, __func__, __FILE__, __LINE__, "CUDA error %s: %s", \
                 cudaGetErrorString(kio_e_), #call);                         \
      }                                                                      \
      return KIO_ERR;                                                        \
    }                                                                        \
  } while (0)
/* Waits for a stream's (an event's) work as cudaStreamSynchronize
 * (cudaEventSynchronize) does. Where the process sleeps in its waits (the
 * GPU service: kio_cuda_prefer_blocking_sync), it first polls for a short
 * while (KALDI_GPU_DEV_SERVICE_SPIN_US), so that the many short waits of a
 * request do not each pay a sleep and a wake-up, while a long wait still
 * leaves the core to the jobs. */
cudaError_t kio_cuda_stream_wait(cudaStream_t s);
cudaError_t kio_cuda_event_wait(cudaEvent_t e);
/* After a kernel launch: checks the launch, and synchronises when debugging. */
#define KIO_CUDA_LAUNCHED()                                                  \
  do {                                                                       \
    KIO_CUDA_TRY(cudaGetLastError());                                        \
    if (kio_cuda_debug_sync()) KIO_CUDA_TRY(cudaDeviceSynchronize());        \
  } while (0)
#endif

#endif
