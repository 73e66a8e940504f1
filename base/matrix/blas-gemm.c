/* Which chain (blas-order.h) each output of Kaldi's transform-feats product
 * gets in OpenBLAS 0.3.21's sgemm (blas-gemm.h).
 *
 * Kaldi's row-major out (T x M) = in (T x K) * W^T is OpenBLAS's
 * column-major C (M x T) = W (M x K) * in^T: kernel rows are output
 * dimensions, kernel columns are frames. Three layers decide an output's
 * chain, each checked against the Kaldi bundle's libopenblas (cblas_sgemm
 * on random data, every output bit for bit, 1 to 64 threads;
 * docs/journal/rounding.md):
 *  - interface/gemm.c: one thread when M*N*K <= 262144, else all of them;
 *  - level3_thread.c (2 threads or more; SWITCH_RATIO 2): nthreads_m
 *    threads along the rows (halved while rows < 2 * nthreads_m; 1 below 4
 *    rows), nthreads_n along the frames (ceil(n / (2 * nthreads_m)), capped
 *    at threads / nthreads_m); rows split in nthreads_m near-equal parts,
 *    frames in nthreads_m * nthreads_n parts (at least 2 frames each); each
 *    thread packs its frames in two halves, computes them in min_jj steps
 *    (3 * UNROLL_N, else UNROLL_N, else the rest) and the other threads'
 *    halves (of its row group) one kernel call each; level3.c (1 thread):
 *    all rows, frames in min_jj steps;
 *  - the kernel: per call, rows in tiles of UNROLL_M, then the remainders
 *    (4, 2, 1 rows...), frames in panels of UNROLL_N, then 2, 1; each
 *    (row tile, frame panel) kind has its accumulator layout (call_*).
 * SkylakeX and Cooperlake (the same kernels): small products go to a kernel
 * of their own before the driver (skx_small, 16-lane chains); the others
 * run the 16x4 kernel, one FMA chain per output, in GEMM_Q blocks of K
 * (SkylakeX 448, Cooperlake 320: the library's runtime table). */
#include "blas-gemm.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/matrix/blas-order.h"
#include "base/sys/log.h"
#include "base/sys/settings.h"

typedef void (*kernel_call)(unsigned char *cls, int32_t M, int32_t m0, int32_t mlen, int32_t n0,
                            int32_t nlen);

static void mark(unsigned char *cls, int32_t M, int32_t r0, int32_t r1, int32_t f0, int32_t f1,
                 unsigned char c) {
  for (int32_t f = f0; f < f1; f++) memset(cls + (size_t)f * M + r0, c, (size_t)(r1 - r0));
}

/* Haswell/Zen (sgemm_kernel_8x4_haswell_2.c): 12-frame panels split into a
 * left and a right half of 6, 16-row tiles staggered by 8 with 8-row PAIR
 * tiles at the ends; 8-frame panels SEQ; 4-frame panels PAIR on the rows
 * of whole 8-row tiles; the rest SEQ. */
static void call_hsw(unsigned char *cls, int32_t M, int32_t m0, int32_t mlen, int32_t n0,
                     int32_t nlen) {
  int32_t n = n0, cnt = nlen;
  for (; cnt >= 12; cnt -= 12, n += 12) {
    int32_t L0 = n, L1 = n + 6, R1 = n + 12;  /* left [L0, L1), right [L1, R1) */
    mark(cls, M, m0, m0 + mlen, n, n + 12, KIO_GEMM_SEQ);
    if (mlen < 16) continue;
    int32_t a = m0, r = mlen;
    mark(cls, M, a, a + 8, L0, L1, KIO_GEMM_PAIR);  /* COMPUTE_H_m8n6 */
    for (;;) {
      a += 8; r -= 8;                               /* COMPUTE_R_m16n6 (SEQ) */
      if (r < 16) { mark(cls, M, a, a + 8, L0, L1, KIO_GEMM_PAIR); break; }  /* T_m8n6(L) */
      a += 8; r -= 8;                               /* COMPUTE_L_m16n6 (SEQ) */
      if (r < 16) { mark(cls, M, a, a + 8, L1, R1, KIO_GEMM_PAIR); break; }  /* T_m8n6(R) */
    }
  }
  for (; cnt >= 8; cnt -= 8, n += 8) mark(cls, M, m0, m0 + mlen, n, n + 8, KIO_GEMM_SEQ);
  for (; cnt >= 4; cnt -= 4, n += 4) {              /* COMPUTE_m8n4: pairs */
    mark(cls, M, m0, m0 + mlen, n, n + 4, KIO_GEMM_SEQ);
    mark(cls, M, m0, m0 + (mlen & ~7), n, n + 4, KIO_GEMM_PAIR);
  }
  if (cnt > 0) mark(cls, M, m0, m0 + mlen, n, n + cnt, KIO_GEMM_SEQ);
}

/* The tile kind of offset off in a call of len: 0 the full tiles of u,
 * then 1, 2, ... for the remainder blocks u/2, u/4, ... that are there. */
static int tile_kind(int32_t off, int32_t len, int32_t u) {
  int32_t full = len & ~(u - 1);
  if (off < full) return 0;
  int32_t rem = len - full, o = off - full, base = 0;
  int k = 1;
  for (int32_t s = u >> 1; s >= 1; s >>= 1, k++)
    if (rem & s) {
      if (o < base + s) return k;
      base += s;
    }
  return k;
}

/* Prescott (gemm_kernel_8x4_sse3.S): [rows 8, 4, 2, 1][frames 4, 2, 1]. */
static void call_sse(unsigned char *cls, int32_t M, int32_t m0, int32_t mlen, int32_t n0,
                     int32_t nlen) {
  static const unsigned char tab[4][3] = {
    {KIO_GEMM_SEQ, KIO_GEMM_SEQ, KIO_GEMM_PAIR},
    {KIO_GEMM_SEQ, KIO_GEMM_PAIR, KIO_GEMM_PAIR},
    {KIO_GEMM_PAIR, KIO_GEMM_PAIR, KIO_GEMM_OCT},
    {KIO_GEMM_PAIR, KIO_GEMM_PAIR, KIO_GEMM_QUAD}};
  for (int32_t f = 0; f < nlen; f++) {
    int c = tile_kind(f, nlen, 4);
    unsigned char *row = cls + (size_t)(n0 + f) * M + m0;
    for (int32_t r = 0; r < mlen; r++) row[r] = tab[tile_kind(r, mlen, 8)][c];
  }
}

/* Nehalem (gemm_kernel_4x8_nehalem.S): SEQ but the one-row tiles of the
 * 4- and 2-frame panels (NHM1). */
static void call_nhm(unsigned char *cls, int32_t M, int32_t m0, int32_t mlen, int32_t n0,
                     int32_t nlen) {
  for (int32_t f = 0; f < nlen; f++) {
    int c = tile_kind(f, nlen, 8);
    unsigned char *row = cls + (size_t)(n0 + f) * M + m0;
    for (int32_t r = 0; r < mlen; r++)
      row[r] = tile_kind(r, mlen, 4) == 2 && (c == 1 || c == 2) ? KIO_GEMM_NHM1 : KIO_GEMM_SEQ;
  }
}

/* The driver's packing loop: kernel calls of min_jj frames. */
static void jj_chunks(kernel_call k, int32_t un, unsigned char *cls, int32_t M, int32_t m0,
                      int32_t mlen, int32_t n0, int32_t n1) {
  for (int32_t j = n0; j < n1;) {
    int32_t w = n1 - j;
    if (w >= 3 * un) w = 3 * un;  /* (level3*.c have the 2 * UNROLL_N case commented out) */
    else if (w > un) w = un;
    k(cls, M, m0, mlen, j, w);
    j += w;
  }
}

#define MAXT 64

/* level3_thread.c: the kernel calls of every thread. Returns 0 when it
 * hands the product to level3.c (one thread) after all. */
static int threaded(kernel_call k, int32_t un, unsigned char *cls, int32_t m, int32_t n,
                    int nthreads) {
  const int32_t sr = 2;  /* SWITCH_RATIO of the x86-64 builds */
  int32_t ntm, ntn;
  if (m < 2 * sr) {
    ntm = 1;
  } else {
    ntm = nthreads;
    while (m < ntm * sr) ntm /= 2;
  }
  if (n < sr * ntm) {
    ntn = 1;
  } else {
    ntn = (n + sr * ntm - 1) / (sr * ntm);
    if (ntm * ntn > nthreads) ntn = nthreads / ntm;
  }
  const int32_t nt = ntm * ntn;
  if (nt <= 1) {
    jj_chunks(k, un, cls, m, 0, m, 0, n);
    return 0;
  }
  int32_t rm[MAXT + 1], rn[MAXT + 1];
  rm[0] = 0;
  int32_t parts = 0;
  for (int32_t left = m; left > 0 && parts < ntm; parts++) {
    int32_t w = (left + ntm - parts - 1) / (ntm - parts);
    left -= w;
    if (left < 0) w += left;
    rm[parts + 1] = rm[parts] + w;
  }
  for (int32_t i = parts; i < ntm; i++) rm[i + 1] = rm[parts];
  rn[0] = 0;
  parts = 0;
  for (int32_t left = n; left > 0 && parts < nt; parts++) {
    int32_t w = (left + nt - parts - 1) / (nt - parts);
    if (w < sr) w = sr;
    left -= w;
    if (left < 0) w += left;
    rn[parts + 1] = rn[parts] + w;
  }
  for (int32_t i = parts; i < nt; i++) rn[i + 1] = rn[parts];
  for (int32_t p = 0; p < nt; p++) {
    int32_t pm = p % ntm, pn = p / ntm, m0 = rm[pm], ml = rm[pm + 1] - m0;
    if (ml <= 0) continue;
    for (int32_t q = pn * ntm; q < (pn + 1) * ntm; q++) {
      int32_t a = rn[q], b = rn[q + 1];
      if (b <= a) continue;
      int32_t div = (b - a + 1) / 2;  /* DIVIDE_RATE 2 */
      for (int32_t js = a; js < b; js += div) {
        int32_t e = js + div < b ? js + div : b;
        if (q == p) jj_chunks(k, un, cls, m, m0, ml, js, e);
        else k(cls, m, m0, ml, js, e - js);
      }
    }
  }
  return 1;
}

static void all_seq(unsigned char *cls, int32_t M, int32_t m0, int32_t mlen, int32_t n0,
                    int32_t nlen) {
  mark(cls, M, m0, m0 + mlen, n0, n0 + nlen, KIO_GEMM_SEQ);
}

/* SkylakeX's small-matrix path (interface/gemm.c before any threading:
 * sgemm_small_matrix_permit_skylakex for transform-feats' transposes, A
 * transposed and B not): M*N*K <= 1e6, M*N <= 1200 and K >= 32. */
static int skx_small(int32_t T, int32_t K, int32_t M) {
  return (double)M * T * K <= 1e6 && (int64_t)M * T <= 1200 && K >= 32;
}

/* Its kernel (sgemm_small_kernel_b0_tn_skylakex.c): rows in tiles of 4, 2,
 * 1 and frames in tiles of 4, 2, 1; the 4-row tiles and the 4-frame tiles
 * reduce their lanes by REDUCE_4, the others by _mm512_reduce_add_ps. */
static void call_skx_small(unsigned char *cls, int32_t M, int32_t T) {
  const int32_t m4 = M & ~3, t4 = T & ~3;
  for (int32_t f = 0; f < T; f++)
    for (int32_t r = 0; r < M; r++)
      cls[(size_t)f * M + r] = r < m4 || f < t4 ? KIO_GEMM_L16R : KIO_GEMM_L16G;
}

int kio_blas_gemm_needs_plan(int prof, int32_t K) {
  const int32_t q = kio_blas_gemm_q(prof);
  return prof == KIO_BLAS_HSW || prof == KIO_BLAS_SSE || prof == KIO_BLAS_NHM ||
         (kio_blas_skx(prof) && K >= 32) || K > q;
}

int kio_blas_gemm_plan(int prof, int32_t T, int32_t K, int32_t M, int threads,
                       unsigned char **out) {
  *out = NULL;
  if (T <= 0 || M <= 0 || K <= 0 || !kio_blas_gemm_needs_plan(prof, K)) return KIO_OK;
  const int small = kio_blas_skx(prof) && skx_small(T, K, M);
  if (kio_blas_skx(prof) && !small && K <= kio_blas_gemm_q(prof)) return KIO_OK;
  kernel_call k = prof == KIO_BLAS_HSW ? call_hsw : prof == KIO_BLAS_SSE ? call_sse
                : prof == KIO_BLAS_NHM ? call_nhm : all_seq;
  const int32_t un = prof == KIO_BLAS_NHM ? 8 : 4;    /* GEMM_UNROLL_N */
  unsigned char *cls = malloc((size_t)T * M);
  if (!cls) return KIO_ERR;
  if (small) {
    call_skx_small(cls, M, T);
    *out = cls;
    return KIO_OK;
  }
  double mnk = (double)M * T * K;
  int thr = 0;
  if (mnk <= 262144.0 || threads <= 1) jj_chunks(k, un, cls, M, 0, M, 0, T);
  else thr = threaded(k, un, cls, M, T, threads > MAXT ? MAXT : threads);
  const int32_t q = kio_blas_gemm_q(prof);
  if (thr && q > 0 && K > q)  /* the flag only matters for the K blocks */
    for (size_t e = 0; e < (size_t)T * M; e++) cls[e] |= KIO_GEMM_THREADED;
  *out = cls;
  return KIO_OK;
}

int kio_blas_threads(void) {
  const char *e = kio_setting_str(KIO_SET_DEV_FEATS_BLAS_THREADS);
  long n = e ? strtol(e, NULL, 10) : 0;
  if (n <= 0) {  /* OpenBLAS's blas_get_cpu_number */
    static const kio_setting order[] = {KIO_SET_OPENBLAS_NUM_THREADS, KIO_SET_GOTO_NUM_THREADS,
                                        KIO_SET_OMP_NUM_THREADS};
    for (int i = 0; i < 3 && n <= 0; i++) {
      const char *v = kio_setting_str(order[i]);
      n = v ? atol(v) : 0;
    }
  }
  long cpus = sysconf(_SC_NPROCESSORS_CONF);  /* get_num_procs: also the affinity mask */
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    long c = CPU_COUNT(&set);
    if (c > 0 && c < cpus) cpus = c;
  }
  if (n <= 0 || n > cpus) n = cpus;
  if (n > MAXT) n = MAXT;
  return n < 1 ? 1 : (int)n;
}
