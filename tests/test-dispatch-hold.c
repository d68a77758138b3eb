/* One device, two shapes, in virtual time: the oldest sequence past its age
 * bound that only the slow shape holds (a long one) is held while a full batch
 * of the cheap shape costs less device time per real token than the slow
 * rectangle it would force, up to its bound plus two of that rectangle's
 * times; then it goes. (A lone long changelog entry sent a 4x8192 of short ones
 * each time: at 80-90% load on one device that cost a tenth of the chip.) */
#include <check.h>
#include <string.h>

#include "disprec.h"
#include "testutil.h"
#include "lanepack/dispatch.h"

#define MS 1000000ull

static rec_t R; /* every action the core gave since the test began */

static const lp_disp_action_t *last_send(void) {
  const rec_act_t *s = rec_last(&R, LP_DISP_ACT_SEND);
  ck_assert_ptr_nonnull(s);
  return &s->a;
}

static void admit(lp_disp_t *d, uint64_t job, uint32_t len, uint64_t now) {
  ck_assert_int_eq(lp_disp_admit(d, job, 1, &len, 0, 0, now), 0);
  rec_drain(&R, d, 0);
}

static void answer(lp_disp_t *d, uint64_t batch, uint64_t device_ns, uint64_t now) {
  lp_disp_result_t r = {.outcome = LP_DISP_OK, .device_ns = device_ns};
  ck_assert_int_eq(lp_disp_result(d, batch, &r, now), 0);
  rec_drain(&R, d, 0);
}

/* Whether the last SEND holds job. */
static int holds(uint64_t job) { return rec_holds(rec_last(&R, LP_DISP_ACT_SEND), job); }

START_TEST(long_held_while_a_cheap_batch_pays) {
  lp_disp_config_t c;
  rec_config(&c, "4x8192,8x2048", (const uint64_t[]){20, 8});
  c.max_wait_ns = 5 * MS;
  lp_disp_t *d = lp_disp_new(&c);
  ck_assert_ptr_nonnull(d);
  rec_clear(&R);
  admit(d, 1, 8000, 0); /* the device is busy until 20 ms */
  ck_assert_uint_eq((uint64_t)rec_count(&R, LP_DISP_ACT_SEND), 1);
  uint64_t first = last_send()->send.batch_id;
  admit(d, 2, 5000, 1 * MS); /* the long one: only 4x8192 holds it */
  for (uint64_t j = 3; j < 19; j++) admit(d, j, 1000, 2 * MS); /* 16 short: a full 8x2048 */
  ck_assert_uint_eq((uint64_t)rec_count(&R, LP_DISP_ACT_SEND), 1);
  /* 20 ms: the long one is past its age bound, but 8x2048 full of short ones
   * costs 8 ms for 16,000 tokens, its 4x8192 20 ms for 21,000 */
  answer(d, first, 20 * MS, 20 * MS);
  ck_assert_uint_eq((uint64_t)rec_count(&R, LP_DISP_ACT_SEND), 2);
  ck_assert_msg(last_send()->send.shape == 1 && !holds(2), "the long one forced a 4x8192 (shape %d)", last_send()->send.shape);
  uint64_t second = last_send()->send.batch_id;
  for (uint64_t j = 19; j < 25; j++) admit(d, j, 1000, 21 * MS);
  /* 28 ms: 6 short ones do not fill a cheap batch: the long one goes */
  answer(d, second, 8 * MS, 28 * MS);
  ck_assert_uint_eq((uint64_t)rec_count(&R, LP_DISP_ACT_SEND), 3);
  ck_assert(last_send()->send.shape == 0 && holds(2));
  lp_disp_free(d);
}
END_TEST

/* Held no longer than its age bound plus two of the slow shape's times. */
START_TEST(long_held_at_most_its_bound) {
  lp_disp_config_t c;
  rec_config(&c, "4x8192,8x2048", (const uint64_t[]){20, 8});
  c.max_wait_ns = 5 * MS;
  lp_disp_t *d = lp_disp_new(&c);
  ck_assert_ptr_nonnull(d);
  rec_clear(&R);
  admit(d, 1, 8000, 0);
  admit(d, 2, 5000, 1 * MS);
  uint64_t job = 3, now = 20 * MS;
  int sent_long = 0;
  /* short ones keep coming, a full cheap batch each time the device frees */
  for (int round = 0; round < 10 && !sent_long; round++) {
    for (int i = 0; i < 16; i++) admit(d, job++, 1000, now - 1 * MS);
    answer(d, last_send()->send.batch_id, 8 * MS, now);
    sent_long = holds(2);
    if (!sent_long) now += 8 * MS;
  }
  ck_assert(sent_long);
  ck_assert_uint_le(now, 1 * MS + 5 * MS + 2 * 20 * MS + 8 * MS);
  lp_disp_free(d);
}
END_TEST

LP_TEST_MAIN("dispatch-hold", long_held_while_a_cheap_batch_pays, long_held_at_most_its_bound)
