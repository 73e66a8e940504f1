/* Run-time choice of the vector kernels (simd.h). */
#include "simd.h"
#include "settings.h"

#include <stdlib.h>
#include <string.h>

/* Read by the feature pool's threads: relaxed atomics (same value for all). */
static int g_cpu = -1, g_cap = -1;

static int cpu_level(void) {
  int c = __atomic_load_n(&g_cpu, __ATOMIC_RELAXED);
  if (c >= 0) return c;
  int l = KIO_SIMD_NONE;
#if defined(__x86_64__)
  if (!kio_setting_flag(KIO_SET_DEV_NO_SIMD, 0)) {
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
      l = KIO_SIMD_AVX2;
      if (__builtin_cpu_supports("avx512f")) l = KIO_SIMD_AVX512;
    }
    /* e.g. an AVX2 host's code on this one */
    static const char *const levels[] = {"avx2", "avx512", NULL};
    if (kio_setting_choice(KIO_SET_DEV_SIMD_MAX, levels, 1) == 0 && l > KIO_SIMD_AVX2) l = KIO_SIMD_AVX2;
  }
#endif
  __atomic_store_n(&g_cpu, l, __ATOMIC_RELAXED);
  return l;
}

int kio_simd_level(void) {
  int l = cpu_level();
  int cap = __atomic_load_n(&g_cap, __ATOMIC_RELAXED);
  return cap >= 0 && cap < l ? cap : l;
}

void kio_simd_set(int level) { __atomic_store_n(&g_cap, level, __ATOMIC_RELAXED); }
