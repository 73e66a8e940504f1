/* gpu-feats: the end of a device chain (gfeat_chain_finish). The CPU chain
 * (base/feat/feat-chain.c) takes every utterance of its input through the
 * stages; the device path computes only the utterances the aligner asks
 * for. So that the stages' final LOG lines count what the programs of the
 * pipe would have counted, the input's other utterances are checked here
 * (their raw matrices read, CMVN stats and transforms looked up, their
 * warnings printed, their logdets summed), without computing features. */
#include "feats-impl.h"

#include <stdlib.h>
#include <string.h>

#include "base/io/io.h"
#include "base/sys/log.h"
#include "base/io/table-internal.h"

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The input's utterances not counted yet, in the input's order. Only an
 * scp input's keys are known without reading the matrices: an archive
 * input's others are not counted (docs/journal/feats.md). */
static void check_rest(gfeat_chain *c, kio_ra_reader *raw) {
  kio_rspec spec;
  if (kio_parse_rspecifier(c->plan->input, &spec) != KIO_OK || spec.kind != KIO_SPEC_SCRIPT) {
    KIO_VLOG(1, "Features input %s is not a script: only the utterances aligned are counted in "
             "the feature programs' log lines", c->plan->input);
    return;
  }
  kio_input *in = NULL;
  int binary;
  if (kio_input_open(&in, spec.filename, &binary) != KIO_OK) return;
  size_t nseen = c->nseen;  /* sorted copy: the aligner's keys */
  char **seen = malloc(sizeof *seen * (nseen ? nseen : 1));
  if (!seen) { kio_input_close(in); return; }
  if (nseen) memcpy(seen, c->seen, sizeof *seen * nseen);
  qsort(seen, nseen, sizeof *seen, cmp_str);
  char *line = NULL, *key, *rest;
  size_t cap = 0;
  int64_t rest_n = 0;
  while (c->dead < 0 && kio_scp_next_line(kio_input_stream(in), &line, &cap, &key, &rest) == KIO_OK) {
    if (nseen && bsearch(&key, seen, nseen, sizeof *seen, cmp_str)) continue;
    if (kio_ra_has_key(raw, key) != 1) break;  /* a read error: kio_ra_close reports it */
    const gfeat_raw *r = kio_ra_value(raw, key);
    if (!r) break;
    rest_n++;
    if (gfeat_chain_check(c, key, r) == KIO_ERR && c->dead < 0) break;
  }
  KIO_VLOG(1, "Features: %lld utterances of %s not aligned, checked for the feature programs' "
           "counts", (long long)rest_n, spec.filename);
  free(line);
  free(seen);
  kio_input_close(in);
}

int gfeat_chain_finish(gfeat_chain *c, kio_ra_reader *raw) {
  if (c->dead < 0 && raw) check_rest(c, raw);
  int n = c->plan->nstages, status = 0;
  for (int k = 0; k < n; k++) {
    /* A stage that died prints nothing (status 255); those before it are
     * taken as killed by SIGPIPE when they next write (no line either). */
    if (c->dead >= 0 && k <= c->dead) {
      status = k == c->dead ? 255 << 8 : (128 + 13) << 8;
      continue;
    }
    status = kio_feat_final_log(&c->plan->stages[k], &c->cnt[k]) << 8;
  }
  return status;
}
