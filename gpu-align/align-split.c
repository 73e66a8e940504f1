/* The split of a batch over GPU service connections (align-split.h). */
#include "align-split.h"

void galign_split_starts(const kio_matrix *const *feats, int n, const double *share, int k,
                         int *start) {
  double total = 0.0, cum = 0.0, all = 0.0, upto = 0.0;
  for (int i = 0; i < n; i++) total += feats[i]->rows;
  for (int j = 0; j < k; j++) all += share ? share[j] : 1.0;
  start[0] = 0;
  int c = 1;
  upto = share ? share[0] : 1.0;
  for (int i = 0; i < n && c < k; i++) {
    cum += feats[i]->rows;
    /* frames so far reach the shares of 0..c-1 (exact in doubles for
     * equal shares: the integer test cum * k >= total * c) */
    if (cum * all >= total * upto && i + 1 <= n - (k - c)) {
      start[c++] = i + 1;
      if (c < k) upto += share ? share[c - 1] : 1.0;
    }
  }
  for (; c < k; c++) start[c] = n - (k - c);
  start[k] = n;
}

void galign_split_balance(double *share, int k, int first, const double *t_end, double period) {
  const double least = 0.1 / k;
  if (k < 2 || period <= 0 || first < 0 || first >= k) return;
  for (int c = 0; c < k; c++) {
    double x = t_end[c] - t_end[first];
    if (c == first || x <= 0.002 || x <= 0.02 * period) continue;
    double move = 0.5 * share[c] * (x < period ? x / period : 1.0);
    if (share[c] - move < least) move = share[c] - least;
    if (move <= 0) continue;
    share[c] -= move;
    share[first] += move;
  }
}
