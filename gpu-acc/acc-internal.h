/* Internal interface of gpu-acc: the accumulator object shared by the front
 * (acc-cpu.c: stats, checks, CPU path), the GPU batch path and its worker
 * thread (acc-batch.c) and the CUDA backend (acc-cuda.cu, or
 * acc-cuda-nocuda.c in builds without CUDA). */
#ifndef GACC_ACC_INTERNAL_H
#define GACC_ACC_INTERNAL_H

#include <pthread.h>

#include "base/sys/log.h"
#include "device/gpu.h"
#include "gpu-acc.h"
#include "base/matrix/blas-profile.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gacc_cuda gacc_cuda;  /* device copy of model and stats */

/* acc-par.c: a pool of threads for the per-frame host work. fn(arg, t, nt)
 * runs on threads t = 0 .. nt-1 (0: the caller); a run meeting another
 * thread's run (or no pool) is done by the caller alone (nt = 1), so work
 * must be split so that the results do not depend on nt. */
typedef struct gacc_par gacc_par;
typedef void (*gacc_par_fn)(void *arg, int t, int nt);
/* KALDI_GPU_DEV_ACC_HOST_THREADS, or the job's share of the cores less the
 * threads of the process's other live pools (at least 1) */
int gacc_par_threads(void);
gacc_par *gacc_par_new(int threads);  /* NULL: out of memory (run serially) */
void gacc_par_run(gacc_par *p, gacc_par_fn fn, void *arg);
int gacc_par_size(const gacc_par *p);
void gacc_par_free(gacc_par *p);
/* Part t of nt of [0, n): [*lo, *hi). */
void gacc_par_range(size_t n, int t, int nt, size_t *lo, size_t *hi);
/* A gacc_par_fn: bytes [lo, hi) (part t of nt) of the rows of mats[i0 ..
 * i1) laid end to end, row bytes a row, bytes in all, to dst (the device
 * backend's copy into its page-locked ring, cut over the pool's threads:
 * one thread copies at ~6 GB/s, most of a one-process run's staging). */
typedef struct {
  const kio_matrix *mats;
  int i0, i1;
  size_t row, bytes;
  char *dst;
} gacc_rows_copy;
void gacc_rows_copy_part(void *arg, int t, int nt);

/* The stable counting sort of a batch's frames by pdf, in two steps around
 * the caller's use of the counts: gacc_sort_count gives count[j + 1] = frames
 * of pdf j (count[0] = 0); gacc_sort_scatter, given start[j] = the first
 * sorted position of pdf j, writes order (sorted position -> frame), the
 * same as one thread's `order[start[pdf[t]]++] = t` in frame order. */
typedef struct {
  int32_t num_pdfs;
  int parts;
  int32_t *hist;  /* parts x num_pdfs */
  size_t cap;
} gacc_sorter;
int gacc_sort_count(gacc_sorter *s, gacc_par *p, int32_t n, const int32_t *pdf,
                    int32_t *count);
void gacc_sort_scatter(gacc_sorter *s, gacc_par *p, int32_t n, const int32_t *pdf,
                       const int32_t *start, int32_t *order);

/* Uploads the model (flattened Gaussians) and zeroed statistics shaped like
 * shape, on the job's device gpu (device/gpu.h) and a stream of its own;
 * its device memory is charged to an account of its own: the model and the
 * statistics, plus the accumulator's share of the job's budget for the
 * batches (mode: what happens when memory runs out). KIO_ERR (logged) on
 * any CUDA failure. */
int gacc_cuda_new(gacc_cuda **c, kio_gpu *gpu, kio_gpu_mode mode, const gacc_stats *shape,
                  const kio_am_gmm *am);
void gacc_cuda_free(gacc_cuda *c);
/* c serves another model of the same dimension (a pooled accumulator of
 * the GPU service): everything sized by the model reserved again (kept
 * where large enough), the model uploaded, the statistics zeroed, the
 * batch buffers freed; the stream, the staging ring and the host threads
 * stay. Afterwards c is what gacc_cuda_new would have made of shape and am.
 * KIO_ERR (logged): c is fit only for gacc_cuda_free. */
int gacc_cuda_rebind(gacc_cuda *c, const gacc_stats *shape, const kio_am_gmm *am);
/* Makes c's device current in the calling thread (a worker thread). */
int gacc_cuda_bind_thread(gacc_cuda *c);
/* Device bytes one frame of a batch takes; bytes held whatever the batch
 * (model, statistics); the account; the batch buffers freed. */
size_t gacc_cuda_frame_bytes(const gacc_cuda *c);
size_t gacc_cuda_persistent(const gacc_cuda *c);
kio_gpu_acct *gacc_cuda_acct(const gacc_cuda *c);
void gacc_cuda_trim(gacc_cuda *c);

/* Accumulates n_frames frames (rows of feats, n_frames x dim, row-major;
 * pdf[t] and tid[t] already validated). For every frame returns the softmax
 * maximum mx[t] and sum sum[t], so that the host forms the log-likelihood
 * mx + logf(sum) with the C library's logf exactly as the CPU path. Host
 * buffers from gacc_cuda_host_alloc make the copies fast. Returns once mx
 * and sum are filled; the statistics may still be added on the device (the
 * stream orders every later use of them: next batch, fetch, load, zero). */
int gacc_cuda_accumulate(gacc_cuda *c, int32_t n_frames, const float *feats,
                         const int32_t *tid, const int32_t *pdf,
                         float *mx, float *sum);
/* The same with the features given as n_mats matrices (their rows, in
 * order, are the n_frames frames), copied to the device through a small
 * ring of page-locked buffers instead of one batch-sized one. */
int gacc_cuda_accumulate_mats(gacc_cuda *c, int32_t n_frames, const kio_matrix *mats,
                              int n_mats, const int32_t *tid, const int32_t *pdf,
                              float *mx, float *sum);

/* Batches of c take their features from f when they lie there (NULL: none). */
void gacc_cuda_use_dev_feats(gacc_cuda *c, const gacc_dev_feats *f);
int gacc_cuda_device_of(const gacc_cuda *c);
/* acc-devfeats.cu: mats' rows copied device to device into dst, in order,
 * on stream: 1 done; 0 some matrix is not in f (nothing done); -1 a CUDA
 * error (logged). */
int gacc_dev_feats_copy(const gacc_dev_feats *f, const kio_matrix *mats, int n, float *dst,
                        void *stream);
int gacc_dev_feats_device(const gacc_dev_feats *f);

/* The pool c's host sort runs on (NULL: one thread); the caller's. */
void gacc_cuda_set_par(gacc_cuda *c, gacc_par *p);

/* Its time so far (gacc_timing's fields but like). */
void gacc_cuda_timing(const gacc_cuda *c, gacc_timing *t);

/* The device statistics zeroed (stream-ordered: no wait). */
int gacc_cuda_zero(gacc_cuda *c);
/* Copies tacc, occ, mean_acc, var_acc into out (already shaped). */
int gacc_cuda_fetch(gacc_cuda *c, gacc_stats *out);
/* The same device to device, into tacc, occ, mean, var (device memory
 * on c's device), complete on return (gacc_stash_stats). */
int gacc_cuda_copy_stats(gacc_cuda *c, double *tacc, double *occ, double *mean, double *var);
/* The reverse: the device statistics become in's (a job that lost the GPU
 * service goes on from the service's last statistics; the CPU took over
 * part of a batch: gacc_cuda_fetch, the CPU, then this). */
int gacc_cuda_load(gacc_cuda *c, const gacc_stats *in);

/* Page-locked host memory (plain malloc without CUDA). Silent: KIO_ERR on
 * failure, *p = NULL; the caller logs. */
int gacc_cuda_host_alloc(void **p, size_t bytes);
void gacc_cuda_host_free(void *p);

/* One GPU batch with everything it needs, copied from the caller (whose
 * arrays are only valid during its call), so that it can run later on the
 * worker thread. Arrays grow as needed and are reused. */
typedef struct {
  int n;                 /* utterances */
  size_t frames;         /* total rows */
  size_t cap_frames, cap_utts, cap_keys;
  float *feats;          /* frames x dim (pinned), cap_feats frames */
  size_t cap_feats;
  kio_matrix *mats;      /* take entry: the batch's features, swapped in (cap_mats) */
  int cap_mats, use_mats;
  const kio_matrix *src; /* use_mats: the n matrices to upload (mats, or borrowed) */
  int32_t *tid;          /* frames (pinned) */
  int32_t *pdf;          /* frames, formed when the batch runs */
  int32_t *rows;         /* n: frames per utterance */
  size_t *key_off;       /* n: offsets of the keys in keys */
  char *keys;            /* NUL-terminated keys, back to back */
  float *like;           /* n: per-utterance likelihood (result) */
  int status;            /* result of the run */
  kio_log_deferred *log; /* lines logged while it ran on the worker */
} gacc_job;

typedef struct gacc_remote gacc_remote;  /* acc-remote.c */

struct gacc_acc {
  int is_gpu;          /* 1 also when remote (batches, as on the GPU) */
  gacc_remote *remote; /* the GPU service does the work */
  const kio_tmodel *tm;
  const kio_am_gmm *am;
  gacc_stats st;       /* CPU: all totals; GPU: total_like/frames only */
  int32_t max_comp;
  float *ll;           /* CPU scratch, max_comp */
  float *x2;           /* CPU scratch, dim: the squared frame */
  double *xd;          /* CPU scratch, 2 * dim: the frame and its square in double */
  gacc_utt_result *res;/* scratch results of the asynchronous entry */
  int cap_res;
  gacc_cuda *cuda;     /* GPU backend, NULL on CPU */
  /* sums of the per-utterance results, in batch then utterance order */
  double like_sum;
  int64_t frames_sum;
  /* GPU batches: two staging sets (one filled while the other runs) */
  gacc_job job[2];
  int next;            /* set the next batch is staged in */
  kio_matrix *borrow;  /* synchronous entry: shallow copies of the caller's */
  int cap_borrow;      /*   matrices, valid during the call only */
  float *mx, *sum;     /* per-frame results (pinned), used by the runner */
  size_t cap_mx;
  kio_matrix *views;   /* a device piece's rows, as matrices (cap_views) */
  int cap_views;
  size_t piece_cap;    /* frames of a piece since memory ran short (0: the budget's) */
  double t_like;       /* seconds in the per-frame likelihoods of GPU batches */
  gacc_par *par;       /* threads of the per-frame host work (GPU path), made on first use */
  int par_made;
  int32_t *seg;        /* a piece's utterances: (index, first, end frame) triples */
  size_t cap_seg;
  /* worker thread, started by the first asynchronous batch */
  int thread_on, bound, stop, started, finished;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  gacc_job *inflight;  /* handed to the worker, not yet collected */
  gacc_utt_result *pending_res; /* gacc_gpu_batch_start's: filled by gacc_gpu_wait */
  /* a lost service's batch redone before its caller collects it
   * (gacc_remote_fall_back): its lines and status, given out when it is
   * collected (after held_skip calls of gacc_wait_first) or by any other
   * entry */
  int held, held_rc, held_skip;
  kio_log_deferred *held_lines;
};

/* acc-cpu.c */
int gacc_check_utt(const gacc_acc *a, const gacc_utt *u);
int gacc_bad_like(const char *key, int32_t t);
int gacc_accumulate_cpu(gacc_acc *a, int n, const gacc_utt *utts, gacc_utt_result *res);

/* Kaldi's DiagGmm::ComponentPosteriors of frame x (the CPU accumulator's
 * order): posteriors into post (num_comp), x2 scratch (dim); returns the
 * log-likelihood (the softmax's max + log(sum)). */
float gacc_cpu_component_posteriors(const kio_diag_gmm *g, const float *x, float *x2,
                                    float *post);

/* acc-cpu-fast.c: one utterance on the CPU (checked by gacc_check_utt),
 * bit-identical to the stock Kaldi build on this CPU. */
int gacc_accumulate_utt_cpu(gacc_acc *a, const gacc_utt *u, gacc_utt_result *r);
/* Its frames t0 .. rows only, adding their log-likelihoods to *like in
 * order (the rest of an utterance the device began). */
int gacc_accumulate_frames_cpu(gacc_acc *a, const gacc_utt *u, int32_t t0, float *like);

/* acc-batch.c: the GPU path (sync and async) and the worker. */
int gacc_gpu_batch(gacc_acc *a, int n, const gacc_utt *utts, gacc_utt_result *res);
int gacc_gpu_batch_async(gacc_acc *a, int n, const gacc_utt *utts);
int gacc_gpu_batch_take(gacc_acc *a, int n, const gacc_utt *utts, kio_matrix *const *feats);
/* gacc_accumulate_batch_start on the job's own device: returns once the
 * worker has the batch; gacc_gpu_wait fills res. */
int gacc_gpu_batch_start(gacc_acc *a, int n, const gacc_utt *utts, gacc_utt_result *res);
int gacc_gpu_wait(gacc_acc *a);
void gacc_gpu_free(gacc_acc *a);  /* joins the worker, frees the staging */

#ifdef __cplusplus
}
#endif
#endif
