/* Prints docs/settings.md from the settings table (base/sys/settings.h):
 * `make settings-doc` writes it; tests/cli/settings-doc.sh checks that the
 * committed page is what the table says. */
#include <stdio.h>
#include <string.h>

#include "base/sys/settings.h"

static void cell(const char *s) {
  for (; *s; s++) {
    if (*s == '|') fputs("\\|", stdout);
    else putchar(*s);
  }
}

static void section(kio_setting_audience a, const char *title, const char *intro) {
  printf("\n## %s\n\n%s\n\n| variable | earlier name | what |\n|---|---|---|\n", title, intro);
  for (int i = 0; i < KIO_SET_COUNT; i++) {
    const kio_setting_info *s = kio_setting_describe((kio_setting)i);
    if (s->audience != a) continue;
    printf("| `%s` | %s%s%s | ", s->name, s->old_name ? "`" : "", s->old_name ? s->old_name : "",
           s->old_name ? "`" : "");
    cell(s->help);
    printf(" |\n");
  }
}

int main(void) {
  printf("# Environment variables\n\n"
         "Generated from `base/sys/settings.h` by `make settings-doc`; do not edit.\n"
         "Every variable is read once, when a program first needs it. An earlier name\n"
         "still works, with one WARNING naming the new one; a value that does not\n"
         "parse gives one WARNING and the default.\n");
  section(KIO_SET_FOR_USER, "For users", "Options of the programs are the first choice; these reach every job of a recipe at once.");
  section(KIO_SET_FOR_DEV, "For developers",
          "Measuring and debugging switches. Results never depend on them (except where the help says).");
  section(KIO_SET_FOR_TEST, "Test hooks",
          "Read only by test builds (`build/test-bin/`, the test suites); the programs in `gmmbin-gpu/` ignore them.");
  section(KIO_SET_FOR_EXTERNAL, "Other tools' variables", "Honoured as the tools that define them do.");
  return 0;
}
