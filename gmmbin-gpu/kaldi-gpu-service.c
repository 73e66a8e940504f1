/* kaldi-gpu-service: the per-user GPU service the alignment and accumulation
 * programs hand their batches to (gpu-service/gpu-service.h). Jobs start it
 * on first use (device/svc-start.c); it is not meant to be run by hand, but can
 * be, e.g. to keep it up longer: kaldi-gpu-service --idle-timeout=600, or to
 * see which service a job would use: kaldi-gpu-service --print-identity. */
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/sys/log.h"
#include "base/sys/options.h"
#include "device/svc-link.h"
#include "gpu-service/gpu-service.h"
#include "base/program/program.h"
#include "base/sys/settings.h"

int main(int argc, char *argv[]) {
  kio_program_start(argc, argv);
  const char *usage =
      "The per-user GPU service of the GPU alignment plugin: keeps the CUDA context\n"
      "and models, and aligns/accumulates the batches the programs hand it.\n"
      "Started by the programs on first use; exits when idle.\n"
      "Usage:  kaldi-gpu-service [options]\n";
  /* The service never hands work to a service. */
  kio_setting_override(KIO_SET_SERVICE, "no");
  int32_t idle = (int32_t)kio_setting_int(KIO_SET_SERVICE_IDLE, 60, 1, 1 << 30);
  char *sock = strdup("");
  int print_id = 0;
  kio_opts *po = kio_opts_new(usage);
  kio_opts_string(po, "socket", &sock,
                  "Socket to listen on (default: the one the programs would use)");
  kio_opts_int(po, "idle-timeout", &idle, "Seconds without jobs after which the service exits");
  kio_opts_bool(po, "print-identity", &print_id,
                "Print the identity of the service this environment's jobs use (host, "
                "GPUs, device switches) and how long finding it took, then exit");
  int prc = kio_opts_parse(po, argc, argv);
  if (prc == KIO_OPTS_HELP) return 0;
  if (prc != KIO_OPTS_OK) return 255;
  if (kio_opts_num_args(po) != 0) {
    kio_opts_print_usage(po);
    return 1;
  }
  if (print_id) {
    char d[8192];
    kio_svc_describe(d, sizeof d, 0);
    printf("as a job sees it: %s\n", d);
    kio_svc_describe(d, sizeof d, 1);
    printf("asking the driver: %s\n", d);
    kio_opts_free(po);
    free(sock);
    return 0;
  }
  /* Test switch (tests/cli/service.sh): a service that never starts. */
  const char *no_start = kio_test_hook(KIO_SET_TEST_SERVICE_NO_START);
  if (no_start && !strcmp(no_start, "exit")) return 3;
  if (no_start && !strcmp(no_start, "hang"))
    for (;;) pause();
  static kio_svc_paths_t paths;
  char why[512];
  if (!sock[0]) {
    if (kio_svc_paths(&paths, 0, why, sizeof why) != KIO_OK) {
      KIO_ERROR("%s", why);
      return 255;
    }
    free(sock);
    sock = strdup(paths.sock);
  }
  /* Listen at once: the jobs that started us connect and wait for READY
   * meanwhile. Then, before anything touches CUDA here: is this the service
   * the socket names (the job's view of the GPUs may come from a stale
   * cache)? Then leave the starting job's CPU affinity and, where allowed,
   * its control group, keeping the job's GPUs by their UUIDs. */
  int lfd = kio_svc_listen(sock, why, sizeof why);
  if (lfd < 0) {
    KIO_ERROR("%s", why);
    return 1;
  }
  char gpus[4096] = "", what[PATH_MAX + 512];
  const char *refuse = NULL;
  if (kio_svc_check_identity(sock, gpus, sizeof gpus, why, sizeof why) != KIO_OK) refuse = why;
  if (kio_svc_leave_job(what, sizeof what) && !refuse && !strncmp(gpus, "GPU-", 4)) {
    setenv("CUDA_VISIBLE_DEVICES", gpus, 1);
    kio_setting_override(KIO_SET_CUDA_VISIBLE_DEVICES, gpus);
  }
  KIO_LOG("Started: GPUs %s; %s", gpus, what);
  char failed[PATH_MAX + 16];
  size_t sl = strlen(sock);
  snprintf(failed, sizeof failed, "%.*s.failed", (int)(sl > 5 ? sl - 5 : sl), sock);
  /* Test switches (tests/cli/service.sh): the CPU backend instead of the
   * GPU, so the service can be tested without one (KALDI_GPU_TEST_SERVICE_CPU=N:
   * as if there were N devices, to test their assignment); connections dropped
   * after N batches, to test the jobs' fallback; a device context that breaks,
   * a service that stops or is slow. */
  const char *cpu = kio_test_hook(KIO_SET_TEST_SERVICE_CPU), *drop = kio_test_hook(KIO_SET_TEST_SERVICE_DROP);
  const char *brk = kio_test_hook(KIO_SET_TEST_SERVICE_BREAK);
  const char *stop = kio_test_hook(KIO_SET_TEST_SERVICE_STOP);
  const char *slow = kio_test_hook(KIO_SET_TEST_SERVICE_SLOW);
  int verbose = (int)kio_setting_int(KIO_SET_SERVICE_VERBOSE, 0, 0, 6);
  gsvc_config cfg = {sock, lfd, idle, cpu ? atoi(cpu) : 0, drop ? atoi(drop) : 0, verbose > 0,
                     kio_svc_timeout(), refuse, refuse ? NULL : failed,
                     brk ? atoi(brk) : 0, stop ? atoi(stop) : 0, slow ? atof(slow) : 0.0};
  /* KALDI_GPU_SERVICE_VERBOSE=2: also the backends' time split (VLOG[2]). */
  if (verbose >= 2 && kio_log_verbose() < 2) kio_log_set_verbose(2);
  int rc = gsvc_serve(&cfg);
  kio_opts_free(po);
  free(sock);
  return rc;
}
