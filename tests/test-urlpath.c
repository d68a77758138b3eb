/* Percent-decoding of a URL path segment (a model name in a route): escapes
 * in either case, plain bytes kept, and every malformed or unfitting input
 * refused rather than cut. */
#include <check.h>
#include <string.h>

#include "lanepack/urlpath.h"
#include "testutil.h"

static long dec(const char *in, char *out, size_t cap) { return lp_urlpath_decode(in, strlen(in), out, cap); }

START_TEST(test_decodes) {
  char out[64];
  ck_assert_int_eq(dec("plain-name_1.2", out, sizeof(out)), 14);
  ck_assert_str_eq(out, "plain-name_1.2");
  ck_assert_int_eq(dec("g%20h%2520%C3%A9%3cx%3E", out, sizeof(out)), 11);
  ck_assert_str_eq(out, "g h%20\xc3\xa9<x>");
  ck_assert_int_eq(dec("a%22b", out, sizeof(out)), 3);
  ck_assert_str_eq(out, "a\"b");
  ck_assert_int_eq(dec("", out, sizeof(out)), 0);
  ck_assert_str_eq(out, "");
  /* a '+' is a plus in a path (it is a space only in a query's form data) */
  ck_assert_int_eq(dec("a+b", out, sizeof(out)), 3);
  ck_assert_str_eq(out, "a+b");
}
END_TEST

START_TEST(test_refuses) {
  char out[8];
  ck_assert_int_eq(dec("a%2", out, sizeof(out)), -1);   /* one digit */
  ck_assert_int_eq(dec("a%", out, sizeof(out)), -1);    /* none */
  ck_assert_int_eq(dec("a%g0", out, sizeof(out)), -1);  /* not hex */
  ck_assert_int_eq(dec("a%00b", out, sizeof(out)), -1); /* a NUL would cut the name */
  ck_assert_int_eq(dec("1234567", out, sizeof(out)), 7); /* fits with its NUL */
  ck_assert_int_eq(dec("12345678", out, sizeof(out)), -1);
  ck_assert_int_eq(dec("123456%41", out, sizeof(out)), 7);
  ck_assert_int_eq(dec("1234567%41", out, sizeof(out)), -1);
  ck_assert_int_eq(lp_urlpath_decode("a", 1, out, 0), -1);
  /* the length given is what is read: bytes after it are not */
  ck_assert_int_eq(lp_urlpath_decode("ab%41", 2, out, sizeof(out)), 2);
  ck_assert_str_eq(out, "ab");
  ck_assert_int_eq(lp_urlpath_decode("ab%41", 4, out, sizeof(out)), -1);
}
END_TEST

LP_TEST_MAIN("urlpath", test_decodes, test_refuses)
