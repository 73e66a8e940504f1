/* replicate-archive: writes a table N times with keys prefixed "rNNN-" (copy
 * number, zero-padded), so a sorted input gives a sorted output. The bench
 * uses it to build >= 10 hours of audio from the 40 fixture utterances.
 * The input is read once per copy (it may be a pipe: it is reopened).
 * --concat=KEY (matrices): one entry KEY instead, all the rows of every
 * copy one after another: a long recording (dev/device/memory-check.sh). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/model/fst.h"
#include "base/sys/log.h"
#include "base/matrix/matrix.h"
#include "base/sys/options.h"
#include "base/io/table.h"
#include "base/program/program.h"

int main(int argc, char *argv[]) {
  kio_program_start(argc, argv);
  const char *usage =
      "Replicate a table N times, keys prefixed rNNN- (sorted input -> sorted output).\n"
      "Usage: replicate-archive [options] <rspecifier> <wspecifier>\n"
      "e.g.: replicate-archive --type=fst --copies=255 \"ark:gunzip -c graphs/tri2.fsts.gz|\" \\\n"
      "        \"ark:|gzip -c >bench-data/tri2.fsts.gz\"\n"
      "      replicate-archive --type=matrix --copies=255 ark:feats/lda.ark ark:bench-data/lda.ark\n";
  char *type = strdup("matrix");
  int32_t copies = 1;
  char *concat = strdup("");
  kio_opts *po = kio_opts_new(usage);
  kio_opts_string(po, "concat", &concat, "Matrices: write one entry of this key, every row of "
                  "every copy in order");
  kio_opts_string(po, "type", &type, "Object type: matrix (features), fst (graphs), ali (alignments)");
  kio_opts_int(po, "copies", &copies, "Number of copies");
  kio_program_parse(po, argc, argv, 2, 2);
  const kio_holder *h = !strcmp(type, "matrix") ? &kio_matrix_holder
                        : !strcmp(type, "fst")  ? &kio_fst_holder
                        : !strcmp(type, "ali")  ? &kio_int_vec_holder : NULL;
  if (!h || copies < 1 || (concat[0] && h != &kio_matrix_holder)) {
    KIO_ERROR("Invalid --type=%s or --copies=%d", type, (int)copies);
    exit(255);
  }
  int width = 3;
  for (int32_t c = copies - 1; c >= 1000 && width < 10; c /= 10) width++;
  kio_writer *w;
  if (kio_writer_open(&w, kio_opts_arg(po, 2), h) != KIO_OK || !w) exit(255);
  long long n = 0;
  kio_matrix all = {0, 0, NULL, 0};
  char *key = NULL;
  size_t key_cap = 0;
  for (int32_t c = 0; c < copies; c++) {
    kio_seq_reader *r;
    if (kio_seq_open(&r, kio_opts_arg(po, 1), h) != KIO_OK) exit(255);
    for (; !kio_seq_done(r); kio_seq_next(r)) {
      const char *k = kio_seq_key(r);
      size_t need = strlen(k) + (size_t)width + 8;
      if (need > key_cap) {
        char *p = realloc(key, need);
        if (!p) exit(255);
        key = p;
        key_cap = need;
      }
      char num[16];
      int len = snprintf(num, sizeof num, "%d", (int)c);
      size_t p = 0;
      key[p++] = 'r';
      for (int z = len; z < width; z++) key[p++] = '0';
      memcpy(key + p, num, (size_t)len);
      p += (size_t)len;
      key[p++] = '-';
      strcpy(key + p, k);
      const void *obj = kio_seq_value(r);
      if (!obj) exit(255);
      if (concat[0]) {
        const kio_matrix *m = obj;
        if (all.rows && m->rows && m->cols != all.cols) {
          KIO_ERROR("Matrix %s has %d columns, the others %d", k, (int)m->cols, (int)all.cols);
          exit(255);
        }
        if (m->rows) all.cols = m->cols;
        size_t need = ((size_t)all.rows + (size_t)m->rows) * (size_t)all.cols;
        if (need > all.cap) {
          size_t cap = all.cap ? all.cap : 1 << 20;
          while (cap < need) cap *= 2;
          float *d = realloc(all.data, cap * sizeof(float));
          if (!d) exit(255);
          all.data = d;
          all.cap = cap;
        }
        if (m->rows)
          memcpy(all.data + (size_t)all.rows * (size_t)all.cols, m->data,
                 sizeof(float) * (size_t)m->rows * (size_t)m->cols);
        all.rows += m->rows;
        n++;
        continue;
      }
      if (kio_writer_write(w, key, obj) != KIO_OK) exit(255);
      n++;
    }
    if (kio_seq_close(r) != KIO_OK) exit(255);
  }
  if (concat[0] && kio_writer_write(w, concat, &all) != KIO_OK) exit(255);
  if (kio_writer_close(w) != KIO_OK) exit(255);
  if (concat[0])
    KIO_LOG("Wrote %s: %lld matrices (%d copies), %d frames", concat, n, (int)copies,
            (int)all.rows);
  else
    KIO_LOG("Wrote %lld entries (%d copies)", n, (int)copies);
  free(all.data);
  free(concat);
  free(key);
  free(type);
  kio_opts_free(po);
  return 0;
}
