/* The recipes' feature pipelines read in-process (issue 8).
 *
 * A features rspecifier such as
 *   ark,s,cs:apply-cmvn --utt2spk=ark:U scp:CMVN scp:FEATS ark:- | add-deltas ark:- ark:- |
 * names a chain of Kaldi programs. When every stage is one we implement
 * (apply-cmvn, add-deltas, splice-feats, transform-feats, select-feats,
 * copy-feats) with options we implement, io.c's input_open_raw reads the
 * chain's output from kio_feat_open instead of popen: the same archive bytes
 * (Kaldi's arithmetic, bit for bit), the same stderr lines (each stage's
 * command line, warnings, LOG lines, ERROR lines) and the wait status the
 * shell pipeline would have had (its last stage's exit status). Anything
 * else runs as the real pipe. KALDI_GPU_FEATS_PIPE=0 forces the real pipe
 * (KALDI_GPU_FEATS_PIPE=1 is the default: in-process when recognised).
 *
 * Threads: one producer thread per chain (it overlaps with the reading
 * program, as the pipe's processes did) makes every per-utterance decision
 * in input order; the arithmetic of several utterances runs at once on
 * KALDI_GPU_FEATS_THREADS threads (feat-pool.c: the producer and N - 1 workers;
 * the same results and log lines for any N). Default: this process's share
 * of the cores (base/sys/cpu-share.h, at most 16): 1 when a recipe runs one job
 * per core, all of them for a program running alone. N = 1: no worker.
 * Rounding: as the OpenBLAS of the Kaldi in use (base/matrix/blas-profile.h;
 * transform-feats' product follows that OpenBLAS's sgemm tiling with as many
 * threads as it would use, KALDI_GPU_DEV_FEATS_BLAS_THREADS overrides;
 * base/matrix/blas-gemm.c). KALDI_GPU_DEV_NO_SIMD=1: scalar
 * code only, KALDI_GPU_DEV_SIMD_MAX=avx2 no AVX-512 (same results). */
#ifndef KIO_FEAT_H
#define KIO_FEAT_H

#include <stdint.h>
#include <stdio.h>

#include "base/matrix/matrix.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  KIO_FEAT_CMVN = 1, KIO_FEAT_DELTAS, KIO_FEAT_SPLICE, KIO_FEAT_TRANSFORM,
  KIO_FEAT_SELECT, KIO_FEAT_COPY
} kio_feat_op;

typedef struct {
  kio_feat_op op;
  const char *prog;    /* "apply-cmvn", ... (static) */
  int argc;            /* the stage's words (argv[0] = program) */
  char **argv;
  int print_args;      /* --print-args (default true) */
  char *utt2spk;       /* --utt2spk rspecifier or NULL (cmvn, transform) */
  char *table;         /* cmvn stats / transform: rspecifier or rxfilename */
  int table_is_rspec;  /* 1: per utterance/speaker table; 0: one matrix */
  int norm_means, norm_vars, reverse;          /* apply-cmvn */
  int delta_order, delta_window, truncate;     /* add-deltas */
  int left, right;                             /* splice-feats */
  char *selection;                             /* select-feats */
} kio_feat_stage;

/* A recognised chain: the first stage reads `input` (an rspecifier of files
 * or scp), each stage feeds the next, the last writes a binary archive. The
 * GPU path can run the same plan on the raw matrices (see docs/journal/feats.md). */
typedef struct {
  char *input;
  int nstages;
  kio_feat_stage *stages;
} kio_feat_plan;

/* cmd: an rxfilename without its trailing '|'. KIO_OK and *plan filled when
 * recognised; KIO_ERR (nothing to free) otherwise, with the reason in
 * kio_last_error(). Never logs. */
int kio_feat_parse(const char *cmd, kio_feat_plan *plan);
void kio_feat_plan_free(kio_feat_plan *plan);

/* ---- the feature programs' own log lines (feat-log.c) ----
 * Printed by the CPU chain and, from the same counts, by the device path
 * (gpu-feats), so that both print the same. */
enum { KIO_FEAT_LD_UNKNOWN, KIO_FEAT_LD_LOGDET, KIO_FEAT_LD_PSEUDO, KIO_FEAT_LD_DIMINC };
/* What one stage's program counts over its input. */
typedef struct {
  long num_done, num_err;  /* utterances done / with errors (dropped by a WARNING) */
  int logdet_type;         /* transform-feats: KIO_FEAT_LD_*, set by the first one done */
  double tot_t, tot_logdet;  /* transform-feats: frames and logdet summed in input order */
  int had_input;           /* select-feats: saw an utterance */
} kio_feat_counts;
/* Each stage's command line (unless --print-args=false), as the shell's
 * programs print theirs at start: straight to stderr. */
void kio_feat_print_command_lines(const kio_feat_plan *p);
/* A stage that ran to the end of its input: its final LOG lines under its
 * program's name ("Applied cepstral mean normalization to N utterances,
 * errors on M", transform-feats' logdet average and counts, "Copied N
 * feature matrices.", select-feats' "Empty archive provided."; add-deltas
 * and splice-feats print none). Returns the program's exit code (1 when
 * apply-cmvn, transform-feats or copy-feats did nothing). Not for a stage
 * that died or was killed (they print nothing). */
int kio_feat_final_log(const kio_feat_stage *st, const kio_feat_counts *c);
/* transform-feats' logdet of one utterance of rows frames: summed into c,
 * or its WARNING when not finite. */
void kio_feat_logdet_add(const kio_feat_stage *st, kio_feat_counts *c, int32_t rows, float ld);

typedef struct kio_feat kio_feat;
/* Recognises cmd and starts the chain in a producer thread: a FILE* giving
 * the chain's output, *h set. NULL when not recognised or KALDI_GPU_FEATS_PIPE=0
 * (the caller popens cmd). A VLOG[1] line says which happened. */
FILE *kio_feat_open(const char *cmd, kio_feat **h);
/* The sequential Matrix<float> table reader's way in (table-read.c), instead
 * of reading f: the next entry's key into *key (growing buffer) and its
 * matrix swapped with *m, no bytes made or parsed. KIO_OK, KIO_EOF after the
 * last entry, KIO_ERR (out of memory, or f was read from). */
int kio_feat_take(kio_feat *h, char **key, size_t *keycap, kio_matrix *m);
/* Closes f, stops the chain (a reader that left early: the stages are
 * killed as by SIGPIPE), returns the wait status pclose would have given. */
int kio_feat_close(kio_feat *h, FILE *f);
/* Makes every rxfilename pipe that kio_feat_open recognises run in-process
 * (kio_input_set_pipe_provider): programs call it at start (kio_program_start). */
void kio_feat_install(void);

/* The model rspecifier "gmm-boost-silence [--boost=B] [--binary=B] SIL MDL - |"
 * (the steps scripts' alignment model) in process: a stream of the model
 * bytes Kaldi's program writes, its stderr lines printed; NULL when cmd is
 * not such a command, or anything about it is unusual (then the real pipe
 * runs). KALDI_GPU_FEATS_PIPE=0 runs the real pipe too. */
typedef struct kio_model_stage kio_model_stage;
FILE *kio_model_stage_open(const char *cmd, kio_model_stage **st);
/* Closes the stream and frees; the wait status (0). */
int kio_model_stage_close(kio_model_stage *st, FILE *f);

#ifdef __cplusplus
}
#endif
#endif
