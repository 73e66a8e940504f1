/* Stand-ins used when the build has no CUDA (./configure --use-cuda=no). */
#if !KIO_HAVE_CUDA
#include "cuda-util.h"
#include "base/sys/log.h"

int kio_cuda_device_count(void) { return 0; }
int kio_cuda_debug_sync(void) { return 0; }
void kio_cuda_warm_up(void) {}
void kio_cuda_prefer_blocking_sync(void) {}
void kio_cuda_use_device(int dev) { (void)dev; }
int kio_cuda_context_broken(char *why, int why_len) {
  (void)why; (void)why_len;
  return 0;
}
int kio_cuda_select(int wait, char *desc, int desc_len) {
  (void)wait; (void)desc; (void)desc_len;
  KIO_ERROR("This program was built without CUDA (./configure --use-cuda=no)");
  return KIO_ERR;
}
#else
typedef int kio_cuda_util_nocuda_unused; /* keep ISO C happy: no empty unit */
#endif
