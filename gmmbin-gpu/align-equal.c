/* align-equal: Kaldi's bin/align-equal (usage, options, log lines, exit
 * codes, byte-identical alignments): equally spaced alignments from the
 * tree, model, lexicon and transcripts, the training graphs compiled
 * in-process (train-graphs/, on all cores, a batch at a time) exactly as
 * Kaldi's TrainingGraphCompiler(1.0, true) compiles them.
 *
 * Log lines carry Kaldi's own function/file/line so logs diff cleanly. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/model/fst.h"
#include "base/io/io.h"
#include "base/sys/kaldi-msg.h"
#include "base/sys/log.h"
#include "base/matrix/matrix.h"
#include "base/model/model.h"
#include "base/sys/options.h"
#include "base/io/table.h"
#include "gpu-align/gpu-align.h"
#include "train-graphs/train-graphs.h"
#include "base/program/program.h"


static const char *const kUsage =
    "Write equally spaced alignments of utterances (to get training started)\n"
    "Usage:  align-equal <tree-in> <model-in> <lexicon-fst-in> <features-rspecifier> "
    "<transcriptions-rspecifier> <alignments-wspecifier>\n"
    "e.g.: \n"
    " align-equal 1.tree 1.mdl lex.fst scp:train.scp 'ark:sym2int.pl -f 2- words.txt text|' "
    "ark:equal.ali\n";

enum { BATCH = 256 };
/* What happened to one utterance of a batch, replayed in input order. */
enum { U_NO_TRANSCRIPT, U_ZERO_LENGTH, U_COMPILE };
typedef struct {
  int kind;
  char *key;
  int32_t rows;
  int job;  /* U_COMPILE: index into the compile arrays */
} utt;

int main(int argc, char **argv) {
  kio_program_start(argc, argv);
  tgraph_tune_malloc(argv);
  kio_opts *po = kio_opts_new(kUsage);
  char *disambig_rx = NULL;
  int32_t num_threads = 0;
  kio_opts_string(po, "read-disambig-syms", &disambig_rx,
                  "File containing list of disambiguation symbols in phone symbol table");
  kio_opts_int(po, "num-threads", &num_threads,
               "Threads compiling graphs (0: this job's share of the online cores, i.e. "
               "the cores divided by the running copies of this program) [not in Kaldi]");
  kio_program_args(po, argc, argv, 6, 6);

  kio_ctx_dep tree;
  memset(&tree, 0, sizeof tree);
  kio_tmodel tm;
  memset(&tm, 0, sizeof tm);
  int32_t *disambig = NULL, num_disambig = 0;
  tgraph_compiler *gc = NULL;
  kio_seq_reader *feats = NULL;
  kio_ra_reader *trans = NULL;
  kio_writer *writer = NULL;
  utt *u = calloc(BATCH, sizeof *u);
  kio_int_vec *words = calloc(BATCH, sizeof *words);
  tgraph_graph *graphs = calloc(BATCH, sizeof *graphs);
  kio_int_vec ali = {0, NULL};
  size_t ali_cap = 0;
  if (!u || !words || !graphs) { KIO_ERROR("out of memory"); goto fatal_exit; }

  tgraph_opts gopts;
  tgraph_opts_default(&gopts);  /* TrainingGraphCompilerOptions(1.0, true): scales 1, 1 */
  if (kio_ctx_dep_read(kio_opts_arg(po, 1), &tree) != KIO_OK ||
      kio_model_read(kio_opts_arg(po, 2), &tm, NULL) != KIO_OK ||
      tgraph_read_disambig(disambig_rx, KIO_KM_AE_DISAMBIG, &disambig, &num_disambig) != KIO_OK ||
      tgraph_create(&gc, &tm, &tree, kio_opts_arg(po, 3), disambig, num_disambig, &gopts) !=
          KIO_OK)
    goto fatal_exit;
  if (kio_seq_open(&feats, kio_opts_arg(po, 4), &kio_matrix_holder) != KIO_OK ||
      kio_ra_open(&trans, kio_opts_arg(po, 5), &kio_int_vec_holder) != KIO_OK ||
      kio_writer_open(&writer, kio_opts_arg(po, 6), &kio_int_vec_holder) != KIO_OK)
    goto fatal_exit;

  long done = 0, no_transcript = 0, other_error = 0;
  while (!kio_seq_done(feats)) {
    /* A batch: transcripts looked up, graphs compiled together, then each
     * utterance handled in input order. */
    int n = 0, njobs = 0;
    for (; n < BATCH && !kio_seq_done(feats); kio_seq_next(feats), n++) {
      const char *key = kio_seq_key(feats);
      free(u[n].key);
      u[n].key = strdup(key);
      if (!u[n].key) { KIO_ERROR("out of memory"); goto fatal_exit; }
      int has = kio_ra_has_key(trans, key);
      if (has < 0) goto fatal_exit;
      if (!has) { u[n].kind = U_NO_TRANSCRIPT; continue; }
      const kio_int_vec *t = kio_ra_value(trans, key);
      const kio_matrix *m = t ? kio_seq_value(feats) : NULL;
      if (!t || !m) goto fatal_exit;
      u[n].rows = m->rows;
      if (m->rows == 0) { u[n].kind = U_ZERO_LENGTH; continue; }
      u[n].kind = U_COMPILE;
      u[n].job = njobs;
      kio_int_vec *w = &words[njobs++];
      int32_t *v = realloc(w->v, (size_t)(t->n ? t->n : 1) * sizeof *v);
      if (!v) { KIO_ERROR("out of memory"); goto fatal_exit; }
      memcpy(v, t->v, (size_t)t->n * sizeof *v);
      w->v = v;
      w->n = t->n;
    }
    if (tgraph_compile(gc, njobs, words, TGRAPH_CSR, num_threads, graphs) != KIO_OK)
      goto fatal_exit;
    for (int i = 0; i < n; i++) {
      const char *key = u[i].key;
      if (u[i].kind == U_NO_TRANSCRIPT) {
        KIO_KALDI(AE_NO_TRANSCRIPT, key);
        no_transcript++;
        continue;
      }
      if (u[i].kind == U_ZERO_LENGTH) {
        KIO_KALDI(AE_ZERO_LENGTH, key);
        other_error++;
        continue;
      }
      tgraph_graph *g = &graphs[u[i].job];
      if ((size_t)u[i].rows > ali_cap) {
        int32_t *v = realloc(ali.v, (size_t)u[i].rows * sizeof *v);
        if (!v) { KIO_ERROR("out of memory"); goto fatal_exit; }
        ali.v = v;
        ali_cap = (size_t)u[i].rows;
      }
      if (galign_equal_align(&g->fst, u[i].rows, galign_key_seed(key), ali.v)) {
        ali.n = u[i].rows;
        if (!writer) {
          KIO_ERROR("Trying to use empty TableWriter (perhaps you passed the empty "
                    "string as an argument to a program?)");
          goto fatal_exit;
        }
        if (kio_writer_write(writer, key, &ali) != KIO_OK) goto fatal_exit;
        done++;
      } else {
        KIO_KALDI(AE_NOT_ALIGNED, key);
        other_error++;
      }
      tgraph_graph_free(g);
    }
  }
  if (done != 0 && no_transcript == 0 && other_error == 0)
    KIO_KALDI(AE_SUCCESS, done);
  else
    KIO_KALDI(AE_COMPUTED, done, no_transcript, other_error);
  int ret = done != 0 ? 0 : 1;
  int closed_ok = kio_ra_close(trans) == KIO_OK;
  closed_ok = kio_seq_close(feats) == KIO_OK && closed_ok;
  if (!closed_ok || kio_writer_close(writer) != KIO_OK) kio_fatal_exit();
  for (int i = 0; i < BATCH; i++) {
    free(u[i].key);
    free(words[i].v);
  }
  free(u);
  free(words);
  free(graphs);
  free(ali.v);
  free(disambig);
  tgraph_free(gc);
  kio_tmodel_free(&tm);
  kio_ctx_dep_free(&tree);
  kio_opts_free(po);
  free(disambig_rx);
  return ret;

fatal_exit:
  kio_fatal_exit();
}
