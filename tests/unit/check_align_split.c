/* The split of a batch over GPU service connections (gpu-align/align-split.h):
 * chunks by shares of the frames (equal shares: the old integer rule, each
 * chunk at least one utterance), and the balancing of the shares from when
 * each connection's replies came (late ones give frames to the one read
 * first; noise, the floor and the sum). */
#include <stdlib.h>

#include "gpu-align/align-split.h"
#include "tests/lib/test-util.h"

enum { N = 40 };
static kio_matrix mats[N];
static const kio_matrix *feats[N];

static void set_rows(const int *rows, int n) {
  for (int i = 0; i < n; i++) {
    mats[i] = (kio_matrix){rows[i], 1, NULL, 0};
    feats[i] = &mats[i];
  }
}

/* The rule the split had before shares: c's chunk ends where the frames so
 * far pass c / k of all, each chunk at least one utterance. */
static void old_starts(int n, int k, int *start) {
  int64_t total = 0, cum = 0;
  for (int i = 0; i < n; i++) total += mats[i].rows;
  start[0] = 0;
  int c = 1;
  for (int i = 0; i < n && c < k; i++) {
    cum += mats[i].rows;
    if (cum * k >= total * c && i + 1 <= n - (k - c)) start[c++] = i + 1;
  }
  for (; c < k; c++) start[c] = n - (k - c);
  start[k] = n;
}

START_TEST(equal_shares_are_the_old_rule) {
  unsigned seed = 7;
  for (int t = 0; t < 500; t++) {
    int n = 1 + (int)(rand_r(&seed) % N), rows[N];
    for (int i = 0; i < n; i++) rows[i] = (int)(rand_r(&seed) % 3000);  /* empty ones too */
    set_rows(rows, n);
    for (int k = 1; k <= 4 && k <= n; k++) {
      int a[5], b[5];
      old_starts(n, k, a);
      galign_split_starts(feats, n, NULL, k, b);
      for (int c = 0; c <= k; c++) ck_assert_int_eq(a[c], b[c]);
      double half[2] = {0.5, 0.5};
      if (k == 2) {  /* equal shares given: the same */
        galign_split_starts(feats, n, half, k, b);
        for (int c = 0; c <= k; c++) ck_assert_int_eq(a[c], b[c]);
      }
      for (int c = 0; c < k; c++) ck_assert_int_lt(b[c], b[c + 1]);  /* none empty */
    }
  }
}
END_TEST

START_TEST(shares_move_the_split) {
  int rows[N];
  for (int i = 0; i < N; i++) rows[i] = 100;
  set_rows(rows, N);
  int s[3];
  double w[2] = {0.25, 0.75};
  galign_split_starts(feats, N, w, 2, s);
  ck_assert_int_eq(s[1], 10);  /* a quarter of the frames */
  double w3[3] = {0.5, 0.25, 0.25};
  int s3[4];
  galign_split_starts(feats, N, w3, 3, s3);
  ck_assert_int_eq(s3[1], 20);
  ck_assert_int_eq(s3[2], 30);
  ck_assert_int_eq(s3[3], N);
  double tiny[2] = {0.001, 0.999};  /* still one utterance at least */
  galign_split_starts(feats, 3, tiny, 2, s);
  ck_assert_int_eq(s[1], 1);
}
END_TEST

START_TEST(late_connection_gives_frames) {
  double share[2] = {0.5, 0.5};
  /* read from connection 0 first; connection 1's last reply 0.1 s later,
   * batches 1 s apart: 1 hands 0 half its share times 0.1 */
  double t[2] = {10.0, 10.1};
  galign_split_balance(share, 2, 0, t, 1.0);
  ck_assert_double_eq_tol(share[1], 0.5 - 0.5 * 0.5 * 0.1, 1e-12);
  ck_assert_double_eq_tol(share[0] + share[1], 1.0, 1e-12);
  /* the one read first says nothing of itself: read from 1 first, 0 came
   * "earlier" (its reply was there already): no change */
  double before = share[0];
  double t2[2] = {10.0, 10.2};
  galign_split_balance(share, 2, 1, t2, 1.0);
  ck_assert_double_eq(share[0], before);
  /* noise: under 2 ms or 2% of the period */
  galign_split_balance(share, 2, 0, (double[]){5.0, 5.0015}, 0.01);
  galign_split_balance(share, 2, 0, (double[]){5.0, 5.019}, 1.0);
  ck_assert_double_eq(share[0], before);
  /* a first batch (no period) changes nothing */
  galign_split_balance(share, 2, 0, t, 0.0);
  ck_assert_double_eq(share[0], before);
}
END_TEST

START_TEST(balance_converges_and_keeps_a_floor) {
  /* device 1 does 3x the work per frame: finishing times follow the shares;
   * the replies read from each connection in turn */
  double share[2] = {0.5, 0.5};
  for (int b = 0; b < 60; b++) {
    double busy0 = share[0] * 1.0, busy1 = share[1] * 3.0;
    double t[2] = {busy0, busy1};
    int first = b % 2;
    /* the one read first is read when it is done; the other when both are */
    t[1 - first] = t[1 - first] > t[first] ? t[1 - first] : t[first];
    galign_split_balance(share, 2, first, t, busy0 > busy1 ? busy0 : busy1);
    ck_assert_double_eq_tol(share[0] + share[1], 1.0, 1e-9);
    ck_assert(share[0] >= 0.05 - 1e-12 && share[1] >= 0.05 - 1e-12);
  }
  /* balanced: 3 x share1 ~ share0, i.e. share1 ~ 0.25 (within the noise band) */
  ck_assert_double_eq_tol(share[1], 0.25, 0.03);
  /* a connection that is always late by the whole period stops at the floor */
  double s2[2] = {0.5, 0.5};
  for (int b = 0; b < 100; b++) galign_split_balance(s2, 2, 0, (double[]){0.0, 1.0}, 1.0);
  ck_assert_double_eq_tol(s2[1], 0.05, 1e-12);
}
END_TEST

int main(void) {
  Suite *s = suite_create("align_split");
  TCase *tc = tcase_create("split");
  tcase_add_test(tc, equal_shares_are_the_old_rule);
  tcase_add_test(tc, shares_move_the_split);
  tcase_add_test(tc, late_connection_gives_frames);
  tcase_add_test(tc, balance_converges_and_keeps_a_floor);
  suite_add_tcase(s, tc);
  return tu_run_suite(s);
}
