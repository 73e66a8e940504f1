/* CUDA runtime helpers shared by gpu-align and gpu-acc: device choice, error
 * checks. Callable from C; implemented in cuda-util.cu (or the no-CUDA stub). */
#ifndef KIO_CUDA_UTIL_H
#define KIO_CUDA_UTIL_H

#ifdef __cplusplus
extern "C" {
#endif

/* Number of usable CUDA devices (0 when built without CUDA or none present).
 * Initialises the CUDA runtime: never call it in a Check parent process. */
int kio_cuda_device_count(void);
/* Picks the device ($KALDI_GPU_DEVICE or the thread's kio_cuda_use_device;
 * else the only one; else, as Kaldi, the one with the largest fraction of
 * free memory whose context can be created), makes it current and fills a
 * one-line description ("NVIDIA H200, 132 SMs, 139.8 GiB"). KIO_OK or
 * KIO_ERR (logged). With wait != 0 (--use-gpu=wait), when every device is
 * busy (exclusive mode) it retries every 5 s until one is free, with
 * Kaldi's warnings; no device at all is an error either way. */
int kio_cuda_select(int wait, char *desc, int desc_len);
/* Makes kio_cuda_select (and kio_cuda_warm_up) pick device dev in the
 * calling thread (-1: back to $KALDI_GPU_DEVICE or 0). The GPU service uses
 * it to put each connection on the device it assigned. */
void kio_cuda_use_device(int dev);
/* Creates the CUDA context of the device kio_cuda_select would pick, so a
 * later kio_cuda_select is quick (context creation takes ~0.2 s on an H200;
 * a program can do it in a thread while it reads its inputs). Silent: logs
 * nothing, and failures are left for kio_cuda_select to report. */
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
/* Checks a CUDA runtime call; on failure logs ERROR with the call text and
 * returns KIO_ERR from the enclosing function. */
#define KIO_CUDA_TRY(call)                                                   \
  do {                                                                       \
    cudaError_t kio_e_ = (call);                                             \
    if (kio_e_ != cudaSuccess) {                                             \
      kio_logf(KIO_LOG_ERROR, __func__, __FILE__, __LINE__, "CUDA error %s: %s", \
               cudaGetErrorString(kio_e_), #call);                           \
      return KIO_ERR;                                                        \
    }                                                                        \
  } while (0)
extern "C" {
/* Device and page-locked memory without the implicit synchronisation of
 * cudaMalloc / cudaFree / cudaMallocHost / cudaFreeHost, which wait for, or
 * stall, every stream of the process: in the GPU service, every other job's
 * work. Device memory comes from the device's stream-ordered pool, which
 * keeps freed memory for the next allocation instead of returning it to the
 * driver; it is allocated and freed in the order of `stream`: free it on the
 * stream whose work used it last (or after that stream is synchronised).
 * Page-locked host blocks are kept in a process-wide cache for reuse;
 * kio_cuda_host_free waits for `stream` (the block's last user) first.
 * KIO_OK, or KIO_ERR with an ERROR logged. NULL frees nothing. */
int kio_cuda_dev_alloc(void **p, size_t bytes, cudaStream_t stream);
void kio_cuda_dev_free(void *p, cudaStream_t stream);
int kio_cuda_host_alloc(void **p, size_t bytes);
void kio_cuda_host_free(void *p, cudaStream_t stream);
}
/* After a kernel launch: checks the launch, and synchronises when debugging. */
#define KIO_CUDA_LAUNCHED()                                                  \
  do {                                                                       \
    KIO_CUDA_TRY(cudaGetLastError());                                        \
    if (kio_cuda_debug_sync()) KIO_CUDA_TRY(cudaDeviceSynchronize());        \
  } while (0)
#endif

#endif
