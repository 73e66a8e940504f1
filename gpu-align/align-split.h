/* How a batch is split over several GPU service connections (--num-gpus;
 * align-remote.c): contiguous chunks of the batch by shares of its frames,
 * and the shares balanced from when each connection's replies came. */
#ifndef GALIGN_ALIGN_SPLIT_H
#define GALIGN_ALIGN_SPLIT_H

#include "base/matrix/matrix.h"

/* start[0..k]: connection c gets utterances [start[c], start[c + 1]) of the
 * n whose features are feats[]; c's chunk ends where the frames so far
 * pass the shares of connections 0..c (share NULL: equal). Every chunk has
 * at least one utterance (k <= n). */
void galign_split_starts(const kio_matrix *const *feats, int n, const double *share, int k,
                         int *start);

/* The shares after a batch whose replies were read from connection first on
 * (the caller turns first batch by batch): t_end[c], when connection c's
 * last reply of the batch was read; period, the time between the ends of
 * this batch and the one before. A connection whose last reply came x
 * seconds after first's was late by x (its device is slower or does more):
 * it hands first frames in proportion to x / period; lateness under 2 ms or
 * 2% of the period is noise. No share falls under 0.1 / k; their sum stays. */
void galign_split_balance(double *share, int k, int first, const double *t_end, double period);

#endif
