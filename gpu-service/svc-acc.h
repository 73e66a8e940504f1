/* Internal to gpu-service: the accumulators of ACC connections (one job's
 * gmm-acc-stats-ali each), kept between connections in one pool per
 * device. A training script sends a new model every iteration (and mixing
 * up changes its Gaussian count): an idle accumulator is rebound to the
 * connection's model (gacc_rebind: the model uploaded, the statistics
 * arrays reused where large enough, zeroed), its stream, page-locked
 * staging ring, host threads and worker kept; a connection thus neither
 * allocates page-locked buffers nor frees device memory (a cudaFree may
 * wait for the whole device). An idle accumulator holds no reference to
 * any model. The pool holds at most the accumulators that served at once
 * (one is made only when none is idle), at most MAX_IDLE per device; its
 * device memory counts as the service's (held outside the batches:
 * admission.c); it is the first thing freed when a batch does not fit
 * (gsvc_mem_on_pressure), and freed when idle as long as the models are
 * (the service's eviction) and at the service's end. */
#ifndef GSVC_SVC_ACC_H
#define GSVC_SVC_ACC_H

#include <stdint.h>

#include "gpu-acc/gpu-acc.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How a connection got its accumulator. */
enum { GSVC_ACC_NEW = 0, GSVC_ACC_POOLED = 1, GSVC_ACC_REBOUND = 2 };

/* An accumulator for a connection of model (the entry's number, unique in
 * the service; tm and am its parsed model) on device dev: an idle one of
 * the same dimension (the one with the most host threads, then one last
 * bound to this model), rebound to the model, else a new one (on the CPU
 * backend: use_cpu); its account begun anew; *kind: GSVC_ACC_*. NULL: why
 * (200 bytes) says why. */
gacc_acc *gsvc_acc_get(int dev, uint64_t model, const kio_tmodel *tm, const kio_am_gmm *am,
                       int use_cpu, int *kind, char *why);
/* The connection's end: a kept idle (its model's references dropped), or
 * freed if drop or the pool is full; verbose: a LOG line with the seconds
 * it took and the device's idle count. */
void gsvc_acc_end(int dev, uint64_t model, gacc_acc *a, int drop, int verbose);
/* Frees the idle accumulators of device dev (-1: every device) idle for
 * more than idle_s seconds (negative: all); returns how many. */
int gsvc_acc_shed(int dev, double idle_s);
/* gsvc_mem_on_pressure's function: every idle accumulator of device dev. */
int gsvc_acc_on_pressure(int dev);
/* Idle accumulators of device dev (-1: all). */
int gsvc_acc_idle_count(int dev);

/* "new accumulator", "pooled accumulator", "pooled accumulator, rebound
 * to a new model": the LOG lines' words for kind. */
const char *gsvc_acc_kind_name(int kind);

/* The connection's LOG lines (KALDI_GPU_SERVICE_VERBOSE): requests (most:
 * the most the job had unanswered at once, as the reader saw them), seconds
 * setting up (kind: GSVC_ACC_*), accumulating, waiting for the next request
 * and connected; at verbosity 2 (shm: requests whose features came through
 * shared memory) the accumulator's split since t0 (its timing when the
 * connection took it): batches, frames, host sort, staging, waiting for the
 * device, the per-frame likelihoods, fetching the statistics. */
void gsvc_acc_log(int dev, int requests, int most, int shm, double setup, double busy,
                  double waiting, double connected, const gacc_acc *a, int kind,
                  const gacc_timing *t0);

#ifdef __cplusplus
}
#endif
#endif
