/* acc-read-bench: gmm-acc-stats-ali's reading thread alone (gpu-acc/
 * acc-pipeline.c's loop without the accumulator): features read in order
 * (taken from the reader), alignments looked up by key and copied, the
 * frames checked against the model's transition-ids. What a GPU run's
 * reading thread costs, on a machine without a GPU.
 *
 *   acc-read-bench [--threads=N] <model> <feature-rspecifier> <ali-rspecifier>
 *
 * --threads: the feature archive read ahead on N threads (kio_seq_read_ahead,
 * as the program does by default); 0: in order on this thread (as before).
 * Prints one line: utterances, frames, seconds, GB/s of features, the time
 * spent waiting for features and in the alignment lookups, and a checksum
 * of every feature and alignment value (the same for any --threads). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/io/io.h"
#include "base/io/table.h"
#include "base/matrix/matrix.h"
#include "base/model/model.h"
#include "base/program/program.h"
#include "base/sys/log.h"
#include "base/sys/options.h"

static double cpu_s(clockid_t c) {
  struct timespec ts;
  clock_gettime(c, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char *argv[]) {
  kio_program_start(argc, argv);
  const char *usage =
      "gmm-acc-stats-ali's reading (features in order, alignments by key), timed.\n"
      "Usage: acc-read-bench [options] <model> <feature-rspecifier> <ali-rspecifier>\n";
  int32_t threads = 0;
  kio_opts *po = kio_opts_new(usage);
  kio_opts_int(po, "threads", &threads, "Threads reading the feature archive ahead (0: none)");
  kio_program_args(po, argc, argv, 3, 3);
  kio_tmodel tm = {0};
  kio_am_gmm am = {0};
  if (kio_model_read(kio_opts_arg(po, 1), &tm, &am) != KIO_OK) kio_fatal_exit();
  double t0 = kio_now_s(), c0 = cpu_s(CLOCK_THREAD_CPUTIME_ID),
         p0 = cpu_s(CLOCK_PROCESS_CPUTIME_ID);
  kio_seq_reader *feats;
  kio_ra_reader *alis;
  if (kio_seq_open(&feats, kio_opts_arg(po, 2), &kio_matrix_holder) != KIO_OK ||
      kio_ra_open(&alis, kio_opts_arg(po, 3), &kio_int_vec_holder) != KIO_OK)
    kio_fatal_exit();
  int on = threads > 0 && kio_seq_read_ahead(feats, kio_matrix_body_bytes, threads, 32 + 16 * threads);
  int ali_on = threads > 0 && kio_ra_read_ahead(alis);
  kio_matrix m = {0, 0, NULL, 0};
  int32_t *ali = NULL;
  size_t ali_cap = 0;
  long utts = 0, no_ali = 0, bad = 0;
  long long frames = 0;
  double t_feats = 0, t_ali = 0, bytes = 0;
  unsigned long long sum = 0;
  for (;;) {
    double a = kio_now_s();
    if (kio_seq_done(feats)) break;
    const char *key = kio_seq_key(feats);
    double b = kio_now_s();
    int has = kio_ra_has_key(alis, key);
    if (has < 0) kio_fatal_exit();
    const kio_int_vec *v = NULL;
    if (has && !(v = kio_ra_value(alis, key))) kio_fatal_exit();
    double c = kio_now_s();
    t_ali += c - b;
    if (!has) {
      no_ali++;
    } else {
      if (kio_seq_take(feats, &m) != KIO_OK) kio_fatal_exit();
      if ((size_t)v->n > ali_cap) {
        ali_cap = (size_t)v->n;
        if (!(ali = realloc(ali, ali_cap * sizeof *ali))) return 1;
      }
      if (v->n) memcpy(ali, v->v, (size_t)v->n * sizeof *ali);
      for (int32_t t = 0; t < v->n; t++)
        if (ali[t] < 0 || ali[t] > tm.num_tids || tm.tid2pdf[ali[t]] >= am.num_pdfs) bad++;
      /* a cheap checksum: every 7th value of features and alignment */
      const unsigned *u = (const unsigned *)m.data;
      size_t n = (size_t)m.rows * (size_t)m.cols;
      for (size_t i = 0; i < n; i += 7) sum = sum * 31 + u[i];
      for (int32_t t = 0; t < v->n; t += 7) sum = sum * 31 + (unsigned)ali[t];
      utts++;
      frames += m.rows;
      bytes += (double)n * sizeof(float);
    }
    double d = kio_now_s();
    kio_seq_next(feats);
    t_feats += kio_now_s() - d + (b - a);
  }
  int rc = kio_ra_close(alis) | kio_seq_close(feats);
  double t = kio_now_s() - t0, c = cpu_s(CLOCK_THREAD_CPUTIME_ID) - c0,
         p = cpu_s(CLOCK_PROCESS_CPUTIME_ID) - p0;
  printf("threads %d (read ahead: features %s, alignments %s): %ld utterances (%ld without "
         "alignment), %lld frames, %.3f s, %.2f GB/s of features; waiting for features %.3f s, "
         "alignments %.3f s; CPU: this thread %.3f s, all threads %.3f s; bad %ld; "
         "checksum %016llx\n",
         threads, on ? "yes" : "no", ali_on ? "yes" : "no", utts, no_ali, frames, t,
         bytes / t / 1e9, t_feats, t_ali, c, p, bad, sum);
  kio_matrix_free(&m);
  free(ali);
  kio_opts_free(po);
  return rc != KIO_OK;
}
