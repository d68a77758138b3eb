/* The device clock on a fake time: idle devices, expected finish times, service
 * times learned as medians a stall cannot ruin, the lead time learned apart when
 * the backend reports its device time, and a queue behind a device moving with
 * the batch ahead of it. */
#include <check.h>

#include "testutil.h"
#include "lanepack/devclock.h"

#define MS 1000000ull

START_TEST(idle_busy_and_expected_finish) {
  lp_devclock_t c;
  lp_devclock_init(&c, 2);
  ck_assert_int_eq(lp_devclock_idle_device(&c), 0);
  ck_assert_uint_eq(lp_devclock_next_free(&c), 0);
  ck_assert_uint_eq(lp_devclock_cost(&c, 0), 0); /* unknown */
  lp_devclock_seed(&c, 0, 20 * MS);
  uint64_t f1, f2, f3;
  int d1 = lp_devclock_start(&c, 0, 100 * MS, &f1);
  int d2 = lp_devclock_start(&c, 0, 105 * MS, &f2);
  ck_assert_int_ne(d1, d2);
  ck_assert_uint_eq(f1, 120 * MS);
  ck_assert_uint_eq(f2, 125 * MS);
  ck_assert_int_eq(lp_devclock_idle_device(&c), -1);
  ck_assert_uint_eq(lp_devclock_next_free(&c), 120 * MS);
  /* a third batch queues behind the device free first */
  int d3 = lp_devclock_start(&c, 0, 110 * MS, &f3);
  ck_assert_int_eq(d3, d1);
  ck_assert_uint_eq(f3, 140 * MS);
  /* the first ends 5 ms early: the one behind it moves up */
  lp_devclock_finish(&c, d1, 0, 100 * MS, f1, 115 * MS, 0, 0.5);
  ck_assert_uint_eq(c.dev[d1].free_ns, 135 * MS);
  lp_devclock_abandon(&c, d3, 135 * MS, 130 * MS);
  ck_assert_int_eq(lp_devclock_idle_device(&c), d1);
}
END_TEST

START_TEST(median_survives_stalls) {
  lp_devclock_t c;
  lp_devclock_init(&c, 1);
  uint64_t t = 0;
  for (int i = 0; i < 40; i++) {
    uint64_t f;
    int d = lp_devclock_start(&c, 3, t, &f);
    uint64_t took = i % 10 == 0 ? 5000 * MS : 20 * MS + (uint64_t)(i % 3) * MS; /* one in ten stalls */
    lp_devclock_finish(&c, d, 3, t, f, t + took, 0, 1.0);
    t += took;
  }
  uint64_t cost = lp_devclock_cost(&c, 3);
  ck_assert_msg(cost >= 20 * MS && cost <= 22 * MS, "median %llu", (unsigned long long)cost);
  /* busy time counted, effective (fill-weighted) the same at fill 1 */
  ck_assert_uint_eq(c.busy_ns, c.useful_ns);
}
END_TEST

START_TEST(lead_learned_from_device_time) {
  lp_devclock_t c;
  lp_devclock_init(&c, 1);
  for (int i = 0; i < 9; i++) {
    uint64_t f, t = (uint64_t)i * 100 * MS;
    int d = lp_devclock_start(&c, 1, t, &f);
    /* 3 ms to deliver, 20 ms on the device */
    lp_devclock_finish(&c, d, 1, t, f, t + 23 * MS, 20 * MS, 0.25);
  }
  ck_assert_uint_eq(lp_devclock_cost(&c, 1), 20 * MS);
  ck_assert_uint_eq(lp_devclock_lead(&c), 3 * MS);
  uint64_t f;
  lp_devclock_start(&c, 1, 1000 * MS, &f);
  ck_assert_uint_eq(f, 1023 * MS); /* lead, then the device time */
  ck_assert_uint_eq(c.useful_ns * 4, c.busy_ns);
}
END_TEST

START_TEST(devices_bounded) {
  lp_devclock_t c;
  lp_devclock_init(&c, 0);
  ck_assert_uint_eq(c.devices, 1);
  lp_devclock_set_devices(&c, 1000);
  ck_assert_uint_eq(c.devices, LP_CLOCK_MAX_DEVICES);
  /* a busy device whose batch has no expected time makes the next free unknown */
  lp_devclock_set_devices(&c, 1);
  uint64_t f;
  lp_devclock_start(&c, 0, 0, &f);
  ck_assert_uint_eq(f, 0);
  ck_assert_uint_eq(lp_devclock_next_free(&c), UINT64_MAX);
}
END_TEST

/* a shape leaving the set takes its learned and seeded cost with it; the others keep theirs */
START_TEST(forget_shape) {
  lp_devclock_t c;
  lp_devclock_init(&c, 1);
  lp_devclock_seed(&c, 2, 5000);
  lp_window_add(&c.svc[2], 6000);
  lp_devclock_seed(&c, 3, 7000);
  lp_window_add(&c.svc[3], 9000);
  lp_devclock_forget_shape(&c, 2);
  ck_assert_uint_eq(lp_devclock_cost(&c, 2), 0);
  ck_assert_uint_eq(lp_devclock_cost(&c, 3), 9000);
  lp_window_add(&c.svc[2], 100); /* the next shape in the slot learns from nothing */
  ck_assert_uint_eq(lp_devclock_cost(&c, 2), 100);
  lp_devclock_forget_shape(&c, LP_BUCKET_MAX_SHAPES); /* out of range: nothing */
  lp_devclock_forget_shape(&c, -1);
  ck_assert_uint_eq(lp_devclock_cost(&c, 3), 9000);
}
END_TEST

/* devices cut by a reload (SIGHUP devices) while a batch runs on one cut: its
 * end still frees that device, so that when it is back it is not busy for ever */
START_TEST(device_cut_while_busy) {
  lp_devclock_t c;
  lp_devclock_init(&c, 2);
  lp_devclock_seed(&c, 0, 10 * MS);
  uint64_t f0, f1;
  lp_devclock_start(&c, 0, 0, &f0);
  int d1 = lp_devclock_start(&c, 0, 0, &f1);
  ck_assert_int_eq(d1, 1);
  lp_devclock_set_devices(&c, 1);
  lp_devclock_finish(&c, d1, 0, 0, f1, 10 * MS, 0, 1.0);
  lp_devclock_set_devices(&c, 2);
  ck_assert_uint_eq(c.dev[1].batches, 0);
  ck_assert_uint_eq(c.dev[1].free_ns, 0);
}
END_TEST

LP_TEST_MAIN("devclock", idle_busy_and_expected_finish, median_survives_stalls,
             lead_learned_from_device_time, devices_bounded, forget_shape, device_cut_while_busy)
