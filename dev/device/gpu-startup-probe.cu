/* Measures what a process pays to start using the GPU, phase by phase, the
 * way our programs start (runtime init, primary context, stream, pinned and
 * device buffers, first kernel = module load, teardown). Run one alone, then
 * N at once, to see which phase grows with concurrent processes (issue 12):
 *
 *   nvcc -O2 -o gpu-startup-probe dev/device/gpu-startup-probe.cu
 *   ./gpu-startup-probe            # one line: phase times in ms
 *   for i in $(seq 16); do ./gpu-startup-probe & done; wait
 *
 * Not part of the build: a measurement tool for the GPU machine. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

__global__ void touch(float *p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] += 1.0f;
}

#define CHECK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
  fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_)); return 1; } } while (0)

int main(int argc, char **argv) {
  size_t pinned = (argc > 1 ? (size_t)atol(argv[1]) : 32) << 20;
  double t0 = now_ms(), t[8];
  int n = 0;
  CHECK(cudaGetDeviceCount(&n));
  t[0] = now_ms();
  CHECK(cudaSetDevice(0));
  CHECK(cudaFree(0));
  t[1] = now_ms();
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  t[2] = now_ms();
  void *h = NULL;
  CHECK(cudaMallocHost(&h, pinned));
  t[3] = now_ms();
  float *d = NULL;
  CHECK(cudaMalloc((void **)&d, 64 << 20));
  t[4] = now_ms();
  touch<<<64, 256, 0, s>>>(d, 16384);
  CHECK(cudaStreamSynchronize(s));
  t[5] = now_ms();
  CHECK(cudaMemcpyAsync(d, h, pinned < (64u << 20) ? pinned : (64u << 20), cudaMemcpyHostToDevice, s));
  CHECK(cudaStreamSynchronize(s));
  t[6] = now_ms();
  cudaFreeHost(h);
  cudaFree(d);
  cudaStreamDestroy(s);
  cudaDeviceReset();
  t[7] = now_ms();
  printf("runtime-init %.1f context %.1f stream %.1f pinned-%zuMB %.1f malloc %.1f "
         "first-kernel %.1f copy %.1f teardown %.1f total %.1f ms\n",
         t[0] - t0, t[1] - t[0], t[2] - t[1], pinned >> 20, t[3] - t[2], t[4] - t[3],
         t[5] - t[4], t[6] - t[5], t[7] - t[6], t[7] - t0);
  return 0;
}
