/* The device layer (gpu.h): devices, accounts, budgets, the out-of-memory
 * policy and the fall-back order. CUDA is reached through the backend
 * table only. */
#include "gpu.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/sys/cpu-share.h"
#include "base/sys/log.h"
#include "base/sys/settings.h"
#include "cuda-util.h"
#include "gpu-internal.h"

/* ---- modes ---- */

static const char *const mode_names[] = {"no", "yes", "optional", "wait"};

int kio_gpu_parse_mode(const char *s, kio_gpu_mode *out) {
  for (int i = 0; s && i < 4; i++)
    if (!strcmp(s, mode_names[i])) {
      *out = (kio_gpu_mode)i;
      return KIO_OK;
    }
  return KIO_ERR;
}

const char *kio_gpu_mode_name(kio_gpu_mode m) {
  return (unsigned)m < 4 ? mode_names[m] : "?";
}

/* ---- budgets ---- */

#define GIB ((size_t)1 << 30)
#define MIB ((size_t)1 << 20)

int kio_gpu_parse_bytes(const char *s, size_t total, size_t *out) {
  if (!s || !*s) return KIO_ERR;
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || !(v >= 0) || isinf(v)) return KIO_ERR;
  double mul = 1;
  if (*end == '%') {
    if (!total || v > 100) return KIO_ERR;
    mul = (double)total / 100.0;
    end++;
  } else if (*end) {
    switch (toupper((unsigned char)*end)) {
      case 'K': mul = 1024.0; break;
      case 'M': mul = 1024.0 * 1024; break;
      case 'G': mul = 1024.0 * 1024 * 1024; break;
      case 'T': mul = 1024.0 * 1024 * 1024 * 1024; break;
      default: return KIO_ERR;
    }
    end++;
    if (toupper((unsigned char)*end) == 'I') end++;   /* "GiB" */
    if (toupper((unsigned char)*end) == 'B') end++;
  }
  if (*end) return KIO_ERR;
  double b = v * mul;
  if (b < 1 || b > 9.0e18) return KIO_ERR;
  *out = (size_t)b;
  return KIO_OK;
}

static char *job_memory_opt; /* --gpu-memory */
static int test_instances;   /* kio_gpu_set_instances_for_tests (0: the real count) */

int kio_gpu_set_job_memory(const char *spec) {
  if (!spec || !*spec) return KIO_OK;
  size_t b;
  /* a percentage needs the device: only its form is checked here */
  if (kio_gpu_parse_bytes(spec, (size_t)1 << 40, &b) != KIO_OK) {
    KIO_ERROR("Invalid value --gpu-memory=%s: use bytes with K, M or G (e.g. 2G), or a "
              "percentage of the device (e.g. 10%%)", spec);
    return KIO_ERR;
  }
  free(job_memory_opt);
  job_memory_opt = strdup(spec);
  return KIO_OK;
}

/* spec's value on a device of total bytes, else def; one WARNING when the
 * variable does not parse. */
static size_t budget_of(const char *spec, const char *name, size_t total, size_t def) {
  size_t b;
  if (!spec) return def;
  if (kio_gpu_parse_bytes(spec, total, &b) == KIO_OK) return b;
  static int warned;
  if (!warned++) KIO_WARN("Ignoring %s=%s (expected bytes such as 2G, or 10%%); using %zu MiB",
                          name, spec, def / MIB);
  return def;
}

/* Defaults (docs/gpu-memory.md): a batch needs ~3.3 KB of device memory per
 * frame (decoder tokens, likelihoods, features, graphs), so 2 GiB holds
 * ~600,000 frames (1.7 h of speech, ~2,000 utterances): enough utterances
 * to keep the one-thread-per-utterance decoder busy. A small device keeps
 * 7/8 for others. */
static size_t budget_default(size_t total, size_t alone) {
  size_t def = 2 * GIB;
  if (total && def > total / 8) def = total / 8;
  if (def < 64 * MIB) def = 64 * MIB;
  if (alone > def) def = alone;
  const char *spec = job_memory_opt ? job_memory_opt : kio_setting_str(KIO_SET_GPU_MEMORY);
  return budget_of(spec, job_memory_opt ? "--gpu-memory" : "KALDI_GPU_MEMORY", total, def);
}

size_t kio_gpu_job_budget(size_t total) { return budget_default(total, 0); }

/* 12 GiB: 8 jobs' batches of 1.5 GiB at once, and with the context and the
 * pool's slack under 16 GB on an H100/H200 (3/4 of the card left to
 * others). */
size_t kio_gpu_service_budget(size_t total) {
  size_t def = 12 * GIB;
  if (total && def > total / 4) def = total / 4;
  if (def < 128 * MIB) def = 128 * MIB;
  return budget_of(kio_setting_str(KIO_SET_SERVICE_MEMORY), "KALDI_GPU_SERVICE_MEMORY", total,
                   def);
}

double kio_gpu_wait_limit(void) {
  return (double)kio_setting_int(KIO_SET_GPU_WAIT, 300, 0, 1 << 30);
}

size_t kio_gpu_share(const kio_gpu *g, kio_gpu_part part) {
  size_t total = kio_gpu_total(g), job = kio_gpu_job_budget_on(g);
  if (kio_gpu_is_service(g)) {
    size_t per = kio_gpu_service_budget(total) / 8;
    if (per < job) job = per;
    if (job < 64 * MIB) job = 64 * MIB;
    return part == KIO_GPU_PART_ALIGN ? job : job / 8;
  }
  return part == KIO_GPU_PART_ALIGN ? job - job / 4 : job / 8;
}

/* ---- the backend ---- */

static const kio_gpu_backend cuda_backend = {
    kio_cuda_device_count, kio_cuda_choose, kio_cuda_bind, kio_cuda_mem_info,
    kio_cuda_raw_alloc,    kio_cuda_raw_free, kio_cuda_pool_trim, kio_cuda_pool_keep,
};
static const kio_gpu_backend *be = &cuda_backend;

void kio_gpu_set_backend(const kio_gpu_backend *b) { be = b ? b : &cuda_backend; }

/* ---- devices ---- */

struct kio_gpu {
  int dev, service;
  char desc[160];
  size_t total;
  size_t alone;         /* a job alone on the device: its default budget (else 0) */
  pthread_mutex_t mu;
  size_t held, held_peak;
  int told;             /* the job's one LOG line about memory was printed */
};

static pthread_mutex_t job_mu = PTHREAD_MUTEX_INITIALIZER;
static kio_gpu *job_gpu;
static __thread kio_gpu *t_gpu;

/* A job's own device is the job's alone when no other process holds more
 * than 1/16 of it and no other copy of this program runs (the nj jobs of a
 * recipe start together and see each other); its default budget is then
 * 1/4 of the device (an H200: 35 GB instead of 2 GiB), so one big job's
 * batches are not cut to a shared device's size. Anyone arriving later
 * still finds 3/4 of the device. */
static size_t alone_budget(size_t free_b, size_t total) {
  if (!total || free_b < total - total / 16) return 0;
  int n = test_instances > 0 ? test_instances : kio_cpu_instances();
  return n == 1 ? total / 4 : 0;
}

static kio_gpu *gpu_new(int dev, const char *desc, int service) {
  kio_gpu *g = calloc(1, sizeof *g);
  if (!g) { KIO_ERROR("Out of memory"); return NULL; }
  g->dev = dev;
  g->service = service;
  snprintf(g->desc, sizeof g->desc, "%s", desc);
  size_t fb = 0, tb = 0;
  if (be->mem_info(dev, &fb, &tb) == 0) g->total = tb;
  if (!service) g->alone = alone_budget(fb, tb);
  pthread_mutex_init(&g->mu, NULL);
  size_t budget = service ? kio_gpu_service_budget(g->total) : kio_gpu_job_budget_on(g);
  if (!service)
    KIO_VLOG(1, "Device memory of this job: budget %.1f MiB (%s)", budget / (double)MIB,
             g->alone ? "alone on the device" : "the device is shared");
  /* Freed memory stays in the pool for reuse up to the budget; above it the
   * pool gives memory back at the next synchronisation. */
  be->keep(dev, budget);
  return g;
}

size_t kio_gpu_job_budget_on(const kio_gpu *g) {
  if (!g) return kio_gpu_job_budget(0);
  return budget_default(g->total, g->service ? 0 : g->alone);
}

int kio_gpu_job(kio_gpu **out, int wait) {
  *out = NULL;
  if (t_gpu) {
    if (kio_gpu_bind(t_gpu) != KIO_OK) return KIO_ERR;
    *out = t_gpu;
    return KIO_OK;
  }
  pthread_mutex_lock(&job_mu);
  if (!job_gpu) {
    char desc[160] = "";
    int dev = -1;
    int rc = be->select(wait ? kio_gpu_wait_limit() : 0, -1, desc, (int)sizeof desc, &dev);
    if (rc == 0) job_gpu = gpu_new(dev, desc, 0);
    if (!job_gpu) {
      pthread_mutex_unlock(&job_mu);
      return rc == KIO_GPU_GAVE_UP ? KIO_GPU_GAVE_UP : KIO_ERR;
    }
    pthread_mutex_unlock(&job_mu);
    *out = job_gpu;
    return KIO_OK;  /* select made it current here */
  }
  pthread_mutex_unlock(&job_mu);
  if (kio_gpu_bind(job_gpu) != KIO_OK) return KIO_ERR;
  *out = job_gpu;
  return KIO_OK;
}

/* The service's devices, each opened once. */
enum { MAX_OPEN = 64 };
static kio_gpu *opened[MAX_OPEN];

int kio_gpu_open_device(kio_gpu **out, int dev) {
  char desc[160] = "";
  int got = -1;
  *out = NULL;
  if (dev < 0 || dev >= MAX_OPEN) {
    KIO_ERROR("No CUDA device %d", dev);
    return KIO_ERR;
  }
  pthread_mutex_lock(&job_mu);
  if (!opened[dev] && be->select(0, dev, desc, (int)sizeof desc, &got) == 0)
    opened[dev] = gpu_new(got, desc, 1);
  *out = opened[dev];
  pthread_mutex_unlock(&job_mu);
  return *out ? KIO_OK : KIO_ERR;
}

void kio_gpu_set_thread(kio_gpu *g) { t_gpu = g; }

int kio_gpu_bind(const kio_gpu *g) {
  if (!g) return KIO_ERR;
  if (be->bind(g->dev) != 0) {
    KIO_ERROR("Cannot make CUDA device %d current", g->dev);
    return KIO_ERR;
  }
  return KIO_OK;
}

int kio_gpu_device(const kio_gpu *g) { return g ? g->dev : -1; }
const char *kio_gpu_desc(const kio_gpu *g) { return g ? g->desc : ""; }
size_t kio_gpu_total(const kio_gpu *g) { return g ? g->total : 0; }
int kio_gpu_is_service(const kio_gpu *g) { return g && g->service; }

size_t kio_gpu_free_now(const kio_gpu *g) {
  size_t fb = 0, tb = 0;
  if (!g || be->mem_info(g->dev, &fb, &tb) != 0) return 0;
  return fb;
}

size_t kio_gpu_held(const kio_gpu *g) {
  if (!g) return 0;
  pthread_mutex_lock((pthread_mutex_t *)&g->mu);
  size_t h = g->held;
  pthread_mutex_unlock((pthread_mutex_t *)&g->mu);
  return h;
}

size_t kio_gpu_held_peak(const kio_gpu *g) {
  if (!g) return 0;
  pthread_mutex_lock((pthread_mutex_t *)&g->mu);
  size_t h = g->held_peak;
  pthread_mutex_unlock((pthread_mutex_t *)&g->mu);
  return h;
}

void kio_gpu_trim(kio_gpu *g) {
  if (g) be->trim(g->dev);
}

void kio_gpu_set_instances_for_tests(int n) { test_instances = n; }

void kio_gpu_reset_for_tests(void) {
  pthread_mutex_lock(&job_mu);
  job_gpu = NULL;  /* leaked on purpose: accounts may still point to it */
  pthread_mutex_unlock(&job_mu);
  t_gpu = NULL;
}

/* ---- accounts ---- */

struct kio_gpu_acct {
  kio_gpu *g;
  char what[32];
  kio_gpu_mode mode;
  pthread_mutex_t mu;
  size_t limit, live, peak;
  kio_gpu_events ev;
  int told;             /* service accounts: the job's line was printed */
};

kio_gpu_acct *kio_gpu_acct_new(kio_gpu *g, const char *what, size_t limit, kio_gpu_mode mode) {
  kio_gpu_acct *a = calloc(1, sizeof *a);
  if (!a) { KIO_ERROR("Out of memory"); return NULL; }
  a->g = g;
  snprintf(a->what, sizeof a->what, "%s", what);
  a->limit = limit;
  a->mode = mode;
  pthread_mutex_init(&a->mu, NULL);
  return a;
}

static void acct_summary(const kio_gpu_acct *a) {
  const kio_gpu_events *e = &a->ev;
  if (e->splits || e->cpu_pieces || e->waits || e->failures)
    KIO_VLOG(1, "Device memory of the %s: budget %.1f MiB, peak %.1f MiB; %lld batches split, "
             "%lld pieces on the CPU, %lld waits (%.1f s)", a->what, a->limit / 1048576.0,
             a->peak / 1048576.0, (long long)e->splits, (long long)e->cpu_pieces,
             (long long)e->waits, e->waited_s);
}

void kio_gpu_acct_free(kio_gpu_acct *a) {
  if (!a) return;
  acct_summary(a);
  kio_gpu_blocks_forget(a);
  pthread_mutex_destroy(&a->mu);
  free(a);
}

kio_gpu *kio_gpu_acct_gpu(const kio_gpu_acct *a) { return a ? a->g : NULL; }
kio_gpu_mode kio_gpu_acct_mode(const kio_gpu_acct *a) { return a ? a->mode : KIO_GPU_NO; }

#define ACCT_GET(field)                                   \
  if (!a) return 0;                                       \
  pthread_mutex_lock((pthread_mutex_t *)&a->mu);          \
  size_t v = a->field;                                    \
  pthread_mutex_unlock((pthread_mutex_t *)&a->mu);        \
  return v
size_t kio_gpu_acct_limit(const kio_gpu_acct *a) { ACCT_GET(limit); }
size_t kio_gpu_acct_live(const kio_gpu_acct *a) { ACCT_GET(live); }
size_t kio_gpu_acct_peak(const kio_gpu_acct *a) { ACCT_GET(peak); }
#undef ACCT_GET

size_t kio_gpu_acct_room(const kio_gpu_acct *a) {
  if (!a) return 0;
  pthread_mutex_lock((pthread_mutex_t *)&a->mu);
  size_t r = a->limit > a->live ? a->limit - a->live : 0;
  pthread_mutex_unlock((pthread_mutex_t *)&a->mu);
  return r;
}

void kio_gpu_acct_set_limit(kio_gpu_acct *a, size_t limit) {
  pthread_mutex_lock(&a->mu);
  a->limit = limit;
  pthread_mutex_unlock(&a->mu);
}

void kio_gpu_acct_events(const kio_gpu_acct *a, kio_gpu_events *e) {
  memset(e, 0, sizeof *e);
  if (!a) return;
  pthread_mutex_lock((pthread_mutex_t *)&a->mu);
  *e = a->ev;
  pthread_mutex_unlock((pthread_mutex_t *)&a->mu);
}

void kio_gpu_acct_new_job(kio_gpu_acct *a) {
  if (!a) return;
  acct_summary(a);
  pthread_mutex_lock(&a->mu);
  memset(&a->ev, 0, sizeof a->ev);
  a->told = 0;
  a->peak = a->live;
  pthread_mutex_unlock(&a->mu);
}

/* ---- allocation ---- */

/* This thread's out-of-memory failures are held while depth > 0. */
static __thread int t_catch;
static __thread int t_caught;
static __thread char t_caught_msg[200];

void kio_gpu_catch(void) {
  if (t_catch++ == 0) {
    t_caught = 0;
    t_caught_msg[0] = '\0';
  }
}

int kio_gpu_caught(char *what, size_t n) {
  if (t_catch > 0) t_catch--;
  int c = t_caught;  /* 1 the device, 2 a budget */
  if (what && n) snprintf(what, n, "%s", t_caught_msg);
  if (t_catch == 0) t_caught = 0;
  return c;
}

/* An out-of-memory failure (kind 1: the device's, 2: a budget's): held,
 * or logged as an ERROR. */
static void nomem(int kind, const char *func, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void nomem(int kind, const char *func, const char *file, int line, const char *fmt, ...) {
  char msg[200];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (t_catch > 0) {
    if (!t_caught) {
      snprintf(t_caught_msg, sizeof t_caught_msg, "%s", msg);
      t_caught = kind;
    }
    return;
  }
  kio_logf(KIO_LOG_ERROR, func, file, line, "%s", msg);
}

void kio_gpu_nomem_call(const char *call, const char *func, const char *file, int line) {
  nomem(1, func, file, line, "CUDA error out of memory: %s", call);
}

int kio_gpu_alloc(kio_gpu_acct *a, void **p, size_t bytes, void *stream) {
  *p = NULL;
  if (!a) {
    KIO_ERROR("Device memory asked for without an account (%zu bytes)", bytes);
    return KIO_ERR;
  }
  if (bytes == 0) bytes = 1;
  if (kio_gpu_hook_fails(bytes)) {
    nomem(1, __func__, __FILE__, __LINE__,
          "CUDA error out of memory: allocating %zu bytes of device memory", bytes);
    return KIO_ERR;
  }
  pthread_mutex_lock(&a->mu);
  if (a->live + bytes > a->limit || a->live + bytes < a->live) {
    size_t live = a->live, limit = a->limit;
    pthread_mutex_unlock(&a->mu);
    nomem(2, __func__, __FILE__, __LINE__,
          "out of memory: allocating %zu bytes of device memory would pass the %s's budget "
          "(%zu of %zu bytes in use)", bytes, a->what, live, limit);
    return KIO_ERR;
  }
  a->live += bytes;  /* reserved first: the account's threads allocate at once */
  pthread_mutex_unlock(&a->mu);
  char msg[160] = "";
  int r = be->alloc(p, bytes, stream, msg, sizeof msg);
  if (r == 0 && kio_gpu_blocks_add(*p, bytes, a) != KIO_OK) {
    be->free(*p, stream);
    *p = NULL;
    r = -1;
    snprintf(msg, sizeof msg, "Out of host memory recording a device block");
  }
  pthread_mutex_lock(&a->mu);
  if (r != 0) {
    a->live -= bytes;
  } else if (a->live > a->peak) {
    a->peak = a->live;
  }
  pthread_mutex_unlock(&a->mu);
  if (r == 1) {
    nomem(1, __func__, __FILE__, __LINE__,
          "CUDA error out of memory: allocating %zu bytes of device memory", bytes);
    return KIO_ERR;
  }
  if (r != 0) {
    KIO_ERROR("%s: allocating %zu bytes of device memory", msg[0] ? msg : "CUDA error", bytes);
    return KIO_ERR;
  }
  kio_gpu *g = a->g;
  if (g) {
    pthread_mutex_lock(&g->mu);
    g->held += bytes;
    if (g->held > g->held_peak) g->held_peak = g->held;
    pthread_mutex_unlock(&g->mu);
  }
  return KIO_OK;
}

void kio_gpu_free(void *p, void *stream) {
  if (!p) return;
  kio_gpu_acct *a = NULL;
  size_t bytes = 0;
  if (kio_gpu_blocks_take(p, &bytes, &a) == KIO_OK && a) {
    pthread_mutex_lock(&a->mu);
    a->live -= bytes;
    pthread_mutex_unlock(&a->mu);
    if (a->g) {
      pthread_mutex_lock(&a->g->mu);
      a->g->held -= bytes;
      pthread_mutex_unlock(&a->g->mu);
    }
  }
  be->free(p, stream);
}

/* ---- when memory runs out ---- */

/* The job's one LOG line about device memory, at its first shortage: what
 * happened and what the job does about it, as its mode says. Once per
 * process on a job's own device, once per job (kio_gpu_acct_new_job) on
 * the service's. The counts follow at the end under --verbose=1. */
static void announce(kio_gpu_acct *a, const char *why) {
  int *told = a->g && !a->g->service ? &a->g->told : &a->told;
  pthread_mutex_t *mu = a->g && !a->g->service ? &a->g->mu : &a->mu;
  pthread_mutex_lock(mu);
  int first = !*told;
  *told = 1;
  pthread_mutex_unlock(mu);
  if (!first) return;
  const double bound = kio_gpu_wait_limit();
  const char *what = a->mode == KIO_GPU_YES ? "an error" : "the CPU";
  char then[160];
  if (a->g && a->g->service)
    snprintf(then, sizeof then, "waits for memory (at most %.0f s in the GPU service), then "
             "runs on the CPU", bound < 10 ? bound : 10.0);
  else if (a->mode == KIO_GPU_OPTIONAL)
    snprintf(then, sizeof then, "runs on the CPU (--use-gpu=optional)");
  else
    snprintf(then, sizeof then, "waits for memory (--use-gpu=%s, at most %.0f s), then %s",
             kio_gpu_mode_name(a->mode), bound, what);
  KIO_LOG("Device memory short for the %s (%s; its budget %.0f MiB): batches are split to "
          "fit, and work that does not fit alone %s; results are unchanged.", a->what, why,
          kio_gpu_acct_limit(a) / 1048576.0, then);
}

void kio_gpu_note_split(kio_gpu_acct *a, const char *why) {
  pthread_mutex_lock(&a->mu);
  a->ev.splits++;
  pthread_mutex_unlock(&a->mu);
  announce(a, why);
}

static void sleep_s(double s) {
  if (s <= 0) return;
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

kio_gpu_action kio_gpu_out_of_memory(kio_gpu_acct *a, const char *why, size_t need,
                                     double *waited) {
  const int service = a->g && a->g->service;
  size_t limit = kio_gpu_acct_limit(a), total = kio_gpu_total(a->g);
  size_t cap = total && total < limit ? total : limit;
  const int never = need > 0 && need > cap;
  const kio_gpu_mode m = a->mode;
  double bound = kio_gpu_wait_limit();
  if (service && bound > 10) bound = 10;
  kio_gpu_action act;
  /* the bound is for the whole job (this account): a shortage that lasts
   * costs one wait, not one per batch */
  pthread_mutex_lock(&a->mu);
  const double spent = a->ev.waited_s;
  pthread_mutex_unlock(&a->mu);
  if (never || (m == KIO_GPU_OPTIONAL && !service) || spent >= bound)
    act = m == KIO_GPU_YES && !service ? KIO_GPU_FAIL : KIO_GPU_USE_CPU;
  else
    act = KIO_GPU_RETRY;
  if (act != KIO_GPU_FAIL) announce(a, why);
  if (act == KIO_GPU_FAIL) {
    pthread_mutex_lock(&a->mu);
    a->ev.failures++;
    pthread_mutex_unlock(&a->mu);
    KIO_ERROR("%s", why);
    if (never)
      KIO_ERROR("Not enough device memory for the %s even for one utterance: it needs %zu "
                "bytes, the budget is %zu (raise --gpu-memory or KALDI_GPU_MEMORY, or use "
                "--use-gpu=optional to run such work on the CPU)", a->what, need, limit);
    else
      KIO_ERROR("Not enough device memory for the %s even for one utterance after waiting "
                "%.0f s (%zu bytes free on the device; KALDI_GPU_WAIT=%.0f); use "
                "--use-gpu=optional to run such work on the CPU", a->what, spent,
                kio_gpu_free_now(a->g), bound);
    return act;
  }
  if (act == KIO_GPU_USE_CPU) {
    pthread_mutex_lock(&a->mu);
    a->ev.cpu_pieces++;
    pthread_mutex_unlock(&a->mu);
    return act;
  }
  /* wait: a bounded back-off, the pool trimmed (ours may hold the memory) */
  pthread_mutex_lock(&a->mu);
  a->ev.waits++;
  pthread_mutex_unlock(&a->mu);
  double step = 0.25;
  for (double w = *waited; w > 0 && step < 2.0; w -= step) step *= 2;
  if (step > bound - spent) step = bound - spent;
  kio_gpu_trim(a->g);
  sleep_s(step);
  *waited += step;
  pthread_mutex_lock(&a->mu);
  a->ev.waited_s += step;
  pthread_mutex_unlock(&a->mu);
  return KIO_GPU_RETRY;
}

/* ---- backend choice ---- */

int kio_gpu_choose(kio_gpu_mode mode, const char *svc_why, const char *doing, kio_gpu **g,
                   int (*try_device)(void *user, kio_gpu *g), void *user, char *line,
                   size_t n) {
  *g = NULL;
  char note[320] = "";
  if (svc_why && svc_why[0]) snprintf(note, sizeof note, " (GPU service not usable: %s)", svc_why);
  const int acc = !strcmp(doing, "accumulating");
  if (mode == KIO_GPU_NO) {
    snprintf(line, n, "%c%s on the CPU (--use-gpu=no).", toupper((unsigned char)doing[0]),
             doing + 1);
    return KIO_OK;
  }
  if (mode == KIO_GPU_OPTIONAL && be->device_count() <= 0) {
    snprintf(line, n, "No GPU found; %s on the CPU.%s", doing, note);
    return KIO_OK;
  }
  kio_gpu *d = NULL;
  int rc = kio_gpu_job(&d, mode == KIO_GPU_WAIT);
  if (rc == KIO_GPU_GAVE_UP && mode == KIO_GPU_WAIT) {
    snprintf(line, n, "No GPU became free in %.0f s (KALDI_GPU_WAIT); %s on the CPU.%s",
             kio_gpu_wait_limit(), doing, note);
    return KIO_OK;
  }
  /* Setting the work up on the device; out of memory as the mode says:
   * optional the CPU at once, wait and yes wait (bounded), then wait the
   * CPU and yes the error; a budget too small for the model never fits. */
  double waited = 0, bound = kio_gpu_wait_limit();
  if (rc == KIO_OK && d->service && bound > 10) bound = 10;  /* its job falls back itself */
  char why[200] = "";
  while (rc == KIO_OK && try_device) {
    kio_gpu_catch();
    int ok = try_device(user, d) == KIO_OK;
    int oom = kio_gpu_caught(why, sizeof why);
    if (ok) break;
    if (!oom) { rc = KIO_ERR; break; }  /* logged */
    if (mode == KIO_GPU_OPTIONAL || oom == 2 || waited >= bound) {
      if (mode == KIO_GPU_YES) {
        KIO_ERROR("%s", why);
        KIO_ERROR("Not enough device memory to set up %s on the GPU%s", doing,
                  oom == 2 ? " within the budget (--gpu-memory, KALDI_GPU_MEMORY)" : "");
        return KIO_ERR;
      }
      snprintf(line, n, "GPU not usable; %s on the CPU (%s%s).%s", doing, why,
               waited > 0 ? ", after waiting" : "", note);
      return KIO_OK;
    }
    double step = waited < 1 ? 0.25 : 2.0;
    if (step > bound - waited) step = bound - waited;
    kio_gpu_trim(d);
    struct timespec ts = {(time_t)step, (long)((step - (double)(time_t)step) * 1e9)};
    nanosleep(&ts, NULL);
    waited += step;
  }
  if (rc == KIO_OK) {
    *g = d;
    snprintf(line, n, "%s: %s%s%s", acc ? "Accumulating on the GPU" : "Using GPU", d->desc,
             waited > 0 ? " (after waiting for device memory)" : "", note);
    return KIO_OK;
  }
  if (mode != KIO_GPU_OPTIONAL) return KIO_ERR;
  snprintf(line, n, "GPU not usable; %s on the CPU.%s", doing, note);
  return KIO_OK;
}
