/* Stand-ins for the CUDA accumulator in builds without CUDA. */
#if !KIO_HAVE_CUDA
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/sys/log.h"
#include "acc-internal.h"

int gacc_cuda_new(gacc_cuda **c, kio_gpu *gpu, kio_gpu_mode mode, const gacc_stats *shape,
                  const kio_am_gmm *am) {
  (void)gpu; (void)mode; (void)shape; (void)am;
  *c = NULL;
  KIO_ERROR("This program was built without CUDA (./configure --use-cuda=no)");
  return KIO_ERR;
}
void gacc_cuda_free(gacc_cuda *c) { (void)c; }
int gacc_cuda_rebind(gacc_cuda *c, const gacc_stats *shape, const kio_am_gmm *am) {
  (void)c; (void)shape; (void)am;
  return KIO_ERR;
}
int gacc_cuda_accumulate(gacc_cuda *c, int32_t n_frames, const float *feats,
                         const int32_t *tid, const int32_t *pdf, float *mx, float *sum) {
  (void)c; (void)n_frames; (void)feats; (void)tid; (void)pdf; (void)mx; (void)sum;
  return KIO_ERR;
}
int gacc_cuda_accumulate_mats(gacc_cuda *c, int32_t n_frames, const kio_matrix *mats,
                              int n_mats, const int32_t *tid, const int32_t *pdf,
                              float *mx, float *sum) {
  (void)c; (void)n_frames; (void)mats; (void)n_mats; (void)tid; (void)pdf; (void)mx; (void)sum;
  return KIO_ERR;
}
int gacc_cuda_fetch(gacc_cuda *c, gacc_stats *out) {
  (void)c; (void)out;
  return KIO_ERR;
}
int gacc_cuda_copy_stats(gacc_cuda *c, double *tacc, double *occ, double *mean, double *var) {
  (void)c; (void)tacc; (void)occ; (void)mean; (void)var;
  return KIO_ERR;
}
int gacc_cuda_zero(gacc_cuda *c) {
  (void)c;
  return KIO_ERR;
}
int gacc_cuda_load(gacc_cuda *c, const gacc_stats *in) {
  (void)c; (void)in;
  return KIO_ERR;
}
size_t gacc_cuda_frame_bytes(const gacc_cuda *c) { (void)c; return 1; }
size_t gacc_cuda_persistent(const gacc_cuda *c) { (void)c; return 0; }
kio_gpu_acct *gacc_cuda_acct(const gacc_cuda *c) { (void)c; return NULL; }
void gacc_cuda_trim(gacc_cuda *c) { (void)c; }
void gacc_cuda_use_dev_feats(gacc_cuda *c, const gacc_dev_feats *f) { (void)c; (void)f; }
void gacc_cuda_set_par(gacc_cuda *c, gacc_par *p) { (void)c; (void)p; }
int gacc_cuda_device_of(const gacc_cuda *c) { (void)c; return -1; }
int gacc_dev_feats_new(gacc_dev_feats **f, int n, const kio_matrix *mats, char *why,
                       size_t why_len) {
  (void)n; (void)mats;
  *f = NULL;
  snprintf(why, why_len, "built without CUDA");
  return KIO_ERR;
}
void gacc_dev_feats_free(gacc_dev_feats *f) { (void)f; }
size_t gacc_dev_feats_bytes(const gacc_dev_feats *f) { (void)f; return 0; }
void gacc_dev_feats_rows(const gacc_dev_feats *f, const float **d_base, const int64_t **row_off) {
  (void)f;
  *d_base = NULL;
  *row_off = NULL;
}
int gacc_dev_feats_copy(const gacc_dev_feats *f, const kio_matrix *mats, int n, float *dst,
                        void *stream) {
  (void)f; (void)mats; (void)n; (void)dst; (void)stream;
  return 0;
}
int gacc_dev_feats_device(const gacc_dev_feats *f) { (void)f; return -1; }
int gacc_dev_sum_reserve(gacc_dev_sum **s, int n, const gacc_stats *shape, char *why,
                         size_t why_len) {
  (void)n; (void)shape;
  *s = NULL;
  snprintf(why, why_len, "built without CUDA");
  return KIO_ERR;
}
void gacc_dev_sum_free(gacc_dev_sum *s) { (void)s; }
int gacc_stash_stats(gacc_acc *a, gacc_dev_sum *s, int k, double *like, double *frames) {
  (void)a; (void)s; (void)k; (void)like; (void)frames;
  KIO_ERROR("This program was built without CUDA (./configure --use-cuda=no)");
  return KIO_ERR;
}
int gacc_dev_sum_fetch(gacc_dev_sum *s, gacc_stats *out) {
  (void)s; (void)out;
  KIO_ERROR("This program was built without CUDA (./configure --use-cuda=no)");
  return KIO_ERR;
}
void gacc_cuda_timing(const gacc_cuda *c, gacc_timing *t) {
  (void)c;
  memset(t, 0, sizeof *t);
}
int gacc_cuda_bind_thread(gacc_cuda *c) {
  (void)c;
  return KIO_ERR;
}
int gacc_cuda_host_alloc(void **p, size_t bytes) {
  *p = malloc(bytes ? bytes : 1);
  return *p ? KIO_OK : KIO_ERR;
}
void gacc_cuda_host_free(void *p) { free(p); }
#else
typedef int gacc_cuda_nocuda_unused; /* ISO C: no empty translation unit */
#endif
