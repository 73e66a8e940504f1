/* Internal to base/: the OpenFst bridge (fst-bridge.cc) and the C side of
 * kio_fst (fst.c). Nothing here is OpenFst-typed. */
#ifndef KIO_FST_BRIDGE_H
#define KIO_FST_BRIDGE_H

#include <stdint.h>
#include <stdio.h>
#include "fst.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Reads one binary OpenFst object (vector or const, StdArc) from f at its
 * current position, consuming exactly that object. KIO_ERR + kio_set_error
 * on failure (never throws). */
int kio_fst_read_openfst(FILE *f, kio_fst *g);

/* Sizes g for num_states states and num_arcs arcs, reusing its buffers;
 * sets num_states/num_arcs, arc_start[0] = 0. KIO_ERR on overflow/OOM. */
int kio_fst_reserve(kio_fst *g, int64_t num_states, int64_t num_arcs);

#ifdef __cplusplus
}
#endif
#endif
