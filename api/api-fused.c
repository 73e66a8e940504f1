/* The fused pass of include/kaldi-gpu-align.h (gmm-align-acc-compiled):
 * gmm-align-compiled's pipeline whose per-batch hook hands the aligned
 * utterances to the accumulator, on the aligner's backend, in a thread of
 * the accumulator's own so that reading goes on. */
#include "api-internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/sys/kaldi-msg.h"
#include "base/sys/log.h"
#include "device/cuda-util.h"
#include "gpu-align/align-pipeline.h"


struct kga_fused {
  kga_aligner al;
  gacc_acc *acc;
  gacc_utt *utts;
  kio_matrix **mats;  /* the same features, to be taken */
  int cap;
  double like0;       /* the accumulator's totals before this call */
  int64_t frames0;
  double like;        /* ... and after */
  int64_t frames;
  kga_acc_counts counts;
};

int kga_fused_new(kga_fused **out, const char *model_rxfilename, const kga_aligner_opts *o) {
  kga_aligner_opts d;
  if (!o) { kga_aligner_opts_init(&d); o = &d; }
  kga_call c;
  kga_call_begin(&c, o->log, o->log_user);
  if (!out || !model_rxfilename) return kga_call_end(&c, KGA_EINVAL);
  *out = NULL;
  int st = kga_aligner_check_opts(&c, o);
  if (st != KGA_OK) return kga_call_end(&c, st);
  kga_fused *f = calloc(1, sizeof *f);
  if (!f) return kga_call_end(&c, KGA_ENOMEM);
  if (kga_aligner_init(&f->al, model_rxfilename, o) != KIO_OK) {
    kga_aligner_fini(&f->al);
    free(f);
    return kga_call_end(&c, KGA_ERROR);
  }
  *out = f;
  return kga_call_end(&c, KGA_OK);
}

void kga_fused_free(kga_fused *f) {
  if (!f) return;
  kga_call c;
  kga_call_begin(&c, f->al.o.log, f->al.o.log_user);
  gacc_free(f->acc);  /* joins its worker first */
  kga_aligner_fini(&f->al);
  free(f->utts);
  free(f->mats);
  free(f);
  kga_call_end(&c, KGA_OK);
}

typedef struct {
  gacc_acc **acc;
  galign_use_gpu mode;
  const kio_tmodel *tm;
  const kio_am_gmm *am;
} acc_try;

/* The accumulator on the job's device (kio_gpu_choose). */
static int try_device(void *user, kio_gpu *g) {
  acc_try *t = user;
  return gacc_new_gpu(t->acc, g, t->mode, t->tm, t->am);
}

/* The statistics where the alignments are: the GPU service, the aligner's
 * own device (the job's one device, device/gpu.h: never a second choice,
 * which would reset the aligner's context on a machine of several GPUs),
 * or the CPU. */
static int after_open(void *u, galign_pipeline *p) {
  kga_fused *f = u;
  if (f->acc) return KIO_OK;  /* kept from an earlier call */
  int gpu = galign_pipeline_is_gpu(p);
  const kio_tmodel *tm = galign_pipeline_tmodel(p);
  const kio_am_gmm *am = galign_pipeline_am(p);
  char why[256] = "";
  galign_use_gpu mode = f->al.use_gpu;
  /* a service lost later: the statistics go on here, as --use-gpu allows */
  gacc_on_loss on_loss = mode == GALIGN_GPU_OPTIONAL ? GACC_LOSS_GPU_OR_CPU
                         : mode == GALIGN_GPU_WAIT   ? GACC_LOSS_GPU_WAIT
                                                     : GACC_LOSS_GPU;
  const galign_aligner *al = galign_pipeline_aligner(p);
  /* the aligner is on the GPU service: so are the statistics, from the
   * features its requests carry (else over a connection of their own) */
  if (galign_aligner_is_remote(al)) {
    if (gacc_new_remote_fused(&f->acc, al, tm, am, on_loss, why, sizeof why) == KIO_OK) {
      KIO_VLOG(1, "Accumulating on the GPU service, from the features of the alignment requests");
      return KIO_OK;
    }
    KIO_VLOG(1, "Accumulating on the GPU service over a connection of its own (%s)", why);
    if (gacc_new_remote(&f->acc, tm, am, on_loss, why, sizeof why) == KIO_OK) return KIO_OK;
  }
  if (!gpu) return gacc_new(&f->acc, "cpu", tm, am);
  /* its line only when it is not the aligner's device */
  acc_try t = {&f->acc, mode, tm, am};
  kio_gpu *g = NULL;
  char line[640];
  if (kio_gpu_choose(mode, why, "accumulating", &g, try_device, &t, line, sizeof line) != KIO_OK)
    return KIO_ERR;
  if (why[0] || !g) KIO_LOG("%s", line);
  return g ? KIO_OK : gacc_new(&f->acc, "cpu", tm, am);
}

/* The pipeline's hook: hands one batch of aligned utterances to the
 * accumulator, which takes the feature matrices (no copy on this thread)
 * and returns while the device accumulates (this thread goes back to
 * reading). An error of the previous batch or of this one's checks is
 * logged here. */
static int accumulate(void *u, int n, const galign_pipeline_utt *utts) {
  kga_fused *f = u;
  if (n > f->cap) {
    gacc_utt *x = realloc(f->utts, (size_t)n * sizeof *x);
    if (!x) { KIO_ERROR("Out of memory"); return KIO_ERR; }
    f->utts = x;
    kio_matrix **m = realloc(f->mats, (size_t)n * sizeof *m);
    if (!m) { KIO_ERROR("Out of memory"); return KIO_ERR; }
    f->mats = m;
    f->cap = n;
  }
  for (int i = 0; i < n; i++) {
    f->utts[i] = (gacc_utt){utts[i].key, utts[i].feats, utts[i].res->ali};
    f->mats[i] = utts[i].feats;
  }
  return gacc_accumulate_batch_take(f->acc, n, f->utts, f->mats);
}

/* the last batch (its ERROR, if any, is logged here) */
static int before_summary(void *u) {
  kga_fused *f = u;
  return gacc_get_totals(f->acc, &f->like, &f->frames);
}

/* what gmm-acc-stats-ali would print after reading these alignments */
static void after_summary(void *u) {
  kga_fused *f = u;
  double like = f->like - f->like0;
  int64_t frames = f->frames - f->frames0;
  char buf[32];
  KIO_KALDI(ACC_OVERALL, kio_fmt_g(buf, frames > 0 ? like / (double)frames : -NAN),
            (long long)frames);
}

int kga_fused_archive(kga_fused *f, const char *graphs, const char *feats,
                      const kga_archive_opts *o, kga_align_counts *counts) {
  if (!f) return KGA_EINVAL;
  kga_call c;
  kga_call_begin(&c, f->al.o.log, f->al.o.log_user);
  kga_archive_opts d;
  if (!o) { kga_archive_opts_init(&d); o = &d; }
  if (!graphs || !feats) return kga_call_end(&c, KGA_EINVAL);
  if (o->order != KGA_ORDER_GRAPHS)
    return kga_call_end(&c, kga_call_fail(&c, KGA_EINVAL, "the fused pass reads the graphs "
                                          "in order"));
  if (f->acc && f->al.model_changed)  /* statistics of one model only */
    return kga_call_end(&c, kga_call_fail(&c, KGA_EINVAL, "the model changed"));
  f->like0 = f->like;
  f->frames0 = f->frames;
  kga_archive_ext ext = {after_open, accumulate, before_summary, after_summary, f};
  kga_align_counts n = {0};  /* what a refused call reports */
  int st = kga_busy_take(&c, &f->al.busy);
  if (st != KGA_OK) return kga_call_end(&c, st);
  st = kga_archive_lock(&c);
  if (st == KGA_OK) {
    st = kga_archive_run(&c, &f->al, graphs, feats, o, 0, &ext, &n);
    kga_archive_unlock();
  }
  kga_busy_give(&f->al.busy);
  if (counts) *counts = n;
  if (st == KGA_OK) {
    f->counts.done += n.done;
    f->counts.errors += n.errors;
    f->counts.frames = f->frames;
    f->counts.total_like = f->like;
  }
  return kga_call_end(&c, st);
}

void kga_fused_get_counts(const kga_fused *f, kga_acc_counts *c) {
  if (!c) return;
  if (f) *c = f->counts;
  else memset(c, 0, sizeof *c);
}

int kga_fused_write(kga_fused *f, const char *wxfilename, int binary) {
  if (!f) return KGA_EINVAL;
  kga_call c;
  kga_call_begin(&c, f->al.o.log, f->al.o.log_user);
  if (!wxfilename) return kga_call_end(&c, KGA_EINVAL);
  return kga_call_end(&c, kga_stats_write(f->acc, &f->al.tm, &f->al.am, wxfilename, binary));
}

int kga_fused_write_mem(kga_fused *f, int binary, void **bytes, size_t *len) {
  if (!f || !bytes || !len) return KGA_EINVAL;
  kga_call c;
  kga_call_begin(&c, f->al.o.log, f->al.o.log_user);
  return kga_call_end(&c, kga_stats_write_mem(f->acc, &f->al.tm, &f->al.am, binary, bytes, len));
}
