/* The dispatch state machine driven step by step in virtual time, with exact
 * expectations: when batches leave, which shape and sequences they hold, what
 * failures, stalls and shape changes do, and that every job gets one answer. */
#include <check.h>
#include <errno.h>
#include <string.h>

#include "disprec.h"
#include "testutil.h"
#include "lanepack/dispatch.h"

#define MS 1000000ull

/* ---- recording the actions ---- */

static rec_t R; /* every action the core gave since the last rec_clear */

/* ---- building one ---- */

static void base(lp_disp_config_t *c, const char *shapes, const uint64_t *cost_ms, uint32_t devices) {
  rec_config(c, shapes, cost_ms);
  c->devices[0] = devices;
}

static lp_disp_t *make(const lp_disp_config_t *c) {
  lp_disp_t *d = lp_disp_new(c);
  ck_assert_ptr_nonnull(d);
  rec_clear(&R);
  return d;
}

static int admit(lp_disp_t *d, uint64_t job, uint32_t n, uint32_t len, int prio, uint64_t deadline,
                 uint64_t now) {
  uint32_t lens[64];
  REQUIRE(n <= 64);
  for (uint32_t i = 0; i < n; i++) lens[i] = len;
  int rc = lp_disp_admit(d, job, n, lens, prio, deadline, now);
  rec_drain(&R, d, now);
  return rc;
}

static void result(lp_disp_t *d, uint64_t batch, lp_disp_outcome_t o, uint64_t now) {
  lp_disp_result_t r = {.outcome = o};
  ck_assert_int_eq(lp_disp_result(d, batch, &r, now), 0);
  rec_drain(&R, d, now);
}

static void tick(lp_disp_t *d, uint64_t now) {
  lp_disp_tick(d, now);
  rec_drain(&R, d, now);
}

/* ---- when a batch leaves ---- */

START_TEST(idle_device_gets_a_batch_at_once) {
  lp_disp_config_t c;
  base(&c, "4x8192", (uint64_t[]){20}, 1);
  lp_disp_t *d = make(&c);
  ck_assert_uint_eq(lp_disp_wake_at(d), UINT64_MAX);
  ck_assert_int_eq(admit(d, 1, 1, 100, 0, 0, 1000), 0);
  ck_assert_int_eq((int)R.n, 1);
  const rec_act_t *s = rec_nth(&R, LP_DISP_ACT_SEND, 0);
  ck_assert_ptr_nonnull(s);
  ck_assert_uint_eq(s->a.send.batch_id, 1);
  ck_assert_uint_eq(s->a.send.backend, 0);
  ck_assert_uint_eq(s->a.send.device, 0);
  ck_assert_int_eq(s->a.send.shape, 0);
  ck_assert_uint_eq(s->a.send.lanes, 4);
  ck_assert_uint_eq(s->a.send.bucket, 8192);
  ck_assert_uint_eq(s->a.send.n, 1);
  ck_assert_uint_eq(s->it[0].job_id, 1);
  ck_assert_uint_eq(s->it[0].seq, 0);
  ck_assert_uint_eq(s->it[0].lane, 0);
  ck_assert_uint_eq(s->it[0].offset, 0);
  ck_assert_uint_eq(s->it[0].len, 100);
  ck_assert_uint_eq(s->a.send.real_tokens, 100);
  ck_assert_uint_eq(s->a.send.expect_ns, 1000 + 20 * MS);
  ck_assert_str_eq(s->a.send.reason, "idle");
  /* nothing pending but the job's bound */
  ck_assert_uint_eq(lp_disp_wake_at(d), 1000 + 10000 * MS);
  result(d, 1, LP_DISP_OK, 1000 + 21 * MS);
  ck_assert_int_eq(rec_count(&R, LP_DISP_ACT_OUTPUT), 1);
  const rec_act_t *o = rec_nth(&R, LP_DISP_ACT_OUTPUT, 0);
  ck_assert_uint_eq(o->a.output.job_id, 1);
  ck_assert_uint_eq(o->a.output.batch_id, 1);
  const rec_act_t *an = rec_answer_of(&R, 1);
  ck_assert_ptr_nonnull(an);
  ck_assert_int_eq(an->a.answer.status, LP_DISP_ST_OK);
  ck_assert_int_eq(an->a.answer.http_status, 200);
  ck_assert(an > o); /* the output comes before the answer */
  ck_assert_uint_eq(lp_disp_wake_at(d), UINT64_MAX);
  lp_disp_free(d);
}
END_TEST

START_TEST(just_in_time_while_busy_and_lead_learned) {
  lp_disp_config_t c;
  base(&c, "4x8192", (uint64_t[]){20}, 1);
  lp_disp_t *d = make(&c);
  admit(d, 1, 1, 1000, 0, 0, 0);
  ck_assert_int_eq(rec_count(&R, LP_DISP_ACT_SEND), 1);
  /* busy: the next rectangle fills and leaves when the device is expected free */
  admit(d, 2, 1, 1000, 0, 0, 1 * MS);
  admit(d, 3, 1, 1000, 0, 0, 2 * MS);
  admit(d, 4, 1, 1000, 0, 0, 3 * MS);
  ck_assert_int_eq(rec_count(&R, LP_DISP_ACT_SEND), 1);
  ck_assert_uint_eq(lp_disp_wake_at(d), 20 * MS);
  tick(d, 19 * MS);
  ck_assert_int_eq(rec_count(&R, LP_DISP_ACT_SEND), 1);
  tick(d, 20 * MS);
  ck_assert_int_eq(rec_count(&R, LP_DISP_ACT_SEND), 2);
  const rec_act_t *s = rec_nth(&R, LP_DISP_ACT_SEND, 1);
  ck_assert_str_eq(s->a.send.reason, "just_in_time");
  ck_assert_uint_eq(s->a.send.n, 3);
  for (uint32_t i = 0; i < 3; i++) {
    ck_assert_uint_eq(s->it[i].job_id, 2 + i);
    ck_assert_uint_eq(s->it[i].lane, 0);
    ck_assert_uint_eq(s->it[i].offset, 1000 * i);
  }
  ck_assert_uint_eq(s->a.send.expect_ns, 40 * MS);
  /* the first answers 2 ms after its service time: no device time reported,
   * so the round trip teaches a lead time of 2 ms */
  result(d, 1, LP_DISP_OK, 22 * MS);
  ck_assert_uint_eq(lp_devclock_lead(lp_disp_clock(d, 0)), 2 * MS);
  /* the second waited at the device: its service time is the gap between answers */
  result(d, 2, LP_DISP_OK, 42 * MS);
  ck_assert_uint_eq(lp_devclock_cost(lp_disp_clock(d, 0), 0), 20 * MS);
  ck_assert_int_eq(rec_count(&R, LP_DISP_ACT_ANSWER), 4);
  admit(d, 5, 1, 1000, 0, 0, 43 * MS);
  s = rec_nth(&R, LP_DISP_ACT_SEND, 2);
  ck_assert_uint_eq(s->a.send.expect_ns, 65 * MS);
  admit(d, 6, 1, 1000, 0, 0, 44 * MS);
  /* the next leaves one lead time before the device frees */
  ck_assert_uint_eq(lp_disp_wake_at(d), 63 * MS);
  lp_disp_free(d);
}
END_TEST

START_TEST(idle_backends_take_turns) {
  lp_disp_config_t c;
  base(&c, "1x8192", (uint64_t[]){10}, 1);
  c.nbackends = 2;
  c.devices[1] = 1;
  lp_disp_t *d = make(&c);
  for (uint64_t j = 1; j <= 4; j++) {
    admit(d, j, 1, 100, 0, 0, (j - 1) * 20 * MS);
    const rec_act_t *s = rec_nth(&R, LP_DISP_ACT_SEND, (int)j - 1);
    ck_assert_uint_eq(s->a.send.backend, (j - 1) % 2);
    result(d, s->a.send.batch_id, LP_DISP_OK, (j - 1) * 20 * MS + 10 * MS);
  }
  lp_disp_free(d);
}
END_TEST

/* A backend added to a running core (a reload) is a slot more, up: it takes
 * the next batch while the first backend's only device is busy; the core
 * walks only the backends it has. */
START_TEST(added_backend_takes_batches) {
  lp_disp_config_t c;
  base(&c, "1x8192", (uint64_t[]){10}, 1);
  lp_disp_t *d = make(&c);
  ck_assert_uint_eq(lp_disp_backends(d), 1);
  admit(d, 1, 1, 8000, 0, 0, 0);
  ck_assert_uint_eq(rec_nth(&R, LP_DISP_ACT_SEND, 0)->a.send.backend, 0);
  ck_assert_int_eq(lp_disp_add_backend(d, 1, 1 * MS), 1);
  ck_assert_uint_eq(lp_disp_backends(d), 2);
  ck_assert_int_eq(lp_disp_add_backend(d, 0, 1 * MS), -EINVAL);
  admit(d, 2, 1, 8000, 0, 0, 2 * MS);
  ck_assert_int_eq(rec_count(&R, LP_DISP_ACT_SEND), 2);
  ck_assert_uint_eq(rec_nth(&R, LP_DISP_ACT_SEND, 1)->a.send.backend, 1);
  for (uint32_t b = 2; b < LP_DISP_MAX_BACKENDS; b++) ck_assert_int_eq(lp_disp_add_backend(d, 1, 3 * MS), (int)b);
  ck_assert_int_eq(lp_disp_add_backend(d, 1, 3 * MS), -EINVAL);
  lp_disp_free(d);
}
END_TEST

/* ---- what it holds ---- */

START_TEST(shape_by_device_time_per_token) {
  lp_disp_config_t c;
  base(&c, "4x8192,8x2048", (uint64_t[]){20, 8}, 1);
  /* 28 x 1100: 4x8192 holds all (30800 tokens in 20 ms), 8x2048 eight (8800 in 8 ms) */
  lp_disp_t *d = make(&c);
  admit(d, 1, 28, 1100, 0, 0, 0);
  const rec_act_t *s = rec_nth(&R, LP_DISP_ACT_SEND, 0);
  ck_assert_int_eq(s->a.send.shape, 0);
  ck_assert_uint_eq(s->a.send.n, 28);
  ck_assert_uint_eq(s->a.send.real_tokens, 30800);
  lp_disp_free(d);
  /* 8 x 2000: both hold all 16000 tokens; 8x2048 does it in 8 ms */
  d = make(&c);
  admit(d, 1, 8, 2000, 0, 0, 0);
  s = rec_nth(&R, LP_DISP_ACT_SEND, 0);
  ck_assert_int_eq(s->a.send.shape, 1);
  ck_assert_uint_eq(s->a.send.n, 8);
  lp_disp_free(d);
}
END_TEST

/* The lane each of a job's sequences went to in the first batch, by seq. */
static void lanes_of_first_send(uint32_t *lane, size_t n) {
  const rec_act_t *s = rec_nth(&R, LP_DISP_ACT_SEND, 0);
  ck_assert_ptr_nonnull(s);
  ck_assert_uint_eq(s->a.send.n, n);
  for (size_t i = 0; i < s->a.send.n; i++) lane[s->it[i].seq] = s->it[i].lane;
}

START_TEST(the_configured_packer_fills_the_lanes) {
  /* bucket 10: 8 | 5 4 | 3, then the 1 goes to the first lane with room under
   * first fit (beside the 8) but to the tightest gap under best fit (beside 5 4) */
  static const uint32_t lens[] = {8, 5, 4, 3, 1};
  uint32_t lane[5];
  lp_disp_config_t c;
  base(&c, "3x10", (uint64_t[]){10}, 1);
  ck_assert_int_eq(c.packer, LP_ALGO_BFD); /* the default */
  lp_disp_t *d = make(&c);
  ck_assert_int_eq(lp_disp_admit(d, 1, 5, lens, 0, 0, 0), 0);
  rec_drain(&R, d, 0);
  lanes_of_first_send(lane, 5);
  ck_assert_uint_eq(lane[4], lane[1]);
  ck_assert_uint_ne(lane[4], lane[0]);
  lp_disp_free(d);
  c.packer = LP_ALGO_FFD;
  d = make(&c);
  ck_assert_int_eq(lp_disp_admit(d, 1, 5, lens, 0, 0, 0), 0);
  rec_drain(&R, d, 0);
  lanes_of_first_send(lane, 5);
  ck_assert_uint_eq(lane[4], lane[0]);
  lp_disp_free(d);
}
END_TEST

START_TEST(shape_never_by_counting_due_items) {
  lp_disp_config_t c;
  base(&c, "4x8192,8x2048", (uint64_t[]){20, 8}, 1);
  c.max_wait_ns = 0; /* everything is past its age bound at once */
  lp_disp_t *d = make(&c);
  admit(d, 1, 1, 100, 0, 0, 0);
  ck_assert_int_eq(rec_nth(&R, LP_DISP_ACT_SEND, 0)->a.send.shape, 1);
  admit(d, 2, 40, 2000, 0, 0, 1 * MS);
  ck_assert_int_eq(rec_count(&R, LP_DISP_ACT_SEND), 1);
  tick(d, 8 * MS);
  /* 4x8192 would take 16 of the 40 due sequences (32000 tokens in 20 ms),
   * 8x2048 takes 8 (16000 in 8 ms): less device time per token wins */
  const rec_act_t *s = rec_nth(&R, LP_DISP_ACT_SEND, 1);
  ck_assert_ptr_nonnull(s);
  ck_assert_int_eq(s->a.send.shape, 1);
  ck_assert_uint_eq(s->a.send.n, 8);
  lp_disp_free(d);
}
END_TEST

START_TEST(oldest_must_go_and_long_rides_large) {
  lp_disp_config_t c;
  base(&c, "4x8192,8x2048", (uint64_t[]){20, 8}, 1);
  c.max_wait_ns = 50 * MS; /* the 5000-token one is bound at 50 - 20 = 30 ms of age */
  lp_disp_t *d = make(&c);
  admit(d, 1, 1, 100, 0, 0, 0);
  admit(d, 2, 1, 5000, 0, 0, 1 * MS);
  admit(d, 3, 8, 2000, 0, 0, 2 * MS);
  uint64_t t = 8 * MS;
  for (uint64_t job = 4; job <= 6; job++) {
    /* each batch answers on time; the device takes 8x2048 full of 2000s */
    const rec_act_t *last = rec_nth(&R, LP_DISP_ACT_SEND, rec_count(&R, LP_DISP_ACT_SEND) - 1);
    result(d, last->a.send.batch_id, LP_DISP_OK, t);
    const rec_act_t *s = rec_nth(&R, LP_DISP_ACT_SEND, rec_count(&R, LP_DISP_ACT_SEND) - 1);
    ck_assert_ptr_ne(s, last);
    ck_assert_int_eq(s->a.send.shape, 1);
    ck_assert(!rec_holds(s, 2));
    admit(d, job, 8, 2000, 0, 0, t + 1 * MS);
    t += 8 * MS;
  }
  /* at 32 ms the long one is 31 ms old: past its bound, it must go, and only
   * 4x8192 holds it; but while a full 8x2048 costs less per token it is held,
   * up to its bound plus two of 4x8192's times (70 ms of age: at 72 ms) */
  const rec_act_t *last, *s;
  for (;;) {
    last = rec_nth(&R, LP_DISP_ACT_SEND, rec_count(&R, LP_DISP_ACT_SEND) - 1);
    result(d, last->a.send.batch_id, LP_DISP_OK, t);
    s = rec_nth(&R, LP_DISP_ACT_SEND, rec_count(&R, LP_DISP_ACT_SEND) - 1);
    if (rec_holds(s, 2) || t >= 100 * MS) break;
    ck_assert_int_eq(s->a.send.shape, 1);
    admit(d, 100 + t / MS, 8, 2000, 0, 0, t + 1 * MS);
    t += 8 * MS;
  }
  ck_assert_uint_eq(t, 72 * MS);
  ck_assert_int_eq(s->a.send.shape, 0);
  ck_assert(rec_holds(s, 2));
  ck_assert_uint_eq(s->it[0].job_id, 2);
  ck_assert_uint_eq(s->it[0].len, 5000);
  /* the rest packed around it longest first: all eight 2000s of the last job */
  ck_assert_uint_eq(s->a.send.n, 9);
  ck_assert_uint_eq(s->a.send.real_tokens, 21000);
  lp_disp_free(d);
}
END_TEST

/* ---- failures ---- */

START_TEST(stall_hedges_with_bounded_copies) {
  lp_disp_config_t c;
  base(&c, "4x8192", (uint64_t[]){20}, 3);
  c.stall_factor = 2;
  c.stall_min_ns = 10 * MS;
  c.max_copies = 2;
  lp_disp_t *d = make(&c);
  admit(d, 1, 1, 100, 0, 0, 0);
  ck_assert_uint_eq(rec_nth(&R, LP_DISP_ACT_SEND, 0)->a.send.device, 0);
  /* stalled past max(2 x 20, 20 + 10) ms */
  ck_assert_uint_eq(lp_disp_wake_at(d), 40 * MS);
  tick(d, 40 * MS);
  ck_assert_int_eq(rec_count(&R, LP_DISP_ACT_SEND), 2);
  const rec_act_t *h = rec_nth(&R, LP_DISP_ACT_SEND, 1);
  ck_assert_uint_eq(h->a.send.device, 1);
  ck_assert_uint_eq(h->a.send.copies, 1);
  ck_assert_uint_eq(h->it[0].job_id, 1);
  ck_assert_uint_eq(lp_disp_wake_at(d), 80 * MS);
  /* the copy stalls too: its two copies are spent, the idle third device gets nothing */
  tick(d, 80 * MS);
  ck_assert_int_eq(rec_count(&R, LP_DISP_ACT_SEND), 2);
  lp_disp_stats_t st;
  lp_disp_stats(d, &st);
  ck_assert_uint_eq(st.stalls, 2);
  ck_assert_uint_eq(st.hedges, 1);
  /* the first answers: one output, one answer; the copy's answer changes nothing */
  result(d, 1, LP_DISP_OK, 90 * MS);
  ck_assert_int_eq(rec_count(&R, LP_DISP_ACT_OUTPUT), 1);
  ck_assert_uint_eq(rec_nth(&R, LP_DISP_ACT_OUTPUT, 0)->a.output.batch_id, 1);
  ck_assert_int_eq(rec_count(&R, LP_DISP_ACT_ANSWER), 1);
  int before = (int)R.n;
  result(d, 2, LP_DISP_OK, 95 * MS);
  ck_assert_int_eq((int)R.n, before);
  lp_disp_result_t r = {.outcome = LP_DISP_OK};
  ck_assert_int_eq(lp_disp_result(d, 2, &r, 96 * MS), -ENOENT);
  lp_disp_free(d);
}
END_TEST

START_TEST(bisect_on_5xx_and_poison_fails_alone) {
  lp_disp_config_t c;
  base(&c, "8x2048", (uint64_t[]){8}, 1);
  c.retry_backoff_ns = 10 * MS;
  c.unhealthy_after = 2;
  lp_disp_t *d = make(&c);
  admit(d, 10, 1, 100, 0, 0, 0);
  for (uint64_t j = 1; j <= 4; j++) admit(d, j, 1, 1000, 0, 0, j * MS);
  result(d, 1, LP_DISP_OK, 8 * MS);
  const rec_act_t *s = rec_nth(&R, LP_DISP_ACT_SEND, 1);
  ck_assert_uint_eq(s->a.send.n, 4);
  /* a 5xx to the four: two halves, never four singles; each half at once */
  result(d, 2, LP_DISP_ERR_5XX, 16 * MS);
  s = rec_nth(&R, LP_DISP_ACT_SEND, 2);
  ck_assert_ptr_nonnull(s);
  ck_assert_uint_eq(s->a.send.n, 2);
  ck_assert_uint_eq(s->it[0].job_id, 1);
  ck_assert_uint_eq(s->it[1].job_id, 3);
  lp_disp_stats_t st;
  lp_disp_stats(d, &st);
  ck_assert_uint_eq(st.bisections, 1);
  /* the other half still packs with a newcomer */
  admit(d, 5, 1, 1000, 0, 0, 17 * MS);
  result(d, 3, LP_DISP_OK, 24 * MS);
  ck_assert_ptr_nonnull(rec_answer_of(&R, 1));
  ck_assert_ptr_nonnull(rec_answer_of(&R, 3));
  s = rec_nth(&R, LP_DISP_ACT_SEND, 3);
  ck_assert_uint_eq(s->a.send.n, 3);
  ck_assert(rec_holds(s, 2) && rec_holds(s, 4) && rec_holds(s, 5));
  /* job 4 is poisoned: 2 and 5 go on without it */
  result(d, 4, LP_DISP_ERR_5XX, 32 * MS);
  s = rec_nth(&R, LP_DISP_ACT_SEND, 4);
  ck_assert_uint_eq(s->a.send.n, 2);
  ck_assert(rec_holds(s, 2) && rec_holds(s, 5));
  result(d, 5, LP_DISP_OK, 40 * MS);
  s = rec_nth(&R, LP_DISP_ACT_SEND, 5);
  ck_assert_uint_eq(s->a.send.n, 1);
  ck_assert(rec_holds(s, 4));
  /* it fails alone: now it spends its own budget, with backoff 10, 20 ms */
  result(d, 6, LP_DISP_ERR_5XX, 48 * MS);
  ck_assert_int_eq(rec_count(&R, LP_DISP_ACT_SEND), 6);
  ck_assert_uint_eq(lp_disp_wake_at(d), 58 * MS);
  tick(d, 58 * MS);
  ck_assert_int_eq(rec_count(&R, LP_DISP_ACT_SEND), 7);
  result(d, 7, LP_DISP_ERR_5XX, 66 * MS);
  ck_assert_uint_eq(lp_disp_wake_at(d), 86 * MS);
  tick(d, 86 * MS);
  ck_assert_int_eq(rec_count(&R, LP_DISP_ACT_SEND), 8);
  result(d, 8, LP_DISP_ERR_5XX, 94 * MS);
  /* three copies spent: job 4 fails, 502; the healthy backend stays up */
  const rec_act_t *an = rec_answer_of(&R, 4);
  ck_assert_ptr_nonnull(an);
  ck_assert_int_eq(an->a.answer.status, LP_DISP_ST_BACKEND_ERROR);
  ck_assert_int_eq(an->a.answer.http_status, 502);
  ck_assert_int_eq(rec_count(&R, LP_DISP_ACT_HEALTH), 0);
  ck_assert_int_eq(lp_disp_backend_up(d, 0), 1);
  for (uint64_t j = 1; j <= 10; j++)
    if (j != 4 && (j <= 5 || j == 10)) ck_assert_int_eq(rec_answer_of(&R, j)->a.answer.status, LP_DISP_ST_OK);
  ck_assert_int_eq(rec_count(&R, LP_DISP_ACT_ANSWER), 6);
  lp_disp_free(d);
}
END_TEST

START_TEST(slow_errors_teach_the_clock) {
  lp_disp_config_t c;
  base(&c, "8x2048", (uint64_t[]){8}, 2);
  c.stall_factor = 3;
  c.stall_min_ns = 10 * MS;
  c.max_copies = 3;
  lp_disp_t *d = make(&c);
  admit(d, 1, 1, 100, 0, 0, 0);
  ck_assert_uint_eq(lp_disp_wake_at(d), 24 * MS);
  tick(d, 24 * MS); /* stalled: hedged on the other device */
  ck_assert_int_eq(rec_count(&R, LP_DISP_ACT_SEND), 2);
  ck_assert_uint_eq(rec_nth(&R, LP_DISP_ACT_SEND, 1)->a.send.device, 1);
  tick(d, 48 * MS); /* the copy stalls too: the third and last copy */
  ck_assert_int_eq(rec_count(&R, LP_DISP_ACT_SEND), 3);
  tick(d, 72 * MS);
  ck_assert_int_eq(rec_count(&R, LP_DISP_ACT_SEND), 3);
  /* the backend answers 422 after 400 ms: the clock learns it is that slow */
  result(d, 1, LP_DISP_ERR_4XX, 400 * MS);
  ck_assert_uint_eq(lp_devclock_lead(lp_disp_clock(d, 0)), 392 * MS);
  ck_assert_int_eq(rec_count(&R, LP_DISP_ACT_ANSWER), 0); /* its copies still run */
  result(d, 2, LP_DISP_ERR_4XX, 424 * MS);
  ck_assert_int_eq(rec_count(&R, LP_DISP_ACT_ANSWER), 0);
  result(d, 3, LP_DISP_ERR_4XX, 448 * MS);
  const rec_act_t *an = rec_answer_of(&R, 1);
  ck_assert_ptr_nonnull(an);
  ck_assert_int_eq(an->a.answer.http_status, 502);
  ck_assert_int_eq(rec_count(&R, LP_DISP_ACT_ANSWER), 1);
  ck_assert_int_eq(rec_count(&R, LP_DISP_ACT_SEND), 3);
  ck_assert_int_eq(lp_disp_backend_up(d, 0), 1);
  /* the next is expected 400 ms after it leaves and is not hedged before it
   * comes: one send, one answer */
  admit(d, 2, 1, 100, 0, 0, 450 * MS);
  const rec_act_t *s = rec_nth(&R, LP_DISP_ACT_SEND, 3);
  ck_assert_uint_eq(s->a.send.expect_ns, 850 * MS);
  ck_assert_uint_eq(lp_disp_wake_at(d), 1650 * MS);
  result(d, 4, LP_DISP_ERR_4XX, 850 * MS);
  ck_assert_int_eq(rec_count(&R, LP_DISP_ACT_SEND), 4);
  ck_assert_int_eq(rec_answer_of(&R, 2)->a.answer.http_status, 502);
  lp_disp_free(d);
}
END_TEST

START_TEST(stalled_batch_presumed_lost_on_one_device) {
  lp_disp_config_t c;
  base(&c, "4x8192", (uint64_t[]){20}, 1);
  c.stall_factor = 2;
  c.stall_min_ns = 10 * MS;
  lp_disp_t *d = make(&c);
  admit(d, 1, 1, 100, 0, 0, 0);
  tick(d, 40 * MS);
  /* the answer is presumed lost: the device gets the copy at once rather than
   * sitting out the transfer timeout */
  ck_assert_int_eq(rec_count(&R, LP_DISP_ACT_SEND), 2);
  const rec_act_t *s = rec_nth(&R, LP_DISP_ACT_SEND, 1);
  ck_assert_uint_eq(s->a.send.device, 0);
  ck_assert(rec_holds(s, 1));
  ck_assert_uint_eq(s->a.send.expect_ns, 60 * MS);
  /* that one stalls too: the device is taken as hung and gets nothing more, not
   * even the third copy queued for it, until a probe after stall_min */
  tick(d, 80 * MS);
  ck_assert_int_eq(rec_count(&R, LP_DISP_ACT_SEND), 2);
  admit(d, 2, 1, 100, 0, 0, 81 * MS);
  ck_assert_int_eq(rec_count(&R, LP_DISP_ACT_SEND), 2);
  ck_assert_uint_eq(lp_disp_wake_at(d), 90 * MS);
  tick(d, 90 * MS);
  ck_assert_int_eq(rec_count(&R, LP_DISP_ACT_SEND), 3);
  s = rec_nth(&R, LP_DISP_ACT_SEND, 2);
  ck_assert(rec_holds(s, 1) && rec_holds(s, 2));
  /* it answers: the device is back */
  result(d, 3, LP_DISP_OK, 110 * MS);
  ck_assert_int_eq(rec_count(&R, LP_DISP_ACT_ANSWER), 2);
  admit(d, 3, 1, 100, 0, 0, 111 * MS);
  ck_assert_int_eq(rec_count(&R, LP_DISP_ACT_SEND), 4);
  lp_disp_free(d);
}
END_TEST

START_TEST(shape_loss_fails_what_no_shape_holds) {
  lp_disp_config_t c;
  base(&c, "4x8192,8x2048", (uint64_t[]){20, 8}, 1);
  lp_disp_t *d = make(&c);
  admit(d, 1, 1, 100, 0, 0, 0);
  ck_assert_int_eq(admit(d, 2, 1, 5000, 0, 0, 1 * MS), 0);
  ck_assert_int_eq(admit(d, 3, 1, 1000, 0, 0, 1 * MS), 0);
  lp_shape_state_t st[2] = {LP_SHAPE_UNAVAILABLE, LP_SHAPE_COMPILED};
  ck_assert_int_eq(lp_disp_backend_shapes(d, 0, st, 2, 2 * MS), 0);
  rec_drain(&R, d, 2 * MS);
  const rec_act_t *an = rec_answer_of(&R, 2);
  ck_assert_ptr_nonnull(an);
  ck_assert_int_eq(an->a.answer.status, LP_DISP_ST_NO_SHAPE);
  ck_assert_int_eq(an->a.answer.http_status, 503);
  ck_assert_str_eq(an->a.answer.code, "no_shape_available");
  ck_assert_ptr_null(rec_answer_of(&R, 3));
  ck_assert_int_eq(admit(d, 4, 1, 5000, 0, 0, 3 * MS), -EMSGSIZE);
  const char *code;
  ck_assert_int_eq(lp_disp_reject_status(-EMSGSIZE, &code), 413);
  ck_assert_str_eq(code, "sequence_too_long");
  result(d, 1, LP_DISP_OK, 8 * MS);
  const rec_act_t *s = rec_nth(&R, LP_DISP_ACT_SEND, 1);
  ck_assert_int_eq(s->a.send.shape, 1);
  ck_assert(rec_holds(s, 3));
  /* the backend says it lacks that shape too: barred there, and with no shape
   * left anywhere the job fails at once */
  result(d, 2, LP_DISP_ERR_SHAPE, 9 * MS);
  ck_assert_int_eq(rec_count(&R, LP_DISP_ACT_SEND), 2);
  ck_assert_int_eq(rec_answer_of(&R, 3)->a.answer.status, LP_DISP_ST_NO_SHAPE);
  lp_disp_free(d);
}
END_TEST

START_TEST(compiling_shape_waited_for_backend_timeout) {
  lp_disp_config_t c;
  base(&c, "4x8192,8x2048", (uint64_t[]){20, 8}, 1);
  c.shapes.shapes[0].state = LP_SHAPE_COMPILING;
  c.backend_timeout_ns = 100 * MS;
  lp_disp_t *d = make(&c);
  ck_assert_int_eq(admit(d, 1, 1, 5000, 0, 0, 0), 0); /* a compiling shape admits */
  ck_assert_int_eq(admit(d, 2, 1, 1000, 0, 0, 0), 0);
  ck_assert_int_eq(rec_count(&R, LP_DISP_ACT_SEND), 1);
  ck_assert(!rec_holds(rec_nth(&R, LP_DISP_ACT_SEND, 0), 1));
  result(d, 1, LP_DISP_OK, 8 * MS);
  ck_assert_uint_eq(lp_disp_wake_at(d), 100 * MS);
  tick(d, 100 * MS);
  const rec_act_t *an = rec_answer_of(&R, 1);
  ck_assert_ptr_nonnull(an);
  ck_assert_int_eq(an->a.answer.status, LP_DISP_ST_SHAPE_COMPILING);
  ck_assert_str_eq(an->a.answer.code, "shape_compiling");
  /* one that compiles in time goes at once, and its job is not failed */
  admit(d, 3, 1, 5000, 0, 0, 200 * MS);
  lp_shape_state_t st[2] = {LP_SHAPE_COMPILED, LP_SHAPE_COMPILED};
  ck_assert_int_eq(lp_disp_backend_shapes(d, 0, st, 2, 250 * MS), 0);
  rec_drain(&R, d, 250 * MS);
  const rec_act_t *s = rec_nth(&R, LP_DISP_ACT_SEND, 1);
  ck_assert_ptr_nonnull(s);
  ck_assert_int_eq(s->a.send.shape, 0);
  ck_assert(rec_holds(s, 3));
  tick(d, 300 * MS);
  ck_assert_ptr_null(rec_answer_of(&R, 3));
  ck_assert_uint_eq(lp_disp_wake_at(d), 200 * MS + 10000 * MS);
  lp_disp_free(d);
}
END_TEST

/* ---- deadlines, priorities, cancel, bounds ---- */

START_TEST(deadlines) {
  lp_disp_config_t c;
  base(&c, "4x8192", (uint64_t[]){20}, 1);
  lp_disp_t *d = make(&c);
  admit(d, 1, 1, 100, 0, 0, 0);
  /* busy until 20 ms, 20 ms more to run: a deadline at 10 ms cannot be met */
  ck_assert_int_eq(admit(d, 2, 1, 100, 0, 10 * MS, 1 * MS), -ETIME);
  const char *code;
  ck_assert_int_eq(lp_disp_reject_status(-ETIME, &code), 504);
  ck_assert_int_eq(admit(d, 3, 1, 100, 0, 45 * MS, 1 * MS), 0);
  tick(d, 20 * MS);
  ck_assert(rec_holds(rec_nth(&R, LP_DISP_ACT_SEND, 1), 3));
  /* not answered by its deadline: 504 at the deadline exactly */
  ck_assert_uint_eq(lp_disp_wake_at(d), 45 * MS);
  tick(d, 45 * MS);
  const rec_act_t *an = rec_answer_of(&R, 3);
  ck_assert_ptr_nonnull(an);
  ck_assert_int_eq(an->a.answer.status, LP_DISP_ST_DEADLINE);
  ck_assert_int_eq(an->a.answer.http_status, 504);
  result(d, 1, LP_DISP_OK, 46 * MS);
  result(d, 2, LP_DISP_OK, 47 * MS);
  ck_assert_int_eq(rec_count(&R, LP_DISP_ACT_OUTPUT), 1); /* job 1's only */
  ck_assert_int_eq(rec_count(&R, LP_DISP_ACT_ANSWER), 2);
  lp_disp_free(d);
}
END_TEST

START_TEST(urgent_deadline_must_go) {
  lp_disp_config_t c;
  base(&c, "4x8192,8x2048", (uint64_t[]){20, 8}, 1);
  c.max_wait_ns = 1000 * MS; /* age plays no part */
  lp_disp_t *d = make(&c);
  admit(d, 1, 1, 100, 0, 0, 0);
  ck_assert_int_eq(admit(d, 2, 1, 5000, 0, 50 * MS, 1 * MS), 0);
  admit(d, 3, 8, 2000, 0, 0, 1 * MS);
  result(d, 1, LP_DISP_OK, 8 * MS);
  /* at 8 ms it can wait one more batch (20 ms lead-in plus the slowest 20) */
  const rec_act_t *s = rec_nth(&R, LP_DISP_ACT_SEND, 1);
  ck_assert_int_eq(s->a.send.shape, 1);
  ck_assert(!rec_holds(s, 2));
  admit(d, 4, 8, 2000, 0, 0, 9 * MS);
  result(d, s->a.send.batch_id, LP_DISP_OK, 16 * MS);
  /* at 16 ms it cannot: it goes, in the only shape that holds it */
  s = rec_nth(&R, LP_DISP_ACT_SEND, 2);
  ck_assert_int_eq(s->a.send.shape, 0);
  ck_assert_uint_eq(s->it[0].job_id, 2);
  ck_assert_uint_le(s->a.send.expect_ns, 50 * MS);
  lp_disp_free(d);
}
END_TEST

START_TEST(priorities) {
  lp_disp_config_t c;
  base(&c, "1x8192", (uint64_t[]){10}, 1);
  c.max_wait_ns = 1000 * MS;
  lp_disp_t *d = make(&c);
  admit(d, 1, 1, 8000, 0, 0, 0);
  admit(d, 2, 1, 8000, 0, 0, 1 * MS);
  admit(d, 3, 1, 8000, 5, 0, 2 * MS);
  admit(d, 4, 1, 8000, -3, 0, 3 * MS);
  result(d, 1, LP_DISP_OK, 10 * MS);
  ck_assert_uint_eq(rec_nth(&R, LP_DISP_ACT_SEND, 1)->it[0].job_id, 3);
  result(d, 2, LP_DISP_OK, 20 * MS);
  ck_assert_uint_eq(rec_nth(&R, LP_DISP_ACT_SEND, 2)->it[0].job_id, 2);
  result(d, 3, LP_DISP_OK, 30 * MS);
  ck_assert_uint_eq(rec_nth(&R, LP_DISP_ACT_SEND, 3)->it[0].job_id, 4);
  lp_disp_free(d);
}
END_TEST

START_TEST(cancel) {
  lp_disp_config_t c;
  base(&c, "1x8192", (uint64_t[]){10}, 1);
  lp_disp_t *d = make(&c);
  admit(d, 1, 1, 100, 0, 0, 0);
  admit(d, 2, 1, 100, 0, 0, 1 * MS);
  admit(d, 3, 1, 100, 0, 0, 1 * MS);
  ck_assert_int_eq(lp_disp_cancel(d, 2, 2 * MS), 0);
  ck_assert_int_eq(lp_disp_cancel(d, 2, 2 * MS), -ENOENT);
  ck_assert_int_eq(lp_disp_cancel(d, 1, 3 * MS), 0); /* in flight */
  rec_drain(&R, d, 3 * MS);
  result(d, 1, LP_DISP_OK, 10 * MS);
  ck_assert_int_eq(rec_count(&R, LP_DISP_ACT_OUTPUT), 0);
  const rec_act_t *s = rec_nth(&R, LP_DISP_ACT_SEND, 1);
  ck_assert_uint_eq(s->a.send.n, 1);
  ck_assert_uint_eq(s->it[0].job_id, 3);
  result(d, 2, LP_DISP_OK, 20 * MS);
  ck_assert_int_eq(rec_count(&R, LP_DISP_ACT_ANSWER), 1);
  ck_assert_ptr_nonnull(rec_answer_of(&R, 3));
  lp_disp_stats_t st;
  lp_disp_stats(d, &st);
  ck_assert_uint_eq(st.cancelled, 2);
  lp_disp_free(d);
}
END_TEST

START_TEST(request_bound_and_queue_bound) {
  lp_disp_config_t c;
  base(&c, "1x8192", (uint64_t[]){10}, 1);
  c.request_bound_ns = 100 * MS;
  c.max_queue_jobs = 2;
  lp_disp_t *d = make(&c);
  ck_assert_int_eq(admit(d, 1, 1, 100, 0, 0, 0), 0);
  ck_assert_int_eq(admit(d, 2, 1, 100, 0, 0, 1 * MS), 0);
  ck_assert_int_eq(admit(d, 3, 1, 100, 0, 0, 2 * MS), -ENOBUFS);
  const char *code;
  ck_assert_int_eq(lp_disp_reject_status(-ENOBUFS, &code), 429);
  ck_assert_str_eq(code, "queue_full");
  ck_assert_int_eq(admit(d, 1, 1, 100, 0, 0, 2 * MS), -EEXIST);
  ck_assert_int_eq(lp_disp_admit(d, 5, 1, (uint32_t[]){0}, 0, 0, 2 * MS), -EINVAL);
  /* the backend never answers: each job is answered at its bound */
  ck_assert_uint_eq(lp_disp_wake_at(d), 10 * MS); /* the second leaves just in time */
  tick(d, 10 * MS);
  ck_assert_uint_eq(lp_disp_wake_at(d), 100 * MS);
  tick(d, 100 * MS);
  const rec_act_t *an = rec_answer_of(&R, 1);
  ck_assert_ptr_nonnull(an);
  ck_assert_int_eq(an->a.answer.status, LP_DISP_ST_BOUND);
  ck_assert_str_eq(an->a.answer.code, "request_bound_exceeded");
  ck_assert_ptr_null(rec_answer_of(&R, 2));
  tick(d, 101 * MS);
  ck_assert_int_eq(rec_answer_of(&R, 2)->a.answer.status, LP_DISP_ST_BOUND);
  ck_assert_int_eq(admit(d, 3, 1, 100, 0, 0, 102 * MS), 0);
  lp_disp_free(d);
}
END_TEST

START_TEST(avoided_sequence_does_not_end_the_window) {
  lp_disp_config_t c;
  base(&c, "1x8192", (uint64_t[]){10}, 1);
  c.nbackends = 2;
  c.devices[1] = 1;
  c.retry_backoff_ns = 1 * MS;
  lp_disp_t *d = make(&c);
  admit(d, 1, 1, 1000, 0, 0, 0);  /* backend 0 */
  admit(d, 2, 1, 1000, 0, 0, 0);  /* backend 1 */
  ck_assert_uint_eq(rec_nth(&R, LP_DISP_ACT_SEND, 0)->a.send.backend, 0);
  ck_assert_uint_eq(rec_nth(&R, LP_DISP_ACT_SEND, 1)->a.send.backend, 1);
  result(d, 2, LP_DISP_OK, 5 * MS); /* backend 1 idle again, backend 0 busy */
  admit(d, 3, 1, 1000, 0, 0, 6 * MS);  /* goes to backend 1 at once */
  ck_assert_uint_eq(rec_nth(&R, LP_DISP_ACT_SEND, 2)->a.send.backend, 1);
  /* job 1 times out on backend 0: its retry avoids backend 0, and the window
   * goes on past it to what can go there */
  result(d, 1, LP_DISP_TIMEOUT, 7 * MS);
  ck_assert_int_eq(rec_count(&R, LP_DISP_ACT_SEND), 3);
  tick(d, 8 * MS); /* the backoff ends: job 1 waits for backend 1 */
  ck_assert_int_eq(rec_count(&R, LP_DISP_ACT_SEND), 3);
  admit(d, 4, 1, 1000, 0, 0, 9 * MS);
  const rec_act_t *s = rec_nth(&R, LP_DISP_ACT_SEND, 3);
  ck_assert_ptr_nonnull(s);
  ck_assert_uint_eq(s->a.send.backend, 0);
  ck_assert_uint_eq(s->a.send.n, 1);
  ck_assert(rec_holds(s, 4));
  result(d, 3, LP_DISP_OK, 16 * MS);
  s = rec_nth(&R, LP_DISP_ACT_SEND, 4);
  ck_assert_ptr_nonnull(s);
  ck_assert_uint_eq(s->a.send.backend, 1);
  ck_assert(rec_holds(s, 1));
  lp_disp_free(d);
}
END_TEST

START_TEST(overtaken_batch_presumed_lost) {
  lp_disp_config_t c;
  base(&c, "1x8192", (uint64_t[]){10}, 1);
  lp_disp_t *d = make(&c);
  admit(d, 1, 1, 100, 0, 0, 0);
  admit(d, 2, 1, 100, 0, 0, 1 * MS);
  tick(d, 10 * MS);
  ck_assert_int_eq(rec_count(&R, LP_DISP_ACT_SEND), 2);
  /* the second answers, the first never did: a device runs in order, so the
   * first is lost and holds the device up no more */
  result(d, 2, LP_DISP_OK, 20 * MS);
  admit(d, 3, 1, 100, 0, 0, 21 * MS);
  ck_assert_int_eq(rec_count(&R, LP_DISP_ACT_SEND), 3);
  ck_assert_str_eq(rec_nth(&R, LP_DISP_ACT_SEND, 2)->a.send.reason, "idle");
  lp_disp_free(d);
}
END_TEST

START_TEST(backend_down_only_with_another_up_and_probed) {
  lp_disp_config_t c;
  base(&c, "1x8192", (uint64_t[]){10}, 1);
  c.unhealthy_after = 2;
  c.retry_backoff_ns = 1 * MS;
  c.max_copies = 5;
  /* alone, a failing backend is not marked down: retries and bounds answer */
  lp_disp_t *d = make(&c);
  admit(d, 1, 1, 100, 0, 0, 0);
  uint64_t t = 5 * MS;
  for (uint64_t b = 1; b <= 3; b++) {
    result(d, b, LP_DISP_RESET, t);
    t = lp_disp_wake_at(d); /* the backoff */
    tick(d, t);
    t += 1 * MS;
  }
  ck_assert_int_eq(rec_count(&R, LP_DISP_ACT_SEND), 4);
  ck_assert_int_eq(rec_count(&R, LP_DISP_ACT_HEALTH), 0);
  ck_assert_int_eq(lp_disp_backend_up(d, 0), 1);
  lp_disp_free(d);

  c.nbackends = 2;
  c.devices[1] = 1;
  d = make(&c);
  admit(d, 1, 1, 100, 0, 0, 0);
  admit(d, 2, 1, 100, 0, 0, 0);
  ck_assert_uint_eq(rec_nth(&R, LP_DISP_ACT_SEND, 1)->a.send.backend, 1);
  result(d, 1, LP_DISP_RESET, 5 * MS);
  tick(d, 6 * MS);
  ck_assert_uint_eq(rec_nth(&R, LP_DISP_ACT_SEND, 2)->a.send.backend, 0);
  result(d, 3, LP_DISP_RESET, 7 * MS);
  ck_assert_int_eq(rec_count(&R, LP_DISP_ACT_HEALTH), 1);
  const rec_act_t *h = rec_nth(&R, LP_DISP_ACT_HEALTH, 0);
  ck_assert_uint_eq(h->a.health.backend, 0);
  ck_assert_int_eq(h->a.health.up, 0);
  ck_assert_int_eq(lp_disp_backend_up(d, 0), 0);
  tick(d, 9 * MS); /* the retry waits for backend 1 */
  ck_assert_int_eq(rec_count(&R, LP_DISP_ACT_SEND), 3);
  result(d, 2, LP_DISP_OK, 10 * MS);
  ck_assert_uint_eq(rec_nth(&R, LP_DISP_ACT_SEND, 3)->a.send.backend, 1);
  result(d, 4, LP_DISP_OK, 20 * MS);
  ck_assert_int_eq(rec_count(&R, LP_DISP_ACT_ANSWER), 2);
  /* 200 ms after it was marked down, it may have one probe batch, when backend 1
   * is busy */
  admit(d, 5, 1, 100, 0, 0, 208 * MS);
  ck_assert_uint_eq(rec_nth(&R, LP_DISP_ACT_SEND, 4)->a.send.backend, 1);
  admit(d, 6, 1, 100, 0, 0, 209 * MS);
  const rec_act_t *s = rec_nth(&R, LP_DISP_ACT_SEND, 5);
  ck_assert_ptr_nonnull(s);
  ck_assert_uint_eq(s->a.send.backend, 0);
  ck_assert_str_eq(s->a.send.reason, "probe");
  admit(d, 7, 1, 100, 0, 0, 210 * MS);
  ck_assert_int_eq(rec_count(&R, LP_DISP_ACT_SEND), 6); /* one probe at a time */
  result(d, 6, LP_DISP_OK, 215 * MS);
  ck_assert_int_eq(rec_count(&R, LP_DISP_ACT_HEALTH), 2);
  ck_assert_int_eq(rec_nth(&R, LP_DISP_ACT_HEALTH, 1)->a.health.up, 1);
  ck_assert_int_eq(lp_disp_backend_up(d, 0), 1);
  ck_assert_uint_eq(rec_nth(&R, LP_DISP_ACT_SEND, 6)->a.send.backend, 0); /* job 7, at once */
  lp_disp_free(d);
}
END_TEST

START_TEST(drain_and_fail_all) {
  lp_disp_config_t c;
  base(&c, "4x8192", (uint64_t[]){20}, 1);
  lp_disp_t *d = make(&c);
  admit(d, 1, 1, 100, 0, 0, 0);
  admit(d, 2, 2, 100, 0, 0, 1 * MS);
  ck_assert_int_eq(rec_count(&R, LP_DISP_ACT_SEND), 1);
  /* draining: nothing waits for company, and nothing is retried */
  lp_disp_drain(d, 2 * MS);
  rec_drain(&R, d, 2 * MS);
  ck_assert_int_eq(rec_count(&R, LP_DISP_ACT_SEND), 2);
  ck_assert_str_eq(rec_nth(&R, LP_DISP_ACT_SEND, 1)->a.send.reason, "drain");
  result(d, 2, LP_DISP_ERR_5XX, 30 * MS);
  ck_assert_int_eq(rec_count(&R, LP_DISP_ACT_SEND), 2);
  ck_assert_int_eq(rec_answer_of(&R, 2)->a.answer.http_status, 502);
  admit(d, 3, 1, 100, 0, 0, 31 * MS);
  ck_assert_int_eq(rec_count(&R, LP_DISP_ACT_SEND), 3);
  lp_disp_fail_all(d, LP_DISP_ST_SHUTDOWN, 32 * MS);
  rec_drain(&R, d, 32 * MS);
  ck_assert_str_eq(rec_answer_of(&R, 1)->a.answer.code, "shutting_down");
  ck_assert_int_eq(rec_answer_of(&R, 3)->a.answer.http_status, 503);
  ck_assert_int_eq(rec_count(&R, LP_DISP_ACT_ANSWER), 3);
  result(d, 1, LP_DISP_OK, 40 * MS);
  result(d, 3, LP_DISP_OK, 41 * MS);
  ck_assert_int_eq(rec_count(&R, LP_DISP_ACT_OUTPUT), 0);
  ck_assert_int_eq(rec_count(&R, LP_DISP_ACT_ANSWER), 3);
  lp_disp_free(d);
}
END_TEST

/* Failing everything at a drain's end is linear in the jobs: 500,000 jobs in
 * the core, each answered once. It rescanned the job map from its first slot
 * after every answer (about 10^11 slot reads here, minutes); now it takes a
 * fraction of a second, far inside the test's timeout. */
START_TEST(fail_all_is_linear) {
  enum { N = 500000 };
  lp_disp_config_t c;
  base(&c, "4x8192", (uint64_t[]){20}, 1);
  c.max_queue_jobs = 0;
  c.max_queue_tokens = 0;
  lp_disp_t *d = make(&c);
  lp_disp_action_t a;
  for (uint64_t j = 1; j <= N; j++) {
    uint32_t len = 10;
    ck_assert_int_eq(lp_disp_admit(d, j, 1, &len, 0, 0, 0), 0);
    while (lp_disp_next(d, &a)) {
    }
  }
  lp_disp_fail_all(d, LP_DISP_ST_SHUTDOWN, 1 * MS);
  size_t answers = 0;
  while (lp_disp_next(d, &a)) answers += a.kind == LP_DISP_ACT_ANSWER;
  ck_assert_uint_eq(answers, N);
  lp_disp_free(d);
}
END_TEST

/* ---- every job one answer, whatever happens ---- */

static uint64_t rng_state = 88172645463325252ull;
static uint64_t rnd(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

typedef struct pend_s {
  uint64_t at, batch;
  lp_disp_result_t r;
} pend_t;

START_TEST(every_job_one_answer_under_faults) {
  lp_disp_config_t c;
  base(&c, "4x8192,8x2048", (uint64_t[]){20, 8}, 2);
  c.nbackends = 2;
  c.devices[1] = 2;
  c.stall_factor = 3;
  c.stall_min_ns = 20 * MS;
  c.retry_backoff_ns = 5 * MS;
  c.request_bound_ns = 3000 * MS;
  c.max_queue_jobs = 400;
  lp_disp_t *d = make(&c);
  enum { JOBS = 2000 };
  static int answers[JOBS + 1], outputs[JOBS + 1], nseqs[JOBS + 1], admitted[JOBS + 1], cancelled[JOBS + 1];
  static uint64_t admit_at[JOBS + 1];
  static pend_t pend[4096];
  int np = 0;
  uint64_t dev_free[2][2] = {{0}};
  uint64_t now = 0, next_arrival = 0, down_since[2] = {0};
  uint64_t job = 0;
  uint64_t sends = 0;
  memset(answers, 0, sizeof(answers));
  memset(outputs, 0, sizeof(outputs));
  memset(admitted, 0, sizeof(admitted));
  memset(cancelled, 0, sizeof(cancelled));
  for (int steps = 0; steps < 2000000; steps++) {
    /* the next event: an arrival, a result, a probe, or the core's wake */
    uint64_t t = lp_disp_wake_at(d);
    int which = 0; /* 0 wake, 1 arrival, 2 result, 3 probe */
    if (job < JOBS && next_arrival < t) t = next_arrival, which = 1;
    int pi = -1;
    for (int i = 0; i < np; i++)
      if (pend[i].at < t) t = pend[i].at, which = 2, pi = i;
    for (int b = 0; b < 2; b++)
      if (down_since[b] && down_since[b] + 50 * MS < t) t = down_since[b] + 50 * MS, which = 3;
    if (t == UINT64_MAX) break;
    if (t > now) now = t;
    rec_clear(&R);
    if (which == 1) {
      job++;
      uint32_t n = 1 + (uint32_t)(rnd() % 3), lens[3];
      for (uint32_t i = 0; i < n; i++) lens[i] = 1 + (uint32_t)(rnd() % (rnd() % 4 ? 2048 : 8192));
      uint64_t deadline = rnd() % 5 == 0 ? now + (rnd() % 400) * MS : 0;
      int rc = lp_disp_admit(d, job, n, lens, (int)(rnd() % 3), deadline, now);
      admitted[job] = rc == 0;
      nseqs[job] = (int)n;
      admit_at[job] = now;
      if (rc == 0 && rnd() % 50 == 0) {
        ck_assert_int_eq(lp_disp_cancel(d, job, now), 0);
        cancelled[job] = 1;
      }
      next_arrival = now + (rnd() % 6) * MS;
    } else if (which == 2) {
      pend_t p = pend[pi];
      pend[pi] = pend[--np];
      lp_disp_result(d, p.batch, &p.r, now);
    } else if (which == 3) {
      for (int b = 0; b < 2; b++)
        if (down_since[b] && down_since[b] + 50 * MS <= now) {
          down_since[b] = 0;
          lp_disp_backend_health(d, (uint32_t)b, 1, now);
        }
    } else {
      lp_disp_tick(d, now);
    }
    rec_drain(&R, d, now);
    for (int i = 0; i < (int)R.n; i++) {
      const lp_disp_action_t *a = &R.acts[i].a;
      if (a->kind == LP_DISP_ACT_ANSWER) {
        REQUIRE(a->answer.job_id >= 1 && a->answer.job_id <= job);
        REQUIRE(admitted[a->answer.job_id] && !cancelled[a->answer.job_id]);
        answers[a->answer.job_id]++;
        REQUIRE(answers[a->answer.job_id] == 1);
        if (a->answer.status == LP_DISP_ST_OK) REQUIRE(outputs[a->answer.job_id] == nseqs[a->answer.job_id]);
        REQUIRE(now - admit_at[a->answer.job_id] <= 3000 * MS);
      } else if (a->kind == LP_DISP_ACT_OUTPUT) {
        REQUIRE(answers[a->output.job_id] == 0);
        outputs[a->output.job_id]++;
      } else if (a->kind == LP_DISP_ACT_HEALTH) {
        if (!a->health.up) down_since[a->health.backend] = now;
      } else if (a->kind == LP_DISP_ACT_SEND) {
        sends++;
        /* the items fit the rectangle without overlap */
        uint32_t prev_lane = 0, end = 0;
        for (size_t k = 0; k < a->send.n; k++) {
          const lp_disp_item_t *it = &a->send.items[k];
          REQUIRE(it->lane < a->send.lanes);
          if (k == 0 || it->lane != prev_lane) end = 0;
          REQUIRE(it->lane >= prev_lane && it->offset >= end);
          REQUIRE(it->offset + it->len <= a->send.bucket);
          prev_lane = it->lane;
          end = it->offset + it->len;
        }
        /* the modelled device: a fixed cost per shape, and faults */
        uint64_t cost = a->send.shape == 0 ? 20 * MS : 8 * MS;
        uint64_t *f = &dev_free[a->send.backend][a->send.device];
        uint64_t start = *f > now + MS ? *f : now + MS;
        uint64_t r = rnd() % 100;
        pend_t p = {.batch = a->send.batch_id};
        p.r.outcome = LP_DISP_OK;
        uint64_t took = cost;
        if (r < 5) p.r.outcome = LP_DISP_ERR_5XX;
        else if (r < 8) p.r.outcome = LP_DISP_RESET, took = 0;
        else if (r < 10) p.r.outcome = LP_DISP_GARBLED;
        else if (r < 11) took = 40 * cost; /* a stall */
        else if (r < 12) p.r.outcome = LP_DISP_ERR_4XX;
        *f = start + took;
        p.at = *f + MS;
        REQUIRE(np < 4096);
        pend[np++] = p;
      }
    }
    if (job >= JOBS && np == 0 && lp_disp_wake_at(d) == UINT64_MAX) break;
  }
  int n_ok = 0, n_admitted = 0;
  for (uint64_t j = 1; j <= job; j++) {
    if (!admitted[j]) continue;
    n_admitted++;
    ck_assert_int_eq(answers[j], cancelled[j] ? 0 : 1);
    n_ok += answers[j] && outputs[j] == nseqs[j];
  }
  ck_assert_int_eq(job, JOBS);
  ck_assert_int_gt(n_admitted, JOBS / 2);
  ck_assert_int_gt(n_ok, n_admitted / 2);
  lp_disp_stats_t st;
  lp_disp_stats(d, &st);
  ck_assert_uint_eq(st.inflight, 0);
  ck_assert_uint_eq(st.queued_seqs, 0);
  ck_assert_uint_eq(st.queued_jobs, 0);
  ck_assert_uint_gt(st.bisections, 0);
  ck_assert_uint_gt(st.hedges, 0);
  lp_disp_free(d);
}
END_TEST

/* The emulator's stall: a batch that is never answered while its device runs
 * the next at once. With the defaults and a clock learned from answers (no seed
 * costs), the stalled batch's job is answered from a hedge within a few stall
 * times, not after the transfer timeout; every 10 ms one more job arrives and
 * every other batch is answered 9 ms after it left. */
START_TEST(stall_hedged_when_the_device_moves_on) {
  lp_disp_config_t c;
  base(&c, "4x8192,8x2048", (uint64_t[]){0, 0}, 1);
  c.nbackends = 2;
  c.devices[1] = 1;
  c.stall_factor = 3;
  c.stall_min_ns = 50 * MS;
  c.request_bound_ns = 90000 * MS;
  lp_disp_t *d = make(&c);
  static pend_t pend[256];
  int np = 0, seen = 0;
  uint64_t now = 0, next_job = 1, stalled = 0, stalled_at = 0;
  for (int steps = 0; steps < 10000 && now < 2000 * MS && !rec_answer_of(&R, 5); steps++) {
    uint64_t t = lp_disp_wake_at(d), arrival = (next_job - 1) * 10 * MS;
    int which = 0, pi = -1;
    if (arrival < t) t = arrival, which = 1;
    for (int i = 0; i < np; i++)
      if (pend[i].at < t) t = pend[i].at, which = 2, pi = i;
    if (t > now) now = t;
    if (which == 1) {
      uint32_t len = 100;
      ck_assert_int_eq(lp_disp_admit(d, next_job++, 1, &len, 0, 0, now), 0);
    } else if (which == 2) {
      pend_t p = pend[pi];
      pend[pi] = pend[--np];
      lp_disp_result(d, p.batch, &p.r, now);
    } else {
      lp_disp_tick(d, now);
    }
    rec_drain(&R, d, now);
    for (; seen < (int)R.n; seen++) {
      const lp_disp_action_t *a = &R.acts[seen].a;
      if (a->kind != LP_DISP_ACT_SEND) continue;
      /* job 5's first batch stalls */
      if (!stalled && rec_holds(&R.acts[seen], 5)) {
        stalled = a->send.batch_id;
        stalled_at = now;
        ck_assert_uint_ne(a->send.expect_ns, 0); /* the clock knows by then */
        continue;
      }
      REQUIRE(np < 256);
      pend[np++] = (pend_t){.at = now + 9 * MS, .batch = a->send.batch_id,
                            .r = {.outcome = LP_DISP_OK, .device_ns = 8 * MS}};
    }
  }
  ck_assert_uint_ne(stalled, 0);
  const rec_act_t *an = rec_answer_of(&R, 5);
  ck_assert_msg(an, "job 5 not answered %llu ms after its batch stalled",
                (unsigned long long)((now - stalled_at) / MS));
  ck_assert_int_eq(an->a.answer.status, LP_DISP_ST_OK);
  ck_assert_msg(an->at - stalled_at < 500 * MS, "answered %llu ms after it stalled",
                (unsigned long long)((an->at - stalled_at) / MS));
  lp_disp_free(d);
}
END_TEST

/* A stalled batch is presumed lost: its copy does not carry its sequences any
 * more. When the hedge fails (a 5xx), the sequence is retried while it has
 * copies left, and fails at once when it has none, instead of waiting for the
 * stalled batch's transfer timeout (bench-faults: requests past a 30 s client
 * timeout when a hedge of a stalled batch got a 5xx). */
START_TEST(failed_hedge_of_stalled_batch_not_carried_by_it) {
  for (uint32_t copies = 3; copies >= 2; copies--) {
    lp_disp_config_t c;
    base(&c, "4x8192", (uint64_t[]){20}, 2);
    c.stall_factor = 2;
    c.stall_min_ns = 10 * MS;
    c.retry_backoff_ns = 5 * MS;
    c.max_copies = copies;
    lp_disp_t *d = make(&c);
    admit(d, 1, 1, 100, 0, 0, 0);
    tick(d, 40 * MS); /* stalled: the hedge goes to the other device */
    ck_assert_int_eq(rec_count(&R, LP_DISP_ACT_SEND), 2);
    const rec_act_t *h = rec_nth(&R, LP_DISP_ACT_SEND, 1);
    ck_assert(rec_holds(h, 1));
    ck_assert_uint_eq(h->a.send.device, 1);
    result(d, h->a.send.batch_id, LP_DISP_ERR_5XX, 50 * MS);
    if (copies == 3) {
      /* one copy left: retried after the backoff, and answered from it */
      ck_assert_uint_le(lp_disp_wake_at(d), 55 * MS);
      tick(d, lp_disp_wake_at(d));
      ck_assert_int_eq(rec_count(&R, LP_DISP_ACT_SEND), 3);
      const rec_act_t *r = rec_nth(&R, LP_DISP_ACT_SEND, 2);
      ck_assert(rec_holds(r, 1));
      result(d, r->a.send.batch_id, LP_DISP_OK, 80 * MS);
      ck_assert_ptr_nonnull(rec_answer_of(&R, 1));
      ck_assert_int_eq(rec_answer_of(&R, 1)->a.answer.status, LP_DISP_ST_OK);
    } else {
      /* none left: the request is answered now, not at the stalled batch's timeout */
      ck_assert_ptr_nonnull(rec_answer_of(&R, 1));
      ck_assert_int_eq(rec_answer_of(&R, 1)->a.answer.status, LP_DISP_ST_BACKEND_ERROR);
      ck_assert_int_eq(rec_count(&R, LP_DISP_ACT_SEND), 2);
    }
    /* the stalled batch's timeout, much later, says nothing more */
    int before = rec_count(&R, LP_DISP_ACT_ANSWER);
    result(d, rec_nth(&R, LP_DISP_ACT_SEND, 0)->a.send.batch_id, LP_DISP_TIMEOUT, 30000 * MS);
    ck_assert_int_eq(rec_count(&R, LP_DISP_ACT_ANSWER), before);
    lp_disp_stats_t st;
    lp_disp_stats(d, &st);
    ck_assert_uint_eq(st.inflight, 0);
    ck_assert_uint_eq(st.queued_jobs, 0);
    lp_disp_free(d);
  }
}
END_TEST

/* A batch sent before the clock knew any cost has no stall time; once another
 * batch's answer teaches the clock, it gets one, and is hedged then rather than
 * left to its transfer timeout (the emulator's stall: never answered). */
START_TEST(stall_time_once_the_clock_learns) {
  lp_disp_config_t c;
  base(&c, "8x2048", (uint64_t[]){0}, 2);
  c.stall_factor = 3;
  c.stall_min_ns = 50 * MS;
  c.request_bound_ns = 90000 * MS;
  lp_disp_t *d = make(&c);
  admit(d, 1, 1, 1500, 0, 0, 0);
  admit(d, 2, 1, 1500, 0, 0, 1 * MS);
  ck_assert_int_eq(rec_count(&R, LP_DISP_ACT_SEND), 2);
  ck_assert_uint_eq(rec_nth(&R, LP_DISP_ACT_SEND, 0)->a.send.expect_ns, 0); /* nothing known yet */
  ck_assert_uint_ne(rec_nth(&R, LP_DISP_ACT_SEND, 0)->a.send.device, rec_nth(&R, LP_DISP_ACT_SEND, 1)->a.send.device);
  /* batch 1 never answers; batch 2, on the other device, does, reporting 8 ms
   * of device time */
  lp_disp_result_t r = {.outcome = LP_DISP_OK, .device_ns = 8 * MS};
  ck_assert_int_eq(lp_disp_result(d, rec_nth(&R, LP_DISP_ACT_SEND, 1)->a.send.batch_id, &r, 10 * MS), 0);
  rec_drain(&R, d, 10 * MS);
  ck_assert_ptr_nonnull(rec_answer_of(&R, 2));
  ck_assert_msg(lp_disp_wake_at(d) <= 100 * MS, "next wake at %llu ms",
                (unsigned long long)(lp_disp_wake_at(d) / MS));
  tick(d, lp_disp_wake_at(d));
  ck_assert_int_eq(rec_count(&R, LP_DISP_ACT_SEND), 3);
  const rec_act_t *h = rec_nth(&R, LP_DISP_ACT_SEND, 2);
  ck_assert(rec_holds(h, 1));
  ck_assert_int_eq(lp_disp_result(d, h->a.send.batch_id, &r, h->at + 9 * MS), 0);
  rec_drain(&R, d, h->at + 9 * MS);
  ck_assert_ptr_nonnull(rec_answer_of(&R, 1));
  ck_assert_int_eq(rec_answer_of(&R, 1)->a.answer.status, LP_DISP_ST_OK);
  lp_disp_stats_t st;
  lp_disp_stats(d, &st);
  ck_assert_uint_eq(st.stalls, 1);
  lp_disp_free(d);
}
END_TEST

LP_TEST_MAIN("dispatch", the_configured_packer_fills_the_lanes, idle_device_gets_a_batch_at_once, idle_backends_take_turns, just_in_time_while_busy_and_lead_learned,
             shape_by_device_time_per_token, shape_never_by_counting_due_items,
             oldest_must_go_and_long_rides_large, stall_hedges_with_bounded_copies,
             bisect_on_5xx_and_poison_fails_alone, slow_errors_teach_the_clock,
             stalled_batch_presumed_lost_on_one_device,
             shape_loss_fails_what_no_shape_holds, compiling_shape_waited_for_backend_timeout, deadlines, urgent_deadline_must_go, priorities,
             cancel, request_bound_and_queue_bound, avoided_sequence_does_not_end_the_window,
             overtaken_batch_presumed_lost, backend_down_only_with_another_up_and_probed,
             drain_and_fail_all, every_job_one_answer_under_faults, stall_hedged_when_the_device_moves_on,
             failed_hedge_of_stalled_batch_not_carried_by_it, stall_time_once_the_clock_learns,
             fail_all_is_linear, added_backend_takes_batches)
