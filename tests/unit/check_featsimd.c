/* The vector kernels of the feature chain (feat-ops.c AVX2, feat-simd.c
 * AVX-512, compressed-matrix.c's AVX-512 decompression) give the scalar
 * code's bits: every level the CPU has (base/sys/simd.h; KALDI_GPU_DEV_NO_SIMD's switch)
 * against level 0, on odd shapes (tails of 8 and 16 lanes, 1-3 frames,
 * clamped delta windows) and awkward values (-0, tiny, large). The scalar
 * code itself is checked against Kaldi by cli/featpipe.sh and
 * check_compressed. On a CPU without AVX2 only level 0 runs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/sys/settings.h"
#include "base/feat/feat-ops.h"
#include "base/matrix/blas-profile.h"
#include "base/io/io.h"
#include "base/sys/log.h"
#include "base/matrix/matrix.h"
#include "base/sys/simd.h"
#include "tests/lib/test-util.h"

static const char *kProfiles[] = {"skx", "hsw", "sse"};

static unsigned rng = 12345;
static float rnd(void) {
  rng = rng * 1103515245u + 12345u;
  unsigned v = (rng >> 8) & 0xffff;
  switch (v % 23) {  /* a few special values among the normal ones */
    case 0: return -0.0f;
    case 1: return 1e-30f;
    case 2: return -3.0e7f;
    default: return ((float)v / 65535.0f - 0.5f) * 17.0f;
  }
}
static void fill(float *x, size_t n) { for (size_t i = 0; i < n; i++) x[i] = rnd(); }

static int top_level(void) {
  kio_simd_set(-1);
  return kio_simd_level();
}

/* One kernel run at every level; each compared with level 0 bit for bit. */
#define AT_LEVELS(out, n, call)                                                   \
  do {                                                                            \
    int top = top_level();                                                        \
    float *ref = malloc(sizeof(float) * (n) + 1);                                 \
    for (int lv = 0; lv <= top; lv++) {                                           \
      kio_simd_set(lv);                                                           \
      call;                                                                       \
      if (lv == 0) memcpy(ref, out, sizeof(float) * (n));                         \
      else                                                                        \
        for (size_t e = 0; e < (size_t)(n); e++)                                  \
          ck_assert_msg(!memcmp(&ref[e], &out[e], 4), "%s level %d [%zu]: %.9g vs %.9g", \
                        #call, lv, e, ref[e], out[e]);                            \
    }                                                                             \
    kio_simd_set(-1);                                                             \
    free(ref);                                                                    \
  } while (0)

START_TEST(cmvn_apply_levels) {
  kio_setting_override(KIO_SET_BLAS_PROFILE, kProfiles[_i]);
  kio_blas_profile_reset();
  int dims[] = {1, 13, 16, 17, 40};
  for (size_t di = 0; di < sizeof dims / sizeof *dims; di++)
    for (int var = 0; var <= 1; var++) {
      int32_t dim = dims[di], T = 37;
      float *x0 = malloc(sizeof(float) * T * dim), *x = malloc(sizeof(float) * T * dim);
      float off[40], sc[40];
      fill(x0, (size_t)T * dim);
      fill(off, 40);
      fill(sc, 40);
      AT_LEVELS(x, (size_t)T * dim, (memcpy(x, x0, sizeof(float) * T * dim),
                                     kio_featop_cmvn_apply(x, T, dim, var, off, sc)));
      free(x0);
      free(x);
    }
}
END_TEST

START_TEST(deltas_levels) {
  kio_setting_override(KIO_SET_BLAS_PROFILE, kProfiles[_i]);
  kio_blas_profile_reset();
  int dims[] = {1, 13, 16, 20, 33, 40};
  int frames[] = {1, 2, 5, 50};
  for (size_t di = 0; di < sizeof dims / sizeof *dims; di++)
    for (size_t fi = 0; fi < sizeof frames / sizeof *frames; fi++)
      for (int order = 1; order <= 3; order++)
        for (int window = 1; window <= 3; window += 2) {
          int32_t dim = dims[di], T = frames[fi], od = dim * (order + 1);
          float **sc;
          int *sd;
          ck_assert_int_eq(kio_featop_delta_scales(order, window, &sc, &sd), 0);
          float *in = malloc(sizeof(float) * T * dim), *out = malloc(sizeof(float) * T * od);
          fill(in, (size_t)T * dim);
          AT_LEVELS(out, (size_t)T * od, kio_featop_deltas(in, T, dim, order, sc, sd, out));
          /* a frame range alone writes the same rows */
          if (T >= 5) {
            float *part = malloc(sizeof(float) * T * od);
            memcpy(part, out, sizeof(float) * T * od);
            memset(part + 2 * od, 0, sizeof(float) * 2 * od);
            kio_featop_deltas_range(in, T, 2, 4, dim, order, sc, sd, part);
            ck_assert(!memcmp(part, out, sizeof(float) * T * od));
            free(part);
          }
          for (int i = 0; i <= order; i++) free(sc[i]);
          free(sc);
          free(sd);
          free(in);
          free(out);
        }
}
END_TEST

/* The SEQ chain, fused (_i = 1) and mul then add (_i = 0). */
START_TEST(transform_levels) {
  const int fused = _i;
  int ms[] = {1, 5, 8, 16, 17, 40, 48, 50, 100};
  int ks[] = {1, 13, 40, 91};
  int ts[] = {1, 3, 8, 9, 23};
  for (size_t mi = 0; mi < sizeof ms / sizeof *ms; mi++)
    for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++)
      for (size_t ti = 0; ti < sizeof ts / sizeof *ts; ti++)
        for (int aff = 0; aff <= 1; aff++) {
          int32_t M = ms[mi], K = ks[ki], T = ts[ti];
          float *in = malloc(sizeof(float) * T * K), *wt = malloc(sizeof(float) * K * M);
          float *off = malloc(sizeof(float) * M), *out = malloc(sizeof(float) * T * M);
          fill(in, (size_t)T * K);
          for (int32_t i = 0; i < K * M; i++) wt[i] = rnd() * 0.1f;
          fill(off, (size_t)M);
          AT_LEVELS(out, (size_t)T * M,
                    kio_featop_transform(fused, in, T, K, wt, M, aff ? off : NULL, out));
          /* the plain chain, written out: the level-0 result */
          for (int32_t t = 0; t < T; t++)
            for (int32_t j = 0; j < M; j++) {
              float acc = 0.0f;
              for (int32_t q = 0; q < K; q++) {
                if (fused) acc = fmaf(in[t * K + q], wt[q * M + j], acc);
                else {
                  float p = in[t * K + q] * wt[q * M + j];
                  acc = acc + p;
                }
              }
              acc = 0.0f + acc;
              if (aff) acc = acc + off[j];
              ck_assert(!memcmp(&acc, &out[(size_t)t * M + j], 4));
            }
          /* overlapping rows (splice-feats read in place): row t at t * 3 */
          if (K >= 3) {
            int32_t S = 3, n = (T - 1) * S + K;
            float *big = malloc(sizeof(float) * n);
            fill(big, (size_t)n);
            AT_LEVELS(out, (size_t)T * M,
                      kio_featop_transform_rows(fused, big, S, T, K, wt, M, aff ? off : NULL, out));
            for (int32_t t = 0; t < T; t++) {
              float *o = malloc(sizeof(float) * M);
              kio_featop_transform(fused, big + (size_t)t * S, 1, K, wt, M, aff ? off : NULL, o);
              ck_assert(!memcmp(o, out + (size_t)t * M, sizeof(float) * M));
              free(o);
            }
            free(big);
          }
          free(in);
          free(wt);
          free(off);
          free(out);
        }
}
END_TEST

/* CM (one byte per value, column headers), written by hand so that any
 * shape and every byte value occur: the AVX-512 rows and the scalar tail
 * against the scalar code, around the 3-row tail and the 16-column vectors. */
START_TEST(decompress_levels) {
  int rows[] = {1, 3, 4, 5, 9, 64, 301};
  int cols[] = {1, 2, 13, 16, 17, 40};
  for (size_t ri = 0; ri < sizeof rows / sizeof *rows; ri++)
    for (size_t ci = 0; ci < sizeof cols / sizeof *cols; ci++) {
      int32_t R = rows[ri], C = cols[ci];
      size_t len = 3 + 16 + 8 * (size_t)C + (size_t)R * C;
      unsigned char *buf = malloc(len), *p = buf;
      float minv = -31.5f, range = 77.25f;
      memcpy(p, "CM ", 3), p += 3;
      memcpy(p, &minv, 4), memcpy(p + 4, &range, 4), memcpy(p + 8, &R, 4), memcpy(p + 12, &C, 4);
      p += 16;
      for (int32_t c = 0; c < C; c++) {
        uint16_t q[4];
        for (int i = 0; i < 4; i++) q[i] = (uint16_t)((unsigned)(rnd() * 1000.0f + 40000.0f) & 0xffff);
        for (int i = 0; i < 4; i++)  /* sorted: p0 <= p25 <= p75 <= p100 */
          for (int j = i + 1; j < 4; j++)
            if (q[j] < q[i]) { uint16_t t = q[i]; q[i] = q[j]; q[j] = t; }
        memcpy(p, q, 8), p += 8;
      }
      for (size_t i = 0; i < (size_t)R * C; i++) p[i] = (unsigned char)((i * 97u + (size_t)R) & 0xff);
      kio_matrix d = {0};
      AT_LEVELS(d.data, (size_t)R * C, {
        FILE *r = fmemopen(buf, len, "rb");
        ck_assert_int_eq(kio_matrix_read(r, 1, &d), KIO_OK);
        fclose(r);
        ck_assert(d.rows == R && d.cols == C);
      });
      free(buf);
      kio_matrix_free(&d);
    }
}
END_TEST

int main(void) {
  Suite *s = suite_create("featsimd");
  TCase *tc = tcase_create("core");
  tcase_add_loop_test(tc, cmvn_apply_levels, 0, 3);
  tcase_add_loop_test(tc, deltas_levels, 0, 3);
  tcase_add_loop_test(tc, transform_levels, 0, 2);
  tcase_add_test(tc, decompress_levels);
  suite_add_tcase(s, tc);
  printf("featsimd: levels 0..%d (0 scalar, 1 AVX2, 2 AVX-512)\n", top_level());
  return tu_run_suite(s);
}
