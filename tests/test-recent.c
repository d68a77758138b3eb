/* The recent-batches ring of the live view: what it records of a batch and
 * renders (read back with jansson), its wrap-around at both capacities, the
 * ?n= parameter, and that its JSON holds lengths and timings only. */
#include <check.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lanepack/recent.h"
#include "testutil.h"

#define MS 1000000ull

/* A batch of nsegs one-lane segments of length 3 (ragged lanes), sent at sent_ns. */
static uint64_t send(lp_recent_t *r, uint64_t id, size_t nsegs, uint64_t sent_ns) {
  static lp_segment_t segs[LP_RECENT_SEGMENTS + 100];
  for (size_t i = 0; i < nsegs; i++)
    segs[i] = (lp_segment_t){.lane = (uint32_t)(i % 8), .segment = (uint32_t)(i / 8 + 1),
                             .offset = (uint32_t)(i / 8) * 3, .length = 3, .item = (uint32_t)i};
  lp_recent_sent_t s = {.id = id, .model = "m", .backend = "http://b:1", .lanes = 8, .bucket = 8192,
                        .real_tokens = 3 * nsegs, .segs = segs, .nsegs = nsegs, .reason = "idle",
                        .sent_ns = sent_ns, .devices = 1};
  return lp_recent_sent(r, &s);
}

static json_t *render(const lp_recent_t *r, uint32_t n, uint64_t now) {
  lp_buf_t b;
  lp_buf_init(&b);
  lp_recent_render(r, n, now, &b);
  json_error_t err;
  json_t *j = json_loadb(b.data, b.len, 0, &err);
  ck_assert_msg(j != NULL, "not JSON: %s: %.*s", err.text, (int)(b.len < 400 ? b.len : 400), b.data);
  lp_buf_free(&b);
  return j;
}

static json_t *batch(json_t *j, size_t i) { return json_array_get(json_object_get(j, "batches"), i); }
static double num(json_t *o, const char *k) { return json_number_value(json_object_get(o, k)); }

START_TEST(records_what_left_and_how_it_ended) {
  lp_recent_t *r = lp_recent_new();
  ck_assert_ptr_nonnull(r);
  lp_segment_t segs[3] = {{.lane = 0, .segment = 1, .offset = 0, .length = 1500, .item = 2},
                          {.lane = 0, .segment = 2, .offset = 1500, .length = 500, .item = 0},
                          {.lane = 3, .segment = 1, .offset = 0, .length = 7, .item = 1}};
  uint64_t busy[3] = {121 * MS, 0, 140 * MS};
  lp_recent_sent_t s = {.id = 42, .model = "bert \"base\"", .backend = "http://10.0.0.1:9000", .backend_index = 1,
                        .device = 2, .devices = 3, .lanes = 4, .bucket = 2048, .real_tokens = 2007,
                        .segs = segs, .nsegs = 3, .reason = "just_in_time", .copies = 1, .queue_seqs = 17,
                        .queue_tokens = 4096, .sent_ns = 100 * MS, .lead_ns = 2 * MS, .cost_ns = 20 * MS,
                        .expect_ns = 140 * MS, .device_free_ns = busy, .ndevice_free = 3};
  uint64_t t = lp_recent_sent(r, &s);
  ck_assert_uint_ne(t, 0);
  ck_assert_uint_eq(lp_recent_count(r), 1);
  json_t *j = render(r, 64, 150 * MS);
  ck_assert_int_eq(json_integer_value(json_object_get(j, "capacity")), LP_RECENT_BATCHES);
  json_t *b = batch(j, 0);
  ck_assert_int_eq(json_integer_value(json_object_get(b, "id")), 42);
  ck_assert_str_eq(json_string_value(json_object_get(b, "model")), "bert \"base\"");
  json_t *shape = json_object_get(b, "shape");
  ck_assert_int_eq(json_integer_value(json_array_get(shape, 0)), 4);
  ck_assert_int_eq(json_integer_value(json_array_get(shape, 1)), 2048);
  json_t *be = json_object_get(b, "backend");
  ck_assert_int_eq(json_integer_value(json_object_get(be, "index")), 1);
  ck_assert_str_eq(json_string_value(json_object_get(be, "url")), "http://10.0.0.1:9000");
  ck_assert_int_eq(json_integer_value(json_object_get(b, "device")), 2);
  ck_assert_int_eq(json_integer_value(json_object_get(b, "devices")), 3);
  ck_assert_str_eq(json_string_value(json_object_get(b, "reason")), "just_in_time");
  ck_assert_int_eq(json_integer_value(json_object_get(b, "copies")), 1);
  ck_assert_int_eq(json_integer_value(json_object_get(b, "real_tokens")), 2007);
  ck_assert_double_eq_tol(num(b, "fill"), 2007.0 / 8192.0, 1e-4);
  json_t *q = json_object_get(b, "queue");
  ck_assert_int_eq(json_integer_value(json_object_get(q, "sequences")), 17);
  ck_assert_int_eq(json_integer_value(json_object_get(q, "tokens")), 4096);
  ck_assert_double_eq_tol(num(b, "age_ms"), 50.0, 1e-6);
  /* the clock, in milliseconds after the send: start = end - cost */
  json_t *c = json_object_get(b, "clock");
  ck_assert_double_eq_tol(num(c, "lead_ms"), 2.0, 1e-6);
  ck_assert_double_eq_tol(num(c, "cost_ms"), 20.0, 1e-6);
  ck_assert_double_eq_tol(num(c, "start_ms"), 20.0, 1e-6);
  ck_assert_double_eq_tol(num(c, "end_ms"), 40.0, 1e-6);
  json_t *dev = json_object_get(c, "device_busy_ms");
  ck_assert_int_eq(json_array_size(dev), 3);
  ck_assert_double_eq_tol(json_number_value(json_array_get(dev, 0)), 21.0, 1e-6);
  ck_assert(json_is_null(json_array_get(dev, 1))); /* idle */
  ck_assert_double_eq_tol(json_number_value(json_array_get(dev, 2)), 40.0, 1e-6);
  ck_assert(json_is_null(json_object_get(b, "answer"))); /* in flight */
  ck_assert_int_eq(json_integer_value(json_object_get(b, "segments_total")), 3);
  json_t *sg = json_object_get(b, "segments");
  ck_assert_int_eq(json_array_size(sg), 3);
  for (size_t i = 0; i < 3; i++) {
    json_t *g = json_array_get(sg, i);
    ck_assert_int_eq(json_array_size(g), 3);
    ck_assert_int_eq(json_integer_value(json_array_get(g, 0)), segs[i].lane);
    ck_assert_int_eq(json_integer_value(json_array_get(g, 1)), segs[i].offset);
    ck_assert_int_eq(json_integer_value(json_array_get(g, 2)), segs[i].length);
  }
  json_decref(j);

  ck_assert_int_eq(lp_recent_answered(r, t, "ok", 200, 19 * MS, 145 * MS), 0);
  j = render(r, 1, 150 * MS);
  json_t *a = json_object_get(batch(j, 0), "answer");
  ck_assert_str_eq(json_string_value(json_object_get(a, "outcome")), "ok");
  ck_assert_int_eq(json_integer_value(json_object_get(a, "status")), 200);
  ck_assert_double_eq_tol(num(a, "after_ms"), 45.0, 1e-6);
  ck_assert_double_eq_tol(num(a, "device_ms"), 19.0, 1e-6);
  json_decref(j);
  lp_recent_free(r);
}
END_TEST

/* Every key the JSON has, exactly: a field added (a request id, tokens) must
 * be a decision, documented, not an accident. */
START_TEST(lengths_and_timings_only) {
  lp_recent_t *r = lp_recent_new();
  uint64_t t = send(r, 1, 2, 10 * MS);
  lp_recent_answered(r, t, "5xx", 503, 0, 12 * MS);
  json_t *j = render(r, 64, 20 * MS);
  static const char *top[] = {"capacity", "batches"};
  static const char *keys[] = {"id", "model", "shape", "backend", "device", "devices", "reason",
                               "copies", "real_tokens", "fill", "queue", "age_ms", "clock",
                               "answer", "segments_total", "segments"};
  static const char *clock[] = {"lead_ms", "cost_ms", "start_ms", "end_ms", "device_busy_ms"};
  static const char *answer[] = {"outcome", "status", "after_ms", "device_ms"};
  struct { json_t *o; const char **k; size_t n; } want[] = {
      {j, top, 2}, {batch(j, 0), keys, 16}, {json_object_get(batch(j, 0), "clock"), clock, 5},
      {json_object_get(batch(j, 0), "answer"), answer, 4}};
  for (size_t w = 0; w < sizeof(want) / sizeof(want[0]); w++) {
    ck_assert_int_eq(json_object_size(want[w].o), want[w].n);
    for (size_t i = 0; i < want[w].n; i++) ck_assert_ptr_nonnull(json_object_get(want[w].o, want[w].k[i]));
  }
  /* unknown times are null, never 0 */
  ck_assert(json_is_null(json_object_get(json_object_get(batch(j, 0), "clock"), "end_ms")));
  ck_assert(json_is_null(json_object_get(json_object_get(batch(j, 0), "answer"), "device_ms")));
  json_decref(j);
  lp_recent_free(r);
}
END_TEST

START_TEST(wraps_at_its_batch_capacity) {
  lp_recent_t *r = lp_recent_new();
  ck_assert_uint_eq(lp_recent_count(r), 0);
  json_t *j = render(r, 64, 0);
  ck_assert_int_eq(json_array_size(json_object_get(j, "batches")), 0);
  json_decref(j);
  uint64_t first = 0, last = 0;
  for (uint64_t id = 1; id <= LP_RECENT_BATCHES + 10; id++) {
    last = send(r, id, 1, id * MS);
    if (id == 1) first = last;
  }
  ck_assert_uint_eq(lp_recent_count(r), LP_RECENT_BATCHES);
  j = render(r, 64, 1000 * MS);
  json_t *bs = json_object_get(j, "batches");
  ck_assert_int_eq(json_array_size(bs), LP_RECENT_BATCHES);
  /* newest first, the oldest ten gone */
  for (size_t i = 0; i < LP_RECENT_BATCHES; i++)
    ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(bs, i), "id")),
                     LP_RECENT_BATCHES + 10 - (int)i);
  json_decref(j);
  j = render(r, 5, 1000 * MS);
  ck_assert_int_eq(json_array_size(json_object_get(j, "batches")), 5);
  json_decref(j);
  /* an answer for a batch that has left the ring changes nothing */
  ck_assert_int_eq(lp_recent_answered(r, first, "ok", 200, 0, 999 * MS), -ENOENT);
  ck_assert_int_eq(lp_recent_answered(r, 0, "ok", 200, 0, 999 * MS), -ENOENT);
  ck_assert_int_eq(lp_recent_answered(r, last + 1, "ok", 200, 0, 999 * MS), -ENOENT);
  ck_assert_int_eq(lp_recent_answered(r, last, "ok", 200, 0, 999 * MS), 0);
  lp_recent_free(r);
}
END_TEST

START_TEST(segments_store_wraps_and_cuts) {
  lp_recent_t *r = lp_recent_new();
  size_t big = LP_RECENT_SEGMENTS / 3 + 1; /* three of them do not fit */
  uint64_t t1 = send(r, 1, big, MS);
  send(r, 2, big, 2 * MS);
  ck_assert_uint_eq(lp_recent_count(r), 2);
  send(r, 3, big, 3 * MS);
  ck_assert_uint_eq(lp_recent_count(r), 2); /* the first one's segments were overwritten */
  ck_assert_int_eq(lp_recent_answered(r, t1, "ok", 200, 0, 4 * MS), -ENOENT);
  json_t *j = render(r, 64, 5 * MS);
  ck_assert_int_eq(json_array_size(json_object_get(j, "batches")), 2);
  json_t *g = json_array_get(json_object_get(batch(j, 1), "segments"), big - 1);
  ck_assert_int_eq(json_integer_value(json_array_get(g, 0)), (int)((big - 1) % 8));
  ck_assert_int_eq(json_integer_value(json_array_get(g, 1)), (int)((big - 1) / 8) * 3);
  json_decref(j);
  /* a batch with more segments than the store: the first LP_RECENT_SEGMENTS kept */
  send(r, 4, LP_RECENT_SEGMENTS + 100, 6 * MS);
  ck_assert_uint_eq(lp_recent_count(r), 1);
  j = render(r, 64, 7 * MS);
  ck_assert_int_eq(json_integer_value(json_object_get(batch(j, 0), "segments_total")), LP_RECENT_SEGMENTS + 100);
  ck_assert_int_eq(json_array_size(json_object_get(batch(j, 0), "segments")), LP_RECENT_SEGMENTS);
  json_decref(j);
  lp_recent_free(r);
}
END_TEST

START_TEST(devices_and_names_bounded) {
  lp_recent_t *r = lp_recent_new();
  uint64_t busy[LP_RECENT_DEVICES + 4];
  for (size_t i = 0; i < sizeof(busy) / sizeof(busy[0]); i++) busy[i] = (i + 2) * MS;
  char url[LP_RECENT_URL * 2];
  memset(url, 'u', sizeof(url) - 1);
  url[sizeof(url) - 1] = '\0';
  lp_recent_sent_t s = {.id = 9, .model = "m\x01\xff", .backend = url, .lanes = 1, .bucket = 16,
                        .sent_ns = MS, .devices = LP_RECENT_DEVICES + 4, .device_free_ns = busy,
                        .ndevice_free = LP_RECENT_DEVICES + 4};
  lp_recent_sent(r, &s);
  json_t *j = render(r, 64, 2 * MS);
  json_t *b = batch(j, 0);
  ck_assert_int_eq(json_integer_value(json_object_get(b, "devices")), LP_RECENT_DEVICES + 4);
  ck_assert_int_eq(json_array_size(json_object_get(json_object_get(b, "clock"), "device_busy_ms")),
                   LP_RECENT_DEVICES);
  ck_assert_uint_eq(strlen(json_string_value(json_object_get(json_object_get(b, "backend"), "url"))),
                    LP_RECENT_URL - 1);
  ck_assert_int_eq(json_array_size(json_object_get(b, "segments")), 0);
  json_decref(j);
  lp_recent_free(r);
}
END_TEST

START_TEST(query_n) {
  uint32_t n = 0;
  ck_assert_int_eq(lp_recent_query_n("", 0, &n), 0);
  ck_assert_uint_eq(n, LP_RECENT_BATCHES);
  const struct { const char *q; uint32_t n; } ok[] = {{"n=5", 5}, {"x=1&n=7", 7}, {"n=64", 64}, {"n=01", 1},
                                                      {"nx=3", LP_RECENT_BATCHES}, {"&&", LP_RECENT_BATCHES}};
  for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
    ck_assert_msg(lp_recent_query_n(ok[i].q, strlen(ok[i].q), &n) == 0, "%s", ok[i].q);
    ck_assert_uint_eq(n, ok[i].n);
  }
  const char *bad[] = {"n=0", "n=65", "n=abc", "n=", "n", "n=5&n=6", "n=-1", "n=+1", "n=99999999999999999999",
                       "n=1x", "n=1%20"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
    ck_assert_msg(lp_recent_query_n(bad[i], strlen(bad[i]), &n) == -EINVAL, "%s", bad[i]);
  /* the length is the query's, not the string's */
  ck_assert_int_eq(lp_recent_query_n("n=12", 3, &n), 0);
  ck_assert_uint_eq(n, 1);
}
END_TEST

/* A copy renders as the ring did when copied, whatever the ring does after. */
START_TEST(dup_is_a_frozen_copy) {
  lp_recent_t *r = lp_recent_new();
  for (uint64_t id = 1; id <= 3; id++) send(r, id, 2, id * MS);
  lp_recent_t *c = lp_recent_dup(r);
  ck_assert_ptr_nonnull(c);
  lp_buf_t a, b;
  lp_buf_init(&a);
  lp_buf_init(&b);
  lp_recent_render(r, 64, 10 * MS, &a);
  for (uint64_t id = 4; id <= LP_RECENT_BATCHES + 4; id++) send(r, id, 2, id * MS);
  lp_recent_render(c, 64, 10 * MS, &b);
  ck_assert_uint_eq(lp_recent_count(c), 3);
  ck_assert_uint_eq(a.len, b.len);
  ck_assert_int_eq(memcmp(a.data, b.data, a.len), 0);
  lp_buf_free(&a);
  lp_buf_free(&b);
  lp_recent_free(c);
  lp_recent_free(r);
}
END_TEST

LP_TEST_MAIN("recent", records_what_left_and_how_it_ended, lengths_and_timings_only, wraps_at_its_batch_capacity,
             segments_store_wraps_and_cuts, devices_and_names_bounded, query_n, dup_is_a_frozen_copy)
