/* The pipeline's sources that read the features in order
 * (align-pipeline.h): gmm-align's (transcripts_rspecifier: transcripts
 * looked up by key, graphs compiled by the program's callback on the
 * preparation threads; Kaldi's gmm-align messages, with its locations), and
 * kalpy's align_utterances (features_order: graphs looked up by key). */
#include <stdlib.h>
#include <string.h>

#include "base/sys/kaldi-msg.h"
#include "base/sys/log.h"
#include "base/io/table.h"
#include "align-batch.h"
#include "align-source.h"


int galign_source_read(kio_seq_reader *feats, kio_ra_reader *trans, slot *s, int *num_err) {
  const char *key = kio_seq_key(feats);
  int has = kio_ra_has_key(trans, key);
  if (has < 0) return KIO_ERR;
  if (!has) {
    KIO_KALDI(GA_NO_TRANSCRIPT, key);
    (*num_err)++;
    return 0;
  }
  const kio_int_vec *t = kio_ra_value(trans, key);
  if (!t || kio_seq_take(feats, &s->feats) != KIO_OK) return KIO_ERR;
  if (s->feats.rows == 0) {
    /* Kaldi compiles the graph first (a word missing from the lexicon is
     * fatal even here); the warning is the same otherwise. */
    KIO_KALDI(GA_ZERO_LENGTH, key);
    (*num_err)++;
    return 0;
  }
  char *k = strdup(key);
  int32_t *v = malloc((size_t)(t->n ? t->n : 1) * sizeof *v);
  if (!k || !v) {
    free(k);
    free(v);
    KIO_ERROR("Out of memory reading utterance %s", key);
    return KIO_ERR;
  }
  memcpy(v, t->v, (size_t)t->n * sizeof *v);
  free(s->key);
  s->key = k;
  free(s->words.v);
  s->words.v = v;
  s->words.n = t->n;
  s->raw.num_states = 0;  /* compiled by the preparation (galign_source_compile) */
  s->raw.start = -1;
  s->empty = 0;
  return 1;
}

int galign_source_read_graph(kio_seq_reader *feats, kio_ra_reader *graphs, slot *s,
                              int *num_err) {
  const char *key = kio_seq_key(feats);
  const kio_matrix *m = kio_seq_value(feats);
  if (!m) return KIO_ERR;
  /* kalpy's checks and warnings, in its order */
  if (m->rows == 0) {
    KIO_WARN("Skipping %s due to zero-length features", key);
    (*num_err)++;
    return 0;
  }
  int has = kio_ra_has_key(graphs, key);
  if (has < 0) return KIO_ERR;
  if (!has) {
    KIO_WARN("Skipping %s due to missing training graph", key);
    (*num_err)++;
    return 0;
  }
  const kio_fst *g = kio_ra_value(graphs, key);
  char *k = strdup(key);
  if (!g || !k || kio_fst_copy(&s->raw, g) != KIO_OK || kio_seq_take(feats, &s->feats) != KIO_OK) {
    if (g && !k) KIO_ERROR("Out of memory reading utterance %s", key);
    free(k);
    return KIO_ERR;
  }
  free(s->key);
  s->key = k;
  s->empty = s->raw.num_states == 0 || s->raw.start < 0;
  return 1;
}

int galign_source_compile(const galign_pipeline_cfg *cfg, slot *s) {
  if (cfg->compile(cfg->compile_user, &s->words, &s->raw) != KIO_OK) return KIO_ERR;
  s->empty = s->raw.num_states == 0 || s->raw.start < 0;
  return KIO_OK;
}
