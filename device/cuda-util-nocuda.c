/* Stand-ins used when the build has no CUDA (./configure --use-cuda=no). */
#if !KIO_HAVE_CUDA
#include <stdio.h>
#include <string.h>
#include <stdlib.h>

#include "cuda-util.h"
#include "base/sys/log.h"

int kio_cuda_device_count(void) { return 0; }
int kio_cuda_debug_sync(void) { return 0; }
void kio_cuda_warm_up(void) {}
void kio_cuda_prefer_blocking_sync(void) {}
int kio_cuda_context_broken(char *why, int why_len) {
  (void)why; (void)why_len;
  return 0;
}
int kio_cuda_choose(double wait_s, int named_dev, char *desc, int desc_len, int *dev) {
  (void)wait_s; (void)named_dev; (void)desc; (void)desc_len; (void)dev;
  KIO_ERROR("This program was built without CUDA (./configure --use-cuda=no)");
  return KIO_ERR;
}
void kio_cuda_env_info(kio_cuda_env *e) {
  memset(e, 0, sizeof *e);
  snprintf(e->why, sizeof e->why, "built without CUDA (./configure --use-cuda=no)");
}
int kio_cuda_device_info(int dev, kio_cuda_dev_info *d) {
  (void)dev;
  memset(d, 0, sizeof *d);
  snprintf(d->why, sizeof d->why, "built without CUDA");
  return KIO_ERR;
}
const char *kio_cuda_build_archs(void) { return ""; }
int kio_cuda_bind(int dev) { (void)dev; return -1; }
int kio_cuda_mem_info(int dev, size_t *free_b, size_t *total_b) {
  (void)dev;
  *free_b = *total_b = 0;
  return -1;
}
int kio_cuda_raw_alloc(void **p, size_t bytes, void *stream, char *msg, size_t n) {
  (void)bytes; (void)stream;
  *p = NULL;
  snprintf(msg, n, "built without CUDA");
  return -1;
}
void kio_cuda_raw_free(void *p, void *stream) { (void)p; (void)stream; }
void kio_cuda_pool_trim(int dev) { (void)dev; }
void kio_cuda_pool_keep(int dev, size_t bytes) { (void)dev; (void)bytes; }
int kio_cuda_host_alloc(void **p, size_t bytes) {
  *p = malloc(bytes ? bytes : 1);
  return *p ? KIO_OK : KIO_ERR;
}
void kio_cuda_host_free(void *p, void *stream) { (void)stream; free(p); }
void kio_cuda_host_trim(void) {}
int kio_cuda_host_grow(int device) { (void)device; return 0; }
void kio_cuda_host_describe(char *buf, size_t n) { snprintf(buf, n, "no page-locked pool"); }
void kio_cuda_host_stats(int64_t *allocs, double *alloc_s, int64_t *frees, double *free_s) {
  *allocs = *frees = 0;
  *alloc_s = *free_s = 0;
}
#else
typedef int kio_cuda_util_nocuda_unused; /* keep ISO C happy: no empty unit */
#endif
