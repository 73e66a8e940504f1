/* The recipes' feature pipelines on the device (issue 8, deliverable 3;
 * prefix gfeat_). A recognised chain (base/feat/feat.h's kio_feat_plan) such as
 *   apply-cmvn --utt2spk=ark:U scp:CMVN scp:FEATS ark:- | add-deltas ark:- ark:-
 *   apply-cmvn ... | splice-feats --left-context=3 --right-context=3 ark:- ark:- |
 *     transform-feats final.mat ark:- ark:-
 * is run on a batch of utterances: the raw matrices as stored (the
 * CompressedMatrix bytes as read, or floats when stored uncompressed) and
 * the per-utterance CMVN offset/scale (computed on the host from the double
 * stats by feat-ops.c's code) and the tables' transforms are uploaded;
 * kernels decompress, apply CMVN,
 * add deltas, splice and transform, writing the batch's feature matrix in
 * device memory. Every float operation is explicit and in the CPU chain's
 * order (feat-ops.c, feat-gemm.c, compressed-matrix.c), so the result is
 * bit-identical to the CPU chain's (and Kaldi's) for the same rounding
 * profile (base/matrix/blas-profile.h) and OpenBLAS thread count.
 *
 * Supported: an optional apply-cmvn first (table or single stats matrix,
 * utt2spk, means/vars/reverse), then any of add-deltas (no --truncate),
 * splice-feats, transform-feats (one matrix, or a table of them per
 * utterance or, with --utt2spk, per speaker: SAT's fMLLR; linear or
 * affine), copy-feats. Anything else: gfeat_supported says why (the caller
 * runs the CPU chain).
 *
 * Threading: a gfeat_chain and its batches are used by one thread at a
 * time; a gfeat_cuda likewise. */
#ifndef GFEAT_GPU_FEATS_H
#define GFEAT_GPU_FEATS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "device/gpu.h"
#include "base/feat/feat.h"
#include "base/matrix/matrix.h"
#include "base/io/table.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- raw input matrices ---- */
enum { GFEAT_RAW_FLOAT = 0, GFEAT_RAW_CM = 1, GFEAT_RAW_CM2 = 2, GFEAT_RAW_CM3 = 3 };
/* One input matrix as stored: format GFEAT_RAW_CM*: bytes = the 16-byte
 * header (min, range, rows, cols) and the data that follow the token;
 * GFEAT_RAW_FLOAT: rows x cols floats (an FM/DM or text matrix, read as
 * kio_matrix_read does). */
typedef struct {
  int format;
  int32_t rows, cols;
  unsigned char *bytes;
  size_t nbytes, cap;
} gfeat_raw;
/* Table holder of gfeat_raw ("Matrix<float>" entries, no scp ranges). */
extern const kio_holder gfeat_raw_holder;
/* Decompresses r on the host (compressed-matrix.c's arithmetic). */
int gfeat_raw_to_matrix(const gfeat_raw *r, kio_matrix *m);

/* ---- the chain ---- */
/* 1 when the device path can run plan; 0 with the reason in
 * kio_last_error(). No I/O, no logging. */
int gfeat_supported(const kio_feat_plan *plan);

typedef struct gfeat_chain gfeat_chain;
/* Opens what the stages open (CMVN stats, utt2spk, transform matrix),
 * checks plan (gfeat_supported), builds the delta windows. KIO_ERR after an
 * ERROR line (or, unsupported, without one: kio_last_error()). plan must
 * outlive the chain. */
int gfeat_chain_open(const kio_feat_plan *plan, gfeat_chain **out);
void gfeat_chain_free(gfeat_chain *c);
/* Output dimension for input dimension in_dim (-1 if the chain refuses it,
 * or a table transform decides: see gfeat_batch_dim). */
int32_t gfeat_chain_out_dim(const gfeat_chain *c, int32_t in_dim);

/* The feature programs' own counts (base/feat/feat.h's kio_feat_counts, per
 * plan stage) are kept by gfeat_batch_add over the utterances it is given,
 * each key once (a key given again right after itself is not counted
 * again). gfeat_chain_check: the same checks, warnings and counts for key
 * without staging it: GFEAT_ADDED, GFEAT_DROPPED, KIO_ERR (an ERROR: the
 * stage died, counting stops). */
int gfeat_chain_check(gfeat_chain *c, const char *key, const gfeat_raw *raw);
/* At the end of the features: checks the utterances of the chain's input
 * (an scp: its keys in order) that were not counted, reading them through
 * raw (the chain's input read by random access; NULL: none checked), then
 * prints each stage's final LOG lines as the CPU chain does
 * (kio_feat_final_log; none for a stage that died, nor for those before
 * it). Returns the wait status the pipe would have had: its last stage's
 * exit status << 8 (apply-cmvn, transform-feats, copy-feats: 1 when they did
 * nothing; 255 when it died). */
int gfeat_chain_finish(gfeat_chain *c, kio_ra_reader *raw);

/* ---- a batch of utterances (host staging) ---- */
typedef struct gfeat_batch gfeat_batch;
gfeat_batch *gfeat_batch_new(void);
void gfeat_batch_clear(gfeat_batch *b);
void gfeat_batch_free(gfeat_batch *b);
enum { GFEAT_ADDED = 0, GFEAT_DROPPED = 1 };
/* Appends utterance key: its raw matrix (copied) and CMVN parameters (its
 * speaker's stats through utt2spk). GFEAT_ADDED; GFEAT_DROPPED after the
 * stage's WARNING (no CMVN stats for it, as apply-cmvn; an empty matrix
 * before add-deltas); KIO_ERR after an ERROR line (missing utt2spk entry,
 * dimension mismatch, bad stats, empty input to splice-feats). */
int gfeat_batch_add(gfeat_chain *c, gfeat_batch *b, const char *key, const gfeat_raw *raw);
int gfeat_batch_count(const gfeat_batch *b);
int64_t gfeat_batch_frames(const gfeat_batch *b);
/* Output rows of utterance i (its frames), its first row in the batch's
 * matrix, and the output dimension. */
int32_t gfeat_batch_rows(const gfeat_batch *b, int i);
int64_t gfeat_batch_row_off(const gfeat_batch *b, int i);
int32_t gfeat_batch_dim(const gfeat_batch *b);
/* The widest matrix of the chain on b (floats per frame), and the device
 * bytes gfeat_cuda_compute needs for b (batches are cut to the feature
 * chain's share of the job's budget with it). */
int32_t gfeat_batch_widest(const gfeat_batch *b);
size_t gfeat_batch_need(const gfeat_batch *b);

/* ---- the device ---- */
typedef struct gfeat_cuda gfeat_cuda;
/* On the job's device gpu (NULL: kio_gpu_job's; every call makes it
 * current): uploads the chain's constants; its device memory is charged
 * to an account with the feature chain's share of the job's budget
 * (device/gpu.h). Logs ERROR on failure (out of device memory included).
 * Never call in a Check parent. */
int gfeat_cuda_new(gfeat_cuda **g, const gfeat_chain *c, kio_gpu *gpu);
void gfeat_cuda_free(gfeat_cuda *g);
/* Runs the pipeline of batch b on stream (a cudaStream_t; NULL: default):
 * utterance i's features go to rows [off_i, off_i + rows_i) of the
 * row-major matrix d_out (device memory, gfeat_batch_dim columns), off_i
 * the sum of the rows before it. Asynchronous: the host staging of b may
 * be reused only after the stream is synchronised. */
int gfeat_cuda_run(gfeat_cuda *g, const gfeat_batch *b, float *d_out, void *stream);
/* Runs b into the object's own device matrix (*d_feats, valid until the
 * next call or free) and copies utterance i's rows to host_rows[i] (rows x
 * gfeat_batch_dim floats; host_rows or an entry NULL: not copied).
 * Synchronous. */
int gfeat_cuda_compute(gfeat_cuda *g, const gfeat_batch *b, const float **d_feats,
                       float *const *host_rows);
/* The same into host matrices out[0..n) (resized; tests). */
int gfeat_cuda_run_host(gfeat_cuda *g, const gfeat_batch *b, kio_matrix *out);
/* Launches so far (tests check the device path ran) and device seconds. */
void gfeat_cuda_stats(const gfeat_cuda *g, int64_t *batches, int64_t *frames);

#ifdef __cplusplus
}
#endif
#endif
