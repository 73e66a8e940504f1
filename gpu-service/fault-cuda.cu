/* A real broken context for the tests of the GPU service on a GPU
 * (KALDI_GPU_TEST_SERVICE_BREAK in a test build, dev/device/gpu-session.sh
 * step service): a kernel that traps leaves the calling thread's device
 * context with a sticky error, as a kernel fault or an uncorrectable ECC
 * error would; every later call on it fails. */
#include <cuda_runtime.h>

__global__ void gsvc_trap_kernel(void) { __trap(); }

extern "C" void gsvc_cuda_break_context(void) {
  gsvc_trap_kernel<<<1, 1>>>();
  cudaDeviceSynchronize();
}
