/* The tensor module and the v2 codec: datatypes, half floats, shortest float
 * text, messages written and read back in both forms, and every malformed
 * message named. */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "lanepack/rng.h"
#include "lanepack/v2.h"

START_TEST(dtypes_and_halves) {
  for (int t = LP_DT_BOOL; t <= LP_DT_BYTES; t++)
    ck_assert_int_eq(lp_dtype_parse(lp_dtype_name((lp_dtype_t)t)), t);
  ck_assert_int_eq(lp_dtype_parse("FP8"), LP_DT_INVALID);
  ck_assert_uint_eq(lp_dtype_size(LP_DT_BF16), 2);
  ck_assert_uint_eq(lp_dtype_size(LP_DT_UINT64), 8);
  ck_assert(lp_half_to_float(0x3c00) == 1.0f);
  ck_assert(lp_half_to_float(0xc000) == -2.0f);
  ck_assert(lp_half_to_float(0x7bff) == 65504.0f);
  ck_assert(lp_half_to_float(0x0001) == ldexpf(1.0f, -24)); /* smallest subnormal */
  ck_assert(lp_half_to_float(0x03ff) == ldexpf(1023.0f, -24));
  ck_assert(isinf(lp_half_to_float(0x7c00)));
  ck_assert(isnan(lp_half_to_float(0x7e00)));
  ck_assert(lp_bf16_to_float(0x3f80) == 1.0f);
  ck_assert(lp_bf16_to_float(0xc0a0) == -5.0f);
}
END_TEST

START_TEST(shortest_round_trip_text) {
  char b[32];
  lp_fmt_float(b, 0.1f);
  ck_assert_str_eq(b, "0.1");
  lp_fmt_double(b, 0.1);
  ck_assert_str_eq(b, "0.1");
  lp_fmt_double(b, 1.0 / 3.0);
  ck_assert_str_eq(b, "0.3333333333333333");
  lp_fmt_float(b, 1.0f / 3.0f);
  ck_assert_str_eq(b, "0.33333334");
  lp_fmt_float(b, 16777216.0f);
  ck_assert_str_eq(b, "16777216");
  lp_fmt_double(b, -0.0);
  ck_assert_str_eq(b, "-0.0");
  lp_rng_t r;
  lp_rng_seed(&r, 9);
  for (int i = 0; i < 200000; i++) {
    uint64_t bits = lp_rng_next(&r);
    double d;
    memcpy(&d, &bits, 8);
    uint32_t fb = (uint32_t)bits;
    float f;
    memcpy(&f, &fb, 4);
    if (isfinite(d)) {
      size_t n = lp_fmt_double(b, d);
      REQUIRE(n < 32 && strtod(b, NULL) == d);
    }
    if (isfinite(f)) {
      lp_fmt_float(b, f);
      REQUIRE(strtof(b, NULL) == f);
    }
  }
}
END_TEST

/* Every numeric datatype, both forms, read back equal. */
START_TEST(write_then_decode_every_type) {
  static const lp_dtype_t types[] = {LP_DT_BOOL, LP_DT_UINT8, LP_DT_UINT16, LP_DT_UINT32,
                                     LP_DT_UINT64, LP_DT_INT8, LP_DT_INT16, LP_DT_INT32,
                                     LP_DT_INT64, LP_DT_FP16, LP_DT_BF16, LP_DT_FP32, LP_DT_FP64};
  uint8_t raw[2 * 3 * 4 * 8];
  lp_rng_t r;
  lp_rng_seed(&r, 4);
  for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++) {
    lp_dtype_t dt = types[ti];
    size_t esz = lp_dtype_size(dt);
    for (size_t k = 0; k < sizeof(raw); k++) raw[k] = (uint8_t)lp_rng_next(&r);
    if (dt == LP_DT_BOOL)
      for (size_t k = 0; k < 24; k++) raw[k] &= 1;
    if (dt == LP_DT_UINT64) /* jansson reads JSON integers up to 2^63 - 1 */
      for (size_t k = 0; k < 24; k++) raw[k * 8 + 7] &= 0x7f;
    if (dt == LP_DT_FP16 || dt == LP_DT_BF16 || dt == LP_DT_FP32 || dt == LP_DT_FP64)
      for (size_t k = 0; k < 24; k++) { /* finite values: JSON has no NaN */
        if (dt == LP_DT_FP64) { double v = (double)k * 1.25 - 7; memcpy(raw + k * 8, &v, 8); }
        else if (dt == LP_DT_FP32) { float v = (float)k / 3.0f; memcpy(raw + k * 4, &v, 4); }
        else { uint16_t v = (uint16_t)(0x3c00 + k * 17); memcpy(raw + k * 2, &v, 2); }
      }
    lp_v2_out_t o = {.name = "out", .dtype = dt, .ndim = 3, .shape = {2, 3, 4}, .data = raw, .count = 24};
    for (int binary = 0; binary <= 1; binary++) {
      lp_buf_t b;
      lp_buf_init(&b);
      size_t hl;
      ck_assert_int_eq(lp_v2_write(&b, "\"id\":\"x\",\"model_name\":\"m\"", "outputs", &o, 1, binary, &hl), 0);
      lp_v2_msg_t m;
      char err[200] = "";
      int rc = lp_v2_decode(&m, b.data, b.len, binary ? (int64_t)hl : -1, 0, err, sizeof(err));
      ck_assert_msg(rc == 0, "%s %d: %s", lp_dtype_name(dt), binary, err);
      ck_assert_str_eq(m.id, "x");
      ck_assert_str_eq(m.model_name, "m");
      const lp_tensor_t *t = lp_v2_find(&m, "out");
      ck_assert_ptr_nonnull(t);
      ck_assert_int_eq(t->dtype, dt);
      ck_assert_uint_eq(t->count, 24);
      ck_assert_int_eq(t->ndim, 3);
      lp_tensor_t view = {.dtype = dt, .raw = raw, .count = 24};
      for (size_t k = 0; k < 24; k++) {
        if (lp_dtype_is_float(dt)) {
          double want = lp_tensor_real(&view, k), got = lp_tensor_real(t, k);
          /* JSON carries the shortest text of the single-precision value */
          ck_assert_msg(want == got || (float)want == (float)got, "%s %zu: %g vs %g", lp_dtype_name(dt), k, want, got);
        } else {
          ck_assert_msg(lp_tensor_int(&view, k) == lp_tensor_int(t, k), "%s %zu", lp_dtype_name(dt), k);
        }
      }
      if (binary) ck_assert_ptr_eq(t->raw, (const uint8_t *)b.data + hl); /* not copied */
      lp_v2_msg_free(&m);
      lp_buf_free(&b);
    }
    (void)esz;
  }
}
END_TEST

START_TEST(request_parameters_and_widening) {
  int32_t ids[6] = {1, 2, 3, -4, 5, 2147483647};
  lp_v2_out_t in[2] = {{.name = "input_ids", .dtype = LP_DT_INT64, .ndim = 2, .shape = {2, 3},
                        .data = ids, .count = 6, .widen_i32 = 1},
                       {.name = "mask", .dtype = LP_DT_INT32, .ndim = 1, .shape = {6}, .data = ids, .count = 6}};
  for (int binary = 0; binary <= 1; binary++) {
    lp_buf_t b;
    lp_buf_init(&b);
    size_t hl;
    ck_assert_int_eq(lp_v2_write(&b, "\"id\":\"r1\",\"parameters\":{\"priority\":3,\"timeout\":250000,"
                                    "\"binary_data_output\":true},\"outputs\":[{\"name\":\"y\","
                                    "\"parameters\":{\"binary_data\":true}},{\"name\":\"z\"}]",
                                 "inputs", in, 2, binary, &hl), 0);
    lp_v2_msg_t m;
    char err[200] = "";
    ck_assert_int_eq(lp_v2_decode(&m, b.data, b.len, binary ? (int64_t)hl : -1, 1, err, sizeof(err)), 0);
    ck_assert(m.has_priority && m.priority == 3 && m.has_timeout && m.timeout_us == 250000);
    ck_assert(m.binary_data_output);
    ck_assert_int_eq(m.nwant, 2);
    ck_assert_str_eq(m.want[0], "y");
    ck_assert(m.want_binary[0] && !m.want_binary[1]);
    const lp_tensor_t *t = lp_v2_find(&m, "input_ids");
    ck_assert_int_eq(t->dtype, LP_DT_INT64);
    for (int k = 0; k < 6; k++) ck_assert_int_eq(lp_tensor_int(t, (size_t)k), ids[k]);
    ck_assert_int_eq(lp_tensor_int(lp_v2_find(&m, "mask"), 3), -4);
    if (binary) ck_assert_uint_eq(b.len - hl, 6 * 8 + 6 * 4);
    lp_v2_msg_free(&m);
    lp_buf_free(&b);
  }
}
END_TEST

/* Malformed messages: each error names what was wrong; nothing reads outside. */
START_TEST(malformed_messages_named) {
  static const struct {
    const char *head;
    const char *bin;    /* binary part appended (NULL: JSON only) */
    size_t binlen;
    int64_t header_len; /* -2: the JSON's length */
    const char *says;
  } cases[] = {
      {"{\"outputs\": [", NULL, 0, -1, "not valid JSON"},
      {"[]", NULL, 0, -1, "not an object"},
      {"{\"outputs\": []}", NULL, 0, -1, "non-empty"},
      {"{\"outputs\": [{\"name\": \"y\", \"datatype\": \"FP8\", \"shape\": [1], \"data\": [1]}]}", NULL, 0, -1, "unknown datatype"},
      {"{\"outputs\": [{\"name\": \"y\", \"datatype\": \"BYTES\", \"shape\": [1], \"data\": [1]}]}", NULL, 0, -1, "BYTES"},
      {"{\"outputs\": [{\"datatype\": \"INT32\", \"shape\": [1], \"data\": [1]}]}", NULL, 0, -1, "no valid 'name'"},
      {"{\"outputs\": [{\"name\": \"y\", \"datatype\": \"INT32\", \"shape\": [2], \"data\": [1]}]}", NULL, 0, -1, "shape needs 2"},
      {"{\"outputs\": [{\"name\": \"y\", \"datatype\": \"INT32\", \"shape\": [1], \"data\": [1, 2]}]}", NULL, 0, -1, "more elements"},
      {"{\"outputs\": [{\"name\": \"y\", \"datatype\": \"INT32\", \"shape\": [1], \"data\": [1.5]}]}", NULL, 0, -1, "not an integer"},
      {"{\"outputs\": [{\"name\": \"y\", \"datatype\": \"INT32\", \"shape\": [-1], \"data\": []}]}", NULL, 0, -1, "not a size"},
      {"{\"outputs\": [{\"name\": \"y\", \"datatype\": \"INT8\", \"shape\": [65536, 65536, 2], \"data\": []}]}", NULL, 0, -1, "2^32"},
      {"{\"outputs\": [{\"name\": \"y\", \"datatype\": \"INT32\", \"shape\": [1000000], \"data\": []}]}", NULL, 0, -1, "more elements than the body"},
      {"{\"outputs\": [{\"name\": \"y\", \"datatype\": \"INT32\", \"shape\": [1]}]}", NULL, 0, -1, "neither"},
      {"{\"outputs\": [{\"name\": \"y\", \"datatype\": \"INT32\", \"shape\": [1], \"data\": [1]}, "
       "{\"name\": \"y\", \"datatype\": \"INT32\", \"shape\": [1], \"data\": [1]}]}", NULL, 0, -1, "twice"},
      {"{\"outputs\": [{\"name\": \"y\", \"datatype\": \"INT32\", \"shape\": [2], \"parameters\": {\"binary_data_size\": 8}}]}", NULL, 0, -1, "no binary part"},
      {"{\"outputs\": [{\"name\": \"y\", \"datatype\": \"INT32\", \"shape\": [2], \"parameters\": {\"binary_data_size\": 8}}]}", "\1\0\0\0", 4, -2, "runs past"},
      {"{\"outputs\": [{\"name\": \"y\", \"datatype\": \"INT32\", \"shape\": [2], \"parameters\": {\"binary_data_size\": 4}}]}", "\1\0\0\0", 4, -2, "need 8 bytes"},
      {"{\"outputs\": [{\"name\": \"y\", \"datatype\": \"INT32\", \"shape\": [1], \"parameters\": {\"binary_data_size\": 4}}]}", "\1\0\0\0\0", 5, -2, "after the last"},
      {"{\"outputs\": [{\"name\": \"y\", \"datatype\": \"INT32\", \"shape\": [1], \"parameters\": {\"binary_data_size\": 4}}]}", "\1\0\0\0", 4, 100000, "past the body"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    lp_buf_t b;
    lp_buf_init(&b);
    lp_buf_puts(&b, cases[i].head);
    int64_t hl = cases[i].header_len == -2 ? (int64_t)b.len : cases[i].header_len;
    if (cases[i].bin) lp_buf_append(&b, cases[i].bin, cases[i].binlen);
    lp_v2_msg_t m;
    char err[200] = "";
    int rc = lp_v2_decode(&m, b.data, b.len, hl, 0, err, sizeof(err));
    ck_assert_msg(rc == -EPROTO && strstr(err, cases[i].says), "case %zu: rc %d, '%s'", i, rc, err);
    lp_v2_msg_free(&m);
    lp_buf_free(&b);
  }
}
END_TEST

START_TEST(json_writing_of_slices) {
  float f[6] = {0.5f, 0.1f, -2.0f, 1e-7f, 3.0f, 4.25f};
  lp_tensor_t t = {.dtype = LP_DT_FP32, .raw = (const uint8_t *)f, .count = 6};
  lp_buf_t b;
  lp_buf_init(&b);
  lp_tensor_write_json(&b, &t, 2, 4, 2);
  ck_assert_str_eq(lp_buf_cstr(&b), "[-2,1e-07],[3,4.25]");
  lp_buf_reset(&b);
  lp_tensor_write_json(&b, &t, 0, 2, 1);
  ck_assert_str_eq(lp_buf_cstr(&b), "0.5,0.1");
  uint8_t bools[3] = {1, 0, 1};
  lp_tensor_t tb = {.dtype = LP_DT_BOOL, .raw = bools, .count = 3};
  lp_buf_reset(&b);
  lp_tensor_write_json(&b, &tb, 0, 3, 1);
  ck_assert_str_eq(lp_buf_cstr(&b), "true,false,true");
  double nan = NAN;
  lp_tensor_t tn = {.dtype = LP_DT_FP64, .raw = (const uint8_t *)&nan, .count = 1};
  lp_buf_reset(&b);
  lp_tensor_write_json(&b, &tn, 0, 1, 1);
  ck_assert_str_eq(lp_buf_cstr(&b), "null");
  /* found by the fuzzer: an FP16 tensor's JSON data past single precision */
  double big[2] = {2.5e57, 1.5};
  lp_tensor_t th = {.dtype = LP_DT_FP16, .reals = big, .count = 2};
  lp_buf_reset(&b);
  lp_tensor_write_json(&b, &th, 0, 2, 1);
  ck_assert_str_eq(lp_buf_cstr(&b), "null,1.5");
  lp_buf_free(&b);
}
END_TEST

START_TEST(routes) {
  static const struct { const char *path; lp_v2_route_t r; const char *name; } cases[] = {
      {"/v1/infer", LP_V2_NOT_V2, NULL},         {"/v2x", LP_V2_NOT_V2, NULL},
      {"/v2", LP_V2_SERVER, NULL},               {"/v2/health/live", LP_V2_LIVE, NULL},
      {"/v2/health/ready", LP_V2_READY, NULL},   {"/v2/health", LP_V2_UNKNOWN, NULL},
      {"/v2/models/", LP_V2_UNKNOWN, NULL},      {"/v2/models/m", LP_V2_MODEL, "m"},
      {"/v2/models/bert_4x64/ready", LP_V2_MODEL_READY, "bert_4x64"},
      {"/v2/models/m/infer", LP_V2_INFER, "m"}, {"/v2/models/m/versions/3/infer", LP_V2_INFER, "m"},
      {"/v2/models/m/versions/3", LP_V2_MODEL, "m"}, {"/v2/models/m/explain", LP_V2_UNKNOWN, "m"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    const char *name;
    size_t n;
    lp_v2_route_t r = lp_v2_route(cases[i].path, strlen(cases[i].path), &name, &n);
    ck_assert_msg(r == cases[i].r, "%s: %d", cases[i].path, r);
    if (cases[i].name) ck_assert_msg(n == strlen(cases[i].name) && !memcmp(name, cases[i].name, n), "%s", cases[i].path);
  }
}
END_TEST

LP_TEST_MAIN("v2", routes, dtypes_and_halves, shortest_round_trip_text, write_then_decode_every_type,
             request_parameters_and_widening, malformed_messages_named, json_writing_of_slices)
