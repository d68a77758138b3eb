/* A backlog in the dispatch core, in virtual time: a short sequence that waited
 * past its age bound and a batch's time is packed before longer newcomers
 * (longest first alone left it behind every one of them until it was the
 * oldest of all, one forced per batch: the end-to-end p99 after a hiccup); a
 * small request behind a large one goes in the next batch or two (the age
 * order put all of the large one's sequences first). */
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
  rec_config(&c, "1x8192", (const uint64_t[]){20});
  c.max_wait_ns = 5 * MS;
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
  rec_config(&c, "1x8192", (const uint64_t[]){20});
  c.max_wait_ns = 5 * MS;
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

/* One device, 2x8 at 5 ms (and 1x64 at 40 ms): a request of 200 one-token
 * sequences (12.5 batches of 2x8), then one of one sequence of len tokens at 1 ms
 * with priority prio. Answers each batch as its device would and returns how
 * many batches were sent after the small request came before the first that
 * holds it (each 2x8 full while the large request has enough: the fair share
 * costs no fill). */
static int batches_before_small(int age_order, int prio, uint32_t len) {
  lp_disp_config_t c;
  rec_config(&c, "2x8,1x64", (const uint64_t[]){5, 40});
  c.max_wait_ns = 5 * MS;
  c.age_order = age_order;
  lp_disp_t *d = lp_disp_new(&c);
  ck_assert_ptr_nonnull(d);
  rec_clear(&R);
  uint32_t lens[200];
  for (int i = 0; i < 200; i++) lens[i] = 1;
  ck_assert_int_eq(lp_disp_admit(d, 1, 200, lens, 0, 0, 0), 0);
  rec_drain(&R, d, 0);
  ck_assert_int_eq(lp_disp_admit(d, 2, 1, &len, prio, 0, 1 * MS), 0);
  rec_drain(&R, d, 1 * MS);
  int before = rec_count(&R, LP_DISP_ACT_SEND), found = -1;
  uint64_t now = 1 * MS;
  for (int k = 0; k < 40 && !rec_answer_of(&R, 2); k++) {
    const rec_act_t *s = rec_nth(&R, LP_DISP_ACT_SEND, k);
    ck_assert_ptr_nonnull(s);
    if (found < 0 && rec_holds(s, 2)) found = k - before;
    if (k < 10 && s->a.send.lanes == 2) ck_assert_uint_eq(s->a.send.real_tokens, 16); /* every 2x8 full */
    if (s->a.send.expect_ns > now) now = s->a.send.expect_ns;
    lp_disp_result_t r = {.outcome = LP_DISP_OK, .device_ns = 5 * MS};
    ck_assert_int_eq(lp_disp_result(d, s->a.send.batch_id, &r, now), 0);
    rec_drain(&R, d, 0);
  }
  ck_assert_ptr_nonnull(rec_answer_of(&R, 2));
  lp_disp_free(d);
  return found < 0 ? before : found;
}

START_TEST(small_request_not_behind_large_one) {
  int k = batches_before_small(0, 0, 1);
  ck_assert_msg(k <= 1, "the one-sequence request waited behind %d batches of the large one", k);
  /* the order before: it waited behind most of the large one */
  ck_assert_int_gt(batches_before_small(1, 0, 1), 4);
}
END_TEST

/* A long one (only the slow shape holds it) takes turns with the large
 * request's oldest in choosing the shape: it does not wait for all of it. */
START_TEST(long_small_request_not_behind_large_one) {
  int k = batches_before_small(0, 0, 40);
  ck_assert_msg(k <= 2, "the long one-sequence request waited behind %d batches of the large one", k);
}
END_TEST

/* The fair share is within a priority: a small request of lower priority than
 * the large one is not put before it. */
START_TEST(fair_share_keeps_priorities) {
  ck_assert_int_gt(batches_before_small(0, -1, 1), 4);
}
END_TEST

LP_TEST_MAIN("dispatch-starve", short_sequence_not_left_behind_longer_newcomers, overload_packs_longest_first,
             small_request_not_behind_large_one, long_small_request_not_behind_large_one,
             fair_share_keeps_priorities)
