/* Tests of scatter: each request gets exactly its own slice of the answer, and
 * answers of the wrong size or form are refused with a message. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "lanepack/layout.h"
#include "lanepack/packer.h"
#include "lanepack/rng.h"
#include "lanepack/scatter.h"

/* A growing string buffer for building answers. */
typedef struct {
  char *s;
  size_t n, cap;
} buf_t;

static void put(buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#include <stdarg.h>
static void put(buf_t *b, const char *fmt, ...) {
  va_list ap;
  if (!b->s) {
    b->cap = 256;
    b->s = malloc(b->cap);
  }
  for (;;) {
    va_start(ap, fmt);
    int k = vsnprintf(b->s + b->n, b->cap - b->n, fmt, ap);
    va_end(ap);
    if ((size_t)k < b->cap - b->n) {
      b->n += (size_t)k;
      return;
    }
    b->cap = b->cap * 2 + 256;
    b->s = realloc(b->s, b->cap);
  }
}

/* Per-token value: the token id itself as text, padding 0; answers use varied
 * spacing so the slices must follow the bytes, not a fixed width. */
static void answer_per_token(buf_t *b, const lp_layout_t *l, int spaced) {
  b->n = 0;
  put(b, "{\"model\": \"m\", \"outputs\": [");
  for (uint32_t lane = 0; lane < l->lanes; lane++) {
    put(b, "%s[", lane ? (spaced ? " ,\n " : ",") : "");
    for (uint32_t k = 0; k < l->bucket; k++)
      put(b, "%s%d", k ? (spaced && k % 3 ? " , " : ",") : "", l->input_ids[(size_t)lane * l->bucket + k]);
    put(b, "]");
  }
  put(b, "], \"extra\": {\"nested\": [1, 2]}}");
}

START_TEST(random_per_token) {
  lp_packer_t *p = lp_packer_new();
  lp_layout_t l;
  lp_scatter_t sc;
  lp_layout_init(&l);
  lp_scatter_init(&sc);
  buf_t b = {0};
  lp_rng_t rng;
  char err[200];
  for (uint64_t seed = 1; seed <= 100; seed++) {
    lp_rng_seed(&rng, seed);
    uint32_t lanes = 1 + (uint32_t)lp_rng_below(&rng, 6), bucket = 4 + (uint32_t)lp_rng_below(&rng, 120);
    size_t n = 1 + (size_t)lp_rng_below(&rng, 40);
    uint32_t lens[64];
    lp_seq_ref_t seqs[64];
    lp_place_t place[64];
    int32_t toks[64][128];
    for (size_t i = 0; i < n; i++) {
      lens[i] = 1 + (uint32_t)lp_rng_below(&rng, bucket);
      for (uint32_t k = 0; k < lens[i]; k++) toks[i][k] = (int32_t)(i * 1000 + k + 1);
      seqs[i] = (lp_seq_ref_t){toks[i], lens[i]};
    }
    lp_pack_params_t prm = {.capacity = bucket, .max_bins = lanes};
    lp_packer_pack(p, LP_ALGO_BFD, &prm, lens, n, place, NULL);
    int ragged = seed % 5 == 0;
    if (ragged) ck_assert_int_eq(lp_layout_build_ragged(&l, place, seqs, n), 0);
    else ck_assert_int_eq(lp_layout_build(&l, lanes, bucket, 0, place, seqs, n), 0);
    answer_per_token(&b, &l, (int)(seed % 2));
    if (ragged) { /* flat form: strip the lane brackets of the one lane */
      char *o = strstr(b.s, "[[");
      memmove(o + 1, o + 2, strlen(o + 2) + 1);
      o = strstr(b.s, "]]");
      memmove(o + 1, o + 2, strlen(o + 2) + 1);
      b.n = strlen(b.s);
    }
    ck_assert_msg(lp_scatter_index(&sc, b.s, b.n, &l, err, sizeof(err)) == 0, "%s", err);
    ck_assert_int_eq(sc.per_segment, 0);
    for (size_t s = 0; s < l.nsegs; s++) {
      const lp_segment_t *g = &l.segs[s];
      const char *start;
      size_t len;
      lp_scatter_slice(&sc, g, &start, &len);
      /* parse the slice back and compare with the request's own tokens */
      char *copy = strndup(start, len), *q = copy;
      for (uint32_t k = 0; k < g->length; k++) {
        while (*q == ' ' || *q == ',' || *q == '\n') q++;
        long v = strtol(q, &q, 10);
        REQUIRE(v == toks[g->item][k]);
      }
      while (*q == ' ') q++;
      ck_assert_int_eq(*q, '\0'); /* nothing of a neighbour */
      free(copy);
    }
  }
  free(b.s);
  lp_scatter_free(&sc);
  lp_layout_free(&l);
  lp_packer_free(p);
}
END_TEST

static lp_layout_t two_lanes(void) {
  static int32_t a[] = {1, 2}, c[] = {3}, d[] = {4, 5, 6};
  lp_seq_ref_t seqs[] = {{a, 2}, {c, 1}, {d, 3}};
  lp_place_t place[] = {{0, 0}, {0, 2}, {1, 0}};
  lp_layout_t l;
  lp_layout_init(&l);
  ck_assert_int_eq(lp_layout_build(&l, 2, 4, 0, place, seqs, 3), 0);
  return l;
}

START_TEST(per_segment) {
  lp_layout_t l = two_lanes();
  lp_scatter_t sc;
  lp_scatter_init(&sc);
  char err[200];
  const char *ans = "{\"segment_outputs\": [[{\"v\": [1]}, \"two\"], [[4, 5]]]}";
  ck_assert_msg(lp_scatter_index(&sc, ans, strlen(ans), &l, err, sizeof(err)) == 0, "%s", err);
  ck_assert_int_eq(sc.per_segment, 1);
  const char *s;
  size_t n;
  lp_scatter_slice(&sc, &l.segs[0], &s, &n);
  ck_assert_int_eq(strncmp(s, "{\"v\": [1]}", n), 0);
  ck_assert_uint_eq(n, 10);
  lp_scatter_slice(&sc, &l.segs[1], &s, &n);
  ck_assert_int_eq(strncmp(s, "\"two\"", n), 0);
  lp_scatter_slice(&sc, &l.segs[2], &s, &n);
  ck_assert_int_eq(strncmp(s, "[4, 5]", n), 0);
  lp_scatter_free(&sc);
  lp_layout_free(&l);
}
END_TEST

START_TEST(wrong_answers) {
  lp_layout_t l = two_lanes();
  lp_scatter_t sc;
  lp_scatter_init(&sc);
  static const struct {
    const char *body, *needle;
  } cases[] = {
      {"[1]", "not a JSON object"},
      {"{\"x\": 1}", "neither"},
      {"{\"outputs\": [[1,2,3,4]]}", "1 lanes"},
      {"{\"outputs\": [[1,2,3,4],[1,2,3]]}", "lane 1 has 3 values, expected 4"},
      {"{\"outputs\": [[1,2,3,4],[1,2,3,4,5]]}", "lane 1 has 5 values"},
      {"{\"outputs\": [[1,2,3,4],[1,2,3,4],[1]]}", "more lanes"},
      {"{\"outputs\": [[1,2,3,4],[1,2,3,4]]} x", "after the JSON"},
      {"{\"outputs\": [[1,2,3,4],[1,2,3,4]]", "truncated"},
      {"{\"outputs\": [[1,2,3,4],[1,2,,4]]}", "not a valid JSON array"},
      {"{\"outputs\": 5}", "not an array of lanes"},
      {"{\"segment_outputs\": [[1],[2]]}", "lane 0 has 1 values, expected 2"},
      {"", "not a JSON object"},
      {"{\"outputs\": [[1,2,3,4],[1,2,3,4]],}", "trailing"},
      /* found by fuzz-answer: the answer ends right after the member name */
      {"{\"segment_outputs\": ", "not an array of lanes"},
      {"{\"outputs\":", "not an array of lanes"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    char err[200] = "";
    int rc = lp_scatter_index(&sc, cases[i].body, strlen(cases[i].body), &l, err, sizeof(err));
    ck_assert_msg(rc == -EPROTO, "case %zu accepted", i);
    ck_assert_msg(strstr(err, cases[i].needle) != NULL, "case %zu: '%s' lacks '%s'", i, err,
                  cases[i].needle);
  }
  lp_scatter_free(&sc);
  lp_layout_free(&l);
}
END_TEST

/* The echoed batch_id is read for the caller to compare: absent, one unsigned
 * integer (repeated the same is still one), or anything else. */
START_TEST(batch_id) {
  lp_layout_t l = two_lanes();
  lp_scatter_t sc;
  lp_scatter_init(&sc);
  static const struct {
    const char *body;
    int state;
    uint64_t id;
  } cases[] = {
      {"{\"outputs\": [[1,2,3,4],[1,2,3,4]]}", LP_SCATTER_ID_NONE, 0},
      {"{\"batch_id\": 7, \"outputs\": [[1,2,3,4],[1,2,3,4]]}", LP_SCATTER_ID_SET, 7},
      {"{\"outputs\": [[1,2,3,4],[1,2,3,4]], \"batch_id\":18446744073709551615 }", LP_SCATTER_ID_SET,
       UINT64_MAX},
      {"{\"batch_id\": 7, \"outputs\": [[1,2,3,4],[1,2,3,4]], \"batch_id\": 7}", LP_SCATTER_ID_SET, 7},
      {"{\"batch_id\": 7, \"outputs\": [[1,2,3,4],[1,2,3,4]], \"batch_id\": 8}", LP_SCATTER_ID_BAD, 0},
      {"{\"batch_id\": \"7\", \"outputs\": [[1,2,3,4],[1,2,3,4]]}", LP_SCATTER_ID_BAD, 0},
      {"{\"batch_id\": 7.0, \"outputs\": [[1,2,3,4],[1,2,3,4]]}", LP_SCATTER_ID_BAD, 0},
      {"{\"batch_id\": 7e0, \"outputs\": [[1,2,3,4],[1,2,3,4]]}", LP_SCATTER_ID_BAD, 0},
      {"{\"batch_id\": -7, \"outputs\": [[1,2,3,4],[1,2,3,4]]}", LP_SCATTER_ID_BAD, 0},
      {"{\"batch_id\": 18446744073709551616, \"outputs\": [[1,2,3,4],[1,2,3,4]]}", LP_SCATTER_ID_BAD, 0},
      {"{\"batch_id\": null, \"outputs\": [[1,2,3,4],[1,2,3,4]]}", LP_SCATTER_ID_BAD, 0},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    char err[200] = "";
    int rc = lp_scatter_index(&sc, cases[i].body, strlen(cases[i].body), &l, err, sizeof(err));
    ck_assert_msg(rc == 0, "case %zu: %s", i, err);
    ck_assert_msg(sc.id_state == cases[i].state, "case %zu: state %d", i, sc.id_state);
    if (cases[i].state == LP_SCATTER_ID_SET) ck_assert_msg(sc.batch_id == cases[i].id, "case %zu", i);
  }
  /* not JSON after the name: refused as any malformed answer */
  static const char *const bad[] = {"{\"batch_id\": 12x, \"outputs\": [[1,2,3,4],[1,2,3,4]]}",
                                    "{\"batch_id\": 012, \"outputs\": [[1,2,3,4],[1,2,3,4]]}",
                                    "{\"batch_id\": "};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    char err[200] = "";
    ck_assert_msg(lp_scatter_index(&sc, bad[i], strlen(bad[i]), &l, err, sizeof(err)) == -EPROTO,
                  "bad %zu accepted", i);
  }
  lp_scatter_free(&sc);
  lp_layout_free(&l);
}
END_TEST

LP_TEST_MAIN("scatter", random_per_token, per_segment, wrong_answers, batch_id)
