#define _GNU_SOURCE /* strcasestr */
/* Integration tests: the real emulator and proxy on free loopback ports, raw
 * HTTP, every answer checked against the emulator's formula, every status code
 * the proxy sends provoked. */
#include <check.h>
#include <jansson.h>
#include <poll.h>
#include <sys/socket.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "testutil.h"
#include "lanepack/emu.h"
#include "lanepack/rng.h"

typedef struct {
  pid_t emu, proxy;
  int emu_port, port;
  char cfg[128], log[128], emu_log[128];
} stack_t_;

/* Starts an emulator with extra args (space-separated in one string) and a
 * proxy with a config whose "models" section is model_json (with %d for the
 * emulator port, at most twice). */
static void start_at(stack_t_ *s, const char *emu_args, const char *top_json, const char *model_json,
                     const char *ready_path) {
  memset(s, 0, sizeof(*s));
  s->emu_port = h_free_port();
  s->port = h_free_port();
  snprintf(s->emu_log, sizeof(s->emu_log), "/tmp/lp-it-emu-%d.log", s->emu_port);
  snprintf(s->log, sizeof(s->log), "/tmp/lp-it-proxy-%d.log", s->port);
  snprintf(s->cfg, sizeof(s->cfg), "/tmp/lp-it-%d.json", s->port);
  char listen[64];
  snprintf(listen, sizeof(listen), "127.0.0.1:%d", s->emu_port);
  char args[512];
  snprintf(args, sizeof(args), "%s", emu_args);
  char *argv[32] = {(char *)h_bin("LP_EMULATOR"), "--listen", listen};
  int ac = 3;
  for (char *sv, *t = strtok_r(args, " ", &sv); t && ac < 30; t = strtok_r(NULL, " ", &sv)) argv[ac++] = t;
  argv[ac] = NULL;
  s->emu = h_spawn(argv, s->emu_log);
  ck_assert_int_eq(h_wait_http(s->emu_port, "/healthz", 0, 5000), 0);
  char models[2048];
  snprintf(models, sizeof(models), model_json, s->emu_port, s->emu_port);
  FILE *f = fopen(s->cfg, "w");
  fprintf(f, "{\"listen\": \"127.0.0.1:%d\", \"health_interval_ms\": 100, %s \"models\": %s}\n", s->port,
          top_json ? top_json : "", models);
  fclose(f);
  char *pargv[] = {(char *)h_bin("LP_PROXY"), "--config", s->cfg, NULL};
  s->proxy = h_spawn(pargv, s->log);
  ck_assert_msg(h_wait_http(s->port, ready_path, 0, 5000) == 0, "proxy not ready, see %s", s->log);
}

static void start(stack_t_ *s, const char *emu_args, const char *top_json, const char *model_json) {
  start_at(s, emu_args, top_json, model_json, "/readyz");
}

static void stop(stack_t_ *s) {
  int rc = h_stop(s->proxy, 5000);
  h_stop(s->emu, 5000);
  ck_assert_msg(rc == 0, "proxy exit status %d, see %s", rc, s->log);
}

static void expect(int port, const char *method, const char *path, const char *headers,
                   const char *body, int status, const char *code);

#define DEFAULT_MODEL \
  "{\"default\": {\"shapes\": \"4x64,8x16\", \"backends\": [\"http://127.0.0.1:%d\"], \"max_wait_ms\": 2}}"

static void tokens(int32_t *t, size_t n, uint64_t seed) {
  lp_rng_t r;
  lp_rng_seed(&r, seed);
  for (size_t i = 0; i < n; i++) t[i] = (int32_t)lp_rng_below(&r, 50000);
}

START_TEST(answers_verify) {
  stack_t_ s;
  start(&s, "--shapes 4x64,8x16 --cost-ms 1", NULL, DEFAULT_MODEL);
  for (size_t n = 1; n <= 64; n += 9) {
    int32_t t[64];
    tokens(t, n, n);
    char *body = h_ids_body(t, n, ", \"id\": \"r1\", \"priority\": 2, \"deadline_ms\": 5000");
    h_resp_t r;
    ck_assert_int_eq(h_call(s.port, "POST", "/v1/infer", "Content-Type: application/json\r\n", body, &r), 0);
    ck_assert_msg(r.status == 200, "status %d: %s", r.status, r.body);
    ck_assert_msg(h_check_output(r.body, t, n), "wrong output for n=%zu: %s", n, r.body);
    ck_assert_ptr_nonnull(strstr(r.body, "\"id\": \"r1\""));
    ck_assert_ptr_nonnull(strstr(r.body, "\"timing_ms\""));
    ck_assert_ptr_nonnull(strstr(r.body, "\"shape\": ["));
    h_resp_free(&r);
    free(body);
  }
  /* several sequences in one request, through the model path */
  h_resp_t r;
  ck_assert_int_eq(h_call(s.port, "POST", "/v1/models/default/infer", "",
                          "{\"inputs\": [[1, 2], [3, 4, 5]], \"id\": 7}", &r), 0);
  ck_assert_int_eq(r.status, 200);
  int32_t a[] = {1, 2}, b[] = {3, 4, 5}, ha[2], hb[3];
  lp_emu_outputs(a, 2, ha);
  lp_emu_outputs(b, 3, hb);
  char want[256];
  snprintf(want, sizeof(want), "\"outputs\": [[%d,%d], [%d,%d,%d]]", ha[0], ha[1], hb[0], hb[1], hb[2]);
  ck_assert_msg(strstr(r.body, want), "%s lacks %s", r.body, want);
  h_resp_free(&r);
  /* millions of tiny sequences are bounded by max_sequences_per_request */
  static char many[12000];
  int k = snprintf(many, sizeof(many), "{\"inputs\": [");
  for (int i = 0; i < 1100; i++) k += snprintf(many + k, sizeof(many) - (size_t)k, "%s[1]", i ? "," : "");
  snprintf(many + k, sizeof(many) - (size_t)k, "]}");
  expect(s.port, "POST", "/v1/infer", "", many, 413, "too_many_sequences");
  stop(&s);
}
END_TEST

START_TEST(concurrent_and_pipelined) {
  stack_t_ s;
  start(&s, "--shapes 4x64,8x16 --cost-ms 2", NULL, DEFAULT_MODEL);
  enum { C = 40, P = 10 };
  int fds[C];
  int32_t t[C][P][40];
  size_t len[C][P];
  for (int c = 0; c < C; c++) {
    fds[c] = h_connect(s.port);
    ck_assert_int_ge(fds[c], 0);
    /* P pipelined requests in one write */
    char *all = NULL;
    size_t alen = 0;
    for (int p = 0; p < P; p++) {
      len[c][p] = 1 + (size_t)((c * 7 + p * 13) % 40);
      tokens(t[c][p], len[c][p], (uint64_t)(c * 100 + p + 1));
      char *body = h_ids_body(t[c][p], len[c][p], NULL);
      char head[128];
      int hl = snprintf(head, sizeof(head), "POST /v1/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\n\r\n",
                        strlen(body));
      all = realloc(all, alen + (size_t)hl + strlen(body));
      memcpy(all + alen, head, (size_t)hl);
      memcpy(all + alen + hl, body, strlen(body));
      alen += (size_t)hl + strlen(body);
      free(body);
    }
    ck_assert_int_eq(h_send_all(fds[c], all, alen), 0);
    free(all);
  }
  for (int c = 0; c < C; c++) {
    for (int p = 0; p < P; p++) {
      h_resp_t r;
      ck_assert_int_eq(h_read_response(fds[c], &r, 10000), 0);
      ck_assert_int_eq(r.status, 200);
      /* answers come in request order: each matches its own request */
      REQUIRE(h_check_output(r.body, t[c][p], len[c][p]));
      h_resp_free(&r);
    }
    close(fds[c]);
  }
  /* packing happened: fewer batches than sequences */
  double batches = h_metric(s.port, "lanepack_batches_total{");
  ck_assert_msg(batches > 0 && batches < C * P, "batches %f", batches);
  stop(&s);
}
END_TEST

static void expect(int port, const char *method, const char *path, const char *headers,
                   const char *body, int status, const char *code) {
  h_resp_t r;
  ck_assert_int_eq(h_call(port, method, path, headers, body, &r), 0);
  ck_assert_msg(r.status == status, "%s %s: status %d, want %d: %s", method, path, r.status, status, r.body);
  if (code) {
    char c[96];
    snprintf(c, sizeof(c), "\"code\": \"%s\"", code);
    ck_assert_msg(strstr(r.body, c) != NULL, "%s lacks %s", r.body, c);
    ck_assert_ptr_nonnull(strstr(r.headers, "application/json"));
  }
  h_resp_free(&r);
}

START_TEST(client_errors) {
  stack_t_ s;
  start(&s, "--shapes 4x64,8x16 --cost-ms 1", "\"max_body_bytes\": 4096, \"max_header_bytes\": 1024,",
        "{\"default\": {\"shapes\": \"4x64,8x16\", \"backends\": [\"http://127.0.0.1:%d\"], "
        "\"vocab_size\": 1000}}");
  expect(s.port, "POST", "/v1/infer", "", "{\"input_ids\": [1, 2", 400, "malformed_json");
  expect(s.port, "POST", "/v1/infer", "", "[1, 2]", 400, "malformed_json");
  expect(s.port, "POST", "/v1/infer", "", "{\"input_ids\": [1], \"bogus\": 1}", 400, "unknown_field");
  expect(s.port, "POST", "/v1/infer", "", "{\"input_ids\": [1], \"input_ids\": [2]}", 400, "duplicate_field");
  expect(s.port, "POST", "/v1/infer", "", "{\"input_ids\": [1, \"a\"]}", 400, "bad_token");
  expect(s.port, "POST", "/v1/infer", "", "{\"input_ids\": [1, 1.5]}", 400, "bad_token");
  expect(s.port, "POST", "/v1/infer", "", "{\"input_ids\": [1, -1]}", 400, "token_out_of_range");
  expect(s.port, "POST", "/v1/infer", "", "{\"input_ids\": [1000]}", 400, "token_out_of_range");
  expect(s.port, "POST", "/v1/infer", "", "{\"input_ids\": []}", 400, "empty_sequence");
  expect(s.port, "POST", "/v1/infer", "", "{\"inputs\": [[1], []]}", 400, "empty_sequence");
  expect(s.port, "POST", "/v1/infer", "", "{}", 400, "missing_input");
  expect(s.port, "POST", "/v1/infer", "", "{\"input_ids\": [1], \"priority\": \"high\"}", 400, "bad_field");
  /* JSON text is UTF-8: anything else is not JSON */
  expect(s.port, "POST", "/v1/infer", "", "{\"input_ids\": [1], \"id\": \"\xff\xfe\"}", 400, "malformed_json");
  expect(s.port, "POST", "/v1/infer", "", "{\"input_ids\": [1], \"model\": \"\xc3\x28\"}", 400, "malformed_json");
  expect(s.port, "POST", "/v1/infer", "", "{\"input_ids\": [1], \"id\": [1]}", 400, "bad_field");
  {
    /* nesting past the limit */
    char deep[400];
    int k = snprintf(deep, sizeof(deep), "{\"input_ids\": [1], \"x\": ");
    for (int i = 0; i < 150; i++) deep[k++] = '[';
    for (int i = 0; i < 150; i++) deep[k++] = ']';
    deep[k++] = '}';
    deep[k] = 0;
    expect(s.port, "POST", "/v1/infer", "", deep, 400, "malformed_json");
  }
  {
    /* more sequences than allowed in one request */
    static char many[12000];
    int k = snprintf(many, sizeof(many), "{\"inputs\": [");
    for (int i = 0; i < 1100; i++) k += snprintf(many + k, sizeof(many) - (size_t)k, "%s[1]", i ? "," : "");
    snprintf(many + k, sizeof(many) - (size_t)k, "]}");
    h_resp_t rr;
    ck_assert_int_eq(h_call(s.port, "POST", "/v1/infer", "", many, &rr), 0);
    ck_assert_int_eq(rr.status, 413); /* body limit (4096) or sequence limit: both bound it */
    h_resp_free(&rr);
  }
  expect(s.port, "POST", "/v1/infer", "", "{\"input_ids\": [1], \"deadline_ms\": -5}", 400, "bad_field");
  expect(s.port, "POST", "/v1/infer", "", "{\"input_ids\": [1], \"model\": \"nope\"}", 404, "unknown_model");
  expect(s.port, "POST", "/v1/models/nope/infer", "", "{\"input_ids\": [1]}", 404, "unknown_model");
  expect(s.port, "POST", "/v1/models/default/infer", "", "{\"input_ids\": [1], \"model\": \"x\"}", 400, "model_mismatch");
  expect(s.port, "GET", "/nowhere", "", NULL, 404, "not_found");
  expect(s.port, "GET", "/v1/infer", "", NULL, 405, "method_not_allowed");
  expect(s.port, "POST", "/metrics", "", "{}", 405, "method_not_allowed");
  expect(s.port, "POST", "/v1/infer", "", NULL, 411, "length_required");
  expect(s.port, "POST", "/v1/infer", "Content-Type: text/plain\r\n", "{\"input_ids\": [1]}", 415,
         "unsupported_media_type");
  /* 65 tokens: over the largest bucket, with the limit in the body */
  int32_t t[65] = {0};
  char *body = h_ids_body(t, 65, NULL);
  h_resp_t r;
  ck_assert_int_eq(h_call(s.port, "POST", "/v1/infer", "", body, &r), 0);
  ck_assert_int_eq(r.status, 413);
  ck_assert_ptr_nonnull(strstr(r.body, "\"code\": \"sequence_too_long\""));
  ck_assert_ptr_nonnull(strstr(r.body, "\"max_len\": 64"));
  h_resp_free(&r);
  free(body);
  /* body over max_body_bytes */
  char big[6000];
  memset(big, ' ', sizeof(big) - 1);
  big[0] = '{';
  big[sizeof(big) - 2] = '}';
  big[sizeof(big) - 1] = 0;
  expect(s.port, "POST", "/v1/infer", "", big, 413, "body_too_large");
  /* a chunked body over max_body_bytes (no Content-Length to refuse up front) */
  {
    int cfd = h_connect(s.port);
    const char *head = "POST /v1/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
    h_send_all(cfd, head, strlen(head));
    char chunk[1100];
    memset(chunk, ' ', sizeof(chunk));
    memcpy(chunk, "400\r\n", 5);
    memcpy(chunk + 5 + 1024, "\r\n", 2);
    for (int i = 0; i < 5; i++) h_send_all(cfd, chunk, 5 + 1024 + 2);
    h_resp_t cr;
    ck_assert_int_eq(h_read_response(cfd, &cr, 5000), 0);
    ck_assert_int_eq(cr.status, 413);
    ck_assert_ptr_nonnull(strstr(cr.body, "body_too_large"));
    h_resp_free(&cr);
    close(cfd);
  }
  /* headers over max_header_bytes */
  char hdr[1600];
  snprintf(hdr, sizeof(hdr), "X-Long: %01200d\r\n", 0);
  expect(s.port, "GET", "/healthz", hdr, NULL, 431, "headers_too_large");
  /* garbage instead of HTTP */
  int fd = h_connect(s.port);
  h_send_all(fd, "HELLO\r\n\r\n", 9);
  ck_assert_int_eq(h_read_response(fd, &r, 5000), 0);
  ck_assert_int_eq(r.status, 400);
  h_resp_free(&r);
  close(fd);
  /* smuggling: Content-Length with Transfer-Encoding */
  fd = h_connect(s.port);
  const char *smug = "POST /v1/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
                     "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n";
  h_send_all(fd, smug, strlen(smug));
  ck_assert_int_eq(h_read_response(fd, &r, 5000), 0);
  ck_assert_int_eq(r.status, 400);
  h_resp_free(&r);
  close(fd);
  /* nothing admitted yet: the advisor has no lengths */
  expect(s.port, "GET", "/v1/buckets/advice?k=2", "", NULL, 409, "no_data");
  /* invalid chunked framing, and a duplicated Content-Length */
  static const char *bad_framing[] = {
      "POST /v1/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
      "POST /v1/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
      "POST /v1/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked, identity\r\n\r\n0\r\n\r\n",
  };
  for (size_t i = 0; i < sizeof(bad_framing) / sizeof(bad_framing[0]); i++) {
    int bfd = h_connect(s.port);
    h_send_all(bfd, bad_framing[i], strlen(bad_framing[i]));
    h_resp_t br;
    ck_assert_int_eq(h_read_response(bfd, &br, 5000), 0);
    ck_assert_msg(br.status == 400, "framing case %zu: %d", i, br.status);
    h_resp_free(&br);
    close(bfd);
  }
  /* the server is still up, and counted the rejections */
  expect(s.port, "GET", "/healthz", "", NULL, 200, NULL);
  ck_assert(h_metric(s.port, "lanepack_rejections_total{reason=\"malformed_json\"}") >= 2);
  stop(&s);
}
END_TEST

START_TEST(chunked_and_expect) {
  stack_t_ s;
  start(&s, "--shapes 4x64,8x16 --cost-ms 1", NULL, DEFAULT_MODEL);
  int fd = h_connect(s.port);
  const char *req = "POST /v1/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                    "Expect: 100-continue\r\n\r\n"
                    "8\r\n{\"input_\r\n9\r\nids\": [5,\r\n4\r\n 6]}\r\n0\r\n\r\n";
  h_send_all(fd, req, strlen(req));
  h_resp_t r;
  ck_assert_int_eq(h_read_response(fd, &r, 5000), 0);
  ck_assert_int_eq(r.status, 200);
  int32_t t[] = {5, 6};
  ck_assert(h_check_output(r.body, t, 2));
  h_resp_free(&r);
  close(fd);
  stop(&s);
}
END_TEST

START_TEST(backend_failures) {
  /* every batch fails: 502 backend_error (its message names no backend) */
  stack_t_ s;
  start(&s, "--shapes 4x64 --cost-ms 1 --fail-rate 1", NULL,
        "{\"default\": {\"shapes\": \"4x64\", \"backends\": [\"http://127.0.0.1:%d\"], \"max_wait_ms\": 1}}");
  expect(s.port, "POST", "/v1/infer", "", "{\"input_ids\": [1, 2, 3]}", 502, "backend_error");
  stop(&s);
  /* the backend never answers: 504 after backend_timeout_ms */
  start(&s, "--shapes 4x64 --cost-ms 1 --stall-rate 1", NULL,
        "{\"default\": {\"shapes\": \"4x64\", \"backends\": [\"http://127.0.0.1:%d\"], \"max_wait_ms\": 1, "
        "\"backend_timeout_ms\": 300}}");
  expect(s.port, "POST", "/v1/infer", "", "{\"input_ids\": [1, 2, 3]}", 504, "backend_timeout");
  stop(&s);
  /* garbled answers: 502 that says what was wrong, never another's data */
  start(&s, "--shapes 4x64 --cost-ms 1 --garbage-rate 1", NULL,
        "{\"default\": {\"shapes\": \"4x64\", \"backends\": [\"http://127.0.0.1:%d\"], \"max_wait_ms\": 1}}");
  expect(s.port, "POST", "/v1/infer", "", "{\"input_ids\": [1, 2, 3]}", 502, "bad_backend_answer");
  stop(&s);
}
END_TEST

START_TEST(no_backend) {
  /* the backend is gone: not ready, and requests get 503 at once */
  stack_t_ s;
  start(&s, "--shapes 4x64 --cost-ms 1", "\"unhealthy_after\": 1,",
        "{\"default\": {\"shapes\": \"4x64\", \"backends\": [\"http://127.0.0.1:%d\"]}}");
  h_stop(s.emu, 5000);
  s.emu = 0;
  ck_assert_int_eq(h_wait_http(s.port, "/readyz", 0, 200) == 0, 1); /* may still be ready */
  usleep(500000);
  expect(s.port, "GET", "/readyz", "", NULL, 503, NULL);
  expect(s.port, "POST", "/v1/infer", "", "{\"input_ids\": [1]}", 503, "no_healthy_backend");
  ck_assert_int_eq(h_stop(s.proxy, 5000), 0);
}
END_TEST

START_TEST(queue_full_and_deadline) {
  /* one batch at a time, 400 ms each, queue of 2 requests */
  stack_t_ s;
  start(&s, "--shapes 1x8 --cost-ms 400", NULL,
        "{\"default\": {\"shapes\": \"1x8\", \"backends\": [\"http://127.0.0.1:%d\"], \"max_wait_ms\": 0, "
        "\"max_inflight\": 1, \"max_queue_requests\": 2}}");
  int fds[5];
  const char *req = "POST /v1/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 24\r\n\r\n{\"input_ids\": [1,2,3,4]}";
  for (int i = 0; i < 5; i++) {
    fds[i] = h_connect(s.port);
    h_send_all(fds[i], req, strlen(req));
    usleep(30000); /* in order: the first is in flight before the others arrive */
  }
  int ok = 0, full = 0;
  for (int i = 0; i < 5; i++) {
    h_resp_t r;
    ck_assert_int_eq(h_read_response(fds[i], &r, 10000), 0);
    if (r.status == 200) ok++;
    if (r.status == 429) {
      full++;
      ck_assert_ptr_nonnull(strcasestr(r.headers, "Retry-After: "));
      ck_assert_ptr_nonnull(strstr(r.body, "queue_full"));
    }
    h_resp_free(&r);
    close(fds[i]);
  }
  /* max_queue_requests counts requests admitted and not answered, the one in
   * flight included (the dispatch core's live jobs) */
  ck_assert_int_eq(ok, 2);   /* one in flight, one queued */
  ck_assert_int_eq(full, 3);
  /* a deadline that passes while queued: 504, and it is never sent */
  double before = h_metric(s.port, "lanepack_batches_total{");
  int busy = h_connect(s.port);
  h_send_all(busy, req, strlen(req));
  usleep(50000);
  expect(s.port, "POST", "/v1/infer", "", "{\"input_ids\": [9], \"deadline_ms\": 100}", 504, "deadline_exceeded");
  h_resp_t r;
  ck_assert_int_eq(h_read_response(busy, &r, 5000), 0);
  ck_assert_int_eq(r.status, 200);
  h_resp_free(&r);
  close(busy);
  ck_assert_int_eq((int)(h_metric(s.port, "lanepack_batches_total{") - before), 1);
  stop(&s);
}
END_TEST

START_TEST(cancel_on_disconnect) {
  stack_t_ s;
  start(&s, "--shapes 1x8 --cost-ms 400", NULL,
        "{\"default\": {\"shapes\": \"1x8\", \"backends\": [\"http://127.0.0.1:%d\"], \"max_wait_ms\": 0, "
        "\"max_inflight\": 1}}");
  const char *req = "POST /v1/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 24\r\n\r\n{\"input_ids\": [1,2,3,4]}";
  int busy = h_connect(s.port);
  h_send_all(busy, req, strlen(req));
  usleep(50000);
  /* this one queues behind, then its client leaves */
  int gone = h_connect(s.port);
  h_send_all(gone, req, strlen(req));
  usleep(50000);
  close(gone);
  h_resp_t r;
  ck_assert_int_eq(h_read_response(busy, &r, 5000), 0);
  ck_assert_int_eq(r.status, 200);
  h_resp_free(&r);
  close(busy);
  usleep(600000);
  ck_assert_int_eq((int)h_metric(s.port, "lanepack_batches_total{"), 1); /* never sent */
  ck_assert_int_eq((int)h_metric(s.port, "lanepack_queue_sequences{"), 0);
  stop(&s);
}
END_TEST

START_TEST(graceful_shutdown) {
  stack_t_ s;
  start(&s, "--shapes 4x64 --cost-ms 300", NULL,
        "{\"default\": {\"shapes\": \"4x64\", \"backends\": [\"http://127.0.0.1:%d\"], \"max_wait_ms\": 1000, "
        "\"max_inflight\": 1}}");
  enum { N = 8 };
  int fds[N];
  int32_t t[N][4];
  for (int i = 0; i < N; i++) {
    tokens(t[i], 4, (uint64_t)i + 1);
    char *body = h_ids_body(t[i], 4, NULL);
    char head[128];
    snprintf(head, sizeof(head), "POST /v1/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\n\r\n", strlen(body));
    fds[i] = h_connect(s.port);
    h_send_all(fds[i], head, strlen(head));
    h_send_all(fds[i], body, strlen(body));
    free(body);
  }
  usleep(100000);
  kill(s.proxy, SIGTERM);
  for (int i = 0; i < N; i++) {
    h_resp_t r;
    ck_assert_int_eq(h_read_response(fds[i], &r, 5000), 0);
    ck_assert_int_eq(r.status, 200);
    REQUIRE(h_check_output(r.body, t[i], 4));
    h_resp_free(&r);
    close(fds[i]);
  }
  int st;
  ck_assert_int_eq(waitpid(s.proxy, &st, 0), s.proxy);
  ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  ck_assert_int_lt(h_connect(s.port), 0); /* no longer accepting */
  h_stop(s.emu, 5000);
}
END_TEST

/* The emulator's embedding stand-in on the lanepack wire (--per-segment
 * --dims K): each sequence's output is a vector of K floats, feature k of its
 * last token's h, passed through the proxy exactly. */
START_TEST(per_segment_vectors) {
  stack_t_ s;
  start(&s, "--shapes 4x64 --per-segment --dims 4", NULL,
        "{\"e\": {\"shapes\": \"4x64\", \"backends\": [\"http://127.0.0.1:%d\"], \"max_wait_ms\": 1}}");
  for (size_t n = 1; n <= 50; n += 7) {
    int32_t t[64];
    tokens(t, n, n);
    char *body = h_ids_body(t, n, "");
    h_resp_t r;
    ck_assert_int_eq(h_call(s.port, "POST", "/v1/infer", "", body, &r), 0);
    ck_assert_msg(r.status == 200, "%s", r.body);
    json_error_t je;
    json_t *j = json_loads(r.body, 0, &je);
    ck_assert_ptr_nonnull(j);
    json_t *out = json_object_get(j, "output");
    ck_assert_uint_eq(json_array_size(out), 4);
    for (unsigned k = 0; k < 4; k++)
      ck_assert_double_eq(json_number_value(json_array_get(out, k)), lp_emu_feature(lp_emu_last(t, n), k));
    json_decref(j);
    h_resp_free(&r);
    free(body);
  }
  stop(&s);
}
END_TEST

START_TEST(models_shapes_ragged_per_segment) {
  /* two models: a rectangle one with per-segment answers, a ragged (GPU) one */
  stack_t_ s;
  start(&s, "--shapes 2x32,8x8 --cost-ms 1 --per-segment --ragged", NULL,
        "{\"rect\": {\"shapes\": [\"2x32\", [8, 8]], \"backends\": [\"http://127.0.0.1:%d\"], \"max_wait_ms\": 1, \"packer\": \"spfhp\"},"
        " \"gpu\": {\"ragged\": true, \"ragged_max_tokens\": 100, \"backends\": [\"http://127.0.0.1:%d\"], \"max_wait_ms\": 1}}");
  for (int m = 0; m < 2; m++) {
    for (size_t n = 1; n <= 30; n += 7) {
      int32_t t[32];
      tokens(t, n, n * 3 + (size_t)m);
      char extra[64];
      snprintf(extra, sizeof(extra), ", \"model\": \"%s\"", m ? "gpu" : "rect");
      char *body = h_ids_body(t, n, extra);
      h_resp_t r;
      ck_assert_int_eq(h_call(s.port, "POST", "/v1/infer", "", body, &r), 0);
      ck_assert_msg(r.status == 200, "%s", r.body);
      char want[64];
      snprintf(want, sizeof(want), "\"output\": %d,", lp_emu_last(t, n));
      ck_assert_msg(strstr(r.body, want), "%s lacks %s", r.body, want);
      h_resp_free(&r);
      free(body);
    }
  }
  /* no default model among two: the request must name one */
  expect(s.port, "POST", "/v1/infer", "", "{\"input_ids\": [1]}", 400, "missing_model");
  /* status routes */
  h_resp_t r;
  ck_assert_int_eq(h_call(s.port, "GET", "/v1/models", "", NULL, &r), 0);
  ck_assert_int_eq(r.status, 200);
  ck_assert_ptr_nonnull(strstr(r.body, "\"name\": \"gpu\""));
  ck_assert_ptr_nonnull(strstr(r.body, "\"shape\": [8, 8], \"state\": \"compiled\""));
  /* and in OpenAI's list shape, so its SDKs' models.list() sees them */
  json_error_t je;
  json_t *mj = json_loads(r.body, 0, &je);
  ck_assert_ptr_nonnull(mj);
  ck_assert_str_eq(json_string_value(json_object_get(mj, "object")), "list");
  json_t *data = json_object_get(mj, "data");
  ck_assert_uint_eq(json_array_size(data), 2);
  for (size_t i = 0; i < 2; i++) {
    json_t *e = json_array_get(data, i);
    ck_assert_str_eq(json_string_value(json_object_get(e, "object")), "model");
    ck_assert_str_eq(json_string_value(json_object_get(e, "owned_by")), "lanepack");
    ck_assert(json_integer_value(json_object_get(e, "created")) > 1700000000);
  }
  ck_assert_str_eq(json_string_value(json_object_get(json_array_get(data, 0), "id")),
                   json_string_value(json_object_get(json_array_get(json_object_get(mj, "models"), 0), "name")));
  json_decref(mj);
  h_resp_free(&r);
  ck_assert_int_eq(h_call(s.port, "GET", "/metrics", "", NULL, &r), 0);
  ck_assert_int_eq(r.status, 200);
  ck_assert_ptr_nonnull(strstr(r.headers, "text/plain; version=0.0.4"));
  ck_assert_ptr_nonnull(strstr(r.body, "# TYPE lanepack_batch_fill_ratio histogram"));
  ck_assert_ptr_nonnull(strstr(r.body, "lanepack_batch_fill_ratio_bucket{model=\"rect\",le=\"+Inf\"}"));
  /* what an operator's dashboards expect of any server, and ours by shape and model */
  static const char *const families[] = {
      "# TYPE process_cpu_seconds_total counter", "# TYPE process_resident_memory_bytes gauge",
      "# TYPE process_open_fds gauge", "# TYPE process_max_fds gauge",
      "# TYPE process_start_time_seconds gauge", "lanepack_build_info{version=\"",
      "lanepack_batch_fill_ratio_by_shape_bucket{model=\"rect\",shape=\"",
      "lanepack_model_request_duration_seconds_count{model=\"rect\"}",
      "lanepack_request_duration_seconds_bucket{phase=\"total\",le=\"0.012\"}"};
  for (size_t i = 0; i < sizeof(families) / sizeof(families[0]); i++)
    ck_assert_msg(strstr(r.body, families[i]), "/metrics lacks %s", families[i]);
  ck_assert_int_eq(r.body[r.body_len - 1], '\n');
  h_resp_free(&r);
  ck_assert_int_eq(h_call(s.port, "GET", "/v1/buckets/advice?k=2&model=rect", "", NULL, &r), 0);
  ck_assert_msg(r.status == 200, "%s", r.body);
  ck_assert_ptr_nonnull(strstr(r.body, "\"proposals\""));
  h_resp_free(&r);
  expect(s.port, "GET", "/v1/buckets/advice?k=99&model=rect", "", NULL, 400, "bad_parameter");
  stop(&s);
}
END_TEST

START_TEST(check_config) {
  char path[] = "/tmp/lp-cfg-XXXXXX";
  int fd = mkstemp(path);
  const char *good = "{\"models\": {\"m\": {\"shapes\": \"4x8192\", \"backends\": [\"http://127.0.0.1:1\"]}}}";
  ck_assert_int_eq(write(fd, good, strlen(good)), (ssize_t)strlen(good));
  close(fd);
  char *argv[] = {(char *)h_bin("LP_PROXY"), "--config", path, "--check-config", "--max-wait-ms", "7", NULL};
  ck_assert_int_eq(h_run(argv, "/tmp/lp-cfg.out"), 0);
  FILE *f = fopen("/tmp/lp-cfg.out", "r");
  char out[8192] = "";
  fread(out, 1, sizeof(out) - 1, f);
  fclose(f);
  ck_assert_ptr_nonnull(strstr(out, "\"max_wait_ms\": 7"));
  ck_assert_ptr_nonnull(strstr(out, "\"4x8192\""));
  const char *bad = "{\"models\": {\"m\": {\"shapes\": \"4x8192\", \"backends\": [\"http://x\"], \"max_wiat_ms\": 1}}}";
  f = fopen(path, "w");
  fputs(bad, f);
  fclose(f);
  char *argv2[] = {(char *)h_bin("LP_PROXY"), "--config", path, "--check-config", NULL};
  ck_assert_int_eq(h_run(argv2, "/tmp/lp-cfg.out"), 2);
  f = fopen("/tmp/lp-cfg.out", "r");
  memset(out, 0, sizeof(out));
  fread(out, 1, sizeof(out) - 1, f);
  fclose(f);
  ck_assert_msg(strstr(out, "models.m.max_wiat_ms: unknown key"), "%s", out);
  unlink(path);
}
END_TEST

/* Keys the dispatch core no longer reads are refused, naming what decides
 * instead (accepted and ignored, they let an operator believe they tune it). */
START_TEST(dead_keys_refused) {
  static const struct {
    const char *kv, *says;
  } dead[] = {{"\"fill_target\": 0.9", "device clock"},
              {"\"max_bypass\": 8", "max_wait_ms"},
              {"\"balance\": \"round_robin\"", "device"}};
  for (size_t i = 0; i < sizeof(dead) / sizeof(dead[0]); i++) {
    char path[] = "/tmp/lp-cfg-XXXXXX", cfg[256], out[4096] = "";
    int fd = mkstemp(path);
    int n = snprintf(cfg, sizeof(cfg),
                     "{\"models\": {\"m\": {\"shapes\": \"4x64\", \"backends\": [\"http://127.0.0.1:1\"], %s}}}",
                     dead[i].kv);
    ck_assert_int_eq(write(fd, cfg, (size_t)n), n);
    close(fd);
    char *argv[] = {(char *)h_bin("LP_PROXY"), "--config", path, "--check-config", NULL};
    ck_assert_int_eq(h_run(argv, "/tmp/lp-cfg-dead.out"), 2);
    FILE *f = fopen("/tmp/lp-cfg-dead.out", "r");
    ck_assert_ptr_nonnull(f);
    fread(out, 1, sizeof(out) - 1, f);
    fclose(f);
    unlink(path);
    ck_assert_msg(strstr(out, "no longer used") && strstr(out, dead[i].says), "%s: %s", dead[i].kv, out);
  }
}
END_TEST

/* emulator + proxy + loadgen: verified answers and a JSON report that adds up */
START_TEST(loadgen_run) {
  stack_t_ s;
  start(&s, "--shapes 4x256,8x64 --cost-ms 2", NULL,
        "{\"default\": {\"shapes\": \"4x256,8x64\", \"backends\": [\"http://127.0.0.1:%d\"], \"max_wait_ms\": 2}}");
  char url[64], json[64];
  snprintf(url, sizeof(url), "http://127.0.0.1:%d", s.port);
  snprintf(json, sizeof(json), "/tmp/lp-lg-%d.json", s.port);
  char *argv[] = {(char *)h_bin("LP_LOADGEN"), "--url", url, "--rate", "400", "--duration", "2s",
                  "--lengths", "0.95*lognormal:mu=3.5,sigma=1,max=250+0.05*fixed:300", "--verify",
                  "--sequences-per-request", "2", "--json", json, NULL};
  ck_assert_msg(h_run(argv, "/tmp/lp-lg.out") == 0, "loadgen failed, see %s", "/tmp/lp-lg.out");
  json_error_t e;
  json_t *j = json_load_file(json, 0, &e);
  ck_assert_ptr_nonnull(j);
  json_int_t sent = json_integer_value(json_object_get(j, "sent"));
  json_int_t answered = json_integer_value(json_object_get(j, "answered"));
  json_int_t ok = json_integer_value(json_object_get(j, "ok"));
  json_int_t failed = json_integer_value(json_object_get(j, "failed"));
  json_t *by = json_object_get(j, "by_status");
  ck_assert_int_gt(sent, 500);
  ck_assert_int_eq(sent, answered);
  ck_assert_int_eq(ok + failed, answered);
  ck_assert_int_eq(json_integer_value(json_object_get(j, "mismatches")), 0);
  /* 300-token sequences are over the 256 bucket: refused, and counted as such */
  json_int_t s200 = json_integer_value(json_object_get(by, "200"));
  json_int_t s413 = json_integer_value(json_object_get(by, "413"));
  ck_assert_int_eq(s200, ok);
  ck_assert_int_gt(s413, 0);
  ck_assert_int_eq(s200 + s413, answered);
  ck_assert(json_real_value(json_object_get(json_object_get(j, "proxy"), "fill")) > 0);
  json_decref(j);
  unlink(json);
  /* closed loop, pipelined, two threads: every answer verified and counted */
  char *argv2[] = {(char *)h_bin("LP_LOADGEN"), "--url", url, "--concurrency", "32", "--pipeline", "4",
                   "--threads", "2", "--duration", "1s", "--lengths", "uniform:1,200", "--verify",
                   "--json", json, NULL};
  ck_assert_msg(h_run(argv2, "/tmp/lp-lg2.out") == 0, "loadgen failed, see %s", "/tmp/lp-lg2.out");
  j = json_load_file(json, 0, &e);
  ck_assert_ptr_nonnull(j);
  ck_assert_int_gt(json_integer_value(json_object_get(j, "ok")), 100);
  ck_assert_int_eq(json_integer_value(json_object_get(j, "ok")), json_integer_value(json_object_get(j, "sent")));
  ck_assert_int_eq(json_integer_value(json_object_get(j, "mismatches")), 0);
  json_decref(j);
  unlink(json);
  stop(&s);
}
END_TEST

START_TEST(loadgen_errors) {
  /* bad arguments: one line, exit 2, no load; unreachable: exit 1 */
  struct {
    const char *args[8];
    int status;
    const char *needle;
  } cases[] = {
      {{"--url", "http://127.0.0.1:9", "--rate", "0", "--lengths", "fixed:4"}, 2, "--rate"},
      {{"--url", "http://127.0.0.1:9", "--rate", "5", "--lengths", "bogus:4"}, 2, "--lengths"},
      {{"--url", "nope", "--rate", "5", "--lengths", "fixed:4"}, 2, "--url"},
      {{"--url", "http://127.0.0.1:9", "--lengths", "fixed:4"}, 2, "one of --rate"},
      {{"--url", "http://127.0.0.1:9", "--rate", "5", "--lengths", "fixed:4", "--bogus"}, 2, "usage"},
      {{"--url", "http://127.0.0.1:1", "--rate", "5", "--lengths", "fixed:4"}, 1, "cannot connect"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    char *argv[10] = {(char *)h_bin("LP_LOADGEN")};
    for (int k = 0; k < 8 && cases[i].args[k]; k++) argv[k + 1] = (char *)cases[i].args[k];
    int st = h_run(argv, "/tmp/lp-lg-err.out");
    ck_assert_msg(st == cases[i].status, "case %zu: status %d", i, st);
    FILE *f = fopen("/tmp/lp-lg-err.out", "r");
    char out[2048] = "";
    size_t n = fread(out, 1, sizeof(out) - 1, f);
    fclose(f);
    out[n] = 0;
    ck_assert_msg(strstr(out, cases[i].needle), "case %zu: %s", i, out);
  }
}
END_TEST

/* slow or greedy clients: 408 for a request that does not arrive in time, 417
 * for an unknown expectation, 503 past the connection limit */
START_TEST(slow_and_greedy_clients) {
  stack_t_ s;
  start(&s, "--shapes 4x64 --cost-ms 1", "\"request_timeout_ms\": 300, \"max_connections\": 3,", DEFAULT_MODEL);
  int fd = h_connect(s.port);
  h_send_all(fd, "POST /v1/infer HTTP/1.1\r\nHost: x\r\nContent-Le", 37); /* then nothing */
  h_resp_t r;
  ck_assert_int_eq(h_read_response(fd, &r, 3000), 0);
  ck_assert_int_eq(r.status, 408);
  ck_assert_ptr_nonnull(strstr(r.body, "request_timeout"));
  h_resp_free(&r);
  close(fd);
  expect(s.port, "POST", "/v1/infer", "Expect: something-else\r\n", "{\"input_ids\": [1]}", 417,
         "expectation_failed");
  /* a body trickled a byte at a time is held to the same whole-request limit */
  fd = h_connect(s.port);
  const char *slow = "POST /v1/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 40\r\n\r\n{\"input_ids\": [1, 2, 3, 4, 5, 6, 7, 8]}";
  size_t head = strstr(slow, "\r\n\r\n") + 4 - slow;
  h_send_all(fd, slow, head);
  int got408 = 0;
  for (size_t i = head; i < strlen(slow) && !got408; i++) {
    if (h_send_all(fd, slow + i, 1)) break;
    struct pollfd pf = {fd, POLLIN, 0};
    if (poll(&pf, 1, 50) > 0) got408 = 1;
  }
  ck_assert_int_eq(h_read_response(fd, &r, 3000), 0);
  ck_assert_int_eq(r.status, 408);
  h_resp_free(&r);
  close(fd);
  int held[3];
  for (int i = 0; i < 3; i++) held[i] = h_connect(s.port);
  usleep(100000);
  fd = h_connect(s.port);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(h_read_response(fd, &r, 3000), 0);
  ck_assert_int_eq(r.status, 503);
  ck_assert_ptr_nonnull(strstr(r.body, "too_many_connections"));
  h_resp_free(&r);
  close(fd);
  for (int i = 0; i < 3; i++) close(held[i]);
  usleep(100000);
  expect(s.port, "GET", "/healthz", "", NULL, 200, NULL);
  stop(&s);
}
END_TEST

/* the example configuration in conf/ loads */
START_TEST(example_config) {
  char path[512];
  snprintf(path, sizeof(path), "%s/conf/lanepack.json", h_bin("LP_SOURCE_ROOT"));
  char *argv[] = {(char *)h_bin("LP_PROXY"), "--config", path, "--check-config", NULL};
  ck_assert_msg(h_run(argv, "/tmp/lp-cfg-example.out") == 0, "see /tmp/lp-cfg-example.out");
}
END_TEST

/* a failing backend's batches are retried on the healthy one; a shape the
 * backend lacks is marked and its sequences re-packed into one it has */
START_TEST(retries_and_shape_mismatch) {
  int good = h_free_port();
  char listen[64];
  snprintf(listen, sizeof(listen), "127.0.0.1:%d", good);
  char *argv[] = {(char *)h_bin("LP_EMULATOR"), "--listen", listen, "--shapes", "4x64", "--cost-ms", "1", NULL};
  pid_t g = h_spawn(argv, "/tmp/lp-it-good.log");
  ck_assert_int_eq(h_wait_http(good, "/healthz", 0, 5000), 0);
  char model[512];
  snprintf(model, sizeof(model),
           "{\"default\": {\"shapes\": \"4x64\", \"backends\": [\"http://127.0.0.1:%%d\", \"http://127.0.0.1:%d\"], "
           "\"max_wait_ms\": 1, \"retry_backoff_ms\": 5}}", good);
  stack_t_ s;
  start(&s, "--shapes 4x64 --cost-ms 1 --fail-rate 1", "\"unhealthy_after\": 1000,", model);
  for (int i = 0; i < 20; i++) {
    int32_t t[8];
    tokens(t, 8, (uint64_t)i + 1);
    char *body = h_ids_body(t, 8, NULL);
    h_resp_t r;
    ck_assert_int_eq(h_call(s.port, "POST", "/v1/infer", "", body, &r), 0);
    ck_assert_msg(r.status == 200, "%s", r.body);
    REQUIRE(h_check_output(r.body, t, 8));
    h_resp_free(&r);
    free(body);
  }
  ck_assert(h_metric(s.port, "lanepack_retries_total") > 0);
  stop(&s);
  h_stop(g, 5000);

  /* the backend has no /v1/shapes and only 4x64; the proxy is told 8x16 too */
  start(&s, "--shapes 4x64 --cost-ms 1 --hide-shapes", NULL,
        "{\"default\": {\"shapes\": \"4x64,8x16\", \"backends\": [\"http://127.0.0.1:%d\"], \"max_wait_ms\": 1}}");
  for (int i = 0; i < 3; i++) {
    int32_t t[5];
    tokens(t, 5, (uint64_t)i + 100);
    char *body = h_ids_body(t, 5, NULL);
    h_resp_t r;
    ck_assert_int_eq(h_call(s.port, "POST", "/v1/infer", "", body, &r), 0);
    ck_assert_msg(r.status == 200, "%s", r.body);
    REQUIRE(h_check_output(r.body, t, 5));
    ck_assert_ptr_nonnull(strstr(r.body, "\"shape\": [4, 64]"));
    h_resp_free(&r);
    free(body);
  }
  h_resp_t r;
  ck_assert_int_eq(h_call(s.port, "GET", "/v1/models", "", NULL, &r), 0);
  ck_assert_msg(strstr(r.body, "\"shape\": [8, 16], \"state\": \"unavailable\""), "%s", r.body);
  h_resp_free(&r);
  stop(&s);
}
END_TEST

/* bearer tokens for client routes; admin routes on their own listener */
START_TEST(auth_and_admin_listener) {
  char tokens[] = "/tmp/lp-tokens-XXXXXX";
  int fd = mkstemp(tokens);
  const char *text = "# clients\nsecret-one\n\n  secret-two\n";
  ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
  close(fd);
  int aport = h_free_port();
  char top[256];
  snprintf(top, sizeof(top), "\"auth_tokens_file\": \"%s\", \"admin_listen\": \"127.0.0.1:%d\",", tokens, aport);
  stack_t_ s;
  start(&s, "--shapes 4x64 --cost-ms 1", top, DEFAULT_MODEL);
  const char *body = "{\"input_ids\": [1, 2]}";
  h_resp_t r;
  ck_assert_int_eq(h_call(s.port, "POST", "/v1/infer", "", body, &r), 0);
  ck_assert_int_eq(r.status, 401);
  ck_assert_ptr_nonnull(strcasestr(r.headers, "WWW-Authenticate: Bearer"));
  ck_assert_ptr_nonnull(strstr(r.body, "unauthorized"));
  h_resp_free(&r);
  expect(s.port, "POST", "/v1/infer", "Authorization: Bearer secret-on\r\n", body, 401, "unauthorized");
  expect(s.port, "POST", "/v1/infer", "Authorization: Basic c2VjcmV0\r\n", body, 401, "unauthorized");
  ck_assert_int_eq(h_call(s.port, "POST", "/v1/infer", "Authorization: Bearer secret-two\r\n", body, &r), 0);
  ck_assert_int_eq(r.status, 200);
  int32_t t2[] = {1, 2};
  ck_assert(h_check_output(r.body, t2, 2));
  h_resp_free(&r);
  expect(s.port, "GET", "/healthz", "", NULL, 200, NULL);         /* probes need no token */
  expect(s.port, "GET", "/metrics", "", NULL, 404, "not_found");  /* admin routes moved */
  expect(aport, "GET", "/metrics", "", NULL, 200, NULL);
  expect(aport, "GET", "/v1/models", "", NULL, 200, NULL);
  expect(aport, "GET", "/readyz", "", NULL, 200, NULL);
  expect(aport, "POST", "/v1/infer", "Authorization: Bearer secret-one\r\n", body, 404, "not_found");
  stop(&s);
  /* a token file that is not there is a configuration error naming the key */
  unlink(tokens);
  char cfg[] = "/tmp/lp-cfg-auth-XXXXXX";
  fd = mkstemp(cfg);
  dprintf(fd, "{\"auth_tokens_file\": \"%s\", \"models\": {\"m\": {\"shapes\": \"4x8\", "
              "\"backends\": [\"http://127.0.0.1:1\"]}}}", tokens);
  close(fd);
  char *argv[] = {(char *)h_bin("LP_PROXY"), "--config", cfg, "--check-config", NULL};
  ck_assert_int_eq(h_run(argv, "/tmp/lp-cfg-auth.out"), 2);
  FILE *f = fopen("/tmp/lp-cfg-auth.out", "r");
  char out[1024] = "";
  size_t n = fread(out, 1, sizeof(out) - 1, f);
  fclose(f);
  out[n] = 0;
  ck_assert_msg(strstr(out, "auth_tokens_file"), "%s", out);
  unlink(cfg);
}
END_TEST

/* past the drain timeout, what is in flight and what is queued still gets an
 * answer: 503 shutting_down; and the proxy exits 0 */
START_TEST(drain_timeout) {
  stack_t_ s;
  start(&s, "--shapes 1x8 --cost-ms 3000", "\"drain_timeout_ms\": 200,",
        "{\"default\": {\"shapes\": \"1x8\", \"backends\": [\"http://127.0.0.1:%d\"], \"max_wait_ms\": 0, "
        "\"max_inflight\": 1}}");
  const char *req = "POST /v1/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 24\r\n\r\n{\"input_ids\": [1,2,3,4]}";
  int fds[2];
  for (int i = 0; i < 2; i++) {
    fds[i] = h_connect(s.port);
    h_send_all(fds[i], req, strlen(req));
    usleep(50000);
  }
  kill(s.proxy, SIGTERM);
  usleep(50000);
  /* a request that arrives on an open connection while draining is taken, and
   * past the drain timeout answered like the rest */
  h_send_all(fds[0], req, strlen(req));
  for (int i = 0; i < 3; i++) {
    h_resp_t r;
    ck_assert_int_eq(h_read_response(fds[i == 2 ? 0 : i], &r, 5000), 0);
    ck_assert_int_eq(r.status, 503);
    ck_assert_ptr_nonnull(strstr(r.body, "shutting_down"));
    h_resp_free(&r);
  }
  close(fds[0]);
  close(fds[1]);
  ck_assert_int_eq(h_stop(s.proxy, 5000), 0);
  h_stop(s.emu, 5000);
}
END_TEST

/* every shape gone: the backend lacks the only one configured */
START_TEST(no_shape_left) {
  stack_t_ s;
  start(&s, "--shapes 4x64 --cost-ms 1 --hide-shapes", NULL,
        "{\"default\": {\"shapes\": \"8x16\", \"backends\": [\"http://127.0.0.1:%d\"], \"max_wait_ms\": 1}}");
  expect(s.port, "POST", "/v1/infer", "", "{\"input_ids\": [1, 2]}", 503, "no_shape_available");
  expect(s.port, "POST", "/v1/infer", "", "{\"input_ids\": [3]}", 503, "no_shape_available");
  stop(&s);
  /* a shape that never finishes compiling does not hold a request for ever */
  start(&s, "--shapes 4x8 --cost-ms 1", NULL,
        "{\"default\": {\"shapes\": \"4x8,2x64\", \"backends\": [\"http://127.0.0.1:%d\"], \"max_wait_ms\": 1, "
        "\"backend_timeout_ms\": 300}}");
  int32_t t[20] = {0};
  char *body = h_ids_body(t, 20, NULL);
  expect(s.port, "POST", "/v1/infer", "", body, 503, "shape_compiling");
  free(body);
  stop(&s);
}
END_TEST

START_TEST(bad_version) {
  stack_t_ s;
  start(&s, "--shapes 4x64 --cost-ms 1", NULL, DEFAULT_MODEL);
  {
    /* HEAD answers headers only, so the next answer on the connection is intact */
    int hfd = h_connect(s.port);
    const char *two = "HEAD /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
    h_send_all(hfd, two, strlen(two));
    char buf[2048];
    size_t got = 0;
    for (int i = 0; i < 50 && got < sizeof(buf) - 1; i++) {
      struct pollfd pf = {hfd, POLLIN, 0};
      if (poll(&pf, 1, 100) <= 0) break;
      ssize_t k = recv(hfd, buf + got, sizeof(buf) - 1 - got, 0);
      if (k <= 0) break;
      got += (size_t)k;
    }
    buf[got] = 0;
    char *second = strstr(buf, "\r\n\r\n");
    ck_assert_ptr_nonnull(second);
    ck_assert_msg(strncmp(second + 4, "HTTP/1.1 200", 12) == 0, "after HEAD: %s", second + 4);
    close(hfd);
  }
  int fd = h_connect(s.port);
  const char *req = "GET /healthz HTTP/7.3\r\nHost: x\r\n\r\n";
  h_send_all(fd, req, strlen(req));
  h_resp_t r;
  ck_assert_int_eq(h_read_response(fd, &r, 5000), 0);
  ck_assert_msg(r.status == 505 || r.status == 400, "status %d", r.status);
  h_resp_free(&r);
  close(fd);
  stop(&s);
}
END_TEST

/* the emulator checks every batch: each inconsistency is a 400 naming it,
 * an unknown shape a 500 shape mismatch, like the chip */
START_TEST(emulator_checks) {
  int port = h_free_port();
  char listen[64];
  snprintf(listen, sizeof(listen), "127.0.0.1:%d", port);
  char *argv[] = {(char *)h_bin("LP_EMULATOR"), "--listen", listen, "--shapes", "2x4", NULL};
  pid_t emu = h_spawn(argv, "/tmp/lp-it-emu-checks.log");
  ck_assert_int_eq(h_wait_http(port, "/healthz", 0, 5000), 0);
  static const struct {
    const char *body;
    int status;
    const char *needle;
  } cases[] = {
      {"{\"batch_id\": 1, \"shape\": [2, 4], \"input_ids\": [[5,6,0,0],[7,0,0,0]], "
       "\"segment_ids\": [[1,1,0,0],[1,0,0,0]], \"position_ids\": [[0,1,0,0],[0,0,0,0]], "
       "\"segments\": [{\"lane\": 0, \"segment\": 1, \"offset\": 0, \"length\": 2}, "
       "{\"lane\": 1, \"segment\": 1, \"offset\": 0, \"length\": 1}]}", 200, "\"outputs\""},
      {"{\"shape\": [3, 4], \"input_ids\": []}", 500, "shape mismatch"},
      {"{\"shape\": [2, 4], \"input_ids\": [[1,2,3,4]], \"segment_ids\": [[1,1,1,1]], "
       "\"position_ids\": [[0,1,2,3]], \"segments\": []}", 400, "lanes"},
      {"{\"shape\": [2, 4], \"input_ids\": [[1,2,3,4],[1,2,3]], \"segment_ids\": [[1,1,1,1],[0,0,0,0]], "
       "\"position_ids\": [[0,1,2,3],[0,0,0,0]], \"segments\": []}", 400, "the bucket is 4"},
      {"{\"shape\": [2, 4], \"input_ids\": [[1,2,0,0],[0,0,0,0]], \"segment_ids\": [[1,1,0,0],[0,0,0,0]], "
       "\"position_ids\": [[0,2,0,0],[0,0,0,0]], \"segments\": [{\"lane\": 0, \"segment\": 1, "
       "\"offset\": 0, \"length\": 2}]}", 400, "position_ids at lane 0 slot 1"},
      {"{\"shape\": [2, 4], \"input_ids\": [[1,2,0,0],[0,0,0,0]], \"segment_ids\": [[1,2,0,0],[0,0,0,0]], "
       "\"position_ids\": [[0,1,0,0],[0,0,0,0]], \"segments\": [{\"lane\": 0, \"segment\": 1, "
       "\"offset\": 0, \"length\": 2}]}", 400, "segment_ids at lane 0 slot 1"},
      {"{\"shape\": [2, 4], \"input_ids\": [[1,2,0,0],[0,0,0,0]], \"segment_ids\": [[1,1,0,0],[0,0,0,0]], "
       "\"position_ids\": [[0,1,0,0],[0,0,0,0]], \"segments\": [{\"lane\": 0, \"segment\": 1, "
       "\"offset\": 0, \"length\": 2}, {\"lane\": 0, \"segment\": 2, \"offset\": 1, \"length\": 2}]}",
       400, "overlaps"},
      {"{\"shape\": [2, 4], \"input_ids\": [[1,2,9,0],[0,0,0,0]], \"segment_ids\": [[1,1,0,0],[0,0,0,0]], "
       "\"position_ids\": [[0,1,0,0],[0,0,0,0]], \"segments\": [{\"lane\": 0, \"segment\": 3, "
       "\"offset\": 0, \"length\": 2}]}", 400, "count 1, 2"},
      {"{\"shape\": [2, 4], \"input_ids\": [[1,2,0,0],[0,0,0,0]], \"segment_ids\": [[1,1,0,0],[0,0,0,5]], "
       "\"position_ids\": [[0,1,0,0],[0,0,0,0]], \"segments\": [{\"lane\": 0, \"segment\": 1, "
       "\"offset\": 0, \"length\": 2}]}", 400, "padding at lane 1 slot 3"},
      {"{\"shape\": [2, 4], \"input_ids\": [[1,2,0,0],[0,0,0,0]]}", 400, "needs 'segment_ids'"},
      {"[1]", 400, "not a JSON object"},
      {"{\"input_ids\": [1, 2], \"cu_seqlens\": [0, 2]}", 500, "rectangles only"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    h_resp_t r;
    ck_assert_int_eq(h_call(port, "POST", "/v1/batch", "", cases[i].body, &r), 0);
    ck_assert_msg(r.status == cases[i].status && strstr(r.body, cases[i].needle),
                  "case %zu: %d %s", i, r.status, r.body);
    h_resp_free(&r);
  }
  expect(port, "GET", "/v1/batch", "", NULL, 405, "method_not_allowed");
  expect(port, "GET", "/nowhere", "", NULL, 404, "not_found");
  h_stop(emu, 5000);
}
END_TEST

/* a ragged model in front of a backend that takes rectangles only: its one
 * "shape" is missing there, so the model has none left and says so */
START_TEST(ragged_against_rectangles) {
  stack_t_ s;
  start(&s, "--shapes 4x64 --cost-ms 1", "\"unhealthy_after\": 100,",
        "{\"default\": {\"ragged\": true, \"backends\": [\"http://127.0.0.1:%d\"], \"max_wait_ms\": 1, "
        "\"retry_backoff_ms\": 1}}");
  expect(s.port, "POST", "/v1/infer", "", "{\"input_ids\": [1, 2]}", 503, "no_shape_available");
  expect(s.port, "POST", "/v1/infer", "", "{\"input_ids\": [3]}", 503, "no_shape_available");
  stop(&s);
}
END_TEST

/* a backend that refuses the batch itself (4xx): retrying cannot help, the
 * client gets 502 with its status (what it said goes to the log only) */
START_TEST(backend_refuses) {
  stack_t_ s;
  /* its health probe fails too (404), so it is never ready: wait for /healthz */
  start_at(&s, "--shapes 4x64 --cost-ms 1", "\"unhealthy_after\": 100,",
           "{\"default\": {\"shapes\": \"4x64\", \"backends\": [\"http://127.0.0.1:%d/wrong-prefix\"], "
           "\"max_wait_ms\": 1}}", "/healthz");
  h_resp_t r;
  ck_assert_int_eq(h_call(s.port, "POST", "/v1/infer", "", "{\"input_ids\": [1]}", &r), 0);
  ck_assert_int_eq(r.status, 502);
  ck_assert_msg(strstr(r.body, "backend_error") && strstr(r.body, "HTTP 404") && !strstr(r.body, "127.0.0.1"),
                "%s", r.body);
  h_resp_free(&r);
  ck_assert_int_eq((int)h_metric(s.port, "lanepack_retries_total"), 0);
  stop(&s);
}
END_TEST

LP_TEST_MAIN("proxy", answers_verify, concurrent_and_pipelined, client_errors, chunked_and_expect,
             backend_failures, no_backend, queue_full_and_deadline, cancel_on_disconnect,
             graceful_shutdown, models_shapes_ragged_per_segment, per_segment_vectors, check_config, dead_keys_refused, loadgen_run,
             loadgen_errors, slow_and_greedy_clients, example_config,
             retries_and_shape_mismatch, auth_and_admin_listener,
             drain_timeout, no_shape_left, bad_version, emulator_checks,
             ragged_against_rectangles, backend_refuses)
