/* Unit and property tests of the batch layout: ids, segment and position ids,
 * segments, padding, ragged form, and rejection of bad placements. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "lanepack/layout.h"
#include "lanepack/packer.h"
#include "lanepack/rng.h"

START_TEST(small_rectangle) {
  int32_t a[] = {11, 12, 13}, b[] = {21, 22}, c[] = {31, 32, 33, 34};
  lp_seq_ref_t seqs[] = {{a, 3}, {b, 2}, {c, 4}};
  /* lane 0: b at 0, a at 2 ; lane 1: c at 1 (a gap before it) */
  lp_place_t place[] = {{0, 2}, {0, 0}, {1, 1}};
  lp_layout_t l;
  lp_layout_init(&l);
  ck_assert_int_eq(lp_layout_build(&l, 2, 6, -1, place, seqs, 3), 0);
  int32_t ids[] = {21, 22, 11, 12, 13, -1, -1, 31, 32, 33, 34, -1};
  int32_t sid[] = {1, 1, 2, 2, 2, 0, 0, 1, 1, 1, 1, 0};
  int32_t pos[] = {0, 1, 0, 1, 2, 0, 0, 0, 1, 2, 3, 0};
  for (int i = 0; i < 12; i++) {
    ck_assert_int_eq(l.input_ids[i], ids[i]);
    ck_assert_int_eq(l.segment_ids[i], sid[i]);
    ck_assert_int_eq(l.position_ids[i], pos[i]);
  }
  ck_assert_uint_eq(l.nsegs, 3);
  ck_assert_uint_eq(l.segs[0].item, 1);
  ck_assert_uint_eq(l.segs[1].item, 0);
  ck_assert_uint_eq(l.segs[1].segment, 2);
  ck_assert_uint_eq(l.segs[2].lane, 1);
  ck_assert_uint_eq(l.segs[2].offset, 1);
  ck_assert_uint_eq(l.real_tokens, 9);
  ck_assert_uint_eq(l.max_seqlen, 4);
  lp_layout_free(&l);
}
END_TEST

START_TEST(bad_placements) {
  int32_t a[] = {1, 2, 3, 4};
  lp_seq_ref_t seqs[] = {{a, 4}, {a, 3}};
  lp_layout_t l;
  lp_layout_init(&l);
  lp_place_t overlap[] = {{0, 0}, {0, 3}};
  ck_assert_int_eq(lp_layout_build(&l, 1, 8, 0, overlap, seqs, 2), -EINVAL);
  lp_place_t past_end[] = {{0, 0}, {0, 6}};
  ck_assert_int_eq(lp_layout_build(&l, 1, 8, 0, past_end, seqs, 2), -EINVAL);
  lp_place_t bad_lane[] = {{0, 0}, {1, 0}};
  ck_assert_int_eq(lp_layout_build(&l, 1, 8, 0, bad_lane, seqs, 2), -EINVAL);
  lp_place_t left_out[] = {{0, 4}, {-1, 0}};
  ck_assert_int_eq(lp_layout_build(&l, 1, 8, 0, left_out, seqs, 2), 0);
  ck_assert_uint_eq(l.nsegs, 1);
  ck_assert_int_eq(l.input_ids[0], 0); /* pad before */
  ck_assert_int_eq(l.input_ids[4], 1);
  ck_assert_int_eq(lp_layout_build(&l, 0, 8, 0, left_out, seqs, 2), -EINVAL);
  lp_layout_free(&l);
}
END_TEST

START_TEST(ragged) {
  int32_t a[] = {1, 2, 3}, b[] = {4}, c[] = {5, 6};
  lp_seq_ref_t seqs[] = {{a, 3}, {b, 1}, {c, 2}};
  lp_place_t place[] = {{0, 0}, {-1, 0}, {0, 3}};
  lp_layout_t l;
  lp_layout_init(&l);
  ck_assert_int_eq(lp_layout_build_ragged(&l, place, seqs, 3), 0);
  ck_assert_int_eq(l.ragged, 1);
  ck_assert_uint_eq(l.nsegs, 2);
  ck_assert_int_eq(l.cu_seqlens[0], 0);
  ck_assert_int_eq(l.cu_seqlens[1], 3);
  ck_assert_int_eq(l.cu_seqlens[2], 5);
  ck_assert_uint_eq(l.max_seqlen, 3);
  ck_assert_uint_eq(l.bucket, 5);
  int32_t ids[] = {1, 2, 3, 5, 6};
  for (int i = 0; i < 5; i++) ck_assert_int_eq(l.input_ids[i], ids[i]);
  ck_assert_uint_eq(l.segs[1].item, 2);
  ck_assert_int_eq(lp_layout_build_ragged(&l, NULL, seqs, 3), 0);
  ck_assert_uint_eq(l.nsegs, 3);
  lp_layout_free(&l);
}
END_TEST

START_TEST(random_from_packer) {
  lp_packer_t *p = lp_packer_new();
  lp_layout_t l;
  lp_layout_init(&l);
  lp_rng_t rng;
  for (uint64_t seed = 1; seed <= 200; seed++) {
    lp_rng_seed(&rng, seed);
    uint32_t lanes = 1 + (uint32_t)lp_rng_below(&rng, 8), bucket = 8 + (uint32_t)lp_rng_below(&rng, 300);
    size_t n = (size_t)lp_rng_below(&rng, 60);
    uint32_t *lens = malloc((n + 1) * sizeof(uint32_t));
    lp_seq_ref_t *seqs = malloc((n + 1) * sizeof(lp_seq_ref_t));
    lp_place_t *place = malloc((n + 1) * sizeof(lp_place_t));
    int32_t **toks = malloc((n + 1) * sizeof(int32_t *));
    for (size_t i = 0; i < n; i++) {
      lens[i] = 1 + (uint32_t)lp_rng_below(&rng, bucket);
      toks[i] = malloc(lens[i] * sizeof(int32_t));
      for (uint32_t k = 0; k < lens[i]; k++) toks[i][k] = (int32_t)(i * 1000 + k + 1);
      seqs[i] = (lp_seq_ref_t){toks[i], lens[i]};
    }
    lp_pack_params_t prm = {.capacity = bucket, .max_bins = lanes};
    lp_algo_t algo = (lp_algo_t)(seed % LP_ALGO_COUNT);
    long placed = lp_packer_pack(p, algo, &prm, lens, n, place, NULL);
    ck_assert_int_ge(placed, 0);
    ck_assert_int_eq(lp_layout_build(&l, lanes, bucket, 0, place, seqs, n), 0);
    ck_assert_uint_eq(l.nsegs, (size_t)placed);
    /* every placed token is where the placement says, with its ids */
    uint64_t real = 0;
    for (size_t i = 0; i < n; i++) {
      if (place[i].bin < 0) continue;
      size_t base = (size_t)place[i].bin * bucket + place[i].offset;
      for (uint32_t k = 0; k < lens[i]; k++) {
        REQUIRE(l.input_ids[base + k] == toks[i][k]);
        REQUIRE(l.position_ids[base + k] == (int32_t)k);
        REQUIRE(l.segment_ids[base + k] == l.segment_ids[base]);
      }
      real += lens[i];
    }
    /* padding slots are exactly the rest; segment ids count up 1, 2, ... */
    uint64_t pad = 0;
    for (uint32_t lane = 0; lane < lanes; lane++) {
      int32_t last = 0;
      for (uint32_t k = 0; k < bucket; k++) {
        int32_t sid = l.segment_ids[(size_t)lane * bucket + k];
        if (sid == 0) {
          pad++;
          REQUIRE(l.input_ids[(size_t)lane * bucket + k] == 0);
          REQUIRE(l.position_ids[(size_t)lane * bucket + k] == 0);
        } else {
          REQUIRE(sid == last || sid == last + 1);
          last = sid;
        }
      }
    }
    ck_assert_uint_eq(pad + real, (uint64_t)lanes * bucket);
    ck_assert_uint_eq(l.real_tokens, real);
    /* without the id arrays (skip_ids), the same tokens and segments, and the
     * id arrays untouched (a JSON batch derives them from the segments) */
    lp_layout_t q;
    memset(&q, 0, sizeof(q));
    q.skip_ids = 1;
    ck_assert_int_eq(lp_layout_build(&q, lanes, bucket, 0, place, seqs, n), 0);
    memset(q.segment_ids, 0x5a, (size_t)lanes * bucket * sizeof(int32_t));
    ck_assert_int_eq(lp_layout_build(&q, lanes, bucket, 0, place, seqs, n), 0);
    ck_assert_int_eq(memcmp(q.input_ids, l.input_ids, (size_t)lanes * bucket * sizeof(int32_t)), 0);
    ck_assert_uint_eq(q.nsegs, l.nsegs);
    ck_assert_int_eq(memcmp(q.segs, l.segs, l.nsegs * sizeof(lp_segment_t)), 0);
    ck_assert_int_eq(q.segment_ids[0], 0x5a5a5a5a);
    lp_layout_free(&q);
    for (size_t i = 0; i < n; i++) free(toks[i]);
    free(toks); free(lens); free(seqs); free(place);
  }
  lp_layout_free(&l);
  lp_packer_free(p);
}
END_TEST

LP_TEST_MAIN("layout", small_rectangle, bad_placements, ragged, random_from_packer)
