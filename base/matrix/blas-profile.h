/* Which OpenBLAS kernels our arithmetic rounds as (the profile of
 * base/matrix/blas-order.h), chosen once per process:
 *  - KALDI_GPU_BLAS_PROFILE when set (skx, cpl, hsw, snb, nhm, sse, or an
 *    OpenBLAS core name such as Haswell or Cooperlake);
 *  - else the Kaldi in use: the first Kaldi program (gmm-est, ...) on PATH,
 *    else under KALDI_ROOT; the libopenblas its loader resolves is asked for
 *    its core name (openblas_get_corename(), in a child process with this
 *    environment, so OPENBLAS_CORETYPE counts as it does for Kaldi);
 *  - else, or when that BLAS is not one we reproduce (MKL, ATLAS, another
 *    OpenBLAS core), the reference rounding (SkylakeX), saying why.
 * One LOG line (or WARNING, when a Kaldi was found that we cannot match)
 * says which and why, the first time a program needs it. */
#ifndef KIO_BLAS_PROFILE_H
#define KIO_BLAS_PROFILE_H

#include <stddef.h>

#include "base/matrix/blas-order.h"

#ifdef __cplusplus
extern "C" {
#endif

/* This process's profile (KIO_BLAS_SKX, ...): resolved and logged on the
 * first call (thread-safe; call it first from the main thread so the line
 * comes before the work's). */
int kio_blas_profile(void);

/* How the profile was chosen. */
enum {
  KIO_BLAS_BY_SETTING = 0,  /* KALDI_GPU_BLAS_PROFILE */
  KIO_BLAS_BY_KALDI = 1,    /* the Kaldi in use's OpenBLAS core */
  KIO_BLAS_NO_KALDI = 2,    /* no Kaldi found: the reference */
  KIO_BLAS_UNMATCHED = 3    /* a Kaldi whose BLAS we do not reproduce: the reference */
};
/* The same, without the log line: the profile and, in why (may be NULL),
 * the reason in words; how (may be NULL): KIO_BLAS_BY_SETTING, ... */
int kio_blas_profile_query(char *why, size_t why_len, int *how);
/* This process's profile as kio_blas_profile() (resolved once, cached),
 * with its reason and how, for programs that print it themselves: no log
 * line when this call resolves it (kaldi-gpu-service --print-rounding). */
int kio_blas_profile_explain(char *why, size_t why_len, int *how);
/* The word for a KIO_BLAS_BY_* value: set, matched, reference, unmatched. */
const char *kio_blas_how_name(int how);

/* The canonical name of a profile (skx, cpl, hsw, snb, nhm, sse) and the
 * OpenBLAS kernels it reproduces, in words ("OpenBLAS Haswell kernels"). */
const char *kio_blas_profile_name(int prof);
const char *kio_blas_profile_kernels(int prof);

/* A user's or OpenBLAS's name (case-insensitive: skx, skylakex, cooperlake,
 * sapphirerapids, hsw, haswell, zen, snb, sandybridge, nhm, nehalem, sse,
 * prescott, plain): the profile, or -1. */
int kio_blas_profile_parse(const char *name);

/* For tests: forget the cached choice (the next call resolves again). */
void kio_blas_profile_reset(void);

/* ---- detection (blas-detect.c) ---- */

/* What the Kaldi in use runs: its program, the BLAS library its loader
 * resolves and that library's OpenBLAS core (empty strings where unknown). */
typedef struct {
  char prog[4096], lib[4096], core[64], config[256];
} kio_blas_found;

/* Finds the Kaldi program and its BLAS and asks the core. Returns the
 * profile (>= 0) when the core is one we reproduce, else -1 with why; how:
 * KIO_BLAS_BY_KALDI, KIO_BLAS_NO_KALDI or KIO_BLAS_UNMATCHED. */
int kio_blas_detect(kio_blas_found *f, char *why, size_t why_len, int *how);
/* The first program called name on PATH that is not one of ours (Kaldi's),
 * into out: 1 found, 0 none. */
int kio_find_kaldi_program(const char *name, char *out, size_t n);

/* Called by kio_program_start: when argv[0] is the core query's name, runs
 * the query (dlopen argv[1], print its OpenBLAS core and configuration)
 * and exits; returns otherwise. Lets any of our programs answer for us. */
void kio_blas_query_main(int argc, char **argv);

#ifdef __cplusplus
}
#endif
#endif
