/* libFuzzer harness: the in-process feature pipelines (base/feat*.c).
 * Selector byte s, then:
 *   s & 1: the rest is a pipe command (what an rspecifier holds before its
 *     '|'): kio_feat_parse must accept or refuse it without crashing; an
 *     accepted plan must be consistent (every stage a known program with its
 *     arguments, the first stage's input a non-stdin rspecifier);
 *   else: the rest is an archive read by the chain
 *     select-feats | add-deltas | splice-feats | transform-feats (a fixed
 *     2 x 10 matrix) through kio_feat_open; every byte is read, and the
 *     close status must be one the shell pipeline can give (0, 1, 255). */
#include <signal.h>

#include "base/feat/feat.h"
#include "fuzz-common.h"

static const char *mat_path(void) {
  static char path[256];
  if (path[0]) return path;
  const char *dir = getenv("TMPDIR");
  snprintf(path, sizeof path, "%s/kio-fuzz-feat-%ld.mat", dir && *dir ? dir : "/tmp", (long)getpid());
  FILE *f = fopen(path, "wb");
  if (!f) abort();
  int32_t r = 2, c = 10;
  fwrite("\0BFM \4", 1, 6, f);
  fwrite(&r, 4, 1, f);
  fputc(4, f);
  fwrite(&c, 4, 1, f);
  for (int i = 0; i < r * c; i++) { float v = (float)(i % 7) - 3.0f; fwrite(&v, 4, 1, f); }
  if (fclose(f) != 0) abort();
  return path;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_init();
  if (size < 1) return 0;
  if (data[0] & 1) {
    char *cmd = malloc(size);
    FUZZ_CHECK(cmd);
    memcpy(cmd, data + 1, size - 1);
    cmd[size - 1] = '\0';
    kio_feat_plan p;
    if (kio_feat_parse(cmd, &p) == KIO_OK) {
      FUZZ_CHECK(p.nstages >= 1 && p.input && p.stages);
      for (int i = 0; i < p.nstages; i++) {
        FUZZ_CHECK(p.stages[i].op >= KIO_FEAT_CMVN && p.stages[i].op <= KIO_FEAT_COPY);
        FUZZ_CHECK(p.stages[i].argc >= 3 && p.stages[i].prog);
        if (p.stages[i].op == KIO_FEAT_CMVN || p.stages[i].op == KIO_FEAT_TRANSFORM)
          FUZZ_CHECK(p.stages[i].table != NULL);
      }
      kio_feat_plan_free(&p);
    }
    free(cmd);
    return 0;
  }
  const char *ark = fuzz_temp_file(data + 1, size - 1, ".ark");
  char cmd[1024];
  snprintf(cmd, sizeof cmd,
           "select-feats --print-args=false 0-1,1 ark:%s ark:- | add-deltas --print-args=false "
           "--delta-order=1 ark:- ark:- | splice-feats --print-args=false --left-context=1 "
           "--right-context=0 ark:- ark:- | transform-feats --print-args=false %s ark:- ark:-",
           ark, mat_path());
  kio_feat *h;
  FILE *f = kio_feat_open(cmd, &h);
  FUZZ_CHECK(f);
  char buf[4096];
  while (fread(buf, 1, sizeof buf, f) > 0) {}
  int st = kio_feat_close(h, f);
  FUZZ_CHECK(st == 0 || st == 1 << 8 || st == 255 << 8);
  return 0;
}
