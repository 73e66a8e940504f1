/* The link between a program and the per-user GPU service (issue 12): where
 * the service lives, connecting to it (starting it on first use), framed
 * messages over its Unix socket, and the encoding helpers both ends use.
 *
 * Why a service: a CUDA context costs a process 0.3-0.5 s to create and tear
 * down, and 16 processes started together serialise in the driver (2-3.6 s
 * each, measured on an H200: docs/benchmarks.md). Recipes start nj short jobs
 * every iteration, so the GPU state must outlive a job. The service
 * (gpu-service/, program kaldi-gpu-service) keeps the context and the models;
 * jobs read and parse their inputs themselves and hand it batches.
 *
 * Place and safety: a directory private to the user, $KALDI_GPU_SERVICE_DIR or
 * $XDG_RUNTIME_DIR/kaldi-gpu or /tmp/kaldi-gpu-UID, created 0700 and refused
 * unless it is a real directory owned by the user with no group/other bits.
 * One socket per service identity: the host, the service binary (path,
 * inode, mtime), the physical GPUs the job sees (their UUIDs, so that two
 * jobs that both see "device 0" of different cards never share a service),
 * the device switches (CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER,
 * KALDI_GPU_DEVICE) and the rounding profile (base/matrix/blas-profile.h:
 * the jobs' Kaldi's, or KALDI_GPU_BLAS_PROFILE). Every
 * file of the directory names the host, so that hosts sharing it (a shared
 * file system) never touch each other's. The service also checks the
 * peer's uid (SO_PEERCRED). A socket nobody answers on is stale: it is
 * removed and a new service started (svc-start.c).
 *
 * No wait on the service is unbounded: a job gives up on a service that
 * shows no sign of life for KALDI_GPU_SERVICE_TIMEOUT seconds (30); the
 * service sends a heartbeat (BUSY) every second while it works for the job,
 * so a long batch on a busy device is not taken for a hang.
 *
 * Switches: KALDI_GPU_SERVICE=no (or 0) disables it; KALDI_GPU_SERVICE_BIN
 * names the binary (default: kaldi-gpu-service beside the running program);
 * KALDI_GPU_SERVICE_IDLE: seconds the service stays up without clients (60). */
#ifndef KIO_SVC_LINK_H
#define KIO_SVC_LINK_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 3: ALIGN requests carry accumulation flags (FUSE). 4: a job keeps several
 * requests in flight on a connection (KIO_SVC_MAX_INFLIGHT; the service
 * reads ahead and answers in order), shared memory in KIO_SVC_REGIONS
 * regions. 5: ACC requests carry flags, their features in shared memory
 * (KIO_SVC_ACC_SHM). 6: an ALIGN request's graphs go through the shared
 * memory with its features. 7: a job keeps two ACC requests in flight, their
 * features in two regions taken in turn (the request names its region).
 * A job and a service of other protocols refuse each other at HELLO (the
 * job then works alone). */
enum { KIO_SVC_PROTOCOL = 7 };
/* Requests a job may have sent and not yet had answered on one connection;
 * the service reads that many ahead, so a job's send never waits for a
 * reply it has not read (no deadlock with both ends writing). */
enum { KIO_SVC_MAX_INFLIGHT = 3 };
/* The job's shared-memory regions of a connection, used in turn: request k
 * writes region k mod REGIONS, which the service is done with (alignment
 * and accumulation) once it has answered request k - REGIONS + 1. */
enum { KIO_SVC_REGIONS = KIO_SVC_MAX_INFLIGHT + 1 };

/* Message types. Requests from a job, replies from the service. */
enum {
  KIO_SVC_HELLO = 1,      /* job: protocol, kind, options, model bytes */
  KIO_SVC_READY = 2,      /* service: status, device description or lines */
  KIO_SVC_ALIGN = 3,      /* job: a batch to align */
  KIO_SVC_ALIGNED = 4,    /* service: its results */
  KIO_SVC_ACC = 5,        /* job: a batch to accumulate */
  KIO_SVC_ACCUMULATED = 6,/* service: per-utterance results */
  KIO_SVC_STATS = 7,      /* job: send the statistics */
  KIO_SVC_STATS_ARE = 8,  /* service: the statistics */
  KIO_SVC_BUSY = 9,       /* service: still working for you (empty; never
                             returned by kio_svc_recv) */
  KIO_SVC_FUSE = 10       /* job, on an alignment connection: also accumulate
                             the batches it aligns (answered by READY) */
};
/* Flags of an ALIGN request on a fused connection. */
enum { KIO_SVC_ALIGN_ACC = 1, KIO_SVC_ALIGN_STATS = 2, KIO_SVC_ALIGN_SHM = 4 };
/* Flags of an ACC request: the features are in the job's shared memory
 * (gpu-acc/acc-remote.h: two regions a connection, taken in turn; a region
 * is read before the reply of the request that named it). */
enum { KIO_SVC_ACC_SHM = 1 };
/* A reply's status: anything but KIO_OK means the service could not do the
 * work (its device failed, it ran out of memory, ...): the job does it
 * itself, which gives the same result or the same error. */
/* What a connection does (HELLO). */
enum { KIO_SVC_KIND_ALIGN = 1, KIO_SVC_KIND_ACC = 2 };

/* ---- growable message under construction ----
 * Small values are stored in the message's own buffer; large arrays may be
 * referenced (kio_msg_put_ref) and are sent from where they are, without a
 * copy. Every array starts at a multiple of 8 bytes of the payload, so that
 * the receiver can use it in place. */
typedef struct {
  uint8_t *buf; size_t len, cap;   /* inline bytes */
  struct { size_t off, len; const void *ref; } *seg;  /* ref == NULL: inline */
  int nseg, cap_seg;
  size_t total;                    /* payload bytes so far */
  int failed;                      /* out of memory: sending fails */
} kio_msg;
void kio_msg_reset(kio_msg *m);
void kio_msg_free(kio_msg *m);
void kio_msg_put_u32(kio_msg *m, uint32_t v);
void kio_msg_put_i32(kio_msg *m, int32_t v);
void kio_msg_put_f32(kio_msg *m, float v);
void kio_msg_put_f64(kio_msg *m, double v);
void kio_msg_put_u64(kio_msg *m, uint64_t v);
/* A byte string (u64 length, then the bytes, padded to 8). */
void kio_msg_put_str(kio_msg *m, const char *s);
/* An array of n elements of size sz, copied (put_arr) or referenced (put_ref:
 * must stay valid until the message is sent). u64 count, then the bytes,
 * padded to 8. */
void kio_msg_put_arr(kio_msg *m, const void *p, size_t n, size_t sz);
void kio_msg_put_ref(kio_msg *m, const void *p, size_t n, size_t sz);

/* ---- reading a received payload (bounds-checked; a short or malformed
 * payload sets r->bad and yields zeros / NULL) ---- */
typedef struct { const uint8_t *p; size_t len, pos; int bad; } kio_msg_reader;
uint32_t kio_rd_u32(kio_msg_reader *r);
int32_t kio_rd_i32(kio_msg_reader *r);
float kio_rd_f32(kio_msg_reader *r);
double kio_rd_f64(kio_msg_reader *r);
uint64_t kio_rd_u64(kio_msg_reader *r);
/* Strings and arrays point into the payload (valid while it is). A string
 * is NUL-terminated by the sender's padding; *n receives the count.
 * max_n bounds the count (larger: bad). */
const char *kio_rd_str(kio_msg_reader *r);
const void *kio_rd_arr(kio_msg_reader *r, size_t sz, size_t max_n, size_t *n);

/* Log lines captured on the service (kio_log_defer) travel to the job, which
 * logs them on its calling thread as if its own code had printed them. */
struct kio_log_deferred;
void kio_msg_put_lines(kio_msg *m, const struct kio_log_deferred *lines);
/* Logs the lines read from r; KIO_ERR if malformed. */
int kio_rd_log_lines(kio_msg_reader *r);
/* Reads the lines without logging them: their texts, joined by "; ". */
int kio_rd_log_text(kio_msg_reader *r, char *buf, size_t n);

/* ---- a connection ---- */
typedef struct kio_svc kio_svc;

/* Largest messages: a HELLO (options and the model's bytes) and a request
 * (a batch). A longer one is refused before anything is allocated for it;
 * the buffer of a message grows as its bytes arrive, never by what its
 * header claims. Jobs split batches to stay under KIO_SVC_MAX_REQUEST. */
#define KIO_SVC_MAX_HELLO ((uint64_t)1 << 30)
#define KIO_SVC_MAX_REQUEST ((uint64_t)2 << 30)

/* 1 if a job with --use-gpu other than "no" should try the service: not
 * disabled by KALDI_GPU_SERVICE, and a GPU device node exists (so machines
 * without a GPU never try). Cheap: no CUDA call. */
int kio_svc_wanted(void);
/* Connects to the service, starting it if it is not running (may_start),
 * with the job's bounds on every later wait (KALDI_GPU_SERVICE_TIMEOUT).
 * On failure returns KIO_ERR without logging and puts the reason in why
 * (for the caller's LOG line). Never waits longer than the start wait
 * (10 s) plus that timeout; a failed start is remembered for
 * KIO_SVC_FAILED_FOR seconds, during which jobs do not try again. */
enum { KIO_SVC_FAILED_FOR = 120 };
int kio_svc_connect(kio_svc **s, int may_start, char *why, size_t why_len);
void kio_svc_close(kio_svc *s);
/* Sends m as one message of the given type. KIO_ERR if the link failed. */
int kio_svc_send(kio_svc *s, uint32_t type, const kio_msg *m);
/* As kio_svc_send, passing descriptor fd along (SCM_RIGHTS). */
int kio_svc_send_fd(kio_svc *s, uint32_t type, const kio_msg *m, int fd);
/* The last descriptor that came with a received message (-1: none), now
 * the caller's (only one is kept: an earlier one not taken is closed). */
int kio_svc_take_fd(kio_svc *s);
/* Receives one message: *type, and a payload valid until the next receive
 * on this connection. KIO_ERR if the link failed, timed out, or the message
 * is not one of the expected type (expect = 0: any). Heartbeats are
 * consumed here (each one restarts the wait). */
int kio_svc_recv(kio_svc *s, uint32_t expect, uint32_t *type, kio_msg_reader *payload);
/* Exchanges the connection's payload buffer (the last message's) with
 * *buf / *cap (which may be NULL / 0): the caller keeps using the payload
 * while the next message goes to the other buffer. */
void kio_svc_swap_payload(kio_svc *s, uint8_t **buf, size_t *cap);
/* Why the last send/recv failed ("" if it did not). One thread may send
 * while another receives (the service's reader): each side keeps its own
 * reason, this is the latest. */
const char *kio_svc_error(const kio_svc *s);
/* Bounds on waiting for the peer, in seconds (< 0: none): wait_s for the
 * first byte of a message, stall_s for the rest of it and for a send that
 * does not progress. */
void kio_svc_set_timeouts(kio_svc *s, double wait_s, double stall_s);
/* The longest message this end accepts (bytes). */
void kio_svc_set_limit(kio_svc *s, uint64_t max_len);
/* The job's wait without a sign of life (KALDI_GPU_SERVICE_TIMEOUT). */
double kio_svc_timeout(void);

/* ---- the service's side ---- */
/* The paths of this process's service (see above): the private directory,
 * the socket, and the log. fresh: the GPUs' UUIDs asked of the driver, not
 * taken from the directory's cache (the service checks the job's view so).
 * KIO_ERR with why if the directory is unsafe. */
typedef struct {
  char dir[4096], sock[4096], log[4096];
} kio_svc_paths_t;
int kio_svc_paths(kio_svc_paths_t *p, int fresh, char *why, size_t why_len);
/* The identity behind the socket name, in words (kaldi-gpu-service
 * --print-identity), with the time its UUIDs took. */
void kio_svc_describe(char *buf, size_t n, int fresh);
/* Drops the cached UUIDs of this process's view of the GPUs. */
void kio_svc_forget_gpus(void);
/* The service's check at start, before it initialises CUDA: sock is the
 * socket of this process's identity asked of the driver (fresh UUIDs); the
 * UUIDs in gpus. KIO_ERR (the cached view dropped) with why otherwise. */
int kio_svc_check_identity(const char *sock, char *gpus, size_t n, char *why, size_t why_len);
/* Binds and listens on sock (mode 0600). Returns the fd or -1 (why). */
int kio_svc_listen(const char *sock, char *why, size_t why_len);
/* Wraps an accepted fd; KIO_ERR (fd closed) if the peer is another user. */
int kio_svc_accept(int listen_fd, kio_svc **s);
/* A heartbeat (BUSY) to the job, unless a message is being sent to it
 * now. Never blocks; callable from any thread. */
void kio_svc_heartbeat(kio_svc *s);
/* Wakes whatever waits on this connection (the service's shutdown): its
 * receive or send fails at once. Callable from any thread. */
void kio_svc_shutdown(kio_svc *s);
/* Seconds since the last byte went either way on this connection. */
double kio_svc_quiet_for(const kio_svc *s);
/* The start-up of the service: a CPU affinity of the whole machine (not
 * the starting job's), and, started from a scheduler's job (Slurm,
 * GridEngine), out of that job's control groups where it may (root). Says
 * what it did in what; 1 if it moved (its devices may then differ). */
int kio_svc_leave_job(char *what, size_t n);
#ifdef __cplusplus
}
#endif
#endif
