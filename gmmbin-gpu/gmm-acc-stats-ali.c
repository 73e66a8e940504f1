/* gmm-acc-stats-ali: Kaldi's program (gmmbin/gmm-acc-stats-ali.cc, reference
 * section 4) with the accumulation on a CUDA GPU when one is usable.
 * Same arguments, options, messages, output file and exit codes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

#include "device/cuda-util.h"
#include "base/io/io.h"
#include "base/sys/log.h"
#include "base/matrix/matrix.h"
#include "base/model/model.h"
#include "base/sys/options.h"
#include "device/svc-link.h"
#include "base/io/table.h"
#include "gpu-acc/gpu-acc.h"
#include "gpu-align/gpu-align.h"
#include "base/program/program.h"

#define PROG_FILE "gmm-acc-stats-ali.cc"
/* Lines of Kaldi's source the messages come from (log lines show them). */
enum { LINE_NO_ALI = 79, LINE_WRONG_SIZE = 86, LINE_PROCESSED = 105,
       LINE_DONE = 112, LINE_OVERALL = 115, LINE_WRITTEN = 123 };

/* GPU batches: utterances copied from the readers, accumulated together. */
enum { MAX_BATCH_UTTS = 512, MAX_BATCH_FRAMES = 200000 };

/* One entry of the feature table in reading order: an utterance to
 * accumulate, or a warning to print when its turn comes (so that messages
 * keep Kaldi's order even though the GPU works on whole batches). */
typedef struct {
  enum { ITEM_UTT, ITEM_NO_ALI, ITEM_WRONG_SIZE } kind;
  char *key;
  int32_t ali_len, rows;   /* ITEM_WRONG_SIZE */
  kio_matrix feats;        /* ITEM_UTT: copy of the features */
  int32_t *ali; size_t ali_cap;
} item;

typedef struct {
  item *items; int n, cap;
  size_t frames;
  int nu;                  /* utterances handed to the accumulator */
  gacc_utt *utts; gacc_utt_result *res; int *utt_item;
} batch;

typedef struct {
  gacc_acc *acc;
  double t_acc;            /* seconds spent in (waiting for) the accumulator */
  int32_t num_done, num_err;
  double tot_like;
  int64_t tot_t;
} state;

/* Kaldi's fatal error: the ERROR line is out; outputs abandoned, exit 255. */
static int fatal(void) { kio_fatal_exit(); }

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
  memset(b, 0, sizeof *b);
}

/* Hands the batch's utterances to the accumulator. On the GPU service this
 * returns once they are sent: the service works while the next batch is
 * read, and batch_finish collects the results. */
static int batch_start(state *st, batch *b) {
  int nu = 0;
  if (b->n > 0) {
    gacc_utt *u = realloc(b->utts, sizeof(gacc_utt) * (size_t)b->n);
    if (u) b->utts = u;
    gacc_utt_result *r = realloc(b->res, sizeof(gacc_utt_result) * (size_t)b->n);
    if (r) b->res = r;
    int *ui = realloc(b->utt_item, sizeof(int) * (size_t)b->n);
    if (ui) b->utt_item = ui;
    if (!u || !r || !ui) { KIO_ERROR("Out of memory"); return KIO_ERR; }
  }
  for (int i = 0; i < b->n; i++) {
    item *it = &b->items[i];
    if (it->kind != ITEM_UTT) continue;
    b->utts[nu].key = it->key;
    b->utts[nu].feats = &it->feats;
    b->utts[nu].ali = it->ali;
    b->utt_item[i] = nu++;
  }
  b->nu = nu;
  double t0 = kio_now_s();
  int rc = nu > 0 ? gacc_accumulate_batch_start(st->acc, nu, b->utts, b->res) : KIO_OK;
  st->t_acc += kio_now_s() - t0;
  return rc;
}

/* Waits for the batch's results, then prints its messages in order. */
static int batch_finish(state *st, batch *b) {
  double t0 = kio_now_s();
  int rc = b->nu > 0 ? gacc_wait(st->acc) : KIO_OK;
  st->t_acc += kio_now_s() - t0;
  if (rc != KIO_OK) return KIO_ERR;
  char buf[32];
  for (int i = 0; i < b->n; i++) {
    item *it = &b->items[i];
    if (it->kind == ITEM_NO_ALI) {
      KIO_LOG_AT(KIO_LOG_WARNING, "main", PROG_FILE, LINE_NO_ALI,
                 "No alignment for utterance %s", it->key);
      continue;
    }
    if (it->kind == ITEM_WRONG_SIZE) {
      KIO_LOG_AT(KIO_LOG_WARNING, "main", PROG_FILE, LINE_WRONG_SIZE,
                 "Alignments has wrong size %d vs. %d", (int)it->ali_len, (int)it->rows);
      continue;
    }
    const gacc_utt_result *r = &b->res[b->utt_item[i]];
    st->num_done++;
    st->tot_like += (double)r->like;
    st->tot_t += r->frames;
    if (st->num_done % 50 == 0) {
      /* float / size_t in Kaldi: a float division (0/0 is x86's -nan) */
      float avg = r->frames > 0 ? r->like / (float)r->frames : -NAN;
      KIO_LOG_AT(KIO_LOG_INFO, "main", PROG_FILE, LINE_PROCESSED,
                 "Processed %d utterances; for utterance %s avg. like is %s over %d frames.",
                 (int)st->num_done, it->key, kio_fmt_g(buf, avg), (int)r->frames);
    }
  }
  b->n = 0;
  b->nu = 0;
  b->frames = 0;
  return KIO_OK;
}

static int flush_batch(state *st, batch *b) {
  return batch_start(st, b) == KIO_OK && batch_finish(st, b) == KIO_OK ? KIO_OK : KIO_ERR;
}

static int copy_utt(item *it, const kio_matrix *m, const kio_int_vec *ali) {
  if (kio_matrix_resize(&it->feats, m->rows, m->cols) != KIO_OK) return KIO_ERR;
  memcpy(it->feats.data, m->data, sizeof(float) * (size_t)m->rows * (size_t)m->cols);
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
 * --use-gpu=optional it runs on the CPU (issue 12: "small jobs may take the
 * faster path on their own"); the statistics are the same bits either way. */
#define SMALL_JOB_WORK 3e7

/* Chooses the backend as --use-gpu says: the GPU service, else a GPU
 * context of our own, else the CPU; one LOG line tells which. small_frames
 * > 0: the whole input is read and is that many frames of a small job. */
static int make_acc(gacc_acc **acc, galign_use_gpu mode, const kio_tmodel *tm,
                    const kio_am_gmm *am, int64_t small_frames) {
  if (mode == GALIGN_GPU_NO) {
    KIO_LOG("Accumulating on the CPU (--use-gpu=no).");
    return gacc_new(acc, "cpu", tm, am);
  }
  if (mode == GALIGN_GPU_OPTIONAL && small_frames > 0 && access("/dev/nvidiactl", F_OK) == 0) {
    KIO_LOG("Accumulating on the CPU: a small job (%lld frames), faster than a GPU round trip.",
            (long long)small_frames);
    return gacc_new(acc, "cpu", tm, am);
  }
  char why[256] = "", note[320] = "";
  if (kio_svc_wanted()) {
    gacc_on_loss on_loss = mode == GALIGN_GPU_OPTIONAL ? GACC_LOSS_GPU_OR_CPU
                           : mode == GALIGN_GPU_WAIT   ? GACC_LOSS_GPU_WAIT
                                                       : GACC_LOSS_GPU;
    if (gacc_new_remote(acc, tm, am, on_loss, why, sizeof why) == KIO_OK) {
      KIO_LOG("Accumulating on the GPU: %s (through the GPU service)", gacc_remote_desc(*acc));
      return KIO_OK;
    }
    snprintf(note, sizeof note, " (GPU service not usable: %s)", why);
  }
  if (mode == GALIGN_GPU_OPTIONAL && kio_cuda_device_count() <= 0) {
    KIO_LOG("No GPU found; accumulating on the CPU.%s", note);
    return gacc_new(acc, "cpu", tm, am);
  }
  char desc[256] = "";
  if (kio_cuda_select(mode == GALIGN_GPU_WAIT, desc, sizeof desc) == KIO_OK &&
      gacc_new(acc, "gpu", tm, am) == KIO_OK) {
    KIO_LOG("Accumulating on the GPU: %s%s", desc, note);
    return KIO_OK;
  }
  if (mode != GALIGN_GPU_OPTIONAL) return KIO_ERR;
  KIO_LOG("GPU not usable; accumulating on the CPU.%s", note);
  return gacc_new(acc, "cpu", tm, am);
}

/* Creates the accumulator once the first batch is read (full: more may
 * follow) or the input ended (then a small job may stay on the CPU). */
static int choose_acc(state *st, galign_use_gpu mode, const kio_tmodel *tm,
                      const kio_am_gmm *am, const batch *b, int input_ended) {
  int64_t small = 0;
  if (input_ended && am->num_pdfs > 0) {
    double gauss = 0;
    for (int32_t j = 0; j < am->num_pdfs; j++) gauss += am->pdfs[j].num_comp;
    double work = (double)b->frames * (gauss / (double)am->num_pdfs) * (double)am->dim;
    if (work <= SMALL_JOB_WORK) small = b->frames > 0 ? (int64_t)b->frames : 1;
  }
  return make_acc(&st->acc, mode, tm, am, small);
}

/* An error the readers detect when closed (read error, failed pipe) is
 * fatal. Kaldi finds it in the destructors, after writing the stats; here
 * it comes first, so that no stats of failed inputs are written. */
static void close_readers(kio_ra_reader *alis, kio_seq_reader *feats) {
  int failed = 0;
  if (kio_ra_close(alis) != KIO_OK) failed = 1;
  if (kio_seq_close(feats) != KIO_OK) failed = 1;
  if (failed) kio_fatal_exit();
}

int main(int argc, char *argv[]) {
  kio_program_start(argc, argv);
  const char *usage =
      "Accumulate stats for GMM training.\n"
      "Usage:  gmm-acc-stats-ali [options] <model-in> <feature-rspecifier> "
      "<alignments-rspecifier> <stats-out>\n"
      "e.g.:\n gmm-acc-stats-ali 1.mdl scp:train.scp ark:1.ali 1.acc\n";
  int binary = 1;
  char *use_gpu = strdup("optional");
  kio_opts *po = kio_opts_new(usage);
  kio_opts_bool(po, "binary", &binary, "Write output in binary mode");
  kio_opts_string(po, "use-gpu", &use_gpu,
                  "yes|no|optional|wait: accumulate on a CUDA GPU (optional: if one "
                  "is usable, else on the CPU)");
  int prc = kio_opts_parse(po, argc, argv);
  if (prc == KIO_OPTS_HELP) exit(0);
  if (prc != KIO_OPTS_OK) return fatal();
  if (kio_opts_num_args(po) != 4) {
    kio_opts_print_usage(po);
    exit(1);
  }
  kio_log_ours();
  galign_use_gpu mode;
  if (galign_parse_use_gpu(use_gpu, &mode) != KIO_OK) {
    KIO_ERROR("Invalid value --use-gpu=%s: use yes|no|optional|wait", use_gpu);
    return fatal();
  }
  const char *model_in = kio_opts_arg(po, 1), *feature_rspecifier = kio_opts_arg(po, 2),
             *ali_rspecifier = kio_opts_arg(po, 3), *accs_wxfilename = kio_opts_arg(po, 4);

  double t_start = kio_now_s();
  kio_tmodel tm;
  kio_am_gmm am;
  memset(&tm, 0, sizeof tm);
  memset(&am, 0, sizeof am);
  if (kio_model_read(model_in, &tm, &am) != KIO_OK) return fatal();
  state st;
  memset(&st, 0, sizeof st);

  kio_seq_reader *feats = NULL;
  kio_ra_reader *alis = NULL;
  if (kio_seq_open(&feats, feature_rspecifier, &kio_matrix_holder) != KIO_OK ||
      kio_ra_open(&alis, ali_rspecifier, &kio_int_vec_holder) != KIO_OK)
    return fatal();

  /* The backend is chosen when the first batch is full or the input ended
   * (choose_acc); until then utterances are only read (gpu < 0).
   * GPU: batches; the one read last (b) fills while the one before (prev)
   * may still be accumulated. CPU: one utterance at a time, as Kaldi. */
  int gpu = -1;
  double t_setup = 0;
#define CHOOSE(ended)                                                       \
  do {                                                                      \
    double t_c = kio_now_s();                                                   \
    if (choose_acc(&st, mode, &tm, &am, b, (ended)) != KIO_OK) return fatal(); \
    gpu = gacc_is_gpu(st.acc);                                              \
    t_setup = kio_now_s() - t_c;                                                \
  } while (0)
  batch bufs[2];
  memset(bufs, 0, sizeof bufs);
  batch *b = &bufs[0], *prev = NULL;
  for (; !kio_seq_done(feats); kio_seq_next(feats)) {
    const char *key = kio_seq_key(feats);
    item *it = batch_add(b, key);
    if (!it) { KIO_ERROR("Out of memory"); return fatal(); }
    if (!kio_ra_has_key(alis, key)) {
      it->kind = ITEM_NO_ALI;
      st.num_err++;
    } else {
      const kio_matrix *m = kio_seq_value(feats);
      if (!m) return fatal();
      const kio_int_vec *ali = kio_ra_value(alis, key);
      if (!ali) return fatal();
      if (ali->n != m->rows) {
        it->kind = ITEM_WRONG_SIZE;
        it->ali_len = ali->n;
        it->rows = m->rows;
        st.num_err++;
      } else if (utt_is_bad(&tm, &am, m, ali)) {
        /* earlier utterances' messages first, then the accumulator's ERROR */
        b->n--;
        if (!st.acc) CHOOSE(0);
        if ((prev && batch_finish(&st, prev) != KIO_OK) || flush_batch(&st, b) != KIO_OK)
          return fatal();
        gacc_utt u = { key, m, ali->v };
        gacc_utt_result r;
        gacc_accumulate_batch(st.acc, 1, &u, &r);
        return fatal();
      } else {
        it->kind = ITEM_UTT;
        if (copy_utt(it, m, ali) != KIO_OK) { KIO_ERROR("Out of memory"); return fatal(); }
        b->frames += (size_t)m->rows;
      }
    }
    if (gpu < 0) {
      if (b->n < MAX_BATCH_UTTS && b->frames < MAX_BATCH_FRAMES) continue;
      CHOOSE(0);
    }
    if (!gpu) {
      if (flush_batch(&st, b) != KIO_OK) return fatal();
    } else if (b->n >= MAX_BATCH_UTTS || b->frames >= MAX_BATCH_FRAMES) {
      if ((prev && batch_finish(&st, prev) != KIO_OK) || batch_start(&st, b) != KIO_OK)
        return fatal();
      prev = b;
      b = b == &bufs[0] ? &bufs[1] : &bufs[0];
    }
  }
  if (!st.acc) CHOOSE(1);
#undef CHOOSE
  if ((prev && batch_finish(&st, prev) != KIO_OK) || flush_batch(&st, b) != KIO_OK)
    return fatal();

  KIO_VLOG(1, "Time: setup (model, accumulator) %.3f s, %.3f s in the accumulator (waiting "
           "for it, on the GPU), %.3f s in all", t_setup, st.t_acc, kio_now_s() - t_start);
  char buf[32];
  KIO_LOG_AT(KIO_LOG_INFO, "main", PROG_FILE, LINE_DONE, "Done %d files, %d with errors.",
             (int)st.num_done, (int)st.num_err);
  double avg = st.tot_t > 0 ? st.tot_like / (double)st.tot_t : -NAN;
  KIO_LOG_AT(KIO_LOG_INFO, "main", PROG_FILE, LINE_OVERALL,
             "Overall avg like per frame (Gaussian only) = %s over %lld frames.",
             kio_fmt_g(buf, avg), (long long)st.tot_t);

  close_readers(alis, feats);
  gacc_stats stats;
  memset(&stats, 0, sizeof stats);
  if (gacc_get_stats(st.acc, &stats) != KIO_OK ||
      gacc_stats_write(accs_wxfilename, binary, &stats) != KIO_OK)
    return fatal();
  KIO_LOG_AT(KIO_LOG_INFO, "main", PROG_FILE, LINE_WRITTEN, "Written accs.");

  gacc_stats_free(&stats);
  batch_free(&bufs[0]);
  batch_free(&bufs[1]);
  gacc_free(st.acc);
  kio_tmodel_free(&tm);
  kio_am_gmm_free(&am);
  kio_opts_free(po);
  free(use_gpu);
  return st.num_done != 0 ? 0 : 1;
}
