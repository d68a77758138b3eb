/* The HTTP server in-process: what an idle keep-alive connection keeps
 * resident (issue 25: at most nginx's), and that such connections are served
 * again and closed by lp_httpd_close. The server runs on its own thread and
 * loop; the clients are plain blocking sockets, which hold no memory of the
 * process, so the growth of its resident set is the server's. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>
#include <uv.h>

#include "lanepack/httpd.h"

/* each test drives a server with thousands of connections */
#define LP_TEST_TIMEOUT_S 120
#include "testutil.h"

/* Idle connections measured: enough that a page more or less is 2 bytes per
 * connection; fewer when the process may not open that many files. */
#define IDLE_CONNS 2000
/* Connections served before the baseline, as loadgen/idle-conns.py does, so
 * that pools and the read buffer are in the baseline, not in the growth. */
#define WARM_CONNS 64
/* The bound per idle connection, resident bytes: the record (296, the budget
 * httpd.c states), a slot in the timer heap and one in libuv's per-fd watcher
 * array (8 bytes each, up to twice that while an array is half grown; the
 * clients' sockets here take fd numbers too), and 30 bytes of margin. The
 * record before issue 25's change took a 400-byte chunk: over it. nginx holds
 * 440-520 per idle connection (doc/benchmarks.md). */
#define IDLE_CONN_BYTES_MAX 360

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0
#endif

typedef struct {
  uv_loop_t loop;
  uv_async_t stop;
  lp_httpd_t *srv;
  lp_httpd_shared_t count;
  int port;
  int answered;  /* requests answered (the server's thread) */
  int done;      /* lp_httpd_close's callback ran */
} server_t;

static void on_request(lp_http_req_t *req, void *ud) {
  server_t *s = ud;
  __atomic_add_fetch(&s->answered, 1, __ATOMIC_RELAXED);
  lp_http_respond(req, 200, NULL, "text/plain", "ok\n", 3);
}

static void on_closed(void *arg) {
  server_t *s = arg;
  s->done = 1;
}

static void on_stop(uv_async_t *a) {
  server_t *s = a->data;
  lp_httpd_close(s->srv, on_closed, s);
  uv_close((uv_handle_t *)&s->stop, NULL);
}

static void server_main(void *arg) {
  server_t *s = arg;
  uv_run(&s->loop, UV_RUN_DEFAULT);
}

static void server_start(server_t *s, uv_thread_t *th) {
  memset(s, 0, sizeof(*s));
  ck_assert_int_eq(uv_loop_init(&s->loop), 0);
  lp_httpd_config_t cfg;
  lp_httpd_config_default(&cfg);
  cfg.on_request = on_request;
  cfg.ud = s;
  cfg.max_connections = 100000;
  cfg.shared = &s->count;
  s->srv = lp_httpd_new(&s->loop, &cfg);
  ck_assert_ptr_nonnull(s->srv);
  ck_assert_int_eq(lp_httpd_listen(s->srv, "127.0.0.1:0", &s->port), 0);
  ck_assert_int_eq(uv_async_init(&s->loop, &s->stop, on_stop), 0);
  s->stop.data = s;
  ck_assert_int_eq(uv_thread_create(th, server_main, s), 0);
}

/* Closes the server from its thread; its loop must then end with nothing left. */
static void server_stop(server_t *s, uv_thread_t *th) {
  uv_async_send(&s->stop);
  ck_assert_int_eq(uv_thread_join(th), 0);
  ck_assert_int_eq(s->done, 1);
  ck_assert_int_eq(uv_loop_close(&s->loop), 0);
}

static int dial(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ck_assert_int_ge(fd, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ck_assert_int_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
  struct timeval tv = {.tv_sec = 10};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

static void send_get(int fd) {
  static const char req[] = "GET /x HTTP/1.1\r\nHost: t\r\n\r\n";
  ck_assert_int_eq(send(fd, req, sizeof(req) - 1, 0), (ssize_t)sizeof(req) - 1);
}

/* Reads one answer whole (its head and the 3-byte body); 1 if it is a 200. */
static int read_answer(int fd) {
  char buf[1024];
  size_t n = 0;
  for (;;) {
    ssize_t k = recv(fd, buf + n, sizeof(buf) - 1 - n, 0);
    if (k <= 0) return 0;
    n += (size_t)k;
    buf[n] = '\0';
    char *end = strstr(buf, "\r\n\r\n");
    if (end && n >= (size_t)(end + 4 - buf) + 3) break;
  }
  return strncmp(buf, "HTTP/1.1 200 ", 13) == 0;
}

/* n connections, each served one request and left open. */
static void open_served(int port, int *fds, int n) {
  for (int i = 0; i < n; i++) {
    fds[i] = dial(port);
    send_get(fds[i]);
  }
  for (int i = 0; i < n; i++) ck_assert_msg(read_answer(fds[i]), "connection %d: no 200", i);
}

static long resident_bytes(void) {
  long pages = 0, res = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  ck_assert_ptr_nonnull(f);
  ck_assert_int_eq(fscanf(f, "%ld %ld", &pages, &res), 2);
  fclose(f);
  return res * sysconf(_SC_PAGESIZE);
}

/* The resident set once it has not moved for a while (the server's thread may
 * still be finishing its last writes). */
static long settled_resident(void) {
  long last = resident_bytes();
  for (int i = 0; i < 20; i++) {
    usleep(50 * 1000);
    long now = resident_bytes();
    if (now == last) break;
    last = now;
  }
  return last;
}

static void wait_conns(server_t *s, size_t want) {
  for (int i = 0; i < 400 && __atomic_load_n(&s->count.conns, __ATOMIC_RELAXED) != want; i++)
    usleep(10 * 1000);
  ck_assert_uint_eq(__atomic_load_n(&s->count.conns, __ATOMIC_RELAXED), want);
}

START_TEST(idle_connection_bytes) {
  int n = IDLE_CONNS;
  struct rlimit rl;
  ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
  if (rl.rlim_cur < (rlim_t)(2 * n + 2 * WARM_CONNS + 64)) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    getrlimit(RLIMIT_NOFILE, &rl);
  }
  /* both ends of each connection are in this process */
  if (rl.rlim_cur < (rlim_t)(2 * n + 2 * WARM_CONNS + 64)) n = (int)(rl.rlim_cur - 2 * WARM_CONNS - 64) / 2;
  ck_assert_int_ge(n, 200);

  server_t s;
  uv_thread_t th;
  server_start(&s, &th);
  int warm[WARM_CONNS];
  for (int round = 0; round < 3; round++) {
    open_served(s.port, warm, WARM_CONNS);
    for (int i = 0; i < WARM_CONNS; i++) close(warm[i]);
    wait_conns(&s, 0);
  }
  int *fds = malloc((size_t)n * sizeof(*fds));
  ck_assert_ptr_nonnull(fds);
  long before = settled_resident();
  open_served(s.port, fds, n);
  wait_conns(&s, (size_t)n);
  long after = settled_resident();
  long per = (after - before) / n;
  printf("idle connections %d: resident %ld -> %ld bytes, %ld bytes per idle connection (bound %d%s)\n",
         n, before, after, per, IDLE_CONN_BYTES_MAX, UNDER_ASAN ? ", not held under ASan" : "");
  if (!UNDER_ASAN) /* ASan's allocator pads and quarantines every record */
    ck_assert_msg(per <= IDLE_CONN_BYTES_MAX, "%ld bytes per idle connection, more than %d", per,
                  IDLE_CONN_BYTES_MAX);

  /* idle, they are served again (each took its records back) */
  for (int i = 0; i < n; i += n / 16) {
    send_get(fds[i]);
    ck_assert_msg(read_answer(fds[i]), "connection %d: no second 200", i);
  }
  ck_assert_int_eq(__atomic_load_n(&s.answered, __ATOMIC_RELAXED), 3 * WARM_CONNS + n + 16);

  /* closing the server closes its idle connections at once (found without a
   * list of their own) */
  server_stop(&s, &th);
  for (int i = 0; i < n; i++) {
    char c;
    ck_assert_msg(recv(fds[i], &c, 1, 0) == 0, "connection %d still open after the server closed", i);
    close(fds[i]);
  }
  free(fds);
}
END_TEST

/* Connections opened and closed over and over (at a slab's edge, and across
 * many slabs) are all served, and the server ends clean. */
START_TEST(churn_served) {
  server_t s;
  uv_thread_t th;
  server_start(&s, &th);
  int fds[300];
  for (int round = 0; round < 5; round++) {
    int n = round % 2 ? 300 : 7;
    open_served(s.port, fds, n);
    for (int i = 0; i < n; i += 2) close(fds[i]); /* every other first: holes */
    for (int i = 1; i < n; i += 2) close(fds[i]);
    wait_conns(&s, 0);
  }
  server_stop(&s, &th);
}
END_TEST

LP_TEST_MAIN("httpd", idle_connection_bytes, churn_served)
