/* Recognising the steps scripts' feature pipelines (see feat.h): a command
 * "PROG ARGS | PROG ARGS | ..." of plain words (no quoting, no shell
 * expansion, no redirection), each PROG one we implement, each option one we
 * implement with a value Kaldi's ParseOptions would accept the same way.
 * Anything else is "not recognised" and runs as the real pipe. */
#include "feat.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "base/sys/log.h"
#include "base/io/table.h"

static char *dupn(const char *s, size_t n) {
  char *d = malloc(n + 1);
  if (d) { memcpy(d, s, n); d[n] = '\0'; }
  return d;
}

static void stage_free(kio_feat_stage *s) {
  for (int i = 0; i < s->argc; i++) free(s->argv[i]);
  free(s->argv);
  free(s->utt2spk);
  free(s->table);
  free(s->selection);
  memset(s, 0, sizeof *s);
}

void kio_feat_plan_free(kio_feat_plan *p) {
  if (!p) return;
  for (int i = 0; i < p->nstages; i++) stage_free(&p->stages[i]);
  free(p->stages);
  free(p->input);
  memset(p, 0, sizeof *p);
}

/* Characters a shell would treat specially (or that we do not want to
 * reason about): a command containing any of them is not ours. */
static int shell_special(int c) {
  return strchr("'\"\\`$;&<>(){}*?[]~#!\n\r", c) != NULL;
}

/* Splits one stage into words. KIO_ERR on an empty stage. */
static int split_words(const char *s, size_t n, kio_feat_stage *st) {
  size_t i = 0;
  int cap = 0;
  while (i < n) {
    while (i < n && (s[i] == ' ' || s[i] == '\t')) i++;
    if (i == n) break;
    size_t b = i;
    while (i < n && s[i] != ' ' && s[i] != '\t') i++;
    if (st->argc == cap) {
      cap = cap ? 2 * cap : 8;
      char **a = realloc(st->argv, (size_t)cap * sizeof *a);
      if (!a) return KIO_ERR;
      st->argv = a;
    }
    if (!(st->argv[st->argc] = dupn(s + b, i - b))) return KIO_ERR;
    st->argc++;
  }
  return st->argc ? KIO_OK : KIO_ERR;
}

/* Kaldi's ToBool: "true"/"t"/"1"/"" and "false"/"f"/"0", any case. */
static int parse_bool(const char *v, int *out) {
  char b[8];
  size_t n = strlen(v);
  if (n >= sizeof b) return KIO_ERR;
  for (size_t i = 0; i <= n; i++) b[i] = (char)tolower((unsigned char)v[i]);
  if (!strcmp(b, "true") || !strcmp(b, "t") || !strcmp(b, "1") || !*b) { *out = 1; return KIO_OK; }
  if (!strcmp(b, "false") || !strcmp(b, "f") || !strcmp(b, "0")) { *out = 0; return KIO_OK; }
  return KIO_ERR;
}

static int parse_int(const char *v, int *out) {
  if (!*v) return KIO_ERR;
  char *end;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (errno || *end || x < INT_MIN || x > INT_MAX || isspace((unsigned char)*v)) return KIO_ERR;
  *out = (int)x;
  return KIO_OK;
}

static int set_str(char **dst, const char *v) {
  free(*dst);
  *dst = v ? dupn(v, strlen(v)) : NULL;
  return *dst ? KIO_OK : KIO_ERR;
}

/* One "--name[=value]" of a stage; KIO_ERR when not ours. */
static int stage_option(kio_feat_stage *st, const char *arg) {
  const char *eq = strchr(arg, '=');
  size_t nlen = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
  char name[32];
  if (nlen == 0 || nlen >= sizeof name) return KIO_ERR;
  for (size_t i = 0; i < nlen; i++) name[i] = arg[2 + i] == '_' ? '-' : arg[2 + i];
  name[nlen] = '\0';
  const char *v = eq ? eq + 1 : "";
  int has = eq != NULL;
  if (!strcmp(name, "print-args")) return parse_bool(v, &st->print_args);
  if (!strcmp(name, "verbose")) { int x; return has ? parse_int(v, &x) : KIO_ERR; }
  switch (st->op) {
    case KIO_FEAT_CMVN:
      if (!strcmp(name, "utt2spk")) return set_str(&st->utt2spk, *v ? v : NULL) == KIO_OK || !*v ? KIO_OK : KIO_ERR;
      if (!strcmp(name, "norm-means")) return parse_bool(v, &st->norm_means);
      if (!strcmp(name, "norm-vars")) return parse_bool(v, &st->norm_vars);
      if (!strcmp(name, "reverse")) return parse_bool(v, &st->reverse);
      if (!strcmp(name, "skip-dims")) return has && !*v ? KIO_OK : KIO_ERR;
      return KIO_ERR;
    case KIO_FEAT_DELTAS:
      if (!has) return KIO_ERR;
      if (!strcmp(name, "delta-order")) return parse_int(v, &st->delta_order);
      if (!strcmp(name, "delta-window")) return parse_int(v, &st->delta_window);
      if (!strcmp(name, "truncate")) return parse_int(v, &st->truncate);
      return KIO_ERR;
    case KIO_FEAT_SPLICE:
      if (!has) return KIO_ERR;
      if (!strcmp(name, "left-context")) return parse_int(v, &st->left);
      if (!strcmp(name, "right-context")) return parse_int(v, &st->right);
      return KIO_ERR;
    case KIO_FEAT_TRANSFORM:
      if (!strcmp(name, "utt2spk")) return set_str(&st->utt2spk, *v ? v : NULL) == KIO_OK || !*v ? KIO_OK : KIO_ERR;
      return KIO_ERR;
    case KIO_FEAT_COPY: {
      int b;
      if (!strcmp(name, "binary")) return parse_bool(v, &b);
      if (!strcmp(name, "compress")) return parse_bool(v, &b) == KIO_OK && !b ? KIO_OK : KIO_ERR;
      if (!strcmp(name, "compression-method")) return has ? parse_int(v, &b) : KIO_ERR;
      return KIO_ERR;
    }
    default:
      return KIO_ERR;
  }
}

static int is_stdin_rspec(const char *s) {
  kio_rspec r;
  return kio_parse_rspecifier(s, &r) == KIO_OK && r.kind == KIO_SPEC_ARCHIVE &&
         !strcmp(r.filename, "-") && !r.permissive;
}

static int is_stdout_binary_wspec(const char *s) {
  kio_wspec w;
  return kio_parse_wspecifier(s, &w) == KIO_OK && w.kind == KIO_SPEC_ARCHIVE &&
         w.binary && !strcmp(w.archive, "-");
}

/* select-feats' selection: tokens "I" or "S-E" of digits (the program reads
 * them with stream extraction; anything else would be undefined there). */
static int selection_ok(const char *s) {
  if (!*s) return 0;
  for (const char *t = s; *t;) {
    const char *e = strchr(t, ',');
    size_t n = e ? (size_t)(e - t) : strlen(t);
    size_t dash = 0, digits = 0;
    for (size_t i = 0; i < n; i++) {
      if (t[i] == '-') { if (dash || !i || i + 1 == n) return 0; dash = i; }
      else if (isdigit((unsigned char)t[i])) digits++;
      else return 0;
    }
    /* Kaldi reads the start from the first len-dash-1 characters. */
    if (dash && n - dash - 1 == 0) return 0;
    if (!digits) return 0;
    t += n;
    if (*t == ',') { t++; if (!*t) return 1; }
  }
  return 1;
}

static const struct { const char *name; kio_feat_op op; int nargs; } g_progs[] = {
  {"apply-cmvn", KIO_FEAT_CMVN, 3},  {"add-deltas", KIO_FEAT_DELTAS, 2},
  {"splice-feats", KIO_FEAT_SPLICE, 2}, {"transform-feats", KIO_FEAT_TRANSFORM, 3},
  {"select-feats", KIO_FEAT_SELECT, 3}, {"copy-feats", KIO_FEAT_COPY, 2},
};

static int parse_stage(kio_feat_stage *st, int first, int last, char **input) {
  int nargs = 0;
  const char *name = st->argv[0];
  for (size_t i = 0; i < sizeof g_progs / sizeof g_progs[0]; i++)
    if (!strcmp(name, g_progs[i].name)) {
      st->op = g_progs[i].op;
      st->prog = g_progs[i].name;
      nargs = g_progs[i].nargs;
    }
  if (!st->op) {
    kio_set_error("%s is not a feature program we implement", name);
    return KIO_ERR;
  }
  st->print_args = 1;
  st->norm_means = 1;
  st->delta_order = 2;
  st->delta_window = 2;
  st->left = st->right = 4;
  int a = 1;
  for (; a < st->argc && !strncmp(st->argv[a], "--", 2); a++) {
    if (!strcmp(st->argv[a], "--") || stage_option(st, st->argv[a]) != KIO_OK) {
      kio_set_error("%s: option %s not implemented", name, st->argv[a]);
      return KIO_ERR;
    }
  }
  if (st->argc - a != nargs) {
    kio_set_error("%s: %d arguments", name, st->argc - a);
    return KIO_ERR;
  }
  char **pos = st->argv + a;
  for (int i = 0; i < nargs; i++)
    if (!strncmp(pos[i], "--", 2)) return KIO_ERR;
  const char *in = pos[nargs - 2], *out = pos[nargs - 1];
  kio_rspec r;
  if (first) {
    if (kio_parse_rspecifier(in, &r) != KIO_OK || !strcmp(r.filename, "-") ||
        r.filename[strlen(r.filename) - 1] == '|' || !r.filename[0]) {
      kio_set_error("%s: input %s", name, in);
      return KIO_ERR;
    }
    if (!(*input = dupn(in, strlen(in)))) return KIO_ERR;
  } else if (!is_stdin_rspec(in)) {
    kio_set_error("%s: input %s is not ark:-", name, in);
    return KIO_ERR;
  }
  if (!is_stdout_binary_wspec(out)) {
    kio_set_error("%s: output %s is not a binary ark:-", name, out);
    return KIO_ERR;
  }
  (void)last;
  switch (st->op) {
    case KIO_FEAT_CMVN:
    case KIO_FEAT_TRANSFORM: {
      const char *t = pos[0];
      st->table_is_rspec = kio_parse_rspecifier(t, &r) == KIO_OK;
      if (st->table_is_rspec && r.filename[strlen(r.filename) - 1] == '|') return KIO_ERR;
      if (!st->table_is_rspec && (t[strlen(t) - 1] == '|' || !strcmp(t, "-"))) return KIO_ERR;
      if (st->utt2spk && (kio_parse_rspecifier(st->utt2spk, &r) != KIO_OK ||
                          r.filename[strlen(r.filename) - 1] == '|' || !strcmp(r.filename, "-")))
        return KIO_ERR;
      /* Cases where the program fails at once: let it say so itself. */
      if (st->op == KIO_FEAT_CMVN && st->norm_vars && !st->norm_means) return KIO_ERR;
      if (!st->table_is_rspec && st->utt2spk && st->op == KIO_FEAT_CMVN) return KIO_ERR;
      return set_str(&st->table, t);
    }
    case KIO_FEAT_DELTAS:
      /* DeltaFeatures asserts 0 <= order < 1000, 0 < window < 1000. */
      if (st->delta_order < 0 || st->delta_order >= 1000 || st->delta_window <= 0 ||
          st->delta_window >= 1000 || st->truncate < 0)
        return KIO_ERR;
      return KIO_OK;
    case KIO_FEAT_SPLICE:
      return st->left >= 0 && st->right >= 0 && st->left < 1000 && st->right < 1000 ? KIO_OK : KIO_ERR;
    case KIO_FEAT_SELECT:
      if (!selection_ok(pos[0])) return KIO_ERR;
      return set_str(&st->selection, pos[0]);
    default:
      return KIO_OK;
  }
}

int kio_feat_parse(const char *cmd, kio_feat_plan *plan) {
  memset(plan, 0, sizeof *plan);
  for (const char *c = cmd; *c; c++)
    if (shell_special((unsigned char)*c)) {
      kio_set_error("shell syntax in the command");
      return KIO_ERR;
    }
  int n = 1;
  for (const char *c = cmd; *c; c++) n += *c == '|';
  if (n > 16) return KIO_ERR;
  plan->stages = calloc((size_t)n, sizeof *plan->stages);
  if (!plan->stages) return KIO_ERR;
  const char *s = cmd;
  for (int i = 0; i < n; i++) {
    const char *e = strchr(s, '|');
    size_t len = e ? (size_t)(e - s) : strlen(s);
    plan->nstages = i + 1;
    if (split_words(s, len, &plan->stages[i]) != KIO_OK ||
        parse_stage(&plan->stages[i], i == 0, i == n - 1, &plan->input) != KIO_OK) {
      kio_feat_plan_free(plan);
      return KIO_ERR;
    }
    s = e ? e + 1 : s + len;
  }
  return KIO_OK;
}
