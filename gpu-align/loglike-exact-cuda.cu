/* GMM log-likelihoods on the device in exactly the CPU path's float order
 * (gmm-core.h: OpenBLAS sgemv_t order of Kaldi's reference build), so the
 * device likelihoods are bit-identical to the CPU's (up to the last bit of
 * expf/log in a rare near-midpoint case) and near-ties in pruning go the
 * same way. Only the pdfs each utterance's graph uses are evaluated: per
 * frame that is ~10% of a tri model's Gaussians, so this does less work than
 * one GEMM over the batch's union of pdfs.
 *
 * Mapping: one block of 4 warps per tile of 32 frames of one utterance; lane
 * = frame, warp w takes the utterance's compact pdfs k = w, w + 4, ...; all
 * lanes of a warp read the same model rows (broadcast from L1), each lane
 * its own frame from shared memory. */
#include <math.h>

#include "align-cuda-impl.h"

#define GALIGN_GMM_CORE_INLINE /* nvcc inlines small static functions */
#include "gmm-core.h"

#define GALIGN_LL_WARPS 4

/* Per warp, x and x*x of its 32 frames, one row of Dp = D|1 floats per lane:
 * an odd row stride puts the 32 lanes' x[i] in 32 different banks. Each
 * thread only reads what it wrote itself, so no barrier is needed. */
static inline int32_t galign_ll_dp(int32_t dim) { return dim | 1; }
size_t galign_cu_ll_exact_smem(int32_t dim) {
  return sizeof(float) * (size_t)GALIGN_LL_WARPS * 2 * GALIGN_LL_TILE * (size_t)galign_ll_dp(dim);
}

__global__ void __launch_bounds__(GALIGN_LL_TILE * GALIGN_LL_WARPS)
galign_k_ll_exact(galign_gmm g, const int32_t *__restrict__ tiles, int64_t tile0,
                  const galign_cu_utt *__restrict__ utt, const float *__restrict__ feats,
                  const int32_t *__restrict__ upd, float log_eps, float *__restrict__ ll,
                  int *__restrict__ flags, int *__restrict__ uflags) {
  GALIGN_DYN_SMEM(float, galign_sm);
  const int64_t tix = tile0 + blockIdx.x;
  const int32_t ui = tiles[2 * tix], t0 = tiles[2 * tix + 1];
  const galign_cu_utt u = utt[ui];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int32_t t = t0 + lane;
  if (t >= u.num_frames) return; /* no barrier below: safe */
  const int32_t D = g.dim, Dp = D | 1;
  float *x = galign_sm + (size_t)warp * 2 * GALIGN_LL_TILE * Dp + (size_t)lane * Dp;
  float *x2 = x + (size_t)GALIGN_LL_TILE * Dp;
  const float *gx = feats + (u.frame_off + t) * D;
  for (int32_t i = 0; i < D; i++) {
    float v = gx[i];
    x[i] = v;
    x2[i] = v * v; /* the CPU's x2[d] = x[d] * x[d] */
  }
  float *out = ll + u.ll_off + (int64_t)t * u.npu;
  float s[GALIGN_LL_MAXC];
  int bad = 0;
  for (int32_t k = warp; k < u.npu; k += GALIGN_LL_WARPS) {
    const int32_t p = upd[u.col_off + k];
    const int32_t m0 = g.pdf_offset[p], n = g.pdf_offset[p + 1] - m0;
    const int32_t n4 = n & ~3, n2 = n4 + (n & 2);
    float mx = -INFINITY;
    int any_nan = 0;
    for (int32_t i = 0; i < n; i++) {
      float l = galign_comp_loglike(&g, m0 + i, i < n4 ? 4 : i < n2 ? 2 : 1, x, x2);
      s[i] = l;
      if (l > mx) mx = l;
      if (l != l) any_nan = 1;
    }
    float res;
    if (any_nan || n == 0) {
      res = NAN;
    } else {
      float cut = mx + log_eps;
      double sum = 0.0;
      for (int32_t i = 0; i < n; i++)
        if (s[i] >= cut) sum += (double)(float)exp((double)(s[i] - mx)); /* = glibc expf */
      res = sum > 0.0 ? (float)((double)mx + log(sum)) : NAN;
    }
    if (res != res || isinf(res)) bad = 1;
    out[k] = res;
  }
  if (bad) {
    atomicOr(flags, GALIGN_CU_BAD_LIKE);
    atomicOr(uflags + ui, GALIGN_CU_BAD_LIKE);
  }
}

int galign_cu_ll_exact_prepare(galign_cuda *c, int n) {
  const galign_cu_utt *utt = (const galign_cu_utt *)c->h_utt.p;
  int64_t ntiles = 0;
  for (int i = 0; i < n; i++) ntiles += (utt[i].num_frames + GALIGN_LL_TILE - 1) / GALIGN_LL_TILE;
  if (ntiles == 0) return KIO_OK;
  const size_t smem = galign_cu_ll_exact_smem(c->dim);
  if (smem > 48 * 1024 && !c->ll_smem_set) { /* above the default: opt in once */
    KIO_CUDA_TRY(cudaFuncSetAttribute((const void *)galign_k_ll_exact,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    c->ll_smem_set = 1;
  }
  GALIGN_CU_RESERVE(host, c->h_tiles, int32_t, 2 * ntiles);
  GALIGN_CU_RESERVE(dev, c->d_tiles, int32_t, 2 * ntiles);
  int32_t *tl = (int32_t *)c->h_tiles.p;
  int64_t j = 0;
  for (int i = 0; i < n; i++)
    for (int32_t t0 = 0; t0 < utt[i].num_frames; t0 += GALIGN_LL_TILE) {
      tl[2 * j] = i;
      tl[2 * j + 1] = t0;
      j++;
    }
  KIO_CUDA_TRY(cudaMemcpyAsync(c->d_tiles.p, tl, sizeof(int32_t) * 2 * ntiles,
                               cudaMemcpyHostToDevice, c->stream));
  return KIO_OK;
}

int galign_cu_ll_exact_run(galign_cuda *c, int64_t tile0, int64_t count) {
  if (count <= 0) return KIO_OK;
  if (count > 0x7fffffff) {
    KIO_ERROR("Batch too large: %lld frame tiles", (long long)count);
    return KIO_ERR;
  }
  GALIGN_LAUNCH_SMEM(galign_k_ll_exact, (unsigned)count, GALIGN_LL_TILE * GALIGN_LL_WARPS,
                     galign_cu_ll_exact_smem(c->dim), c->stream, c->dgmm,
                     (const int32_t *)c->d_tiles.p, tile0, (const galign_cu_utt *)c->d_utt.p,
                     (const float *)c->d_feats.p, (const int32_t *)c->d_ucol.p, c->log_eps,
                     (float *)c->d_ll.p, (int *)c->d_flags.p, (int *)c->d_uflags.p);
  KIO_CUDA_LAUNCHED();
  return KIO_OK;
}
