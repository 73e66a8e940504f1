/* The features' chain on the device for the aligning pipeline (see
 * align-gfeat.h). */
#include "align-gfeat.h"

#include <stdlib.h>
#include <string.h>

#include "base/io/io.h"
#include "base/sys/log.h"
#include "base/io/table.h"
#include "gpu-feats/gpu-feats.h"
#include "base/sys/settings.h"

struct galign_gfeat {
  kio_feat_plan plan;
  gfeat_chain *chain;
  kio_ra_reader *raw;
  gfeat_cuda *dev;
  int device;
  /* per run: the slots' host rows and registrations */
  float **rows;
  const kio_matrix **mats;
  int64_t *offs;
  int cap;
  int64_t utts, frames;
  /* the pipe the CPU chain would have been: its name, the rspecifier, and
   * the wait status gfeat_chain_finish found (finished) */
  char *pipe_name, *rspec;
  int permissive, finished, status;
};

int galign_gfeat_wanted(void) {
  return kio_setting_flag(KIO_SET_FEATS_GPU, 0);
}

galign_gfeat *galign_gfeat_open(const char *rspec, galign_aligner *a) {
  if (!galign_gfeat_wanted()) return NULL;
  kio_rspec spec;
  const char *why = NULL;
  int device = galign_aligner_cuda_device(a);
  size_t n;
  if (!kio_setting_flag(KIO_SET_FEATS_PIPE, 1)) why = "KALDI_GPU_FEATS_PIPE=0";
  else if (device < 0) why = "no CUDA backend of our own (CPU, or the GPU service)";
  else if (kio_parse_rspecifier(rspec, &spec) != KIO_OK || spec.kind != KIO_SPEC_ARCHIVE ||
           kio_classify_rxfilename(spec.filename) != KIO_RX_PIPE)
    why = "not an archive read from a pipe";
  if (why) {
    KIO_VLOG(1, "Features not computed on the GPU (%s): %s", why, rspec);
    return NULL;
  }
  galign_gfeat *g = calloc(1, sizeof *g);
  if (!g) return NULL;
  g->device = device;
  g->permissive = spec.permissive;
  g->pipe_name = strdup(spec.filename);
  g->rspec = strdup(rspec);
  if (!g->pipe_name || !g->rspec) { galign_gfeat_free(g); return NULL; }
  n = strlen(spec.filename);
  char *cmd = malloc(n);
  if (!cmd) { galign_gfeat_free(g); return NULL; }
  memcpy(cmd, spec.filename, n - 1);  /* without the '|' */
  cmd[n - 1] = '\0';
  int parsed = kio_feat_parse(cmd, &g->plan) == KIO_OK;
  free(cmd);
  if (!parsed || !gfeat_supported(&g->plan)) {
    KIO_VLOG(1, "Features not computed on the GPU (%s): %s", kio_last_error(), rspec);
    if (!parsed) memset(&g->plan, 0, sizeof g->plan);
    galign_gfeat_free(g);
    return NULL;
  }
  if (gfeat_chain_open(&g->plan, &g->chain) != KIO_OK ||
      kio_ra_open(&g->raw, g->plan.input, &gfeat_raw_holder) != KIO_OK) {
    KIO_VLOG(1, "Features not computed on the GPU (the chain's tables did not open): %s", rspec);
    galign_gfeat_free(g);
    return NULL;
  }
  KIO_VLOG(1, "Features computed on the GPU (%d stages, device %d): %s", g->plan.nstages, device,
           rspec);
  return g;
}

void galign_gfeat_start(const galign_gfeat *g) { kio_feat_print_command_lines(&g->plan); }

void galign_gfeat_begin(struct gfeat_batch *gfb) {
  if (gfb) gfeat_batch_clear(gfb);
}

int galign_gfeat_read(galign_gfeat *g, struct gfeat_batch **gfb, const char *key,
                      kio_matrix *feats, int32_t *index) {
  if (!*gfb && !(*gfb = gfeat_batch_new())) {
    KIO_ERROR("Out of memory");
    return KIO_ERR;
  }
  int h = kio_ra_has_key(g->raw, key);
  if (h != 1) return h;
  const gfeat_raw *r = kio_ra_value(g->raw, key);
  if (!r) return KIO_ERR;
  int rc = gfeat_batch_add(g->chain, *gfb, key, r);
  if (rc < 0) return KIO_ERR;
  if (rc == GFEAT_DROPPED) return 0;
  int32_t dim = r->rows ? gfeat_batch_dim(*gfb) : 0;  /* every utterance's (checked by add) */
  if (kio_matrix_resize(feats, r->rows, dim) != KIO_OK) {
    KIO_ERROR("Out of memory reading utterance %s", key);
    return KIO_ERR;
  }
  *index = gfeat_batch_count(*gfb) - 1;
  return 1;
}

int galign_gfeat_full(const galign_gfeat *g, const struct gfeat_batch *gfb) {
  kio_gpu *dev = NULL;
  if (!g || !gfb || kio_gpu_job(&dev, 0) != KIO_OK) return 0;
  /* the account's limit is twice this: one utterance past it still fits */
  return gfeat_batch_need(gfb) >= kio_gpu_share(dev, KIO_GPU_PART_FEATS);
}

int galign_gfeat_run(galign_gfeat *g, galign_aligner *a, batch *b) {
  struct gfeat_batch *gfb = b->gfb;
  int n = gfb ? gfeat_batch_count(gfb) : 0;
  if (n == 0 || gfeat_batch_frames(gfb) == 0) return KIO_OK;
  /* on the aligner's device: the job's one device (device/gpu.h) */
  if (!g->dev && gfeat_cuda_new(&g->dev, g->chain, NULL) != KIO_OK) return KIO_ERR;
  if (n > g->cap) {
    free(g->rows);
    free(g->mats);
    free(g->offs);
    g->rows = calloc((size_t)n, sizeof *g->rows);
    g->mats = calloc((size_t)n, sizeof *g->mats);
    g->offs = calloc((size_t)n, sizeof *g->offs);
    g->cap = g->rows && g->mats && g->offs ? n : 0;
    if (!g->cap) { KIO_ERROR("Out of memory"); return KIO_ERR; }
  }
  memset(g->rows, 0, sizeof *g->rows * (size_t)n);
  int m = 0;
  for (int i = 0; i < b->nslots; i++) {
    slot *s = &b->slots[i];
    if (s->gf_index < 0 || s->gf_index >= n) continue;
    g->rows[s->gf_index] = s->feats.data;
    g->mats[m] = &s->feats;
    g->offs[m++] = gfeat_batch_row_off(gfb, s->gf_index);
  }
  const float *d = NULL;
  if (gfeat_cuda_compute(g->dev, gfb, &d, g->rows) != KIO_OK) return KIO_ERR;
  g->utts += n;
  g->frames += gfeat_batch_frames(gfb);
  return galign_aligner_set_dev_feats(a, m, g->mats, d, g->offs);
}

void galign_gfeat_done(galign_aligner *a) { galign_aligner_set_dev_feats(a, 0, NULL, NULL, NULL); }

void galign_gfeat_stats(const galign_gfeat *g, int64_t *utts, int64_t *frames) {
  *utts = g ? g->utts : 0;
  *frames = g ? g->frames : 0;
}

void galign_gfeat_finish(galign_gfeat *g) {
  if (!g || g->finished) return;
  g->finished = 1;
  g->status = gfeat_chain_finish(g->chain, g->raw);
}

int galign_gfeat_close(galign_gfeat *g) {
  if (!g || !g->raw) return KIO_OK;
  int rc = kio_ra_close(g->raw);
  g->raw = NULL;
  /* The pipe's end as kio_ra_close would have seen it (read to its end). */
  if (g->finished && g->status != 0 && rc == KIO_OK) {
    kio_pipe_status_warn(g->pipe_name, g->status);
    if (!g->permissive) {
      kio_ra_pipe_failed_error(g->rspec);
      rc = KIO_ERR;
    }
  }
  return rc;
}

void galign_gfeat_free(galign_gfeat *g) {
  if (!g) return;
  galign_gfeat_close(g);
  gfeat_cuda_free(g->dev);
  gfeat_chain_free(g->chain);
  kio_feat_plan_free(&g->plan);
  free(g->pipe_name);
  free(g->rspec);
  free(g->rows);
  free(g->mats);
  free(g->offs);
  free(g);
}

void galign_gfeat_batch_free(struct gfeat_batch *gfb) { gfeat_batch_free(gfb); }
