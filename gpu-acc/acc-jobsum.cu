/* The jobs' statistics summed on the device (gacc_dev_sum, gpu-acc.h): the
 * trainer's GPU path copies each job's statistics, device to device, from
 * the accumulator that served it into a slot of its own, then one kernel
 * adds the slots as trn_est_sum_jobs adds the jobs on the host (per element
 * a double sum from 0.0, the slots in order, each value rounded to float
 * first but the transition counts, which gmm-sum-accs reads as doubles; the
 * means' and variances' sums rounded to float, as written and read back),
 * and only the sum comes back to the host. The additions and roundings are
 * IEEE operations in the same order per element, so the bits are the
 * host's (check_gpu_acc dev_sum_equals_host). */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acc-internal.h"
#include "device/cuda-util.h"

/* A slot: tacc (num_tids + 1), occ (G), mean (G x D), var (G x D), one
 * after the other; the sum has the same layout. */
struct gacc_dev_sum {
  kio_gpu *gpu;
  kio_gpu_acct *acct;
  cudaStream_t stream;
  int has_stream;
  int32_t num_tids, num_gauss, dim;
  int n;                 /* slots */
  size_t len;            /* doubles a slot */
  size_t cap;            /* doubles d holds */
  double *d;             /* n slots, then the sum */
  double *h;             /* the sum on the host (page-locked), cap_h doubles */
  size_t cap_h;
};

#ifdef GALIGN_CUDA_EMU_H
/* one thread a block under the emulation; the loop strides over the grid */
#define GACC_LAUNCH_JOBSUM(grid, stream, ...) \
  GALIGN_LAUNCH(gacc_jobsum_kernel, (grid), 1, (stream), __VA_ARGS__)
#else
#define GACC_LAUNCH_JOBSUM(grid, stream, ...) \
  gacc_jobsum_kernel<<<(grid), 256, 0, (stream)>>>(__VA_ARGS__)
#endif

/* out[i] = sum over slots k = 0 .. n-1 of slot k's element i: elements
 * below t1 (the transition counts) as they are, the others rounded to
 * float; the sums of elements from r1 on (means, variances) rounded to
 * float. */
__global__ void gacc_jobsum_kernel(const double *__restrict__ slots, size_t len, int n,
                                   size_t t1, size_t r1, double *__restrict__ out) {
  const size_t step = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < len; i += step) {
    double s = 0.0;
    if (i < t1) {
      for (int k = 0; k < n; k++) s += slots[(size_t)k * len + i];
    } else {
      for (int k = 0; k < n; k++) s += (double)(float)slots[(size_t)k * len + i];
    }
    out[i] = i >= r1 ? (double)(float)s : s;
  }
}

extern "C" void gacc_dev_sum_free(gacc_dev_sum *s) {
  if (!s) return;
  if (s->gpu) kio_gpu_bind(s->gpu);
  if (s->has_stream) kio_cuda_stream_wait(s->stream);
  kio_gpu_free(s->d, s->stream);
  kio_cuda_host_free(s->h, s->stream);
  if (s->has_stream) {
    kio_cuda_stream_wait(s->stream);
    cudaStreamDestroy(s->stream);
  }
  cudaGetLastError();
  kio_gpu_acct_free(s->acct);
  free(s);
}

extern "C" int gacc_dev_sum_reserve(gacc_dev_sum **out, int n, const gacc_stats *shape,
                                    char *why, size_t why_len) {
  why[0] = 0;
  gacc_dev_sum *s = *out;
  if (!s) {
    kio_gpu *g = NULL;
    kio_log_deferred *quiet = NULL;  /* the reason goes to why */
    kio_log_defer(&quiet);
    int rc = kio_gpu_job(&g, 0);
    kio_log_defer(NULL);
    kio_log_discard(&quiet);
    if (rc != KIO_OK || !g) {
      snprintf(why, why_len, "no GPU for the job");
      return KIO_ERR;
    }
    s = (gacc_dev_sum *)calloc(1, sizeof *s);
    if (!s) {
      snprintf(why, why_len, "out of host memory");
      return KIO_ERR;
    }
    s->gpu = g;
    s->acct = kio_gpu_acct_new(g, "jobs' sum", SIZE_MAX / 2, KIO_GPU_OPTIONAL);
    if (!s->acct || kio_gpu_bind(g) != KIO_OK ||
        cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking) != cudaSuccess) {
      snprintf(why, why_len, "could not set up the device sum");
      cudaGetLastError();
      gacc_dev_sum_free(s);
      return KIO_ERR;
    }
    s->has_stream = 1;
    *out = s;
  }
  if (kio_gpu_bind(s->gpu) != KIO_OK) {
    snprintf(why, why_len, "could not make the device current");
    goto fail;
  }
  {
    const size_t G = (size_t)(shape->num_gauss > 0 ? shape->num_gauss : 0);
    const size_t D = (size_t)(shape->dim > 0 ? shape->dim : 0);
    const size_t len = (size_t)shape->num_tids + 1 + G + 2 * G * D;
    const size_t need = len * ((size_t)(n > 0 ? n : 0) + 1);
    s->num_tids = shape->num_tids;
    s->num_gauss = shape->num_gauss;
    s->dim = shape->dim;
    s->n = n > 0 ? n : 0;
    s->len = len;
    if (need > s->cap) {  /* room for the model's growth: a quarter more */
      size_t want = need + need / 4;
      kio_gpu_free(s->d, s->stream);
      s->d = NULL;
      s->cap = 0;
      /* at most a quarter of what the device has free (many jobs of a
       * large model on a small device: the host sums them instead) */
      size_t free_now = kio_gpu_free_now(s->gpu);
      if (free_now && need * sizeof(double) > free_now / 4) {
        snprintf(why, why_len, "%d jobs' statistics would take %.2f GiB, %.2f GiB free on the "
                 "device", n, (double)(need * sizeof(double)) / 1073741824.0,
                 (double)free_now / 1073741824.0);
        goto fail;
      }
      if (free_now && want * sizeof(double) > free_now / 4) want = need;
      kio_gpu_catch();
      int rc = kio_gpu_alloc(s->acct, (void **)&s->d, want * sizeof(double), s->stream);
      char what[200] = "";
      if (kio_gpu_caught(what, sizeof what) || rc != KIO_OK) {
        snprintf(why, why_len, "%s", what[0] ? what : "no device memory");
        goto fail;
      }
      s->cap = want;
    }
    if (len > s->cap_h) {
      kio_cuda_host_free(s->h, s->stream);
      s->h = NULL;
      s->cap_h = 0;
      if (kio_cuda_host_alloc((void **)&s->h, (len + len / 4) * sizeof(double)) != KIO_OK) {
        snprintf(why, why_len, "out of page-locked host memory");
        goto fail;
      }
      s->cap_h = len + len / 4;
    }
    /* the memory is the accumulators' to write on their streams */
    if (kio_cuda_stream_wait(s->stream) != cudaSuccess) {
      snprintf(why, why_len, "CUDA error: %s", cudaGetErrorString(cudaGetLastError()));
      goto fail;
    }
  }
  return KIO_OK;
fail:
  gacc_dev_sum_free(s);
  *out = NULL;
  return KIO_ERR;
}

extern "C" int gacc_stash_stats(gacc_acc *a, gacc_dev_sum *s, int k, double *like,
                                double *frames) {
  if (gacc_wait(a) != KIO_OK) return KIO_ERR;
  const gacc_stats *st = &a->st;
  if (!a->cuda || a->remote || !s || k < 0 || k >= s->n ||
      kio_gpu_device(s->gpu) != gacc_cuda_device_of(a->cuda) || st->num_tids != s->num_tids ||
      st->num_gauss != s->num_gauss || st->dim != s->dim) {
    KIO_ERROR("The statistics cannot go to slot %d of the device sum (another device, "
              "backend or shape)", k);
    return KIO_ERR;
  }
  const size_t G = (size_t)s->num_gauss, GD = G * (size_t)s->dim;
  double *slot = s->d + (size_t)k * s->len;
  const size_t t1 = (size_t)s->num_tids + 1;
  if (gacc_cuda_copy_stats(a->cuda, slot, slot + t1, slot + t1 + G, slot + t1 + G + GD) !=
      KIO_OK)
    return KIO_ERR;
  *like = st->total_like;
  *frames = st->total_frames;
  return KIO_OK;
}

extern "C" int gacc_dev_sum_fetch(gacc_dev_sum *s, gacc_stats *out) {
  if (!s || s->n < 1 || out->num_tids != s->num_tids || out->num_gauss != s->num_gauss ||
      out->dim != s->dim) {
    KIO_ERROR("The device sum's shape is not the statistics'");
    return KIO_ERR;
  }
  if (kio_gpu_bind(s->gpu) != KIO_OK) return KIO_ERR;
  const size_t G = (size_t)s->num_gauss, GD = G * (size_t)s->dim;
  const size_t t1 = (size_t)s->num_tids + 1, r1 = t1 + G, len = s->len;
  double *sum = s->d + (size_t)s->n * len;
  size_t blocks = (len + 255) / 256;
#ifdef GALIGN_CUDA_EMU_H
  blocks = len < 64 ? len : 64;
#endif
  if (blocks > 4096) blocks = 4096;
  if (blocks < 1) blocks = 1;
  GACC_LAUNCH_JOBSUM((unsigned)blocks, s->stream, s->d, len, s->n, t1, r1, sum);
  KIO_CUDA_LAUNCHED();
  KIO_CUDA_TRY(cudaMemcpyAsync(s->h, sum, sizeof(double) * len, cudaMemcpyDeviceToHost,
                               s->stream));
  KIO_CUDA_TRY(kio_cuda_stream_wait(s->stream));
  memcpy(out->tacc, s->h, sizeof(double) * t1);
  memcpy(out->occ, s->h + t1, sizeof(double) * G);
  memcpy(out->mean_acc, s->h + r1, sizeof(double) * GD);
  memcpy(out->var_acc, s->h + r1 + GD, sizeof(double) * GD);
  return KIO_OK;
}
