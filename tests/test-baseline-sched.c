/* Unit tests of the baseline policy (loadgen/baseline, the old online dispatch
 * policy): fill target, max wait, deadlines, bounded bypass, shape choice, and
 * the empty and no-shape cases. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "baseline-sched.h"

#define MS 1000000ull

static lp_baseline_config_t config(void) {
  lp_baseline_config_t c = {.algo = LP_ALGO_BFD, .fill_target = 0.9, .max_wait_ns = 5 * MS,
                            .max_bypass = 3};
  return c;
}

static lp_bucket_set_t shapes(const char *spec) {
  lp_bucket_set_t s;
  lp_bucket_set_init(&s);
  ck_assert_int_eq(lp_bucket_set_parse(&s, spec, NULL, 0), 0);
  return s;
}

START_TEST(idle_and_no_shape) {
  lp_baseline_config_t c = config();
  lp_baseline_t *s = lp_baseline_new(&c);
  lp_bucket_set_t set = shapes("4x1024");
  lp_baseline_plan_t plan;
  ck_assert_int_eq(lp_baseline_decide(s, &set, NULL, 0, 0, &plan), 0);
  ck_assert_int_eq(plan.action, LP_BASELINE_IDLE);
  lp_baseline_item_t it = {.len = 10};
  set.shapes[0].state = LP_SHAPE_UNAVAILABLE;
  ck_assert_int_eq(lp_baseline_decide(s, &set, &it, 1, 0, &plan), 0);
  ck_assert_int_eq(plan.action, LP_BASELINE_NO_SHAPE);
  lp_baseline_free(s);
  c.fill_target = 1.5;
  ck_assert_ptr_null(lp_baseline_new(&c));
}
END_TEST

START_TEST(wait_then_max_wait) {
  lp_baseline_config_t c = config();
  lp_baseline_t *s = lp_baseline_new(&c);
  lp_bucket_set_t set = shapes("4x1024");
  lp_baseline_item_t it[2] = {{.len = 100, .enqueued_ns = 10 * MS}, {.len = 50, .enqueued_ns = 11 * MS}};
  lp_baseline_plan_t plan;
  ck_assert_int_eq(lp_baseline_decide(s, &set, it, 2, 12 * MS, &plan), 0);
  ck_assert_int_eq(plan.action, LP_BASELINE_WAIT);
  ck_assert_uint_eq(plan.wake_ns, 15 * MS); /* oldest + max_wait */
  ck_assert_int_eq(lp_baseline_decide(s, &set, it, 2, 15 * MS, &plan), 0);
  ck_assert_int_eq(plan.action, LP_BASELINE_DISPATCH);
  ck_assert_str_eq(plan.reason, "max_wait");
  ck_assert_uint_eq(plan.placed, 2);
  ck_assert_uint_eq(plan.real_tokens, 150);
  ck_assert_int_ge(plan.place[0].bin, 0);
  ck_assert_int_ge(plan.place[1].bin, 0);
  lp_baseline_free(s);
}
END_TEST

START_TEST(fill_target) {
  lp_baseline_config_t c = config();
  lp_baseline_t *s = lp_baseline_new(&c);
  lp_bucket_set_t set = shapes("2x1000");
  lp_baseline_item_t it[4] = {{.len = 600}, {.len = 400}, {.len = 500}, {.len = 450}};
  lp_baseline_plan_t plan;
  ck_assert_int_eq(lp_baseline_decide(s, &set, it, 4, 0, &plan), 0);
  ck_assert_int_eq(plan.action, LP_BASELINE_DISPATCH);
  ck_assert_str_eq(plan.reason, "fill");
  ck_assert_uint_eq(plan.real_tokens, 1950);
  ck_assert(plan.fill >= 0.9);
  lp_baseline_free(s);
}
END_TEST

START_TEST(deadline) {
  lp_baseline_config_t c = config();
  c.max_wait_ns = 1000 * MS;
  lp_baseline_t *s = lp_baseline_new(&c);
  lp_bucket_set_t set = shapes("4x1024");
  set.shapes[0].cost_ns = 20 * MS;
  lp_baseline_item_t it = {.len = 10, .enqueued_ns = 0, .deadline_ns = 100 * MS};
  lp_baseline_plan_t plan;
  ck_assert_int_eq(lp_baseline_decide(s, &set, &it, 1, 50 * MS, &plan), 0);
  ck_assert_int_eq(plan.action, LP_BASELINE_WAIT);
  ck_assert_uint_eq(plan.wake_ns, 80 * MS); /* deadline - cost */
  ck_assert_int_eq(lp_baseline_decide(s, &set, &it, 1, 80 * MS, &plan), 0);
  ck_assert_int_eq(plan.action, LP_BASELINE_DISPATCH);
  ck_assert_str_eq(plan.reason, "deadline");
  lp_baseline_free(s);
}
END_TEST

START_TEST(shape_choice) {
  lp_baseline_config_t c = config();
  c.fill_target = 0.0;
  lp_baseline_t *s = lp_baseline_new(&c);
  lp_bucket_set_t set = shapes("4x8192,8x512");
  lp_baseline_item_t it[8];
  for (int i = 0; i < 8; i++) it[i] = (lp_baseline_item_t){.len = 500};
  lp_baseline_plan_t plan;
  ck_assert_int_eq(lp_baseline_decide(s, &set, it, 8, 0, &plan), 0);
  ck_assert_int_eq(plan.action, LP_BASELINE_DISPATCH);
  ck_assert_int_eq(plan.shape, 1); /* 8x512 wastes 12 per 500, 4x8192 far more */
  ck_assert_uint_eq(plan.placed, 8);
  /* a long item only the big shape holds, and it does best there */
  it[0].len = 6000;
  ck_assert_int_eq(lp_baseline_decide(s, &set, it, 8, 0, &plan), 0);
  ck_assert_int_eq(plan.shape, 1);
  ck_assert_int_eq(plan.place[0].bin, -1);
  ck_assert_uint_eq(it[0].bypassed, 1); /* passed over once */
  /* unavailable shapes are never chosen */
  set.shapes[1].state = LP_SHAPE_UNAVAILABLE;
  ck_assert_int_eq(lp_baseline_decide(s, &set, it, 8, 0, &plan), 0);
  ck_assert_int_eq(plan.shape, 0);
  ck_assert_uint_eq(plan.placed, 8);
  lp_baseline_free(s);
}
END_TEST

START_TEST(bounded_bypass) {
  /* A long old item and a stream of short ones that fit the small shape better:
   * after max_bypass dispatches without it, it goes first. */
  lp_baseline_config_t c = config();
  c.fill_target = 0.0;
  c.max_wait_ns = 1000 * MS;
  lp_baseline_t *s = lp_baseline_new(&c);
  lp_bucket_set_t set = shapes("4x8192,8x512");
  lp_baseline_item_t q[9];
  q[0] = (lp_baseline_item_t){.len = 6000};
  int rounds = 0, served = 0;
  for (rounds = 1; rounds <= 10 && !served; rounds++) {
    for (int i = 1; i < 9; i++) q[i] = (lp_baseline_item_t){.len = 500};
    lp_baseline_plan_t plan;
    ck_assert_int_eq(lp_baseline_decide(s, &set, q, 9, 0, &plan), 0);
    ck_assert_int_eq(plan.action, LP_BASELINE_DISPATCH);
    if (plan.place[0].bin >= 0) {
      served = 1;
      ck_assert_str_eq(plan.reason, "bypass");
      ck_assert_int_eq(plan.shape, 0);
    }
  }
  ck_assert(served);
  ck_assert_int_eq(rounds - 1, (int)c.max_bypass + 1);
  lp_baseline_free(s);
}
END_TEST

START_TEST(only_compiling_fits) {
  lp_baseline_config_t c = config();
  lp_baseline_t *s = lp_baseline_new(&c);
  lp_bucket_set_t set = shapes("4x8192,8x512");
  set.shapes[0].state = LP_SHAPE_COMPILING;
  lp_baseline_item_t it = {.len = 6000};
  lp_baseline_plan_t plan;
  ck_assert_int_eq(lp_baseline_decide(s, &set, &it, 1, 10 * MS, &plan), 0);
  ck_assert_int_eq(plan.action, LP_BASELINE_WAIT);
  ck_assert_uint_gt(plan.wake_ns, 10 * MS);
  lp_baseline_free(s);
}
END_TEST

/* A due item no compiled shape can hold does not force a dispatch of the rest. */
START_TEST(unholdable_due_item_forces_nothing) {
  lp_baseline_config_t c = config();
  lp_baseline_t *s = lp_baseline_new(&c);
  lp_bucket_set_t set = shapes("4x64");
  lp_baseline_item_t it[2] = {{.len = 100, .enqueued_ns = 0}, {.len = 5, .enqueued_ns = 99 * MS}};
  lp_baseline_plan_t plan;
  ck_assert_int_eq(lp_baseline_decide(s, &set, it, 2, 100 * MS, &plan), 0);
  ck_assert_int_eq(plan.action, LP_BASELINE_WAIT);
  lp_baseline_free(s);
}
END_TEST

/* The modes: NOW sends the best plan whatever its fill; FULL_ONLY only a full
 * one, even with due items; with every cost known the shape with least device
 * time per real token wins over the least padded. */
START_TEST(modes_and_costs) {
  lp_baseline_config_t c = config();
  lp_baseline_t *s = lp_baseline_new(&c);
  lp_bucket_set_t set = shapes("4x64,1x256");
  lp_baseline_item_t it[1] = {{.len = 10, .enqueued_ns = 0}};
  lp_baseline_plan_t plan;
  ck_assert_int_eq(lp_baseline_decide_mode(s, &set, it, 1, 1 * MS, LP_BASELINE_NOW, &plan), 0);
  ck_assert_int_eq(plan.action, LP_BASELINE_DISPATCH);
  ck_assert_int_eq(lp_baseline_decide_mode(s, &set, it, 1, 100 * MS, LP_BASELINE_FULL_ONLY, &plan), 0);
  ck_assert_int_eq(plan.action, LP_BASELINE_WAIT);
  /* by padding 4x64 and 1x256 tie (256 slots); by cost the cheaper one wins */
  set.shapes[0].cost_ns = 30 * MS;
  set.shapes[1].cost_ns = 10 * MS;
  ck_assert_int_eq(lp_baseline_decide_mode(s, &set, it, 1, 1 * MS, LP_BASELINE_NOW, &plan), 0);
  ck_assert_int_eq(plan.shape, 1);
  set.shapes[0].cost_ns = 5 * MS;
  ck_assert_int_eq(lp_baseline_decide_mode(s, &set, it, 1, 1 * MS, LP_BASELINE_NOW, &plan), 0);
  ck_assert_int_eq(plan.shape, 0);
  lp_baseline_free(s);
}
END_TEST

LP_TEST_MAIN("baseline-sched", idle_and_no_shape, wait_then_max_wait, fill_target, deadline, shape_choice,
             bounded_bypass, only_compiling_fits, unholdable_due_item_forces_nothing, modes_and_costs)
