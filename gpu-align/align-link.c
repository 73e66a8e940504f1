/* The one pass through the service: the link between the aligner's
 * thread, which reads the accumulation part of each fused reply, and the
 * accumulator (gpu-acc/acc-remote.c), which takes them as records in order
 * (align-remote.h). */
#include "align-remote.h"

#include <stdlib.h>

galign_acc_link *galign_acc_link_new(void) {
  galign_acc_link *l = calloc(1, sizeof *l);
  if (!l) return NULL;
  pthread_mutex_init(&l->mu, NULL);
  l->refs = 1;
  l->on = 1;
  return l;
}

void galign_acc_rec_free(galign_acc_rec *r) {
  if (!r) return;
  free(r->feats);
  free(r->tail);
  free(r);
}

void galign_acc_link_put(galign_acc_link *l) {
  if (!l) return;
  pthread_mutex_lock(&l->mu);
  int last = --l->refs == 0;
  pthread_mutex_unlock(&l->mu);
  if (!last) return;
  while (l->head) galign_acc_rec_free(galign_acc_link_pop(l));
  pthread_mutex_destroy(&l->mu);
  free(l);
}

galign_acc_rec *galign_acc_link_pop(galign_acc_link *l) {
  pthread_mutex_lock(&l->mu);
  galign_acc_rec *r = l->head;
  if (r) {
    l->head = r->next;
    if (!l->head) l->last = NULL;
    r->next = NULL;
  }
  pthread_mutex_unlock(&l->mu);
  return r;
}
