/* The trainer's wait for the script's stages (--start-after) and what it
 * loads after them: the first model, speakers, graphs and alignments. The
 * script writes the start file whole (by a rename): "model" once its tree
 * and first model are written (the graphs are started then, beside its last
 * stage, the alignments' conversion), "go" once its stages are done,
 * anything else ("stop") if it ends before. */
#include "train/trainer.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/model/model.h"
#include "base/sys/log.h"
#include "base/sys/settings.h"

enum { START_MODEL = 2 };

/* Polls the start file: KIO_OK on "go"; START_MODEL on "model" if
 * want_model (else it waits on); TRN_START_STOP on anything else; KIO_ERR
 * if the script is gone without writing it. */
static int wait_for_start(const trn_cfg *c, int want_model) {
  if (!c->start_after || !*c->start_after) return KIO_OK;
  for (;;) {
    FILE *f = fopen(c->start_after, "r");
    if (f) {
      char line[64] = "";
      if (!fgets(line, sizeof line, f)) line[0] = 0;
      fclose(f);
      line[strcspn(line, "\n")] = 0;
      if (!strcmp(line, "go")) return KIO_OK;
      if (strcmp(line, "model")) return TRN_START_STOP;
      if (want_model) return START_MODEL;
    }
    if (c->start_after_pid > 0 && kill((pid_t)c->start_after_pid, 0) != 0 && errno == ESRCH) {
      KIO_ERROR("Process %d, which was to write %s, is gone: not trained", c->start_after_pid,
                c->start_after);
      return KIO_ERR;
    }
    usleep(5000);
  }
}

int trn_start_rest(trn_data *d, const trn_cfg *c, kio_tmodel *tm, kio_am_gmm *am, int beside,
                   trn_start_times *st) {
  memset(st, 0, sizeof *st);
  double t0 = kio_now_s();
  int early = beside && c->replicate <= 1 &&
              kio_setting_int(KIO_SET_DEV_TRAIN_GRAPHS_AT_MODEL, 1, 0, 1) != 0;
  int go = wait_for_start(c, early);
  double t1 = kio_now_s(), t2 = t1, t3 = t1;
  char mdl[4200];
  snprintf(mdl, sizeof mdl, "%s/%d.mdl", c->dir, c->equal_align ? 0 : c->start_iter);
  if (go == START_MODEL) {  /* the model and the graphs now, the alignments at "go" */
    if (kio_model_read(mdl, tm, am) != KIO_OK) return KIO_ERR;
    t2 = kio_now_s();
    if (trn_data_load_graphs(d, c, tm, 1, 1) != KIO_OK) return KIO_ERR;
    t3 = kio_now_s();
    st->at_model = 1;
    go = wait_for_start(c, 0);
    if (go == KIO_OK) trn_graphs_gate(d, 1);
  }
  if (go != KIO_OK) {
    if (go == TRN_START_STOP) {  /* stopped before training, as asked */
      int compiled = trn_graphs_discard(d);
      KIO_LOG("Not trained: %s says the stages before the loop did not finish%s", c->start_after,
              st->at_model ? " (the graphs started at the first model discarded)" : "");
      if (st->at_model)
        KIO_VLOG(1, "Not trained: %d of %d jobs' graphs had been compiled", compiled, c->nj);
    }
    return go;
  }
  double t4 = kio_now_s(), t5 = t4;
  if (!st->at_model) {
    if (kio_model_read(mdl, tm, am) != KIO_OK) return KIO_ERR;
    t5 = kio_now_s();
    if (trn_data_load_graphs(d, c, tm, beside, 0) != KIO_OK) return KIO_ERR;
  }
  if (trn_data_load_ali(d, c) != KIO_OK) return KIO_ERR;
  double t6 = kio_now_s();
  st->wait_model = st->at_model ? t1 - t0 : 0.0;
  st->wait = (t1 - t0) + (t4 - t3);
  st->model = st->at_model ? t2 - t1 : t5 - t4;
  st->graphs = st->at_model ? t3 - t2 : 0.0;
  st->rest = st->at_model ? t6 - t4 : t6 - t5;
  return KIO_OK;
}
