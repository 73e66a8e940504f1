/* gmm-acc-stats-twofeats's work (gmmbin/gmm-acc-stats-twofeats.cc): the
 * component posteriors of each frame from the first features, the GMM
 * statistics from the second (train_sat.sh's alignment model: posteriors
 * from the speaker-adapted features, statistics of the speaker-independent
 * ones), in Kaldi's order and rounding (the CPU accumulator's arithmetic,
 * gpu-acc/acc-cpu-fast.c), with Kaldi's log lines and counts. */
#ifndef GACC_TWOFEATS_H
#define GACC_TWOFEATS_H

#include "base/model/model.h"
#include "gpu-acc/gpu-acc.h"

/* Per frame, the posterior's pairs become per-pdf weights in the order in
 * which Kaldi's ConvertPosteriorToPdfs lists them: an unordered_map<int32,
 * BaseFloat> of libstdc++ (GCC 7 or later: 13 buckets from the first
 * insertion, then 29, 59, 127; each new key at the front of its bucket's
 * run, a new bucket's run at the front of the list), pdfs whose summed
 * weight is 0 left out. Up to 127 pdfs in a frame this is that map's order;
 * beyond, the order here is first occurrence (*beyond_127 set). pdf[], w[]:
 * room for n; returns how many were written. */
int gacc_pdf_post_order(const int32_t *pdf_of_pair, const float *w_of_pair, int n,
                        int32_t *pdf, float *w, int *beyond_127);

/* Runs the program's loop: features 1 in order (base/feat's in-process
 * chain for the recipes' pipes), features 2 and the posteriors by key, the
 * statistics into *out (initialised here with the second features'
 * dimension when the first file is accumulated; with none, num_pdfs 0 as
 * Kaldi writes it). *num_done: files accumulated. KIO_ERR after an ERROR
 * (Kaldi's fatal errors; the readers' failures at close). */
int gacc_twofeats_run(const kio_tmodel *tm, const kio_am_gmm *am, const char *feats1_rspecifier,
                      const char *feats2_rspecifier, const char *posteriors_rspecifier,
                      gacc_stats *out, long *num_done);

#endif
