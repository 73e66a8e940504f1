/* The feature programs' own log lines (feat.h): their command lines when
 * the chain starts and each stage's final LOG lines with its counts, as
 * apply-cmvn, transform-feats, copy-feats and select-feats print them.
 * Shared by the CPU chain (feat-chain.c) and the device path (gpu-feats),
 * so that both print the same text from the same counts. */
#include "feat.h"

#include <stdlib.h>

#include "base/sys/options.h"
#include "base/sys/kaldi-msg.h"
#include "base/sys/log.h"

void kio_feat_print_command_lines(const kio_feat_plan *p) {
  flockfile(stderr);
  for (int i = 0; i < p->nstages; i++) {
    if (!p->stages[i].print_args) continue;
    for (int j = 0; j < p->stages[i].argc; j++) {
      char *e = kio_escape_arg(p->stages[i].argv[j]);
      fprintf(stderr, "%s ", e ? e : p->stages[i].argv[j]);
      free(e);
    }
    fputc('\n', stderr);
  }
  funlockfile(stderr);
  fflush(stderr);
}

int kio_feat_final_log(const kio_feat_stage *st, const kio_feat_counts *c) {
  const char *p = st->prog;
  int code = 0;
  switch (st->op) {
    case KIO_FEAT_CMVN:
      if (st->norm_vars) KIO_KALDI_AS(p, APPLY_CMVN_DONE_VARS, c->num_done, c->num_err);
      else KIO_KALDI_AS(p, APPLY_CMVN_DONE, c->num_done, c->num_err);
      code = c->num_done ? 0 : 1;
      break;
    case KIO_FEAT_TRANSFORM:
      if (c->logdet_type != KIO_FEAT_LD_UNKNOWN && c->logdet_type != KIO_FEAT_LD_DIMINC) {
        char a[32], b[32];
        KIO_KALDI_AS(p, TRANSFORM_LOGDET, c->logdet_type == KIO_FEAT_LD_PSEUDO ? "[pseudo-]" : "",
                     kio_fmt_g(a, c->tot_logdet / c->tot_t), kio_fmt_g(b, c->tot_t));
      }
      KIO_KALDI_AS(p, TRANSFORM_DONE, c->num_done, c->num_err);
      code = c->num_done ? 0 : 1;
      break;
    case KIO_FEAT_COPY:
      KIO_KALDI_AS(p, COPY_FEATS_DONE, c->num_done);
      code = c->num_done ? 0 : 1;
      break;
    case KIO_FEAT_SELECT:
      if (!c->had_input) KIO_KALDI_AS(p, SELECT_EMPTY);
      break;
    default:
      break;
  }
  return code;
}

void kio_feat_logdet_add(const kio_feat_stage *st, kio_feat_counts *c, int32_t rows, float ld) {
  if (ld != ld || ld - ld != 0.0f) {
    char a[32];
    KIO_KALDI_AS(st->prog, TRANSFORM_BAD_LOGDET, kio_fmt_g(a, ld));
    return;
  }
  c->tot_t += rows;
  c->tot_logdet += (float)((float)rows * ld);  /* int32 * float: float */
}
