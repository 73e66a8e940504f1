/* The device layer: which GPU a job uses, its context, the device memory
 * each part of the job may take, and what happens when memory runs out.
 * The aligner, the accumulator, the device feature chain, the one-pass
 * program and the GPU service all go through it; CUDA itself is reached
 * through a small backend (cuda-util.cu, the emulator of tests/emu, or a
 * test's fake), so everything here is plain C and testable without a GPU.
 *
 * Devices. A job on its own context uses ONE device, chosen the first time
 * any part of it asks (kio_gpu_job): the aligner's init thread, the
 * accumulator and the feature chain all get the same kio_gpu, and every
 * thread that touches CUDA makes it current (kio_gpu_bind) before it does.
 * The GPU service opens each device it serves (kio_gpu_open_device) and
 * puts a connection's thread on one (kio_gpu_set_thread), so that the
 * objects the connection creates land there.
 *
 * Memory. Device memory is allocated through an account (kio_gpu_acct):
 * one per device object (aligner, accumulator, feature chain), each with a
 * limit in bytes. An allocation that would pass the limit fails as if the
 * device were full; so does one the device refuses. The objects size their
 * batches to the limit and, when an allocation fails anyway, free their
 * batch buffers, split the batch and try again (docs/gpu-memory.md).
 *
 * Budgets (bytes; docs/gpu-memory.md says why these defaults):
 *   job      --gpu-memory or KALDI_GPU_MEMORY: all of one job's device
 *            objects together; default 2 GiB, at most 1/8 of the device;
 *            a job alone on its own device (no other process holding more
 *            than 1/16 of it, no other copy of the program running when
 *            the device is chosen): 1/4 of the device.
 *   service  KALDI_GPU_SERVICE_MEMORY: all the service's jobs on one device
 *            together; default 12 GiB, at most 1/4 of the device, and at
 *            most what was free when the service started.
 * A value is bytes with an optional K, M, G or T suffix (powers of 1024),
 * or a percentage of the device's memory ("10%"). */
#ifndef KIO_GPU_H
#define KIO_GPU_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* --use-gpu: no (the CPU), yes (the GPU or an error), optional (the GPU when
 * one is usable, else the CPU), wait (the GPU, waiting for one: at most
 * KALDI_GPU_WAIT seconds, then the CPU). */
typedef enum { KIO_GPU_NO = 0, KIO_GPU_YES, KIO_GPU_OPTIONAL, KIO_GPU_WAIT } kio_gpu_mode;
int kio_gpu_parse_mode(const char *s, kio_gpu_mode *out);
const char *kio_gpu_mode_name(kio_gpu_mode m);

/* ---- budgets ---- */

/* Parses a budget ("4G", "512M", "1073741824", "10%" of total). KIO_OK, or
 * KIO_ERR when it does not parse (nothing logged). */
int kio_gpu_parse_bytes(const char *s, size_t total, size_t *out);
/* --gpu-memory of the programs: replaces KALDI_GPU_MEMORY for this process.
 * KIO_ERR (logged, naming the option) if it does not parse. NULL or "": no
 * change. */
int kio_gpu_set_job_memory(const char *spec);
/* The job budget (of a job sharing its device) and the service budget on a
 * device of total bytes. */
size_t kio_gpu_job_budget(size_t total);
struct kio_gpu;
/* The job budget on g: as kio_gpu_job_budget, or the larger default of a
 * job alone on its device (gpu.h's header). */
size_t kio_gpu_job_budget_on(const struct kio_gpu *g);
size_t kio_gpu_service_budget(size_t total);
/* Seconds a wait for device memory or a device may last (KALDI_GPU_WAIT,
 * default 300). */
double kio_gpu_wait_limit(void);

/* The parts of a job that hold device memory, each with an account. */
typedef enum { KIO_GPU_PART_ALIGN, KIO_GPU_PART_ACC, KIO_GPU_PART_FEATS } kio_gpu_part;
/* A part's limit on device g. On a job's own device, shares of the job
 * budget that add up to it: the aligner 3/4, the accumulator's batches and
 * the feature chain 1/8 each (the accumulator's model and statistics come
 * on top: they do not depend on the data). On the GPU service's devices,
 * per job: the aligner min(job budget, service budget / 8), the
 * accumulator's batches 1/8 of that; the service's admission
 * (gpu-service/admission.c) then grants each batch its memory. */
size_t kio_gpu_share(const struct kio_gpu *g, kio_gpu_part part);

/* ---- devices ---- */

typedef struct kio_gpu kio_gpu;

/* The device this job uses: the thread's (kio_gpu_set_thread), else the
 * process's, chosen on the first call (KALDI_GPU_DEVICE, the only one, or
 * the one with the most free memory) and the same ever after. Its context
 * is current in the calling thread on return. wait != 0: a device that is
 * busy (exclusive mode) is waited for, at most kio_gpu_wait_limit().
 * KIO_OK; KIO_GPU_GAVE_UP (wait only: none became free in time, a WARNING
 * logged); or KIO_ERR with an ERROR logged. */
enum { KIO_GPU_GAVE_UP = -10 };
int kio_gpu_job(kio_gpu **g, int wait);
/* The GPU service: device dev (its context created; the same object
 * every time for the same dev). KIO_ERR (logged). The object lives as
 * long as the process. */
int kio_gpu_open_device(kio_gpu **g, int dev);
/* Makes g the device kio_gpu_job gives in this thread (NULL: the
 * process's again). */
void kio_gpu_set_thread(kio_gpu *g);
/* Makes g's device current in the calling thread. KIO_ERR (logged). */
int kio_gpu_bind(const kio_gpu *g);
int kio_gpu_device(const kio_gpu *g);
/* "NVIDIA H200, 132 SMs, 139.8 GiB". */
const char *kio_gpu_desc(const kio_gpu *g);
size_t kio_gpu_total(const kio_gpu *g);
/* Device memory free now (the driver's view), 0 when unknown. */
size_t kio_gpu_free_now(const kio_gpu *g);
/* Bytes our accounts hold on g now, and the most they held at once. */
size_t kio_gpu_held(const kio_gpu *g);
size_t kio_gpu_held_peak(const kio_gpu *g);
/* Gives the memory the device's pool keeps for reuse back to the driver. */
void kio_gpu_trim(kio_gpu *g);
/* 1 for the devices of the GPU service (kio_gpu_open_device). */
int kio_gpu_is_service(const kio_gpu *g);

/* ---- accounts ---- */

typedef struct kio_gpu_acct kio_gpu_acct;

/* An account on g for what (a short name for messages: "aligner"), whose
 * allocations may hold at most limit bytes at once. NULL (logged) when out
 * of host memory. The mode says what happens when memory runs out. */
kio_gpu_acct *kio_gpu_acct_new(kio_gpu *g, const char *what, size_t limit, kio_gpu_mode mode);
/* Frees the account; its blocks must be freed before (test builds report
 * any left). NULL is accepted. */
void kio_gpu_acct_free(kio_gpu_acct *a);
kio_gpu *kio_gpu_acct_gpu(const kio_gpu_acct *a);
size_t kio_gpu_acct_limit(const kio_gpu_acct *a);
void kio_gpu_acct_set_limit(kio_gpu_acct *a, size_t limit);
size_t kio_gpu_acct_live(const kio_gpu_acct *a);
size_t kio_gpu_acct_peak(const kio_gpu_acct *a);
/* Bytes the account may still allocate (limit - live, or 0). */
size_t kio_gpu_acct_room(const kio_gpu_acct *a);
kio_gpu_mode kio_gpu_acct_mode(const kio_gpu_acct *a);

/* Device memory (the device's stream-ordered pool: no device-wide
 * synchronisation; freed in the order of stream, a cudaStream_t). On
 * failure: KIO_ERR and *p = NULL; an out-of-memory failure (the limit, the
 * device, or the test hook KALDI_GPU_TEST_FAIL_ALLOC) logs "out of memory:
 * allocating N bytes of device memory" as an ERROR, unless the thread is
 * inside kio_gpu_catch (then it is held for kio_gpu_caught). */
int kio_gpu_alloc(kio_gpu_acct *a, void **p, size_t bytes, void *stream);
/* NULL is accepted. */
void kio_gpu_free(void *p, void *stream);

/* Out-of-memory failures of this thread are held instead of logged, from
 * now until kio_gpu_caught, which returns 0 if none happened, else 1 (the
 * device's memory) or 2 (an account's budget), what: the first one's
 * message. Other failures are logged as usual. Nests. */
void kio_gpu_catch(void);
int kio_gpu_caught(char *what, size_t n);
/* A CUDA call other than an allocation failed for want of memory (e.g. a
 * kernel launch's local memory): held or logged as an ERROR "CUDA error
 * out of memory: CALL". */
void kio_gpu_nomem_call(const char *call, const char *func, const char *file, int line);

/* ---- when memory runs out ---- */

typedef enum {
  KIO_GPU_RETRY,  /* waited: try the same work on the device again */
  KIO_GPU_USE_CPU,/* run this work on the CPU (same results) */
  KIO_GPU_FAIL    /* give up: the ERROR is logged */
} kio_gpu_action;

/* The smallest piece of work (one utterance, a few frames) did not fit
 * after the caller freed its batch buffers (why: the failure's message;
 * need: bytes it wanted, 0 if unknown; waited: seconds this piece has
 * waited so far, updated: the back-off grows with it). Says what to do,
 * as the account's mode wants:
 *   no room ever (need > the account's limit, or > the device):
 *        optional, wait: the CPU; yes: fail;
 *   else optional: the CPU; wait, yes: wait (back-off 0.25 s doubling to
 *        2 s; the pool is trimmed) and retry, until the account has waited
 *        kio_gpu_wait_limit() seconds in all (a shortage that lasts costs
 *        one wait per job, not one per batch), then wait: the CPU, yes:
 *        fail. The service's accounts wait at most 10 s per job, then the
 *        CPU (their jobs wait their turn in the service's admission).
 * Logs the job's one LOG line about memory the first time; a failure logs
 * the ERROR lines (why, and what did not fit). */
kio_gpu_action kio_gpu_out_of_memory(kio_gpu_acct *a, const char *why, size_t need,
                                     double *waited);
/* A batch was split to fit (logs the job's one line the first time). */
void kio_gpu_note_split(kio_gpu_acct *a, const char *why);
/* Counts of what happened to this account's work. */
typedef struct {
  int64_t splits, cpu_pieces, waits, failures;
  double waited_s;
} kio_gpu_events;
void kio_gpu_acct_events(const kio_gpu_acct *a, kio_gpu_events *e);
/* A new job starts on the account (the GPU service reuses accounts): its
 * counts and its one LOG line start again. */
void kio_gpu_acct_new_job(kio_gpu_acct *a);

/* ---- backend choice (the programs' fall-back order) ---- */

/* Chooses where a job's own work runs after the GPU service was not used
 * (svc_why: why, "" if it was not tried), as mode says: the CPU (*g = NULL)
 * or the job's device (*g set: kio_gpu_job). doing names the work in the
 * LOG line ("aligning", "accumulating"); the line is written to line (the
 * caller logs it, so that it carries the caller's name). try_device, when
 * given, is called after the device was chosen to set up the caller's
 * objects on it; its failure counts as the device's. KIO_ERR (logged) when
 * mode is yes or wait and no device could be used. */
int kio_gpu_choose(kio_gpu_mode mode, const char *svc_why, const char *doing, kio_gpu **g,
                   int (*try_device)(void *user, kio_gpu *g), void *user, char *line,
                   size_t n);

/* ---- the CUDA backend (cuda-util.cu; a test may replace it) ---- */

typedef struct {
  int (*device_count)(void);
  /* kio_cuda_choose's contract (cuda-util.h): picks, makes current, describes */
  int (*select)(double wait_s, int named_dev, char *desc, int desc_len, int *dev);
  int (*bind)(int dev);                                 /* 0 ok */
  int (*mem_info)(int dev, size_t *free_b, size_t *total_b); /* 0 ok */
  /* 0 ok, 1 out of memory, -1 another error (msg filled) */
  int (*alloc)(void **p, size_t bytes, void *stream, char *msg, size_t n);
  void (*free)(void *p, void *stream);
  void (*trim)(int dev);                                /* pool back to the driver */
  void (*keep)(int dev, size_t bytes);                  /* pool release threshold */
} kio_gpu_backend;
/* Replaces the backend (tests); NULL restores CUDA's. Call before any
 * other function of this file. */
void kio_gpu_set_backend(const kio_gpu_backend *b);
/* Forgets the process's device (tests of the device choice). */
void kio_gpu_reset_for_tests(void);
/* Running copies of this program as the device layer sees them (tests of
 * the budget of a job alone; 0: the real count). */
void kio_gpu_set_instances_for_tests(int n);

#ifdef __cplusplus
}
#endif
#endif
