#include "settings.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "log.h"

static const kio_setting_info table[KIO_SET_COUNT] = {
#define KIO_SETTING_ROW_(id, name, old, aud, help) {name, old, help, KIO_SET_FOR_##aud},
    KIO_SETTINGS(KIO_SETTING_ROW_)
#undef KIO_SETTING_ROW_
};

/* Read once for the whole process: later changes to the environment (a
 * program setting a variable for its children) do not change our view. */
static const char *values[KIO_SET_COUNT];
static int from_old_name[KIO_SET_COUNT];
static int warned[KIO_SET_COUNT];
static pthread_once_t once = PTHREAD_ONCE_INIT;
static pthread_mutex_t warn_lock = PTHREAD_MUTEX_INITIALIZER;

static void read_all(void) {
  for (int i = 0; i < KIO_SET_COUNT; i++) {
    const char *v = getenv(table[i].name);
    if ((!v || !*v) && table[i].old_name) {
      v = getenv(table[i].old_name);
      if (v && *v) from_old_name[i] = 1;
    }
    values[i] = v && *v ? v : NULL;
  }
}

const kio_setting_info *kio_setting_describe(kio_setting s) {
  return (unsigned)s < KIO_SET_COUNT ? &table[s] : NULL;
}

/* One WARNING per setting and process. */
static int first_warning(kio_setting s) {
  pthread_mutex_lock(&warn_lock);
  int first = !warned[s];
  warned[s] = 1;
  pthread_mutex_unlock(&warn_lock);
  return first;
}

static const char *lookup(kio_setting s) {
  if ((unsigned)s >= KIO_SET_COUNT) return NULL;
  pthread_once(&once, read_all);
  if (values[s] && from_old_name[s] && first_warning(s))
    KIO_WARN("%s is the earlier name of %s; it still works, but please use %s",
             table[s].old_name, table[s].name, table[s].name);
  return values[s];
}

/* Our copies of overridden values: the caller's string may not outlive the
 * call (a Python binding's temporary, e.g.). */
static char *owned[KIO_SET_COUNT];

void kio_setting_override(kio_setting s, const char *value) {
  if ((unsigned)s >= KIO_SET_COUNT) return;
  pthread_once(&once, read_all);
  char *copy = value && *value ? strdup(value) : NULL;
  values[s] = copy;
  free(owned[s]);
  owned[s] = copy;
  from_old_name[s] = 0;
}

const char *kio_setting_str(kio_setting s) {
  if ((unsigned)s < KIO_SET_COUNT && table[s].audience == KIO_SET_FOR_TEST) return NULL;
  return lookup(s);
}

static void warn_invalid(kio_setting s, const char *v, const char *expected) {
  if (first_warning(s))
    KIO_WARN("Ignoring %s=%s (expected %s); using the default",
             from_old_name[s] ? table[s].old_name : table[s].name, v, expected);
}

long long kio_setting_int(kio_setting s, long long def, long long lo, long long hi) {
  const char *v = kio_setting_str(s);
  if (!v) return def;
  char *end;
  errno = 0;
  long long x = strtoll(v, &end, 10);
  if (errno || end == v || *end || x < lo || x > hi) {
    char expected[96];
    snprintf(expected, sizeof expected, "an integer from %lld to %lld", lo, hi);
    warn_invalid(s, v, expected);
    return def;
  }
  return x;
}

int kio_setting_flag(kio_setting s, int def) {
  static const char *const yes[] = {"1", "yes", "true", "on", NULL};
  static const char *const no[] = {"0", "no", "false", "off", NULL};
  const char *v = kio_setting_str(s);
  if (!v) return def;
  for (int i = 0; yes[i]; i++) if (!strcasecmp(v, yes[i])) return 1;
  for (int i = 0; no[i]; i++) if (!strcasecmp(v, no[i])) return 0;
  warn_invalid(s, v, "1/yes or 0/no");
  return def;
}

int kio_setting_choice(kio_setting s, const char *const *choices, int def) {
  const char *v = kio_setting_str(s);
  if (!v) return def;
  char expected[256] = "";
  size_t n = 0;
  for (int i = 0; choices[i]; i++) {
    if (!strcasecmp(v, choices[i])) return i;
    n += (size_t)snprintf(expected + n, n < sizeof expected ? sizeof expected - n : 0,
                          "%s%s", i ? ", " : "one of ", choices[i]);
  }
  warn_invalid(s, v, expected);
  return def;
}

/* Test builds link a kio_test_hook of their own (tests/lib/test-hooks.c)
 * ahead of this library, so its lookup of the environment is used there;
 * this one keeps test hooks out of shipped programs. */
const char *kio_test_hook_lookup(kio_setting s) {
  if ((unsigned)s >= KIO_SET_COUNT || table[s].audience != KIO_SET_FOR_TEST) return NULL;
  return lookup(s);
}
