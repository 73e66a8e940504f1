/* AVX-512 versions of the feature kernels of feat-ops.c, for hosts that have
 * it (simd.h picks them at run time). Each output element gets exactly the
 * operations of the scalar code, in the same order: the vectors run over
 * independent outputs (output dimensions of a frame), never across one
 * output's own chain, so the bits are the scalar code's (checked by
 * tests/unit/check_featsimd.c at every level the CPU has). */
#include "feat-ops.h"
#include "base/matrix/blas-profile.h"

#include <stddef.h>

#if defined(__x86_64__)
#include <immintrin.h>

#define T512 __attribute__((target("avx512f")))

static inline __mmask16 tail_mask(int32_t n) { return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1); }

/* ---- transform-feats, the SEQ chain for every output (blas-order.h):
 * out[t][j] = (fma(x[t][K-1], w[K-1][j], ... fma(x[t][0], w[0][j], 0)) + 0)
 * [+ off[j]], or the same with mul then add (unfused profiles). A tile is
 * F frames x NB blocks of 16 outputs: F * NB accumulators, each W^T row
 * loaded once per tile and used F times. ---- */
#define MAC16(fused, x, w, acc) \
  ((fused) ? _mm512_fmadd_ps((x), (w), (acc)) : _mm512_add_ps((acc), _mm512_mul_ps((x), (w))))
#define TILE(F, NB, FUSED)                                                               \
  T512 static void tile_##F##_##NB##_##FUSED(const float *in, int32_t stride, int32_t k, \
                                  const float *wt, int32_t M, int32_t j, __mmask16 last, \
                                  const float *off, float *out) {                       \
    __m512 acc[F][NB];                                                                   \
    _Pragma("GCC unroll 8") for (int f = 0; f < F; f++)                                  \
      _Pragma("GCC unroll 4") for (int b = 0; b < NB; b++) acc[f][b] = _mm512_setzero_ps(); \
    for (int32_t q = 0; q < k; q++) {                                                    \
      const float *w = wt + (size_t)q * M + j;                                           \
      __m512 wv[NB];                                                                     \
      _Pragma("GCC unroll 4") for (int b = 0; b < NB; b++)                               \
        wv[b] = b == NB - 1 ? _mm512_maskz_loadu_ps(last, w + 16 * b) : _mm512_loadu_ps(w + 16 * b); \
      _Pragma("GCC unroll 8") for (int f = 0; f < F; f++) {                              \
        __m512 x = _mm512_set1_ps(in[(size_t)f * stride + q]);                           \
        _Pragma("GCC unroll 4") for (int b = 0; b < NB; b++)                             \
          acc[f][b] = MAC16(FUSED, x, wv[b], acc[f][b]);                                 \
      }                                                                                  \
    }                                                                                    \
    __m512 z = _mm512_setzero_ps();                                                      \
    _Pragma("GCC unroll 4") for (int b = 0; b < NB; b++) {                               \
      __mmask16 mk = b == NB - 1 ? last : (__mmask16)0xffff;                             \
      __m512 ov = off ? _mm512_maskz_loadu_ps(mk, off + j + 16 * b) : z;                 \
      _Pragma("GCC unroll 8") for (int f = 0; f < F; f++) {                              \
        __m512 r = _mm512_add_ps(acc[f][b], z);                                          \
        if (off) r = _mm512_add_ps(r, ov);                                               \
        _mm512_mask_storeu_ps(out + (size_t)f * M + j + 16 * b, mk, r);                  \
      }                                                                                  \
    }                                                                                    \
  }
TILE(8, 1, 1)
TILE(8, 2, 1)
TILE(8, 3, 1)
TILE(4, 1, 1)
TILE(4, 2, 1)
TILE(4, 3, 1)
TILE(1, 1, 1)
TILE(1, 2, 1)
TILE(1, 3, 1)
TILE(8, 1, 0)
TILE(8, 2, 0)
TILE(8, 3, 0)
TILE(4, 1, 0)
TILE(4, 2, 0)
TILE(4, 3, 0)
TILE(1, 1, 0)
TILE(1, 2, 0)
TILE(1, 3, 0)

typedef void (*tile_fn)(const float *, int32_t, int32_t, const float *, int32_t, int32_t,
                        __mmask16, const float *, float *);
/* [fused][frames 8, 4, 1][blocks 1..3] */
static const tile_fn tiles[2][3][3] = {
  {{tile_8_1_0, tile_8_2_0, tile_8_3_0}, {tile_4_1_0, tile_4_2_0, tile_4_3_0},
   {tile_1_1_0, tile_1_2_0, tile_1_3_0}},
  {{tile_8_1_1, tile_8_2_1, tile_8_3_1}, {tile_4_1_1, tile_4_2_1, tile_4_3_1},
   {tile_1_1_1, tile_1_2_1, tile_1_3_1}}};

T512 void kio_featop_transform_avx512(int fused, const float *in, int32_t stride, int32_t T,
                                      int32_t k, const float *wt, int32_t M, const float *off,
                                      float *out) {
  const tile_fn(*tf)[3] = tiles[fused ? 1 : 0];
  for (int32_t j = 0; j < M; j += 48) {  /* up to 3 blocks of 16 outputs */
    int32_t w = M - j < 48 ? M - j : 48, nb = (w + 15) / 16;
    __mmask16 last = tail_mask(w - 16 * (nb - 1));
    int32_t t = 0;
    for (; t + 8 <= T; t += 8)
      tf[0][nb - 1](in + (size_t)t * stride, stride, k, wt, M, j, last, off, out + (size_t)t * M);
    for (; t + 4 <= T; t += 4)  /* tails, splice edges */
      tf[1][nb - 1](in + (size_t)t * stride, stride, k, wt, M, j, last, off, out + (size_t)t * M);
    for (; t < T; t++)
      tf[2][nb - 1](in + (size_t)t * stride, stride, k, wt, M, j, last, off, out + (size_t)t * M);
  }
}

/* ---- add-deltas: each output row block i (dim values) is the saxpy
 * sequence of feat-ops.c, 16 dims per vector. Which lanes are fused follows
 * the profile's saxpy (kio_blas_saxpy_fused: all dims, a multiple of 32, or
 * none), so a vector is either all FMA or all mul+add. Frames whose windows
 * are not clamped go 4 at a time: 4 independent chains hide the FMA
 * latency (each output's own chain is unchanged). ---- */
T512 static inline __m512 tap(int fused, __m512 s, __m512 x, __m512 acc) {
  return fused ? _mm512_fmadd_ps(s, x, acc) : _mm512_add_ps(acc, _mm512_mul_ps(s, x));
}

T512 void kio_featop_deltas_avx512(const float *in, int32_t frames, int32_t t0, int32_t t1,
                                   int32_t dim, int order, float *const *scales, const int *sdims,
                                   float *out) {
  int32_t odim = dim * (order + 1);
  int32_t nfused = kio_blas_saxpy_fused(kio_blas_profile(), dim);
  int32_t maxw = (sdims[order] - 1) / 2;  /* the widest window */
  for (int32_t t = t0; t < t1;) {
    int four = t >= maxw && t + 3 + maxw < frames && t + 4 <= t1;
    for (int i = 0; i <= order; i++) {
      int maxo = (sdims[i] - 1) / 2;
      for (int32_t d = 0; d < dim; d += 16) {
        __mmask16 mk = tail_mask(dim - d);
        int fused = nfused == dim || d + 16 <= nfused;
        if (four) {
          __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
          const float *p = in + (size_t)(t - maxo) * dim + d;
          for (int j = 0; j < 2 * maxo + 1; j++, p += dim) {
            float sc = scales[i][j];
            if (sc == 0.0f) continue;
            __m512 s = _mm512_set1_ps(sc);
            a0 = tap(fused, s, _mm512_maskz_loadu_ps(mk, p), a0);
            a1 = tap(fused, s, _mm512_maskz_loadu_ps(mk, p + dim), a1);
            a2 = tap(fused, s, _mm512_maskz_loadu_ps(mk, p + 2 * dim), a2);
            a3 = tap(fused, s, _mm512_maskz_loadu_ps(mk, p + 3 * dim), a3);
          }
          float *o = out + (size_t)t * odim + (size_t)i * dim + d;
          _mm512_mask_storeu_ps(o, mk, a0);
          _mm512_mask_storeu_ps(o + odim, mk, a1);
          _mm512_mask_storeu_ps(o + 2 * odim, mk, a2);
          _mm512_mask_storeu_ps(o + 3 * odim, mk, a3);
          continue;
        }
        __m512 acc = _mm512_setzero_ps();
        for (int j = -maxo; j <= maxo; j++) {
          float sc = scales[i][j + maxo];
          if (sc == 0.0f) continue;
          int32_t f = t + j;
          if (f < 0) f = 0;
          else if (f >= frames) f = frames - 1;
          acc = tap(fused, _mm512_set1_ps(sc), _mm512_maskz_loadu_ps(mk, in + (size_t)f * dim + d), acc);
        }
        _mm512_mask_storeu_ps(out + (size_t)t * odim + (size_t)i * dim + d, mk, acc);
      }
    }
    t += four ? 4 : 1;
  }
}

/* ---- apply-cmvn: x = x * scale (variance), then x + offset. The matrix
 * as one flat array against offset/scale repeated to lcm(dim, 16) values:
 * whole vectors, no masked store followed by an overlapping load (a row at
 * a time, each load waited for the previous row's store). ---- */
T512 void kio_featop_cmvn_apply_avx512(float *x, int32_t frames, int32_t dim, int var_norm,
                                       const float *offset, const float *scale) {
  float offp[1024], scp[1024];
  int32_t L = kio_featop_cmvn_pattern(dim, 16, offset, scale, offp, scp);
  if (L) {
    size_t n = (size_t)frames * (size_t)dim, e = 0;
    int32_t p = 0;
    for (; e + 16 <= n; e += 16) {
      __m512 v = _mm512_loadu_ps(x + e);
      if (var_norm) v = _mm512_mul_ps(v, _mm512_loadu_ps(scp + p));
      _mm512_storeu_ps(x + e, _mm512_add_ps(v, _mm512_loadu_ps(offp + p)));
      if ((p += 16) == L) p = 0;
    }
    if (e < n) {
      __mmask16 mk = tail_mask((int32_t)(n - e));
      __m512 v = _mm512_maskz_loadu_ps(mk, x + e);
      if (var_norm) v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(mk, scp + p));
      _mm512_mask_storeu_ps(x + e, mk, _mm512_add_ps(v, _mm512_maskz_loadu_ps(mk, offp + p)));
    }
    return;
  }
  for (int32_t t = 0; t < frames; t++) {
    float *r = x + (size_t)t * dim;
    for (int32_t d = 0; d < dim; d += 16) {
      __mmask16 mk = tail_mask(dim - d);
      __m512 v = _mm512_maskz_loadu_ps(mk, r + d);
      if (var_norm) v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(mk, scale + d));
      _mm512_mask_storeu_ps(r + d, mk, _mm512_add_ps(v, _mm512_maskz_loadu_ps(mk, offset + d)));
    }
  }
}
#endif
