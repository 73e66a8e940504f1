/* acc-compare: compares two gmm-acc-stats-ali stats files (binary or text)
 * structurally. Usage: acc-compare [--tol=1e-6] A.acc B.acc
 * Prints one summary line; exit 0 when layouts, transition counts and
 * total_frames are identical, every GMM value is within tol relative (or
 * one float ulp) and total_like within tol; 1 otherwise; 2 on read errors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/sys/log.h"
#include "gpu-acc/gpu-acc.h"
#include "base/program/program.h"

static int bytes_equal(const char *a, const char *b) {
  FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
  int eq = fa && fb;
  while (eq) {
    int ca = getc(fa), cb = getc(fb);
    if (ca != cb) eq = 0;
    if (ca == EOF || cb == EOF) break;
  }
  if (fa) fclose(fa);
  if (fb) fclose(fb);
  return eq;
}

int main(int argc, char **argv) {
  kio_program_start(argc, argv);
  kio_log_set_program(argv[0]);
  double tol = 1e-6;
  int i = 1;
  for (; i < argc && !strncmp(argv[i], "--", 2); i++) {
    if (!strncmp(argv[i], "--tol=", 6)) tol = atof(argv[i] + 6);
    else { fprintf(stderr, "acc-compare: unknown option %s\n", argv[i]); return 2; }
  }
  if (argc - i != 2) {
    fprintf(stderr, "Usage: acc-compare [--tol=1e-6] A.acc B.acc\n");
    return 2;
  }
  gacc_stats a, b;
  int fa, fb;
  if (gacc_stats_read(argv[i], &a, &fa) != KIO_OK) return 2;
  if (gacc_stats_read(argv[i + 1], &b, &fb) != KIO_OK) { gacc_stats_free(&a); return 2; }
  gacc_cmp c;
  gacc_stats_compare(&a, &b, tol, 1, &c);
  int ok = c.same_layout && fa == fb && c.num_tacc_diff == 0 && c.num_over == 0 &&
           c.like_rel <= tol && c.frames_equal;
  printf("%s: layout %s, flags %d/%d, transition counts differing %lld, values %zu, "
         "over %g: %zu, max rel diff %.3g, total_like rel diff %.3g, frames %s, bytes %s\n",
         ok ? "EQUAL" : "DIFFERENT", c.same_layout ? "same" : "different", fa, fb,
         (long long)c.num_tacc_diff, c.num_values, tol, c.num_over, c.max_rel, c.like_rel,
         c.frames_equal ? "equal" : "different",
         bytes_equal(argv[i], argv[i + 1]) ? "identical" : "differ");
  gacc_stats_free(&a);
  gacc_stats_free(&b);
  return ok ? 0 : 1;
}
