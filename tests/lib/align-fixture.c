/* The aligner's device-test fixtures (align-fixture.h). */
#include "tests/lib/align-fixture.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/io/table.h"
#include "base/sys/log.h"
#include "device/gpu.h"

/* Model M, features F (an rspecifier), graphs G (a .fsts.gz path, or a
 * model name for graphs/G.fsts.gz); Kaldi's options of the fixtures (scales
 * 1.0 / 0.1 / 0.1, beam 10, retry 40). */
void fx_load(fixture *fx, const char *model, const char *feats, const char *graphs,
             int careful) {
  memset(fx, 0, sizeof *fx);
  char path[512];
  snprintf(path, sizeof path, "models/%s/final.mdl", model);
  ck_assert_int_eq(kio_model_read(path, &fx->tm, &fx->am), KIO_OK);
  ck_assert_int_eq(galign_gmm_init(&fx->gmm, &fx->am), KIO_OK);
  galign_opts_default(&fx->o);
  fx->o.transition_scale = 1.0f;
  fx->o.acoustic_scale = 0.1f;
  fx->o.self_loop_scale = 0.1f;
  fx->o.beam = 10.0f;
  fx->o.retry_beam = 40.0f;
  fx->o.careful = careful;
  kio_ra_reader *fr = NULL;
  kio_seq_reader *gr = NULL;
  ck_assert_int_eq(kio_ra_open(&fr, feats, &kio_matrix_holder), KIO_OK);
  if (strchr(graphs, '/'))
    snprintf(path, sizeof path, "ark:gunzip -c %s|", graphs);
  else
    snprintf(path, sizeof path, "ark:gunzip -c graphs/%s.fsts.gz|", graphs);
  ck_assert_int_eq(kio_seq_open(&gr, path, &kio_fst_holder), KIO_OK);
  int cap = 0;
  for (; !kio_seq_done(gr); kio_seq_next(gr)) {
    const char *key = kio_seq_key(gr);
    /* as the program: no features, or zero-length ones, never reach the aligner */
    if (!kio_ra_has_key(fr, key)) continue;
    const kio_matrix *m0 = kio_ra_value(fr, key);
    ck_assert(m0);
    if (m0->rows == 0) continue;
    if (fx->n == cap) {
      cap = cap ? 2 * cap : 64;
      fx->keys = realloc(fx->keys, sizeof(char *) * cap);
      fx->graphs = realloc(fx->graphs, sizeof(galign_graph) * cap);
      fx->feats = realloc(fx->feats, sizeof(kio_matrix) * cap);
      ck_assert(fx->keys && fx->graphs && fx->feats);
    }
    const kio_fst *f = kio_seq_value(gr);
    const kio_matrix *m = kio_ra_value(fr, key);
    ck_assert(f && m);
    int i = fx->n++;
    fx->keys[i] = strdup(key);
    memset(&fx->graphs[i], 0, sizeof(galign_graph));
    memset(&fx->feats[i], 0, sizeof(kio_matrix));
    ck_assert_int_eq(galign_graph_prepare(f, &fx->tm, &fx->o, &fx->graphs[i]), KIO_OK);
    ck_assert_int_eq(kio_matrix_resize(&fx->feats[i], m->rows, m->cols), KIO_OK);
    memcpy(fx->feats[i].data, m->data, sizeof(float) * (size_t)m->rows * m->cols);
    fx->frames += m->rows;
  }
  kio_seq_close(gr);
  kio_ra_close(fr);
  ck_assert_int_gt(fx->n, 0);
  fx->gp = malloc(sizeof(*fx->gp) * fx->n);
  fx->fp = malloc(sizeof(*fx->fp) * fx->n);
  for (int i = 0; i < fx->n; i++) {
    fx->gp[i] = &fx->graphs[i];
    fx->fp[i] = &fx->feats[i];
  }
}

void fx_free(fixture *fx) {
  for (int i = 0; i < fx->n; i++) {
    free(fx->keys[i]);
    galign_graph_free(&fx->graphs[i]);
    kio_matrix_free(&fx->feats[i]);
  }
  free(fx->keys); free(fx->graphs); free(fx->feats); free(fx->gp); free(fx->fp);
  galign_gmm_free(&fx->gmm);
  kio_am_gmm_free(&fx->am);
  kio_tmodel_free(&fx->tm);
}

galign_cuda *new_cuda(const fixture *fx) {
  galign_cuda *c = NULL;
  kio_gpu *g = NULL;
  ck_assert_int_eq(kio_gpu_job(&g, 0), KIO_OK);
  ck_assert_int_eq(galign_cuda_new(&c, g, GALIGN_GPU_YES, &fx->gmm, &fx->o), KIO_OK);
  return c;
}

double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* CPU path, one utterance at a time (the reference). */
galign_result *cpu_align_all(const fixture *fx, int want_pf) {
  galign_result *r = calloc(fx->n, sizeof *r);
  galign_cpu_ws *w = galign_cpu_ws_new();
  char err[256];
  for (int i = 0; i < fx->n; i++)
    ck_assert_msg(galign_cpu_align_one(w, &fx->gmm, fx->gp[i], fx->fp[i], &fx->o, want_pf, &r[i],
                                       err, sizeof err) == KIO_OK, "%s: %s", fx->keys[i], err);
  galign_cpu_ws_free(w);
  return r;
}

void free_results(galign_result *r, int n) {
  for (int i = 0; i < n; i++) galign_result_free(&r[i]);
  free(r);
}

/* Bit-identical results (alignment, like, score, flags, per-frame). */
void assert_same(const fixture *fx, const galign_result *a, const galign_result *b, int pf,
                 const char *what) {
  for (int i = 0; i < fx->n; i++) {
    const char *k = fx->keys[i];
    ck_assert_msg(a[i].ok == b[i].ok, "%s %s: ok %d vs %d", what, k, a[i].ok, b[i].ok);
    ck_assert_msg(a[i].retried == b[i].retried, "%s %s: retried %d vs %d", what, k,
                  a[i].retried, b[i].retried);
    ck_assert_int_eq(a[i].num_frames, b[i].num_frames);
    if (!a[i].ok) continue;
    ck_assert_msg(!memcmp(a[i].ali, b[i].ali, sizeof(int32_t) * a[i].num_frames),
                  "%s %s: alignments differ", what, k);
    ck_assert_msg(memcmp(&a[i].like, &b[i].like, sizeof(float)) == 0, "%s %s: like %.9g vs %.9g",
                  what, k, a[i].like, b[i].like);
    ck_assert_msg(memcmp(&a[i].score, &b[i].score, sizeof(float)) == 0,
                  "%s %s: score %.9g vs %.9g", what, k, a[i].score, b[i].score);
    if (pf)
      ck_assert_msg(!memcmp(a[i].per_frame, b[i].per_frame, sizeof(float) * a[i].num_frames),
                    "%s %s: per-frame log-likelihoods differ", what, k);
  }
}