/* Internal to base/: the feature chain's per-utterance work (feat-pool.c).
 * The chain's producer thread makes every decision of an utterance in input
 * order (table lookups, checks, log lines, counts: feat-chain.c) and
 * records the arithmetic left to do as a job: the input as read (still
 * compressed), then one step per stage with its parameters. A pool of
 * workers computes the jobs; the producer commits them in input order. */
#ifndef KIO_FEAT_POOL_H
#define KIO_FEAT_POOL_H

#include <stddef.h>
#include <stdint.h>

#include "base/matrix/compressed-matrix.h"
#include "feat.h"
#include "base/matrix/matrix.h"

/* A transform-feats matrix prepared for one key (utterance or speaker).
 * Shared by the stage and its jobs in flight; refs is changed by the
 * producer only (jobs release theirs when committed or dropped). */
typedef struct {
  int refs;
  int32_t rows, k, ws;  /* W: rows x ws, k = input dim (ws = k or k + 1) */
  float *w, *wt, *off;  /* W (copy), W^T (k x rows), the offset or NULL */
} kio_fxform;
kio_fxform *kio_fxform_new(const kio_matrix *w, int32_t k);
void kio_fxform_release(kio_fxform *x);

/* One stage's arithmetic on one utterance. */
typedef struct {
  kio_feat_op op;
  int var_norm;                  /* CMVN: */
  int32_t dim;
  size_t norm;                   /* offset of its offset, scale in the job's norm */
  int order;                     /* DELTAS (after --truncate to dim) */
  float *const *scales;
  const int *sdims;
  int left, right, fused;        /* SPLICE (fused: the transform after it reads in place) */
  kio_fxform *x;                 /* TRANSFORM (a reference) */
  int profile, blas_threads;
  unsigned char *cls;            /* TRANSFORM: the chain plan (blas-gemm.h; NULL: all SEQ), owned */
  const int32_t *sel;            /* SELECT */
  int32_t nsel;
} kio_fstep;

typedef struct {
  char *key;
  size_t keycap;
  kio_cmatrix_raw in;  /* as read (format 0: the producer moved it to a) */
  const float *src;    /* or a stored result copied into a (shaped and reserved), no steps */
  kio_matrix a, b;     /* a: input, then the result; both reserved by the producer */
  kio_fstep *steps;
  int nsteps;
  float *norm;         /* CMVN offsets and scales */
  size_t normlen, normcap;
  size_t bytes;        /* its buffers while in flight (the pool's memory bound) */
} kio_fjob;

/* Grows a's and b's buffers (not their shapes) to n floats. */
int kio_fjob_reserve(kio_fjob *j, size_t n);
/* Room for n more norm floats: a pointer to them (or NULL), *off their place. */
float *kio_fjob_norm(kio_fjob *j, size_t n, size_t *off);

typedef struct kio_fpool kio_fpool;
/* The memory bound of the jobs in flight (default 256 MB; tests lower it). */
extern size_t kio_fpool_max_bytes;
/* Commits job j (input order, producer's thread); nonzero: stop (the reader
 * left), nothing more is committed. */
typedef int (*kio_fpool_commit)(void *arg, kio_fjob *j);

/* KALDI_GPU_FEATS_THREADS, default this process's share of the cores (at most
 * 16; 1 when a recipe runs one job per core). */
int kio_fpool_threads(void);
/* threads - 1 workers (the producer helps), up to 4 x threads jobs and
 * about kio_fpool_max_bytes of their buffers in flight (long recordings);
 * threads 1: no thread, each job computed and committed at submit.
 * nstages: the most steps of a job. NULL when out of memory. */
kio_fpool *kio_fpool_new(int threads, int nstages, kio_fpool_commit commit, void *arg);
/* The job to fill next (its steps cleared), after committing those done;
 * waits (or computes one itself) while the window is full. NULL once a
 * commit has stopped the pool. */
kio_fjob *kio_fpool_slot(kio_fpool *p);
/* Queues the job kio_fpool_slot gave. A slot not submitted is reused. 0, or
 * nonzero when stopped. */
int kio_fpool_submit(kio_fpool *p);
/* Computes and commits everything queued. 0, or nonzero when stopped. */
int kio_fpool_drain(kio_fpool *p);
void kio_fpool_free(kio_fpool *p);

#endif
