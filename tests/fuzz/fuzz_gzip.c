/* libFuzzer harness: the in-process gunzip of base/io/gzip-input.c (what
 * "gunzip -c FILE |" rxfilenames read through) on arbitrary bytes. It must
 * never crash, hang or leak, must end with one of gunzip's statuses, and
 * must give back exactly the data of intact members.
 * Input: selector byte s, then:
 *   s & 1: the reader stops after ((s >> 1) & 7) * 300 bytes (early close);
 *   s & 16: "wrap" mode: the rest is [pos lo, pos hi, xor, members, payload]:
 *     payload is gzip-compressed (zlib) 1 + members % 3 times, concatenated,
 *     then the byte at pos (mod size) is xored with xor: with xor == 0 the
 *     output must be the payload repeated, status 0;
 *   otherwise the rest is the .gz file as is. */
#include <fcntl.h>
#include <zlib.h>

#include "fuzz-common.h"
#include "base/io/gzip-input.h"

static int devnull = -1;

/* One gzip member of p (zlib's gzip wrapper), appended to *buf. */
static void gzip_member(const uint8_t *p, size_t n, uint8_t **buf, size_t *len) {
  z_stream z;
  memset(&z, 0, sizeof z);
  FUZZ_CHECK(deflateInit2(&z, 6, Z_DEFLATED, 31, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  size_t cap = deflateBound(&z, (uLong)n) + 32;
  *buf = realloc(*buf, *len + cap);
  FUZZ_CHECK(*buf);
  z.next_in = (Bytef *)p;
  z.avail_in = (uInt)n;
  z.next_out = *buf + *len;
  z.avail_out = (uInt)cap;
  FUZZ_CHECK(deflate(&z, Z_FINISH) == Z_STREAM_END);
  *len += cap - z.avail_out;
  deflateEnd(&z);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_init();
  if (devnull < 0) devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (size < 1) return 0;
  int sel = data[0];
  size_t limit = (sel & 1) ? (size_t)((sel >> 1) & 7) * 300 : (size_t)-1;
  const uint8_t *body = data + 1;
  size_t blen = size - 1;
  uint8_t *gz = NULL;
  size_t gzlen = 0;
  int members = 0, intact = 0;
  const uint8_t *payload = NULL;
  size_t plen = 0;
  if ((sel & 16) && blen >= 4) {
    payload = body + 4;
    plen = blen - 4;
    members = 1 + body[3] % 3;
    for (int i = 0; i < members; i++) gzip_member(payload, plen, &gz, &gzlen);
    FUZZ_CHECK(gz && gzlen);
    size_t pos = (size_t)(body[0] | body[1] << 8) % gzlen;
    gz[pos] ^= body[2];
    intact = body[2] == 0;
  } else {
    gz = malloc(blen ? blen : 1);
    FUZZ_CHECK(gz);
    if (blen) memcpy(gz, body, blen);
    gzlen = blen;
  }
  const char *path = fuzz_temp_file(gz, gzlen, ".gz");
  free(gz);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  FUZZ_CHECK(fd >= 0);
  kio_gzip *g;
  FILE *f = kio_gzip_fdopen(fd, path, devnull, &g);
  FUZZ_CHECK(f);
  uint8_t buf[4096];
  size_t n, total = 0;
  int match = 1;
  while (total < limit && (n = fread(buf, 1, sizeof buf, f)) > 0) {
    for (size_t i = 0; intact && match && i < n; i++)
      match = buf[i] == payload[(total + i) % (plen ? plen : 1)];
    total += n;
  }
  int eof = feof(f);
  int status = kio_gzip_close(g, f);
  FUZZ_CHECK(status == 0 || status == 1 << 8 || status == 2 << 8 ||
             status == (128 + 13) << 8);
  if (eof) FUZZ_CHECK(status != (128 + 13) << 8); /* read to the end */
  if (intact && eof) {
    FUZZ_CHECK(status == 0 && match);
    FUZZ_CHECK(total == plen * (size_t)members);
  }
  unlink(path);
  return 0;
}
