/* The service's side of ACC requests (gpu-acc/acc-serve.c) on the CPU
 * accumulator: the features inline and through the job's sealed memfd give
 * the same statistics; a request that claims shared memory without a
 * region, with an unsealed one, with an offset or size outside it, or with
 * unknown flags is malformed (KIO_ERR, nothing accumulated), never a
 * crash or a read outside the mapping. */
#include <check.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/model/model.h"
#include "base/sys/log.h"
#include "device/svc-link.h"
#include "gpu-acc/acc-remote.h"
#include "gpu-acc/gpu-acc.h"
#include "tests/lib/test-util.h"

enum { ROWS = 37, REGION = 1 << 16, OFF = 4096 };

typedef struct {
  kio_tmodel tm;
  kio_am_gmm am;
  float *x;
  int32_t ali[ROWS];
} fixture;

static void fixture_init(fixture *f) {
  memset(f, 0, sizeof *f);
  ck_assert_int_eq(kio_model_read("models/mono/final.mdl", &f->tm, &f->am), KIO_OK);
  int D = f->am.dim;
  f->x = malloc(sizeof(float) * ROWS * (size_t)D);
  ck_assert_ptr_nonnull(f->x);
  for (int t = 0; t < ROWS; t++) {
    for (int d = 0; d < D; d++) f->x[t * D + d] = (float)sin(0.37 * t + 0.11 * d) * 3.0f;
    f->ali[t] = 1 + (t * 7) % f->tm.num_tids;
  }
}

static void fixture_free(fixture *f) {
  free(f->x);
  kio_tmodel_free(&f->tm);
  kio_am_gmm_free(&f->am);
}

/* One utterance's ACC request (every array copied into the message), its
 * features at off in region reg with KIO_SVC_ACC_SHM. */
static void request_in(kio_msg *m, const fixture *f, uint32_t flags, uint64_t off, uint32_t reg) {
  kio_msg_reset(m);
  kio_msg_put_u32(m, 1);
  kio_msg_put_u32(m, flags);
  kio_msg_put_u32(m, reg);
  kio_msg_put_str(m, "utt1");
  kio_msg_put_i32(m, ROWS);
  kio_msg_put_i32(m, f->am.dim);
  if (flags & KIO_SVC_ACC_SHM) kio_msg_put_u64(m, off);
  else kio_msg_put_arr(m, f->x, (size_t)ROWS * (size_t)f->am.dim, sizeof(float));
  kio_msg_put_arr(m, f->ali, ROWS, sizeof(int32_t));
}

static void request(kio_msg *m, const fixture *f, uint32_t flags, uint64_t off) {
  request_in(m, f, flags, off, 0);
}

static int serve(gacc_serve *s, gacc_acc *a, kio_msg *m) {
  ck_assert_int_eq(m->failed, 0);
  kio_msg_reader rd = {m->buf, m->len, 0, 0};
  kio_msg reply = {0};
  int batch_rc = KIO_ERR;
  int rc = gacc_serve_acc(s, a, &rd, &reply, &batch_rc);
  kio_msg_free(&reply);
  return rc == KIO_OK && batch_rc == KIO_OK ? KIO_OK : KIO_ERR;
}

/* A memfd of REGION bytes holding the features at OFF; sealed or not. */
static int region(const fixture *f, int seal) {
  int fd = memfd_create("check-acc-serve", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(ftruncate(fd, REGION), 0);
  size_t bytes = sizeof(float) * ROWS * (size_t)f->am.dim;
  ck_assert(OFF + bytes <= REGION);
  ck_assert_int_eq(pwrite(fd, f->x, bytes, OFF), (ssize_t)bytes);
  if (seal) ck_assert_int_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
  return fd;
}

static int64_t frames_of(gacc_acc *a) {
  double like;
  int64_t frames;
  ck_assert_int_eq(gacc_get_totals(a, &like, &frames), KIO_OK);
  return frames;
}

START_TEST(shared_memory_equals_inline) {
  fixture f;
  fixture_init(&f);
  gacc_acc *in = NULL, *sh = NULL;
  ck_assert_int_eq(gacc_new(&in, "cpu", &f.tm, &f.am), KIO_OK);
  ck_assert_int_eq(gacc_new(&sh, "cpu", &f.tm, &f.am), KIO_OK);
  gacc_serve *s1 = gacc_serve_new(), *s2 = gacc_serve_new();
  kio_msg m = {0};
  request(&m, &f, 0, 0);
  ck_assert_int_eq(serve(s1, in, &m), KIO_OK);
  /* a region with the first request that names it, the next one reuses
   * it; the other region, never sent, serves nothing */
  gacc_serve_give_fd(s2, region(&f, 1));
  request_in(&m, &f, KIO_SVC_ACC_SHM, OFF, 1);
  ck_assert_int_eq(serve(s2, sh, &m), KIO_OK);
  ck_assert_int_eq(serve(s2, sh, &m), KIO_OK);
  request_in(&m, &f, KIO_SVC_ACC_SHM, OFF, 0);
  ck_assert_int_eq(serve(s2, sh, &m), KIO_ERR);
  ck_assert_int_eq(gacc_serve_shm_requests(s2), 2);
  request(&m, &f, 0, 0);
  ck_assert_int_eq(serve(s1, in, &m), KIO_OK);
  ck_assert_int_eq(gacc_serve_shm_requests(s1), 0);
  gacc_stats a, b;
  ck_assert_int_eq(gacc_stats_init(&a, &f.tm, &f.am), KIO_OK);
  ck_assert_int_eq(gacc_stats_init(&b, &f.tm, &f.am), KIO_OK);
  ck_assert_int_eq(gacc_get_stats(in, &a), KIO_OK);
  ck_assert_int_eq(gacc_get_stats(sh, &b), KIO_OK);
  size_t gd = (size_t)a.num_gauss * (size_t)a.dim;
  ck_assert(a.total_frames == 2 * ROWS && b.total_frames == a.total_frames);
  ck_assert(memcmp(&a.total_like, &b.total_like, sizeof(double)) == 0);
  ck_assert(memcmp(a.occ, b.occ, sizeof(double) * (size_t)a.num_gauss) == 0);
  ck_assert(memcmp(a.mean_acc, b.mean_acc, sizeof(double) * gd) == 0);
  ck_assert(memcmp(a.var_acc, b.var_acc, sizeof(double) * gd) == 0);
  ck_assert(memcmp(a.tacc, b.tacc, sizeof(double) * ((size_t)a.num_tids + 1)) == 0);
  gacc_stats_free(&a);
  gacc_stats_free(&b);
  kio_msg_free(&m);
  gacc_serve_free(s1);
  gacc_serve_free(s2);
  gacc_free(in);
  gacc_free(sh);
  fixture_free(&f);
}
END_TEST

START_TEST(bad_shared_memory_is_malformed) {
  fixture f;
  fixture_init(&f);
  gacc_acc *a = NULL;
  ck_assert_int_eq(gacc_new(&a, "cpu", &f.tm, &f.am), KIO_OK);
  kio_msg m = {0};
  const size_t bytes = sizeof(float) * ROWS * (size_t)f.am.dim;
  /* no region ever came */
  gacc_serve *s = gacc_serve_new();
  request(&m, &f, KIO_SVC_ACC_SHM, OFF);
  ck_assert_int_eq(serve(s, a, &m), KIO_ERR);
  gacc_serve_free(s);
  /* a region the job could shrink */
  s = gacc_serve_new();
  gacc_serve_give_fd(s, region(&f, 0));
  ck_assert_int_eq(serve(s, a, &m), KIO_ERR);
  gacc_serve_free(s);
  /* offsets and sizes outside the region, a misaligned one, unknown flags */
  s = gacc_serve_new();
  gacc_serve_give_fd(s, region(&f, 1));
  const uint64_t last = (REGION - bytes) / 8 * 8;  /* the last aligned place */
  request(&m, &f, KIO_SVC_ACC_SHM, last + 8);
  ck_assert_int_eq(serve(s, a, &m), KIO_ERR);
  request(&m, &f, KIO_SVC_ACC_SHM, (uint64_t)1 << 62);
  ck_assert_int_eq(serve(s, a, &m), KIO_ERR);
  request(&m, &f, KIO_SVC_ACC_SHM, OFF + 4);
  ck_assert_int_eq(serve(s, a, &m), KIO_ERR);
  request(&m, &f, KIO_SVC_ACC_SHM | 2, OFF);
  ck_assert_int_eq(serve(s, a, &m), KIO_ERR);
  /* a region past the connection's, one the job never sent */
  request_in(&m, &f, KIO_SVC_ACC_SHM, OFF, GACC_REMOTE_REGIONS);
  ck_assert_int_eq(serve(s, a, &m), KIO_ERR);
  request_in(&m, &f, 0, OFF, UINT32_MAX);
  ck_assert_int_eq(serve(s, a, &m), KIO_ERR);
  request_in(&m, &f, KIO_SVC_ACC_SHM, OFF, 1);
  ck_assert_int_eq(serve(s, a, &m), KIO_ERR);
  ck_assert_int_eq(frames_of(a), 0);
  /* the region is still good for a well-formed request */
  request(&m, &f, KIO_SVC_ACC_SHM, last);
  ck_assert_int_eq(serve(s, a, &m), KIO_OK);
  ck_assert_int_eq(frames_of(a), ROWS);
  kio_msg_free(&m);
  gacc_serve_free(s);
  gacc_free(a);
  fixture_free(&f);
}
END_TEST

int main(void) {
  Suite *s = suite_create("acc_serve");
  TCase *tc = tcase_create("acc_serve");
  tcase_add_test(tc, shared_memory_equals_inline);
  tcase_add_test(tc, bad_shared_memory_is_malformed);
  suite_add_tcase(s, tc);
  return tu_run_suite(s);
}
