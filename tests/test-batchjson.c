/* The batch writer against jansson's reading of its output: ids, segment and
 * position ids, segments, for random layouts (runs of every kind included). */
#include <check.h>
#include <stdio.h>
#include <string.h>
#include <jansson.h>
#include <stdlib.h>

#include "testutil.h"
#include "lanepack/batchjson.h"
#include "lanepack/packer.h"
#include "lanepack/rng.h"

START_TEST(matches_layout) {
  lp_batchjson_t w;
  ck_assert_int_eq(lp_batchjson_init(&w, 64), 0);
  lp_packer_t *p = lp_packer_new();
  lp_layout_t l;
  lp_layout_init(&l);
  lp_buf_t b;
  lp_buf_init(&b);
  lp_rng_t r;
  for (uint64_t seed = 1; seed <= 200; seed++) {
    lp_rng_seed(&r, seed);
    /* buckets past the prebuilt 64 and more than 9 segments per lane happen */
    uint32_t lanes = 1 + (uint32_t)lp_rng_below(&r, 4), bucket = 1 + (uint32_t)lp_rng_below(&r, 100);
    size_t n = (size_t)lp_rng_below(&r, 40);
    uint32_t lens[40];
    lp_seq_ref_t seqs[40];
    lp_place_t place[40];
    int32_t toks[40][100];
    for (size_t i = 0; i < n; i++) {
      lens[i] = 1 + (uint32_t)lp_rng_below(&r, seed % 3 ? 4 : bucket);
      for (uint32_t k = 0; k < lens[i]; k++) toks[i][k] = (int32_t)lp_rng_below(&r, 100000) - 5;
      seqs[i] = (lp_seq_ref_t){toks[i], lens[i]};
    }
    lp_pack_params_t prm = {.capacity = bucket, .max_bins = lanes};
    lp_packer_pack(p, LP_ALGO_FFD, &prm, lens, n, place, NULL);
    int ragged = seed % 7 == 0;
    if (ragged) ck_assert_int_eq(lp_layout_build_ragged(&l, place, seqs, n), 0);
    else ck_assert_int_eq(lp_layout_build(&l, lanes, bucket, -3, place, seqs, n), 0);
    lp_buf_reset(&b);
    /* every other batch carries its requests' ids, one per item, some needing escapes */
    char idtext[64][24];
    const char *item_ids[64];
    int with_ids = seed % 2 == 0 && n <= 64;
    for (size_t i = 0; with_ids && i < n; i++) {
      snprintf(idtext[i], sizeof(idtext[i]), i % 5 ? "req-%zu" : "q\"%zu", i);
      item_ids[i] = idtext[i];
    }
    lp_batchjson_write(&w, &b, &l, seed, "m\"x", with_ids ? item_ids : NULL, NULL);
    json_error_t e;
    json_t *j = json_loadb(b.data, b.len, 0, &e);
    ck_assert_msg(j != NULL, "seed %llu: %s", (unsigned long long)seed, e.text);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "batch_id")), (json_int_t)seed);
    ck_assert_str_eq(json_string_value(json_object_get(j, "model")), "m\"x");
    json_t *ids = json_object_get(j, "input_ids");
    if (ragged) {
      REQUIRE(json_array_size(ids) == l.bucket);
      for (size_t k = 0; k < l.bucket; k++)
        REQUIRE(json_integer_value(json_array_get(ids, k)) == l.input_ids[k]);
      json_t *cu = json_object_get(j, "cu_seqlens");
      REQUIRE(json_array_size(cu) == l.nsegs + 1);
      for (size_t k = 0; k <= l.nsegs; k++)
        REQUIRE(json_integer_value(json_array_get(cu, k)) == l.cu_seqlens[k]);
    } else {
      const char *names[] = {"input_ids", "segment_ids", "position_ids"};
      const int32_t *arrs[] = {l.input_ids, l.segment_ids, l.position_ids};
      for (int a = 0; a < 3; a++) {
        json_t *m = json_object_get(j, names[a]);
        REQUIRE(json_array_size(m) == lanes);
        for (uint32_t lane = 0; lane < lanes; lane++) {
          json_t *row = json_array_get(m, lane);
          REQUIRE(json_array_size(row) == bucket);
          for (uint32_t k = 0; k < bucket; k++)
            REQUIRE(json_integer_value(json_array_get(row, k)) == arrs[a][(size_t)lane * bucket + k]);
        }
      }
      json_t *segs = json_object_get(j, "segments");
      REQUIRE(json_array_size(segs) == l.nsegs);
      for (size_t k = 0; k < l.nsegs; k++) {
        json_t *s = json_array_get(segs, k);
        REQUIRE(json_integer_value(json_object_get(s, "lane")) == l.segs[k].lane);
        REQUIRE(json_integer_value(json_object_get(s, "segment")) == l.segs[k].segment);
        REQUIRE(json_integer_value(json_object_get(s, "offset")) == l.segs[k].offset);
        REQUIRE(json_integer_value(json_object_get(s, "length")) == l.segs[k].length);
      }
    }
    json_t *rids = json_object_get(j, "request_ids");
    if (!with_ids) {
      REQUIRE(rids == NULL);
    } else {
      REQUIRE(json_array_size(rids) == l.nsegs);
      for (size_t k = 0; k < l.nsegs; k++)
        REQUIRE(strcmp(json_string_value(json_array_get(rids, k)), idtext[l.segs[k].item]) == 0);
    }
    json_decref(j);
  }
  lp_buf_free(&b);
  lp_layout_free(&l);
  lp_packer_free(p);
  lp_batchjson_free(&w);
}
END_TEST

LP_TEST_MAIN("batchjson", matches_layout)
