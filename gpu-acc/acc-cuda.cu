/* CUDA backend of the statistics accumulator (reference 4.2 on the device).
 *
 * Per batch the host sorts the frames by pdf (counting sort, stable) and
 * cuts each pdf's frames into chunks of at most chunk_frames frames. One
 * block per chunk:
 *   1. stages the chunk's feature rows in shared memory;
 *   2. computes every (frame, component) log-likelihood with the same float
 *      operations as the CPU path, which follow Kaldi's OpenBLAS build
 *      (acc-math.h; the build uses --fmad=false, explicit fmaf where the
 *      reference used FMA);
 *   3. softmax per frame (one thread per frame, ascending m, glibc's expf
 *      algorithm), counts the frame's transition-id;
 *   4. writes the posteriors and the features to global memory in sorted
 *      frame order, a row per component and per dim.
 * Then the statistics (gacc_cells_kernel): each thread owns one cell (a
 * component's dim, or its occupancy) of a pdf and adds post * x and post *
 * x^2 in frame order to a running double sum, fused or not as the CPU
 * path's OpenBLAS profile says (acc-cpu-fast.c; log-likelihood tails too):
 * bit-identical to it (no atomics but the integer transition counts). A
 * pdf's cells span blocks of GACC_CELLS, so silence runs on many SMs. The
 * posteriors use acc-math.h's expf (glibc's but on 2 of the 4.3e9 floats);
 * the host forms each frame's log-likelihood from the softmax max and sum
 * with its own logf, as the CPU path.
 * Copies and launches go to the accumulator's own non-blocking stream (an
 * aligner's work on other streams overlaps), from page-locked buffers where
 * the host side is ours. A batch returns once mx and sum are on the host,
 * its statistics kernel possibly still running (the next batch's work on
 * the stream waits for it); every other entry synchronises the stream.
 * This file is the host-side driver; the kernels are acc-kernels.cu's and
 * acc-tiled.cu's (acc-kernels.h). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/sys/log.h"
#include "device/cuda-util.h"
#include "acc-internal.h"
#include "acc-kernels.h"
#include "acc-math.h"
#include "base/sys/settings.h"

#define GACC_RING_N 4
#define GACC_RING_BYTES ((size_t)8 << 20)

struct gacc_cuda {
  int32_t num_tids, num_pdfs, dim, num_gauss, max_comp;
  int device;             /* the job's device (gpu) */
  kio_gpu *gpu;
  kio_gpu_acct *acct;     /* its device memory */
  size_t persistent;      /* the model and the statistics */
  cudaStream_t stream;
  int has_stream;
  cudaEvent_t like_ev;    /* a batch's mx and sum are on the host */
  int32_t chunk_frames;   /* frames per chunk, so that shared memory fits */
  size_t shmem;           /* dynamic shared memory per block */
  int32_t stats_tile;     /* frames per tile of the stats kernel */
  size_t stats_shmem;     /* its dynamic shared memory */
  int32_t *h_pdf_offset;  /* num_pdfs + 1 */
  /* device model */
  int32_t *d_pdf_offset;
  float *d_gconst, *d_mi, *d_iv;
  /* device statistics */
  double *d_tacc, *d_occ, *d_mean, *d_var;
  /* batch buffers, grown as needed */
  size_t cap_frames, cap_chunks;
  float *d_feats, *d_mx, *d_sum;
  float *d_xsort;         /* the features in sorted-frame order, a row per dim (chunk kernel) */
  int *d_nonfinite;       /* set by the chunk kernel on an inf or NaN feature (kept) */
  int32_t *d_tid, *d_order;
  int4 *d_chunks;
  int32_t *h_order, *h_count;  /* h_order, h_chunks: page-locked */
  int4 *h_chunks;
  /* capacities of the model-sized arrays: a pooled accumulator rebound to
   * another model (gacc_cuda_rebind) keeps them where they suffice */
  size_t cap_pdfs, cap_tids, cap_gauss, cap_gd, have_cblocks;
  int4 *h_ranges, *d_ranges;   /* num_pdfs: (pdf, start, frames) of the batch's pdfs */
  int4 *h_cblocks, *d_cblocks; /* (pdf, start, frames, first cell) per cells block */
  size_t cap_cblocks;          /* num_pdfs x the most blocks a pdf needs */
  int tiled;                   /* KALDI_GPU_DEV_ACC_STATS=tiled: the per-pdf kernel */
  float *d_gam;                /* cap_frames x max_comp posteriors, sorted frames: a row
                                  per component (cells), or per frame (tiled) */
  int prof;                    /* the rounding profile (kio_blas_profile()) */
  /* page-locked staging ring for features given as matrices */
  void *h_ring[GACC_RING_N];
  size_t ring_cap[GACC_RING_N];
  cudaEvent_t ring_ev[GACC_RING_N];
  int ring_used[GACC_RING_N];
  unsigned ring_next;
  const gacc_dev_feats *df;  /* resident features (acc-devfeats.cu), or NULL */
  gacc_par *par;             /* the host sort's threads (the accumulator's) */
  gacc_sorter sorter;
  /* time split, logged at VLOG[2] when freed (the service's
   * KALDI_GPU_SERVICE_VERBOSE=2) */
  double t_new, t_sort, t_stage, t_wait, t_fetch;
  long n_batches, n_frames, n_resident;
  /* the device's own phases (--verbose=2: timed events per batch, two
   * batches' sets in turn): uploads, chunk kernels with the likelihoods'
   * copies back, statistics kernels, and the stream idle between a batch's
   * statistics and the next batch's first copy (the host was staging) */
  cudaEvent_t dev_ev[2][4];
  int dev_ev_on;
  long dev_ev_last;  /* the batch whose statistics are not yet timed (0: none) */
  double t_dev_up, t_dev_chunk, t_dev_stats, t_dev_idle;
};

/* Seconds between two timed events that have both completed. */
static double ev_span(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0.0f;
  return cudaEventElapsedTime(&ms, a, b) == cudaSuccess ? (double)ms / 1e3 : 0.0;
}

/* The statistics span of the last timed batch, once its stream is idle. */
static void dev_ev_close(gacc_cuda *c) {
  if (!c->dev_ev_on || !c->dev_ev_last) return;
  cudaEvent_t *e = c->dev_ev[c->dev_ev_last & 1];
  if (cudaEventSynchronize(e[3]) == cudaSuccess) c->t_dev_stats += ev_span(e[2], e[3]);
  c->dev_ev_last = 0;
}


template <typename T>
static int dev_alloc(gacc_cuda *c, T **p, size_t n) {
  *p = NULL;
  return kio_gpu_alloc(c->acct, (void **)p, (n ? n : 1) * sizeof(T), c->stream);
}

/* The per-batch device buffers (grown by grow()). */
static void free_batch(gacc_cuda *c) {
  void *old[] = {c->d_feats, c->d_mx, c->d_sum, c->d_tid, c->d_order, c->d_gam, c->d_chunks,
                 c->d_xsort};
  for (size_t i = 0; i < sizeof old / sizeof old[0]; i++) kio_gpu_free(old[i], c->stream);
  c->d_feats = c->d_mx = c->d_sum = c->d_gam = c->d_xsort = NULL;
  c->d_tid = c->d_order = NULL;
  c->d_chunks = NULL;
  c->cap_frames = c->cap_chunks = 0;
}

extern "C" void gacc_cuda_free(gacc_cuda *c) {
  if (!c) return;
  if (c->n_batches)
    KIO_VLOG(2, "GPU accumulator: %ld batches, %ld frames; set-up %.4f s, host sort %.4f s, "
             "staging %.4f s, waiting for the device %.4f s, fetching statistics %.4f s",
             c->n_batches, c->n_frames, c->t_new, c->t_sort, c->t_stage, c->t_wait, c->t_fetch);
  if (c->gpu) kio_gpu_bind(c->gpu);
  dev_ev_close(c);
  if (c->n_batches && c->dev_ev_on)
    KIO_VLOG(2, "GPU accumulator, the device's phases: uploads %.4f s, chunk kernels %.4f s, "
             "statistics kernels %.4f s, idle between batches %.4f s",
             c->t_dev_up, c->t_dev_chunk, c->t_dev_stats, c->t_dev_idle);
  for (int i = 0; i < 2 && c->dev_ev_on; i++)
    for (int k = 0; k < 4; k++) cudaEventDestroy(c->dev_ev[i][k]);
  void *dev[] = { c->d_nonfinite, c->d_pdf_offset, c->d_gconst, c->d_mi, c->d_iv, c->d_tacc,
                  c->d_occ, c->d_mean, c->d_var, c->d_ranges, c->d_cblocks };
  if (c->gpu) kio_gpu_bind(c->gpu);
  if (c->has_stream) kio_cuda_stream_wait(c->stream);
  free_batch(c);
  for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
    kio_gpu_free(dev[i], c->stream);
  for (int i = 0; i < GACC_RING_N; i++) {
    kio_cuda_host_free(c->h_ring[i], c->stream);
    if (c->ring_ev[i]) cudaEventDestroy(c->ring_ev[i]);
  }
  if (c->like_ev) cudaEventDestroy(c->like_ev);
  free(c->h_pdf_offset);
  kio_cuda_host_free(c->h_order, c->stream);
  free(c->h_count);
  free(c->sorter.hist);
  kio_cuda_host_free(c->h_chunks, c->stream);
  kio_cuda_host_free(c->h_ranges, c->stream);
  kio_cuda_host_free(c->h_cblocks, c->stream);
  if (c->has_stream) kio_cuda_stream_wait(c->stream);
  if (c->has_stream) cudaStreamDestroy(c->stream);  /* last: the frees above use it */
  cudaGetLastError();
  kio_gpu_acct_free(c->acct);
  free(c);
}

static int upload_model(gacc_cuda *c, const kio_am_gmm *am) {
  size_t G = (size_t)c->num_gauss, D = (size_t)c->dim;
  float *gc = (float *)malloc(sizeof(float) * (G ? G : 1));
  float *mi = (float *)malloc(sizeof(float) * (G * D > 0 ? G * D : 1));
  float *iv = (float *)malloc(sizeof(float) * (G * D > 0 ? G * D : 1));
  int rc = KIO_ERR;
  if (!gc || !mi || !iv) {
    KIO_ERROR("Out of memory flattening the model");
    goto done;
  }
  for (int32_t j = 0; j < c->num_pdfs; j++) {
    const kio_diag_gmm *g = &am->pdfs[j];
    size_t g0 = (size_t)c->h_pdf_offset[j];
    memcpy(gc + g0, g->gconsts, sizeof(float) * (size_t)g->num_comp);
    memcpy(mi + g0 * D, g->means_invvars, sizeof(float) * (size_t)g->num_comp * D);
    memcpy(iv + g0 * D, g->inv_vars, sizeof(float) * (size_t)g->num_comp * D);
  }
  /* synchronised before the host buffers are freed */
  if (cudaMemcpyAsync(c->d_gconst, gc, sizeof(float) * G, cudaMemcpyHostToDevice,
                      c->stream) != cudaSuccess ||
      cudaMemcpyAsync(c->d_mi, mi, sizeof(float) * G * D, cudaMemcpyHostToDevice,
                      c->stream) != cudaSuccess ||
      cudaMemcpyAsync(c->d_iv, iv, sizeof(float) * G * D, cudaMemcpyHostToDevice,
                      c->stream) != cudaSuccess ||
      cudaMemcpyAsync(c->d_pdf_offset, c->h_pdf_offset,
                      sizeof(int32_t) * ((size_t)c->num_pdfs + 1), cudaMemcpyHostToDevice,
                      c->stream) != cudaSuccess ||
      kio_cuda_stream_wait(c->stream) != cudaSuccess) {
    KIO_ERROR("CUDA error uploading the model: %s", cudaGetErrorString(cudaGetLastError()));
    goto done;
  }
  rc = KIO_OK;
done:
  free(gc);
  free(mi);
  free(iv);
  return rc;
}

/* Device arrays *p[0 .. k) of one capacity *cap, esz[i] bytes an element:
 * kept if n elements fit, else all freed and made anew. */
static int reserve(gacc_cuda *c, size_t *cap, size_t n, int k, void **const *p,
                   const size_t *esz) {
  if (*p[0] && n <= *cap) return KIO_OK;
  for (int i = 0; i < k; i++) kio_gpu_free(*p[i], c->stream), *p[i] = NULL;
  *cap = 0;
  for (int i = 0; i < k; i++)
    if (kio_gpu_alloc(c->acct, p[i], (n ? n : 1) * esz[i], c->stream) != KIO_OK) return KIO_ERR;
  *cap = n;
  return KIO_OK;
}
#define GACC_ARR(x) ((void **)&(x))

/* The model's shape (shape: its statistics) and all derived from it, for a
 * new accumulator and a rebound one alike: the arrays it sizes reserved,
 * the model uploaded, the statistics zeroed. KIO_ERR (logged). */
static int set_model(gacc_cuda *c, const gacc_stats *shape, const kio_am_gmm *am) {
  c->num_tids = shape->num_tids;
  c->num_pdfs = c->sorter.num_pdfs = shape->num_pdfs;
  c->dim = shape->dim;
  c->num_gauss = shape->num_gauss;
  const size_t np1 = (size_t)c->num_pdfs + 1, i4 = sizeof(int4), d8 = sizeof(double);
  if (!c->h_pdf_offset || np1 > c->cap_pdfs) {  /* the host's pdf-sized arrays */
    free(c->h_pdf_offset);
    free(c->h_count);
    kio_cuda_host_free(c->h_ranges, c->stream);
    c->h_ranges = NULL;
    c->h_pdf_offset = (int32_t *)malloc(sizeof(int32_t) * np1);
    c->h_count = (int32_t *)malloc(sizeof(int32_t) * np1);
    if (!c->h_pdf_offset || !c->h_count || kio_cuda_host_alloc((void **)&c->h_ranges, i4 * np1)) {
      KIO_ERROR("Out of memory");
      return KIO_ERR;
    }
  }
  memcpy(c->h_pdf_offset, shape->pdf_offset, sizeof(int32_t) * np1);
  c->max_comp = 0;
  for (int32_t j = 0; j < c->num_pdfs; j++) {
    int32_t M = c->h_pdf_offset[j + 1] - c->h_pdf_offset[j];
    if (M > c->max_comp) c->max_comp = M;
  }
  size_t per_frame = sizeof(float) * (2 * (size_t)c->dim + (size_t)c->max_comp);
  size_t cf = GACC_SHMEM / (per_frame ? per_frame : 1);
  if (cf < 1) {
    KIO_ERROR("Model too large for the GPU accumulator (dim %d, %d Gaussians "
              "in one pdf)", (int)c->dim, (int)c->max_comp);
    return KIO_ERR;
  }
  c->chunk_frames = (int32_t)(cf > (size_t)GACC_MAX_CHUNK ? (size_t)GACC_MAX_CHUNK : cf);
  c->shmem = per_frame * (size_t)c->chunk_frames;
  /* stats tiles: features and posteriors of up to GACC_MAX_CHUNK frames */
  size_t per_frame_stats = sizeof(float) * ((size_t)c->dim + (size_t)c->max_comp);
  size_t tf = GACC_SHMEM / (per_frame_stats ? per_frame_stats : 1);
  c->stats_tile = (int32_t)(tf > (size_t)GACC_MAX_CHUNK ? (size_t)GACC_MAX_CHUNK : tf);
  c->stats_shmem = per_frame_stats * (size_t)c->stats_tile;
  size_t np = (size_t)(c->num_pdfs > 0 ? c->num_pdfs : 1);
  c->cap_cblocks = np * (((size_t)c->max_comp * ((size_t)c->dim + 1) + GACC_CELLS - 1) / GACC_CELLS);
  if (c->cap_cblocks < 1) c->cap_cblocks = 1;
  if (!c->h_cblocks || c->cap_cblocks > c->have_cblocks) {
    kio_cuda_host_free(c->h_cblocks, c->stream);
    c->h_cblocks = NULL;
    if (kio_cuda_host_alloc((void **)&c->h_cblocks, i4 * c->cap_cblocks) != KIO_OK) return KIO_ERR;
  }
  const size_t G = (size_t)c->num_gauss, GD = G * (size_t)c->dim, T = (size_t)c->num_tids + 1;
  void **const pdfs[] = {GACC_ARR(c->d_pdf_offset), GACC_ARR(c->d_ranges)};
  void **const cbl[] = {GACC_ARR(c->d_cblocks)};
  void **const tids[] = {GACC_ARR(c->d_tacc)};
  void **const gauss[] = {GACC_ARR(c->d_gconst), GACC_ARR(c->d_occ)};
  void **const gd[] = {GACC_ARR(c->d_mi), GACC_ARR(c->d_iv), GACC_ARR(c->d_mean),
                       GACC_ARR(c->d_var)};
  const size_t e_pdfs[] = {sizeof(int32_t), i4}, e_g[] = {sizeof(float), d8},
               e_gd[] = {sizeof(float), sizeof(float), d8, d8};
  if (reserve(c, &c->cap_pdfs, np1, 2, pdfs, e_pdfs) != KIO_OK ||
      reserve(c, &c->have_cblocks, c->cap_cblocks, 1, cbl, &i4) != KIO_OK ||
      reserve(c, &c->cap_tids, T, 1, tids, &d8) != KIO_OK ||
      reserve(c, &c->cap_gauss, G, 2, gauss, e_g) != KIO_OK ||
      reserve(c, &c->cap_gd, GD, 4, gd, e_gd) != KIO_OK || upload_model(c, am) != KIO_OK)
    return KIO_ERR;
  KIO_CUDA_TRY(cudaMemsetAsync(c->d_tacc, 0, d8 * T, c->stream));
  KIO_CUDA_TRY(cudaMemsetAsync(c->d_occ, 0, d8 * (G ? G : 1), c->stream));
  KIO_CUDA_TRY(cudaMemsetAsync(c->d_mean, 0, d8 * (GD ? GD : 1), c->stream));
  KIO_CUDA_TRY(cudaMemsetAsync(c->d_var, 0, d8 * (GD ? GD : 1), c->stream));
  KIO_CUDA_TRY(kio_cuda_stream_wait(c->stream));
  return KIO_OK;
}

extern "C" int gacc_cuda_new(gacc_cuda **out, kio_gpu *gpu, kio_gpu_mode mode,
                             const gacc_stats *shape, const kio_am_gmm *am) {
  *out = NULL;
  double t0 = kio_now_s();
  gacc_cuda *c = (gacc_cuda *)calloc(1, sizeof *c);
  if (!c) { KIO_ERROR("Out of memory"); return KIO_ERR; }
  c->gpu = gpu;
  /* the model and the statistics first, whatever the budget; the batches'
   * share is added once they are held */
  c->acct = kio_gpu_acct_new(gpu, "accumulator", SIZE_MAX / 2, mode);
  if (!c->acct || kio_gpu_bind(gpu) != KIO_OK) {
    gacc_cuda_free(c);
    return KIO_ERR;
  }
  c->device = kio_gpu_device(gpu);
  cudaError_t e = cudaSuccess;
  /* $KALDI_GPU_DEV_ACC_STREAM_PRIORITY=high: the device's highest stream priority,
   * so that the statistics' short kernels are scheduled ahead of the
   * queued blocks of an aligner sharing the device (gmm-align-acc-compiled).
   * A measuring switch: results do not depend on it. */
  int prio = 0;
  static const char *const prios[] = {"default", "high", NULL};
  if (e == cudaSuccess && kio_setting_choice(KIO_SET_DEV_ACC_STREAM_PRIORITY, prios, 0) == 1) {
    int least = 0, greatest = 0;
    e = cudaDeviceGetStreamPriorityRange(&least, &greatest);
    prio = greatest;
  }
  if (e == cudaSuccess) e = cudaStreamCreateWithPriority(&c->stream, cudaStreamNonBlocking, prio);
  for (int i = 0; i < GACC_RING_N && e == cudaSuccess; i++)
    e = cudaEventCreateWithFlags(&c->ring_ev[i], cudaEventDisableTiming);
  if (e == cudaSuccess) e = cudaEventCreateWithFlags(&c->like_ev, cudaEventDisableTiming);
  if (e != cudaSuccess) {
    KIO_ERROR("CUDA error setting up the accumulator: %s", cudaGetErrorString(e));
    gacc_cuda_free(c);
    return KIO_ERR;
  }
  c->has_stream = 1;
  if (dev_alloc(c, &c->d_nonfinite, 1) != KIO_OK) {  /* out of memory: the device layer's */
    gacc_cuda_free(c);
    return KIO_ERR;
  }
  e = cudaMemsetAsync(c->d_nonfinite, 0, sizeof(int), c->stream);
  if (e != cudaSuccess) {
    KIO_ERROR("CUDA error setting up the accumulator: %s", cudaGetErrorString(e));
    gacc_cuda_free(c);
    return KIO_ERR;
  }
  c->prof = kio_blas_profile();
  /* $KALDI_GPU_DEV_ACC_STATS=tiled: the statistics by gacc_stats_kernel (one
   * block per pdf), for measuring; the same bits either way */
  static const char *const kinds[] = {"cells", "tiled", NULL};
  c->tiled = kio_setting_choice(KIO_SET_DEV_ACC_STATS, kinds, 0) == 1;
  if (set_model(c, shape, am) != KIO_OK) {
    gacc_cuda_free(c);
    return KIO_ERR;
  }
  c->persistent = kio_gpu_acct_live(c->acct);
  kio_gpu_acct_set_limit(c->acct, c->persistent + kio_gpu_share(gpu, KIO_GPU_PART_ACC));
  c->t_new = kio_now_s() - t0;
  *out = c;
  return KIO_OK;
}

extern "C" int gacc_cuda_rebind(gacc_cuda *c, const gacc_stats *shape, const kio_am_gmm *am) {
  if (kio_gpu_bind(c->gpu) != KIO_OK) return KIO_ERR;
  if (shape->dim != c->dim) {
    KIO_ERROR("The accumulator's dimension is %d, the model's %d", (int)c->dim, (int)shape->dim);
    return KIO_ERR;
  }
  KIO_CUDA_TRY(kio_cuda_stream_wait(c->stream));
  free_batch(c);  /* sized by the old model's Gaussians per pdf */
  c->df = NULL;
  /* the model and the statistics first, whatever the budget (as new) */
  kio_gpu_acct_set_limit(c->acct, SIZE_MAX / 2);
  if (set_model(c, shape, am) != KIO_OK) return KIO_ERR;
  c->persistent = kio_gpu_acct_live(c->acct);
  kio_gpu_acct_set_limit(c->acct, c->persistent + kio_gpu_share(c->gpu, KIO_GPU_PART_ACC));
  return KIO_OK;
}

extern "C" size_t gacc_cuda_frame_bytes(const gacc_cuda *c) {
  /* features (as read and sorted), mx, sum, tid, order, posteriors; a chunk
   * entry per frame at worst */
  return sizeof(float) * (2 * (size_t)c->dim + 4 + (size_t)(c->max_comp > 0 ? c->max_comp : 1)) +
         sizeof(int4);
}

extern "C" size_t gacc_cuda_persistent(const gacc_cuda *c) { return c->persistent; }
extern "C" kio_gpu_acct *gacc_cuda_acct(const gacc_cuda *c) { return c ? c->acct : NULL; }

extern "C" void gacc_cuda_trim(gacc_cuda *c) {
  if (!c || kio_gpu_bind(c->gpu) != KIO_OK) return;
  kio_cuda_stream_wait(c->stream);
  free_batch(c);
  kio_cuda_stream_wait(c->stream);
  cudaGetLastError();
}

static int grow(gacc_cuda *c, size_t frames, size_t chunks) {
  if (frames > c->cap_frames) {
    size_t cap = c->cap_frames ? c->cap_frames : 8192;
    while (cap < frames) cap *= 2;
    /* what is asked (rounded up to 4: the statistics' rows stay 16-byte
     * aligned) when the doubling would not fit the budget */
    const size_t fb = gacc_cuda_frame_bytes(c);
    if (cap * fb > kio_gpu_acct_room(c->acct) + c->cap_frames * fb) cap = (frames + 3) & ~(size_t)3;
    void *old[] = {c->d_feats, c->d_mx, c->d_sum, c->d_tid, c->d_order, c->d_gam, c->d_xsort};
    for (size_t i = 0; i < sizeof old / sizeof old[0]; i++) kio_gpu_free(old[i], c->stream);
    c->d_feats = c->d_mx = c->d_sum = c->d_gam = c->d_xsort = NULL;
    c->d_tid = c->d_order = NULL;
    c->cap_frames = 0;
    kio_cuda_host_free(c->h_order, c->stream);
    c->h_order = NULL;
    if (kio_cuda_host_alloc((void **)&c->h_order, sizeof(int32_t) * cap) != KIO_OK) return KIO_ERR;
    if (dev_alloc(c, &c->d_feats, cap * (size_t)c->dim) ||
        dev_alloc(c, &c->d_xsort, cap * (size_t)c->dim) || dev_alloc(c, &c->d_mx, cap) ||
        dev_alloc(c, &c->d_sum, cap) || dev_alloc(c, &c->d_tid, cap) ||
        dev_alloc(c, &c->d_order, cap) ||
        dev_alloc(c, &c->d_gam, cap * (size_t)(c->max_comp > 0 ? c->max_comp : 1)))
      return KIO_ERR;
    c->cap_frames = cap;
  }
  if (chunks > c->cap_chunks) {
    size_t cap = c->cap_chunks ? c->cap_chunks : 1024;
    while (cap < chunks) cap *= 2;
    kio_gpu_free(c->d_chunks, c->stream);
    c->d_chunks = NULL;
    c->cap_chunks = 0;
    kio_cuda_host_free(c->h_chunks, c->stream);
    c->h_chunks = NULL;
    if (kio_cuda_host_alloc((void **)&c->h_chunks, sizeof(int4) * cap) != KIO_OK) return KIO_ERR;
    if (dev_alloc(c, &c->d_chunks, cap)) return KIO_ERR;
    c->cap_chunks = cap;
  }
  return KIO_OK;
}

/* Copies the rows of mats[0 .. n) one after another to c->d_feats through
 * the page-locked ring: the copy of one group runs while the next is
 * staged. */
static int upload_mats(gacc_cuda *c, const kio_matrix *mats, int n) {
  const int dev = gacc_dev_feats_copy(c->df, mats, n, c->d_feats, c->stream);
  c->n_resident += dev > 0;
  if (dev) return dev > 0 ? KIO_OK : KIO_ERR;
  const size_t row = sizeof(float) * (size_t)c->dim;
  size_t off = 0;
  for (int i0 = 0, i1; i0 < n; i0 = i1) {
    size_t bytes = 0;
    for (i1 = i0; i1 < n && (i1 == i0 || bytes + row * (size_t)mats[i1].rows <= GACC_RING_BYTES);
         i1++)
      bytes += row * (size_t)mats[i1].rows;
    if (bytes == 0) continue;
    const int r = (int)(c->ring_next++ % GACC_RING_N);
    if (c->ring_used[r]) KIO_CUDA_TRY(kio_cuda_event_wait(c->ring_ev[r]));
    if (bytes > c->ring_cap[r]) {  /* GACC_RING_BYTES, or one long utterance */
      size_t want = bytes > GACC_RING_BYTES ? bytes : GACC_RING_BYTES;
      kio_cuda_host_free(c->h_ring[r], c->stream);
      c->h_ring[r] = NULL;
      c->ring_cap[r] = 0;
      if (kio_cuda_host_alloc(&c->h_ring[r], want) != KIO_OK) return KIO_ERR;
      c->ring_cap[r] = want;
    }
    gacc_rows_copy g = {mats, i0, i1, row, bytes, (char *)c->h_ring[r]};
    if (c->par && bytes >= ((size_t)1 << 20)) gacc_par_run(c->par, gacc_rows_copy_part, &g);
    else gacc_rows_copy_part(&g, 0, 1);
    KIO_CUDA_TRY(cudaMemcpyAsync((char *)c->d_feats + off, c->h_ring[r], bytes,
                                 cudaMemcpyHostToDevice, c->stream));
    KIO_CUDA_TRY(cudaEventRecord(c->ring_ev[r], c->stream));
    c->ring_used[r] = 1;
    off += bytes;
  }
  return KIO_OK;
}

/* gacc_cuda_accumulate / _mats: features from feats, or else from mats. */
static int accumulate(gacc_cuda *c, int32_t n_frames, const float *feats,
                      const kio_matrix *mats, int n_mats, const int32_t *tid,
                      const int32_t *pdf, float *mx, float *sum) {
  if (n_frames <= 0) return KIO_OK;
  if (kio_gpu_bind(c->gpu) != KIO_OK) return KIO_ERR;
  double t0 = kio_now_s();
  c->n_batches++;
  c->n_frames += n_frames;
  /* counting sort of frames by pdf (acc-par.c: on the pool's threads);
   * chunk count known after counting */
  if (gacc_sort_count(&c->sorter, c->par, n_frames, pdf, c->h_count) != KIO_OK) {
    KIO_ERROR("Out of memory sorting %d frames", (int)n_frames);
    return KIO_ERR;
  }
  size_t n_chunks = 0;
  for (int32_t j = 0; j < c->num_pdfs; j++)
    n_chunks += ((size_t)c->h_count[j + 1] + (size_t)c->chunk_frames - 1) /
                (size_t)c->chunk_frames;
  if (grow(c, (size_t)n_frames, n_chunks) != KIO_OK) return KIO_ERR;
  for (int32_t j = 0; j < c->num_pdfs; j++) c->h_count[j + 1] += c->h_count[j];
  size_t k = 0;
  for (int32_t j = 0; j < c->num_pdfs; j++) {
    for (int32_t s = c->h_count[j]; s < c->h_count[j + 1]; s += c->chunk_frames) {
      int32_t len = c->h_count[j + 1] - s;
      if (len > c->chunk_frames) len = c->chunk_frames;
      c->h_chunks[k++] = make_int4(j, s, len, 0);
    }
  }
  unsigned n_ranges = 0;
  size_t n_cblocks = 0;
  for (int32_t j = 0; j < c->num_pdfs; j++) {
    const int32_t s0 = c->h_count[j], len = c->h_count[j + 1] - s0;
    if (len <= 0) continue;
    if (c->tiled) {
      c->h_ranges[n_ranges++] = make_int4(j, s0, len, 0);
      continue;
    }
    const int32_t cells = (c->h_pdf_offset[j + 1] - c->h_pdf_offset[j]) * (c->dim + 1);
    for (int32_t c0 = 0; c0 < cells; c0 += GACC_CELLS) c->h_cblocks[n_cblocks++] = make_int4(j, s0, len, c0);
  }
  gacc_sort_scatter(&c->sorter, c->par, n_frames, pdf, c->h_count, c->h_order);

  size_t D = (size_t)c->dim;
  cudaStream_t st = c->stream;
  double t1 = kio_now_s();
  c->t_sort += t1 - t0;
  if (c->n_batches == 1 && kio_log_verbose() >= 2) {
    int ok = 1;
    for (int i = 0; i < 2; i++)
      for (int k = 0; k < 4; k++) ok &= cudaEventCreate(&c->dev_ev[i][k]) == cudaSuccess;
    for (int i = 0; i < 2 && !ok; i++)
      for (int k = 0; k < 4; k++)
        if (c->dev_ev[i][k]) cudaEventDestroy(c->dev_ev[i][k]);
    c->dev_ev_on = ok;
    cudaGetLastError();
  }
  cudaEvent_t *ev = c->dev_ev_on ? c->dev_ev[c->n_batches & 1] : NULL;
  if (ev) KIO_CUDA_TRY(cudaEventRecord(ev[0], st));
  if (feats)
    KIO_CUDA_TRY(cudaMemcpyAsync(c->d_feats, feats, sizeof(float) * (size_t)n_frames * D,
                                 cudaMemcpyHostToDevice, st));
  else if (upload_mats(c, mats, n_mats) != KIO_OK)
    return KIO_ERR;
  KIO_CUDA_TRY(cudaMemcpyAsync(c->d_tid, tid, sizeof(int32_t) * (size_t)n_frames,
                               cudaMemcpyHostToDevice, st));
  KIO_CUDA_TRY(cudaMemcpyAsync(c->d_order, c->h_order, sizeof(int32_t) * (size_t)n_frames,
                               cudaMemcpyHostToDevice, st));
  KIO_CUDA_TRY(cudaMemcpyAsync(c->d_chunks, c->h_chunks, sizeof(int4) * n_chunks,
                               cudaMemcpyHostToDevice, st));
  if (n_ranges)
    KIO_CUDA_TRY(cudaMemcpyAsync(c->d_ranges, c->h_ranges, sizeof(int4) * n_ranges,
                                 cudaMemcpyHostToDevice, st));
  if (n_cblocks)
    KIO_CUDA_TRY(cudaMemcpyAsync(c->d_cblocks, c->h_cblocks, sizeof(int4) * n_cblocks,
                                 cudaMemcpyHostToDevice, st));
  if (ev) KIO_CUDA_TRY(cudaEventRecord(ev[1], st));
  gacc_launch_chunks((unsigned)n_chunks, c->shmem, st,
      c->d_chunks, c->d_order, c->d_feats, c->d_tid, c->d_pdf_offset, c->d_gconst,
      c->d_mi, c->d_iv, c->dim, c->chunk_frames, c->prof, c->max_comp, c->d_tacc,
      c->tiled ? c->d_gam : NULL, c->d_mx, c->d_sum, c->d_xsort, c->d_gam, c->cap_frames,
      c->d_nonfinite);
  KIO_CUDA_LAUNCHED();
  /* mx and sum go back before the statistics kernel runs: the host forms
   * the likelihoods (and sorts the next batch) while the device adds the
   * statistics; the stream keeps everything after in order */
  KIO_CUDA_TRY(cudaMemcpyAsync(mx, c->d_mx, sizeof(float) * (size_t)n_frames,
                               cudaMemcpyDeviceToHost, st));
  KIO_CUDA_TRY(cudaMemcpyAsync(sum, c->d_sum, sizeof(float) * (size_t)n_frames,
                               cudaMemcpyDeviceToHost, st));
  KIO_CUDA_TRY(cudaEventRecord(c->like_ev, st));
  if (ev) KIO_CUDA_TRY(cudaEventRecord(ev[2], st));
  if (n_ranges) {
    gacc_launch_tiled(n_ranges, c->stats_shmem, st, c->d_ranges, c->d_order, c->d_feats,
                      c->d_gam, c->max_comp, c->d_pdf_offset, c->dim, c->prof, c->stats_tile,
                      c->d_occ, c->d_mean, c->d_var);
    KIO_CUDA_LAUNCHED();
  }
  if (n_cblocks) {
    gacc_launch_cells((unsigned)n_cblocks, st, c->d_cblocks, c->d_xsort, c->d_gam, c->cap_frames,
                      c->d_pdf_offset, c->dim, c->prof, c->d_nonfinite, c->d_occ, c->d_mean,
                      c->d_var);
    KIO_CUDA_LAUNCHED();
  }
  if (ev) KIO_CUDA_TRY(cudaEventRecord(ev[3], st));
  double t2 = kio_now_s();
  c->t_stage += t2 - t1;
  KIO_CUDA_TRY(kio_cuda_event_wait(c->like_ev));
  c->t_wait += kio_now_s() - t2;
  if (ev) {
    /* this batch's copies and chunks are done, and so is the batch before */
    if (cudaEventSynchronize(ev[2]) == cudaSuccess) {
      c->t_dev_up += ev_span(ev[0], ev[1]);
      c->t_dev_chunk += ev_span(ev[1], ev[2]);
      if (c->dev_ev_last) {
        cudaEvent_t *pe = c->dev_ev[c->dev_ev_last & 1];
        c->t_dev_stats += ev_span(pe[2], pe[3]);
        c->t_dev_idle += ev_span(pe[3], ev[0]);
      }
      c->dev_ev_last = c->n_batches;
    }
  }
  return KIO_OK;
}

extern "C" int gacc_cuda_accumulate(gacc_cuda *c, int32_t n_frames, const float *feats,
                                    const int32_t *tid, const int32_t *pdf,
                                    float *mx, float *sum) {
  return accumulate(c, n_frames, feats, NULL, 0, tid, pdf, mx, sum);
}

extern "C" int gacc_cuda_accumulate_mats(gacc_cuda *c, int32_t n_frames,
                                         const kio_matrix *mats, int n_mats,
                                         const int32_t *tid, const int32_t *pdf,
                                         float *mx, float *sum) {
  return accumulate(c, n_frames, NULL, mats, n_mats, tid, pdf, mx, sum);
}

extern "C" int gacc_cuda_load(gacc_cuda *c, const gacc_stats *in) {
  if (kio_gpu_bind(c->gpu) != KIO_OK) return KIO_ERR;
  size_t G = (size_t)c->num_gauss, GD = G * (size_t)c->dim;
  cudaStream_t st = c->stream;
  KIO_CUDA_TRY(cudaMemcpyAsync(c->d_tacc, in->tacc, sizeof(double) * ((size_t)c->num_tids + 1),
                               cudaMemcpyHostToDevice, st));
  KIO_CUDA_TRY(cudaMemcpyAsync(c->d_occ, in->occ, sizeof(double) * G, cudaMemcpyHostToDevice, st));
  KIO_CUDA_TRY(cudaMemcpyAsync(c->d_mean, in->mean_acc, sizeof(double) * GD,
                               cudaMemcpyHostToDevice, st));
  KIO_CUDA_TRY(cudaMemcpyAsync(c->d_var, in->var_acc, sizeof(double) * GD,
                               cudaMemcpyHostToDevice, st));
  KIO_CUDA_TRY(kio_cuda_stream_wait(st));
  return KIO_OK;
}

extern "C" int gacc_cuda_zero(gacc_cuda *c) {
  if (kio_gpu_bind(c->gpu) != KIO_OK) return KIO_ERR;
  double t0 = kio_now_s();
  size_t G = (size_t)c->num_gauss, GD = G * (size_t)c->dim;
  cudaStream_t st = c->stream;
  KIO_CUDA_TRY(cudaMemsetAsync(c->d_tacc, 0, sizeof(double) * ((size_t)c->num_tids + 1), st));
  KIO_CUDA_TRY(cudaMemsetAsync(c->d_occ, 0, sizeof(double) * G, st));
  KIO_CUDA_TRY(cudaMemsetAsync(c->d_mean, 0, sizeof(double) * GD, st));
  KIO_CUDA_TRY(cudaMemsetAsync(c->d_var, 0, sizeof(double) * GD, st));
  c->t_fetch += kio_now_s() - t0;
  return KIO_OK;
}

extern "C" int gacc_cuda_fetch(gacc_cuda *c, gacc_stats *out) {
  if (kio_gpu_bind(c->gpu) != KIO_OK) return KIO_ERR;
  double t0 = kio_now_s();
  size_t G = (size_t)c->num_gauss, GD = G * (size_t)c->dim;
  cudaStream_t st = c->stream;
  KIO_CUDA_TRY(cudaMemcpyAsync(out->tacc, c->d_tacc,
                               sizeof(double) * ((size_t)c->num_tids + 1),
                               cudaMemcpyDeviceToHost, st));
  KIO_CUDA_TRY(cudaMemcpyAsync(out->occ, c->d_occ, sizeof(double) * G,
                               cudaMemcpyDeviceToHost, st));
  KIO_CUDA_TRY(cudaMemcpyAsync(out->mean_acc, c->d_mean, sizeof(double) * GD,
                               cudaMemcpyDeviceToHost, st));
  KIO_CUDA_TRY(cudaMemcpyAsync(out->var_acc, c->d_var, sizeof(double) * GD,
                               cudaMemcpyDeviceToHost, st));
  KIO_CUDA_TRY(kio_cuda_stream_wait(st));
  c->t_fetch += kio_now_s() - t0;
  return KIO_OK;
}

extern "C" int gacc_cuda_copy_stats(gacc_cuda *c, double *tacc, double *occ, double *mean,
                                    double *var) {
  if (kio_gpu_bind(c->gpu) != KIO_OK) return KIO_ERR;
  double t0 = kio_now_s();
  size_t G = (size_t)c->num_gauss, GD = G * (size_t)c->dim;
  cudaStream_t st = c->stream;
  KIO_CUDA_TRY(cudaMemcpyAsync(tacc, c->d_tacc, sizeof(double) * ((size_t)c->num_tids + 1),
                               cudaMemcpyDeviceToDevice, st));
  KIO_CUDA_TRY(cudaMemcpyAsync(occ, c->d_occ, sizeof(double) * G, cudaMemcpyDeviceToDevice, st));
  KIO_CUDA_TRY(cudaMemcpyAsync(mean, c->d_mean, sizeof(double) * GD, cudaMemcpyDeviceToDevice,
                               st));
  KIO_CUDA_TRY(cudaMemcpyAsync(var, c->d_var, sizeof(double) * GD, cudaMemcpyDeviceToDevice, st));
  KIO_CUDA_TRY(kio_cuda_stream_wait(st));
  c->t_fetch += kio_now_s() - t0;
  return KIO_OK;
}

extern "C" void gacc_cuda_use_dev_feats(gacc_cuda *c, const gacc_dev_feats *f) { c->df = f; }
extern "C" void gacc_cuda_set_par(gacc_cuda *c, gacc_par *p) { c->par = p; }
extern "C" int gacc_cuda_device_of(const gacc_cuda *c) { return c->device; }

extern "C" void gacc_cuda_timing(const gacc_cuda *c, gacc_timing *t) {
  t->batches = c->n_batches;
  t->frames = c->n_frames;
  t->resident = c->n_resident;
  t->setup = c->t_new;
  t->sort = c->t_sort;
  t->stage = c->t_stage;
  t->wait = c->t_wait;
  t->fetch = c->t_fetch;
}

extern "C" int gacc_cuda_bind_thread(gacc_cuda *c) { return kio_gpu_bind(c->gpu); }

extern "C" int gacc_cuda_host_alloc(void **p, size_t bytes) {
  return kio_cuda_host_alloc(p, bytes);  /* from the cache: no device-wide stall */
}

extern "C" void gacc_cuda_host_free(void *p) {
  kio_cuda_host_free(p, NULL);  /* callers free only after their work completed */
}
