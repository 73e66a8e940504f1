/* rspecifier / wspecifier grammar (reference 1.6, Kaldi's Classify*specifier):
 * valid forms with their options and filenames, and invalid forms. */
#include <string.h>

#include "base/sys/log.h"
#include "base/io/table.h"
#include "tests/lib/test-util.h"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

START_TEST(rspecifier_table) {
  struct { const char *s; int ok; kio_spec_kind k; int o, sorted, cs, p, bg; const char *fn; } t[] = {
    {"ark:foo.ark", 1, KIO_SPEC_ARCHIVE, 0, 0, 0, 0, 0, "foo.ark"},
    {"scp:foo.scp", 1, KIO_SPEC_SCRIPT, 0, 0, 0, 0, 0, "foo.scp"},
    {"ark,s,cs:-", 1, KIO_SPEC_ARCHIVE, 0, 1, 1, 0, 0, "-"},
    {"ark:gunzip -c graphs/mono.fsts.gz|", 1, KIO_SPEC_ARCHIVE, 0, 0, 0, 0, 0,
     "gunzip -c graphs/mono.fsts.gz|"},
    {"o,s,p,bg,scp:a:b", 1, KIO_SPEC_SCRIPT, 1, 1, 0, 1, 1, "a:b"},
    {"ark,o,no,s,ns,cs,ncs,p,np,b,t:x", 1, KIO_SPEC_ARCHIVE, 0, 0, 0, 0, 0, "x"},
    {"ark:", 1, KIO_SPEC_ARCHIVE, 0, 0, 0, 0, 0, ""},
    {"ark foo", 0}, {"foo.ark", 0}, {"ark,scp:a", 0}, {"ark,ark:a", 0}, {"scp,scp:a", 0},
    {"ark,x:a", 0}, {"ark,,s:a", 0}, {"ark:a ", 0}, {"b,t:a", 0}, {":a", 0}, {"f,ark:a", 0},
    {"ark, s:a", 0}, {"", 0},
  };
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
    kio_rspec r;
    int ret = kio_parse_rspecifier(t[i].s, &r);
    ck_assert_msg((ret == KIO_OK) == t[i].ok, "'%s'", t[i].s);
    if (!t[i].ok) {
      ck_assert_int_eq(r.kind, KIO_SPEC_INVALID);
      continue;
    }
    ck_assert_msg(r.kind == t[i].k && r.once == t[i].o && r.sorted == t[i].sorted &&
                  r.called_sorted == t[i].cs && r.permissive == t[i].p &&
                  r.background == t[i].bg, "'%s'", t[i].s);
    ck_assert_str_eq(r.filename, t[i].fn);
  }
}
END_TEST

START_TEST(wspecifier_table) {
  struct { const char *s; int ok; kio_spec_kind k; int b, f, p; const char *ark, *scp; } t[] = {
    {"ark:a.ark", 1, KIO_SPEC_ARCHIVE, 1, 0, 0, "a.ark", ""},
    {"ark,t:-", 1, KIO_SPEC_ARCHIVE, 0, 0, 0, "-", ""},
    {"scp:a.scp", 1, KIO_SPEC_SCRIPT, 1, 0, 0, "", "a.scp"},
    {"ark,scp:a.ark,a.scp", 1, KIO_SPEC_BOTH, 1, 0, 0, "a.ark", "a.scp"},
    {"ark,scp,t,f:a.ark,b,c.scp", 1, KIO_SPEC_BOTH, 0, 1, 0, "a.ark", "b,c.scp"},
    {"t,b,f,nf,p,ark:| gzip -c > x.gz", 1, KIO_SPEC_ARCHIVE, 1, 0, 1, "| gzip -c > x.gz", ""},
    {"ark,t:kaldi/mono/scores.txt", 1, KIO_SPEC_ARCHIVE, 0, 0, 0, "kaldi/mono/scores.txt", ""},
    {"scp,ark:a,b", 0}, {"ark,scp:a.ark", 0}, {"ark,ark:a", 0}, {"scp,scp:a", 0},
    {"ark,s:a", 0}, {"ark,o:a", 0}, {"ark:a\n", 0}, {"a.ark", 0}, {"t:a", 0}, {"ark,,t:a", 0},
  };
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
    kio_wspec w;
    int ret = kio_parse_wspecifier(t[i].s, &w);
    ck_assert_msg((ret == KIO_OK) == t[i].ok, "'%s'", t[i].s);
    if (!t[i].ok) continue;
    ck_assert_msg(w.kind == t[i].k && w.binary == t[i].b && w.flush == t[i].f &&
                  w.permissive == t[i].p, "'%s'", t[i].s);
    ck_assert_str_eq(w.archive, t[i].ark);
    ck_assert_str_eq(w.script, t[i].scp);
  }
}
END_TEST

int main(void) {
  Suite *s = suite_create("specifier");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, rspecifier_table);
  tcase_add_test(tc, wspecifier_table);
  suite_add_tcase(s, tc);
  return tu_run_suite(s);
}
