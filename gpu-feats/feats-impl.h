/* Internals of gpu-feats shared by the host part (feats-host.c) and the
 * device part (feats-cuda.cu). C and C++. */
#ifndef GFEAT_FEATS_IMPL_H
#define GFEAT_FEATS_IMPL_H

#include "gpu-feats.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GFEAT_MAX_STAGES 8
#define GFEAT_MAX_ORDER 8

enum { GFEAT_OP_DELTAS = 1, GFEAT_OP_SPLICE, GFEAT_OP_TRANSFORM };

/* One device stage after the (optional) CMVN, which is fused into the
 * decompression. */
typedef struct {
  int op;
  /* deltas: order, window; taps of order i: scales[soff[i] .. + sdims[i]) */
  int order, window;
  float *scales;
  int32_t soff[GFEAT_MAX_ORDER + 1], sdims[GFEAT_MAX_ORDER + 1], ntaps;
  /* splice */
  int left, right;
  /* transform: the global matrix W (rows x cols as read: linear part,
   * then the offset column if affine); or, table != NULL, one per
   * utterance or speaker (utt2spk) */
  kio_matrix w;
  const kio_feat_stage *st;
  kio_ra_reader *table, *u2s;
  /* transform-feats' logdet of the last matrix (have_ld) and its key */
  float ld;
  int have_ld;
  char *ld_key;
} gfeat_stage;

/* A per-utterance transform of a batch: its W^T (cols x rows, the offset
 * as row K when affine) at pool[off]. */
typedef struct {
  int64_t off;
  int32_t affine, rows;        /* rows = M, the output dimension */
} gfeat_wref;

/* Per device stage of a batch: transforms from a table (pool + refs) and
 * the sgemm chain plan (cls: frames x rows, the batch's frames in order;
 * blas-gemm.h), for profiles that have one. */
typedef struct {
  float *pool;
  size_t npool, pcap;
  gfeat_wref *ref;             /* per utterance (batch cap) */
  char *last_key;              /* the pool's last matrix: its table key */
  int64_t last_off;
  unsigned char *cls;
  size_t ncls, clscap;
} gfeat_bstage;

struct gfeat_chain {
  const kio_feat_plan *plan;
  const kio_feat_stage *cmvn;  /* NULL: no apply-cmvn stage */
  kio_ra_reader *tab, *u2s;
  kio_dmatrix gstats;          /* stats from an rxfilename */
  int nst;
  gfeat_stage st[GFEAT_MAX_STAGES];
  int profile;                 /* the rounding profile (blas-profile.h) */
  int blas_threads;            /* OpenBLAS threads the transform's order follows */
  /* The stages' counts, per plan stage, over the utterances checked so far
   * (gfeat_batch_add, gfeat_chain_check), each key once: */
  kio_feat_counts cnt[GFEAT_MAX_STAGES];
  int dead;                    /* the plan stage that died (ERROR), -1 none */
  int counting;                /* the current utterance is counted */
  char **seen;                 /* the keys counted, in order */
  size_t nseen, seencap;
};

/* Per utterance, as uploaded. */
typedef struct {
  int64_t frame_off;   /* first row in the batch */
  int64_t byte_off;    /* its raw bytes in the batch's byte buffer */
  int32_t rows, format;
} gfeat_dutt;

struct gfeat_batch {
  const gfeat_chain *chain;
  int n, cap;
  int32_t in_dim, out_dim;
  gfeat_dutt *utt;
  unsigned char *bytes;        /* raw matrices, each at a 16-byte boundary */
  size_t nbytes, bcap;
  float *cmvn;                 /* n x 2*in_dim: offset, then scale */
  size_t ccap;
  int var_norm, apply_cmvn;
  gfeat_bstage st[GFEAT_MAX_STAGES];
  int64_t frames;
};


#ifdef __cplusplus
}
#endif
#endif
