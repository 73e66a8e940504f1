/* Internal to gpu-service: the accumulators of ACC connections (one job's
 * gmm-acc-stats-ali each), kept between connections. A training iteration
 * sends the same model from every job; an accumulator set up once per
 * device (model uploaded, statistics allocated, host threads and worker
 * started) serves the next connection of that model after its statistics
 * are zeroed, so a connection neither uploads the model nor allocates and
 * frees device memory (a cudaFree may wait for the whole device). */
#ifndef GSVC_SVC_ACC_H
#define GSVC_SVC_ACC_H

#include "gpu-acc/gpu-acc.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gsvc_acc_idle gsvc_acc_idle;  /* a model's idle accumulators */

/* An idle accumulator of device dev from *list, its statistics zeroed and
 * its account begun anew; NULL if none (or zeroing failed: it is freed). */
gacc_acc *gsvc_acc_take(gsvc_acc_idle **list, int dev);
/* gsvc_acc_take's, else a new accumulator (on the CPU backend: use_cpu),
 * its account begun; *pooled: which. NULL: why (200 bytes) says why. */
gacc_acc *gsvc_acc_get(gsvc_acc_idle **list, int dev, const kio_tmodel *tm,
                       const kio_am_gmm *am, int use_cpu, int *pooled, char *why);
/* Keeps a for the next connection of its model on dev (freed if the list
 * holds enough already, or without memory). */
void gsvc_acc_put(gsvc_acc_idle **list, int dev, gacc_acc *a);
/* The connection's end: a kept (gsvc_acc_put), or freed if drop; verbose:
 * a LOG line with the seconds it took. */
void gsvc_acc_end(gsvc_acc_idle **list, int dev, gacc_acc *a, int drop, int verbose);
/* Frees every idle accumulator of the list (the model goes). */
void gsvc_acc_idle_free(gsvc_acc_idle **list);

/* The connection's LOG lines (KALDI_GPU_SERVICE_VERBOSE): requests, seconds
 * setting up (t0 NULL: a new accumulator), accumulating and connected; at
 * verbosity 2 (shm: requests whose features came through shared memory) the
 * accumulator's split since t0 (its timing when the
 * connection took it; NULL: all of it): batches, frames, host sort,
 * staging, waiting for the device, the per-frame likelihoods, fetching the
 * statistics. */
void gsvc_acc_log(int dev, int requests, int shm, double setup, double busy, double connected,
                  const gacc_acc *a, const gacc_timing *t0);

#ifdef __cplusplus
}
#endif
#endif
