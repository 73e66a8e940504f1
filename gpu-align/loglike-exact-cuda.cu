/* GMM log-likelihoods on the device in exactly the CPU path's float order
 * (gmm-core.h: OpenBLAS sgemv_t order of Kaldi's reference build), so the
 * device likelihoods are bit-identical to the CPU's (up to the last bit of
 * expf/log in a rare near-midpoint case) and near-ties in pruning go the
 * same way. Only the pdfs each utterance's graph uses are evaluated: per
 * frame that is ~10% of a tri model's Gaussians, so this does less work than
 * one GEMM over the batch's union of pdfs.
 *
 * Mapping: one block of 4 warps per tile of 128 frames of one utterance,
 * the tile's x and x*x staged in shared memory as [dim][frame]; warp w takes
 * the utterance's compact pdfs k = w, w + 4, ...; each lane computes 4
 * consecutive frames x 4 components at a time (a register tile: per
 * dimension one float4 of model values, broadcast to the warp, and one
 * float4 of features feed 16 FMAs).
 *
 * The order of each dot product is a per-output property, so tiling keeps
 * it: OpenBLAS's 4x4 kernel keeps 8 lane accumulators per output, lane l
 * summing dims l, l+8, ... (after an optional leading 4); they are folded
 * (l, l+4) pairwise. We run the 8 lane chains one after another, folding as
 * we go, so only a few partial sums per output are live. The last n % 4
 * components of a pdf use the SSE kernels' order (gmm-core.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "align-cuda-impl.h"

#define GALIGN_GMM_CORE_INLINE /* nvcc inlines small static functions */
#include "gmm-core.h"
#include "base/sys/settings.h"

#define GALIGN_LL_WARPS 4
#define GALIGN_LL_FPL 4 /* frames per lane */

size_t galign_cu_ll_exact_smem(int32_t dim) {
  return sizeof(float) * 2 * (size_t)GALIGN_LL_TILE * (size_t)dim;
}

/* Model layout of the tiled kernel: the first n & ~3 components of each pdf
 * in groups of 4, a group being (1 + 2 * dim) float4s: gconst, then per dim
 * the 4 components' means*invvars, then per dim their inv_vars. */
size_t galign_cu_ll_group_floats(int32_t dim) { return 4 * (1 + 2 * (size_t)dim); }

typedef struct { float v[GALIGN_LL_FPL][4]; } galign_tile16; /* [frame][component] */

/* One lane chain of the 4x4 kernel (dims l, then l + off + 8j) for 4
 * components (a: [dim][4] float4 rows) x 4 frames (xs: [dim][TILE], lane's
 * 4 frames at xs + 4 * lane). */
__device__ static __forceinline__ void galign_chain44(const float4 *__restrict__ a, const float *xs,
                                             int32_t nb, int l, galign_tile16 *acc) {
#pragma unroll
  for (int f = 0; f < GALIGN_LL_FPL; f++)
#pragma unroll
    for (int c = 0; c < 4; c++) acc->v[f][c] = 0.0f;
  const int32_t off = nb & 4;
  int32_t d = (off && l < 4) ? l : off + l;
#pragma unroll
  for (; d < nb; d = (d < off) ? off + l : d + 8) {
    const float4 av = a[d];
    const float4 xv = *(const float4 *)(xs + (size_t)d * GALIGN_LL_TILE);
    const float xf[4] = {xv.x, xv.y, xv.z, xv.w}, ac[4] = {av.x, av.y, av.z, av.w};
#pragma unroll
    for (int f = 0; f < GALIGN_LL_FPL; f++)
#pragma unroll
      for (int c = 0; c < 4; c++) acc->v[f][c] = fmaf(ac[c], xf[f], acc->v[f][c]);
  }
}

/* galign_k4x4_dot for 4 components x 4 frames. */
__device__ static __forceinline__ void galign_dot44(const float4 *__restrict__ a, const float *xs,
                                           int32_t nb, galign_tile16 *out) {
  galign_tile16 t01, s, p, q;
#pragma unroll
  for (int h = 0; h < 2; h++) {     /* h = 0: lanes 0,4,1,5; h = 1: 2,6,3,7 */
#pragma unroll
    for (int k = 0; k < 2; k++) {   /* s_{2h+k} = acc[2h+k+4] + acc[2h+k] */
      galign_chain44(a, xs, nb, 2 * h + k, &p);
      galign_chain44(a, xs, nb, 2 * h + k + 4, &q);
#pragma unroll
      for (int f = 0; f < GALIGN_LL_FPL; f++)
#pragma unroll
        for (int c = 0; c < 4; c++) {
          float sk = q.v[f][c] + p.v[f][c];
          if (k == 0) s.v[f][c] = sk;
          else s.v[f][c] = s.v[f][c] + sk;  /* s0 + s1, s2 + s3 */
        }
    }
#pragma unroll
    for (int f = 0; f < GALIGN_LL_FPL; f++)
#pragma unroll
      for (int c = 0; c < 4; c++) {
        if (h == 0) t01.v[f][c] = s.v[f][c];
        else out->v[f][c] = t01.v[f][c] + s.v[f][c];
      }
  }
}

/* The 4x4 kernel's loglikes of one group (galign_comp_loglike, kern 4). */
__device__ static __forceinline__ void galign_group_ll(const float4 *__restrict__ grp, const float *xs,
                                              const float *x2s, int32_t D, int lane,
                                              galign_tile16 *y, int prof) {
  const int32_t nb = GALIGN_NB(D), m3 = D - nb;
  const float4 g4 = grp[0];
  const float gc[4] = {g4.x, g4.y, g4.z, g4.w};
  const float4 *mi = grp + 1, *iv = grp + 1 + D;
  const float *x = xs + GALIGN_LL_FPL * lane, *x2 = x2s + GALIGN_LL_FPL * lane;
  galign_tile16 d;
#pragma unroll
  for (int f = 0; f < GALIGN_LL_FPL; f++)
#pragma unroll
    for (int c = 0; c < 4; c++) y->v[f][c] = gc[c];
  for (int pass = 0; pass < 2; pass++) {
    const float4 *a = pass ? iv : mi;
    const float *xx = pass ? x2 : x;
    const float alpha = pass ? -0.5f : 1.0f;
    if (nb > 0) {
      galign_dot44(a, xx, nb, &d);
#pragma unroll
      for (int f = 0; f < GALIGN_LL_FPL; f++)
#pragma unroll
        for (int c = 0; c < 4; c++) y->v[f][c] = y->v[f][c] + d.v[f][c] * alpha;
    }
    if (m3) { /* galign_tail_add */
#pragma unroll
      for (int f = 0; f < GALIGN_LL_FPL; f++)
#pragma unroll
        for (int c = 0; c < 4; c++) {
          const float *ac = (const float *)(a + nb) + c;
          const float *xf = xx + (size_t)nb * GALIGN_LL_TILE + f;
          y->v[f][c] = galign_tail_add(y->v[f][c], m3, alpha, ac[0], m3 > 1 ? ac[4] : 0.0f,
                                       m3 > 2 ? ac[8] : 0.0f, xf[0],
                                       m3 > 1 ? xf[GALIGN_LL_TILE] : 0.0f,
                                       m3 > 2 ? xf[2 * GALIGN_LL_TILE] : 0.0f, prof);
        }
    }
  }
}

/* The SSE profile's rows (blas-order.h kio_blas_gemv_row_c: groups of 4
 * products summed in turn, added to the block's running sum; the last D%16
 * dims in turn in a sum of their own) for 4 components x 4 frames. */
__device__ static __forceinline__ void galign_group_ll_sse(const float4 *__restrict__ grp,
                                                  const float *xs, const float *x2s, int32_t D,
                                                  int lane, galign_tile16 *y) {
  const int32_t m2 = D & 15, m1 = D - m2;
  const float4 g4 = grp[0];
  const float gc[4] = {g4.x, g4.y, g4.z, g4.w};
  const float4 *mi = grp + 1, *iv = grp + 1 + D;
  const float *x = xs + GALIGN_LL_FPL * lane, *x2 = x2s + GALIGN_LL_FPL * lane;
#pragma unroll
  for (int f = 0; f < GALIGN_LL_FPL; f++)
#pragma unroll
    for (int c = 0; c < 4; c++) y->v[f][c] = gc[c];
  for (int pass = 0; pass < 2; pass++) {
    const float4 *a = pass ? iv : mi;
    const float *xx = pass ? x2 : x;
    const float alpha = pass ? -0.5f : 1.0f;
    for (int32_t off = 0; off < D; off += 4096) {
      /* [off, end): a main block (groups of 4), or the tail (from m1: 1 by 1) */
      const int32_t end = off < m1 ? (m1 - off < 4096 ? m1 : off + 4096) : D;
      const int32_t q = off < m1 ? 4 : 1;
      galign_tile16 t;
#pragma unroll
      for (int f = 0; f < GALIGN_LL_FPL; f++)
#pragma unroll
        for (int c = 0; c < 4; c++) t.v[f][c] = 0.0f;
      for (int32_t i = off; i < end; i += q) {
        galign_tile16 sg;
        for (int32_t k = 0; k < q; k++) {
          const float4 av = a[i + k];
          const float4 xv = *(const float4 *)(xx + (size_t)(i + k) * GALIGN_LL_TILE);
          const float xf[4] = {xv.x, xv.y, xv.z, xv.w}, ac[4] = {av.x, av.y, av.z, av.w};
#pragma unroll
          for (int f = 0; f < GALIGN_LL_FPL; f++)
#pragma unroll
            for (int c = 0; c < 4; c++) {
              const float p = ac[c] * xf[f];
              sg.v[f][c] = k == 0 ? p : sg.v[f][c] + p;
            }
        }
#pragma unroll
        for (int f = 0; f < GALIGN_LL_FPL; f++)
#pragma unroll
          for (int c = 0; c < 4; c++) t.v[f][c] = t.v[f][c] + sg.v[f][c];
      }
#pragma unroll
      for (int f = 0; f < GALIGN_LL_FPL; f++)
#pragma unroll
        for (int c = 0; c < 4; c++) y->v[f][c] = t.v[f][c] * alpha + y->v[f][c];
      if (end == m1 && m2) off = m1 - 4096;  /* then the tail block at m1 */
      else if (end == m1 || end == D) break;
    }
  }
}

/* galign_sse_dot for one component (row a) x 4 frames. */
__device__ static __forceinline__ void galign_sse_dot4(const float *__restrict__ a, const float *xs,
                                              int32_t nb, int k1, float out[GALIGN_LL_FPL]) {
  float acc[4][GALIGN_LL_FPL], acc2[4][GALIGN_LL_FPL];
#pragma unroll
  for (int l = 0; l < 4; l++)
#pragma unroll
    for (int f = 0; f < GALIGN_LL_FPL; f++) acc[l][f] = acc2[l][f] = 0.0f;
  int32_t i = 0;
  if (nb & 4) {
#pragma unroll
    for (int l = 0; l < 4; l++) {
      const float4 xv = *(const float4 *)(xs + (size_t)l * GALIGN_LL_TILE);
      const float xf[4] = {xv.x, xv.y, xv.z, xv.w};
#pragma unroll
      for (int f = 0; f < GALIGN_LL_FPL; f++) acc[l][f] = acc[l][f] + a[l] * xf[f];
    }
    i = 4;
  }
  for (; i < nb; i += 8) {
#pragma unroll
    for (int h = 0; h < 2; h++)
#pragma unroll
      for (int l = 0; l < 4; l++) {
        const int32_t d = i + 4 * h + l;
        const float4 xv = *(const float4 *)(xs + (size_t)d * GALIGN_LL_TILE);
        const float xf[4] = {xv.x, xv.y, xv.z, xv.w};
        const float av = a[d];
#pragma unroll
        for (int f = 0; f < GALIGN_LL_FPL; f++) {
          if (h == 1 && k1) acc2[l][f] = acc2[l][f] + av * xf[f];
          else acc[l][f] = acc[l][f] + av * xf[f];
        }
      }
  }
#pragma unroll
  for (int f = 0; f < GALIGN_LL_FPL; f++) {
    float s[4];
#pragma unroll
    for (int l = 0; l < 4; l++) s[l] = k1 ? acc[l][f] + acc2[l][f] : acc[l][f];
    out[f] = (s[0] + s[1]) + (s[2] + s[3]);
  }
}

/* galign_comp_loglike (kern 2 or 1) of component m, 4 frames; small:
 * galign_small_loglike of component i of n (SkylakeX's small-m kernel). */
__device__ static __forceinline__ void galign_tail_ll(const galign_gmm &g, int32_t m, int kern,
                                             const float *xs, const float *x2s, int lane,
                                             float y[GALIGN_LL_FPL], int small, int32_t i,
                                             int32_t n) {
  const int32_t D = g.dim, nb = GALIGN_NB(D), m3 = D - nb;
  const float *x = xs + GALIGN_LL_FPL * lane, *x2 = x2s + GALIGN_LL_FPL * lane;
  if (small) {
#pragma unroll
    for (int f = 0; f < GALIGN_LL_FPL; f++)
      y[f] = galign_small_loglike(&g, m, i, n, x + f, x2 + f, GALIGN_LL_TILE);
    return;
  }
  float d[GALIGN_LL_FPL];
#pragma unroll
  for (int f = 0; f < GALIGN_LL_FPL; f++) y[f] = g.gconst[m];
  for (int pass = 0; pass < 2; pass++) {
    const float *a = (pass ? g.inv_vars : g.means_invvars) + (size_t)m * D;
    const float *xx = pass ? x2 : x;
    const float alpha = pass ? -0.5f : 1.0f;
    if (nb > 0) {
      galign_sse_dot4(a, xx, nb, kern == 1, d);
#pragma unroll
      for (int f = 0; f < GALIGN_LL_FPL; f++) y[f] = y[f] + d[f] * alpha;
    }
    if (m3) {
#pragma unroll
      for (int f = 0; f < GALIGN_LL_FPL; f++) {
        const float *xf = xx + (size_t)nb * GALIGN_LL_TILE + f;
        y[f] = galign_tail_add(y[f], m3, alpha, a[nb], m3 > 1 ? a[nb + 1] : 0.0f,
                               m3 > 2 ? a[nb + 2] : 0.0f, xf[0],
                               m3 > 1 ? xf[GALIGN_LL_TILE] : 0.0f,
                               m3 > 2 ? xf[2 * GALIGN_LL_TILE] : 0.0f, g.blas_prof);
      }
    }
  }
}

/* DT: the feature dimension when known at compile time (39: deltas of
 * 13 MFCCs; 40: LDA), 0 = read it from g. A known dimension lets the lane
 * chains unroll into straight-line code with constant offsets. */
template <int DT>
__global__ void __launch_bounds__(32 * GALIGN_LL_WARPS)
galign_k_ll_exact(galign_gmm g, const float4 *__restrict__ groups,
                  const int32_t *__restrict__ grp_start, const int32_t *__restrict__ tiles,
                  const int32_t *__restrict__ tsel,
                  const galign_cu_utt *__restrict__ utt,
                  const float *__restrict__ feats, const int32_t *__restrict__ upd,
                  float log_eps, float *__restrict__ ll, int *__restrict__ flags,
                  int *__restrict__ uflags) {
  GALIGN_DYN_SMEM(float, galign_sm);
  const int64_t tix = blockIdx.x;
  const int32_t ui = tiles[4 * tix], t0 = tiles[4 * tix + 1];
  const int32_t sel_n = tiles[4 * tix + 3];  /* -1: all pdfs of the utterance */
  const int32_t *sel = tsel + tiles[4 * tix + 2];
  const galign_cu_utt u = utt[ui];
  const int32_t D = DT ? DT : g.dim;
  const int32_t nf = u.num_frames - t0 < GALIGN_LL_TILE ? u.num_frames - t0 : GALIGN_LL_TILE;
  float *xs = galign_sm, *x2s = galign_sm + (size_t)D * GALIGN_LL_TILE;
  /* Stage x and x*x (the CPU's x2[d] = x[d] * x[d]) as [dim][frame]; frames
   * past the end are zeros (computed, never written). */
  const float *gx = feats + (u.frame_off + t0) * D;
  for (int32_t i = threadIdx.x; i < D * GALIGN_LL_TILE; i += blockDim.x) {
    const int32_t d = i / GALIGN_LL_TILE, f = i % GALIGN_LL_TILE;
    const float v = f < nf ? gx[(size_t)f * D + d] : 0.0f;
    xs[i] = v;
    x2s[i] = v * v;
  }
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int32_t tf = t0 + GALIGN_LL_FPL * lane; /* the lane's first frame */
  float4 s[GALIGN_LL_MAXC];                     /* per component, its 4 frames */
  int bad = 0;
  const int32_t nk = sel_n < 0 ? u.npu : sel_n;
  for (int32_t j = warp; j < nk; j += GALIGN_LL_WARPS) {
    const int32_t k = sel_n < 0 ? j : sel[j];
    const int32_t p = upd[u.col_off + k];
    const int32_t m0 = g.pdf_offset[p], n = g.pdf_offset[p + 1] - m0;
    /* D = 4, 8 on SkylakeX and the profiles without the 4x4 FMA lanes:
     * every component through galign_tail_ll's generic path, none in
     * groups; but the SSE profile's rows have a group form of their own */
    const int small = galign_use_small(&g), sse = g.blas_prof == KIO_BLAS_SSE;
    const int32_t n4 = small && !sse ? 0 : n & ~3, n2 = (n & ~3) + (n & 2);
    float mx[GALIGN_LL_FPL];
    int any_nan[GALIGN_LL_FPL];
#pragma unroll
    for (int f = 0; f < GALIGN_LL_FPL; f++) mx[f] = -INFINITY, any_nan[f] = 0;
    const float4 *grp = groups + (size_t)grp_start[p] * (1 + 2 * (size_t)D);
    for (int32_t i = 0; i < n4; i += 4, grp += 1 + 2 * D) {
      galign_tile16 y;
      if (sse) galign_group_ll_sse(grp, xs, x2s, D, lane, &y);
      else galign_group_ll(grp, xs, x2s, D, lane, &y, g.blas_prof);
#pragma unroll
      for (int c = 0; c < 4; c++) {
        s[i + c] = make_float4(y.v[0][c], y.v[1][c], y.v[2][c], y.v[3][c]);
#pragma unroll
        for (int f = 0; f < GALIGN_LL_FPL; f++) {
          const float l = y.v[f][c];
          if (l > mx[f]) mx[f] = l;
          if (l != l) any_nan[f] = 1;
        }
      }
    }
    for (int32_t i = n4; i < n; i++) {
      float y[GALIGN_LL_FPL];
      galign_tail_ll(g, m0 + i, i < n2 ? 2 : 1, xs, x2s, lane, y, small, i, n);
      s[i] = make_float4(y[0], y[1], y[2], y[3]);
#pragma unroll
      for (int f = 0; f < GALIGN_LL_FPL; f++) {
        if (y[f] > mx[f]) mx[f] = y[f];
        if (y[f] != y[f]) any_nan[f] = 1;
      }
    }
    /* Kaldi's log-sum-exp with its FLT_EPSILON cut-off, per frame, the
     * components in order (double sum of glibc-expf values). */
    float cut[GALIGN_LL_FPL];
    double sum[GALIGN_LL_FPL];
#pragma unroll
    for (int f = 0; f < GALIGN_LL_FPL; f++) cut[f] = mx[f] + log_eps, sum[f] = 0.0;
    for (int32_t i = 0; i < n; i++) {
      const float4 v4 = s[i];
      const float v[4] = {v4.x, v4.y, v4.z, v4.w};
#pragma unroll
      for (int f = 0; f < GALIGN_LL_FPL; f++)
        if (v[f] >= cut[f]) sum[f] += (double)(float)exp((double)(v[f] - mx[f])); /* = glibc expf */
    }
    float *out = ll + u.ll_off + (int64_t)tf * u.npu + k;
#pragma unroll
    for (int f = 0; f < GALIGN_LL_FPL; f++) {
      if (tf + f >= u.num_frames) break;
      const float res = (any_nan[f] || n == 0) ? NAN
                        : sum[f] > 0.0 ? (float)((double)mx[f] + log(sum[f])) : NAN;
      if (res != res || isinf(res)) bad = 1;
      out[(int64_t)f * u.npu] = res;
    }
  }
  if (bad) {
    atomicOr(flags, GALIGN_CU_BAD_LIKE);
    atomicOr(uflags + ui, GALIGN_CU_BAD_LIKE);
  }
}

/* The grouped model (see galign_cu_ll_group_floats) built on the host from
 * the flat one; *grp_start gets num_pdfs entries. */
int galign_cu_ll_exact_upload(galign_cuda *c, const galign_gmm *g) {
  const int32_t D = g->dim;
  int64_t ngroups = 0;
  int32_t *start = (int32_t *)malloc(sizeof(int32_t) * ((size_t)g->num_pdfs + 1));
  if (!start) { KIO_ERROR("Out of memory"); return KIO_ERR; }
  for (int32_t p = 0; p < g->num_pdfs; p++) {
    start[p] = (int32_t)ngroups;
    ngroups += (g->pdf_offset[p + 1] - g->pdf_offset[p]) >> 2;
  }
  start[g->num_pdfs] = (int32_t)ngroups;
  const size_t gf = galign_cu_ll_group_floats(D);
  float *h = (float *)calloc((size_t)(ngroups > 0 ? ngroups : 1) * gf, sizeof(float));
  if (!h) { free(start); KIO_ERROR("Out of memory"); return KIO_ERR; }
  for (int32_t p = 0; p < g->num_pdfs; p++) {
    const int32_t m0 = g->pdf_offset[p], n4 = (g->pdf_offset[p + 1] - m0) & ~3;
    for (int32_t i = 0; i < n4; i++) {
      const int32_t m = m0 + i, c = i & 3;
      float *grp = h + (size_t)(start[p] + (i >> 2)) * gf;
      grp[c] = g->gconst[m];
      for (int32_t d = 0; d < D; d++) {
        grp[4 * (1 + d) + c] = g->means_invvars[(size_t)m * D + d];
        grp[4 * (1 + D + d) + c] = g->inv_vars[(size_t)m * D + d];
      }
    }
  }
  cudaError_t e = cudaSuccess;
  int alloc_ok =  /* kio_gpu_alloc logs its own ERROR */
      galign_cu_model_reserve(c, GALIGN_CU_MODEL_GROUPS, (void **)&c->d_groups,
                              sizeof(float) * (size_t)(ngroups > 0 ? ngroups : 1) * gf) ==
          KIO_OK &&
      galign_cu_model_reserve(c, GALIGN_CU_MODEL_GRP_START, (void **)&c->d_grp_start,
                              sizeof(int32_t) * ((size_t)g->num_pdfs + 1)) == KIO_OK;
  if (alloc_ok) {
    e = cudaMemcpyAsync(c->d_groups, h, sizeof(float) * (size_t)ngroups * gf,
                        cudaMemcpyHostToDevice, c->stream);
    if (e == cudaSuccess)
      e = cudaMemcpyAsync(c->d_grp_start, start, sizeof(int32_t) * ((size_t)g->num_pdfs + 1),
                          cudaMemcpyHostToDevice, c->stream);
    if (e == cudaSuccess) e = kio_cuda_stream_wait(c->stream);
  }
  free(h);
  free(start);
  if (!alloc_ok) return KIO_ERR;
  KIO_CUDA_TRY(e);
  /* Above the default dynamic shared memory: opt in once, here, before any
   * thread launches the kernel (long utterances launch from worker threads). */
  const size_t smem = galign_cu_ll_exact_smem(D);
  if (smem > 48 * 1024) { /* only dims over 48: the generic kernel */
    KIO_CUDA_TRY(cudaFuncSetAttribute((const void *)galign_k_ll_exact<0>,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  }
  c->ll_smem_set = 1;
  return KIO_OK;
}

static int galign_cmp_i64(const void *x, const void *y) {
  int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
  return (a > b) - (a < b);
}

/* Appends to tsel (grown) the compact pdfs of tile t0 of a banded graph:
 * arcs into states placed in [band_lo[t0 + 1], band_hi[t0 + nf]] (the
 * decoder emits frame t into the band of t + 1). key: the graph's emitting
 * arcs as (place of next state) << 32 | compact pdf, sorted; stamp: npu
 * ints, stamp_id unique per tile. */
typedef struct { int32_t *v; int64_t n, cap; } galign_i32vec;

static int galign_tile_sel(galign_i32vec *sel, const galign_graph *g, const int64_t *key,
                           int64_t nkey, int32_t t0, int32_t nf, int32_t *stamp,
                           int32_t stamp_id, int32_t *count) {
  const int64_t lo = g->band_lo[t0 + 1], hi = g->band_hi[t0 + nf];
  int64_t a = 0, b = nkey;
  while (a < b) {  /* first key with place >= lo */
    int64_t m = (a + b) / 2;
    if ((key[m] >> 32) < lo) a = m + 1; else b = m;
  }
  int32_t cnt = 0;
  for (int64_t i = a; i < nkey && (key[i] >> 32) <= hi; i++) {
    const int32_t k = (int32_t)(key[i] & 0xffffffff);
    if (stamp[k] == stamp_id) continue;
    stamp[k] = stamp_id;
    if (sel->n == sel->cap) {
      int64_t nc = sel->cap ? 2 * sel->cap : 4096;
      int32_t *v = (int32_t *)realloc(sel->v, sizeof(int32_t) * (size_t)nc);
      if (!v) { KIO_ERROR("Out of memory"); return KIO_ERR; }
      sel->v = v;
      sel->cap = nc;
    }
    sel->v[sel->n++] = k;
    cnt++;
  }
  *count = cnt;
  return KIO_OK;
}

/* KALDI_GPU_DEV_MARGIN_LIKELIHOODS=full: margin mode computes every reachable pdf's
 * likelihood (the plain tiled kernel) and bands only the decoder; the same
 * numbers for the pdfs the band uses, so the same output. For measuring
 * which is faster on a device (docs/benchmarks.md, 2026-11-26). */
static int margin_ll_full(void) {
  static int v = -1;
  if (v < 0) {
    static const char *const modes[] = {"banded", "full", NULL};
    v = kio_setting_choice(KIO_SET_DEV_MARGIN_LIKELIHOODS, modes, 0) == 1;
  }
  return v;
}

int galign_cu_ll_exact_prepare(galign_cuda *c, int n, const galign_graph *const *graphs) {
  const galign_cu_utt *utt = (const galign_cu_utt *)c->h_utt.p;
  const int band_ll = !margin_ll_full();
  int64_t ntiles = 0;
  for (int i = 0; i < n; i++) ntiles += (utt[i].num_frames + GALIGN_LL_TILE - 1) / GALIGN_LL_TILE;
  c->ll_ntiles = ntiles;
  if (ntiles == 0) return KIO_OK;
  GALIGN_CU_RESERVE(host, c->h_tiles, int32_t, 4 * ntiles);
  GALIGN_CU_RESERVE(dev, c->d_tiles, int32_t, 4 * ntiles);
  int32_t *tl = (int32_t *)c->h_tiles.p;
  int64_t j = 0;
  galign_i32vec sel = {NULL, 0, 0};
  int64_t *key = NULL;
  int32_t *stamp = NULL;
  int rc = KIO_OK;
  for (int i = 0; i < n && rc == KIO_OK; i++) {
    const galign_graph *g = graphs ? graphs[i] : NULL;
    const int banded = band_ll && g && g->band_T > 0 && g->band_T == utt[i].num_frames && g->band_lo &&
                       g->topo_pos && g->fst.num_states > 0;
    int64_t nkey = 0;
    if (banded) {
      const kio_fst *f = &g->fst;
      int64_t *k2 = (int64_t *)realloc(key, sizeof(int64_t) * ((size_t)f->num_arcs + 1));
      int32_t *s2 = (int32_t *)realloc(stamp, sizeof(int32_t) * ((size_t)utt[i].npu + 1));
      if (k2) key = k2;
      if (s2) stamp = s2;
      if (!k2 || !s2) { KIO_ERROR("Out of memory"); rc = KIO_ERR; break; }
      for (int32_t a = 0; a < f->num_arcs; a++)
        if (f->arcs[a].ilabel != 0 && g->arc_pdf[a] >= 0)
          key[nkey++] = ((int64_t)g->topo_pos[f->arcs[a].nextstate] << 32) | g->arc_pdf[a];
      qsort(key, (size_t)nkey, sizeof(int64_t), galign_cmp_i64);
      for (int32_t k = 0; k < utt[i].npu; k++) stamp[k] = -1;
    }
    for (int32_t t0 = 0; t0 < utt[i].num_frames; t0 += GALIGN_LL_TILE, j++) {
      const int32_t nf = utt[i].num_frames - t0 < GALIGN_LL_TILE ? utt[i].num_frames - t0
                                                                : GALIGN_LL_TILE;
      int32_t cnt = -1;
      const int64_t off = sel.n;
      if (banded && galign_tile_sel(&sel, g, key, nkey, t0, nf, stamp, (int32_t)j, &cnt) !=
                        KIO_OK) {
        rc = KIO_ERR;
        break;
      }
      tl[4 * j] = i;
      tl[4 * j + 1] = t0;
      tl[4 * j + 2] = (int32_t)off;
      tl[4 * j + 3] = cnt;
    }
  }
  free(key);
  free(stamp);
  if (rc == KIO_OK && sel.n > 0x7fffffff) {
    KIO_ERROR("Batch too large: %lld banded pdf entries", (long long)sel.n);
    rc = KIO_ERR;
  }
  if (rc == KIO_OK && galign_cu_dev_reserve(&c->d_tsel, sizeof(int32_t) * ((size_t)sel.n + 1)) != KIO_OK)
    rc = KIO_ERR;
  cudaError_t e = cudaSuccess;
  if (rc == KIO_OK)
    e = cudaMemcpyAsync(c->d_tiles.p, c->h_tiles.p, sizeof(int32_t) * 4 * ntiles,
                        cudaMemcpyHostToDevice, c->stream);
  /* From pageable memory: returns once sel is staged, so it may be freed. */
  if (rc == KIO_OK && e == cudaSuccess && sel.n > 0)
    e = cudaMemcpyAsync(c->d_tsel.p, sel.v, sizeof(int32_t) * (size_t)sel.n,
                        cudaMemcpyHostToDevice, c->stream);
  free(sel.v);
  if (rc != KIO_OK) return rc;
  KIO_CUDA_TRY(e);
  return KIO_OK;
}

int galign_cu_ll_exact_launch(const galign_cuda *c, int64_t ntiles, const int32_t *tiles,
                              const int32_t *tsel, const void *utt, const float *feats,
                              const int32_t *upd, float *ll, int *flags, int *uflags,
                              cudaStream_t st) {
  if (ntiles <= 0) return KIO_OK;
  if (ntiles > 0x7fffffff) {
    KIO_ERROR("Batch too large: %lld frame tiles", (long long)ntiles);
    return KIO_ERR;
  }
#define GALIGN_LL_LAUNCH(DT)                                                              \
  GALIGN_LAUNCH_SMEM(galign_k_ll_exact<DT>, (unsigned)ntiles, 32 * GALIGN_LL_WARPS,       \
                     galign_cu_ll_exact_smem(c->dim), st, c->dgmm,                        \
                     (const float4 *)c->d_groups, (const int32_t *)c->d_grp_start, tiles, \
                     tsel, (const galign_cu_utt *)utt, feats, upd, c->log_eps, ll, flags, \
                     uflags)
  if (c->dim == 39) GALIGN_LL_LAUNCH(39);
  else if (c->dim == 40) GALIGN_LL_LAUNCH(40);
  else GALIGN_LL_LAUNCH(0);
#undef GALIGN_LL_LAUNCH
  KIO_CUDA_LAUNCHED();
  return KIO_OK;
}

int galign_cu_ll_exact_run(galign_cuda *c) {
  return galign_cu_ll_exact_launch(c, c->ll_ntiles, (const int32_t *)c->d_tiles.p,
                                   (const int32_t *)c->d_tsel.p, c->d_utt.p,
                                   (const float *)c->d_feats.p, (const int32_t *)c->d_ucol.p,
                                   (float *)c->d_ll.p, (int *)c->d_flags.p,
                                   (int *)c->d_uflags.p, c->stream);
}
