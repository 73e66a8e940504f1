/* cluster-phones: Kaldi's program (bin/cluster-phones.cc) in its "questions"
 * mode, the one the steps scripts use: the same usage, options, questions
 * bytes, log lines and exit codes (tree/cluster-phones.c). Kaldi's own
 * cluster-phones runs instead for --mode=k-means, for the warnings whose
 * lines ours does not know, and where two splits' gains are equal (Kaldi
 * then orders them by memory addresses). */
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
#include "tree/cluster-phones.h"

static const char *const kUsage =
    "Cluster phones (or sets of phones) into sets for various purposes\n"
    "Usage:  cluster-phones [options] <tree-stats-in> <phone-sets-in> <clustered-phones-out>\n"
    "e.g.: \n"
    " cluster-phones 1.tacc phonesets.txt questions.txt\n";

static char **g_argv;

static void run_kaldi(const char *why) { kio_program_exec_kaldi("cluster-phones", g_argv, why); }

static int cmp_i32(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x > y) - (x < y);
}

/* ReadIntegerVectorVectorSimple: one set per line. */
static int read_sets(const char *rx, int32_t ***sets, int32_t **nsets, int32_t *n) {
  kio_input *in = NULL;
  int binary = 0;
  if (kio_input_open(&in, rx, &binary) != KIO_OK) return KIO_ERR;
  FILE *f = kio_input_stream(in);
  char *line = NULL, *end;
  size_t cap = 0;
  int32_t c = 0;
  int rc = KIO_OK;
  *sets = NULL;
  *nsets = NULL;
  *n = 0;
  while (getline(&line, &cap, f) >= 0) {
    if (*n == c) {
      c = c ? 2 * c : 64;
      int32_t **s = realloc(*sets, sizeof *s * (size_t)c);
      int32_t *k = s ? realloc(*nsets, sizeof *k * (size_t)c) : NULL;
      if (s) *sets = s;
      if (k) *nsets = k;
      if (!s || !k) { rc = KIO_ERR; break; }
    }
    int32_t *v = malloc(sizeof(int32_t) * (strlen(line) / 2 + 2)), m = 0;
    if (!v) { rc = KIO_ERR; break; }
    (*sets)[*n] = v;
    (*nsets)[(*n)++] = 0;
    for (char *p = line;;) {
      while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n') p++;
      if (!*p) break;
      errno = 0;
      long x = strtol(p, &end, 10);
      if (end == p || errno || x != (int32_t)x ||
          (*end && *end != ' ' && *end != '\t' && *end != '\r' && *end != '\n')) {
        rc = KIO_ERR;
        break;
      }
      v[m++] = (int32_t)x;
      p = end;
    }
    (*nsets)[*n - 1] = m;
    if (rc != KIO_OK) break;
  }
  free(line);
  kio_input_close(in);
  if (rc != KIO_OK) KIO_ERROR("Could not read phone sets from %s", rx);
  return rc;
}

int main(int argc, char **argv) {
  kio_program_start(argc, argv);
  g_argv = argv;
  kio_opts *po = kio_opts_new(kUsage);
  int32_t P = 1, N = 3, num_classes = -1;
  char *pcl = strdup("1"), *mode = strdup("questions");
  kio_opts_int(po, "central-position", &P,
               "Central position in context window [must match acc-tree-stats]");
  kio_opts_int(po, "context-width", &N,
               "Does not have any effect-- included for scripting convenience.");
  kio_opts_string(po, "pdf-class-list", &pcl,
                  "Colon-separated list of HMM positions to consider [Default = 1: just central "
                  "position for 3-state models].");
  kio_opts_string(po, "mode", &mode,
                  "Mode of operation: \"questions\"->sets suitable for decision trees; "
                  "\"k-means\"->k-means algorithm, output k classes (set num-classes options)\n");
  kio_opts_int(po, "num-classes", &num_classes, "For k-means mode, number of classes.");
  kio_program_args(po, argc, argv, 3, 3);
  if (strcmp(mode, "questions") != 0 || num_classes != -1)
    run_kaldi("Only the \"questions\" mode is ours");
  const char *stats_rx = kio_opts_arg(po, 1), *sets_rx = kio_opts_arg(po, 2),
             *out_wx = kio_opts_arg(po, 3);
  tstat_table st;
  if (tstat_read(stats_rx, &st) != KIO_OK) kio_fatal_exit();
  /* --pdf-class-list: SplitStringToIntegers(":", omit empty = false) */
  int32_t pc[256], npc = 0;
  {
    char *p = pcl, *end;
    int bad = !*p;
    while (!bad) {
      errno = 0;
      long x = strtol(p, &end, 10);
      if (end == p || errno || x != (int32_t)x || (*end && *end != ':') || npc == 256) bad = 1;
      else pc[npc++] = (int32_t)x;
      if (bad || !*end) break;
      p = end + 1;
    }
    if (bad || !npc) {
      KIO_ERROR("Invalid pdf-class-list string [expecting colon-separated list of integers]: %s",
                pcl);
      kio_fatal_exit();
    }
    qsort(pc, (size_t)npc, sizeof(int32_t), cmp_i32);
  }
  int32_t **sets, *nsets, ns;
  if (read_sets(sets_rx, &sets, &nsets, &ns) != KIO_OK) kio_fatal_exit();
  if (ns == 0) {
    KIO_ERROR("No phone sets in phone sets file %s", sets_rx);
    kio_fatal_exit();
  }
  int32_t nph = 0, maxp = 0;
  for (int32_t i = 0; i < ns; i++) {
    qsort(sets[i], (size_t)nsets[i], sizeof(int32_t), cmp_i32);
    if (!nsets[i]) {
      KIO_ERROR("Empty phone set in AutomaticallyObtainQuestions (%s)", sets_rx);
      kio_fatal_exit();
    }
    for (int32_t k = 1; k < nsets[i]; k++)
      if (sets[i][k] == sets[i][k - 1]) {
        KIO_ERROR("Phone set in AutomaticallyObtainQuestions contains duplicate phones (%s)",
                  sets_rx);
        kio_fatal_exit();
      }
    nph += nsets[i];
    if (sets[i][nsets[i] - 1] > maxp) maxp = sets[i][nsets[i] - 1];
  }
  uint8_t *listed = calloc((size_t)maxp + 1, 1);
  if (!listed) kio_fatal_exit();
  for (int32_t i = 0; i < ns; i++)
    for (int32_t k = 0; k < nsets[i]; k++) {
      if (sets[i][k] < 0 || listed[sets[i][k]]) {
        KIO_ERROR("Phones are present in more than one phone set (%s)", sets_rx);
        kio_fatal_exit();
      }
      listed[sets[i][k]] = 1;
    }
  /* FilterStatsByKey(pdf-class in the list), SplitStatsByKey(P), SumStatsVec */
  int dim = -1;
  size_t retained = 0;
  int32_t top = maxp;
  for (size_t e = 0; e < st.n; e++) {
    const int32_t *ev = st.ev + st.v[e].off;
    int32_t pcv = 0, ph = -1, hp = 0, hq = 0;
    for (int32_t k = 0; k < st.v[e].nev; k++) {
      if (ev[2 * k] == -1) { pcv = ev[2 * k + 1]; hp = 1; }
      if (ev[2 * k] == P) { ph = ev[2 * k + 1]; hq = 1; }
    }
    if (!hp) {
      KIO_ERROR("SplitStats: key -1 is not present in an event vector of %s", stats_rx);
      kio_fatal_exit();
    }
    if (!bsearch(&pcv, pc, (size_t)npc, sizeof(int32_t), cmp_i32)) continue;
    if (!hq || ph < 0) {
      KIO_ERROR("SplitStats: key %d is not present in an event vector of %s", (int)P, stats_rx);
      kio_fatal_exit();
    }
    retained++;
    if (ph > top) top = ph;
    if (!st.v[e].is_null) {
      if (dim < 0) dim = st.v[e].cols;
      if (st.v[e].cols != dim || st.v[e].rows != 2) {
        KIO_ERROR("The tree statistics in %s have entries of different dimensions", stats_rx);
        kio_fatal_exit();
      }
    }
  }
  if (retained * 10 < st.n) run_kaldi("Most statistics are of other pdf-classes");
  if (dim < 0) run_kaldi("No statistics of these pdf-classes");
  int D = 2 * dim;
  bt_gauss *ph = calloc((size_t)top + 1, sizeof *ph);
  double *buf = calloc((size_t)(top + 1) * (size_t)D + 1, sizeof(double));
  if (!ph || !buf) kio_fatal_exit();
  for (size_t e = 0; e < st.n; e++) {
    const int32_t *ev = st.ev + st.v[e].off;
    int32_t pcv = 0, p = -1;
    for (int32_t k = 0; k < st.v[e].nev; k++) {
      if (ev[2 * k] == -1) pcv = ev[2 * k + 1];
      if (ev[2 * k] == P) p = ev[2 * k + 1];
    }
    if (!bsearch(&pcv, pc, (size_t)npc, sizeof(int32_t), cmp_i32) || st.v[e].is_null) continue;
    bt_gauss *g = &ph[p];
    const double *x = st.st + st.v[e].soff;
    if (!g->present) {
      g->present = 1;
      g->st = buf + (size_t)p * D;
      g->count = 0.0 + st.v[e].count;
      g->var_floor = st.v[e].var_floor;
      for (int k = 0; k < D; k++) g->st[k] = 0.0 + x[k];
    } else {
      g->count += st.v[e].count;
      for (int k = 0; k < D; k++) g->st[k] += x[k];
    }
  }
  double vf0 = 0;
  int any = 0;
  for (int32_t p = 0; p <= top; p++) {
    if (ph[p].present && (p > maxp || !listed[p]))
      run_kaldi("A phone of the statistics is in no phone set");
    if (ph[p].present && !any) { any = 1; vf0 = ph[p].var_floor; }
  }
  /* EnsureClusterableVectorNotNull: empty statistics with the first's floor */
  for (int32_t p = 0; p <= top; p++)
    if (!ph[p].present) {
      ph[p].st = buf + (size_t)p * D;
      ph[p].var_floor = vf0;
      ph[p].count = 0;
    }
  gs_point *pts = calloc((size_t)ns, sizeof *pts);
  double *pbuf = calloc((size_t)ns * D + 1, sizeof(double));
  if (!pts || !pbuf) kio_fatal_exit();
  int32_t no_data = 0;
  for (int32_t i = 0; i < ns; i++) {
    gs_point *g = &pts[i];
    const bt_gauss *f = &ph[sets[i][0]];
    g->st = pbuf + (size_t)i * D;
    g->count = 0.0 + f->count;
    g->var_floor = f->var_floor;
    for (int k = 0; k < D; k++) g->st[k] = 0.0 + f->st[k];
    for (int32_t j = 1; j < nsets[i]; j++) {
      const bt_gauss *h = &ph[sets[i][j]];
      g->count += h->count;
      for (int k = 0; k < D; k++) g->st[k] += h->st[k];
    }
    if ((float)g->count == 0.0f) {
      no_data++;
      char *s = malloc(12 * (size_t)nsets[i] + 1);
      if (!s) kio_fatal_exit();
      size_t len = 0;
      s[0] = 0;
      for (int32_t j = 0; j < nsets[i]; j++) len += (size_t)sprintf(s + len, "%d ", (int)sets[i][j]);
      KIO_KALDI(CP_NO_STATS, s);
      free(s);
    }
  }
  if (no_data + 1 >= ns) run_kaldi("All or all but one phone set has no data");
  int32_t **q, nq;
  int tie = 0;
  if (cp_questions(pts, ns, dim, (const int32_t *const *)sets, nsets, &q, &nq, &tie) != KIO_OK)
    kio_fatal_exit();
  if (tie) run_kaldi("Two splits gained the same");
  kio_output *out = NULL;
  if (kio_output_open(&out, out_wx, 0, 0) != KIO_OK) kio_fatal_exit();
  FILE *f = kio_output_stream(out);
  for (int32_t i = 0; i < nq; i++) {
    for (int32_t k = 0; k < q[i][0]; k++) fprintf(f, k ? " %d" : "%d", (int)q[i][1 + k]);
    fputc('\n', f);
  }
  if (kio_output_close(out) != KIO_OK) {
    KIO_ERROR("Error writing questions to %s", out_wx);
    kio_fatal_exit();
  }
  KIO_KALDI(CP_WROTE, out_wx);
  for (int32_t i = 0; i < nq; i++) free(q[i]);
  free(q);
  for (int32_t i = 0; i < ns; i++) free(sets[i]);
  free(sets);
  free(nsets);
  free(listed);
  free(ph);
  free(buf);
  free(pts);
  free(pbuf);
  tstat_free(&st);
  free(pcl);
  free(mode);
  kio_opts_free(po);
  return 0;
}
