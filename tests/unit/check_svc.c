/* The GPU service's own bounds (gpu-service/service.c, device/svc-link.c),
 * with raw clients: a client that connects and says nothing neither keeps
 * the service past its idle time nor stops SIGTERM; a message whose header
 * claims more than the limit is refused before anything is allocated, one
 * under the limit costs only the bytes that arrive, a request whose count
 * of utterances its payload cannot hold allocates nothing; the job's end
 * gives up on a silent service after its timeout. The service runs in a
 * child process on its CPU test backend (gsvc_serve, use_cpu). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/model/model.h"
#include "base/sys/log.h"
#include "device/svc-internal.h"
#include "device/svc-link.h"
#include "gpu-service/gpu-service.h"
#include "tests/lib/test-util.h"

enum { MAGIC = 0x3153474b };

/* The service in a child: idle idle_s, stall 1 s. */
static pid_t start_service(const char *sock, int idle_s) {
  unlink(sock);
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    int nul = open("/dev/null", O_WRONLY);
    if (nul >= 0) dup2(nul, 2);  /* its LOG lines */
    gsvc_config cfg = {0};
    cfg.socket = sock;
    cfg.idle_s = idle_s;
    cfg.use_cpu = 1;
    cfg.stall_s = 1.0;
    _exit(gsvc_serve(&cfg));
  }
  for (int i = 0; i < 500 && access(sock, F_OK) != 0; i++) usleep(10000);
  return pid;
}

static int raw_connect(const char *sock) {
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un a;
  memset(&a, 0, sizeof a);
  a.sun_family = AF_UNIX;
  snprintf(a.sun_path, sizeof a.sun_path, "%s", sock);
  ck_assert_int_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
  return fd;
}

/* Waits up to limit_s for pid to exit; its status, or -1 if it did not. */
static int wait_exit(pid_t pid, double limit_s) {
  for (double t = 0; t < limit_s; t += 0.02) {
    int st;
    if (waitpid(pid, &st, WNOHANG) == pid) return st;
    usleep(20000);
  }
  return -1;
}

static void end_service(pid_t pid) {
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
}

/* Virtual memory of a process, kB. */
static long vm_size_kb(pid_t pid) {
  char p[64], line[256];
  snprintf(p, sizeof p, "/proc/%d/status", (int)pid);
  FILE *f = fopen(p, "r");
  long kb = -1;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "VmSize: %ld", &kb) == 1) break;
  if (f) fclose(f);
  return kb;
}

/* 1 once the peer closed (read returns 0 or an error) within limit_s. */
static int closed_within(int fd, double limit_s) {
  struct timeval tv = {(time_t)limit_s, (long)((limit_s - (double)(time_t)limit_s) * 1e6)};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char b[256];
  for (;;) {
    ssize_t r = read(fd, b, sizeof b);
    if (r == 0) return 1;
    if (r < 0) return errno != EAGAIN && errno != EWOULDBLOCK;
  }
}

static void send_header(int fd, uint32_t type, uint64_t len) {
  uint32_t h[4] = {MAGIC, type, (uint32_t)len, (uint32_t)(len >> 32)};
  ck_assert_int_eq(write(fd, h, sizeof h), (ssize_t)sizeof h);
}

START_TEST(silent_client_does_not_keep_it) {
  const char *sock = tu_tmp_path("silent.sock");
  pid_t pid = start_service(sock, 1);
  int fd = raw_connect(sock);
  /* idle 1 s + the HELLO's bound 1 s: gone well within 6 s */
  int st = wait_exit(pid, 6.0);
  if (st < 0) end_service(pid);
  ck_assert_msg(st >= 0, "a client that says nothing kept the service up");
  ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  ck_assert(closed_within(fd, 1.0));
  ck_assert_int_ne(access(sock, F_OK), 0);  /* its socket is gone */
  close(fd);
}
END_TEST

START_TEST(sigterm_stops_it_with_a_client_connected) {
  const char *sock = tu_tmp_path("term.sock");
  pid_t pid = start_service(sock, 30);
  int fd = raw_connect(sock);
  send_header(fd, KIO_SVC_HELLO, 1000);  /* a message begun, never finished */
  usleep(100000);
  kill(pid, SIGTERM);
  int st = wait_exit(pid, 3.0);
  if (st < 0) end_service(pid);
  ck_assert_msg(st >= 0, "SIGTERM did not stop the service");
  ck_assert_int_ne(access(sock, F_OK), 0);
  close(fd);
}
END_TEST

START_TEST(huge_claims_allocate_nothing) {
  const char *sock = tu_tmp_path("huge.sock");
  pid_t pid = start_service(sock, 30);
  long before = vm_size_kb(pid);
  /* over the limit: refused at once */
  int fd = raw_connect(sock);
  send_header(fd, KIO_SVC_HELLO, KIO_SVC_MAX_HELLO + 1);
  ck_assert_msg(closed_within(fd, 2.0), "a HELLO over the limit was not refused");
  close(fd);
  /* under the limit, 900 MB claimed, 64 kB sent: costs the bytes that came */
  fd = raw_connect(sock);
  send_header(fd, KIO_SVC_HELLO, (uint64_t)900 << 20);
  static char zeros[65536];
  ck_assert_int_eq(write(fd, zeros, sizeof zeros), (ssize_t)sizeof zeros);
  usleep(300000);
  long during = vm_size_kb(pid);
  ck_assert_msg(during - before < 200 * 1024, "VmSize grew by %ld kB for 64 kB received",
                during - before);
  ck_assert_msg(closed_within(fd, 3.0), "a stalled message was not dropped");
  close(fd);
  /* the service still serves: an honest client gets its READY */
  kio_msg m = {0};
  kio_msg_put_u32(&m, KIO_SVC_PROTOCOL);
  kio_msg_put_u32(&m, 77);  /* no such kind: refused, but answered */
  fd = raw_connect(sock);
  send_header(fd, KIO_SVC_HELLO, m.total);
  ck_assert_int_eq(write(fd, m.buf, m.len), (ssize_t)m.len);
  uint32_t h[4];
  ck_assert_int_eq(read(fd, h, sizeof h), (ssize_t)sizeof h);
  ck_assert_int_eq(h[1], KIO_SVC_READY);
  close(fd);
  /* a job of another protocol: refused, and told why (its own LOG line) */
  kio_msg_reset(&m);
  kio_msg_put_u32(&m, KIO_SVC_PROTOCOL - 1);
  kio_msg_put_u32(&m, KIO_SVC_KIND_ALIGN);
  fd = raw_connect(sock);
  send_header(fd, KIO_SVC_HELLO, m.total);
  ck_assert_int_eq(write(fd, m.buf, m.len), (ssize_t)m.len);
  ck_assert_int_eq(read(fd, h, sizeof h), (ssize_t)sizeof h);
  ck_assert_int_eq(h[1], KIO_SVC_READY);
  uint64_t rlen = (uint64_t)h[2] | ((uint64_t)h[3] << 32);
  char *ready = calloc(1, rlen + 1);
  ck_assert_ptr_nonnull(ready);
  size_t got = 0;
  while (got < rlen) {
    ssize_t k = read(fd, ready + got, rlen - got);
    ck_assert_int_gt(k, 0);
    got += (size_t)k;
  }
  ck_assert_int_ne(*(int32_t *)ready, 0);
  ck_assert_msg(memmem(ready, rlen, "protocol", 8) != NULL, "no protocol in the refusal");
  free(ready);
  close(fd);
  kio_msg_free(&m);
  end_service(pid);
}
END_TEST

/* An ALIGN request whose count of utterances its payload cannot hold: the
 * connection is dropped before per-utterance arrays are allocated. */
START_TEST(huge_count_allocates_nothing) {
  const char *sock = tu_tmp_path("count.sock");
  pid_t pid = start_service(sock, 30);
  kio_tmodel tm;
  kio_am_gmm am;
  memset(&tm, 0, sizeof tm);
  memset(&am, 0, sizeof am);
  ck_assert_int_eq(kio_model_read("models/mono/final.mdl", &tm, &am), KIO_OK);
  char *model;
  size_t mlen;
  ck_assert_int_eq(kio_model_to_bytes(&tm, &am, &model, &mlen), KIO_OK);
  kio_msg m = {0};
  kio_msg_put_u32(&m, KIO_SVC_PROTOCOL);
  kio_msg_put_u32(&m, KIO_SVC_KIND_ALIGN);
  kio_msg_put_f32(&m, 30.0f);  /* the job's timeout */
  const float opts[5] = {10, 40, 1, 0.1f, 0.1f};
  for (int i = 0; i < 5; i++) kio_msg_put_f32(&m, opts[i]);
  kio_msg_put_i32(&m, 0);
  kio_msg_put_arr(&m, model, mlen, 1);
  ck_assert(!m.failed);
  int fd = raw_connect(sock);
  send_header(fd, KIO_SVC_HELLO, m.total);
  ck_assert_int_eq(write(fd, m.buf, m.len), (ssize_t)m.len);
  uint32_t h[4];
  ck_assert_int_eq(read(fd, h, sizeof h), (ssize_t)sizeof h);
  ck_assert_int_eq(h[1], KIO_SVC_READY);
  uint64_t len = (uint64_t)h[2] | ((uint64_t)h[3] << 32);
  char *ready = malloc(len);
  ck_assert_int_eq(read(fd, ready, len), (ssize_t)len);
  ck_assert_int_eq(*(int32_t *)ready, 0);
  free(ready);
  long before = vm_size_kb(pid);
  uint32_t req[4] = {1u << 24, 0, 0, 0};  /* 16M utterances in 16 bytes */
  send_header(fd, KIO_SVC_ALIGN, sizeof req);
  ck_assert_int_eq(write(fd, req, sizeof req), (ssize_t)sizeof req);
  ck_assert_msg(closed_within(fd, 2.0), "a malformed request was not refused");
  long after = vm_size_kb(pid);
  ck_assert_msg(after - before < 200 * 1024, "VmSize grew by %ld kB", after - before);
  close(fd);
  kio_msg_free(&m);
  free(model);
  kio_tmodel_free(&tm);
  kio_am_gmm_free(&am);
  end_service(pid);
}
END_TEST

/* The job's end: a service that accepts and never answers is given up
 * after the timeout, with a reason for the job's LOG line. */
START_TEST(job_gives_up_on_a_silent_service) {
  const char *sock = tu_tmp_path("mute.sock");
  unlink(sock);
  int lfd = kio_svc_listen(sock, NULL, 0);
  ck_assert_int_ge(lfd, 0);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un a;
  memset(&a, 0, sizeof a);
  a.sun_family = AF_UNIX;
  snprintf(a.sun_path, sizeof a.sun_path, "%s", sock);
  ck_assert_int_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
  kio_svc *s = kio_svc_wrap(fd, 0);
  ck_assert_ptr_nonnull(s);
  kio_svc_set_timeouts(s, 1.0, 1.0);
  kio_msg_reader rd;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  ck_assert_int_eq(kio_svc_recv(s, 0, NULL, &rd), KIO_ERR);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double dt = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  ck_assert_msg(dt > 0.9 && dt < 3.0, "waited %.2f s", dt);
  ck_assert_str_eq(kio_svc_error(s), "no sign of life from the GPU service for 1 s");
  kio_svc_close(s);
  close(lfd);
}
END_TEST

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  Suite *s = suite_create("svc");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, silent_client_does_not_keep_it);
  tcase_add_test(tc, sigterm_stops_it_with_a_client_connected);
  tcase_add_test(tc, huge_claims_allocate_nothing);
  tcase_add_test(tc, huge_count_allocates_nothing);
  tcase_add_test(tc, job_gives_up_on_a_silent_service);
  suite_add_tcase(s, tc);
  return tu_run_suite(s);
}
