/* A fresh dispatch core with no configured cost, in virtual time: an untried
 * shape is tried early under a backlog (its cost was scaled by slots from the
 * shape tried first, which tied it with the larger rectangle for ever), and a
 * first batch that stalls is hedged after a bound instead of the transfer
 * timeout, teaching the clock a lower bound on the shape's cost. */
#include <check.h>
#include <string.h>

#include "disprec.h"
#include "testutil.h"
#include "lanepack/dispatch.h"

#define MS 1000000ull

/* one modelled device: a batch runs after the one ahead of it */
typedef struct pend_s {
  uint64_t batch, done;
  int shape;
} pend_t;

static pend_t pend[64];
static size_t npend;
static uint64_t dev_free, sends, copies_sent, answered_ok;
static int shapes_sent[256];
static uint64_t cost_of[2] = {20 * MS, 8 * MS};

static rec_t R; /* every action the core gave since fresh() */

/* Records the core's actions and runs each new SEND on the modelled device. */
static void drain(lp_disp_t *d, uint64_t now) {
  size_t from = R.n;
  rec_drain(&R, d, now);
  for (size_t i = from; i < R.n; i++) {
    const lp_disp_action_t *a = &R.acts[i].a;
    if (a->kind == LP_DISP_ACT_ANSWER && a->answer.status == LP_DISP_ST_OK) answered_ok++;
    if (a->kind != LP_DISP_ACT_SEND) continue;
    if (sends < 256) shapes_sent[sends] = a->send.shape;
    sends++;
    copies_sent += a->send.copies;
    REQUIRE(npend < 64);
    uint64_t start = dev_free > now ? dev_free : now;
    dev_free = start + cost_of[a->send.shape];
    pend[npend++] = (pend_t){.batch = a->send.batch_id, .done = dev_free, .shape = a->send.shape};
  }
}

static lp_disp_t *fresh(const char *shapes, double stall_factor) {
  lp_disp_config_t c;
  lp_disp_config_default(&c);
  char err[128];
  ck_assert_int_eq(lp_bucket_set_parse(&c.shapes, shapes, err, sizeof(err)), 0);
  c.max_wait_ns = 5 * MS;
  c.stall_factor = stall_factor;
  c.stall_min_ns = 50 * MS;
  c.backend_timeout_ns = 30000 * MS;
  lp_disp_t *d = lp_disp_new(&c);
  ck_assert_ptr_nonnull(d);
  npend = 0;
  dev_free = sends = copies_sent = answered_ok = 0;
  rec_clear(&R);
  return d;
}

START_TEST(untried_shape_tried_early) {
  lp_disp_t *d = fresh("4x8192,8x2048", 0);
  uint64_t job = 1, now = 0;
  uint32_t len = 1000;
  /* a long sequence first (only 4x8192 holds it), then a backlog of short
   * sequences that both shapes hold */
  uint32_t long_len = 5000;
  ck_assert_int_eq(lp_disp_admit(d, job++, 1, &long_len, 0, 0, now), 0);
  for (int i = 0; i < 200; i++) ck_assert_int_eq(lp_disp_admit(d, job++, 1, &len, 0, 0, now), 0);
  drain(d, now);
  while (sends < 6 && npend) {
    pend_t p = pend[0];
    memmove(pend, pend + 1, --npend * sizeof(*pend));
    now = p.done;
    lp_disp_result_t r = {.outcome = LP_DISP_OK, .device_ns = cost_of[p.shape]};
    ck_assert_int_eq(lp_disp_result(d, p.batch, &r, now), 0);
    for (int i = 0; i < 40; i++) ck_assert_int_eq(lp_disp_admit(d, job++, 1, &len, 0, 0, now), 0);
    drain(d, now);
  }
  ck_assert_uint_ge(sends, 3);
  int tried = shapes_sent[0] == 1 || shapes_sent[1] == 1 || shapes_sent[2] == 1;
  ck_assert_msg(tried, "8x2048 not tried in the first three batches (shapes %d %d %d)", shapes_sent[0],
                shapes_sent[1], shapes_sent[2]);
  /* once both are learned, the cheaper per token (8x2048: 8 ms for 16,000
   * tokens against 20 ms for 32,000) keeps the backlog */
  ck_assert_int_eq(shapes_sent[sends - 1], 1);
  lp_disp_free(d);
}
END_TEST

START_TEST(first_batch_stall_hedged) {
  lp_disp_t *d = fresh("4x8192", 3.0);
  uint32_t len = 1000;
  ck_assert_int_eq(lp_disp_admit(d, 1, 1, &len, 0, 0, 0), 0);
  drain(d, 0);
  ck_assert_uint_eq(sends, 1);
  /* the first batch never answers: tick as asked, up to 5 s (its time is
   * taken as 1 s, a thirtieth of the transfer timeout: hedged after 3 s) */
  uint64_t now = 0;
  while (sends < 2) {
    uint64_t w = lp_disp_wake_at(d);
    if (w == UINT64_MAX || w > 5000 * MS) break;
    now = w > now ? w : now + 1;
    lp_disp_tick(d, now);
    drain(d, now);
  }
  ck_assert_msg(sends == 2, "the stalled first batch was not hedged within 5 s (next wake %llu ns)",
                (unsigned long long)lp_disp_wake_at(d));
  ck_assert_uint_eq(copies_sent, 1);
  ck_assert_uint_le(now, 3500 * MS);
  /* the stall taught the clock a lower bound on the shape's cost */
  const lp_devclock_t *c = lp_disp_clock(d, 0);
  ck_assert_uint_ge(lp_devclock_cost(c, 0), now - 1 * MS);
  /* the hedge answers: the job is done */
  lp_disp_result_t r = {.outcome = LP_DISP_OK, .device_ns = 20 * MS};
  ck_assert_int_eq(lp_disp_result(d, pend[1].batch, &r, now + 20 * MS), 0);
  drain(d, now + 20 * MS);
  ck_assert_uint_eq(answered_ok, 1);
  lp_disp_free(d);
}
END_TEST

LP_TEST_MAIN("dispatch-warmup", untried_shape_tried_early, first_batch_stall_hedged)
