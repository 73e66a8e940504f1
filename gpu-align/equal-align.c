/* Equal alignment (reference 6.3): Kaldi's EqualAlign() on a training graph,
 * reproduced bit-exactly, including the C library's random numbers. Kaldi
 * seeds glibc's srand() with a hash of the utterance key, so to produce the
 * same alignments on any C library we carry our own copy of glibc's TYPE_3
 * additive-feedback generator instead of calling rand(). */
#include "gpu-align.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/sys/kaldi-msg.h"
#include "base/sys/log.h"

/* Kaldi's own source location of the EqualAlign messages, so our log lines
 * diff cleanly against Kaldi's (tests/data/edge/align-equal.log). */

/* A random walk that has not reached a final state after this many steps in
 * one attempt is given up (Kaldi would keep walking; we never hang). */
#define EA_MAX_STEPS (1 << 26)

/* ---- StringHasher ---- */
uint32_t galign_key_seed(const char *key) {
  uint64_t h = 0;
  /* Each char is added as a signed char (x86-64 char), sign-extended to the
   * 64-bit size_t; Kaldi then truncates the size_t to int32 for srand(). */
  for (const signed char *c = (const signed char *)key; *c; c++)
    h = h * 7853u + (uint64_t)(int64_t)*c;
  return (uint32_t)h;
}

/* ---- glibc random() TYPE_3: degree 31, separation 3 ---- */
enum { RAND_DEG = 31, RAND_SEP = 3 };

void galign_srand(galign_rand *g, uint32_t seed) {
  if (seed == 0) seed = 1;
  /* The seed becomes a signed 32-bit word; Schrage's method computes
   * 16807 * word mod (2^31 - 1) without overflow, also for negative words
   * (C division truncates toward zero, as glibc relies on). */
  int32_t word = (int32_t)seed;
  g->state[0] = word;
  for (int i = 1; i < RAND_DEG; i++) {
    int64_t hi = word / 127773, lo = word % 127773;
    int64_t w = 16807 * lo - 2836 * hi;
    if (w < 0) w += 2147483647;
    word = (int32_t)w;
    g->state[i] = word;
  }
  g->f = RAND_SEP;
  g->r = 0;
  for (int i = 0; i < 10 * RAND_DEG; i++) (void)galign_rand_next(g);
}

int32_t galign_rand_next(galign_rand *g) {
  uint32_t val = (uint32_t)g->state[g->f] + (uint32_t)g->state[g->r];
  g->state[g->f] = (int32_t)val;
  if (++g->f >= RAND_DEG) g->f = 0;
  if (++g->r >= RAND_DEG) g->r = 0;
  return (int32_t)(val >> 1);
}

/* kaldi::RandInt(0, n - 1): no number is consumed when there is one choice. */
static int32_t rand_int(galign_rand *g, int32_t n) {
  if (n <= 1) return 0;
  return galign_rand_next(g) % n;
}

/* ---- co-accessibility (OpenFst kCoAccessible: every state reaches a final
 * state), by a backward search from the final states. Also validates arc
 * targets so bad graphs cannot make us index out of bounds. ---- */
static int check_coaccessible(const kio_fst *g) {
  int32_t ns = g->num_states;
  if (ns <= 0) return 1;
  for (int32_t a = 0; a < g->num_arcs; a++) {
    if (g->arcs[a].nextstate < 0 || g->arcs[a].nextstate >= ns) {
      KIO_ERROR("EqualAlign: arc to invalid state %d in a graph of %d states",
                (int)g->arcs[a].nextstate, (int)ns);
      return 0;
    }
  }
  int32_t *rstart = calloc((size_t)ns + 1, sizeof *rstart);
  int32_t *rsrc = malloc(((size_t)g->num_arcs + 1) * sizeof *rsrc);
  int32_t *queue = malloc((size_t)ns * sizeof *queue);
  unsigned char *seen = calloc((size_t)ns, 1);
  int ok = 0;
  if (!rstart || !rsrc || !queue || !seen) {
    KIO_ERROR("EqualAlign: out of memory (%d states)", (int)ns);
    goto done;
  }
  /* Reverse adjacency in CSR form: predecessors of each state. */
  for (int32_t a = 0; a < g->num_arcs; a++) rstart[g->arcs[a].nextstate + 1]++;
  for (int32_t s = 0; s < ns; s++) rstart[s + 1] += rstart[s];
  int32_t *fill = queue; /* reuse as a cursor array before the search */
  memcpy(fill, rstart, (size_t)ns * sizeof *fill);
  for (int32_t s = 0; s < ns; s++)
    for (int32_t a = g->arc_start[s]; a < g->arc_start[s + 1]; a++)
      rsrc[fill[g->arcs[a].nextstate]++] = s;
  int32_t head = 0, tail = 0;
  for (int32_t s = 0; s < ns; s++)
    if (g->final[s] != INFINITY) { seen[s] = 1; queue[tail++] = s; }
  while (head < tail) {
    int32_t s = queue[head++];
    for (int32_t i = rstart[s]; i < rstart[s + 1]; i++)
      if (!seen[rsrc[i]]) { seen[rsrc[i]] = 1; queue[tail++] = rsrc[i]; }
  }
  ok = (tail == ns);
  if (!ok)
    KIO_ERROR("EqualAlign: the graph is not co-accessible (%d of %d states "
              "cannot reach a final state)", (int)(ns - tail), (int)ns);
done:
  free(rstart);
  free(rsrc);
  free(queue);
  free(seen);
  return ok;
}

/* Growable int32 array. */
typedef struct { int32_t *v; size_t n, cap; } ivec;
static int ivec_push(ivec *a, int32_t x) {
  if (a->n == a->cap) {
    size_t cap = a->cap ? 2 * a->cap : 64;
    int32_t *v = realloc(a->v, cap * sizeof *v);
    if (!v) return KIO_ERR;
    a->v = v;
    a->cap = cap;
  }
  a->v[a->n++] = x;
  return KIO_OK;
}

/* First arc of s that is a self-loop with a non-zero ilabel, or -1. */
static int32_t find_self_loop(const kio_fst *g, int32_t s) {
  for (int32_t a = g->arc_start[s]; a < g->arc_start[s + 1]; a++)
    if (g->arcs[a].nextstate == s && g->arcs[a].ilabel != 0) return a;
  return -1;
}

int galign_equal_align(const kio_fst *g, int32_t length, uint32_t seed, int32_t *ali) {
  galign_rand rng;
  galign_srand(&rng, seed);
  /* Kaldi asserts co-accessibility here (KALDI_ASSERT -> abort, exit 134): a
   * state that cannot reach a final state could make the walk below loop
   * forever. We log an ERROR and report failure instead. */
  if (!check_coaccessible(g)) return 0;
  if (g->start < 0 || g->start >= g->num_states) {
    KIO_KALDI(EQUAL_EMPTY_FST);
    return 0;
  }
  enum { NUM_RETRIES = 10 };
  ivec path = {0}, arcs = {0};  /* states visited; arc taken out of each */
  int32_t tries[NUM_RETRIES];
  int num_tries = 0, ret = 0;
  int64_t nlab = 0;
  do {
    nlab = 0;
    path.n = arcs.n = 0;
    if (ivec_push(&path, g->start)) goto oom;
    int32_t s = g->start;
    for (int64_t steps = 0;; steps++) {
      if (steps >= EA_MAX_STEPS) {
        KIO_ERROR("EqualAlign: random path did not reach a final state after "
                  "%d steps; giving up", EA_MAX_STEPS);
        goto out;
      }
      int32_t num_arcs = g->arc_start[s + 1] - g->arc_start[s];
      int32_t n_tot = num_arcs + (g->final[s] != INFINITY ? 1 : 0);
      int32_t k = rand_int(&rng, n_tot);
      if (k >= num_arcs) break;  /* chose the final weight */
      int32_t a = g->arc_start[s] + k;
      if (g->arcs[a].nextstate == s) continue;  /* self-loops are redrawn */
      s = g->arcs[a].nextstate;
      if (g->arcs[a].ilabel != 0) nlab++;
      /* A path with more labels than frames is never used: only count. */
      if (nlab <= length && (ivec_push(&arcs, a) || ivec_push(&path, s))) goto oom;
    }
    tries[num_tries++] = (int32_t)(nlab > INT32_MAX ? INT32_MAX : nlab);
  } while (num_tries < NUM_RETRIES && nlab > length);

  if (nlab > length) {
    char list[NUM_RETRIES * 12 + 1];
    size_t pos = 0;
    for (int i = 0; i < num_tries; i++)
      pos += (size_t)snprintf(list + pos, sizeof list - pos, "%s%d", i ? "," : "",
                              (int)tries[i]);
    KIO_KALDI(EQUAL_PATH_LENGTHS, list);
    KIO_KALDI(EQUAL_TOO_FEW_FRAMES, (int)length);
    goto out;
  }

  /* Positions with an emitting self-loop share the extra frames evenly; the
   * earliest ones get the remainder. */
  int64_t num_loops = 0;
  for (size_t i = 0; i < path.n; i++)
    if (find_self_loop(g, path.v[i]) >= 0) num_loops++;
  if (num_loops == 0 && nlab < length) {
    KIO_KALDI(EQUAL_NO_SELF_LOOPS);
    goto out;
  }
  int64_t extra = (int64_t)length - nlab;
  int64_t base = extra != 0 ? extra / num_loops : 0;
  int64_t plus1 = extra - base * num_loops;
  int64_t j = 0, out_n = 0;
  for (size_t i = 0; i < path.n; i++) {
    int32_t loop = find_self_loop(g, path.v[i]);
    if (loop >= 0) {
      int64_t copies = base + (j < plus1 ? 1 : 0);
      j++;
      for (int64_t c = 0; c < copies; c++) ali[out_n++] = g->arcs[loop].ilabel;
    }
    if (i + 1 < path.n && g->arcs[arcs.v[i]].ilabel != 0)
      ali[out_n++] = g->arcs[arcs.v[i]].ilabel;
  }
  ret = (out_n == length);  /* always true by construction */
  goto out;
oom:
  KIO_ERROR("EqualAlign: out of memory building a random path");
out:
  free(path.v);
  free(arcs.v);
  return ret;
}
