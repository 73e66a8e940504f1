/* libFuzzer harness: Kaldi Posterior archives (gmm-acc-mllt's and
 * weight-silence-post's input, gpu-acc/mllt-post.c) through the table
 * readers, binary and text. Input: one selector byte, then the archive
 * bytes, read as "ark:FILE"; selector & 1: random-access reader (a few
 * keys looked up) instead of the sequential one; each value is checked,
 * written back (binary and text) and, sequentially, weighted as
 * weight-silence-post does with a three-transition-id silence set. */
#include <stdlib.h>

#include "fuzz-common.h"
#include "gpu-acc/mllt.h"
#include "base/io/table.h"

static void check_value(const gacc_post *p) {
  if (!p) return;
  FUZZ_CHECK(p->frames >= 0);
  if (!p->frames) return;
  FUZZ_CHECK(p->off && p->off[0] == 0);
  for (int32_t t = 0; t < p->frames; t++) FUZZ_CHECK(p->off[t] <= p->off[t + 1]);
  FILE *f = fopen("/dev/null", "w");
  if (f) {
    gacc_post_holder.write(f, 1, p);
    gacc_post_holder.write(f, 0, p);
    fclose(f);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_init();
  if (size < 1) return 0;
  int sel = data[0];
  const char *path = fuzz_temp_file(data + 1, size - 1, ".ark");
  char spec[320];
  snprintf(spec, sizeof spec, "ark:%s", path);
  if (sel & 1) {
    kio_ra_reader *r;
    if (kio_ra_open(&r, spec, &gacc_post_holder) == KIO_OK) {
      static const char *keys[] = {"a", "b", "utt1", "zzz"};
      for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        if (kio_ra_has_key(r, keys[i]) == 1) check_value(kio_ra_value(r, keys[i]));
      kio_ra_close(r);
    }
  } else {
    kio_seq_reader *r;
    uint8_t is_sil[4] = {0, 1, 0, 1};
    gacc_sil_set sil = {is_sil, 3};
    if (kio_seq_open(&r, spec, &gacc_post_holder) == KIO_OK) {
      gacc_post p = {0};
      for (int n = 0; !kio_seq_done(r) && n < 10000; n++) {
        const char *key = kio_seq_key(r);
        if (kio_seq_take(r, &p) == KIO_OK) {
          check_value(&p);
          if (gacc_post_weight_silence(&p, &sil, 0.5f, n & 1, key) == KIO_OK) check_value(&p);
        }
        kio_seq_next(r);
      }
      gacc_post_holder.free(&p);
      kio_seq_close(r);
    }
  }
  unlink(path);
  return 0;
}
