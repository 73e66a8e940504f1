/* libFuzzer harness: acoustic-model readers. Input: one selector byte, then
 * a Kaldi object with its own "\0B" header when binary.
 *   selector & 1 == 0: a .mdl: kio_tmodel_read then kio_am_gmm_read on a
 *                      FILE* from fmemopen (the header decides binary/text)
 *   selector & 1 == 1: a tree: kio_ctx_dep_read on a temporary file, then a
 *                      few kio_ctx_dep_compute lookups. */
#include "fuzz-common.h"
#include "base/io/io.h"
#include "base/model/model.h"

static void check_tmodel(const kio_tmodel *tm) {
  FUZZ_CHECK(tm->num_tids > 0 && tm->num_tuples > 0);
  for (int32_t tid = 1; tid <= tm->num_tids; tid++) {
    int32_t ts = kio_tid_to_ts(tm, tid);
    FUZZ_CHECK(ts >= 1 && ts <= tm->num_tuples);
    int32_t pdf = kio_tid_to_pdf(tm, tid);
    FUZZ_CHECK(pdf >= 0 && pdf < tm->num_pdfs);
    (void)kio_tid_to_phone(tm, tid);
    (void)kio_tid_is_self_loop(tm, tid);
  }
  for (int32_t ts = 1; ts <= tm->num_tuples; ts++) {
    int32_t loop = kio_ts_self_loop(tm, ts);
    FUZZ_CHECK(loop == 0 || (loop >= 1 && loop <= tm->num_tids));
  }
}

static void check_am(const kio_am_gmm *am) {
  FUZZ_CHECK(am->num_pdfs > 0 && am->pdfs);
  for (int32_t i = 0; i < am->num_pdfs; i++) {
    const kio_diag_gmm *g = &am->pdfs[i];
    FUZZ_CHECK(g->dim == am->dim && g->num_comp >= 0);
    if (g->num_comp) FUZZ_CHECK(g->gconsts && g->weights);
  }
}

static void fuzz_mdl(const uint8_t *data, size_t size) {
  void *copy;
  FILE *f = fuzz_open_mem(data, size, &copy);
  if (!f) return;
  int binary;
  kio_tmodel tm = {0};
  kio_am_gmm am = {0};
  int rc = kio_read_header(f, &binary);
  if (rc == KIO_OK) rc = kio_tmodel_read(f, binary, &tm);
  fuzz_report("TransitionModel", rc);
  if (rc == KIO_OK) {
    check_tmodel(&tm);
    rc = kio_am_gmm_read(f, binary, &am);
    fuzz_report("AmDiagGmm", rc);
    if (rc == KIO_OK) check_am(&am);
  }
  kio_am_gmm_free(&am);
  kio_tmodel_free(&tm);
  fuzz_close_mem(f, copy);
}

static void fuzz_tree(const uint8_t *data, size_t size) {
  const char *path = fuzz_temp_file(data, size, ".tree");
  kio_ctx_dep cd = {0};
  int rc = kio_ctx_dep_read(path, &cd);
  fuzz_report("ContextDependency", rc);
  if (rc == KIO_OK) {
    FUZZ_CHECK(cd.context_width >= 1 && cd.central_position < cd.context_width);
    int32_t phones[64] = {0}, pdf;
    for (int32_t p = 0; p < 8; p++) {
      for (int32_t k = 0; k < cd.context_width; k++) phones[k] = (p * 7 + k) % 300;
      kio_ctx_dep_compute(&cd, phones, p % 3, &pdf);
    }
  }
  kio_ctx_dep_free(&cd);
  unlink(path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_init();
  if (size < 1) return 0;
  if (data[0] & 1) fuzz_tree(data + 1, size - 1);
  else fuzz_mdl(data + 1, size - 1);
  return 0;
}
