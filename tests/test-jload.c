/* Tests of lp_jload and lp_jload_inplace against json_loadb on the same
 * bytes: the same tree or the same error, with long strings decoded apart
 * (the least length set low so that short cases reach the scan), in place
 * without changing a body refused. */
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "lanepack/jload.h"
#include "lanepack/rng.h"
#include "mutate.h"
#include "fuzz/jload-diff.h"

/* Whether lp_jload, lp_jload_inplace and json_loadb agree on b[0..n) */
static int agree(const char *b, size_t n, char *msg, size_t msglen) { return jload_diff_agree(b, n, msg, msglen); }

#define AGREE(s)                                               \
  do {                                                         \
    char m_[512];                                              \
    if (!agree((s), strlen(s), m_, sizeof(m_))) ck_abort_msg("%s", m_); \
  } while (0)

static const char *const cases[] = {
  "{\"inputs\": \"hello world, a plain text\", \"truncate\": true}",
  "{\"inputs\": [\"one text\", \"two texts\", 5, [1, 2], {\"a\": \"b\"}, null]}",
  "{\"input\": \"esc \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u00e9 \\u20ac \\ud83d\\ude00 end\", \"model\": \"m\"}",
  "{\"input\": \"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"}",
  "{\"input\": \"nul \\u0000 inside\"}",
  "{\"input\": \"lone \\ud800 high\"}",
  "{\"input\": \"lone \\udc00 low\"}",
  "{\"input\": \"pair cut \\ud83d\\u0041\"}",
  "{\"input\": \"bad escape \\x\"}",
  "{\"input\": \"short hex \\u12\"}",
  "{\"input\": \"overlong \xc0\x80\"}",
  "{\"input\": \"surrogate in utf-8 \xed\xa0\x80\"}",
  "{\"input\": \"beyond \xf4\x90\x80\x80\"}",
  "{\"input\": \"cut \xe2\x82\"}",
  "{\"input\": \"control \x01 byte\"}",
  "{\"input\": \"unterminated",
  "{\"input\": \"dup one\", \"input\": \"dup two\"}",
  "{\"input\": \"x\", \"input\": \"\"}",
  "{\"input\": [\"a trailing comma\",]}",
  "{\"input\": [\"elements\" \"no comma\"]}",
  "{\"input\": \"member\",}",
  "{\"input\": \"text\"} trailing",
  "{\"in\\u0070ut\": \"escaped key\"}",
  "{\"a key longer than the thirty two bytes kept\": \"text\"}",
  "[\"not\", \"an object\"]",
  "\"a string body\"",
  "{}",
  "  { \"input\" :\t[ \"spaced\" , \"out\" ] \n}  ",
  "{\"input\": []}",
  "{\"input\": [[\"pair a\", \"pair b\"], [\"c\", \"d\"]]}",
  "{\"input\": \"\"}",
  "{\"n\": 1e999, \"input\": \"big number\"}",
  "{\"n\": 99999999999999999999, \"input\": \"big integer\"}",
  "",
};

START_TEST(fixed_cases) {
  lp_jload_set_min(1);
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) AGREE(cases[i]);
  lp_jload_set_min(4096);
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) AGREE(cases[i]);
}
END_TEST

/* Long texts as the routes get them: plain, with escapes and multi-byte
 * characters at every offset of the eight-byte steps, as one input and as
 * elements, at the default least length. */
START_TEST(long_texts) {
  lp_jload_set_min(4096);
  static const char *const inserts[] = {"\\n", "\\\"", "\xc3\xa9", "\xf0\x9f\x98\x80", "\\ud83d\\ude00", "\\u0041", "\x01",
                                        "\\u0000", "\xc0\x80", "\\"};
  size_t len = 9000;
  char *text = malloc(len + 64), *body = malloc(2 * len + 256);
  for (size_t ins = 0; ins < sizeof(inserts) / sizeof(inserts[0]); ins++) {
    for (size_t off = 4090; off < 4110; off++) {
      size_t k = strlen(inserts[ins]);
      for (size_t i = 0; i < len; i++) text[i] = (char)('a' + i % 26);
      memcpy(text + off, inserts[ins], k);
      text[len] = '\0';
      snprintf(body, 2 * len + 256, "{\"inputs\": \"%s\", \"truncate\": true}", text);
      AGREE(body);
      snprintf(body, 2 * len + 256, "{\"model\": \"m\", \"input\": [\"short\", \"%s\", [1, 2]]}", text);
      AGREE(body);
    }
  }
  free(text);
  free(body);
}
END_TEST

/* Random mutations of request bodies: whatever the bytes, the same answer. */
START_TEST(differential) {
  static const char *seeds[] = {
      "{\"inputs\": \"ab\\u00e9 c\\nd\", \"truncate\": true, \"model\": \"m\"}",
      "{\"input\": [\"one\", \"t\\\"wo\", 3, [4], {\"k\": \"v\"}], \"model\": \"x\"}",
      "{\"query\": \"q\", \"texts\": [\"\xc3\xa9t\xc3\xa9\", \"\\ud83d\\ude00\"], \"raw_scores\": false}"};
  static const char alphabet[] = "[]{}\",:0123456789 tfnrulab\\\xc3\xa9\xed\x01";
  lp_rng_t rng;
  lp_rng_seed(&rng, 35);
  char buf[160], msg[512];
  lp_jload_set_min(1);
  for (int round = 0; round < 40000; round++) {
    const char *seed = seeds[round % 3];
    size_t n = strlen(seed);
    memcpy(buf, seed, n + 1);
    lp_test_mutate(&rng, buf, &n, sizeof(buf), alphabet, sizeof(alphabet) - 1);
    if (!agree(buf, n, msg, sizeof(msg))) ck_abort_msg("%s", msg);
  }
  lp_jload_set_min(4096);
}
END_TEST

/* Long texts decoded in place: the same as jansson's on random texts of
 * escapes, surrogate pairs and raw UTF-8 between plain runs of every length,
 * valid ones referenced where they lie in the body (no copy), invalid ones
 * refused with jansson's error and the body left as it came. */
START_TEST(in_place) {
  lp_jload_set_min(4096);
  lp_rng_t rng;
  lp_rng_seed(&rng, 3535);
  size_t cap = 64 * 1024;
  char *body = malloc(cap), msg[512];
  int referenced = 0, refused = 0;
  for (int round = 0; round < 300; round++) {
    int bad = round % 3 == 2, sparse = round % 2; /* sparse: decoded in one pass, undone when refused */
    size_t n = 0;
    n += (size_t)sprintf(body, "{\"inputs\": [\"");
    while (n < 5000 + (size_t)round * 37) lp_test_put_piece(&rng, body, &n, bad, sparse);
    n += (size_t)sprintf(body + n, "\", \"short\", \"");
    while (n < 14000) lp_test_put_piece(&rng, body, &n, bad, sparse);
    n += (size_t)sprintf(body + n, "\"], \"truncate\": true}");
    if (!agree(body, n, msg, sizeof(msg))) ck_abort_msg("round %d: %s", round, msg);
    char *own = malloc(n);
    memcpy(own, body, n);
    json_t *z = lp_jload_inplace(own, n, JSON_REJECT_DUPLICATES, NULL);
    if (z) {
      size_t len;
      const char *t = lp_jload_str(json_array_get(json_object_get(z, "inputs"), 0), &len);
      ck_assert_msg(t > own && t + len < own + n, "round %d: the text is not the body's", round);
      referenced++;
    } else {
      refused++;
    }
    json_decref(z);
    free(own);
  }
  ck_assert_int_gt(referenced, 100);
  ck_assert_int_gt(refused, 10);
  free(body);
}
END_TEST

LP_TEST_MAIN("jload", fixed_cases, long_texts, differential, in_place)
