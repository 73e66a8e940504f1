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
 * job, which prints them as its own. */
#ifndef GSVC_GPU_SERVICE_H
#define GSVC_GPU_SERVICE_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  const char *socket;  /* path to listen on (kio_svc_paths gives the default) */
  int idle_s;          /* exit after this long without a connection */
  int use_cpu;         /* tests: align/accumulate on the CPU backend, as if it
                          were use_cpu devices (0: the GPUs) */
  int drop_after;      /* tests: drop each connection after this many batches */
  int verbose;         /* a LOG line per connection (batches, busy and wall time) */
} gsvc_config;

/* Serves until idle. Returns the process exit status (0 after an idle
 * exit; 1 if it could not listen). */
int gsvc_serve(const gsvc_config *cfg);

#ifdef __cplusplus
}
#endif
#endif
