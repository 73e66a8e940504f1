/* acc-blas-check: checks that the CPU accumulator rounds as a given BLAS
 * library does on this CPU (the OpenBLAS that stock Kaldi uses). Usage:
 *   acc-blas-check [--trials=N] LIBBLAS.so
 * Loads the library (dlopen), draws random Gaussians and frames and
 * compares, bit for bit, cblas_sgemv (Kaldi's log-likelihoods: gconsts +
 * MI.x - 0.5 IV.x^2, row-major, per pdf) with gacc_cpu_gemv_row and
 * cblas_dger (Kaldi's mean and variance accumulation) with
 * gacc_cpu_stats_row, for dimensions 1..48 and 1..20 components.
 * The sgemv rows are laid out alternately with Kaldi's row stride (D
 * rounded up to 4 floats, what Kaldi passes as lda) and with lda = D: on
 * SkylakeX cores, OpenBLAS takes another kernel for D <= 8 when lda == D
 * (base/matrix/sgemv-skx-small.h), which Kaldi reaches for D = 4 and 8 only; the
 * second layout checks that kernel's model for every D in 1..8.
 * Prints the profile and the number of differing values; exit 0 if none,
 * 1 if any, 2 if the library cannot be used. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/matrix/blas-profile.h"
#include "gpu-acc/gpu-acc.h"
#include "base/program/program.h"

typedef void (*sgemv_fn)(int, int, int, int, float, const float *, int, const float *, int,
                         float, float *, int);
typedef void (*dger_fn)(int, int, int, double, const double *, int, const double *, int,
                        double *, int);
enum { ROW_MAJOR = 101, NO_TRANS = 111, MAXD = 48, MAXM = 20 };

static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static double urand(void) {  /* [0, 1) */
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (double)(rng >> 11) * 0x1.0p-53;
}

int main(int argc, char **argv) {
  kio_program_start(argc, argv);
  long trials = 2000;
  int i = 1;
  for (; i < argc && !strncmp(argv[i], "--", 2); i++) {
    if (!strncmp(argv[i], "--trials=", 9)) trials = atol(argv[i] + 9);
    else { fprintf(stderr, "acc-blas-check: unknown option %s\n", argv[i]); return 2; }
  }
  if (i + 1 != argc) {
    fprintf(stderr, "Usage: acc-blas-check [--trials=N] LIBBLAS.so\n");
    return 2;
  }
  void *h = dlopen(argv[i], RTLD_NOW | RTLD_LOCAL);
  if (!h) { fprintf(stderr, "acc-blas-check: %s\n", dlerror()); return 2; }
  sgemv_fn sgemv = (sgemv_fn)dlsym(h, "cblas_sgemv");
  dger_fn dger = (dger_fn)dlsym(h, "cblas_dger");
  if (!sgemv || !dger) { fprintf(stderr, "acc-blas-check: no cblas_sgemv/cblas_dger\n"); return 2; }
  const char *(*core)(void) = (const char *(*)(void))dlsym(h, "openblas_get_corename");

  static float mi[MAXM * MAXD], iv[MAXM * MAXD], x[MAXD], x2[MAXD], y[MAXM], gc[MAXM];
  static double a_m[MAXM * MAXD], a_v[MAXM * MAXD], b_m[MAXM * MAXD], b_v[MAXM * MAXD];
  static double post[MAXM], xd[MAXD], xsq[MAXD];
  long bad_ll = 0, bad_acc = 0, n_ll = 0, n_acc = 0, bad_lay[2] = { 0, 0 };
  for (long t = 0; t < trials; t++) {
    int D = 1 + (int)(t % MAXD), M = 1 + (int)(urand() * MAXM);
    int lay = (int)((t / MAXD) & 1), lda = lay ? D : kio_kaldi_stride(D);
    for (int k = 0; k < M * lda; k++) {
      mi[k] = (float)((urand() - 0.5) * 20.0);
      iv[k] = (float)(urand() * 4.0);
    }
    for (int d = 0; d < D; d++) {
      x[d] = (float)((urand() - 0.5) * 40.0);
      x2[d] = x[d] * x[d];
      xd[d] = (double)x[d];
      xsq[d] = xd[d] * xd[d];
    }
    for (int m = 0; m < M; m++) y[m] = gc[m] = (float)(-urand() * 200.0);
    sgemv(ROW_MAJOR, NO_TRANS, M, D, 1.0f, mi, lda, x, 1, 1.0f, y, 1);
    sgemv(ROW_MAJOR, NO_TRANS, M, D, -0.5f, iv, lda, x2, 1, 1.0f, y, 1);
    for (int m = 0; m < M; m++) {
      float o = gacc_cpu_gemv_row(gc[m], mi + (size_t)m * lda, x, D, lda, 1.0f, m, M);
      o = gacc_cpu_gemv_row(o, iv + (size_t)m * lda, x2, D, lda, -0.5f, m, M);
      n_ll++;
      if (memcmp(&o, &y[m], sizeof o)) bad_ll++, bad_lay[lay]++;
    }
    /* accumulators already holding sums (where rounding differs) */
    for (int k = 0; k < M * D; k++) {
      a_m[k] = b_m[k] = (urand() - 0.5) * 1e4;
      a_v[k] = b_v[k] = urand() * 1e5;
    }
    for (int m = 0; m < M; m++) post[m] = (double)(float)urand();
    dger(ROW_MAJOR, M, D, 1.0, post, 1, xd, 1, a_m, D);
    dger(ROW_MAJOR, M, D, 1.0, post, 1, xsq, 1, a_v, D);
    for (int m = 0; m < M; m++)
      gacc_cpu_stats_row(b_m + (size_t)m * D, b_v + (size_t)m * D, post[m], xd, xsq, D);
    for (int k = 0; k < M * D; k++) {
      n_acc += 2;
      if (memcmp(&a_m[k], &b_m[k], sizeof a_m[k])) bad_acc++;
      if (memcmp(&a_v[k], &b_v[k], sizeof a_v[k])) bad_acc++;
    }
  }
  printf("acc-blas-check: profile %s, BLAS core %s: loglikes %ld/%ld differ "
         "(%ld with Kaldi's stride, %ld with lda = D), accumulators %ld/%ld differ\n",
         kio_blas_profile_name(kio_blas_profile()), core ? core() : "?", bad_ll, n_ll, bad_lay[0], bad_lay[1],
         bad_acc, n_acc);
  return bad_ll || bad_acc ? 1 : 0;
}
