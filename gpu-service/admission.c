/* The GPU service's device memory (admission.h). */
#include "admission.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/sys/log.h"
#include "device/cuda-util.h"
#include "gpu-acc/gpu-acc.h"
#include "gpu-align/gpu-align.h"

#define MIB ((size_t)1 << 20)
enum { MAX_DEV = 16 };
/* Seconds the first in line waits before it takes less than it asked for,
 * and without batches before a device's pool is trimmed. */
#define SHRINK_AFTER_S 2.0
#define TRIM_AFTER_S 5.0

/* ---- the admission ---- */

struct gsvc_mem_pool {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  size_t capacity, granted;
  size_t (*held)(void *user);  /* bytes held outside the grants (models) */
  void *user;
  unsigned long next_ticket, serving;  /* arrival order */
  int running, waiting;
  double wait_limit, last_release, head_since;
};

static void wait_a_bit(pthread_cond_t *cv, pthread_mutex_t *mu) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_nsec += 250 * 1000 * 1000;
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  }
  pthread_cond_timedwait(cv, mu, &ts);
}

gsvc_mem_pool *gsvc_mem_pool_new(size_t capacity, double wait_limit,
                                 size_t (*held)(void *user), void *user) {
  gsvc_mem_pool *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->held = held;
  p->user = user;
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv, NULL);
  p->capacity = capacity;
  p->wait_limit = wait_limit;
  p->last_release = p->head_since = kio_now_s();
  return p;
}

void gsvc_mem_pool_free(gsvc_mem_pool *p) {
  if (!p) return;
  pthread_cond_destroy(&p->cv);
  pthread_mutex_destroy(&p->mu);
  free(p);
}

size_t gsvc_mem_pool_admit(gsvc_mem_pool *p, size_t want, size_t min_grant) {
  pthread_mutex_lock(&p->mu);
  unsigned long ticket = p->next_ticket++;
  p->waiting++;
  size_t g;
  for (;;) {
    if (ticket == p->serving) {
      double now = kio_now_s();
      size_t used = p->granted + (p->held ? p->held(p->user) : 0);
      size_t left = p->capacity > used ? p->capacity - used : 0;
      double idle = now - (p->last_release > p->head_since ? p->last_release : p->head_since);
      if (want <= left) { g = want; break; }
      if (p->running == 0) { g = left; break; }  /* alone: all there is */
      if (now - p->head_since >= SHRINK_AFTER_S && left >= min_grant && left > 0) {
        g = left;
        break;
      }
      if (idle >= p->wait_limit) { g = left; break; }  /* no batch ends: go on anyway */
    }
    wait_a_bit(&p->cv, &p->mu);
  }
  p->serving++;
  p->head_since = kio_now_s();
  p->waiting--;
  p->running++;
  p->granted += g;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  return g;
}

void gsvc_mem_pool_release(gsvc_mem_pool *p, size_t granted) {
  pthread_mutex_lock(&p->mu);
  p->granted -= granted < p->granted ? granted : p->granted;
  if (p->running > 0) p->running--;
  p->last_release = kio_now_s();
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
}

void gsvc_mem_pool_state(gsvc_mem_pool *p, size_t *granted, int *running, int *waiting) {
  pthread_mutex_lock(&p->mu);
  if (granted) *granted = p->granted;
  if (running) *running = p->running;
  if (waiting) *waiting = p->waiting;
  pthread_mutex_unlock(&p->mu);
}

/* ---- the service's devices ---- */

/* A batch running on a device: its account and what the account held
 * when it began (the model: outside the grant). */
typedef struct { kio_gpu_acct *acct; size_t base; } running;
enum { MAX_RUNNING = 256 };

static struct {
  kio_gpu *gpu;
  gsvc_mem_pool *pool;
  int conns;
  double last_busy;
  int trimmed;
  running run[MAX_RUNNING];
  int nrun;
} dm[MAX_DEV];
/* Lock order: a pool's mu before dm_mu (an admission asks held_outside
 * under its pool's lock); never a pool's lock under dm_mu. */
static pthread_mutex_t dm_mu = PTHREAD_MUTEX_INITIALIZER;
/* The running batches' grants (begin .. end) of this thread: its
 * alignment's [0] and its accumulation's [1], which may overlap. */
static __thread size_t t_grant[2];

/* Bytes our accounts hold on device k outside the running batches' grants:
 * the models and statistics of every connection and pooled aligner. */
static size_t held_outside(void *user) {
  const int k = (int)(intptr_t)user;
  pthread_mutex_lock(&dm_mu);
  size_t held = kio_gpu_held(dm[k].gpu), batches = 0;
  for (int i = 0; i < dm[k].nrun; i++) {
    size_t live = kio_gpu_acct_live(dm[k].run[i].acct);
    if (live > dm[k].run[i].base) batches += live - dm[k].run[i].base;
  }
  pthread_mutex_unlock(&dm_mu);
  return held > batches ? held - batches : 0;
}

int gsvc_mem_open(int k, int dev, char *desc, size_t n) {
  if (k < 0 || k >= MAX_DEV) return KIO_ERR;
  kio_gpu *g = NULL;
  if (kio_gpu_open_device(&g, dev) != KIO_OK) return KIO_ERR;
  size_t total = kio_gpu_total(g), free_b = kio_gpu_free_now(g);
  size_t budget = kio_gpu_service_budget(total);
  size_t cap = free_b > 512 * MIB ? (free_b - 512 * MIB) / 8 * 7 : 0;
  if (cap > budget) cap = budget;
  if (cap < 64 * MIB) cap = 64 * MIB;
  gsvc_mem_pool *p = gsvc_mem_pool_new(cap, kio_gpu_wait_limit(), held_outside,
                                       (void *)(intptr_t)k);
  if (!p) {
    KIO_ERROR("Out of memory");
    return KIO_ERR;
  }
  pthread_mutex_lock(&dm_mu);
  dm[k].gpu = g;
  dm[k].pool = p;
  dm[k].trimmed = 1;
  pthread_mutex_unlock(&dm_mu);
  snprintf(desc, n, "%s", kio_gpu_desc(g));
  KIO_LOG("Device %d (%s): batches share %.2f GiB (service budget %.2f GiB, %.2f GiB free "
          "at start); a job's batch up to %.2f GiB", dev, kio_gpu_desc(g), cap / 1073741824.0,
          budget / 1073741824.0, free_b / 1073741824.0,
          kio_gpu_share(g, KIO_GPU_PART_ALIGN) / 1073741824.0);
  return KIO_OK;
}

int gsvc_mem_pick(int ndev) {
  if (ndev < 1) ndev = 1;
  if (ndev > MAX_DEV) ndev = MAX_DEV;
  /* The pools' loads before dm_mu: a batch's admission holds its pool's
   * lock while it takes dm_mu (held_outside), so dm_mu is never held while
   * a pool's lock is taken. */
  size_t load[MAX_DEV];
  for (int k = 0; k < ndev; k++) {
    size_t granted = 0;
    int waiting = 0;
    if (dm[k].pool) gsvc_mem_pool_state(dm[k].pool, &granted, NULL, &waiting);
    load[k] = granted + (size_t)waiting * kio_gpu_share(dm[k].gpu, KIO_GPU_PART_ALIGN);
  }
  pthread_mutex_lock(&dm_mu);
  int best = 0;
  for (int k = 1; k < ndev; k++)
    if (dm[k].conns < dm[best].conns || (dm[k].conns == dm[best].conns && load[k] < load[best]))
      best = k;
  dm[best].conns++;
  pthread_mutex_unlock(&dm_mu);
  return best;
}

void gsvc_mem_leave(int k) {
  pthread_mutex_lock(&dm_mu);
  if (k >= 0 && k < MAX_DEV && dm[k].conns > 0) dm[k].conns--;
  pthread_mutex_unlock(&dm_mu);
}

int gsvc_mem_enter(int k) {
  if (k < 0 || k >= MAX_DEV || !dm[k].gpu) return KIO_ERR;
  kio_gpu_set_thread(dm[k].gpu);
  return kio_gpu_bind(dm[k].gpu);
}

/* Between batches an account may hold what it holds (the model), no more. */
static void close_account(kio_gpu_acct *acct) {
  if (acct) kio_gpu_acct_set_limit(acct, kio_gpu_acct_live(acct));
}

void gsvc_mem_job_align(struct galign_aligner *a) {
  kio_gpu_acct *acct = galign_aligner_acct(a);
  kio_gpu_acct_new_job(acct);
  close_account(acct);
}

void gsvc_mem_job_acc(struct gacc_acc *a) {
  kio_gpu_acct *acct = gacc_acct(a);
  kio_gpu_acct_new_job(acct);
  close_account(acct);
}

size_t gsvc_mem_want(size_t share, size_t capacity, int conns, int acc) {
  size_t even = capacity / (size_t)((conns > 1 ? conns : 1) + 1);
  if (acc) even /= 8;
  return even > share ? even : share;
}

static size_t want_of(int k, kio_gpu_part part) {
  pthread_mutex_lock(&dm_mu);
  int conns = dm[k].conns;
  pthread_mutex_unlock(&dm_mu);
  return gsvc_mem_want(kio_gpu_share(dm[k].gpu, part), dm[k].pool->capacity, conns,
                       part == KIO_GPU_PART_ACC);
}

/* What the service keeps idle, freed in this order under pressure. */
enum { MAX_PRESSURE = 4 };
typedef struct { int (*fn)(int k); const char *what; } pressure_fn;
static pressure_fn on_pressure[MAX_PRESSURE];
static int n_pressure;  /* registered before the first connection */

void gsvc_mem_on_pressure(int (*fn)(int k), const char *what) {
  if (n_pressure < MAX_PRESSURE) on_pressure[n_pressure++] = (pressure_fn){fn, what};
}

/* want fits beside the grants and what is held on pool p now */
static int fits_now(gsvc_mem_pool *p, size_t want) {
  pthread_mutex_lock(&p->mu);
  size_t used = p->granted + (p->held ? p->held(p->user) : 0);
  int fits = p->capacity > used && want <= p->capacity - used;
  pthread_mutex_unlock(&p->mu);
  return fits;
}

size_t gsvc_mem_cap_want(size_t want, size_t need) {
  if (need == SIZE_MAX) return want;
  /* the allocations' rounding and alignment on top of the plan */
  const size_t padded = need + need / 16 + 64 * MIB;
  return padded < need || padded >= want ? want : padded;
}

static void begin(int k, kio_gpu_acct *acct, kio_gpu_part part, size_t need) {
  size_t *t_g = &t_grant[part == KIO_GPU_PART_ACC];
  *t_g = 0;
  if (!acct || k < 0 || k >= MAX_DEV || !dm[k].pool) return;
  size_t want = gsvc_mem_cap_want(want_of(k, part), need);
  for (int i = 0; i < n_pressure && !fits_now(dm[k].pool, want); i++) {
    int n = on_pressure[i].fn(k);
    if (n) KIO_LOG("Device %d: memory short for a batch; %d idle %s freed",
                    kio_gpu_device(dm[k].gpu), n, on_pressure[i].what);
  }
  *t_g = gsvc_mem_pool_admit(dm[k].pool, want, want / 8);
  size_t base = kio_gpu_acct_live(acct);
  kio_gpu_acct_set_limit(acct, base + *t_g);
  pthread_mutex_lock(&dm_mu);
  if (dm[k].nrun < MAX_RUNNING) dm[k].run[dm[k].nrun++] = (running){acct, base};
  pthread_mutex_unlock(&dm_mu);
}

static void end(int k, kio_gpu_acct *acct, kio_gpu_part part) {
  size_t *t_g = &t_grant[part == KIO_GPU_PART_ACC];
  if (!acct || k < 0 || k >= MAX_DEV || !dm[k].pool) return;
  close_account(acct);
  pthread_mutex_lock(&dm_mu);
  for (int i = 0; i < dm[k].nrun; i++)
    if (dm[k].run[i].acct == acct) {
      dm[k].run[i] = dm[k].run[--dm[k].nrun];
      break;
    }
  dm[k].last_busy = kio_now_s();
  dm[k].trimmed = 0;
  pthread_mutex_unlock(&dm_mu);
  gsvc_mem_pool_release(dm[k].pool, *t_g);
  *t_g = 0;
}

void gsvc_mem_begin_align(int k, struct galign_aligner *a, size_t need) {
  begin(k, galign_aligner_acct(a), KIO_GPU_PART_ALIGN, need);
}

void gsvc_mem_end_align(int k, struct galign_aligner *a) {
  galign_aligner_trim(a);  /* the batch's buffers: nothing stays with the job */
  end(k, galign_aligner_acct(a), KIO_GPU_PART_ALIGN);
}

void gsvc_mem_begin_acc(int k, struct gacc_acc *a) {
  begin(k, gacc_acct(a), KIO_GPU_PART_ACC, SIZE_MAX);
}

void gsvc_mem_end_acc(int k, struct gacc_acc *a) {
  gacc_trim(a);
  end(k, gacc_acct(a), KIO_GPU_PART_ACC);
}

int gsvc_mem_fits_align(int k, struct galign_aligner *a, size_t need) {
  if (!galign_aligner_acct(a) || k < 0 || k >= MAX_DEV || !dm[k].pool) return 1;
  size_t want = gsvc_mem_cap_want(want_of(k, KIO_GPU_PART_ALIGN), need);
  gsvc_mem_pool *p = dm[k].pool;
  pthread_mutex_lock(&p->mu);
  size_t used = p->granted + (p->held ? p->held(p->user) : 0);
  int fits = p->waiting == 0 && p->capacity > used && want <= p->capacity - used;
  pthread_mutex_unlock(&p->mu);
  return fits;
}

static int host_trim_due, host_grow_failed;

void gsvc_mem_idle(void) {
  double now = kio_now_s();
  for (int k = 0; k < MAX_DEV; k++) {
    pthread_mutex_lock(&dm_mu);
    int due = dm[k].gpu && !dm[k].trimmed && now - dm[k].last_busy >= TRIM_AFTER_S;
    pthread_mutex_unlock(&dm_mu);
    if (!due) continue;
    int running = 0, waiting = 0;
    gsvc_mem_pool_state(dm[k].pool, NULL, &running, &waiting);
    if (running || waiting) continue;
    kio_gpu_trim(dm[k].gpu);
    KIO_VLOG(1, "Device %d idle: its memory pool given back (our accounts hold %.1f MiB)",
             kio_gpu_device(dm[k].gpu), kio_gpu_held(dm[k].gpu) / 1048576.0);
    pthread_mutex_lock(&dm_mu);
    dm[k].trimmed = 1;
    pthread_mutex_unlock(&dm_mu);
    host_trim_due = 1;
  }
  /* the page-locked blocks kept for reuse are the process's: given back
   * once every device is idle */
  pthread_mutex_lock(&dm_mu);
  int all_idle = host_trim_due;
  for (int k = 0; k < MAX_DEV; k++)
    if (dm[k].gpu && !dm[k].trimmed) all_idle = 0;
  if (all_idle) host_trim_due = 0;
  pthread_mutex_unlock(&dm_mu);
  if (all_idle) kio_cuda_host_trim();
  /* Page-locked memory pinned ahead while no batch runs: pinning stalls
   * every stream, and the jobs of a recipe's next stage would otherwise
   * pin their larger buffers all at once, stalling each other. */
  int first = -1, busy = 0;
  for (int k = 0; k < MAX_DEV; k++) {
    pthread_mutex_lock(&dm_mu);
    int has = dm[k].gpu != NULL && dm[k].pool != NULL;
    if (has && dm[k].nrun) busy = 1;
    pthread_mutex_unlock(&dm_mu);
    if (!has) continue;
    if (first < 0) first = k;
    int running = 0, waiting = 0;
    gsvc_mem_pool_state(dm[k].pool, NULL, &running, &waiting);
    if (running || waiting) busy = 1;
  }
  if (first >= 0 && !busy && !host_grow_failed) {
    if (kio_cuda_host_grow(kio_gpu_device(dm[first].gpu)) < 0) {
      host_grow_failed = 1;
      KIO_WARN("Could not pin host memory ahead; pinning on demand");
    }
  }
}
