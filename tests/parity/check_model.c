/* TransitionModel / HmmTopology / AmDiagGmm against Kaldi's own files:
 * binary and text forms of the same model, byte-exact rewrite, derived
 * quantities, gconsts, and bad input. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/io/io.h"
#include "base/sys/log.h"
#include "base/model/model.h"
#include "tests/lib/test-util.h"

/* Captures log lines so tests can check an ERROR names the file. */
static char g_last_err[4096];
static int g_nerr;
static void capture(int level, const char *func, const char *file, int line,
                    const char *msg, void *user) {
  (void)func; (void)file; (void)line; (void)user;
  if (level == KIO_LOG_ERROR) {
    g_nerr++;
    snprintf(g_last_err, sizeof g_last_err, "%s", msg);
  }
}

static int rel_close(float a, float b, double tol) {
  if (a == b) return 1;
  double d = fabs((double)a - (double)b), m = fmax(fabs(a), fabs(b));
  return d <= tol * m || d < 1e-30;
}

static void check_topo_equal(const kio_topology *a, const kio_topology *b) {
  ck_assert_int_eq(a->num_phones, b->num_phones);
  ck_assert_int_eq(a->num_phone2idx, b->num_phone2idx);
  ck_assert_int_eq(a->num_entries, b->num_entries);
  ck_assert(!memcmp(a->phones, b->phones, sizeof(int32_t) * a->num_phones));
  ck_assert(!memcmp(a->phone2idx, b->phone2idx, sizeof(int32_t) * a->num_phone2idx));
  for (int32_t i = 0; i < a->num_entries; i++) {
    const kio_topo_entry *x = &a->entries[i], *y = &b->entries[i];
    ck_assert_int_eq(x->num_states, y->num_states);
    for (int32_t j = 0; j < x->num_states; j++) {
      ck_assert_int_eq(x->states[j].forward_pdf_class, y->states[j].forward_pdf_class);
      ck_assert_int_eq(x->states[j].self_loop_pdf_class, y->states[j].self_loop_pdf_class);
      ck_assert_int_eq(x->states[j].num_trans, y->states[j].num_trans);
      for (int32_t k = 0; k < x->states[j].num_trans; k++) {
        ck_assert_int_eq(x->states[j].trans[k].dest, y->states[j].trans[k].dest);
        ck_assert(rel_close(x->states[j].trans[k].prob, y->states[j].trans[k].prob, 1e-6));
      }
    }
  }
}

START_TEST(test_binary_text_same) {
  kio_tmodel tb = {0}, tt = {0};
  kio_am_gmm ab = {0}, at = {0};
  ck_assert_int_eq(kio_model_read("models/mono/final.mdl", &tb, &ab), KIO_OK);
  ck_assert_int_eq(kio_model_read("models/mono/final.txt.mdl", &tt, &at), KIO_OK);
  check_topo_equal(&tb.topo, &tt.topo);
  ck_assert_int_eq(tb.num_tuples, tt.num_tuples);
  ck_assert(!memcmp(tb.tuples, tt.tuples, sizeof(kio_tuple) * tb.num_tuples));
  ck_assert_int_eq(tb.tuples_are_triples, 1);
  ck_assert_int_eq(tt.tuples_are_triples, 1);
  ck_assert_int_eq(tb.num_tids, tt.num_tids);
  ck_assert_int_eq(tb.num_pdfs, tt.num_pdfs);
  size_t nt = (size_t)tb.num_tids + 1;
  ck_assert(!memcmp(tb.first_tid, tt.first_tid, sizeof(int32_t) * (tb.num_tuples + 2)));
  ck_assert(!memcmp(tb.tid2ts, tt.tid2ts, sizeof(int32_t) * nt));
  ck_assert(!memcmp(tb.tid2pdf, tt.tid2pdf, nt * sizeof(int32_t)));
  ck_assert(!memcmp(tb.tid_is_self_loop, tt.tid_is_self_loop, nt));
  for (size_t i = 1; i < nt; i++) ck_assert(rel_close(tb.log_probs[i], tt.log_probs[i], 1e-6));
  for (int32_t i = 1; i <= tb.num_tuples; i++)
    ck_assert(rel_close(tb.nonloop_log_prob[i], tt.nonloop_log_prob[i], 1e-5));
  ck_assert_int_eq(ab.dim, at.dim);
  ck_assert_int_eq(ab.num_pdfs, at.num_pdfs);
  for (int32_t j = 0; j < ab.num_pdfs; j++) {
    const kio_diag_gmm *x = &ab.pdfs[j], *y = &at.pdfs[j];
    ck_assert_int_eq(x->num_comp, y->num_comp);
    ck_assert_int_eq(x->dim, y->dim);
    for (int32_t m = 0; m < x->num_comp; m++) {
      ck_assert(rel_close(x->weights[m], y->weights[m], 1e-6));
      /* gconsts come from text-rounded parameters: looser */
      ck_assert(rel_close(x->gconsts[m], y->gconsts[m], 1e-4));
      for (int32_t d = 0; d < x->dim; d++) {
        size_t k = (size_t)m * x->dim + d;
        ck_assert(rel_close(x->means_invvars[k], y->means_invvars[k], 1e-6));
        ck_assert(rel_close(x->inv_vars[k], y->inv_vars[k], 1e-6));
      }
    }
  }
  kio_tmodel_free(&tb); kio_tmodel_free(&tt);
  kio_am_gmm_free(&ab); kio_am_gmm_free(&at);
  ck_assert_ptr_null(tb.tuples);
}
END_TEST

static const char *k_models[] = {"mono", "tri1", "tri2"};

START_TEST(test_binary_roundtrip) {
  char in[256];
  snprintf(in, sizeof in, "models/%s/final.mdl", k_models[_i]);
  kio_tmodel tm = {0};
  kio_am_gmm am = {0};
  ck_assert_int_eq(kio_model_read(in, &tm, &am), KIO_OK);
  ck_assert_int_eq(tm.num_pdfs, am.num_pdfs);
  const char *out = tu_tmp_path("rt.mdl");
  ck_assert_int_eq(kio_model_write(out, 1, &tm, &am), KIO_OK);
  ck_assert_msg(tu_files_equal(in, out), "%s rewritten differs", in);
  /* also through a pipe */
  char pin[300];
  snprintf(pin, sizeof pin, "cat %s |", in);
  kio_tmodel tm2 = {0};
  kio_am_gmm am2 = {0};
  ck_assert_int_eq(kio_model_read(pin, &tm2, &am2), KIO_OK);
  ck_assert_int_eq(tm2.num_tids, tm.num_tids);
  ck_assert_int_eq(am2.num_pdfs, am.num_pdfs);
  kio_tmodel_free(&tm2);
  kio_am_gmm_free(&am2);
  kio_tmodel_free(&tm);
  kio_am_gmm_free(&am);
}
END_TEST

START_TEST(test_text_write) {
  kio_tmodel tm = {0};
  kio_am_gmm am = {0};
  ck_assert_int_eq(kio_model_read("models/mono/final.mdl", &tm, &am), KIO_OK);
  const char *out = tu_tmp_path("mono.txt.mdl");
  ck_assert_int_eq(kio_model_write(out, 0, &tm, &am), KIO_OK);
  ck_assert_msg(tu_files_equal("models/mono/final.txt.mdl", out),
                "text model differs from gmm-copy --binary=false output (%s)", out);
  kio_tmodel_free(&tm);
  kio_am_gmm_free(&am);
}
END_TEST

/* Derived quantities against values read off final.txt.mdl and against the
 * topology itself. */
START_TEST(test_derived) {
  kio_tmodel tm = {0};
  ck_assert_int_eq(kio_model_read("models/mono/final.mdl", &tm, NULL), KIO_OK);
  ck_assert_int_eq(tm.num_tuples, 902);
  ck_assert_int_eq(tm.num_pdfs, 223);
  /* "1 0 0": silence phone 1 state 0 has 4 transitions, first is the loop */
  ck_assert_int_eq(tm.first_tid[1], 1);
  ck_assert_int_eq(tm.first_tid[2], 5);
  ck_assert_int_eq(kio_tid_to_pdf(&tm, 1), 0);
  ck_assert(kio_tid_is_self_loop(&tm, 1));
  ck_assert(!kio_tid_is_self_loop(&tm, 2));
  ck_assert_int_eq(kio_tid_to_phone(&tm, 3), 1);
  ck_assert_int_eq(kio_ts_self_loop(&tm, 1), 1);
  ck_assert_int_eq(kio_ts_self_loop(&tm, 2), 5); /* state 1: first trans is 1->1 */
  ck_assert(tm.log_probs[1] == -0.05294427f || fabsf(tm.log_probs[1] + 0.05294427f) < 1e-7f);
  /* last tuple "294 2 222": 3-state phone, tids loop + forward at the end */
  ck_assert_int_eq(tm.tuples[901].phone, 294);
  ck_assert_int_eq(kio_tid_to_pdf(&tm, tm.num_tids), 222);
  ck_assert_int_eq(kio_tid_to_pdf(&tm, tm.num_tids - 1), 222);
  ck_assert(kio_tid_is_self_loop(&tm, tm.num_tids - 1));
  ck_assert(!kio_tid_is_self_loop(&tm, tm.num_tids));
  /* every tid consistent with the topology */
  int32_t total = 0;
  for (int32_t ts = 1; ts <= tm.num_tuples; ts++) {
    const kio_tuple *t = &tm.tuples[ts - 1];
    const kio_topo_entry *e = &tm.topo.entries[tm.topo.phone2idx[t->phone]];
    const kio_topo_state *s = &e->states[t->hmm_state];
    ck_assert_int_eq(tm.first_tid[ts + 1] - tm.first_tid[ts], s->num_trans);
    total += s->num_trans;
    int nloops = 0;
    for (int32_t k = 0; k < s->num_trans; k++) {
      int32_t tid = tm.first_tid[ts] + k;
      int loop = s->trans[k].dest == t->hmm_state;
      nloops += loop;
      ck_assert_int_eq(kio_tid_is_self_loop(&tm, tid), loop);
      ck_assert_int_eq(kio_tid_to_ts(&tm, tid), ts);
      ck_assert_int_eq(kio_tid_to_pdf(&tm, tid), loop ? t->self_loop_pdf : t->forward_pdf);
      ck_assert_int_eq(kio_tid_to_phone(&tm, tid), t->phone);
    }
    int32_t sl = kio_ts_self_loop(&tm, ts);
    if (nloops) {
      ck_assert(sl > 0);
      float p = expf(tm.log_probs[sl]);
      ck_assert(tm.nonloop_log_prob[ts] == logf((float)(1.0 - p)));
    } else {
      ck_assert_int_eq(sl, 0);
      ck_assert(tm.nonloop_log_prob[ts] == 0.0f);
    }
  }
  ck_assert_int_eq(total, tm.num_tids);
  kio_tmodel_free(&tm);
}
END_TEST

/* Stored gconsts are ignored and recomputed; the recomputation must give
 * Kaldi's values bit for bit (the binary file holds Kaldi's own). */
START_TEST(test_gconsts) {
  kio_tmodel tm = {0};
  kio_am_gmm am = {0};
  ck_assert_int_eq(kio_model_read("models/tri1/final.mdl", &tm, &am), KIO_OK);
  /* the gconsts stored in the file by Kaldi ("<GCONSTS> FV " 04 dim floats)
   * equal ours bit for bit */
  size_t n;
  unsigned char *b = tu_read_file("models/tri1/final.mdl", &n), *p = b;
  int32_t j = 0;
  while ((p = memmem(p, n - (size_t)(p - b), "<GCONSTS> FV \x04", 14)) != NULL) {
    int32_t dim;
    memcpy(&dim, p + 14, 4);
    ck_assert_int_lt(j, am.num_pdfs);
    ck_assert_int_eq(dim, am.pdfs[j].num_comp);
    ck_assert(!memcmp(p + 18, am.pdfs[j].gconsts, sizeof(float) * dim));
    p += 18;
    j++;
  }
  ck_assert_int_eq(j, am.num_pdfs);
  free(b);
  for (int32_t j = 0; j < am.num_pdfs; j += 37) {
    kio_diag_gmm *g = &am.pdfs[j];
    float *saved = malloc(sizeof(float) * g->num_comp);
    memcpy(saved, g->gconsts, sizeof(float) * g->num_comp);
    for (int32_t m = 0; m < g->num_comp; m++) g->gconsts[m] = 12345.0f;
    ck_assert_int_eq(kio_diag_gmm_compute_gconsts(g), KIO_OK);
    ck_assert(!memcmp(saved, g->gconsts, sizeof(float) * g->num_comp));
    /* double-precision formula agrees to float precision */
    for (int32_t m = 0; m < g->num_comp; m++) {
      double gc = log((double)g->weights[m]) - 0.5 * 1.8378770664093454836 * g->dim;
      for (int32_t d = 0; d < g->dim; d++) {
        double mi = g->means_invvars[(size_t)m * g->dim + d];
        double iv = g->inv_vars[(size_t)m * g->dim + d];
        gc += 0.5 * log(iv) - 0.5 * mi * mi / iv;
      }
      ck_assert(fabs(gc - g->gconsts[m]) < 1e-3 + 1e-5 * fabs(gc));
    }
    free(saved);
  }
  kio_tmodel_free(&tm);
  kio_am_gmm_free(&am);
}
END_TEST

static void write_bytes(const char *path, const unsigned char *b, size_t n) {
  FILE *f = fopen(path, "wb");
  ck_assert_ptr_nonnull(f);
  ck_assert_uint_eq(fwrite(b, 1, n, f), n);
  fclose(f);
}

static void expect_read_error(const char *path) {
  kio_tmodel tm = {0};
  kio_am_gmm am = {0};
  g_nerr = 0;
  g_last_err[0] = 0;
  kio_log_set_handler(capture, NULL);
  int r = kio_model_read(path, &tm, &am);
  kio_log_set_handler(NULL, NULL);
  ck_assert_int_eq(r, KIO_ERR);
  ck_assert_int_ge(g_nerr, 1);
  ck_assert_msg(strstr(g_last_err, path) != NULL, "error does not name %s: %s", path, g_last_err);
  ck_assert_ptr_null(tm.tuples);
  ck_assert_ptr_null(am.pdfs);
}

START_TEST(test_truncated) {
  size_t n;
  unsigned char *b = tu_read_file(_i == 0 ? "models/mono/final.mdl" : "models/mono/final.txt.mdl", &n);
  ck_assert_ptr_nonnull(b);
  const char *p = tu_tmp_path("trunc.mdl");
  size_t cuts[] = {0, 1, 2, 10, 37, 300, 1500, 4000, 9000, n / 2, n - 20, n - 2};
  for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
    write_bytes(p, b, cuts[i]);
    expect_read_error(p);
  }
  free(b);
}
END_TEST

START_TEST(test_bad_tokens) {
  size_t n;
  unsigned char *b = tu_read_file("models/mono/final.mdl", &n);
  ck_assert_ptr_nonnull(b);
  const char *p = tu_tmp_path("bad.mdl");
  /* <TransitionModel> misspelt */
  b[3] = 'X';
  write_bytes(p, b, n);
  expect_read_error(p);
  b[3] = 'T';
  /* </Topology> misspelt, <DiagGMM> misspelt: find them */
  const char *toks[] = {"</Topology>", "<LogProbs>", "<DIMENSION>", "<DiagGMM>",
                        "<INV_VARS>", "</TransitionModel>"};
  for (size_t t = 0; t < sizeof toks / sizeof toks[0]; t++) {
    size_t L = strlen(toks[t]);
    unsigned char *hit = memmem(b, n, toks[t], L);
    ck_assert_ptr_nonnull(hit);
    hit[2] ^= 0x20;
    write_bytes(p, b, n);
    expect_read_error(p);
    hit[2] ^= 0x20;
  }
  /* a log-prob > 0 */
  unsigned char *lp = memmem(b, n, "<LogProbs> FV ", 14);
  ck_assert_ptr_nonnull(lp);
  float one = 1.0f;
  memcpy(lp + 14 + 5 + 4 + 4, &one, 4); /* 04 dim, then [0], then [1] */
  write_bytes(p, b, n);
  expect_read_error(p);
  free(b);
  /* missing file */
  expect_read_error("models/mono/no-such.mdl");
}
END_TEST

START_TEST(test_topo_text) {
  /* lang/topo is the text topology form (no \0B, no binary marker) */
  FILE *f = fopen("models/topo", "r");
  ck_assert_ptr_nonnull(f);
  kio_topology t = {0};
  ck_assert_int_eq(kio_topology_read(f, 0, &t), KIO_OK);
  fclose(f);
  kio_tmodel tm = {0};
  ck_assert_int_eq(kio_model_read("models/mono/final.mdl", &tm, NULL), KIO_OK);
  check_topo_equal(&t, &tm.topo);
  ck_assert_int_eq(t.num_entries, 2);
  ck_assert_int_eq(t.entries[1].num_states, 6);
  /* binary round trip of the topology alone */
  const char *p = tu_tmp_path("topo.bin");
  f = fopen(p, "wb");
  ck_assert_int_eq(kio_topology_write(f, 1, &t), KIO_OK);
  fclose(f);
  f = fopen(p, "rb");
  kio_topology t2 = {0};
  ck_assert_int_eq(kio_topology_read(f, 1, &t2), KIO_OK);
  fclose(f);
  check_topo_equal(&t, &t2);
  kio_topology_free(&t2);
  /* invalid: make the last state emitting */
  const char *bad = "<Topology>\n<TopologyEntry>\n<ForPhones>\n1 2\n</ForPhones>\n"
                    "<State> 0 <PdfClass> 0 <Transition> 0 0.5 <Transition> 1 0.5 </State>\n"
                    "<State> 1 <PdfClass> 1 </State>\n</TopologyEntry>\n</Topology>\n";
  f = fmemopen((void *)bad, strlen(bad), "r");
  ck_assert_int_eq(kio_topology_read(f, 0, &t2), KIO_ERR);
  fclose(f);
  /* forward/self-loop pdf-classes: written with the -1 marker, read back */
  const char *ext = "<Topology>\n<TopologyEntry>\n<ForPhones>\n1 2\n</ForPhones>\n"
                    "<State> 0 <ForwardPdfClass> 0 <SelfLoopPdfClass> 1 <Transition> 0 0.5 "
                    "<Transition> 1 0.5 </State>\n<State> 1 </State>\n</TopologyEntry>\n</Topology>\n";
  f = fmemopen((void *)ext, strlen(ext), "r");
  ck_assert_int_eq(kio_topology_read(f, 0, &t2), KIO_OK);
  fclose(f);
  ck_assert_int_eq(t2.entries[0].states[0].self_loop_pdf_class, 1);
  f = fopen(p, "wb");
  ck_assert_int_eq(kio_topology_write(f, 1, &t2), KIO_OK);
  fclose(f);
  size_t n;
  unsigned char *b = tu_read_file(p, &n);
  /* "<Topology> ", then int vectors [1 2] (13 bytes) and [-1 0 0] (17 bytes),
   * then the marker 04 ff ff ff ff */
  ck_assert(n > 50);
  ck_assert(!memcmp(b + 11 + 13 + 17, "\x04\xff\xff\xff\xff", 5));
  free(b);
  kio_topology t3 = {0};
  f = fopen(p, "rb");
  ck_assert_int_eq(kio_topology_read(f, 1, &t3), KIO_OK);
  fclose(f);
  check_topo_equal(&t2, &t3);
  kio_topology_free(&t2);
  kio_topology_free(&t3);
  kio_topology_free(&t);
  kio_tmodel_free(&tm);
}
END_TEST

/* Legacy <DiagGMMBegin>/<DiagGMMEnd>, no <GCONSTS>: gconsts computed anyway;
 * a pdf whose dimension disagrees with <DIMENSION> is an error. */
START_TEST(test_gmm_legacy) {
  const char *txt = "<DIMENSION> 2 <NUMPDFS> 1 <DiagGMMBegin> <WEIGHTS> [ 0.25 0.75 ]\n"
                    "<MEANS_INVVARS> [\n 1 2\n -1 0.5 ]\n<INV_VARS> [\n 1 4\n 2 0.5 ]\n"
                    "<DiagGMMEnd> \n";
  FILE *f = fmemopen((void *)txt, strlen(txt), "r");
  kio_am_gmm am = {0};
  ck_assert_int_eq(kio_am_gmm_read(f, 0, &am), KIO_OK);
  fclose(f);
  ck_assert_int_eq(am.num_pdfs, 1);
  ck_assert_int_eq(am.pdfs[0].num_comp, 2);
  ck_assert_int_eq(am.pdfs[0].dim, 2);
  /* component 0: log .25 - log(2pi) + .5 log 1 - .5 + .5 log 4 - .5*4/4 */
  double want = log(0.25) - 1.8378770664093454836 + 0.5 * log(4.0) - 0.5 - 0.5;
  ck_assert(fabs(am.pdfs[0].gconsts[0] - want) < 1e-5);
  /* written back: modern tokens with <GCONSTS> */
  char *buf = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&buf, &len);
  ck_assert_int_eq(kio_am_gmm_write(m, 0, &am), KIO_OK);
  fclose(m);
  ck_assert_ptr_nonnull(strstr(buf, "<DiagGMM> \n<GCONSTS>  [ "));
  ck_assert_ptr_nonnull(strstr(buf, "</DiagGMM> \n"));
  free(buf);
  kio_am_gmm_free(&am);
  const char *bad = "<DIMENSION> 3 <NUMPDFS> 1 <DiagGMM> <WEIGHTS> [ 1 ]\n"
                    "<MEANS_INVVARS> [\n 1 2 ]\n<INV_VARS> [\n 1 4 ]\n</DiagGMM> \n";
  f = fmemopen((void *)bad, strlen(bad), "r");
  ck_assert_int_eq(kio_am_gmm_read(f, 0, &am), KIO_ERR);
  fclose(f);
  ck_assert_ptr_null(am.pdfs);
}
END_TEST

int main(void) {
  Suite *s = suite_create("model");
  TCase *tc = tcase_create("model");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_binary_text_same);
  tcase_add_loop_test(tc, test_binary_roundtrip, 0, 3);
  tcase_add_test(tc, test_text_write);
  tcase_add_test(tc, test_derived);
  tcase_add_test(tc, test_gconsts);
  tcase_add_loop_test(tc, test_truncated, 0, 2);
  tcase_add_test(tc, test_bad_tokens);
  tcase_add_test(tc, test_topo_text);
  tcase_add_test(tc, test_gmm_legacy);
  suite_add_tcase(s, tc);
  return tu_run_suite(s);
}
