/* Margin-pruned realignment around a previous ("prior") alignment.
 *
 * The prior is laid onto the utterance's graph: the forward sets of states
 * the graph can be in after k frames when its emitting arcs carry exactly
 * the prior's transition-ids (k = 0..T, epsilon closures included). With
 * states placed in a topological order of the graph's strongly connected
 * components (self-loops and the silence HMM's loops stay inside one),
 * the smallest and largest place in those sets never decrease with k, so
 * the band after k frames is every state whose place lies between the
 * smallest place at frame k - margin and the largest at frame k + margin:
 * the prior's states in that window and all alternatives between them
 * (optional silence, other pronunciations). The decoder (viterbi-core.h)
 * keeps Kaldi's beam pruning inside the band and never leaves it; the CPU
 * path computes likelihoods only for the pdfs of arcs into the band.
 *
 * An utterance whose prior does not fit (none, another length, not a path
 * of the graph) is aligned by
 * the full search; so is one whose banded search reaches no final state.
 * The programs count both and log the counts at the end. */
#ifndef GALIGN_ALIGN_MARGIN_H
#define GALIGN_ALIGN_MARGIN_H

#include <stdint.h>
#include "base/io/table.h"
#include "gpu-align.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  GALIGN_BAND_OK = 0,
  GALIGN_BAND_NO_PRIOR,      /* no prior alignment for the utterance */
  GALIGN_BAND_LENGTH,        /* prior length != number of frames */
  GALIGN_BAND_NOT_IN_GRAPH,  /* the prior is not a path of the graph */
  GALIGN_BAND_CYCLIC,        /* a final state in the start's strongly connected
                                component (a loop back to the start): no band */
  GALIGN_BAND_NOMEM,
  GALIGN_BAND_FAILED,        /* no final state inside the band (decoder) */
  GALIGN_BAND_NUM
} galign_band_status;

/* Lays prior[0..n) onto g (prepared) for an utterance of T frames and sets
 * g->band_* (band_T = T) on success; on any other status g has no band. */
galign_band_status galign_band_build(galign_graph *g, const int32_t *prior, int32_t n,
                                     int32_t T, int32_t margin);

/* All alignments of an rspecifier, read into memory (keys looked up by the
 * pipeline's reading thread). */
typedef struct galign_prior_table galign_prior_table;
/* KIO_ERR (logged by the table code) if it cannot be read to its end. */
int galign_prior_table_read(galign_prior_table **t, const char *rspecifier);
/* NULL when the key is absent. */
const kio_int_vec *galign_prior_table_get(const galign_prior_table *t, const char *key);
int32_t galign_prior_table_size(const galign_prior_table *t);
void galign_prior_table_free(galign_prior_table *t);

/* KALDI_GPU_MARGIN=N for unchanged recipes: if the alignment wspecifier is
 * exactly "ark:|gzip -c >FILE" (the recipes' form; ark,t etc. allowed) and
 * FILE is a regular file, reads FILE completely ("ark:gunzip -c FILE|",
 * errors silenced) into *t before anything opens the output, and returns
 * KIO_OK with *t set. Anything doubtful (another form, no file, a read
 * error) leaves *t NULL (full search) with a LOG line saying why. */
int galign_prior_from_output(const char *ali_wspecifier, galign_prior_table **t);

/* Per-run counts (the pipeline's). */
typedef struct {
  int64_t banded;                    /* aligned inside the band */
  int64_t fallback[GALIGN_BAND_NUM]; /* full search, by reason */
} galign_margin_counts;
void galign_margin_count(galign_margin_counts *c, galign_band_status st, int band_failed);
/* One LOG line: "Margin M: X of N utterances aligned inside the band; full
 * search for Y (...reasons...)". */
void galign_margin_log(int32_t margin, const galign_margin_counts *c);

#ifdef __cplusplus
}
#endif
#endif
