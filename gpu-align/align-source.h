/* Internal to align-pipeline.c: the sources that read the features in
 * order (align-source.c). */
#ifndef GALIGN_ALIGN_SOURCE_H
#define GALIGN_ALIGN_SOURCE_H
#include "align-batch.h"

/* The feature reader's current entry into slot s (features moved, the
 * transcript copied into s->words). 1: s is to be aligned; 0: skipped
 * (Kaldi's warning logged, *num_err incremented); KIO_ERR: fatal (logged). */
int galign_source_read(kio_seq_reader *feats, kio_ra_reader *trans, slot *s, int *num_err);
/* kalpy's order: the feature reader's current entry and its graph (copied
 * from the random-access reader) into slot s; zero-length features and
 * keys without a graph: 0 (a warning logged, *num_err incremented). */
int galign_source_read_graph(kio_seq_reader *feats, kio_ra_reader *graphs, slot *s,
                             int *num_err);
/* Compiles s->words into s->raw with cfg->compile (KIO_ERR: fatal, logged). */
int galign_source_compile(const galign_pipeline_cfg *cfg, slot *s);
#endif
