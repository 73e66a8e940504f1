/* gmm-acc-mllt's work (Kaldi's MlltAccs, transform/mllt.cc, driven as
 * gmmbin/gmm-acc-mllt.cc drives it): the posteriors table holder, the
 * accumulator of the global STC statistics (beta and the G matrices, the
 * bytes of the Kaldi whose OpenBLAS the rounding profile names) and the
 * program's loop with Kaldi's log lines. */
#ifndef GACC_MLLT_H
#define GACC_MLLT_H

#include <stdint.h>

#include "base/io/table.h"
#include "base/matrix/matrix.h"
#include "base/model/model.h"

/* Kaldi's Posterior: per frame, (transition-id, weight) pairs. The pairs of
 * frame t are [off[t], off[t + 1]). Owner: the struct. */
typedef struct {
  int32_t frames;
  int32_t *off;   /* frames + 1 */
  int32_t *tid;
  float *w;
  size_t cap_off, cap_pairs;
} gacc_post;
extern const kio_holder gacc_post_holder;
/* Room for frames frames and pairs pairs; KIO_ERR (kio_set_error) if out of memory. */
int gacc_post_reserve(gacc_post *p, size_t frames, size_t pairs);

/* ali-to-post: one pair (tid, 1) per frame. */
int gacc_post_from_ali(gacc_post *p, const int32_t *ali, int32_t n);

/* weight-silence-post's silence set: per transition-id of the model, whether
 * its phone is one of phones[0..n). */
typedef struct { uint8_t *is_sil; int32_t num_tids; } gacc_sil_set;
int gacc_sil_set_load(gacc_sil_set *s, const char *model_rx, const int32_t *phones, int n);
void gacc_sil_set_free(gacc_sil_set *s);
/* "1:2:3" as Kaldi's SplitStringToIntegers(str, ":", false): KIO_ERR if
 * malformed (nothing logged); "" gives none. *phones malloc'd. */
int gacc_parse_phones(const char *str, int32_t **phones, int *n);
/* WeightSilencePost (distribute: WeightSilencePostDistributed) in place;
 * ERROR naming key for a transition-id out of the model's range. */
int gacc_post_weight_silence(gacc_post *p, const gacc_sil_set *s, float scale, int distribute,
                             const char *key);

typedef struct gacc_mllt gacc_mllt;

/* MlltAccs(dim, rand_prune): statistics zero, RandPrune's draws from a
 * fresh process's rand() (glibc, seed 1), threads: the G updates split over
 * this many (results do not depend on it; <= 0: the process's CPU share). */
int gacc_mllt_new(gacc_mllt **m, int32_t dim, float rand_prune, int threads);
void gacc_mllt_free(gacc_mllt *m);

/* AccumulateFromGmm(gmm, x, weight) for frame t of utterance key: the
 * component posteriors of gmm (float, Kaldi's order) scaled by weight,
 * RandPrune'd, added into the statistics. *like = the frame's log-likelihood.
 * ERROR (KIO_ERR) where Kaldi dies: an invalid likelihood. */
int gacc_mllt_frame(gacc_mllt *m, const kio_diag_gmm *gmm, const float *x, float weight,
                    const char *key, int32_t t, float *like);

/* MlltAccs::Write to wxfilename (binary or text); KIO_ERR after an ERROR. */
int gacc_mllt_write(gacc_mllt *m, const char *wxfilename, int binary);

/* gmm-acc-mllt's loop: the features in order, their posteriors by key, the
 * per-file and final LOG lines. *num_done: files accumulated. KIO_ERR after
 * an ERROR (Kaldi's fatal errors; the readers' failures at close). */
int gacc_mllt_run(gacc_mllt *m, const kio_tmodel *tm, const kio_am_gmm *am,
                  const char *feature_rspecifier, const char *posteriors_rspecifier,
                  long *num_done);

#endif
