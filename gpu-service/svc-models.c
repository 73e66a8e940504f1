/* The GPU service's models by their exact bytes (svc-models.h). */
#include "svc-models.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/sys/log.h"

static pthread_mutex_t models_mu = PTHREAD_MUTEX_INITIALIZER;
static gsvc_model *models;

static void entry_free(gsvc_model *e) {
  kio_tmodel_free(&e->tm);
  kio_am_gmm_free(&e->am);
  free(e->bytes);
  free(e);
}

/* The entry of these bytes with a reference taken, or NULL; under
 * models_mu. */
static gsvc_model *find(const void *bytes, size_t len) {
  for (gsvc_model *e = models; e; e = e->next)
    if (e->len == len && !memcmp(e->bytes, bytes, len)) {
      e->refs++;
      return e;
    }
  return NULL;
}

/* The jobs of an iteration come at once: a twin parsed meanwhile is
 * dropped, so that they share one entry (and its pools). */
gsvc_model *gsvc_model_get(const void *bytes, size_t len) {
  pthread_mutex_lock(&models_mu);
  gsvc_model *e = find(bytes, len), *t;
  pthread_mutex_unlock(&models_mu);
  if (e) return e;
  e = calloc(1, sizeof *e);
  if (!e || !(e->bytes = malloc(len ? len : 1))) {
    free(e);
    return NULL;
  }
  memcpy(e->bytes, bytes, len);
  e->len = len;
  static _Atomic uint64_t next_id = 1;
  e->id = next_id++;
  if (kio_model_from_bytes(bytes, len, &e->tm, &e->am) != KIO_OK) {
    free(e->bytes);
    free(e);
    return NULL;
  }
  e->refs = 1;
  pthread_mutex_lock(&models_mu);
  if (!(t = find(bytes, len))) {
    e->next = models;
    models = e;
  }
  pthread_mutex_unlock(&models_mu);
  if (t) entry_free(e);
  return t ? t : e;
}

void gsvc_model_put(gsvc_model *e) {
  pthread_mutex_lock(&models_mu);
  e->refs--;
  e->last_used = kio_now_s();
  pthread_mutex_unlock(&models_mu);
}

void gsvc_model_evict(double idle_s) {
  pthread_mutex_lock(&models_mu);
  double t = kio_now_s();
  for (gsvc_model **pp = &models; *pp;) {
    gsvc_model *e = *pp;
    if (e->refs == 0 && t - e->last_used > idle_s) {
      *pp = e->next;
      entry_free(e);
    } else {
      pp = &e->next;
    }
  }
  pthread_mutex_unlock(&models_mu);
}
