/* The service's side of ALIGN requests (gpu-align/align-serve.c) on the CPU
 * aligner: a request packed with its arrays inline and one packed through
 * the job's sealed memfd (graphs and features, gpu-align/align-pack.c) give
 * the same results; a shared-memory request whose graph or feature offset
 * lies outside the region, is misaligned, or whose array runs over the
 * region's end is malformed (KIO_ERR), never a crash or a read outside the
 * mapping, and the region stays good for the next request. */
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
#include "gpu-align/align-pack.h"
#include "gpu-align/align-remote.h"
#include "gpu-align/align-shm.h"
#include "gpu-align/gpu-align.h"
#include "tests/lib/test-util.h"

enum { ROWS = 23, REGION = 1 << 16 };

typedef struct {
  kio_tmodel tm;
  kio_am_gmm am;
  galign_opts o;
  kio_fst fst;
  galign_graph g;
  kio_matrix x;
  galign_aligner *al;
} fixture;

/* A left-to-right graph of three states over the first transition-ids, a
 * self-loop on each: any ROWS frames align. */
static void fixture_init(fixture *f) {
  memset(f, 0, sizeof *f);
  ck_assert_int_eq(kio_model_read("models/mono/final.mdl", &f->tm, &f->am), KIO_OK);
  galign_opts_default(&f->o);
  f->o.no_service = 1;
  enum { NS = 4, NA = 6 };
  kio_fst *s = &f->fst;
  s->num_states = NS;
  s->num_arcs = NA;
  s->start = 0;
  s->arc_start = malloc(sizeof(int32_t) * (NS + 1));
  s->arcs = malloc(sizeof(kio_arc) * NA);
  s->final = malloc(sizeof(float) * NS);
  ck_assert(s->arc_start && s->arcs && s->final);
  for (int k = 0; k < 3; k++) {
    s->arc_start[k] = 2 * k;
    s->arcs[2 * k] = (kio_arc){1 + 2 * k, 0, 0.5f, k};          /* self-loop */
    s->arcs[2 * k + 1] = (kio_arc){2 + 2 * k, 0, 0.7f, k + 1};  /* forward */
    s->final[k] = INFINITY;
  }
  s->arc_start[3] = s->arc_start[4] = NA;
  s->final[3] = 0.0f;
  ck_assert_int_eq(galign_graph_prepare(s, &f->tm, &f->o, &f->g), KIO_OK);
  int D = f->am.dim;
  f->x = (kio_matrix){ROWS, D, malloc(sizeof(float) * ROWS * (size_t)D), 0};
  ck_assert_ptr_nonnull(f->x.data);
  for (int t = 0; t < ROWS; t++)
    for (int d = 0; d < D; d++) f->x.data[t * D + d] = (float)sin(0.29 * t + 0.13 * d) * 2.0f;
  ck_assert_int_eq(galign_aligner_new(&f->al, GALIGN_GPU_NO, &f->tm, &f->am, &f->o), KIO_OK);
}

static void fixture_free(fixture *f) {
  galign_aligner_free(f->al);
  galign_graph_free(&f->g);
  free(f->fst.arc_start);
  free(f->fst.arcs);
  free(f->fst.final);
  free(f->x.data);
  kio_tmodel_free(&f->tm);
  kio_am_gmm_free(&f->am);
}

/* A sealed (or not) memfd of REGION bytes, mapped writable. */
static uint8_t *region(int seal, int *fd) {
  *fd = memfd_create("check-align-serve", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ck_assert_int_ge(*fd, 0);
  ck_assert_int_eq(ftruncate(*fd, REGION), 0);
  if (seal) ck_assert_int_eq(fcntl(*fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
  uint8_t *p = mmap(NULL, REGION, PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0);
  ck_assert(p != MAP_FAILED);
  return p;
}

/* m's payload in one block (its referenced arrays copied in). */
static uint8_t *flatten(const kio_msg *m, size_t *len) {
  ck_assert_int_eq(m->failed, 0);
  uint8_t *p = malloc(m->total ? m->total : 1);
  ck_assert_ptr_nonnull(p);
  size_t o = 0;
  for (int i = 0; i < m->nseg; i++) {
    memcpy(p + o, m->seg[i].ref ? m->seg[i].ref : m->buf + m->seg[i].off, m->seg[i].len);
    o += m->seg[i].len;
  }
  ck_assert_uint_eq(o, m->total);
  *len = o;
  return p;
}

/* Serves the request in buf; KIO_OK if well-formed and aligned (res: its
 * result, a copy). */
static int serve_raw(galign_serve *s, fixture *f, const uint8_t *buf, size_t len,
                     galign_result *res) {
  kio_msg_reader rd = {buf, len, 0, 0};
  kio_msg reply = {0};
  int batch_rc = KIO_ERR;
  int rc = galign_serve_align(s, f->al, &rd, &reply, &batch_rc);
  kio_msg_free(&reply);
  if (rc != KIO_OK || batch_rc != KIO_OK) return KIO_ERR;
  const galign_result *r = galign_serve_result(s, 0);
  ck_assert_int_eq(galign_serve_count(s), 1);
  if (res) {
    *res = *r;
    res->ali = r->ok ? malloc(sizeof(int32_t) * ROWS) : NULL;
    if (r->ok) memcpy(res->ali, r->ali, sizeof(int32_t) * ROWS);
    res->per_frame = NULL;
  }
  return KIO_OK;
}

static int serve(galign_serve *s, fixture *f, const kio_msg *m, galign_result *res) {
  size_t len;
  uint8_t *buf = flatten(m, &len);
  int rc = serve_raw(s, f, buf, len, res);
  free(buf);
  return rc;
}

/* The packed request's utterance: after the header (5 u32) and the six
 * i32 scalars (44 bytes), arrays 0..5 as u64 offsets (8-byte aligned in
 * the message: from 48), the i32 band at 96, arrays 6..8 from 104. */
static size_t offset_pos(int k) { return k < 6 ? 48 + (size_t)k * 8 : 104 + (size_t)(k - 6) * 8; }

START_TEST(shared_memory_equals_inline) {
  fixture f;
  fixture_init(&f);
  const galign_graph *gp = &f.g;
  const kio_matrix *fp = &f.x;
  kio_msg m = {0};
  galign_serve *s1 = galign_serve_new(), *s2 = galign_serve_new();
  ck_assert_int_eq(galign_pack_request(&m, NULL, 0, &gp, &fp, 1, 0, 0, 0, 0, 0), KIO_OK);
  galign_result a, b;
  ck_assert_int_eq(serve(s1, &f, &m, &a), KIO_OK);
  ck_assert_int_eq(a.ok, 1);
  size_t gbytes = 0, bytes = galign_pack_shm_bytes(&gp, &fp, 1, &gbytes);
  ck_assert(gbytes > 0 && bytes > gbytes && bytes <= REGION);
  int fd;
  uint8_t *map = region(1, &fd);
  ck_assert_int_eq(galign_pack_request(&m, map, bytes, &gp, &fp, 1, 0, KIO_SVC_ALIGN_SHM, 0, 1, 0),
                   KIO_OK);
  /* the message holds offsets only: smaller than the graph's arrays */
  ck_assert(m.total < gbytes);
  galign_serve_give_fd(s2, fd);
  ck_assert_int_eq(serve(s2, &f, &m, &b), KIO_OK);
  ck_assert_int_eq(b.ok, 1);
  ck_assert(memcmp(&a.like, &b.like, sizeof a.like) == 0);
  ck_assert(memcmp(&a.score, &b.score, sizeof a.score) == 0);
  ck_assert(memcmp(a.ali, b.ali, sizeof(int32_t) * ROWS) == 0);
  galign_result_free(&a);
  galign_result_free(&b);
  munmap(map, REGION);
  kio_msg_free(&m);
  galign_serve_free(s1);
  galign_serve_free(s2);
  fixture_free(&f);
}
END_TEST

/* buf: the packed request good with array k's offset replaced by off. */
static void bad_offset(uint8_t *buf, const uint8_t *good, size_t len, int k, uint64_t off) {
  memcpy(buf, good, len);
  memcpy(buf + offset_pos(k), &off, sizeof off);
}

START_TEST(bad_graph_offsets_are_malformed) {
  fixture f;
  fixture_init(&f);
  const galign_graph *gp = &f.g;
  const kio_matrix *fp = &f.x;
  kio_msg m = {0};
  size_t bytes = galign_pack_shm_bytes(&gp, &fp, 1, NULL);
  int fd;
  uint8_t *map = region(1, &fd);
  ck_assert_int_eq(galign_pack_request(&m, map, bytes, &gp, &fp, 1, 0, KIO_SVC_ALIGN_SHM, 0, 0, 0),
                   KIO_OK);
  size_t len;
  uint8_t *good = flatten(&m, &len), *buf = malloc(len);
  ck_assert_ptr_nonnull(buf);
  /* the offsets are where the test says: the first one is 0, the rest in
   * order and 64-byte aligned */
  uint64_t off[9];
  for (int k = 0; k < 9; k++) memcpy(&off[k], good + offset_pos(k), 8);
  ck_assert(off[0] == 0 && off[1] > 0 && off[1] % 64 == 0 && off[5] > off[4]);
  galign_serve *s = galign_serve_new();
  galign_serve_give_fd(s, fd);
  ck_assert_int_eq(serve(s, &f, &m, NULL), KIO_OK);
  /* arc_start, arcs, final, pdfs_used, arc_pdf, the features: outside the
   * region, misaligned, running over its end */
  const size_t size[6] = {sizeof(int32_t) * (size_t)(f.fst.num_states + 1),
                          sizeof(kio_arc) * (size_t)f.fst.num_arcs,
                          sizeof(float) * (size_t)f.fst.num_states,
                          sizeof(int32_t) * (size_t)f.g.num_pdfs_used,
                          sizeof(int32_t) * (size_t)f.fst.num_arcs,
                          sizeof(float) * ROWS * (size_t)f.am.dim};
  for (int k = 0; k < 6; k++) {
    const uint64_t last = (REGION - size[k]) / 8 * 8;
    const uint64_t bad[] = {REGION + 64, (uint64_t)1 << 62, UINT64_MAX - 7, off[k] + 4,
                            last + 8, REGION};
    for (size_t j = 0; j < sizeof bad / sizeof bad[0]; j++) {
      bad_offset(buf, good, len, k, bad[j]);
      ck_assert_msg(serve_raw(s, &f, buf, len, NULL) == KIO_ERR, "array %d at offset %llu accepted",
                    k, (unsigned long long)bad[j]);
    }
    /* the last aligned place that holds it is accepted (what it reads
     * there is zeros: a graph refused as inconsistent, or aligned) */
    bad_offset(buf, good, len, k, last);
    kio_msg_reader rd = {buf, len, 0, 0};
    kio_msg reply = {0};
    int batch_rc;
    (void)galign_serve_align(s, f.al, &rd, &reply, &batch_rc);
    kio_msg_free(&reply);
  }
  /* the region is still good for a well-formed request */
  bad_offset(buf, good, len, 0, 0);
  ck_assert_int_eq(serve_raw(s, &f, buf, len, NULL), KIO_OK);
  free(good);
  free(buf);
  munmap(map, REGION);
  kio_msg_free(&m);
  galign_serve_free(s);
  fixture_free(&f);
}
END_TEST

int main(void) {
  Suite *s = suite_create("align_serve");
  TCase *tc = tcase_create("align_serve");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, shared_memory_equals_inline);
  tcase_add_test(tc, bad_graph_offsets_are_malformed);
  suite_add_tcase(s, tc);
  return tu_run_suite(s);
}
