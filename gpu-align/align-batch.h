/* Internal to align-pipeline.c: the captured log lines and the batch
 * storage of the pipeline (align-batch.c). */
#ifndef GALIGN_ALIGN_BATCH_H
#define GALIGN_ALIGN_BATCH_H

#include <stddef.h>

#include "base/model/fst.h"
#include "base/matrix/matrix.h"
#include "base/io/table.h"
#include "align-pipeline.h"

/* ---------------- captured log lines ---------------- */

typedef struct {
  int slot;                 /* >= 0: utterance slot; -1: a log line */
  int level, line;
  char *func, *file, *msg;
  char *prog;               /* the program the line is from (an in-process
                               pipeline stage), NULL: this program */
} event;
typedef struct { event *v; int n, cap; } event_list;

int galign_ev_push(event_list *l, event e);  /* 0 or -1 (no memory) */
void galign_ev_clear(event_list *l);         /* frees the lines, keeps the array */
void galign_ev_free(event_list *l);
/* Prints the captured log lines (not the utterance slots) / one line. */
void galign_ev_replay(const event_list *l);
void galign_ev_replay_one(const event *e);

/* ---------------- batches ---------------- */

typedef struct {
  char *key;
  int empty;              /* graph without start state */
  kio_matrix feats;       /* owned: moved out of the readers (buffers swapped) */
  kio_fst raw;
  kio_int_vec words;      /* transcript (gmm-align: graph compiled from it) */
  galign_graph graph;     /* raw prepared by the worker */
  int prep_rc;
  event_list prep_lines;  /* logged while preparing (Kaldi: before "LOG KEY") */
  const kio_int_vec *prior;  /* margin mode: the prior alignment (the table's) */
  int band_status;        /* margin mode: galign_band_status of the graph */
  int32_t gf_index;       /* features computed on the device (align-gfeat.c):
                             its index in the batch's gfb; -1: read as is */
} slot;

typedef struct {
  event_list events;      /* lines and utterance slots in Kaldi's order */
  slot *slots;
  int nslots, cap;
  int fatal;              /* reading ended with a fatal error (in events) */
  /* preparation (worker thread, or the reading thread while the worker is
   * busy with the previous batch) and alignment (worker thread) */
  int prepped;            /* graphs already prepared (by the reading thread) */
  int first_bad;          /* first slot whose graph preparation failed */
  const galign_graph **graphs;
  const kio_matrix **feats;
  galign_result *res;     /* nalign entries in use, res_cap allocated */
  int *res_slot, nalign, res_cap;
  int align_rc;
  event_list align_lines;
  galign_pipeline_utt *utts;  /* handed to the hook */
  struct gfeat_batch *gfb;    /* align-gfeat.c: raw features + CMVN parameters */
  int gf_rc;                  /* their computation on the device failed: fatal */
} batch;

/* Copies m into dst, reusing dst's buffer. */
int galign_copy_matrix(kio_matrix *dst, const kio_matrix *m);
/* Makes room for one more slot, b->slots[b->nslots] (NULL: no memory). */
slot *galign_peek_slot(batch *b);
/* Reallocates *ptr to n (at least 1) elements of elem bytes. */
int galign_grow(void **ptr, int n, size_t elem);
void galign_batch_free(batch *b);

#endif
