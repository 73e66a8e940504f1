/* sgemv-order-check: which float summation order does an installed OpenBLAS
 * use for Kaldi's per-Gaussian log-likelihoods, and is it ours?
 *
 * Kaldi computes loglike = gconst + MI.x - 0.5 IV.x2 with two
 * cblas_sgemv(RowMajor, NoTrans) calls (= OpenBLAS sgemv_t, m = dim,
 * n = components). gpu-align/gmm-core.h reproduces the order of the
 * reference build (SkylakeX/Cooperlake kernels of OpenBLAS 0.3.21). This
 * tool dlopen()s a libopenblas, runs it on random models and frames for
 * dims 1..80 and 1..20 components, rows laid out with Kaldi's row stride
 * (D rounded up to 4 floats, Kaldi's lda), and compares bit for bit with
 *   "ours":    gmm-core.h (what the aligner uses; D = 4 and 8 in SkylakeX's
 *              small-m kernel order, galign_small_loglike),
 *   "haswell": the 4x4/4x2/4x1 kernels with the Haswell/Zen build's tail
 *              (no FMA), as KALDI_GPU_BLAS_PROFILE=hsw makes the aligner add it.
 * Prints the core OpenBLAS chose and one line per order:
 *   order ours mismatches N of M
 *   order haswell mismatches N of M
 * Exit 0 when the library was run (whatever matched), 2 when it cannot be
 * loaded. Usage: sgemv-order-check [LIBOPENBLAS] (default: $OPENBLAS_LIB,
 * $KALDI_BUNDLE/lib/libopenblas.so.0, libopenblas.so.0). */
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gpu-align/gmm-core.h"
#include "base/program/program.h"

typedef void (*sgemv_fn)(int order, int trans, int m, int n, float alpha, const float *a,
                         int lda, const float *x, int incx, float beta, float *y, int incy);
typedef char *(*corename_fn)(void);

static float loglike(const float *mi, const float *iv, float gconst, const float *x,
                     const float *x2, int32_t D, int32_t i, int32_t n, int haswell) {
  const int32_t nb = GALIGN_NB(D), m3 = D - nb;
  const int kern = galign_comp_kernel(i, n);
  float y = gconst;
  if (!haswell && kio_sgemv_skx_small(D, kio_kaldi_stride(D))) {
    y = kio_sgemv_skx_small_row(y, mi, x, 1, D, 1.0f, i, n);
    return kio_sgemv_skx_small_row(y, iv, x2, 1, D, -0.5f, i, n);
  }
  for (int pass = 0; pass < 2; pass++) {
    const float *a = pass ? iv : mi, *xx = pass ? x2 : x;
    const float alpha = pass ? -0.5f : 1.0f;
    if (nb > 0)
      y = y + (kern == 4 ? galign_k4x4_dot(a, xx, nb) : galign_sse_dot(a, xx, nb, kern == 1)) * alpha;
    if (m3) y = galign_tail_add_v(y, a + nb, xx + nb, m3, alpha, haswell);
  }
  return y;
}

static float urand(unsigned *s, float lo, float hi) {
  *s = *s * 1103515245u + 12345u;
  return lo + (hi - lo) * (float)((*s >> 8) & 0xffffff) / 16777216.0f;
}

int main(int argc, char **argv) {
  kio_program_start(argc, argv);
  const char *lib = argc > 1 ? argv[1] : getenv("OPENBLAS_LIB");
  char buf[4096];
  void *h = NULL;
  if (lib) h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (!h && !lib && getenv("KALDI_BUNDLE")) {
    snprintf(buf, sizeof buf, "%s/lib/libopenblas.so.0", getenv("KALDI_BUNDLE"));
    h = dlopen(buf, RTLD_NOW | RTLD_LOCAL);
  }
  if (!h && !lib) h = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
  if (!h) { fprintf(stderr, "sgemv-order-check: cannot load OpenBLAS: %s\n", dlerror()); return 2; }
  sgemv_fn sgemv = (sgemv_fn)dlsym(h, "cblas_sgemv");
  corename_fn core = (corename_fn)dlsym(h, "openblas_get_corename");
  if (!sgemv) { fprintf(stderr, "sgemv-order-check: no cblas_sgemv\n"); return 2; }
  printf("core %s\n", core ? core() : "unknown");
  enum { MAXD = 80, MAXN = 20 };
  static float mi[MAXN * MAXD], iv[MAXN * MAXD], x[MAXD], x2[MAXD], gc[MAXN], y[MAXN];
  long bad[2] = { 0, 0 }, total = 0;
  unsigned s = 12345;
  for (int rep = 0; rep < 40; rep++)
    for (int32_t D = 1; D <= MAXD; D++)
      for (int32_t n = 1; n <= MAXN; n++) {
        const int32_t lda = kio_kaldi_stride(D);
        for (int i = 0; i < n * lda; i++) { mi[i] = urand(&s, -3, 3); iv[i] = urand(&s, 0.05f, 4); }
        for (int i = 0; i < D; i++) { x[i] = urand(&s, -8, 8); x2[i] = x[i] * x[i]; }
        for (int i = 0; i < n; i++) y[i] = gc[i] = urand(&s, -200, -20);
        /* 101 = CblasRowMajor, 111 = CblasNoTrans */
        sgemv(101, 111, n, D, 1.0f, mi, lda, x, 1, 1.0f, y, 1);
        sgemv(101, 111, n, D, -0.5f, iv, lda, x2, 1, 1.0f, y, 1);
        for (int32_t i = 0; i < n; i++) {
          for (int o = 0; o < 2; o++) {
            float v = loglike(mi + i * lda, iv + i * lda, gc[i], x, x2, D, i, n, o);
            if (memcmp(&v, &y[i], sizeof v) != 0) bad[o]++;
          }
          total++;
        }
      }
  printf("order ours mismatches %ld of %ld\n", bad[0], total);
  printf("order haswell mismatches %ld of %ld\n", bad[1], total);
  return 0;
}
