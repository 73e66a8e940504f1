/* Stand-ins for the CUDA backend when the build has no CUDA
 * (./configure --use-cuda=no): every entry logs one ERROR and fails. */
#if !KIO_HAVE_CUDA
#include <stddef.h>
#include "base/sys/log.h"
#include "align-cuda.h"

#define GALIGN_NOCUDA() \
  do { KIO_ERROR("This program was built without CUDA (./configure --use-cuda=no)"); return KIO_ERR; } while (0)

int galign_cuda_new(galign_cuda **c, struct kio_gpu *gpu, galign_use_gpu mode,
                    const galign_gmm *gmm, const galign_opts *o) {
  (void)gpu; (void)mode; (void)gmm; (void)o;
  if (c) *c = NULL;
  GALIGN_NOCUDA();
}
void galign_cuda_free(galign_cuda *c) { (void)c; }
int galign_cuda_rebind(galign_cuda *c, const galign_gmm *gmm, const galign_opts *o) {
  (void)c; (void)gmm; (void)o;
  GALIGN_NOCUDA();
}
void galign_cuda_trim(galign_cuda *c) { (void)c; }
size_t galign_cuda_batch_need(const galign_cuda *c, int n, const galign_graph *const *graphs,
                              const int32_t *rows) {
  (void)c; (void)n; (void)graphs; (void)rows;
  return SIZE_MAX;
}
struct kio_gpu_acct *galign_cuda_acct(const galign_cuda *c) { (void)c; return NULL; }
const char *galign_cuda_device_desc(const galign_cuda *c) { (void)c; return "built without CUDA"; }
int galign_cuda_set_dev_feats(galign_cuda *c, int n, const kio_matrix *const *feats,
                              const float *d_base, const int64_t *row_off) {
  (void)c; (void)n; (void)feats; (void)d_base; (void)row_off;
  GALIGN_NOCUDA();
}
int galign_cuda_device(const galign_cuda *c) { (void)c; return -1; }
int64_t galign_cuda_dev_feat_utts(const galign_cuda *c) { (void)c; return 0; }
int galign_cuda_align_batch(galign_cuda *c, int n, const galign_graph *const *graphs,
                            const kio_matrix *const *feats, int want_per_frame,
                            galign_result *results, uint8_t *redo, int *num_redo) {
  (void)c; (void)n; (void)graphs; (void)feats; (void)want_per_frame; (void)results; (void)redo;
  if (num_redo) *num_redo = 0;
  GALIGN_NOCUDA();
}
void galign_cuda_stats(const galign_cuda *c, int64_t *frames, int64_t *toks,
                       int32_t *max_toks, int64_t *redo, int64_t *bad_like,
                       int64_t *regrown) {
  (void)c;
  if (frames) *frames = 0;
  if (toks) *toks = 0;
  if (max_toks) *max_toks = 0;
  if (redo) *redo = 0;
  if (bad_like) *bad_like = 0;
  if (regrown) *regrown = 0;
}
void galign_cuda_retry_stats(const galign_cuda *c, int64_t *host_retries, double *host_s) {
  (void)c;
  if (host_retries) *host_retries = 0;
  if (host_s) *host_s = 0;
}
void galign_cuda_times(const galign_cuda *c, double *ll_s, double *dec_s, double *wall_s,
                       double *stage_s) {
  if (stage_s) *stage_s = 0;
  (void)c;
  if (ll_s) *ll_s = 0;
  if (dec_s) *dec_s = 0;
  if (wall_s) *wall_s = 0;
}
int galign_cuda_loglikes(galign_cuda *c, const galign_graph *g, const kio_matrix *feats,
                         kio_matrix *out) {
  (void)c; (void)g; (void)feats; (void)out;
  GALIGN_NOCUDA();
}
int galign_cuda_decode(galign_cuda *c, int n, const galign_graph *const *graphs,
                       const kio_matrix *const *loglikes, int want_per_frame,
                       galign_result *results, uint8_t *redo, int *num_redo) {
  (void)c; (void)n; (void)graphs; (void)loglikes; (void)want_per_frame; (void)results; (void)redo;
  if (num_redo) *num_redo = 0;
  GALIGN_NOCUDA();
}
int galign_cuda_chunks_usable(const galign_cuda *c) { (void)c; return 0; }
int galign_cuda_chunks_new(galign_cuda *c, galign_cuda_chunks **out) {
  (void)c;
  *out = NULL;
  GALIGN_NOCUDA();
}
void galign_cuda_chunks_free(galign_cuda_chunks *k) { (void)k; }
struct galign_ll_source *galign_cuda_chunks_source(galign_cuda_chunks *k) { (void)k; return NULL; }
void galign_cuda_chunks_stats(const galign_cuda_chunks *k, int64_t *chunks, size_t *dev_peak) {
  (void)k;
  *chunks = 0;
  *dev_peak = 0;
}
#else
typedef int galign_align_cuda_nocuda_unused; /* ISO C: no empty unit */
#endif
