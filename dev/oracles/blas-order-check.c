/* blas-order-check: does our arithmetic round as an installed OpenBLAS does?
 * Loads the library (dlopen), asks its core, takes the rounding profile of
 * that core (or --profile=P) and compares, bit for bit on random data with
 * Kaldi's layouts and shapes:
 *   sgemv  cblas_sgemv(RowMajor, NoTrans) rows (Kaldi's log-likelihoods:
 *          row stride D rounded up to 4; also lda = D for D <= 8) with
 *          base/matrix/blas-order.h's kio_blas_gemv_row;
 *   daxpy  cblas_dger (Kaldi's mean/variance statistics) with its fused
 *          prefix kio_blas_daxpy_fused;
 *   saxpy  cblas_saxpy (add-deltas) with kio_blas_saxpy_fused;
 *   ssum   VectorBase<float>::Sum (cblas_sdot with a stride-0 one: gmm-est's
 *          transition update) with base/matrix/blas-level1.h's kio_blas_ssum;
 *   dsum   the same for double (cblas_ddot) with kio_blas_dsum;
 *   sdot   cblas_sdot (gmm-est's objective lines) with kio_blas_sdot (not
 *          counted in the exit status for Sandybridge and Nehalem);
 *   sgemm  cblas_sgemm (transform-feats: out = in * W^T, Kaldi's strides)
 *          with base/matrix/blas-gemm.c's plan run by base/feat/feat-gemm.c,
 *          at 1, 2, 3, 4, 8 and 16 OpenBLAS threads (openblas_set_num_threads).
 * Prints "core C", "profile P", the core's blocking table (GEMM_P/Q/R and
 * unrolls, read from the library's `gotoblas`), one "OP mismatches N of M"
 * line per operation. Exit 0: all equal; 1: some differ; 2: the library
 * cannot be used; 3: its core is none we reproduce (and no --profile).
 * --diagnose[=N]: sgemm only, N trials (600): per trial with mismatches, one
 * table row naming, for the mismatched outputs, which candidate chains would
 * have given OpenBLAS's value (dev/oracles/gemm-diagnose.h).
 * Usage: blas-order-check [--profile=P] [--quick] [--diagnose[=N]] LIBOPENBLAS
 * (OPENBLAS_CORETYPE picks another core of a DYNAMIC_ARCH library, as for
 * Kaldi; a core this CPU cannot run ends the process with SIGILL). */
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/feat/feat-ops.h"
#include "base/matrix/blas-gemm.h"
#include "base/matrix/blas-level1.h"
#include "base/matrix/blas-order.h"
#include "base/matrix/blas-profile.h"
#include "base/program/program.h"

typedef void (*sgemv_fn)(int, int, int, int, float, const float *, int, const float *, int,
                         float, float *, int);
typedef void (*dger_fn)(int, int, int, double, const double *, int, const double *, int,
                        double *, int);
typedef void (*saxpy_fn)(int, float, const float *, int, float *, int);
typedef float (*sdot_fn)(int, const float *, int, const float *, int);
typedef double (*ddot_fn)(int, const double *, int, const double *, int);
typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float *, int, const float *,
                         int, float, float *, int);
enum { ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112 };

static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static double urand(void) {  /* [0, 1) */
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (double)(rng >> 11) * 0x1.0p-53;
}
static float frand(float lo, float hi) { return (float)(lo + (hi - lo) * urand()); }

static int prof;
static long bad, total;
static int diagnose;

#include "dev/oracles/gemm-diagnose.h"

static void check_sgemv(sgemv_fn sgemv, int reps) {
  enum { MAXD = 100, MAXN = 24 };
  static float a[MAXN * MAXD], x[MAXD], y[MAXN], y0[MAXN];
  for (int rep = 0; rep < reps; rep++)
    for (int32_t D = 1; D <= MAXD; D += (D < 48 ? 1 : 13))
      for (int lay = 0; lay < (D <= 8 ? 2 : 1); lay++) {
        int32_t n = 1 + (int32_t)(urand() * MAXN), lda = lay ? D : kio_kaldi_stride(D);
        float alpha = rep & 1 ? -0.5f : 1.0f;
        for (int i = 0; i < n * lda; i++) a[i] = frand(-3, 3);
        for (int i = 0; i < D; i++) x[i] = frand(-8, 8);
        for (int i = 0; i < n; i++) y[i] = y0[i] = frand(-200, -20);
        sgemv(ROW_MAJOR, NO_TRANS, n, D, alpha, a, lda, x, 1, 1.0f, y, 1);
        for (int32_t j = 0; j < n; j++, total++) {
          float v = kio_blas_gemv_row(prof, y0[j], a + j * lda, x, 1, D, lda, alpha, j, n);
          if (memcmp(&v, &y[j], sizeof v)) bad++;
        }
      }
}

static void check_dger(dger_fn dger, int trials) {
  enum { MAXD = 48, MAXM = 20 };
  static double a[MAXM * MAXD], b[MAXM * MAXD], post[MAXM], xs[MAXD];
  for (int t = 0; t < trials; t++) {
    int M = 1 + (int)(urand() * MAXM), D = 1 + t % MAXD;
    for (int m = 0; m < M; m++) post[m] = (double)(float)urand();
    for (int d = 0; d < D; d++) {
      double xv = (double)frand(-20, 20);
      xs[d] = xv * xv;  /* Kaldi's data_sq: the inexact products */
    }
    for (int k = 0; k < M * D; k++) a[k] = b[k] = urand() * 1e5;
    dger(ROW_MAJOR, M, D, 1.0, post, 1, xs, 1, a, D);
    int32_t nf = kio_blas_daxpy_fused(prof, D);
    for (int m = 0; m < M; m++)
      for (int d = 0; d < D; d++, total++) {
        double *c = b + (size_t)m * D + d;
        if (d < nf) *c = fma(post[m], xs[d], *c);
        else {
          double p = post[m] * xs[d];
          *c = *c + p;
        }
        if (memcmp(c, a + (size_t)m * D + d, sizeof *c)) bad++;
      }
  }
}

static void check_saxpy(saxpy_fn saxpy, int trials) {
  static float x[200], y[200], z[200];
  for (int t = 0; t < trials; t++) {
    int n = 1 + t % 100;
    float s = frand(-1.5f, 1.5f);
    for (int i = 0; i < n; i++) x[i] = frand(-25, 25), y[i] = z[i] = frand(-25, 25);
    saxpy(n, s, x, 1, y, 1);
    int32_t nf = kio_blas_saxpy_fused(prof, n);
    for (int i = 0; i < n; i++, total++) {
      float v = i < nf ? fmaf(s, x[i], z[i]) : z[i] + s * x[i];
      if (memcmp(&v, &y[i], sizeof v)) bad++;
    }
  }
}

/* Sums of probabilities and counts as gmm-est forms them (a few entries
 * near 1, or thousands of occupancies). */
static void check_sums(sdot_fn sdot, ddot_fn ddot, int trials) {
  static float x[300];
  static double xd[300];
  const float one = 1.0f;
  const double done = 1.0;
  for (int t = 0; t < trials; t++) {
    int n = 1 + t % 300;
    float scale = t % 2 ? 1.0f / (float)n : 1000.0f;
    for (int i = 0; i < n; i++) x[i] = frand(0, 2) * scale, xd[i] = urand() * scale;
    float a = sdot(n, x, 1, &one, 0), b = kio_blas_ssum(prof, n, x);
    double ad = ddot(n, xd, 1, &done, 0), bd = kio_blas_dsum(prof, n, xd);
    total += 2;
    bad += (memcmp(&a, &b, sizeof a) != 0) + (memcmp(&ad, &bd, sizeof ad) != 0);
  }
}

/* cblas_sdot (gmm-est's objective lines) with kio_blas_sdot: reproduced for
 * the SkylakeX, Haswell and Prescott kernels (blas-level1.h). */
static void check_sdot(sdot_fn sdot, int trials) {
  static float x[700], y[700];
  for (int t = 0; t < trials; t++) {
    int n = 1 + t % 600, off = t % 3;  /* off: the kernels' alignment paths */
    for (int i = 0; i < n + off; i++) x[i] = frand(-1, 1), y[i] = frand(-100, 100);
    float a = sdot(n, x + off, 1, y + off, 1), b = kio_blas_sdot(prof, n, x + off, y + off);
    total++;
    bad += memcmp(&a, &b, sizeof a) != 0;
  }
}

static void check_sgemm(sgemm_fn sgemm, void (*set_threads)(int), int trials, const int *tab) {
  static const int threads[] = {1, 2, 3, 4, 8, 16};
  enum { MAXT = 400, MAXK = 1100, MAXM = 64 };
  float *in = malloc(sizeof(float) * MAXT * MAXK), *w = malloc(sizeof(float) * MAXM * MAXK);
  float *wt = malloc(sizeof(float) * MAXK * MAXM), *out = malloc(sizeof(float) * MAXT * MAXM);
  float *ref = malloc(sizeof(float) * MAXT * MAXM);
  long last = bad;
  for (int t = 0; t < trials; t++) {
    int th = threads[t % 6];
    int32_t T = 1 + (int32_t)(urand() * (urand() < 0.5 ? 40 : MAXT));
    /* K over GEMM_Q now and then (128 to 512 by profile): the driver's K blocks */
    int32_t K = t % 5 == 4 ? 129 + (int32_t)(urand() * (MAXK - 129)) : 1 + (int32_t)(urand() * 128);
    int32_t M = 1 + (int32_t)(urand() * MAXM);
    int32_t ks = kio_kaldi_stride(K), ms = kio_kaldi_stride(M);
    for (int32_t i = 0; i < T * ks; i++) in[i] = frand(-5, 5);
    for (int32_t i = 0; i < M * ks; i++) w[i] = frand(-1, 1);
    for (int32_t j = 0; j < M; j++)
      for (int32_t k = 0; k < K; k++) wt[(size_t)k * M + j] = w[(size_t)j * ks + k];
    set_threads(th);
    sgemm(ROW_MAJOR, NO_TRANS, TRANS, T, M, K, 1.0f, in, ks, w, ks, 0.0f, ref, ms);
    unsigned char *cls = NULL;
    if (kio_blas_gemm_plan(prof, T, K, M, th, &cls) != 0) { fprintf(stderr, "out of memory\n"); exit(2); }
    kio_featop_gemm_frames(prof, cls, in, 0, ks, 0, T, K, w, ks, wt, M, NULL, out);
    if (diagnose) diag_case(th, T, K, M, in, ks, w, ref, ms, out, tab);
    for (int32_t f = 0; f < T; f++)
      for (int32_t j = 0; j < M; j++, total++) {
        float v = out[(size_t)f * M + j];
        if (memcmp(&v, &ref[(size_t)f * ms + j], sizeof v)) bad++;
        if ((f + j) % 11 == 0) {  /* the scalar chain itself, now and then */
          float s = kio_blas_gemm_out(prof, cls ? cls[(size_t)f * M + j] : KIO_GEMM_SEQ,
                                      in + (size_t)f * ks, 1, w + (size_t)j * ks, 1, K);
          if (memcmp(&s, &v, sizeof s)) bad++;
        }
      }
    if (getenv("BLAS_CHECK_SHOW") && bad != last) printf("  T=%d K=%d M=%d threads=%d: %ld\n", T, K, M, th, bad - last);
    last = bad;
    free(cls);
  }
  free(in); free(w); free(wt); free(out); free(ref);
}

static void report(const char *op) {
  printf("%s mismatches %ld of %ld\n", op, bad, total);
  fflush(stdout);
}

int main(int argc, char **argv) {
  kio_program_start(argc, argv);
  const char *force = NULL;
  int quick = 0, i = 1, dtrials = 600;
  for (; i < argc && !strncmp(argv[i], "--", 2); i++) {
    if (!strncmp(argv[i], "--profile=", 10)) force = argv[i] + 10;
    else if (!strcmp(argv[i], "--quick")) quick = 1;
    else if (!strcmp(argv[i], "--diagnose")) diagnose = 1;
    else if (!strncmp(argv[i], "--diagnose=", 11) && atoi(argv[i] + 11) > 0)
      diagnose = 1, dtrials = atoi(argv[i] + 11);
    else { fprintf(stderr, "blas-order-check: unknown option %s\n", argv[i]); return 2; }
  }
  if (i + 1 != argc) {
    fprintf(stderr, "Usage: blas-order-check [--profile=P] [--quick] [--diagnose[=N]] LIBOPENBLAS\n");
    return 2;
  }
  void *h = dlopen(argv[i], RTLD_NOW | RTLD_LOCAL);
  if (!h) { fprintf(stderr, "blas-order-check: %s\n", dlerror()); return 2; }
  sgemv_fn sgemv = (sgemv_fn)dlsym(h, "cblas_sgemv");
  dger_fn dger = (dger_fn)dlsym(h, "cblas_dger");
  saxpy_fn saxpy = (saxpy_fn)dlsym(h, "cblas_saxpy");
  sgemm_fn sgemm = (sgemm_fn)dlsym(h, "cblas_sgemm");
  sdot_fn sdot = (sdot_fn)dlsym(h, "cblas_sdot");
  ddot_fn ddot = (ddot_fn)dlsym(h, "cblas_ddot");
  void (*set_threads)(int) = (void (*)(int))dlsym(h, "openblas_set_num_threads");
  const char *(*core)(void) = (const char *(*)(void))dlsym(h, "openblas_get_corename");
  if (!sgemv || !dger || !saxpy || !sgemm || !sdot || !ddot || !set_threads || !core) {
    fprintf(stderr, "blas-order-check: %s is no OpenBLAS (cblas_* or openblas_* missing)\n", argv[i]);
    return 2;
  }
  printf("core %s\n", core());
  prof = kio_blas_profile_parse(force ? force : core());
  if (prof < 0) {
    printf("profile none: core %s is not reproduced\n", core());
    return 3;
  }
  printf("profile %s (%s)\n", kio_blas_profile_name(prof), kio_blas_profile_kernels(prof));
  const int *tab = gemm_table(h);
  if (tab)
    printf("table sgemm_p %d sgemm_q %d sgemm_r %d unroll_m %d unroll_n %d (ours: q %d, unroll_m %d)\n",
           tab[0], tab[1], tab[2], tab[3], tab[4], kio_blas_gemm_q(prof), kio_blas_gemm_um(prof));
  else
    printf("table unknown (no gotoblas, or not the 0.3.21 layout)\n");
  fflush(stdout);
  if (diagnose) {
    check_sgemm(sgemm, set_threads, dtrials, tab);
    report("sgemm");
    diag_summary();
    return bad ? 1 : 0;
  }
  long all = 0;
  check_sgemv(sgemv, quick ? 6 : 40);
  report("sgemv"), all += bad, bad = total = 0;
  check_dger(dger, quick ? 300 : 2000);
  report("daxpy"), all += bad, bad = total = 0;
  check_saxpy(saxpy, quick ? 300 : 3000);
  report("saxpy"), all += bad, bad = total = 0;
  check_sums(sdot, ddot, quick ? 300 : 3000);
  report("sums"), all += bad, bad = total = 0;
  check_sdot(sdot, quick ? 600 : 6000);
  report("sdot");
  /* counted where we claim it (the other profiles: a last bit may differ) */
  if (kio_blas_fused(prof) || prof == KIO_BLAS_SSE) all += bad;
  bad = total = 0;
  check_sgemm(sgemm, set_threads, quick ? 60 : 600, tab);
  report("sgemm"), all += bad;
  return all ? 1 : 0;
}
