/* Host stand-ins for the CUDA runtime / cuBLAS calls of gpu-align (see
 * cuda-emu.h): device memory is host memory, streams are synchronous,
 * cublasSgemm is a plain loop, kernel threads are coroutines (barriers).
 * Also kio_cuda_* of base/cuda-util.cu. Built with -DGALIGN_EMU_SELFTEST,
 * it is a self-test of the barrier emulation (end of file). */
/* _longjmp between coroutine stacks: glibc's fortified longjmp check would
 * take that for a jump into a dead frame. */
#undef _FORTIFY_SOURCE
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <atomic>
#include <mutex>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>
#include "cuda-emu.h"
#include "base/sys/log.h"
#include "base/sys/settings.h"
#include "device/cuda-util.h"
#include <unordered_map>
#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#define GALIGN_EMU_VG 1 /* tell valgrind about the thread stacks */
#endif
#endif

uint3 galign_emu_block_idx, galign_emu_thread_idx;
dim3 galign_emu_block_dim, galign_emu_grid_dim;
long galign_emu_launches;
float galign_emu_smem[GALIGN_EMU_SMEM_BYTES / sizeof(float)];

/* ---- Threads of a block as coroutines (see cuda-emu.h) ---- */
namespace {
const size_t kStackBytes = 256 * 1024;
const unsigned kMaxFibers = GALIGN_EMU_MAX_THREADS + 1;
/* A coroutine. ucontext only creates it (makecontext, once per stack);
 * switches use _setjmp/_longjmp, which make no sigprocmask system call
 * (swapcontext does: ~0.7 us per thread, too slow for big grids). */
struct Fiber {
  ucontext_t ctx; /* never copied: it points into itself (fpregs) */
  jmp_buf jb;     /* where it is parked */
  char *map;      /* guard page + stack */
  size_t map_len;
  unsigned vg_id;
};
extern std::mutex launch_mu;
/* Created on first need, reused by every launch, freed at exit. */
struct Pool {
  Fiber *all[kMaxFibers] = {}, *idle[kMaxFibers] = {};
  unsigned n = 0, nidle = 0;
  ~Pool() { /* at exit: wait for a launch of another host thread */
    std::lock_guard<std::mutex> lock(launch_mu);
    for (unsigned i = 0; i < n; i++) {
#ifdef GALIGN_EMU_VG
      VALGRIND_STACK_DEREGISTER(all[i]->vg_id);
#endif
      munmap(all[i]->map, all[i]->map_len);
      delete all[i];
    }
    n = nidle = 0;
  }
  Fiber *create();
  Fiber *take() { return nidle ? idle[--nidle] : create(); }
  void give(Fiber *x) { idle[nidle++] = x; }
};
std::mutex launch_mu; /* before pool: destroyed after it */
Pool pool;
ucontext_t sched_ctx;                          /* for Pool::create */
jmp_buf sched_jb;                              /* the scheduler loop */
thread_local bool in_block;                    /* coroutines are running */
thread_local bool in_launch;                   /* a kernel is running */
/* State of the running block (launches are serialized by launch_mu). */
const std::function<void()> *cur_body;
unsigned cur_block, fresh_next;                /* threads started so far */
Fiber *cur_fiber, *init_fiber;
Fiber *owner[GALIGN_EMU_MAX_THREADS];          /* where a parked thread is */
enum { T_FRESH, T_PARKED, T_DONE };
unsigned char tstate[GALIGN_EMU_MAX_THREADS];
bool parked_thread;                            /* why control came back */

void set_idx(uint3 *v, unsigned x) { v->x = x; v->y = 0; v->z = 0; }

/* Every coroutine: runs not yet started threads one after another on its
 * stack until one parks at a barrier (it then owns this fiber) or none is
 * left; a parked thread that later returns lands back here too. So a
 * kernel without barrier runs all its threads on one fiber. */
void fiber_main(void) {
  Fiber *const me = init_fiber;
  if (!_setjmp(me->jb)) swapcontext(&me->ctx, &sched_ctx); /* created */
  for (;;) {
    while (fresh_next < cur_block) {
      const unsigned t = fresh_next++;
      set_idx(&galign_emu_thread_idx, t);
      (*cur_body)();
      tstate[t] = T_DONE;
    }
    parked_thread = false;
    if (!_setjmp(me->jb)) _longjmp(sched_jb, 1); /* idle */
  }
}

[[noreturn]] void emu_fail(const char *what) {
  fprintf(stderr, "cuda-emu: %s\n", what);
  abort();
}

Fiber *Pool::create() {
  if (n == kMaxFibers) emu_fail("out of coroutines");
  const size_t page = (size_t)sysconf(_SC_PAGESIZE);
  Fiber *x = new Fiber();
  x->map_len = kStackBytes + page;
  void *m = mmap(NULL, x->map_len, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) emu_fail("out of memory for thread stacks");
  x->map = (char *)m;
  mprotect(x->map, page, PROT_NONE); /* overflow faults, not corrupts */
#ifdef GALIGN_EMU_VG
  x->vg_id = VALGRIND_STACK_REGISTER(x->map + page, x->map + x->map_len);
#endif
  if (getcontext(&x->ctx) != 0) emu_fail("getcontext failed");
  x->ctx.uc_stack.ss_sp = x->map + page;
  x->ctx.uc_stack.ss_size = kStackBytes;
  x->ctx.uc_stack.ss_flags = 0;
  x->ctx.uc_link = NULL; /* fiber_main never returns */
  makecontext(&x->ctx, fiber_main, 0);
  init_fiber = x;
  swapcontext(&sched_ctx, &x->ctx); /* runs to its first park */
  all[n++] = x;
  return x;
}

/* Runs fiber x until it parks; returns whether a thread parked on it. */
bool resume(Fiber *x) {
  cur_fiber = x;
  if (!_setjmp(sched_jb)) _longjmp(x->jb, 1);
  return parked_thread;
}
}  // namespace

void galign_emu_syncthreads(void) {
  if (!in_block) return; /* one thread per block, or not in a kernel */
  const unsigned t = galign_emu_thread_idx.x;
  Fiber *const me = cur_fiber;
  owner[t] = me;
  tstate[t] = T_PARKED;
  parked_thread = true;
  if (!_setjmp(me->jb)) _longjmp(sched_jb, 1);
  /* resumed by the scheduler, which has set threadIdx and cur_fiber */
}

void galign_emu_run(unsigned grid, unsigned block, const std::function<void()> &body) {
  if (in_launch) emu_fail("kernel launch from inside a kernel");
  if (block > GALIGN_EMU_MAX_THREADS) emu_fail("more than 1024 threads per block");
  std::lock_guard<std::mutex> lock(launch_mu);
  struct Flag { Flag() { in_launch = true; } ~Flag() { in_launch = false; } } flag;
  galign_emu_launches++;
  galign_emu_grid_dim = dim3(grid);
  galign_emu_block_dim = dim3(block);
  if (block == 1) { /* barriers are no-ops: call directly */
    for (unsigned bi = 0; bi < grid; bi++) {
      set_idx(&galign_emu_block_idx, bi);
      set_idx(&galign_emu_thread_idx, 0);
      body();
    }
    return;
  }
  if (grid == 0 || block == 0) return;
  cur_body = &body;
  cur_block = block;
  in_block = true;
  for (unsigned bi = 0; bi < grid; bi++) {
    set_idx(&galign_emu_block_idx, bi);
    memset(tstate, T_FRESH, block);
    fresh_next = 0;
    /* Round 1: every thread runs, in order, to its first barrier or end. */
    unsigned live = 0;
    while (fresh_next < block) {
      Fiber *x = pool.take();
      if (resume(x)) live++; else pool.give(x);
    }
    /* Later rounds: each parked thread runs to its next barrier or end. */
    while (live > 0)
      for (unsigned t = 0; t < block; t++) {
        if (tstate[t] != T_PARKED) continue;
        set_idx(&galign_emu_thread_idx, t);
        Fiber *x = owner[t];
        if (!resume(x)) { live--; pool.give(x); }
      }
  }
  in_block = false;
  cur_body = NULL;
}

extern "C" {
cudaError_t cudaMalloc(void **p, size_t n) {
  *p = malloc(n ? n : 1);
  if (!*p) return cudaErrorMemoryAllocation;
  memset(*p, 0xA5, n); /* garbage, as fresh device memory */
  return cudaSuccess;
}
cudaError_t cudaFree(void *p) { free(p); return cudaSuccess; }
cudaError_t cudaMallocHost(void **p, size_t n) { return cudaMalloc(p, n); }
cudaError_t cudaFreeHost(void *p) { free(p); return cudaSuccess; }
cudaError_t cudaMemcpy(void *d, const void *s, size_t n, cudaMemcpyKind k) {
  (void)k; memmove(d, s, n); return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind k, cudaStream_t st) {
  (void)k; (void)st; memmove(d, s, n); return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void *d, int v, size_t n, cudaStream_t st) {
  (void)st; memset(d, v, n); return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int f) {
  (void)f; *s = (cudaStream_t)0x1; return cudaSuccess;
}
cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned int f, int prio) {
  (void)f; (void)prio; *s = (cudaStream_t)0x1; return cudaSuccess;
}
cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest) {
  *least = 0; *greatest = -5; return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) { (void)s; return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t s) { (void)s; return cudaSuccess; }
cudaError_t cudaStreamQuery(cudaStream_t s) { (void)s; return cudaSuccess; }
cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
const char *cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : "emulated error"; }
cudaError_t cudaEventCreate(cudaEvent_t *e) { *e = (cudaEvent_t)0x1; return cudaSuccess; }
cudaError_t cudaEventDestroy(cudaEvent_t e) { (void)e; return cudaSuccess; }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int f) { (void)f; *e = (cudaEvent_t)0x1; return cudaSuccess; }
cudaError_t cudaEventSynchronize(cudaEvent_t e) { (void)e; return cudaSuccess; }
cudaError_t cudaEventQuery(cudaEvent_t e) { (void)e; return cudaSuccess; }
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) { (void)e; (void)s; return cudaSuccess; }
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
  (void)a; (void)b; *ms = 0.0f; return cudaSuccess;
}
cudaError_t cudaFuncSetAttribute(const void *f, enum cudaFuncAttribute a, int v) {
  (void)f; (void)a; (void)v; return cudaSuccess;
}
/* EMU_DEVICES: how many devices the emulation presents (default 1, at most
 * 8); they are one host memory and one memory account, so a job or a
 * service spread over them exercises the code paths of several GPUs, not
 * their memory limits. The current device is per thread, as in CUDA. */
static int emu_devices(void) {
  static int n = 0;
  if (!n) {
    const char *v = getenv("EMU_DEVICES");
    int k = v ? atoi(v) : 1;
    n = k < 1 ? 1 : k > 8 ? 8 : k;
  }
  return n;
}
static thread_local int emu_cur_dev;
cudaError_t cudaGetDevice(int *d) { *d = emu_cur_dev; return cudaSuccess; }
cudaError_t cudaSetDevice(int d) {
  if (d < 0 || d >= emu_devices()) return cudaErrorInvalidDevice;
  emu_cur_dev = d;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int dev) {
  (void)dev;
  /* EMU_SMEM_OPTIN: a smaller GPU's shared memory per block (default: an H100's) */
  const char *optin = getenv("EMU_SMEM_OPTIN");
  *v = a == cudaDevAttrMultiProcessorCount ? 4
       : a == cudaDevAttrMaxSharedMemoryPerBlockOptin ? (optin ? atoi(optin) : 227 * 1024)
       : 0;
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t *f, size_t *t) {
#ifdef GALIGN_EMU_SELFTEST
  *f = *t = (size_t)8 << 30;
  return cudaSuccess;
#else
  return kio_cuda_mem_info(0, f, t) == 0 ? cudaSuccess : cudaErrorInvalidValue;
#endif
}

cublasStatus_t cublasCreate_v2(cublasHandle_t *h) { *h = (cublasHandle_t)0x1; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasDestroy_v2(cublasHandle_t h) { (void)h; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s) { (void)h; (void)s; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m) { (void)h; (void)m; return CUBLAS_STATUS_SUCCESS; }
const char *cublasGetStatusString(cublasStatus_t s) { return s == CUBLAS_STATUS_SUCCESS ? "success" : "emulated failure"; }
/* Column-major C = alpha op(A) op(B) + beta C, accumulated in double (a
 * near-exact reference; real cuBLAS rounds in float, in blocks). */
cublasStatus_t cublasSgemm_v2(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                              int m, int n, int k, const float *alpha, const float *A, int lda,
                              const float *B, int ldb, const float *beta, float *C, int ldc) {
  (void)h;
  if (m < 0 || n < 0 || k < 0) return CUBLAS_STATUS_INVALID_VALUE;
  if (lda < (ta == CUBLAS_OP_N ? m : k) || ldb < (tb == CUBLAS_OP_N ? k : n) || ldc < m)
    return CUBLAS_STATUS_INVALID_VALUE;
  for (int j = 0; j < n; j++)
    for (int i = 0; i < m; i++) {
      double s = 0.0;
      for (int l = 0; l < k; l++) {
        float a = ta == CUBLAS_OP_N ? A[i + (size_t)l * lda] : A[l + (size_t)i * lda];
        float b = tb == CUBLAS_OP_N ? B[l + (size_t)j * ldb] : B[j + (size_t)l * ldb];
        s += (double)a * b;
      }
      float *c = &C[i + (size_t)j * ldc];
      *c = *beta == 0.0f ? (float)(*alpha * s) : (float)(*alpha * s) + *beta * *c;
    }
  return CUBLAS_STATUS_SUCCESS;
}

#ifndef GALIGN_EMU_SELFTEST  /* the self-test links nothing of the project */
/* The device layer's raw calls (device/cuda-util.h). The emulated device
 * has KALDI_GPU_TEST_EMU_MEMORY bytes (default 8 GiB): an allocation past
 * them fails as out of memory, as a full device would. */
static std::mutex emu_mem_mu;
static std::unordered_map<void *, size_t> emu_blocks;
static size_t emu_live;
static size_t emu_total(void) {
  static size_t t = 0;
  if (!t) {
    const char *v = kio_test_hook(KIO_SET_TEST_EMU_MEMORY);
    size_t b = 0;
    t = v && kio_gpu_parse_bytes(v, 0, &b) == KIO_OK ? b : (size_t)8 << 30;
  }
  return t;
}
int kio_cuda_raw_alloc(void **p, size_t bytes, void *stream, char *msg, size_t n) {
  (void)stream; (void)msg; (void)n;
  std::lock_guard<std::mutex> lock(emu_mem_mu);
  *p = NULL;
  if (emu_live + bytes > emu_total() || cudaMalloc(p, bytes) != cudaSuccess) return 1;
  emu_blocks[*p] = bytes;
  emu_live += bytes;
  return 0;
}
void kio_cuda_raw_free(void *p, void *stream) {
  (void)stream;
  if (!p) return;
  std::lock_guard<std::mutex> lock(emu_mem_mu);
  auto it = emu_blocks.find(p);
  if (it != emu_blocks.end()) {
    emu_live -= it->second;
    emu_blocks.erase(it);
  }
  free(p);
}
int kio_cuda_mem_info(int dev, size_t *free_b, size_t *total_b) {
  (void)dev;
  std::lock_guard<std::mutex> lock(emu_mem_mu);
  *total_b = emu_total();
  *free_b = emu_total() - emu_live;
  return 0;
}
void kio_cuda_pool_trim(int dev) { (void)dev; }
void kio_cuda_pool_keep(int dev, size_t bytes) { (void)dev; (void)bytes; }
int kio_cuda_bind(int dev) { return cudaSetDevice(dev) == cudaSuccess ? 0 : -1; }
int kio_cuda_host_alloc(void **p, size_t bytes) {
  return cudaMalloc(p, bytes) == cudaSuccess ? KIO_OK : KIO_ERR;
}
void kio_cuda_host_free(void *p, void *stream) { (void)stream; free(p); }
/* No pool of page-locked slabs here: nothing to trim, no driver calls. */
void kio_cuda_host_trim(void) {}
void kio_cuda_host_stats(int64_t *allocs, double *alloc_s, int64_t *frees, double *free_s) {
  *allocs = *frees = 0;
  *alloc_s = *free_s = 0;
}
int kio_cuda_host_grow(int device) { (void)device; return 0; }
void kio_cuda_host_describe(char *buf, size_t n) { snprintf(buf, n, "no page-locked pool"); }
int kio_cuda_device_count(void) { return emu_devices(); }
/* The GPU service's broken context (gpu-service/fault-cuda.cu's trapping
 * kernel): marked here, reported by the health check. */
static std::atomic<int> emu_broken;
extern "C" void gsvc_cuda_break_context(void) { emu_broken = 1; }
int kio_cuda_context_broken(char *why, int why_len) {
  if (emu_broken) snprintf(why, (size_t)why_len, "the emulated device context is broken");
  return emu_broken;
}
/* kaldi-gpu-service --describe: the emulated devices, no device code. */
void kio_cuda_env_info(kio_cuda_env *e) {
  memset(e, 0, sizeof *e);
  e->count = emu_devices();
}
int kio_cuda_device_info(int dev, kio_cuda_dev_info *d) {
  memset(d, 0, sizeof *d);
  snprintf(d->name, sizeof d->name, "emulated device %d", dev);
  snprintf(d->why, sizeof d->why, "emulated");
  return KIO_ERR;
}
const char *kio_cuda_build_archs(void) { return "emulated"; }
int kio_cuda_debug_sync(void) { return 0; }
void kio_cuda_warm_up(void) {}
void kio_cuda_prefer_blocking_sync(void) {}
int kio_cuda_choose(double wait_s, int named_dev, char *desc, int desc_len, int *dev) {
  (void)wait_s;
  if (named_dev >= emu_devices()) {
    KIO_ERROR("No CUDA device %d available (found %d)", named_dev, emu_devices());
    return KIO_ERR;
  }
  if (desc) snprintf(desc, desc_len, "host emulation of a CUDA device");
  *dev = named_dev > 0 ? named_dev : 0;
  cudaSetDevice(*dev);
  return KIO_OK;
}
#endif
}
#ifndef GALIGN_EMU_SELFTEST
/* the emulated device is synchronous: nothing to poll */
cudaError_t kio_cuda_stream_wait(cudaStream_t s) { return cudaStreamSynchronize(s); }
cudaError_t kio_cuda_event_wait(cudaEvent_t e) { return cudaEventSynchronize(e); }
#endif

#ifdef GALIGN_EMU_SELFTEST
/* Self-test of the barrier emulation (run.sh builds and runs it first):
 * g++ -DGALIGN_EMU_SELFTEST tests/emu/cuda-emu.cc. */
static int st_fail;
#define ST_CHECK(c)                                                             \
  do {                                                                          \
    if (!(c)) { st_fail++; if (st_fail < 10) fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #c); } \
  } while (0)

/* Each thread writes its slot, then reads its neighbour's, twice. */
static void st_neighbour(int *out, int n) {
  __shared__ int tile[GALIGN_EMU_MAX_THREADS];
  GALIGN_DYN_SMEM(int, dyn);
  const int t = threadIdx.x, b = blockIdx.x;
  tile[t] = 1000 * b + t;
  dyn[t] = -t;
  __syncthreads();
  int v = tile[(t + 1) % n], w = dyn[(t + n - 1) % n];
  __syncthreads(); /* all have read before anyone overwrites */
  tile[t] = v + 1;
  __syncthreads();
  out[b * n + t] = tile[(t + 1) % n] * 10000 + (-w);
}

/* Tree reduction with a barrier per level; threads >= active return early. */
static void st_reduce(const float *in, float *out, int active) {
  __shared__ float s[GALIGN_EMU_MAX_THREADS];
  const unsigned t = threadIdx.x;
  s[t] = in[blockIdx.x * blockDim.x + t];
  __syncthreads();
  for (unsigned h = blockDim.x / 2; h > 0; h /= 2) {
    if (t < h) s[t] += s[t + h];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = s[0];
  if ((int)t >= active) return; /* early return, then more barriers */
  __syncthreads();
  __syncthreads();
}

/* Odd threads return before any barrier; even ones swap through smem. */
static void st_sparse(int *out) {
  __shared__ int s[GALIGN_EMU_MAX_THREADS];
  const int t = threadIdx.x, n = blockDim.x;
  out[blockIdx.x * n + t] = -1;
  if (t & 1) return;
  s[t] = t + 7 * blockIdx.x;
  __syncthreads();
  out[blockIdx.x * n + t] = s[(t + 2) % n];
}

struct st_args { int a; double b; };
/* No barrier, odd signature, atomics. */
static void st_plain(st_args x, const int *p, float *f, double *d, int *i, int *m) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  atomicAdd(f, 0.5f);
  atomicAdd(d, x.b);
  atomicAdd(i, p[t] + x.a);
  atomicMax(m, p[t]);
}

int main(void) {
  const int n = 128, nb = 3;
  static int out[nb * 128];
  for (int rep = 0; rep < 2; rep++) { /* second launch reuses the stacks */
    memset(out, 0, sizeof out);
    GALIGN_LAUNCH_SMEM(st_neighbour, nb, n, n * sizeof(int), 0, out, n);
    for (int b = 0; b < nb; b++)
      for (int t = 0; t < n; t++)
        ST_CHECK(out[b * n + t] == (1000 * b + (t + 2) % n + 1) * 10000 + (t + n - 1) % n);
  }
  static float in[2 * 1024], red[2];
  for (int i = 0; i < 2 * 1024; i++) in[i] = (float)(i % 7);
  GALIGN_LAUNCH(st_reduce, 2, 1024, 0, in, red, 100);
  for (int b = 0; b < 2; b++) {
    float want = 0;
    for (int i = 0; i < 1024; i++) want += in[b * 1024 + i];
    ST_CHECK(red[b] == want);
  }
  GALIGN_LAUNCH(st_reduce, 1, 1, 0, in, red, 1); /* one-thread block */
  ST_CHECK(red[0] == in[0]);
  static int sp[3 * 96];
  GALIGN_LAUNCH(st_sparse, 3, 96, 0, sp);
  for (int b = 0; b < 3; b++)
    for (int t = 0; t < 96; t++)
      ST_CHECK(sp[b * 96 + t] == (t & 1 ? -1 : (t + 2) % 96 + 7 * b));
  ST_CHECK(red[0] == in[0]);
  static int p[4 * 64];
  for (int i = 0; i < 4 * 64; i++) p[i] = (i * 37) % 101;
  float f = 0; double d = 0; int si = 0, m = -1;
  st_args x = {1, 0.25};
  const long l0 = galign_emu_launches;
  GALIGN_LAUNCH(st_plain, 4, 64, 0, x, p, &f, &d, &si, &m);
  int want_i = 0, want_m = -1;
  for (int i = 0; i < 4 * 64; i++) { want_i += p[i] + 1; if (p[i] > want_m) want_m = p[i]; }
  ST_CHECK(f == 128.0f && d == 64.0 && si == want_i && m == want_m);
  ST_CHECK(galign_emu_launches == l0 + 1);
  printf("cuda-emu self-test: %s\n", st_fail ? "FAILED" : "ok");
  return st_fail ? 1 : 0;
}
#endif
