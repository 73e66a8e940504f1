/* Writes the seed corpora of the fuzz harnesses from the Kaldi fixtures of
 * tests/data (run from tests/data): small pieces of real objects (a few rows
 * of features in every matrix format, a cut-down training graph, a
 * TransitionModel restricted to four phones with two tiny GMMs, the mono
 * tree) plus hand-written edge cases. Usage: make-seeds OUTDIR */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/matrix/compressed-matrix.h"
#include "base/model/fst.h"
#include "base/io/io.h"
#include "base/sys/log.h"
#include "base/matrix/matrix.h"
#include "base/model/model.h"
#include "base/io/table.h"

static const char *outdir;
static int nseed;

/* Opens OUTDIR/SUB/NAME for writing, prefixed with a selector byte (or none
 * if sel < 0). */
static FILE *seed(const char *sub, const char *name, int sel) {
  char p[1024];
  snprintf(p, sizeof p, "%s/%s", outdir, sub);
  mkdir(p, 0755);
  snprintf(p, sizeof p, "%s/%s/%s", outdir, sub, name);
  FILE *f = fopen(p, "wb");
  if (!f) { fprintf(stderr, "make-seeds: cannot write %s\n", p); exit(1); }
  if (sel >= 0) fputc(sel, f);
  nseed++;
  return f;
}

static void seed_str(const char *sub, const char *name, int sel, const char *s, size_t n) {
  FILE *f = seed(sub, name, sel);
  fwrite(s, 1, n, f);
  fclose(f);
}

static void quiet(int level, const char *func, const char *file, int line,
                  const char *msg, void *user) {
  (void)func; (void)file; (void)line; (void)user;
  if (level == KIO_LOG_ERROR) fprintf(stderr, "make-seeds: %s\n", msg);
}

static void die(const char *what) {
  fprintf(stderr, "make-seeds: %s: %s\n", what, kio_last_error());
  exit(1);
}

/* First entry of a table (object copied out by the caller before close). */
static kio_seq_reader *first(const char *rspec, const kio_holder *h) {
  kio_seq_reader *r;
  if (kio_seq_open(&r, rspec, h) != KIO_OK || kio_seq_done(r)) die(rspec);
  return r;
}

static void sub_matrix(const kio_matrix *src, int32_t rows, int32_t cols, kio_matrix *dst) {
  kio_matrix_resize(dst, rows, cols);
  for (int32_t r = 0; r < rows; r++)
    for (int32_t c = 0; c < cols; c++)
      dst->data[r * cols + c] = src->data[r * src->cols + c];
}

static void matrix_seeds(kio_matrix *m3, kio_matrix *m10) {
  kio_seq_reader *r = first("ark:compressed/raw.ark", &kio_matrix_holder);
  const kio_matrix *m = kio_seq_value(r);
  sub_matrix(m, 3, 4, m3);
  sub_matrix(m, 10, m->cols, m10);
  kio_seq_close(r);

  FILE *f;
  f = seed("matrix", "fm", 0); kio_matrix_write(f, 1, m3); fclose(f);
  f = seed("matrix", "fm-text", 1); kio_matrix_write(f, 0, m3); fclose(f);
  f = seed("matrix", "cm1", 0); kio_matrix_write_compressed(f, m10, KIO_CM_SPEECH_FEATURE); fclose(f);
  f = seed("matrix", "cm2", 0); kio_matrix_write_compressed(f, m3, KIO_CM_TWO_BYTE_AUTO); fclose(f);
  f = seed("matrix", "cm3", 0); kio_matrix_write_compressed(f, m3, KIO_CM_ONE_BYTE_AUTO); fclose(f);
  f = seed("matrix", "cm-empty", 0); kio_matrix_write_compressed(f, &(kio_matrix){0}, 1); fclose(f);
  kio_dmatrix d = {0};
  kio_dmatrix_resize(&d, 2, 3);
  for (int i = 0; i < 6; i++) d.data[i] = m3->data[i];
  f = seed("matrix", "dm", 2); kio_dmatrix_write(f, 1, &d); fclose(f);
  f = seed("matrix", "dm-as-float", 0); kio_dmatrix_write(f, 1, &d); fclose(f);
  f = seed("matrix", "dm-text", 3); kio_dmatrix_write(f, 0, &d); fclose(f);
  kio_dmatrix_free(&d);
  kio_vector v = {4, m3->data, 0};
  f = seed("matrix", "fv", 4); kio_vector_write(f, 1, &v); fclose(f);
  f = seed("matrix", "fv-text", 5); kio_vector_write(f, 0, &v); fclose(f);
  kio_dvector dv = {0};
  kio_dvector_resize(&dv, 3);
  dv.data[0] = -1.5; dv.data[2] = 1e30;
  f = seed("matrix", "dv", 6); kio_dvector_write(f, 1, &dv); fclose(f);
  f = seed("matrix", "dv-text", 7); kio_dvector_write(f, 0, &dv); fclose(f);
  kio_dvector_free(&dv);
  static const char t1[] = " [ 1 2 3\n 4 5 6 ]\n", t2[] = "[ inf -nan ; 1e3 -2.5e-7 ]",
                    t3[] = " [ 1 2 ]\n", t4[] = "[]";
  seed_str("matrix", "text-inf", 1, t2, sizeof t2 - 1);
  seed_str("matrix", "text-2x3", 3, t1, sizeof t1 - 1);
  seed_str("matrix", "text-vec", 5, t3, sizeof t3 - 1);
  seed_str("matrix", "text-empty", 1, t4, sizeof t4 - 1);
}

/* Keeps states < k of g (arcs to states >= k dropped). */
static void cut_fst(const kio_fst *g, int32_t k, kio_fst *out) {
  int32_t ns = g->num_states < k ? g->num_states : k, na = 0;
  for (int32_t s = 0; s < ns; s++)
    for (int32_t a = g->arc_start[s]; a < g->arc_start[s + 1]; a++)
      if (g->arcs[a].nextstate < ns) na++;
  kio_fst tmp = {0};
  tmp.num_states = ns; tmp.num_arcs = na; tmp.start = g->start < ns ? g->start : 0;
  tmp.arc_start = malloc(sizeof(int32_t) * (size_t)(ns + 1));
  tmp.final = malloc(sizeof(float) * (size_t)(ns ? ns : 1));
  tmp.arcs = malloc(sizeof(kio_arc) * (size_t)(na ? na : 1));
  na = 0;
  for (int32_t s = 0; s < ns; s++) {
    tmp.arc_start[s] = na;
    tmp.final[s] = s == ns - 1 ? 0.0f : g->final[s];
    for (int32_t a = g->arc_start[s]; a < g->arc_start[s + 1]; a++)
      if (g->arcs[a].nextstate < ns) tmp.arcs[na++] = g->arcs[a];
  }
  tmp.arc_start[ns] = na;
  kio_fst_copy(out, &tmp);
  kio_fst_free(&tmp);
}

static void put_i32(FILE *f, int32_t v) { fwrite(&v, 4, 1, f); }
static void put_i64(FILE *f, int64_t v) { fwrite(&v, 8, 1, f); }
static void put_str(FILE *f, const char *s) { put_i32(f, (int32_t)strlen(s)); fputs(s, f); }

/* OpenFst ConstFst (version 2, not aligned) of g. */
static void write_const(FILE *f, const kio_fst *g) {
  put_i32(f, 2125659606); put_str(f, "const"); put_str(f, "standard");
  put_i32(f, 2); put_i32(f, 0); put_i64(f, 0x3);
  put_i64(f, g->start); put_i64(f, g->num_states); put_i64(f, g->num_arcs);
  for (int32_t s = 0; s < g->num_states; s++) {
    uint32_t u[4] = {(uint32_t)g->arc_start[s],
                     (uint32_t)(g->arc_start[s + 1] - g->arc_start[s]), 0, 0};
    fwrite(&g->final[s], 4, 1, f);
    fwrite(u, 4, 4, f);
  }
  fwrite(g->arcs, sizeof(kio_arc), (size_t)g->num_arcs, f);
}

/* The OpenFst binary of g (vector, or const), rewritten: with input and
 * output symbol tables after the header, or without a state count. */
static void write_variant(const char *name, const kio_fst *g, int is_const, int variant) {
  char *buf = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&buf, &len);
  if (is_const) write_const(m, g); else kio_fst_write(m, g);
  fclose(m);
  size_t flags_at = is_const ? 29 : 30, hdr_len = flags_at + 4 + 8 + 8 + 8 + 8;
  FILE *f = seed("fst", name, -1);
  if (variant == 0) {  /* symbol tables */
    int32_t flags = 3;  /* HAS_ISYMBOLS | HAS_OSYMBOLS */
    memcpy(buf + flags_at, &flags, 4);
    fwrite(buf, 1, hdr_len, f);
    for (int t = 0; t < 2; t++) {
      put_i32(f, 2125658996); put_str(f, t ? "out" : "in");
      put_i64(f, 3); put_i64(f, 2);
      put_str(f, "<eps>"); put_i64(f, 0);
      put_str(f, "a"); put_i64(f, 2);
    }
    fwrite(buf + hdr_len, 1, len - hdr_len, f);
  } else {  /* numstates -1: states until the end of the stream */
    int64_t ns = -1;
    memcpy(buf + flags_at + 4 + 8 + 8, &ns, 8);
    fwrite(buf, 1, len, f);
  }
  fclose(f);
  free(buf);
}

static void fst_seeds(kio_fst *small) {
  kio_seq_reader *r = first("ark:gunzip -c graphs/mono.fsts.gz|", &kio_fst_holder);
  cut_fst(kio_seq_value(r), 8, small);
  kio_seq_close(r);
  FILE *f;
  f = seed("fst", "vector", -1); kio_fst_write(f, small); fclose(f);
  f = seed("fst", "text", -1); kio_fst_holder.write(f, 0, small); fclose(f);
  f = seed("fst", "const", -1); write_const(f, small); fclose(f);
  write_variant("vector-syms", small, 0, 0);
  write_variant("const-syms", small, 1, 0);
  write_variant("vector-no-count", small, 0, 1);
  kio_fst empty = {0};
  empty.start = -1;
  f = seed("fst", "empty", -1); kio_fst_write(f, &empty); fclose(f);
  static const char t[] = "\n0\t1\t3\t4\t0.5\n1\t2\t0\t0\n2\t1.25\n1\n\n";
  seed_str("fst", "text2", -1, t, sizeof t - 1);
}

static void archive_seeds(const kio_matrix *m3, const kio_fst *small) {
  /* alignments: the first two entries of mono's ali.ark, 8 ints each */
  kio_seq_reader *r = first("ark:kaldi/mono/ali.ark", &kio_int_vec_holder);
  FILE *b = seed("archive", "ali", 0), *rb = seed("archive", "ali-ra", 4),
       *t = seed("archive", "ali-text", 0);
  for (int k = 0; k < 2 && !kio_seq_done(r); k++, kio_seq_next(r)) {
    kio_int_vec v = *(kio_int_vec *)kio_seq_value(r);
    if (v.n > 8) v.n = 8;
    const char *key = k ? "b" : "a";
    fprintf(b, "%s ", key); fputs("", b); fputc(0, b); fputc('B', b);
    kio_int_vec_holder.write(b, 1, &v);
    fprintf(rb, "%s ", key); fputc(0, rb); fputc('B', rb);
    kio_int_vec_holder.write(rb, 1, &v);
    fprintf(t, "%s ", key);
    kio_int_vec_holder.write(t, 0, &v);
  }
  fclose(b); fclose(rb); fclose(t);
  kio_seq_close(r);

  FILE *f = seed("archive", "feats", 1);
  fputs("a ", f); fputc(0, f); fputc('B', f); kio_matrix_write(f, 1, m3);
  fputs("b ", f); fputc(0, f); fputc('B', f); kio_matrix_write_compressed(f, m3, KIO_CM_TWO_BYTE_AUTO);
  fputs("c ", f); kio_matrix_write(f, 0, m3);
  fclose(f);
  f = seed("archive", "feats-ra-sorted", 1 | 4 | 16);
  fputs("a ", f); fputc(0, f); fputc('B', f); kio_matrix_write(f, 1, m3);
  fputs("c ", f); fputc(0, f); fputc('B', f); kio_matrix_write(f, 1, m3);
  fclose(f);
  f = seed("archive", "fsts", 2);
  fputs("a ", f); kio_fst_write(f, small);
  fputs("b ", f); kio_fst_holder.write(f, 0, small);
  fclose(f);
  f = seed("archive", "fsts-ra", 2 | 4);
  fputs("b ", f); kio_fst_write(f, small);
  fputs("a ", f); kio_fst_write(f, small);
  fclose(f);
  f = seed("archive", "scores", 3);
  float x = -1234.5f;
  fputs("a ", f); fputc(0, f); fputc('B', f); kio_write_float(f, 1, x);
  fputs("b -12.25\n", f);
  fclose(f);
}

/* TransitionModel of mono restricted to phones {1, 2, 11, 12}. */
static void small_tmodel(const kio_tmodel *tm, kio_tmodel *out) {
  static const int32_t keep[] = {1, 2, 11, 12};
  memset(out, 0, sizeof *out);
  kio_topology *t = &out->topo;
  const kio_topology *src = &tm->topo;
  t->num_phones = 4;
  t->phones = malloc(sizeof keep);
  memcpy(t->phones, keep, sizeof keep);
  t->num_phone2idx = 13;
  t->phone2idx = malloc(13 * sizeof(int32_t));
  for (int i = 0; i < 13; i++) t->phone2idx[i] = -1;
  for (int i = 0; i < 4; i++) t->phone2idx[keep[i]] = src->phone2idx[keep[i]];
  t->num_entries = src->num_entries;
  t->entries = src->entries;  /* shared (written only) */
  out->tuples = malloc(sizeof(kio_tuple) * (size_t)tm->num_tuples);
  out->log_probs = malloc(sizeof(float) * ((size_t)tm->num_tids + 1));
  out->log_probs[0] = 0.0f;
  int32_t nt = 0, ntid = 0;
  for (int32_t ts = 1; ts <= tm->num_tuples; ts++) {
    const kio_tuple *tp = &tm->tuples[ts - 1];
    int k = 0;
    for (int i = 0; i < 4; i++) k |= tp->phone == keep[i];
    if (!k) continue;
    out->tuples[nt++] = *tp;
    for (int32_t tid = tm->first_tid[ts]; tid < tm->first_tid[ts + 1]; tid++)
      out->log_probs[++ntid] = tm->log_probs[tid];
  }
  out->num_tuples = nt;
  out->num_tids = ntid;
}

static void model_seeds(void) {
  kio_tmodel tm = {0}, small;
  kio_am_gmm am = {0};
  if (kio_model_read("models/mono/final.mdl", &tm, &am) != KIO_OK) die("mono model");
  small_tmodel(&tm, &small);
  kio_diag_gmm g[2];
  for (int i = 0; i < 2; i++) {
    g[i] = am.pdfs[i];
    g[i].num_comp = g[i].num_comp < 2 ? g[i].num_comp : 2;
    g[i].dim = 3;  /* first 3 dims of each row: rows are contiguous, so repack */
    for (int c = 0; c < g[i].num_comp; c++)
      for (int d = 0; d < 3; d++) {
        g[i].means_invvars[c * 3 + d] = am.pdfs[i].means_invvars[c * am.dim + d];
        g[i].inv_vars[c * 3 + d] = am.pdfs[i].inv_vars[c * am.dim + d];
      }
  }
  kio_am_gmm a2 = {3, 2, g};
  for (int bin = 1; bin >= 0; bin--) {
    FILE *f = seed("model", bin ? "mdl" : "mdl-text", 0);
    if (bin) { fputc(0, f); fputc('B', f); }
    kio_tmodel_write(f, bin, &small);
    kio_am_gmm_write(f, bin, &a2);
    fclose(f);
  }
  small.topo.entries = NULL;
  small.topo.num_entries = 0;
  kio_tmodel_free(&small);
  kio_tmodel_free(&tm);
  kio_am_gmm_free(&am);

  /* trees: mono's own, and tiny hand-written ones */
  FILE *in = fopen("models/mono/tree", "rb");
  if (!in) die("models/mono/tree");
  FILE *f = seed("model", "tree", 1);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, in)) > 0) fwrite(buf, 1, n, f);
  fclose(f);
  fclose(in);
  static const char tt[] =
      "ContextDependency 3 1 ToPdf SE 1 [ 1 2 3 ] { TE -1 3 ( CE 0 CE 1 NULL ) "
      "TE 0 2 ( NULL SE 2 [ 5 ] { CE 3 CE 4 } ) } EndContextDependency \n";
  seed_str("model", "tree-text", 1, tt, sizeof tt - 1);
  f = seed("model", "tree-bin", 1);
  fputc(0, f); fputc('B', f);
  fputs("ContextDependency ", f);
  kio_write_int32(f, 1, 1); kio_write_int32(f, 1, 0);
  fputs("ToPdf TE ", f);
  kio_write_int32(f, 1, -1); kio_write_uint32(f, 1, 2);
  fputs("( CE ", f); kio_write_int32(f, 1, 0);
  fputs("CE ", f); kio_write_int32(f, 1, 1);
  fputs(") EndContextDependency ", f);
  fclose(f);
}

static void text_seeds(void) {
  static const char *specs[] = {
    "ark:foo.ark", "scp,p:foo.scp", "ark,s,cs:-", "ark,t:gunzip -c x.gz|",
    "ark,scp:a.ark,a.scp", "ark,t,f:| gzip -c > x.gz", "scp:b,o,ns:x", "ark,bg:foo:12",
  };
  for (size_t i = 0; i < sizeof specs / sizeof *specs; i++) {
    char name[16];
    snprintf(name, sizeof name, "s%zu", i);
    seed_str("specifier", name, -1, specs[i], strlen(specs[i]));
  }
  static const char o1[] = "--binary=false\n--beam-size=0x10\nark:a\nark:b";
  static const char o2[] = "--acoustic-scale=0.1 # c\n--name=x y\n\0--retry_beam=40\n--\n--help";
  static const char o3[] = "--verbose=2\n--print-args=false\n--binary\na";
  seed_str("options", "o1", -1, o1, sizeof o1 - 1);
  seed_str("options", "o2", -1, o2, sizeof o2 - 1);
  seed_str("options", "o3", -1, o3, sizeof o3 - 1);
}

int main(int argc, char **argv) {
  if (argc != 2) { fprintf(stderr, "usage: make-seeds OUTDIR (run in tests/data)\n"); return 1; }
  outdir = argv[1];
  kio_log_set_handler(quiet, NULL);  /* e.g. gunzip's SIGPIPE when we stop early */
  if (mkdir(outdir, 0755) != 0 && errno != EEXIST) { perror(outdir); return 1; }
  kio_matrix m3 = {0}, m10 = {0};
  kio_fst small = {0};
  matrix_seeds(&m3, &m10);
  fst_seeds(&small);
  archive_seeds(&m3, &small);
  model_seeds();
  text_seeds();
  kio_matrix_free(&m3);
  kio_matrix_free(&m10);
  kio_fst_free(&small);
  printf("make-seeds: %d seeds in %s\n", nseed, outdir);
  return 0;
}
