/* gmm-acc-mllt's posteriors rspecifier as train_lda_mllt.sh writes it
 * ("ark:gunzip -c ALI| ali-to-post ark:- ark:- | weight-silence-post SCALE
 * SIL MDL ark:- ark:- |"), computed in-process (gpu-acc/mllt-postpipe.c),
 * with the programs' command lines and final LOG lines. KALDI_GPU_FEATS_PIPE=0
 * runs the real pipe. */
#ifndef GACC_MLLT_POSTPIPE_H
#define GACC_MLLT_POSTPIPE_H

#include "gpu-acc/mllt.h"

typedef struct gacc_post_src gacc_post_src;

/* 1: recognised and opened; 0: not this pipe (read it as a table);
 * KIO_ERR after an ERROR (the alignments or the model could not be read). */
int gacc_post_src_open(gacc_post_src **s, const char *rspecifier);
/* As kio_ra_has_key / kio_ra_value (Kaldi's unsorted archive reader). */
int gacc_post_src_has_key(gacc_post_src *s, const char *key);
const gacc_post *gacc_post_src_value(gacc_post_src *s, const char *key);
/* Reads the archive to its end (the programs convert every alignment) and
 * prints their final LOG lines; KIO_ERR after an ERROR. */
int gacc_post_src_finish(gacc_post_src *s);
/* Closes the alignments' reader (its ERROR: a read error, a failed gunzip)
 * and frees s. */
int gacc_post_src_close(gacc_post_src *s);
void gacc_post_src_free(gacc_post_src *s);

/* A posteriors rspecifier as the programs read it: the steps scripts' pipe
 * in-process (above) or any other as a random-access table. */
typedef struct {
  kio_ra_reader *ra;
  gacc_post_src *src;
} gacc_posts_in;
/* KIO_OK, or KIO_ERR after an ERROR (the rspecifier could not be opened). */
int gacc_posts_open(gacc_posts_in *in, const char *rspecifier);
int gacc_posts_has_key(gacc_posts_in *in, const char *key);
const gacc_post *gacc_posts_value(gacc_posts_in *in, const char *key);
/* The in-process pipe's end (gacc_post_src_finish); a no-op for a table. */
int gacc_posts_finish(gacc_posts_in *in);
int gacc_posts_close(gacc_posts_in *in);

#endif
