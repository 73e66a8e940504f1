/* Internal to align-pipeline.c: gmm-align's form of the pipeline's source
 * (align-source.c). */
#ifndef GALIGN_ALIGN_SOURCE_H
#define GALIGN_ALIGN_SOURCE_H
#include "align-batch.h"

/* The feature reader's current entry into slot s (features moved, the
 * transcript copied into s->words). 1: s is to be aligned; 0: skipped
 * (Kaldi's warning logged, *num_err incremented); KIO_ERR: fatal (logged). */
int galign_source_read(kio_seq_reader *feats, kio_ra_reader *trans, slot *s, int *num_err);
/* Compiles s->words into s->raw with cfg->compile (KIO_ERR: fatal, logged). */
int galign_source_compile(const galign_pipeline_cfg *cfg, slot *s);
#endif
