/* The retry backoff: doubling from retry_backoff_ms, capped, defined for any
 * number of attempts (a plain shift is undefined past 63 and overflows earlier). */
#include <check.h>

#include "testutil.h"
#include "../src/proxy/proxy.h"

START_TEST(backoff_doubles_and_caps) {
  lp_model_config_t cfg;
  lp_model_config_default(&cfg, "m");
  lp_model_t m = {.cfg = &cfg};
  cfg.retry_backoff_ms = 20;
  ck_assert_uint_eq(lp__backoff_ms(&m, 0), 20);
  ck_assert_uint_eq(lp__backoff_ms(&m, 1), 40);
  ck_assert_uint_eq(lp__backoff_ms(&m, 5), 640);
  ck_assert_uint_eq(lp__backoff_ms(&m, 12), LP_MAX_BACKOFF_MS);
  /* attempts past any shift width: capped, never wrapped to something small */
  for (uint32_t a = 0; a < 1000; a++) {
    uint64_t b = lp__backoff_ms(&m, a);
    REQUIRE(b >= 20 && b <= LP_MAX_BACKOFF_MS);
    REQUIRE(a == 0 || b >= lp__backoff_ms(&m, a - 1));
  }
  ck_assert_uint_eq(lp__backoff_ms(&m, UINT32_MAX), LP_MAX_BACKOFF_MS);
  cfg.retry_backoff_ms = 60000; /* the largest configurable */
  ck_assert_uint_eq(lp__backoff_ms(&m, 100), LP_MAX_BACKOFF_MS);
  cfg.retry_backoff_ms = 0;
  ck_assert_uint_eq(lp__backoff_ms(&m, 100), 0);
}
END_TEST

LP_TEST_MAIN("retry", backoff_doubles_and_caps)
