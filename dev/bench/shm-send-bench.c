/* shm-send-bench: the job's copies into its shared memory for the GPU
 * service (gpu-align/align-shm.h) alone, as align-remote.c makes them: a
 * ring of inflight + 1 regions per connection, each batch's features
 * copied into the next region (galign_shm_fill, on this process's share of
 * the cores), with the regions not made yet faulted in ahead
 * (galign_shm_warm, as galign_remote_expect_more does while the job reads
 * its next batch) or not. Between batches the job's reading is stood in
 * for by a pause of --read-ms. What sending costs per GB, without a GPU.
 *
 *   shm-send-bench [--warm=true] [--batches=12] [--batch-mb=460]
 *                  [--utt-kb=56] [--regions=3] [--read-ms=100]
 *
 * Prints one line: batches, GB copied, the seconds spent copying (the
 * sending path's part) and GB/s. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/matrix/matrix.h"
#include "base/program/program.h"
#include "base/sys/log.h"
#include "base/sys/options.h"
#include "gpu-align/align-shm.h"

int main(int argc, char *argv[]) {
  kio_program_start(argc, argv);
  const char *usage =
      "The job's shared-memory copies for the GPU service, timed.\n"
      "Usage: shm-send-bench [options]\n";
  int warm = 1;
  int32_t batches = 12, batch_mb = 460, utt_kb = 56, regions = 3, read_ms = 100;
  kio_opts *po = kio_opts_new(usage);
  kio_opts_bool(po, "warm", &warm, "Fault regions in ahead (galign_shm_warm)");
  kio_opts_int(po, "batches", &batches, "Batches");
  kio_opts_int(po, "batch-mb", &batch_mb, "Features per batch (MB)");
  kio_opts_int(po, "utt-kb", &utt_kb, "Features per utterance (KB)");
  kio_opts_int(po, "regions", &regions, "Regions in the ring (inflight + 1)");
  kio_opts_int(po, "read-ms", &read_ms, "Pause between batches (the job's reading)");
  kio_program_args(po, argc, argv, 0, 0);
  if (regions < 1 || regions > 8 || batches < 1 || batch_mb < 1 || utt_kb < 1) return 255;
  const int cols = 40, rows = utt_kb * 1024 / (cols * 4);
  const int n = (int)((int64_t)batch_mb * 1000000 / ((int64_t)rows * cols * 4));
  kio_matrix *m = calloc((size_t)n, sizeof *m);
  const kio_matrix **ptr = calloc((size_t)n, sizeof *ptr);
  size_t *off = calloc((size_t)n, sizeof *off);
  if (!m || !ptr || !off) return 255;
  size_t bytes = 0;
  for (int i = 0; i < n; i++) {
    if (kio_matrix_resize(&m[i], rows, cols) != KIO_OK) return 255;
    for (int k = 0; k < rows * cols; k++) m[i].data[k] = (float)(i + k);
    ptr[i] = &m[i];
    off[i] = bytes;
    bytes += ((size_t)rows * cols * 4 + 63) / 64 * 64;
  }
  galign_shm ring[8];
  for (int k = 0; k < regions; k++) ring[k] = (galign_shm){.fd = -1};
  double copy_s = 0;
  const struct timespec pause = {read_ms / 1000, (long)(read_ms % 1000) * 1000000L};
  for (int b = 0; b < batches; b++) {
    galign_shm *g = &ring[b % regions];
    double t0 = kio_now_s();
    if (galign_shm_reserve(g, bytes, bytes < SHM_LEAST ? bytes : SHM_LEAST) != KIO_OK) return 255;
    if (galign_shm_fill(g->map, ptr, off, n, bytes) != KIO_OK) return 255;
    copy_s += kio_now_s() - t0;
    /* the next batch's region readied while the job reads it */
    if (warm && b + 1 < batches)
      galign_shm_warm(&ring[(b + 1) % regions], bytes, bytes < SHM_LEAST ? bytes : SHM_LEAST);
    nanosleep(&pause, NULL);
  }
  double gb = (double)bytes * batches / 1e9;
  printf("batches %d of %.1f MB (%d utterances), %s: %.3f GB copied in %.3f s, %.2f GB/s\n",
         batches, bytes / 1e6, n, warm ? "regions faulted in ahead" : "fresh regions faulted by the copy",
         gb, copy_s, gb / copy_s);
  for (int k = 0; k < regions; k++) galign_shm_release(&ring[k]);
  for (int i = 0; i < n; i++) kio_matrix_free(&m[i]);
  free(m);
  free(ptr);
  free(off);
  kio_opts_free(po);
  return 0;
}
