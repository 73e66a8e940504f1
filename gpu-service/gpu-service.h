/* The per-user GPU service (issue 12; program gmmbin-gpu/kaldi-gpu-service):
 * one process that keeps the CUDA context and the models, and aligns and
 * accumulates the batches that the jobs of a recipe hand it over their Unix
 * socket (device/svc-link.h: paths, start on first use, wire helpers). Jobs
 * start it on first use; it exits after an idle time.
 *
 * Inside: one thread per connection; each connection gets an aligner or an
 * accumulator of its own (its own CUDA stream and buffers, so concurrent
 * jobs' kernels overlap on the device), taken from a pool kept per model
 * and options, so that the next iteration's jobs find them ready. Models
 * are cached by their exact bytes. Log lines a batch produces go back to its
 * job, which prints them as its own. A request the service cannot do (its
 * device failed, out of memory) is answered with a failure, and the job does
 * it itself; a device context with a sticky error makes the service exit so
 * that the next job starts a fresh one (service.c has the lifecycle). */
#ifndef GSVC_GPU_SERVICE_H
#define GSVC_GPU_SERVICE_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  const char *socket;  /* path to listen on (kio_svc_paths gives the default) */
  int listen_fd;       /* > 0: already listening on socket (kio_svc_listen) */
  int idle_s;          /* exit after this long without a connection */
  int use_cpu;         /* tests: align/accumulate on the CPU backend, as if it
                          were use_cpu devices (0: the GPUs) */
  int drop_after;      /* tests: drop each connection after this many batches */
  int verbose;         /* a LOG line per connection (batches, busy and wall time) */
  double stall_s;      /* a job's silence allowed inside a message (<= 0: 30 s) */
  const char *refuse;  /* non-NULL: refuse every job with this reason (and exit) */
  const char *failed_marker;  /* written when there is no usable device */
  int break_after;     /* tests: the device context breaks after this many batches */
  int stop_after;      /* tests: SIGSTOP to itself after this many batches */
  double slow_s;       /* tests: seconds of delay before each batch */
} gsvc_config;

/* Serves until idle or told to stop (SIGTERM, SIGINT). Returns the process
 * exit status (0 after an idle exit; 1 if it could not listen); a stop or a
 * restart exits the process itself. */
int gsvc_serve(const gsvc_config *cfg);

#ifdef __cplusplus
}
#endif
#endif
