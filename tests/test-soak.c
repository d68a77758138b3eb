#define _GNU_SOURCE /* strcasestr */
/* The "nothing lost" soak: many clients send a known number of requests while
 * one emulator fails, resets, stalls and garbles at set rates and the other is
 * killed and restarted. Every client must get exactly one answer per request,
 * every 200 must verify, and the proxy's memory must come back down.
 * LP_SOAK_REQUESTS (per client, default 200) and LP_SOAK_CLIENTS (default 16)
 * size it; the CI setting runs in well under two minutes. */
#include <check.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "testutil.h"
#include "lanepack/rng.h"

typedef struct {
  long sent, answered, ok, mismatches, duplicates, by_status[600], reconnects;
} tally_t;

static long env_long(const char *name, long def) {
  const char *v = getenv(name);
  return v ? atol(v) : def;
}

/* One client: k sequential requests on a keep-alive connection (reconnecting
 * when the proxy closes it), results into *t. */
static void client(int port, int id, long k, tally_t *t) {
  lp_rng_t r;
  lp_rng_seed(&r, (uint64_t)id + 77);
  int fd = h_connect(port);
  for (long i = 0; i < k; i++) {
    int32_t tok[200];
    size_t n = 1 + (size_t)lp_rng_below(&r, 200);
    for (size_t j = 0; j < n; j++) tok[j] = (int32_t)lp_rng_below(&r, 30000);
    char *body = h_ids_body(tok, n, NULL);
    char head[128];
    snprintf(head, sizeof(head), "POST /v1/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\n\r\n", strlen(body));
    if (fd < 0 || h_send_all(fd, head, strlen(head)) || h_send_all(fd, body, strlen(body))) {
      /* could not even send: that request was never accepted; try again */
      if (fd >= 0) close(fd);
      fd = h_connect(port);
      t->reconnects++;
      free(body);
      i--;
      usleep(10000);
      continue;
    }
    t->sent++;
    h_resp_t resp;
    if (h_read_response(fd, &resp, 30000) == 0) {
      t->answered++;
      t->by_status[resp.status > 0 && resp.status < 600 ? resp.status : 0]++;
      if (resp.status == 200) {
        if (h_check_output(resp.body, tok, n)) t->ok++;
        else t->mismatches++;
      }
      /* a polite client: Retry-After means wait a little (scaled down here) */
      if (strcasestr(resp.headers, "Retry-After:")) usleep(50000);
      if (strcasestr(resp.headers, "Connection: close")) {
        close(fd);
        fd = h_connect(port);
        t->reconnects++;
      }
      h_resp_free(&resp);
    }
    free(body);
  }
  /* nothing may follow the last answer */
  if (fd >= 0) {
    struct pollfd p = {fd, POLLIN, 0};
    char c;
    if (poll(&p, 1, 300) > 0 && recv(fd, &c, 1, MSG_DONTWAIT) > 0) t->duplicates++;
    close(fd);
  }
}

static pid_t start_emu(int port, const char *shapes, const char *faults, const char *log) {
  char listen[64];
  snprintf(listen, sizeof(listen), "127.0.0.1:%d", port);
  char args[256];
  snprintf(args, sizeof(args), "%s", faults);
  char *argv[24] = {(char *)h_bin("LP_EMULATOR"), "--listen", listen, "--shapes", (char *)shapes,
                    "--cost-ms", "3"};
  int ac = 7;
  for (char *sv, *t = strtok_r(args, " ", &sv); t && ac < 22; t = strtok_r(NULL, " ", &sv)) argv[ac++] = t;
  argv[ac] = NULL;
  pid_t p = h_spawn(argv, log);
  ck_assert_int_eq(h_wait_http(port, "/healthz", 0, 5000), 0);
  return p;
}

START_TEST(nothing_lost) {
  long clients = env_long("LP_SOAK_CLIENTS", 16), per = env_long("LP_SOAK_REQUESTS", 200);
  int pa = h_free_port(), pb = h_free_port(), port = h_free_port();
  pid_t a = start_emu(pa, "4x256,8x64", "--fail-rate 0.05 --reset-rate 0.05 --stall-rate 0.02 --garbage-rate 0.03 --seed 9",
                      "/tmp/lp-soak-a.log");
  pid_t b = start_emu(pb, "4x256,8x64", "", "/tmp/lp-soak-b.log");
  char cfg[] = "/tmp/lp-soak-XXXXXX";
  int cfd = mkstemp(cfg);
  dprintf(cfd, "{\"listen\": \"127.0.0.1:%d\", \"health_interval_ms\": 100, \"unhealthy_after\": 3, "
               "\"models\": {\"default\": {\"shapes\": \"4x256,8x64\", \"backends\": "
               "[\"http://127.0.0.1:%d\", \"http://127.0.0.1:%d\"], \"max_wait_ms\": 2, "
               "\"backend_timeout_ms\": 400, \"max_retries\": 3, \"retry_backoff_ms\": 10}}}\n",
          port, pa, pb);
  close(cfd);
  char *pargv[] = {(char *)h_bin("LP_PROXY"), "--config", cfg, NULL};
  pid_t proxy = h_spawn(pargv, "/tmp/lp-soak-proxy.log");
  ck_assert_int_eq(h_wait_http(port, "/readyz", 0, 5000), 0);
  /* baseline after a short warm-up */
  tally_t warm = {0};
  client(port, 999, 20, &warm);
  long base = h_rss_kb(proxy, "VmRSS:");

  tally_t *tally = mmap(NULL, (size_t)clients * sizeof(tally_t), PROT_READ | PROT_WRITE,
                        MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ck_assert(tally != MAP_FAILED);
  memset(tally, 0, (size_t)clients * sizeof(tally_t));
  pid_t kids[256];
  for (long c = 0; c < clients && c < 256; c++) {
    kids[c] = fork();
    if (kids[c] == 0) {
      client(port, (int)c, per, &tally[c]);
      _exit(0);
    }
  }
  /* one backend dies mid-run and comes back, while the clients still send */
  usleep(400000);
  int running = 0;
  for (long c = 0; c < clients && c < 256; c++) running += waitpid(kids[c], NULL, WNOHANG) == 0;
  kill(b, SIGKILL);
  waitpid(b, NULL, 0);
  usleep(800000);
  b = start_emu(pb, "4x256,8x64", "", "/tmp/lp-soak-b2.log");
  int running_after = 0;
  for (long c = 0; c < clients && c < 256; c++) running_after += kill(kids[c], 0) == 0;
  ck_assert_msg(running == clients && running_after > 0,
                "the backend must die and return during the load (%d, %d running)", running, running_after);
  for (long c = 0; c < clients && c < 256; c++) waitpid(kids[c], NULL, 0);

  tally_t all = {0};
  for (long c = 0; c < clients; c++) {
    tally_t *t = &tally[c];
    ck_assert_msg(t->answered == t->sent, "client %ld: sent %ld answered %ld", c, t->sent, t->answered);
    ck_assert_msg(t->sent == per, "client %ld sent %ld of %ld", c, t->sent, per);
    all.sent += t->sent;
    all.answered += t->answered;
    all.ok += t->ok;
    all.mismatches += t->mismatches;
    all.duplicates += t->duplicates;
    all.reconnects += t->reconnects;
    for (int k = 0; k < 600; k++) all.by_status[k] += t->by_status[k];
  }
  usleep(500000);
  double retries = h_metric(port, "lanepack_retries_total");
  double queued = h_metric(port, "lanepack_queue_sequences{");
  double inflight = h_metric(port, "lanepack_inflight_batches");
  long after = h_rss_kb(proxy, "VmRSS:"), peak = h_rss_kb(proxy, "VmHWM:");
  printf("soak: %ld clients x %ld requests: sent %ld, answered %ld, 200 verified %ld, mismatches %ld, "
         "duplicates %ld, reconnects %ld\n", clients, per, all.sent, all.answered, all.ok,
         all.mismatches, all.duplicates, all.reconnects);
  printf("soak: by status:");
  for (int k = 0; k < 600; k++)
    if (all.by_status[k]) printf(" %d: %ld", k, all.by_status[k]);
  printf("; retries %.0f; proxy RSS %ld kB at baseline, %ld kB after, %ld kB peak\n", retries, base,
         after, peak);
  fflush(stdout);
  ck_assert_int_eq(all.mismatches, 0);
  ck_assert_int_eq(all.duplicates, 0);
  ck_assert_int_eq(all.answered, all.sent);
  ck_assert(all.ok > all.sent / 2);
  ck_assert(retries > 0);
  ck_assert(queued == 0 && inflight == 0);
  /* freed memory stays in malloc's arenas; growth past this means a leak. Under
   * AddressSanitizer freed memory sits in its quarantine instead, and leaks are
   * caught by LeakSanitizer when the proxy exits. */
  if (!getenv("ASAN_OPTIONS"))
    ck_assert_msg(after < base + 16 * 1024, "RSS %ld kB after, %ld kB before", after, base);
  munmap(tally, (size_t)clients * sizeof(tally_t));
  ck_assert_int_eq(h_stop(proxy, 10000), 0);
  h_stop(a, 5000);
  h_stop(b, 5000);
  unlink(cfg);
}
END_TEST

/* Runs the load generator; returns its JSON report (caller frees). */
static json_t *load(int port, const char *rate, const char *secs) {
  char url[64], json[64];
  snprintf(url, sizeof(url), "http://127.0.0.1:%d", port);
  snprintf(json, sizeof(json), "/tmp/lp-overload-%d.json", port);
  char *argv[] = {(char *)h_bin("LP_LOADGEN"), "--url", url, "--rate", (char *)rate, "--duration",
                  (char *)secs, "--lengths", "fixed:16", "--verify", "--json", json, NULL};
  ck_assert_msg(h_run(argv, "/tmp/lp-overload-loadgen.out") == 0, "loadgen failed, see %s", "/tmp/lp-overload-loadgen.out");
  json_error_t e;
  json_t *j = json_load_file(json, 0, &e);
  ck_assert_ptr_nonnull(j);
  unlink(json);
  return j;
}

static long jint(json_t *j, const char *k) { return (long)json_integer_value(json_object_get(j, k)); }

/* What a loaded machine may refuse after the overload (see the test). */
#define AFTER_429_PERCENT 5

/* Three times the sustainable rate: admitted requests keep a bounded p99, the
 * rest get 429 at once, memory stays flat, and the proxy recovers as soon as
 * the load drops. LP_OVERLOAD_SECONDS sets the overload phase (CI: 5; the
 * documented longer setting: 30). */
START_TEST(overload) {
  const char *secs = getenv("LP_OVERLOAD_SECONDS") ? getenv("LP_OVERLOAD_SECONDS") : "5";
  char dur[32];
  snprintf(dur, sizeof(dur), "%ss", secs);
  int pe = h_free_port(), port = h_free_port();
  /* one device, 10 ms a batch, 16 requests of 16 tokens a batch: about 1,500/s */
  pid_t emu = start_emu(pe, "4x64", "--cost-ms 10", "/tmp/lp-overload-emu.log");
  char cfg[] = "/tmp/lp-overload-XXXXXX";
  int cfd = mkstemp(cfg);
  dprintf(cfd, "{\"listen\": \"127.0.0.1:%d\", \"models\": {\"default\": {\"shapes\": \"4x64\", "
               "\"backends\": [\"http://127.0.0.1:%d\"], \"max_wait_ms\": 2, \"max_inflight\": 1, "
               "\"max_queue_requests\": 64}}}\n", port, pe);
  close(cfd);
  char *pargv[] = {(char *)h_bin("LP_PROXY"), "--config", cfg, NULL};
  pid_t proxy = h_spawn(pargv, "/tmp/lp-overload-proxy.log");
  ck_assert_int_eq(h_wait_http(port, "/readyz", 0, 5000), 0);
  json_t *warm = load(port, "300", "1s");
  json_decref(warm);
  long base = h_rss_kb(proxy, "VmRSS:");

  json_t *over = load(port, "4500", dur);
  long rss_over = h_rss_kb(proxy, "VmRSS:");
  json_t *by = json_object_get(over, "by_status");
  long ok = jint(over, "ok"), full = (long)json_integer_value(json_object_get(by, "429"));
  double p99 = json_real_value(json_object_get(json_object_get(over, "latency_ms"), "p99"));
  printf("overload: %s s at 4500/s: sent %ld, answered %ld, 200 %ld, 429 %ld, other failures %ld, "
         "p99 of admitted %.1f ms, RSS %ld -> %ld kB\n", secs, jint(over, "sent"),
         jint(over, "answered"), ok, full, jint(over, "failed") - full, p99, base, rss_over);
  ck_assert_int_eq(jint(over, "answered"), jint(over, "sent"));
  ck_assert_int_eq(jint(over, "mismatches"), 0);
  ck_assert_int_gt(ok, 0);
  ck_assert_int_gt(full, 0);                            /* overload was real */
  ck_assert_int_eq(jint(over, "failed"), full);         /* only 429s */
  /* bounded by the queue's 64 requests (about 50 ms of batches); unbounded, 5 s
   * at three times the rate served would queue about 10 s: 4 s sits between.
   * The sanitizer build (scripts/test.sh sets ASAN_OPTIONS for it) serves a
   * fraction of the rate beside the gcc run on 2 cores (4.2 s once), while an
   * unbounded queue would grow longer still: 8 s there */
  double limit_ms = getenv("ASAN_OPTIONS") ? 8000 : 4000;
  ck_assert_msg(p99 < limit_ms, "p99 of admitted requests %.1f ms (limit %.0f)", p99, limit_ms);
  json_decref(over);

  /* the load drops to 500/s, or to half of what the proxy served during the
   * overload when that is less: the sanitizer build beside the gcc run
   * served 637/s once, and 500/s then kept its queue full (148 of 1,490
   * refused) */
  long after_rate = ok / atol(secs) / 2;
  if (after_rate > 500 || after_rate < 1) after_rate = after_rate < 1 ? 1 : 500;
  char rate_after[32];
  snprintf(rate_after, sizeof(rate_after), "%ld", after_rate);
  json_t *after = load(port, rate_after, "3s");
  double p99a = json_real_value(json_object_get(json_object_get(after, "latency_ms"), "p99"));
  long rss_after = h_rss_kb(proxy, "VmRSS:");
  printf("overload: then 3 s at %ld/s: sent %ld, 200 %ld, failed %ld, p99 %.1f ms, RSS %ld kB\n", after_rate,
         jint(after, "sent"), jint(after, "ok"), jint(after, "failed"), p99a, rss_after);
  fflush(stdout);
  /* recovered at once: served as before the overload. On two busy cores a
   * stall of the process over the queue's 64 requests (128 ms at 500/s) can
   * refuse a few with 429 (58 of 1,490 once beside five builds): only 429s, at
   * most AFTER_429_PERCENT of them; a proxy still overloaded refuses most */
  long full_after = (long)json_integer_value(json_object_get(json_object_get(after, "by_status"), "429"));
  ck_assert_int_eq(jint(after, "answered"), jint(after, "sent"));
  ck_assert_int_eq(jint(after, "failed"), full_after);
  ck_assert_msg(full_after * 100 <= AFTER_429_PERCENT * jint(after, "sent"), "%ld of %ld refused after the overload",
                full_after, jint(after, "sent"));
  ck_assert_int_eq(jint(after, "ok") + full_after, jint(after, "sent"));
  ck_assert_msg(p99a < 1000, "p99 after the overload %.1f ms (10 ms batches)", p99a);
  if (!getenv("ASAN_OPTIONS"))
    ck_assert_msg(rss_after < base + 16 * 1024, "RSS %ld kB after, %ld kB before", rss_after, base);
  json_decref(after);
  ck_assert_int_eq(h_stop(proxy, 10000), 0);
  h_stop(emu, 5000);
  unlink(cfg);
}
END_TEST

LP_TEST_MAIN("soak", nothing_lost, overload)
