/* kaldi-gpu-service: the per-user GPU service the alignment and accumulation
 * programs hand their batches to (gpu-service/gpu-service.h). Jobs start it
 * on first use (device/svc-start.c); it is not meant to be run by hand, but can
 * be, e.g. to keep it up longer: kaldi-gpu-service --idle-timeout=600, or to
 * see which service a job would use: kaldi-gpu-service --print-identity.
 * --describe prints what a job started in this environment would use (GPUs,
 * the code of this build they run, the service's directory, socket and
 * identity, the rounding profile) and exits: tools/check-recipe.sh shows it.
 * --print-rounding prints only the rounding profile our programs would choose
 * here (base/matrix/blas-profile.h), tab-separated: its name, how it was
 * chosen (set, matched, reference, unmatched) and why, e.g.
 *   hsw<TAB>matched<TAB>OpenBLAS Haswell kernels (... reports core Zen)
 * Jobs start the service with --rounding=NAME, their own profile (their
 * Kaldi's), which is part of the service's identity. */
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/matrix/blas-profile.h"
#include "base/sys/log.h"
#include "base/sys/options.h"
#include "base/sys/version.h"
#include "device/cuda-util.h"
#include "device/svc-link.h"
#include "gpu-service/gpu-service.h"
#include "base/program/program.h"
#include "base/sys/settings.h"

/* --describe: one "key: value" line each, on stdout. 0, or 1 when a job
 * here would not get a GPU. */
static int describe(void) {
  /* The profile the aligner, the accumulator and the feature chains round
   * with (the Kaldi's in use here, or KALDI_GPU_BLAS_PROFILE's), resolved
   * first: printed below, no log line (the identity needs it too). */
  char rwhy[8192];
  int how, p = kio_blas_profile_explain(rwhy, sizeof rwhy, &how);
  printf("program: %s (%s)\n", KIO_PLUGIN_ID, kio_log_program());
  const char *cvd = kio_setting_str(KIO_SET_CUDA_VISIBLE_DEVICES);
  printf("CUDA_VISIBLE_DEVICES: %s\n", cvd ? cvd : "(unset: every GPU)");
  printf("device code: %s\n", KIO_HAVE_CUDA ? kio_cuda_build_archs() : "none (built without CUDA)");
  kio_cuda_env e;
  kio_cuda_env_info(&e);
  if (KIO_HAVE_CUDA) {
    char drv[32] = "none";
    if (e.driver) snprintf(drv, sizeof drv, "%d.%d", e.driver / 1000, e.driver % 1000 / 10);
    printf("CUDA: driver %s, runtime %d.%d (a driver of the runtime's version or later is needed)\n",
           drv, e.runtime / 1000, e.runtime % 1000 / 10);
  }
  int usable = 0;
  if (e.count == 0) printf("gpus: none (%s): the programs run on the CPU path\n", e.why);
  for (int d = 0; d < e.count; d++) {
    kio_cuda_dev_info di;
    if (kio_cuda_device_info(d, &di) == KIO_OK) {
      usable++;
      char code[96];
      if (di.from_ptx)
        snprintf(code, sizeof code, "PTX compiled by the driver for sm_%d", di.code_arch);
      else
        snprintf(code, sizeof code, "SASS sm_%d", di.code_arch);
      printf("gpu %d: %s, sm_%d%d, %d SMs, %.1f GiB; runs this build's %s\n", d, di.name,
             di.major, di.minor, di.sms, di.mem_gib, code);
    } else {
      printf("gpu %d: %s%ssm_%d%d: NOT USABLE: %s\n", d, di.name, di.name[0] ? ", " : "",
             di.major, di.minor, di.why);
    }
  }
  const char *svc = kio_setting_str(KIO_SET_SERVICE);
  if (kio_svc_wanted())
    printf("service: used (one per user and machine; KALDI_GPU_SERVICE=no turns it off)\n");
  else if (svc && *svc)
    printf("service: not used (KALDI_GPU_SERVICE=%s)\n", svc);
  else
    printf("service: not used (no GPU device node on this machine)\n");
  static kio_svc_paths_t paths;
  char why[512], id[8192];
  if (kio_svc_paths(&paths, 0, why, sizeof why) != KIO_OK) {
    printf("service directory: UNUSABLE: %s\n", why);
  } else {
    printf("service directory: %s\n", paths.dir);
    kio_svc *s = NULL;
    int up = kio_svc_connect(&s, 0, why, sizeof why) == KIO_OK;
    kio_svc_close(s);
    printf("service socket: %s (%s)\n", paths.sock,
           up ? "a service is running" : "not running: the first job starts it");
    kio_svc_describe(id, sizeof id, 0);
    printf("service identity: %s\n", id);
  }
  printf("rounding profile: %s (%s: %s (%s))\n", kio_blas_profile_name(p), kio_blas_how_name(how),
         kio_blas_profile_kernels(p), rwhy);
  return usable ? 0 : 1;
}

int main(int argc, char *argv[]) {
  kio_program_start(argc, argv);
  const char *usage =
      "The per-user GPU service of the GPU alignment plugin: keeps the CUDA context\n"
      "and models, and aligns/accumulates the batches the programs hand it.\n"
      "Started by the programs on first use; exits when idle.\n"
      "Usage:  kaldi-gpu-service [options]\n";
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
  int describe_only = 0, print_rounding = 0;
  char *rounding = strdup("");
  kio_opts_bool(po, "describe", &describe_only,
                "Print what a job started here would use (GPUs, service, rounding profile) and exit");
  kio_opts_bool(po, "print-rounding", &print_rounding,
                "Print the rounding profile the programs would choose here (name, how, why) "
                "and exit");
  kio_opts_string(po, "rounding", &rounding,
                  "Round as this profile (set by the jobs that start the service: theirs; "
                  "as KALDI_GPU_BLAS_PROFILE)");
  kio_program_parse(po, argc, argv, 0, 0);  /* its first LOG line comes later */
  if (describe_only || print_rounding) {  /* before the overrides below: the jobs' view */
    int rc = 0;
    if (describe_only) {
      rc = describe();
    } else {
      char why[8192];
      int how, p = kio_blas_profile_explain(why, sizeof why, &how);
      printf("%s\t%s\t%s (%s)\n", kio_blas_profile_name(p), kio_blas_how_name(how),
             kio_blas_profile_kernels(p), why);
    }
    kio_opts_free(po);
    free(sock);
    free(rounding);
    return rc;
  }
  /* The jobs' rounding profile (their Kaldi's): part of our identity. */
  static char jobs_rounding[64];  /* the settings keep the pointer */
  snprintf(jobs_rounding, sizeof jobs_rounding, "%s", rounding);
  free(rounding);
  if (jobs_rounding[0]) kio_setting_override(KIO_SET_BLAS_PROFILE, jobs_rounding);
  /* The service never hands work to a service. */
  kio_setting_override(KIO_SET_SERVICE, "no");
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
  kio_log_ours();
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
