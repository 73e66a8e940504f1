/* ali-to-post: Kaldi's program (bin/ali-to-post.cc): the same usage, output
 * bytes, log line and exit codes; a C process that starts fast, as the steps
 * scripts run it in front of gmm-acc-mllt (train_lda_mllt.sh) and others. */
#include "base/io/io.h"
#include "base/io/table.h"
#include "base/program/program.h"
#include "base/sys/kaldi-msg.h"
#include "base/sys/log.h"
#include "base/sys/options.h"
#include "gpu-acc/mllt.h"

static const char *const kUsage =
    "Convert alignments to posteriors.  This is simply a format change\n"
    "from integer vectors to Posteriors, which are vectors of lists of\n"
    "pairs (int, float) where the float represents the posterior.  The\n"
    "floats would all be 1.0 in this case.\n"
    "The posteriors will still be in terms of whatever integer index\n"
    "the input contained, which will be transition-ids if they came\n"
    "directly from decoding, or pdf-ids if they were processed by\n"
    "ali-to-pdf.\n"
    "Usage:  ali-to-post [options] <alignments-rspecifier> <posteriors-wspecifier>\n"
    "e.g.:\n"
    " ali-to-post ark:1.ali ark:1.post\n"
    "See also: ali-to-pdf, ali-to-phones, show-alignments, post-to-weights\n";

int main(int argc, char **argv) {
  kio_program_start(argc, argv);
  kio_opts *po = kio_opts_new(kUsage);
  kio_program_args(po, argc, argv, 2, 2);
  kio_seq_reader *r = NULL;
  kio_writer *w = NULL;
  if (kio_seq_open(&r, kio_opts_arg(po, 1), &kio_int_vec_holder) != KIO_OK) kio_fatal_exit();
  if (kio_writer_open(&w, kio_opts_arg(po, 2), &gacc_post_holder) != KIO_OK) kio_fatal_exit();
  long done = 0;
  gacc_post p = {0};
  for (; !kio_seq_done(r); kio_seq_next(r)) {
    const kio_int_vec *a = kio_seq_value(r);
    if (!a || gacc_post_from_ali(&p, a->v, a->n) != KIO_OK ||
        kio_writer_write(w, kio_seq_key(r), &p) != KIO_OK)
      kio_fatal_exit();
    done++;
  }
  /* a reader's failure at close is fatal before the output is complete */
  if (kio_seq_close(r) != KIO_OK) kio_fatal_exit();
  KIO_KALDI(ALI_TO_POST_DONE, done);
  if (kio_writer_close(w) != KIO_OK) kio_fatal_exit();
  gacc_post_holder.free(&p);
  kio_opts_free(po);
  return done != 0 ? 0 : 1;
}
