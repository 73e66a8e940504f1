/* cuBLAS loaded on first use (dlopen) instead of linked: the library's
 * constructors register thousands of kernels when a process starts, ~70 ms
 * that every run of our programs paid, while the default exact likelihood
 * kernel never calls cuBLAS (only the GEMM path does: models with more than
 * GALIGN_LL_MAXC Gaussians per pdf, or KALDI_GPU_DEV_LIKELIHOODS=gemm). Under the host
 * emulation (tests/emu) the emulator's functions are used directly. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "align-cuda-impl.h"
#include "base/sys/settings.h"

static galign_cublas_api g_api;
static int g_loaded;      /* 1: g_api usable */
static char g_err[256];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

#define GALIGN_STR2(x) #x
#define GALIGN_STR(x) GALIGN_STR2(x)

#ifndef GALIGN_CUDA_EMU_H
/* Which cuBLAS: one process must hold one libcublas/libcublasLt pair. A
 * second library loading cuBLAS by its own path after ours binds to our
 * libcublasLt (the soname is already loaded) and may be another minor
 * version (PyTorch's wheels beside the toolkit: undefined or mismatched
 * symbols). So: (1) a libcublas of this major version already loaded in
 * the process is used as it is; (2) else the one KALDI_GPU_CUBLAS (or
 * kga_set_cublas_library) names, its libcublasLt from the same folder
 * loaded first, so that a later library that loads the same files by path
 * gets the same pair; (3) else the toolkit's, by soname. */
static void *galign_cublas_open(const char *name) {
  void *h = dlopen(name, RTLD_NOW | RTLD_NOLOAD);
  if (h) return h;
  const char *path = kio_setting_str(KIO_SET_CUBLAS);
  char lt[4096], lib[4096];
  struct stat st;
  if (path && stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {  /* the folder: our major's name */
    snprintf(lib, sizeof lib, "%s/%s", path, name);
    path = access(lib, F_OK) == 0 ? lib : NULL;  /* another major there: not for us */
  }
  if (path) {
    const char *slash = strrchr(path, '/');
    int dir = slash ? (int)(slash - path + 1) : 0;
    snprintf(lt, sizeof lt, "%.*slibcublasLt.so.%s", dir, path, GALIGN_STR(CUBLAS_VER_MAJOR));
    /* without the Lt beside it, libcublas finds one itself */
    void *hl = dlopen(lt, RTLD_NOW | RTLD_LOCAL);
    (void)hl;  /* stays loaded for the life of the process */
    h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) snprintf(g_err, sizeof g_err, "cannot load %.200s (KALDI_GPU_CUBLAS): %s", path, dlerror());
    return h;
  }
  h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (!h) snprintf(g_err, sizeof g_err, "cannot load %s: %s", name, dlerror());
  return h;
}
#endif

static void galign_cublas_load(void) {
#ifdef GALIGN_CUDA_EMU_H
  g_api.create = cublasCreate_v2;
  g_api.destroy = cublasDestroy_v2;
  g_api.set_stream = cublasSetStream_v2;
  g_api.set_math_mode = cublasSetMathMode;
  g_api.sgemm = cublasSgemm_v2;
  g_api.status_string = cublasGetStatusString;
  g_loaded = 1;
#else
  const char *name = "libcublas.so." GALIGN_STR(CUBLAS_VER_MAJOR);
  void *h = galign_cublas_open(name);
  if (!h) return;
  /* Object to function pointer through memcpy: ISO C++ has no direct cast. */
#define GALIGN_SYM(field, sym)                                                  \
  do {                                                                          \
    void *s_ = dlsym(h, sym);                                                   \
    if (!s_) {                                                                  \
      snprintf(g_err, sizeof g_err, "%s has no symbol %s", name, sym);          \
      return;                                                                   \
    }                                                                           \
    memcpy(&g_api.field, &s_, sizeof s_);                                       \
  } while (0)
  GALIGN_SYM(create, "cublasCreate_v2");
  GALIGN_SYM(destroy, "cublasDestroy_v2");
  GALIGN_SYM(set_stream, "cublasSetStream_v2");
  GALIGN_SYM(set_math_mode, "cublasSetMathMode");
  GALIGN_SYM(sgemm, "cublasSgemm_v2");
  GALIGN_SYM(status_string, "cublasGetStatusString");
#undef GALIGN_SYM
  g_loaded = 1;  /* the handle stays open for the life of the process */
#endif
}

const galign_cublas_api *galign_cublas(void) {
  pthread_once(&g_once, galign_cublas_load);
  if (!g_loaded) {
    KIO_ERROR("cuBLAS is needed for this model's likelihoods but %s", g_err);
    return NULL;
  }
  return &g_api;
}

const char *galign_cublas_status_string(cublasStatus_t s) {
  return g_loaded ? g_api.status_string(s) : "cuBLAS not loaded";
}
