/* ali-to-phones: Kaldi's program (bin/ali-to-phones.cc): the same usage,
 * options, output bytes, log line and exit codes; a C process that starts
 * fast. steps/diagnostic/analyze_alignments.sh runs it once per job at the
 * end of every training and alignment script, where its start-up and
 * parsing are on the stage's critical path. --ctm-output (its times are
 * Kaldi's float sums printed with the stream's precision) runs Kaldi's own
 * program from PATH. */
#include <stdlib.h>
#include <string.h>

#include "base/io/io.h"
#include "base/io/table.h"
#include "base/model/model.h"
#include "base/program/program.h"
#include "base/sys/kaldi-msg.h"
#include "base/sys/log.h"
#include "base/sys/options.h"

static const char *const kUsage =
    "Convert model-level alignments to phone-sequences (in integer, not text, form)\n"
    "Usage:  ali-to-phones  [options] <model> <alignments-rspecifier> "
    "<phone-transcript-wspecifier|ctm-wxfilename>\n"
    "e.g.: \n"
    " ali-to-phones 1.mdl ark:1.ali ark:-\n"
    "or:\n"
    " ali-to-phones --ctm-output 1.mdl ark:1.ali 1.ctm\n"
    "See also: show-alignments lattice-align-phones, compare-int-vector\n";

/* Int32PairVectorWriter's body (BasicPairVectorHolder): binary, the count
 * then each value with its size byte; text, "a b ; c d ; e f " and a newline.
 * The object is a kio_int_vec of 2 * pairs values. Write-only. */
static int pairs_read(FILE *f, int binary, void *obj) {
  (void)f; (void)binary; (void)obj;
  kio_set_error("pair vectors are written here, never read");
  return KIO_ERR;
}

static int pairs_write(FILE *f, int binary, const void *obj) {
  const kio_int_vec *x = obj;
  const int32_t n = x->n / 2;
  if (binary) {
    kio_write_int32(f, 1, n);
    for (int32_t i = 0; i < x->n; i++) {
      putc_unlocked(4, f);
      fwrite_unlocked(&x->v[i], 4, 1, f);
    }
  } else {
    for (int32_t i = 0; i < n; i++)
      fprintf(f, i + 1 < n ? "%d %d ; " : "%d %d ", (int)x->v[2 * i], (int)x->v[2 * i + 1]);
    putc_unlocked('\n', f);
  }
  return ferror(f) ? KIO_ERR : KIO_OK;
}

static void pairs_free(void *obj) {
  kio_int_vec *x = obj;
  free(x->v);
  x->v = NULL;
  x->n = 0;
}

static const kio_holder pairs_holder = {
  "std::vector<std::pair<int32, int32> >", sizeof(kio_int_vec), 1, pairs_read, pairs_write,
  pairs_free, NULL
};

/* Grows v to hold n values. */
static int reserve(kio_int_vec *v, int32_t *cap, int64_t n) {
  if (n <= *cap) return KIO_OK;
  int64_t c = n > 2 * (int64_t)*cap ? n : 2 * (int64_t)*cap;
  if (c > INT32_MAX) return KIO_ERR;
  int32_t *nv = realloc(v->v, sizeof(int32_t) * (size_t)c);
  if (!nv) return KIO_ERR;
  v->v = nv;
  *cap = (int32_t)c;
  return KIO_OK;
}

int main(int argc, char **argv) {
  kio_program_start(argc, argv);
  kio_opts *po = kio_opts_new(kUsage);
  int per_frame = 0, write_lengths = 0, ctm_output = 0;
  float frame_shift = 0.01f;
  kio_opts_bool(po, "ctm-output", &ctm_output,
                "If true, output the alignments in ctm format (the confidences will be set to 1)");
  kio_opts_float(po, "frame-shift", &frame_shift,
                 "frame shift used to control the times of the ctm output");
  kio_opts_bool(po, "per-frame", &per_frame,
                "If true, write out the frame-level phone alignment (else phone sequence)");
  kio_opts_bool(po, "write-lengths", &write_lengths,
                "If true, write the #frames for each phone (different format)");
  kio_program_args(po, argc, argv, 3, 3);
  if (per_frame && write_lengths) {
    KIO_ERROR("Incompatible options: --per-frame and --write-lengths");
    kio_fatal_exit();
  }
  if (ctm_output) kio_program_exec_kaldi("ali-to-phones", argv, "--ctm-output");

  kio_tmodel tm = {0};
  if (kio_model_read(kio_opts_arg(po, 1), &tm, NULL) != KIO_OK) kio_fatal_exit();
  kio_seq_reader *r = NULL;
  kio_writer *w = NULL;
  if (kio_seq_open(&r, kio_opts_arg(po, 2), &kio_int_vec_holder) != KIO_OK) kio_fatal_exit();
  if (kio_writer_open(&w, kio_opts_arg(po, 3), write_lengths ? &pairs_holder : &kio_int_vec_holder) !=
      KIO_OK)
    kio_fatal_exit();
  kio_int_vec out = {0, NULL};
  int32_t out_cap = 0, ends_cap = 0;
  int32_t *ends = NULL;
  long done = 0;
  for (; !kio_seq_done(r); kio_seq_next(r)) {
    const kio_int_vec *a = kio_seq_value(r);
    if (!a) kio_fatal_exit();
    for (int32_t i = 0; i < a->n; i++)
      if (a->v[i] < 1 || a->v[i] > tm.num_tids) {
        KIO_ERROR("Alignment of %s has transition-id %d, the model has 1..%d", kio_seq_key(r),
                  (int)a->v[i], (int)tm.num_tids);
        kio_fatal_exit();
      }
    if (a->n > ends_cap) {
      int32_t *ne = realloc(ends, sizeof(int32_t) * (size_t)a->n);
      if (!ne) { KIO_ERROR("Out of memory"); kio_fatal_exit(); }
      ends = ne;
      ends_cap = a->n;
    }
    /* Kaldi ignores whether the alignment starts and ends at phone
     * boundaries here: the pieces are written as they split */
    const int32_t m = a->n ? kio_split_to_phones(&tm, a->v, a->n, ends, NULL) : 0;
    const int64_t need = write_lengths ? 2 * (int64_t)m : per_frame ? (m ? ends[m - 1] : 0) : m;
    if (reserve(&out, &out_cap, need) != KIO_OK) { KIO_ERROR("Out of memory"); kio_fatal_exit(); }
    int32_t k = 0;
    for (int32_t p = 0; p < m; p++) {
      const int32_t b = p ? ends[p - 1] : 0, len = ends[p] - b;
      const int32_t phone = kio_tid_to_phone(&tm, a->v[b]);
      if (write_lengths) {
        out.v[k++] = phone;
        out.v[k++] = len;
      } else if (per_frame) {
        for (int32_t j = 0; j < len; j++) out.v[k++] = phone;
      } else {
        out.v[k++] = phone;
      }
    }
    out.n = k;
    if (kio_writer_write(w, kio_seq_key(r), &out) != KIO_OK) kio_fatal_exit();
    done++;
  }
  if (kio_seq_close(r) != KIO_OK) kio_fatal_exit();
  KIO_KALDI(ALI_TO_PHONES_DONE, (int)done);
  if (kio_writer_close(w) != KIO_OK) kio_fatal_exit();
  free(out.v);
  free(ends);
  kio_tmodel_free(&tm);
  kio_opts_free(po);
  return 0;
}
