/* Tests of the byte buffer and the fast integer writer, against printf. */
#include <check.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "testutil.h"
#include "lanepack/buf.h"
#include "lanepack/rng.h"

START_TEST(integers_match_printf) {
  lp_rng_t r;
  lp_rng_seed(&r, 3);
  char a[32], b[32];
  int64_t fixed[] = {0, 1, -1, 9, 10, 99, 100, INT64_MAX, INT64_MIN, INT32_MIN, 1000000007,
                     4294967295LL, 4294967296LL, -4294967296LL, 99999999, 100000000,
                     9999999999999999LL, 10000000000000000LL, 10000000000000001LL};
  for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++) {
    size_t n = lp_fmt_i64(a, fixed[i]);
    a[n] = 0;
    snprintf(b, sizeof(b), "%lld", (long long)fixed[i]);
    ck_assert_str_eq(a, b);
  }
  for (int i = 0; i < 100000; i++) {
    int64_t v = (int64_t)lp_rng_next(&r) >> (lp_rng_next(&r) % 63);
    size_t n = lp_fmt_i64(a, v);
    a[n] = 0;
    snprintf(b, sizeof(b), "%lld", (long long)v);
    REQUIRE(strcmp(a, b) == 0);
  }
}
END_TEST

START_TEST(arrays_and_strings) {
  lp_buf_t b;
  lp_buf_init(&b);
  int32_t v[] = {1, -2, 30, INT32_MIN};
  lp_buf_i32_array(&b, v, 4);
  lp_buf_puts(&b, " ");
  lp_buf_i32_array(&b, v, 0);
  lp_buf_puts(&b, " ");
  lp_buf_json_str(&b, "a\"b\\c\n\x01", 7);
  lp_buf_printf(&b, " %d", 42);
  ck_assert_str_eq(lp_buf_cstr(&b), "[1,-2,30,-2147483648] [] \"a\\\"b\\\\c\\u000a\\u0001\" 42");
  lp_buf_reset(&b);
  for (int i = 0; i < 100000; i++) lp_buf_u64(&b, 7);
  ck_assert_uint_eq(b.len, 100000);
  lp_buf_free(&b);
}
END_TEST

/* Bytes from clients need not be UTF-8: what is well formed passes, each byte
 * of anything else (stray continuation, overlong, surrogate, past U+10FFFF,
 * cut short) becomes \ufffd. */
START_TEST(json_strings_stay_utf8) {
  static const struct {
    const char *in, *out;
  } cases[] = {
      {"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\""},
      {"/\xff\xfe/", "\"/\\ufffd\\ufffd/\""},
      {"\x80x", "\"\\ufffdx\""},
      {"\xc0\xaf", "\"\\ufffd\\ufffd\""},         /* overlong '/' */
      {"\xed\xa0\x80", "\"\\ufffd\\ufffd\\ufffd\""}, /* a surrogate */
      {"\xf4\x90\x80\x80", "\"\\ufffd\\ufffd\\ufffd\\ufffd\""},
      {"a\xc3", "\"a\\ufffd\""},                      /* cut short */
      {"\xe2\x82", "\"\\ufffd\\ufffd\""},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    lp_buf_t b;
    lp_buf_init(&b);
    lp_buf_json_str(&b, cases[i].in, strlen(cases[i].in));
    ck_assert_str_eq(lp_buf_cstr(&b), cases[i].out);
    lp_buf_free(&b);
  }
}
END_TEST

LP_TEST_MAIN("buf", integers_match_printf, arrays_and_strings, json_strings_stay_utf8)
