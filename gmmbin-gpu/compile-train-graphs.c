/* compile-train-graphs: Kaldi's bin/compile-train-graphs (same usage,
 * options, log lines, exit codes and byte-identical graphs), with the
 * utterances of each batch compiled on all cores and written in input order.
 *
 * Log lines carry Kaldi's own function/file/line so logs diff cleanly. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/sys/cpu-share.h"
#include "base/io/io.h"
#include "base/sys/kaldi-msg.h"
#include "base/sys/log.h"
#include "base/model/model.h"
#include "base/sys/options.h"
#include "base/io/table.h"
#include "train-graphs/train-graphs.h"
#include "base/program/program.h"


static const char *const kUsage =
    "Creates training graphs (without transition-probabilities, by default)\n"
    "\n"
    "Usage:   compile-train-graphs [options] <tree-in> <model-in> <lexicon-fst-in> "
    "<transcriptions-rspecifier> <graphs-wspecifier>\n"
    "e.g.: \n"
    " compile-train-graphs tree 1.mdl lex.fst 'ark:sym2int.pl -f 2- words.txt text|' "
    "ark:graphs.fsts\n";

/* One batch: transcripts read, graphs compiled (by a helper thread, while
 * the main thread writes the previous batch and reads the next). */
typedef struct {
  tgraph_compiler *gc;
  int n, what, threads, rc;
  char **keys;
  kio_int_vec *words;
  tgraph_graph *graphs;
  kio_log_deferred *log;  /* the helper's log lines, replayed in order */
  pthread_t th;
  int running;
} batch;

static void *compile_batch(void *arg) {
  batch *b = arg;
  kio_log_defer(&b->log);
  /* threads <= 0: tgraph_compile takes this process's share of the cores,
   * counted per batch (the recipe's other jobs start and finish around us). */
  b->rc = tgraph_compile(b->gc, b->n, b->words, b->what, b->threads, b->graphs);
  kio_log_defer(NULL);
  return NULL;
}

static int batch_alloc(batch *b, int size) {
  b->words = calloc((size_t)size, sizeof *b->words);
  b->keys = calloc((size_t)size, sizeof *b->keys);
  b->graphs = calloc((size_t)size, sizeof *b->graphs);
  return b->words && b->keys && b->graphs ? KIO_OK : KIO_ERR;
}

static void batch_free(batch *b, int size) {
  for (int i = 0; b->keys && i < size; i++) free(b->keys[i]);
  for (int i = 0; b->words && i < size; i++) free(b->words[i].v);
  free(b->keys);
  free(b->words);
  free(b->graphs);
}

/* Reads up to size transcripts into b. */
static int batch_read(batch *b, kio_seq_reader *reader, int size) {
  b->n = 0;
  for (; !kio_seq_done(reader) && b->n < size; kio_seq_next(reader), b->n++) {
    free(b->keys[b->n]);
    b->keys[b->n] = strdup(kio_seq_key(reader));
    if (!b->keys[b->n] || kio_seq_take(reader, &b->words[b->n]) != KIO_OK) return KIO_ERR;
  }
  return KIO_OK;
}

static int batch_start(batch *b) {
  b->rc = KIO_ERR;
  b->log = NULL;
  if (pthread_create(&b->th, NULL, compile_batch, b) != 0) {
    compile_batch(b);
    kio_log_replay(&b->log);
    return b->rc;
  }
  b->running = 1;
  return KIO_OK;
}

static int batch_join(batch *b) {
  if (b->running) {
    pthread_join(b->th, NULL);
    b->running = 0;
    kio_log_replay(&b->log);
  }
  return b->rc;
}

int main(int argc, char **argv) {
  kio_program_start(argc, argv);
  tgraph_tune_malloc(argv);
  kio_opts *po = kio_opts_new(kUsage);
  tgraph_opts gopts;
  tgraph_opts_default(&gopts);
  /* Kaldi changes the defaults to 0: the aligner adds transition probabilities. */
  gopts.transition_scale = 0.0f;
  gopts.self_loop_scale = 0.0f;
  int32_t batch_size = 250, num_threads = 0;
  char *disambig_rx = NULL;
  kio_opts_float(po, "transition-scale", &gopts.transition_scale,
                 "Scale of transition probabilities (excluding self-loops)");
  kio_opts_float(po, "self-loop-scale", &gopts.self_loop_scale,
                 "Scale of self-loop vs. non-self-loop probability mass ");
  kio_opts_bool(po, "reorder", &gopts.reorder,
                "Reorder transition ids for greater decoding efficiency.");
  kio_opts_bool(po, "rm-eps", &gopts.rm_eps,
                "Remove [most] epsilons before minimization (only applicable if disambig "
                "symbols present)");
  kio_opts_int(po, "batch-size", &batch_size,
               "Number of FSTs to compile at a time (more -> faster but uses more memory.  "
               "E.g. 500");
  kio_opts_string(po, "read-disambig-syms", &disambig_rx,
                  "File containing list of disambiguation symbols in phone symbol table");
  kio_opts_int(po, "num-threads", &num_threads,
               "Threads compiling graphs (0: this job's share of the online cores, i.e. "
               "the cores divided by the running copies of this program) [not in Kaldi]");
  kio_program_args(po, argc, argv, 5, 5);
  if (batch_size < 1) batch_size = 1;

  kio_ctx_dep tree;
  memset(&tree, 0, sizeof tree);
  kio_tmodel tm;
  memset(&tm, 0, sizeof tm);
  int32_t *disambig = NULL, num_disambig = 0;
  tgraph_compiler *gc = NULL;
  kio_seq_reader *reader = NULL;
  kio_writer *writer = NULL;
  batch bt[2];
  memset(bt, 0, sizeof bt);

  if (kio_ctx_dep_read(kio_opts_arg(po, 1), &tree) != KIO_OK ||
      kio_model_read(kio_opts_arg(po, 2), &tm, NULL) != KIO_OK)
    goto fatal_exit;
  if (tgraph_read_disambig(disambig_rx, KIO_KM_CTG_DISAMBIG, &disambig, &num_disambig) != KIO_OK)
    goto fatal_exit;
  if (tgraph_create(&gc, &tm, &tree, kio_opts_arg(po, 3), disambig, num_disambig, &gopts) !=
      KIO_OK)
    goto fatal_exit;

  kio_wspec ws;
  int text_out = kio_parse_wspecifier(kio_opts_arg(po, 5), &ws) == KIO_OK && !ws.binary;
  if (kio_seq_open(&reader, kio_opts_arg(po, 4), &kio_int_vec_holder) != KIO_OK ||
      kio_writer_open(&writer, kio_opts_arg(po, 5), &tgraph_graph_holder) != KIO_OK)
    goto fatal_exit;

  /* Graphs do not depend on the batches (each utterance is compiled on its
   * own, as Kaldi does), so a batch is at least 32 per thread: the threads'
   * tails at the end of each batch stay small. Counted after the model and
   * lexicon are read, when a recipe's other jobs have started too. */
  {
    int nt = num_threads > 0 ? num_threads : kio_cpu_share(0);
    if (batch_size < 32 * nt) batch_size = 32 * nt < 8192 ? 32 * nt : 8192;
  }
  if (batch_alloc(&bt[0], batch_size) != KIO_OK || batch_alloc(&bt[1], batch_size) != KIO_OK) {
    KIO_ERROR("out of memory for a batch of %d transcripts", (int)batch_size);
    goto fatal_exit;
  }
  long num_succeed = 0, num_fail = 0;
  for (int k = 0; k < 2; k++) {
    bt[k].gc = gc;
    bt[k].what = TGRAPH_BYTES | (text_out ? TGRAPH_CSR : 0);
    bt[k].threads = num_threads;
  }
  /* Batch k compiles while batch k-1 is written and batch k+1 read. */
  batch *cur = &bt[0], *nxt = &bt[1];
  if (batch_read(cur, reader, batch_size) != KIO_OK) goto fatal_exit;
  if (cur->n > 0 && batch_start(cur) != KIO_OK) goto fatal_exit;
  while (cur->n > 0) {
    if (batch_read(nxt, reader, batch_size) != KIO_OK) goto fatal_exit;
    if (batch_join(cur) != KIO_OK) goto fatal_exit;
    if (nxt->n > 0 && batch_start(nxt) != KIO_OK) goto fatal_exit;
    for (int i = 0; i < cur->n; i++) {
      tgraph_graph *g = &cur->graphs[i];
      if (!g->empty) {
        num_succeed++;
        if (!writer) {
          KIO_ERROR("Trying to use empty TableWriter (perhaps you passed the empty "
                    "string as an argument to a program?)");
          goto fatal_exit;
        }
        if (kio_writer_write(writer, cur->keys[i], g) != KIO_OK) goto fatal_exit;
      } else {
        KIO_KALDI(CTG_EMPTY_GRAPH, cur->keys[i]);
        num_fail++;
      }
      tgraph_graph_free(g);
    }
    batch *t = cur;
    cur = nxt;
    nxt = t;
  }
  KIO_KALDI(CTG_DONE, num_succeed, num_fail);
  if (kio_seq_close(reader) != KIO_OK) kio_fatal_exit();
  if (kio_writer_close(writer) != KIO_OK) kio_fatal_exit();
  batch_free(&bt[0], batch_size);
  batch_free(&bt[1], batch_size);
  free(disambig);
  tgraph_free(gc);
  kio_tmodel_free(&tm);
  kio_ctx_dep_free(&tree);
  kio_opts_free(po);
  free(disambig_rx);
  return num_succeed != 0 ? 0 : 1;

fatal_exit:
  /* A compile in flight is left running: the process ends here. */
  kio_fatal_exit();
}
