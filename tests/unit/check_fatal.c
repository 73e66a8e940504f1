/* Fatal errors (base/io/output.c, base/io/io.h): what becomes of the outputs when a
 * program dies of one. Regular files are removed (open or closed, through a
 * symbolic link, never a file that replaced ours), output pipes' commands
 * are killed before they see the end of their input (gzip leaves no valid
 * stream), standard output gets the archive's "entry cut short" mark that
 * readers reject; kio_fatal_exit exits 255; a process that dies of a signal
 * takes its pipes' commands with it (their guard kills them); a vanished
 * reader is a write error, not SIGPIPE.
 * Everything that abandons outputs runs in a child process (fork), so the
 * suite's own process keeps its outputs whatever Check's fork mode. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/io/io.h"
#include "base/sys/log.h"
#include "base/io/table.h"
#include "tests/lib/test-util.h"

#define ALI_ARK "kaldi/mono/ali.ark"

static int exists(const char *p) {
  struct stat st;
  return lstat(p, &st) == 0;
}

/* Runs fn in a child; returns its wait status. */
static int in_child(void (*fn)(void *), void *arg) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    fn(arg);
    _exit(0);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  return st;
}

/* Some bytes gzip compresses into several blocks (not all in its buffers). */
static void write_bulk(FILE *f) {
  unsigned x = 12345;
  for (int i = 0; i < 400000; i++) {
    x = x * 1103515245u + 12345u;
    fprintf(f, "%u ", x >> 8);
  }
  fflush(f);
}

typedef struct { const char *open_f, *closed_f, *replaced_f, *link_f, *target_f, *gz, *ok_gz; } paths;

static void abandon_kinds_child(void *arg) {
  const paths *p = arg;
  kio_output *a, *b, *c, *l, *g, *n;
  if (kio_output_open(&a, p->open_f, 1, 1) != KIO_OK) _exit(10);
  fputs("partial", kio_output_stream(a));
  if (kio_output_open(&b, p->closed_f, 1, 1) != KIO_OK) _exit(11);
  if (kio_output_close(b) != KIO_OK) _exit(12);
  if (kio_output_open(&c, p->replaced_f, 0, 0) != KIO_OK) _exit(13);
  if (kio_output_close(c) != KIO_OK) _exit(14);
  /* someone else's file now has that name: it must stay */
  char tmp[600];
  snprintf(tmp, sizeof tmp, "%s.new", p->replaced_f);
  FILE *o = fopen(tmp, "w");
  fputs("not ours", o);
  fclose(o);
  if (rename(tmp, p->replaced_f) != 0) _exit(15);
  if (kio_output_open(&l, p->link_f, 0, 0) != KIO_OK) _exit(16);
  char wx[700];
  snprintf(wx, sizeof wx, "| gzip -c > %s", p->gz);
  if (kio_output_open(&g, wx, 0, 0) != KIO_OK) _exit(17);
  write_bulk(kio_output_stream(g));
  if (kio_output_open(&n, "/dev/null", 0, 0) != KIO_OK) _exit(18);
  /* a pipe closed before: complete, and left so */
  kio_output *ok;
  snprintf(wx, sizeof wx, "| gzip -c > %s", p->ok_gz);
  if (kio_output_open(&ok, wx, 0, 0) != KIO_OK) _exit(19);
  write_bulk(kio_output_stream(ok));
  if (kio_output_close(ok) != KIO_OK) _exit(20);
  kio_outputs_abandon();
  /* closing after the abandon: the killed command is an error, nothing hangs */
  tu_logcap_start();
  if (kio_output_close(g) != KIO_ERR) _exit(21);
  _exit(0);
}

START_TEST(abandon_each_kind) {
  paths p = { tu_tmp_path("open.ark"), tu_tmp_path("closed.ark"), tu_tmp_path("replaced.ark"),
              tu_tmp_path("link.ark"), tu_tmp_path("target.ark"), tu_tmp_path("out.gz"),
              tu_tmp_path("ok.gz") };
  unlink(p.link_f);
  ck_assert_int_eq(symlink(p.target_f, p.link_f), 0);
  int st = in_child(abandon_kinds_child, &p);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %d", st);
  ck_assert(!exists(p.open_f));
  ck_assert(!exists(p.closed_f));
  ck_assert(exists(p.replaced_f));
  ck_assert(!exists(p.target_f));  /* the file written, not the link */
  ck_assert(exists("/dev/null"));
  ck_assert(exists(p.gz));
  char cmd[700];
  snprintf(cmd, sizeof cmd, "gunzip -t %s", p.gz);
  char *out = NULL;
  ck_assert_int_ne(tu_run(cmd, &out), 0);
  ck_assert_msg(strstr(out, "unexpected end of file"), "%s", out);
  free(out);
  snprintf(cmd, sizeof cmd, "gunzip -t %s", p.ok_gz);
  ck_assert_int_eq(tu_run(cmd, NULL), 0);
}
END_TEST

/* Standard output: the archive's entries, then the mark; our reader (as
 * Kaldi's) takes the entries and fails at the mark. */
typedef struct { const char *spec, *stdout_f; } mark_args;

static void mark_child(void *arg) {
  const mark_args *m = arg;
  int fd = open(m->stdout_f, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0 || dup2(fd, 1) < 0) _exit(10);
  kio_log_set_program("prog-x");
  kio_seq_reader *r;
  kio_writer *w;
  if (kio_seq_open(&r, "ark:" ALI_ARK, &kio_int_vec_holder) != KIO_OK) _exit(11);
  if (kio_writer_open(&w, m->spec, &kio_int_vec_holder) != KIO_OK) _exit(12);
  for (int i = 0; i < 3; i++, kio_seq_next(r))
    if (kio_writer_write(w, kio_seq_key(r), kio_seq_value(r)) != KIO_OK) _exit(13);
  kio_outputs_abandon();
  _exit(0);
}

START_TEST(stdout_archive_is_marked) {
  const char *specs[] = { "ark:-", "ark,t:-" };
  for (int i = 0; i < 2; i++) {
    mark_args m = { specs[i], tu_tmp_path("stdout.ark") };
    int st = in_child(mark_child, &m);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %d", st);
    size_t n;
    unsigned char *b = tu_read_file(m.stdout_f, &n);
    const char mark[] = "\nprog-x:fatal-error:incomplete-output \0";
    ck_assert_uint_gt(n, sizeof mark);
    ck_assert_msg(memcmp(b + n - (sizeof mark - 1), mark, sizeof mark - 1) == 0,
                  "%s: no mark at the end", specs[i]);
    free(b);
    char rs[600];
    snprintf(rs, sizeof rs, "ark:%s", m.stdout_f);
    tu_logcap_start();
    kio_seq_reader *r;
    ck_assert_int_eq(kio_seq_open(&r, rs, &kio_int_vec_holder), KIO_OK);
    int got = 0;
    for (; !kio_seq_done(r); kio_seq_next(r)) got++;
    ck_assert_int_eq(got, 3);
    ck_assert_int_eq(kio_seq_close(r), KIO_ERR);
    ck_assert_msg(strstr(tu_cap.last_error, "prog-x:fatal-error:incomplete-output"), "%s",
                  tu_cap.last_error);
    kio_log_set_handler(NULL, NULL);
  }
}
END_TEST

/* kio_fatal_exit: status 255, outputs abandoned, stdout flushed first. */
static void fatal_child(void *arg) {
  const char *f = arg;
  kio_output *o;
  if (kio_output_open(&o, f, 1, 1) != KIO_OK) _exit(10);
  kio_fatal_exit();
}

START_TEST(fatal_exit_status) {
  const char *f = tu_tmp_path("fatal.ark");
  int st = in_child(fatal_child, (void *)f);
  ck_assert(WIFEXITED(st));
  ck_assert_int_eq(WEXITSTATUS(st), 255);
  ck_assert(!exists(f));
}
END_TEST

/* Dying of SIGTERM (no handler of ours runs): the pipe's guard sees us go
 * without "done" and kills the command, so its stream stays incomplete. */
static void signal_child(void *arg) {
  const char *gz = arg;
  signal(SIGTERM, SIG_DFL);  /* Check's runner catches it; a program does not */
  char wx[700];
  snprintf(wx, sizeof wx, "| gzip -c > %s", gz);
  kio_output *g;
  if (kio_output_open(&g, wx, 0, 0) != KIO_OK) _exit(10);
  write_bulk(kio_output_stream(g));
  raise(SIGTERM);
  _exit(11);
}

START_TEST(signal_kills_pipe_groups) {
  const char *gz = tu_tmp_path("sig.gz");
  int st = in_child(signal_child, (void *)gz);
  ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM, "child status %d", st);
  usleep(100000);  /* the killed gzip has no way to write, but let it go */
  char cmd[700];
  snprintf(cmd, sizeof cmd, "gunzip -t %s", gz);
  ck_assert_int_ne(tu_run(cmd, NULL), 0);
}
END_TEST

/* A pipe whose reader is gone: the writes fail (EPIPE), the process lives,
 * close reports it; the table writer reports the write failure. */
START_TEST(vanished_reader_is_a_write_error) {
  tu_logcap_start();
  kio_output *o;
  ck_assert_int_eq(kio_output_open(&o, "| exit 0", 0, 0), KIO_OK);
  usleep(100000);
  write_bulk(kio_output_stream(o));
  ck_assert(ferror(kio_output_stream(o)));
  ck_assert_int_eq(kio_output_close(o), KIO_ERR);
  kio_writer *w;
  ck_assert_int_eq(kio_writer_open(&w, "ark,t:| exit 0", &kio_int_vec_holder), KIO_OK);
  usleep(100000);
  int32_t v[20000] = {0};
  kio_int_vec iv = { 20000, v };
  int rc = KIO_OK;
  for (int i = 0; i < 10 && rc == KIO_OK; i++) rc = kio_writer_write(w, "k", &iv);
  ck_assert_int_eq(rc, KIO_ERR);
  ck_assert_str_eq(tu_cap.last_error, "Write failure to | exit 0 (key k)");
  ck_assert_int_eq(kio_writer_close(w), KIO_ERR);
  kio_log_set_handler(NULL, NULL);
}
END_TEST

/* A writer discarded (its inputs failed): a file is removed, a pipe's
 * command killed, nothing written to either as if complete. */
START_TEST(writer_discard) {
  const char *f = tu_tmp_path("discard.ark"), *gz = tu_tmp_path("discard.gz");
  char spec[700];
  snprintf(spec, sizeof spec, "ark:%s", f);
  kio_writer *w;
  ck_assert_int_eq(kio_writer_open(&w, spec, &kio_int_vec_holder), KIO_OK);
  int32_t v[3] = {1, 2, 3};
  kio_int_vec iv = { 3, v };
  ck_assert_int_eq(kio_writer_write(w, "a", &iv), KIO_OK);
  kio_writer_discard(w);
  ck_assert(!exists(f));
  snprintf(spec, sizeof spec, "ark:| gzip -c > %s", gz);
  ck_assert_int_eq(kio_writer_open(&w, spec, &kio_int_vec_holder), KIO_OK);
  ck_assert_int_eq(kio_writer_write(w, "a", &iv), KIO_OK);
  kio_writer_discard(w);
  char cmd[700];
  snprintf(cmd, sizeof cmd, "gunzip -t %s", gz);
  ck_assert_int_ne(tu_run(cmd, NULL), 0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("fatal");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, abandon_each_kind);
  tcase_add_test(tc, stdout_archive_is_marked);
  tcase_add_test(tc, fatal_exit_status);
  tcase_add_test(tc, signal_kills_pipe_groups);
  tcase_add_test(tc, vanished_reader_is_a_write_error);
  tcase_add_test(tc, writer_discard);
  suite_add_tcase(s, tc);
  return tu_run_suite(s);
}
