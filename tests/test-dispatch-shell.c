/* What the proxy shell needs of the dispatch core, in virtual time: no stall and
 * no early send before the clock knows a cost, the oldest aged sequence goes
 * whatever its priority, a queue depth of 0 (max_inflight), shape slots added
 * and freed, and a reload's tunables. */
#include <check.h>
#include <errno.h>
#include <string.h>

#include "disprec.h"
#include "testutil.h"
#include "lanepack/dispatch.h"

#define MS 1000000ull

static lp_disp_t *make(const char *shapes, uint64_t cost_ms, double stall_factor) {
  lp_disp_config_t c;
  lp_disp_config_default(&c);
  char err[128];
  ck_assert_int_eq(lp_bucket_set_parse(&c.shapes, shapes, err, sizeof(err)), 0);
  for (size_t i = 0; i < c.shapes.count; i++) c.seed_cost_ns[i] = cost_ms * MS;
  c.stall_factor = stall_factor;
  c.stall_min_ns = 50 * MS;
  c.request_bound_ns = 10000 * MS;
  lp_disp_t *d = lp_disp_new(&c);
  ck_assert_ptr_nonnull(d);
  return d;
}

/* Before any answer nothing says when the device frees: the next batch waits for
 * the answer (it went "just in time" at once, on a fallback cost of 1 ns per
 * slot), and the first is not hedged (it stalled after stall_min). */
START_TEST(no_clock_no_early_send_no_stall) {
  lp_disp_t *d = make("1x8", 0, 3.0);
  rec_t s = {0};
  uint32_t len = 4;
  ck_assert_int_eq(lp_disp_admit(d, 1, 1, &len, 0, 0, 0), 0);
  rec_drain(&s, d, 0);
  ck_assert_int_eq(rec_count(&s, LP_DISP_ACT_SEND), 1);
  ck_assert_uint_eq(rec_last(&s, LP_DISP_ACT_SEND)->a.send.expect_ns, 0); /* unknown */
  uint64_t first = rec_last(&s, LP_DISP_ACT_SEND)->a.send.batch_id;
  ck_assert_int_eq(lp_disp_admit(d, 2, 1, &len, 0, 0, 1 * MS), 0);
  rec_drain(&s, d, 0);
  ck_assert_int_eq(rec_count(&s, LP_DISP_ACT_SEND), 1); /* waits for the answer */
  for (uint64_t t = 10 * MS; t <= 390 * MS; t += 10 * MS) {
    lp_disp_tick(d, t);
    rec_drain(&s, d, 0);
  }
  ck_assert_int_eq(rec_count(&s, LP_DISP_ACT_SEND), 1); /* no hedge of the first */
  lp_disp_result_t r = {.outcome = LP_DISP_OK, .http_status = 200};
  ck_assert_int_eq(lp_disp_result(d, first, &r, 400 * MS), 0);
  rec_drain(&s, d, 0);
  ck_assert_int_eq(rec_count(&s, LP_DISP_ACT_SEND), 2);
  ck_assert((rec_send_of(&s, 2, 0) != NULL));
  lp_disp_free(d);
  rec_free(&s);
}
END_TEST

/* A saturating flood of priority 5 (every one of them past its age bound) does
 * not starve a priority-0 sequence: the oldest aged one must go, whatever its
 * level (the first aged in queue order, a priority-5 one, went instead). */
START_TEST(oldest_aged_goes_whatever_its_priority) {
  lp_disp_config_t c;
  lp_disp_config_default(&c);
  char err[128];
  ck_assert_int_eq(lp_bucket_set_parse(&c.shapes, "2x64", err, sizeof(err)), 0);
  c.seed_cost_ns[0] = 20 * MS;
  c.max_segments = 1;
  c.max_wait_ns = 50 * MS;
  c.stall_factor = 0;
  c.request_bound_ns = 100000 * MS;
  lp_disp_t *d = lp_disp_new(&c);
  ck_assert_ptr_nonnull(d);
  rec_t s = {0};
  uint32_t len = 60;
  uint64_t id = 100;
  for (int i = 0; i < 12; i++) ck_assert_int_eq(lp_disp_admit(d, id++, 1, &len, 5, 0, 0), 0);
  uint32_t short_len = 10;
  ck_assert_int_eq(lp_disp_admit(d, 1, 1, &short_len, 0, 0, 1 * MS), 0);
  rec_drain(&s, d, 0);
  /* each answer frees the device; four new priority-5 requests per batch keep
   * the queue full (twice the device's rate): each batch carries the oldest,
   * so the priority-0 one leaves once the twelve older ones have (it never
   * did while the flood lasted) */
  uint64_t t = 0, low_sent_at = 0;
  for (int round = 0; round < 40 && !low_sent_at; round++) {
    ck_assert_int_ge(rec_count(&s, LP_DISP_ACT_SEND), 1);
    uint64_t b = rec_last(&s, LP_DISP_ACT_SEND)->a.send.batch_id;
    t += 20 * MS;
    for (int k = 0; k < 4; k++) ck_assert_int_eq(lp_disp_admit(d, id++, 1, &len, 5, 0, t), 0);
    lp_disp_result_t r = {.outcome = LP_DISP_OK, .http_status = 200};
    ck_assert_int_eq(lp_disp_result(d, b, &r, t), 0);
    rec_drain(&s, d, 0);
    if ((rec_send_of(&s, 1, 0) != NULL)) low_sent_at = t;
  }
  ck_assert_msg(low_sent_at && low_sent_at <= 13 * 20 * MS, "the priority-0 one left at %llu ms (0: never)",
                (unsigned long long)(low_sent_at / MS));
  lp_disp_free(d);
  rec_free(&s);
}
END_TEST

/* Depth 0 (the proxy's max_inflight of one per device): nothing waits at a busy
 * device, not even just in time; depth 1 sends the next just in time. */
START_TEST(queue_depth_zero) {
  for (int depth = 0; depth < 2; depth++) {
    lp_disp_t *d = make("1x8", 20, 0);
    lp_disp_set_queue_depth(d, (uint32_t)depth);
    rec_t s = {0};
    uint32_t len = 4;
    ck_assert_int_eq(lp_disp_admit(d, 1, 1, &len, 0, 0, 0), 0);
    rec_drain(&s, d, 0);
    ck_assert_int_eq(lp_disp_admit(d, 2, 1, &len, 0, 0, 5 * MS), 0);
    rec_drain(&s, d, 0);
    for (uint64_t t = 6 * MS; t < 40 * MS; t += MS) {
      lp_disp_tick(d, t);
      rec_drain(&s, d, 0);
    }
    ck_assert_int_eq(rec_count(&s, LP_DISP_ACT_SEND), depth ? 2 : 1);
    lp_disp_free(d);
    rec_free(&s);
  }
}
END_TEST

/* A shape a backend added takes a free slot and is used once a backend has it;
 * freed, what only it held is refused. A reload's tunables apply. */
START_TEST(shape_slots_and_reconfigure) {
  lp_disp_t *d = make("1x8", 10, 0);
  rec_t s = {0};
  uint32_t len = 12;
  ck_assert_int_eq(lp_disp_admit(d, 1, 1, &len, 0, 0, 0), -EMSGSIZE);
  ck_assert_int_eq(lp_disp_set_shape(d, 1, 1, 16), 0);
  ck_assert_int_eq(lp_disp_admit(d, 1, 1, &len, 0, 0, 0), -EMSGSIZE); /* unavailable until a backend has it */
  lp_shape_state_t st[2] = {LP_SHAPE_COMPILED, LP_SHAPE_COMPILED};
  ck_assert_int_eq(lp_disp_backend_shapes(d, 0, st, 2, 0), 0);
  ck_assert_int_eq(lp_disp_admit(d, 1, 1, &len, 0, 0, 0), 0);
  rec_drain(&s, d, 0);
  ck_assert_int_eq(rec_count(&s, LP_DISP_ACT_SEND), 1);
  ck_assert_int_eq(rec_last(&s, LP_DISP_ACT_SEND)->a.send.shape, 1);
  ck_assert_uint_eq(rec_last(&s, LP_DISP_ACT_SEND)->a.send.bucket, 16);
  lp_disp_result_t r = {.outcome = LP_DISP_OK, .http_status = 200};
  ck_assert_int_eq(lp_disp_result(d, rec_last(&s, LP_DISP_ACT_SEND)->a.send.batch_id, &r, 5 * MS), 0);
  rec_drain(&s, d, 0);
  ck_assert_int_eq(lp_disp_set_shape(d, 1, 0, 0), 0);
  ck_assert_int_eq(lp_disp_backend_shapes(d, 0, st, 1, 5 * MS), 0);
  ck_assert_int_eq(lp_disp_admit(d, 2, 1, &len, 0, 0, 6 * MS), -EMSGSIZE);
  ck_assert_int_eq(lp_disp_set_shape(d, 3, 1, 16), -EINVAL); /* past the count */
  /* reload: a smaller queue */
  lp_disp_config_t c;
  lp_disp_config_default(&c);
  c.max_queue_jobs = 1;
  ck_assert_int_eq(lp_disp_reconfigure(d, &c), 0);
  uint32_t small = 4;
  ck_assert_int_eq(lp_disp_admit(d, 3, 1, &small, 0, 0, 7 * MS), 0);
  ck_assert_int_eq(lp_disp_admit(d, 4, 1, &small, 0, 0, 7 * MS), -ENOBUFS);
  rec_drain(&s, d, 0);
  lp_disp_free(d);
  rec_free(&s);
}
END_TEST

LP_TEST_MAIN("dispatch-shell", no_clock_no_early_send_no_stall, oldest_aged_goes_whatever_its_priority,
             queue_depth_zero, shape_slots_and_reconfigure)
