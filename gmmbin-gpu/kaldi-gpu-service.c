/* kaldi-gpu-service: the per-user GPU service the alignment and accumulation
 * programs hand their batches to (gpu-service/gpu-service.h). Jobs start it
 * on first use (device/svc-link.c); it is not meant to be run by hand, but can
 * be, e.g. to keep it up longer: kaldi-gpu-service --idle-timeout=600. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
  kio_opts *po = kio_opts_new(usage);
  kio_opts_string(po, "socket", &sock,
                  "Socket to listen on (default: the one the programs would use)");
  kio_opts_int(po, "idle-timeout", &idle, "Seconds without jobs after which the service exits");
  int prc = kio_opts_parse(po, argc, argv);
  if (prc == KIO_OPTS_HELP) return 0;
  if (prc != KIO_OPTS_OK) return 255;
  if (kio_opts_num_args(po) != 0) {
    kio_opts_print_usage(po);
    return 1;
  }
  char dir[4096], path[4096], why[256];
  if (!sock[0]) {
    if (kio_svc_paths(dir, sizeof dir, path, sizeof path, why, sizeof why) != KIO_OK) {
      KIO_ERROR("%s", why);
      return 255;
    }
    free(sock);
    sock = strdup(path);
  }
  /* Test switches (tests/cli/service.sh): the CPU backend instead of the
   * GPU, so the service can be tested without one (KALDI_GPU_TEST_SERVICE_CPU=N:
   * as if there were N devices, to test their assignment); connections dropped
   * after N batches, to test the jobs' fallback. */
  const char *cpu = kio_test_hook(KIO_SET_TEST_SERVICE_CPU), *drop = kio_test_hook(KIO_SET_TEST_SERVICE_DROP);
  int verbose = (int)kio_setting_int(KIO_SET_SERVICE_VERBOSE, 0, 0, 6);
  gsvc_config cfg = {sock, idle, cpu ? atoi(cpu) : 0, drop ? atoi(drop) : 0, verbose > 0};
  /* KALDI_GPU_SERVICE_VERBOSE=2: also the backends' time split (VLOG[2]). */
  if (verbose >= 2 && kio_log_verbose() < 2) kio_log_set_verbose(2);
  int rc = gsvc_serve(&cfg);
  kio_opts_free(po);
  free(sock);
  return rc;
}
