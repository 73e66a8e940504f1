#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "cuda-util.h"
#include "log.h"

extern "C" int kio_cuda_device_count(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError(); /* clear the sticky "no device" error */
    return 0;
  }
  return n;
}

extern "C" int kio_cuda_debug_sync(void) {
  static int v = -1;
  if (v < 0) v = getenv("KIO_CUDA_SYNC") && atoi(getenv("KIO_CUDA_SYNC")) ? 1 : 0;
  return v;
}

static __thread int t_device = -1;

extern "C" void kio_cuda_use_device(int dev) { t_device = dev; }

/* The device this thread should use. */
static int chosen_device(void) {
  if (t_device >= 0) return t_device;
  return getenv("KIO_CUDA_DEVICE") ? atoi(getenv("KIO_CUDA_DEVICE")) : 0;
}

extern "C" void kio_cuda_warm_up(void) {
  int dev = chosen_device(), n = 0;
  if (cudaGetDeviceCount(&n) == cudaSuccess && n > dev && cudaSetDevice(dev) == cudaSuccess)
    cudaFree(0); /* forces the (per-process) primary context into being */
  cudaGetLastError();
}

extern "C" int kio_cuda_select(int wait, char *desc, int desc_len) {
  int dev = chosen_device();
  for (int tries = 0;; tries++) {
    int n = kio_cuda_device_count();
    if (n > dev) break;
    if (!wait || tries >= 120) {
      KIO_ERROR("No CUDA device %d available (found %d)", dev, n);
      return KIO_ERR;
    }
    sleep(5);
  }
  KIO_CUDA_TRY(cudaSetDevice(dev));
  cudaDeviceProp p;
  KIO_CUDA_TRY(cudaGetDeviceProperties(&p, dev));
  if (desc)
    snprintf(desc, desc_len, "%s, %d SMs, %.1f GiB", p.name, p.multiProcessorCount,
             p.totalGlobalMem / (1024.0 * 1024.0 * 1024.0));
  return KIO_OK;
}
