/* build-tree: Kaldi's program (bin/build-tree.cc): the same usage, options,
 * tree bytes, log lines and exit codes. The tree is built by tree/bt-*.c
 * with Kaldi's arithmetic and orders; where Kaldi's behaviour is not one
 * ours reproduces (questions refined at each node, --cluster-thresh=0, a
 * negative --thresh, leaves that cannot be rounded) Kaldi's own
 * build-tree runs instead. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/io/io.h"
#include "base/matrix/blas-profile.h"
#include "base/program/program.h"
#include "base/sys/kaldi-msg.h"
#include "base/sys/log.h"
#include "base/sys/options.h"
#include "tree/build-tree.h"

static const char *const kUsage =
    "Train decision tree\n"
    "Usage:  build-tree [options] <tree-stats-in> <roots-file> <questions-file> <topo-file> "
    "<tree-out>\n"
    "e.g.: \n"
    " build-tree treeacc roots.txt 1.qst topo tree\n";

static int cmp_i32(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x > y) - (x < y);
}

/* WriteIntegerVector in text: "[ 1 2 ]" and a newline */
static char *int_list(const int32_t *v, size_t n) {
  char *s = malloc(12 * n + 8);
  if (!s) return NULL;
  size_t len = (size_t)sprintf(s, "[ ");
  for (size_t i = 0; i < n; i++) len += (size_t)sprintf(s + len, "%d ", (int)v[i]);
  sprintf(s + len, "]\n");
  return s;
}

static int read_topo(const char *rx, kio_topology *topo) {
  kio_input *in = NULL;
  int binary = 0;
  kio_clear_error();
  if (kio_input_open(&in, rx, &binary) != KIO_OK) return KIO_ERR;
  int r = kio_topology_read(kio_input_stream(in), binary, topo);
  kio_input_close(in);
  if (r != KIO_OK) KIO_ERROR("Failed to read topology from %s: %s", rx, kio_last_error());
  return r;
}

int main(int argc, char **argv) {
  kio_program_start(argc, argv);
  kio_opts *po = kio_opts_new(kUsage);
  int binary = 1, round_num_leaves = 1;
  int32_t P = 1, N = 3, max_leaves = 0;
  float thresh = 300.0f, cluster_thresh = -1.0f;
  kio_opts_bool(po, "binary", &binary, "Write output in binary mode");
  kio_opts_int(po, "context-width", &N, "Context window size [must match acc-tree-stats]");
  kio_opts_int(po, "central-position", &P,
               "Central position in context window [must match acc-tree-stats]");
  kio_opts_int(po, "max-leaves", &max_leaves,
               "Maximum number of leaves to be used in tree-building (if positive)");
  kio_opts_float(po, "thresh", &thresh, "Log-likelihood change threshold for tree-building");
  kio_opts_float(po, "cluster-thresh", &cluster_thresh,
                 "Log-likelihood change threshold for clustering after tree-building.  0 means "
                 "no clustering; -1 means use as a clustering threshold the likelihood change "
                 "of the final split.");
  kio_opts_bool(po, "round-num-leaves", &round_num_leaves,
                "If true, then the number of leaves will be reduced to a multiple of 8 by "
                "clustering.");
  kio_program_args(po, argc, argv, 5, 5);
  const char *stats_rx = kio_opts_arg(po, 1), *roots_rx = kio_opts_arg(po, 2),
             *qst_rx = kio_opts_arg(po, 3), *topo_rx = kio_opts_arg(po, 4),
             *tree_wx = kio_opts_arg(po, 5);
  bt_roots roots;
  if (bt_roots_read(roots_rx, &roots) != KIO_OK) kio_fatal_exit();
  kio_topology topo = {0};
  if (read_topo(topo_rx, &topo) != KIO_OK) kio_fatal_exit();
  tstat_table stats;
  if (tstat_read(stats_rx, &stats) != KIO_OK) kio_fatal_exit();
  KIO_KALDI(BT_NUM_STATS, stats.n);
  bt_questions qst;
  if (bt_questions_read(qst_rx, &qst) != KIO_OK) kio_fatal_exit();
  /* GetPhoneToNumPdfClasses */
  int32_t np = topo.num_phones ? topo.phones[topo.num_phones - 1] + 1 : 0;
  int32_t *p2n = malloc(sizeof(int32_t) * (size_t)(np + 1));
  if (!p2n) kio_fatal_exit();
  for (int32_t i = 0; i < np; i++) p2n[i] = -1;
  for (int32_t i = 0; i < topo.num_phones; i++) {
    int32_t ph = topo.phones[i], e = topo.phone2idx[ph], mx = 0;
    const kio_topo_entry *en = &topo.entries[e];
    for (int32_t s = 0; s < en->num_states; s++) {
      if (en->states[s].forward_pdf_class > mx) mx = en->states[s].forward_pdf_class;
      if (en->states[s].self_loop_pdf_class > mx) mx = en->states[s].self_loop_pdf_class;
    }
    p2n[ph] = mx + 1;
  }
  /* the phones of the roots, and those the statistics have at P */
  size_t nall = 0;
  for (int32_t i = 0; i < roots.nsets; i++) nall += (size_t)roots.nset[i];
  int32_t *all = malloc(sizeof(int32_t) * (nall + 1)), *seen = malloc(sizeof(int32_t) * (stats.n + 1));
  if (!all || !seen) kio_fatal_exit();
  size_t na = 0, ns = 0;
  for (int32_t i = 0; i < roots.nsets; i++)
    for (int32_t j = 0; j < roots.nset[i]; j++) all[na++] = roots.set[i][j];
  qsort(all, na, sizeof(int32_t), cmp_i32);
  for (size_t i = 0; i < na; i++)
    if (i && all[i] == all[i - 1]) {
      KIO_ERROR("Phone %d is in more than one line of the roots file %s", (int)all[i], roots_rx);
      kio_fatal_exit();
    }
  for (size_t e = 0; e < stats.n; e++) {
    const int32_t *ev = stats.ev + stats.v[e].off;
    for (int32_t k = 0; k < stats.v[e].nev; k++)
      if (ev[2 * k] == P) seen[ns++] = ev[2 * k + 1];
  }
  qsort(seen, ns, sizeof(int32_t), cmp_i32);
  size_t nu = 0;
  for (size_t i = 0; i < ns; i++)
    if (!i || seen[i] != seen[i - 1]) seen[nu++] = seen[i];
  bt_opts o = {thresh, cluster_thresh, max_leaves, P, round_num_leaves, 0};
  int fallback = 0;
  kio_event_map *tree = bt_build_tree(&qst, &roots, p2n, np, &stats, &o, &fallback);
  if (fallback) kio_program_exec_kaldi("build-tree", argv, "This tree is built differently by Kaldi");
  if (!tree) kio_fatal_exit();
  if (kio_log_verbose() >= 1) {
    int32_t nl = 0;
    int32_t *lv = malloc(sizeof(int32_t) * (size_t)(bt_em_count_leaves(tree) + 1));
    if (!lv) kio_fatal_exit();
    bt_em_leaves(tree, lv, &nl);
    int32_t top = 0;
    for (int32_t i = 0; i < nl; i++)
      if (lv[i] + 1 > top) top = lv[i] + 1;
    float *norm = malloc(sizeof(float) * (size_t)(top + 1));
    if (!norm || bt_leaf_normalizers(&stats, tree, norm, top) != KIO_OK) kio_fatal_exit();
    /* SplitStatsByMap's size: one past the largest leaf the statistics reach */
    int32_t reach = 0;
    for (size_t e = 0; e < stats.n; e++) {
      int32_t leaf;
      if (bt_em_map(tree, stats.ev + stats.v[e].off, stats.v[e].nev, &leaf) && leaf + 1 > reach)
        reach = leaf + 1;
    }
    char b[32];
    for (int32_t i = 0; i < reach; i++)
      if (norm[i] < 100.0f) KIO_KALDI(BT_LOW_COUNT, (int)i, kio_fmt_g(b, norm[i]));
    free(lv);
    free(norm);
  }
  if (bt_ctx_dep_write(tree_wx, binary, N, P, tree) != KIO_OK) kio_fatal_exit();
  int mismatch = (int32_t)na != topo.num_phones;
  for (size_t i = 0; !mismatch && i < na; i++) mismatch = all[i] != topo.phones[i];
  if (mismatch) {
    char *a = int_list(all, na), *b = int_list(topo.phones, (size_t)topo.num_phones);
    if (!a || !b) kio_fatal_exit();
    KIO_KALDI(BT_MISMATCH, a, b);
    free(a);
    free(b);
  }
  /* Kaldi checks these after writing the tree, which stays */
  for (size_t i = 0; i < nu; i++)
    if (!bsearch(&seen[i], all, na, sizeof(int32_t), cmp_i32)) {
      KIO_KALDI(BT_NOT_IN_ROOTS, (int)seen[i]);
      kio_fatal_exit();
    }
  /* the phones of the roots without statistics */
  size_t cap = 16 * na + 1, len = 0;
  char *un = malloc(cap);
  if (!un) kio_fatal_exit();
  un[0] = 0;
  for (size_t i = 0; i < na; i++)
    if (!bsearch(&all[i], seen, nu, sizeof(int32_t), cmp_i32))
      len += (size_t)snprintf(un + len, cap - len, "%d ", (int)all[i]);
  if (len) KIO_KALDI(BT_UNSEEN, un);
  KIO_KALDI(BT_WROTE);
  free(un);
  free(all);
  free(seen);
  free(p2n);
  bt_em_free(tree);
  bt_questions_free(&qst);
  bt_roots_free(&roots);
  tstat_free(&stats);
  kio_topology_free(&topo);
  kio_opts_free(po);
  return 0;
}
