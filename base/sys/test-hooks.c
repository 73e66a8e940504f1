/* The shipped programs' kio_test_hook: test hooks are off. Test builds of
 * the programs link tests/lib/test-hooks.c instead (its kio_test_hook is
 * found before the linker looks in this library). */
#include "settings.h"

#include <stddef.h>

const char *kio_test_hook(kio_setting s) {
  (void)s;
  return NULL;
}
