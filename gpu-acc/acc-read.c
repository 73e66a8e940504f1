/* Reading a gmm-acc-stats-ali stats file back (binary or text) and
 * comparing two sets of statistics: for tests and tools/acc-compare. */
#include "gpu-acc.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/io/io.h"
#include "base/sys/log.h"

static int read_gmm_accs(FILE *f, int binary, int32_t *dim, int32_t *ncomp,
                         uint16_t *flags, kio_vector *occ, kio_matrix *mean,
                         kio_matrix *var) {
  char tok[64];
  if (kio_expect_token(f, binary, "<GMMACCS>") || kio_expect_token(f, binary, "<VECSIZE>") ||
      kio_read_int32(f, binary, dim) || kio_expect_token(f, binary, "<NUMCOMPONENTS>") ||
      kio_read_int32(f, binary, ncomp) || kio_expect_token(f, binary, "<FLAGS>") ||
      kio_read_uint16(f, binary, flags))
    return KIO_ERR;
  occ->dim = 0;
  mean->rows = mean->cols = var->rows = var->cols = 0;
  for (;;) {
    if (kio_read_token(f, binary, tok, sizeof tok)) return KIO_ERR;
    if (!strcmp(tok, "</GMMACCS>")) return KIO_OK;
    int rc;
    if (!strcmp(tok, "<OCCUPANCY>")) rc = kio_vector_read(f, binary, occ);
    else if (!strcmp(tok, "<MEANACCS>")) rc = kio_matrix_read(f, binary, mean);
    else if (!strcmp(tok, "<DIAGVARACCS>")) rc = kio_matrix_read(f, binary, var);
    else {
      kio_set_error("Unexpected token '%s' in GMM accumulators", tok);
      return KIO_ERR;
    }
    if (rc) return KIO_ERR;
  }
}

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return KIO_OK;
  size_t c = *cap ? *cap : 1024;
  while (c < need) c *= 2;
  void *q = realloc(*p, c * elem);
  if (!q) return KIO_ERR;
  *p = q;
  *cap = c;
  return KIO_OK;
}

static int read_body(FILE *f, int binary, gacc_stats *s, int *flags_ok) {
  kio_dvector tv = { 0, NULL, 0 };
  kio_vector occ = { 0, NULL, 0 };
  kio_matrix mean = { 0, 0, NULL, 0 }, var = { 0, 0, NULL, 0 };
  size_t cap_g = 0, cap_gd = 0, cap_gd2 = 0;
  int rc = KIO_ERR;
  *flags_ok = 1;
  if (kio_dvector_read(f, binary, &tv)) goto done;
  s->num_tids = tv.dim - 1;
  s->tacc = tv.data;
  tv.data = NULL;
  if (kio_expect_token(f, binary, "<NUMPDFS>") || kio_read_int32(f, binary, &s->num_pdfs))
    goto done;
  if (s->num_pdfs < 0 || s->num_pdfs > 10000000) {
    kio_set_error("bad number of pdfs %d", (int)s->num_pdfs);
    goto done;
  }
  s->pdf_offset = calloc((size_t)s->num_pdfs + 1, sizeof(int32_t));
  if (!s->pdf_offset) goto done;
  size_t g = 0;
  for (int32_t j = 0; j < s->num_pdfs; j++) {
    int32_t dim, M;
    uint16_t flags;
    if (read_gmm_accs(f, binary, &dim, &M, &flags, &occ, &mean, &var)) goto done;
    if (flags != 15) *flags_ok = 0;
    if (j == 0) s->dim = dim;
    if (dim != s->dim || M < 0 || occ.dim != M || mean.rows != M || var.rows != M ||
        mean.cols != dim || var.cols != dim) {
      kio_set_error("inconsistent sizes in accumulator of pdf %d", (int)j);
      goto done;
    }
    s->pdf_offset[j] = (int32_t)g;
    size_t D = (size_t)dim;
    if (grow((void **)&s->occ, &cap_g, g + (size_t)M, sizeof(double)) ||
        grow((void **)&s->mean_acc, &cap_gd, (g + (size_t)M) * D, sizeof(double)) ||
        grow((void **)&s->var_acc, &cap_gd2, (g + (size_t)M) * D, sizeof(double)))
      goto done;
    for (int32_t m = 0; m < M; m++) s->occ[g + (size_t)m] = occ.data[m];
    for (size_t i = 0; i < (size_t)M * D; i++) {
      s->mean_acc[g * D + i] = mean.data[i];
      s->var_acc[g * D + i] = var.data[i];
    }
    g += (size_t)M;
  }
  s->pdf_offset[s->num_pdfs] = (int32_t)g;
  s->num_gauss = (int32_t)g;
  if (kio_peek(f, binary) != EOF) {  /* totals are optional, as in Kaldi */
    if (kio_expect_token(f, binary, "<total_like>") ||
        kio_read_double(f, binary, &s->total_like) ||
        kio_expect_token(f, binary, "<total_frames>") ||
        kio_read_double(f, binary, &s->total_frames))
      goto done;
  }
  rc = KIO_OK;
done:
  kio_dvector_free(&tv);
  kio_vector_free(&occ);
  kio_matrix_free(&mean);
  kio_matrix_free(&var);
  return rc;
}

int gacc_stats_read(const char *rxfilename, gacc_stats *s, int *flags_ok) {
  memset(s, 0, sizeof *s);
  kio_input *in = NULL;
  int binary, ok = 1;
  if (kio_input_open(&in, rxfilename, &binary) != KIO_OK) return KIO_ERR;
  kio_clear_error();
  if (read_body(kio_input_stream(in), binary, s, &ok) != KIO_OK) {
    KIO_ERROR("Error reading stats from %s: %s", rxfilename, kio_last_error());
    kio_input_close(in);
    gacc_stats_free(s);
    return KIO_ERR;
  }
  kio_input_close(in);
  if (flags_ok) *flags_ok = ok;
  return KIO_OK;
}

/* Relative difference; with ulp_ok, values that are adjacent floats count
 * as equal
 * (|x| < 1e-30 is treated as zero, where relative errors mean nothing). */
static double rel_diff(double a, double b, int ulp_ok) {
  if (a == b) return 0.0;
  if (fabs(a) < 1e-30 && fabs(b) < 1e-30) return 0.0;
  float fa = (float)a, fb = (float)b;
  if (ulp_ok && (fa == fb || nextafterf(fa, fb) == fb)) return 0.0;
  double m = fabs(a) > fabs(b) ? fabs(a) : fabs(b);
  return fabs(a - b) / m;
}

static void note(gacc_cmp *c, double r, double tol) {
  if (r > c->max_rel) c->max_rel = r;
  if (r > tol) c->num_over++;
}

void gacc_stats_compare(const gacc_stats *a, const gacc_stats *b, double tol,
                        int ulp_ok, gacc_cmp *c) {
  memset(c, 0, sizeof *c);
  c->same_layout = a->num_tids == b->num_tids && a->num_pdfs == b->num_pdfs &&
                   a->dim == b->dim && a->num_gauss == b->num_gauss;
  for (int32_t j = 0; c->same_layout && j <= a->num_pdfs; j++)
    if (a->pdf_offset[j] != b->pdf_offset[j]) c->same_layout = 0;
  if (!c->same_layout) return;
  for (int32_t t = 0; t <= a->num_tids; t++)
    if (a->tacc[t] != b->tacc[t]) c->num_tacc_diff++;
  size_t G = (size_t)a->num_gauss, GD = G * (size_t)a->dim;
  for (size_t i = 0; i < G; i++) note(c, rel_diff(a->occ[i], b->occ[i], ulp_ok), tol);
  for (size_t i = 0; i < GD; i++) {
    note(c, rel_diff(a->mean_acc[i], b->mean_acc[i], ulp_ok), tol);
    note(c, rel_diff(a->var_acc[i], b->var_acc[i], ulp_ok), tol);
  }
  c->num_values = G + 2 * GD;
  c->like_rel = rel_diff(a->total_like, b->total_like, 0);
  c->frames_equal = a->total_frames == b->total_frames;
}
