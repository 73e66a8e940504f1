/* VectorBase::Sum's and cblas_sdot's orders (base/matrix/blas-level1.h):
 * inputs that round differently under Prescott's kernels and the others',
 * with the values worked out by hand (dev/oracles/blas-order-check
 * compares them with a real OpenBLAS). */
#include <math.h>

#include "base/matrix/blas-level1.h"
#include "base/matrix/blas-order.h"
#include "tests/lib/test-util.h"

static const int kProfiles[] = {KIO_BLAS_SKX, KIO_BLAS_CPL, KIO_BLAS_HSW, KIO_BLAS_SNB,
                                KIO_BLAS_NHM};

START_TEST(float_sum_orders) {
  const float e = ldexpf(1.0f, -24);
  const float x[4] = {1.0f, e, e, e};
  /* one after the other in float: each 2^-24 is lost against 1 */
  ck_assert_float_eq(kio_blas_ssum(KIO_BLAS_SSE, 4, x), 1.0f);
  /* pairs: (1 + e) rounds to 1, (e + e) = 2^-23 survives in the double */
  for (size_t i = 0; i < sizeof kProfiles / sizeof *kProfiles; i++)
    ck_assert_float_eq(kio_blas_ssum(kProfiles[i], 4, x), 1.0f + ldexpf(1.0f, -23));
  /* an odd length: the last element added alone */
  const float y[3] = {e, e, 1.0f};
  ck_assert_float_eq(kio_blas_ssum(KIO_BLAS_SSE, 3, y), 1.0f + ldexpf(1.0f, -23));
  ck_assert_float_eq(kio_blas_ssum(KIO_BLAS_HSW, 3, y), 1.0f + ldexpf(1.0f, -23));
  ck_assert_float_eq(kio_blas_ssum(KIO_BLAS_SSE, 0, x), 0.0f);
}
END_TEST

START_TEST(double_sum_orders) {
  const double e = ldexp(1.0, -53);
  /* Prescott: four running sums, (s0 + s1) + (s2 + s3) = 2^-52 + 1;
   * the others: (x0 + x2) = 1 + 2^-53 rounds to 1, plus (x1 + x3) = 2^-53
   * rounds to 1 again */
  const double x[4] = {e, e, 1.0, 0.0};
  ck_assert(kio_blas_dsum(KIO_BLAS_SSE, 4, x) == 1.0 + ldexp(1.0, -52));
  for (size_t i = 0; i < sizeof kProfiles / sizeof *kProfiles; i++)
    ck_assert(kio_blas_dsum(kProfiles[i], 4, x) == 1.0);
  /* the tail is added one element at a time (not summed apart first) */
  const double y[6] = {1.0, 0.0, 0.0, 0.0, e, e};
  ck_assert(kio_blas_dsum(KIO_BLAS_SSE, 6, y) == 1.0);
  ck_assert(kio_blas_dsum(KIO_BLAS_HSW, 6, y) == 1.0);
}
END_TEST

/* cblas_sdot, Prescott against Haswell: two half-ulps of 1 in the groups
 * after the 16-element loop are added to 1's lane one at a time in float
 * (lost); Haswell's tail adds in double (kept). */
START_TEST(sdot_orders) {
  const float e = ldexpf(1.0f, -24);
  float x[24] = {0}, y[24];
  for (int i = 0; i < 24; i++) y[i] = 1.0f;
  x[0] = 1.0f;
  x[16] = x[20] = e;
  ck_assert_float_eq(kio_blas_sdot(KIO_BLAS_SSE, 24, x, y), 1.0f);
  ck_assert_float_eq(kio_blas_sdot(KIO_BLAS_HSW, 24, x, y), 1.0f + ldexpf(1.0f, -23));
  /* lanes 2 and 3 meet before lane 0: their half-ulps survive */
  float z[4] = {1.0f, 0.0f, e, e};
  ck_assert_float_eq(kio_blas_sdot(KIO_BLAS_SSE, 4, z, y), 1.0f + ldexpf(1.0f, -23));
}
END_TEST

int main(void) {
  Suite *s = suite_create("blas_sum");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, float_sum_orders);
  tcase_add_test(tc, double_sum_orders);
  tcase_add_test(tc, sdot_orders);
  suite_add_tcase(s, tc);
  return tu_run_suite(s);
}
