/* Resident features (gacc_dev_feats, gpu-acc.h): one device copy of a set of
 * host feature matrices, made once; a batch whose matrices all lie in it is
 * copied device to device into the accumulator's batch buffer instead of
 * going through the page-locked ring. The same rows reach the same buffer,
 * so the statistics are the same bits. */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acc-internal.h"
#include "device/cuda-util.h"

struct gacc_dev_feats {
  kio_gpu *gpu;
  kio_gpu_acct *acct;
  cudaStream_t stream;
  int has_stream;
  float *d;            /* every row, dim floats each */
  int32_t dim;
  int n;
  uintptr_t *host;     /* the matrices' data, sorted by address */
  int32_t *rows;       /* their rows, same order */
  int64_t *off;        /* their first row in d, same order */
  int64_t *row_off;    /* the first row of mats[i] (input order) */
  size_t bytes;
};

extern "C" void gacc_dev_feats_free(gacc_dev_feats *f) {
  if (!f) return;
  if (f->gpu) kio_gpu_bind(f->gpu);
  if (f->d) kio_gpu_free(f->d, f->stream);
  if (f->has_stream) {
    kio_cuda_stream_wait(f->stream);
    cudaStreamDestroy(f->stream);
  }
  cudaGetLastError();
  kio_gpu_acct_free(f->acct);
  free(f->host);
  free(f->rows);
  free(f->off);
  free(f->row_off);
  free(f);
}

static int by_addr(const void *a, const void *b) {
  const int64_t *x = (const int64_t *)a, *y = (const int64_t *)b;  /* (addr, index) */
  return (uint64_t)x[0] < (uint64_t)y[0] ? -1 : (uint64_t)x[0] > (uint64_t)y[0];
}

extern "C" int gacc_dev_feats_new(gacc_dev_feats **out, int n, const kio_matrix *mats,
                                  char *why, size_t why_len) {
  *out = NULL;
  why[0] = 0;
  kio_gpu *g = NULL;
  if (kio_gpu_job(&g, 0) != KIO_OK || !g) {
    snprintf(why, why_len, "no GPU for the job");
    return KIO_ERR;
  }
  gacc_dev_feats *f = (gacc_dev_feats *)calloc(1, sizeof *f);
  int64_t *pairs = (int64_t *)malloc(sizeof(int64_t) * 2 * (size_t)(n > 0 ? n : 1));
  if (f) {
    f->host = (uintptr_t *)malloc(sizeof(uintptr_t) * (size_t)(n > 0 ? n : 1));
    f->rows = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
    f->off = (int64_t *)malloc(sizeof(int64_t) * (size_t)(n > 0 ? n : 1));
    f->row_off = (int64_t *)malloc(sizeof(int64_t) * (size_t)(n > 0 ? n : 1));
  }
  if (!f || !pairs || !f->host || !f->rows || !f->off || !f->row_off) {
    snprintf(why, why_len, "out of host memory");
    free(pairs);
    gacc_dev_feats_free(f);
    return KIO_ERR;
  }
  f->gpu = g;
  f->n = n;
  int64_t total = 0;
  for (int i = 0; i < n; i++) {
    if (mats[i].rows > 0) {
      if (f->dim == 0) f->dim = mats[i].cols;
      if (mats[i].cols != f->dim) {
        snprintf(why, why_len, "feature dimensions differ (%d, %d)", (int)f->dim,
                 (int)mats[i].cols);
        free(pairs);
        gacc_dev_feats_free(f);
        return KIO_ERR;
      }
    }
    f->row_off[i] = total;
    total += mats[i].rows > 0 ? mats[i].rows : 0;
    pairs[2 * i] = (int64_t)(uintptr_t)mats[i].data;
    pairs[2 * i + 1] = i;
  }
  f->bytes = (size_t)total * (size_t)f->dim * sizeof(float);
  /* at most half of what the device has free: the batches, the aligner and
   * other processes keep room */
  size_t free_now = kio_gpu_free_now(g);
  if (f->bytes == 0 || (free_now && f->bytes > free_now / 2)) {
    snprintf(why, why_len, "%.2f GiB of features, %.2f GiB free on the device",
             (double)f->bytes / 1073741824.0, (double)free_now / 1073741824.0);
    free(pairs);
    gacc_dev_feats_free(f);
    return KIO_ERR;
  }
  qsort(pairs, (size_t)n, sizeof(int64_t) * 2, by_addr);
  for (int k = 0; k < n; k++) {
    int i = (int)pairs[2 * k + 1];
    f->host[k] = (uintptr_t)mats[i].data;
    f->rows[k] = mats[i].rows > 0 ? mats[i].rows : 0;
    f->off[k] = f->row_off[i];
  }
  free(pairs);
  f->acct = kio_gpu_acct_new(g, "resident features", f->bytes, KIO_GPU_OPTIONAL);
  if (!f->acct || kio_gpu_bind(g) != KIO_OK ||
      cudaStreamCreateWithFlags(&f->stream, cudaStreamNonBlocking) != cudaSuccess) {
    snprintf(why, why_len, "could not set up the device copy");
    cudaGetLastError();
    gacc_dev_feats_free(f);
    return KIO_ERR;
  }
  f->has_stream = 1;
  kio_gpu_catch();
  int rc = kio_gpu_alloc(f->acct, (void **)&f->d, f->bytes, f->stream);
  char what[200];
  if (kio_gpu_caught(what, sizeof what) || rc != KIO_OK) {
    snprintf(why, why_len, "%s", what[0] ? what : "no device memory");
    gacc_dev_feats_free(f);
    return KIO_ERR;
  }
  const size_t row = sizeof(float) * (size_t)f->dim;
  cudaError_t e = cudaSuccess;
  for (int i = 0; i < n && e == cudaSuccess; i++)
    if (mats[i].rows > 0)
      e = cudaMemcpyAsync(f->d + f->row_off[i] * f->dim, mats[i].data, row * (size_t)mats[i].rows,
                          cudaMemcpyHostToDevice, f->stream);
  if (e == cudaSuccess) e = kio_cuda_stream_wait(f->stream);
  if (e != cudaSuccess) {
    snprintf(why, why_len, "CUDA error uploading the features: %s", cudaGetErrorString(e));
    cudaGetLastError();
    gacc_dev_feats_free(f);
    return KIO_ERR;
  }
  *out = f;
  return KIO_OK;
}

extern "C" size_t gacc_dev_feats_bytes(const gacc_dev_feats *f) { return f ? f->bytes : 0; }
extern "C" int gacc_dev_feats_device(const gacc_dev_feats *f) { return kio_gpu_device(f->gpu); }

extern "C" void gacc_dev_feats_rows(const gacc_dev_feats *f, const float **d_base,
                                    const int64_t **row_off) {
  *d_base = f->d;
  *row_off = f->row_off;
}

/* The stored row where host address p (inside one of the matrices, a row
 * boundary) lies, rows: how many rows from there the matrix holds; -1 if
 * none. */
static int64_t find_row(const gacc_dev_feats *f, uintptr_t p, int32_t *rows) {
  int lo = 0, hi = f->n - 1, k = -1;
  while (lo <= hi) {  /* the last matrix starting at or before p */
    int mid = (lo + hi) / 2;
    if (f->host[mid] <= p) k = mid, lo = mid + 1;
    else hi = mid - 1;
  }
  if (k < 0) return -1;
  const uintptr_t row = sizeof(float) * (uintptr_t)f->dim, d = p - f->host[k];
  if (d % row || d / row >= (uintptr_t)f->rows[k]) return -1;
  *rows = f->rows[k] - (int32_t)(d / row);
  return f->off[k] + (int64_t)(d / row);
}

extern "C" int gacc_dev_feats_copy(const gacc_dev_feats *f, const kio_matrix *mats, int n,
                                   float *dst, void *stream) {
  if (!f || f->dim <= 0) return 0;
  for (int i = 0; i < n; i++) {  /* all or nothing */
    int32_t left = 0;
    if (mats[i].rows <= 0) continue;
    if (mats[i].cols != f->dim || find_row(f, (uintptr_t)mats[i].data, &left) < 0 ||
        left < mats[i].rows)
      return 0;
  }
  const size_t row = sizeof(float) * (size_t)f->dim;
  int64_t run0 = -1, run_rows = 0, out_row = 0;
  cudaStream_t st = (cudaStream_t)stream;
  for (int i = 0; i <= n; i++) {
    int64_t src = -1;
    int32_t left = 0;
    if (i < n && mats[i].rows > 0) src = find_row(f, (uintptr_t)mats[i].data, &left);
    if (i < n && mats[i].rows <= 0) continue;
    if (i < n && run0 >= 0 && src == run0 + run_rows) {  /* the run goes on */
      run_rows += mats[i].rows;
      continue;
    }
    if (run0 >= 0) {
      cudaError_t e = cudaMemcpyAsync(dst + out_row * f->dim, f->d + run0 * f->dim,
                                      row * (size_t)run_rows, cudaMemcpyDeviceToDevice, st);
      if (e != cudaSuccess) {
        KIO_ERROR("CUDA error copying resident features: %s", cudaGetErrorString(e));
        return -1;
      }
      out_row += run_rows;
    }
    if (i < n) run0 = src, run_rows = mats[i].rows;
  }
  return 1;
}
