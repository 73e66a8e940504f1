/* train-graphs: small C helpers shared by the programs that compile graphs. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "base/io/io.h"
#include "base/sys/kaldi-msg.h"
#include "base/sys/log.h"
#include "train-graphs.h"
#include "base/sys/settings.h"

int tgraph_read_disambig(const char *rx, kio_kaldi_id msg, int32_t **v, int32_t *n) {
  *v = NULL;
  *n = 0;
  if (!rx || !rx[0]) return KIO_OK;
  kio_input *in = NULL;
  int ok = kio_input_open(&in, rx, NULL) == KIO_OK;
  if (ok) {  /* Kaldi's ReadIntegerVectorSimple: whitespace-separated integers */
    FILE *f = kio_input_stream(in);
    size_t cap = 0;
    long long x;
    int c;
    while (ok && fscanf(f, "%lld", &x) == 1) {
      if (x < INT32_MIN || x > INT32_MAX) { ok = 0; break; }
      if ((size_t)*n == cap) {
        cap = cap ? 2 * cap : 64;
        int32_t *p = realloc(*v, cap * sizeof *p);
        if (!p) { ok = 0; break; }
        *v = p;
      }
      (*v)[(*n)++] = (int32_t)x;
    }
    while (ok && (c = fgetc(f)) != EOF)
      if (c != ' ' && c != '\t' && c != '\n' && c != '\r') ok = 0;
    if (kio_input_close(in) != KIO_OK) ok = 0;
  }
  if (!ok) {
    /* each program's own line, one format (tests/unit/check_kaldi_msg.c) */
    kio_kaldi_logf(msg, kio_kmf_CTG_DISAMBIG, rx);
    free(*v);
    *v = NULL;
    *n = 0;
    return KIO_ERR;
  }
  return KIO_OK;
}

void tgraph_tune_malloc(char **argv) {
  /* OpenFst allocates and frees many small objects per graph; glibc's
   * per-thread cache with more and larger entries saves ~15% of the
   * compile time (and arena contention between threads). The tunables are
   * read at process start only, hence one exec of ourselves. */
  if (kio_setting_str(KIO_SET_GLIBC_TUNABLES) || kio_setting_flag(KIO_SET_DEV_GRAPHS_NO_TUNE, 0)) return;
  if (setenv("GLIBC_TUNABLES", "glibc.malloc.tcache_count=2000:glibc.malloc.tcache_max=4096",
             1) != 0)
    return;
  execv("/proc/self/exe", argv);
  unsetenv("GLIBC_TUNABLES");  /* exec failed: go on as we are */
}
