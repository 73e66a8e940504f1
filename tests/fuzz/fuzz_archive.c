/* libFuzzer harness: Kaldi archives through the table readers. Input: one
 * selector byte, then the archive bytes, written to a temporary file read
 * as "ark:FILE" (never scp: scp lines name files and pipes to open).
 *   selector & 3: holder 0 int32 vectors, 1 float matrices, 2 FSTs, 3 floats
 *   selector & 4: random-access reader (look up a few keys) instead of
 *                 the sequential one; selector & 8: ",p" (permissive),
 *                 & 16: ",s", & 32: ",cs" (sorted modes of the RA reader). */
#include "base/model/fst.h"
#include "fuzz-common.h"
#include "base/matrix/matrix.h"
#include "base/io/table.h"

static const kio_holder *pick(int sel) {
  switch (sel & 3) {
    case 0: return &kio_int_vec_holder;
    case 1: return &kio_matrix_holder;
    case 2: return &kio_fst_holder;
    default: return &kio_float_holder;
  }
}

/* Sanity of a value the reader handed out. */
static void check_value(int sel, const void *obj) {
  if (!obj) return;
  switch (sel & 3) {
    case 0: {
      const kio_int_vec *v = obj;
      FUZZ_CHECK(v->n >= 0 && (v->n == 0 || v->v));
      break;
    }
    case 1: {
      const kio_matrix *m = obj;
      FUZZ_CHECK(m->rows >= 0 && m->cols >= 0 && (size_t)m->rows * m->cols <= m->cap);
      break;
    }
    case 2: {
      const kio_fst *g = obj;
      FUZZ_CHECK(g->num_states >= 0 && g->num_arcs >= 0);
      FUZZ_CHECK(g->start >= -1 && g->start < (g->num_states ? g->num_states : 1));
      if (g->num_states) {
        FUZZ_CHECK(g->arc_start[0] == 0 && g->arc_start[g->num_states] == g->num_arcs);
        for (int32_t s = 0; s < g->num_states; s++)
          FUZZ_CHECK(g->arc_start[s] <= g->arc_start[s + 1]);
        for (int32_t k = 0; k < g->num_arcs; k++)
          FUZZ_CHECK(g->arcs[k].nextstate >= 0 && g->arcs[k].nextstate < g->num_states);
      }
      break;
    }
    default:
      break;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_init();
  if (size < 1) return 0;
  int sel = data[0];
  const kio_holder *h = pick(sel);
  const char *path = fuzz_temp_file(data + 1, size - 1, ".ark");
  char spec[320];
  snprintf(spec, sizeof spec, "ark%s%s%s:%s", (sel & 8) ? ",p" : "",
           (sel & 16) ? ",s" : "", (sel & 32) ? ",cs" : "", path);
  if (sel & 4) {
    kio_ra_reader *r;
    if (kio_ra_open(&r, spec, h) == KIO_OK) {
      static const char *keys[] = {"a", "b", "c", "utt1", "zzz"};
      for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        if (kio_ra_has_key(r, keys[i]) == 1) check_value(sel, kio_ra_value(r, keys[i]));
      kio_ra_close(r);
    }
  } else {
    kio_seq_reader *r;
    if (kio_seq_open(&r, spec, h) == KIO_OK) {
      for (int n = 0; !kio_seq_done(r) && n < 10000; n++) {
        const char *key = kio_seq_key(r);
        FUZZ_CHECK(key && *key && !strpbrk(key, " \t\n"));
        check_value(sel, kio_seq_value(r));
        kio_seq_next(r);
      }
      kio_seq_close(r);
    }
  }
  unlink(path);
  return 0;
}
