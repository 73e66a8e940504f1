/* gfeat-testdata: a small recipe data directory made from the fixtures'
 * features, for the device feature-chain tests (tests/cli/gpu-feats.sh):
 * the first 13 columns of each input matrix as the "raw MFCC", stored
 * compressed as Kaldi's copy-feats --compress=true does (CM for more than 8
 * rows), OUT/raw.ark + OUT/feats.scp (byte offsets); per-speaker CMVN
 * stats as compute-cmvn-stats --spk2utt writes them (double sums, sums of
 * squares, count), OUT/cmvn.ark + OUT/cmvn.scp; OUT/utt2spk (speaker = the
 * key up to its last '-' and the group of 7 utterances it falls in, so
 * that speakers' CMVN offsets differ). The last speaker gets no stats
 * entry when --drop-last-speaker is given (apply-cmvn's warning path).
 * --copies=N: the input N times, keys (and speakers) prefixed "rNNN-" as
 * tools/replicate-archive does (for dev/bench/gfeat-bench.sh).
 * --fmllr=D: also OUT/trans.ark, per speaker an affine D x (D+1) transform
 * near the identity (deterministic), for SAT-style chains
 * (transform-feats --utt2spk=ark:OUT/utt2spk ark:OUT/trans.ark). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/matrix/compressed-matrix.h"
#include "base/io/io.h"
#include "base/sys/log.h"
#include "base/matrix/matrix.h"
#include "base/io/table.h"
#include "base/program/program.h"

typedef struct { char spk[512]; double s[2][14]; } spk_stats;

static void write_stats(FILE *ark, FILE *scp, const char *ark_name, const spk_stats *st) {
  fprintf(ark, "%s ", st->spk);
  fprintf(scp, "%s %s:%ld\n", st->spk, ark_name, ftell(ark));
  kio_dmatrix m = {0};
  if (kio_dmatrix_resize(&m, 2, 14) != KIO_OK) exit(1);
  memcpy(m.data, st->s, sizeof st->s);
  fwrite("\0B", 1, 2, ark);
  if (kio_dmatrix_write(ark, 1, &m) != KIO_OK) exit(1);
  kio_dmatrix_free(&m);
}

typedef struct { char *key; kio_matrix m; } utt;

/* Speaker number s's transform: I + small deterministic terms, offsets. */
static void write_fmllr(FILE *f, const char *spk, int s, int dim) {
  kio_matrix m = {0};
  if (kio_matrix_resize(&m, dim, dim + 1) != KIO_OK) exit(1);
  for (int i = 0; i < dim; i++)
    for (int j = 0; j <= dim; j++) {
      float v = j == dim ? 0.05f * (float)((i + s) % 3 - 1)
                : 0.01f * (float)((i * 7 + j * 3 + s) % 11 - 5) / 5.0f;
      if (i == j) v += 1.0f + 0.02f * (float)((s + i) % 5 - 2);
      m.data[(size_t)i * (dim + 1) + j] = v;
    }
  fprintf(f, "%s ", spk);
  fwrite("\0B", 1, 2, f);
  if (kio_matrix_write(f, 1, &m) != KIO_OK) exit(1);
  kio_matrix_free(&m);
}

int main(int argc, char *argv[]) {
  kio_program_start(argc, argv);
  kio_log_set_program(argv[0]);
  int drop_last = 0;
  long copies = 1, fdim = 0;
  int prefix = 0;  /* --copies given: keys prefixed even for 1 copy */
  for (; argc > 1 && !strncmp(argv[1], "--", 2); argv++, argc--) {
    if (!strcmp(argv[1], "--drop-last-speaker")) drop_last = 1;
    else if (!strncmp(argv[1], "--copies=", 9)) copies = strtol(argv[1] + 9, NULL, 10), prefix = 1;
    else if (!strncmp(argv[1], "--fmllr=", 8)) fdim = strtol(argv[1] + 8, NULL, 10);
    else break;
  }
  if (argc != 3 || copies < 1) {
    fprintf(stderr, "Usage: gfeat-testdata [--drop-last-speaker] [--copies=N] [--fmllr=DIM] "
            "<features-rspecifier> <out-dir>\n");
    return 1;
  }
  const char *dir = argv[2];
  char p_raw[4096], p_scp[4096], p_cmvn[4096], p_cscp[4096], p_u2s[4096], p_tr[4096];
  snprintf(p_tr, sizeof p_tr, "%s/trans.ark", dir);
  snprintf(p_raw, sizeof p_raw, "%s/raw.ark", dir);
  snprintf(p_scp, sizeof p_scp, "%s/feats.scp", dir);
  snprintf(p_cmvn, sizeof p_cmvn, "%s/cmvn.ark", dir);
  snprintf(p_cscp, sizeof p_cscp, "%s/cmvn.scp", dir);
  snprintf(p_u2s, sizeof p_u2s, "%s/utt2spk", dir);
  FILE *raw = fopen(p_raw, "wb"), *scp = fopen(p_scp, "w"), *cmvn = fopen(p_cmvn, "wb"),
       *cscp = fopen(p_cscp, "w"), *u2s = fopen(p_u2s, "w");
  FILE *tr = fdim > 0 ? fopen(p_tr, "wb") : NULL;
  int nspk = 0;
  if (!raw || !scp || !cmvn || !cscp || !u2s || (fdim > 0 && !tr)) { fprintf(stderr, "cannot write in %s\n", dir); return 1; }
  kio_seq_reader *r = NULL;
  if (kio_seq_open(&r, argv[1], &kio_matrix_holder) != KIO_OK) return 1;
  utt *u = NULL;
  int n = 0, cap = 0;
  for (; !kio_seq_done(r); kio_seq_next(r), n++) {
    const kio_matrix *m = kio_seq_value(r);
    if (!m || m->cols < 13) { fprintf(stderr, "bad matrix for %s\n", kio_seq_key(r)); return 1; }
    if (n == cap) {
      cap = cap ? 2 * cap : 64;
      utt *nu = realloc(u, sizeof *u * (size_t)cap);
      if (!nu) return 1;
      u = nu;
    }
    u[n].key = strdup(kio_seq_key(r));
    memset(&u[n].m, 0, sizeof u[n].m);
    if (kio_matrix_resize(&u[n].m, m->rows, 13) != KIO_OK) return 1;
    for (int32_t t = 0; t < m->rows; t++)
      memcpy(u[n].m.data + (size_t)t * 13, m->data + (size_t)t * m->cols, 13 * sizeof(float));
  }
  if (kio_seq_close(r) != KIO_OK || !n) return 1;
  int width = 3;
  for (long c = copies - 1; c >= 1000 && width < 10; c /= 10) width++;
  spk_stats cur;
  memset(&cur, 0, sizeof cur);
  for (long c = 0; c < copies; c++)
    for (int i = 0; i < n; i++) {
      char key[512], spk[512];
      if (prefix) snprintf(key, sizeof key, "r%0*ld-%s", width, c, u[i].key);
      else snprintf(key, sizeof key, "%s", u[i].key);
      snprintf(spk, sizeof spk, "%s", key);
      char *dash = strrchr(spk, '-');
      if (dash) snprintf(dash, sizeof spk - (size_t)(dash - spk), "-g%02d", i / 7);
      if (cur.spk[0] && strcmp(spk, cur.spk)) {
        write_stats(cmvn, cscp, p_cmvn, &cur);
        memset(&cur, 0, sizeof cur);
      }
      if (tr && strcmp(spk, cur.spk)) write_fmllr(tr, spk, nspk++, (int)fdim);
      snprintf(cur.spk, sizeof cur.spk, "%s", spk);
      const kio_matrix *x = &u[i].m;
      for (int32_t t = 0; t < x->rows; t++) {
        for (int d = 0; d < 13; d++) {
          double v = x->data[(size_t)t * 13 + d];
          cur.s[0][d] += v;
          cur.s[1][d] += v * v;
        }
        cur.s[0][13] += 1.0;
      }
      fprintf(raw, "%s ", key);
      fprintf(scp, "%s %s:%ld\n", key, p_raw, ftell(raw));
      fwrite("\0B", 1, 2, raw);
      if (kio_matrix_write_compressed(raw, x, KIO_CM_AUTO) != KIO_OK) return 1;
      fprintf(u2s, "%s %s\n", key, spk);
    }
  if (!drop_last) write_stats(cmvn, cscp, p_cmvn, &cur);
  fclose(raw); fclose(scp); fclose(cmvn); fclose(cscp); fclose(u2s);
  if (tr) fclose(tr);
  for (int i = 0; i < n; i++) { free(u[i].key); kio_matrix_free(&u[i].m); }
  free(u);
  fprintf(stderr, "gfeat-testdata: %ld x %d utterances into %s\n", copies, n, dir);
  return 0;
}
