/* Kaldi's MlltAccs (transform/mllt.cc) on the CPU, with Kaldi's bits.
 *
 * Per posterior entry (frame x, pdf, weight): the pdf's component
 * posteriors in float (the accumulator's order, acc-cpu-fast.c), scaled by
 * weight; per component in order RandPrune (glibc rand() in Kaldi's order of
 * draws); a surviving component's offset o = mean - x (float, exact as
 * saxpy(-1)), in double; tmp = o o^T (dspr: exact products of floats);
 * G[j] += (double)(inv_var[j] * post) * tmp for every j (daxpy over the
 * packed D(D+1)/2 elements: fused for the profile's first
 * kio_blas_daxpy_fused elements, mul then add after); beta += post.
 *
 * Each G element is one chain of adds in survivor order, so survivors are
 * buffered and the updates applied in blocks: a tile of G stays in
 * registers across the block (AVX2: 4 rows x 8 elements), tiles split over
 * threads. Results do not depend on the block size, SIMD or threads. */
#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "acc-internal.h"
#include "base/io/io.h"
#include "base/matrix/blas-order.h"
#include "base/matrix/blas-profile.h"
#include "base/sys/log.h"
#include "base/sys/settings.h"
#include "gpu-acc/mllt.h"
#include "gpu-align/gpu-align.h"

#define BLOCK 64  /* survivors per block of updates */

struct gacc_mllt {
  int32_t D, P, nfused;
  float rand_prune;
  double beta;
  double *G;          /* D rows of P: G[j] packed lower, row-major (SpMatrix) */
  galign_rand rng;
  int simd;
  int nb;             /* survivors buffered */
  double *A;          /* BLOCK x D: alpha per row */
  double *T;          /* BLOCK x P: tmp, packed */
  float *post, *x2;   /* scratch: max components, D */
  int32_t cap_post;
  gacc_par *par;
};

/* Kaldi's RandUniform over rand() */
static float rand_uniform(galign_rand *r) {
  return (float)(((double)galign_rand_next(r) + 1.0) / (2147483647.0 + 2.0));
}

/* Kaldi's RandPrune (kaldi-math.h): float division and compare */
static float rand_prune(gacc_mllt *m, float post) {
  float th = m->rand_prune;
  if (post == 0.0f || fabsf(post) >= th) return post;
  float keep = rand_uniform(&m->rng) <= fabsf(post) / th ? th : 0.0f;
  return post >= 0 ? keep : -keep;
}

int gacc_mllt_new(gacc_mllt **out, int32_t dim, float rand_prune, int threads) {
  *out = NULL;
  if (dim <= 0) {
    KIO_ERROR("MLLT statistics of dimension %d", (int)dim);
    return KIO_ERR;
  }
  gacc_mllt *m = calloc(1, sizeof *m);
  if (!m) goto oom;
  m->D = dim;
  m->P = dim * (dim + 1) / 2;
  m->nfused = kio_blas_daxpy_fused(kio_blas_profile(), m->P);
  m->rand_prune = rand_prune;
  galign_srand(&m->rng, 1);  /* a fresh process: rand() as if srand(1) */
  __builtin_cpu_init();
  m->simd = !kio_setting_flag(KIO_SET_DEV_NO_SIMD, 0) && __builtin_cpu_supports("avx2") &&
            __builtin_cpu_supports("fma");
  m->G = calloc((size_t)dim * (size_t)m->P, sizeof(double));
  m->A = malloc(sizeof(double) * BLOCK * (size_t)dim);
  m->T = malloc(sizeof(double) * BLOCK * (size_t)m->P);
  m->x2 = malloc(sizeof(float) * (size_t)dim);
  if (!m->G || !m->A || !m->T || !m->x2) goto oom;
  if (threads <= 0) threads = gacc_par_threads();
  if (threads > 1) m->par = gacc_par_new(threads);  /* NULL: serially */
  *out = m;
  return KIO_OK;
oom:
  gacc_mllt_free(m);
  KIO_ERROR("Out of memory for MLLT statistics of dimension %d", (int)dim);
  return KIO_ERR;
}

void gacc_mllt_free(gacc_mllt *m) {
  if (!m) return;
  if (m->par) gacc_par_free(m->par);
  free(m->G);
  free(m->A);
  free(m->T);
  free(m->post);
  free(m->x2);
  free(m);
}

/* ---------------- the block of updates ---------------- */

typedef struct {
  gacc_mllt *m;
  int32_t ntiles;  /* 8-element column tiles that SIMD takes */
} upd_job;

/* Rows [j0, j1) x elements [p0, p1), one element at a time. */
static void upd_scalar(gacc_mllt *m, int32_t j0, int32_t j1, int32_t p0, int32_t p1) {
  const int32_t D = m->D, P = m->P, nf = m->nfused, nb = m->nb;
  for (int32_t j = j0; j < j1; j++)
    for (int32_t p = p0; p < p1; p++) {
      double g = m->G[(size_t)j * P + p];
      for (int n = 0; n < nb; n++) {
        double a = m->A[(size_t)n * D + j], t = m->T[(size_t)n * P + p];
        if (p < nf) g = fma(a, t, g);
        else {
          double q = a * t;
          g = g + q;
        }
      }
      m->G[(size_t)j * P + p] = g;
    }
}

#define AVX2 __attribute__((target("avx2,fma")))

/* Rows j..j+3, elements p..p+7, all fused or none. */
AVX2 static void tile_avx2(gacc_mllt *m, int32_t j, int32_t p, int fused) {
  const int32_t D = m->D, P = m->P, nb = m->nb;
  double *g = m->G + (size_t)j * P + p;
  __m256d c00 = _mm256_loadu_pd(g), c01 = _mm256_loadu_pd(g + 4);
  __m256d c10 = _mm256_loadu_pd(g + P), c11 = _mm256_loadu_pd(g + P + 4);
  __m256d c20 = _mm256_loadu_pd(g + 2 * P), c21 = _mm256_loadu_pd(g + 2 * P + 4);
  __m256d c30 = _mm256_loadu_pd(g + 3 * P), c31 = _mm256_loadu_pd(g + 3 * P + 4);
  const double *a = m->A + j, *t = m->T + p;
  if (fused) {
    for (int n = 0; n < nb; n++, a += D, t += P) {
      __m256d t0 = _mm256_loadu_pd(t), t1 = _mm256_loadu_pd(t + 4);
      __m256d a0 = _mm256_broadcast_sd(a), a1 = _mm256_broadcast_sd(a + 1);
      c00 = _mm256_fmadd_pd(a0, t0, c00);
      c01 = _mm256_fmadd_pd(a0, t1, c01);
      c10 = _mm256_fmadd_pd(a1, t0, c10);
      c11 = _mm256_fmadd_pd(a1, t1, c11);
      __m256d a2 = _mm256_broadcast_sd(a + 2), a3 = _mm256_broadcast_sd(a + 3);
      c20 = _mm256_fmadd_pd(a2, t0, c20);
      c21 = _mm256_fmadd_pd(a2, t1, c21);
      c30 = _mm256_fmadd_pd(a3, t0, c30);
      c31 = _mm256_fmadd_pd(a3, t1, c31);
    }
  } else {
    for (int n = 0; n < nb; n++, a += D, t += P) {
      __m256d t0 = _mm256_loadu_pd(t), t1 = _mm256_loadu_pd(t + 4);
      __m256d a0 = _mm256_broadcast_sd(a), a1 = _mm256_broadcast_sd(a + 1);
      c00 = _mm256_add_pd(c00, _mm256_mul_pd(a0, t0));
      c01 = _mm256_add_pd(c01, _mm256_mul_pd(a0, t1));
      c10 = _mm256_add_pd(c10, _mm256_mul_pd(a1, t0));
      c11 = _mm256_add_pd(c11, _mm256_mul_pd(a1, t1));
      __m256d a2 = _mm256_broadcast_sd(a + 2), a3 = _mm256_broadcast_sd(a + 3);
      c20 = _mm256_add_pd(c20, _mm256_mul_pd(a2, t0));
      c21 = _mm256_add_pd(c21, _mm256_mul_pd(a2, t1));
      c30 = _mm256_add_pd(c30, _mm256_mul_pd(a3, t0));
      c31 = _mm256_add_pd(c31, _mm256_mul_pd(a3, t1));
    }
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

/* Thread t of nt: its share of the column tiles (and of the columns past
 * them, on the last thread); every row of them. */
static void upd_part(void *arg, int t, int nt) {
  upd_job *job = arg;
  gacc_mllt *m = job->m;
  const int32_t D = m->D, P = m->P, nt8 = job->ntiles;
  size_t lo, hi;
  gacc_par_range((size_t)nt8, t, nt, &lo, &hi);
  int32_t p0 = (int32_t)lo * 8, p1 = (int32_t)hi * 8;
  if (t == nt - 1) {
    upd_scalar(m, 0, D, nt8 * 8, P);
  }
  if (p1 <= p0) return;
  if (!m->simd) {
    upd_scalar(m, 0, D, p0, p1);
    return;
  }
  const int32_t D4 = D & ~3;
  for (int32_t p = p0; p < p1; p += 8) {
    /* nfused is P or a multiple of 16, so a tile is all fused or none */
    int fused = p + 8 <= m->nfused;
    for (int32_t j = 0; j < D4; j += 4) tile_avx2(m, j, p, fused);
  }
  if (D4 < D) upd_scalar(m, D4, D, p0, p1);
}

static void flush(gacc_mllt *m) {
  if (m->nb == 0) return;
  upd_job job = { m, m->P / 8 };
  if (m->par && m->nb * (size_t)m->D * (size_t)m->P >= 200000)
    gacc_par_run(m->par, upd_part, &job);
  else
    upd_part(&job, 0, 1);
  m->nb = 0;
}

/* ---------------- one frame ---------------- */

int gacc_mllt_frame(gacc_mllt *m, const kio_diag_gmm *g, const float *x, float weight,
                    const char *key, int32_t t, float *like) {
  const int32_t D = m->D, P = m->P, M = g->num_comp;
  if (M > m->cap_post) {
    float *p = realloc(m->post, sizeof(float) * (size_t)M);
    if (!p) {
      KIO_ERROR("Out of memory");
      return KIO_ERR;
    }
    m->post = p;
    m->cap_post = M;
  }
  float ans = gacc_cpu_component_posteriors(g, x, m->x2, m->post);
  if (isnan(ans) || isinf(ans)) return gacc_bad_like(key, t);
  double this_beta = 0.0;
  for (int32_t i = 0; i < M; i++) {
    float post = rand_prune(m, m->post[i] * weight);
    if (post == 0.0f) continue;
    const float *mi = g->means_invvars + (size_t)i * D, *iv = g->inv_vars + (size_t)i * D;
    double *a = m->A + (size_t)m->nb * D, *tmp = m->T + (size_t)m->nb * P;
    /* the offset is kept in x2's place: one float per dim */
    float *o = m->x2;
    for (int32_t d = 0; d < D; d++) {
      float mean = mi[d] / iv[d];
      o[d] = mean - x[d];
    }
    for (int32_t r = 0, k = 0; r < D; r++) {
      double orow = (double)o[r];
      for (int32_t c = 0; c <= r; c++) tmp[k++] = orow * (double)o[c];
    }
    for (int32_t j = 0; j < D; j++) a[j] = (double)(iv[j] * post);
    this_beta += (double)post;
    if (++m->nb == BLOCK) flush(m);
  }
  m->beta += this_beta;
  *like = ans;
  return KIO_OK;
}

/* ---------------- writing ---------------- */

int gacc_mllt_write(gacc_mllt *m, const char *wx, int binary) {
  flush(m);
  kio_output *out;
  if (kio_output_open(&out, wx, binary, 1) != KIO_OK) return KIO_ERR;
  FILE *f = kio_output_stream(out);
  const int32_t D = m->D, P = m->P;
  kio_write_token(f, binary, "<MlltAccs>");
  if (!binary) putc('\n', f);
  kio_write_double(f, binary, m->beta);
  kio_write_int32(f, binary, D);
  kio_write_token(f, binary, "<G>");
  if (!binary) putc('\n', f);
  for (int32_t j = 0; j < D; j++) {
    const double *g = m->G + (size_t)j * P;
    if (binary) {
      kio_write_token(f, 1, "DP");
      kio_write_int32(f, 1, D);
      fwrite(g, sizeof(double), (size_t)P, f);
    } else {
      fputs("[\n", f);
      for (int32_t r = 0, k = 0; r < D; r++) {
        for (int32_t c = 0; c <= r; c++) kio_write_double(f, 0, g[k++]);
        fputs(r == D - 1 ? "]\n" : "\n", f);
      }
    }
  }
  kio_write_token(f, binary, "</MlltAccs>");
  if (!binary) putc('\n', f);
  return kio_output_close(out);
}
