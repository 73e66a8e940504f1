/* The feature programs' checks of one utterance, with their messages: once,
 * for the CPU chain (feat-chain.c) and the device path (gpu-feats), so that
 * both decide and print alike. Each logs under the stage's program
 * (st->prog; the thread's program restored after) and returns
 *   KIO_FCHK_PASS  the stage goes on with the utterance,
 *   KIO_FCHK_DROP  a WARNING: the stage writes nothing for it (the caller
 *                  counts an error where the program counts one),
 *   KIO_FCHK_DIE   an ERROR (or a table reader's): the stage dies.
 * The caller looks the tables up in Kaldi's order: the utterance's key
 * (kio_fchk_mapped_key) before the checks of the matrix it finds. */
#ifndef KIO_FEAT_CHECK_H
#define KIO_FEAT_CHECK_H

#include <stdint.h>

#include "base/feat/feat.h"
#include "base/io/table.h"
#include "base/matrix/matrix.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { KIO_FCHK_PASS = 0, KIO_FCHK_DROP = 1, KIO_FCHK_DIE = -1 };

/* RandomAccessTableReaderMapped::HasKey of apply-cmvn's or transform-feats'
 * table tab (utt2spk map u2s, or NULL): *key = the table's key of utt (its
 * speaker's, through u2s). PASS: present; DROP: not in tab, with the
 * stage's WARNING ("No normalization statistics ...", "No fMLLR transform
 * ..."); DIE: not in the map (Kaldi's ERROR) or a reader's error. */
int kio_fchk_table_key(const kio_feat_stage *st, kio_ra_reader *u2s, kio_ra_reader *tab,
                       const char *utt, const char **key);

/* apply-cmvn's checks of stats (rows x (dim + 1)) against a rows x cols
 * utterance: dimensions, variance stats, count. PASS or DIE. */
int kio_fchk_cmvn(const kio_feat_stage *st, const kio_dmatrix *stats, int32_t rows, int32_t cols);
/* Then its offset and scale (dim each, feat-ops.c's code, "Flooring" lines
 * included): PASS, or DIE on NaN or infinity. */
int kio_fchk_cmvn_norm(const kio_feat_stage *st, const kio_dmatrix *stats, float *offset,
                       float *scale);

/* add-deltas of a rows x cols utterance: DROP when empty, DIE when
 * --truncate exceeds cols. */
int kio_fchk_deltas(const kio_feat_stage *st, const char *utt, int32_t rows, int32_t cols);
/* splice-feats: DIE when empty. */
int kio_fchk_splice(const kio_feat_stage *st, int32_t rows);
/* transform-feats' matrix w against the feature dimension dim: DROP (two
 * WARNINGs when w looks like compose-transforms' without --b-is-affine). */
int kio_fchk_transform(const kio_feat_stage *st, const char *utt, const kio_matrix *w,
                       int32_t dim);

#ifdef __cplusplus
}
#endif
#endif
