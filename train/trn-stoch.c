/* Stochastic training (see trn-stoch.h). */
#include "train/trn-stoch.h"

#include "base/sys/log.h"

int trn_stoch_run(trn_ctx *t) {
  (void)t;
  KIO_ERROR("stochastic mode: not yet");
  return KIO_ERR;
}
