/* acc-tree-stats: Kaldi's program (bin/acc-tree-stats.cc): the same usage,
 * options, output bytes, log lines and exit codes. The statistics are
 * AccumulateTreeStats' (tree/tree-acc.c); the features rspecifier of the
 * steps scripts is computed in-process (base/feat), the alignments read
 * through the table readers (gunzip in-process). */
#include <stdlib.h>

#include "base/io/io.h"
#include "base/io/table.h"
#include "base/matrix/matrix.h"
#include "base/model/model.h"
#include "base/program/program.h"
#include "base/sys/cpu-share.h"
#include "base/sys/kaldi-msg.h"
#include "base/sys/log.h"
#include "base/sys/options.h"
#include "base/sys/settings.h"
#include "tree/tree-stats.h"

static const char *const kUsage =
    "Accumulate statistics for phonetic-context tree building.\n"
    "Usage:  acc-tree-stats [options] <model-in> <features-rspecifier> "
    "<alignments-rspecifier> <tree-accs-out>\n"
    "e.g.: \n"
    " acc-tree-stats 1.mdl scp:train.scp ark:1.ali 1.tacc\n";

static void quiet(int level, const char *func, const char *file, int line, const char *msg,
                  void *user) {
  (void)level; (void)func; (void)file; (void)line; (void)msg; (void)user;
}

/* The loop of acc-tree-stats.cc; KIO_ERR after an ERROR. */
static int run(tstat_acc *acc, const kio_tmodel *tm, kio_seq_reader *feats, kio_ra_reader *alis,
               long *num_done) {
  long done = 0, no_ali = 0, other = 0;
  for (; !kio_seq_done(feats); kio_seq_next(feats)) {
    const char *key = kio_seq_key(feats);
    int has = kio_ra_has_key(alis, key);
    if (has < 0) return KIO_ERR;
    if (!has) {
      no_ali++;
      continue;
    }
    const kio_matrix *x = kio_seq_value(feats);
    if (!x) return KIO_ERR;
    const kio_int_vec *a = kio_ra_value(alis, key);
    if (!a) return KIO_ERR;
    if (a->n != x->rows) {
      KIO_KALDI(TREE_WRONG_SIZE, (int)a->n, (int)x->rows);
      other++;
      continue;
    }
    if (tstat_acc_utt(acc, tm, key, a->v, a->n, x) != KIO_OK) return KIO_ERR;
    done++;
    if (done % 1000 == 0) KIO_KALDI(TREE_PROCESSED, done);
  }
  *num_done = done;
  num_done[1] = no_ali;
  num_done[2] = other;
  return KIO_OK;
}

int main(int argc, char **argv) {
  kio_program_start(argc, argv);
  kio_opts *po = kio_opts_new(kUsage);
  int binary = 1;
  float var_floor = 0.01f;
  int32_t width = 3, central = 1;
  char *ci = NULL, *phone_map = NULL;
  kio_opts_bool(po, "binary", &binary, "Write output in binary mode");
  kio_opts_float(po, "var-floor", &var_floor, "Variance floor for tree clustering.");
  kio_opts_string(po, "ci-phones", &ci,
                  "Colon-separated list of integer indices of context-independent phones "
                  "(after mapping, if --phone-map option is used).");
  kio_opts_int(po, "context-width", &width, "Context window size.");
  kio_opts_int(po, "central-position", &central, "Central context-window position (zero-based)");
  kio_opts_string(po, "phone-map", &phone_map,
                  "File name containing old->new phone mapping (each line is: old-integer-id "
                  "new-integer-id)");
  kio_program_args(po, argc, argv, 4, 4);
  const char *model_in = kio_opts_arg(po, 1), *feats_rx = kio_opts_arg(po, 2),
             *alis_rx = kio_opts_arg(po, 3), *out = kio_opts_arg(po, 4);
  tstat_acc_opts o = {var_floor, width, central, ci ? ci : "", phone_map ? phone_map : ""};
  tstat_acc *acc = NULL;
  if (tstat_acc_new(&acc, &o) != KIO_OK) kio_fatal_exit();
  kio_tmodel tm = {0};
  if (kio_model_read(model_in, &tm, NULL) != KIO_OK) kio_fatal_exit();
  kio_seq_reader *feats = NULL;
  kio_ra_reader *alis = NULL;
  if (kio_seq_open(&feats, feats_rx, &kio_matrix_holder) != KIO_OK ||
      kio_ra_open(&alis, alis_rx, &kio_int_vec_holder) != KIO_OK)
    kio_fatal_exit();
  /* an archive file parsed ahead on threads: the same entries and messages */
  int threads = (int)kio_setting_int(KIO_SET_DEV_READ_THREADS, kio_cpu_share(8), 0, 64);
  if (threads > 0) {
    kio_seq_read_ahead(feats, kio_matrix_body_bytes, threads, 32 + 16 * threads);
    kio_ra_read_ahead(alis);
  }
  long counts[3] = {0, 0, 0};
  if (run(acc, &tm, feats, alis, counts) != KIO_OK) {
    kio_log_set_handler(quiet, NULL);  /* Kaldi prints nothing after its ERROR */
    kio_ra_close(alis);
    kio_seq_close(feats);
    kio_fatal_exit();
  }
  /* A reader's failure at close (read error, failed pipe) is fatal; Kaldi
   * finds it in the destructors, after writing: here it comes first, so no
   * statistics of failed inputs are written. */
  int failed = kio_ra_close(alis) != KIO_OK;
  if (kio_seq_close(feats) != KIO_OK) failed = 1;
  if (failed) kio_fatal_exit();
  tstat_table t;
  if (tstat_acc_take(acc, &t) != KIO_OK || tstat_write(out, binary, &t) != KIO_OK)
    kio_fatal_exit();
  KIO_KALDI(TREE_ACC_DONE, counts[0], counts[1], counts[2]);
  KIO_KALDI(TREE_ACC_NUM, t.n);
  tstat_free(&t);
  tstat_acc_free(acc);
  kio_tmodel_free(&tm);
  free(ci);
  free(phone_map);
  kio_opts_free(po);
  return counts[0] != 0 ? 0 : 1;
}
