/* Tests of the latency histogram: quantiles against a sorted reference. */
#include <check.h>
#include <stdlib.h>

#include "testutil.h"
#include "lanepack/hdr.h"
#include "lanepack/rng.h"

static int cmp(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

START_TEST(quantiles_match_sorted) {
  static lp_hdr_t h;
  enum { N = 200000 };
  static uint64_t v[N];
  lp_rng_t r;
  lp_rng_seed(&r, 11);
  lp_hdr_init(&h);
  for (int i = 0; i < N; i++) {
    /* log-uniform from 1 us to ~100 s */
    v[i] = (uint64_t)(1.0 * __builtin_exp(lp_rng_double(&r) * 18.4));
    lp_hdr_record(&h, v[i]);
  }
  qsort(v, N, sizeof(v[0]), cmp);
  double qs[] = {0.0, 0.1, 0.5, 0.9, 0.99, 0.999, 1.0};
  for (size_t i = 0; i < sizeof(qs) / sizeof(qs[0]); i++) {
    size_t rank = (size_t)(qs[i] * N);
    if (rank >= N) rank = N - 1;
    double want = (double)v[rank], got = (double)lp_hdr_quantile(&h, qs[i]);
    ck_assert_msg(got >= want * 0.99 - 1 && got <= want * 1.01 + 1, "q%.3f: got %.0f want %.0f",
                  qs[i], got, want);
  }
  ck_assert_uint_eq(h.min, v[0]);
  ck_assert_uint_eq(h.max, v[N - 1]);
  ck_assert_uint_eq(h.total, N);
}
END_TEST

START_TEST(small_exact_and_merge) {
  lp_hdr_t a, b;
  lp_hdr_init(&a);
  lp_hdr_init(&b);
  ck_assert_uint_eq(lp_hdr_quantile(&a, 0.5), 0);
  for (uint64_t i = 1; i <= 100; i++) lp_hdr_record(i <= 50 ? &a : &b, i);
  lp_hdr_merge(&a, &b);
  ck_assert_uint_eq(a.total, 100);
  ck_assert_uint_eq(lp_hdr_quantile(&a, 0.5), 51); /* exact below 128 */
  ck_assert_uint_eq(lp_hdr_quantile(&a, 0.99), 100);
  ck_assert(lp_hdr_mean(&a) > 50.49 && lp_hdr_mean(&a) < 50.51);
  lp_hdr_record(&a, UINT64_MAX); /* out of range: clamped into the last bucket */
  ck_assert_uint_eq(lp_hdr_quantile(&a, 1.0), UINT64_MAX);
}
END_TEST

LP_TEST_MAIN("hdr", quantiles_match_sorted, small_exact_and_merge)
