/* Likelihoods of a long utterance computed on the device in frame chunks for
 * the host decoder (galign_ll_source, align-cpu.h): the exact kernel
 * (loglike-exact-cuda.cu, bit-identical to the CPU's GMM) evaluates every
 * pdf the utterance's graph can reach for C frames at a time; the rows come
 * back into pinned host memory. Two slots: while the decoder reads chunk k
 * from one, chunk k + 1 is computed into the other (one stream: feature
 * upload, kernel, copy back, event). A retry pass asks for frame 0 again and
 * the chunks are computed again (the two last ones are kept, so utterances
 * of one or two chunks are not).
 *
 * Memory does not grow with T: on the device C x (dim + pdfs) floats plus
 * the tile list; on the host twice that. C is chosen so that a chunk's
 * likelihoods take ~16 MB (KALDI_GPU_DEV_CHUNK_FRAMES overrides, for tests).
 *
 * One object per host thread; objects of several threads share one
 * galign_cuda (they only read its model) and run on their own streams. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "align-cpu.h"
#include "align-cuda-impl.h"
#include "base/sys/settings.h"

/* Bytes of one chunk's likelihoods the default chunk length aims at. */
#define GALIGN_CHUNK_LL_BYTES ((size_t)16 << 20)
/* Bytes before the tile list in the meta buffers: one galign_cu_utt, then
 * (last 8 bytes) the kernel's two flag ints, which nobody reads here: the
 * decoder checks the values it uses, as the CPU path does. */
#define GALIGN_CHUNK_META ((size_t)64)

struct galign_cuda_chunks {
  galign_ll_source src;  /* first member: the decoder's handle is this object */
  galign_cuda *c;
  cudaStream_t st;
  cudaEvent_t ev[2];     /* slot s's rows are on the host */
  galign_cu_buf d_feats, d_ll, d_meta, d_ucol, d_sel;
  galign_cu_buf h_feats[2], h_ll[2], h_meta[2];
  int32_t chunk[2];      /* the chunk in (or on its way to) slot s, -1: none */
  int pending[2];        /* its event not waited for yet */
  /* the utterance */
  const kio_matrix *feats;
  int32_t T, U, C, nchunks, groups, sel_n;
  /* statistics */
  int64_t stat_chunks;
  size_t stat_dev_peak;
};

static int chunk_cuda_err(cudaError_t e, const char *what, char *err, size_t errlen) {
  if (e == cudaSuccess) return KIO_OK;
  if (e == cudaErrorMemoryAllocation) {  /* the device layer's: the caller may recover */
    cudaGetLastError();
    kio_gpu_nomem_call(what, __func__, __FILE__, __LINE__);
  }
  snprintf(err, errlen, "CUDA error %s: %s (likelihoods of a long utterance)",
           cudaGetErrorString(e), what);
  return KIO_ERR;
}
#define CHUNK_TRY(call)                                                           \
  do {                                                                            \
    if (chunk_cuda_err((call), #call, err, errlen) != KIO_OK) return KIO_ERR;     \
  } while (0)

/* Frames per chunk for an utterance of T frames and U pdfs: ~16 MB of
 * likelihoods, less when the aligner's budget is small (every decoder
 * thread has its chunk buffers: together at most ~1/4 of the budget). */
static int32_t chunk_frames(const galign_cuda *c, int32_t T, int32_t U) {
  long v = (long)kio_setting_int(KIO_SET_DEV_CHUNK_FRAMES, 0, 1, INT32_MAX);
  size_t ll_bytes = kio_gpu_acct_limit(c->acct) / 64;
  if (ll_bytes > GALIGN_CHUNK_LL_BYTES) ll_bytes = GALIGN_CHUNK_LL_BYTES;
  int64_t C = v > 0 ? v : (int64_t)(ll_bytes / (sizeof(float) * (size_t)(U > 0 ? U : 1)));
  if (v <= 0) {
    C &= ~(int64_t)(GALIGN_LL_TILE - 1);
    if (C < 512) C = 512;
    if (C > 8192) C = 8192;
  }
  return (int32_t)(C < T ? C : T);
}

/* Waits for slot s's rows. */
static int chunk_wait(galign_cuda_chunks *k, int s, char *err, size_t errlen) {
  if (!k->pending[s]) return KIO_OK;
  k->pending[s] = 0;
  CHUNK_TRY(kio_cuda_event_wait(k->ev[s]));
  return KIO_OK;
}

/* Queues chunk j into slot j & 1: features staged and uploaded, the tile
 * list (128-frame tiles x groups of pdfs, enough blocks to fill the device),
 * the kernel, the rows copied back, the slot's event. */
static int chunk_submit(galign_cuda_chunks *k, int32_t j, char *err, size_t errlen) {
  const int s = j & 1;
  if (chunk_wait(k, s, err, errlen) != KIO_OK) return KIO_ERR;
  const int32_t D = k->feats->cols, U = k->U, G = k->groups;
  const int64_t f0 = (int64_t)j * k->C;
  const int32_t nf = (int32_t)(k->T - f0 < k->C ? k->T - f0 : k->C);
  memcpy(k->h_feats[s].p, k->feats->data + f0 * D, sizeof(float) * (size_t)nf * D);
  memset(k->h_meta[s].p, 0, GALIGN_CHUNK_META);
  galign_cu_utt *u = (galign_cu_utt *)k->h_meta[s].p;
  u->num_frames = nf;
  u->npu = U;
  int32_t *tl = (int32_t *)((char *)k->h_meta[s].p + GALIGN_CHUNK_META);
  int64_t nt = 0;
  for (int32_t t0 = 0; t0 < nf; t0 += GALIGN_LL_TILE)
    for (int32_t g = 0; g < G; g++) {
      const int32_t lo = (int32_t)((int64_t)g * U / G), hi = (int32_t)((int64_t)(g + 1) * U / G);
      if (hi <= lo) continue;
      tl[4 * nt] = 0;
      tl[4 * nt + 1] = t0;
      tl[4 * nt + 2] = lo;  /* d_sel is 0, 1, ...: compact pdfs lo .. hi - 1 */
      tl[4 * nt + 3] = hi - lo;
      nt++;
    }
  const size_t meta = GALIGN_CHUNK_META + sizeof(int32_t) * 4 * (size_t)nt;
  CHUNK_TRY(cudaMemcpyAsync(k->d_feats.p, k->h_feats[s].p, sizeof(float) * (size_t)nf * D,
                            cudaMemcpyHostToDevice, k->st));
  CHUNK_TRY(cudaMemcpyAsync(k->d_meta.p, k->h_meta[s].p, meta, cudaMemcpyHostToDevice, k->st));
  int *flags = (int *)k->d_meta.p + GALIGN_CHUNK_META / sizeof(int) - 2; /* never read */
  if (galign_cu_ll_exact_launch(k->c, nt,
                                (const int32_t *)((char *)k->d_meta.p + GALIGN_CHUNK_META),
                                (const int32_t *)k->d_sel.p, k->d_meta.p,
                                (const float *)k->d_feats.p, (const int32_t *)k->d_ucol.p,
                                (float *)k->d_ll.p, flags, flags + 1, k->st) != KIO_OK) {
    snprintf(err, errlen, "Device likelihoods of a long utterance could not be launched");
    return KIO_ERR;
  }
  CHUNK_TRY(cudaMemcpyAsync(k->h_ll[s].p, k->d_ll.p, sizeof(float) * (size_t)nf * U,
                            cudaMemcpyDeviceToHost, k->st));
  CHUNK_TRY(cudaEventRecord(k->ev[s], k->st));
  k->chunk[s] = j;
  k->pending[s] = 1;
  k->stat_chunks++;
  return KIO_OK;
}

static int reserve(galign_cu_buf *b, size_t bytes, int dev, char *err, size_t errlen) {
  if ((dev ? galign_cu_dev_reserve(b, bytes) : galign_cu_host_reserve(b, bytes)) == KIO_OK)
    return KIO_OK;
  snprintf(err, errlen, "Out of %s memory for the likelihoods of a long utterance",
           dev ? "device" : "pinned host");
  return KIO_ERR;
}

extern "C" int galign_cu_chunks_begin(galign_ll_source *src, const galign_graph *g,
                                      const kio_matrix *feats, char *err, size_t errlen) {
  galign_cuda_chunks *k = (galign_cuda_chunks *)src;
  const galign_cuda *c = k->c;
  /* Worker threads are made per batch: the device and buffer stream are
   * per thread. */
  CHUNK_TRY(cudaSetDevice(c->device));
  galign_cu_use(c->acct, k->st);
  CHUNK_TRY(kio_cuda_stream_wait(k->st)); /* the last utterance's prefetch */
  k->chunk[0] = k->chunk[1] = -1;
  k->pending[0] = k->pending[1] = 0;
  k->feats = feats;
  k->T = feats->rows;
  k->U = g->num_pdfs_used;
  for (int32_t i = 0; i < k->U; i++)
    if (g->pdfs_used[i] < 0 || g->pdfs_used[i] >= c->num_pdfs) {
      snprintf(err, errlen, "Graph uses pdf %d but the model has %d pdfs", (int)g->pdfs_used[i],
               (int)c->num_pdfs);
      return KIO_ERR;
    }
  k->C = chunk_frames(c, k->T, k->U);
  k->nchunks = (int32_t)(((int64_t)k->T + k->C - 1) / k->C);
  /* Blocks per chunk: 128-frame tiles times groups of at least 16 pdfs,
   * about two per multiprocessor when a chunk has few tiles. */
  const int32_t tiles = (k->C + GALIGN_LL_TILE - 1) / GALIGN_LL_TILE;
  int32_t G = (2 * (c->num_sms > 0 ? c->num_sms : 1) + tiles - 1) / tiles;
  if (G > k->U / 16) G = k->U / 16;
  k->groups = G < 1 ? 1 : G;
  const size_t D = (size_t)c->dim, C = (size_t)k->C, U = (size_t)k->U;
  const size_t meta = GALIGN_CHUNK_META + sizeof(int32_t) * 4 * (size_t)tiles * k->groups;
  if (reserve(&k->d_feats, sizeof(float) * C * D, 1, err, errlen) ||
      reserve(&k->d_ll, sizeof(float) * C * U, 1, err, errlen) ||
      reserve(&k->d_meta, meta, 1, err, errlen) ||
      reserve(&k->d_ucol, sizeof(int32_t) * U, 1, err, errlen))
    return KIO_ERR;
  for (int s = 0; s < 2; s++)
    if (reserve(&k->h_feats[s], sizeof(float) * C * D, 0, err, errlen) ||
        reserve(&k->h_ll[s], sizeof(float) * C * U, 0, err, errlen) ||
        reserve(&k->h_meta[s], meta, 0, err, errlen))
      return KIO_ERR;
  if (k->sel_n < k->U) { /* the identity list the tiles point into */
    if (reserve(&k->d_sel, sizeof(int32_t) * U, 1, err, errlen)) return KIO_ERR;
    int32_t *id = (int32_t *)k->h_ll[0].p; /* free until the first chunk */
    for (int32_t i = 0; i < k->U; i++) id[i] = i;
    CHUNK_TRY(cudaMemcpyAsync(k->d_sel.p, id, sizeof(int32_t) * U, cudaMemcpyHostToDevice, k->st));
    k->sel_n = k->U;
  }
  CHUNK_TRY(cudaMemcpyAsync(k->d_ucol.p, g->pdfs_used, sizeof(int32_t) * U,
                            cudaMemcpyHostToDevice, k->st));
  CHUNK_TRY(kio_cuda_stream_wait(k->st));
  size_t dev = k->d_feats.cap + k->d_ll.cap + k->d_meta.cap + k->d_ucol.cap + k->d_sel.cap;
  if (dev > k->stat_dev_peak) k->stat_dev_peak = dev;
  return KIO_OK;
}

extern "C" const float *galign_cu_chunks_row(galign_ll_source *src, int32_t t, char *err,
                                             size_t errlen) {
  galign_cuda_chunks *k = (galign_cuda_chunks *)src;
  const int32_t j = t / k->C, s = j & 1;
  if (k->chunk[s] != j && chunk_submit(k, j, err, errlen) != KIO_OK) return NULL;
  /* The next chunk is computed while the decoder reads this one. */
  if (j + 1 < k->nchunks && k->chunk[1 - s] != j + 1 &&
      chunk_submit(k, j + 1, err, errlen) != KIO_OK)
    return NULL;
  if (chunk_wait(k, s, err, errlen) != KIO_OK) return NULL;
  return (const float *)k->h_ll[s].p + (size_t)(t - (int64_t)j * k->C) * k->U;
}

extern "C" int galign_cuda_chunks_usable(const galign_cuda *c) { return c && c->ll_exact; }

extern "C" int galign_cuda_chunks_new(galign_cuda *c, galign_cuda_chunks **out) {
  *out = NULL;
  galign_cuda_chunks *k = (galign_cuda_chunks *)calloc(1, sizeof *k);
  if (!k) {
    KIO_ERROR("Out of memory");
    return KIO_ERR;
  }
  k->src.begin = galign_cu_chunks_begin;
  k->src.row = galign_cu_chunks_row;
  k->c = c;
  k->chunk[0] = k->chunk[1] = -1;
  cudaError_t e = cudaSetDevice(c->device);
  if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&k->st, cudaStreamNonBlocking);
  for (int s = 0; s < 2 && e == cudaSuccess; s++)
    e = cudaEventCreateWithFlags(&k->ev[s], cudaEventDisableTiming);
  if (e != cudaSuccess) {
    KIO_ERROR("CUDA error %s creating a stream for long utterances", cudaGetErrorString(e));
    galign_cuda_chunks_free(k);
    return KIO_ERR;
  }
  *out = k;
  return KIO_OK;
}

extern "C" void galign_cuda_chunks_free(galign_cuda_chunks *k) {
  if (!k) return;
  cudaSetDevice(k->c->device);
  if (k->st) kio_cuda_stream_wait(k->st);
  galign_cu_use(k->c->acct, k->st);
  galign_cu_buf *dev[] = {&k->d_feats, &k->d_ll, &k->d_meta, &k->d_ucol, &k->d_sel};
  for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) galign_cu_dev_release(dev[i]);
  for (int s = 0; s < 2; s++) {
    galign_cu_host_release(&k->h_feats[s]);
    galign_cu_host_release(&k->h_ll[s]);
    galign_cu_host_release(&k->h_meta[s]);
    if (k->ev[s]) cudaEventDestroy(k->ev[s]);
  }
  if (k->st) kio_cuda_stream_wait(k->st);  /* the frees above are stream-ordered */
  if (k->st) cudaStreamDestroy(k->st);
  galign_cu_use(NULL, NULL);
  cudaGetLastError();
  free(k);
}

extern "C" galign_ll_source *galign_cuda_chunks_source(galign_cuda_chunks *k) { return &k->src; }

extern "C" void galign_cuda_chunks_stats(const galign_cuda_chunks *k, int64_t *chunks,
                                         size_t *dev_peak) {
  *chunks = k ? k->stat_chunks : 0;
  *dev_peak = k ? k->stat_dev_peak : 0;
}
