/* kaldi-gpu-align: Kaldi's GMM forced alignment (gmm-align-compiled),
 * statistics accumulation (gmm-acc-stats-ali) and both in one pass, on a
 * CUDA GPU or on the CPU, as a C library (libkaldi-gpu-align.so).
 *
 * Results are Kaldi's: the same alignments, likelihoods, statistics bytes
 * and log lines as the Kaldi programs, whichever backend runs them.
 *
 * Conventions
 * - Every function that can fail returns a kga_status; KGA_OK is 0. After
 *   a failure kga_last_error() gives the message of the ERROR line Kaldi
 *   would have printed (e.g. "Could not open ..." naming the file or key),
 *   for the calling thread.
 * - Handles are opaque, made by kga_X_new() and released by kga_X_free()
 *   (NULL accepted). One call at a time per handle (a second one, e.g. from
 *   a callback of the first, fails with KGA_EINVAL); different handles may
 *   work on different threads at once. Archive calls (kga_*_archive) run
 *   one at a time per process: a second one waits (one made from a
 *   callback of another fails with KGA_EINVAL).
 * - Options structs are filled with defaults by kga_X_opts_init() before
 *   the caller changes fields; strings in them are borrowed for the call.
 * - Nothing is printed unless the caller asks: log lines go to the log
 *   callback of the handle's options (kga_log_stderr prints them as Kaldi
 *   does). Nothing touches CUDA when the library is loaded: an aligner
 *   starts creating its GPU context when it is made (use_gpu other than
 *   no), the accumulator at its first call (so a process may load the
 *   library and fork, and make its handles in the children).
 * - rspecifiers and wspecifiers are Kaldi's ("ark:f.ark", "scp:f.scp",
 *   "ark:gunzip -c f.gz|", "ark,s,cs:...", "ark:-"); the recipes' feature
 *   pipes ("ark:apply-cmvn ... | add-deltas ... |") are computed in-process.
 */
#ifndef KALDI_GPU_ALIGN_H
#define KALDI_GPU_ALIGN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define KGA_EXTERN __attribute__((visibility("default")))
#else
#define KGA_EXTERN
#endif

#define KGA_VERSION_MAJOR 1
#define KGA_VERSION_MINOR 0
#define KGA_VERSION_PATCH 0
/* "MAJOR.MINOR.PATCH (Kaldi VERSION)": the Kaldi build whose behaviour the
 * library reproduces. */
KGA_EXTERN const char *kga_version(void);

/* ---------------- status, errors, log lines ---------------- */

typedef enum {
  KGA_OK = 0,
  KGA_ERROR = -1,     /* a fatal error of Kaldi's (the program would exit 255) */
  KGA_EINVAL = -2,    /* an invalid argument or option value */
  KGA_ENOMEM = -3,    /* out of memory */
  KGA_ECANCELED = -4  /* a callback asked to stop */
} kga_status;
KGA_EXTERN const char *kga_status_string(int status);

/* The message of the failure of this thread's last failed call (the first
 * ERROR line's message, e.g. "No such file models/x.mdl"), "" if none. */
KGA_EXTERN const char *kga_last_error(void);

/* Log levels: > 0 is VLOG[n]. */
enum { KGA_LOG_INFO = 0, KGA_LOG_WARNING = -1, KGA_LOG_ERROR = -2, KGA_LOG_ASSERT = -3 };

typedef struct {
  int level;
  const char *program;  /* the program name the line carries ("" if none) */
  const char *func, *file;
  int line;
  const char *msg;      /* the message alone */
  const char *text;     /* the whole line as Kaldi prints it:
                           "LOG (program[version]:func():file:line) msg" */
} kga_log_line;
typedef void (*kga_log_fn)(void *user, const kga_log_line *line);

/* A kga_log_fn that prints the line to stderr exactly as Kaldi does (the
 * stack-trace block after ERROR lines included). */
KGA_EXTERN void kga_log_stderr(void *user, const kga_log_line *line);
/* Kaldi's --verbose (VLOG lines up to this level; process-wide, default 0). */
KGA_EXTERN void kga_set_verbose(int level);
/* The program name in log lines ("" by default; process-wide). */
KGA_EXTERN void kga_set_program_name(const char *name);

/* Progress, called on the calling thread after each batch: counts so far
 * (utterances done, with errors, their frames). Nonzero return: stop (the
 * call returns KGA_ECANCELED). */
typedef int (*kga_progress_fn)(void *user, int64_t done, int64_t errors, int64_t frames);

/* ---------------- devices ---------------- */

typedef enum {
  KGA_GPU_NO = 0,       /* CPU only */
  KGA_GPU_YES = 1,      /* a GPU or KGA_ERROR */
  KGA_GPU_OPTIONAL = 2, /* a GPU when one is usable, else the CPU (default) */
  KGA_GPU_WAIT = 3      /* as yes, waiting for a busy exclusive-mode GPU */
} kga_use_gpu;
/* "no", "yes", "optional", "wait" (Kaldi's --use-gpu values). */
KGA_EXTERN int kga_parse_use_gpu(const char *s, kga_use_gpu *out);

/* The cuBLAS the GPU path loads when it first needs one (only models with
 * many Gaussians per pdf do), given before that: a path to libcublas.so.N,
 * or the folder that holds it (its libcublasLt from the same folder is
 * loaded first). A cuBLAS of the same major version already loaded in the
 * process is always used instead; without either, $KALDI_GPU_CUBLAS, else
 * the toolkit's by soname. See docs/python.md (a process that also loads
 * PyTorch). Nothing is loaded here. */
KGA_EXTERN int kga_set_cublas_library(const char *path);

/* ---------------- graphs and results of in-memory calls ---------------- */

/* A decoding graph (training graph): an FST over transition-ids (input)
 * and words (output), tropical weights. Immutable once made. */
typedef struct kga_graph kga_graph;
/* From OpenFst's binary form of a VectorFst or ConstFst over StdArc (the
 * bytes of one entry of a Kaldi FST archive; pywrapfst's
 * Fst.write_to_string(), kalpy's VectorFst.write_to_string()) or Kaldi's
 * text form. */
KGA_EXTERN int kga_graph_from_openfst(kga_graph **g, const void *bytes, size_t len);
/* From CSR arrays: arcs of state s are arcs arc_start[s] .. arc_start[s+1]-1
 * (arc_start has num_states + 1 entries); final[s] is the final weight
 * (+INFINITY: not final); start -1: none. Copied. */
KGA_EXTERN int kga_graph_from_arrays(kga_graph **g, int32_t num_states, int32_t start,
                                     const float *final, const int32_t *arc_start,
                                     const int32_t *ilabel, const int32_t *olabel,
                                     const float *weight, const int32_t *nextstate);
KGA_EXTERN int32_t kga_graph_num_states(const kga_graph *g);
KGA_EXTERN int32_t kga_graph_num_arcs(const kga_graph *g);
KGA_EXTERN void kga_graph_free(kga_graph *g);

/* What happened to one utterance that reached the decoder. */
typedef enum {
  KGA_UTT_ALIGNED = 0,      /* aligned (written by gmm-align-compiled) */
  KGA_UTT_FAILED = 1,       /* "Did not successfully decode file KEY" */
  KGA_UTT_EMPTY_GRAPH = 2,  /* "Empty decoding graph for KEY" */
  KGA_UTT_NO_FRAMES = 3     /* zero-length features (batch calls) */
} kga_utt_status;

/* Extra outputs (flags of kga_archive_opts and kga_align_batch). */
enum {
  KGA_WANT_PER_FRAME = 1,  /* per-frame acoustic log-likelihoods (kalpy's
                              per_frame_likelihoods, Kaldi's
                              --write-per-frame-acoustic-loglikes) */
  KGA_WANT_WORDS = 2       /* output labels along the best path (kalpy's
                              Alignment.words) */
};

typedef struct {
  const char *key;
  int status;              /* kga_utt_status */
  int retried;             /* 1 if the retry beam was used */
  int32_t num_frames;      /* feature rows */
  const int32_t *ali;      /* num_frames transition-ids (ALIGNED), else NULL */
  float like;              /* -(graph + acoustic cost) / acoustic_scale */
  float score;             /* -(graph + acoustic cost): the scores table */
  const float *per_frame;  /* num_frames values (KGA_WANT_PER_FRAME), else NULL */
  const int32_t *words;    /* num_words labels (KGA_WANT_WORDS; NULL if none) */
  int32_t num_words;
} kga_align_result;

/* ---------------- the aligner ---------------- */

typedef struct {
  /* decoding: gmm-align-compiled's options and defaults */
  float beam;              /* 200 */
  float retry_beam;        /* 0: no retry */
  float transition_scale;  /* 1.0 */
  float acoustic_scale;    /* 1.0 */
  float self_loop_scale;   /* 1.0 */
  int careful;             /* 0 */
  /* backend */
  kga_use_gpu use_gpu;     /* KGA_GPU_OPTIONAL */
  int num_gpus;            /* 1: GPU service connections a batch is split over */
  int batch_size;          /* 8192: utterances per batch at most */
  /* log lines of this handle's calls (NULL: none are printed) */
  kga_log_fn log;
  void *log_user;
} kga_aligner_opts;
KGA_EXTERN void kga_aligner_opts_init(kga_aligner_opts *o);

typedef struct kga_aligner kga_aligner;
/* Reads the model (an rxfilename: a .mdl file, binary or text). With
 * use_gpu other than no the CUDA context starts being created in the
 * background; the backend is chosen at the first call that aligns (one
 * log line says which). */
KGA_EXTERN int kga_aligner_new(kga_aligner **al, const char *model_rxfilename,
                               const kga_aligner_opts *o);
KGA_EXTERN void kga_aligner_free(kga_aligner *al);
/* 1 once the backend is a GPU (own context or the GPU service), else 0. */
KGA_EXTERN int kga_aligner_is_gpu(const kga_aligner *al);
/* The model's feature dimension, number of pdfs and transition-ids. */
KGA_EXTERN int32_t kga_aligner_dim(const kga_aligner *al);
KGA_EXTERN int32_t kga_aligner_num_pdfs(const kga_aligner *al);
KGA_EXTERN int32_t kga_aligner_num_transition_ids(const kga_aligner *al);

/* Scales the weights of the GMMs of the silence phones by factor and
 * recomputes their gconsts (kalpy's GmmAligner.boost_silence: pdfs of
 * these phones; only_silence: not those shared with other phones).
 * phones: sorted, unique. Later calls align with the changed model. */
KGA_EXTERN int kga_aligner_boost_silence(kga_aligner *al, const int32_t *phones, int n,
                                         float factor, int only_silence);

/* Archive calls: inputs, outputs, order. */
enum {
  KGA_ORDER_GRAPHS = 0,    /* gmm-align-compiled's: graphs in order, features
                              by key */
  KGA_ORDER_FEATURES = 1   /* kalpy's align_utterances: features in order,
                              graphs by key; zero-length features and keys
                              without a graph skipped with a warning */
};
typedef struct {
  /* Kaldi's outputs, written as gmm-align-compiled writes them (NULL or "":
   * not written) */
  const char *alignments_wspecifier;
  const char *scores_wspecifier;
  const char *per_frame_wspecifier;
  /* margin mode (gmm-align-compiled --prior-alignments, --margin): 0: off */
  const char *prior_alignments_rspecifier;
  int32_t margin;
  int margin_from_output;  /* 1: the priors are the file alignments_wspecifier
                              replaces ("ark:|gzip -c >FILE", KALDI_GPU_MARGIN) */
  int order;               /* KGA_ORDER_GRAPHS */
  unsigned flags;          /* KGA_WANT_* for the result callback */
  int device_features;     /* 1: with KALDI_GPU_FEATS_GPU=1, a recognised
                              feature pipe runs on the GPU (own context) */
  /* each utterance that reached the decoder, in input order, on the
   * calling thread; the result is valid during the call; nonzero: stop */
  int (*result)(void *user, const kga_align_result *r);
  /* the same, a batch at a time (n results in input order, after the
   * batch's lines and writes; fewer calls for a binding) */
  int (*results)(void *user, int n, const kga_align_result *r);
  kga_progress_fn progress;
  void *user;
} kga_archive_opts;
KGA_EXTERN void kga_archive_opts_init(kga_archive_opts *o);

/* Kaldi's counters of a call (gmm-align-compiled's closing lines). */
typedef struct {
  int64_t done, errors, retried;
  int64_t frames;          /* of the aligned utterances */
  double total_like;       /* sum of their likelihoods */
} kga_align_counts;

/* gmm-align-compiled: aligns every graph of graphs_rspecifier against its
 * features, with Kaldi's log lines (and closing lines), writing Kaldi's
 * outputs and calling o->result in input order. counts may be NULL. On a
 * failure (KGA_ERROR, KGA_ECANCELED) the outputs are abandoned as Kaldi
 * leaves them (files removed, output pipes killed). */
KGA_EXTERN int kga_align_archive(kga_aligner *al, const char *graphs_rspecifier,
                                 const char *feats_rspecifier, const kga_archive_opts *o,
                                 kga_align_counts *counts);

/* One utterance of an in-memory call: row-major float32 features. */
typedef struct {
  const char *key;         /* for messages (NULL: "utterance N") */
  const kga_graph *graph;
  const float *feats;      /* rows x cols */
  int32_t rows, cols;
} kga_utt;
/* Aligns n utterances at once (any speakers; batches of the aligner's
 * batch_size). out[i] receives utterance i's result; its arrays are owned
 * by the library until kga_align_results_free(out, n). Per-utterance
 * failures are statuses; KGA_ERROR for Kaldi's fatal errors (e.g. a
 * feature dimension that is not the model's). */
KGA_EXTERN int kga_align_batch(kga_aligner *al, int n, const kga_utt *utts, unsigned flags,
                               kga_align_result *out);
KGA_EXTERN void kga_align_results_free(kga_align_result *r, int n);

/* ---------------- the accumulator ---------------- */

typedef struct {
  kga_use_gpu use_gpu;     /* KGA_GPU_OPTIONAL */
  kga_log_fn log;
  void *log_user;
} kga_acc_opts;
KGA_EXTERN void kga_acc_opts_init(kga_acc_opts *o);

typedef struct kga_acc kga_acc;
/* Reads the model; statistics start at zero and add up over the calls. */
KGA_EXTERN int kga_acc_new(kga_acc **acc, const char *model_rxfilename, const kga_acc_opts *o);
KGA_EXTERN void kga_acc_free(kga_acc *acc);
KGA_EXTERN int kga_acc_is_gpu(const kga_acc *acc);

typedef struct {
  int64_t done, errors;
  int64_t frames;
  double total_like;       /* Gaussian log-likelihood of those frames */
} kga_acc_counts;

/* gmm-acc-stats-ali's loop: features in order, alignments by key; its log
 * lines ("Done N files, M with errors.", "Overall avg like per frame ...").
 * counts (of this call) may be NULL. */
KGA_EXTERN int kga_acc_archive(kga_acc *acc, const char *feats_rspecifier,
                               const char *ali_rspecifier, kga_progress_fn progress,
                               void *user, kga_acc_counts *counts);

/* One utterance in memory: features rows x cols and rows transition-ids. */
typedef struct {
  const char *key;
  const float *feats;
  int32_t rows, cols;
  const int32_t *ali;
  int32_t ali_len;         /* != rows: skipped ("Alignments has wrong size") */
} kga_acc_utt;
/* Accumulates n utterances; likes[i] (may be NULL) receives each one's
 * log-likelihood (0 for a skipped one). */
KGA_EXTERN int kga_acc_batch(kga_acc *acc, int n, const kga_acc_utt *utts, float *likes);

/* Counts over every call since creation or kga_acc_reset. */
KGA_EXTERN void kga_acc_get_counts(const kga_acc *acc, kga_acc_counts *c);
/* Writes the statistics as gmm-acc-stats-ali writes its <stats-out>
 * (a wxfilename), then its "Written accs." line. */
KGA_EXTERN int kga_acc_write(kga_acc *acc, const char *wxfilename, int binary);
/* The same bytes in memory (malloc'ed; release with kga_free). */
KGA_EXTERN int kga_acc_write_mem(kga_acc *acc, int binary, void **bytes, size_t *len);
/* Statistics and counts back to zero. */
KGA_EXTERN int kga_acc_reset(kga_acc *acc);

/* ---------------- the fused pass (gmm-align-acc-compiled) ---------------- */

typedef struct kga_fused kga_fused;
/* One model, aligned and accumulated in one pass; the statistics follow the
 * aligner's backend. */
KGA_EXTERN int kga_fused_new(kga_fused **f, const char *model_rxfilename,
                             const kga_aligner_opts *o);
KGA_EXTERN void kga_fused_free(kga_fused *f);
/* gmm-align-compiled's run whose aligned utterances are accumulated as
 * gmm-acc-stats-ali would accumulate them from its alignments (the same
 * bytes when the features list the utterances in the graphs' order), with
 * gmm-align-acc-compiled's log lines. o->order must be KGA_ORDER_GRAPHS. */
KGA_EXTERN int kga_fused_archive(kga_fused *f, const char *graphs_rspecifier,
                                 const char *feats_rspecifier, const kga_archive_opts *o,
                                 kga_align_counts *counts);
KGA_EXTERN void kga_fused_get_counts(const kga_fused *f, kga_acc_counts *c);
KGA_EXTERN int kga_fused_write(kga_fused *f, const char *wxfilename, int binary);
KGA_EXTERN int kga_fused_write_mem(kga_fused *f, int binary, void **bytes, size_t *len);

/* ---------------- reading tables ---------------- */

/* Reads a table of float matrices (features: archives, scp, the recipes'
 * feature pipes in-process) in order: fn(user, key, rows x cols row-major
 * floats valid during the call) per entry; nonzero from fn stops
 * (KGA_ECANCELED). log: where the reading's lines go (NULL: nowhere). */
typedef int (*kga_matrix_fn)(void *user, const char *key, const float *data, int32_t rows,
                             int32_t cols);
KGA_EXTERN int kga_read_matrices(const char *rspecifier, kga_matrix_fn fn, void *user,
                                 kga_log_fn log, void *log_user);
/* The same for int32 vectors (alignments, transcripts). */
typedef int (*kga_int32_vector_fn)(void *user, const char *key, const int32_t *v, int32_t n);
KGA_EXTERN int kga_read_int32_vectors(const char *rspecifier, kga_int32_vector_fn fn,
                                      void *user, kga_log_fn log, void *log_user);

/* ---------------- memory, layouts ---------------- */

/* Releases memory the library returned (kga_*_write_mem). */
KGA_EXTERN void kga_free(void *p);
/* sizeof of a public struct by name ("kga_aligner_opts", ...), 0 if
 * unknown: for bindings that mirror the layouts (ctypes). */
KGA_EXTERN size_t kga_sizeof(const char *type_name);

#ifdef __cplusplus
}
#endif
#endif
