/* Statistics for phonetic-context tree building (prefix tstat_): Kaldi's
 * BuildTreeStatsType of GaussClusterable (tree/build-tree-utils.cc,
 * tree/clusterable-classes.cc), the "treeacc" files of acc-tree-stats and
 * sum-tree-stats, and the accumulation of hmm/tree-accu.cc.
 *
 * A table is a list of (event, Gaussian statistics) in the order it was
 * read or made; Kaldi's programs write theirs in std::map order of the
 * events (tstat_event_cmp), which tstat_sort and tstat_sum keep. */
#ifndef TREE_TREE_STATS_H
#define TREE_TREE_STATS_H

#include <stddef.h>
#include <stdint.h>

#include "base/matrix/matrix.h"
#include "base/model/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One entry. The event is nev (key, value) int32 pairs at ev[2*off..]; the
 * statistics (GaussClusterable: count, var_floor, a rows x cols double
 * matrix, 2 x dim as Kaldi makes them) at st[soff..]. is_null: Kaldi's
 * "F" (no statistics). */
typedef struct {
  int32_t nev;
  int is_null;
  int32_t rows, cols;
  size_t off, soff;
  double count, var_floor;
} tstat_entry;

typedef struct {
  tstat_entry *v;
  size_t n, cap;
  int32_t *ev;   /* event pairs of all entries */
  size_t ev_n, ev_cap;
  double *st;    /* statistics of all entries */
  size_t st_n, st_cap;
} tstat_table;

void tstat_free(tstat_table *t);
/* Lexicographic over the (key, value) pairs, a prefix first: std::map's
 * order of std::vector<std::pair<int32, int32>>. */
int tstat_event_cmp(const int32_t *a, int32_t na, const int32_t *b, int32_t nb);

/* A hash index over a table's events (Kaldi: a std::map). */
typedef struct {
  uint32_t *slot;  /* entry index + 1, 0: empty */
  size_t nslot;
} tstat_index;
void tstat_index_free(tstat_index *ix);
/* The entry of event (ev, nev) in t; if absent, appended (count 0, the
 * statistics rows x cols zeros, or null) and *created = 1. -1: out of
 * memory. */
long tstat_index_get(tstat_index *ix, tstat_table *t, const int32_t *ev, int32_t nev,
                     int32_t rows, int32_t cols, int is_null, int *created);
/* t's entries put in event order (its events unique). */
void tstat_sort(tstat_table *t);

/* ReadBuildTreeStats of one rxfilename (binary or text, "\0B" header as
 * Kaldi's Input). ERROR naming the file on failure. */
int tstat_read(const char *rxfilename, tstat_table *t);
/* WriteBuildTreeStats into wxfilename (binary: with the header). */
int tstat_write(const char *wxfilename, int binary, const tstat_table *t);

/* sum-tree-stats: the files read on up to threads threads (<= 0: this
 * process's CPU share), each entry added to the first of its event in
 * argument order (GaussClusterable::Add), the result in event order. */
int tstat_sum(const char *const *rx, int n, int threads, tstat_table *out);

/* ---- acc-tree-stats (AccumulateTreeStats) ---- */
typedef struct {
  float var_floor;          /* --var-floor */
  int32_t context_width;    /* --context-width (N) */
  int32_t central_position; /* --central-position (P) */
  const char *ci_phones;    /* --ci-phones, "" none */
  const char *phone_map;    /* --phone-map rxfilename, "" none */
} tstat_acc_opts;

typedef struct tstat_acc tstat_acc;
/* AccumulateTreeStatsInfo: checks the options, reads the phone map; Kaldi's
 * ERROR lines. */
int tstat_acc_new(tstat_acc **a, const tstat_acc_opts *o);
void tstat_acc_free(tstat_acc *a);
/* One utterance: n transition-ids, features x (x->rows == n). KIO_OK (also
 * after Kaldi's WARNING for an implausible alignment, nothing added),
 * KIO_ERR after an ERROR (a transition-id out of range, a phone the map
 * does not cover, a feature dimension other than an event's). */
int tstat_acc_utt(tstat_acc *a, const kio_tmodel *tm, const char *key, const int32_t *ali,
                  int32_t n, const kio_matrix *x);
/* The statistics so far, in event order (moved out of a). */
int tstat_acc_take(tstat_acc *a, tstat_table *out);

#ifdef __cplusplus
}
#endif
#endif
