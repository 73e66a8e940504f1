/* Internal to gpu-align: GMM log-likelihoods on the CPU and the CPU decoder
 * driver (one utterance at a time, one workspace per thread). */
#ifndef GALIGN_ALIGN_CPU_H
#define GALIGN_ALIGN_CPU_H

#include <stddef.h>
#include <stdint.h>
#include "gpu-align.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Largest number of Gaussians of one pdf (scratch size for the functions below). */
int32_t galign_gmm_max_comp(const galign_gmm *g);

/* LL(x, pdf) per reference 5.5 (unscaled): per-component log-likelihoods in
 * float, log-sum-exp pruned at max + logf(FLT_EPSILON), summed in double.
 * x2[d] = x[d] * x[d]. scratch: galign_gmm_max_comp() floats. May return NaN
 * or inf: the caller reports "Invalid answer ...". */
float galign_gmm_loglike(const galign_gmm *g, int32_t pdf, const float *x, const float *x2,
                         float *scratch);

/* Same value through the portable scalar code of gmm-core.h (no AVX); must
 * be bit-identical to galign_gmm_loglike (tested). */
float galign_gmm_loglike_scalar(const galign_gmm *g, int32_t pdf, const float *x,
                                const float *x2, float *scratch);

/* The whole T x n_used matrix of an utterance: out[t][k] = LL(t, pdfs_used[k]).
 * KIO_ERR after logging ERROR on a dim mismatch or an invalid answer. */
int galign_cpu_loglikes(const galign_gmm *gmm, const kio_matrix *feats,
                        const int32_t *pdfs_used, int32_t n_used, kio_matrix *out);

/* Where the host decoder's likelihoods come from. NULL (galign_cpu_align_one):
 * the GMM, evaluated lazily, only the pdfs the decoder needs on each frame.
 * A source instead hands out whole rows (all g->num_pdfs_used compact pdfs,
 * unscaled) computed elsewhere: the device, in frame chunks, for long
 * utterances in a GPU run (align-cuda.h, galign_cuda_chunks). The decoder
 * still checks only the values it reads (an invalid one fails the utterance
 * with the CPU path's message), so results and errors are the CPU path's. */
typedef struct galign_ll_source galign_ll_source;
struct galign_ll_source {
  /* Once per utterance, before any row. KIO_OK, or KIO_ERR with err set. */
  int (*begin)(galign_ll_source *s, const galign_graph *g, const kio_matrix *feats, char *err,
               size_t errlen);
  /* Row of frame t, valid until the next call. Frames are asked for in
   * order 0..T-1, then again from 0 for a retry pass. NULL: err set. */
  const float *(*row)(galign_ll_source *s, int32_t t, char *err, size_t errlen);
};

/* Decoder workspace and per-utterance buffers of one CPU thread. */
typedef struct galign_cpu_ws galign_cpu_ws;
galign_cpu_ws *galign_cpu_ws_new(void);
void galign_cpu_ws_free(galign_cpu_ws *w);

/* Aligns one utterance on the CPU (likelihoods computed lazily, only for
 * the pdfs the decoder asks for, as Kaldi's decodable does). r's buffers are
 * reused. Returns KIO_OK, or KIO_ERR with a message in err (NOT logged, so
 * worker threads can run it): dim mismatch, invalid likelihood, no memory. */
int galign_cpu_align_one(galign_cpu_ws *w, const galign_gmm *gmm, const galign_graph *g,
                         const kio_matrix *feats, const galign_opts *o, int want_per_frame,
                         galign_result *r, char *err, size_t errlen);

/* The same with the likelihoods from src (NULL: as galign_cpu_align_one). */
int galign_cpu_align_src(galign_cpu_ws *w, const galign_gmm *gmm, const galign_graph *g,
                         const kio_matrix *feats, const galign_opts *o, int want_per_frame,
                         galign_ll_source *src, galign_result *r, char *err, size_t errlen);

/* Tokens alive per frame summed over this workspace's frames (at each
 * GetCutoff, both passes of a retried utterance), and the maximum. */
void galign_cpu_ws_stats(const galign_cpu_ws *w, int64_t *frames, int64_t *toks,
                         int32_t *max_toks);

/* Adds this workspace's phase times (seconds, clock_gettime around the
 * phases) to s: likelihoods, Viterbi, best path. */
void galign_cpu_ws_times(const galign_cpu_ws *w, galign_aligner_stats *s);

/* Sum of galign_cpu_ws_stats over the aligner's CPU workspaces. */
void galign_aligner_cpu_stats(const galign_aligner *a, int64_t *frames, int64_t *toks,
                              int32_t *max_toks);

#ifdef __cplusplus
}
#endif
#endif
