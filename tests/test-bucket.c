/* Unit tests of the bucket manager: parsing, admission, states, counters. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "lanepack/bucket.h"

START_TEST(parse_good) {
  lp_bucket_set_t s;
  lp_bucket_set_init(&s);
  char err[128];
  ck_assert_int_eq(lp_bucket_set_parse(&s, "4x8192,8x2048", err, sizeof(err)), 0);
  ck_assert_uint_eq(s.count, 2);
  ck_assert_uint_eq(s.shapes[0].lanes, 4);
  ck_assert_uint_eq(s.shapes[0].bucket, 8192);
  ck_assert_uint_eq(s.shapes[1].lanes, 8);
  ck_assert_uint_eq(s.shapes[1].bucket, 2048);
  ck_assert_int_eq(s.shapes[1].state, LP_SHAPE_COMPILED);
  /* duplicates are merged */
  ck_assert_int_eq(lp_bucket_set_parse(&s, "4x8192", err, sizeof(err)), 0);
  ck_assert_uint_eq(s.count, 2);
  ck_assert_int_eq(lp_bucket_set_find(&s, 8, 2048), 1);
  ck_assert_int_eq(lp_bucket_set_find(&s, 8, 4096), -ENOENT);
}
END_TEST

START_TEST(parse_bad) {
  static const char *bad[] = {"", "4", "4x", "x8192", "0x8192", "4x0", "4x8192,", "4x8192;8x2",
                              "4y8192", "-4x8192", "99999999x2", "4x99999999999", " 4x8192"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    lp_bucket_set_t s;
    lp_bucket_set_init(&s);
    char err[128] = "";
    ck_assert_msg(lp_bucket_set_parse(&s, bad[i], err, sizeof(err)) == -EINVAL, "accepted '%s'",
                  bad[i]);
    ck_assert_msg(strlen(err) > 0, "no message for '%s'", bad[i]);
  }
}
END_TEST

START_TEST(parse_too_many) {
  lp_bucket_set_t s;
  lp_bucket_set_init(&s);
  char spec[512] = "", err[128];
  for (int i = 1; i <= LP_BUCKET_MAX_SHAPES + 1; i++) {
    char one[32];
    snprintf(one, sizeof(one), "%s1x%d", i > 1 ? "," : "", i * 16);
    strcat(spec, one);
  }
  ck_assert_int_eq(lp_bucket_set_parse(&s, spec, err, sizeof(err)), -ENOSPC);
  ck_assert_ptr_nonnull(strstr(err, "too many"));
}
END_TEST

START_TEST(admit_edges) {
  lp_bucket_set_t s;
  lp_bucket_set_init(&s);
  ck_assert_int_ge(lp_bucket_set_add(&s, 4, 8192), 0);
  ck_assert_int_ge(lp_bucket_set_add(&s, 8, 2048), 0);
  uint32_t max = 0;
  ck_assert_int_eq(lp_bucket_set_admit(&s, 8192, &max), LP_ADMIT_OK);
  ck_assert_uint_eq(max, 8192);
  ck_assert_int_eq(lp_bucket_set_admit(&s, 8193, &max), LP_ADMIT_TOO_LONG);
  ck_assert_int_eq(lp_bucket_set_admit(&s, 1, NULL), LP_ADMIT_OK);
  ck_assert_int_eq(lp_bucket_set_admit(&s, 0, NULL), LP_ADMIT_EMPTY);
  ck_assert_str_eq(lp_admit_reason(LP_ADMIT_TOO_LONG), "sequence_too_long");

  /* the long shape compiling still admits; unavailable does not */
  s.shapes[0].state = LP_SHAPE_COMPILING;
  ck_assert_int_eq(lp_bucket_set_admit(&s, 8000, &max), LP_ADMIT_OK);
  s.shapes[0].state = LP_SHAPE_UNAVAILABLE;
  ck_assert_int_eq(lp_bucket_set_admit(&s, 8000, &max), LP_ADMIT_TOO_LONG);
  ck_assert_uint_eq(max, 2048);
  s.shapes[1].state = LP_SHAPE_UNAVAILABLE;
  ck_assert_int_eq(lp_bucket_set_admit(&s, 10, &max), LP_ADMIT_NO_SHAPE);
  ck_assert_uint_eq(max, 0);
  ck_assert_str_eq(lp_admit_reason(LP_ADMIT_NO_SHAPE), "no_shape_available");
  ck_assert_str_eq(lp_shape_state_name(LP_SHAPE_UNAVAILABLE), "unavailable");
}
END_TEST

START_TEST(counters) {
  lp_bucket_set_t s;
  lp_bucket_set_init(&s);
  int i = lp_bucket_set_add(&s, 2, 100);
  lp_bucket_set_account(&s, (size_t)i, 3, 150);
  lp_bucket_set_account(&s, (size_t)i, 1, 200);
  ck_assert_uint_eq(s.shapes[i].batches, 2);
  ck_assert_uint_eq(s.shapes[i].segments, 4);
  ck_assert_uint_eq(s.shapes[i].real_tokens, 350);
  ck_assert_uint_eq(s.shapes[i].pad_tokens, 50);
  ck_assert_int_eq(lp_bucket_set_add(&s, 0, 100), -EINVAL);
}
END_TEST

/* a pruned shape frees its slot: the others keep their indexes and counters,
 * the next new shape takes the slot from zero, trailing free slots leave */
START_TEST(remove_frees_slot) {
  lp_bucket_set_t s;
  lp_bucket_set_init(&s);
  for (uint32_t b = 1; b <= LP_BUCKET_MAX_SHAPES; b++) ck_assert_int_ge(lp_bucket_set_add(&s, 1, b * 10), 0);
  ck_assert_int_eq(lp_bucket_set_add(&s, 1, 999), -ENOSPC);
  lp_bucket_set_account(&s, 4, 2, 7);
  lp_bucket_set_account(&s, 5, 1, 3);
  ck_assert_int_eq(lp_bucket_set_remove(&s, 4), 0);
  ck_assert_int_eq(lp_bucket_set_remove(&s, 4), -ENOENT);
  ck_assert_uint_eq(s.count, LP_BUCKET_MAX_SHAPES);
  ck_assert_int_eq(lp_bucket_set_find(&s, 1, 50), -ENOENT);
  ck_assert_int_eq(lp_bucket_set_find(&s, 1, 60), 5);
  ck_assert_uint_eq(s.shapes[5].real_tokens, 3);
  ck_assert_int_eq(s.shapes[4].state, LP_SHAPE_UNAVAILABLE);
  ck_assert_uint_eq(lp_bucket_set_max_len(&s), LP_BUCKET_MAX_SHAPES * 10);
  ck_assert_int_eq(lp_bucket_set_add(&s, 1, 999), 4);
  ck_assert_uint_eq(s.shapes[4].batches, 0);
  ck_assert_int_eq(s.shapes[4].state, LP_SHAPE_COMPILED);
  ck_assert_uint_eq(lp_bucket_set_max_len(&s), 999);
  ck_assert_int_eq(lp_bucket_set_remove(&s, LP_BUCKET_MAX_SHAPES - 2), 0);
  ck_assert_uint_eq(s.count, LP_BUCKET_MAX_SHAPES);
  ck_assert_int_eq(lp_bucket_set_remove(&s, LP_BUCKET_MAX_SHAPES - 1), 0);
  ck_assert_uint_eq(s.count, LP_BUCKET_MAX_SHAPES - 2); /* both trailing free slots leave */
  ck_assert_int_eq(lp_bucket_set_remove(&s, LP_BUCKET_MAX_SHAPES), -ENOENT);
}
END_TEST

LP_TEST_MAIN("bucket", parse_good, parse_bad, parse_too_many, admit_edges, counters, remove_frees_slot)
