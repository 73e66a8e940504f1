/* Level-1 OpenBLAS orders (see blas-level1.h). */
#include "base/matrix/blas-level1.h"

#include <math.h>

#include "base/matrix/blas-order.h"

/* kernel/x86_64/sdot.c: the first n & -32 elements by the micro-kernel (four
 * 8-lane FMA accumulators), the rest added to a double. The kernels reduce
 * the lanes in different orders: Haswell (the Zen and Haswell builds) folds
 * each accumulator's halves first, SkylakeX sums the accumulators first. */
/* Prescott's SSE kernel: four 4-lane accumulators over 16 elements,
 * summed (a0 + a1) + (a2 + a3), then the remaining groups of 4 added to
 * that lane-wise, the lanes summed (l0 + l1) + (l2 + l3), then the last
 * elements one by one; no fusing (any alignment). */
static float sdot_sse(int32_t n, const float *x, const float *y) {
  float a[4][4] = {{0}}, v[4];
  int32_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int k = 0; k < 4; k++)
      for (int l = 0; l < 4; l++) a[k][l] += x[i + 4 * k + l] * y[i + 4 * k + l];
  for (int l = 0; l < 4; l++) v[l] = (a[0][l] + a[1][l]) + (a[2][l] + a[3][l]);
  for (; i + 4 <= n; i += 4)
    for (int l = 0; l < 4; l++) v[l] += x[i + l] * y[i + l];
  float s = (v[0] + v[1]) + (v[2] + v[3]);
  for (; i < n; i++) s += x[i] * y[i];
  return s;
}

float kio_blas_sdot(int prof, int32_t n, const float *x, const float *y) {
  if (prof == KIO_BLAS_SSE) return sdot_sse(n, x, y);
  int32_t n1 = n & -32;
  float micro = 0.0f;
  if (n1) {
    float acc[4][8] = {{0}};
    for (int32_t i = 0; i < n1; i += 32)
      for (int k = 0; k < 4; k++)
        for (int l = 0; l < 8; l++)
          acc[k][l] = fmaf(x[i + 8 * k + l], y[i + 8 * k + l], acc[k][l]);
    float t[4];
    if (kio_blas_skx(prof)) {
      float a[8];
      for (int l = 0; l < 8; l++) a[l] = ((acc[0][l] + acc[1][l]) + acc[2][l]) + acc[3][l];
      for (int j = 0; j < 4; j++) t[j] = a[j] + a[j + 4];
    } else {
      for (int j = 0; j < 4; j++) {
        float s0 = acc[0][j] + acc[0][j + 4], s1 = acc[1][j] + acc[1][j + 4];
        float s2 = acc[2][j] + acc[2][j + 4], s3 = acc[3][j] + acc[3][j + 4];
        t[j] = (s0 + s1) + (s2 + s3);
      }
    }
    micro = (t[0] + t[1]) + (t[2] + t[3]);
  }
  double dot = 0.0;
  for (int32_t i = n1; i < n; i++) dot += y[i] * x[i];
  dot += micro;
  return (float)dot;
}

/* SkylakeX's kernel fuses every element; Haswell's the micro-kernel's part
 * (its C tail is built without FMA); the others do not fuse. */
void kio_blas_saxpy(int prof, int32_t n, float a, const float *x, float *y) {
  int32_t n1 = kio_blas_skx(prof) ? n : prof == KIO_BLAS_HSW ? (n & -32) : 0, i = 0;
  for (; i < n1; i++) y[i] = fmaf(a, x[i], y[i]);
  for (; i < n; i++) y[i] = y[i] + a * x[i];
}

/* The strided loops (x * 1.0 is exact, so fusing does not matter). The C
 * loop of the Nehalem to SkylakeX builds: float pairs added into a double;
 * doubles in two running sums of pairs. Prescott's assembly (Core2's and
 * Penryn's too): floats one after the other in float; doubles in four
 * running sums, the tail into the first, then (s0 + s1) + (s2 + s3).
 * dev/oracles/blas-order-check compares both (ssum, dsum) with a library. */
float kio_blas_ssum(int prof, int32_t n, const float *x) {
  int32_t i = 0;
  if (prof == KIO_BLAS_SSE) {
    float s = 0.0f;
    for (; i < n; i++) s += x[i];
    return s;
  }
  double dot = 0.0;
  for (int32_t n1 = n & -2; i < n1; i += 2) dot += x[i] + x[i + 1];
  for (; i < n; i++) dot += x[i];
  return (float)dot;
}

double kio_blas_dsum(int prof, int32_t n, const double *x) {
  int32_t i = 0, n1 = n & -4;
  if (prof == KIO_BLAS_SSE) {
    double s[4] = {0.0, 0.0, 0.0, 0.0};
    for (; i < n1; i += 4)
      for (int k = 0; k < 4; k++) s[k] += x[i + k];
    for (; i < n; i++) s[0] += x[i];
    return (s[0] + s[1]) + (s[2] + s[3]);
  }
  double t1 = 0.0, t2 = 0.0;
  for (; i < n1; i += 4) {
    t1 += x[i] + x[i + 2];
    t2 += x[i + 1] + x[i + 3];
  }
  for (; i < n; i++) t1 += x[i];
  return t1 + t2;
}
