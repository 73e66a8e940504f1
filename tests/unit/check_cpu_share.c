/* Default thread counts under concurrent jobs (base/sys/cpu-share.h): running
 * copies of the same executable are counted, and the share divides the
 * cores among them. */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/sys/cpu-share.h"
#include "tests/lib/test-util.h"

START_TEST(counts_running_copies) {
  int before = kio_cpu_instances();
  ck_assert_int_ge(before, 1);
  /* Three copies of this executable (fork keeps the executable), alive
   * until the pipe is closed. */
  int fd[2];
  ck_assert_int_eq(pipe(fd), 0);
  pid_t kids[3];
  for (int i = 0; i < 3; i++) {
    kids[i] = fork();
    ck_assert_int_ge(kids[i], 0);
    if (kids[i] == 0) {
      close(fd[1]);
      char c;
      while (read(fd[0], &c, 1) > 0) {}
      _exit(0);
    }
  }
  close(fd[0]);
  int during = kio_cpu_instances();
  int share = kio_cpu_share(0);
  close(fd[1]);
  for (int i = 0; i < 3; i++) waitpid(kids[i], NULL, 0);
  ck_assert_int_eq(during, before + 3);
  int want = kio_cpu_count() / during;
  ck_assert_int_eq(share, want < 1 ? 1 : want);
  ck_assert_int_eq(kio_cpu_instances(), before);
}
END_TEST

START_TEST(share_bounds) {
  ck_assert_int_ge(kio_cpu_count(), 1);
  ck_assert_int_ge(kio_cpu_share(0), 1);
  ck_assert_int_le(kio_cpu_share(0), kio_cpu_count());
  ck_assert_int_eq(kio_cpu_share(1), 1);
}
END_TEST

int main(void) {
  Suite *s = suite_create("cpu_share");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, counts_running_copies);
  tcase_add_test(tc, share_bounds);
  suite_add_tcase(s, tc);
  return tu_run_suite(s);
}
