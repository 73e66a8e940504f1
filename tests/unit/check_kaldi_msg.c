/* The table of Kaldi's messages (base/sys/kaldi-messages.def): well-formed
 * entries (levels, places, printf formats), no id or place twice, every id
 * used somewhere in the sources, and the lines KIO_KALDI prints. */
#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/sys/kaldi-msg.h"
#include "tests/lib/test-util.h"

/* The repository, seen from tests/data (the suites' working directory). */
#define TOP "../.."

/* A printf conversion at f (after '%'): its length, or 0 if not one we
 * allow (no %n, no '*' widths: the table's formats are plain). */
static size_t conversion(const char *f) {
  const char *p = f;
  while (*p && strchr("-+ #0", *p)) p++;
  while (isdigit((unsigned char)*p)) p++;
  if (*p == '.') {
    p++;
    while (isdigit((unsigned char)*p)) p++;
  }
  if (*p == 'h' || *p == 'l') p += p[1] == p[0] ? 2 : 1;
  else if (*p == 'z' || *p == 'j' || *p == 't' || *p == 'L') p++;
  if (!*p || !strchr("diouxXeEfgGcsp%", *p)) return 0;
  return (size_t)(p - f) + 1;
}

START_TEST(entries_well_formed) {
  ck_assert_int_gt(KIO_KM_COUNT, 50);
  for (int i = 0; i < KIO_KM_COUNT; i++) {
    const kio_kaldi_msg *m = &kio_kaldi_msgs[i];
    ck_assert_msg(m->id && m->id[0], "entry %d: no id", i);
    ck_assert_msg(m->level == KIO_LOG_INFO || m->level == KIO_LOG_WARNING ||
                      m->level == KIO_LOG_ERROR || m->level == KIO_LOG_ASSERT ||
                      m->level == KIO_KLV_VLOG1 || m->level == KIO_KLV_VLOG2,
                  "%s: level %d", m->id, m->level);
    ck_assert_msg(m->func[0] && !strpbrk(m->func, " ()"), "%s: function '%s'", m->id, m->func);
    size_t fl = strlen(m->file);
    ck_assert_msg(m->file[0] != '/' && fl > 3 &&
                      (!strcmp(m->file + fl - 3, ".cc") || !strcmp(m->file + fl - 2, ".h")),
                  "%s: file '%s'", m->id, m->file);
    ck_assert_msg(m->line >= 0, "%s: line %d", m->id, m->line);
    ck_assert_msg(m->fmt[0], "%s: empty format", m->id);
    for (const char *p = m->fmt; (p = strchr(p, '%')) != NULL;) {
      size_t n = conversion(p + 1);
      ck_assert_msg(n > 0, "%s: bad conversion at '%s'", m->id, p);
      p += 1 + n;
    }
  }
}
END_TEST

START_TEST(ids_and_places_once) {
  for (int i = 0; i < KIO_KM_COUNT; i++)
    for (int j = i + 1; j < KIO_KM_COUNT; j++) {
      const kio_kaldi_msg *a = &kio_kaldi_msgs[i], *b = &kio_kaldi_msgs[j];
      ck_assert_msg(strcmp(a->id, b->id), "id %s twice", a->id);
      ck_assert_msg(a->line == 0 || a->line != b->line || strcmp(a->file, b->file) ||
                        strcmp(a->func, b->func),
                    "%s and %s: the same place %s():%s:%d", a->id, b->id, a->func, a->file,
                    a->line);
    }
  /* tgraph_read_disambig prints any of these with CTG_DISAMBIG's format. */
  ck_assert_str_eq(kio_kaldi_msgs[KIO_KM_AE_DISAMBIG].fmt, kio_kmf_CTG_DISAMBIG);
  ck_assert_str_eq(kio_kaldi_msgs[KIO_KM_GA_DISAMBIG].fmt, kio_kmf_CTG_DISAMBIG);
  /* tgraph-bridge.cc prints the assertions' formats as they are. */
  ck_assert_ptr_null(strchr(kio_kmf_TGC_ASSERT_P2W, '%'));
  ck_assert_ptr_null(strchr(kio_kmf_TGC_ASSERT_CTX, '%'));
  ck_assert_ptr_null(strchr(kio_kmf_TGC_ASSERT_TRANS, '%'));
}
END_TEST

/* ---- every id used: the sources of the tree, searched for the ids ---- */
typedef struct { char *text; size_t len, cap; } buf;

static void add_file(buf *b, const char *path) {
  size_t n;
  unsigned char *t = tu_read_file(path, &n);
  if (!t) return;
  if (b->len + n + 2 > b->cap) {
    b->cap = (b->len + n + 2) * 2;
    b->text = realloc(b->text, b->cap);
    ck_assert_ptr_nonnull(b->text);
  }
  memcpy(b->text + b->len, t, n);
  b->len += n;
  b->text[b->len++] = '\n';
  b->text[b->len] = '\0';
  free(t);
}

static int is_source(const char *name) {
  const char *e = strrchr(name, '.');
  return e && (!strcmp(e, ".c") || !strcmp(e, ".cc") || !strcmp(e, ".cu") || !strcmp(e, ".h"));
}

static void add_tree(buf *b, const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    struct stat st;
    if (stat(path, &st) != 0) continue;
    if (S_ISDIR(st.st_mode)) add_tree(b, path);
    else if (is_source(e->d_name)) add_file(b, path);
  }
  closedir(d);
}

static int ident(char c) { return isalnum((unsigned char)c) || c == '_'; }

/* id as a word of its own (KIO_KALDI(ID, ...)) or as KIO_KM_ID. */
static int used(const char *text, const char *id) {
  size_t n = strlen(id);
  for (const char *p = text; (p = strstr(p, id)) != NULL; p += n) {
    if (ident(p[n])) continue;
    if (p == text || !ident(p[-1])) return 1;
    if (p - text >= 7 && !strncmp(p - 7, "KIO_KM_", 7) && (p - text == 7 || !ident(p[-8])))
      return 1;
  }
  return 0;
}

START_TEST(every_id_used) {
  static const char *const dirs[] = {"api", "base", "device", "fmllr", "gmmbin-gpu", "gpu-acc",
                                     "gpu-align", "gpu-feats", "gpu-service", "train",
                                     "train-graphs", "tree", "tools", "dev"};
  buf b = {0};
  for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) {
    char path[256];
    snprintf(path, sizeof path, TOP "/%s", dirs[i]);
    add_tree(&b, path);
  }
  ck_assert_msg(b.text && used(b.text, "kio_kaldi_logf"), "sources not found under " TOP);
  ck_assert(!used(b.text, "NO_SUCH_KALDI_MESSAGE"));  /* the search can fail */
  for (int i = 0; i < KIO_KM_COUNT; i++)
    ck_assert_msg(used(b.text, kio_kaldi_msgs[i].id), "%s is in the table but never printed",
                  kio_kaldi_msgs[i].id);
  free(b.text);
}
END_TEST

START_TEST(printed_as_kaldi) {
  kio_log_set_program("gmm-acc-stats-ali");
  tu_stderr_start();
  KIO_KALDI(ACC_NO_ALI, "utt1");
  KIO_KALDI(ACC_WRITTEN);
  KIO_KALDI_AS("apply-cmvn", APPLY_CMVN_DONE, 3L, 1L);
  KIO_KALDI(EQUAL_EMPTY_FST);
  kio_kaldi_print(KIO_KM_TGC_FAILED, "text");
  char *s = tu_stderr_end();
  const char *want =
      "WARNING (gmm-acc-stats-ali[" KIO_VERSION "]:main():gmm-acc-stats-ali.cc:79) "
         "No alignment for utterance utt1\n"
         "LOG (gmm-acc-stats-ali[" KIO_VERSION "]:main():gmm-acc-stats-ali.cc:123) Written accs.\n"
         "LOG (apply-cmvn[" KIO_VERSION "]:main():apply-cmvn.cc:162) Applied cepstral mean "
         "normalization to 3 utterances, errors on 1\n"
         "WARNING (gmm-acc-stats-ali[" KIO_VERSION "]:EqualAlign():fstext/fstext-utils-inl.h:872) "
         "Empty input fst.\n"
         "ERROR (gmm-acc-stats-ali[" KIO_VERSION "]:CompileGraphFromLG():"
         "training-graph-compiler.cc:0) text\n\n[ Stack-Trace: ]\n";
  ck_assert_msg(!strncmp(s, want, strlen(want)), "got:\n%s", s);
  free(s);
}
END_TEST

START_TEST(as_restores_thread_program) {
  kio_log_set_program("prog");
  tu_logcap_start();
  kio_log_set_thread_program("add-deltas");
  KIO_KALDI_AS("apply-cmvn", CMVN_NAN);
  ck_assert_str_eq(kio_log_thread_program(), "add-deltas");
  kio_log_set_thread_program(NULL);
  KIO_KALDI_AS("apply-cmvn", CMVN_NAN);
  ck_assert_ptr_null(kio_log_thread_program());
  ck_assert_int_eq(tu_cap.errors, 2);
  kio_log_set_handler(NULL, NULL);
}
END_TEST

int main(void) {
  Suite *s = suite_create("kaldi_msg");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, entries_well_formed);
  tcase_add_test(tc, ids_and_places_once);
  tcase_add_test(tc, every_id_used);
  tcase_add_test(tc, printed_as_kaldi);
  tcase_add_test(tc, as_restores_thread_program);
  suite_add_tcase(s, tc);
  return tu_run_suite(s);
}
