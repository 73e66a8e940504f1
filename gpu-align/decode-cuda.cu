/* Device Viterbi (placeholder until viterbi-core.h lands). */
#include "align-cuda-impl.h"

int galign_cu_dec_new(galign_cuda *c) { c->dec = NULL; return KIO_OK; }
void galign_cu_dec_free(galign_cuda *c) { (void)c; }
int galign_cu_decode_batch(galign_cuda *c, int n, const galign_graph *const *graphs,
                           int want_per_frame, galign_result *results,
                           uint8_t *redo, int *num_redo) {
  (void)c; (void)n; (void)graphs; (void)want_per_frame; (void)results; (void)redo; (void)num_redo;
  KIO_ERROR("CUDA decoder not implemented yet");
  return KIO_ERR;
}
