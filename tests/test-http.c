#define _GNU_SOURCE /* strcasestr, memmem */
/* HTTP/1.1 done right, against the real proxy: hang-ups noticed while a
 * request waits, a slow reader of a long answer neither cut by the idle timer
 * nor by a drain, a client that never reads bounded, Upgrade ignored, CONNECT
 * answered once, 100 Continue never dropped, RFC 9112's Host, version and
 * transfer-coding rules, chunk extensions bounded. */
#include <check.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "testutil.h"
#include "lanepack/buf.h"
#include "lanepack/emu.h"
#include "lanepack/jscan.h"

typedef h_stack_t stack_t_;

static void start(stack_t_ *s, const char *emu_args, const char *top, const char *model) {
  ck_assert_int_eq(h_stack_start(s, emu_args, top, model), 0);
}

static void stop(stack_t_ *s) { ck_assert_int_eq(h_stack_stop(s), 0); }

/* The whole of one raw exchange: sends req, reads for ms. */
static char *exchange(int port, const char *req, int ms, size_t *n) {
  int fd = h_connect(port);
  ck_assert_int_ge(fd, 0);
  h_send_all(fd, req, strlen(req));
  char *out = h_read_for(fd, ms, n);
  close(fd);
  return out;
}

/* Occurrences of needle at the start of a line: status lines, not message text. */
static int count(const char *hay, const char *needle) {
  int k = 0;
  for (const char *p = hay; (p = strstr(p, needle)) != NULL; p++) k += p == hay || p[-1] == '\n';
  return k;
}

static const char *one_tok = "{\"input_ids\": [5, 6, 7]}";

/* {"inputs": [...]} of k copies of t[0..n): a long answer. */
static void inputs_body(lp_buf_t *b, const int32_t *t, size_t n, int k) {
  lp_buf_puts(b, "{\"inputs\": [");
  for (int i = 0; i < k; i++) {
    if (i) lp_buf_puts(b, ",");
    lp_buf_i32_array(b, t, n);
  }
  lp_buf_puts(b, "]}");
}

/* A connection with a small receive window, so answers back up in the proxy. */
static int small_window(int port) {
  int fd = h_connect(port);
  int small = 65536;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
  return fd;
}

/* ---- the tests ---- */

START_TEST(rfc9112_rules) {
  stack_t_ s;
  start(&s, "--shapes 4x64 --cost-ms 1", "", "\"shapes\": \"4x64\", \"max_wait_ms\": 1");
  static const struct {
    const char *req;
    const char *status;
  } cases[] = {
      {"GET /healthz HTTP/1.1\r\n\r\n", "HTTP/1.1 400"},                           /* no Host */
      {"GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", "HTTP/1.1 400"},      /* two */
      {"GET /healthz HTTP/1.0\r\n\r\n", "HTTP/1.1 200"},                           /* 1.0 needs none */
      {"GET /healthz HTTP/2.0\r\nHost: a\r\n\r\n", "HTTP/1.1 505"},
      {"GET /healthz HTTP/3.1\r\nHost: a\r\n\r\n", "HTTP/1.1 505"},
      {"GET /healthz HTTP/1.1\rHost: a\r\n\r\n", "HTTP/1.1 400"},                  /* bare CR */
      {"POST /v1/infer HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
       "HTTP/1.1 501"},
      {"POST /v1/infer HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n", "HTTP/1.1 501"},
      {"POST /v1/infer HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n"
       "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "HTTP/1.1 400"}, /* chunked twice */
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    size_t n;
    char *out = exchange(s.port, cases[i].req, 1000, &n);
    ck_assert_msg(strncmp(out, cases[i].status, strlen(cases[i].status)) == 0, "case %zu: %s", i, out);
    ck_assert_msg(count(out, "HTTP/1.1 ") == 1, "case %zu: more than one answer: %s", i, out);
    if (cases[i].status[9] != '2') ck_assert_msg(strstr(out, "\"error\""), "case %zu: %s", i, out);
    free(out);
  }
  /* JSON keys compare by their decoded text */
  {
    h_resp_t r;
    ck_assert_int_eq(h_call(s.port, "POST", "/v1/infer", "", "{\"\\u0069nput_ids\": [5, 6, 7]}", &r), 0);
    ck_assert_msg(r.status == 200, "escaped key: %d %s", r.status, r.body);
    h_resp_free(&r);
    ck_assert_int_eq(h_call(s.port, "POST", "/v1/infer", "", "{\"input_ids\": [1], \"\\u0069nput_ids\": [2]}", &r), 0);
    ck_assert_msg(r.status == 400 && strstr(r.body, "duplicate_field"), "%d %s", r.status, r.body);
    h_resp_free(&r);
  }
  /* chunked with a small extension is fine; one past the header limit is not */
  char req[256];
  snprintf(req, sizeof(req),
           "POST /v1/infer HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n%zx;k=v\r\n%s\r\n0\r\n\r\n",
           strlen(one_tok), one_tok);
  size_t n;
  char *out = exchange(s.port, req, 2000, &n);
  ck_assert_msg(strncmp(out, "HTTP/1.1 200", 12) == 0, "%s", out);
  free(out);
  lp_buf_t big;
  lp_buf_init(&big);
  lp_buf_puts(&big, "POST /v1/infer HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3;x=");
  for (int i = 0; i < 40000; i++) lp_buf_puts(&big, "a");
  lp_buf_puts(&big, "\r\n[1]\r\n0\r\n\r\n");
  lp_buf_cstr(&big);
  out = exchange(s.port, big.data, 2000, &n);
  ck_assert_msg(strncmp(out, "HTTP/1.1 400", 12) == 0 && strstr(out, "chunk_extensions_too_large"),
                "%.300s", out);
  free(out);
  lp_buf_free(&big);
  stop(&s);
}
END_TEST

START_TEST(upgrade_ignored_connect_answered_once) {
  stack_t_ s;
  start(&s, "--shapes 4x64 --cost-ms 1", "", "\"shapes\": \"4x64\"");
  size_t n;
  /* Upgrade: answered as plain HTTP, and the request behind it too */
  char *out = exchange(s.port,
                       "GET /healthz HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"
                       "GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n", 800, &n);
  ck_assert_msg(count(out, "HTTP/1.1 200") == 2 && count(out, "HTTP/1.1 ") == 2, "%s", out);
  free(out);
  /* with a body, and a POST behind it */
  char req[512];
  snprintf(req, sizeof(req),
           "POST /v1/infer HTTP/1.1\r\nHost: a\r\nConnection: upgrade\r\nUpgrade: h2c\r\n"
           "Content-Length: %zu\r\n\r\n%sGET /healthz HTTP/1.1\r\nHost: a\r\n\r\n", strlen(one_tok), one_tok);
  out = exchange(s.port, req, 1500, &n);
  ck_assert_msg(count(out, "HTTP/1.1 200") == 2 && count(out, "HTTP/1.1 ") == 2, "%s", out);
  free(out);
  /* CONNECT: one answer, then the connection closes */
  out = exchange(s.port, "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n", 1500, &n);
  ck_assert_msg(count(out, "HTTP/1.1 ") == 1 && strncmp(out, "HTTP/1.1 405", 12) == 0, "%s", out);
  free(out);
  stop(&s);
}
END_TEST

/* A request on a connection that will close, or held in a full pipeline: the
 * client hangs up while it waits, and it is never sent upstream. */
START_TEST(hangup_while_queued_is_noticed) {
  stack_t_ s;
  start(&s, "--shapes 4x64 --cost-ms 1500", "\"max_pipeline\": 1,",
        "\"shapes\": \"4x64\", \"max_wait_ms\": 0, \"max_inflight\": 1, \"max_segments_per_lane\": 1");
  char req[256];
  snprintf(req, sizeof(req), "POST /v1/infer HTTP/1.1\r\nHost: a\r\nContent-Length: %zu\r\n\r\n%s",
           strlen(one_tok), one_tok);
  /* four fill the one batch the backend runs for 1.5 s */
  int busy[4];
  for (int i = 0; i < 4; i++) {
    busy[i] = h_connect(s.port);
    h_send_all(busy[i], req, strlen(req));
  }
  usleep(200000);
  /* Connection: close, then gone */
  char closing[300];
  snprintf(closing, sizeof(closing),
           "POST /v1/infer HTTP/1.1\r\nHost: a\r\nConnection: close\r\nContent-Length: %zu\r\n\r\n%s",
           strlen(one_tok), one_tok);
  int a = h_connect(s.port);
  h_send_all(a, closing, strlen(closing));
  /* HTTP/1.0, then gone */
  char old[300];
  snprintf(old, sizeof(old), "POST /v1/infer HTTP/1.0\r\nContent-Length: %zu\r\n\r\n%s", strlen(one_tok),
           one_tok);
  int b = h_connect(s.port);
  h_send_all(b, old, strlen(old));
  /* two pipelined past max_pipeline 1, then gone */
  int c = h_connect(s.port);
  h_send_all(c, req, strlen(req));
  h_send_all(c, req, strlen(req));
  usleep(200000);
  close(a);
  close(b);
  close(c);
  /* the busy batch ends, then nothing else may be sent */
  for (int i = 0; i < 4; i++) {
    h_resp_t r;
    ck_assert_int_eq(h_read_response(busy[i], &r, 5000), 0);
    ck_assert_int_eq(r.status, 200);
    h_resp_free(&r);
    close(busy[i]);
  }
  usleep(600000);
  /* only the four busy requests' tokens (3 each) ever went upstream */
  double real = h_metric(s.port, "lanepack_tokens_total{model=\"m\",kind=\"real\"}");
  double queued = h_metric(s.port, "lanepack_queue_sequences{");
  ck_assert_msg(real == 12, "%.0f tokens sent: a hung-up client's request was sent", real);
  ck_assert_msg(queued == 0, "%.0f still queued", queued);
  stop(&s);
}
END_TEST

/* A long answer read slowly: idleness counts from the last byte moved, and a
 * drain waits for the last byte before closing. */
START_TEST(slow_reader_not_cut) {
  stack_t_ s;
  start(&s, "--shapes 8x1024 --cost-ms 1", "\"idle_timeout_ms\": 400, \"drain_timeout_ms\": 20000,",
        "\"shapes\": \"8x1024\", \"max_wait_ms\": 1");
  /* 512 sequences of 1,000 tokens: an answer of several megabytes */
  enum { K = 512, L = 1000 };
  static int32_t tok[K][L];
  for (int i = 0; i < K; i++)
    for (int j = 0; j < L; j++) tok[i][j] = (int32_t)((i * 7919 + j * 104729) % 30000);
  lp_buf_t body;
  lp_buf_init(&body);
  lp_buf_puts(&body, "{\"inputs\": [");
  for (int i = 0; i < K; i++) {
    if (i) lp_buf_puts(&body, ",");
    lp_buf_i32_array(&body, tok[i], L);
  }
  lp_buf_puts(&body, "]}");
  int fd = small_window(s.port);
  char head[128];
  snprintf(head, sizeof(head), "POST /v1/infer HTTP/1.1\r\nHost: a\r\nContent-Length: %zu\r\n\r\n", body.len);
  h_send_all(fd, head, strlen(head));
  h_send_all(fd, body.data, body.len);
  /* read slowly: 64 KiB every 30 ms, with a drain starting part way */
  lp_buf_t got;
  lp_buf_init(&got);
  char buf[65536];
  size_t want = 0;
  int signalled = 0;
  for (int i = 0; i < 4000; i++) {
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, 3000) <= 0) break;
    ssize_t k = recv(fd, buf, sizeof(buf), 0);
    if (k <= 0) break;
    lp_buf_append(&got, buf, (size_t)k);
    if (!want) {
      char *e = got.len ? memmem(got.data, got.len, "\r\n\r\n", 4) : NULL;
      char *cl = e ? strcasestr(got.data, "content-length:") : NULL;
      if (cl && cl < e) want = (size_t)(e + 4 - got.data) + strtoul(cl + 15, NULL, 10);
    }
    if (want && got.len >= want) break;
    if (!signalled && got.len > 1000000) {
      kill(s.proxy, SIGTERM);
      signalled = 1;
    }
    usleep(30000);
  }
  printf("slow reader: %zu of %zu bytes, drain signalled %d\n", got.len, want, signalled);
  ck_assert_msg(want > 3000000, "answer of %zu bytes", want);
  ck_assert_msg(got.len == want, "got %zu of %zu bytes", got.len, want);
  ck_assert_int_eq(signalled, 1);
  /* every output right */
  const char *o = strstr(got.data, "\"outputs\": [");
  ck_assert_ptr_nonnull(o);
  o += 12;
  static int32_t out[L + 1], expect[L];
  for (int i = 0; i < K; i++) {
    size_t n;
    int err;
    o = lp_jscan_int_array(o, got.data + got.len, out, L + 1, INT32_MIN, INT32_MAX, &n, &err);
    ck_assert_ptr_nonnull(o);
    lp_emu_outputs(tok[i], L, expect);
    ck_assert(n == L && memcmp(out, expect, sizeof(expect)) == 0);
    o = lp_jscan_ws(o, got.data + got.len);
    if (*o == ',') o = lp_jscan_ws(o + 1, got.data + got.len);
  }
  close(fd);
  int st;
  ck_assert_int_eq(waitpid(s.proxy, &st, 0), s.proxy);
  ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  h_stop(s.emu, 5000);
  lp_buf_free(&body);
  lp_buf_free(&got);
}
END_TEST

/* A client that pipelines and never reads: the proxy stops reading it once a
 * bounded amount is written and unread, and does not grow. */
START_TEST(non_reader_is_bounded) {
  stack_t_ s;
  start(&s, "--shapes 8x1024 --cost-ms 0", "", "\"shapes\": \"8x1024\", \"max_wait_ms\": 0");
  lp_buf_t body;
  lp_buf_init(&body);
  int32_t t[1000];
  for (int j = 0; j < 1000; j++) t[j] = j;
  inputs_body(&body, t, 1000, 8);
  char head[128];
  snprintf(head, sizeof(head), "POST /v1/infer HTTP/1.1\r\nHost: a\r\nContent-Length: %zu\r\n\r\n", body.len);
  long base = h_rss_kb(s.proxy, "VmRSS:");
  int fd = small_window(s.port);
  /* send for 3 s without reading; sending blocks once the proxy stops reading */
  struct timespec t0, now;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  long sent = 0;
  for (;;) {
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (now.tv_sec - t0.tv_sec >= 3) break;
    struct pollfd p = {fd, POLLOUT, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    if (send(fd, head, strlen(head), MSG_DONTWAIT | MSG_NOSIGNAL) <= 0) continue;
    h_send_all(fd, body.data, body.len);
    sent++;
  }
  long grown = h_rss_kb(s.proxy, "VmRSS:") - base;
  printf("non-reader: %ld requests sent in 3 s, proxy RSS grew %ld kB\n", sent, grown);
  if (!getenv("ASAN_OPTIONS")) ck_assert_msg(grown < 32 * 1024, "RSS grew %ld kB", grown);
  /* the proxy still serves others */
  h_resp_t r;
  ck_assert_int_eq(h_call(s.port, "GET", "/healthz", "", NULL, &r), 0);
  ck_assert_int_eq(r.status, 200);
  h_resp_free(&r);
  close(fd);
  lp_buf_free(&body);
  stop(&s);
}
END_TEST

/* 100 Continue goes out behind an answer still being written, never dropped. */
START_TEST(continue_behind_queued_answer) {
  stack_t_ s;
  start(&s, "--shapes 8x1024 --cost-ms 0", "", "\"shapes\": \"8x1024\", \"max_wait_ms\": 0");
  lp_buf_t body;
  lp_buf_init(&body);
  int32_t t[1000];
  for (int j = 0; j < 1000; j++) t[j] = j + 1;
  inputs_body(&body, t, 1000, 700);
  int fd = small_window(s.port);
  char head[160];
  snprintf(head, sizeof(head), "POST /v1/infer HTTP/1.1\r\nHost: a\r\nContent-Length: %zu\r\n\r\n", body.len);
  h_send_all(fd, head, strlen(head));
  h_send_all(fd, body.data, body.len);
  usleep(700000); /* its answer (megabytes) now fills the socket */
  snprintf(head, sizeof(head),
           "POST /v1/infer HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: %zu\r\n\r\n",
           strlen(one_tok));
  h_send_all(fd, head, strlen(head));
  usleep(200000);
  /* read everything: the first answer, then the interim 100 */
  lp_buf_t got;
  lp_buf_init(&got);
  char buf[65536];
  int seen100 = 0;
  for (int i = 0; i < 2000 && !seen100; i++) {
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, 3000) <= 0) break;
    ssize_t k = recv(fd, buf, sizeof(buf), 0);
    if (k <= 0) break;
    lp_buf_append(&got, buf, (size_t)k);
    seen100 = memmem(got.data, got.len, "HTTP/1.1 100 Continue\r\n\r\n", 25) != NULL;
  }
  ck_assert_msg(seen100, "no 100 Continue after %zu bytes", got.len);
  h_send_all(fd, one_tok, strlen(one_tok));
  h_resp_t r;
  ck_assert_int_eq(h_read_response(fd, &r, 5000), 0);
  ck_assert_int_eq(r.status, 200);
  h_resp_free(&r);
  close(fd);
  lp_buf_free(&body);
  lp_buf_free(&got);
  stop(&s);
}
END_TEST

LP_TEST_MAIN("http", rfc9112_rules, upgrade_ignored_connect_answered_once,
             hangup_while_queued_is_noticed, slow_reader_not_cut, non_reader_is_bounded,
             continue_behind_queued_answer)
