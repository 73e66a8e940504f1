/* CUDA backend of the aligner (internal; the dispatcher in aligner.c calls it).
 * Same semantics as the CPU path: GMM log-likelihoods with cuBLAS (no TF32)
 * plus Kaldi's log-sum-exp, then the FasterDecoder of viterbi-core.h run on
 * the device, one thread per utterance. Built without CUDA, every function
 * logs ERROR "built without CUDA" and returns KIO_ERR (align-cuda-nocuda.c).
 *
 * Threading: one galign_cuda is used by one host thread at a time. */
#ifndef GALIGN_ALIGN_CUDA_H
#define GALIGN_ALIGN_CUDA_H

#include <stddef.h>
#include <stdint.h>
#include "gpu-align.h"
#include "device/gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct galign_cuda galign_cuda;

/* On the job's device gpu (device/gpu.h: kio_gpu_job): uploads the model,
 * creates the stream, and the account its device memory is charged to
 * (the aligner's share of the job's budget); mode says what happens when
 * memory runs out (kio_gpu_out_of_memory). The model is copied: gmm may be
 * freed afterwards; o is copied too. On failure logs ERROR, returns KIO_ERR
 * and *c = NULL. Never call in a Check parent process. */
int galign_cuda_new(galign_cuda **c, struct kio_gpu *gpu, galign_use_gpu mode,
                    const galign_gmm *gmm, const galign_opts *o);
/* Accepts NULL. */
void galign_cuda_free(galign_cuda *c);
/* The GPU service's pooled aligner: c aligns with model gmm (any
 * dimension) and options o from now on, as a new one would. Its stream,
 * events, pinned staging ring, decoder state and host retry threads (for
 * the same retry beam and acoustic scale) are kept, the model's device
 * arrays reused where large enough; registered device features are
 * cleared. On failure (logged) c must be freed. */
int galign_cuda_rebind(galign_cuda *c, const galign_gmm *gmm, const galign_opts *o);
/* Frees the per-batch device buffers (they are grown again by the next
 * batch): the GPU service calls it after each batch, so that a job holds
 * device memory only while its batch runs. */
void galign_cuda_trim(galign_cuda *c);
/* Device bytes the batch buffers of these n utterances (graphs[i] with
 * rows[i] frames) are planned to take in one sub-batch (the sum of the
 * per-utterance plans); SIZE_MAX where the plan depends on the budget
 * itself (the cuBLAS likelihood path). */
size_t galign_cuda_batch_need(const galign_cuda *c, int n, const galign_graph *const *graphs,
                              const int32_t *rows);
/* The account of c's device memory. */
struct kio_gpu_acct *galign_cuda_acct(const galign_cuda *c);
/* "NVIDIA H200, 132 SMs, 139.8 GiB" (valid until free). */
const char *galign_cuda_device_desc(const galign_cuda *c);

/* Aligns n utterances exactly as galign_align_batch does on the CPU (retry
 * with opts.retry_beam included; results[i] filled, ok = 0 when Kaldi would
 * say "Did not successfully decode"). An utterance the device could not
 * handle (its decoder workspace overflowed: a graph/beam far larger than the
 * workspace sizing expects; or device memory ran out even for it alone and
 * the mode says the CPU) gets redo[i] = 1, results[i] is left ok = 0
 * with no alignment, and the caller must align it on the CPU; other entries
 * get redo[i] = 0. Sub-batches are sized to the budget; when memory runs
 * out they are split (device/gpu.h). *num_redo (may be NULL) receives the
 * count. Returns
 * KIO_ERR (after one ERROR line) on fatal problems: dim mismatch, invalid
 * likelihood ("Invalid answer (overflow or invalid variances/features?)"),
 * CUDA failures. results[] must be zero-initialised or hold earlier results
 * (their buffers are reused/realloc'ed). */
int galign_cuda_align_batch(galign_cuda *c, int n, const galign_graph *const *graphs,
                            const kio_matrix *const *feats, int want_per_frame,
                            galign_result *results, uint8_t *redo, int *num_redo);

/* Statistics since creation: decoder frames and tokens alive at each
 * GetCutoff (both passes of a retried utterance, as the CPU counts them),
 * the most tokens of one frame, utterances handed back for a CPU redo, those
 * among them because of an invalid likelihood, utterances decoded a second
 * time on the device with a bigger workspace. Any pointer may be NULL. */
void galign_cuda_stats(const galign_cuda *c, int64_t *frames, int64_t *toks,
                       int32_t *max_toks, int64_t *redo, int64_t *bad_like,
                       int64_t *regrown);

/* Utterances since creation whose retry pass ran on host threads
 * ($KALDI_GPU_DEV_RETRY=host), and those threads' time in seconds. */
void galign_cuda_retry_stats(const galign_cuda *c, int64_t *host_retries, double *host_s);

/* Seconds since creation: device time of the likelihood work (feature
 * upload, GEMMs, log-sum-exp), of the decoder kernels, and wall time spent
 * in galign_cuda_align_batch / galign_cuda_decode, and host time spent
 * copying features into pinned staging memory. Any pointer may be NULL. */
void galign_cuda_times(const galign_cuda *c, double *ll_s, double *dec_s, double *wall_s,
                       double *stage_s);

/* Device features (gpu-feats, align-gfeat.c): until cleared (n = 0),
 * the utterance whose host features are *feats[i] (by address) has its
 * rows at d_base + row_off[i] * dim on c's device (computed there and
 * complete before the next galign_cuda_align_batch); that call copies
 * them on the device instead of staging the host copy. The host copies
 * must still hold the same features (CPU redo, long utterances). KIO_OK
 * or KIO_ERR (no memory, logged). */
int galign_cuda_set_dev_feats(galign_cuda *c, int n, const kio_matrix *const *feats,
                              const float *d_base, const int64_t *row_off);
/* The CUDA device c runs on. */
int galign_cuda_device(const galign_cuda *c);
/* Utterances whose features were taken from registered device rows. */
int64_t galign_cuda_dev_feat_utts(const galign_cuda *c);

/* ---- long utterances: device likelihoods in frame chunks for the host
 * decoder (loglike-chunks-cuda.cu; aligner.c runs them on worker threads) ---- */
typedef struct galign_cuda_chunks galign_cuda_chunks;
struct galign_ll_source;
/* 1 when c computes likelihoods with the exact kernel (the chunks use it;
 * a model outside its limits keeps long utterances on the CPU path). */
int galign_cuda_chunks_usable(const galign_cuda *c);
/* One per host thread, sharing c (its model only is read; own stream and
 * buffers). Logs ERROR on failure. */
int galign_cuda_chunks_new(galign_cuda *c, galign_cuda_chunks **out);
/* Accepts NULL. Call from a thread of c's device. */
void galign_cuda_chunks_free(galign_cuda_chunks *k);
/* The likelihood source for galign_cpu_align_src (align-cpu.h). */
struct galign_ll_source *galign_cuda_chunks_source(galign_cuda_chunks *k);
/* Chunks computed so far, and the most device memory its buffers held. */
void galign_cuda_chunks_stats(const galign_cuda_chunks *k, int64_t *chunks, size_t *dev_peak);

/* ---- entry points for tests (and debugging) ---- */

/* Device log-likelihoods of one utterance for the pdfs its graph uses:
 * out is resized to feats->rows x g->num_pdfs_used, out[t][k] =
 * LL(t, g->pdfs_used[k]) (not multiplied by the acoustic scale). */
int galign_cuda_loglikes(galign_cuda *c, const galign_graph *g,
                         const kio_matrix *feats, kio_matrix *out);

/* Device decoder only, on host-given log-likelihoods: loglikes[i] is
 * frames x graphs[i]->num_pdfs_used in the layout galign_cuda_loglikes
 * returns (unscaled; the acoustic scale of opts is applied as on the CPU).
 * Results, redo and return value as for galign_cuda_align_batch. */
int galign_cuda_decode(galign_cuda *c, int n, const galign_graph *const *graphs,
                       const kio_matrix *const *loglikes, int want_per_frame,
                       galign_result *results, uint8_t *redo, int *num_redo);

#ifdef __cplusplus
}
#endif
#endif
