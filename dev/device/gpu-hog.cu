/* Another process on the same GPU, as a neural-network training sharing the
 * card would be: allocates device memory until only FREE_GB are free (and
 * touches it, so the driver really backs it), says how much it holds, then
 * holds it until killed (SIGTERM/SIGINT) or LIMIT seconds pass.
 *
 *   gpu-hog FREE_GB [DEVICE [LIMIT_S]]
 *
 * Prints "gpu-hog: holding H GiB on device D, F GiB free" once it holds
 * the memory (dev/device/memory-check.sh waits for that line). Built by
 * make (build/tools/gpu-hog) when CUDA is there; no project code. */
#include <cuda_runtime.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static volatile sig_atomic_t stop;
static void on_signal(int s) { (void)s; stop = 1; }

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: gpu-hog FREE_GB [DEVICE [LIMIT_S]]\n");
    return 1;
  }
  const double keep_gb = atof(argv[1]);
  const int dev = argc > 2 ? atoi(argv[2]) : 0;
  const int limit = argc > 3 ? atoi(argv[3]) : 3600;
  signal(SIGTERM, on_signal);
  signal(SIGINT, on_signal);
  if (cudaSetDevice(dev) != cudaSuccess || cudaFree(0) != cudaSuccess) {
    fprintf(stderr, "gpu-hog: no device %d\n", dev);
    return 1;
  }
  const size_t keep = (size_t)(keep_gb * 1073741824.0);
  size_t held = 0, free_b = 0, total_b = 0;
  size_t chunk = (size_t)1 << 30;
  void *blocks[4096];
  int n = 0;
  while (n < 4096 && cudaMemGetInfo(&free_b, &total_b) == cudaSuccess && free_b > keep) {
    size_t want = free_b - keep < chunk ? free_b - keep : chunk;
    if (want < ((size_t)1 << 20)) break;
    void *p = NULL;
    if (cudaMalloc(&p, want) != cudaSuccess) {
      cudaGetLastError();
      if (chunk <= ((size_t)64 << 20)) break;
      chunk /= 2;  /* fragmentation, or another process: smaller pieces */
      continue;
    }
    cudaMemset(p, 0xA5, want);
    blocks[n++] = p;
    held += want;
  }
  cudaDeviceSynchronize();
  cudaMemGetInfo(&free_b, &total_b);
  printf("gpu-hog: holding %.2f GiB on device %d, %.2f GiB free of %.2f GiB\n",
         held / 1073741824.0, dev, free_b / 1073741824.0, total_b / 1073741824.0);
  fflush(stdout);
  for (int s = 0; s < limit && !stop; s++) sleep(1);
  for (int i = 0; i < n; i++) cudaFree(blocks[i]);
  return 0;
}
