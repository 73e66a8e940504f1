/* ContextDependency trees against the transition models Kaldi built from
 * them: every pdf the tree computes must be one of the model's tuples. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/sys/log.h"
#include "base/model/model.h"
#include "tests/lib/test-util.h"

static const char *k_dirs[] = {"mono", "tri1", "tri2"};

static int tuple_index(const kio_tmodel *tm, int32_t phone, int32_t state, int32_t pdf) {
  int32_t lo = 0, hi = tm->num_tuples;
  while (lo < hi) { /* tuples are sorted (phone, hmm_state, forward_pdf, ...) */
    int32_t mid = (lo + hi) / 2;
    const kio_tuple *t = &tm->tuples[mid];
    int less = t->phone < phone || (t->phone == phone && (t->hmm_state < state ||
               (t->hmm_state == state && t->forward_pdf < pdf)));
    if (less) lo = mid + 1;
    else hi = mid;
  }
  if (lo < tm->num_tuples && tm->tuples[lo].phone == phone &&
      tm->tuples[lo].hmm_state == state && tm->tuples[lo].forward_pdf == pdf)
    return lo;
  return -1;
}

static const kio_topo_entry *entry_of(const kio_tmodel *tm, int32_t phone) {
  return &tm->topo.entries[tm->topo.phone2idx[phone]];
}

START_TEST(test_mono_tuples) {
  kio_ctx_dep cd = {0};
  kio_tmodel tm = {0};
  ck_assert_int_eq(kio_ctx_dep_read("models/mono/tree", &cd), KIO_OK);
  ck_assert_int_eq(kio_model_read("models/mono/final.mdl", &tm, NULL), KIO_OK);
  ck_assert_int_eq(cd.context_width, 1);
  ck_assert_int_eq(cd.central_position, 0);
  for (int32_t i = 0; i < tm.num_tuples; i++) {
    const kio_tuple *t = &tm.tuples[i];
    const kio_topo_state *s = &entry_of(&tm, t->phone)->states[t->hmm_state];
    int32_t pdf = -1;
    ck_assert(kio_ctx_dep_compute(&cd, &t->phone, s->forward_pdf_class, &pdf));
    ck_assert_int_eq(pdf, t->forward_pdf);
    ck_assert(kio_ctx_dep_compute(&cd, &t->phone, s->self_loop_pdf_class, &pdf));
    ck_assert_int_eq(pdf, t->self_loop_pdf);
  }
  /* no answer for a pdf-class the topology does not have */
  int32_t ph = 20, pdf;
  ck_assert(!kio_ctx_dep_compute(&cd, &ph, 7, &pdf));
  kio_ctx_dep_free(&cd);
  kio_tmodel_free(&tm);
}
END_TEST

/* Triphone trees: for a few centre phones, every (left, right) context over
 * all phones and "no phone" (0) gives a pdf that is a tuple of the model, and
 * together they give exactly the model's tuples for that phone. */
START_TEST(test_tri_tuples) {
  char path[256];
  kio_ctx_dep cd = {0};
  kio_tmodel tm = {0};
  snprintf(path, sizeof path, "models/%s/tree", k_dirs[_i]);
  ck_assert_int_eq(kio_ctx_dep_read(path, &cd), KIO_OK);
  snprintf(path, sizeof path, "models/%s/final.mdl", k_dirs[_i]);
  ck_assert_int_eq(kio_model_read(path, &tm, NULL), KIO_OK);
  ck_assert_int_eq(cd.context_width, 3);
  ck_assert_int_eq(cd.central_position, 1);
  const kio_topology *tp = &tm.topo;
  char *hit = calloc((size_t)tm.num_tuples, 1);
  int32_t centres[] = {1, 2, 11, 57, 120, 200, tp->phones[tp->num_phones - 1]};
  long ncomp = 0;
  for (size_t c = 0; c < sizeof centres / sizeof centres[0]; c++) {
    int32_t ctr = centres[c];
    const kio_topo_entry *e = entry_of(&tm, ctr);
    for (int32_t li = -1; li < tp->num_phones; li++) {
      for (int32_t ri = -1; ri < tp->num_phones; ri++) {
        int32_t w[3] = {li < 0 ? 0 : tp->phones[li], ctr, ri < 0 ? 0 : tp->phones[ri]};
        for (int32_t st = 0; st < e->num_states; st++) {
          int32_t pc = e->states[st].forward_pdf_class, pdf = -1;
          if (pc < 0) continue;
          /* plain checks in the hot loop: ck_assert costs a syscall each */
          if (!kio_ctx_dep_compute(&cd, w, pc, &pdf)) {
            ck_abort_msg("no pdf for %d %d %d / %d", w[0], w[1], w[2], pc);
          }
          ncomp++;
          int idx = tuple_index(&tm, ctr, st, pdf);
          if (idx < 0)
            ck_abort_msg("tree gives pdf %d for (%d %d %d) state %d: not a tuple",
                         pdf, w[0], w[1], w[2], st);
          hit[idx] = 1;
        }
      }
    }
    int missing = 0;
    for (int32_t i = 0; i < tm.num_tuples; i++)
      if (tm.tuples[i].phone == ctr && !hit[i]) missing++;
    ck_assert_msg(missing == 0, "%s: %d tuples of phone %d not produced by any context",
                  k_dirs[_i], missing, ctr);
  }
  ck_assert_int_gt(ncomp, 100000);
  free(hit);
  kio_ctx_dep_free(&cd);
  kio_tmodel_free(&tm);
}
END_TEST

static char g_err[2048];
static int g_nerr;
static void capture(int level, const char *func, const char *file, int line,
                    const char *msg, void *user) {
  (void)func; (void)file; (void)line; (void)user;
  if (level == KIO_LOG_ERROR) { g_nerr++; snprintf(g_err, sizeof g_err, "%s", msg); }
}

START_TEST(test_bad_tree) {
  size_t n;
  unsigned char *b = tu_read_file("models/tri1/tree", &n);
  ck_assert_ptr_nonnull(b);
  const char *p = tu_tmp_path("bad-tree");
  size_t cuts[] = {0, 1, 2, 5, 20, 21, 22, 40, 100, 1000, n / 3, n / 2, n - 30, n - 2};
  for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
    FILE *f = fopen(p, "wb");
    fwrite(b, 1, cuts[i], f);
    fclose(f);
    kio_ctx_dep cd = {0};
    g_nerr = 0;
    kio_log_set_handler(capture, NULL);
    int r = kio_ctx_dep_read(p, &cd);
    kio_log_set_handler(NULL, NULL);
    ck_assert_msg(r == KIO_ERR, "cut at %zu accepted", cuts[i]);
    ck_assert_int_ge(g_nerr, 1);
    ck_assert(strstr(g_err, p) != NULL);
    ck_assert_ptr_null(cd.to_pdf);
  }
  /* corrupt node letter right after ToPdf */
  unsigned char *tp = memmem(b, n, "ToPdf ", 6);
  ck_assert_ptr_nonnull(tp);
  tp[6] = 'Q';
  FILE *f = fopen(p, "wb");
  fwrite(b, 1, n, f);
  fclose(f);
  kio_ctx_dep cd = {0};
  kio_log_set_handler(capture, NULL);
  ck_assert_int_eq(kio_ctx_dep_read(p, &cd), KIO_ERR);
  kio_log_set_handler(NULL, NULL);
  free(b);
}
END_TEST

/* Text form with every node type, incl. NULL table entries and ToLength. */
START_TEST(test_text_tree) {
  const char *txt =
      "ContextDependency 3 1 ToLength CE 3 ToPdf "
      "SE 1 [ 1 2 3 ]\n{ TE -1 3 ( CE 10 NULL CE 12 ) "
      "SE 0 [ 0 ]\n{ CE 20 CE 21 } } EndContextDependency \n";
  const char *p = tu_tmp_path("tree.txt");
  FILE *f = fopen(p, "w");
  fputs(txt, f);
  fclose(f);
  kio_ctx_dep cd = {0};
  ck_assert_int_eq(kio_ctx_dep_read(p, &cd), KIO_OK);
  int32_t pdf = -1;
  int32_t w1[3] = {5, 2, 6}, w2[3] = {0, 9, 6}, w3[3] = {4, 9, 6};
  ck_assert(kio_ctx_dep_compute(&cd, w1, 0, &pdf)); ck_assert_int_eq(pdf, 10);
  ck_assert(!kio_ctx_dep_compute(&cd, w1, 1, &pdf));  /* NULL child */
  ck_assert(kio_ctx_dep_compute(&cd, w1, 2, &pdf)); ck_assert_int_eq(pdf, 12);
  ck_assert(!kio_ctx_dep_compute(&cd, w1, 3, &pdf));  /* past the table */
  ck_assert(kio_ctx_dep_compute(&cd, w2, 0, &pdf)); ck_assert_int_eq(pdf, 20);
  ck_assert(kio_ctx_dep_compute(&cd, w3, 0, &pdf)); ck_assert_int_eq(pdf, 21);
  kio_ctx_dep_free(&cd);
}
END_TEST

int main(void) {
  Suite *s = suite_create("tree");
  TCase *tc = tcase_create("tree");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_mono_tuples);
  tcase_add_loop_test(tc, test_tri_tuples, 1, 3);
  tcase_add_test(tc, test_bad_tree);
  tcase_add_test(tc, test_text_tree);
  suite_add_tcase(s, tc);
  return tu_run_suite(s);
}
