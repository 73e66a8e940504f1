/* Command-line parsing with Kaldi's ParseOptions semantics (reference 1.12,
 * util/parse-options.cc): --config, --help, --print-args, --verbose, usage
 * layout, value conversions (strtol base 0 / strtod, trailing text ignored). */
#include "options.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

typedef enum { T_BOOL, T_INT, T_FLOAT, T_DOUBLE, T_STRING } opt_type;

typedef struct {
  char *name;  /* as registered (printed in usage) */
  char *idx;   /* normalized: lower case, '_' -> '-' */
  char *doc;   /* help + " (TYPE, default = VALUE)" */
  opt_type type;
  void *ptr;
  int standard;
} opt;

struct kio_opts {
  char *usage;
  opt *opts;
  int n, cap;
  char **args; /* positional, malloc'd copies */
  int nargs;
  int argc;
  char **argv;
  /* standard options */
  char *config;
  int print_args, help;
  int32_t verbose;
  int failed; /* a registration or parse error happened */
};

static char *xstrdup(const char *s) {
  char *d = strdup(s ? s : "");
  if (!d) abort(); /* out of memory while parsing a command line */
  return d;
}

static char *normalize(const char *s, size_t n) {
  char *d = malloc(n + 1);
  if (!d) abort();
  for (size_t i = 0; i < n; i++) d[i] = s[i] == '_' ? '-' : (char)tolower((unsigned char)s[i]);
  d[n] = '\0';
  return d;
}

static void reg(kio_opts *o, const char *name, opt_type t, void *ptr, const char *help,
                int standard) {
  char val[64], *doc;
  const char *tn = t == T_BOOL ? "bool" : t == T_INT ? "int" : t == T_FLOAT ? "float"
                   : t == T_DOUBLE ? "double" : "string";
  switch (t) {
    case T_BOOL: snprintf(val, sizeof val, "%s", *(int *)ptr ? "true" : "false"); break;
    case T_INT: snprintf(val, sizeof val, "%d", (int)*(int32_t *)ptr); break;
    case T_FLOAT: kio_fmt_g(val, *(float *)ptr); break;
    case T_DOUBLE: kio_fmt_g(val, *(double *)ptr); break;
    default: val[0] = '\0'; break;
  }
  const char *sval = t == T_STRING ? (*(char **)ptr ? *(char **)ptr : "") : val;
  size_t len = strlen(help) + strlen(sval) + 48;
  doc = malloc(len);
  if (!doc) abort();
  if (t == T_STRING) snprintf(doc, len, "%s (%s, default = \"%s\")", help, tn, sval);
  else snprintf(doc, len, "%s (%s, default = %s)", help, tn, sval);
  char *idx = normalize(name, strlen(name));
  for (int i = 0; i < o->n; i++) {
    if (!strcmp(o->opts[i].idx, idx)) {
      KIO_WARN("Registering option twice, ignoring second time: %s", name);
      free(doc);
      free(idx);
      return;
    }
  }
  if (o->n == o->cap) {
    o->cap = o->cap ? 2 * o->cap : 32;
    o->opts = realloc(o->opts, (size_t)o->cap * sizeof *o->opts);
    if (!o->opts) abort();
  }
  o->opts[o->n++] = (opt){xstrdup(name), idx, doc, t, ptr, standard};
}

kio_opts *kio_opts_new(const char *usage) {
  kio_opts *o = calloc(1, sizeof *o);
  if (!o) return NULL;
  o->usage = xstrdup(usage);
  o->print_args = 1;
  o->verbose = kio_log_verbose();
  setvbuf(stderr, NULL, _IOLBF, 0);
  reg(o, "config", T_STRING, &o->config,
      "Configuration file to read (this option may be repeated)", 1);
  reg(o, "print-args", T_BOOL, &o->print_args, "Print the command line arguments (to stderr)", 1);
  reg(o, "help", T_BOOL, &o->help, "Print out usage message", 1);
  reg(o, "verbose", T_INT, &o->verbose, "Verbose level (higher->more logging)", 1);
  return o;
}

void kio_opts_free(kio_opts *o) {
  if (!o) return;
  for (int i = 0; i < o->n; i++) {
    free(o->opts[i].name);
    free(o->opts[i].idx);
    free(o->opts[i].doc);
  }
  for (int i = 0; i < o->nargs; i++) free(o->args[i]);
  free(o->args);
  free(o->opts);
  free(o->usage);
  free(o->config);
  free(o);
}

void kio_opts_bool(kio_opts *o, const char *name, int *v, const char *help) {
  reg(o, name, T_BOOL, v, help, 0);
}
void kio_opts_int(kio_opts *o, const char *name, int32_t *v, const char *help) {
  reg(o, name, T_INT, v, help, 0);
}
void kio_opts_float(kio_opts *o, const char *name, float *v, const char *help) {
  reg(o, name, T_FLOAT, v, help, 0);
}
void kio_opts_double(kio_opts *o, const char *name, double *v, const char *help) {
  reg(o, name, T_DOUBLE, v, help, 0);
}
void kio_opts_string(kio_opts *o, const char *name, char **v, const char *help) {
  reg(o, name, T_STRING, v, help, 0);
}

char *kio_escape_arg(const char *arg) {
  static const char ok[] = "[]~#^_-+=:.,/";
  int must = (*arg == '\0');
  for (const char *c = arg; *c && !must; c++)
    if (!isalnum((unsigned char)*c) && !strchr(ok, *c)) must = 1;
  if (!must) return xstrdup(arg);
  char q = (strchr(arg, '\'') && !strpbrk(arg, "\"`$\\")) ? '"' : '\'';
  char *out = malloc(strlen(arg) * 4 + 3), *p = out;
  if (!out) abort();
  *p++ = q;
  for (const char *c = arg; *c; c++) {
    if (*c == q) { memcpy(p, "'\\''", 4); p += 4; } /* only reached for q == '\'' */
    else *p++ = *c;
  }
  *p++ = q;
  *p = '\0';
  return out;
}

static int cmp_opt_ptr(const void *a, const void *b) {
  return strcmp((*(const opt *const *)a)->idx, (*(const opt *const *)b)->idx);
}

static void print_command_line(const kio_opts *o, FILE *f, const char *prefix) {
  fputs(prefix, f);
  for (int j = 0; j < o->argc; j++) {
    char *e = kio_escape_arg(o->argv[j]);
    fprintf(f, "%s ", e);
    free(e);
  }
  fputc('\n', f);
  fflush(f);
}

static void print_usage(const kio_opts *o, int with_command_line) {
  const opt **sorted = malloc((size_t)(o->n ? o->n : 1) * sizeof *sorted);
  if (!sorted) abort();
  for (int i = 0; i < o->n; i++) sorted[i] = &o->opts[i];
  qsort(sorted, (size_t)o->n, sizeof *sorted, cmp_opt_ptr);
  flockfile(stderr);
  fprintf(stderr, "\n%s\n", o->usage);
  int header = 0;
  for (int i = 0; i < o->n; i++) {
    if (sorted[i]->standard) continue;
    if (!header) { fputs("Options:\n", stderr); header = 1; }
    fprintf(stderr, "  --%-25s : %s\n", sorted[i]->name, sorted[i]->doc);
  }
  if (header) fputc('\n', stderr);
  fputs("Standard options:\n", stderr);
  for (int i = 0; i < o->n; i++)
    if (sorted[i]->standard)
      fprintf(stderr, "  --%-25s : %s\n", sorted[i]->name, sorted[i]->doc);
  fputc('\n', stderr);
  if (with_command_line) print_command_line(o, stderr, "Command line was: ");
  funlockfile(stderr);
  fflush(stderr);
  free(sorted);
}

void kio_opts_print_usage(const kio_opts *o) { print_usage(o, 0); }

static opt *find_opt(kio_opts *o, const char *idx) {
  for (int i = 0; i < o->n; i++)
    if (!strcmp(o->opts[i].idx, idx)) return &o->opts[i];
  return NULL;
}

static char *trim(char *s) {
  while (*s && isspace((unsigned char)*s)) s++;
  char *e = s + strlen(s);
  while (e > s && isspace((unsigned char)e[-1])) e--;
  *e = '\0';
  return s;
}

/* "--key=value" / "--key" -> normalized key (malloc'd) and trimmed value
 * (malloc'd). KIO_ERR (after usage + ERROR) for "--=value". */
static int split_long_arg(kio_opts *o, const char *in, char **key, char **value,
                          int *has_eq) {
  const char *eq = strchr(in, '=');
  if (eq == in + 2) {
    print_usage(o, 1);
    KIO_ERROR("Invalid option (no key): %s", in);
    return KIO_ERR;
  }
  *has_eq = eq != NULL;
  *key = normalize(in + 2, eq ? (size_t)(eq - in - 2) : strlen(in + 2));
  char *v = xstrdup(eq ? eq + 1 : "");
  char *t = trim(v);
  *value = xstrdup(t);
  free(v);
  return KIO_OK;
}

/* 1 set, 0 unknown key, KIO_ERR bad value (ERROR logged). */
static int set_option(kio_opts *o, const char *key, const char *value, int has_eq) {
  opt *op = find_opt(o, key);
  if (!op) return 0;
  char *end;
  switch (op->type) {
    case T_BOOL: {
      if (has_eq && !*value) {
        KIO_ERROR("Invalid option --%s=", key);
        return KIO_ERR;
      }
      char *lv = normalize(value, strlen(value));
      int b = -1;
      if (!strcmp(lv, "true") || !strcmp(lv, "t") || !strcmp(lv, "1") || !*lv) b = 1;
      else if (!strcmp(lv, "false") || !strcmp(lv, "f") || !strcmp(lv, "0")) b = 0;
      free(lv);
      if (b < 0) {
        print_usage(o, 1);
        KIO_ERROR("Invalid format for boolean argument [expected true or false]: %s", value);
        return KIO_ERR;
      }
      *(int *)op->ptr = b;
      return 1;
    }
    case T_INT: {
      long v = strtol(value, &end, 0);
      if (end == value) {
        print_usage(o, 1);
        KIO_ERROR("Invalid integer option \"%s\"", value);
        return KIO_ERR;
      }
      *(int32_t *)op->ptr = (int32_t)v;
      return 1;
    }
    case T_FLOAT:
    case T_DOUBLE: {
      double v = strtod(value, &end);
      if (end == value) {
        print_usage(o, 1);
        KIO_ERROR("Invalid floating-point option \"%s\"", value);
        return KIO_ERR;
      }
      if (op->type == T_FLOAT) *(float *)op->ptr = (float)v;
      else *(double *)op->ptr = v;
      return 1;
    }
    default:
      if (!has_eq) {
        KIO_ERROR("Invalid option --%s", key);
        return KIO_ERR;
      }
      free(*(char **)op->ptr);
      *(char **)op->ptr = xstrdup(value);
      return 1;
  }
}

static int read_config_file(kio_opts *o, const char *filename) {
  FILE *f = fopen(filename, "r");
  if (!f) {
    KIO_ERROR("Cannot open config file: %s", filename);
    return KIO_ERR;
  }
  char *line = NULL;
  size_t cap = 0;
  int lineno = 0, ret = KIO_OK;
  while (ret == KIO_OK && getline(&line, &cap, f) >= 0) {
    lineno++;
    char *hash = strchr(line, '#');
    if (hash) *hash = '\0';
    char *l = trim(line);
    if (!*l) continue;
    if (strncmp(l, "--", 2) != 0) {
      KIO_ERROR("Reading config file %s: line %d does not look like a line from a Kaldi "
                "command-line program's config file: should be of the form --x=y.  Note: "
                "config files intended to be sourced by shell scripts lack the '--'.",
                filename, lineno);
      ret = KIO_ERR;
      break;
    }
    char *key, *value;
    int has_eq;
    if (split_long_arg(o, l, &key, &value, &has_eq) != KIO_OK) {
      ret = KIO_ERR;
      break;
    }
    int r = set_option(o, key, value, has_eq);
    if (r == 0) {
      print_usage(o, 1);
      KIO_ERROR("Invalid option %s in config file %s", l, filename);
    }
    if (r != 1) ret = KIO_ERR;
    free(key);
    free(value);
  }
  free(line);
  fclose(f);
  return ret;
}

static void add_arg(kio_opts *o, const char *a) {
  char **na = realloc(o->args, (size_t)(o->nargs + 1) * sizeof *na);
  if (!na) abort();
  o->args = na;
  o->args[o->nargs++] = xstrdup(a);
}

int kio_opts_parse(kio_opts *o, int argc, char **argv) {
  o->argc = argc;
  o->argv = argv;
  if (argc > 0) kio_log_set_program(argv[0]);
  char *key, *value;
  int has_eq, i;
  /* First pass: config files and --help, in command-line order. */
  for (i = 1; i < argc; i++) {
    if (strncmp(argv[i], "--", 2) != 0) continue;
    if (!strcmp(argv[i], "--")) break;
    if (split_long_arg(o, argv[i], &key, &value, &has_eq) != KIO_OK) return KIO_OPTS_ERROR;
    int r = KIO_OK, help = !strcmp(key, "help");
    if (!strcmp(key, "config")) r = read_config_file(o, value);
    free(key);
    free(value);
    if (r != KIO_OK) return KIO_OPTS_ERROR;
    if (help) {
      print_usage(o, 0);
      return KIO_OPTS_HELP;
    }
  }
  /* Second pass: options up to the first non-option or "--". */
  int dd_seen = 0;
  for (i = 1; i < argc; i++) {
    if (strncmp(argv[i], "--", 2) != 0) break;
    if (!strcmp(argv[i], "--")) {
      i++;
      dd_seen = 1;
      break;
    }
    if (split_long_arg(o, argv[i], &key, &value, &has_eq) != KIO_OK) return KIO_OPTS_ERROR;
    int r = set_option(o, key, value, has_eq);
    free(key);
    free(value);
    if (r == 0) {
      print_usage(o, 1);
      KIO_ERROR("Invalid option %s", argv[i]);
    }
    if (r != 1) return KIO_OPTS_ERROR;
  }
  for (; i < argc; i++) {
    if (!strcmp(argv[i], "--") && !dd_seen) dd_seen = 1;
    else add_arg(o, argv[i]);
  }
  kio_log_set_verbose(o->verbose);
  if (o->print_args) print_command_line(o, stderr, "");
  return KIO_OPTS_OK;
}

int kio_opts_num_args(const kio_opts *o) { return o->nargs; }

const char *kio_opts_arg(const kio_opts *o, int i) {
  if (i < 1 || i > o->nargs) {
    KIO_ERROR("ParseOptions::GetArg, invalid index %d", i);
    return "";
  }
  return o->args[i - 1];
}

const char *kio_opts_opt_arg(const kio_opts *o, int i) {
  return (i >= 1 && i <= o->nargs) ? o->args[i - 1] : "";
}
