/* Stand-ins used when the build has no CUDA (./configure --use-cuda=no). */
#if !KIO_HAVE_CUDA
#include <stdio.h>
#include <string.h>

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
#else
typedef int kio_cuda_util_nocuda_unused; /* keep ISO C happy: no empty unit */
#endif
