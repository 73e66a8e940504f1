/* Device memory of the GPU service (service.c calls these): the devices it
 * serves, which one a connection gets, admission of every batch by memory,
 * the memory a finished or dead client held given back, and the pools
 * trimmed when the service is idle.
 *
 * Each device has a capacity: the service budget (KALDI_GPU_SERVICE_MEMORY,
 * device/gpu.h), at most 7/8 of what was free when the service started less
 * 512 MiB (another process may hold the rest: a training on the same GPU).
 * A batch asks for its job's limit (kio_gpu_share; more when few jobs use
 * the device, gsvc_mem_want); it is admitted when
 * that fits beside the grants of the running batches and what the service
 * holds outside them (every connection's model), in arrival order, so
 * a job waits its turn instead of failing. A waiting batch that is first in
 * line gets what is left (at least 1/8 of its limit) after 2 s, all that is
 * left when nothing runs, and after KALDI_GPU_WAIT seconds without any
 * batch ending, whatever is left (then it splits or runs on the CPU, as its
 * aligner decides): no batch waits forever. The batch's account may hold
 * its model plus the grant; after the batch its buffers are freed and the
 * grant returned, so a client holds device memory only while its batch
 * runs, and a dead client holds none. After 5 s with no batch running a
 * device's pool gives its memory back to the driver. */
#ifndef GSVC_ADMISSION_H
#define GSVC_ADMISSION_H

#include <stddef.h>
#include "device/gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

struct galign_aligner;
struct gacc_acc;

/* Device k (0 .. 15) of the service is CUDA device dev: its context is
 * created, desc (n bytes) describes it. KIO_ERR (logged). */
int gsvc_mem_open(int k, int dev, char *desc, size_t n);
/* The device for a new connection among ndev: the fewest connections, then
 * the least memory granted and asked for. Counted until gsvc_mem_leave. */
int gsvc_mem_pick(int ndev);
void gsvc_mem_leave(int k);
/* The connection's thread works on device k from now on (kio_gpu_job gives
 * it). KIO_ERR (logged). */
int gsvc_mem_enter(int k);
/* A job starts on an aligner or accumulator (new, or from the pool): its
 * per-job counts and LOG line start again; nothing may be allocated outside
 * a batch. NULL (the CPU backend) is accepted. */
void gsvc_mem_job_align(struct galign_aligner *a);
void gsvc_mem_job_acc(struct gacc_acc *a);
/* Around each batch of a connection on device k: begin waits for its turn
 * and grants the memory; end frees the batch buffers and returns it. An
 * alignment batch asks for at most what the aligner plans for it (need,
 * galign_aligner_batch_need; SIZE_MAX: no plan), so that small batches do
 * not hold a job's whole share while others wait. */
void gsvc_mem_begin_align(int k, struct galign_aligner *a, size_t need);
void gsvc_mem_end_align(int k, struct galign_aligner *a);
void gsvc_mem_begin_acc(int k, struct gacc_acc *a);
/* 1 if a batch of a on device k would be admitted now without waiting
 * (nobody in line, its want fits): the connection may then keep its
 * accumulation running beside it. */
int gsvc_mem_fits_align(int k, struct galign_aligner *a, size_t need);
/* A batch's want (a job's share, or an even part of the budget) capped by
 * its planned need with room for the allocations' rounding; SIZE_MAX: want. */
size_t gsvc_mem_cap_want(size_t want, size_t need);
void gsvc_mem_end_acc(int k, struct gacc_acc *a);
/* fn(k) frees what the service keeps idle on device k (its pooled
 * aligners, its pooled accumulators: what, as in "accumulator(s)") and
 * returns how many it freed: called before a batch that does not fit
 * beside the running ones and what is held, so that idle state is the
 * first thing to go under memory pressure; the functions registered
 * (at most 4) in their order, until the batch fits. */
void gsvc_mem_on_pressure(int (*fn)(int k), const char *what);
/* From the service's loop: trims the pools of devices idle for 5 s. */
void gsvc_mem_idle(void);

/* ---- the admission itself, for tests (no device needed) ---- */
typedef struct gsvc_mem_pool gsvc_mem_pool;
/* capacity bytes shared by batches and what held(user) says is held
 * outside them (NULL: nothing); wait_limit: seconds without any release
 * after which the first in line takes what is left. */
gsvc_mem_pool *gsvc_mem_pool_new(size_t capacity, double wait_limit,
                                 size_t (*held)(void *user), void *user);
void gsvc_mem_pool_free(gsvc_mem_pool *p);
/* Waits its turn for want bytes (at least min_grant once 2 s have passed
 * at the head of the line); returns the bytes granted (0 only when nothing
 * is left after the wait limit). */
size_t gsvc_mem_pool_admit(gsvc_mem_pool *p, size_t want, size_t min_grant);
void gsvc_mem_pool_release(gsvc_mem_pool *p, size_t granted);
/* Bytes granted now, batches running and waiting. */
void gsvc_mem_pool_state(gsvc_mem_pool *p, size_t *granted, int *running, int *waiting);
/* What a batch asks for: its job's limit (share), or with few connections
 * on the device (conns, this one included) an even part of the capacity,
 * capacity / (conns + 1) for an aligner, an eighth of that for an
 * accumulator, if that is more: one job through the service gets the
 * batches of a job alone on its device, sixteen jobs their limit as
 * before. */
size_t gsvc_mem_want(size_t share, size_t capacity, int conns, int acc);

#ifdef __cplusplus
}
#endif
#endif
