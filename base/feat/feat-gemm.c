/* transform-feats' matrix product in the exact float order of the bundle's
 * OpenBLAS 0.3.21 sgemm (Zen/Haswell: sgemm_kernel_8x4_haswell_2.c), so the
 * features are bit-identical to Kaldi's.
 *
 * Kaldi's row-major out(T x M) = in(T x K) * W^T is OpenBLAS's column-major
 * C(M x T) = W(M x K) * in^T: kernel rows are output dimensions, kernel
 * columns are frames. Each output is one of two FMA chains over k:
 *  - SEQ: acc = fma(x_k, w_k, acc) for k = 0..K-1 from 0;
 *  - PAIR (the kernels' two accumulator sets): for k < K & ~7, even k into A
 *    and odd k into B; the last K % 8 into A; result B + A.
 * then C = fma(acc, alpha = 1, 0). Which chain a (row, frame) gets depends
 * on the kernel calls the level-3 driver makes (plan_* below) and on the
 * kernel's tiling of each call (classify_call): 12-frame panels split into a
 * left and a right half, 16-row tiles staggered by 8, 8-row pair tiles at
 * the ends. The driver's calls depend on the number of threads OpenBLAS
 * uses: 1 and 2 are modelled (KALDI_GPU_DEV_FEATS_BLAS_THREADS, default: OpenBLAS's
 * choice, see kio_featop_blas_threads); more run the 1-thread order. Checked against the bundle on
 * M = 8..64 output dimensions, K = 13..92, every utterance of the recipe. */
#include "feat-ops.h"
#include "base/sys/settings.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

enum { C_SEQ = 0, C_PAIR = 1 };

static void mark(unsigned char *cls, int32_t m, int32_t r0, int32_t r1, int32_t f0, int32_t f1,
                 unsigned char c) {
  for (int32_t f = f0; f < f1; f++) memset(cls + (size_t)f * m + r0, c, (size_t)(r1 - r0));
}

/* One kernel call on rows [m0, m0 + mlen) and frames [n0, n0 + nlen). */
static void classify_call(unsigned char *cls, int32_t M, int32_t m0, int32_t mlen, int32_t n0,
                          int32_t nlen) {
  int32_t n = n0, cnt = nlen;
  for (; cnt >= 12; cnt -= 12, n += 12) {
    int32_t L0 = n, L1 = n + 6, R1 = n + 12;  /* left [L0, L1), right [L1, R1) */
    mark(cls, M, m0, m0 + mlen, n, n + 12, C_SEQ);
    if (mlen < 16) continue;
    int32_t a = m0, r = mlen;
    mark(cls, M, a, a + 8, L0, L1, C_PAIR);  /* COMPUTE_H_m8n6 */
    for (;;) {
      a += 8; r -= 8;                        /* COMPUTE_R_m16n6 (SEQ) */
      if (r < 16) { mark(cls, M, a, a + 8, L0, L1, C_PAIR); break; }  /* T_m8n6(L) */
      a += 8; r -= 8;                        /* COMPUTE_L_m16n6 (SEQ) */
      if (r < 16) { mark(cls, M, a, a + 8, L1, R1, C_PAIR); break; }  /* T_m8n6(R) */
    }
  }
  for (; cnt >= 8; cnt -= 8, n += 8) mark(cls, M, m0, m0 + mlen, n, n + 8, C_SEQ);
  for (; cnt >= 4; cnt -= 4, n += 4) {       /* COMPUTE_m8n4: pairs */
    mark(cls, M, m0, m0 + mlen, n, n + 4, C_SEQ);
    mark(cls, M, m0, m0 + (mlen & ~7), n, n + 4, C_PAIR);
  }
  if (cnt > 0) mark(cls, M, m0, m0 + mlen, n, n + cnt, C_SEQ);
}

/* The level-3 driver's packing loop: kernel calls of min_jj frames. */
static void jj_chunks(unsigned char *cls, int32_t M, int32_t m0, int32_t mlen, int32_t n0,
                      int32_t n1) {
  for (int32_t j = n0; j < n1;) {
    int32_t w = n1 - j;
    if (w >= 12) w = 12;  /* (level3.c has the 2 * UNROLL_N case commented out) */
    else if (w > 4) w = 4;
    classify_call(cls, M, m0, mlen, j, w);
    j += w;
  }
}

static int32_t ceil_div(int32_t a, int32_t b) { return (a + b - 1) / b; }

/* Classification of all (frame, row) for T frames, M rows. */
static void classify(unsigned char *cls, int32_t T, int32_t M, int threads) {
  if (threads <= 1) {
    jj_chunks(cls, M, 0, M, 0, T);
    return;
  }
  /* 2 threads: rows split in halves (one per thread), frames split in
   * halves (each thread packs its own half); each half is packed in two
   * sub-blocks (DIVIDE_RATE 2); a thread's own sub-blocks are computed in
   * min_jj calls, the other thread's in whole sub-block calls. */
  int32_t nw = ceil_div(T, 2);
  int32_t mw = ceil_div(M, 2);
  int32_t nr[3] = {0, nw < T ? nw : T, T};
  for (int t = 0; t < 2; t++) {
    int32_t m0 = t ? mw : 0, mlen = t ? M - mw : mw;
    if (mlen <= 0) continue;
    for (int p = 0; p < 2; p++) {
      int32_t a = nr[p], b = nr[p + 1];
      if (b <= a) continue;
      int32_t div = ceil_div(b - a, 2);
      for (int32_t js = a; js < b; js += div) {
        int32_t e = js + div < b ? js + div : b;
        if (p == t) jj_chunks(cls, M, m0, mlen, js, e);
        else classify_call(cls, M, m0, mlen, js, e - js);
      }
    }
  }
}

/* Scalar chains (x: one frame, w: row of W, K). */
static inline float chain_seq(const float *x, const float *w, int32_t k) {
  float acc = 0.0f;
  for (int32_t q = 0; q < k; q++) acc = fmaf(x[q], w[q], acc);
  return fmaf(acc, 1.0f, 0.0f);
}
static inline float chain_pair(const float *x, const float *w, int32_t k) {
  float A = 0.0f, B = 0.0f;
  int32_t k8 = k & ~7, q = 0;
  for (; q < k8; q += 2) {
    A = fmaf(x[q], w[q], A);
    B = fmaf(x[q + 1], w[q + 1], B);
  }
  for (; q < k; q++) A = fmaf(x[q], w[q], A);
  return fmaf(B + A, 1.0f, 0.0f);
}

#if defined(__x86_64__)
/* 8 rows at once (wt: W^T, k x M): the same chains, lane-wise. */
__attribute__((target("avx2,fma")))
static void chains8(const float *x, const float *wt, int32_t M, int32_t k, int pair, float *o) {
  __m256 A = _mm256_setzero_ps(), B = _mm256_setzero_ps();
  int32_t q = 0;
  if (pair) {
    int32_t k8 = k & ~7;
    for (; q < k8; q += 2) {
      A = _mm256_fmadd_ps(_mm256_set1_ps(x[q]), _mm256_loadu_ps(wt + (size_t)q * M), A);
      B = _mm256_fmadd_ps(_mm256_set1_ps(x[q + 1]), _mm256_loadu_ps(wt + (size_t)(q + 1) * M), B);
    }
  }
  for (; q < k; q++)
    A = _mm256_fmadd_ps(_mm256_set1_ps(x[q]), _mm256_loadu_ps(wt + (size_t)q * M), A);
  if (pair) A = _mm256_add_ps(B, A);
  _mm256_storeu_ps(o, _mm256_fmadd_ps(A, _mm256_set1_ps(1.0f), _mm256_setzero_ps()));
}
#endif

#if defined(__x86_64__)
/* 8 rows: the SEQ chains of 8 frames (x[0..7]) and the PAIR chains of the
 * first 4, interleaved so that the FMA latency is hidden; each output lane
 * is still its own chain. */
__attribute__((target("avx2,fma")))
static void chains8x4(const float *const *x, const float *wt, int32_t M, int32_t k, int want_seq,
                      int want_pair, float (*sq)[8], float (*pr)[8]) {
  const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
  if (want_seq) {  /* 8 frames: x[4..7] are the next 4 (or repeat 0..3) */
    __m256 a0 = zero, a1 = zero, a2 = zero, a3 = zero, a4 = zero, a5 = zero, a6 = zero, a7 = zero;
    for (int32_t q = 0; q < k; q++) {
      __m256 w = _mm256_loadu_ps(wt + (size_t)q * M);
      a0 = _mm256_fmadd_ps(_mm256_set1_ps(x[0][q]), w, a0);
      a1 = _mm256_fmadd_ps(_mm256_set1_ps(x[1][q]), w, a1);
      a2 = _mm256_fmadd_ps(_mm256_set1_ps(x[2][q]), w, a2);
      a3 = _mm256_fmadd_ps(_mm256_set1_ps(x[3][q]), w, a3);
      a4 = _mm256_fmadd_ps(_mm256_set1_ps(x[4][q]), w, a4);
      a5 = _mm256_fmadd_ps(_mm256_set1_ps(x[5][q]), w, a5);
      a6 = _mm256_fmadd_ps(_mm256_set1_ps(x[6][q]), w, a6);
      a7 = _mm256_fmadd_ps(_mm256_set1_ps(x[7][q]), w, a7);
    }
    _mm256_storeu_ps(sq[0], _mm256_fmadd_ps(a0, one, zero));
    _mm256_storeu_ps(sq[1], _mm256_fmadd_ps(a1, one, zero));
    _mm256_storeu_ps(sq[2], _mm256_fmadd_ps(a2, one, zero));
    _mm256_storeu_ps(sq[3], _mm256_fmadd_ps(a3, one, zero));
    _mm256_storeu_ps(sq[4], _mm256_fmadd_ps(a4, one, zero));
    _mm256_storeu_ps(sq[5], _mm256_fmadd_ps(a5, one, zero));
    _mm256_storeu_ps(sq[6], _mm256_fmadd_ps(a6, one, zero));
    _mm256_storeu_ps(sq[7], _mm256_fmadd_ps(a7, one, zero));
  }
  if (want_pair) {
    __m256 A0 = zero, A1 = zero, A2 = zero, A3 = zero, B0 = zero, B1 = zero, B2 = zero, B3 = zero;
    int32_t k8 = k & ~7, q = 0;
    for (; q < k8; q += 2) {
      __m256 w = _mm256_loadu_ps(wt + (size_t)q * M), v = _mm256_loadu_ps(wt + (size_t)(q + 1) * M);
      A0 = _mm256_fmadd_ps(_mm256_set1_ps(x[0][q]), w, A0);
      A1 = _mm256_fmadd_ps(_mm256_set1_ps(x[1][q]), w, A1);
      A2 = _mm256_fmadd_ps(_mm256_set1_ps(x[2][q]), w, A2);
      A3 = _mm256_fmadd_ps(_mm256_set1_ps(x[3][q]), w, A3);
      B0 = _mm256_fmadd_ps(_mm256_set1_ps(x[0][q + 1]), v, B0);
      B1 = _mm256_fmadd_ps(_mm256_set1_ps(x[1][q + 1]), v, B1);
      B2 = _mm256_fmadd_ps(_mm256_set1_ps(x[2][q + 1]), v, B2);
      B3 = _mm256_fmadd_ps(_mm256_set1_ps(x[3][q + 1]), v, B3);
    }
    for (; q < k; q++) {
      __m256 w = _mm256_loadu_ps(wt + (size_t)q * M);
      A0 = _mm256_fmadd_ps(_mm256_set1_ps(x[0][q]), w, A0);
      A1 = _mm256_fmadd_ps(_mm256_set1_ps(x[1][q]), w, A1);
      A2 = _mm256_fmadd_ps(_mm256_set1_ps(x[2][q]), w, A2);
      A3 = _mm256_fmadd_ps(_mm256_set1_ps(x[3][q]), w, A3);
    }
    _mm256_storeu_ps(pr[0], _mm256_fmadd_ps(_mm256_add_ps(B0, A0), one, zero));
    _mm256_storeu_ps(pr[1], _mm256_fmadd_ps(_mm256_add_ps(B1, A1), one, zero));
    _mm256_storeu_ps(pr[2], _mm256_fmadd_ps(_mm256_add_ps(B2, A2), one, zero));
    _mm256_storeu_ps(pr[3], _mm256_fmadd_ps(_mm256_add_ps(B3, A3), one, zero));
  }
}
#endif

int kio_featop_blas_threads(void) {
  /* OpenBLAS's own order of precedence, after ours. */
  const char *e = kio_setting_str(KIO_SET_DEV_FEATS_BLAS_THREADS);
  if (!e) e = kio_setting_str(KIO_SET_OPENBLAS_NUM_THREADS);
  if (!e) e = kio_setting_str(KIO_SET_GOTO_NUM_THREADS);
  if (!e) e = kio_setting_str(KIO_SET_OMP_NUM_THREADS);
  long n = e ? strtol(e, NULL, 10) : 0;
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  if (n <= 0 || n > cpus) n = cpus;
  return n < 1 ? 1 : (int)n;
}

unsigned char *kio_featop_gemm_plan(int32_t T, int32_t k, int32_t M, int threads) {
  /* interface/gemm.c: one thread up to M*N*K = 131072 (measured on the
   * bundle), then at most one per 131072. */
  double mnk = (double)M * T * k, unit = 65536.0 * 2;
  if (mnk <= unit) threads = 1;
  else if (mnk / threads < unit) threads = (int)(mnk / unit);
  /* More threads are not modelled: the 1-thread order (Kaldi's result with
   * OPENBLAS_NUM_THREADS=1). K > 256 would be split by the driver. */
  if (threads > 2) threads = 1;
  if (k > 256) return NULL;
  unsigned char *cls = malloc((size_t)T * M + 1);
  if (!cls) return NULL;
  /* skx (SkylakeX kernels): one FMA chain per output, checked on the
   * fixtures' LDA features; plain: not modelled (one chain too). */
  if (kio_featop_profile() == KIO_FEATOP_HSW) classify(cls, T, M, threads);
  else memset(cls, C_SEQ, (size_t)T * M);
  return cls;
}

void kio_featop_gemm_frames(const unsigned char *cls, const float *in, int32_t base,
                            int32_t stride, int32_t t0, int32_t t1, int32_t k, const float *w,
                            int32_t ws, const float *wt, int32_t M, float *out) {
  int simd = kio_featop_simd();
  int32_t t = t0;
#if defined(__x86_64__)
  if (simd && wt)  /* 4 frames at a time, 8 rows at a time */
    for (; t + 8 <= t1; t += 8) {
      const float *xs[8];
      for (int f = 0; f < 8; f++) xs[f] = in + (size_t)(t + f - base) * stride;
      int32_t j = 0;
      for (; j + 8 <= M; j += 8) {
        int wp[2] = {0, 0};
        for (int f = 0; f < 8; f++) wp[f >> 2] |= memchr(cls + (size_t)(t + f) * M + j, C_PAIR, 8) != NULL;
        float sq[8][8], pr[8][8];
        chains8x4(xs, wt + j, M, k, 1, wp[0], sq, pr);
        if (wp[1]) chains8x4(xs + 4, wt + j, M, k, 0, 1, sq, pr + 4);
        for (int f = 0; f < 8; f++) {
          const unsigned char *c = cls + (size_t)(t + f) * M + j;
          float *o = out + (size_t)(t + f) * M + j;
          for (int i = 0; i < 8; i++) o[i] = c[i] == C_PAIR ? pr[f][i] : sq[f][i];
        }
      }
      for (int f = 0; f < 8; f++) {
        const unsigned char *c = cls + (size_t)(t + f) * M;
        float *o = out + (size_t)(t + f) * M;
        for (int32_t jj = j; jj < M; jj++)
          o[jj] = c[jj] == C_PAIR ? chain_pair(xs[f], w + (size_t)jj * ws, k)
                                  : chain_seq(xs[f], w + (size_t)jj * ws, k);
      }
    }
#endif
  for (; t < t1; t++) {
    const float *x = in + (size_t)(t - base) * stride;
    const unsigned char *c = cls + (size_t)t * M;
    float *o = out + (size_t)t * M;
    int32_t j = 0;
#if defined(__x86_64__)
    if (simd && wt)
      for (; j + 8 <= M; j += 8) {
        if (!memchr(c + j, C_PAIR, 8)) { chains8(x, wt + j, M, k, 0, o + j); continue; }
        if (!memchr(c + j, C_SEQ, 8)) { chains8(x, wt + j, M, k, 1, o + j); continue; }
        float sq[8], pr[8];  /* mixed: both chains, each lane takes its own */
        chains8(x, wt + j, M, k, 0, sq);
        chains8(x, wt + j, M, k, 1, pr);
        for (int32_t i = 0; i < 8; i++) o[j + i] = c[j + i] == C_PAIR ? pr[i] : sq[i];
      }
#endif
    for (; j < M; j++)
      o[j] = c[j] == C_PAIR ? chain_pair(x, w + (size_t)j * ws, k) : chain_seq(x, w + (size_t)j * ws, k);
  }
}

int kio_featop_gemm_exact(const float *in, int32_t T, int32_t k, const float *w, int32_t ws,
                          const float *wt, int32_t M, int threads, float *out) {
  unsigned char *cls = kio_featop_gemm_plan(T, k, M, threads);
  if (!cls) return -1;
  kio_featop_gemm_frames(cls, in, 0, k, 0, T, k, w, ws, wt, M, out);
  free(cls);
  return 0;
}
