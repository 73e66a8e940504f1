/* Internal to base/feat: the feature chain's output kept on disk between
 * runs (feat-cache.c). A recipe's training iterations run the same chain
 * over the same files again and again; a clean, complete run's archive
 * entries and its stages' counts are stored under a key naming everything
 * the output depends on, and a later open with the same key hands them out
 * instead of computing them; only for chains whose matrix products cost
 * more than reading the output back (kio_fcache_worth).
 * KALDI_GPU_FEATS_CACHE: the folder (default "featcache" in the user's
 * private directory), 0 disables it; KALDI_GPU_FEATS_CACHE_MAX: the size
 * budget. */
#ifndef KIO_FEAT_CACHE_H
#define KIO_FEAT_CACHE_H

#include <stdint.h>

#include "feat.h"

typedef struct kio_fcache kio_fcache;

/* 1 when the chain is worth keeping: it has a transform-feats stage (a
 * matrix product costs well above reading its output back); 0 for chains
 * of apply-cmvn, add-deltas, splice-feats, select-feats and copy-feats,
 * which kio_fcache_open leaves alone (no key, no folder, no lookup). */
int kio_fcache_worth(const kio_feat_plan *p);

/* Looks the chain up. Returns NULL when the cache is off or the chain
 * cannot be cached; else a handle that is a hit (kio_fcache_hit) or a
 * writer for a miss. `how` gets words for the chain's VLOG line either
 * way (hit, miss, not cacheable and why, not used, disabled). profile and
 * blas_threads: the rounding the chain would run in. Never logs. */
kio_fcache *kio_fcache_open(const kio_feat_plan *p, int profile, int blas_threads, char *how,
                            size_t how_len);
int kio_fcache_hit(const kio_fcache *c);

/* Hit: the next stored entry (pointers into the mapped file, valid until
 * kio_fcache_free). KIO_OK or KIO_EOF. */
int kio_fcache_next(kio_fcache *c, const char **key, int32_t *rows, int32_t *cols,
                    const float **data);
/* Hit: stage k's counts as the run that wrote the entry ended with. */
void kio_fcache_counts(const kio_fcache *c, int k, kio_feat_counts *out);
int kio_fcache_entries(const kio_fcache *c);

/* Miss: appends one output entry (in output order). A failure or the
 * budget exceeded abandons the entry quietly. */
void kio_fcache_put(kio_fcache *c, const char *key, const kio_matrix *m);
/* Miss: clean = the chain ran to its end, every stage exit status 0, no
 * utterance dropped, no WARNING or ERROR line: the entry is stored with
 * the stages' counts (atomic rename, least recently used entries removed
 * to make room); otherwise it is discarded. */
void kio_fcache_finish(kio_fcache *c, int clean, const kio_feat_counts *counts);
void kio_fcache_free(kio_fcache *c);

#endif
