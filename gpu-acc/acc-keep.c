/* Accumulation through the GPU service, the job's side: the batches kept
 * since the service's last statistics (their features taken from the
 * caller where the entry allows, else copied), and the fall-back to the
 * job's own backend from those statistics when the service is lost
 * (acc-remote-impl.h; the requests: acc-remote.c). */
#include <stdlib.h>
#include <string.h>

#include "device/cuda-util.h"
#include "base/sys/settings.h"
#include "acc-remote-impl.h"
#include "acc-remote.h"

void gacc_kept_free(kept *k) {
  if (k && k->owns)
    for (int i = 0; i < k->n; i++) kio_matrix_free(&k->mats[i]);
  free(k);
}

/* Frees k; its taken matrices go to the spares (at most two batches' worth). */
void gacc_kept_drop(gacc_remote *r, kept *k) {
  if (k && k->owns)
    for (int i = 0; i < k->n; i++) {
      if (r->nspare == r->cap_spare && r->cap_spare < 2 * k->n) {
        int cap = 2 * k->n;
        kio_matrix *m = realloc(r->spare, (size_t)cap * sizeof *m);
        if (m) {
          r->spare = m;
          r->cap_spare = cap;
        }
      }
      if (r->nspare < r->cap_spare) {
        r->spare[r->nspare++] = k->mats[i];
        k->mats[i] = (kio_matrix){0, 0, NULL, 0};
      }
    }
  gacc_kept_free(k);
}

void gacc_kept_free_all(gacc_remote *r) {
  while (r->kept_first) {
    kept *k = r->kept_first;
    r->kept_first = k->next;
    gacc_kept_drop(r, k);
  }
  r->kept_last = NULL;
  r->kept_bytes = 0;
}

/* A copy of the batch, appended to the kept ones; NULL without memory.
 * feats (NULL: copied): the features are taken, each swapped with an
 * empty matrix. */
kept *gacc_keep_batch(gacc_remote *r, int n, const gacc_utt *utts, kio_matrix *const *feats) {
  for (int i = 0; i < n && feats; i++)
    if (utts[i].feats != feats[i]) feats = NULL;
  size_t bytes = sizeof(kept) + (size_t)n * (sizeof(gacc_utt) + sizeof(kio_matrix));
  for (int i = 0; i < n; i++) {
    const kio_matrix *f = utts[i].feats;
    if (!feats) bytes += ((size_t)f->rows * (size_t)f->cols * sizeof(float) + 7) / 8 * 8;
    bytes += ((size_t)f->rows * sizeof(int32_t) + 7) / 8 * 8;
    bytes += (strlen(utts[i].key) + 8) / 8 * 8;
  }
  kept *k = malloc(bytes);
  if (!k) return NULL;
  k->next = NULL;
  k->n = n;
  k->bytes = bytes;
  k->owns = feats != NULL;
  k->seq_first = 0;
  k->pending = 0;
  k->res = NULL;
  k->utts = (gacc_utt *)(k + 1);
  k->mats = (kio_matrix *)(k->utts + n);
  char *p = (char *)(k->mats + n);
  for (int i = 0; i < n; i++) {
    const kio_matrix *f = utts[i].feats;
    size_t fb = (size_t)f->rows * (size_t)f->cols * sizeof(float);
    size_t ab = (size_t)f->rows * sizeof(int32_t), kb = strlen(utts[i].key) + 1;
    float *x = (float *)p;
    if (feats) {
      k->mats[i] = *feats[i];
      if (r->nspare) *feats[i] = r->spare[--r->nspare];
      else memset(feats[i], 0, sizeof *feats[i]);
      bytes += fb;  /* held all the same */
    } else {
      if (fb) memcpy(x, f->data, fb);
      p += (fb + 7) / 8 * 8;
    }
    int32_t *ali = (int32_t *)p;
    if (ab) memcpy(ali, utts[i].ali, ab);
    p += (ab + 7) / 8 * 8;
    char *key = p;
    memcpy(key, utts[i].key, kb);
    p += (kb + 7) / 8 * 8;
    if (!feats) k->mats[i] = (kio_matrix){f->rows, f->cols, x, 0};
    k->utts[i] = (gacc_utt){key, &k->mats[i], ali};
  }
  k->bytes = bytes;
  if (r->kept_last) r->kept_last->next = k;
  else r->kept_first = k;
  r->kept_last = k;
  r->kept_bytes += bytes;
  return k;
}

/* Our own backend for the rest of the job, as on_loss allows (the
 * aligner's order: our own GPU context, else the CPU if optional); the
 * statistics go on from the checkpoint in a->st. desc: what it is. */
static int own_backend(gacc_acc *a, gacc_on_loss on_loss, char *desc, size_t n) {
  if (on_loss == GACC_LOSS_GPU_OR_CPU && kio_cuda_device_count() <= 0) {
    snprintf(desc, n, "accumulating on the CPU");
    return KIO_OK;
  }
  char dev[200] = "";
  kio_log_deferred *quiet = NULL;
  if (on_loss == GACC_LOSS_GPU_OR_CPU) kio_log_defer(&quiet);  /* the CPU is fine too */
  kio_gpu *g = NULL;  /* the job's one device (device/gpu.h) */
  int rc = kio_gpu_job(&g, on_loss == GACC_LOSS_GPU_WAIT) == KIO_OK ? KIO_OK : KIO_ERR;
  if (rc == KIO_OK) {
    snprintf(dev, sizeof dev, "%s", kio_gpu_desc(g));
    rc = gacc_cuda_new(&a->cuda, g,
                       on_loss == GACC_LOSS_GPU_OR_CPU ? KIO_GPU_OPTIONAL
                       : on_loss == GACC_LOSS_GPU_WAIT ? KIO_GPU_WAIT : KIO_GPU_YES,
                       &a->st, a->am);
  }
  if (rc == KIO_OK) rc = gacc_cuda_load(a->cuda, &a->st);
  if (on_loss == GACC_LOSS_GPU_OR_CPU) {
    kio_log_defer(NULL);
    kio_log_discard(&quiet);
  }
  if (rc == KIO_OK) {
    snprintf(desc, n, "accumulating on the GPU: %s", dev);
    return KIO_OK;
  }
  gacc_cuda_free(a->cuda);
  a->cuda = NULL;
  if (on_loss != GACC_LOSS_GPU_OR_CPU) return KIO_ERR;
  snprintf(desc, n, "GPU not usable; accumulating on the CPU");
  return KIO_OK;
}

/* The service is lost (why): the job goes on by itself from the last
 * checkpoint, redoing the kept batches (those in flight: their results into
 * their callers' res). KIO_OK once redone; KIO_ERR: a fatal error, logged.
 * With two batches in flight and their caller collecting them one by one
 * (not gacc_wait), the second one's outcome (its lines, an error) is held
 * for its collection (gacc_wait_first, or any other entry): it then comes
 * after the first one's, as without a loss. */
int gacc_remote_fall_back(gacc_acc *a, const char *why_in) {
  char why[240];  /* why_in may be the connection's, freed below */
  snprintf(why, sizeof why, "%s", why_in);
  gacc_remote *r = a->remote;
  kept *todo = r->kept_first;
  r->kept_first = r->kept_last = NULL;
  int redo = 0;
  for (kept *k = todo; k; k = k->next) redo += k->n;
  a->like_sum = r->ck_like;
  a->frames_sum = r->ck_frames;
  gacc_on_loss on_loss = r->on_loss;
  /* the first batch in flight is collected by this call (gacc_wait_first
   * or gacc_wait) or by the caller's next gacc_wait_first */
  const int hold = !r->in_wait_all, skip = !r->in_wait_first;
  gacc_remote_free(a);
  a->is_gpu = 0;
  char desc[260];
  int rc = own_backend(a, on_loss, desc, sizeof desc);
  if (rc == KIO_OK) {
    a->is_gpu = a->cuda != NULL;
    KIO_LOG("GPU service lost during accumulation (%s): %s, from its last statistics "
            "(%d utterances redone)", why, desc, redo);
  } else {
    KIO_ERROR("GPU service lost during accumulation (%s), and no GPU of our own for "
              "--use-gpu=%s", why, on_loss == GACC_LOSS_GPU_WAIT ? "wait" : "yes");
  }
  gacc_utt_result *scratch = NULL;
  int cap = 0, npending = 0, held = 0;
  while (todo) {
    kept *k = todo;
    todo = k->next;
    gacc_utt_result *res = k->pending ? k->res : NULL;
    if (k->pending && ++npending == 2 && hold && rc == KIO_OK) {
      held = 1;  /* from here on, the lines wait for its collection */
      kio_log_defer(&a->held_lines);
    }
    if (!res && rc == KIO_OK) {
      if (k->n > cap) {
        free(scratch);
        cap = k->n;
        if (!(scratch = malloc((size_t)cap * sizeof *scratch))) {
          KIO_ERROR("Out of memory");
          rc = KIO_ERR;
        }
      }
      res = scratch;
    }
    if (rc == KIO_OK) rc = gacc_accumulate_batch(a, k->n, k->utts, res);
    gacc_kept_free(k);
  }
  free(scratch);
  if (held) {
    kio_log_defer(NULL);
    a->held = 1;
    a->held_rc = rc;
    a->held_skip = skip;
    return KIO_OK;
  }
  return rc;
}

/* How many bytes of batches a job keeps for a fall-back before it asks for
 * a checkpoint: four times the statistics, at least 128 MiB. */
size_t gacc_keep_limit(const gacc_stats *st) {
  size_t stats_bytes = sizeof(double) * ((size_t)st->num_tids + 1 + (size_t)st->num_gauss +
                                         2 * (size_t)st->num_gauss * (size_t)st->dim);
  size_t limit = 4 * stats_bytes > ((size_t)128 << 20) ? 4 * stats_bytes : (size_t)128 << 20;
  const char *t = kio_test_hook(KIO_SET_TEST_ACC_KEEP_BYTES);
  return t ? (size_t)strtoull(t, NULL, 10) : limit;
}
