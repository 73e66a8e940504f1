/* The steps scripts' model rspecifier "gmm-boost-silence --boost=B SIL MDL - |"
 * computed in process (feat.h, kio_model_stage_open): a Kaldi process per
 * job less before the model can be read. Kaldi's gmm-boost-silence reads
 * the model, scales the weights of the silence phones' pdfs by B
 * (GetPdfsForPhones, Vector::Scale: one float product each), recomputes
 * their gconsts and writes the model (binary unless --binary=false); its
 * stderr is its command line, the WARNING when a silence pdf is shared and
 * two LOG lines, printed here in that order. Anything unusual (other
 * options, a model that is not a regular file, a list Kaldi would refuse, a
 * model it would warn about or fail on) runs as the real pipe, so its
 * messages and exit status stay Kaldi's own. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "base/feat/feat.h"
#include "base/io/io.h"
#include "base/model/model.h"
#include "base/sys/kaldi-msg.h"
#include "base/sys/log.h"
#include "base/sys/options.h"
#include "base/sys/settings.h"

#define MAX_WORDS 16

struct kio_model_stage {
  char *buf;
  size_t len;
};

/* Splits cmd at blanks; 0 when it holds anything a shell would interpret. */
static int split(char *cmd, char **w, int *n) {
  for (const char *p = cmd; *p; p++)
    if (strchr("'\"\\`$;&<>(){}*?[]~#!|\n\r", *p)) return 0;
  *n = 0;
  for (char *t = strtok(cmd, " \t"); t; t = strtok(NULL, " \t")) {
    if (*n == MAX_WORDS) return 0;
    w[(*n)++] = t;
  }
  return *n > 0;
}

/* Kaldi's ToBool (a bare "--binary" is true). */
static int parse_bool(const char *v, int *out) {
  if (!strcasecmp(v, "true") || !strcasecmp(v, "t") || !strcmp(v, "1") || !*v) return *out = 1, 1;
  if (!strcasecmp(v, "false") || !strcasecmp(v, "f") || !strcmp(v, "0")) return *out = 0, 1;
  return 0;
}

/* A plain decimal number (no hex, inf or nan, which Kaldi's parser may read
 * otherwise than strtof). */
static int parse_float(const char *v, float *out) {
  if (!*v) return 0;
  for (const char *p = v; *p; p++)
    if (!isdigit((unsigned char)*p) && !strchr(".eE+-", *p)) return 0;
  char *end;
  errno = 0;
  float x = strtof(v, &end);
  if (*end || errno || !isfinite(x)) return 0;
  *out = x;
  return 1;
}

static int cmp_i32(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x > y) - (x < y);
}

/* "1:2:3": the phones sorted; 0 for what Kaldi would refuse or warn about
 * (empty, empty fields, duplicates, not numbers). */
static int parse_phones(const char *s, int32_t **out, int32_t *n) {
  size_t cap = 1;
  for (const char *p = s; *p; p++) cap += *p == ':';
  int32_t *v = malloc(cap * sizeof *v);
  if (!v) return 0;
  int32_t k = 0;
  const char *p = s;
  for (;;) {
    if (!isdigit((unsigned char)*p)) break;
    char *end;
    errno = 0;
    long x = strtol(p, &end, 10);
    if (errno || x > 1000000) break;
    v[k++] = (int32_t)x;
    if (*end == '\0') {
      qsort(v, (size_t)k, sizeof *v, cmp_i32);
      for (int32_t i = 1; i < k; i++)
        if (v[i] == v[i - 1]) goto bad;
      *out = v;
      *n = k;
      return 1;
    }
    if (*end != ':') break;
    p = end + 1;
  }
bad:
  free(v);
  return 0;
}

/* The boosted model's bytes as gmm-boost-silence writes them; 0 when the
 * real program would say more than its usual lines (or fail). */
static int boost(const char *mdl, const int32_t *phones, int32_t nphones, float factor,
                 int binary, kio_model_stage *st, int32_t *npdfs, int *shared) {
  kio_tmodel tm;
  kio_am_gmm am;
  memset(&tm, 0, sizeof tm);
  memset(&am, 0, sizeof am);
  int ok = kio_model_read(mdl, &tm, &am) == KIO_OK;
  int32_t *pdfs = ok ? malloc(sizeof(int32_t) * (2 * (size_t)tm.num_tuples + 1)) : NULL;
  ok = ok && pdfs;
  if (ok) *npdfs = kio_tmodel_pdfs_for_phones(&tm, phones, nphones, pdfs, shared);
  for (int32_t i = 0; ok && i < *npdfs; i++) {
    if (pdfs[i] < 0 || pdfs[i] >= am.num_pdfs) { ok = 0; break; }
    kio_diag_gmm *g = &am.pdfs[pdfs[i]];
    for (int32_t m = 0; m < g->num_comp; m++) g->weights[m] = g->weights[m] * factor;
    ok = kio_diag_gmm_compute_gconsts(g) == KIO_OK;
  }
  /* an infinite gconst: Kaldi warns of unusable components */
  for (int32_t j = 0; ok && j < am.num_pdfs; j++)
    for (int32_t m = 0; m < am.pdfs[j].num_comp; m++)
      if (isinf(am.pdfs[j].gconsts[m])) { ok = 0; break; }
  if (ok) {
    FILE *f = open_memstream(&st->buf, &st->len);
    ok = f && (!binary || fwrite("\0B", 1, 2, f) == 2) &&
         kio_tmodel_write(f, binary, &tm) == KIO_OK && kio_am_gmm_write(f, binary, &am) == KIO_OK;
    if (f && fclose(f) != 0) ok = 0;
  }
  free(pdfs);
  kio_tmodel_free(&tm);
  kio_am_gmm_free(&am);
  return ok;
}

FILE *kio_model_stage_open(const char *cmd, kio_model_stage **out) {
  *out = NULL;
  if (!kio_setting_flag(KIO_SET_FEATS_PIPE, 1)) return NULL;
  char *c = strdup(cmd), *w[MAX_WORDS];
  int n = 0;
  if (!c || !split(c, w, &n)) { free(c); return NULL; }
  const char *base = strrchr(w[0], '/') ? strrchr(w[0], '/') + 1 : w[0];
  float factor = 1.5f;  /* Kaldi's default */
  int binary = 1, print_args = 1, i = 1, ok = !strcmp(base, "gmm-boost-silence");
  for (; ok && i < n && !strncmp(w[i], "--", 2); i++) {
    const char *eq = strchr(w[i], '=');
    const char *v = eq ? eq + 1 : "";
    if (eq && !strncmp(w[i], "--boost=", 8)) ok = parse_float(v, &factor);
    else if (!strncmp(w[i], "--binary", 8) && (!w[i][8] || eq == w[i] + 8)) ok = parse_bool(v, &binary);
    else if (!strncmp(w[i], "--print-args", 12) && (!w[i][12] || eq == w[i] + 12))
      ok = parse_bool(v, &print_args);
    else ok = 0;
  }
  struct stat sb;
  int32_t *phones = NULL, nphones = 0;
  ok = ok && n - i == 3 && !strcmp(w[i + 2], "-") && stat(w[i + 1], &sb) == 0 &&
       S_ISREG(sb.st_mode) && parse_phones(w[i], &phones, &nphones);
  kio_model_stage *st = ok ? calloc(1, sizeof *st) : NULL;
  FILE *f = NULL;
  if (st) {
    /* its lines are gmm-boost-silence's; kept until it is known to be ours */
    const char *old = kio_log_thread_program();
    kio_log_set_thread_program("gmm-boost-silence");
    kio_log_deferred *lines = NULL;
    int32_t npdfs = 0;
    int shared = 0;
    kio_log_defer(&lines);
    ok = boost(w[i + 1], phones, nphones, factor, binary, st, &npdfs, &shared);
    kio_log_defer(NULL);
    if (ok) f = fmemopen(st->buf, st->len ? st->len : 1, "rb");
    if (f) {
      if (print_args) {
        flockfile(stderr);
        for (int k = 0; k < n; k++) {
          char *e = kio_escape_arg(w[k]);  /* Kaldi's ParseOptions::Escape */
          fprintf(stderr, "%s ", e ? e : w[k]);
          free(e);
        }
        fputc('\n', stderr);
        funlockfile(stderr);
      }
      kio_log_replay(&lines);
      if (shared) KIO_KALDI(BOOST_SHARED);
      char b[32];
      KIO_KALDI(BOOST_DONE, (int)npdfs, kio_fmt_g(b, factor));
      KIO_KALDI(BOOST_WROTE);
    }
    kio_log_discard(&lines);
    kio_log_set_thread_program(old);
    if (f) KIO_VLOG(1, "Model pipeline computed in-process: %s", cmd);
    if (!f) {
      free(st->buf);
      free(st);
      st = NULL;
    }
  }
  free(phones);
  free(c);
  *out = st;
  return f;
}

int kio_model_stage_close(kio_model_stage *st, FILE *f) {
  if (f) fclose(f);
  if (st) free(st->buf);
  free(st);
  return 0;
}
