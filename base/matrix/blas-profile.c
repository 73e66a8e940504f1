/* The one choice of rounding profile per process (blas-profile.h): the
 * setting, else the Kaldi in use (blas-detect.c), else the reference. */
#include "blas-profile.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "base/sys/log.h"
#include "base/sys/settings.h"

static const char *const names[KIO_BLAS_NPROF] = {"skx", "hsw", "snb", "nhm", "sse", "cpl"};
static const char *const kernels[KIO_BLAS_NPROF] = {
  "OpenBLAS SkylakeX kernels", "OpenBLAS Haswell kernels", "OpenBLAS Sandybridge kernels",
  "OpenBLAS Nehalem kernels", "OpenBLAS Prescott kernels", "OpenBLAS Cooperlake kernels"};

/* Accepted names: ours, then OpenBLAS 0.3.21's core names whose kernels are
 * the profile's (openblas_get_corename() spells them this way). "plain"
 * (no FMA anywhere) was this setting's earlier guess at such a build. */
static const struct { const char *name; int prof; } aliases[] = {
  {"skx", KIO_BLAS_SKX}, {"hsw", KIO_BLAS_HSW}, {"snb", KIO_BLAS_SNB},
  {"nhm", KIO_BLAS_NHM}, {"sse", KIO_BLAS_SSE}, {"cpl", KIO_BLAS_CPL}, {"plain", KIO_BLAS_SSE},
  {"SkylakeX", KIO_BLAS_SKX}, {"Cooperlake", KIO_BLAS_CPL}, {"SapphireRapids", KIO_BLAS_SKX},
  {"Haswell", KIO_BLAS_HSW}, {"Zen", KIO_BLAS_HSW}, {"Sandybridge", KIO_BLAS_SNB},
  {"Nehalem", KIO_BLAS_NHM}, {"Prescott", KIO_BLAS_SSE},
};

const char *kio_blas_profile_name(int prof) {
  return prof >= 0 && prof < KIO_BLAS_NPROF ? names[prof] : "?";
}

const char *kio_blas_profile_kernels(int prof) {
  return prof >= 0 && prof < KIO_BLAS_NPROF ? kernels[prof] : "?";
}

int kio_blas_profile_parse(const char *name) {
  if (!name) return -1;
  for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
    if (!strcasecmp(name, aliases[i].name)) return aliases[i].prof;
  return -1;
}

const char *kio_blas_how_name(int how) {
  static const char *const w[] = {"set", "matched", "reference", "unmatched"};
  return how >= 0 && how < 4 ? w[how] : "?";
}

int kio_blas_profile_query(char *why, size_t why_len, int *how) {
  char tmp[8192];
  int h;
  if (!why) why = tmp, why_len = sizeof tmp;
  if (!how) how = &h;
  *how = KIO_BLAS_BY_SETTING;
  const char *e = kio_setting_str(KIO_SET_BLAS_PROFILE);
  if (e) {
    int p = kio_blas_profile_parse(e);
    if (p >= 0) {
      snprintf(why, why_len, "KALDI_GPU_BLAS_PROFILE=%s", e);
      return p;
    }
  }
  kio_blas_found f;
  int p = kio_blas_detect(&f, why, why_len, how);
  return p >= 0 ? p : KIO_BLAS_SKX;
}

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int g_prof = -1;
static char g_why[8192];
static int g_how;

/* Resolves the process's profile once (under the lock), with the LOG or
 * WARNING line when log is set. */
static int kio_blas_resolve(int log) {
  pthread_mutex_lock(&g_lock);
  if (g_prof < 0) {
    const char *e = kio_setting_str(KIO_SET_BLAS_PROFILE);
    if (log && e && kio_blas_profile_parse(e) < 0)
      KIO_WARN("KALDI_GPU_BLAS_PROFILE=%s is not a rounding profile (skx, cpl, hsw, snb, nhm, sse or "
               "an OpenBLAS core name); matching the Kaldi in use instead", e);
    int p = kio_blas_profile_query(g_why, sizeof g_why, &g_how);
    if (log && g_how == KIO_BLAS_UNMATCHED)
      KIO_WARN("Rounding as %s, the reference (%s); results can differ from this Kaldi's in "
               "the last bits", kio_blas_profile_kernels(p), g_why);
    else if (log)
      KIO_LOG("Rounding as %s (%s)", kio_blas_profile_kernels(p), g_why);
    g_prof = p;
  }
  int p = g_prof;
  pthread_mutex_unlock(&g_lock);
  return p;
}

int kio_blas_profile(void) {
  int p = g_prof;  /* once resolved: a load, no lock */
  return p >= 0 ? p : kio_blas_resolve(1);
}

int kio_blas_profile_explain(char *why, size_t why_len, int *how) {
  int p = kio_blas_resolve(0);
  pthread_mutex_lock(&g_lock);
  if (why && why_len) snprintf(why, why_len, "%s", g_why);
  if (how) *how = g_how;
  pthread_mutex_unlock(&g_lock);
  return p;
}

void kio_blas_profile_reset(void) {
  pthread_mutex_lock(&g_lock);
  g_prof = -1;
  pthread_mutex_unlock(&g_lock);
}
