/* Kaldi acoustic models: HmmTopology, TransitionModel, DiagGmm/AmDiagGmm,
 * .mdl files, ContextDependency trees (reference section 3).
 * Owner of every array: the struct; *_free releases and zeroes. */
#ifndef KIO_MODEL_H
#define KIO_MODEL_H

#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- HmmTopology ---- */
typedef struct { int32_t dest; float prob; } kio_topo_trans;
typedef struct {
  int32_t forward_pdf_class;   /* -1: non-emitting (final) state */
  int32_t self_loop_pdf_class;
  int32_t num_trans;
  kio_topo_trans *trans;
} kio_topo_state;
typedef struct { int32_t num_states; kio_topo_state *states; } kio_topo_entry;
typedef struct {
  int32_t num_phones;   int32_t *phones;     /* sorted */
  int32_t num_phone2idx; int32_t *phone2idx; /* -1 = none */
  int32_t num_entries;  kio_topo_entry *entries;
} kio_topology;

/* ---- TransitionModel ---- */
typedef struct { int32_t phone, hmm_state, forward_pdf, self_loop_pdf; } kio_tuple;
typedef struct {
  kio_topology topo;
  int32_t num_tuples;   kio_tuple *tuples;  /* transition-state ts = index+1 */
  int tuples_are_triples;                   /* file used <Triples> */
  int32_t num_tids;     /* NumTransitionIds */
  float *log_probs;     /* num_tids + 1, [0] unused */
  /* derived after reading */
  int32_t num_pdfs;     /* 1 + max pdf */
  int32_t *first_tid;   /* num_tuples + 2, indexed by ts */
  int32_t *tid2ts;      /* num_tids + 1 */
  int32_t *tid2pdf;     /* num_tids + 1; [0] = 0 */
  uint8_t *tid_is_self_loop; /* num_tids + 1 */
  float *nonloop_log_prob;   /* num_tuples + 1, indexed by ts */
} kio_tmodel;

/* ---- DiagGmm / AmDiagGmm ---- */
typedef struct {
  int32_t num_comp, dim;
  float *gconsts;        /* num_comp, recomputed on read as Kaldi does */
  float *weights;        /* num_comp */
  float *means_invvars;  /* num_comp * dim, row-major */
  float *inv_vars;       /* num_comp * dim */
} kio_diag_gmm;
typedef struct { int32_t dim, num_pdfs; kio_diag_gmm *pdfs; } kio_am_gmm;

/* Object bodies (after the "\0B" header if any). */
int kio_topology_read(FILE *f, int binary, kio_topology *t);
int kio_topology_write(FILE *f, int binary, const kio_topology *t);
int kio_tmodel_read(FILE *f, int binary, kio_tmodel *tm);
int kio_tmodel_write(FILE *f, int binary, const kio_tmodel *tm);
/* After log_probs changed (an update): the derived non-self-loop log-probs
 * again, as Kaldi's ComputeDerivedOfProbs. */
int kio_tmodel_update_derived(kio_tmodel *tm);
int kio_diag_gmm_read(FILE *f, int binary, kio_diag_gmm *g);
int kio_diag_gmm_write(FILE *f, int binary, const kio_diag_gmm *g);
int kio_am_gmm_read(FILE *f, int binary, kio_am_gmm *am);
int kio_am_gmm_write(FILE *f, int binary, const kio_am_gmm *am);
/* Recomputes gconsts with Kaldi's exact float/double mix (3.4). */
int kio_diag_gmm_compute_gconsts(kio_diag_gmm *g);

/* Whole .mdl from an rxfilename (TransitionModel then AmDiagGmm). Logs ERROR
 * naming the file on failure. am may be NULL (align-equal reads only tm). */
int kio_model_read(const char *rxfilename, kio_tmodel *tm, kio_am_gmm *am);
int kio_model_write(const char *wxfilename, int binary,
                    const kio_tmodel *tm, const kio_am_gmm *am);

/* The model as Kaldi binary bytes (what kio_model_write writes, without the
 * header) in a malloc'ed buffer, and back (the GPU service receives models
 * this way). Log ERROR and return KIO_ERR on failure. */
int kio_model_to_bytes(const kio_tmodel *tm, const kio_am_gmm *am, char **buf, size_t *len);
int kio_model_from_bytes(const void *buf, size_t len, kio_tmodel *tm, kio_am_gmm *am);

void kio_topology_free(kio_topology *t);
void kio_tmodel_free(kio_tmodel *tm);
void kio_diag_gmm_free(kio_diag_gmm *g);
void kio_am_gmm_free(kio_am_gmm *am);

/* Transition-model queries (no bounds checks on hot paths; tid in 1..num_tids). */
static inline int32_t kio_tid_to_pdf(const kio_tmodel *tm, int32_t tid) { return tm->tid2pdf[tid]; }
static inline int kio_tid_is_self_loop(const kio_tmodel *tm, int32_t tid) { return tm->tid_is_self_loop[tid]; }
static inline int32_t kio_tid_to_ts(const kio_tmodel *tm, int32_t tid) { return tm->tid2ts[tid]; }
int32_t kio_tid_to_phone(const kio_tmodel *tm, int32_t tid);
/* TransitionModel::IsFinal: the transition enters the topology's final state. */
int kio_tid_is_final(const kio_tmodel *tm, int32_t tid);
/* TransitionIdToPdfClass: the self-loop's or the forward pdf-class. */
int32_t kio_tid_to_pdf_class(const kio_tmodel *tm, int32_t tid);
/* SplitToPhones (hmm-utils.cc) on tids that are all valid (1..num_tids):
 * each phone instance's end (one past) in ends[] (room for n), their count;
 * *ok (if not NULL): Kaldi's return value, 0 where the alignment does not
 * start or end at a phone's boundary. */
int32_t kio_split_to_phones(const kio_tmodel *tm, const int32_t *a, int32_t n, int32_t *ends,
                            int *ok);
/* Tid of the self-loop of transition-state ts, or 0. */
int32_t kio_ts_self_loop(const kio_tmodel *tm, int32_t ts);
/* Kaldi's GetPdfsForPhones (phones sorted and unique): the pdfs of the
 * phones' transition-states, sorted and unique, into pdfs (room for
 * 2 * num_tuples); returns their count, *shared = 1 when a phone not listed
 * uses one of them too (Kaldi's function then returns false). */
int32_t kio_tmodel_pdfs_for_phones(const kio_tmodel *tm, const int32_t *phones,
                                   int32_t nphones, int32_t *pdfs, int *shared);

/* ---- ContextDependency (tree) ---- */
typedef enum { KIO_EM_NULL = 0, KIO_EM_CONST, KIO_EM_TABLE, KIO_EM_SPLIT } kio_em_kind;
typedef struct kio_event_map {
  kio_em_kind kind;
  int32_t key;                     /* TABLE, SPLIT */
  int32_t answer;                  /* CONST */
  uint32_t table_size;             /* TABLE */
  struct kio_event_map **table;    /* TABLE children (entries may be NULL) */
  int32_t set_size; int32_t *set;  /* SPLIT: sorted values */
  struct kio_event_map *yes, *no;  /* SPLIT */
} kio_event_map;
typedef struct { int32_t context_width, central_position; kio_event_map *to_pdf; } kio_ctx_dep;

int kio_ctx_dep_read(const char *rxfilename, kio_ctx_dep *cd);
void kio_ctx_dep_free(kio_ctx_dep *cd);
/* phones[0..context_width-1] (0 = none); returns 1 and sets *pdf on success. */
int kio_ctx_dep_compute(const kio_ctx_dep *cd, const int32_t *phones,
                        int32_t pdf_class, int32_t *pdf);

#ifdef __cplusplus
}
#endif
#endif
