/* Test builds' kio_test_hook: the hooks are read from the environment.
 * Linked ahead of the libraries into the test suites and the test builds of
 * the programs ($(BUILD)/test-bin), never into gmmbin-gpu/. */
#include "base/sys/settings.h"

const char *kio_test_hook(kio_setting s) { return kio_test_hook_lookup(s); }
