/* ali-compare: frame agreement between two alignment tables (tests, demo,
 * bench). Prints, one "name value" per line on stdout:
 *   utterances-first N, utterances-second N, utterances-common N,
 *   frames-compared F, frames-equal E, percent-equal P
 * A common utterance whose lengths differ counts max(len) frames compared and
 * is compared over the shorter one. Exit 0 (1 if a table cannot be read). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/sys/log.h"
#include "base/sys/options.h"
#include "base/io/table.h"
#include "base/program/program.h"

typedef struct { char *key; int32_t n; int32_t *v; } entry;
typedef struct { entry *e; size_t n, cap; } table;

static int cmp_entry(const void *a, const void *b) {
  return strcmp(((const entry *)a)->key, ((const entry *)b)->key);
}

static int read_all(const char *rspec, table *t) {
  kio_seq_reader *r;
  if (kio_seq_open(&r, rspec, &kio_int_vec_holder) != KIO_OK) return KIO_ERR;
  for (; !kio_seq_done(r); kio_seq_next(r)) {
    const kio_int_vec *a = kio_seq_value(r);
    if (!a) { kio_seq_close(r); return KIO_ERR; }
    if (t->n == t->cap) {
      size_t cap = t->cap ? 2 * t->cap : 256;
      entry *e = realloc(t->e, cap * sizeof *e);
      if (!e) { kio_seq_close(r); return KIO_ERR; }
      t->e = e;
      t->cap = cap;
    }
    entry *e = &t->e[t->n];
    e->key = strdup(kio_seq_key(r));
    e->n = a->n;
    e->v = malloc((size_t)(a->n ? a->n : 1) * sizeof(int32_t));
    if (!e->key || !e->v) { kio_seq_close(r); return KIO_ERR; }
    if (a->n) memcpy(e->v, a->v, (size_t)a->n * sizeof(int32_t));
    t->n++;
  }
  if (kio_seq_close(r) != KIO_OK) return KIO_ERR;
  qsort(t->e, t->n, sizeof *t->e, cmp_entry);
  return KIO_OK;
}

static void free_all(table *t) {
  for (size_t i = 0; i < t->n; i++) { free(t->e[i].key); free(t->e[i].v); }
  free(t->e);
}

int main(int argc, char *argv[]) {
  kio_program_start(argc, argv);
  const char *usage =
      "Compare two alignment tables frame by frame (agreement of transition-ids).\n"
      "Usage: ali-compare [options] <alignments-rspecifier1> <alignments-rspecifier2>\n"
      "e.g.: ali-compare ark:kaldi/tri2/ali.ark ark:/tmp/ali.ark\n";
  int print_diffs = 0;
  kio_opts *po = kio_opts_new(usage);
  kio_opts_bool(po, "print-diffs", &print_diffs,
                "Print, for each common utterance that differs, \"diff KEY NDIFF LEN1 LEN2\"");
  kio_program_parse(po, argc, argv, 2, 2);
  table a = {0}, b = {0};
  if (read_all(kio_opts_arg(po, 1), &a) != KIO_OK || read_all(kio_opts_arg(po, 2), &b) != KIO_OK) {
    KIO_ERROR("Could not read the alignments");
    exit(1);
  }
  long long common = 0, compared = 0, equal = 0;
  size_t i = 0, j = 0;
  while (i < a.n && j < b.n) {
    int c = strcmp(a.e[i].key, b.e[j].key);
    if (c < 0) { i++; continue; }
    if (c > 0) { j++; continue; }
    const entry *x = &a.e[i++], *y = &b.e[j++];
    int32_t n = x->n < y->n ? x->n : y->n, m = x->n > y->n ? x->n : y->n, same = 0;
    for (int32_t t = 0; t < n; t++) same += x->v[t] == y->v[t];
    common++;
    compared += m;
    equal += same;
    if (print_diffs && same != m)
      printf("diff %s %d %d %d\n", x->key, (int)(m - same), (int)x->n, (int)y->n);
  }
  printf("utterances-first %zu\nutterances-second %zu\nutterances-common %lld\n", a.n, b.n,
         common);
  printf("frames-compared %lld\nframes-equal %lld\npercent-equal %.4f\n", compared, equal,
         compared ? 100.0 * (double)equal / (double)compared : 100.0);
  free_all(&a);
  free_all(&b);
  kio_opts_free(po);
  return 0;
}
