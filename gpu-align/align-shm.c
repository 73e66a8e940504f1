/* The job's shared memory for requests to the GPU service (align-shm.h). */
#include "align-shm.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/sys/cpu-share.h"
#include "base/sys/log.h"

static void warm_join(galign_shm *g) {
  if (!g->warming) return;
  pthread_join(g->warm_thread, NULL);
  g->warming = 0;
}

void galign_shm_release(galign_shm *g) {
  warm_join(g);
  if (g->map) munmap(g->map, g->cap);
  if (g->fd >= 0) close(g->fd);
  g->map = NULL;
  g->fd = -1;
  g->cap = 0;
  g->sent = 0;
}

/* The copy into the shared memory, on the job's share of the cores (the
 * reading thread is busy with the next batch meanwhile, the cores mostly
 * idle): each thread the pieces whose offsets lie in its equal part of the
 * bytes (the pieces are in offset order), so that the large ones (the
 * features) spread over the threads whatever their place among the small
 * ones, and each thread writes one stretch of the region. */
typedef struct {
  uint8_t *dst;
  const galign_shm_piece *pc;
  int n;
  size_t lo, hi;  /* pieces at offsets [lo, hi) */
} shm_copy;

/* The first piece at offset lo or after. */
static int first_at(const galign_shm_piece *pc, int n, size_t lo) {
  int a = 0, b = n;
  while (a < b) {
    int m = a + (b - a) / 2;
    if (pc[m].off < lo) a = m + 1;
    else b = m;
  }
  return a;
}

static void *shm_copy_main(void *arg) {
  const shm_copy *j = arg;
  for (int i = first_at(j->pc, j->n, j->lo); i < j->n && j->pc[i].off < j->hi; i++)
    memcpy(j->dst + j->pc[i].off, j->pc[i].src, j->pc[i].len);
  return NULL;
}

void galign_shm_fill_pieces(uint8_t *dst, const galign_shm_piece *pc, int n, size_t bytes) {
  enum { MAX_T = 8 };
  int nt = kio_cpu_share(0);
  if (nt > MAX_T) nt = MAX_T;
  if ((size_t)nt > bytes / ((size_t)8 << 20)) nt = (int)(bytes / ((size_t)8 << 20));
  if (nt < 1) nt = 1;
  shm_copy j[MAX_T] = {{NULL, NULL, 0, 0, 0}};  /* all set below; cppcheck cannot tell */
  pthread_t th[MAX_T];
  int started = 1;
  for (int t = 0; t < nt; t++)
    j[t] = (shm_copy){dst, pc, n, bytes / (size_t)nt * (size_t)t,
                      t == nt - 1 ? SIZE_MAX : bytes / (size_t)nt * (size_t)(t + 1)};
  for (; started < nt; started++)
    if (pthread_create(&th[started], NULL, shm_copy_main, &j[started]) != 0) break;
  shm_copy_main(&j[0]);
  for (int t = 1; t < started; t++) pthread_join(th[t], NULL);
  for (int t = started; t < nt; t++) shm_copy_main(&j[t]);  /* threads not started */
}

int galign_shm_fill(uint8_t *dst, const kio_matrix *const *feats, const size_t *off, int n,
                    size_t bytes) {
  galign_shm_piece *pc = malloc((size_t)(n > 0 ? n : 1) * sizeof *pc);
  if (!pc) return KIO_ERR;
  for (int i = 0; i < n; i++)
    pc[i] = (galign_shm_piece){feats[i]->data, off[i],
                               (size_t)feats[i]->rows * (size_t)feats[i]->cols * sizeof(float)};
  galign_shm_fill_pieces(dst, pc, n, bytes);
  free(pc);
  return KIO_OK;
}

/* A new sealed memfd of about bytes in g (released before), mapped. */
static int shm_make(galign_shm *g, size_t bytes, size_t least_cap) {
  size_t want = bytes + bytes / 4 > least_cap ? bytes + bytes / 4 : least_cap;
  if (want > SHM_MAX) want = bytes;
  size_t cap = (want + (SHM_MIN - 1)) / SHM_MIN * SHM_MIN;
  int fd = memfd_create("kaldi-gpu-batch", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return KIO_ERR;
  void *p = MAP_FAILED;
  if (ftruncate(fd, (off_t)cap) == 0 &&
      fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0)
    p = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    close(fd);
    return KIO_ERR;
  }
  g->fd = fd;
  g->map = p;
  g->cap = cap;
  g->sent = 0;
  return KIO_OK;
}

int galign_shm_reserve(galign_shm *g, size_t bytes, size_t least_cap) {
  if (g->map && g->cap >= bytes) return KIO_OK;  /* a warming one too: it writes nothing */
  galign_shm_release(g);
  return shm_make(g, bytes, least_cap);
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

/* Faults the region's pages in as writable, in one call (Linux 5.14 on);
 * else allocates them (fallocate: the writes then only map them). Never
 * writes the data. */
static void *warm_main(void *arg) {
  const galign_shm *g = arg;
  if (madvise(g->map, g->warm_len, MADV_POPULATE_WRITE) != 0)
    (void)fallocate(g->fd, 0, 0, (off_t)g->warm_len);
  return NULL;
}

int galign_shm_warm(galign_shm *g, size_t bytes, size_t least_cap) {
  if (g->map || g->warming || shm_make(g, bytes, least_cap) != KIO_OK) return 0;
  size_t len = (bytes + bytes / 4 + 4095) / 4096 * 4096;
  g->warm_len = len < g->cap ? len : g->cap;
  g->warming = pthread_create(&g->warm_thread, NULL, warm_main, g) == 0;
  return g->warming;  /* else the copy faults it in, as before */
}

/* One connection per GPU the job asked for (--num-gpus): the service puts
 * each on the device with the fewest connections, and a batch is split
 * among them. */

int galign_shm_map_received(int fd, const uint8_t **map, size_t *len) {
  struct stat st;
  int seals = fcntl(fd, F_GET_SEALS);
  int ok = fstat(fd, &st) == 0 && st.st_size > 0 && seals >= 0 && (seals & F_SEAL_SHRINK);
  void *p = ok ? mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
  close(fd);
  if (p == MAP_FAILED) return KIO_ERR;
  *map = p;
  *len = (size_t)st.st_size;
  return KIO_OK;
}
