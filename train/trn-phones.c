/* The first step of steps/diagnostic/analyze_alignments.sh, done in
 * process as the final alignments are written: per job, the pipe
 *   ali-to-phones --write-lengths=true final.mdl ark:ali.JOB.gz ark,t:- |
 *   sed -E 's/^[^ ]+ //' | awk '{begin $1; end $NF (NF>1); all $n}' |
 *   sort | uniq -c | gzip -c > phone_stats.JOB.gz
 * and its log/get_phone_alignments.JOB.log. The script then runs the rest
 * of analyze_alignments.sh (the Python summary) as the stock one does; 16
 * pipes of seven programs each are what this saves. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "base/sys/kaldi-msg.h"
#include "base/sys/log.h"
#include "train/trainer.h"
#include "train/trn-log.h"

typedef struct {
  char **v;
  size_t n, cap;
} lines;

static int add_line(lines *l, const char *kind, const char *field) {
  if (l->n == l->cap) {
    size_t cap = l->cap ? 2 * l->cap : 4096;
    char **nv = realloc(l->v, cap * sizeof *nv);
    if (!nv) return KIO_ERR;
    l->v = nv;
    l->cap = cap;
  }
  size_t a = strlen(kind), b = strlen(field);
  char *s = malloc(a + b + 2);
  if (!s) return KIO_ERR;
  memcpy(s, kind, a);
  s[a] = ' ';
  memcpy(s + a + 1, field, b + 1);
  l->v[l->n++] = s;
  return KIO_OK;
}

/* sort in the C locale (LC_ALL=C of the recipes' path.sh): byte order */
static int line_cmp(const void *x, const void *y) {
  return strcmp(*(char *const *)x, *(char *const *)y);
}

/* One utterance's lines as awk makes them from ali-to-phones' text line
 * "P1 L1 ; P2 L2 ; ... ; Pn Ln " (the key removed): fields split at " ; ",
 * so the last keeps the writer's trailing space; "begin " alone when the
 * alignment is empty. Their order does not matter (sorted after). */
static int utt_lines(lines *l, const kio_tmodel *tm, const int32_t *a, int32_t n, int32_t *ends) {
  int32_t m = kio_split_to_phones(tm, a, n, ends, NULL);
  if (m == 0) return add_line(l, "begin", "");
  char f[64];
  int rc = KIO_OK;
  for (int32_t k = 0; k < m && rc == KIO_OK; k++) {
    int32_t b = k ? ends[k - 1] : 0;
    snprintf(f, sizeof f, "%d %d%s", (int)kio_tid_to_phone(tm, a[b]), (int)(ends[k] - b),
             k + 1 == m ? " " : "");
    if (k == 0) rc = add_line(l, "begin", f);
    if (rc == KIO_OK && k + 1 == m && m > 1) rc = add_line(l, "end", f);
    if (rc == KIO_OK) rc = add_line(l, "all", f);
  }
  return rc;
}

static int write_stats(const char *path, lines *l) {
  /* read once by the summary and removed: the fastest level */
  gzFile z = gzopen(path, "wb1");
  if (!z) {
    KIO_ERROR("Could not open %s for writing", path);
    return KIO_ERR;
  }
  int ok = 1;
  for (size_t i = 0; i < l->n && ok;) {
    size_t k = i + 1;
    while (k < l->n && strcmp(l->v[k], l->v[i]) == 0) k++;
    ok = gzprintf(z, "%7zu %s\n", k - i, l->v[i]) > 0;  /* uniq -c */
    i = k;
  }
  if (gzclose(z) != Z_OK || !ok) {
    KIO_ERROR("Error writing %s", path);
    return KIO_ERR;
  }
  return KIO_OK;
}

int trn_phone_stats_job(const trn_data *d, const kio_tmodel *tm, const char *dir, int j) {
  char path[4200], cmd[8800], out[4200];
  snprintf(path, sizeof path, "%s/log/get_phone_alignments.%d.log", dir, j + 1);
  snprintf(out, sizeof out, "%s/phone_stats.%d.gz", dir, j + 1);
  snprintf(cmd, sizeof cmd, "set -o pipefail && ali-to-phones --write-lengths=true %s/final.mdl "
           "\"ark:gunzip -c %s/ali.%d.gz|\" ark,t:- | sed | awk | sort | uniq -c | gzip -c > %s "
           "(in process: gmm-train-gpu)", dir, dir, j + 1, out);
  trn_log *lg = trn_log_open(path, "ali-to-phones", cmd);
  if (!lg) return KIO_ERR;
  trn_log_use(lg);
  lines l = { NULL, 0, 0 };
  int32_t maxlen = 1, done = 0;
  for (int32_t i = d->job_start[j]; i < d->job_start[j + 1]; i++)
    if (d->u[i].ali_len > maxlen) maxlen = d->u[i].ali_len;
  int32_t *ends = malloc(sizeof(int32_t) * (size_t)maxlen);
  int rc = ends ? KIO_OK : KIO_ERR;
  /* the utterances of ali.JOB.gz, in its order */
  for (int32_t i = d->job_start[j]; i < d->job_start[j + 1] && rc == KIO_OK; i++) {
    const trn_utt *u = &d->u[i];
    if (!u->ali || u->replica) continue;
    rc = utt_lines(&l, tm, u->ali, u->ali_len, ends);
    done++;
  }
  if (rc != KIO_OK) KIO_ERROR("Out of memory");
  if (rc == KIO_OK) {
    qsort(l.v, l.n, sizeof *l.v, line_cmp);
    rc = write_stats(out, &l);
  }
  if (rc == KIO_OK) KIO_KALDI(ALI_TO_PHONES_DONE, (int)done);
  for (size_t i = 0; i < l.n; i++) free(l.v[i]);
  free(l.v);
  free(ends);
  trn_log_use(NULL);
  trn_log_close(lg);
  return rc;
}
