/* The accumulator of include/kaldi-gpu-align.h: gmm-acc-stats-ali's loop
 * (gpu-acc/acc-pipeline.h) for archives, gacc_accumulate_batch for
 * utterances in memory, and the statistics file. */
#include "api-internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/sys/kaldi-msg.h"
#include "base/sys/log.h"
#include "gpu-acc/acc-pipeline.h"


void kga_acc_opts_init(kga_acc_opts *o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->use_gpu = KGA_GPU_OPTIONAL;
}

int kga_acc_new(kga_acc **out, const char *model_rxfilename, const kga_acc_opts *o) {
  kga_acc_opts d;
  if (!o) { kga_acc_opts_init(&d); o = &d; }
  kga_call c;
  kga_call_begin(&c, o->log, o->log_user);
  if (!out || !model_rxfilename) return kga_call_end(&c, KGA_EINVAL);
  *out = NULL;
  if (o->use_gpu < KGA_GPU_NO || o->use_gpu > KGA_GPU_WAIT)
    return kga_call_end(&c, kga_call_fail(&c, KGA_EINVAL, "use_gpu %d: not one of no, yes, "
                                          "optional, wait", (int)o->use_gpu));
  kga_acc *a = calloc(1, sizeof *a);
  if (!a) return kga_call_end(&c, KGA_ENOMEM);
  a->o = *o;
  a->t_created = kio_now_s();
  if (kio_model_read(model_rxfilename, &a->tm, &a->am) != KIO_OK) {
    kio_tmodel_free(&a->tm);
    kio_am_gmm_free(&a->am);
    free(a);
    return kga_call_end(&c, KGA_ERROR);
  }
  *out = a;
  return kga_call_end(&c, KGA_OK);
}

void kga_acc_free(kga_acc *a) {
  if (!a) return;
  kga_call c;
  kga_call_begin(&c, a->o.log, a->o.log_user);
  gacc_free(a->backend);
  kio_tmodel_free(&a->tm);
  kio_am_gmm_free(&a->am);
  free(a);
  kga_call_end(&c, KGA_OK);
}

int kga_acc_is_gpu(const kga_acc *a) { return a && a->backend && gacc_is_gpu(a->backend); }

void kga_acc_get_counts(const kga_acc *a, kga_acc_counts *c) {
  if (!c) return;
  if (a) *c = a->counts;
  else memset(c, 0, sizeof *c);
}

static void add_counts(kga_acc_counts *t, const kga_acc_counts *c) {
  t->done += c->done;
  t->errors += c->errors;
  t->frames += c->frames;
  t->total_like += c->total_like;
}

int kga_acc_archive(kga_acc *a, const char *feats, const char *alis, kga_progress_fn progress,
                    void *user, kga_acc_counts *counts) {
  if (!a) return KGA_EINVAL;
  kga_call c;
  kga_call_begin(&c, a->o.log, a->o.log_user);
  if (!feats || !alis) return kga_call_end(&c, KGA_EINVAL);
  gacc_pipeline_cfg cfg = {feats, alis, (galign_use_gpu)a->o.use_gpu, a->t_created, progress,
                           user};
  a->t_created = 0;
  gacc_pipeline_counts n;
  int st = kga_busy_take(&c, &a->busy);
  if (st != KGA_OK) return kga_call_end(&c, st);
  st = kga_archive_lock(&c);
  if (st != KGA_OK) {
    kga_busy_give(&a->busy);
    return kga_call_end(&c, st);
  }
  int rc = gacc_pipeline_run(&a->backend, &a->tm, &a->am, &cfg, &n);
  kga_archive_unlock();
  kga_busy_give(&a->busy);
  kga_acc_counts k = {n.num_done, n.num_err, n.tot_t, n.tot_like};
  add_counts(&a->counts, &k);
  if (counts) *counts = k;
  if (rc != KIO_OK) return kga_call_end(&c, n.stopped ? KGA_ECANCELED : KGA_ERROR);
  return kga_call_end(&c, KGA_OK);
}

int kga_acc_batch(kga_acc *a, int n, const kga_acc_utt *utts, float *likes) {
  if (!a) return KGA_EINVAL;
  kga_call c;
  kga_call_begin(&c, a->o.log, a->o.log_user);
  if (n < 0 || (n > 0 && !utts)) return kga_call_end(&c, KGA_EINVAL);
  for (int i = 0; i < n; i++)
    if (utts[i].rows < 0 || utts[i].cols < 0 || utts[i].ali_len < 0 ||
        (utts[i].rows > 0 && !utts[i].feats) || (utts[i].ali_len > 0 && !utts[i].ali))
      return kga_call_end(&c, kga_call_fail(&c, KGA_EINVAL, "utterance %d: features or "
                                            "alignment missing or of negative size", i));
  if (likes)
    for (int i = 0; i < n; i++) likes[i] = 0.0f;
  if (n == 0) return kga_call_end(&c, KGA_OK);
  gacc_utt *u = malloc((size_t)n * sizeof *u);
  gacc_utt_result *r = malloc((size_t)n * sizeof *r);
  kio_matrix *m = malloc((size_t)n * sizeof *m);
  int *which = malloc((size_t)n * sizeof *which);
  int st = KGA_ENOMEM;
  if (!u || !r || !m || !which) goto out;
  int nu = 0;
  int64_t frames = 0;
  char kb[32];
  for (int i = 0; i < n; i++) {
    const kga_acc_utt *x = &utts[i];
    const char *key = x->key;
    if (!key) { snprintf(kb, sizeof kb, "utterance %d", i); key = kb; }
    if (x->ali_len != x->rows) {
      KIO_KALDI(ACC_WRONG_SIZE, (int)x->ali_len, (int)x->rows);
      a->counts.errors++;
      continue;
    }
    m[nu] = (kio_matrix){x->rows, x->cols, (float *)x->feats, 0};
    u[nu] = (gacc_utt){x->key ? x->key : "", &m[nu], x->ali};
    which[nu++] = i;
    frames += x->rows;
  }
  if (kga_busy_take(&c, &a->busy) != KGA_OK) { st = KGA_EINVAL; goto out; }
  st = KGA_ERROR;
  int ok = (a->backend || gacc_pipeline_new_acc(&a->backend, (galign_use_gpu)a->o.use_gpu,
                                                &a->tm, &a->am, 1, frames) == KIO_OK) &&
           (nu == 0 || gacc_accumulate_batch(a->backend, nu, u, r) == KIO_OK);
  kga_busy_give(&a->busy);
  if (!ok) goto out;
  char buf[32];
  for (int k = 0; k < nu; k++) {
    a->counts.done++;
    a->counts.frames += r[k].frames;
    a->counts.total_like += (double)r[k].like;
    if (likes) likes[which[k]] = r[k].like;
    if (a->counts.done % 50 == 0) {
      float avg = r[k].frames > 0 ? r[k].like / (float)r[k].frames : -NAN;
      KIO_KALDI(ACC_PROCESSED, (long)a->counts.done, u[k].key, kio_fmt_g(buf, avg),
                (int)r[k].frames);
    }
  }
  st = KGA_OK;
out:
  free(u);
  free(r);
  free(m);
  free(which);
  return kga_call_end(&c, st);
}

/* ---------------- the statistics file ---------------- */

/* acc's statistics (zeros shaped for the model when nothing was
 * accumulated yet). */
static int get_stats(gacc_acc *acc, const kio_tmodel *tm, const kio_am_gmm *am, gacc_stats *s) {
  memset(s, 0, sizeof *s);
  return acc ? gacc_get_stats(acc, s) : gacc_stats_init(s, tm, am);
}

int kga_stats_write(gacc_acc *acc, const kio_tmodel *tm, const kio_am_gmm *am,
                    const char *wxfilename, int binary) {
  gacc_stats s;
  int rc = get_stats(acc, tm, am, &s) == KIO_OK &&
           gacc_stats_write(wxfilename, binary, &s) == KIO_OK;
  gacc_stats_free(&s);
  if (!rc) return KGA_ERROR;
  KIO_KALDI(ACC_WRITTEN);
  return KGA_OK;
}

int kga_stats_write_mem(gacc_acc *acc, const kio_tmodel *tm, const kio_am_gmm *am, int binary,
                        void **bytes, size_t *len) {
  gacc_stats s;
  char *buf = NULL;
  size_t n = 0;
  int rc = KGA_ERROR;
  if (get_stats(acc, tm, am, &s) == KIO_OK) {
    FILE *f = open_memstream(&buf, &n);
    if (!f) {
      rc = KGA_ENOMEM;
    } else {
      if (binary) fwrite("\0B", 1, 2, f);  /* what an output opened in binary starts with */
      int w = gacc_stats_write_stream(f, binary, &s);
      if (fclose(f) != 0 || w != KIO_OK) {
        KIO_ERROR("Error writing the statistics to memory");
        free(buf);
        buf = NULL;
      } else {
        rc = KGA_OK;
      }
    }
  }
  gacc_stats_free(&s);
  *bytes = buf;
  *len = rc == KGA_OK ? n : 0;
  return rc;
}

int kga_acc_write(kga_acc *a, const char *wxfilename, int binary) {
  if (!a) return KGA_EINVAL;
  kga_call c;
  kga_call_begin(&c, a->o.log, a->o.log_user);
  if (!wxfilename) return kga_call_end(&c, KGA_EINVAL);
  return kga_call_end(&c, kga_stats_write(a->backend, &a->tm, &a->am, wxfilename, binary));
}

int kga_acc_write_mem(kga_acc *a, int binary, void **bytes, size_t *len) {
  if (!a || !bytes || !len) return KGA_EINVAL;
  kga_call c;
  kga_call_begin(&c, a->o.log, a->o.log_user);
  return kga_call_end(&c, kga_stats_write_mem(a->backend, &a->tm, &a->am, binary, bytes, len));
}

int kga_acc_reset(kga_acc *a) {
  if (!a) return KGA_EINVAL;
  kga_call c;
  kga_call_begin(&c, a->o.log, a->o.log_user);
  gacc_free(a->backend);
  a->backend = NULL;
  memset(&a->counts, 0, sizeof a->counts);
  return kga_call_end(&c, KGA_OK);
}
