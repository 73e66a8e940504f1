/* Internal to gpu-align (and the GPU service): alignment batches through the
 * per-user GPU service (device/svc-link.h). Both ends of the wire format live
 * in align-remote.c: the job's side (a backend of galign_aligner) and the
 * service's side (decode a batch, align it on the service's own aligner,
 * encode the results with the log lines the aligner printed). The service
 * runs exactly the code a local GPU run runs, so results are the same
 * whichever path ran. */
#ifndef GALIGN_ALIGN_REMOTE_H
#define GALIGN_ALIGN_REMOTE_H

#include <pthread.h>
#include <stddef.h>
#include "device/svc-link.h"
#include "gpu-align.h"

/* The wire format (align-remote.c's job side, align-serve.c's service side):
 *   HELLO:   u32 protocol, u32 kind (align), f32 the job's timeout, options,
 *            array model bytes
 *   FUSE:    (empty) the service also accumulates what it aligns on this
 *            connection (gpu-acc/acc-remote.c); answered by READY
 *   ALIGN:   u32 n, u32 want_per_frame, u32 flags (KIO_SVC_ALIGN_*), u32 seq,
 *            u32 region (of the job's shared memory, KIO_SVC_ALIGN_SHM; its
 *            memfd comes with the request that first uses it), then per
 *            utterance
 *            i32 num_states, num_arcs, start, num_pdfs_used, rows, cols,
 *            arrays arc_start, arcs, final, pdfs_used, arc_pdf, features,
 *            i32 band_T (margin band, 0: none), arrays topo_pos, band_lo, band_hi
 *            (empty without a band); with KIO_SVC_ALIGN_SHM each array is
 *            a u64 offset into the region instead (8-byte aligned, the
 *            array, of the length its counts give, wholly inside: else the
 *            request is malformed), packed by align-pack.c
 *   ALIGNED: i32 status, log lines, then (status KIO_OK) per utterance
 *            i32 ok, retried, band_failed, num_frames, f32 like, score,
 *            arrays ali, per_frame; on a fused connection then the
 *            accumulation part (acc-remote.c), handed to the link as is
 * Arrays are sent from where they are (no copy) and used in place. A batch
 * the service could not align (status not KIO_OK: its device failed, ...)
 * is the job's to align, as when the service is lost: its own backend gives
 * the same results, or the same fatal error. A batch goes in requests of
 * about KALDI_GPU_DEV_SERVICE_REQUEST_KB (never over KIO_SVC_MAX_REQUEST),
 * up to KALDI_GPU_DEV_SERVICE_INFLIGHT of them unanswered per connection:
 * the service answers them in order (protocol 4), and while it aligns one
 * the job fills and sends the next and reads the previous reply. */

#ifdef __cplusplus
extern "C" {
#endif

/* galign_remote_align: the link failed; nothing was logged and results are
 * unspecified: the caller aligns the batch on another backend. */
enum { GALIGN_REMOTE_LOST = 1 };

typedef struct galign_remote galign_remote;

/* Connects to the service (starting it if needed), hands it the model and
 * options, and waits until it is ready. On failure returns KIO_ERR without
 * logging and says why in why. */
int galign_remote_new(galign_remote **r, const kio_tmodel *tm, const kio_am_gmm *am,
                      const galign_opts *o, char *why, size_t why_len);
void galign_remote_free(galign_remote *r);
/* The service's device ("NVIDIA H200, 132 SMs, 139.8 GiB"). */
const char *galign_remote_desc(const galign_remote *r);
/* Why the last call returned GALIGN_REMOTE_LOST. */
const char *galign_remote_error(const galign_remote *r);

/* As galign_align_batch: KIO_OK, or GALIGN_REMOTE_LOST (the service is
 * gone, did not answer in time, or could not align the batch): the caller
 * aligns the batch on its own backend, which gives the same results or the
 * same fatal error. */
int galign_remote_align(galign_remote *r, int n, const galign_graph *const *graphs,
                        const kio_matrix *const *feats, int want_per_frame,
                        galign_result *results);

/* Sends the next batch now, while the current one is being aligned on
 * another thread, so that the service goes from one batch to the next
 * without waiting for the job: only with one connection, a
 * galign_remote_align in progress whose requests are all out, as the
 * window of requests in flight allows; else nothing (the next call sends
 * it). Once sent, the next galign_remote_align must be for the same lists
 * (else it returns GALIGN_REMOTE_LOST); their arrays must stay valid until
 * then. A failure is told by that call. */
/* Another batch follows those given so far: the shared-memory region its
 * requests will take is made and faulted in now, on a thread of its own
 * (galign_shm_warm), unless it exists. */
void galign_remote_expect_more(galign_remote *r);
void galign_remote_send_ahead(galign_remote *r, int n, const galign_graph *const *graphs,
                              const kio_matrix *const *feats, int want_per_frame);

/* ---- the one pass through the service (gpu-acc/acc-remote.c) ----
 * The job's accumulator asks the service to accumulate, from the features
 * it already holds, every batch it aligns on the connection (FUSE); what the
 * service says about those statistics comes back at the end of each
 * ALIGNED reply. The aligner's thread hands each reply's end over to the
 * accumulator as a record, through a link both hold. */
typedef struct galign_acc_rec {
  struct galign_acc_rec *next;
  uint32_t seq;              /* the request (0: not accumulated) */
  int n;                     /* utterances the service accumulates: the aligned ones */
  const kio_matrix **feats;  /* their matrices, in order (their identity only) */
  uint8_t *tail;             /* the reply's accumulation part (acc-remote.c reads it) */
  size_t tail_len;
} galign_acc_rec;
typedef struct galign_acc_link {
  pthread_mutex_t mu;
  int refs;
  int on;                    /* 0: the accumulator gave the service up */
  int want_stats;            /* the next batch's first request asks for the statistics */
  uint32_t seq;              /* the last accumulating request sent */
  galign_acc_rec *head, *last;
} galign_acc_link;
/* A link with one reference (the caller's); put drops one. */
galign_acc_link *galign_acc_link_new(void);
void galign_acc_link_put(galign_acc_link *l);
/* The oldest record (NULL: none), the caller's to free. */
galign_acc_rec *galign_acc_link_pop(galign_acc_link *l);
void galign_acc_rec_free(galign_acc_rec *r);
/* The aligner's link to the service (NULL: not on it, or lost). */
galign_remote *galign_aligner_remote(const galign_aligner *a);
int galign_remote_nconn(const galign_remote *r);
kio_svc *galign_remote_svc(galign_remote *r);
/* FUSE: the service accumulates this connection's batches from now on,
 * the records go to l (which the connection references). Only while no
 * batch is being aligned, on a single connection. KIO_ERR with why. */
int galign_remote_fuse(galign_remote *r, galign_acc_link *l, char *why, size_t why_len);

/* ---- the service's side ---- */

/* Pdfs of the aligner's model (aligner.c). */
int32_t galign_aligner_num_pdfs(const galign_aligner *a);

/* The HELLO of an alignment connection: options and the model's bytes
 * (pointing into the payload). KIO_ERR if malformed. */
int galign_serve_hello(kio_msg_reader *req, galign_opts *o, const void **model,
                       size_t *model_len);
/* Per-connection scratch of the service (decoded batch, results). */
typedef struct galign_serve galign_serve;
galign_serve *galign_serve_new(void);
/* Another scratch of the same connection, sharing other's view of the
 * job's shared memory (two alternate: one request's accumulation reads its
 * scratch while the next request is aligned in the other). */
galign_serve *galign_serve_new_sharing(galign_serve *other);
void galign_serve_free(galign_serve *s);
/* Decodes an ALIGN request, aligns it with a (on the calling thread, its
 * log lines captured), encodes the ALIGNED reply into reply (which refers
 * to s's results until the next call); *batch_rc: the batch's status.
 * KIO_ERR only for a malformed request (then the connection should be
 * dropped). */
int galign_serve_align(galign_serve *s, galign_aligner *a, kio_msg_reader *req,
                       kio_msg *reply, int *batch_rc);
/* galign_serve_align in two steps, so that the batch's device memory can
 * be asked for between them: the request decoded and checked (KIO_ERR:
 * malformed), what aligning it plans to take of the device
 * (galign_aligner_batch_need), then the alignment and the reply. */
int galign_serve_parse(galign_serve *s, const galign_aligner *a, kio_msg_reader *req);
size_t galign_serve_need(const galign_serve *s, const galign_aligner *a);
void galign_serve_run(galign_serve *s, galign_aligner *a, kio_msg *reply, int *batch_rc);
/* A descriptor that came with the next request (kio_svc_take_fd; < 0:
 * none): the job's shared memory for its region. */
void galign_serve_give_fd(galign_serve *s, int fd);
/* The last request: its flags (KIO_SVC_ALIGN_*) and sequence number, its
 * utterances' features (in the payload) and results. */
uint32_t galign_serve_flags(const galign_serve *s, uint32_t *seq);
int galign_serve_count(const galign_serve *s);
const kio_matrix *galign_serve_feats(const galign_serve *s, int i);
const galign_result *galign_serve_result(const galign_serve *s, int i);

#ifdef __cplusplus
}
#endif
#endif
