/* Internal to align-pipeline.c: the features rspecifier's chain computed on
 * the device (gpu-feats) for our own CUDA backend, KALDI_GPU_FEATS_GPU=1. The
 * reading thread reads the chain's raw input (compressed matrices as
 * stored) and computes the per-utterance CMVN parameters (gfeat_batch_add,
 * with the stages' warnings); the worker runs the batch's chain on the
 * device right before aligning it, copies the features into the slots'
 * host matrices (CPU redo, long utterances, the hook) and registers their
 * device rows with the aligner, whose likelihood kernel then reads them
 * there. Same features, bit for bit, as the CPU chain (gpu-feats.h). */
#ifndef GALIGN_ALIGN_GFEAT_H
#define GALIGN_ALIGN_GFEAT_H

#include <stdint.h>
#include "base/matrix/matrix.h"
#include "align-batch.h"
#include "gpu-align.h"

typedef struct galign_gfeat galign_gfeat;
struct gfeat_batch;

/* When KALDI_GPU_FEATS_GPU=1, rspec is an archive read from a recognised chain
 * ("ark,s,cs:apply-cmvn ... | add-deltas ... |") the device runs, and a
 * has its own CUDA backend: the chain's tables and a random-access reader
 * of its input are opened. NULL otherwise, with a VLOG[1] line saying why
 * (the caller reads rspec as before: the CPU chain). */
galign_gfeat *galign_gfeat_open(const char *rspec, galign_aligner *a);
/* Prints the chain's command lines, as the CPU chain does when its input
 * opens (where the program opens its features reader). */
void galign_gfeat_start(const galign_gfeat *g);
/* 1 when KALDI_GPU_FEATS_GPU=1 (the pipeline then waits for its aligner before
 * opening the features). */
int galign_gfeat_wanted(void);
/* Clears a batch's staging (read_batch's start). */
void galign_gfeat_begin(struct gfeat_batch *gfb);
/* Utterance key into batch *gfb (created on first use): 1 (feats resized
 * to its rows x the output dim, filled by galign_gfeat_run; *index set), 0
 * no features (absent, or dropped by a stage after its warning), KIO_ERR
 * after an ERROR. */
int galign_gfeat_read(galign_gfeat *g, struct gfeat_batch **gfb, const char *key,
                      kio_matrix *feats, int32_t *index);
/* 1 when batch gfb holds as much as the feature chain's share of the
 * job's device memory (device/gpu.h): the pipeline ends the batch there. */
int galign_gfeat_full(const galign_gfeat *g, const struct gfeat_batch *gfb);
/* Worker, before galign_align_batch: runs b's chain on the device, fills
 * the host features of b's slots that came from it, registers their rows
 * with a. KIO_ERR after an ERROR. */
int galign_gfeat_run(galign_gfeat *g, galign_aligner *a, batch *b);
/* After the batch: the registration cleared. */
void galign_gfeat_done(galign_aligner *a);
/* Frames and utterances computed on the device. */
void galign_gfeat_stats(const galign_gfeat *g, int64_t *utts, int64_t *frames);
/* After the last utterance was read (the program's summary lines still to
 * come): the input's utterances the aligner did not ask for are checked and
 * counted, then the stages' final LOG lines printed (gfeat_chain_finish),
 * as the CPU chain prints them when its input ends. Once. */
void galign_gfeat_finish(galign_gfeat *g);
/* Closes the input reader: KIO_ERR when it failed (logged). After
 * galign_gfeat_finish, a pipe status the CPU chain would have had that is
 * not 0 gives kio_input_close's WARNING and (unless the rspecifier is
 * permissive) kio_ra_close's ERROR: KIO_ERR, as with the CPU chain. */
int galign_gfeat_close(galign_gfeat *g);
void galign_gfeat_free(galign_gfeat *g);
void galign_gfeat_batch_free(struct gfeat_batch *gfb);

#endif
