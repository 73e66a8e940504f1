/* libFuzzer harness: rspecifier / wspecifier parsing and rx/wx filename
 * classification (pure string functions: nothing is opened). */
#include "fuzz-common.h"
#include "io.h"
#include "table.h"

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
  free(s);
  return 0;
}
