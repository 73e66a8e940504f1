/* weight-silence-post: Kaldi's program (bin/weight-silence-post.cc): the
 * same usage, options, output bytes, log lines and exit codes; a C process
 * that starts fast, as the steps scripts run it between ali-to-post and
 * gmm-acc-mllt (train_lda_mllt.sh) and others. */
#include <stdlib.h>

#include "base/io/io.h"
#include "base/io/table.h"
#include "base/program/program.h"
#include "base/sys/kaldi-msg.h"
#include "base/sys/log.h"
#include "base/sys/options.h"
#include "gpu-acc/mllt.h"

static const char *const kUsage =
    "Apply weight to silences in posts\n"
    "Usage:  weight-silence-post [options] <silence-weight> <silence-phones> <model> "
    "<posteriors-rspecifier> <posteriors-wspecifier>\n"
    "e.g.:\n"
    " weight-silence-post 0.0 1:2:3 1.mdl ark:1.post ark:nosil.post\n";

int main(int argc, char **argv) {
  kio_program_start(argc, argv);
  kio_opts *po = kio_opts_new(kUsage);
  int distribute = 0;
  kio_opts_bool(po, "distribute", &distribute,
                "If true, rather than weighting the individual posteriors, apply the weighting "
                "to the whole frame: i.e. on time t, scale all posterior entries by "
                "p(sil)*silence-weight + p(non-sil)*1.0");
  kio_program_args(po, argc, argv, 5, 5);
  const char *wstr = kio_opts_arg(po, 1), *pstr = kio_opts_arg(po, 2);
  char *end;
  float weight = strtof(wstr, &end);
  if (end == wstr || *end) {
    KIO_KALDI(WSP_BAD_WEIGHT, wstr);
    kio_fatal_exit();
  }
  int32_t *phones;
  int nph;
  if (gacc_parse_phones(pstr, &phones, &nph) != KIO_OK) {
    KIO_KALDI(WSP_BAD_PHONES, pstr);
    kio_fatal_exit();
  }
  if (nph == 0) KIO_KALDI(WSP_NO_PHONES);
  gacc_sil_set sil;
  if (gacc_sil_set_load(&sil, kio_opts_arg(po, 3), phones, nph) != KIO_OK) kio_fatal_exit();
  kio_seq_reader *r = NULL;
  kio_writer *w = NULL;
  if (kio_seq_open(&r, kio_opts_arg(po, 4), &gacc_post_holder) != KIO_OK) kio_fatal_exit();
  if (kio_writer_open(&w, kio_opts_arg(po, 5), &gacc_post_holder) != KIO_OK) kio_fatal_exit();
  long done = 0;
  gacc_post p = {0};
  for (; !kio_seq_done(r); kio_seq_next(r)) {
    const char *key = kio_seq_key(r);
    if (kio_seq_take(r, &p) != KIO_OK ||
        gacc_post_weight_silence(&p, &sil, weight, distribute, key) != KIO_OK ||
        kio_writer_write(w, key, &p) != KIO_OK)
      kio_fatal_exit();
    done++;
  }
  if (kio_seq_close(r) != KIO_OK) kio_fatal_exit();
  KIO_KALDI(WSP_DONE, done);
  if (kio_writer_close(w) != KIO_OK) kio_fatal_exit();
  gacc_post_holder.free(&p);
  gacc_sil_set_free(&sil);
  free(phones);
  kio_opts_free(po);
  return done != 0 ? 0 : 1;
}
