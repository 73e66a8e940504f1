/* Forced alignment (CPU reference + CUDA) with Kaldi's gmm-align-compiled
 * semantics: graph preparation, GMM log-likelihoods, FasterDecoder-exact
 * Viterbi with beam pruning and retry, best path; and equal alignment. */
#ifndef GALIGN_H
#define GALIGN_H

#include <stdint.h>
#include "base/model/fst.h"
#include "base/matrix/matrix.h"
#include "base/model/model.h"
#include "device/gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  float beam;             /* 200 */
  float retry_beam;       /* 0 = no retry */
  float transition_scale; /* 1.0 */
  float self_loop_scale;  /* 1.0 */
  float acoustic_scale;   /* 1.0 */
  int careful;            /* 0 */
  int num_gpus;           /* 1; GPU service connections a batch is split
                             over (--num-gpus; not a decoding option) */
  int graph_has_probs;    /* 0; 1: the graphs carry their transition
                             probabilities already (gmm-align compiles them
                             with its scales): the three scales' probs are
                             not added again */
  int no_service;         /* 0; 1: never the GPU service (a process that
                             keeps its own context and model for long: the
                             trainer) */
} galign_opts;
void galign_opts_default(galign_opts *o);
struct kio_opts;
/* Registers gmm-align-compiled's decoding options (--beam, --retry-beam,
 * --careful, --transition-scale, --acoustic-scale, --self-loop-scale) with
 * Kaldi's help texts. */
void galign_opts_register(struct kio_opts *po, galign_opts *o);

/* A graph ready for decoding: transition log-probs of the current model added
 * with the three scales (reference 5.2), careful mode applied (5.4), and the
 * pdfs it can reach listed so likelihoods are computed only for those. */
typedef struct {
  kio_fst fst;
  int32_t num_pdfs_used;
  int32_t *pdfs_used;   /* compact index -> pdf id (sorted ascending) */
  int32_t *arc_pdf;     /* per arc: compact pdf index, -1 for ilabel 0 */
  /* Margin band around a prior alignment (align-margin.h); band_T = 0: none
   * (galign_graph_prepare clears it). Otherwise for an utterance of band_T
   * frames: after k frames (k = 0..band_T) only states s with band_lo[k] <=
   * topo_pos[s] <= band_hi[k] may hold tokens. */
  int32_t band_T;
  int32_t *topo_pos;    /* fst.num_states: place in a topological order */
  int32_t *band_lo, *band_hi;  /* band_T + 1 each */
} galign_graph;

/* Returns KIO_ERR after logging "AddTransitionProbs: invalid symbol L on graph
 * input side." for an ilabel > NumTransitionIds. tm may be NULL (no probs
 * added, used by equal alignment). out's buffers are reused. */
int galign_graph_prepare(const kio_fst *in, const kio_tmodel *tm,
                         const galign_opts *o, galign_graph *out);
void galign_graph_free(galign_graph *g);

/* The AmDiagGmm flattened for likelihood computation. Owner: the struct. */
typedef struct {
  int32_t dim, num_pdfs, num_gauss;
  int32_t blas_prof;     /* the rounding profile (base/matrix/blas-profile.h): which
                            OpenBLAS kernels' order the likelihoods follow */
  int32_t *pdf_offset;   /* num_pdfs + 1; Gaussians of pdf j: [off[j], off[j+1]) */
  float *gconst;         /* num_gauss */
  float *means_invvars;  /* num_gauss * dim */
  float *inv_vars;       /* num_gauss * dim */
} galign_gmm;
int galign_gmm_init(galign_gmm *g, const kio_am_gmm *am);
void galign_gmm_free(galign_gmm *g);

/* Result of aligning one utterance. Owner of ali / per_frame: the struct. */
typedef struct {
  int ok;             /* 1: aligned; 0: "Did not successfully decode" */
  int retried;        /* 1 if the retry beam was used */
  int band_failed;    /* 1: the margin band was given up (no final state in
                         it), the result is the full search's */
  int32_t num_frames; /* feature rows */
  int32_t *ali;       /* num_frames transition-ids when ok */
  float like;         /* -(graph+acoustic cost) / acoustic_scale */
  float score;        /* -(graph+acoustic cost) */
  float *per_frame;   /* per-frame acoustic loglikes (only if requested) */
} galign_result;
void galign_result_free(galign_result *r);

/* --use-gpu: the device layer's modes (device/gpu.h). */
typedef kio_gpu_mode galign_use_gpu;
#define GALIGN_GPU_NO KIO_GPU_NO
#define GALIGN_GPU_YES KIO_GPU_YES
#define GALIGN_GPU_OPTIONAL KIO_GPU_OPTIONAL
#define GALIGN_GPU_WAIT KIO_GPU_WAIT
/* "yes"|"no"|"optional"|"wait"; KIO_ERR on anything else. */
int galign_parse_use_gpu(const char *s, galign_use_gpu *out);

/* One aligner: the model on the chosen backend plus reusable work buffers. */
typedef struct galign_aligner galign_aligner;
/* mode NO -> CPU; OPTIONAL -> GPU if usable else CPU; YES/WAIT -> GPU or
 * KIO_ERR. Logs one LOG line saying which backend is used. */
int galign_aligner_new(galign_aligner **a, galign_use_gpu mode,
                       const kio_tmodel *tm, const kio_am_gmm *am,
                       const galign_opts *o);
int galign_aligner_is_gpu(const galign_aligner *a);
/* 1 if the aligner hands its batches to the GPU service (device/svc-link.h);
 * mode != NO tries the service first, then our own context, then (optional)
 * the CPU. A service lost during the run is replaced by our own backend for
 * the rest, with a LOG line. */
int galign_aligner_is_remote(const galign_aligner *a);
void galign_aligner_free(galign_aligner *a);
/* The GPU service's pooled aligners (our own backend only, never one that
 * hands its batches to the service): galign_unbind, when a goes idle, drops
 * its copy of the model (host memory; its device arrays stay, to be reused);
 * galign_rebind makes a align with model am (any dimension) and options o
 * as a new aligner of its backend would, bit for bit, keeping its stream,
 * pinned buffers, device workspaces, decoder state, host threads and CPU
 * workspaces; the model's device arrays are uploaded anew, regrown where
 * too small. tm is not kept (graphs carry the transition probabilities).
 * KIO_ERR (logged): a must be freed. */
int galign_rebind(galign_aligner *a, const kio_tmodel *tm, const kio_am_gmm *am,
                  const galign_opts *o);
void galign_unbind(galign_aligner *a);
/* Our own device backend's account of device memory (NULL: none), and its
 * per-batch buffers freed (the GPU service, between batches and jobs). */
struct kio_gpu_acct *galign_aligner_acct(const galign_aligner *a);
void galign_aligner_trim(galign_aligner *a);
/* Device bytes our own device backend plans for aligning these n
 * utterances in one sub-batch: what a batch asks of a shared budget. SIZE_MAX
 * where there is no such plan (not our device backend, long utterances,
 * the cuBLAS likelihood path). */
size_t galign_aligner_batch_need(const galign_aligner *a, int n,
                                 const galign_graph *const *graphs,
                                 const kio_matrix *const *feats);

/* Aligns n utterances (graphs prepared; feats rows >= 1). Per-utterance
 * failures are results with ok = 0. Returns KIO_ERR (after an ERROR line)
 * only for fatal problems Kaldi also dies on: dim mismatch, invalid
 * likelihood, beams that make no sense. want_per_frame: fill per_frame. */
int galign_align_batch(galign_aligner *a, int n, const galign_graph *const *graphs,
                       const kio_matrix *const *feats, int want_per_frame,
                       galign_result *results);

/* Through the GPU service: hands it the next batch while the current one
 * is aligned on another thread (galign_remote_send_ahead); the next
 * galign_align_batch must be for the same lists. No-op otherwise. */
void galign_aligner_send_ahead(galign_aligner *a, int n, const galign_graph *const *graphs,
                               const kio_matrix *const *feats, int want_per_frame);
/* Through the GPU service: another batch will follow those given so far
 * (galign_remote_expect_more readies its shared memory). No-op otherwise. */
void galign_aligner_expect_more(galign_aligner *a);

/* Features computed on the device (gpu-feats; the pipeline's
 * align-gfeat.c): the CUDA device of our own backend, -1 when the aligner
 * has none (CPU, or the GPU service); rows registered for the next
 * galign_align_batch calls (see galign_cuda_set_dev_feats; a no-op
 * without our own backend; n = 0 clears); utterances that used them. */
int galign_aligner_cuda_device(const galign_aligner *a);
int galign_aligner_set_dev_feats(galign_aligner *a, int n, const kio_matrix *const *feats,
                                 const float *d_base, const int64_t *row_off);
int64_t galign_aligner_dev_feat_utts(const galign_aligner *a);

/* Seconds spent in the phases of alignment, summed over the batches since
 * the aligner was created. The CPU path measures them per worker thread and
 * sums the threads (CPU seconds: with several threads the sum exceeds the
 * wall time). The GPU path adds its own phases (0 until it measures them). */
typedef struct {
  double loglike_s;    /* GMM log-likelihoods */
  double viterbi_s;    /* token passing with beam pruning (both passes of a retry) */
  double backtrace_s;  /* best final state and best path */
  double copy_s;       /* host copies into pinned staging memory (0 on the CPU) */
  int64_t host_retries; /* GPU path: utterances retried on host threads */
  double host_retry_s;  /* GPU path: host threads' seconds on those retries */
} galign_aligner_stats;
/* Call between batches (not while galign_align_batch runs). */
void galign_aligner_get_stats(const galign_aligner *a, galign_aligner_stats *s);

/* ---- equal alignment (reference 6.3) ---- */
/* Kaldi's StringHasher(key) truncated to the int32 passed to srand. */
uint32_t galign_key_seed(const char *key);
/* Exact glibc srand()/rand() (TYPE_3) sequence, independent of the C library. */
typedef struct { int32_t state[31]; int f, r; } galign_rand; /* glibc TYPE_3 ring, front/rear */
void galign_srand(galign_rand *g, uint32_t seed);
int32_t galign_rand_next(galign_rand *g);
/* Returns 1 and fills ali[0..length-1] on success; 0 on failure after
 * logging Kaldi's warnings. The graph must be co-accessible. */
int galign_equal_align(const kio_fst *g, int32_t length, uint32_t seed, int32_t *ali);

#ifdef __cplusplus
}
#endif
#endif
