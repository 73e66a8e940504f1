/* The Kaldi fixtures loaded for the aligner's device tests
 * (tests/gpu/check_gpu_align.c): model, features and graphs of tests/data,
 * the CPU path as the reference, and bit-for-bit comparison of results.
 * Failures are Check assertions (call from inside a test). */
#ifndef TEST_ALIGN_FIXTURE_H
#define TEST_ALIGN_FIXTURE_H

#include <stdint.h>

#include "base/matrix/matrix.h"
#include "base/model/model.h"
#include "gpu-align/align-cpu.h"
#include "gpu-align/align-cuda.h"
#include "gpu-align/gpu-align.h"

typedef struct {
  kio_tmodel tm;
  kio_am_gmm am;
  galign_gmm gmm;
  galign_opts o;
  int n;
  char **keys;
  galign_graph *graphs;
  kio_matrix *feats;
  const galign_graph **gp;  /* pointer views for the batch APIs */
  const kio_matrix **fp;
  int64_t frames;
} fixture;

/* Model M, features F (an rspecifier), graphs G (a .fsts.gz path, or a
 * model name for graphs/G.fsts.gz); Kaldi's options of the fixtures (scales
 * 1.0 / 0.1 / 0.1, beam 10, retry 40). Run from tests/data. */
void fx_load(fixture *fx, const char *model, const char *feats, const char *graphs, int careful);
void fx_free(fixture *fx);
/* A device aligner on the job's device (--use-gpu=yes). */
galign_cuda *new_cuda(const fixture *fx);
/* Monotonic seconds. */
double now_s(void);
/* CPU path, one utterance at a time (the reference); free_results frees. */
galign_result *cpu_align_all(const fixture *fx, int want_pf);
void free_results(galign_result *r, int n);
/* Bit-identical results (alignment, like, score, flags; per-frame if pf). */
void assert_same(const fixture *fx, const galign_result *a, const galign_result *b, int pf,
                 const char *what);

#endif
