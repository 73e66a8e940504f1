/* blas-order-check --diagnose: when our sgemm plan (base/matrix/blas-gemm.c)
 * misses OpenBLAS's value, which chain would have hit it? For every trial
 * with mismatches one row: the case (threads, T frames, K, M output dims;
 * small: SkylakeX's small-matrix permit holds, M*T*K <= 1e6, M*T <= 1200,
 * K >= 32; blk: K over the library's GEMM_Q), the mismatches, where they are
 * (r4: rows of whole 4-row tiles, f4: the other rows' whole 4-frame tiles,
 * edge: the rest), then for up to SAMPLE of the mismatched outputs how many
 * each candidate reproduces:
 *   seq/sequ      one K block, fused / mul+add (blas-order.h SEQ)
 *   pair quad oct one K block, fused (PAIR, QUAD, OCT)
 *   l16r l16g     the small-matrix kernel's 16-lane chains (L16R, L16G)
 *   blkT blk1     SEQ fused in GEMM_Q blocks of the library's table, split
 *                 as the threaded driver / level3.c split the last two
 *   bestQ         Q/split:count, the Q (32..1024, step 16) and split (t:
 *                 threaded, 1: level3.c) reproducing the most of them
 *   none          reproduced by no candidate above.
 * Included by blas-order-check.c only. */
#ifndef GEMM_DIAGNOSE_H
#define GEMM_DIAGNOSE_H

enum { SAMPLE = 48, MAX_ROWS = 250, NCAND = 9 };
static const char *const cand_name[NCAND] = {"seq", "sequ", "pair", "quad", "oct",
                                             "l16r", "l16g", "blkT", "blk1"};
static long d_cases, d_rows, d_bad, d_bad_small, d_bad_blk, d_bad_other, d_sampled, d_none;
static long d_hit[NCAND];

/* The core's blocking table from OpenBLAS 0.3.21's gotoblas_t (DYNAMIC_ARCH
 * builds): dtb_entries, offsetA, offsetB, align, then sgemm_p, sgemm_q,
 * sgemm_r, sgemm_unroll_m, sgemm_unroll_n. NULL unless it looks like that. */
static const int *gemm_table(void *h) {
  int **g = (int **)dlsym(h, "gotoblas");
  if (!g || !*g) return NULL;
  const int *t = *g + 4;
  int um = t[3], un = t[4];
  if (t[0] <= 0 || t[1] < 8 || t[1] > 8192 || t[2] <= 0 || um < 1 || um > 64 || (um & (um - 1)) ||
      un < 1 || un > 64)
    return NULL;
  return t;
}

/* SEQ fused in blocks of q (as kio_blas_gemm_block, with q and um given). */
static float seq_blocks(const float *x, const float *w, int32_t K, int32_t q, int32_t um, int thr) {
  float c = 0.0f;
  for (int32_t ls = 0; ls < K;) {
    int32_t rest = K - ls, l = rest;
    if (rest >= 2 * q) l = q;
    else if (rest > q) l = thr ? (rest + 1) / 2 : ((rest / 2 + um - 1) / um) * um;
    c = c + kio_blas_gemm_chain(KIO_GEMM_SEQ, 1, x + ls, 1, w + ls, 1, l);
    ls += l;
  }
  return c;
}

static int same(float a, float b) { return !memcmp(&a, &b, sizeof a); }

static void diag_case(int th, int32_t T, int32_t K, int32_t M, const float *in, int32_t ks,
                      const float *w, const float *ref, int32_t ms, const float *out,
                      const int *tab) {
  d_cases++;
  long nbad = 0, where[3] = {0, 0, 0};
  int32_t ff = -1, fr = -1;
  for (int32_t f = 0; f < T; f++)
    for (int32_t r = 0; r < M; r++)
      if (!same(out[(size_t)f * M + r], ref[(size_t)f * ms + r])) {
        if (!nbad) ff = f, fr = r;
        nbad++;
        where[r < (M & ~3) ? 0 : f < (T & ~3) ? 1 : 2]++;
      }
  if (!nbad) return;
  const int small = (double)M * T * K <= 1e6 && (int64_t)M * T <= 1200 && K >= 32;
  const int32_t q = tab ? tab[1] : kio_blas_gemm_q(prof), um = tab ? tab[3] : kio_blas_gemm_um(prof);
  const int thr = th > 1 && (double)M * T * K > 262144.0;
  const int blk = K > q;
  d_bad += nbad;
  if (small) d_bad_small += nbad;
  else if (blk) d_bad_blk += nbad;
  else d_bad_other += nbad;
  long hit[NCAND] = {0}, none = 0, n = 0;
  static long qhit[64][2];
  memset(qhit, 0, sizeof qhit);
  long step = nbad > SAMPLE ? nbad / SAMPLE : 1, idx = 0;
  for (int32_t f = 0; f < T && n < SAMPLE; f++)
    for (int32_t r = 0; r < M && n < SAMPLE; r++) {
      float want = ref[(size_t)f * ms + r];
      if (same(out[(size_t)f * M + r], want) || idx++ % step) continue;
      n++;
      const float *x = in + (size_t)f * ks, *wr = w + (size_t)r * ks;
      float v[NCAND];
      v[0] = 0.0f + kio_blas_gemm_chain(KIO_GEMM_SEQ, 1, x, 1, wr, 1, K);
      v[1] = 0.0f + kio_blas_gemm_chain(KIO_GEMM_SEQ, 0, x, 1, wr, 1, K);
      v[2] = 0.0f + kio_blas_gemm_chain(KIO_GEMM_PAIR, 1, x, 1, wr, 1, K);
      v[3] = 0.0f + kio_blas_gemm_chain(KIO_GEMM_QUAD, 1, x, 1, wr, 1, K);
      v[4] = 0.0f + kio_blas_gemm_chain(KIO_GEMM_OCT, 1, x, 1, wr, 1, K);
      v[5] = kio_blas_gemm_chain(KIO_GEMM_L16R, 1, x, 1, wr, 1, K);
      v[6] = kio_blas_gemm_chain(KIO_GEMM_L16G, 1, x, 1, wr, 1, K);
      v[7] = seq_blocks(x, wr, K, q, um, 1);
      v[8] = seq_blocks(x, wr, K, q, um, 0);
      int any = 0;
      for (int c = 0; c < NCAND; c++)
        if (same(v[c], want)) hit[c]++, any = 1;
      if (K > 32)
        for (int qi = 0; qi < 63; qi++) {
          int32_t qq = 32 + 16 * qi;
          if (qq >= K) break;
          for (int s = 0; s < 2; s++)
            if (same(seq_blocks(x, wr, K, qq, um, !s), want)) qhit[qi][s]++, any = 1;
        }
      if (!any) none++;
    }
  int bq = -1, bs = 0;
  for (int qi = 0; qi < 63; qi++)
    for (int s = 0; s < 2; s++)
      if (qhit[qi][s] > (bq < 0 ? 0 : qhit[bq][bs])) bq = qi, bs = s;
  d_sampled += n;
  d_none += none;
  for (int c = 0; c < NCAND; c++) d_hit[c] += hit[c];
  if (d_rows == 0) {
    printf("%3s %4s %5s %3s %2s %2s %12s %5s %5s %5s | %3s", "th", "T", "K", "M", "sm", "bk", "bad/total",
           "r4", "f4", "edge", "n");
    for (int c = 0; c < NCAND; c++) printf(" %4s", cand_name[c]);
    printf(" %10s %4s | first (f,r) ours openblas\n", "bestQ", "none");
  }
  if (d_rows++ >= MAX_ROWS) return;
  printf("%3d %4d %5d %3d %2d %2d %5ld/%-6ld %5ld %5ld %5ld | %3ld", th, T, K, M, small, blk, nbad,
         (long)T * M, where[0], where[1], where[2], n);
  for (int c = 0; c < NCAND; c++) printf(" %4ld", hit[c]);
  char best[32] = "-";
  if (bq >= 0) snprintf(best, sizeof best, "%d/%c:%ld", 32 + 16 * bq, bs ? '1' : 't', qhit[bq][bs]);
  printf(" %10s", best);
  printf(" %4ld | (%d,%d) %a %a%s\n", none, ff, fr, out[(size_t)ff * M + fr],
         ref[(size_t)ff * ms + fr], thr ? " threaded" : "");
}

static void diag_summary(void) {
  printf("diagnose: %ld trials, %ld with mismatches (%ld outputs: %ld small-matrix, %ld K over GEMM_Q, "
         "%ld other)%s\n",
         d_cases, d_rows, d_bad, d_bad_small, d_bad_blk, d_bad_other,
         d_rows > MAX_ROWS ? " (rows past the first 250 not printed)" : "");
  printf("diagnose: of %ld sampled mismatched outputs, reproduced by:", d_sampled);
  for (int c = 0; c < NCAND; c++) printf(" %s %ld", cand_name[c], d_hit[c]);
  printf("; by none (nor any Q) %ld\n", d_none);
}

#endif
