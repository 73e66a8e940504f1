/* One job's share of an iteration (internal to train/): equal alignment
 * (align-equal-compiled), realignment (gmm-align-compiled with
 * gmm-boost-silence's model), accumulation (gmm-acc-stats-ali), each with
 * the lines those programs print, into the log that is open (trn-log.h). */
#ifndef TRN_PASS_H
#define TRN_PASS_H

#include <stdint.h>

#include "gpu-acc/gpu-acc.h"
#include "gpu-align/gpu-align.h"
#include "train/trainer.h"

/* gmm-boost-silence: out = am with the weights of the silence phones' pdfs
 * scaled by boost (gconsts recomputed); its lines logged as that program.
 * phones: sorted. */
int trn_boost_silence(const kio_tmodel *tm, const kio_am_gmm *am, const int32_t *phones,
                      int32_t nphones, float boost, kio_am_gmm *out);
/* Its lines again (each job's log has them). */
void trn_boost_lines(const kio_tmodel *tm, const int32_t *phones, int32_t nphones, float boost);

/* Utterances [lo, hi) of d: which to process (NULL: all). */
typedef struct {
  const trn_data *d;
  int32_t lo, hi;
  const uint8_t *pick;    /* per utterance of d, or NULL */
} trn_range;

/* Equal alignments for the range's utterances (their ali replaced). */
int trn_equal_align(trn_data *d, const trn_range *r);

/* What realignment did to an utterance (its lines are logged later, job by
 * job, by trn_align_lines). */
enum { TRN_ALI_NONE = 0, TRN_ALI_ZERO_LENGTH, TRN_ALI_EMPTY_GRAPH, TRN_ALI_FAILED, TRN_ALI_OK };
typedef struct {
  uint8_t state, retried;
  float like;
} trn_ali_note;

/* Realigns the range's utterances with aligner a (graphs prepared with tm
 * and o on threads threads), in batches that may span jobs; failures leave
 * the utterance without alignment. note (per utterance of d) receives what
 * happened to each utterance of the range. */
int trn_align(trn_data *d, const trn_range *r, galign_aligner *a, const kio_tmodel *tm,
              const galign_opts *o, int threads, int32_t stage, trn_ali_note *note);
/* gmm-align-compiled's per-utterance and closing lines for the range. */
void trn_align_lines(const trn_data *d, const trn_range *r, const trn_ali_note *note,
                     const galign_opts *o);

/* Accumulates the range's utterances with acc (their alignments), in order;
 * gmm-acc-stats-ali's lines when lines is nonzero. */
int trn_accumulate(const trn_range *r, gacc_acc *acc, int lines);

#endif
