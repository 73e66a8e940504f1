/* Internals shared by the CUDA files of gpu-align (align-cuda.cu,
 * loglike-cuda.cu, decode-cuda.cu). C++ (nvcc) only. */
#ifndef GALIGN_ALIGN_CUDA_IMPL_H
#define GALIGN_ALIGN_CUDA_IMPL_H

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "device/cuda-util.h"
#include "base/sys/log.h"
#include "align-cuda.h"

/* Kernel launch and dynamic shared memory (tests/emu/ replaces them to run
 * kernels on the host). */
#ifndef GALIGN_LAUNCH
#define GALIGN_LAUNCH(kernel, grid, block, stream, ...) \
  kernel<<<(grid), (block), 0, (stream)>>>(__VA_ARGS__)
#define GALIGN_LAUNCH_SMEM(kernel, grid, block, smem, stream, ...) \
  kernel<<<(grid), (block), (smem), (stream)>>>(__VA_ARGS__)
#define GALIGN_DYN_SMEM(type, name) extern __shared__ type name[]
#endif

/* cuBLAS entry points, loaded on first use (cublas-lazy.cu). galign_cublas
 * returns NULL after logging an ERROR when the library cannot be loaded. */
typedef struct {
  cublasStatus_t (*create)(cublasHandle_t *);
  cublasStatus_t (*destroy)(cublasHandle_t);
  cublasStatus_t (*set_stream)(cublasHandle_t, cudaStream_t);
  cublasStatus_t (*set_math_mode)(cublasHandle_t, cublasMath_t);
  cublasStatus_t (*sgemm)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                          const float *, const float *, int, const float *, int, const float *,
                          float *, int);
  const char *(*status_string)(cublasStatus_t);
} galign_cublas_api;
const galign_cublas_api *galign_cublas(void);
const char *galign_cublas_status_string(cublasStatus_t s);

/* Checks a cuBLAS call like KIO_CUDA_TRY. */
#define GALIGN_CUBLAS_TRY(call)                                                  \
  do {                                                                           \
    cublasStatus_t galign_s_ = (call);                                           \
    if (galign_s_ != CUBLAS_STATUS_SUCCESS) {                                    \
      kio_logf(KIO_LOG_ERROR, __func__, __FILE__, __LINE__, "cuBLAS error %s (%d): %s", \
               galign_cublas_status_string(galign_s_), (int)galign_s_, #call);   \
      return KIO_ERR;                                                            \
    }                                                                            \
  } while (0)

/* Limits of the exact likelihood kernel: Gaussians per pdf (its per-thread
 * scratch) and shared memory for the features (1 KB per feature dim, so
 * dims up to ~200); models beyond them use the cuBLAS path. */
#define GALIGN_LL_MAXC 128
#define GALIGN_LL_MAX_SMEM (200 * 1024)
size_t galign_cu_ll_exact_smem(int32_t dim);

/* A device or pinned host buffer that only grows. */
typedef struct { void *p; size_t cap; } galign_cu_buf;
int galign_cu_dev_reserve(galign_cu_buf *b, size_t bytes);
int galign_cu_host_reserve(galign_cu_buf *b, size_t bytes);
void galign_cu_dev_release(galign_cu_buf *b);
void galign_cu_host_release(galign_cu_buf *b);
/* The account the calling thread's device buffers are charged to and the
 * stream their allocations are ordered on (set by every entry point). */
void galign_cu_use(kio_gpu_acct *acct, cudaStream_t st);
#define GALIGN_RING_N 4     /* pinned staging buffers for features */
#define GALIGN_CU_RESERVE(kind, buf, type, count) \
  do { if (galign_cu_##kind##_reserve(&(buf), sizeof(type) * (size_t)(count)) != KIO_OK) return KIO_ERR; } while (0)

/* The device arrays of the model: kept by a rebound aligner where large
 * enough (galign_cuda_rebind), else freed and allocated anew. */
enum {
  GALIGN_CU_MODEL_W, GALIGN_CU_MODEL_PDF_OFFSET, GALIGN_CU_MODEL_GCONST, GALIGN_CU_MODEL_MI,
  GALIGN_CU_MODEL_IV, GALIGN_CU_MODEL_GROUPS, GALIGN_CU_MODEL_GRP_START, GALIGN_CU_MODEL_N
};

/* One utterance of a device batch. Likelihoods of utterance u live at
 * ll[ll_off .. ll_off + num_frames * npu) row-major (frame, compact pdf). */
typedef struct {
  int64_t ll_off;
  int64_t frame_off;  /* first row in the batch feature matrix */
  int32_t num_frames;
  int32_t npu;        /* pdfs used by its graph */
  int64_t col_off;    /* its npu entries in the selected-pdf map */
} galign_cu_utt;

/* A host feature matrix whose rows are already on the device. */
typedef struct { const kio_matrix *m; int64_t row; } galign_cu_devfeat;

/* Flags the kernels raise (atomicOr into one device int). */
enum { GALIGN_CU_BAD_LIKE = 1 };

struct galign_cuda {
  int device;
  kio_gpu *gpu;                           /* the job's device (device/gpu.h) */
  kio_gpu_acct *acct;                     /* its device memory */
  size_t model_bytes;                     /* held for the model whatever the batch */
  size_t sub_bytes;                       /* a sub-batch's planned bytes now (halved
                                             when memory ran short, grown back) */
  galign_use_gpu mode;
  char desc[160];
  galign_opts opts;
  cublasHandle_t blas;
  cudaStream_t stream;
  size_t mem_total;
  int num_sms;                            /* multiprocessors of the device */

  /* model */
  int32_t dim, num_pdfs, num_gauss, kpad; /* kpad: 1 + 2*dim rounded up to 4 */
  int32_t *h_pdf_offset;                  /* host copy, num_pdfs + 1 */
  float log_eps;                          /* logf(FLT_EPSILON), host-computed */
  float *d_w;                             /* num_gauss x kpad: [gconst, mi, -0.5 iv, 0..] */
  int32_t *d_pdf_offset;                  /* device copy of h_pdf_offset */
  size_t model_cap[GALIGN_CU_MODEL_N];    /* bytes of each model array (galign_cu_model_reserve) */

  /* exact likelihoods (loglike-exact-cuda.cu): 1 = used, else cuBLAS GEMM */
  int ll_exact;
  int ll_smem_set;                        /* dynamic smem limit raised for the kernel */
  int64_t ll_ntiles;                      /* tiles of the prepared batch */
  galign_gmm dgmm;                        /* device copies (pdf_offset = d_pdf_offset) */
  float *d_groups;                        /* the exact kernel's grouped model */
  int32_t *d_grp_start;                   /* per pdf, its first group */

  /* host scratch for the selected-pdf union */
  int32_t *h_sel_of;                      /* pdf -> selected index or -1 */

  /* per batch (grown, reused) */
  galign_cu_buf h_feats, d_feats;         /* loglikes path / total_frames x dim */
  galign_cu_buf h_ring[GALIGN_RING_N];    /* pinned staging of features */
  cudaEvent_t ring_ev[GALIGN_RING_N];     /* its copy to the device has been done */
  int ring_used[GALIGN_RING_N];
  unsigned ring_next;
  galign_cu_buf h_utt, d_utt;             /* n galign_cu_utt */
  galign_cu_buf h_sel, d_sel;             /* selected pdf list, then its gauss offsets */
  galign_cu_buf h_ucol, d_ucol;           /* per utt, compact pdf -> selected index
                                             (exact path: -> pdf id) */
  galign_cu_buf h_tiles, d_tiles;         /* exact path: per tile (utt, first frame,
                                             first and count of its compact pdfs in
                                             tsel; count -1: all of the utterance's) */
  galign_cu_buf d_tsel;                   /* margin bands: per tile, the compact pdfs
                                             of arcs into its frames' bands */
  galign_cu_buf d_wsel;                   /* gsel x kpad */
  galign_cu_buf d_xexp;                   /* chunk x kpad */
  galign_cu_buf d_lg;                     /* chunk x gsel Gaussian log-likelihoods */
  galign_cu_buf d_ll;                     /* sum_u T_u * npu_u */
  galign_cu_buf d_flags, h_flags;         /* one int each */
  galign_cu_buf d_uflags, h_uflags;       /* per utterance: GALIGN_CU_BAD_LIKE */
  int64_t total_frames, total_ll;
  int32_t nsel, gsel;

  /* decoder state: owned by decode-cuda.cu */
  struct galign_cu_dec *dec;
  /* statistics since creation (galign_cuda_stats) */
  int64_t stat_frames, stat_toks, stat_redo, stat_bad_like, stat_regrow;
  int32_t stat_max_toks;
  /* timing: events around the likelihood work [0, 1] and a decoder pass [2, 3] */
  cudaEvent_t ev[4];
  int ll_timed;                           /* ev[0..1] recorded, not yet read */
  double t_ll, t_dec, t_wall, t_stage;  /* t_stage: host copies into pinned memory */
  double t_retry;                       /* host threads' retry passes (summed) */
  int64_t stat_host_retry;              /* utterances queued for them */
  /* registered device features (galign_cuda_set_dev_feats): sorted by
   * host matrix address */
  galign_cu_devfeat *df;
  int ndf, df_cap;
  const float *df_base;
  int64_t stat_df_utts;
};

/* loglike-cuda.cu: computes the likelihoods of a batch into d_ll, all
 * asynchronous on c->stream (features copied through pinned memory).
 * An invalid likelihood (NaN/inf, or a NaN component) raises the global flag
 * and the utterance's flag: Kaldi computes likelihoods lazily, so only the
 * CPU redo of that utterance can tell whether Kaldi would have died.
 * pdf lists come from graphs; feats[i]->rows == graphs' utterance length.
 * When loglikes != NULL the features are ignored and loglikes[i] (frames x
 * npu, unscaled) are uploaded instead. Checks dims (logs ERROR). Leaves
 * h_utt filled. The flags are read back into h_flags / h_uflags; call
 * galign_cu_check_flags (test entry) after synchronising. */
int galign_cu_loglikes_launch(galign_cuda *c, int n, const galign_graph *const *graphs,
                              const kio_matrix *const *feats,
                              const kio_matrix *const *loglikes);
int galign_cu_check_flags(galign_cuda *c);
/* loglike-exact-cuda.cu: the exact kernel over the planned batch, in tiles
 * of GALIGN_LL_TILE frames of one utterance: upload builds the grouped model
 * once; prepare uploads the batch's tile list (c->ll_ntiles tiles; a tile
 * of an utterance with a margin band lists only the pdfs the decoder can
 * read there: those of arcs into states of the band of its frames); run
 * launches them all (the features must be on their way to d_feats on the
 * stream). */
#define GALIGN_LL_TILE 128
int galign_cu_ll_exact_upload(galign_cuda *c, const galign_gmm *g);
int galign_cu_ll_exact_prepare(galign_cuda *c, int n, const galign_graph *const *graphs);
int galign_cu_ll_exact_run(galign_cuda *c);
/* The kernel over ntiles tiles with explicit buffers (device pointers; utt:
 * galign_cu_utt[]), on stream st; run and the long-utterance chunks use it.
 * Only reads the model of c: callable from any thread. */
int galign_cu_ll_exact_launch(const galign_cuda *c, int64_t ntiles, const int32_t *tiles,
                              const int32_t *tsel, const void *utt, const float *feats,
                              const int32_t *upd, float *ll, int *flags, int *uflags,
                              cudaStream_t st);

/* Model array which (GALIGN_CU_MODEL_*) at *p with room for bytes: the
 * one there if large enough, else a new one on c's stream charged to c's
 * account (the old one freed). KIO_ERR (logged). */
int galign_cu_model_reserve(galign_cuda *c, int which, void **p, size_t bytes);

/* Creates c->blas on first use (KIO_ERR logged on failure). */
int galign_cu_blas(galign_cuda *c);

/* Adds the elapsed times of the recorded events (call after a sync). */
int galign_cu_accum_times(galign_cuda *c, int dec_pass);

/* decode-cuda.cu */
/* Device bytes one utterance of T frames on graph g takes in a batch (its
 * features, likelihoods, packed graph, decoder workspace, results), with
 * the buffers' slack: the unit sub-batches are planned in. */
size_t galign_cu_utt_bytes(const galign_cuda *c, const galign_graph *g, int32_t T);
/* Frees every per-batch device buffer (after synchronising the stream):
 * what is left is the model. */
void galign_cu_dec_trim(galign_cuda *c);
/* Device bytes the per-batch buffers hold now. */
size_t galign_cu_batch_held(const galign_cuda *c);
int galign_cu_dec_new(galign_cuda *c);
void galign_cu_dec_free(galign_cuda *c);
/* Decodes the batch whose likelihoods galign_cu_loglikes_launch queued;
 * synchronises, checks flags, fills results/redo. */
int galign_cu_decode_batch(galign_cuda *c, int n, const galign_graph *const *graphs,
                           int want_per_frame, galign_result *results,
                           uint8_t *redo, int *num_redo);
/* Waits for the retry passes the batches queued on host threads (their
 * results are then final); adds those left to the CPU path to *num_redo
 * (may be NULL). Call before the results are read, errors included. */
void galign_cu_retry_wait(galign_cuda *c, int *num_redo);

#endif
