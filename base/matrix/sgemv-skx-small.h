/* OpenBLAS's SkylakeX sgemv_t for short rows (header only, host and device).
 *
 * Kaldi's Gaussian log-likelihoods are cblas_sgemv(RowMajor, NoTrans) = the
 * sgemv_t kernel with m = D (row length) and n = M (rows). On AVX-512 cores
 * (openblas_get_corename() "SkylakeX", also Cooperlake/SapphireRapids
 * builds) OpenBLAS 0.3.21 sends every call with m <= 8 and lda == m to a
 * separate AVX-512 kernel per m, instead of the 4x4/4x2/4x1 kernels plus
 * D%4 tail that gpu-acc/acc-math.h and gpu-align/gmm-core.h model. Kaldi's
 * float matrices have their stride rounded up to 4 floats, so Kaldi reaches
 * it for D = 4 and D = 8 only (kio_sgemv_skx_small(D, (D + 3) & ~3)).
 *
 * That kernel takes the n rows in blocks (16 or 32, then 8, 4, 2, 1, the
 * sizes depending on m), and the float order of row j depends on the block
 * it falls in (j < n & ~15, & ~7, & ~3, & ~1, else the last odd row). With
 * xa[k] = x[k] * alpha, p[k] = a[k] * xa[k], q[k] = a[k] * x[k] (each one
 * rounded), fma(u, v, w) = u * v + w rounded once (the scalar C parts of
 * the kernel are contracted into FMAs by the compiler, the first product of
 * a sum being the fused one), row j's new y is:
 *   m=1: fma(a0, xa0, y)
 *   m=2: j < n&~15: y + fma(xa1, a1, a0*xa0)
 *        else:      ((a1*x1)*alpha + (a0*x0)*alpha) + y
 *   m=3: j < n&~7:  y + fma(xa2, a2, fma(xa1, a1, a0*xa0))
 *        j < n&~3:  y + fma(a2, xa2, fma(a0, xa0, a1*xa1))
 *        j < n&~1:  fma(alpha, (q0 + q1) + q2, y)
 *        last:      fma(alpha, fma(a2, x2, fma(a0, x0, a1*x1)), y)
 *   m=4: j < n&~3:  ((p0 + p1) + (p2 + p3)) + y
 *        j < n&~1:  fma(alpha, (q0 + q1) + (q2 + q3), y)
 *        last:      fma(alpha, ((q0 + q1) + q2) + q3, y)
 *   m=5,6,7: rows in blocks of 16/8 (m=5: also 4) s = fma chain
 *        fma(a_{m-1}, x_{m-1}, ... fma(a2, x2, fma(a1, x1, a0*x0))),
 *        then fma(s, alpha, y);
 *      m=6, rows in the block of 4: u = a0*x0 + fma(a1, x1, a2*x2),
 *        v = a3*x3 + fma(a4, x4, a5*x5); (u*alpha + v*alpha) + y;
 *      m=7, block of 4: u = fma(a0, x0, a1*x1) + fma(a4, x4, a5*x5),
 *        v = fma(a2, x2, a3*x3) + a6*x6; (u*alpha + v*alpha) + y;
 *      rows in the blocks of 2 and 1: m=5: y + ((((p0+p1)+p2)+p3)+p4);
 *        m=6,7: y + p0, then + p1, ... in turn;
 *   m=8: j < n&~3:  (((p0+p1) + (p2+p3)) + ((p4+p5) + (p6+p7))) + y
 *        j < n&~1:  y + (((p0+p1) + (p4+p5)) + ((p2+p3) + (p6+p7)))
 *        last:      y + ((((p0+p4) + (p1+p5)) + (p2+p6)) + (p3+p7))
 * Found by probing the Kaldi bundle's libopenblas.so.0 (0.3.21, core
 * SkylakeX) through dlopen and read against OpenBLAS's public
 * kernel/x86_64/sgemv_t_microk_skylakex_template.c; checked bit for bit by
 * tools/acc-blas-check and tools/sgemv-order-check (docs/journal/acc.md,
 * 2026-11-26). Operations are explicit (fmaf, * and + that the build does
 * not contract: -ffp-contract=off, nvcc --fmad=false). */
#ifndef KIO_SGEMV_SKX_SMALL_H
#define KIO_SGEMV_SKX_SMALL_H

#include <math.h>

#ifdef __CUDACC__
#define KIO_SGEMV_HD static inline __host__ __device__
#else
#define KIO_SGEMV_HD static inline
#endif

/* Does sgemv_t with row length D and row stride lda take the small-m
 * kernel (on a SkylakeX core)? */
KIO_SGEMV_HD int kio_sgemv_skx_small(int D, int lda) { return D >= 1 && D <= 8 && lda == D; }

/* Kaldi's row stride for a float matrix of D columns (16-byte rows). */
KIO_SGEMV_HD int kio_kaldi_stride(int D) { return (D + 3) & ~3; }

/* y + alpha * (a . x) for row j of n, as the small-m kernel rounds it;
 * 1 <= D <= 8; x[k] is at x[k * xs]. */
KIO_SGEMV_HD float kio_sgemv_skx_small_row(float y, const float *a, const float *x, int xs, int D,
                                           float alpha, int j, int n) {
  const int b16 = j < (n & ~15), b8 = j < (n & ~7), b4 = j < (n & ~3), b2 = j < (n & ~1);
  float xv[8], s, u, v;
  for (int k = 0; k < D; k++) xv[k] = x[k * xs];
  switch (D) {
  case 1:
    return fmaf(a[0], xv[0] * alpha, y);
  case 2: {
    if (b16) {
      float t = a[0] * (xv[0] * alpha);
      return y + fmaf(xv[1] * alpha, a[1], t);
    }
    float p0 = a[0] * xv[0], p1 = a[1] * xv[1];
    p0 = p0 * alpha;
    p1 = p1 * alpha;
    s = p1 + p0;
    return s + y;
  }
  case 3: {
    float xa0 = xv[0] * alpha, xa1 = xv[1] * alpha, xa2 = xv[2] * alpha;
    if (b8) {
      float t = a[0] * xa0;
      return y + fmaf(xa2, a[2], fmaf(xa1, a[1], t));
    }
    if (b4) {
      float t = a[1] * xa1;
      return y + fmaf(a[2], xa2, fmaf(a[0], xa0, t));
    }
    if (b2) {
      float q0 = a[0] * xv[0], q1 = a[1] * xv[1], q2 = a[2] * xv[2];
      s = q0 + q1;
      s = s + q2;
      return fmaf(alpha, s, y);
    }
    {
      float q1 = a[1] * xv[1];
      s = fmaf(a[2], xv[2], fmaf(a[0], xv[0], q1));
      return fmaf(alpha, s, y);
    }
  }
  case 4: {
    float q[4];
    if (b4) {
      for (int k = 0; k < 4; k++) q[k] = a[k] * (xv[k] * alpha);
      u = q[0] + q[1];
      v = q[2] + q[3];
      s = u + v;
      return s + y;
    }
    for (int k = 0; k < 4; k++) q[k] = a[k] * xv[k];
    u = q[0] + q[1];
    if (b2) {
      v = q[2] + q[3];
      s = u + v;
    } else {
      s = u + q[2];
      s = s + q[3];
    }
    return fmaf(alpha, s, y);
  }
  case 5:
  case 6:
  case 7: {
    if (D == 5 ? b4 : b8) {
      float t = a[0] * xv[0];
      s = fmaf(a[1], xv[1], t);
      for (int k = 2; k < D; k++) s = fmaf(a[k], xv[k], s);
      return fmaf(s, alpha, y);
    }
    if (D > 5 && b4) {
      if (D == 6) {
        float q0 = a[0] * xv[0], q2 = a[2] * xv[2], q3 = a[3] * xv[3], q5 = a[5] * xv[5];
        u = q0 + fmaf(a[1], xv[1], q2);
        v = q3 + fmaf(a[4], xv[4], q5);
      } else {
        float q1 = a[1] * xv[1], q3 = a[3] * xv[3], q5 = a[5] * xv[5], q6 = a[6] * xv[6];
        u = fmaf(a[0], xv[0], q1) + fmaf(a[4], xv[4], q5);
        v = fmaf(a[2], xv[2], q3) + q6;
      }
      u = u * alpha;
      v = v * alpha;
      s = u + v;
      return s + y;
    }
    float p[7];
    for (int k = 0; k < D; k++) p[k] = a[k] * (xv[k] * alpha);
    if (D == 5) {
      s = p[0] + p[1];
      for (int k = 2; k < 5; k++) s = s + p[k];
      return y + s;
    }
    for (int k = 0; k < D; k++) y = y + p[k];
    return y;
  }
  default: { /* 8 */
    float p[8];
    for (int k = 0; k < 8; k++) p[k] = a[k] * (xv[k] * alpha);
    float h01 = p[0] + p[1], h23 = p[2] + p[3], h45 = p[4] + p[5], h67 = p[6] + p[7];
    if (b4) {
      u = h01 + h23;
      v = h45 + h67;
      s = u + v;
      return s + y;
    }
    if (b2) {
      u = h01 + h45;
      v = h23 + h67;
      s = u + v;
      return y + s;
    }
    float c0 = p[0] + p[4], c1 = p[1] + p[5], c2 = p[2] + p[6], c3 = p[3] + p[7];
    s = c0 + c1;
    s = s + c2;
    s = s + c3;
    return y + s;
  }
  }
}

#endif
