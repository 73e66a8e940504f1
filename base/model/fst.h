/* Training graphs as flat CSR arrays (the OpenFst bridge fills them; no
 * OpenFst type crosses into C). Arcs of state s are arcs[arc_start[s] ..
 * arc_start[s+1]-1] in the FST's own arc order. Owner: the struct. */
#ifndef KIO_FST_H
#define KIO_FST_H

#include <stdint.h>
#include <stdio.h>
#include "base/io/table.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct { int32_t ilabel, olabel; float weight; int32_t nextstate; } kio_arc;

typedef struct {
  int32_t num_states;  /* 0 for an empty FST */
  int32_t num_arcs;
  int32_t start;       /* -1 if none */
  int32_t *arc_start;  /* num_states + 1 */
  kio_arc *arcs;       /* num_arcs */
  float *final;        /* num_states; +INFINITY if not final */
  size_t state_cap, arc_cap;
} kio_fst;

void kio_fst_free(kio_fst *g);
int kio_fst_copy(kio_fst *dst, const kio_fst *src);

/* Reads one FST object (binary OpenFst vector/const StdArc, or Kaldi's text
 * form) from f at its current position, consuming exactly the object. */
int kio_fst_read(FILE *f, kio_fst *g);
/* Writes the FST in OpenFst binary vector format. */
int kio_fst_write(FILE *f, const kio_fst *g);

extern const kio_holder kio_fst_holder;
/* kio_body_bytes_fn (table.h) for kio_fst_holder: an archive of binary
 * vector FSTs is read ahead on threads (kio_seq_read_ahead); -1 for any
 * other form (read whole in order). */
int64_t kio_fst_body_bytes(FILE *f, int binary);

#ifdef __cplusplus
}
#endif
#endif
