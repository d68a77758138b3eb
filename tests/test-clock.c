#define _GNU_SOURCE
/* The device clock in the proxy, against the emulator: an idle device gets a
 * batch at once (no waiting for company), a deadline shorter than max_wait_ms
 * is met by an idle backend, a deadline no shape can meet is told at once,
 * requests that arrive while the device is busy leave together when it frees,
 * and a backend's reported devices each get a batch. Every time bound is a
 * fraction of the time it tells apart (max_wait, a device's batch, a stalled
 * batch), wide enough for a sanitizer build beside it on two busy cores. */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "testutil.h"

typedef h_stack_t stack_t_;

static stack_t_ start(const char *emu_args, const char *model_keys) {
  stack_t_ s;
  ck_assert_int_eq(h_stack_start(&s, emu_args, "", model_keys), 0);
  usleep(1000000); /* the backend has reported its shapes and devices, even on a busy machine */
  return s;
}

static void stop(stack_t_ *s) { ck_assert_int_eq(h_stack_stop(s), 0); }

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* One request of n tokens with extra body members; status and time taken. */
static int one(int port, size_t n, const char *extra, double *ms) {
  int32_t t[64];
  for (size_t i = 0; i < n; i++) t[i] = (int32_t)(i * 7 + 1);
  char *body = h_ids_body(t, n, extra);
  double t0 = now_ms();
  h_resp_t r;
  int rc = h_call(port, "POST", "/v1/infer", "", body, &r);
  *ms = now_ms() - t0;
  int st = rc ? -1 : r.status;
  if (st == 200 && !h_check_output(r.body, t, n)) st = -2;
  if (!rc) h_resp_free(&r);
  free(body);
  return st;
}

/* A lone request waiting for company would take max_wait_ms: 20 s, five times
 * the bound, which is hundreds of times what it takes (5 ms of device time). */
START_TEST(idle_device_gets_a_batch_at_once) {
  stack_t_ s = start("--shapes 8x64 --cost-ms 5",
                     "\"shapes\": \"8x64\", \"max_wait_ms\": 20000");
  double ms;
  for (int i = 0; i < 3; i++) {
    ck_assert_int_eq(one(s.port, 10, NULL, &ms), 200);
    ck_assert_msg(ms < 4000, "a lone request on an idle device took %.0f ms (max_wait 20000)", ms);
  }
  /* a deadline shorter than max_wait_ms, met by the idle backend */
  ck_assert_int_eq(one(s.port, 10, ", \"deadline_ms\": 4000", &ms), 200);
  stop(&s);
}
END_TEST

/* The device takes 2 s: a 200 ms deadline is refused at admission, well before
 * the 2 s an attempt would take. */
START_TEST(impossible_deadline_told_at_once) {
  stack_t_ s = start("--shapes 8x64 --cost-ms 2000",
                     "\"shapes\": \"8x64\", \"cost_ms\": {\"8x64\": 2000}");
  double ms;
  int st = one(s.port, 10, ", \"deadline_ms\": 200", &ms);
  ck_assert_msg(st == 504 && ms < 1500, "status %d after %.0f ms", st, ms);
  ck_assert_int_eq(one(s.port, 10, ", \"deadline_ms\": 10000", &ms), 200);
  stop(&s);
}
END_TEST

typedef struct {
  int port;
  int delay_ms;
  int status;
} wave_t;

static void *wave(void *arg) {
  wave_t *w = arg;
  usleep((useconds_t)w->delay_ms * 1000);
  double ms;
  w->status = one(w->port, 5, NULL, &ms);
  return NULL;
}

/* One request makes the device busy for 1.5 s; two waves arrive meanwhile (at
 * 0.3 and 0.8 s: hundreds of ms from either end, for threads that start late):
 * they leave together when it frees (max_inflight used to send the first
 * wave at once, to wait behind the running batch). */
static double run_waves(int port, int devices_expected_batches) {
  double b0 = h_metric(port, "lanepack_batches_total{");
  enum { N = 13 };
  wave_t w[N];
  pthread_t th[N];
  for (int i = 0; i < N; i++) {
    w[i] = (wave_t){port, i == 0 ? 0 : i <= 6 ? 300 : 800, 0};
    pthread_create(&th[i], NULL, wave, &w[i]);
  }
  for (int i = 0; i < N; i++) {
    pthread_join(th[i], NULL);
    ck_assert_int_eq(w[i].status, 200);
  }
  double batches = h_metric(port, "lanepack_batches_total{") - b0;
  ck_assert_msg(batches == devices_expected_batches, "%.0f batches", batches);
  return batches;
}

START_TEST(busy_device_packs_what_arrives) {
  stack_t_ s = start("--shapes 8x64 --cost-ms 1500",
                     "\"shapes\": \"8x64\", \"max_wait_ms\": 5");
  run_waves(s.port, 2);  /* first, unknown cost: the answer frees the device */
  run_waves(s.port, 2);  /* then with the learned cost: just in time */
  stop(&s);
}
END_TEST

START_TEST(reported_devices_each_get_a_batch) {
  stack_t_ s = start("--shapes 8x64 --cost-ms 2000 --devices 2", "\"shapes\": \"8x64\", \"max_wait_ms\": 5");
  /* two requests 200 ms apart: each on its own device (2.2 s), not one behind
   * the other (over 4 s) */
  enum { N = 2 };
  wave_t w[N];
  pthread_t th[N];
  double t0 = now_ms();
  for (int i = 0; i < N; i++) {
    w[i] = (wave_t){s.port, i * 200, 0};
    pthread_create(&th[i], NULL, wave, &w[i]);
  }
  for (int i = 0; i < N; i++) {
    pthread_join(th[i], NULL);
    ck_assert_int_eq(w[i].status, 200);
  }
  double ms = now_ms() - t0;
  ck_assert_msg(ms < 3400, "two devices took %.0f ms for two 2000 ms batches", ms);
  ck_assert(h_metric(s.port, "lanepack_batches_total{") == 2);
  stop(&s);
}
END_TEST

typedef struct {
  int port;
  volatile int *stop;
  long sent;
} flood_t;

static void *flood(void *arg) {
  flood_t *f = arg;
  /* 60 tokens: a dozen waiting overflow the decision window (twice a 2x64) */
  int32_t t[60];
  for (int i = 0; i < 60; i++) t[i] = i + 3;
  char *body = h_ids_body(t, 60, ", \"priority\": 5");
  while (!*f->stop) {
    h_resp_t r;
    if (h_call(f->port, "POST", "/v1/infer", "", body, &r) == 0) h_resp_free(&r);
    f->sent++;
  }
  free(body);
  return NULL;
}

/* A flood of priority-5 requests keeps the device saturated; a priority-0
 * request still goes within about max_wait_ms (50 ms; the bound is 100 times
 * that), not when the flood ends (never, while it waits). */
START_TEST(low_priority_not_starved) {
  stack_t_ s = start("--shapes 2x64 --cost-ms 20",
                     "\"shapes\": \"2x64\", \"max_wait_ms\": 50, \"max_segments_per_lane\": 1");
  enum { F = 12 };
  volatile int halt = 0;
  flood_t f[F];
  pthread_t th[F];
  for (int i = 0; i < F; i++) {
    f[i] = (flood_t){s.port, &halt, 0};
    pthread_create(&th[i], NULL, flood, &f[i]);
  }
  usleep(500000);
  double ms;
  int st = one(s.port, 10, ", \"priority\": 0", &ms);
  usleep(200000);
  halt = 1;
  long sent = 0;
  for (int i = 0; i < F; i++) {
    pthread_join(th[i], NULL);
    sent += f[i].sent;
  }
  printf("flood: %ld priority-5 requests; the priority-0 one took %.0f ms\n", sent, ms);
  ck_assert_int_eq(st, 200);
  ck_assert_msg(ms < 5000, "priority 0 waited %.0f ms under the flood", ms);
  stop(&s);
}
END_TEST

/* Batches that stall (a recompile-style slow batch of 6 s) are hedged on the
 * other device (or backend): every request answered once, verified, none
 * waiting for the slow batch (a hedge answers in about 100 ms: the bound, 4.5 s,
 * sits between); the late answers are dropped. */
typedef struct {
  int port, n;
  int ok, bad;
  double max_ms;
} hclient_t;

static void *hedge_client(void *arg) {
  hclient_t *c = arg;
  for (int i = 0; i < c->n; i++) {
    double ms;
    int st = one(c->port, 3 + (size_t)(i % 40), NULL, &ms);
    if (st == 200) c->ok++;
    else c->bad++;
    if (ms > c->max_ms) c->max_ms = ms;
  }
  return NULL;
}

static void hedged_run(int port, const char *what) {
  enum { C = 4 };
  hclient_t c[C];
  pthread_t th[C];
  for (int i = 0; i < C; i++) {
    c[i] = (hclient_t){port, 25, 0, 0, 0};
    pthread_create(&th[i], NULL, hedge_client, &c[i]);
  }
  int ok = 0, bad = 0;
  double max = 0;
  for (int i = 0; i < C; i++) {
    pthread_join(th[i], NULL);
    ok += c[i].ok;
    bad += c[i].bad;
    if (c[i].max_ms > max) max = c[i].max_ms;
  }
  double stalls = h_metric(port, "lanepack_stalls_total"), won = h_metric(port, "lanepack_hedges_won_total");
  printf("hedging (%s): %d ok, %d other, slowest %.0f ms, %.0f stalls, %.0f hedges won\n", what, ok, bad,
         max, stalls, won);
  ck_assert_int_eq(ok, C * 25);
  ck_assert_msg(stalls > 0 && won > 0, "no stall was hedged");
  ck_assert_msg(max < 4500, "a request waited %.0f ms for a stalled batch", max);
}

/* Eight devices: the emulator's devices are one pool, and 2% of ~150 batches
 * slow for 6 s can hold four of them at once (the seed's draws fall so with
 * the dispatch core, whose presumed-lost batches free their device): with
 * four devices no hedge could run anywhere, which is not what this tests. */
START_TEST(stalls_hedged_on_another_device) {
  stack_t_ s = start("--shapes 8x64 --cost-ms 20 --devices 8 --slow-rate 0.02 --slow-ms 6000 --seed 5",
                     "\"shapes\": \"8x64\", \"max_wait_ms\": 2, \"cost_ms\": {\"8x64\": 20}");
  hedged_run(s.port, "second device");
  stop(&s);
}
END_TEST

START_TEST(stalls_hedged_on_another_backend) {
  int pa, pb, port;
  pid_t a = h_start_emulator("--shapes 8x64 --cost-ms 20 --slow-rate 0.15 --slow-ms 6000 --seed 9", &pa);
  pid_t b = h_start_emulator("--shapes 8x64 --cost-ms 20", &pb);
  char rest[512];
  snprintf(rest, sizeof(rest), "\"models\": {\"m\": {\"shapes\": \"8x64\", \"backends\": "
           "[\"http://127.0.0.1:%d\", \"http://127.0.0.1:%d\"], \"max_wait_ms\": 2, "
           "\"cost_ms\": {\"8x64\": 20}}}", pa, pb);
  pid_t proxy = h_start_proxy(rest, "/readyz", &port);
  ck_assert_int_gt(proxy, 0);
  hedged_run(port, "second backend");
  ck_assert_int_eq(h_stop(proxy, 15000), 0);
  h_stop(a, 5000);
  h_stop(b, 5000);
}
END_TEST

LP_TEST_MAIN("clock", stalls_hedged_on_another_device, stalls_hedged_on_another_backend,
             low_priority_not_starved, idle_device_gets_a_batch_at_once, impossible_deadline_told_at_once,
             busy_device_packs_what_arrives, reported_devices_each_get_a_batch)
