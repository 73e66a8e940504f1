/* Kaldi's FmllrDiagGmmAccs statistics (transform/fmllr-diag-gmm.cc) with
 * Kaldi's bits.
 *
 * Per posterior entry (frame x, pdf, weight): the pdf's component posteriors
 * in float (the accumulator's order, acc-cpu-fast.c), scaled by weight; the
 * frame's a += M^T post (means_invvars) and b += V^T post (inv_vars), its
 * count += sum(post): the same cblas_sgemv / cblas_sdot calls as Kaldi's, to
 * the Kaldi's own OpenBLAS (fmllr-blas.c). Entries of one frame gather
 * there until the features change (DataHasChanged: any element differs),
 * then the frame is committed (CommitSingleFrameStats): beta += count;
 * K += a x+^T (exact products of floats: one rounding per add, any order);
 * full: G[i] += b[i] * x+ x+^T for every i (daxpy over the packed
 * (D+1)(D+2)/2 elements: fused for the profile's first kio_blas_daxpy_fused,
 * mul then add after); else only G[i](i,i), (D,i), (D,D) as Kaldi does.
 *
 * Each G element is one chain of adds in frame order, so the committed
 * frames are buffered and applied in blocks: a tile of G in registers
 * across the block (AVX2: 4 rows x 8 elements), tiles split over threads
 * (gpu-acc/mllt-acc.c's scheme). Results do not depend on the block size,
 * SIMD or threads. */
#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/matrix/blas-order.h"
#include "base/matrix/blas-profile.h"
#include "base/sys/log.h"
#include "base/sys/settings.h"
#include "fmllr/fmllr-internal.h"
#include "gpu-acc/acc-internal.h"

#define AVX2 __attribute__((target("avx2,fma")))
#define BLOCK 64  /* committed frames per block of G updates */
/* T holds the block's x+ x+^T in groups of 8 packed elements, frame by
 * frame within a group: a tile's operands are contiguous. */
#define TIDX(p, n) ((size_t)((p) >> 3) * (BLOCK * 8) + (size_t)(n) * 8 + ((p) & 7))

int fmllr_accs_new(fmllr_accs **out, const fmllr_blas *b, int32_t dim, int full, int threads) {
  *out = NULL;
  fmllr_accs *s = calloc(1, sizeof *s);
  if (!s) goto oom;
  s->blas = b;
  s->D = dim;
  s->P = (dim + 1) * (dim + 2) / 2;
  s->full = full;
  s->nfused = kio_blas_daxpy_fused(kio_blas_profile(), s->P);
  __builtin_cpu_init();
  s->simd = !kio_setting_flag(KIO_SET_DEV_NO_SIMD, 0) && __builtin_cpu_supports("avx2") &&
            __builtin_cpu_supports("fma");
  s->K = malloc(sizeof(double) * (size_t)dim * (size_t)(dim + 1));
  s->G = malloc(sizeof(double) * (size_t)dim * (size_t)s->P);
  s->x = malloc(sizeof(float) * (size_t)dim * 3);
  s->x2 = malloc(sizeof(float) * (size_t)dim);
  s->xp = malloc(sizeof(double) * ((size_t)dim + 1 + (size_t)((s->P + 7) & ~7)));
  if (s->xp) s->row = s->xp + dim + 1;
  if (!s->xp || !s->K || !s->G || !s->x || !s->x2) goto oom;
  s->a = s->x + dim;
  s->b = s->a + dim;
  if (full) {
    s->A = malloc(sizeof(double) * BLOCK * (size_t)dim);
    s->T = malloc(sizeof(double) * BLOCK * (size_t)((s->P + 7) & ~7));
    if (!s->A || !s->T) goto oom;
    if (threads <= 0) threads = gacc_par_threads();
    if (threads > 1) s->par = gacc_par_new(threads);  /* NULL: serially */
  }
  fmllr_accs_reset(s);
  *out = s;
  return KIO_OK;
oom:
  fmllr_accs_free(s);
  KIO_ERROR("Out of memory for fMLLR statistics of dimension %d", (int)dim);
  return KIO_ERR;
}

void fmllr_accs_free(fmllr_accs *s) {
  if (!s) return;
  if (s->par) gacc_par_free(s->par);
  free(s->K);
  free(s->G);
  free(s->x);
  free(s->x2);
  free(s->xp);
  free(s->A);
  free(s->T);
  free(s->post);
  free(s);
}

void fmllr_accs_reset(fmllr_accs *s) {
  const int32_t D = s->D;
  s->beta = 0.0;
  memset(s->K, 0, sizeof(double) * (size_t)D * (size_t)(D + 1));
  memset(s->G, 0, sizeof(double) * (size_t)D * (size_t)s->P);
  memset(s->x, 0, sizeof(float) * (size_t)D * 3);
  s->count = 0.0;
  s->nb = 0;
}

/* ---------------- the block of G updates ---------------- */

/* Rows [j0, j1) x elements [p0, p1), one element at a time. */
static void upd_scalar(fmllr_accs *s, int32_t j0, int32_t j1, int32_t p0, int32_t p1) {
  const int32_t D = s->D, P = s->P, nf = s->nfused, nb = s->nb;
  for (int32_t j = j0; j < j1; j++)
    for (int32_t p = p0; p < p1; p++) {
      double g = s->G[(size_t)j * P + p];
      for (int n = 0; n < nb; n++) {
        double a = s->A[(size_t)n * D + j], t = s->T[TIDX(p, n)];
        if (p < nf) g = fma(a, t, g);
        else {
          double q = a * t;
          g = g + q;
        }
      }
      s->G[(size_t)j * P + p] = g;
    }
}


/* Rows j..j+3, elements p..p+7, all fused or none (the accumulators
 * written out: the compiler keeps them in registers). */
#define TILE_STEP(OP)                                                        \
  for (int n = 0; n < nb; n++, a += D, t += 8) {                             \
    __m256d t0 = _mm256_loadu_pd(t), t1 = _mm256_loadu_pd(t + 4);            \
    __m256d a0 = _mm256_broadcast_sd(a), a1 = _mm256_broadcast_sd(a + 1);    \
    c00 = OP(a0, t0, c00);                                                   \
    c01 = OP(a0, t1, c01);                                                   \
    c10 = OP(a1, t0, c10);                                                   \
    c11 = OP(a1, t1, c11);                                                   \
    __m256d a2 = _mm256_broadcast_sd(a + 2), a3 = _mm256_broadcast_sd(a + 3); \
    c20 = OP(a2, t0, c20);                                                   \
    c21 = OP(a2, t1, c21);                                                   \
    c30 = OP(a3, t0, c30);                                                   \
    c31 = OP(a3, t1, c31);                                                   \
  }
#define MULADD(x, y, c) _mm256_add_pd(c, _mm256_mul_pd(x, y))

AVX2 static void tile_avx2(fmllr_accs *s, int32_t j, int32_t p, int fused) {
  const int32_t D = s->D, P = s->P, nb = s->nb;
  double *g = s->G + (size_t)j * P + p;
  __m256d c00 = _mm256_loadu_pd(g), c01 = _mm256_loadu_pd(g + 4);
  __m256d c10 = _mm256_loadu_pd(g + P), c11 = _mm256_loadu_pd(g + P + 4);
  __m256d c20 = _mm256_loadu_pd(g + 2 * P), c21 = _mm256_loadu_pd(g + 2 * P + 4);
  __m256d c30 = _mm256_loadu_pd(g + 3 * P), c31 = _mm256_loadu_pd(g + 3 * P + 4);
  const double *a = s->A + j, *t = s->T + TIDX(p, 0);
  if (fused) {
    TILE_STEP(_mm256_fmadd_pd)
  } else {
    TILE_STEP(MULADD)
  }
  _mm256_storeu_pd(g, c00);
  _mm256_storeu_pd(g + 4, c01);
  _mm256_storeu_pd(g + P, c10);
  _mm256_storeu_pd(g + P + 4, c11);
  _mm256_storeu_pd(g + 2 * P, c20);
  _mm256_storeu_pd(g + 2 * P + 4, c21);
  _mm256_storeu_pd(g + 3 * P, c30);
  _mm256_storeu_pd(g + 3 * P + 4, c31);
}

/* Rows j..j+5, elements p..p+7: twelve accumulators (FMA latency hidden). */
#define TILE6_STEP(OP)                                                       \
  for (int n = 0; n < nb; n++, a += D, t += 8) {                             \
    __m256d t0 = _mm256_loadu_pd(t), t1 = _mm256_loadu_pd(t + 4);            \
    __m256d a0 = _mm256_broadcast_sd(a), a1 = _mm256_broadcast_sd(a + 1);    \
    __m256d a2 = _mm256_broadcast_sd(a + 2);                                 \
    c00 = OP(a0, t0, c00);                                                   \
    c01 = OP(a0, t1, c01);                                                   \
    c10 = OP(a1, t0, c10);                                                   \
    c11 = OP(a1, t1, c11);                                                   \
    c20 = OP(a2, t0, c20);                                                   \
    c21 = OP(a2, t1, c21);                                                   \
    a0 = _mm256_broadcast_sd(a + 3);                                         \
    a1 = _mm256_broadcast_sd(a + 4);                                         \
    a2 = _mm256_broadcast_sd(a + 5);                                         \
    c30 = OP(a0, t0, c30);                                                   \
    c31 = OP(a0, t1, c31);                                                   \
    c40 = OP(a1, t0, c40);                                                   \
    c41 = OP(a1, t1, c41);                                                   \
    c50 = OP(a2, t0, c50);                                                   \
    c51 = OP(a2, t1, c51);                                                   \
  }

AVX2 static void tile6_avx2(fmllr_accs *s, int32_t j, int32_t p, int fused) {
  const int32_t D = s->D, P = s->P, nb = s->nb;
  double *g = s->G + (size_t)j * P + p;
  __m256d c00 = _mm256_loadu_pd(g), c01 = _mm256_loadu_pd(g + 4);
  __m256d c10 = _mm256_loadu_pd(g + P), c11 = _mm256_loadu_pd(g + P + 4);
  __m256d c20 = _mm256_loadu_pd(g + 2 * P), c21 = _mm256_loadu_pd(g + 2 * P + 4);
  __m256d c30 = _mm256_loadu_pd(g + 3 * P), c31 = _mm256_loadu_pd(g + 3 * P + 4);
  __m256d c40 = _mm256_loadu_pd(g + 4 * P), c41 = _mm256_loadu_pd(g + 4 * P + 4);
  __m256d c50 = _mm256_loadu_pd(g + 5 * P), c51 = _mm256_loadu_pd(g + 5 * P + 4);
  const double *a = s->A + j, *t = s->T + TIDX(p, 0);
  if (fused) {
    TILE6_STEP(_mm256_fmadd_pd)
  } else {
    TILE6_STEP(MULADD)
  }
  _mm256_storeu_pd(g, c00);
  _mm256_storeu_pd(g + 4, c01);
  _mm256_storeu_pd(g + P, c10);
  _mm256_storeu_pd(g + P + 4, c11);
  _mm256_storeu_pd(g + 2 * P, c20);
  _mm256_storeu_pd(g + 2 * P + 4, c21);
  _mm256_storeu_pd(g + 3 * P, c30);
  _mm256_storeu_pd(g + 3 * P + 4, c31);
  _mm256_storeu_pd(g + 4 * P, c40);
  _mm256_storeu_pd(g + 4 * P + 4, c41);
  _mm256_storeu_pd(g + 5 * P, c50);
  _mm256_storeu_pd(g + 5 * P + 4, c51);
}

/* Thread t of nt: its share of the 8-element column tiles (the columns
 * past them on the last thread); every row of them. A tile that straddles
 * the end of the fused part goes element by element. */
static void upd_part(void *arg, int t, int nt) {
  fmllr_accs *s = arg;
  const int32_t D = s->D, P = s->P, nt8 = P / 8;
  size_t lo, hi;
  gacc_par_range((size_t)nt8, t, nt, &lo, &hi);
  int32_t p0 = (int32_t)lo * 8, p1 = (int32_t)hi * 8;
  if (t == nt - 1) upd_scalar(s, 0, D, nt8 * 8, P);
  if (p1 <= p0) return;
  if (!s->simd) {
    upd_scalar(s, 0, D, p0, p1);
    return;
  }
  for (int32_t p = p0; p < p1; p += 8) {
    int fused = p + 8 <= s->nfused, none = p >= s->nfused;
    if (!fused && !none) {
      upd_scalar(s, 0, D, p, p + 8);
      continue;
    }
    int32_t j = 0;
    for (; j + 6 <= D; j += 6) tile6_avx2(s, j, p, fused);
    for (; j + 4 <= D; j += 4) tile_avx2(s, j, p, fused);
    if (j < D) upd_scalar(s, j, D, p, p + 8);
  }
}

static void flush_block(fmllr_accs *s) {
  if (s->nb == 0) return;
  if (s->par && s->nb * (size_t)s->D * (size_t)s->P >= 200000)
    gacc_par_run(s->par, upd_part, s);
  else
    upd_part(s, 0, 1);
  s->nb = 0;
}

/* ---------------- CommitSingleFrameStats ---------------- */

/* y[0..n) += alpha * x[0..n) where every product is exact (products of
 * floats): one rounding per element either way, so 4 at a time. */
AVX2 static void axpy_exact_avx2(int32_t n, double alpha, const double *x, double *y) {
  int32_t i = 0;
  __m256d va = _mm256_set1_pd(alpha);
  for (; i + 4 <= n; i += 4)
    _mm256_storeu_pd(y + i, _mm256_add_pd(_mm256_loadu_pd(y + i),
                                          _mm256_mul_pd(va, _mm256_loadu_pd(x + i))));
  for (; i < n; i++) {
    double q = alpha * x[i];
    y[i] = y[i] + q;
  }
}
/* y[0..n) = alpha * x[0..n) */
AVX2 static void scale_avx2(int32_t n, double alpha, const double *x, double *y) {
  int32_t i = 0;
  __m256d va = _mm256_set1_pd(alpha);
  for (; i + 4 <= n; i += 4) _mm256_storeu_pd(y + i, _mm256_mul_pd(va, _mm256_loadu_pd(x + i)));
  for (; i < n; i++) y[i] = alpha * x[i];
}

static void commit(fmllr_accs *s) {
  const int32_t D = s->D, P = s->P;
  if (s->count == 0.0) return;
  s->beta += s->count;
  double *xp = s->xp;
  for (int32_t j = 0; j < D; j++) xp[j] = (double)s->x[j];
  xp[D] = 1.0;
  for (int32_t d = 0; d < D; d++) {
    double ad = (double)s->a[d], *k = s->K + (size_t)d * (D + 1);
    if (s->simd) {
      axpy_exact_avx2(D + 1, ad, xp, k);
      continue;
    }
    for (int32_t j = 0; j <= D; j++) {
      double q = ad * xp[j];
      k[j] = k[j] + q;
    }
  }
  if (s->full) {
    double *a = s->A + (size_t)s->nb * D, *row = s->row;
    for (int32_t r = 0, k = 0; r <= D; k += ++r) {
      if (s->simd) scale_avx2(r + 1, xp[r], xp, row + k);
      else
        for (int32_t c = 0; c <= r; c++) row[k + c] = xp[r] * xp[c];
    }
    double *t = s->T + (size_t)s->nb * 8;
    for (int32_t k = 0; k < P; k += 8, t += BLOCK * 8) memcpy(t, row + k, sizeof(double) * 8);
    for (int32_t i = 0; i < D; i++) a[i] = (double)s->b[i];
    if (++s->nb == BLOCK) flush_block(s);
  } else {
    const size_t last = (size_t)D * (D + 1) / 2;
    for (int32_t i = 0; i < D; i++) {
      double *g = s->G + (size_t)i * P;
      float scale = s->b[i], xi = s->x[i];
      float q = scale * xi * xi;
      size_t ii = (size_t)i * (i + 1) / 2 + i;
      g[ii] = g[ii] + (double)q;
      g[last + i] = g[last + i] + (double)scale * 1.0 * (double)xi;
      g[last + D] = g[last + D] + (double)scale * 1.0 * 1.0;
    }
  }
  s->count = 0.0;
  memset(s->a, 0, sizeof(float) * (size_t)D * 2);
}

void fmllr_accs_flush(fmllr_accs *s) {
  commit(s);
  if (s->full) flush_block(s);
}

/* !data.ApproxEqual(x, 0.0): the norm of the difference is 0 only when
 * every element is equal (a NaN or infinity anywhere: changed). */
static int data_changed(const fmllr_accs *s, const float *x) {
  for (int32_t d = 0; d < s->D; d++) {
    float diff = x[d] - s->x[d];
    if (diff != 0.0f || !isfinite(x[d])) return 1;
  }
  return 0;
}

/* ---------------- AccumulateForGmm ---------------- */

int fmllr_accs_frame(fmllr_accs *s, const kio_diag_gmm *g, const float *x, float weight,
                     const char *key, int32_t t) {
  const int32_t D = s->D, M = g->num_comp;
  if (M > s->cap_post) {
    float *p = realloc(s->post, sizeof(float) * (size_t)M);
    if (!p) {
      KIO_ERROR("Out of memory");
      return KIO_ERR;
    }
    s->post = p;
    s->cap_post = M;
  }
  float ans = gacc_cpu_component_posteriors(g, x, s->x2, s->post);
  if (isnan(ans) || isinf(ans)) return gacc_bad_like(key, t);
  for (int32_t i = 0; i < M; i++) s->post[i] = s->post[i] * weight;
  if (data_changed(s, x)) {
    commit(s);
    memcpy(s->x, x, sizeof(float) * (size_t)D);
    s->count = 0.0;
    memset(s->a, 0, sizeof(float) * (size_t)D * 2);
  }
  const float one = 1.0f;
  s->count += (double)s->blas->sdot(M, s->post, 1, &one, 0);
  s->blas->sgemv(FM_ROW_MAJOR, FM_TRANS, M, D, 1.0f, g->means_invvars, D, s->post, 1, 1.0f,
                 s->a, 1);
  s->blas->sgemv(FM_ROW_MAJOR, FM_TRANS, M, D, 1.0f, g->inv_vars, D, s->post, 1, 1.0f, s->b, 1);
  return KIO_OK;
}
