/* libFuzzer harness: the string parsers of the table layer. The input is
 * used as one string for rspecifier / wspecifier parsing, rx/wx filename
 * classification, IsToken and scp "rx[range]" splitting; as an scp file for
 * the line splitter; and as the range of an scp entry applied to a fixed
 * 5 x 4 matrix file (nothing the input names is ever opened). */
#include "fuzz-common.h"
#include "base/io/io.h"
#include "base/matrix/matrix.h"
#include "base/io/table.h"
#include "base/io/table-internal.h"

static char path[256];
static void remove_matrix_file(void) { unlink(path); }

static const char *matrix_file(void) {
  if (path[0]) return path;
  const char *dir = getenv("TMPDIR");
  snprintf(path, sizeof path, "%s/kio-fuzz-%ld.mat", dir && *dir ? dir : "/tmp",
           (long)getpid());
  kio_matrix m = {0};
  kio_matrix_resize(&m, 5, 4);
  for (int i = 0; i < 20; i++) m.data[i] = (float)i;
  FILE *f = fopen(path, "wb");
  if (!f) abort();
  fputc(0, f);
  fputc('B', f);
  kio_matrix_write(f, 1, &m);
  fclose(f);
  kio_matrix_free(&m);
  atexit(remove_matrix_file);
  return path;
}

static void fuzz_range(const char *range) {
  kio_input *in = NULL;
  kio_matrix m = {0};
  if (kio_scp_load(&in, matrix_file(), range, &kio_matrix_holder, &m) == KIO_OK) {
    FUZZ_CHECK(m.rows >= 1 && m.rows <= 5 && m.cols >= 1 && m.cols <= 4);
    /* element (0,0) of the range is row r1, column c1 of the original */
    FUZZ_CHECK(m.data[0] == (float)(int)m.data[0] && m.data[0] >= 0 && m.data[0] < 20);
  }
  kio_matrix_free(&m);
  kio_input_close(in);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_init();
  char *s = malloc(size + 1);
  if (!s) return 0;
  memcpy(s, data, size);
  s[size] = '\0';
  kio_rspec r;
  kio_wspec w;
  if (kio_parse_rspecifier(s, &r) == KIO_OK) {
    FUZZ_CHECK(r.kind == KIO_SPEC_ARCHIVE || r.kind == KIO_SPEC_SCRIPT);
    FUZZ_CHECK(memchr(r.filename, 0, sizeof r.filename));
  } else {
    FUZZ_CHECK(r.kind == KIO_SPEC_INVALID);
  }
  if (kio_parse_wspecifier(s, &w) == KIO_OK) {
    FUZZ_CHECK(w.kind != KIO_SPEC_INVALID);
    FUZZ_CHECK(memchr(w.archive, 0, sizeof w.archive) && memchr(w.script, 0, sizeof w.script));
  } else {
    FUZZ_CHECK(w.kind == KIO_SPEC_INVALID);
  }
  (void)kio_classify_rxfilename(s);
  (void)kio_classify_wxfilename(s);
  (void)kio_is_token(s);
  char *rx, *range;
  if (kio_scp_split_range(s, &rx, &range) == KIO_OK) {
    FUZZ_CHECK(rx && range && strlen(rx) + strlen(range) <= size);
    free(rx);
    free(range);
  }
  if (size < 64 && !strchr(s, '\n')) fuzz_range(s);
  /* as an scp file */
  void *copy;
  FILE *f = fuzz_open_mem(data, size, &copy);
  if (f) {
    char *line = NULL, *key, *rest;
    size_t cap = 0;
    for (int n = 0; n < 1000; n++) {
      int rc = kio_scp_next_line(f, &line, &cap, &key, &rest);
      if (rc == KIO_EOF) break;
      if (rc == KIO_OK) FUZZ_CHECK(*key && *rest && !strpbrk(key, " \t\n"));
    }
    free(line);
    fuzz_close_mem(f, copy);
  }
  free(s);
  return 0;
}
