/* The OpenAI embeddings codec: every input form, each bad request named with
 * its parameter, vectors read from a backend's JSON, base64 as the SDKs decode
 * it, and OpenAI's error shape. */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "lanepack/jload.h"
#include "lanepack/openai.h"
#include "jfail.h"
#include "testutil.h"

static int parse(const char *body, lp_openai_req_t *r, char *err) {
  return lp_openai_parse(body, strlen(body), r, err, 160);
}

START_TEST(input_forms) {
  lp_openai_req_t r;
  char err[160];
  ck_assert_int_eq(parse("{\"model\": \"m\", \"input\": \"hello\"}", &r, err), 0);
  ck_assert_uint_eq(r.ninputs, 1);
  ck_assert_str_eq(r.in[0].text, "hello");
  ck_assert_int_eq(r.base64, 0);
  lp_openai_req_free(&r);
  ck_assert_int_eq(parse("{\"model\": \"m\", \"input\": [\"a\", \"bc\"], \"encoding_format\": \"base64\", \"user\": \"u\"}",
                         &r, err), 0);
  ck_assert_uint_eq(r.ninputs, 2);
  ck_assert_uint_eq(r.in[1].text_len, 2);
  ck_assert_int_eq(r.base64, 1);
  lp_openai_req_free(&r);
  ck_assert_int_eq(parse("{\"input\": [5, 6, 7], \"model\": \"m\", \"dimensions\": 2}", &r, err), 0);
  ck_assert_uint_eq(r.ninputs, 1);
  ck_assert_ptr_null(r.in[0].text);
  ck_assert_uint_eq(r.in[0].len, 3);
  ck_assert_int_eq(r.tokens[r.in[0].off + 2], 7);
  ck_assert_uint_eq(r.dimensions, 2);
  lp_openai_req_free(&r);
  ck_assert_int_eq(parse("{\"model\": \"m\", \"input\": [[1], [2, 3]]}", &r, err), 0);
  ck_assert_uint_eq(r.ninputs, 2);
  ck_assert_int_eq(r.tokens[r.in[1].off + 1], 3);
  lp_openai_req_free(&r);
}
END_TEST

START_TEST(bad_requests_named) {
  static const struct {
    const char *body, *param;
  } bad[] = {
      {"{\"input\": \"x\"}", "model"},
      {"{\"model\": \"m\"}", "input"},
      {"{\"model\": \"m\", \"input\": []}", "input"},
      {"{\"model\": \"m\", \"input\": \"\"}", "input"},
      {"{\"model\": \"m\", \"input\": [[]]}", "input"},
      {"{\"model\": \"m\", \"input\": [-1]}", "input"},
      {"{\"model\": \"m\", \"input\": [2147483648]}", "input"},
      {"{\"model\": \"m\", \"input\": [\"a\", [1]]}", "input"},
      {"{\"model\": \"m\", \"input\": [[1], \"a\"]}", "input"},
      {"{\"model\": \"m\", \"input\": 5}", "input"},
      {"{\"model\": \"m\", \"input\": \"x\", \"encoding_format\": \"int8\"}", "encoding_format"},
      {"{\"model\": \"m\", \"input\": \"x\", \"dimensions\": 0}", "dimensions"},
      {"{\"model\": 7, \"input\": \"x\"}", "model"},
      {"{\"model\": \"m\", \"input\": \"x\", \"user\": 1}", "user"},
      {"{\"model\": \"m\", \"input\": \"x\", \"temperature\": 1}", NULL},
      {"[1]", NULL},
      {"{\"model\": \"m\", \"model\": \"n\", \"input\": \"x\"}", NULL},
      {"not json", NULL},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    lp_openai_req_t r;
    char err[160] = "";
    ck_assert_msg(parse(bad[i].body, &r, err) == -EPROTO, "%s accepted", bad[i].body);
    ck_assert_msg(err[0], "%s: no message", bad[i].body);
    if (bad[i].param) ck_assert_msg(r.param && strcmp(r.param, bad[i].param) == 0, "%s: param %s", bad[i].body, r.param);
    else ck_assert_ptr_null(r.param);
    lp_openai_req_free(&r);
  }
  /* what is wrong, said: a real is no token id, true is no input at all */
  static const struct {
    const char *body, *words;
  } said[] = {
      {"{\"model\": \"m\", \"input\": [1.0]}", "integers"},
      {"{\"model\": \"m\", \"input\": [[1], [2.5]]}", "integers"},
      {"{\"model\": \"m\", \"input\": [true]}", "must be a string, strings"},
      {"{\"model\": \"m\", \"input\": [null, \"a\"]}", "must be a string, strings"},
      {"{\"model\": \"m\", \"input\": [\"a\", {}]}", "must be a string, strings"},
      {"{\"model\": \"m\", \"input\": [\"a\", [1]]}", "mixes forms"},
  };
  for (size_t i = 0; i < sizeof(said) / sizeof(said[0]); i++) {
    lp_openai_req_t r;
    char err[160] = "";
    ck_assert_msg(parse(said[i].body, &r, err) == -EPROTO, "%s accepted", said[i].body);
    ck_assert_msg(strstr(err, said[i].words), "%s: '%s' does not say '%s'", said[i].body, err, said[i].words);
    lp_openai_req_free(&r);
  }
  /* more than 2048 inputs */
  lp_buf_t b;
  lp_buf_init(&b);
  lp_buf_puts(&b, "{\"model\": \"m\", \"input\": [");
  for (int i = 0; i <= LP_OPENAI_MAX_INPUTS; i++) lp_buf_puts(&b, i ? ", \"a\"" : "\"a\"");
  lp_buf_puts(&b, "]}");
  lp_openai_req_t r;
  char err[160];
  ck_assert_int_eq(lp_openai_parse(b.data, b.len, &r, err, sizeof(err)), -EPROTO);
  ck_assert_str_eq(r.param, "input");
  lp_openai_req_free(&r);
  lp_buf_free(&b);
}
END_TEST

START_TEST(vectors_and_encodings) {
  float v[8];
  ck_assert_int_eq(lp_openai_floats(" [1, -2.5e0,3 ] ", 16, v, 8), 3);
  ck_assert(v[1] == -2.5f);
  ck_assert_int_eq(lp_openai_floats("[]", 2, v, 8), 0);
  ck_assert_int_eq(lp_openai_floats("[1,2,3]", 7, v, 2), -E2BIG);
  ck_assert_int_eq(lp_openai_floats("[1,\"x\"]", 7, v, 8), -EPROTO);
  ck_assert_int_eq(lp_openai_floats("7", 1, v, 8), -EPROTO);
  ck_assert_int_eq(lp_openai_floats("[1e999]", 7, v, 8), -EPROTO);
  ck_assert_int_eq(lp_openai_floats("[1,]", 4, v, 8), -EPROTO);
  float u[2] = {3, 4};
  lp_openai_normalize(u, 2);
  ck_assert(fabsf(u[0] - 0.6f) < 1e-6 && fabsf(u[1] - 0.8f) < 1e-6);
  lp_buf_t b;
  lp_buf_init(&b);
  /* 1.0f, -2.0f little-endian: 00 00 80 3f 00 00 00 c0 */
  lp_openai_embedding(&b, 3, (const float[]){1.0f, -2.0f}, 2, 1);
  ck_assert_str_eq(lp_buf_cstr(&b), "{\"object\": \"embedding\", \"index\": 3, \"embedding\": \"AACAPwAAAMA=\"}");
  lp_buf_reset(&b);
  lp_openai_embedding(&b, 0, (const float[]){0.1f, 528.25f}, 2, 0);
  json_error_t je;
  json_t *j = json_loads(lp_buf_cstr(&b), 0, &je);
  ck_assert_ptr_nonnull(j);
  ck_assert((float)json_number_value(json_array_get(json_object_get(j, "embedding"), 0)) == 0.1f);
  json_decref(j);
  lp_buf_reset(&b);
  lp_openai_error(&b, 404, "model_not_found", "no model \"x\"", "model");
  j = json_loads(lp_buf_cstr(&b), 0, &je);
  ck_assert_ptr_nonnull(j);
  json_t *e = json_object_get(j, "error");
  ck_assert_str_eq(json_string_value(json_object_get(e, "type")), "not_found_error");
  ck_assert_str_eq(json_string_value(json_object_get(e, "param")), "model");
  ck_assert_str_eq(json_string_value(json_object_get(e, "code")), "model_not_found");
  ck_assert_str_eq(json_string_value(json_object_get(e, "message")), "no model \"x\"");
  json_decref(j);
  lp_buf_free(&b);
}
END_TEST

/* Each number of a backend's vector reads as (float)strtod reads it, through
 * the fast path (Clinger's) or not: printf's forms of random doubles and
 * floats, integers past 2^53, powers of ten past 10^22, long digit strings,
 * signed zeros, forms strtod alone takes ("+1", ".5", "5."); and what the
 * fast path must not take is still refused ("1-2", "1e", "--1"). */
static void reads_as_strtod(const char *text) {
  char arr[80];
  float got;
  int n = snprintf(arr, sizeof(arr), "[%s]", text);
  long k = lp_openai_floats(arr, (size_t)n, &got, 1);
  float want = (float)strtod(text, NULL);
  if (k != 1 || memcmp(&got, &want, sizeof(got)) != 0)
    ck_abort_msg("%s: got %ld values, %a; strtod %a", text, k, (double)got, (double)want);
}

START_TEST(numbers_read_as_strtod) {
  static const char *const fmts[] = {"%.9g", "%.17g", "%.3e", "%.12f", "%.20e", "%g", "%.1f"};
  char t[64];
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < 300000; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    double d = ldexp((double)(x >> 11), -53 - (int)(x % 64)) * ((x >> 8) % 1000) * ((x & 1) ? -1 : 1);
    if (i % 3 == 0) d = (float)d;
    snprintf(t, sizeof(t), fmts[i % 7], d);
    reads_as_strtod(t);
  }
  static const char *const spots[] = {"0", "-0", "-0.0", "0e5", "1e22", "1e23", "9007199254740992", "9007199254740993",
                                      "9007199254740993e-5", "12345678901234567890", "1234567890123456789",
                                      "0.00000000000000000000000001", "1e-22", "1e-23", "3.4028234e38", "+1", ".5", "5.",
                                      "-.25e1", "1E3", "1e+3", "00012", "123456789e-30", "1.00000000000000011102230246251565"};
  for (size_t i = 0; i < sizeof(spots) / sizeof(spots[0]); i++) reads_as_strtod(spots[i]);
  float v[2];
  ck_assert_int_eq(lp_openai_floats("[1-2]", 5, v, 2), -EPROTO);
  ck_assert_int_eq(lp_openai_floats("[1e]", 4, v, 2), -EPROTO);
  ck_assert_int_eq(lp_openai_floats("[--1]", 5, v, 2), -EPROTO);
  ck_assert_int_eq(lp_openai_floats("[1.5e3.2]", 9, v, 2), -EPROTO);
}
END_TEST

/* Decoded in place with every string long enough to be a reference into the
 * body (no NUL after it): model, format and texts read as from the copying
 * decoder, the texts inside the body. */
START_TEST(in_place) {
  static const char body[] = "{\"input\": [\"a\\n\", \"bc\"], \"model\": \"m\\u00e9\", \"encoding_format\": \"base64\"}";
  char own[sizeof(body)], err[160] = "";
  memcpy(own, body, sizeof(body));
  lp_jload_set_min(1);
  lp_openai_req_t r;
  ck_assert_msg(lp_openai_parse_inplace(own, sizeof(body) - 1, &r, err, sizeof(err)) == 0, "%s", err);
  lp_jload_set_min(4096);
  ck_assert_str_eq(r.model, "m\xc3\xa9");
  ck_assert_int_eq(r.base64, 1);
  ck_assert_uint_eq(r.ninputs, 2);
  ck_assert_uint_eq(r.in[0].text_len, 2);
  ck_assert(memcmp(r.in[0].text, "a\n", 2) == 0);
  ck_assert(r.in[0].text > own && r.in[0].text < own + sizeof(own)); /* not copied */
  lp_openai_req_free(&r);
}
END_TEST

/* The decoder out of memory is the proxy's failure, never the client's:
 * -ENOMEM (the front's 503 in OpenAI's dialect), not -EPROTO (400 "not valid
 * JSON"), whichever of jansson's allocations fails while a long text is
 * decoded in place. */
static void oom_try(void *ctx, long k) {
  char *own = ctx, err[160] = "";
  memcpy(own, jfail_src, jfail_src_len);
  lp_openai_req_t r;
  int rc = lp_openai_parse_inplace(own, jfail_src_len, &r, err, sizeof(err));
  if (k < 0) ck_assert_msg(rc == 0, "%s", err);
  else ck_assert_msg(rc == -ENOMEM, "allocation %ld failed: rc %d (%s)", k, rc, err);
  lp_openai_req_free(&r);
}

START_TEST(out_of_memory) {
  static char own[sizeof(jfail_src)];
  ck_assert_int_gt(jfail_body_each("input", ", \"model\": \"m\"", oom_try, own), 0);
}
END_TEST

LP_TEST_MAIN("openai", input_forms, bad_requests_named, vectors_and_encodings, numbers_read_as_strtod, in_place,
             out_of_memory)
