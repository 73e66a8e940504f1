/* The GPU service's pooled aligner (galign_rebind, galign_unbind): one
 * aligner rebound in turn to models with more and fewer pdfs and Gaussians,
 * another feature dimension, and other beams and acoustic scale aligns
 * every utterance as a fresh aligner of that model and those options does,
 * bit for bit (alignment, likelihood, per-frame log-likelihoods), on the
 * CPU backend and on the device (a real one, or tests/emu's emulation).
 * Skips (exit 77) without a usable GPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/sys/log.h"
#include "base/sys/settings.h"
#include "device/gpu.h"
#include "gpu-align/gpu-align.h"
#include "tests/lib/align-fixture.h"
#include "tests/lib/test-util.h"

/* A step of the sequence: the fixture whose model, graphs and features,
 * and the options (the graphs' scales kept: only the decoding options
 * change). */
typedef struct {
  const fixture *fx;
  galign_opts o;
  const char *what;
} step;

/* The first n utterances of fx (all if n <= 0), for the quick case (the
 * emulated device under valgrind). */
static fixture first(const fixture *fx, int n) {
  fixture v = *fx;
  if (n > 0 && n < v.n) v.n = n;
  return v;
}

static galign_result *align(galign_aligner *a, const fixture *fx) {
  galign_result *r = calloc((size_t)fx->n, sizeof *r);
  ck_assert(r);
  ck_assert_int_eq(galign_align_batch(a, fx->n, fx->gp, fx->fp, 1, r), KIO_OK);
  return r;
}

static int count_ok(const galign_result *r, int n, int *retried) {
  int ok = 0;
  *retried = 0;
  for (int i = 0; i < n; i++) {
    ok += r[i].ok;
    *retried += r[i].retried;
  }
  return ok;
}

/* Device bytes held by a's account after its batch buffers are trimmed:
 * the model's arrays (0 on the CPU backend). */
static size_t model_held(galign_aligner *a) {
  galign_aligner_trim(a);
  kio_gpu_acct *acct = galign_aligner_acct(a);
  return acct ? kio_gpu_acct_live(acct) : 0;
}

static void rebind_check(galign_use_gpu mode, int max_utts) {
  fixture mono, noisy, tri1, tri2;
  fx_load(&mono, "mono", "ark:feats/delta.ark", "mono", 0);
  fx_load(&noisy, "mono", "ark:noisy/delta.ark", "mono", 0);
  fx_load(&tri1, "tri1", "ark:feats/delta.ark", "tri1", 0);
  fx_load(&tri2, "tri2", "ark:feats/lda.ark", "tri2", 0);
  ck_assert_int_lt(mono.am.num_pdfs, tri1.am.num_pdfs);
  ck_assert_int_lt(mono.gmm.num_gauss, tri1.gmm.num_gauss);
  ck_assert_int_ne(tri1.am.dim, tri2.am.dim);
  fixture *all[] = {&mono, &noisy, &tri1, &tri2};
  for (int k = 0; k < 4; k++) all[k]->o.no_service = 1;
  /* small beams on the noisy data: utterances that fail the first pass and
   * are retried, some that fail both */
  galign_opts narrow = noisy.o;
  narrow.beam = 2.0f;
  narrow.retry_beam = 6.0f;
  narrow.acoustic_scale = 0.08f;
  galign_opts narrow1 = tri1.o;
  narrow1.beam = 3.0f;
  narrow1.retry_beam = 0.0f;
  const fixture v_mono = first(&mono, max_utts), v_noisy = first(&noisy, max_utts),
                v_tri1 = first(&tri1, max_utts), v_tri2 = first(&tri2, max_utts);
  const step steps[] = {
      {&v_tri1, tri1.o, "rebound to more pdfs and Gaussians"},
      {&v_noisy, narrow, "rebound to fewer, other beams and acoustic scale"},
      {&v_tri2, tri2.o, "rebound to another feature dimension"},
      {&v_mono, mono.o, "rebound to the first model and options"},
      {&v_tri1, narrow1, "rebound to more again, without a retry beam"},
      {&v_tri1, narrow1, "rebound to the same model and options"},
  };
  galign_aligner *pooled = NULL;
  ck_assert_int_eq(galign_aligner_new(&pooled, mode, &mono.tm, &mono.am, &mono.o), KIO_OK);
  ck_assert_int_eq(galign_aligner_is_gpu(pooled), mode != GALIGN_GPU_NO);
  ck_assert(!galign_aligner_is_remote(pooled));
  free_results(align(pooled, &v_mono), v_mono.n);  /* its buffers used by another model */
  size_t held_tri1 = 0;
  int retried_narrow = 0;
  for (size_t k = 0; k < sizeof steps / sizeof steps[0]; k++) {
    const step *s = &steps[k];
    /* as between the GPU service's jobs: the account may hold what it
     * holds, no more (the model's arrays grow anyway) */
    kio_gpu_acct *acct = galign_aligner_acct(pooled);
    if (acct) kio_gpu_acct_set_limit(acct, kio_gpu_acct_live(acct));
    galign_unbind(pooled);
    ck_assert_int_eq(galign_rebind(pooled, &s->fx->tm, &s->fx->am, &s->o), KIO_OK);
    galign_result *r = align(pooled, s->fx);
    size_t held = model_held(pooled);
    galign_aligner *fresh = NULL;
    ck_assert_int_eq(galign_aligner_new(&fresh, mode, &s->fx->tm, &s->fx->am, &s->o), KIO_OK);
    galign_result *rf = align(fresh, s->fx);
    assert_same(s->fx, r, rf, 1, s->what);
    int retried, ok = count_ok(r, s->fx->n, &retried);
    ck_assert_msg(ok > 0, "%s: nothing aligned", s->what);
    if (k == 1) retried_narrow = retried;
    /* the model's device arrays are reused, not grown, for a smaller model */
    if (k == 0) held_tri1 = held;
    if (k == 1 && mode != GALIGN_GPU_NO)
      ck_assert_msg(held == held_tri1, "%s: device memory %zu after %zu", s->what, held,
                    held_tri1);
    free_results(r, s->fx->n);
    free_results(rf, s->fx->n);
    galign_aligner_free(fresh);
  }
  if (max_utts <= 0)
    ck_assert_msg(retried_narrow > 0, "the narrow beams retried nothing: not a test of them");
  galign_aligner_free(pooled);
  for (int k = 0; k < 4; k++) fx_free(all[k]);
}

START_TEST(cpu_rebind_equals_fresh) { rebind_check(GALIGN_GPU_NO, 0); }
END_TEST

START_TEST(gpu_rebind_equals_fresh) { rebind_check(GALIGN_GPU_YES, 0); }
END_TEST

/* The same on 4 utterances of each set: for valgrind (the whole sets take
 * hours there on the emulated device). */
START_TEST(cpu_rebind_quick) { rebind_check(GALIGN_GPU_NO, 4); }
END_TEST

START_TEST(gpu_rebind_quick) { rebind_check(GALIGN_GPU_YES, 4); }
END_TEST

/* Freed while idle (unbound, never rebound): nothing leaks (valgrind,
 * ASan), and an unbound aligner may be unbound again. */
START_TEST(unbind_then_free) {
  fixture mono;
  fx_load(&mono, "mono", "ark:feats/delta.ark", "mono", 0);
  mono.o.no_service = 1;
  for (int m = 0; m < 2; m++) {
    galign_aligner *a = NULL;
    ck_assert_int_eq(galign_aligner_new(&a, m ? GALIGN_GPU_YES : GALIGN_GPU_NO, &mono.tm,
                                        &mono.am, &mono.o), KIO_OK);
    free_results(align(a, &mono), mono.n);
    galign_unbind(a);
    galign_unbind(a);
    galign_aligner_free(a);
  }
  fx_free(&mono);
}
END_TEST

static Suite *rebind_suite(void) {
  Suite *s = suite_create("gpu_rebind");
  /* cases apart: CK_RUN_CASE=quick under valgrind */
  TCase *t = tcase_create("cpu");
  tcase_set_timeout(t, 600);
  tcase_add_test(t, cpu_rebind_equals_fresh);
  suite_add_tcase(s, t);
  t = tcase_create("gpu");
  tcase_set_timeout(t, 600);
  tcase_add_test(t, gpu_rebind_equals_fresh);
  suite_add_tcase(s, t);
  t = tcase_create("quick");
  tcase_set_timeout(t, 600);
  tcase_add_test(t, cpu_rebind_quick);
  tcase_add_test(t, gpu_rebind_quick);
  tcase_add_test(t, unbind_then_free);
  suite_add_tcase(s, t);
  return s;
}

int main(void) {
  /* Probes in a child: CUDA is never initialised in this (forking) parent. */
  if (!tu_gpu_available()) exit(TU_EXIT_SKIP);
  return tu_run_suite(rebind_suite());
}
