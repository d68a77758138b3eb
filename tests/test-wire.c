#define _GNU_SOURCE
/* The Open Inference Protocol wire to backends: lanepack in front of the
 * emulator speaking v2, binary and JSON tensors, per token and per segment,
 * INT32 and INT64 inputs, float outputs with a trailing dimension, the ragged
 * form, shapes whose model is missing, and malformed answers; every answer
 * verified against the emulator's function. */
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "testutil.h"
#include "lanepack/emu.h"
#include "lanepack/rng.h"

typedef h_stack_t stack_t_;

/* The emulator speaking v2, lanepack's model "m" speaking v2 to it. */
static stack_t_ start(const char *emu_args, const char *model_keys) {
  stack_t_ s;
  char args[512], keys[1024];
  snprintf(args, sizeof(args), "--protocol v2 --cost-ms 1 %s", emu_args);
  snprintf(keys, sizeof(keys), "\"protocol\": \"v2\", \"max_wait_ms\": 2, %s", model_keys);
  ck_assert_int_eq(h_stack_start(&s, args, "", keys), 0);
  usleep(200000); /* the shapes' readiness probes have answered */
  return s;
}

static void stop(stack_t_ *s) { ck_assert_int_eq(h_stack_stop(s), 0); }

/* Loadgen with --verify: every answer checked; returns the ok count. */
static long verified_load(int port, const char *lengths, const char *extra) {
  char url[64], json[96];
  snprintf(url, sizeof(url), "http://127.0.0.1:%d", port);
  snprintf(json, sizeof(json), "/tmp/lp-wire-%d.json", port);
  char *argv[24] = {(char *)h_bin("LP_LOADGEN"), "--url", url, "--rate", "400", "--duration", "1s",
                    "--lengths", (char *)lengths, "--verify", "--timeout", "5s", "--json", json};
  int ac = 14;
  char buf[128];
  if (extra) {
    snprintf(buf, sizeof(buf), "%s", extra);
    for (char *sv, *t = strtok_r(buf, " ", &sv); t && ac < 22; t = strtok_r(NULL, " ", &sv)) argv[ac++] = t;
  }
  argv[ac] = NULL;
  int rc = h_run(argv, "/tmp/lp-wire-loadgen.log");
  ck_assert_msg(rc == 0, "loadgen exit %d, see /tmp/lp-wire-loadgen.log", rc);
  json_error_t je;
  json_t *j = json_load_file(json, 0, &je);
  ck_assert_ptr_nonnull(j);
  long sent = (long)json_integer_value(json_object_get(j, "sent"));
  long ok = (long)json_integer_value(json_object_get(j, "ok"));
  long mism = (long)json_integer_value(json_object_get(j, "mismatches"));
  json_decref(j);
  printf("wire: %s: sent %ld, ok %ld, mismatches %ld\n", extra ? extra : "", sent, ok, mism);
  ck_assert_int_gt(sent, 100);
  ck_assert_int_eq(ok, sent);
  ck_assert_int_eq(mism, 0);
  return ok;
}

START_TEST(binary_and_json_per_token) {
  /* the exact form */
  stack_t_ s = start("--shapes 4x256,8x64 --v2-model bert_{lanes}x{bucket} --v2-output feats",
                     "\"shapes\": \"4x256,8x64\", \"v2\": {\"model\": \"bert_{lanes}x{bucket}\", "
                     "\"binary\": true, \"output\": \"feats\", \"output_kind\": \"per_token\"}");
  verified_load(s.port, "uniform:1,200", NULL);
  verified_load(s.port, "uniform:1,200", "--sequences-per-request 3");
  /* v2 clients too, binary and JSON, end to end over v2 binary */
  verified_load(s.port, "uniform:1,200", "--model m --protocol v2 --binary --sequences-per-request 2");
  verified_load(s.port, "uniform:1,200", "--model m --protocol v2");
  stop(&s);
  /* JSON tensors, INT64 inputs, every output asked for */
  s = start("--shapes 4x256,8x64",
            "\"shapes\": \"4x256,8x64\", \"v2\": {\"model\": \"lanepack_{lanes}x{bucket}\", "
            "\"binary\": false, \"datatype\": \"INT64\"}");
  verified_load(s.port, "uniform:1,200", NULL);
  stop(&s);
}
END_TEST

START_TEST(per_segment_and_ragged) {
  stack_t_ s = start("--shapes 4x256,8x64 --per-segment",
                     "\"shapes\": \"4x256,8x64\", \"v2\": {\"model\": \"lanepack_{lanes}x{bucket}\", "
                     "\"output_kind\": \"per_segment\"}");
  verified_load(s.port, "uniform:1,200", NULL);
  stop(&s);
  s = start("--shapes 4x256 --ragged", "\"ragged\": true, \"ragged_max_tokens\": 2048, "
            "\"v2\": {\"model\": \"flat\"}");
  verified_load(s.port, "uniform:1,200", NULL);
  stop(&s);
}
END_TEST

/* FP32 outputs with a trailing dimension: [lanes, bucket, 3] sliced to
 * [n][3] per request, each value the emulator's feature. */
START_TEST(float_features) {
  stack_t_ s = start("--shapes 4x64 --v2-dims 3",
                     "\"shapes\": \"4x64\", \"v2\": {\"model\": \"lanepack_{lanes}x{bucket}\"}");
  lp_rng_t r;
  lp_rng_seed(&r, 5);
  for (int i = 0; i < 20; i++) {
    int32_t t[64];
    size_t n = 1 + (size_t)lp_rng_below(&r, 60);
    for (size_t k = 0; k < n; k++) t[k] = (int32_t)lp_rng_below(&r, 30000);
    char *body = h_ids_body(t, n, NULL);
    h_resp_t resp;
    ck_assert_int_eq(h_call(s.port, "POST", "/v1/infer", "Content-Type: application/json\r\n", body, &resp), 0);
    ck_assert_int_eq(resp.status, 200);
    json_error_t je;
    json_t *j = json_loads(resp.body, 0, &je);
    json_t *out = json_object_get(j, "output");
    ck_assert_uint_eq(json_array_size(out), n);
    int32_t h[64];
    lp_emu_outputs(t, n, h);
    for (size_t k = 0; k < n; k++) {
      json_t *row = json_array_get(out, k);
      ck_assert_uint_eq(json_array_size(row), 3);
      for (unsigned d = 0; d < 3; d++)
        ck_assert_msg(json_number_value(json_array_get(row, d)) == (double)lp_emu_feature(h[k], d),
                      "token %zu feature %u", k, d);
    }
    json_decref(j);
    h_resp_free(&resp);
    free(body);
  }
  stop(&s);
}
END_TEST

/* A shape whose model the server lacks is unavailable there; a garbled answer
 * is 502 bad_backend_answer naming the problem, never a slice of it. */
START_TEST(missing_model_and_bad_answers) {
  stack_t_ s = start("--shapes 8x64", "\"shapes\": \"4x256,8x64\", \"v2\": {\"model\": \"lanepack_{lanes}x{bucket}\"}");
  h_resp_t r;
  ck_assert_int_eq(h_call(s.port, "GET", "/v1/models", "", NULL, &r), 0);
  ck_assert_msg(strstr(r.body, "\"shape\": [4, 256], \"state\": \"unavailable\""), "%s", r.body);
  h_resp_free(&r);
  int32_t t[100];
  for (int k = 0; k < 100; k++) t[k] = k;
  char *body = h_ids_body(t, 100, NULL);
  ck_assert_int_eq(h_call(s.port, "POST", "/v1/infer", "", body, &r), 0);
  ck_assert_msg(r.status == 413 && strstr(r.body, "\"max_len\": 64"), "%d %s", r.status, r.body);
  h_resp_free(&r);
  free(body);
  stop(&s);
  /* a model whose metadata lacks the output we read is not used, and with no
   * shape to run the proxy is not ready */
  ck_assert_int_eq(h_stack_start_at(&s, "--protocol v2 --cost-ms 1 --shapes 4x64", "",
                                    "\"protocol\": \"v2\", \"max_wait_ms\": 2, \"shapes\": \"4x64\", "
                                    "\"v2\": {\"model\": \"lanepack_{lanes}x{bucket}\", \"output\": \"logits\"}",
                                    "/healthz"),
                   0);
  usleep(200000); /* the shapes' metadata probes have answered */
  ck_assert_int_eq(h_call(s.port, "GET", "/readyz", "", NULL, &r), 0);
  ck_assert_int_eq(r.status, 503);
  h_resp_free(&r);
  ck_assert_int_eq(h_call(s.port, "GET", "/v1/models", "", NULL, &r), 0);
  ck_assert_msg(strstr(r.body, "\"state\": \"unavailable\""), "%s", r.body);
  h_resp_free(&r);
  body = h_ids_body(t, 10, NULL);
  ck_assert_int_eq(h_call(s.port, "POST", "/v1/infer", "", body, &r), 0);
  ck_assert_msg(r.status == 503 && strstr(r.body, "no_shape_available"), "%d %s", r.status, r.body);
  h_resp_free(&r);
  free(body);
  stop(&s);
  s = start("--shapes 4x64 --garbage-rate 1", "\"shapes\": \"4x64\", \"v2\": {\"model\": \"lanepack_{lanes}x{bucket}\"}");
  /* each garbled answer fails its batch (never sliced); three in a row mark the
   * backend down, and then requests are refused at once */
  for (int i = 0; i < 5; i++) {
    body = h_ids_body(t, 10, NULL);
    ck_assert_int_eq(h_call(s.port, "POST", "/v1/infer", "", body, &r), 0);
    if (i < 3)
      ck_assert_msg(r.status == 502 && strstr(r.body, "bad_backend_answer"), "%d %s", r.status, r.body);
    else
      ck_assert_msg(r.status == 503 || r.status == 502, "%d %s", r.status, r.body);
    h_resp_free(&r);
    free(body);
  }
  stop(&s);
}
END_TEST

/* The emulator's v2 side checks every batch as strictly as a JSON one. */
START_TEST(emulator_v2_checks) {
  int port;
  pid_t e = h_start_emulator("--shapes 1x8 --protocol v2", &port);
  ck_assert_int_gt(e, 0);
  static const struct {
    const char *ids, *sids, *pos, *dtype, *extra;
    int status;
    const char *says;
  } cases[] = {
      {"[5,6,7,8,9,0,0,0]", "[1,1,1,2,2,0,0,0]", "[0,1,2,0,1,0,0,0]", "INT32", "", 200, "outputs"},
      {"[5,6,7,8,9,0,0,0]", "[2,2,2,3,3,0,0,0]", "[0,1,2,0,1,0,0,0]", "INT32", "", 400, "count 1, 2"},
      {"[5,6,7,8,9,0,0,0]", "[1,1,1,2,2,0,0,0]", "[0,1,2,3,4,0,0,0]", "INT64", "", 400, "restart at 0"},
      {"[5,6,7,8,9,0,0,0]", "[1,1,1,2,2,0,0,0]", "[0,1,2,0,1,0,7,0]", "INT32", "", 400, "padding"},
      {"[5,6,7,8,9,0,0,0]", "[1,1,1,2,2,0,0,0]", "[0,1,2,0,1,0,0,0]", "FP32", "", 400, "INT32 or INT64"},
      {"[5,6,7,8,9,0,0,0]", "[1,1,1,2,2,0,0,0]", "[0,1,2,0,1,0,0,0]", "INT32",
       ",\"outputs\":[{\"name\":\"logits\"}]", 400, "unknown output"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    char body[1024];
    snprintf(body, sizeof(body),
             "{\"inputs\":[{\"name\":\"input_ids\",\"datatype\":\"%s\",\"shape\":[1,8],\"data\":%s},"
             "{\"name\":\"segment_ids\",\"datatype\":\"%s\",\"shape\":[1,8],\"data\":%s},"
             "{\"name\":\"position_ids\",\"datatype\":\"%s\",\"shape\":[1,8],\"data\":%s}]%s}",
             cases[i].dtype, cases[i].ids, cases[i].dtype, cases[i].sids, cases[i].dtype, cases[i].pos,
             cases[i].extra);
    h_resp_t r;
    ck_assert_int_eq(h_call(port, "POST", "/v2/models/lanepack_1x8/infer", "", body, &r), 0);
    ck_assert_msg(r.status == cases[i].status && strstr(r.body, cases[i].says), "case %zu: %d %s", i,
                  r.status, r.body);
    h_resp_free(&r);
  }
  /* a missing input, the wrong shape, an unknown model */
  h_resp_t r;
  ck_assert_int_eq(h_call(port, "POST", "/v2/models/lanepack_1x8/infer", "",
                          "{\"inputs\":[{\"name\":\"input_ids\",\"datatype\":\"INT32\",\"shape\":[1,8],"
                          "\"data\":[1,2,3,4,5,6,7,8]}]}", &r), 0);
  ck_assert_msg(r.status == 400 && strstr(r.body, "segment_ids' is missing"), "%d %s", r.status, r.body);
  h_resp_free(&r);
  ck_assert_int_eq(h_call(port, "POST", "/v2/models/lanepack_1x8/infer", "",
                          "{\"inputs\":[{\"name\":\"input_ids\",\"datatype\":\"INT32\",\"shape\":[1,4],"
                          "\"data\":[1,2,3,4]}]}", &r), 0);
  ck_assert_msg(r.status == 400 && strstr(r.body, "wrong shape"), "%d %s", r.status, r.body);
  h_resp_free(&r);
  ck_assert_int_eq(h_call(port, "GET", "/v2/models/lanepack_2x8/ready", "", NULL, &r), 0);
  ck_assert_int_eq(r.status, 404);
  h_resp_free(&r);
  h_stop(e, 5000);
}
END_TEST

LP_TEST_MAIN("wire", emulator_v2_checks, binary_and_json_per_token, per_segment_and_ragged, float_features,
             missing_model_and_bad_answers)
