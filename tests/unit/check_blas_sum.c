/* VectorBase::Sum's orders (base/matrix/blas-level1.h): inputs whose sum
 * rounds differently under Prescott's strided loops and the C loop of the
 * other cores, with the values worked out by hand (dev/oracles/
 * blas-order-check compares them with a real OpenBLAS). */
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

int main(void) {
  Suite *s = suite_create("blas_sum");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, float_sum_orders);
  tcase_add_test(tc, double_sum_orders);
  suite_add_tcase(s, tc);
  return tu_run_suite(s);
}
