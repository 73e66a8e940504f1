/* Host stand-ins for the CUDA runtime / cuBLAS calls of gpu-align (see
 * cuda-emu.h): device memory is host memory, streams are synchronous,
 * cublasSgemm is a plain loop. Also kio_cuda_* of base/cuda-util.cu. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cuda-emu.h"
#include "../../base/log.h"

uint3 galign_emu_block_idx, galign_emu_thread_idx;
dim3 galign_emu_block_dim, galign_emu_grid_dim;
long galign_emu_launches;
float galign_emu_smem[GALIGN_EMU_SMEM_BYTES / sizeof(float)];

extern "C" {
cudaError_t cudaMalloc(void **p, size_t n) {
  *p = malloc(n ? n : 1);
  if (!*p) return cudaErrorMemoryAllocation;
  memset(*p, 0xA5, n); /* garbage, as fresh device memory */
  return cudaSuccess;
}
cudaError_t cudaFree(void *p) { free(p); return cudaSuccess; }
cudaError_t cudaMallocHost(void **p, size_t n) { return cudaMalloc(p, n); }
cudaError_t cudaFreeHost(void *p) { free(p); return cudaSuccess; }
cudaError_t cudaMemcpy(void *d, const void *s, size_t n, cudaMemcpyKind k) {
  (void)k; memmove(d, s, n); return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind k, cudaStream_t st) {
  (void)k; (void)st; memmove(d, s, n); return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void *d, int v, size_t n, cudaStream_t st) {
  (void)st; memset(d, v, n); return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int f) {
  (void)f; *s = (cudaStream_t)0x1; return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) { (void)s; return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t s) { (void)s; return cudaSuccess; }
cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
const char *cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : "emulated error"; }
cudaError_t cudaEventCreate(cudaEvent_t *e) { *e = (cudaEvent_t)0x1; return cudaSuccess; }
cudaError_t cudaEventDestroy(cudaEvent_t e) { (void)e; return cudaSuccess; }
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) { (void)e; (void)s; return cudaSuccess; }
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
  (void)a; (void)b; *ms = 0.0f; return cudaSuccess;
}
cudaError_t cudaFuncSetAttribute(const void *f, enum cudaFuncAttribute a, int v) {
  (void)f; (void)a; (void)v; return cudaSuccess;
}
cudaError_t cudaGetDevice(int *d) { *d = 0; return cudaSuccess; }
cudaError_t cudaMemGetInfo(size_t *f, size_t *t) {
  *f = *t = (size_t)8 << 30; return cudaSuccess;
}

cublasStatus_t cublasCreate_v2(cublasHandle_t *h) { *h = (cublasHandle_t)0x1; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasDestroy_v2(cublasHandle_t h) { (void)h; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s) { (void)h; (void)s; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m) { (void)h; (void)m; return CUBLAS_STATUS_SUCCESS; }
const char *cublasGetStatusString(cublasStatus_t s) { return s == CUBLAS_STATUS_SUCCESS ? "success" : "emulated failure"; }
/* Column-major C = alpha op(A) op(B) + beta C, accumulated in double (a
 * near-exact reference; real cuBLAS rounds in float, in blocks). */
cublasStatus_t cublasSgemm_v2(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                              int m, int n, int k, const float *alpha, const float *A, int lda,
                              const float *B, int ldb, const float *beta, float *C, int ldc) {
  (void)h;
  if (m < 0 || n < 0 || k < 0) return CUBLAS_STATUS_INVALID_VALUE;
  if (lda < (ta == CUBLAS_OP_N ? m : k) || ldb < (tb == CUBLAS_OP_N ? k : n) || ldc < m)
    return CUBLAS_STATUS_INVALID_VALUE;
  for (int j = 0; j < n; j++)
    for (int i = 0; i < m; i++) {
      double s = 0.0;
      for (int l = 0; l < k; l++) {
        float a = ta == CUBLAS_OP_N ? A[i + (size_t)l * lda] : A[l + (size_t)i * lda];
        float b = tb == CUBLAS_OP_N ? B[l + (size_t)j * ldb] : B[j + (size_t)l * ldb];
        s += (double)a * b;
      }
      float *c = &C[i + (size_t)j * ldc];
      *c = *beta == 0.0f ? (float)(*alpha * s) : (float)(*alpha * s) + *beta * *c;
    }
  return CUBLAS_STATUS_SUCCESS;
}

int kio_cuda_device_count(void) { return 1; }
int kio_cuda_debug_sync(void) { return 0; }
int kio_cuda_select(int wait, char *desc, int desc_len) {
  (void)wait;
  if (desc) snprintf(desc, desc_len, "host emulation of a CUDA device");
  return KIO_OK;
}
}
