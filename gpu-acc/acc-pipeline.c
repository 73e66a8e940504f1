/* gmm-acc-stats-ali's loop (acc-pipeline.h), with Kaldi's messages at
 * Kaldi's source locations. */
#include "acc-pipeline.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/io/table.h"
#include "base/matrix/matrix.h"
#include "base/sys/kaldi-msg.h"
#include "base/sys/log.h"
#include "base/sys/cpu-share.h"
#include "base/sys/settings.h"
#include "device/cuda-util.h"
#include "device/svc-link.h"

/* GPU batches: utterances taken from the readers, accumulated together. */
enum { MAX_BATCH_UTTS = 512, MAX_BATCH_FRAMES = 200000 };

/* One entry of the feature table in reading order: an utterance to
 * accumulate, or a warning to print when its turn comes (so that messages
 * keep Kaldi's order even though the GPU works on whole batches). */
typedef struct {
  enum { ITEM_UTT, ITEM_NO_ALI, ITEM_WRONG_SIZE } kind;
  char *key;
  int32_t ali_len, rows;   /* ITEM_WRONG_SIZE */
  kio_matrix feats;        /* ITEM_UTT: the features (taken from the reader) */
  int32_t *ali; size_t ali_cap;
} item;

typedef struct {
  item *items; int n, cap;
  size_t frames;
  int nu;                  /* utterances handed to the accumulator */
  gacc_utt *utts; gacc_utt_result *res; int *utt_item;
  kio_matrix **take;       /* the utterances' matrices (items' feats) */
} batch;

typedef struct {
  gacc_acc *acc;
  double t_acc;            /* seconds spent in (waiting for) the accumulator */
  int32_t num_done, num_err;
  double tot_like;
  int64_t tot_t;
  double t_setup;          /* seconds choosing and creating the backend */
  const gacc_pipeline_cfg *cfg;
  int stopped;
} state;

static item *batch_add(batch *b, const char *key) {
  if (b->n == b->cap) {
    int cap = b->cap ? 2 * b->cap : 64;
    item *it = realloc(b->items, sizeof(item) * (size_t)cap);
    if (!it) return NULL;
    memset(it + b->cap, 0, sizeof(item) * (size_t)(cap - b->cap));
    b->items = it;
    b->cap = cap;
  }
  item *it = &b->items[b->n];
  free(it->key);
  it->key = strdup(key);
  if (!it->key) return NULL;
  b->n++;
  return it;
}

static void batch_free(batch *b) {
  for (int i = 0; i < b->cap; i++) {
    free(b->items[i].key);
    kio_matrix_free(&b->items[i].feats);
    free(b->items[i].ali);
  }
  free(b->items);
  free(b->utts);
  free(b->res);
  free(b->utt_item);
  free(b->take);
  memset(b, 0, sizeof *b);
}

/* Hands the batch's utterances to the accumulator. On the GPU (the service
 * or the job's own device) this returns once they are sent or handed to the
 * accumulator's worker: the device works while the next batch is read, and
 * batch_finish collects the results. Through the service the batch before
 * may still be in flight (gacc_inflight): this one is sent while the
 * service accumulates that one, collected first. */
static int batch_start(state *st, batch *b) {
  int nu = 0;
  if (b->n > 0) {
    gacc_utt *u = realloc(b->utts, sizeof(gacc_utt) * (size_t)b->n);
    if (u) b->utts = u;
    gacc_utt_result *r = realloc(b->res, sizeof(gacc_utt_result) * (size_t)b->n);
    if (r) b->res = r;
    int *ui = realloc(b->utt_item, sizeof(int) * (size_t)b->n);
    if (ui) b->utt_item = ui;
    kio_matrix **tk = realloc(b->take, sizeof(kio_matrix *) * (size_t)b->n);
    if (tk) b->take = tk;
    if (!u || !r || !ui || !tk) { KIO_ERROR("Out of memory"); return KIO_ERR; }
  }
  for (int i = 0; i < b->n; i++) {
    item *it = &b->items[i];
    if (it->kind != ITEM_UTT) continue;
    b->utts[nu].key = it->key;
    b->utts[nu].feats = &it->feats;
    b->utts[nu].ali = it->ali;
    b->take[nu] = &it->feats;
    b->utt_item[i] = nu++;
  }
  b->nu = nu;
  double t0 = kio_now_s();
  /* through the service the features are taken for its kept batches (the
   * items get spare matrices, which the reader reuses), not copied */
  int rc = nu > 0 ? gacc_accumulate_batch_start_take(st->acc, nu, b->utts, b->take, b->res)
                  : KIO_OK;
  st->t_acc += kio_now_s() - t0;
  return rc;
}

/* Waits for the batch's results (the oldest in flight), then prints its
 * messages in order. */
static int batch_finish(state *st, batch *b) {
  double t0 = kio_now_s();
  int rc = b->nu > 0 ? gacc_wait_first(st->acc) : KIO_OK;
  st->t_acc += kio_now_s() - t0;
  if (rc != KIO_OK) return KIO_ERR;
  char buf[32];
  for (int i = 0; i < b->n; i++) {
    item *it = &b->items[i];
    if (it->kind == ITEM_NO_ALI) {
      KIO_KALDI(ACC_NO_ALI, it->key);
      continue;
    }
    if (it->kind == ITEM_WRONG_SIZE) {
      KIO_KALDI(ACC_WRONG_SIZE, (int)it->ali_len, (int)it->rows);
      continue;
    }
    const gacc_utt_result *r = &b->res[b->utt_item[i]];
    st->num_done++;
    st->tot_like += (double)r->like;
    st->tot_t += r->frames;
    if (st->num_done % 50 == 0) {
      /* float / size_t in Kaldi: a float division (0/0 is x86's -nan) */
      float avg = r->frames > 0 ? r->like / (float)r->frames : -NAN;
      KIO_KALDI(ACC_PROCESSED, (long)st->num_done, it->key, kio_fmt_g(buf, avg),
                (int)r->frames);
    }
  }
  b->n = 0;
  b->nu = 0;
  b->frames = 0;
  if (st->cfg->progress &&
      st->cfg->progress(st->cfg->user, st->num_done, st->num_err, st->tot_t)) {
    st->stopped = 1;
    return KIO_ERR;
  }
  return KIO_OK;
}

static int flush_batch(state *st, batch *b) {
  return batch_start(st, b) == KIO_OK && batch_finish(st, b) == KIO_OK ? KIO_OK : KIO_ERR;
}

static int copy_ali(item *it, const kio_int_vec *ali) {
  if ((size_t)ali->n > it->ali_cap) {
    int32_t *a = realloc(it->ali, sizeof(int32_t) * (size_t)ali->n);
    if (!a) return KIO_ERR;
    it->ali = a;
    it->ali_cap = (size_t)ali->n;
  }
  if (ali->n) memcpy(it->ali, ali->v, sizeof(int32_t) * (size_t)ali->n);
  return KIO_OK;
}

/* 1 if the accumulator would refuse the utterance (a fatal error in Kaldi):
 * then the messages of the utterances before it must come out first. */
static int utt_is_bad(const kio_tmodel *tm, const kio_am_gmm *am, const kio_matrix *m,
                      const kio_int_vec *ali) {
  if (m->rows > 0 && m->cols != am->dim) return 1;
  for (int32_t t = 0; t < ali->n; t++) {
    int32_t tid = ali->v[t];
    if (tid < 0 || tid > tm->num_tids) return 1;
    int32_t pdf = tm->tid2pdf[tid];
    if (pdf < 0 || pdf >= am->num_pdfs) return 1;
  }
  return 0;
}

/* A job this small (whole input read: frames x average Gaussians per pdf x
 * dim, multiply-adds) takes a few ms on one core, less than the GPU
 * service's connection, model upload and round trip (20-50 ms measured on
 * the H200 with 16 jobs at once): train_mono's jobs, e.g. With
 * --use-gpu=optional it runs on the CPU (small jobs take the faster path on
 * their own); the statistics are the same bits either way. */
#define SMALL_JOB_WORK 3e7

typedef struct {
  gacc_acc **acc;
  galign_use_gpu mode;
  const kio_tmodel *tm;
  const kio_am_gmm *am;
} acc_try;

/* Sets the accumulator up on the job's device (kio_gpu_choose). */
static int try_device(void *user, kio_gpu *g) {
  acc_try *t = user;
  return gacc_new_gpu(t->acc, g, t->mode, t->tm, t->am);
}

/* Chooses the backend as --use-gpu says: the GPU service, else a GPU
 * context of our own, else the CPU (device/gpu.h's fall-back order); one
 * LOG line tells which. small_frames > 0: the whole input is read and is
 * that many frames of a small job. */
static int make_acc(gacc_acc **acc, galign_use_gpu mode, const kio_tmodel *tm,
                    const kio_am_gmm *am, int64_t small_frames) {
  if (mode == GALIGN_GPU_OPTIONAL && small_frames > 0 && access("/dev/nvidiactl", F_OK) == 0 &&
      !kio_test_hook(KIO_SET_TEST_NO_SMALL_JOB)) {
    KIO_LOG("Accumulating on the CPU: a small job (%lld frames), faster than a GPU round trip.",
            (long long)small_frames);
    return gacc_new(acc, "cpu", tm, am);
  }
  char why[256] = "";
  if (mode != GALIGN_GPU_NO && kio_svc_wanted()) {
    /* a service lost later: the statistics go on here, as --use-gpu allows */
    gacc_on_loss on_loss = mode == GALIGN_GPU_OPTIONAL ? GACC_LOSS_GPU_OR_CPU
                           : mode == GALIGN_GPU_WAIT   ? GACC_LOSS_GPU_WAIT
                                                       : GACC_LOSS_GPU;
    if (gacc_new_remote(acc, tm, am, on_loss, why, sizeof why) == KIO_OK) {
      KIO_LOG("Accumulating on the GPU: %s (through the GPU service)", gacc_remote_desc(*acc));
      return KIO_OK;
    }
  }
  char line[640];
  kio_gpu *g = NULL;
  acc_try t = {acc, mode, tm, am};
  if (kio_gpu_choose(mode, why, "accumulating", &g, try_device, &t, line, sizeof line) != KIO_OK)
    return KIO_ERR;
  KIO_LOG("%s", line);
  return g ? KIO_OK : gacc_new(acc, "cpu", tm, am);
}

/* Creates the accumulator once the first batch is read (full: more may
 * follow) or the input ended (then a small job may stay on the CPU). */
static int choose_acc(state *st, galign_use_gpu mode, const kio_tmodel *tm,
                      const kio_am_gmm *am, const batch *b, int input_ended) {
  return gacc_pipeline_new_acc(&st->acc, mode, tm, am, input_ended, (int64_t)b->frames);
}

int gacc_pipeline_new_acc(gacc_acc **acc, galign_use_gpu mode, const kio_tmodel *tm,
                          const kio_am_gmm *am, int whole_input, int64_t frames) {
  int64_t small = 0;
  if (whole_input && am->num_pdfs > 0) {
    double gauss = 0;
    for (int32_t j = 0; j < am->num_pdfs; j++) gauss += am->pdfs[j].num_comp;
    double work = (double)frames * (gauss / (double)am->num_pdfs) * (double)am->dim;
    if (work <= SMALL_JOB_WORK) small = frames > 0 ? frames : 1;
  }
  return make_acc(acc, mode, tm, am, small);
}

static void quiet(int level, const char *func, const char *file, int line, const char *msg,
                  void *user) {
  (void)level; (void)func; (void)file; (void)line; (void)msg; (void)user;
}

/* The loop. The backend is chosen when the first batch is full or the
 * input ended (choose_acc); until then utterances are only read (gpu < 0).
 * GPU: batches; the one read last (b) fills while the one before (prev)
 * may still be accumulated; through the service b is sent before prev is
 * collected (two in flight), else prev is collected first. CPU: one
 * utterance at a time, as Kaldi. */
static int run(state *st, const kio_tmodel *tm, const kio_am_gmm *am, galign_use_gpu mode,
               const gacc_pipeline_cfg *cfg, kio_seq_reader **feats_out,
               kio_ra_reader **alis_out, batch *bufs) {
  if (kio_seq_open(feats_out, cfg->feats_rspecifier, &kio_matrix_holder) != KIO_OK ||
      kio_ra_open(alis_out, cfg->ali_rspecifier, &kio_int_vec_holder) != KIO_OK)
    return KIO_ERR;
  kio_seq_reader *feats = *feats_out;
  kio_ra_reader *alis = *alis_out;
  /* an archive file parsed ahead on threads: the same entries and messages */
  int threads = (int)kio_setting_int(KIO_SET_DEV_READ_THREADS, kio_cpu_share(8), 0, 64);
  if (threads > 0) {
    kio_seq_read_ahead(feats, kio_matrix_body_bytes, threads, 32 + 16 * threads);
    kio_ra_read_ahead(alis);
  }
  int gpu = st->acc ? gacc_is_gpu(st->acc) : -1;
#define CHOOSE(ended)                                                       \
  do {                                                                      \
    double t_c = kio_now_s();                                               \
    if (choose_acc(st, mode, tm, am, b, (ended)) != KIO_OK) return KIO_ERR; \
    gpu = gacc_is_gpu(st->acc);                                             \
    st->t_setup = kio_now_s() - t_c;                                        \
  } while (0)
  batch *b = &bufs[0], *prev = NULL;
  for (; !kio_seq_done(feats); kio_seq_next(feats)) {
    const char *key = kio_seq_key(feats);
    item *it = batch_add(b, key);
    if (!it) { KIO_ERROR("Out of memory"); return KIO_ERR; }
    if (!kio_ra_has_key(alis, key)) {
      it->kind = ITEM_NO_ALI;
      st->num_err++;
    } else {
      /* the reader's matrix taken (its buffer swapped with the item's): no copy */
      if (kio_seq_take(feats, &it->feats) != KIO_OK) return KIO_ERR;
      const kio_matrix *m = &it->feats;
      const kio_int_vec *ali = kio_ra_value(alis, key);
      if (!ali) return KIO_ERR;
      if (ali->n != m->rows) {
        it->kind = ITEM_WRONG_SIZE;
        it->ali_len = ali->n;
        it->rows = m->rows;
        st->num_err++;
      } else if (utt_is_bad(tm, am, m, ali)) {
        /* earlier utterances' messages first, then the accumulator's ERROR */
        b->n--;
        if (!st->acc) CHOOSE(0);
        if ((prev && batch_finish(st, prev) != KIO_OK) || flush_batch(st, b) != KIO_OK)
          return KIO_ERR;
        gacc_utt u = { key, m, ali->v };
        gacc_utt_result r;
        gacc_accumulate_batch(st->acc, 1, &u, &r);
        return KIO_ERR;
      } else {
        it->kind = ITEM_UTT;
        if (copy_ali(it, ali) != KIO_OK) { KIO_ERROR("Out of memory"); return KIO_ERR; }
        b->frames += (size_t)m->rows;
      }
    }
    if (gpu < 0) {
      if (b->n < MAX_BATCH_UTTS && b->frames < MAX_BATCH_FRAMES) continue;
      CHOOSE(0);
    }
    if (!gpu) {
      if (flush_batch(st, b) != KIO_OK) return KIO_ERR;
    } else if (b->n >= MAX_BATCH_UTTS || b->frames >= MAX_BATCH_FRAMES) {
      if (prev && gacc_inflight(st->acc) > 1) {
        if (batch_start(st, b) != KIO_OK || batch_finish(st, prev) != KIO_OK) return KIO_ERR;
      } else if ((prev && batch_finish(st, prev) != KIO_OK) || batch_start(st, b) != KIO_OK) {
        return KIO_ERR;
      }
      prev = b;
      b = b == &bufs[0] ? &bufs[1] : &bufs[0];
    }
  }
  if (!st->acc) CHOOSE(1);
#undef CHOOSE
  if (prev && gacc_inflight(st->acc) > 1)
    return batch_start(st, b) == KIO_OK && batch_finish(st, prev) == KIO_OK &&
                   batch_finish(st, b) == KIO_OK ? KIO_OK : KIO_ERR;
  if ((prev && batch_finish(st, prev) != KIO_OK) || flush_batch(st, b) != KIO_OK)
    return KIO_ERR;
  return KIO_OK;
}

/* Kaldi's fatal error in the middle of the input: the batch in flight
 * finished, the readers closed, quietly (Kaldi prints nothing after its
 * ERROR line). */
static void fail(gacc_acc *acc, kio_ra_reader *alis, kio_seq_reader *feats) {
  kio_log_handler h;
  void *u;
  kio_log_get_handler(&h, &u);
  kio_log_set_handler(quiet, NULL);
  if (acc) gacc_wait(acc);
  kio_ra_close(alis);
  kio_seq_close(feats);
  kio_log_set_handler(h, u);
}

int gacc_pipeline_run(gacc_acc **acc, const kio_tmodel *tm, const kio_am_gmm *am,
                      const gacc_pipeline_cfg *cfg, gacc_pipeline_counts *out) {
  double t_start = cfg->t_start > 0 ? cfg->t_start : kio_now_s();
  galign_use_gpu mode = cfg->use_gpu;
  state st;
  memset(&st, 0, sizeof st);
  st.acc = *acc;
  st.cfg = cfg;
  memset(out, 0, sizeof *out);
  kio_seq_reader *feats = NULL;
  kio_ra_reader *alis = NULL;
  batch bufs[2];
  memset(bufs, 0, sizeof bufs);
  double t_run = kio_now_s();
  int rc = run(&st, tm, am, mode, cfg, &feats, &alis, bufs);
  t_run = kio_now_s() - t_run;
  *acc = st.acc;
  if (rc != KIO_OK) fail(st.acc, alis, feats);  /* before the batches go */
  batch_free(&bufs[0]);
  batch_free(&bufs[1]);
  out->num_done = st.num_done;
  out->num_err = st.num_err;
  out->tot_like = st.tot_like;
  out->tot_t = st.tot_t;
  out->stopped = st.stopped;
  if (rc != KIO_OK) return KIO_ERR;
  /* reading: the loop's own time, outside the accumulator (the CPU's
   * accumulation included there) and its set-up */
  KIO_VLOG(1, "Time: setup (model, accumulator) %.3f s, %.3f s in the accumulator (waiting "
           "for it, on the GPU), reading %.3f s, %.3f s in all", st.t_setup, st.t_acc,
           t_run - st.t_acc - st.t_setup, kio_now_s() - t_start);
  char buf[32];
  KIO_KALDI(ACC_DONE, (long)st.num_done, (long)st.num_err);
  double avg = st.tot_t > 0 ? st.tot_like / (double)st.tot_t : -NAN;
  KIO_KALDI(ACC_OVERALL, kio_fmt_g(buf, avg), (long long)st.tot_t);
  /* An error the readers detect when closed (read error, failed pipe) is
   * fatal. Kaldi finds it in the destructors, after writing the stats; here
   * it comes first, so that no stats of failed inputs are written. */
  int failed = 0;
  if (kio_ra_close(alis) != KIO_OK) failed = 1;
  if (kio_seq_close(feats) != KIO_OK) failed = 1;
  return failed ? KIO_ERR : KIO_OK;
}
