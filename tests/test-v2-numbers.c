/* Numbers through the v2 codec exactly: half and bfloat16 rounding, integers
 * at their datatypes' ends, NaN and infinities as Triton's JSON has them (read
 * and written), range checks on JSON integers, tensors put back into raw bytes. */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "lanepack/v2.h"

START_TEST(half_round_trip_and_rounding) {
  for (uint32_t h = 0; h < 65536; h++) {
    float f = lp_half_to_float((uint16_t)h);
    uint16_t back = lp_float_to_half(f);
    if (isnan(f)) REQUIRE(isnan(lp_half_to_float(back)));
    else REQUIRE(back == h);
    float g = lp_bf16_to_float((uint16_t)h);
    back = lp_float_to_bf16(g);
    if (isnan(g)) REQUIRE(isnan(lp_bf16_to_float(back)));
    else REQUIRE(back == h);
  }
  /* ties to even, between 1 and the next half (1 + 2^-10) */
  ck_assert_uint_eq(lp_float_to_half(1.0f + ldexpf(1.0f, -11)), 0x3c00);
  ck_assert_uint_eq(lp_float_to_half(1.0f + 3 * ldexpf(1.0f, -11)), 0x3c02);
  ck_assert_uint_eq(lp_float_to_half(1.0f + ldexpf(1.0f, -11) + ldexpf(1.0f, -20)), 0x3c01);
  ck_assert_uint_eq(lp_float_to_half(65519.0f), 0x7bff); /* below the midpoint to 65536 */
  ck_assert_uint_eq(lp_float_to_half(65520.0f), 0x7c00); /* the tie goes to even: infinity */
  ck_assert_uint_eq(lp_float_to_half(-1e9f), 0xfc00);
  ck_assert_uint_eq(lp_float_to_half(ldexpf(1.0f, -25)), 0x0000);                          /* tie: 0 */
  ck_assert_uint_eq(lp_float_to_half(ldexpf(1.0f, -25) + ldexpf(1.0f, -40)), 0x0001);
  ck_assert_uint_eq(lp_float_to_half(ldexpf(3.0f, -25)), 0x0002);                          /* tie: even */
  ck_assert_uint_eq(lp_float_to_half(ldexpf(1.0f, -14) - ldexpf(1.0f, -26)), 0x0400);    /* up to normal */
  ck_assert_uint_eq(lp_float_to_bf16(1.0f + ldexpf(1.0f, -8)), 0x3f80);                  /* tie: even */
  ck_assert_uint_eq(lp_float_to_bf16(1.0f + 3 * ldexpf(1.0f, -8)), 0x3f82);
  ck_assert_uint_eq(lp_float_to_bf16(INFINITY), 0x7f80);
}
END_TEST

/* One tensor written by lp_v2_write in JSON; returns the text (static). */
static const char *written(lp_dtype_t dt, const void *data, size_t count) {
  static char text[1024];
  lp_buf_t b;
  lp_buf_init(&b);
  lp_v2_out_t o = {.name = "o", .dtype = dt, .ndim = 1, .shape = {(int64_t)count}, .data = data,
                   .count = count};
  ck_assert_int_eq(lp_v2_write(&b, NULL, "outputs", &o, 1, 0, NULL), 0);
  ck_assert_uint_lt(b.len, sizeof(text));
  memcpy(text, b.data, b.len);
  text[b.len] = '\0';
  lp_buf_free(&b);
  return text;
}

START_TEST(json_written_exactly) {
  float f[4] = {NAN, INFINITY, -INFINITY, 2.0f};
  ck_assert_ptr_nonnull(strstr(written(LP_DT_FP32, f, 4), "\"data\":[NaN,Infinity,-Infinity,2]"));
  double d[3] = {-NAN, 0.1, 3.0};
  ck_assert_ptr_nonnull(strstr(written(LP_DT_FP64, d, 3), "\"datatype\":\"FP64\""));
  ck_assert_ptr_nonnull(strstr(written(LP_DT_FP64, d, 3), "\"data\":[NaN,0.1,3]"));
  int64_t i[4] = {INT64_MAX, INT64_MIN, (1ll << 53) + 1, -1};
  ck_assert_ptr_nonnull(strstr(written(LP_DT_INT64, i, 4),
                               "[9223372036854775807,-9223372036854775808,9007199254740993,-1]"));
  uint64_t u[3] = {UINT64_MAX, (1ull << 63) + 5, 0};
  ck_assert_ptr_nonnull(strstr(written(LP_DT_UINT64, u, 3), "[18446744073709551615,9223372036854775813,0]"));
  uint16_t h[3] = {0x3c00, 0x7e00, 0xfc00}; /* 1, NaN, -inf */
  ck_assert_ptr_nonnull(strstr(written(LP_DT_FP16, h, 3), "[1,NaN,-Infinity]"));
  uint16_t bf[2] = {0x4040, 0xbfc0}; /* 3, -1.5 */
  ck_assert_ptr_nonnull(strstr(written(LP_DT_BF16, bf, 2), "[3,-1.5]"));
  uint8_t bo[2] = {1, 0};
  ck_assert_ptr_nonnull(strstr(written(LP_DT_BOOL, bo, 2), "[true,false]"));
  /* /v1's writer keeps null: JSON has no NaN */
  lp_tensor_t t = {.dtype = LP_DT_FP32, .raw = (const uint8_t *)f, .count = 4};
  lp_buf_t b;
  lp_buf_init(&b);
  lp_tensor_write_json(&b, &t, 0, 4, 1);
  ck_assert_int_eq((int)b.len, (int)strlen("null,null,null,2"));
  ck_assert(memcmp(b.data, "null,null,null,2", b.len) == 0);
  lp_buf_free(&b);
}
END_TEST

START_TEST(json_read_as_triton_writes_it) {
  /* bare NaN and infinities, UINT64 past INT64_MAX; strings that look alike are left alone */
  const char *ans =
      "{\"id\":\"NaN Infinity 99999999999999999999\",\"outputs\":["
      "{\"name\":\"f\",\"datatype\":\"FP32\",\"shape\":[4],\"data\":[NaN,Infinity,-Infinity,1.5]},"
      "{\"name\":\"u\",\"datatype\":\"UINT64\",\"shape\":[3],\"data\":[18446744073709551615,9223372036854775808,7]},"
      "{\"name\":\"d\",\"datatype\":\"FP64\",\"shape\":[2],\"data\":[[1e300],[-0.0]]}]}";
  lp_v2_msg_t m;
  char err[200] = "";
  int rc = lp_v2_decode(&m, ans, strlen(ans), -1, 0, err, sizeof(err));
  ck_assert_msg(rc == 0, "%s", err);
  ck_assert_str_eq(m.id, "NaN Infinity 99999999999999999999");
  const lp_tensor_t *f = lp_v2_find(&m, "f"), *u = lp_v2_find(&m, "u"), *d = lp_v2_find(&m, "d");
  ck_assert(isnan(lp_tensor_real(f, 0)) && lp_tensor_real(f, 1) == INFINITY && lp_tensor_real(f, 2) == -INFINITY);
  ck_assert(lp_tensor_real(f, 3) == 1.5);
  ck_assert_uint_eq((uint64_t)lp_tensor_int(u, 0), UINT64_MAX);
  ck_assert_uint_eq((uint64_t)lp_tensor_int(u, 1), 1ull << 63);
  ck_assert(lp_tensor_real(d, 0) == 1e300 && signbit(lp_tensor_real(d, 1)));
  /* and back to JSON exactly */
  lp_buf_t b;
  lp_buf_init(&b);
  lp_tensor_write_json_ex(&b, u, 0, 3, 1, 0);
  lp_tensor_write_json_ex(&b, f, 0, 4, 1, LP_TENSOR_JSON_NONFINITE);
  ck_assert_int_eq((int)b.len, (int)strlen("18446744073709551615,9223372036854775808,7NaN,Infinity,-Infinity,1.5"));
  ck_assert(memcmp(b.data, "18446744073709551615,9223372036854775808,7NaN,Infinity,-Infinity,1.5", b.len) == 0);
  lp_buf_free(&b);
  lp_v2_msg_free(&m);
  /* what stays refused: past UINT64_MAX, a big integer in a signed type, NaN as an integer */
  const char *bad[] = {
      "{\"outputs\":[{\"name\":\"u\",\"datatype\":\"UINT64\",\"shape\":[1],\"data\":[18446744073709551616]}]}",
      "{\"outputs\":[{\"name\":\"i\",\"datatype\":\"INT64\",\"shape\":[1],\"data\":[9223372036854775808]}]}",
      "{\"outputs\":[{\"name\":\"i\",\"datatype\":\"INT32\",\"shape\":[1],\"data\":[NaN]}]}",
      "{\"outputs\":[{\"name\":\"i\",\"datatype\":\"INT8\",\"shape\":[1],\"data\":[128]}]}",
      "{\"outputs\":[{\"name\":\"i\",\"datatype\":\"UINT8\",\"shape\":[1],\"data\":[-1]}]}",
      "{\"outputs\":[{\"name\":\"i\",\"datatype\":\"UINT32\",\"shape\":[1],\"data\":[4294967296]}]}",
      "{\"outputs\":[{\"name\":\"f\",\"datatype\":\"FP32\",\"shape\":[1],\"data\":[Nan]}]}",
  };
  for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
    rc = lp_v2_decode(&m, bad[k], strlen(bad[k]), -1, 0, err, sizeof(err));
    ck_assert_msg(rc == -EPROTO, "accepted: %s", bad[k]);
    lp_v2_msg_free(&m);
  }
}
END_TEST

START_TEST(json_tensors_put_back_as_raw_bytes) {
  const char *ans =
      "{\"outputs\":["
      "{\"name\":\"h\",\"datatype\":\"FP16\",\"shape\":[4],\"data\":[0.5,65504,1e6,NaN]},"
      "{\"name\":\"b\",\"datatype\":\"BF16\",\"shape\":[2],\"data\":[-1.5,3]},"
      "{\"name\":\"s\",\"datatype\":\"INT16\",\"shape\":[2],\"data\":[-2,32767]},"
      "{\"name\":\"q\",\"datatype\":\"BOOL\",\"shape\":[2],\"data\":[true,false]},"
      "{\"name\":\"f\",\"datatype\":\"FP32\",\"shape\":[1],\"data\":[0.1]}]}";
  lp_v2_msg_t m;
  char err[200] = "";
  ck_assert_msg(lp_v2_decode(&m, ans, strlen(ans), -1, 0, err, sizeof(err)) == 0, "%s", err);
  uint16_t h[4], b[2];
  int16_t s[2];
  uint8_t q[2];
  float f;
  lp_tensor_put_raw((uint8_t *)h, lp_v2_find(&m, "h"), 0, 4);
  ck_assert_uint_eq(h[0], 0x3800);
  ck_assert_uint_eq(h[1], 0x7bff);
  ck_assert_uint_eq(h[2], 0x7c00);
  ck_assert((h[3] & 0x7c00) == 0x7c00 && (h[3] & 0x3ff));
  lp_tensor_put_raw((uint8_t *)b, lp_v2_find(&m, "b"), 0, 2);
  ck_assert_uint_eq(b[0], 0xbfc0);
  ck_assert_uint_eq(b[1], 0x4040);
  lp_tensor_put_raw((uint8_t *)s, lp_v2_find(&m, "s"), 0, 2);
  ck_assert_int_eq(s[0], -2);
  ck_assert_int_eq(s[1], 32767);
  lp_tensor_put_raw(q, lp_v2_find(&m, "q"), 0, 2);
  ck_assert(q[0] == 1 && q[1] == 0);
  lp_tensor_put_raw((uint8_t *)&f, lp_v2_find(&m, "f"), 0, 1);
  ck_assert(f == 0.1f);
  lp_v2_msg_free(&m);
  /* binary tensors are copied as they are, at any offset */
  uint8_t raw[6] = {1, 2, 3, 4, 5, 6}, out[4];
  lp_tensor_t t = {.dtype = LP_DT_UINT16, .raw = raw, .count = 3};
  lp_tensor_put_raw(out, &t, 1, 2);
  ck_assert(memcmp(out, raw + 2, 4) == 0);
}
END_TEST

START_TEST(time_parameters_named) {
  struct {
    const char *params;
    const char *names;  /* NULL: accepted */
  } cases[] = {
      {"{\"timeout\": -1}", "timeout"},
      {"{\"timeout\": 1.5}", "timeout"},
      {"{\"timeout\": \"5\"}", "timeout"},
      {"{\"priority\": 1.5}", "priority"},
      {"{\"timeout\": 9000000000000000000, \"priority\": -5000}", NULL},
      {"{\"timeout\": 0}", NULL},
  };
  for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
    char body[300], err[200] = "";
    snprintf(body, sizeof(body),
             "{\"inputs\":[{\"name\":\"input_ids\",\"datatype\":\"INT64\",\"shape\":[1],\"data\":[1]}],"
             "\"parameters\":%s}", cases[k].params);
    lp_v2_msg_t m;
    int rc = lp_v2_decode(&m, body, strlen(body), -1, 1, err, sizeof(err));
    if (cases[k].names) ck_assert_msg(rc == -EPROTO && strstr(err, cases[k].names), "%s: %s", cases[k].params, err);
    else ck_assert_msg(rc == 0 && m.has_timeout, "%s: %s", cases[k].params, err);
    if (k == 4) ck_assert(m.timeout_us == 9000000000000000000ll && m.priority == -5000);
    lp_v2_msg_free(&m);
  }
}
END_TEST

/* lp_fmt_float_g9 writes what printf's "%.9g" writes, byte for byte: every
 * 7th float of [0.5, 1), every binade at a stride, random bit patterns,
 * ties at the tenth digit (m / 2^k with ten significant digits ending in 5:
 * half to even), both sides of every power of ten, and the ends (zero,
 * subnormals, the largest, infinities, NaN), which go through printf. */
static void same_as_printf(float v) {
  char want[64], got[64];
  snprintf(want, sizeof(want), "%.9g", (double)v);
  size_t n = lp_fmt_float_g9(got, v);
  got[n] = 0; /* the length it returns is checked too */
  if (strcmp(want, got) != 0) ck_abort_msg("%a: printf %s, lp_fmt_float_g9 %s", (double)v, want, got);
}

START_TEST(float_g9_as_printf) {
  uint32_t bits;
  float v;
  for (bits = 0x3f000000u; bits < 0x3f800000u; bits += 7) { /* [0.5, 1): every 7th float */
    memcpy(&v, &bits, 4);
    same_as_printf(v);
  }
  for (bits = 0; bits < 0x80000000u - 0x20000u; bits += 0x1fffu) { /* every binade, a stride apart */
    memcpy(&v, &bits, 4);
    same_as_printf(v);
    same_as_printf(-v);
  }
  uint64_t x = 88172645463325252ull;
  for (int i = 0; i < 1000000; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    bits = (uint32_t)x;
    memcpy(&v, &bits, 4);
    same_as_printf(v);
  }
  for (int i = 0; i < 200000; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    same_as_printf(ldexpf((float)(x % (1u << 24)), -(int)(x >> 40) % 40));
  }
  same_as_printf(1234567.125f); /* a tie: 1234567.12 */
  same_as_printf(1234567.375f); /* 1234567.38 */
  for (int e = -45; e <= 38; e++) {
    float p = (float)pow(10, e);
    same_as_printf(p);
    same_as_printf(nextafterf(p, 0));
    same_as_printf(nextafterf(p, INFINITY));
  }
  const float ends[] = {0.0f, -0.0f, 1e-45f, 1.17549435e-38f, 3.40282347e38f, INFINITY, -INFINITY, NAN, 1e8f,
                        123456792.0f, 1e9f, 9.99999944e8f, 1e-4f, 9.99999975e-5f, 1e19f, 1e-19f};
  for (size_t i = 0; i < sizeof(ends) / sizeof(ends[0]); i++) {
    same_as_printf(ends[i]);
    same_as_printf(-ends[i]);
  }
}
END_TEST

LP_TEST_MAIN("v2-numbers", half_round_trip_and_rounding, json_written_exactly, json_read_as_triton_writes_it,
             json_tensors_put_back_as_raw_bytes, time_parameters_named, float_g9_as_printf)
