/* A backlog in the dispatch core, in virtual time: a short sequence that waited
 * past its age bound and a batch's time is packed before longer newcomers
 * (longest first alone left it behind every one of them until it was the
 * oldest of all, one forced per batch: the end-to-end p99 after a hiccup). */
#include <check.h>
#include <string.h>

#include "disprec.h"
#include "testutil.h"
#include "lanepack/dispatch.h"

#define MS 1000000ull

static rec_t R; /* every action the core gave since the test began */

static void admit(lp_disp_t *d, uint64_t job, uint32_t len, uint64_t now) {
  ck_assert_int_eq(lp_disp_admit(d, job, 1, &len, 0, 0, now), 0);
  rec_drain(&R, d, 0);
}

static void answer(lp_disp_t *d, uint64_t batch, uint64_t now) {
  lp_disp_result_t r = {.outcome = LP_DISP_OK, .device_ns = 20 * MS};
  ck_assert_int_eq(lp_disp_result(d, batch, &r, now), 0);
  rec_drain(&R, d, 0);
}

/* Whether the last SEND holds job. */
static int holds(uint64_t job) { return rec_holds(rec_last(&R, LP_DISP_ACT_SEND), job); }

START_TEST(short_sequence_not_left_behind_longer_newcomers) {
  lp_disp_config_t c;
  lp_disp_config_default(&c);
  char err[128];
  ck_assert_int_eq(lp_bucket_set_parse(&c.shapes, "1x8192", err, sizeof(err)), 0);
  c.seed_cost_ns[0] = 20 * MS;
  c.max_wait_ns = 5 * MS;
  c.stall_factor = 0;
  c.request_bound_ns = 10000 * MS;
  lp_disp_t *d = lp_disp_new(&c);
  ck_assert_ptr_nonnull(d);
  rec_clear(&R);
  admit(d, 1, 8192, 0); /* the device is busy until 20 ms */
  ck_assert_uint_eq((uint64_t)rec_count(&R, LP_DISP_ACT_SEND), 1);
  /* a backlog: three older halves, the short one, then longer newcomers */
  admit(d, 2, 4000, 1 * MS);
  admit(d, 3, 4000, 2 * MS);
  admit(d, 4, 4000, 3 * MS);
  admit(d, 5, 1000, 4 * MS);
  for (uint64_t j = 6; j < 12; j++) admit(d, j, 4096, (j - 1) * MS);
  ck_assert_uint_eq((uint64_t)rec_count(&R, LP_DISP_ACT_SEND), 1);
  /* 20 ms: nobody has starved yet (25 ms): the oldest and the longest */
  answer(d, 1, 20 * MS);
  ck_assert_uint_eq((uint64_t)rec_count(&R, LP_DISP_ACT_SEND), 2);
  ck_assert(holds(2) && holds(6) && !holds(5));
  /* 40 ms: all have starved: the oldest first, as far as they fit */
  answer(d, 2, 40 * MS);
  ck_assert_uint_eq((uint64_t)rec_count(&R, LP_DISP_ACT_SEND), 3);
  ck_assert(holds(3) && holds(4));
  /* 60 ms: the short one goes (it waited for every newcomer before) */
  answer(d, 3, 60 * MS);
  ck_assert_uint_eq((uint64_t)rec_count(&R, LP_DISP_ACT_SEND), 4);
  ck_assert_msg(holds(5), "the short sequence waited past 60 ms behind newer, longer ones");
  lp_disp_free(d);
}
END_TEST

/* With more than eight of the largest rectangles waiting (overload) the
 * starving go longest first like the rest: the age order cost capacity. */
START_TEST(overload_packs_longest_first) {
  lp_disp_config_t c;
  lp_disp_config_default(&c);
  char err[128];
  ck_assert_int_eq(lp_bucket_set_parse(&c.shapes, "1x8192", err, sizeof(err)), 0);
  c.seed_cost_ns[0] = 20 * MS;
  c.max_wait_ns = 5 * MS;
  c.stall_factor = 0;
  c.request_bound_ns = 10000 * MS;
  lp_disp_t *d = lp_disp_new(&c);
  ck_assert_ptr_nonnull(d);
  rec_clear(&R);
  admit(d, 1, 8192, 0);
  admit(d, 2, 4000, 1 * MS);
  admit(d, 3, 4000, 2 * MS);
  admit(d, 4, 4000, 3 * MS);
  admit(d, 5, 1000, 4 * MS);
  for (uint64_t j = 6; j < 26; j++) admit(d, j, 4096, (j - 1) * MS); /* 10.6 rectangles queued */
  answer(d, 1, 20 * MS);
  ck_assert(holds(2) && holds(6));
  answer(d, 2, 40 * MS); /* the oldest must go, then the longest */
  ck_assert_uint_eq((uint64_t)rec_count(&R, LP_DISP_ACT_SEND), 3);
  ck_assert(holds(3) && !holds(4) && !holds(5));
  lp_disp_free(d);
}
END_TEST

LP_TEST_MAIN("dispatch-starve", short_sequence_not_left_behind_longer_newcomers, overload_packs_longest_first)
