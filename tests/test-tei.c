/* The TEI routes' codec: the three requests with TEI's defaults, each bad one
 * answered with TEI's status and type naming the field, the pair template
 * parsed and laid out (cut from either end), the rank order, and the answers'
 * and error's shapes. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lanepack/jload.h"
#include "lanepack/tei.h"
#include "jfail.h"
#include "testutil.h"

/* as the front's (tei.c's tei_ctx_t): TEI's own refusals are long */
#define ERR_LEN 256

static int parse(int route, const char *body, lp_tei_req_t *r, int *status, const char **type, char *err) {
  return lp_tei_parse(route, body, strlen(body), 3, r, status, type, err, ERR_LEN);
}

START_TEST(requests_and_defaults) {
  lp_tei_req_t r;
  int st = 0;
  const char *ty = NULL;
  char err[ERR_LEN];
  ck_assert_int_eq(parse(LP_TEI_EMBED, "{\"inputs\": \"hello\"}", &r, &st, &ty, err), 0);
  ck_assert_uint_eq(r.ntexts, 1);
  ck_assert_uint_eq(r.texts[0].len, 5);
  ck_assert_int_eq(r.normalize, 1);
  ck_assert_int_eq(r.truncate, 0);
  ck_assert_int_eq(r.left, 0);
  ck_assert_str_eq(r.model, "");
  lp_tei_req_free(&r);
  ck_assert_int_eq(parse(LP_TEI_EMBED, "{\"inputs\": [\"a\", \"bc\"], \"normalize\": false, \"truncate\": true, "
                                       "\"truncation_direction\": \"Left\", \"model\": \"m\", \"prompt_name\": null}",
                         &r, &st, &ty, err), 0);
  ck_assert_uint_eq(r.ntexts, 2);
  ck_assert_int_eq(r.normalize, 0);
  ck_assert_int_eq(r.truncate, 1);
  ck_assert_int_eq(r.left, 1);
  ck_assert_str_eq(r.model, "m");
  lp_tei_req_free(&r);
  ck_assert_int_eq(parse(LP_TEI_RERANK, "{\"query\": \"q\", \"texts\": [\"a\", \"b\", \"c\"], \"raw_scores\": true, "
                                        "\"return_text\": true, \"truncate\": null}", &r, &st, &ty, err), 0);
  ck_assert_uint_eq(r.query.len, 1);
  ck_assert_uint_eq(r.ntexts, 3);
  ck_assert_int_eq(r.raw_scores, 1);
  ck_assert_int_eq(r.return_text, 1);
  ck_assert_int_eq(r.truncate, 0);
  lp_tei_req_free(&r);
  ck_assert_int_eq(parse(LP_TEI_TOKENIZE, "{\"inputs\": [\"x\"], \"add_special_tokens\": false}", &r, &st, &ty, err), 0);
  ck_assert_int_eq(r.add_special_tokens, 0);
  lp_tei_req_free(&r);
  /* TEI 1.9: token ids, mixed inputs, dimensions; fields a route lacks ignored */
  ck_assert_int_eq(parse(LP_TEI_EMBED, "{\"inputs\": [5, 6, 7], \"dimensions\": 2, \"raw_scores\": 1, \"x\": {}}",
                         &r, &st, &ty, err), 0);
  ck_assert_uint_eq(r.ntexts, 1);
  ck_assert_ptr_null(r.texts[0].s);
  ck_assert_uint_eq(r.texts[0].nids, 3);
  ck_assert_int_eq(r.texts[0].ids[2], 7);
  ck_assert_uint_eq(r.dimensions, 2);
  lp_tei_req_free(&r);
  ck_assert_int_eq(parse(LP_TEI_EMBED, "{\"inputs\": [\"ab\", [1, 2], []]}", &r, &st, &ty, err), 0);
  ck_assert_uint_eq(r.ntexts, 3);
  ck_assert_uint_eq(r.texts[0].len, 2);
  ck_assert_int_eq(r.texts[1].ids[1], 2);
  ck_assert_uint_eq(r.texts[2].nids, 0);
  lp_tei_req_free(&r);
  /* /predict: one text, one pair, a batch of both */
  ck_assert_int_eq(parse(LP_TEI_PREDICT, "{\"inputs\": \"a\", \"raw_scores\": true}", &r, &st, &ty, err), 0);
  ck_assert_int_eq(r.single, 1);
  ck_assert_int_eq(r.raw_scores, 1);
  lp_tei_req_free(&r);
  ck_assert_int_eq(parse(LP_TEI_PREDICT, "{\"inputs\": [\"a\", \"bc\"]}", &r, &st, &ty, err), 0);
  ck_assert_int_eq(r.single, 1);
  ck_assert_uint_eq(r.ntexts, 1);
  ck_assert_int_eq(r.texts[0].pair, 1);
  ck_assert_uint_eq(r.texts[0].blen, 2);
  lp_tei_req_free(&r);
  ck_assert_int_eq(parse(LP_TEI_PREDICT, "{\"inputs\": [\"abc\"]}", &r, &st, &ty, err), 0); /* TEI: one text */
  ck_assert_int_eq(r.single, 1);
  ck_assert_uint_eq(r.ntexts, 1);
  ck_assert_int_eq(r.texts[0].pair, 0);
  ck_assert_uint_eq(r.texts[0].len, 3);
  lp_tei_req_free(&r);
  ck_assert_int_eq(parse(LP_TEI_PREDICT, "{\"inputs\": [[\"a\"], [\"b\", \"c\"]]}", &r, &st, &ty, err), 0);
  ck_assert_int_eq(r.single, 0);
  ck_assert_uint_eq(r.ntexts, 2);
  ck_assert_int_eq(r.texts[0].pair, 0);
  ck_assert_int_eq(r.texts[1].pair, 1);
  lp_tei_req_free(&r);
  /* /similarity: the source first; its parameters */
  ck_assert_int_eq(parse(LP_TEI_SIMILARITY, "{\"inputs\": {\"source_sentence\": \"s\", \"sentences\": [\"a\", \"b\"]}, "
                                            "\"parameters\": {\"truncate\": true, \"truncation_direction\": \"Left\"}}",
                         &r, &st, &ty, err), 0);
  ck_assert_uint_eq(r.ntexts, 3);
  ck_assert_uint_eq(r.texts[0].len, 1);
  ck_assert_int_eq(r.truncate, 1);
  ck_assert_int_eq(r.left, 1);
  lp_tei_req_free(&r);
  ck_assert_int_eq(parse(LP_TEI_DECODE, "{\"ids\": [[1, 2], [3]], \"skip_special_tokens\": false}", &r, &st, &ty, err), 0);
  ck_assert_uint_eq(r.ntexts, 2);
  ck_assert_int_eq(r.skip_special_tokens, 0);
  ck_assert_int_eq(r.texts[1].ids[0], 3);
  lp_tei_req_free(&r);
}
END_TEST

START_TEST(bad_requests) {
  static const struct {
    int route;
    const char *body;
    int status;
    const char *type, *word;
  } bad[] = {
      {LP_TEI_EMBED, "{\"inputs\": ", 400, LP_TEI_VALIDATION, "JSON"},
      {LP_TEI_EMBED, "[1]", 422, LP_TEI_VALIDATION, "object"},
      {LP_TEI_EMBED, "{}", 422, LP_TEI_VALIDATION, "`inputs`"},
      {LP_TEI_EMBED, "{\"inputs\": 5}", 422, LP_TEI_VALIDATION, "`inputs`"},
      {LP_TEI_EMBED, "{\"inputs\": [\"a\", 1]}", 422, LP_TEI_VALIDATION, "`inputs`"},
      {LP_TEI_EMBED, "{\"inputs\": []}", 400, LP_TEI_EMPTY, "`inputs`"},
      {LP_TEI_EMBED, "{\"inputs\": [\"a\", \"b\", \"c\", \"d\"]}", 413, LP_TEI_VALIDATION, "4 > maximum allowed batch size 3"},
      {LP_TEI_EMBED, "{\"inputs\": \"a\", \"normalize\": 1}", 422, LP_TEI_VALIDATION, "`normalize`"},
      {LP_TEI_EMBED, "{\"inputs\": \"a\", \"truncation_direction\": \"Up\"}", 422, LP_TEI_VALIDATION, "`truncation_direction`"},
      {LP_TEI_EMBED, "{\"inputs\": [5, -1]}", 422, LP_TEI_VALIDATION, "`inputs`"},
      {LP_TEI_EMBED, "{\"inputs\": [[5], [1.5]]}", 422, LP_TEI_VALIDATION, "`inputs`"},
      {LP_TEI_EMBED, "{\"inputs\": \"a\", \"dimensions\": 0}", 422, LP_TEI_VALIDATION, "`dimensions`"},
      {LP_TEI_PREDICT, "{\"inputs\": [[\"a\", \"b\", \"c\"]]}", 422, LP_TEI_VALIDATION, "inputs: invalid length 3"},
      /* TEI's PredictInput: a list starting with a string is one sequence, never a batch */
      {LP_TEI_PREDICT, "{\"inputs\": [\"a\", \"b\", \"c\"]}", 422, LP_TEI_VALIDATION,
       "inputs: invalid length 3, expected"},
      {LP_TEI_PREDICT, "{\"inputs\": [\"a\", \"b\", \"c\", \"d\", \"e\"]}", 422, LP_TEI_VALIDATION, "invalid length 3"},
      {LP_TEI_PREDICT, "{\"inputs\": [\"a\", [\"b\"]]}", 422, LP_TEI_VALIDATION, "`inputs`"},
      {LP_TEI_PREDICT, "{\"inputs\": [[\"a\"], \"b\"]}", 422, LP_TEI_VALIDATION, "`inputs`"},
      {LP_TEI_PREDICT, "{\"inputs\": [[\"a\"], []]}", 422, LP_TEI_VALIDATION, "invalid length 0"},
      {LP_TEI_PREDICT, "{\"inputs\": []}", 422, LP_TEI_VALIDATION, "invalid length 0"},
      {LP_TEI_PREDICT, "{\"inputs\": [[\"a\"], [\"b\"], [\"c\"], [\"d\"]]}", 413, LP_TEI_VALIDATION, "4 > maximum"},
      {LP_TEI_SIMILARITY, "{\"inputs\": {\"source_sentence\": \"a\"}}", 422, LP_TEI_VALIDATION, "`inputs`"},
      {LP_TEI_SIMILARITY, "{\"inputs\": {\"source_sentence\": \"a\", \"sentences\": []}}", 400, LP_TEI_EMPTY, "`sentences`"},
      {LP_TEI_DECODE, "{\"ids\": [\"a\"]}", 422, LP_TEI_VALIDATION, "`ids`"},
      {LP_TEI_DECODE, "{}", 422, LP_TEI_VALIDATION, "`ids`"},
      {LP_TEI_EMBED, "{\"inputs\": \"a\", \"prompt_name\": \"query\"}", 422, LP_TEI_VALIDATION, "`prompt_name`"},
      {LP_TEI_EMBED, "{\"inputs\": \"a\", \"inputs\": \"b\"}", 400, LP_TEI_VALIDATION, "JSON"},
      {LP_TEI_EMBED, "{\"inputs\": \"a\", \"model\": 3}", 422, LP_TEI_VALIDATION, "`model`"},
      {LP_TEI_RERANK, "{\"texts\": [\"a\"]}", 422, LP_TEI_VALIDATION, "`query`"},
      {LP_TEI_RERANK, "{\"query\": \"q\"}", 422, LP_TEI_VALIDATION, "`texts`"},
      {LP_TEI_RERANK, "{\"query\": \"q\", \"texts\": \"a\"}", 422, LP_TEI_VALIDATION, "`texts`"},
      {LP_TEI_RERANK, "{\"query\": \"q\", \"texts\": []}", 400, LP_TEI_EMPTY, "`texts`"},
      {LP_TEI_RERANK, "{\"query\": 1, \"texts\": [\"a\"]}", 422, LP_TEI_VALIDATION, "`query`"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    lp_tei_req_t r;
    int st = 0;
    const char *ty = NULL;
    char err[ERR_LEN] = "";
    int rc = parse(bad[i].route, bad[i].body, &r, &st, &ty, err);
    ck_assert_msg(rc == -EPROTO, "%s: %d", bad[i].body, rc);
    ck_assert_msg(st == bad[i].status, "%s: status %d", bad[i].body, st);
    ck_assert_str_eq(ty, bad[i].type);
    ck_assert_msg(strstr(err, bad[i].word) != NULL, "%s: '%s' lacks '%s'", bad[i].body, err, bad[i].word);
    lp_tei_req_free(&r);
  }
}
END_TEST

static int32_t lookup(const void *ud, const char *piece) {
  (void)ud;
  return strcmp(piece, "<s>") == 0 ? 0 : strcmp(piece, "</s>") == 0 ? 2 : strcmp(piece, "[SEP]") == 0 ? 102 : -1;
}

START_TEST(pair_template) {
  lp_tei_template_t t;
  char err[ERR_LEN];
  ck_assert_int_eq(lp_tei_template_load("<s> $A </s></s> $B </s>", lookup, NULL, &t, err, sizeof(err)), 0);
  ck_assert_uint_eq(t.nparts, 6);
  ck_assert_int_eq(t.part[1].slot, 1);
  ck_assert_str_eq(t.part[3].piece, "</s>");
  ck_assert_int_eq(t.part[4].slot, 2);
  int32_t a[] = {10, 11}, b[] = {20, 21, 22, 23}, out[32];
  int32_t whole[] = {0, 10, 11, 2, 2, 20, 21, 22, 23, 2};
  ck_assert_int_eq(lp_tei_pair(&t, a, 2, b, 4, 0, 0, LP_TEI_ONLY_SECOND, out, 32), 10);
  ck_assert_mem_eq(out, whole, sizeof(whole));
  int32_t right[] = {0, 10, 11, 2, 2, 20, 21, 2}, left[] = {0, 10, 11, 2, 2, 22, 23, 2};
  ck_assert_int_eq(lp_tei_pair(&t, a, 2, b, 4, 8, 0, LP_TEI_ONLY_SECOND, out, 32), 8);
  ck_assert_mem_eq(out, right, sizeof(right));
  ck_assert_int_eq(lp_tei_pair(&t, a, 2, b, 4, 8, 1, LP_TEI_ONLY_SECOND, out, 32), 8);
  ck_assert_mem_eq(out, left, sizeof(left));
  /* the query and 4 pieces fill 6 */
  ck_assert_int_eq(lp_tei_pair(&t, a, 2, b, 4, 6, 0, LP_TEI_ONLY_SECOND, out, 32), -E2BIG);
  ck_assert_int_eq(lp_tei_pair(&t, a, 2, b, 4, 0, 0, LP_TEI_ONLY_SECOND, out, 9), -ENOSPC);
  /* LongestFirst (TEI's for pairs), as tokenizers' truncate_encodings
   * cuts within the limit less the template's 4 pieces: {na, nb, max, the
   * kept counts}; the first text alone over the limit is cut, not refused */
  static const struct {
    size_t na, nb, max, ka, kb;
  } lf[] = {
      {10, 2, 10, 4, 2}, /* room 6: the shorter whole, the longer what it leaves */
      {2, 10, 10, 2, 4}, {2, 4, 10, 2, 4}, /* within the limit: whole */
      {5, 7, 9, 2, 3},   /* both over half of room 5: the shorter floor, the longer ceil */
      {7, 5, 9, 3, 2},   {4, 4, 9, 2, 3}, /* equal: the first floor */
      {3, 3, 9, 2, 3},   {9, 1, 4, 0, 0}, /* no room: the template's pieces alone */
  };
  for (size_t i = 0; i < sizeof(lf) / sizeof(lf[0]); i++)
    for (int dir = 0; dir < 2; dir++) {
      int32_t la[16], lb[16], want[40];
      for (size_t k = 0; k < 16; k++) la[k] = (int32_t)(100 + k), lb[k] = (int32_t)(200 + k);
      size_t n = 0;
      want[n++] = 0;
      for (size_t k = 0; k < lf[i].ka; k++) want[n++] = la[dir ? lf[i].na - lf[i].ka + k : k];
      want[n++] = 2, want[n++] = 2;
      for (size_t k = 0; k < lf[i].kb; k++) want[n++] = lb[dir ? lf[i].nb - lf[i].kb + k : k];
      want[n++] = 2;
      long got = lp_tei_pair(&t, la, lf[i].na, lb, lf[i].nb, lf[i].max, dir, LP_TEI_LONGEST_FIRST, out, 32);
      ck_assert_msg(got == (long)n, "case %zu dir %d: %ld ids, want %zu", i, dir, got, n);
      ck_assert_mem_eq(out, want, n * sizeof(*want));
    }
  ck_assert_int_eq(lp_tei_pair(&t, a, 2, b, 4, 3, 0, LP_TEI_LONGEST_FIRST, out, 32), -E2BIG); /* 4 pieces over 3 */
  /* BERT's form with type ids */
  ck_assert_int_eq(lp_tei_template_load("[SEP]:0 $A:0 [SEP]:0 $B:1 [SEP]:1", lookup, NULL, &t, err, sizeof(err)), 0);
  ck_assert_uint_eq(t.nparts, 5);
  ck_assert_int_eq(t.part[2].id, 102);
  ck_assert_int_eq(lp_tei_template_load("<s> $A <zz> $B", lookup, NULL, &t, err, sizeof(err)), -EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "'<zz>'"));
  ck_assert_int_eq(lp_tei_template_parse("<s> $A </s>", &t, err, sizeof(err)), -EINVAL);
  ck_assert_int_eq(lp_tei_template_parse("$A $B $B", &t, err, sizeof(err)), -EINVAL);
  ck_assert_int_eq(lp_tei_template_parse("$A : $B", &t, err, sizeof(err)), -EINVAL);
}
END_TEST

START_TEST(ranks_and_shapes) {
  lp_tei_rank_t r[] = {{0.5f, 0}, {2.0f, 1}, {0.5f, 2}, {-1.0f, 3}, {2.0f, 4}};
  lp_tei_rank(r, 5);
  size_t want[] = {1, 4, 0, 2, 3};
  for (size_t i = 0; i < 5; i++) ck_assert_uint_eq(r[i].index, want[i]);
  ck_assert_float_eq(lp_tei_sigmoid(0.0f), 0.5f);
  ck_assert_float_eq_tol(lp_tei_sigmoid(2.0f), 0.880797f, 1e-6f);
  lp_buf_t b;
  lp_buf_init(&b);
  float v[] = {1.5f, -0.25f};
  lp_tei_vector(&b, v, 2);
  lp_tei_rank_item(&b, 3, 0.5f, "t\"x", 3);
  lp_tei_rank_item(&b, 4, 1.0f, NULL, 0);
  lp_tei_token(&b, 7, "ab", 2, 0, 1, 3);
  lp_tei_token(&b, 2, "</s>", 4, 1, 0, 0);
  lp_tei_error(&b, "too \"long\"", LP_TEI_TOKENIZER);
  ck_assert_str_eq(lp_buf_cstr(&b), "[1.5,-0.25]{\"index\":3,\"text\":\"t\\\"x\",\"score\":0.5}{\"index\":4,\"score\":1}"
                                    "{\"id\":7,\"text\":\"ab\",\"special\":false,\"start\":1,\"stop\":3}"
                                    "{\"id\":2,\"text\":\"</s>\",\"special\":true,\"start\":null,\"stop\":null}"
                                    "{\"error\":\"too \\\"long\\\"\",\"error_type\":\"Tokenizer\"}\n");
  lp_buf_free(&b);
}
END_TEST

/* Decoded in place with every string long enough to be a reference into the
 * body (no NUL after it): the fields read as from the copying decoder (the
 * fuzzer found "Left" refused so). */
START_TEST(in_place) {
  static const char body[] = "{\"inputs\": [\"a\\n\", \"bc\"], \"truncate\": true, \"truncation_direction\": "
                             "\"Left\", \"model\": \"m\\u00e9\", \"query\": \"q\", \"texts\": [\"a\\n\", \"bc\"]}";
  lp_jload_set_min(1);
  for (int route = LP_TEI_EMBED; route <= LP_TEI_RERANK; route++) {
    char own[sizeof(body)];
    memcpy(own, body, sizeof(body));
    lp_tei_req_t r;
    int st = 0;
    const char *ty = NULL;
    char err[ERR_LEN] = "";
    ck_assert_msg(lp_tei_parse_inplace(route, own, sizeof(body) - 1, 3, &r, &st, &ty, err, sizeof(err)) == 0, "%s", err);
    ck_assert_msg(r.left == 1, "route %d", route);
    ck_assert_str_eq(r.model, "m\xc3\xa9");
    ck_assert_uint_eq(r.ntexts, 2);
    ck_assert_uint_eq(r.texts[0].len, 2);
    ck_assert(memcmp(r.texts[0].s, "a\n", 2) == 0);
    ck_assert(r.texts[0].s > own && r.texts[0].s < own + sizeof(own)); /* not copied */
    lp_tei_req_free(&r);
  }
  lp_jload_set_min(4096);
}
END_TEST

/* The decoder out of memory is the proxy's failure, never the client's:
 * -ENOMEM with 503 (the front answers it in TEI's dialect), not 400 "not
 * valid JSON", whichever of jansson's allocations fails, while a long text
 * is decoded in place (lp_jload's own failure after the body was changed
 * included). */
static void oom_try(void *ctx, long k) {
  char *own = ctx;
  memcpy(own, jfail_src, jfail_src_len);
  lp_tei_req_t r;
  int st = 0;
  const char *ty = NULL;
  char err[ERR_LEN] = "";
  int rc = lp_tei_parse_inplace(LP_TEI_EMBED, own, jfail_src_len, 3, &r, &st, &ty, err, sizeof(err));
  if (k < 0) ck_assert_msg(rc == 0, "%s", err);
  else ck_assert_msg(rc == -ENOMEM && st == 503 && strcmp(ty, LP_TEI_UNHEALTHY) == 0,
                     "allocation %ld failed: rc %d, status %d (%s)", k, rc, st, err);
  lp_tei_req_free(&r);
}

START_TEST(out_of_memory) {
  static char own[sizeof(jfail_src)];
  ck_assert_int_gt(jfail_body_each("inputs", ", \"truncate\": true", oom_try, own), 0);
}
END_TEST

LP_TEST_MAIN("tei", requests_and_defaults, bad_requests, pair_template, ranks_and_shapes, in_place, out_of_memory)
