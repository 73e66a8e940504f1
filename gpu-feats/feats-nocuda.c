/* Stand-ins for the device part when the build has no CUDA
 * (./configure --use-cuda=no): every entry logs one ERROR and fails. */
#if !KIO_HAVE_CUDA
#include <stddef.h>
#include "base/sys/log.h"
#include "gpu-feats.h"

#define GFEAT_NOCUDA() \
  do { KIO_ERROR("This program was built without CUDA (./configure --use-cuda=no)"); return KIO_ERR; } while (0)

int gfeat_cuda_new(gfeat_cuda **g, const gfeat_chain *c, kio_gpu *gpu) {
  (void)c; (void)gpu;
  *g = NULL;
  GFEAT_NOCUDA();
}
void gfeat_cuda_free(gfeat_cuda *g) { (void)g; }
int gfeat_cuda_run(gfeat_cuda *g, const gfeat_batch *b, float *d_out, void *stream) {
  (void)g; (void)b; (void)d_out; (void)stream;
  GFEAT_NOCUDA();
}
int gfeat_cuda_compute(gfeat_cuda *g, const gfeat_batch *b, const float **d_feats,
                       float *const *host_rows) {
  (void)g; (void)b; (void)host_rows;
  *d_feats = NULL;
  GFEAT_NOCUDA();
}
int gfeat_cuda_run_host(gfeat_cuda *g, const gfeat_batch *b, kio_matrix *out) {
  (void)g; (void)b; (void)out;
  GFEAT_NOCUDA();
}
void gfeat_cuda_stats(const gfeat_cuda *g, int64_t *batches, int64_t *frames) {
  (void)g;
  if (batches) *batches = 0;
  if (frames) *frames = 0;
}
#else
typedef int gfeat_nocuda_unused; /* ISO C: no empty translation unit */
#endif
