/* DiagGmm / AmDiagGmm read/write (reference 3.4, Kaldi gmm/diag-gmm.cc,
 * gmm/am-diag-gmm.cc) and whole .mdl files (3.5). Stored gconsts are
 * ignored on read and recomputed with Kaldi's exact float/double mix. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/io/io.h"
#include "base/sys/log.h"
#include "base/matrix/matrix.h"
#include "model.h"

/* Kaldi's M_LOG_2PI. */
#define KIO_LOG_2PI 1.8378770664093454835606594728112

void kio_diag_gmm_free(kio_diag_gmm *g) {
  if (!g) return;
  free(g->gconsts);
  free(g->weights);
  free(g->means_invvars);
  free(g->inv_vars);
  memset(g, 0, sizeof *g);
}

void kio_am_gmm_free(kio_am_gmm *am) {
  if (!am) return;
  for (int32_t i = 0; i < am->num_pdfs; i++) kio_diag_gmm_free(&am->pdfs[i]);
  free(am->pdfs);
  memset(am, 0, sizeof *am);
}

/* DiagGmm::ComputeGconsts(). Statement order and types mirror Kaldi's so the
 * rounding is the same: BaseFloat offset, BaseFloat gc, and the per-dimension
 * term evaluated in double before being added to the float accumulator. */
int kio_diag_gmm_compute_gconsts(kio_diag_gmm *g) {
  int32_t M = g->num_comp, D = g->dim;
  if (!g->gconsts) {
    g->gconsts = malloc(sizeof(float) * (M ? (size_t)M : 1));
    if (!g->gconsts) { kio_set_error("out of memory"); return KIO_ERR; }
  }
  float offset = (float)(-0.5 * KIO_LOG_2PI * D);
  for (int32_t m = 0; m < M; m++) {
    if (!(g->weights[m] >= 0.0f)) {
      kio_set_error("DiagGmm: negative weight %g at component %d",
                    (double)g->weights[m], (int)m);
      return KIO_ERR;
    }
    float gc = logf(g->weights[m]) + offset;
    const float *mi = g->means_invvars + (size_t)m * D;
    const float *iv = g->inv_vars + (size_t)m * D;
    for (int32_t d = 0; d < D; d++)
      gc += 0.5 * logf(iv[d]) - 0.5 * mi[d] * mi[d] / iv[d];
    if (isnan(gc)) {
      kio_set_error("At component %d, not a number in gconst computation", (int)m);
      return KIO_ERR;
    }
    if (isinf(gc) && gc > 0) gc = -gc;
    g->gconsts[m] = gc;
  }
  return KIO_OK;
}

int kio_diag_gmm_read(FILE *f, int binary, kio_diag_gmm *g) {
  char tok[64];
  kio_vector v = {0};
  kio_matrix mi = {0}, iv = {0};
  kio_diag_gmm_free(g);
  if (kio_read_token(f, binary, tok, sizeof tok) != KIO_OK) goto fail;
  if (strcmp(tok, "<DiagGMMBegin>") != 0 && strcmp(tok, "<DiagGMM>") != 0) {
    kio_set_error("Expected <DiagGMM>, got %s", tok);
    goto fail;
  }
  if (kio_read_token(f, binary, tok, sizeof tok) != KIO_OK) goto fail;
  if (!strcmp(tok, "<GCONSTS>")) { /* optional; discarded */
    kio_vector gc = {0};
    int r = kio_vector_read(f, binary, &gc);
    kio_vector_free(&gc);
    if (r != KIO_OK) goto fail;
    if (kio_expect_token(f, binary, "<WEIGHTS>") != KIO_OK) goto fail;
  } else if (strcmp(tok, "<WEIGHTS>") != 0) {
    kio_set_error("DiagGmm::Read, expected <WEIGHTS> or <GCONSTS>, got %s", tok);
    goto fail;
  }
  if (kio_vector_read(f, binary, &v) != KIO_OK) goto fail;
  if (kio_expect_token(f, binary, "<MEANS_INVVARS>") != KIO_OK) goto fail;
  if (kio_matrix_read(f, binary, &mi) != KIO_OK) goto fail;
  if (kio_expect_token(f, binary, "<INV_VARS>") != KIO_OK) goto fail;
  if (kio_matrix_read(f, binary, &iv) != KIO_OK) goto fail;
  if (kio_read_token(f, binary, tok, sizeof tok) != KIO_OK) goto fail;
  if (strcmp(tok, "<DiagGMMEnd>") != 0 && strcmp(tok, "</DiagGMM>") != 0) {
    kio_set_error("Expected </DiagGMM>, got %s", tok);
    goto fail;
  }
  if (mi.rows != v.dim || iv.rows != v.dim || iv.cols != mi.cols) {
    kio_set_error("DiagGmm: inconsistent sizes: %d weights, means_invvars %dx%d, "
                  "inv_vars %dx%d", (int)v.dim, (int)mi.rows, (int)mi.cols,
                  (int)iv.rows, (int)iv.cols);
    goto fail;
  }
  g->num_comp = v.dim;
  g->dim = mi.cols;
  /* take ownership of the buffers */
  g->weights = v.data;
  g->means_invvars = mi.data;
  g->inv_vars = iv.data;
  if (kio_diag_gmm_compute_gconsts(g) != KIO_OK) {
    kio_diag_gmm_free(g);
    return KIO_ERR;
  }
  return KIO_OK;
fail:
  kio_vector_free(&v);
  kio_matrix_free(&mi);
  kio_matrix_free(&iv);
  kio_diag_gmm_free(g);
  return KIO_ERR;
}

int kio_diag_gmm_write(FILE *f, int binary, const kio_diag_gmm *g) {
  if (!g->gconsts) {
    kio_set_error("Must call ComputeGconsts() before writing the model.");
    return KIO_ERR;
  }
  kio_vector gc = {g->num_comp, g->gconsts, 0};
  kio_vector w = {g->num_comp, g->weights, 0};
  kio_matrix mi = {g->num_comp, g->dim, g->means_invvars, 0};
  kio_matrix iv = {g->num_comp, g->dim, g->inv_vars, 0};
  kio_write_token(f, binary, "<DiagGMM>");
  if (!binary) fputc('\n', f);
  kio_write_token(f, binary, "<GCONSTS>");
  if (kio_vector_write(f, binary, &gc) != KIO_OK) return KIO_ERR;
  kio_write_token(f, binary, "<WEIGHTS>");
  if (kio_vector_write(f, binary, &w) != KIO_OK) return KIO_ERR;
  kio_write_token(f, binary, "<MEANS_INVVARS>");
  if (kio_matrix_write(f, binary, &mi) != KIO_OK) return KIO_ERR;
  kio_write_token(f, binary, "<INV_VARS>");
  if (kio_matrix_write(f, binary, &iv) != KIO_OK) return KIO_ERR;
  kio_write_token(f, binary, "</DiagGMM>");
  if (!binary) fputc('\n', f);
  return ferror(f) ? KIO_ERR : KIO_OK;
}

int kio_am_gmm_read(FILE *f, int binary, kio_am_gmm *am) {
  int32_t dim, n;
  kio_am_gmm_free(am);
  if (kio_expect_token(f, binary, "<DIMENSION>") != KIO_OK ||
      kio_read_int32(f, binary, &dim) != KIO_OK ||
      kio_expect_token(f, binary, "<NUMPDFS>") != KIO_OK ||
      kio_read_int32(f, binary, &n) != KIO_OK)
    return KIO_ERR;
  if (n <= 0 || n > (1 << 24) || dim < 0) {
    kio_set_error("AmDiagGmm: bad <NUMPDFS> %d or <DIMENSION> %d", (int)n, (int)dim);
    return KIO_ERR;
  }
  /* Grown while reading (fuzzing: a corrupt <NUMPDFS> must not allocate
   * 640 MB up front). New slots are zeroed before use. */
  int32_t cap = n < 1024 ? n : 1024;
  am->pdfs = calloc((size_t)cap, sizeof *am->pdfs);
  if (!am->pdfs) { kio_set_error("out of memory"); return KIO_ERR; }
  am->dim = dim;
  for (int32_t i = 0; i < n; i++) {
    if (i == cap) {
      int32_t nc = n - cap < cap ? n : 2 * cap;
      kio_diag_gmm *np = realloc(am->pdfs, (size_t)nc * sizeof *np);
      if (!np) { kio_set_error("out of memory"); goto fail; }
      memset(np + cap, 0, (size_t)(nc - cap) * sizeof *np);
      am->pdfs = np;
      cap = nc;
    }
    am->num_pdfs = i + 1;
    if (kio_diag_gmm_read(f, binary, &am->pdfs[i]) != KIO_OK) {
      char msg[512];
      snprintf(msg, sizeof msg, "%s", kio_last_error());
      kio_set_error("reading pdf %d of %d: %s", (int)i, (int)n, msg);
      goto fail;
    }
    if (am->pdfs[i].dim != dim) {
      kio_set_error("AmDiagGmm: pdf %d has dimension %d, expected %d", (int)i,
                    (int)am->pdfs[i].dim, (int)dim);
      goto fail;
    }
  }
  return KIO_OK;
fail:
  kio_am_gmm_free(am);
  return KIO_ERR;
}

int kio_am_gmm_write(FILE *f, int binary, const kio_am_gmm *am) {
  if (am->num_pdfs == 0) KIO_WARN("Trying to write empty AmDiagGmm object.");
  kio_write_token(f, binary, "<DIMENSION>");
  kio_write_int32(f, binary, am->num_pdfs ? am->pdfs[0].dim : 0);
  kio_write_token(f, binary, "<NUMPDFS>");
  kio_write_int32(f, binary, am->num_pdfs);
  for (int32_t i = 0; i < am->num_pdfs; i++)
    if (kio_diag_gmm_write(f, binary, &am->pdfs[i]) != KIO_OK) return KIO_ERR;
  return ferror(f) ? KIO_ERR : KIO_OK;
}

int kio_model_read(const char *rxfilename, kio_tmodel *tm, kio_am_gmm *am) {
  kio_input *in = NULL;
  int binary = 0;
  kio_clear_error();
  if (kio_input_open(&in, rxfilename, &binary) != KIO_OK) return KIO_ERR;
  FILE *f = kio_input_stream(in);
  if (kio_tmodel_read(f, binary, tm) != KIO_OK) {
    KIO_ERROR("Failed to read transition model from %s: %s", rxfilename, kio_last_error());
    kio_input_close(in);
    return KIO_ERR;
  }
  if (am && kio_am_gmm_read(f, binary, am) != KIO_OK) {
    KIO_ERROR("Failed to read acoustic model from %s: %s", rxfilename, kio_last_error());
    kio_tmodel_free(tm);
    kio_input_close(in);
    return KIO_ERR;
  }
  /* Like Kaldi's ReadKaldiObject: a failed input pipe only gives the WARNING
   * that kio_input_close prints (e.g. SIGPIPE when only the TransitionModel
   * of a piped .mdl is read). */
  kio_input_close(in);
  return KIO_OK;
}

int kio_model_write(const char *wxfilename, int binary,
                    const kio_tmodel *tm, const kio_am_gmm *am) {
  kio_output *out = NULL;
  if (kio_output_open(&out, wxfilename, binary, 1) != KIO_OK) return KIO_ERR;
  FILE *f = kio_output_stream(out);
  int ok = kio_tmodel_write(f, binary, tm) == KIO_OK &&
           (!am || kio_am_gmm_write(f, binary, am) == KIO_OK);
  if (!ok) {
    KIO_ERROR("Failed to write model to %s: %s", wxfilename, kio_last_error());
    kio_output_close(out);
    return KIO_ERR;
  }
  if (kio_output_close(out) != KIO_OK) {
    KIO_ERROR("Error closing output %s", wxfilename);
    return KIO_ERR;
  }
  return KIO_OK;
}

int kio_model_to_bytes(const kio_tmodel *tm, const kio_am_gmm *am, char **buf, size_t *len) {
  *buf = NULL;
  *len = 0;
  FILE *f = open_memstream(buf, len);
  if (!f) { KIO_ERROR("Out of memory"); return KIO_ERR; }
  int ok = kio_tmodel_write(f, 1, tm) == KIO_OK && kio_am_gmm_write(f, 1, am) == KIO_OK;
  if (fclose(f) != 0) ok = 0;
  if (!ok) {
    KIO_ERROR("Failed to serialise the model: %s", kio_last_error());
    free(*buf);
    *buf = NULL;
    return KIO_ERR;
  }
  return KIO_OK;
}

int kio_model_from_bytes(const void *buf, size_t len, kio_tmodel *tm, kio_am_gmm *am) {
  memset(tm, 0, sizeof *tm);
  memset(am, 0, sizeof *am);
  if (len == 0) { KIO_ERROR("Empty model"); return KIO_ERR; }
  FILE *f = fmemopen((void *)buf, len, "rb");
  if (!f) { KIO_ERROR("Out of memory"); return KIO_ERR; }
  kio_clear_error();
  int rc = KIO_OK;
  if (kio_tmodel_read(f, 1, tm) != KIO_OK) {
    KIO_ERROR("Failed to read transition model: %s", kio_last_error());
    rc = KIO_ERR;
  } else if (kio_am_gmm_read(f, 1, am) != KIO_OK) {
    KIO_ERROR("Failed to read acoustic model: %s", kio_last_error());
    kio_tmodel_free(tm);
    rc = KIO_ERR;
  }
  fclose(f);
  return rc;
}
