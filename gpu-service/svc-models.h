/* The GPU service's models, by their exact bytes (a job's model file, or a
 * pipe such as gmm-boost-silence's output, serialised by the job): parsed
 * once, shared by the connections that send the same bytes. Thread-safe. */
#ifndef GSVC_SVC_MODELS_H
#define GSVC_SVC_MODELS_H

#include <stddef.h>
#include <stdint.h>

#include "base/model/model.h"

typedef struct gsvc_model {
  struct gsvc_model *next;
  char *bytes;
  size_t len;
  kio_tmodel tm;
  kio_am_gmm am;
  int refs;           /* connections using it */
  double last_used;
  uint64_t id;        /* unique in the service: what a pooled aligner or
                         accumulator last held */
} gsvc_model;

/* The entry for these bytes (parsed on first use) with a reference taken;
 * NULL when they are no model or memory runs out. */
gsvc_model *gsvc_model_get(const void *bytes, size_t len);
/* The reference given back. */
void gsvc_model_put(gsvc_model *e);
/* Frees the entries no connection has used for idle_s (negative: all
 * unused ones). */
void gsvc_model_evict(double idle_s);

#endif
