/* Internal to gpu-service: the aligners of ALIGN connections (one job's
 * gmm-align-compiled or gmm-align-acc-compiled each), kept between
 * connections in one pool per device. A recipe sends a new model with
 * every alignment job and every realignment of a training: an idle aligner
 * is rebound to the connection's model and options (galign_rebind: the
 * model uploaded, its device arrays reused where large enough), its
 * stream, page-locked staging buffers, decoder state and host threads
 * kept; a connection thus neither allocates page-locked buffers nor frees
 * device memory. An idle aligner holds no copy of its model on the host
 * (galign_unbind) and none of its batch buffers (trimmed after each batch:
 * admission.c), only the model's device arrays. The pool holds at most the
 * aligners that served at once (one is made only when none is idle), at
 * most MAX_IDLE per device; its device memory counts as the service's
 * (held outside the batches: admission.c); it is freed first when a batch
 * does not fit (gsvc_mem_on_pressure), when idle as long as the models
 * are (the service's eviction) and at the service's end. A failed aligner,
 * or one of a broken context, is never kept. */
#ifndef GSVC_SVC_ALIGN_H
#define GSVC_SVC_ALIGN_H

#include <stdint.h>

#include "gpu-align/gpu-align.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How a connection got its aligner. */
enum { GSVC_ALIGN_NEW = 0, GSVC_ALIGN_POOLED = 1, GSVC_ALIGN_REBOUND = 2 };

/* An aligner for a connection of model (the entry's number, unique in the
 * service; tm and am its parsed model) with options o on device dev: an
 * idle one last bound to this model and these options, else any idle one
 * of the device, rebound, else a new one (on the CPU backend: use_cpu);
 * *kind: GSVC_ALIGN_*. NULL: why (200 bytes) says why. */
galign_aligner *gsvc_align_get(int dev, uint64_t model, const kio_tmodel *tm,
                               const kio_am_gmm *am, const galign_opts *o, int use_cpu,
                               int *kind, char *why);
/* The connection's end: a kept idle (its model dropped), or freed if drop
 * or the pool is full; verbose: a LOG line with the seconds it took and the
 * device's idle count. */
void gsvc_align_end(int dev, uint64_t model, const galign_opts *o, galign_aligner *a, int drop,
                    int verbose);
/* Frees the idle aligners of device dev (-1: every device) idle for more
 * than idle_s seconds (negative: all); returns how many. */
int gsvc_align_shed(int dev, double idle_s);
/* gsvc_mem_on_pressure's function: every idle aligner of device dev. */
int gsvc_align_on_pressure(int dev);
/* Idle aligners of device dev (-1: all). */
int gsvc_align_idle_count(int dev);
/* "new aligner", "pooled aligner", "pooled aligner, rebound to a new
 * model": the connection's LOG line's words for kind. */
const char *gsvc_align_kind_name(int kind);

#ifdef __cplusplus
}
#endif
#endif
