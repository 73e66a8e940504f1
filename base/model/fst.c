/* kio_fst: CSR training graphs. Binary objects go through the OpenFst bridge
 * (fst-bridge.cc); Kaldi's text form (reference 1.13) is parsed here, and
 * the writer emits OpenFst's binary vector format (reference 8) directly. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fst-bridge.h"
#include "fst.h"
#include "base/sys/log.h"

void kio_fst_free(kio_fst *g) {
  if (!g) return;
  free(g->arc_start);
  free(g->arcs);
  free(g->final);
  memset(g, 0, sizeof *g);
}

int kio_fst_reserve(kio_fst *g, int64_t num_states, int64_t num_arcs) {
  if (num_states < 0 || num_arcs < 0 || num_states >= INT32_MAX || num_arcs > INT32_MAX) {
    kio_set_error("FST too large (%lld states, %lld arcs)", (long long)num_states,
                  (long long)num_arcs);
    return KIO_ERR;
  }
  if (!g->arc_start || (size_t)num_states > g->state_cap) {
    size_t cap = (size_t)num_states;
    int32_t *as = realloc(g->arc_start, sizeof(int32_t) * (cap + 1));
    if (!as) { kio_set_error("out of memory"); return KIO_ERR; }
    g->arc_start = as;
    float *fi = realloc(g->final, sizeof(float) * (cap ? cap : 1));
    if (!fi) { kio_set_error("out of memory"); return KIO_ERR; }
    g->final = fi;
    g->state_cap = cap;
  }
  if (!g->arcs || (size_t)num_arcs > g->arc_cap) {
    size_t cap = (size_t)num_arcs;
    kio_arc *a = realloc(g->arcs, sizeof(kio_arc) * (cap ? cap : 1));
    if (!a) { kio_set_error("out of memory"); return KIO_ERR; }
    g->arcs = a;
    g->arc_cap = cap;
  }
  g->num_states = (int32_t)num_states;
  g->num_arcs = (int32_t)num_arcs;
  g->arc_start[0] = 0;
  g->start = -1;
  return KIO_OK;
}

int kio_fst_copy(kio_fst *dst, const kio_fst *src) {
  if (dst == src) return KIO_OK;
  if (kio_fst_reserve(dst, src->num_states, src->num_arcs) != KIO_OK) return KIO_ERR;
  dst->start = src->start;
  memcpy(dst->arc_start, src->arc_start, sizeof(int32_t) * ((size_t)src->num_states + 1));
  if (src->num_states)
    memcpy(dst->final, src->final, sizeof(float) * (size_t)src->num_states);
  if (src->num_arcs)
    memcpy(dst->arcs, src->arcs, sizeof(kio_arc) * (size_t)src->num_arcs);
  return KIO_OK;
}

/* ---- Kaldi text form ---- */

static int parse_i32(const char *s, int32_t *v) {
  char *end;
  errno = 0;
  long long x = strtoll(s, &end, 10);
  if (end == s || *end || errno || x < INT32_MIN || x > INT32_MAX) return 0;
  *v = (int32_t)x;
  return 1;
}

/* OpenFst's FloatWeight >>: "Infinity", "-Infinity", else strtod. */
static int parse_weight(const char *s, int allow_zero, float *w) {
  if (!strcmp(s, "Infinity")) *w = INFINITY;
  else if (!strcmp(s, "-Infinity")) *w = -INFINITY;
  else {
    char *end;
    double d = strtod(s, &end);
    if (end == s || *end) return 0;
    *w = (float)d;
  }
  return allow_zero || *w != INFINITY;
}

typedef struct { int32_t src; kio_arc arc; } text_arc;

/* A state id far beyond the amount of text read is corruption: refusing it
 * keeps one short line from allocating gigabytes of states (fuzzing). Real
 * graphs number their states densely. */
static int text_state_ok(int32_t s, size_t nline) {
  return s < (1 << 20) || (int64_t)s <= 16 * (int64_t)nline;
}

/* Reads one line (without '\n') into *buf; returns length, or -1 at EOF with
 * nothing read. */
static long read_line(FILE *f, char **buf, size_t *cap) {
  size_t n = 0;
  int c;
  while ((c = getc(f)) != EOF && c != '\n') {
    if (n + 1 >= *cap) {
      size_t nc = *cap ? *cap * 2 : 256;
      char *nb = realloc(*buf, nc);
      if (!nb) return -2;
      *buf = nb;
      *cap = nc;
    }
    (*buf)[n++] = (char)c;
  }
  if (c == EOF && n == 0) return -1;
  if (!*buf) { *buf = malloc(1); *cap = 1; if (!*buf) return -2; }
  (*buf)[n] = 0;
  return (long)n;
}

static int read_text(FILE *f, kio_fst *g) {
  int c;
  /* spaces up to and including one newline */
  while ((c = getc(f)) != EOF && isspace(c) && c != '\n') {}
  if (c != '\n') {
    kio_set_error("Reading FST: unexpected sequence of spaces");
    return KIO_ERR;
  }
  char *line = NULL;
  size_t line_cap = 0;
  text_arc *arcs = NULL;
  size_t narcs = 0, arcs_cap = 0;
  float *final = NULL;
  size_t final_cap = 0;
  int64_t nstates = 0;
  int32_t start = -1;
  int ret = KIO_ERR;
  long len;
  size_t nline = 0;
  while ((len = read_line(f, &line, &line_cap)) >= 0) {
    char *col[6];
    int ncol = 0;
    nline++;
    char *save = NULL;
    for (char *p = strtok_r(line, " \t\r", &save); p; p = strtok_r(NULL, " \t\r", &save)) {
      if (ncol == 6) break;
      col[ncol++] = p;
    }
    if (ncol == 0) break; /* empty line ends the FST */
    int32_t s, d;
    if (ncol > 5 || !parse_i32(col[0], &s) || s < 0 || !text_state_ok(s, nline)) goto bad;
    if (nline == 1) start = s;
    d = s;
    float w = 0.0f;
    if (ncol <= 2) {
      if (ncol == 2 && !parse_weight(col[1], 1, &w)) goto bad;
      if ((size_t)s >= final_cap) {
        size_t nc = final_cap ? final_cap : 64;
        while (nc <= (size_t)s) nc *= 2;
        float *nf = realloc(final, nc * sizeof(float));
        if (!nf) { kio_set_error("out of memory"); goto done; }
        for (size_t k = final_cap; k < nc; k++) nf[k] = INFINITY;
        final = nf;
        final_cap = nc;
      }
      final[s] = w;
    } else if (ncol == 4 || ncol == 5) {
      text_arc ta;
      ta.src = s;
      if (!parse_i32(col[1], &ta.arc.nextstate) || ta.arc.nextstate < 0 ||
          !parse_i32(col[2], &ta.arc.ilabel) || !parse_i32(col[3], &ta.arc.olabel))
        goto bad;
      ta.arc.weight = 0.0f;
      if (ncol == 5 && !parse_weight(col[4], 0, &ta.arc.weight)) goto bad;
      d = ta.arc.nextstate;
      if (!text_state_ok(d, nline)) goto bad;
      if (narcs == arcs_cap) {
        size_t nc = arcs_cap ? arcs_cap * 2 : 256;
        text_arc *na = realloc(arcs, nc * sizeof *na);
        if (!na) { kio_set_error("out of memory"); goto done; }
        arcs = na;
        arcs_cap = nc;
      }
      arcs[narcs++] = ta;
    } else {
      goto bad;
    }
    if ((int64_t)s + 1 > nstates) nstates = (int64_t)s + 1;
    if ((int64_t)d + 1 > nstates) nstates = (int64_t)d + 1;
    continue;
  bad:
    kio_set_error("Bad line in FST: %.200s", line);
    goto done;
  }
  if (len == -2) { kio_set_error("out of memory"); goto done; }
  if (kio_fst_reserve(g, nstates, (int64_t)narcs) != KIO_OK) goto done;
  g->start = start;
  /* stable counting sort of arcs by source state (insertion order kept) */
  memset(g->arc_start, 0, sizeof(int32_t) * ((size_t)nstates + 1));
  for (size_t k = 0; k < narcs; k++) g->arc_start[arcs[k].src + 1]++;
  for (int64_t s = 0; s < nstates; s++) g->arc_start[s + 1] += g->arc_start[s];
  for (size_t k = 0; k < narcs; k++) {
    int32_t s = arcs[k].src;
    g->arcs[g->arc_start[s]++] = arcs[k].arc;
  }
  for (int64_t s = nstates; s > 0; s--) g->arc_start[s] = g->arc_start[s - 1];
  g->arc_start[0] = 0;
  for (int64_t s = 0; s < nstates; s++)
    g->final[s] = (size_t)s < final_cap ? final[s] : INFINITY;
  ret = KIO_OK;
done:
  free(line);
  free(arcs);
  free(final);
  return ret;
}

int kio_fst_read(FILE *f, kio_fst *g) {
  int c = getc(f);
  if (c == EOF) {
    kio_set_error("End of stream detected reading Fst");
    return KIO_ERR;
  }
  ungetc(c, f);
  if (isspace(c)) return read_text(f, g);
  return kio_fst_read_openfst(f, g);
}

/* ---- writers ---- */

static void put_i32(FILE *f, int32_t v) { fwrite(&v, 4, 1, f); }
static void put_i64(FILE *f, int64_t v) { fwrite(&v, 8, 1, f); }
static void put_f32(FILE *f, float v) { fwrite(&v, 4, 1, f); }
static void put_str(FILE *f, const char *s) {
  put_i32(f, (int32_t)strlen(s));
  fwrite(s, 1, strlen(s), f);
}

/* OpenFst VectorFst::Write layout. Properties: only the VectorFst static
 * ones (kExpanded | kMutable), i.e. nothing else claimed known. */
int kio_fst_write(FILE *f, const kio_fst *g) {
  put_i32(f, 2125659606);
  put_str(f, "vector");
  put_str(f, "standard");
  put_i32(f, 2);            /* version */
  put_i32(f, 0);            /* flags: no symbol tables */
  put_i64(f, 0x3);          /* properties */
  put_i64(f, g->num_states > 0 ? g->start : -1);
  put_i64(f, g->num_states);
  put_i64(f, 0);            /* num_arcs: VectorFst leaves it 0 */
  for (int32_t s = 0; s < g->num_states; s++) {
    put_f32(f, g->final[s]);
    put_i64(f, (int64_t)g->arc_start[s + 1] - g->arc_start[s]);
    for (int32_t k = g->arc_start[s]; k < g->arc_start[s + 1]; k++) {
      const kio_arc *a = &g->arcs[k];
      put_i32(f, a->ilabel);
      put_i32(f, a->olabel);
      put_f32(f, a->weight);
      put_i32(f, a->nextstate);
    }
  }
  if (ferror(f)) {
    kio_set_error("write error writing FST");
    return KIO_ERR;
  }
  return KIO_OK;
}

static void fmt_weight(FILE *f, float w) {
  char buf[32];
  if (w == INFINITY) fputs("Infinity", f);
  else if (w == -INFINITY) fputs("-Infinity", f);
  else if (w != w) fputs("BadNumber", f);
  else fputs(kio_fmt_g(buf, w), f);
}

static void print_state(FILE *f, const kio_fst *g, int32_t s) {
  for (int32_t k = g->arc_start[s]; k < g->arc_start[s + 1]; k++) {
    const kio_arc *a = &g->arcs[k];
    fprintf(f, "%d\t%d\t%d\t%d", (int)s, (int)a->nextstate, (int)a->ilabel, (int)a->olabel);
    if (a->weight != 0.0f) { fputc('\t', f); fmt_weight(f, a->weight); }
    fputc('\n', f);
  }
  if (g->final[s] != INFINITY) {
    fprintf(f, "%d", (int)s);
    if (g->final[s] != 0.0f) { fputc('\t', f); fmt_weight(f, g->final[s]); }
    fputc('\n', f);
  }
}

/* Kaldi's WriteFstKaldi text mode: newline, FstPrinter lines (start state
 * first), empty line. */
static int write_text(FILE *f, const kio_fst *g) {
  fputc('\n', f);
  if (g->start >= 0 && g->start < g->num_states) {
    print_state(f, g, g->start);
    for (int32_t s = 0; s < g->num_states; s++)
      if (s != g->start) print_state(f, g, s);
  }
  fputc('\n', f);
  return ferror(f) ? KIO_ERR : KIO_OK;
}

static int holder_read(FILE *f, int binary, void *obj) {
  (void)binary; /* FST objects carry no "\0B"; the content decides */
  return kio_fst_read(f, (kio_fst *)obj);
}
static int holder_write(FILE *f, int binary, const void *obj) {
  return binary ? kio_fst_write(f, (const kio_fst *)obj) : write_text(f, (const kio_fst *)obj);
}
static void holder_free(void *obj) { kio_fst_free((kio_fst *)obj); }

const kio_holder kio_fst_holder = {
  "VectorFst<StdArc>", sizeof(kio_fst), 0, holder_read, holder_write, holder_free, NULL
};
