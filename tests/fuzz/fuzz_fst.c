/* libFuzzer harness: kio_fst_read (binary OpenFst vector/const objects and
 * Kaldi's text form) on a FILE* over the input. A graph that reads is checked
 * for CSR consistency, written back (OpenFst binary vector) and re-read. */
#include <math.h>

#include "base/model/fst.h"
#include "fuzz-common.h"

static void check_graph(const kio_fst *g) {
  FUZZ_CHECK(g->num_states >= 0 && g->num_arcs >= 0);
  FUZZ_CHECK(g->start >= -1 && g->start < (g->num_states ? g->num_states : 1));
  if (!g->num_states) return;
  FUZZ_CHECK(g->arc_start[0] == 0 && g->arc_start[g->num_states] == g->num_arcs);
  for (int32_t s = 0; s < g->num_states; s++)
    FUZZ_CHECK(g->arc_start[s] <= g->arc_start[s + 1]);
  for (int32_t k = 0; k < g->num_arcs; k++)
    FUZZ_CHECK(g->arcs[k].nextstate >= 0 && g->arcs[k].nextstate < g->num_states);
}

static int same_float(float a, float b) { return a == b || (isnan(a) && isnan(b)); }

static void roundtrip(const kio_fst *g) {
  char *buf = NULL;
  size_t len = 0;
  FILE *w = open_memstream(&buf, &len);
  FUZZ_CHECK(w);
  FUZZ_CHECK(kio_fst_write(w, g) == KIO_OK);
  fclose(w);
  FILE *r = fmemopen(buf, len, "rb");
  FUZZ_CHECK(r);
  kio_fst g2 = {0};
  FUZZ_CHECK(kio_fst_read(r, &g2) == KIO_OK);
  FUZZ_CHECK(getc(r) == EOF);
  FUZZ_CHECK(g2.num_states == g->num_states && g2.num_arcs == g->num_arcs);
  /* an FST without states may come back with start -1 */
  FUZZ_CHECK(g2.start == g->start || g->num_states == 0);
  for (int32_t s = 0; s < g->num_states; s++) {
    FUZZ_CHECK(g2.arc_start[s] == g->arc_start[s]);
    FUZZ_CHECK(same_float(g2.final[s], g->final[s]));
  }
  for (int32_t k = 0; k < g->num_arcs; k++) {
    const kio_arc *a = &g->arcs[k], *b = &g2.arcs[k];
    FUZZ_CHECK(a->ilabel == b->ilabel && a->olabel == b->olabel &&
               a->nextstate == b->nextstate && same_float(a->weight, b->weight));
  }
  kio_fst_free(&g2);
  fclose(r);
  free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_init();
  void *copy;
  FILE *f = fuzz_open_mem(data, size, &copy);
  if (!f) return 0;
  kio_fst g = {0};
  int rc = kio_fst_read(f, &g);
  fuzz_report("Fst", rc);
  if (rc == KIO_OK) {
    check_graph(&g);
    roundtrip(&g);
    /* reading a second object into the same buffers (archive reuse) */
    if (kio_fst_read(f, &g) == KIO_OK) check_graph(&g);
  }
  kio_fst_free(&g);
  fuzz_close_mem(f, copy);
  return 0;
}
