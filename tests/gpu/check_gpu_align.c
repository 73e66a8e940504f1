/* The CUDA aligner against the CPU one on the Kaldi fixtures: device
 * log-likelihoods vs galign_cpu_loglikes; the device decoder on the CPU's
 * likelihoods vs the CPU decoder (bit-identical: same algorithm); the whole
 * GPU path vs the CPU path and Kaldi; workspace regrowth, sub-batches, bad
 * input. Skips (exit 77) without a usable GPU. CUDA is only initialised
 * inside the forked test processes. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/sys/settings.h"
#include "base/matrix/blas-profile.h"
#include "base/sys/log.h"
#include "base/matrix/matrix.h"
#include "base/model/model.h"
#include "base/io/table.h"
#include "gpu-align/align-cpu.h"
#include "gpu-align/align-cuda.h"
#include "gpu-align/gpu-align.h"
#include "gpu-align/align-margin.h"
#include "tests/lib/align-fixture.h"
#include "tests/lib/test-util.h"


/* ---- device log-likelihoods vs the CPU ---- */
/* Rounding scale of LL(x, pdf) in float: the largest sum of absolute terms
 * of a component's dot product. Two float evaluations in different orders
 * (cuBLAS vs the CPU, or OpenBLAS in Kaldi) differ by a few eps times this:
 * on tri2 the CPU itself is up to 1.3e-3 away from the exact value, so a
 * fixed 1e-4 cannot hold for every (frame, pdf). */
static double ll_scale(const galign_gmm *g, int32_t pdf, const float *x) {
  double best = 0;
  const int D = g->dim;
  for (int32_t m = g->pdf_offset[pdf]; m < g->pdf_offset[pdf + 1]; m++) {
    double b = fabs(g->gconst[m]);
    for (int d = 0; d < D; d++)
      b += fabs((double)g->means_invvars[(size_t)m * D + d] * x[d]) +
           fabs(0.5 * g->inv_vars[(size_t)m * D + d] * ((double)x[d] * x[d]));
    if (b > best) best = b;
  }
  return best;
}

static void check_loglikes_g(const char *model, const char *feats, const char *graphs) {
  fixture fx;
  fx_load(&fx, model, feats, graphs, 0);
  galign_cuda *c = new_cuda(&fx);
  kio_matrix cpu = {0}, gpu = {0};
  double maxd = 0, maxratio = 0;
  int64_t n = 0, within = 0, ident = 0;
  for (int i = 0; i < fx.n; i++) {
    const galign_graph *g = fx.gp[i];
    ck_assert_int_eq(galign_cpu_loglikes(&fx.gmm, fx.fp[i], g->pdfs_used, g->num_pdfs_used, &cpu),
                     KIO_OK);
    ck_assert_int_eq(galign_cuda_loglikes(c, g, fx.fp[i], &gpu), KIO_OK);
    ck_assert_int_eq(gpu.rows, cpu.rows);
    ck_assert_int_eq(gpu.cols, cpu.cols);
    for (int32_t t = 0; t < cpu.rows; t++)
      for (int32_t k = 0; k < cpu.cols; k++) {
        size_t j = (size_t)t * cpu.cols + k;
        double d = fabs((double)gpu.data[j] - cpu.data[j]);
        n++;
        ident += memcmp(&gpu.data[j], &cpu.data[j], sizeof(float)) == 0;
        if (d <= 1e-4) { within++; continue; }
        if (d > maxd) maxd = d;
        double b = ll_scale(&fx.gmm, g->pdfs_used[k], fx.feats[i].data + (size_t)t * fx.gmm.dim);
        double ratio = d / (FLT_EPSILON * b);
        if (ratio > maxratio) maxratio = ratio;
        ck_assert_msg(ratio <= 8.0, "%s %s frame %d pdf %d: GPU %.9g CPU %.9g (%.2f eps x %.4g)",
                      model, fx.keys[i], t, g->pdfs_used[k], gpu.data[j], cpu.data[j], ratio, b);
      }
  }
  printf("%s: %lld log-likelihoods, %.4f%% bit-identical to the CPU, %.4f%% within 1e-4; "
         "max |GPU-CPU| %.3g = %.2f eps x (sum of |terms|) at most\n", model, (long long)n,
         100.0 * ident / n, 100.0 * within / n, maxd, maxratio);
  /* The exact kernel (default for models with <= 128 Gaussians per pdf)
   * follows the CPU's operation order: only expf/log rounding in a rare
   * near-midpoint case may differ. KALDI_GPU_DEV_LIKELIHOODS=gemm selects cuBLAS. */
  const char *mode = kio_setting_str(KIO_SET_DEV_LIKELIHOODS);
  if (!(mode && !strcmp(mode, "gemm")))
    ck_assert_msg(ident * 10000 >= n * 9999, "only %lld of %lld bit-identical", (long long)ident,
                  (long long)n);
  kio_matrix_free(&cpu);
  kio_matrix_free(&gpu);
  galign_cuda_free(c);
  fx_free(&fx);
}

static void check_loglikes(const char *model, const char *feats) {
  check_loglikes_g(model, feats, model);
}

START_TEST(loglikes_mono) { check_loglikes("mono", "ark:feats/delta.ark"); }
END_TEST
/* dims 4 and 8: SkylakeX's small-m sgemv kernel (base/matrix/sgemv-skx-small.h) */
START_TEST(loglikes_mono4) { check_loglikes_g("mono4", "ark:feats/delta4.ark", "mono"); }
END_TEST
START_TEST(loglikes_mono8) { check_loglikes_g("mono8", "ark:feats/delta8.ark", "mono"); }
END_TEST
START_TEST(loglikes_tri2) { check_loglikes("tri2", "ark:feats/lda.ark"); }
END_TEST
/* The cuBLAS path (used for models with > 128 Gaussians in a pdf). */
START_TEST(loglikes_tri2_gemm) {
  kio_setting_override(KIO_SET_DEV_LIKELIHOODS, "gemm");
  check_loglikes("tri2", "ark:feats/lda.ark");
  kio_setting_override(KIO_SET_DEV_LIKELIHOODS, NULL);
}
END_TEST

/* Every rounding profile (base/matrix/blas-profile.h): the device's
 * likelihoods are the CPU path's (mono: 39 dims, the D%4 tail; tri2: 40;
 * mono8: SkylakeX's small-m kernel), and so are the noisy alignments. */
START_TEST(profiles) {
  kio_setting_override(KIO_SET_BLAS_PROFILE, kio_blas_profile_name(_i));
  kio_blas_profile_reset();
  check_loglikes("mono", "ark:noisy/delta.ark");
  check_loglikes("tri2", "ark:feats/lda.ark");
  check_loglikes_g("mono8", "ark:feats/delta8.ark", "mono");
  kio_setting_override(KIO_SET_BLAS_PROFILE, "skx");
  kio_blas_profile_reset();
}
END_TEST

/* ---- device decoder on the CPU's likelihoods vs the CPU decoder ---- */
static void check_decoder(const char *model, const char *feats, int careful) {
  fixture fx;
  fx_load(&fx, model, feats, model, careful);
  kio_matrix *ll = calloc(fx.n, sizeof *ll);
  const kio_matrix **llp = malloc(sizeof(*llp) * fx.n);
  for (int i = 0; i < fx.n; i++) {
    const galign_graph *g = fx.gp[i];
    ck_assert_int_eq(galign_cpu_loglikes(&fx.gmm, fx.fp[i], g->pdfs_used, g->num_pdfs_used,
                                         &ll[i]), KIO_OK);
    llp[i] = &ll[i];
  }
  galign_result *ref = cpu_align_all(&fx, 1);
  galign_cuda *c = new_cuda(&fx);
  galign_result *got = calloc(fx.n, sizeof *got);
  uint8_t *redo = calloc(fx.n, 1);
  int nr = -1;
  double t0 = now_s();
  ck_assert_int_eq(galign_cuda_decode(c, fx.n, fx.gp, llp, 1, got, redo, &nr), KIO_OK);
  double t1 = now_s();
  ck_assert_int_eq(nr, 0);
  assert_same(&fx, got, ref, 1, model);
  int64_t fr, tk, rd, bad, rg;
  int32_t mx;
  galign_cuda_stats(c, &fr, &tk, &mx, &rd, &bad, &rg);
  int ok = 0, retried = 0;
  for (int i = 0; i < fx.n; i++) { ok += ref[i].ok; retried += ref[i].retried; }
  printf("%s%s decoder: %d utts (%d ok, %d retried) identical to the CPU; %.3f s; "
         "%.1f tokens/frame (max %d), %lld regrown\n", model, careful ? " careful" : "",
         fx.n, ok, retried, t1 - t0, fr ? (double)tk / fr : 0.0, mx, (long long)rg);
  for (int i = 0; i < fx.n; i++) kio_matrix_free(&ll[i]);
  free(ll); free(llp); free(redo);
  free_results(got, fx.n);
  free_results(ref, fx.n);
  galign_cuda_free(c);
  fx_free(&fx);
}

START_TEST(decoder_mono) { check_decoder("mono", "ark:feats/delta.ark", 0); }
END_TEST
START_TEST(decoder_tri1) { check_decoder("tri1", "ark:feats/delta.ark", 0); }
END_TEST
START_TEST(decoder_tri2) { check_decoder("tri2", "ark:feats/lda.ark", 0); }
END_TEST
START_TEST(decoder_noisy_mono) { check_decoder("mono", "ark:noisy/delta.ark", 0); }
END_TEST
START_TEST(decoder_noisy_tri1) { check_decoder("tri1", "ark:noisy/delta.ark", 0); }
END_TEST
START_TEST(decoder_mono_careful) { check_decoder("mono", "ark:feats/delta.ark", 1); }
END_TEST

/* A first-pass workspace of one token per frame: every utterance overflows
 * and is decoded again on the device with a larger one; same results. */
START_TEST(decoder_regrow) {
  kio_setting_override(KIO_SET_DEV_TOKS_PER_FRAME, "1");
  check_decoder("mono", "ark:noisy/delta.ark", 0);
  kio_setting_override(KIO_SET_DEV_TOKS_PER_FRAME, NULL);
}
END_TEST

/* ---- retry passes on host threads vs on the device ---- */
/* Beams beam/retry (small ones make most utterances retry, some fail both
 * passes) with the retries where way says ($KALDI_GPU_DEV_RETRY): the
 * decoder on the CPU's likelihoods and the whole path (device likelihoods,
 * sub-batches of ~1000 frames so that host retries overlap later batches)
 * equal the CPU path bit for bit, retry and failure flags included. */
static void check_retry(const char *model, const char *feats, float beam, float retry,
                        const char *way) {
  fixture fx;
  fx_load(&fx, model, feats, model, 0);
  fx.o.beam = beam;
  fx.o.retry_beam = retry;
  kio_setting_override(KIO_SET_DEV_RETRY, way);
  galign_result *ref = cpu_align_all(&fx, 1);
  int retried = 0, failed = 0;
  for (int i = 0; i < fx.n; i++) { retried += ref[i].retried; failed += !ref[i].ok; }
  ck_assert_int_gt(retried, 0);
  kio_matrix *ll = calloc(fx.n, sizeof *ll);
  const kio_matrix **llp = malloc(sizeof(*llp) * fx.n);
  for (int i = 0; i < fx.n; i++) {
    const galign_graph *g = fx.gp[i];
    ck_assert_int_eq(galign_cpu_loglikes(&fx.gmm, fx.fp[i], g->pdfs_used, g->num_pdfs_used,
                                         &ll[i]), KIO_OK);
    llp[i] = &ll[i];
  }
  galign_cuda *c = new_cuda(&fx);
  galign_result *got = calloc(fx.n, sizeof *got);
  uint8_t *redo = calloc(fx.n, 1);
  int nr = -1;
  ck_assert_int_eq(galign_cuda_decode(c, fx.n, fx.gp, llp, 1, got, redo, &nr), KIO_OK);
  ck_assert_int_eq(nr, 0);
  assert_same(&fx, got, ref, 1, way);
  free_results(got, fx.n);
  got = calloc(fx.n, sizeof *got);
  kio_setting_override(KIO_SET_DEV_BATCH_FRAMES, "1000");
  ck_assert_int_eq(galign_cuda_align_batch(c, fx.n, fx.gp, fx.fp, 1, got, redo, &nr), KIO_OK);
  kio_setting_override(KIO_SET_DEV_BATCH_FRAMES, NULL);
  ck_assert_int_eq(nr, 0);
  for (int i = 0; i < fx.n; i++) {
    ck_assert_msg(got[i].ok == ref[i].ok && got[i].retried == ref[i].retried,
                  "%s: ok %d retried %d vs CPU %d %d", fx.keys[i], got[i].ok, got[i].retried,
                  ref[i].ok, ref[i].retried);
    if (got[i].ok)
      ck_assert_int_eq(memcmp(got[i].ali, ref[i].ali, sizeof(int32_t) * ref[i].num_frames), 0);
  }
  int64_t fr, tk, rd, bad, rg;
  int32_t mx;
  galign_cuda_stats(c, &fr, &tk, &mx, &rd, &bad, &rg);
  int64_t cfr = 0;
  for (int i = 0; i < fx.n; i++) cfr += ref[i].num_frames * (1 + ref[i].retried);
  int64_t on_host = -1;
  galign_cuda_retry_stats(c, &on_host, NULL);
  /* the retries ran where asked: every one on the host threads, or none */
  ck_assert_int_eq(on_host, strcmp(way, "host") == 0 ? 2 * retried : 0);
  printf("%s beams %g/%g, retries on the %s: %d utts (%d retried, %d failed) identical to the "
         "CPU; %lld decoder frames counted (both passes: %lld)\n", model, beam, retry, way,
         fx.n, retried, failed, (long long)fr, (long long)cfr);
  /* both calls' frames, each pass counted once */
  ck_assert_int_eq(fr, 2 * cfr);
  kio_setting_override(KIO_SET_DEV_RETRY, NULL);
  for (int i = 0; i < fx.n; i++) kio_matrix_free(&ll[i]);
  free(ll); free(llp); free(redo);
  free_results(got, fx.n);
  free_results(ref, fx.n);
  galign_cuda_free(c);
  fx_free(&fx);
}

START_TEST(retry_host_noisy_mono) { check_retry("mono", "ark:noisy/delta.ark", 10, 40, "host"); }
END_TEST
START_TEST(retry_device_noisy_mono) {
  check_retry("mono", "ark:noisy/delta.ark", 10, 40, "device");
}
END_TEST
START_TEST(retry_host_small_beams) { check_retry("mono", "ark:noisy/delta.ark", 2, 6, "host"); }
END_TEST
START_TEST(retry_device_small_beams) {
  check_retry("mono", "ark:noisy/delta.ark", 2, 6, "device");
}
END_TEST
START_TEST(retry_host_noisy_tri1) {
  check_retry("tri1", "ark:noisy/delta.ark", 10, 40, "host");
}
END_TEST
/* One host thread: the queue drains in order with the device ahead. */
START_TEST(retry_host_one_thread) {
  kio_setting_override(KIO_SET_DEV_RETRY_THREADS, "1");
  check_retry("mono", "ark:noisy/delta.ark", 3, 8, "host");
  kio_setting_override(KIO_SET_DEV_RETRY_THREADS, NULL);
}
END_TEST

/* ---- margin mode: bands on the device decoder ---- */
/* mono graphs, the re-estimated mono model's likelihoods (kaldi/mono/
 * est.mdl), bands of margin 5 around the old model's alignment: the device
 * results equal the CPU's bit for bit, and the band changes some of them
 * (so the device really decodes inside it). */
START_TEST(margin_bands) {
  fixture fx;
  fx_load(&fx, "mono", "ark:feats/delta.ark", "mono", 0);
  kio_tmodel tm2;
  memset(&tm2, 0, sizeof tm2);
  kio_am_gmm am2;
  memset(&am2, 0, sizeof am2);
  ck_assert_int_eq(kio_model_read("kaldi/mono/est.mdl", &tm2, &am2), KIO_OK);
  galign_gmm_free(&fx.gmm);
  ck_assert_int_eq(galign_gmm_init(&fx.gmm, &am2), KIO_OK);
  galign_result *full = cpu_align_all(&fx, 0);
  galign_prior_table *pt = NULL;
  ck_assert_int_eq(galign_prior_table_read(&pt, "ark:kaldi/mono/ali.ark"), KIO_OK);
  for (int i = 0; i < fx.n; i++) {
    const kio_int_vec *v = galign_prior_table_get(pt, fx.keys[i]);
    ck_assert_ptr_nonnull(v);
    ck_assert_int_eq(galign_band_build(&fx.graphs[i], v->v, v->n, fx.feats[i].rows, 5),
                     GALIGN_BAND_OK);
  }
  galign_result *ref = cpu_align_all(&fx, 1);
  int moved = 0;
  for (int i = 0; i < fx.n; i++)
    if (ref[i].ok && full[i].ok &&
        memcmp(ref[i].ali, full[i].ali, sizeof(int32_t) * (size_t)ref[i].num_frames))
      moved++;
  ck_assert_int_gt(moved, 0);
  galign_cuda *c = new_cuda(&fx);
  galign_result *got = calloc(fx.n, sizeof *got);
  uint8_t *redo = calloc(fx.n, 1);
  int nr = -1;
  ck_assert_int_eq(galign_cuda_align_batch(c, fx.n, fx.gp, fx.fp, 1, got, redo, &nr), KIO_OK);
  ck_assert_int_eq(nr, 0);
  assert_same(&fx, got, ref, 1, "margin 5");
  printf("margin 5 on the device: %d utts identical to the CPU; %d moved by the band\n", fx.n,
         moved);
  free(redo);
  free_results(got, fx.n);
  free_results(ref, fx.n);
  free_results(full, fx.n);
  galign_prior_table_free(pt);
  galign_cuda_free(c);
  kio_tmodel_free(&tm2);
  kio_am_gmm_free(&am2);
  fx_free(&fx);
}
END_TEST

/* ---- the whole GPU path vs the CPU path (and Kaldi) ---- */
static int read_kaldi_ali(const char *rspec, const char *key, int32_t **v) {
  kio_ra_reader *r = NULL;
  if (kio_ra_open(&r, rspec, &kio_int_vec_holder) != KIO_OK) return -1;
  int n = -1;
  if (kio_ra_has_key(r, key)) {
    const kio_int_vec *a = kio_ra_value(r, key);
    n = a->n;
    *v = malloc(sizeof(int32_t) * (n ? n : 1));
    memcpy(*v, a->v, sizeof(int32_t) * n);
  }
  kio_ra_close(r);
  return n;
}

static void check_full(const char *model, const char *feats, const char *graphs,
                       const char *kaldi_ali) {
  fixture fx;
  fx_load(&fx, model, feats, graphs, 0);
  galign_result *ref = cpu_align_all(&fx, 0);
  galign_cuda *c = new_cuda(&fx);
  galign_result *got = calloc(fx.n, sizeof *got);
  uint8_t *redo = calloc(fx.n, 1);
  int nr = -1;
  /* warm-up (cuBLAS kernels load lazily), then timed */
  ck_assert_int_eq(galign_cuda_align_batch(c, fx.n, fx.gp, fx.fp, 0, got, redo, &nr), KIO_OK);
  double t0 = now_s();
  ck_assert_int_eq(galign_cuda_align_batch(c, fx.n, fx.gp, fx.fp, 0, got, redo, &nr), KIO_OK);
  double t1 = now_s();
  ck_assert_int_eq(nr, 0);
  int64_t frames = 0, same = 0, kaldi_frames = 0, kaldi_same = 0;
  int diff_utts = 0, like_ident = 0;
  for (int i = 0; i < fx.n; i++) {
    ck_assert_msg(got[i].ok == ref[i].ok, "%s: ok %d vs CPU %d", fx.keys[i], got[i].ok, ref[i].ok);
    ck_assert_msg(got[i].retried == ref[i].retried, "%s: retried %d vs CPU %d", fx.keys[i],
                  got[i].retried, ref[i].retried);
    if (!ref[i].ok) continue;
    int32_t T = ref[i].num_frames, d = 0;
    for (int32_t t = 0; t < T; t++) d += got[i].ali[t] != ref[i].ali[t];
    frames += T;
    same += T - d;
    /* Likelihood rounding (cuBLAS vs CPU order) moves totals by ~1e-6. */
    double tol = 1e-4 * fmax(1.0, fabs(ref[i].like));
    like_ident += memcmp(&got[i].like, &ref[i].like, sizeof(float)) == 0;
    if (d) {
      diff_utts++;
      printf("%s %s: %d of %d frames differ; like GPU %.7g CPU %.7g\n", model, fx.keys[i], d, T,
             got[i].like, ref[i].like);
    }
    ck_assert_msg(fabs(got[i].like - ref[i].like) <= tol, "%s: like GPU %.9g CPU %.9g",
                  fx.keys[i], got[i].like, ref[i].like);
    int32_t *ka = NULL;
    int kn = read_kaldi_ali(kaldi_ali, fx.keys[i], &ka);
    if (kn == T) {
      kaldi_frames += T;
      for (int32_t t = 0; t < T; t++) kaldi_same += got[i].ali[t] == ka[t];
    }
    free(ka);
  }
  double secs = t1 - t0;
  printf("%s full GPU path: %lld frames in %.4f s (%.0fx real time at 100 frames/s); "
         "%d utts differ from the CPU, %.5f%% frames same, %d likes bit-identical; "
         "vs Kaldi %.5f%% of %lld frames\n",
         model, (long long)fx.frames, secs, secs > 0 ? fx.frames / 100.0 / secs : 0.0, diff_utts,
         frames ? 100.0 * same / frames : 100.0, like_ident,
         kaldi_frames ? 100.0 * kaldi_same / kaldi_frames : 0.0, (long long)kaldi_frames);
  ck_assert_msg(same * 1000 >= frames * 999, "only %lld of %lld frames agree", (long long)same,
                (long long)frames);
  ck_assert_msg(kaldi_same * 1000 >= kaldi_frames * 999, "only %lld of %lld frames agree with Kaldi",
                (long long)kaldi_same, (long long)kaldi_frames);

  /* Sub-batches of ~1000 frames give the same answers as one batch. */
  galign_result *sub = calloc(fx.n, sizeof *sub);
  kio_setting_override(KIO_SET_DEV_BATCH_FRAMES, "1000");
  ck_assert_int_eq(galign_cuda_align_batch(c, fx.n, fx.gp, fx.fp, 0, sub, redo, &nr), KIO_OK);
  kio_setting_override(KIO_SET_DEV_BATCH_FRAMES, NULL);
  ck_assert_int_eq(nr, 0);
  int64_t sub_same = 0;
  for (int i = 0; i < fx.n; i++) {
    ck_assert_int_eq(sub[i].ok, got[i].ok);
    if (!got[i].ok) continue;
    for (int32_t t = 0; t < got[i].num_frames; t++) sub_same += sub[i].ali[t] == got[i].ali[t];
  }
  ck_assert_msg(sub_same * 1000 >= frames * 999, "sub-batches: %lld of %lld frames",
                (long long)sub_same, (long long)frames);
  free_results(sub, fx.n);
  free(redo);
  free_results(got, fx.n);
  free_results(ref, fx.n);
  galign_cuda_free(c);
  fx_free(&fx);
}

START_TEST(full_mono) {
  check_full("mono", "ark:feats/delta.ark", "mono", "ark:kaldi/mono/ali.ark");
}
END_TEST
START_TEST(full_mono4) {
  check_full("mono4", "ark:feats/delta4.ark", "mono", "ark:kaldi/mono4/ali.ark");
}
END_TEST
START_TEST(full_mono8) {
  check_full("mono8", "ark:feats/delta8.ark", "mono", "ark:kaldi/mono8/ali.ark");
}
END_TEST
START_TEST(full_tri1) {
  check_full("tri1", "ark:feats/delta.ark", "tri1", "ark:kaldi/tri1/ali.ark");
}
END_TEST
START_TEST(full_tri2) {
  check_full("tri2", "ark:feats/lda.ark", "tri2", "ark:kaldi/tri2/ali.ark");
}
END_TEST
START_TEST(full_noisy_mono) {
  check_full("mono", "ark:noisy/delta.ark", "mono", "ark:noisy/mono.ali.ark");
}
END_TEST
/* Edge cases (wrong transcript, 8-frame failure, missing/zero-length
 * features) and one 89-second utterance. */
START_TEST(full_edge) {
  check_full("mono", "ark:edge/feats.ark", "edge/mono.fsts.gz", "ark:edge/ali.ark");
}
END_TEST
START_TEST(full_long) {
  check_full("mono", "ark:edge/long.ark", "edge/long.fsts.gz", "ark,t:edge/long.ali.txt");
}
END_TEST
START_TEST(full_tri2_gemm) {
  kio_setting_override(KIO_SET_DEV_LIKELIHOODS, "gemm");
  check_full("tri2", "ark:feats/lda.ark", "tri2", "ark:kaldi/tri2/ali.ark");
  kio_setting_override(KIO_SET_DEV_LIKELIHOODS, NULL);
}
END_TEST

/* Through the dispatcher: --use-gpu=yes equals --use-gpu=no on tri2. */
START_TEST(aligner_gpu_vs_cpu) {
  fixture fx;
  fx_load(&fx, "tri2", "ark:feats/lda.ark", "tri2", 0);
  galign_aligner *ag = NULL, *ac = NULL;
  ck_assert_int_eq(galign_aligner_new(&ag, GALIGN_GPU_YES, &fx.tm, &fx.am, &fx.o), KIO_OK);
  ck_assert(galign_aligner_is_gpu(ag));
  ck_assert_int_eq(galign_aligner_new(&ac, GALIGN_GPU_NO, &fx.tm, &fx.am, &fx.o), KIO_OK);
  galign_result *rg = calloc(fx.n, sizeof *rg), *rc = calloc(fx.n, sizeof *rc);
  ck_assert_int_eq(galign_align_batch(ag, fx.n, fx.gp, fx.fp, 1, rg), KIO_OK);
  ck_assert_int_eq(galign_align_batch(ac, fx.n, fx.gp, fx.fp, 1, rc), KIO_OK);
  int64_t frames = 0, same = 0;
  for (int i = 0; i < fx.n; i++) {
    ck_assert_int_eq(rg[i].ok, rc[i].ok);
    if (!rc[i].ok) continue;
    frames += rc[i].num_frames;
    for (int32_t t = 0; t < rc[i].num_frames; t++) same += rg[i].ali[t] == rc[i].ali[t];
    for (int32_t t = 0; t < rc[i].num_frames; t++)
      /* per-frame values carry the likelihood rounding (see ll_scale) */
      ck_assert_msg(fabs(rg[i].per_frame[t] - rc[i].per_frame[t]) <=
                        1e-2 + 1e-5 * fabs(rc[i].per_frame[t]) || rg[i].ali[t] != rc[i].ali[t],
                    "%s frame %d: per-frame %.7g vs %.7g", fx.keys[i], t, rg[i].per_frame[t],
                    rc[i].per_frame[t]);
  }
  ck_assert_msg(same * 1000 >= frames * 999, "%lld of %lld", (long long)same, (long long)frames);
  free_results(rg, fx.n);
  free_results(rc, fx.n);
  galign_aligner_free(ag);
  galign_aligner_free(ac);
  fx_free(&fx);
}
END_TEST

/* ---- bad input ---- */
static void quiet(int level, const char *func, const char *file, int line, const char *msg,
                  void *user) {
  (void)level; (void)func; (void)file; (void)line; (void)msg; (void)user;
}

START_TEST(bad_input) {
  fixture fx;
  fx_load(&fx, "mono", "ark:feats/delta.ark", "mono", 0);
  galign_cuda *c = new_cuda(&fx);
  kio_log_set_handler(quiet, NULL);
  /* dim mismatch */
  kio_matrix bad = {0}, out = {0};
  ck_assert_int_eq(kio_matrix_resize(&bad, 5, fx.gmm.dim + 1), KIO_OK);
  int e0 = kio_log_num_errors();
  ck_assert_int_eq(galign_cuda_loglikes(c, fx.gp[0], &bad, &out), KIO_ERR);
  ck_assert_int_eq(kio_log_num_errors(), e0 + 1);
  /* a NaN feature: the test entry fails; the batch hands the utterance back */
  kio_matrix nanf = {0};
  ck_assert_int_eq(kio_matrix_resize(&nanf, fx.feats[1].rows, fx.feats[1].cols), KIO_OK);
  memcpy(nanf.data, fx.feats[1].data, sizeof(float) * nanf.rows * nanf.cols);
  nanf.data[3 * nanf.cols + 2] = NAN;
  ck_assert_int_eq(galign_cuda_loglikes(c, fx.gp[1], &nanf, &out), KIO_ERR);
  const kio_matrix *fs[3] = {fx.fp[0], &nanf, fx.fp[2]};
  const galign_graph *gs[3] = {fx.gp[0], fx.gp[1], fx.gp[2]};
  galign_result r[3];
  memset(r, 0, sizeof r);
  uint8_t redo[3];
  int nr = -1;
  ck_assert_int_eq(galign_cuda_align_batch(c, 3, gs, fs, 0, r, redo, &nr), KIO_OK);
  ck_assert_int_eq(nr, 1);
  ck_assert(!redo[0] && redo[1] && !redo[2]);
  ck_assert(r[0].ok && !r[1].ok && r[2].ok);
  /* zero-length features: not aligned, not handed back */
  kio_matrix empty = {0};
  ck_assert_int_eq(kio_matrix_resize(&empty, 0, fx.gmm.dim), KIO_OK);
  fs[1] = &empty;
  ck_assert_int_eq(galign_cuda_align_batch(c, 3, gs, fs, 0, r, redo, &nr), KIO_OK);
  ck_assert_int_eq(nr, 0);
  ck_assert(r[0].ok && !r[1].ok && r[2].ok);
  ck_assert_int_eq(r[1].num_frames, 0);
  /* the object still works after the failures */
  ck_assert_int_eq(galign_cuda_loglikes(c, fx.gp[0], fx.fp[0], &out), KIO_OK);
  kio_log_set_handler(NULL, NULL);
  for (int i = 0; i < 3; i++) galign_result_free(&r[i]);
  kio_matrix_free(&bad); kio_matrix_free(&nanf); kio_matrix_free(&empty); kio_matrix_free(&out);
  galign_cuda_free(c);
  fx_free(&fx);
}
END_TEST

/* ---- long utterances: the host decoder on device likelihoods in chunks ---- */
/* The chunk source against the CPU path on every fixture utterance, with
 * chunks of `chunk` frames (NULL: the default, one chunk per utterance
 * here): bit-identical alignments, totals, per-frame values and retry
 * decisions. 100 frames: many chunks per utterance, a partial 128-frame
 * tile in each, the retry pass fetching chunks again from frame 0. */
static void check_chunks(const char *model, const char *feats, const char *chunk) {
  fixture fx;
  fx_load(&fx, model, feats, model, 0);
  galign_result *ref = cpu_align_all(&fx, 1);
  galign_cuda *c = new_cuda(&fx);
  ck_assert(galign_cuda_chunks_usable(c));
  if (chunk) kio_setting_override(KIO_SET_DEV_CHUNK_FRAMES, chunk);
  galign_cuda_chunks *k = NULL;
  ck_assert_int_eq(galign_cuda_chunks_new(c, &k), KIO_OK);
  galign_cpu_ws *w = galign_cpu_ws_new();
  galign_result *got = calloc(fx.n, sizeof *got);
  char err[256];
  int retried = 0;
  for (int i = 0; i < fx.n; i++) {
    ck_assert_msg(galign_cpu_align_src(w, &fx.gmm, fx.gp[i], fx.fp[i], &fx.o, 1,
                                       galign_cuda_chunks_source(k), &got[i], err,
                                       sizeof err) == KIO_OK, "%s: %s", fx.keys[i], err);
    retried += got[i].retried;
  }
  kio_setting_override(KIO_SET_DEV_CHUNK_FRAMES, NULL);
  assert_same(&fx, ref, got, 1, "chunks");
  int64_t nch;
  size_t peak;
  galign_cuda_chunks_stats(k, &nch, &peak);
  printf("%s chunks of %s frames: %d utts (%lld frames, %d retried) identical to the CPU; "
         "%lld chunks, device buffers %.2f MB\n", model, chunk ? chunk : "default", fx.n,
         (long long)fx.frames, retried, (long long)nch, peak / 1048576.0);
  ck_assert_int_ge(nch, fx.n);
  galign_cpu_ws_free(w);
  free_results(got, fx.n);
  free_results(ref, fx.n);
  galign_cuda_chunks_free(k);
  galign_cuda_free(c);
  fx_free(&fx);
}

START_TEST(chunks_tri1) { check_chunks("tri1", "ark:feats/delta.ark", "100"); }
END_TEST
START_TEST(chunks_tri2) { check_chunks("tri2", "ark:feats/lda.ark", NULL); }
END_TEST
START_TEST(chunks_noisy_tri1) {
  /* noisy: retries and failures */
  check_chunks("tri1", "ark:noisy/delta.ark", "256");
}
END_TEST

/* Through the dispatcher (--use-gpu=yes): utterances over
 * KALDI_GPU_DEV_LONG_FRAMES take the chunked path on worker threads beside the
 * device batch; they equal the CPU path bit for bit, the others as in
 * aligner_gpu_vs_cpu. A NaN feature in a long utterance fails the batch with
 * the CPU path's error, as Kaldi's lazy decodable would. */
START_TEST(aligner_long) {
  fixture fx;
  fx_load(&fx, "tri1", "ark:feats/delta.ark", "tri1", 0);
  kio_setting_override(KIO_SET_DEV_LONG_FRAMES, "300");
  kio_setting_override(KIO_SET_DEV_CHUNK_FRAMES, "128");
  kio_setting_override(KIO_SET_CPU_THREADS, "3");
  galign_aligner *ag = NULL, *ac = NULL;
  ck_assert_int_eq(galign_aligner_new(&ag, GALIGN_GPU_YES, &fx.tm, &fx.am, &fx.o), KIO_OK);
  ck_assert(galign_aligner_is_gpu(ag));
  ck_assert_int_eq(galign_aligner_new(&ac, GALIGN_GPU_NO, &fx.tm, &fx.am, &fx.o), KIO_OK);
  galign_result *rg = calloc(fx.n, sizeof *rg), *rc = calloc(fx.n, sizeof *rc);
  ck_assert_int_eq(galign_align_batch(ag, fx.n, fx.gp, fx.fp, 1, rg), KIO_OK);
  ck_assert_int_eq(galign_align_batch(ac, fx.n, fx.gp, fx.fp, 1, rc), KIO_OK);
  int nlong = 0;
  for (int i = 0; i < fx.n; i++) {
    ck_assert_int_eq(rg[i].ok, rc[i].ok);
    ck_assert_int_eq(rg[i].retried, rc[i].retried);
    if (fx.feats[i].rows <= 300 || !rc[i].ok) continue;
    nlong++;
    ck_assert_msg(!memcmp(rg[i].ali, rc[i].ali, sizeof(int32_t) * rc[i].num_frames) &&
                      !memcmp(&rg[i].like, &rc[i].like, sizeof(float)) &&
                      !memcmp(rg[i].per_frame, rc[i].per_frame, sizeof(float) * rc[i].num_frames),
                  "%s: chunked path differs from the CPU", fx.keys[i]);
  }
  ck_assert_int_gt(nlong, 5);
  /* a NaN in a long utterance's features: the CPU path's error */
  int bad = -1;
  for (int i = 0; i < fx.n && bad < 0; i++)
    if (fx.feats[i].rows > 300 && rc[i].ok) bad = i;
  ck_assert_int_ge(bad, 0);
  fx.feats[bad].data[5 * fx.feats[bad].cols + 1] = NAN;
  kio_log_set_handler(quiet, NULL);
  int e0 = kio_log_num_errors();
  ck_assert_int_eq(galign_align_batch(ag, fx.n, fx.gp, fx.fp, 0, rg), KIO_ERR);
  ck_assert_int_eq(kio_log_num_errors(), e0 + 1);
  ck_assert_int_eq(galign_align_batch(ac, fx.n, fx.gp, fx.fp, 0, rc), KIO_ERR);
  kio_log_set_handler(NULL, NULL);
  printf("aligner: %d long utterances of %d on the chunked path identical to the CPU\n", nlong,
         fx.n);
  kio_setting_override(KIO_SET_DEV_LONG_FRAMES, NULL);
  kio_setting_override(KIO_SET_DEV_CHUNK_FRAMES, NULL);
  kio_setting_override(KIO_SET_CPU_THREADS, NULL);
  free_results(rg, fx.n);
  free_results(rc, fx.n);
  galign_aligner_free(ag);
  galign_aligner_free(ac);
  fx_free(&fx);
}
END_TEST

/* ---- throughput (only with KIO_GPU_BENCH=R: each fixture's utterances
 * repeated R times in one batch; host I/O not included) ---- */
static void bench_model(const char *model, const char *feats, int R) {
  fixture fx;
  fx_load(&fx, model, feats, model, 0);
  int n = fx.n * R;
  const galign_graph **gp = malloc(sizeof(*gp) * n);
  const kio_matrix **fp = malloc(sizeof(*fp) * n);
  for (int i = 0; i < n; i++) {
    gp[i] = fx.gp[i % fx.n];
    fp[i] = fx.fp[i % fx.n];
  }
  galign_cuda *c = new_cuda(&fx);
  galign_result *r = calloc(n, sizeof *r);
  uint8_t *redo = calloc(n, 1);
  int nr = 0;
  ck_assert_int_eq(galign_cuda_align_batch(c, fx.n, gp, fp, 0, r, redo, &nr), KIO_OK); /* warm-up */
  double ll0, dec0, w0, ll1, dec1, w1;
  galign_cuda_times(c, &ll0, &dec0, &w0, NULL);
  ck_assert_int_eq(galign_cuda_align_batch(c, n, gp, fp, 0, r, redo, &nr), KIO_OK);
  galign_cuda_times(c, &ll1, &dec1, &w1, NULL);
  int64_t fr, tk, rd, bad, rg;
  int32_t mx;
  galign_cuda_stats(c, &fr, &tk, &mx, &rd, &bad, &rg);
  double frames = (double)fx.frames * R, wall = w1 - w0;
  printf("BENCH %s: %d utts, %.0f frames (%.1f h): wall %.3f s = %.0fx real time; device: "
         "likelihoods %.3f s, decoder %.3f s; %d CPU redo, %lld regrown, %.1f tokens/frame\n",
         model, n, frames, frames / 360000.0, wall, frames / 100.0 / wall, ll1 - ll0, dec1 - dec0,
         nr, (long long)rg, fr ? (double)tk / fr : 0.0);
  for (int i = 0; i < n; i++) galign_result_free(&r[i]);
  free(r); free(redo); free(gp); free(fp);
  galign_cuda_free(c);
  fx_free(&fx);
}

START_TEST(bench) {
  const char *e = getenv("KIO_GPU_BENCH");
  int R = e ? atoi(e) : 0;
  if (R <= 0) return;
  bench_model("mono", "ark:feats/delta.ark", R);
  bench_model("tri2", "ark:feats/lda.ark", R);
}
END_TEST

static Suite *gpu_align_suite(void) {
  Suite *s = suite_create("gpu_align");
  TCase *t = tcase_create("loglikes");
  tcase_set_timeout(t, 600);
  tcase_add_test(t, loglikes_mono);
  tcase_add_test(t, loglikes_mono4);
  tcase_add_test(t, loglikes_mono8);
  tcase_add_test(t, loglikes_tri2);
  tcase_add_test(t, loglikes_tri2_gemm);
  tcase_add_loop_test(t, profiles, 0, KIO_BLAS_NPROF);
  suite_add_tcase(s, t);
  t = tcase_create("decoder");
  tcase_set_timeout(t, 600);
  tcase_add_test(t, decoder_mono);
  tcase_add_test(t, decoder_tri1);
  tcase_add_test(t, decoder_tri2);
  tcase_add_test(t, decoder_noisy_mono);
  tcase_add_test(t, decoder_noisy_tri1);
  tcase_add_test(t, decoder_mono_careful);
  tcase_add_test(t, decoder_regrow);
  suite_add_tcase(s, t);
  t = tcase_create("retry");
  tcase_set_timeout(t, 600);
  tcase_add_test(t, retry_host_noisy_mono);
  tcase_add_test(t, retry_device_noisy_mono);
  tcase_add_test(t, retry_host_small_beams);
  tcase_add_test(t, retry_device_small_beams);
  tcase_add_test(t, retry_host_noisy_tri1);
  tcase_add_test(t, retry_host_one_thread);
  suite_add_tcase(s, t);
  t = tcase_create("margin");
  tcase_set_timeout(t, 600);
  tcase_add_test(t, margin_bands);
  suite_add_tcase(s, t);
  t = tcase_create("full");
  tcase_set_timeout(t, 600);
  tcase_add_test(t, full_mono);
  tcase_add_test(t, full_mono4);
  tcase_add_test(t, full_mono8);
  tcase_add_test(t, full_tri1);
  tcase_add_test(t, full_tri2);
  tcase_add_test(t, full_noisy_mono);
  tcase_add_test(t, full_edge);
  tcase_add_test(t, full_long);
  tcase_add_test(t, full_tri2_gemm);
  tcase_add_test(t, aligner_gpu_vs_cpu);
  tcase_add_test(t, bad_input);
  suite_add_tcase(s, t);
  t = tcase_create("long");
  tcase_set_timeout(t, 600);
  tcase_add_test(t, chunks_tri1);
  tcase_add_test(t, chunks_tri2);
  tcase_add_test(t, chunks_noisy_tri1);
  tcase_add_test(t, aligner_long);
  suite_add_tcase(s, t);
  t = tcase_create("bench");
  tcase_set_timeout(t, 600);
  tcase_add_test(t, bench);
  suite_add_tcase(s, t);
  return s;
}

int main(void) {
  /* Probes in a child: CUDA is never initialised in this (forking) parent. */
  if (!tu_gpu_available()) exit(TU_EXIT_SKIP);
  return tu_run_suite(gpu_align_suite());
}
