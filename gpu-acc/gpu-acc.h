/* GMM and transition statistics along alignments, as Kaldi's
 * gmm-acc-stats-ali accumulates them (reference section 4), on the CPU or a
 * CUDA device, and the .acc writer (4.3).
 *
 * Usage: gacc_new() for a model and a backend; gacc_accumulate_batch() (or
 * gacc_accumulate_batch_async(), which returns while the device works) as
 * often as needed (utterances already checked by the program: alignment
 * present and of the right length); gacc_get_stats() copies the totals to
 * the host; gacc_stats_write() writes the file.
 *
 * Arithmetic: the per-frame Gaussian log-likelihoods reproduce the rounding
 * of Kaldi's reference build (OpenBLAS sgemv, see acc-math.h) and the
 * softmax uses glibc's expf algorithm, on both backends; on the fixtures the
 * CPU backend writes files byte-identical to Kaldi's, and the GPU backend
 * differs from the CPU only in the order of the double sums. */
#ifndef GACC_H
#define GACC_H

#include <stdint.h>
#include <stdio.h>
#include "device/gpu.h"
#include "base/matrix/matrix.h"
#include "base/model/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Host copy of the statistics. Gaussian g of pdf j is g = off[j] + m.
 * Owner of every array: the struct (gacc_stats_free). */
typedef struct {
  int32_t num_tids;     /* tacc has num_tids + 1 entries, [0] for tid 0 */
  int32_t num_pdfs, dim, num_gauss;
  int32_t *pdf_offset;  /* num_pdfs + 1 */
  double *tacc;         /* num_tids + 1 transition counts */
  double *occ;          /* num_gauss occupancies */
  double *mean_acc;     /* num_gauss * dim, sum of gamma * x */
  double *var_acc;      /* num_gauss * dim, sum of gamma * x^2 */
  double total_like;    /* sum over frames of the float log-likelihood */
  double total_frames;
} gacc_stats;

/* Zeroed statistics shaped for the model. KIO_OK or KIO_ERR (logged). */
int gacc_stats_init(gacc_stats *s, const kio_tmodel *tm, const kio_am_gmm *am);
void gacc_stats_free(gacc_stats *s);
/* s (zeroed, or shaped before, for any model) shaped for the model, its
 * buffers kept where they fit (realloc'ed where not), so that statistics
 * used again and again take no fresh pages; the totals zeroed, the arrays
 * zeroed too when zero is nonzero (else their values are unspecified).
 * KIO_OK, or KIO_ERR (logged; s freed). */
int gacc_stats_reshape(gacc_stats *s, const kio_tmodel *tm, const kio_am_gmm *am, int zero);

/* Writes the stats file body of 4.3 (transition vector, <NUMPDFS>, one
 * <GMMACCS> per pdf with FLAGS 15, totals) to an open stream; the "\0B"
 * header is the caller's. */
int gacc_stats_write_stream(FILE *f, int binary, const gacc_stats *s);
/* Opens wxfilename (header in binary), writes, closes. Logs ERROR naming
 * the file on failure. */
int gacc_stats_write(const char *wxfilename, int binary, const gacc_stats *s);

/* One utterance to accumulate: feats->rows == num_frames alignment entries. */
typedef struct {
  const char *key;          /* for error messages */
  const kio_matrix *feats;
  const int32_t *ali;       /* transition-ids */
} gacc_utt;

/* Per-utterance result, as gmm-acc-stats-ali logs it. */
typedef struct {
  float like;      /* Kaldi's float accumulator: sum of per-frame loglikes */
  int32_t frames;
} gacc_utt_result;

typedef struct gacc_acc gacc_acc;  /* opaque: the model on one backend */

/* backend "cpu" or "gpu" (the job's device, device/gpu.h kio_gpu_job;
 * out of memory under --use-gpu=yes rules). The model must outlive the
 * accumulator. Logs ERROR and returns KIO_ERR when the GPU backend cannot
 * be set up. */
int gacc_new(gacc_acc **a, const char *backend, const kio_tmodel *tm,
             const kio_am_gmm *am);
/* On device g; mode (--use-gpu) says what happens when device memory runs
 * out: batches are split, then wait, the CPU for the rest of the batch
 * (same statistics), or an error (device/gpu.h kio_gpu_out_of_memory). */
int gacc_new_gpu(gacc_acc **a, kio_gpu *g, kio_gpu_mode mode, const kio_tmodel *tm,
                 const kio_am_gmm *am);
/* The device backend's account of device memory (NULL: none), and its
 * per-batch device buffers freed (the GPU service, between batches). */
struct kio_gpu_acct *gacc_acct(const gacc_acc *a);
void gacc_trim(gacc_acc *a);
int gacc_is_gpu(const gacc_acc *a);
/* The accumulator on the per-user GPU service (device/svc-link.h): connects
 * (starting the service if needed) and hands it the model. On failure
 * returns KIO_ERR without logging, with the reason in why. gacc_is_gpu is 1
 * for it; every entry works as on the GPU backend. If the service is lost
 * (gone, silent, its device failed), the accumulator goes on by itself with
 * the same statistics (one LOG line says so), on what on_loss allows, as
 * --use-gpu says: our own GPU context or else the CPU (optional), our own
 * GPU context or a fatal error (yes; wait: waiting for a device). */
typedef enum { GACC_LOSS_GPU_OR_CPU, GACC_LOSS_GPU, GACC_LOSS_GPU_WAIT } gacc_on_loss;
int gacc_new_remote(gacc_acc **a, const kio_tmodel *tm, const kio_am_gmm *am,
                    gacc_on_loss on_loss, char *why, size_t why_len);
/* The one pass through the service: the statistics of every batch that
 * aligner al aligns through the service (on one connection) are
 * accumulated there from the features it already holds; the take entry
 * (gacc_accumulate_batch_take) must then be given exactly those batches'
 * aligned utterances. A lost service as gacc_new_remote. KIO_ERR without
 * logging (why) if al is not on the service or it refuses. */
struct galign_aligner;
int gacc_new_remote_fused(gacc_acc **a, const struct galign_aligner *al, const kio_tmodel *tm,
                          const kio_am_gmm *am, gacc_on_loss on_loss, char *why, size_t why_len);
/* The service's device, "" if a is not on the service. */
const char *gacc_remote_desc(const gacc_acc *a);
void gacc_free(gacc_acc *a);

/* Accumulates n utterances in order. res (n entries) receives each one's
 * like/frames. Fatal problems (tid out of range, feature dimension not the
 * model's, NaN/inf log-likelihood) log one ERROR naming the utterance and
 * return KIO_ERR; the statistics are then unspecified. */
int gacc_accumulate_batch(gacc_acc *a, int n, const gacc_utt *utts,
                          gacc_utt_result *res);

/* As gacc_accumulate_batch, but on the GPU (the service, or the job's own
 * device) it returns once the batch is sent or handed to the worker: res[]
 * is filled (and an error of the batch reported) by the next entry of the
 * accumulator or gacc_wait, so res, utts and their data must stay valid
 * until then. The CPU backend finishes before returning. */
int gacc_accumulate_batch_start(gacc_acc *a, int n, const gacc_utt *utts,
                                gacc_utt_result *res);
/* As gacc_accumulate_batch_start, feats[i] being the matrix utts[i].feats
 * points to: through the GPU service, where the batch is kept until the
 * service's next statistics (for a lost service), the features are taken
 * there instead of copied (feats[i] swapped with a matrix the accumulator
 * is done with, empty or of an earlier batch, whose buffer the caller may
 * reuse); the other backends borrow them as gacc_accumulate_batch_start
 * (nothing is taken). Through the service up to gacc_inflight(a) batches
 * of this entry are in flight: it returns once its batch is sent without
 * collecting the one before (only one before that), whose res is filled by
 * gacc_wait_first, gacc_wait or the next entry of another kind; utts, res
 * and the data of each stay valid until then. */
int gacc_accumulate_batch_start_take(gacc_acc *a, int n, const gacc_utt *utts,
                                     kio_matrix *const *feats, gacc_utt_result *res);

/* Asynchronous form of gacc_accumulate_batch, for a caller that should not
 * wait for the device (e.g. the thread that reads the input). Waits for the
 * previous asynchronous batch (KIO_ERR if that one failed; its ERROR is
 * logged now, on this thread), checks the utterances as
 * gacc_accumulate_batch does (ERROR, KIO_ERR), copies everything it needs
 * (features, alignments, keys: utts need only be valid during the call) and
 * returns while a worker thread of the accumulator (started on first use,
 * joined by gacc_free) accumulates the batch on the device. Per-utterance
 * results go into the sums of gacc_get_totals. On the CPU backend the batch
 * is accumulated before returning, exactly as gacc_accumulate_batch. Not
 * thread-safe: one caller thread for all entries of an accumulator. */
int gacc_accumulate_batch_async(gacc_acc *a, int n, const gacc_utt *utts);

/* As gacc_accumulate_batch_async, but the features are taken, not copied:
 * feats[i] (the matrix utts[i].feats points to) is swapped with a matrix the
 * accumulator is done with (empty, or the features of a batch two calls
 * back), whose buffer the caller may reuse. The worker copies the features
 * into device staging memory, so the caller's thread spends almost nothing.
 * CPU backend: exactly gacc_accumulate_batch (nothing is taken). */
int gacc_accumulate_batch_take(gacc_acc *a, int n, const gacc_utt *utts,
                               kio_matrix *const *feats);

/* Waits for the asynchronous batch in flight, if any. KIO_OK, or KIO_ERR
 * after logging (on the calling thread) the ERROR the batch ran into (an
 * invalid log-likelihood naming frame and utterance, a CUDA error). Every
 * other entry waits first, so calling it is only needed to learn the
 * outcome at a chosen point. */
int gacc_wait(gacc_acc *a);
/* Waits for the oldest batch in flight only (its res filled; a batch sent
 * after it stays in flight), else as gacc_wait. */
int gacc_wait_first(gacc_acc *a);
/* How many batches of gacc_accumulate_batch_start_take may be in flight at
 * once: 2 through the GPU service on a connection of its own
 * (KALDI_GPU_DEV_SERVICE_ACC_INFLIGHT), else 1 (the entry waits for the
 * batch before). It may drop to 1 during a run (a lost service). */
int gacc_inflight(const gacc_acc *a);

/* Sums of the per-utterance results of every batch accumulated so far
 * (synchronous or not): *like = sum of (double) gacc_utt_result.like in
 * batch then utterance order, *frames = sum of frames (what
 * gmm-acc-stats-ali's "Overall avg like per frame" line needs; identical
 * for both entries). Waits first: returns gacc_wait's status. */
int gacc_get_totals(gacc_acc *a, double *like, int64_t *frames);

/* Copies the totals so far into out (zeroed, or statistics of any shape,
 * whose buffers are reused: gacc_stats_reshape). Waits first (KIO_ERR if the batch in
 * flight failed). */
int gacc_get_stats(gacc_acc *a, gacc_stats *out);

/* Resident features: one device copy of a set of host feature matrices
 * (mats[0..n), rows of one dimension), on the job's device, made once for
 * many accumulators (a trainer's iterations). At most half the device's free
 * memory; KIO_ERR without logging, the reason in why, when it cannot be
 * made (the caller goes on without). The host matrices must stay as they
 * are while it is used. */
typedef struct gacc_dev_feats gacc_dev_feats;
int gacc_dev_feats_new(gacc_dev_feats **f, int n, const kio_matrix *mats, char *why,
                       size_t why_len);
void gacc_dev_feats_free(gacc_dev_feats *f);
size_t gacc_dev_feats_bytes(const gacc_dev_feats *f);
/* The rows of mats[i] start at d_base + row_off[i] * dim (device memory;
 * galign_aligner_set_dev_feats takes the same). */
void gacc_dev_feats_rows(const gacc_dev_feats *f, const float **d_base, const int64_t **row_off);
/* A's batches whose features all lie in f (views into its matrices
 * included) are copied on the device instead of uploaded (the same bits);
 * NULL: none. A no-op but on a's own device backend on f's device. f must
 * outlive a's batches. */
void gacc_use_dev_feats(gacc_acc *a, const gacc_dev_feats *f);

/* Jobs' statistics summed on the device (a trainer's GPU path): n slots
 * of statistics of one shape on the job's device, each filled from the
 * device accumulator that served a job (gacc_stash_stats), then added as
 * trn_est_sum_jobs (train/sum-accs.h) adds jobs on the host, slot 0 first:
 * per element a double sum from 0.0 of the slots' values rounded to float
 * (the transition counts as they are), the means' and variances' sums
 * rounded to float; only the sum is copied back (gacc_dev_sum_fetch).
 * gacc_dev_sum_reserve makes *s (NULL) or reshapes it (its memory kept
 * where it suffices) for n slots shaped like shape (only its sizes);
 * KIO_ERR without logging, the reason in why, *s freed and NULL: the caller
 * sums on the host. */
typedef struct gacc_dev_sum gacc_dev_sum;
int gacc_dev_sum_reserve(gacc_dev_sum **s, int n, const gacc_stats *shape, char *why,
                         size_t why_len);
void gacc_dev_sum_free(gacc_dev_sum *s);
/* a's statistics so far (a on the device backend, on s's device, of s's
 * shape) copied device to device into slot k (waits first), instead of
 * gacc_get_stats; *like and *frames get a's totals (gacc_stats' total_like
 * and total_frames). KIO_ERR (logged). */
int gacc_stash_stats(gacc_acc *a, gacc_dev_sum *s, int k, double *like, double *frames);
/* The sum of every slot into out's arrays (out shaped as the slots, its
 * totals untouched): tacc the transition counts' double sums; occ the
 * double sums of the occupancies as floats, NOT rounded (gmm-sum-accs'
 * lines need them; the caller rounds them); mean_acc and var_acc the sums
 * rounded to float. Every slot must have been filled. KIO_ERR (logged). */
int gacc_dev_sum_fetch(gacc_dev_sum *s, gacc_stats *out);

/* The threads of a's per-frame host work (its sort, checks, likelihoods on
 * the device path): n (at least 1) instead of gacc_par_threads()' share,
 * for accumulators the caller runs side by side. Before a's first batch
 * (later: no effect); the same bits whatever n. */
void gacc_set_host_threads(gacc_acc *a, int n);

/* Zeroes the statistics and the totals (waits first), so that one
 * accumulator serves several jobs of the same model in turn: after it the
 * accumulator is as gacc_new left it, the device buffers and the worker
 * kept. Not on the GPU service (KIO_ERR, logged). */
int gacc_reset_stats(gacc_acc *a);

/* The GPU service's pool of accumulators: a serves another model of the
 * same feature dimension (tm and am, which must outlive its use). same: the
 * model's bytes are those a was last bound to (its device copy stays; only
 * the statistics are zeroed). Afterwards a's statistics, totals and results
 * are those of a new accumulator of tm and am; its device buffers, staging
 * ring, host threads and worker are kept. KIO_ERR (logged; another
 * dimension, out of memory): a is fit only for gacc_free. */
int gacc_rebind(gacc_acc *a, const kio_tmodel *tm, const kio_am_gmm *am, int same);
/* Drops a's references to its model (waits first); only gacc_rebind and
 * gacc_free may follow. */
void gacc_unbind(gacc_acc *a);
/* The feature dimension a accumulates (its model's). */
int gacc_dim(const gacc_acc *a);

/* Where the device backend's time went so far (all zero on the CPU and the
 * service): batches and frames, set-up (model upload), the host's counting
 * sort by pdf, staging (features through the page-locked ring and the
 * launches), waiting for the device, the per-frame likelihoods on the host,
 * fetching the statistics. */
typedef struct {
  long batches, frames;
  long resident;  /* batches whose features came from resident ones */
  double setup, sort, stage, wait, like, fetch;
  int host_threads;  /* threads of the per-frame host work */
} gacc_timing;
void gacc_get_timing(const gacc_acc *a, gacc_timing *t);

/* Reads a stats file written by gacc_stats_write or Kaldi (binary or text)
 * into s (GMM values as stored, i.e. float precision). *flags_ok (may be
 * NULL) is 1 when every pdf has FLAGS 15. Logs ERROR naming the file. */
int gacc_stats_read(const char *rxfilename, gacc_stats *s, int *flags_ok);

/* Comparison of two sets of statistics (tests, tools/acc-compare). */
typedef struct {
  int same_layout;        /* tids, pdfs, dim, components per pdf */
  int64_t num_tacc_diff;  /* transition counts that differ (exactly) */
  size_t num_values;      /* occupancies + mean + var cells compared */
  size_t num_over;        /* of those, relative difference > tol */
  double max_rel;         /* largest relative difference seen */
  double like_rel;        /* relative difference of total_like */
  int frames_equal;       /* total_frames identical */
} gacc_cmp;
/* ulp_ok: values one float ulp apart count as equal (for files). */
void gacc_stats_compare(const gacc_stats *a, const gacc_stats *b, double tol,
                        int ulp_ok, gacc_cmp *c);

/* Same float arithmetic as the accumulators (exposed for tests): component
 * log-likelihoods of frame x (x2: its elements squared in float) for GMM g
 * into ll[M], then softmax in place; returns mx + logf(sum). */
float gacc_frame_posteriors(const kio_diag_gmm *g, const float *x, const float *x2,
                            float *ll);
/* The expf used by the softmax (equal to glibc's; see acc-math.h). */
float gacc_expf_ref(float x);

/* The CPU accumulator's arithmetic, for checks against a BLAS library
 * (tools/acc-blas-check): y + alpha * (a . xv) for component j of M as
 * cblas_sgemv with row stride lda rounds it (Kaldi's stride:
 * kio_kaldi_stride(D)), and mean += post * xd, var += post * x2 over D dims
 * as cblas_dger does, in this process's rounding profile
 * (base/matrix/blas-profile.h; KALDI_GPU_DEV_NO_SIMD=1: scalar). */
float gacc_cpu_gemv_row(float y, const float *a, const float *xv, int D, int lda, float alpha,
                        int j, int M);
void gacc_cpu_stats_row(double *mean, double *var, double post, const double *xd,
                        const double *x2, int D);

#ifdef __cplusplus
}
#endif
#endif
