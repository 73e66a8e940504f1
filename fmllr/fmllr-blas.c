/* The OpenBLAS of the Kaldi in use, loaded into this process for the calls
 * that Kaldi's fMLLR code makes to it: the per-frame sgemv/sdot of
 * AccumulateFromPosteriors and the update's LAPACK (dsptrf/dsptri,
 * dgetrf/dgetri) and level-1/2 calls. The same library with the same
 * environment (OPENBLAS_CORETYPE, threads) computes the same bits as in
 * Kaldi's process; our own arithmetic (the G updates, the component
 * posteriors) follows the rounding profile, so the library's core must be
 * the profile's. Anything else (no Kaldi found, MKL or another BLAS, a
 * KALDI_GPU_BLAS_PROFILE that is not the library's core) is refused. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/matrix/blas-profile.h"
#include "base/sys/log.h"
#include "fmllr/fmllr-internal.h"

int fmllr_blas_load(fmllr_blas **out, char *why, size_t why_len) {
  *out = NULL;
  kio_blas_found f;
  int how = -1, prof = kio_blas_profile();
  int found = kio_blas_detect(&f, why, why_len, &how);
  if (found < 0 || how != KIO_BLAS_BY_KALDI) return KIO_ERR;
  if (found != prof) {
    snprintf(why, why_len, "the Kaldi in use runs OpenBLAS %s kernels (%s), not the %s this "
             "process rounds as", f.core, f.lib, kio_blas_profile_kernels(prof));
    return KIO_ERR;
  }
  void *h = dlopen(f.lib, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    snprintf(why, why_len, "cannot load %s: %s", f.lib, dlerror());
    return KIO_ERR;
  }
  fmllr_blas *b = calloc(1, sizeof *b);
  if (!b) {
    dlclose(h);
    snprintf(why, why_len, "out of memory");
    return KIO_ERR;
  }
  b->lib = h;
#define SYM(field, name)                                                  \
  do {                                                                    \
    *(void **)&b->field = dlsym(h, name);                                 \
    if (!b->field) {                                                      \
      snprintf(why, why_len, "%s has no %s (not an OpenBLAS with LAPACK)", \
               f.lib, name);                                              \
      free(b);                                                            \
      dlclose(h);                                                         \
      return KIO_ERR;                                                     \
    }                                                                     \
  } while (0)
  SYM(sgemv, "cblas_sgemv");
  SYM(sdot, "cblas_sdot");
  SYM(ddot, "cblas_ddot");
  SYM(dscal, "cblas_dscal");
  SYM(dspmv, "cblas_dspmv");
  SYM(dgetrf, "dgetrf_");
  SYM(dgetri, "dgetri_");
  SYM(dsptrf, "dsptrf_");
  SYM(dsptri, "dsptri_");
#undef SYM
  *out = b;
  return KIO_OK;
}

/* The library stays loaded (as in Kaldi's process, OpenBLAS's threads are
 * never shut down mid-run). */
void fmllr_blas_free(fmllr_blas *b) { free(b); }
