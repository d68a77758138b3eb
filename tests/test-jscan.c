/* Tests of the JSON scanner, against jansson as the reference on the same bytes. */
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "lanepack/jscan.h"
#include "lanepack/rng.h"
#include "mutate.h"

static int scan_ok(const char *s) {
  const char *end = s + strlen(s);
  const char *p = lp_jscan_ws(s, end);
  p = lp_jscan_skip(p, end, LP_JSCAN_MAX_DEPTH);
  if (p == NULL) return 0;
  return lp_jscan_ws(p, end) == end;
}

static int jansson_ok(const char *s) {
  json_error_t e;
  json_t *j = json_loads(s, JSON_DECODE_ANY | JSON_ALLOW_NUL, &e);
  if (j) json_decref(j);
  return j != NULL;
}

START_TEST(fixed_cases) {
  static const char *good[] = {"0", "-1", "1.5e3", "\"a\\n\\u00e9\"", "[]", "{}", "[1, [2, {}]]",
                               "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"", "\"\\ud83d\\ude00\"",
                               "{\"a\": [true, false, null]}", " [ 1 , 2 ] ", "-0.0E+1"};
  static const char *bad[] = {"", "01", "1.", "-", "[1,]", "{\"a\"}", "{\"a\":}", "[1 2]",
                              "tru", "\"abc", "\"\\x\"", "{1: 2}", "[", "]", "1e", "+1",
                              "\"a\tb\"", "{\"a\":1,}", "nul", "\"\xff\"", "\"\xc3\x28\"",
                              "\"\xed\xa0\x80\"", "\"\xc0\xaf\"", "\"\\ud800\"", "\"\\udc00x\"",
                              "\"\\ud800\\u0041\""};
  for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
    ck_assert_msg(scan_ok(good[i]), "rejected %s", good[i]);
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
    ck_assert_msg(!scan_ok(bad[i]), "accepted %s", bad[i]);
}
END_TEST

START_TEST(depth_limit) {
  char buf[300];
  memset(buf, '[', 100);
  memset(buf + 100, ']', 100);
  buf[200] = 0;
  ck_assert(!scan_ok(buf)); /* 100 deep > 64 */
  memset(buf, 0, sizeof(buf));
  memset(buf, '[', 60);
  memset(buf + 60, ']', 60);
  ck_assert(scan_ok(buf));
}
END_TEST

START_TEST(key_compare) {
  int eq;
  const char *s = "\"outputs\": 1";
  const char *p = lp_jscan_key(s, s + strlen(s), "outputs", &eq);
  ck_assert(eq);
  ck_assert_ptr_eq(p, s + 9);
  lp_jscan_key(s, s + strlen(s), "output", &eq);
  ck_assert(!eq);
  /* escaped keys compare by their decoded text, as jansson reads them */
  static const struct { const char *json, *key; int eq; } esc[] = {
      {"\"\\u0069nput_ids\"", "input_ids", 1},
      {"\"input\\u005fids\"", "input_ids", 1},
      {"\"\\u0069nput_idsx\"", "input_ids", 0},
      {"\"\\u0069nput_id\"", "input_ids", 0},
      {"\"a\\/b\\\\c\\\"d\\n\"", "a/b\\c\"d\n", 1},
      {"\"\\u00e9t\\u00e9\"", "\xc3\xa9t\xc3\xa9", 1},
      {"\"\\ud83d\\ude00\"", "\xf0\x9f\x98\x80", 1},
      {"\"\\u20ac\"", "\xe2\x82\xac", 1},
      {"\"\\u20ac\"", "\xe2\x82", 0},
  };
  for (size_t i = 0; i < sizeof(esc) / sizeof(esc[0]); i++) {
    const char *e = lp_jscan_key(esc[i].json, esc[i].json + strlen(esc[i].json), esc[i].key, &eq);
    ck_assert_ptr_eq(e, esc[i].json + strlen(esc[i].json));
    ck_assert_msg(eq == esc[i].eq, "case %zu", i);
  }
}
END_TEST

/* Random mutations of valid documents: the scanner and jansson agree on
 * validity (numbers kept small: jansson rejects integers beyond 64 bits). */
START_TEST(differential) {
  static const char *seeds[] = {"{\"outputs\": [[1, 2, 3], [4, 5, 6]], \"x\": \"y\"}",
                                "[1.5, -2e3, true, false, null, \"s\\\"q\"]",
                                "{\"a\": {\"b\": [{}, []]}}"};
  static const char alphabet[] = "[]{}\",:0123456789.-eE tfnrul\\ab";
  lp_rng_t rng;
  lp_rng_seed(&rng, 42);
  char buf[128];
  int agree = 0;
  for (int round = 0; round < 20000; round++) {
    const char *seed = seeds[round % 3];
    size_t n = strlen(seed);
    memcpy(buf, seed, n + 1);
    lp_test_mutate(&rng, buf, &n, sizeof(buf), alphabet, sizeof(alphabet) - 1);
    int a = scan_ok(buf), b = jansson_ok(buf);
    if (a != b) ck_abort_msg("scanner %d jansson %d on: %s", a, b, buf);
    agree++;
  }
  ck_assert_int_eq(agree, 20000);
}
END_TEST

/* The token reader against jansson: on random arrays, valid or mutated, both
 * accept the same inputs and read the same integers. */
START_TEST(int_array_vs_jansson) {
  static const char alphabet[] = "0123456789-,.eE []\"a";
  lp_rng_t rng;
  lp_rng_seed(&rng, 7);
  char buf[256];
  int32_t out[64];
  int both_ok = 0;
  for (int round = 0; round < 30000; round++) {
    size_t k = 0, cnt = (size_t)lp_rng_below(&rng, 12);
    buf[k++] = '[';
    for (size_t i = 0; i < cnt; i++) {
      k += (size_t)snprintf(buf + k, sizeof(buf) - k, "%s%s%lld", i ? "," : "",
                            lp_rng_below(&rng, 4) ? "" : " ",
                            (long long)lp_rng_below(&rng, 201500) - 1200);
    }
    buf[k++] = ']';
    buf[k] = 0;
    if (round % 2) { /* mutate */
      size_t at = (size_t)lp_rng_below(&rng, k);
      buf[at] = alphabet[lp_rng_below(&rng, sizeof(alphabet) - 1)];
    }
    size_t len = strlen(buf), n;
    int err;
    const char *end = lp_jscan_int_array(buf, buf + len, out, 64, -1000, 200000, &n, &err);
    int ours = end && lp_jscan_ws(end, buf + len) == buf + len;
    /* jansson's view: an array of integers within range */
    json_error_t e;
    json_t *j = json_loadb(buf, len, 0, &e);
    int theirs = j && json_is_array(j);
    for (size_t i = 0; theirs && i < json_array_size(j); i++) {
      json_t *v = json_array_get(j, i);
      theirs = json_is_integer(v) && json_integer_value(v) >= -1000 &&
               json_integer_value(v) <= 200000;
    }
    if (ours != theirs) ck_abort_msg("reader %d jansson %d on %s (err %d)", ours, theirs, buf, err);
    if (ours) {
      REQUIRE(n == json_array_size(j));
      for (size_t i = 0; i < n; i++) REQUIRE(out[i] == json_integer_value(json_array_get(j, i)));
      both_ok++;
    }
    json_decref(j);
  }
  ck_assert_int_gt(both_ok, 7000);
}
END_TEST

/* The same on integers of every width (1 to 21 digits, so the eight-at-a-time
 * reader's boundaries and int32's limits are crossed), with int32's range. */
START_TEST(int_array_widths_vs_jansson) {
  lp_rng_t rng;
  lp_rng_seed(&rng, 11);
  char buf[512];
  int32_t out[64];
  int both_ok = 0, rejected = 0;
  for (int round = 0; round < 30000; round++) {
    size_t k = 0, cnt = 1 + (size_t)lp_rng_below(&rng, 10);
    buf[k++] = '[';
    for (size_t i = 0; i < cnt; i++) {
      char digits[32];
      size_t nd = 1 + (size_t)lp_rng_below(&rng, round % 3 ? 10 : 21);
      for (size_t d = 0; d < nd; d++) digits[d] = (char)('0' + lp_rng_below(&rng, 10));
      if (nd > 1 && digits[0] == '0' && lp_rng_below(&rng, 8)) digits[0] = '1';
      digits[nd] = 0;
      k += (size_t)snprintf(buf + k, sizeof(buf) - k, "%s%s%s%s", i ? "," : "",
                            lp_rng_below(&rng, 4) ? "" : " ", lp_rng_below(&rng, 5) ? "" : "-",
                            digits);
    }
    buf[k++] = ']';
    buf[k] = 0;
    size_t len = strlen(buf), n;
    int err;
    const char *end = lp_jscan_int_array(buf, buf + len, out, 64, INT32_MIN, INT32_MAX, &n, &err);
    int ours = end == buf + len;
    json_error_t e;
    json_t *j = json_loadb(buf, len, 0, &e);
    int theirs = j && json_is_array(j);
    for (size_t i = 0; theirs && i < json_array_size(j); i++) {
      json_t *v = json_array_get(j, i);
      theirs = json_is_integer(v) && json_integer_value(v) >= INT32_MIN &&
               json_integer_value(v) <= INT32_MAX;
    }
    if (ours != theirs) ck_abort_msg("reader %d jansson %d on %s (err %d)", ours, theirs, buf, err);
    if (ours) {
      REQUIRE(n == json_array_size(j));
      for (size_t i = 0; i < n; i++) REQUIRE(out[i] == json_integer_value(json_array_get(j, i)));
      both_ok++;
    } else {
      rejected++;
    }
    json_decref(j);
  }
  ck_assert_int_gt(both_ok, 5000);
  ck_assert_int_gt(rejected, 5000);
}
END_TEST

START_TEST(int_array_errors) {
  int32_t out[4];
  size_t n;
  int err;
  const char *s = "[1, \"2\"]";
  ck_assert_ptr_null(lp_jscan_int_array(s, s + strlen(s), out, 4, 0, 10, &n, &err));
  ck_assert_int_eq(err, LP_JSCAN_E_NOT_INT);
  s = "[1, 2.5]";
  ck_assert_ptr_null(lp_jscan_int_array(s, s + strlen(s), out, 4, 0, 10, &n, &err));
  ck_assert_int_eq(err, LP_JSCAN_E_NOT_INT);
  s = "[1, -1]";
  ck_assert_ptr_null(lp_jscan_int_array(s, s + strlen(s), out, 4, 0, 10, &n, &err));
  ck_assert_int_eq(err, LP_JSCAN_E_RANGE);
  s = "[99999999999999999999999]";
  ck_assert_ptr_null(lp_jscan_int_array(s, s + strlen(s), out, 4, 0, 10, &n, &err));
  ck_assert_int_eq(err, LP_JSCAN_E_RANGE);
  s = "[1,2,3,4,5]";
  ck_assert_ptr_null(lp_jscan_int_array(s, s + strlen(s), out, 4, 0, 10, &n, &err));
  ck_assert_int_eq(err, LP_JSCAN_E_TOO_MANY);
  s = "[1,,2]";
  ck_assert_ptr_null(lp_jscan_int_array(s, s + strlen(s), out, 4, 0, 10, &n, &err));
  ck_assert_int_eq(err, LP_JSCAN_E_SYNTAX);
  s = "[ 3 , 4 ]";
  ck_assert_ptr_eq(lp_jscan_int_array(s, s + strlen(s), out, 4, 0, 10, &n, &err), s + strlen(s));
  ck_assert_uint_eq(n, 2);
  ck_assert_int_eq(out[1], 4);
}
END_TEST

/* A string decoded in place in one pass (lp_jscan_string_undoable): the
 * same text and verdict as lp_jscan_string, valid or not, and given back
 * byte for byte by lp_jscan_string_undo, whether it was decoded, found
 * invalid midway or stopped for want of log room (a small max), for texts of
 * dense and sparse escapes, raw UTF-8 and plain runs of every length. */
START_TEST(undoable_in_place) {
  lp_rng_t rng;
  lp_rng_seed(&rng, 3536);
  size_t cap = 32 * 1024;
  char *raw = malloc(cap), *own = malloc(cap), *want = malloc(cap);
  static const size_t maxes[] = {0, 1, 3, 17, 0};
  int decoded = 0, invalid = 0, full = 0;
  for (int round = 0; round < 3000; round++) {
    size_t n = 0, len = 1 + lp_rng_below(&rng, 12000);
    int bad = round % 3 == 2;
    raw[n++] = '"';
    while (n < len) lp_test_put_piece(&rng, raw, &n, bad, round % 2);
    if (bad && round % 2 && n > 1) raw[1 + lp_rng_below(&rng, n - 1)] = '\x01'; /* invalid anywhere */
    raw[n++] = '"';
    n += (size_t)sprintf(raw + n, ", 1]"); /* what follows the string is not read */
    memcpy(own, raw, n);
    size_t wn = 0, gn = 0;
    int we = 0, ge = 0;
    const char *wa = lp_jscan_string(raw, raw + n, want, &wn, &we);
    lp_jscan_undo_t u = {0};
    u.max = maxes[round % 5];
    const char *ga = lp_jscan_string_undoable(own, own + n, &gn, &ge, &u);
    if (ga) {
      REQUIRE(wa && ga - own == wa - raw && gn == wn && ge == we && memcmp(own + 1, want, wn) == 0);
      decoded++;
    } else if (u.full) {
      full++;
    } else {
      REQUIRE(!wa);
      invalid++;
    }
    lp_jscan_string_undo(own, &u);
    if (memcmp(own, raw, n) != 0) ck_abort_msg("round %d: not given back as it came (%s)", round,
                                               ga ? "decoded" : u.full ? "log full" : "invalid");
    free(u.e);
  }
  ck_assert_int_gt(decoded, 1000);
  ck_assert_int_gt(invalid, 50);
  ck_assert_int_gt(full, 100);
  free(raw);
  free(own);
  free(want);
}
END_TEST

LP_TEST_MAIN("jscan", fixed_cases, depth_limit, key_compare, differential, int_array_vs_jansson,
             int_array_widths_vs_jansson, int_array_errors, undoable_in_place)
