/* rx/wx filenames, streams, pipes, offsets (reference 1.1, 1.5) and basic
 * value I/O byte formats (reference 1.2-1.4). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/sys/settings.h"
#include "base/model/fst.h"
#include "base/io/gzip-input.h"
#include "base/io/io.h"
#include "base/sys/log.h"
#include "tests/lib/test-util.h"

/* Log capture: counts lines and keeps the last message. */
typedef struct { int n, warnings, errors; char last[1024]; } logcap;
static logcap cap;
static void cap_handler(int level, const char *func, const char *file, int line,
                        const char *msg, void *user) {
  (void)func; (void)file; (void)line; (void)user;
  cap.n++;
  if (level == KIO_LOG_WARNING) cap.warnings++;
  if (level == KIO_LOG_ERROR) cap.errors++;
  snprintf(cap.last, sizeof cap.last, "%s", msg);
}
static void cap_start(void) {
  memset(&cap, 0, sizeof cap);
  kio_log_set_handler(cap_handler, NULL);
}

/* Writes with fn into memory, returns bytes (malloc'd) and length. */
static char *mem_buf;
static size_t mem_len;
static FILE *mem_out(void) { return open_memstream(&mem_buf, &mem_len); }
static void mem_close(FILE *f) { fclose(f); }
static FILE *mem_in(const char *buf, size_t len) { return fmemopen((void *)buf, len, "rb"); }

START_TEST(classify_rx) {
  struct { const char *s; kio_rx_kind k; } t[] = {
    {"", KIO_RX_STDIN}, {"-", KIO_RX_STDIN}, {"gunzip -c a.gz |", KIO_RX_PIPE},
    {"gunzip -c a.gz|", KIO_RX_PIPE}, {"| cat", KIO_RX_INVALID}, {" a", KIO_RX_INVALID},
    {"a ", KIO_RX_INVALID}, {"ark:foo", KIO_RX_INVALID}, {"scp:foo", KIO_RX_INVALID},
    {"ark,t:foo", KIO_RX_INVALID}, {"a:b", KIO_RX_FILE}, {"foo.ark:123", KIO_RX_OFFSET},
    {"/x/foo.ark:0", KIO_RX_OFFSET}, {"foo.ark.1", KIO_RX_FILE}, {"foo:12a", KIO_RX_FILE},
    {"a|b", KIO_RX_INVALID}, {"feats/delta.ark", KIO_RX_FILE}, {"scpfile", KIO_RX_FILE},
  };
  cap_start();
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
    ck_assert_msg(kio_classify_rxfilename(t[i].s) == t[i].k, "rx '%s'", t[i].s);
}
END_TEST

START_TEST(classify_wx) {
  struct { const char *s; kio_wx_kind k; } t[] = {
    {"", KIO_WX_STDOUT}, {"-", KIO_WX_STDOUT}, {"| gzip -c > a.gz", KIO_WX_PIPE},
    {"gzip -c |", KIO_WX_INVALID}, {" a", KIO_WX_INVALID}, {"a\t", KIO_WX_INVALID},
    {"ark:foo", KIO_WX_INVALID}, {"ark,scp:a,b", KIO_WX_INVALID}, {"foo.ark:12", KIO_WX_INVALID},
    {"a|b", KIO_WX_INVALID}, {"out/ali.1.ark", KIO_WX_FILE},
  };
  cap_start();
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
    ck_assert_msg(kio_classify_wxfilename(t[i].s) == t[i].k, "wx '%s'", t[i].s);
}
END_TEST

START_TEST(binary_basic_bytes) {
  FILE *f = mem_out();
  kio_write_int32(f, 1, 42);
  kio_write_uint32(f, 1, 7);
  kio_write_uint16(f, 1, 15);
  kio_write_float(f, 1, 1.5f);
  kio_write_double(f, 1, -2.0);
  kio_write_bool(f, 1, 1);
  kio_write_bool(f, 1, 0);
  kio_write_token(f, 1, "<DiagGMM>");
  mem_close(f);
  static const unsigned char want[] = {
    0x04, 42, 0, 0, 0, 0xFC, 7, 0, 0, 0, 0xFE, 15, 0, 0x04, 0, 0, 0xC0, 0x3F,
    0x08, 0, 0, 0, 0, 0, 0, 0, 0xC0, 'T', 'F', '<', 'D', 'i', 'a', 'g', 'G', 'M', 'M', '>', ' '};
  ck_assert_uint_eq(mem_len, sizeof want);
  ck_assert(memcmp(mem_buf, want, sizeof want) == 0);
  FILE *in = mem_in(mem_buf, mem_len);
  int32_t i; uint32_t u; uint16_t h; float x; double d; int b1, b2;
  char tok[64];
  ck_assert_int_eq(kio_read_int32(in, 1, &i), KIO_OK);
  ck_assert_int_eq(kio_read_uint32(in, 1, &u), KIO_OK);
  ck_assert_int_eq(kio_read_uint16(in, 1, &h), KIO_OK);
  ck_assert_int_eq(kio_read_double(in, 1, &d), KIO_OK); /* float widened */
  ck_assert_int_eq(kio_read_float(in, 1, &x), KIO_OK);  /* double narrowed */
  ck_assert_int_eq(kio_read_bool(in, 1, &b1), KIO_OK);
  ck_assert_int_eq(kio_read_bool(in, 1, &b2), KIO_OK);
  ck_assert_int_eq(kio_peek_token(in, 1), 'D');
  ck_assert_int_eq(kio_peek(in, 1), '<');
  ck_assert_int_eq(kio_read_token(in, 1, tok, sizeof tok), KIO_OK);
  ck_assert_int_eq(kio_peek(in, 1), -1);
  ck_assert(i == 42 && u == 7 && h == 15 && d == 1.5 && x == -2.0f && b1 == 1 && b2 == 0);
  ck_assert_str_eq(tok, "<DiagGMM>");
  fclose(in);
  free(mem_buf);
}
END_TEST

START_TEST(binary_wrong_length_byte) {
  static const char u32[] = {(char)0xFC, 1, 0, 0, 0};
  FILE *in = mem_in(u32, sizeof u32);
  int32_t i;
  ck_assert_int_eq(kio_read_int32(in, 1, &i), KIO_ERR);
  ck_assert_ptr_nonnull(strstr(kio_last_error(), "-4 vs. 4"));
  fclose(in);
  static const char trunc[] = {4, 1, 0};
  in = mem_in(trunc, sizeof trunc);
  ck_assert_int_eq(kio_read_int32(in, 1, &i), KIO_ERR);
  fclose(in);
  in = mem_in(trunc, 0);
  ck_assert_int_eq(kio_read_int32(in, 1, &i), KIO_ERR);
  ck_assert_ptr_nonnull(strstr(kio_last_error(), "end of stream"));
  fclose(in);
  static const char bad_float[] = {5, 0, 0, 0, 0, 0};
  float x;
  in = mem_in(bad_float, sizeof bad_float);
  ck_assert_int_eq(kio_read_float(in, 1, &x), KIO_ERR);
  fclose(in);
}
END_TEST

START_TEST(text_basic) {
  FILE *f = mem_out();
  kio_write_int32(f, 0, -42);
  kio_write_uint16(f, 0, 65535);
  kio_write_float(f, 0, 1.0f / 3.0f);
  kio_write_float(f, 0, 0.1f);
  kio_write_double(f, 0, 1234567.0);
  kio_write_double(f, 0, 12345678.0);
  kio_write_float(f, 0, 1e-10f);
  kio_write_float(f, 0, INFINITY);
  kio_write_float(f, 0, -INFINITY);
  kio_write_double(f, 0, NAN);
  kio_write_bool(f, 0, 1);
  kio_write_token(f, 0, "<Tok>");
  mem_close(f);
  ck_assert_str_eq(mem_buf, "-42 65535 0.3333333 0.1 1234567 1.234568e+07 1e-10 inf -inf nan "
                            "T <Tok> ");
  FILE *in = mem_in(mem_buf, mem_len);
  int32_t i; uint16_t h; float a, b, g, pinf, minf; double c, e, n; int t;
  ck_assert_int_eq(kio_read_int32(in, 0, &i), KIO_OK);
  ck_assert_int_eq(kio_read_uint16(in, 0, &h), KIO_OK);
  ck_assert_int_eq(kio_read_float(in, 0, &a), KIO_OK);
  ck_assert_int_eq(kio_read_float(in, 0, &b), KIO_OK);
  ck_assert_int_eq(kio_read_double(in, 0, &c), KIO_OK);
  ck_assert_int_eq(kio_read_double(in, 0, &e), KIO_OK);
  ck_assert_int_eq(kio_read_float(in, 0, &g), KIO_OK);
  ck_assert_int_eq(kio_read_float(in, 0, &pinf), KIO_OK);
  ck_assert_int_eq(kio_read_float(in, 0, &minf), KIO_OK);
  ck_assert_int_eq(kio_read_double(in, 0, &n), KIO_OK);
  ck_assert_int_eq(kio_read_bool(in, 0, &t), KIO_OK);
  ck_assert_int_eq(kio_peek_token(in, 0), 'T');
  ck_assert_int_eq(kio_expect_token(in, 0, "<Tok>"), KIO_OK);
  ck_assert(i == -42 && h == 65535 && a == 0.3333333f && b == 0.1f && c == 1234567.0);
  ck_assert(e == 12345680.0 && g == 1e-10f && isinf(pinf) && pinf > 0 && isinf(minf) &&
            minf < 0 && isnan(n) && t == 1);
  fclose(in);
  free(mem_buf);
}
END_TEST

START_TEST(text_errors) {
  const char *s = "abc 99999999999 <A>x <B>";
  FILE *in = mem_in(s, strlen(s));
  int32_t i;
  float x;
  char tok[8];
  ck_assert_int_eq(kio_read_int32(in, 0, &i), KIO_ERR);
  ck_assert_int_eq(kio_expect_token(in, 0, "abc"), KIO_OK);
  ck_assert_int_eq(kio_read_int32(in, 0, &i), KIO_ERR); /* overflow */
  ck_assert_int_eq(kio_expect_token(in, 0, "<A>"), KIO_ERR);
  ck_assert_ptr_nonnull(strstr(kio_last_error(), "Expected token \"<A>\", got instead \"<A>x\""));
  ck_assert_int_eq(kio_read_token(in, 0, tok, sizeof tok), KIO_ERR); /* "<B>" at EOF */
  fclose(in);
  s = "Diag> 1.5x";
  in = mem_in(s, strlen(s));
  ck_assert_int_eq(kio_expect_token(in, 0, "<Diag>"), KIO_OK); /* missing '<' tolerated */
  ck_assert_int_eq(kio_read_float(in, 0, &x), KIO_OK);
  ck_assert(x == 1.5f);
  ck_assert_int_eq(kio_peek(in, 0), 'x');
  int b;
  ck_assert_int_eq(kio_read_bool(in, 0, &b), KIO_ERR);
  fclose(in);
}
END_TEST

START_TEST(int_vector_formats) {
  int32_t v[] = {1, -2, 300};
  FILE *f = mem_out();
  kio_write_int_vector(f, 1, v, 3);
  kio_write_int_vector(f, 0, v, 3);
  kio_write_int_vector(f, 0, v, 0);
  mem_close(f);
  static const unsigned char want[] = {4, 3, 0, 0, 0, 1, 0, 0, 0, 0xFE, 0xFF, 0xFF, 0xFF,
                                       0x2C, 1, 0, 0};
  ck_assert(memcmp(mem_buf, want, sizeof want) == 0);
  ck_assert_str_eq(mem_buf + sizeof want, "[ 1 -2 300 ]\n[ ]\n");
  FILE *in = mem_in(mem_buf, mem_len);
  int32_t *r, n;
  ck_assert_int_eq(kio_read_int_vector(in, 1, &r, &n), KIO_OK);
  ck_assert(n == 3 && r[0] == 1 && r[1] == -2 && r[2] == 300);
  free(r);
  ck_assert_int_eq(kio_read_int_vector(in, 0, &r, &n), KIO_OK);
  ck_assert(n == 3 && r[2] == 300);
  free(r);
  ck_assert_int_eq(kio_read_int_vector(in, 0, &r, &n), KIO_OK);
  ck_assert_int_eq(n, 0);
  free(r);
  fclose(in);
  free(mem_buf);
  /* corrupt: negative count, missing '[' , bad element */
  static const char neg[] = {4, (char)0xFF, (char)0xFF, (char)0xFF, (char)0xFF};
  in = mem_in(neg, sizeof neg);
  ck_assert_int_eq(kio_read_int_vector(in, 1, &r, &n), KIO_ERR);
  fclose(in);
  in = mem_in("1 2 ]", 5);
  ck_assert_int_eq(kio_read_int_vector(in, 0, &r, &n), KIO_ERR);
  fclose(in);
  in = mem_in("[ 1 x ]", 7);
  ck_assert_int_eq(kio_read_int_vector(in, 0, &r, &n), KIO_ERR);
  fclose(in);
}
END_TEST

static void write_file(const char *path, const char *data, size_t n) {
  FILE *f = fopen(path, "wb");
  ck_assert_ptr_nonnull(f);
  fwrite(data, 1, n, f);
  fclose(f);
}

START_TEST(headers_and_offsets) {
  const char *p = tu_tmp_path("hdr.bin");
  write_file(p, "\0B\x04\x05\0\0\0xyz\0Q", 12);
  kio_input *in;
  int binary = -1;
  char rx[600];
  snprintf(rx, sizeof rx, "%s:0", p);
  ck_assert_int_eq(kio_input_open(&in, rx, &binary), KIO_OK);
  ck_assert_int_eq(binary, 1);
  int32_t v;
  ck_assert_int_eq(kio_read_int32(kio_input_stream(in), 1, &v), KIO_OK);
  ck_assert_int_eq(v, 5);
  FILE *first = kio_input_stream(in);
  /* same file at an offset: stream reused, just seeked; header read there */
  snprintf(rx, sizeof rx, "%s:7", p);
  ck_assert_int_eq(kio_input_reopen(&in, rx, &binary), KIO_OK);
  ck_assert_ptr_eq(kio_input_stream(in), first);
  ck_assert_int_eq(binary, 0);
  ck_assert_int_eq(getc(kio_input_stream(in)), 'x');
  snprintf(rx, sizeof rx, "%s:0", p);
  ck_assert_int_eq(kio_input_reopen(&in, rx, &binary), KIO_OK);
  ck_assert_ptr_eq(kio_input_stream(in), first);
  ck_assert_int_eq(binary, 1);
  ck_assert_str_eq(kio_input_name(in), rx);
  /* "\0" not followed by 'B' is an error */
  snprintf(rx, sizeof rx, "%s:10", p);
  cap_start();
  ck_assert_int_eq(kio_input_reopen(&in, rx, &binary), KIO_ERR);
  ck_assert_ptr_null(in);
  ck_assert_int_eq(cap.errors, 1);
  ck_assert_ptr_nonnull(strstr(cap.last, rx));
  ck_assert_int_eq(kio_input_close(in), KIO_OK);
  /* a plain-file open followed by an offset one: a new stream */
  ck_assert_int_eq(kio_input_open(&in, p, &binary), KIO_OK);
  snprintf(rx, sizeof rx, "%s:3", p);
  ck_assert_int_eq(kio_input_reopen(&in, rx, NULL), KIO_OK);
  ck_assert_int_eq(getc(kio_input_stream(in)), 5);
  ck_assert_int_eq(kio_input_close(in), KIO_OK);
  /* empty file is text */
  const char *e = tu_tmp_path("empty");
  write_file(e, "", 0);
  ck_assert_int_eq(kio_input_open(&in, e, &binary), KIO_OK);
  ck_assert_int_eq(binary, 0);
  ck_assert_int_eq(kio_input_close(in), KIO_OK);
}
END_TEST

START_TEST(missing_and_invalid_inputs) {
  kio_input *in;
  int binary;
  cap_start();
  ck_assert_int_eq(kio_input_open(&in, "no/such/file", &binary), KIO_ERR);
  ck_assert_ptr_null(in);
  ck_assert_str_eq(cap.last, "Error opening input stream no/such/file");
  ck_assert_int_eq(kio_input_open(&in, "ark:foo", &binary), KIO_ERR);
  ck_assert_int_eq(kio_input_open(&in, "a|b", NULL), KIO_ERR);
  char rx[600];
  snprintf(rx, sizeof rx, "%s:5", "no/such/file");
  ck_assert_int_eq(kio_input_open(&in, rx, NULL), KIO_ERR);
  kio_output *out;
  ck_assert_int_eq(kio_output_open(&out, "no/such/dir/x", 1, 1), KIO_ERR);
  ck_assert_ptr_null(out);
  ck_assert_str_eq(cap.last, "Error opening output stream no/such/dir/x");
  ck_assert_int_eq(kio_output_open(&out, "x:12", 1, 1), KIO_ERR);
}
END_TEST

START_TEST(pipes) {
  kio_input *in;
  int binary;
  ck_assert_int_eq(kio_input_open(&in, "printf 'hello world' |", &binary), KIO_OK);
  ck_assert_int_eq(binary, 0);
  char tok[32];
  ck_assert_int_eq(kio_read_token(kio_input_stream(in), 0, tok, sizeof tok), KIO_OK);
  ck_assert_str_eq(tok, "hello");
  ck_assert_int_eq(kio_input_close(in), KIO_OK);
  /* failed pipe: reported at close with the raw wait status */
  cap_start();
  ck_assert_int_eq(kio_input_open(&in, "false |", &binary), KIO_OK);
  ck_assert_int_eq(kio_input_close(in), KIO_ERR);
  ck_assert_int_eq(cap.warnings, 1);
  ck_assert_str_eq(cap.last, "Pipe false | had nonzero return status 256");
  kio_log_set_handler(NULL, NULL);
  /* output pipe, with header */
  const char *p = tu_tmp_path("pipe-out.bin");
  char wx[600];
  snprintf(wx, sizeof wx, "| cat > %s", p);
  kio_output *out;
  ck_assert_int_eq(kio_output_open(&out, wx, 1, 1), KIO_OK);
  kio_write_int32(kio_output_stream(out), 1, 9);
  ck_assert_str_eq(kio_output_name(out), wx);
  ck_assert_int_eq(kio_output_close(out), KIO_OK);
  size_t n;
  unsigned char *b = tu_read_file(p, &n);
  ck_assert_uint_eq(n, 7);
  ck_assert(memcmp(b, "\0B\x04\x09\0\0\0", 7) == 0);
  free(b);
  cap_start();
  ck_assert_int_eq(kio_output_open(&out, "| cat > /dev/null; exit 3", 0, 0), KIO_OK);
  ck_assert_int_eq(kio_output_close(out), KIO_ERR);
  ck_assert_str_eq(cap.last, "Pipe | cat > /dev/null; exit 3 had nonzero return status 768");
  kio_log_set_handler(NULL, NULL);
}
END_TEST

START_TEST(text_output_file) {
  const char *p = tu_tmp_path("text-out.txt");
  kio_output *out;
  ck_assert_int_eq(kio_output_open(&out, p, 0, 1), KIO_OK); /* text: no header */
  kio_write_token(kio_output_stream(out), 0, "<X>");
  ck_assert_int_eq(kio_output_close(out), KIO_OK);
  ck_assert(tu_files_equal(p, p));
  size_t n;
  unsigned char *b = tu_read_file(p, &n);
  ck_assert_uint_eq(n, 4);
  ck_assert(memcmp(b, "<X> ", 4) == 0);
  free(b);
  ck_assert_int_eq(kio_output_close(NULL), KIO_OK);
  ck_assert_int_eq(kio_input_close(NULL), KIO_OK);
}
END_TEST

/* ---- "gunzip -c PATH |" decompressed in-process (base/io/gzip-input.c) ----
 * The oracle is the real gunzip: each case is read once in-process and once
 * through popen (KALDI_GPU_GUNZIP_PIPE=1); bytes, gzip's stderr and the close
 * status/WARNING must be identical. */
typedef struct {
  char *data, *err;
  size_t len;
  int open_rc, close_rc, warnings;
  char warn[1024];
} gz_result;

static void gz_read(const char *rx, int force_pipe, size_t limit, gz_result *r) {
  memset(r, 0, sizeof *r);
  if (force_pipe) kio_setting_override(KIO_SET_GUNZIP_PIPE, "1");
  else kio_setting_override(KIO_SET_GUNZIP_PIPE, NULL);
  cap_start();
  tu_stderr_start();
  kio_input *in = NULL;
  FILE *m = open_memstream(&r->data, &r->len);
  r->open_rc = kio_input_open(&in, rx, NULL);
  if (r->open_rc == KIO_OK) {
    char buf[4096];
    size_t n, tot = 0;
    while (tot < limit && (n = fread(buf, 1, limit - tot < sizeof buf ? limit - tot : sizeof buf,
                                     kio_input_stream(in))) > 0) {
      fwrite(buf, 1, n, m);
      tot += n;
    }
    r->close_rc = kio_input_close(in);
  }
  fclose(m);
  r->err = tu_stderr_end();
  r->warnings = cap.warnings;
  snprintf(r->warn, sizeof r->warn, "%s", cap.last);
  kio_log_set_handler(NULL, NULL);
  kio_setting_override(KIO_SET_GUNZIP_PIPE, NULL);
}

static void gz_free_result(gz_result *r) {
  free(r->data);
  free(r->err);
}

/* Reads rx both ways, asserts equality; returns the in-process result. */
static void gz_same(const char *rx, size_t limit, gz_result *a) {
  gz_result b;
  gz_read(rx, 0, limit, a);
  gz_read(rx, 1, limit, &b);
  ck_assert_msg(a->open_rc == b.open_rc, "%s: open", rx);
  ck_assert_msg(a->len == b.len && (a->len == 0 || !memcmp(a->data, b.data, a->len)),
                "%s: %zu bytes in-process, %zu through the pipe", rx, a->len, b.len);
  ck_assert_msg(!strcmp(a->err, b.err), "%s: stderr '%s' vs '%s'", rx, a->err, b.err);
  ck_assert_msg(a->close_rc == b.close_rc && a->warnings == b.warnings &&
                !strcmp(a->warn, b.warn), "%s: close '%s' vs '%s'", rx, a->warn, b.warn);
  gz_free_result(&b);
}

/* Reads rx with PATH emptied, so that a popen'd gunzip cannot run. */
static void gz_read_nopath(const char *rx, gz_result *r) {
  char *path = strdup(getenv("PATH") ? getenv("PATH") : "");
  setenv("PATH", "/nonexistent", 1);
  gz_read(rx, 0, (size_t)-1, r);
  setenv("PATH", path, 1);
  free(path);
}
/* 1 if rx (a valid gzip file) is read in-process. */
static int gz_in_process(const char *rx) {
  gz_result r;
  gz_read_nopath(rx, &r);
  int ok = r.open_rc == KIO_OK && r.close_rc == KIO_OK && r.len > 0;
  gz_free_result(&r);
  return ok;
}

static char gz_dir[64];
static void gz_tmpdir(void) {
  snprintf(gz_dir, sizeof gz_dir, "/tmp/kio-gz-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(gz_dir));
}
static void gz_rmdir(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", gz_dir);
  ck_assert_int_eq(tu_run(cmd, NULL), 0);
}
static void gz_sh(const char *fmt, const char *arg) {
  char cmd[1024];
  snprintf(cmd, sizeof cmd, fmt, arg); /* fmt: one %s */
  ck_assert_msg(tu_run(cmd, NULL) == 0, "%s", cmd);
}
static void gz_write(const char *name, const void *d, size_t n) {
  char p[256];
  snprintf(p, sizeof p, "%s/%s", gz_dir, name);
  FILE *f = fopen(p, "wb");
  ck_assert_ptr_nonnull(f);
  ck_assert_uint_eq(fwrite(d, 1, n, f), n);
  fclose(f);
}

START_TEST(gzip_cmd_forms) {
  static const char *yes[] = {"gunzip -c a.gz", "  gunzip   -c  d/a-1_b.fsts.gz  ",
                              "gzip -cd a", "gzip -dc /x/y+z,w:v=u@t%s.gz", "zcat a.gz"};
  static const char *no[] = {"gunzip -c 'a b.gz'", "gunzip -c a;b.gz", "gunzip -c a.gz; ls",
                             "gunzip -c -- a.gz", "gunzip -c -a.gz", "gunzip -cf a.gz",
                             "gunzip a.gz", "gunzip -c a.gz b.gz", "gunzip\t-c a.gz",
                             "gunzip -c ~/a.gz", "gunzip -c $HOME/a.gz", "gunzip -c *.gz",
                             "gunzip -c \"a.gz\"", "zcat", "gzip -c a.gz", "gzip -d a.gz",
                             "/bin/gunzip -c a.gz", "gunzip -c a.gz > b", "zcat a.gz|cat"};
  char *p;
  for (size_t i = 0; i < sizeof yes / sizeof *yes; i++) {
    ck_assert_msg(kio_gzip_parse_cmd(yes[i], &p), "%s", yes[i]);
    free(p);
  }
  ck_assert(kio_gzip_parse_cmd("  gunzip   -c  d/a.gz  ", &p));
  ck_assert_str_eq(p, "d/a.gz");
  free(p);
  for (size_t i = 0; i < sizeof no / sizeof *no; i++)
    ck_assert_msg(!kio_gzip_parse_cmd(no[i], &p), "%s", no[i]);
}
END_TEST

START_TEST(gzip_fixtures_same_bytes) {
  static const char *f[] = {"graphs/mono.fsts.gz", "graphs/tri1.fsts.gz",
                            "graphs/tri2.fsts.gz"};
  char rx[256];
  for (size_t i = 0; i < 3; i++) {
    static const char *form[] = {"gunzip -c %s|", "zcat  %s |", "gzip -dc %s|"};
    snprintf(rx, sizeof rx, form[i], f[i]);
    gz_result r;
    gz_same(rx, (size_t)-1, &r);
    ck_assert_uint_gt(r.len, 100000);
    ck_assert_str_eq(r.err, "");
    ck_assert_int_eq(r.close_rc, KIO_OK);
    gz_free_result(&r);
    ck_assert_msg(gz_in_process(rx), "%s not read in-process", rx);
  }
}
END_TEST

START_TEST(gzip_table_reader) {
  kio_seq_reader *a, *b;
  ck_assert_int_eq(kio_seq_open(&a, "ark:gunzip -c graphs/mono.fsts.gz|", &kio_fst_holder),
                   KIO_OK);
  kio_setting_override(KIO_SET_GUNZIP_PIPE, "1");
  ck_assert_int_eq(kio_seq_open(&b, "ark:gunzip -c graphs/mono.fsts.gz|", &kio_fst_holder),
                   KIO_OK);
  kio_setting_override(KIO_SET_GUNZIP_PIPE, NULL);
  int n = 0;
  for (; !kio_seq_done(a); kio_seq_next(a), kio_seq_next(b), n++) {
    ck_assert(!kio_seq_done(b));
    ck_assert_str_eq(kio_seq_key(a), kio_seq_key(b));
    const kio_fst *x = kio_seq_value(a), *y = kio_seq_value(b);
    ck_assert(x && y);
    ck_assert_int_eq(x->num_states, y->num_states);
    ck_assert_int_eq(x->num_arcs, y->num_arcs);
    ck_assert_int_eq(x->start, y->start);
    ck_assert(!memcmp(x->arcs, y->arcs, (size_t)x->num_arcs * sizeof *x->arcs));
    ck_assert(!memcmp(x->final, y->final, (size_t)x->num_states * sizeof *x->final));
  }
  ck_assert(kio_seq_done(b));
  ck_assert_int_eq(n, 40);
  ck_assert_int_eq(kio_seq_close(a), KIO_OK);
  ck_assert_int_eq(kio_seq_close(b), KIO_OK);
}
END_TEST

/* Multi-member, zero padding, trailing garbage, truncation, CRC/length
 * errors, bad headers, not gzip, missing file, directory. */
START_TEST(gzip_members_and_errors) {
  gz_tmpdir();
  gz_sh("cd %s && printf 'hello\\n' > a && seq 1 200000 > b && gzip -c a > x.gz && "
        "gzip -c b >> x.gz && gzip -c a >> x.gz", gz_dir);
  char p[256];
  snprintf(p, sizeof p, "%s/x.gz", gz_dir);
  size_t n;
  unsigned char *x = tu_read_file(p, &n);
  ck_assert_ptr_nonnull(x);
  size_t m1 = 28; /* first member: 10 header + "a\0" + 8 deflate + 8 trailer */
  ck_assert(x[m1] == 0x1f && x[m1 + 1] == 0x8b);
  unsigned char *t = malloc(n + 64);
  memcpy(t, x, n);
  gz_write("zeros.gz", (memset(t + n, 0, 7), t), n + 7);
  gz_write("garbage.gz", (memcpy(t + n, "\0\0junk", 6), t), n + 6);
  gz_write("one.gz", (memcpy(t + n, "x", 1), t), n + 1);
  gz_write("trunc.gz", x, n / 2);
  gz_write("trunc_trailer.gz", x, n - 3);
  gz_write("trunc_header.gz", x, m1 + 5);
  memcpy(t, x, n);
  t[n - 12] ^= 1; /* CRC of the last member */
  gz_write("crc.gz", t, n);
  memcpy(t, x, n);
  t[m1 - 1] ^= 1; /* length of the first member */
  gz_write("len.gz", t, n);
  memcpy(t, x, n);
  t[m1 + 2] = 7; /* second member: unknown method */
  gz_write("method.gz", t, n);
  memcpy(t, x, n);
  t[m1 + 3] = 0x40;
  gz_write("flags.gz", t, n);
  memcpy(t, x, n);
  t[m1 + 3] = 0x20;
  gz_write("encrypted.gz", t, n);
  memcpy(t, x, n);
  t[m1 + 12] = 0xff; t[m1 + 13] = 0xff; t[m1 + 14] = 0xff; /* bad block type */
  gz_write("format.gz", t, n);
  gz_write("notgz.gz", "hello world\n", 12);
  gz_write("empty.gz", "", 0);
  free(t);
  free(x);
  static const struct { const char *file, *msg; int rc; } c[] = {
    {"x.gz", "", KIO_OK},
    {"zeros.gz", "", KIO_OK},
    {"garbage.gz", "decompression OK, trailing garbage ignored", KIO_ERR},
    {"one.gz", "unexpected end of file", KIO_ERR},
    {"trunc.gz", "unexpected end of file", KIO_ERR},
    {"trunc_trailer.gz", "unexpected end of file", KIO_ERR},
    {"trunc_header.gz", "unexpected end of file", KIO_ERR},
    {"crc.gz", "invalid compressed data--crc error", KIO_ERR},
    {"len.gz", "invalid compressed data--length error", KIO_ERR},
    {"method.gz", "unknown method 7 -- not supported", KIO_ERR},
    {"flags.gz", "has flags 0x40 -- not supported", KIO_ERR},
    {"encrypted.gz", "is encrypted -- not supported", KIO_ERR},
    {"format.gz", "invalid compressed data--format violated", KIO_ERR},
    {"notgz.gz", "not in gzip format", KIO_ERR},
    {"empty.gz", "unexpected end of file", KIO_ERR},
    {"missing.gz", "No such file or directory", KIO_ERR},
    {".", "is a directory -- ignored", KIO_ERR},
  };
  for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
    char rx[300];
    snprintf(rx, sizeof rx, "gunzip -c %s/%s|", gz_dir, c[i].file);
    gz_result r;
    gz_same(rx, (size_t)-1, &r);
    ck_assert_msg(strstr(r.err, c[i].msg), "%s: '%s'", c[i].file, r.err);
    ck_assert_msg(r.close_rc == c[i].rc, "%s", c[i].file);
    if (i < 2) ck_assert_uint_eq(r.len, 6 + 1288895 + 6);
    if (i < 3) ck_assert(r.len >= 12 && !memcmp(r.data + r.len - 6, "hello\n", 6));
    if (!strcmp(c[i].file, "garbage.gz"))
      ck_assert_msg(strstr(r.warn, "return status 512"), "%s", r.warn);
    else if (c[i].rc != KIO_OK && strcmp(c[i].file, "."))
      ck_assert_msg(strstr(r.warn, "return status 256"), "%s", r.warn);
    /* the same through the in-process path (gunzip not runnable), except
     * for what goes to the real gunzip (not gzip, empty, missing, dir) */
    gz_result q;
    gz_read_nopath(rx, &q);
    int fallback = i >= 13;
    ck_assert_msg(fallback == (strstr(q.err, "not found") != NULL), "%s: %s", rx, q.err);
    if (!fallback)
      ck_assert_msg(!strcmp(q.err, r.err) && q.len == r.len && q.close_rc == r.close_rc &&
                    !strcmp(q.warn, r.warn), "%s: '%s'", rx, q.err);
    gz_free_result(&q);
    /* errors in the second member: the first is delivered, nothing after */
    if (!strcmp(c[i].file, "method.gz") || !strcmp(c[i].file, "len.gz"))
      ck_assert_uint_eq(r.len, 6);
    gz_free_result(&r);
  }
  gz_rmdir();
}
END_TEST

/* Not recognised (shell syntax): the command runs through sh as before. */
START_TEST(gzip_shell_forms) {
  gz_tmpdir();
  gz_sh("cd %s && printf 'hi\\n' > 'a b' && gzip 'a b' && printf 'x\\n' | gzip > x.gz", gz_dir);
  char rx[300];
  gz_result r;
  snprintf(rx, sizeof rx, "gunzip -c '%s/a b.gz'|", gz_dir);
  gz_same(rx, (size_t)-1, &r);
  ck_assert_int_eq(r.close_rc, KIO_OK);
  ck_assert(r.len == 3 && !memcmp(r.data, "hi\n", 3));
  gz_free_result(&r);
  ck_assert(!gz_in_process(rx));
  snprintf(rx, sizeof rx, "gunzip -c %s/x.gz; echo more|", gz_dir);
  gz_same(rx, (size_t)-1, &r);
  ck_assert(r.len == 7 && !memcmp(r.data, "x\nmore\n", 7));
  gz_free_result(&r);
  snprintf(rx, sizeof rx, "gunzip -c %s/x.gz|", gz_dir);
  ck_assert(gz_in_process(rx));
  kio_setting_override(KIO_SET_GUNZIP_PIPE, "1");
  kio_gzip *g;
  ck_assert_ptr_null(kio_gzip_open("gunzip -c graphs/mono.fsts.gz", &g));
  kio_setting_override(KIO_SET_GUNZIP_PIPE, NULL);
  gz_rmdir();
}
END_TEST

/* A reader that stops early: like pclose on a gunzip still writing (killed
 * by SIGPIPE under sh: status 141 << 8); one that read all the output but
 * not the EOF: gunzip had written everything and exits 0. */
START_TEST(gzip_early_close) {
  gz_tmpdir();
  gz_sh("cd %s && seq 1 3000000 | gzip -1 > big.gz", gz_dir);
  char rx[300];
  snprintf(rx, sizeof rx, "gunzip -c %s/big.gz|", gz_dir);
  gz_result r;
  gz_same(rx, 100, &r);
  ck_assert_int_eq(r.close_rc, KIO_ERR);
  ck_assert_msg(strstr(r.warn, "nonzero return status 36096"), "%s", r.warn);
  ck_assert_str_eq(r.err, "");
  gz_free_result(&r);
  gz_read(rx, 0, (size_t)-1, &r);
  size_t all = r.len;
  ck_assert_uint_eq(all, 22888896); /* seq 1 3000000 | wc -c */
  gz_free_result(&r);
  gz_same(rx, all, &r);
  ck_assert_int_eq(r.close_rc, KIO_OK);
  ck_assert_int_eq(r.warnings, 0);
  gz_free_result(&r);
  gz_rmdir();
}
END_TEST

int main(void) {
  Suite *s = suite_create("io");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, classify_rx);
  tcase_add_test(tc, classify_wx);
  tcase_add_test(tc, binary_basic_bytes);
  tcase_add_test(tc, binary_wrong_length_byte);
  tcase_add_test(tc, text_basic);
  tcase_add_test(tc, text_errors);
  tcase_add_test(tc, int_vector_formats);
  tcase_add_test(tc, headers_and_offsets);
  tcase_add_test(tc, missing_and_invalid_inputs);
  tcase_add_test(tc, pipes);
  tcase_add_test(tc, text_output_file);
  tcase_add_test(tc, gzip_cmd_forms);
  tcase_add_test(tc, gzip_fixtures_same_bytes);
  tcase_add_test(tc, gzip_table_reader);
  tcase_add_test(tc, gzip_members_and_errors);
  tcase_add_test(tc, gzip_shell_forms);
  tcase_add_test(tc, gzip_early_close);
  suite_add_tcase(s, tc);
  return tu_run_suite(s);
}
