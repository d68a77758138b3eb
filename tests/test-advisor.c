/* Tests of the bucket advisor: the proposal on histograms whose best answer is
 * known, the fill figures, and its errors. */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "testutil.h"
#include "lanepack/advisor.h"

START_TEST(two_modes) {
  lp_lenhist_t h;
  ck_assert_int_eq(lp_lenhist_init(&h, 8192), 0);
  lp_lenhist_add(&h, 100, 900);
  lp_lenhist_add(&h, 1000, 100);
  lp_lenhist_add(&h, 9000, 7); /* over the largest bucket */
  lp_packer_t *pk = lp_packer_new();
  lp_advise_params_t prm = {.k = 2, .max_bucket = 8192, .token_budget = 8192, .granule = 128};
  lp_bucket_set_t cur;
  lp_bucket_set_init(&cur);
  lp_bucket_set_add(&cur, 1, 8192);
  lp_advice_t a;
  ck_assert_int_eq(lp_advise(pk, &h, &prm, &cur, &a), 0);
  ck_assert_uint_eq(a.k, 2);
  ck_assert_uint_eq(a.bucket[0], 128);
  ck_assert_uint_eq(a.bucket[1], 1024);
  ck_assert_uint_eq(a.lanes[0], 64); /* 8192 / 128 */
  ck_assert_uint_eq(a.lanes[1], 8);
  ck_assert_uint_eq(a.sequences, 1000);
  ck_assert_uint_eq(a.rejected, 7);
  /* padded: 900 x 100 in 128-lanes (15 rects of 64) + 100 x 1000 in 1024-lanes
   * (13 rects of 8) */
  double tokens = 900.0 * 100 + 100.0 * 1000;
  double padded = tokens / (15.0 * 8192 + 13.0 * 8192);
  ck_assert_double_eq_tol(a.padded_fill, padded, 1e-9);
  ck_assert(a.packed_fill >= a.padded_fill);
  /* the current single 1x8192 shape: padded is one sequence per 8192 */
  ck_assert_double_eq_tol(a.current_padded_fill, tokens / (1000.0 * 8192), 1e-9);
  ck_assert(a.current_packed_fill > 0.9);

  /* k = 1: one bucket covering the longest */
  prm.k = 1;
  ck_assert_int_eq(lp_advise(pk, &h, &prm, NULL, &a), 0);
  ck_assert_uint_eq(a.k, 1);
  ck_assert_uint_eq(a.bucket[0], 1024);
  /* k larger than useful: no empty buckets proposed */
  prm.k = 6;
  ck_assert_int_eq(lp_advise(pk, &h, &prm, NULL, &a), 0);
  ck_assert_uint_eq(a.k, 2);
  lp_packer_free(pk);
  lp_lenhist_free(&h);
}
END_TEST

START_TEST(errors) {
  lp_lenhist_t h;
  ck_assert_int_eq(lp_lenhist_init(&h, 100), 0);
  lp_packer_t *pk = lp_packer_new();
  lp_advise_params_t prm = {.k = 2, .max_bucket = 100, .token_budget = 100, .granule = 16};
  lp_advice_t a;
  ck_assert_int_eq(lp_advise(pk, &h, &prm, NULL, &a), -ENODATA);
  lp_lenhist_add(&h, 500, 1);
  ck_assert_int_eq(lp_advise(pk, &h, &prm, NULL, &a), -ENODATA);
  prm.k = 0;
  ck_assert_int_eq(lp_advise(pk, &h, &prm, NULL, &a), -EINVAL);
  prm.k = LP_ADVISE_MAX_K + 1;
  ck_assert_int_eq(lp_advise(pk, &h, &prm, NULL, &a), -EINVAL);
  lp_packer_free(pk);
  lp_lenhist_free(&h);
  ck_assert_int_eq(lp_lenhist_init(&h, 0), -EINVAL);
}
END_TEST

START_TEST(dp_is_optimal) {
  /* Brute force over all pairs of candidate buckets on a small histogram. */
  lp_lenhist_t h;
  lp_lenhist_init(&h, 64);
  unsigned counts[] = {0, 5, 0, 3, 9, 0, 1, 7, 2, 0, 4, 0, 0, 6, 1, 8};
  for (uint32_t i = 1; i < 16; i++) lp_lenhist_add(&h, i * 4, counts[i]);
  lp_packer_t *pk = lp_packer_new();
  lp_advise_params_t prm = {.k = 3, .max_bucket = 64, .token_budget = 64, .granule = 4};
  lp_advice_t a;
  ck_assert_int_eq(lp_advise(pk, &h, &prm, NULL, &a), 0);
  double best = 1e18;
  for (uint32_t b1 = 4; b1 <= 60; b1 += 4)
    for (uint32_t b2 = b1; b2 <= 60; b2 += 4) {
      double pad = 0;
      for (uint32_t l = 1; l <= 60; l++) {
        uint32_t b = l <= b1 ? b1 : l <= b2 ? b2 : 60;
        pad += (double)h.count[l] * (b - l);
      }
      if (pad < best) best = pad;
    }
  double got = 0;
  for (uint32_t l = 1; l <= 60; l++) {
    uint32_t b = 0;
    for (size_t i = 0; i < a.k && !b; i++)
      if (a.bucket[i] >= l) b = a.bucket[i];
    if (h.count[l]) ck_assert_uint_gt(b, 0);
    got += (double)h.count[l] * (b - l);
  }
  ck_assert_double_eq_tol(got, best, 1e-9);
  lp_packer_free(pk);
  lp_lenhist_free(&h);
}
END_TEST

LP_TEST_MAIN("advisor", two_modes, errors, dp_is_optimal)
