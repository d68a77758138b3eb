/* The saturation window on a fake time: the ratio of mean wait to mean device
 * time, over the last window only, with queued requests counted as they wait,
 * the device time falling back to the mean since start, and 0 when idle. */
#include <check.h>

#include "testutil.h"
#include "lanepack/saturation.h"

#define S 1000000000ull

/* Sums since start at t seconds. */
static lp_sat_sums_t sums(uint64_t t, double wait, uint64_t waits, double service, uint64_t batches) {
  lp_sat_sums_t x = {.at_ns = t * S, .wait_s = wait, .service_s = service, .waits = waits, .batches = batches};
  return x;
}

START_TEST(ratio_since_start_then_windowed) {
  lp_saturation_t s = {0};
  lp_sat_sums_t x = sums(0, 0, 0, 0, 0);
  ck_assert_double_eq(lp_saturation_update(&s, &x, 0, 0), 0); /* nothing yet */
  /* 10 requests waited 5 ms each, 5 batches of 20 ms: 0.25 */
  x = sums(10, 0.050, 10, 0.100, 5);
  ck_assert_double_eq_tol(lp_saturation_update(&s, &x, 0, 0), 0.25, 1e-9);
  /* 40 s later a burst: 10 more requests waited 60 ms each, 5 batches of 20 ms.
   * The window (30 s) starts at the sample of t = 10 (the newest at least 30 s
   * old): only the burst counts, 3.0 */
  x = sums(50, 0.650, 20, 0.200, 10);
  ck_assert_double_eq_tol(lp_saturation_update(&s, &x, 0, 0), 3.0, 1e-9);
  /* 31 s after that and nothing new: nothing waited in the window, 0 (an
   * autoscaler may scale down) */
  x = sums(81, 0.650, 20, 0.200, 10);
  ck_assert_double_eq(lp_saturation_update(&s, &x, 0, 0), 0);
}
END_TEST

START_TEST(queued_requests_count_as_they_wait) {
  lp_saturation_t s = {0};
  lp_sat_sums_t x = sums(1, 0.010, 2, 0.040, 2); /* 5 ms waits, 20 ms batches */
  ck_assert_double_eq_tol(lp_saturation_update(&s, &x, 0, 0), 0.25, 1e-9);
  /* a stalled backend: nothing answered since, 8 requests queued 1 s each so
   * far; no batch ended in the window, so the device time is the mean since
   * start (20 ms): 1 / 0.020 = 50 */
  x = sums(3, 0.010, 2, 0.040, 2);
  ck_assert_double_eq_tol(lp_saturation_update(&s, &x, 8.0, 8), 50.0, 1e-9);
  /* never a batch answered: nothing to compare with */
  lp_saturation_t e = {0};
  x = sums(1, 0, 0, 0, 0);
  ck_assert_double_eq(lp_saturation_update(&e, &x, 3.0, 3), 0);
}
END_TEST

START_TEST(ring_bounded_and_spaced) {
  lp_saturation_t s = {.window_ns = 16 * S}; /* samples at least 1 s apart */
  /* a scrape every 100 ms for 100 s: the ring keeps 32 samples, the window
   * stays about 16 s, and a steady 0.5 reads 0.5 throughout */
  for (uint64_t ms = 100; ms <= 100000; ms += 100) {
    uint64_t k = ms / 100;
    lp_sat_sums_t x = {.at_ns = ms * 1000000ull, .wait_s = 0.010 * (double)k, .waits = k,
                       .service_s = 0.020 * (double)k, .batches = k};
    REQUIRE(lp_saturation_update(&s, &x, 0, 0) > 0.4999 && lp_saturation_update(&s, &x, 0, 0) < 0.5001);
  }
  ck_assert_uint_eq(s.n, LP_SAT_SNAPS);
  const lp_sat_sums_t *oldest = &s.ring[s.head];
  ck_assert_uint_ge(oldest->at_ns, (100 - 33) * S); /* no older than 32 samples, 1 s apart */
  /* a sample from the past (a clock that went back) is not a base */
  lp_sat_sums_t back = {.at_ns = 1 * S, .wait_s = 0.001, .waits = 1, .service_s = 0.020, .batches = 1};
  ck_assert_double_eq_tol(lp_saturation_update(&s, &back, 0, 0), 0.05, 1e-9);
}
END_TEST

LP_TEST_MAIN("saturation", ratio_since_start_then_windowed, queued_requests_count_as_they_wait,
             ring_bounded_and_spaced)
