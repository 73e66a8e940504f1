/* Level-1 OpenBLAS orders (see blas-level1.h). */
#include "base/matrix/blas-level1.h"

#include <math.h>

#include "base/matrix/blas-order.h"

/* kernel/x86_64/sdot.c: the first n & -32 elements by the micro-kernel (four
 * 8-lane FMA accumulators), the rest added to a double. The kernels reduce
 * the lanes in different orders: Haswell (the Zen and Haswell builds) folds
 * each accumulator's halves first, SkylakeX sums the accumulators first. */
float kio_blas_sdot(int prof, int32_t n, const float *x, const float *y) {
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
