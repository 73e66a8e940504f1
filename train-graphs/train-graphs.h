/* Training graphs compiled in-process, exactly as Kaldi's
 * TrainingGraphCompiler compiles them (prefix tgraph_): transcript -> linear
 * word acceptor -> o lexicon -> o inverse context FST -> o H transducer ->
 * determinize-star (log semiring) -> disambiguation symbols removed ->
 * encoded minimisation -> self-loops. Graphs are byte-identical to Kaldi's
 * compile-train-graphs (same states, arc order and property bits).
 *
 * OpenFst stays inside the C++ bridge (tgraph-bridge.cc and the headers it
 * includes); this interface is plain C. Utterances are independent, so a
 * batch is compiled on several threads and returned in input order. */
#ifndef TGRAPH_TRAIN_GRAPHS_H
#define TGRAPH_TRAIN_GRAPHS_H

#include <stddef.h>
#include <stdint.h>

#include "base/model/fst.h"
#include "base/model/model.h"
#include "base/io/table.h"
#include "base/sys/kaldi-msg.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  float transition_scale;  /* Kaldi's default 1.0; compile-train-graphs 0.0 */
  float self_loop_scale;   /* idem */
  int reorder;             /* 1 (default): self-loop after the forward arc */
  int rm_eps;              /* 0 (default); 1 is not supported (ERROR) */
  int max_states;          /* 0 (Kaldi: no limit); > 0: determinization of a
                              graph fails past that many states (fuzzing) */
} tgraph_opts;

void tgraph_opts_default(tgraph_opts *o);

typedef struct tgraph_compiler tgraph_compiler;

/* tm and tree must outlive the compiler. The lexicon FST is read from
 * lex_rxfilename (OpenFst binary, as Kaldi's ReadFstKaldi); disambig
 * (may be NULL/0) lists the disambiguation symbols. Logs ERROR and returns
 * KIO_ERR on failure. */
int tgraph_create(tgraph_compiler **c, const kio_tmodel *tm, const kio_ctx_dep *tree,
                  const char *lex_rxfilename, const int32_t *disambig, int32_t num_disambig,
                  const tgraph_opts *opts);
void tgraph_free(tgraph_compiler *c);

/* One compiled graph: the OpenFst binary bytes Kaldi's table writer writes
 * (bytes/len, malloc'ed) and/or the CSR form (fst). empty: no start state. */
typedef struct {
  char *bytes;
  size_t len;
  kio_fst fst;
  int empty;
} tgraph_graph;
void tgraph_graph_free(tgraph_graph *g);

/* What to produce per graph. */
enum { TGRAPH_BYTES = 1, TGRAPH_CSR = 2 };

/* Compiles n transcripts (word-id vectors) on num_threads threads (<= 0:
 * this process's share of the online cores, base/sys/cpu-share.h), out[0..n-1]
 * in input order. On a failure (what Kaldi dies of: a word the lexicon lacks, a non-determinizable graph, a tree that
 * cannot answer) logs Kaldi's ERROR / ASSERTION_FAILED line for the first
 * failing utterance in input order and returns KIO_ERR. */
int tgraph_compile(tgraph_compiler *c, int n, const kio_int_vec *words, int what,
                   int num_threads, tgraph_graph *out);

/* One transcript on the calling thread (any thread; compilers are shared
 * safely). Logs and returns KIO_ERR as tgraph_compile. */
int tgraph_compile_one(tgraph_compiler *c, const kio_int_vec *words, int what,
                       tgraph_graph *out);

/* Writes tgraph_graph entries (their bytes) to a table: binary only, as
 * Kaldi's VectorFstHolder writes them; text mode is refused (ERROR). */
extern const kio_holder tgraph_graph_holder;

/* Kaldi's --read-disambig-syms file (whitespace-separated integers; "" or
 * NULL: none): *v malloc'ed. On failure logs Kaldi's ERROR line msg (the
 * program's: KIO_KM_CTG_DISAMBIG, KIO_KM_AE_DISAMBIG, KIO_KM_GA_DISAMBIG)
 * and returns KIO_ERR. */
int tgraph_read_disambig(const char *rx, kio_kaldi_id msg, int32_t **v, int32_t *n);

/* Call first thing in main: re-executes the program once with glibc malloc
 * tunables that suit graph compilation (unless GLIBC_TUNABLES or
 * KALDI_GPU_DEV_GRAPHS_NO_TUNE is set). Returns only if nothing was done. */
void tgraph_tune_malloc(char **argv);

#ifdef __cplusplus
}
#endif
#endif
