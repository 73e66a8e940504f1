/* The stats file of gmm-acc-stats-ali (reference 4.3): Vector<double> of
 * transition counts, then AccumAmDiagGmm with every GMM accumulator written
 * as float and FLAGS 15 (kGmmAll), then the two double totals. */
#include "gpu-acc.h"

#include <stdlib.h>
#include <string.h>

#include "base/io/io.h"
#include "base/sys/log.h"

/* kGmmMeans | kGmmVariances | kGmmWeights | kGmmTransitions: what the
 * program asks for (kGmmAll); gmm-est's default --update-flags needs all. */
#define GACC_FLAGS_ALL 15

int gacc_stats_write_stream(FILE *f, int binary, const gacc_stats *s) {
  int rc = KIO_OK;
  kio_dvector tv = { s->num_tids + 1, s->tacc, 0 };
  if (kio_dvector_write(f, binary, &tv) != KIO_OK) return KIO_ERR;

  kio_write_token(f, binary, "<NUMPDFS>");
  kio_write_int32(f, binary, s->num_pdfs);
  int32_t max_comp = 0, D = s->dim;
  for (int32_t j = 0; j < s->num_pdfs; j++) {
    int32_t M = s->pdf_offset[j + 1] - s->pdf_offset[j];
    if (M > max_comp) max_comp = M;
  }
  /* float copies, as Kaldi converts before writing (round to nearest) */
  kio_vector occ = { 0, NULL, 0 };
  kio_matrix mean = { 0, 0, NULL, 0 }, var = { 0, 0, NULL, 0 };
  size_t md = (size_t)max_comp * (size_t)(D > 0 ? D : 0);
  occ.data = malloc(sizeof(float) * (size_t)(max_comp > 0 ? max_comp : 1));
  mean.data = malloc(sizeof(float) * (md ? md : 1));
  var.data = malloc(sizeof(float) * (md ? md : 1));
  if (!occ.data || !mean.data || !var.data) {
    kio_set_error("out of memory");
    rc = KIO_ERR;
    goto done;
  }
  for (int32_t j = 0; j < s->num_pdfs && rc == KIO_OK; j++) {
    size_t g0 = (size_t)s->pdf_offset[j];
    int32_t M = s->pdf_offset[j + 1] - s->pdf_offset[j];
    size_t n = (size_t)M * (size_t)D;
    occ.dim = M;
    mean.rows = var.rows = M;
    mean.cols = var.cols = D;
    for (int32_t m = 0; m < M; m++) occ.data[m] = (float)s->occ[g0 + (size_t)m];
    for (size_t i = 0; i < n; i++) {
      mean.data[i] = (float)s->mean_acc[g0 * (size_t)D + i];
      var.data[i] = (float)s->var_acc[g0 * (size_t)D + i];
    }
    kio_write_token(f, binary, "<GMMACCS>");
    kio_write_token(f, binary, "<VECSIZE>");
    kio_write_int32(f, binary, D);
    kio_write_token(f, binary, "<NUMCOMPONENTS>");
    kio_write_int32(f, binary, M);
    kio_write_token(f, binary, "<FLAGS>");
    kio_write_uint16(f, binary, GACC_FLAGS_ALL);
    kio_write_token(f, binary, "<OCCUPANCY>");
    if (kio_vector_write(f, binary, &occ) != KIO_OK) rc = KIO_ERR;
    kio_write_token(f, binary, "<MEANACCS>");
    if (rc == KIO_OK && kio_matrix_write(f, binary, &mean) != KIO_OK) rc = KIO_ERR;
    kio_write_token(f, binary, "<DIAGVARACCS>");
    if (rc == KIO_OK && kio_matrix_write(f, binary, &var) != KIO_OK) rc = KIO_ERR;
    kio_write_token(f, binary, "</GMMACCS>");
  }
  if (rc == KIO_OK) {
    kio_write_token(f, binary, "<total_like>");
    kio_write_double(f, binary, s->total_like);
    kio_write_token(f, binary, "<total_frames>");
    kio_write_double(f, binary, s->total_frames);
    if (ferror(f)) {
      kio_set_error("write error");
      rc = KIO_ERR;
    }
  }
done:
  free(occ.data);
  free(mean.data);
  free(var.data);
  return rc;
}

int gacc_stats_write(const char *wxfilename, int binary, const gacc_stats *s) {
  kio_output *out = NULL;
  if (kio_output_open(&out, wxfilename, binary, 1) != KIO_OK) return KIO_ERR;
  int rc = gacc_stats_write_stream(kio_output_stream(out), binary, s);
  if (rc != KIO_OK)
    KIO_ERROR("Error writing stats to %s: %s", wxfilename, kio_last_error());
  if (kio_output_close(out) != KIO_OK) {
    if (rc == KIO_OK) KIO_ERROR("Error closing stats file %s", wxfilename);
    rc = KIO_ERR;
  }
  return rc;
}
