#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda-util.h"
#include "pinned-pool.h"
#include "base/sys/log.h"
#include "base/sys/settings.h"

extern "C" int kio_cuda_device_count(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError(); /* clear the sticky "no device" error */
    return 0;
  }
  return n;
}

/* The device code of this build (configure's CUDA_SASS / CUDA_PTX). */
#ifndef KIO_CUDA_SASS
#define KIO_CUDA_SASS ""
#endif
#ifndef KIO_CUDA_PTX
#define KIO_CUDA_PTX 0
#endif

static int try_context(int dev);

/* Compiled like every kernel of ours: the runtime picks its code for a
 * device as it picks theirs. */
__global__ void kio_k_probe(int *p) {
  if (p) *p = 0;
}

/* A build for the build machine's GPU (make test-asan): nvcc -arch=native. */
static int native_build(void) { return !strcmp(KIO_CUDA_SASS, "native"); }

extern "C" const char *kio_cuda_build_archs(void) {
  static char buf[512];
  if (native_build()) return "the build machine's GPU (nvcc -arch=native)";
  if (!buf[0]) {
    size_t n = 0;
    const char *s = KIO_CUDA_SASS;
    while (*s && n + 16 < sizeof buf) {
      while (*s == ' ') s++;
      if (!*s) break;
      n += (size_t)snprintf(buf + n, sizeof buf - n, "%ssm_", n ? " " : "");
      while (*s && *s != ' ' && n + 2 < sizeof buf) buf[n++] = *s++;
      buf[n] = '\0';
    }
    if (KIO_CUDA_PTX) snprintf(buf + n, sizeof buf - n, " + PTX compute_%d", KIO_CUDA_PTX);
  }
  return buf;
}

/* 1 if this build has SASS for architecture arch (10 * major + minor). */
static int has_sass(int arch) {
  const char *s = KIO_CUDA_SASS;
  while (*s) {
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s) break;
    if (v == arch) return 1;
    s = end;
  }
  return 0;
}

extern "C" void kio_cuda_env_info(kio_cuda_env *e) {
  memset(e, 0, sizeof *e);
  cudaDriverGetVersion(&e->driver);
  cudaRuntimeGetVersion(&e->runtime);
  cudaError_t r = cudaGetDeviceCount(&e->count);
  if (r != cudaSuccess) {
    e->count = 0;
    snprintf(e->why, sizeof e->why, "%s", cudaGetErrorString(r));
  } else if (e->count == 0) {
    snprintf(e->why, sizeof e->why, "no CUDA device");
  }
  cudaGetLastError();
}

/* The code the runtime picked for the current device; 0 (why) if none. */
static int picked_code(int *from_ptx, char *why, size_t why_len) {
  cudaFuncAttributes fa;
  cudaError_t r = cudaFuncGetAttributes(&fa, kio_k_probe);
  if (r != cudaSuccess) {
    cudaGetLastError();
    snprintf(why, why_len, "%s (this build has %s)", cudaGetErrorString(r), kio_cuda_build_archs());
    return 0;
  }
  /* the driver's compilation of our PTX reports the device's own version */
  *from_ptx = !native_build() && !has_sass(fa.binaryVersion);
  return fa.binaryVersion;
}

extern "C" int kio_cuda_device_info(int dev, kio_cuda_dev_info *d) {
  memset(d, 0, sizeof *d);
  cudaDeviceProp p;
  cudaError_t r = cudaGetDeviceProperties(&p, dev);
  if (r != cudaSuccess) {
    cudaGetLastError();
    snprintf(d->why, sizeof d->why, "%s", cudaGetErrorString(r));
    return KIO_ERR;
  }
  snprintf(d->name, sizeof d->name, "%s", p.name);
  d->major = p.major;
  d->minor = p.minor;
  d->sms = p.multiProcessorCount;
  d->mem_gib = p.totalGlobalMem / (1024.0 * 1024.0 * 1024.0);
  if (!try_context(dev)) {
    snprintf(d->why, sizeof d->why, "no CUDA context (busy in exclusive mode?)");
    return KIO_ERR;
  }
  d->code_arch = picked_code(&d->from_ptx, d->why, sizeof d->why);
  return d->code_arch ? KIO_OK : KIO_ERR;
}

extern "C" int kio_cuda_debug_sync(void) {
  static int v = -1;
  if (v < 0) v = kio_setting_flag(KIO_SET_DEV_CUDA_SYNC, 0);
  return v;
}

extern "C" int kio_cuda_context_broken(char *why, int why_len) {
  size_t free_b = 0, total_b = 0;
  /* a context with a sticky error fails every call, this one included */
  cudaError_t e = cudaMemGetInfo(&free_b, &total_b);
  if (e == cudaSuccess) return 0;
  if (why && why_len > 0) snprintf(why, (size_t)why_len, "CUDA error %s", cudaGetErrorString(e));
  return 1;
}

/* $KALDI_GPU_DEVICE, or -1. */
static int env_device(void) {
  if (!kio_setting_str(KIO_SET_DEVICE)) return -1;
  return (int)kio_setting_int(KIO_SET_DEVICE, 0, 0, 1 << 20);
}

extern "C" void kio_cuda_warm_up(void) {
  int dev = env_device(), n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
  /* With several devices and none named the choice looks at all of them:
   * warming one up would only be undone. */
  if (dev < 0 && n == 1) dev = 0;
  if (dev >= 0 && n > dev && cudaSetDevice(dev) == cudaSuccess)
    cudaFree(0); /* forces the (per-process) primary context into being */
  cudaGetLastError();
}

static int blocking_sync;
extern "C" void kio_cuda_prefer_blocking_sync(void) { blocking_sync = 1; }

/* Seconds a wait polls before it sleeps: 0 unless the waits sleep. */
static double wait_spin_s(void) {
  static double s = -1.0;
  if (s < 0.0)
    s = blocking_sync ? (double)kio_setting_int(KIO_SET_DEV_SERVICE_SPIN_US, 1000, 0, 1000000) * 1e-6
                      : 0.0;
  return s;
}

cudaError_t kio_cuda_stream_wait(cudaStream_t st) {
  const double spin = wait_spin_s();
  if (spin > 0.0) {
    const double t0 = kio_now_s();
    for (;;) {
      cudaError_t e = cudaStreamQuery(st);
      if (e != cudaErrorNotReady) return e;
      if (kio_now_s() - t0 >= spin) break;
    }
  }
  return cudaStreamSynchronize(st);
}

cudaError_t kio_cuda_event_wait(cudaEvent_t ev) {
  const double spin = wait_spin_s();
  if (spin > 0.0) {
    const double t0 = kio_now_s();
    for (;;) {
      cudaError_t e = cudaEventQuery(ev);
      if (e != cudaErrorNotReady) return e;
      if (kio_now_s() - t0 >= spin) break;
    }
  }
  return cudaEventSynchronize(ev);
}

/* Creates the primary context of dev and makes it current; 0 when that fails
 * (e.g. a device in exclusive-process mode that another process holds). */
static int try_context(int dev) {
  if (cudaSetDevice(dev) == cudaSuccess) {
    if (blocking_sync) {
      cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync);  /* before the context exists */
      cudaGetLastError();
    }
    if (cudaFree(0) == cudaSuccess) return 1;
  }
  cudaGetLastError();
  return 0;
}

/* The device to use, its context current; -1 when none can be had. A named
 * device or the only one is taken as it is. With several and none named,
 * the one with the largest fraction of free memory, as Kaldi's programs
 * choose; the next best when its context cannot be created. The contexts
 * opened to look are released again (cudaDeviceReset): this runs once per
 * process, before any of them holds anything of ours. */
static int pick_device(int n, int named) {
  if (named >= 0 || n == 1) {
    int dev = named >= 0 ? named : 0;
    return dev < n && try_context(dev) ? dev : -1;
  }
  double ratio[64];
  if (n > 64) n = 64;
  KIO_LOG("Selecting from %d GPUs", n);
  for (int d = 0; d < n; d++) {
    size_t free_b = 0, total_b = 0;
    ratio[d] = -1;
    if (try_context(d) && cudaMemGetInfo(&free_b, &total_b) == cudaSuccess && total_b > 0) {
      ratio[d] = (double)free_b / (double)total_b;
      KIO_LOG("GPU %d: free %zuM of %zuM (%.3f)", d, free_b >> 20, total_b >> 20, ratio[d]);
    } else {
      cudaGetLastError();
      KIO_LOG("GPU %d: cannot be used now (busy in exclusive mode?)", d);
    }
  }
  int chosen = -1;
  for (;;) {
    int best = -1;
    for (int d = 0; d < n; d++)
      if (ratio[d] >= 0 && (best < 0 || ratio[d] > ratio[best])) best = d;
    if (best < 0) break;
    if (try_context(best)) { chosen = best; break; }
    ratio[best] = -1;
  }
  for (int d = 0; d < n; d++)
    if (d != chosen && cudaSetDevice(d) == cudaSuccess) cudaDeviceReset();
  cudaGetLastError();
  if (chosen >= 0) cudaSetDevice(chosen);
  return chosen;
}

extern "C" int kio_cuda_choose(double wait_s, int named_dev, char *desc, int desc_len,
                               int *out) {
  int waited = 0, dev;
  const int named = named_dev >= 0 ? named_dev : env_device();
  for (;;) {
    int n = kio_cuda_device_count();
    if (n <= 0 || named >= n) {
      /* No device at all is an error even with "wait", as in Kaldi. */
      KIO_ERROR("No CUDA device %d available (found %d)", named >= 0 ? named : 0, n);
      return KIO_ERR;
    }
    if ((dev = pick_device(n, named)) >= 0) break;
    if (wait_s <= 0) {
      KIO_ERROR("Failed to create a CUDA context on any of %d GPUs (all busy in exclusive mode?)", n);
      return KIO_ERR;
    }
    if (waited >= wait_s) {
      KIO_WARN("Waited %d seconds; no GPU became free (KALDI_GPU_WAIT)", waited);
      return KIO_GPU_GAVE_UP;
    }
    if (waited == 0)
      KIO_WARN("Will try again every 5 seconds, for at most %.0f seconds, to get a GPU.", wait_s);
    sleep(5);
    waited += 5;
  }
  if (waited) KIO_WARN("Waited %d seconds before creating CUDA context", waited);
  cudaDeviceProp p;
  KIO_CUDA_TRY(cudaGetDeviceProperties(&p, dev));
  /* A device this build has no code for fails at the first launch with
   * "no kernel image": say so now, naming the fix. */
  char why[384];
  int from_ptx = 0;
  if (!picked_code(&from_ptx, why, sizeof why)) {
    KIO_ERROR("No device code for %s (sm_%d%d) in this build: %s; rebuild with "
              "./configure --cuda-arch=sm_%d%d (or no --cuda-arch: every architecture "
              "of the CUDA toolkit)", p.name, p.major, p.minor, why, p.major, p.minor);
    return KIO_ERR;
  }
  if (desc)
    snprintf(desc, desc_len, "%s, %d SMs, %.1f GiB", p.name, p.multiProcessorCount,
             p.totalGlobalMem / (1024.0 * 1024.0 * 1024.0));
  *out = dev;
  return KIO_OK;
}

extern "C" int kio_cuda_bind(int dev) {
  if (cudaSetDevice(dev) == cudaSuccess) return 0;
  cudaGetLastError();
  return -1;
}

extern "C" int kio_cuda_mem_info(int dev, size_t *free_b, size_t *total_b) {
  int cur = -1;
  *free_b = *total_b = 0;
  if (cudaGetDevice(&cur) != cudaSuccess) cur = -1;
  cudaError_t e = cudaSetDevice(dev);
  if (e == cudaSuccess) e = cudaMemGetInfo(free_b, total_b);
  if (cur >= 0 && cur != dev) cudaSetDevice(cur);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  return 0;
}

/* ---- the stream-ordered pool ---- */

enum { MAX_DEV = 64 };
static pthread_mutex_t mem_mu = PTHREAD_MUTEX_INITIALIZER;
static signed char pool_state[MAX_DEV]; /* per device: 0 unknown, 1 pool, 2 no pool */
static uint64_t pool_keep[MAX_DEV];     /* release threshold; 0: keep all */

/* dev's pool, set up on first use (NULL: the device has none). */
static cudaMemPool_t dev_pool(int dev) {
  if (dev < 0 || dev >= MAX_DEV) return NULL;
  cudaMemPool_t mp = NULL;
  pthread_mutex_lock(&mem_mu);
  if (!pool_state[dev]) {
    int sup = 0;
    if (cudaDeviceGetAttribute(&sup, cudaDevAttrMemoryPoolsSupported, dev) == cudaSuccess && sup &&
        cudaDeviceGetDefaultMemPool(&mp, dev) == cudaSuccess) {
      uint64_t keep = pool_keep[dev] ? pool_keep[dev] : UINT64_MAX;
      cudaMemPoolSetAttribute(mp, cudaMemPoolAttrReleaseThreshold, &keep);
    } else {
      sup = 0;
    }
    cudaGetLastError();
    pool_state[dev] = sup ? 1 : 2;
  }
  int has = pool_state[dev] == 1;
  pthread_mutex_unlock(&mem_mu);
  if (has && cudaDeviceGetDefaultMemPool(&mp, dev) != cudaSuccess) {
    cudaGetLastError();
    mp = NULL;
  }
  return has ? mp : NULL;
}

static int current_device(void) {
  int dev = -1;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  return dev;
}

extern "C" int kio_cuda_raw_alloc(void **p, size_t bytes, void *stream, char *msg, size_t n) {
  *p = NULL;
  cudaError_t e = dev_pool(current_device()) ? cudaMallocAsync(p, bytes, (cudaStream_t)stream)
                                             : cudaMalloc(p, bytes);
  if (e == cudaSuccess) return 0;
  cudaGetLastError();
  *p = NULL;
  if (e == cudaErrorMemoryAllocation) return 1;
  snprintf(msg, n, "CUDA error %s", cudaGetErrorString(e));
  return -1;
}

extern "C" void kio_cuda_raw_free(void *p, void *stream) {
  if (!p) return;
  if (dev_pool(current_device())) cudaFreeAsync(p, (cudaStream_t)stream);
  else cudaFree(p);
  cudaGetLastError();
}

extern "C" void kio_cuda_pool_trim(int dev) {
  cudaMemPool_t mp = dev_pool(dev);
  if (mp) cudaMemPoolTrimTo(mp, 0);
  cudaGetLastError();
}

extern "C" void kio_cuda_pool_keep(int dev, size_t bytes) {
  if (dev < 0 || dev >= MAX_DEV) return;
  pthread_mutex_lock(&mem_mu);
  pool_keep[dev] = bytes ? bytes : 1;
  pthread_mutex_unlock(&mem_mu);
  cudaMemPool_t mp = dev_pool(dev);
  if (mp) {
    uint64_t keep = bytes ? bytes : 1;
    cudaMemPoolSetAttribute(mp, cudaMemPoolAttrReleaseThreshold, &keep);
  }
  cudaGetLastError();
}

/* ---- page-locked host memory ---- */

/* One pool per process (device/pinned-pool.h): slabs from the driver (16
 * MiB first, doubling to 128 MiB), power-of-two blocks up to 32 MiB carved
 * from them, larger blocks
 * the driver's own (freed ones cached up to $KALDI_GPU_DEV_HOST_CACHE_MB).
 * Portable blocks: usable from any context, whichever device was current
 * when allocated. */
#define HOST_SLAB ((size_t)128 << 20)

static void *pinned_driver_alloc(size_t bytes) {
  void *b = NULL;
  if (cudaHostAlloc(&b, bytes, cudaHostAllocPortable) != cudaSuccess) {
    cudaGetLastError();
    return NULL;
  }
  return b;
}

static void pinned_driver_free(void *b) {
  cudaFreeHost(b);
  cudaGetLastError();
}

static kio_pinned_pool *host_pool;
static pthread_once_t host_pool_once = PTHREAD_ONCE_INIT;

static void host_pool_init(void) {
  size_t lim = (size_t)kio_setting_int(KIO_SET_DEV_HOST_CACHE_MB, 4096, 0, (long long)1 << 30) << 20;
  host_pool = kio_pinned_pool_new((kio_pinned_backend){pinned_driver_alloc, pinned_driver_free},
                                  HOST_SLAB, lim);
}

extern "C" int kio_cuda_host_alloc(void **p, size_t bytes) {
  pthread_once(&host_pool_once, host_pool_init);
  *p = kio_pinned_alloc(host_pool, bytes);
  if (*p) return KIO_OK;
  KIO_ERROR("CUDA error: allocating %zu bytes of page-locked memory failed", bytes);
  return KIO_ERR;
}

extern "C" void kio_cuda_host_free(void *p, void *stream) {
  if (!p) return;
  if (stream) cudaStreamSynchronize((cudaStream_t)stream);
  cudaGetLastError();
  kio_pinned_release(host_pool, p);
}

extern "C" void kio_cuda_host_trim(void) {
  if (host_pool) kio_pinned_trim(host_pool);
}

extern "C" int kio_cuda_host_grow(int device) {
  pthread_once(&host_pool_once, host_pool_init);
  static int reserve_set;
  if (!reserve_set) {
    reserve_set = 1;
    long long phys = (long long)sysconf(_SC_PHYS_PAGES) * sysconf(_SC_PAGESIZE);
    long long cap = phys > 0 ? (phys / 16) >> 20 : 0;
    long long mb = kio_setting_int(KIO_SET_DEV_HOST_RESERVE_MB, 4096 < cap ? 4096 : cap, 0,
                                   cap > 0 ? cap : 0);
    kio_pinned_set_reserve(host_pool, (size_t)mb << 20);
  }
  if (cudaSetDevice(device) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  return kio_pinned_grow(host_pool);
}

extern "C" void kio_cuda_host_describe(char *buf, size_t n) {
  kio_pinned_stats st;
  kio_pinned_get_stats(host_pool, &st);
  snprintf(buf, n, "%d slabs of %.0f MiB (reserve %.0f MiB, %lld pinned ahead), in use %.0f MiB, "
           "cached %.0f MiB, %lld driver allocations of large blocks", st.slabs,
           st.slab_bytes / 1048576.0, st.reserve / 1048576.0, (long long)st.ahead_allocs,
           st.in_use / 1048576.0, st.cached / 1048576.0, (long long)st.large_allocs);
}

extern "C" void kio_cuda_host_stats(int64_t *allocs, double *alloc_s, int64_t *frees,
                                    double *free_s) {
  kio_pinned_stats st;
  kio_pinned_get_stats(host_pool, &st);
  *allocs = st.driver_allocs;
  *alloc_s = st.driver_alloc_s;
  *frees = st.driver_frees;
  *free_s = st.driver_free_s;
}
