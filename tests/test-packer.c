/* Unit and randomized property tests of the packers. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "testutil.h"
#include "lanepack/packer.h"
#include "lanepack/rng.h"

/* Checks every invariant of a packing; returns bins actually holding items. */
static uint32_t check_packing(const lp_pack_params_t *prm, const uint32_t *lens, size_t n,
                              const lp_place_t *out, long placed, uint32_t bins_used) {
  uint32_t nb = bins_used;
  uint32_t *fill = calloc(nb + 1, sizeof(uint32_t));
  uint32_t *segs = calloc(nb + 1, sizeof(uint32_t));
  /* per bin, a slot map to detect overlap */
  uint8_t *slot = calloc((size_t)(nb + 1) * prm->capacity, 1);
  ck_assert(fill && segs && slot);
  long count = 0;
  for (size_t i = 0; i < n; i++) {
    if (out[i].bin < 0) continue;
    count++;
    REQUIRE((uint32_t)out[i].bin < nb);
    if (prm->max_bins) REQUIRE((uint32_t)out[i].bin < prm->max_bins);
    REQUIRE(out[i].offset + lens[i] <= prm->capacity);
    for (uint32_t k = 0; k < lens[i]; k++) {
      uint8_t *s = &slot[(size_t)out[i].bin * prm->capacity + out[i].offset + k];
      REQUIRE(*s == 0);
      *s = 1;
    }
    fill[out[i].bin] += lens[i];
    segs[out[i].bin]++;
  }
  ck_assert_int_eq(count, placed);
  uint32_t nonempty = 0;
  for (uint32_t b = 0; b < nb; b++) {
    REQUIRE(fill[b] <= prm->capacity);
    if (prm->max_segments) REQUIRE(segs[b] <= prm->max_segments);
    nonempty += segs[b] > 0;
  }
  free(fill);
  free(segs);
  free(slot);
  return nonempty;
}

START_TEST(empty_input) {
  lp_packer_t *p = lp_packer_new();
  lp_pack_params_t prm = {.capacity = 8192, .max_bins = 4};
  for (int a = 0; a < LP_ALGO_COUNT; a++) {
    uint32_t bins = 99;
    ck_assert_int_eq(lp_packer_pack(p, (lp_algo_t)a, &prm, NULL, 0, NULL, &bins), 0);
    ck_assert_uint_eq(bins, 0);
  }
  lp_pack_params_t zero = {.capacity = 0};
  uint32_t l = 1;
  lp_place_t o;
  ck_assert_int_eq(lp_packer_pack(p, LP_ALGO_FFD, &zero, &l, 1, &o, NULL), -EINVAL);
  ck_assert_int_eq(lp_packer_pack(p, LP_ALGO_COUNT, &prm, &l, 1, &o, NULL), -EINVAL);
  lp_packer_free(p);
}
END_TEST

START_TEST(exact_and_overflow) {
  lp_packer_t *p = lp_packer_new();
  lp_pack_params_t prm = {.capacity = 8192, .max_bins = 4};
  uint32_t lens[] = {8192, 8193, 1};
  lp_place_t out[3];
  for (int a = 0; a < LP_ALGO_COUNT; a++) {
    uint32_t bins;
    long placed = lp_packer_pack(p, (lp_algo_t)a, &prm, lens, 3, out, &bins);
    ck_assert_int_eq(placed, 2);
    ck_assert_int_ge(out[0].bin, 0);
    ck_assert_uint_eq(out[0].offset, 0);
    ck_assert_int_eq(out[1].bin, -1); /* bucket + 1 never fits */
    ck_assert_int_ge(out[2].bin, 0);
    ck_assert_int_ne(out[2].bin, out[0].bin);
    ck_assert_uint_eq(bins, 2);
  }
  lp_packer_free(p);
}
END_TEST

START_TEST(many_one_token) {
  lp_packer_t *p = lp_packer_new();
  enum { N = 5000 };
  uint32_t *lens = malloc(N * sizeof(uint32_t));
  lp_place_t *out = malloc(N * sizeof(lp_place_t));
  for (int i = 0; i < N; i++) lens[i] = 1;
  for (int a = 0; a < LP_ALGO_COUNT; a++) {
    lp_pack_params_t prm = {.capacity = 2048, .max_bins = 8};
    uint32_t bins;
    long placed = lp_packer_pack(p, (lp_algo_t)a, &prm, lens, N, out, &bins);
    ck_assert_int_eq(placed, N);
    ck_assert_uint_eq(bins, 3); /* ceil(5000 / 2048) */
    check_packing(&prm, lens, N, out, placed, bins);
    /* with a segment cap, each lane takes at most 100 */
    prm.max_segments = 100;
    placed = lp_packer_pack(p, (lp_algo_t)a, &prm, lens, N, out, &bins);
    ck_assert_int_eq(placed, 800);
    check_packing(&prm, lens, N, out, placed, bins);
    /* the lowest indices win among equal lengths */
    for (int i = 0; i < 800; i++) ck_assert_int_ge(out[i].bin, 0);
  }
  free(lens);
  free(out);
  lp_packer_free(p);
}
END_TEST

START_TEST(pinned_first) {
  /* One lane: the pinned short item must be placed though longer ones would
   * otherwise fill the lane first. */
  lp_packer_t *p = lp_packer_new();
  uint32_t lens[] = {300, 600, 500};
  lp_place_t out[3];
  for (int a = 0; a < LP_ALGO_COUNT; a++) {
    lp_pack_params_t prm = {.capacity = 1000, .max_bins = 1, .n_pinned = 1};
    long placed = lp_packer_pack(p, (lp_algo_t)a, &prm, lens, 3, out, NULL);
    ck_assert_int_eq(placed, 2);
    ck_assert_int_eq(out[0].bin, 0);
    ck_assert_int_eq(out[1].bin, 0); /* 600 after the pinned 300 */
    ck_assert_int_eq(out[2].bin, -1);
    prm.n_pinned = 0;
    placed = lp_packer_pack(p, (lp_algo_t)a, &prm, lens, 3, out, NULL);
    ck_assert_int_eq(out[1].bin, 0); /* decreasing: 600 first, then 300 */
    ck_assert_int_eq(out[0].bin, 0);
  }
  lp_packer_free(p);
}
END_TEST

START_TEST(best_fit_differs) {
  /* Capacity 10: 8 | 5 4 | 3, then 1 goes to the first lane with room under
   * first fit (gap 2) but to the tightest gap (1) under best fit. */
  lp_packer_t *p = lp_packer_new();
  uint32_t lens[] = {8, 5, 4, 3, 1};
  lp_place_t out[5];
  lp_pack_params_t prm = {.capacity = 10};
  uint32_t bins;
  ck_assert_int_eq(lp_packer_pack(p, LP_ALGO_FFD, &prm, lens, 5, out, &bins), 5);
  ck_assert_uint_eq(bins, 3);
  ck_assert_int_eq(out[4].bin, out[0].bin);
  ck_assert_uint_eq(out[4].offset, 8);
  ck_assert_int_eq(lp_packer_pack(p, LP_ALGO_BFD, &prm, lens, 5, out, &bins), 5);
  ck_assert_uint_eq(bins, 3);
  ck_assert_int_eq(out[4].bin, out[1].bin);
  ck_assert_int_eq(out[2].bin, out[1].bin);
  ck_assert_uint_eq(out[4].offset, 9);
  lp_packer_free(p);
}
END_TEST

START_TEST(random_properties) {
  lp_packer_t *p = lp_packer_new();
  lp_rng_t rng;
  for (uint64_t seed = 1; seed <= 300; seed++) {
    lp_rng_seed(&rng, seed);
    size_t n = (size_t)lp_rng_below(&rng, 400);
    uint32_t cap = 16 + (uint32_t)lp_rng_below(&rng, 2000);
    uint32_t *lens = malloc((n + 1) * sizeof(uint32_t));
    lp_place_t *out = malloc((n + 1) * sizeof(lp_place_t));
    int shape = (int)lp_rng_below(&rng, 3);
    for (size_t i = 0; i < n; i++) {
      if (shape == 0) lens[i] = 1 + (uint32_t)lp_rng_below(&rng, cap + cap / 8); /* some too long */
      else if (shape == 1) lens[i] = 1 + (uint32_t)lp_rng_below(&rng, cap / 8 + 1);
      else lens[i] = 1 + (uint32_t)lp_rng_below(&rng, 4) * (cap / 4);
    }
    lp_pack_params_t prm = {.capacity = cap};
    prm.max_bins = lp_rng_below(&rng, 2) ? 0 : 1 + (uint32_t)lp_rng_below(&rng, 16);
    prm.max_segments = lp_rng_below(&rng, 2) ? 0 : 1 + (uint32_t)lp_rng_below(&rng, 8);
    prm.n_pinned = (uint32_t)lp_rng_below(&rng, 5);
    long bfd_bins = -1;
    for (int a = 0; a < LP_ALGO_COUNT; a++) {
      uint32_t bins;
      long placed = lp_packer_pack(p, (lp_algo_t)a, &prm, lens, n, out, &bins);
      ck_assert_int_ge(placed, 0);
      uint32_t used = check_packing(&prm, lens, n, out, placed, bins);
      ck_assert_uint_eq(used, bins); /* no empty bin is counted */
      size_t fit = 0;
      for (size_t i = 0; i < n; i++) fit += lens[i] <= cap;
      if (prm.max_bins == 0) {
        /* unlimited lanes: everything that fits is placed exactly once */
        ck_assert_int_eq(placed, (long)fit);
        if (prm.max_segments == 0) {
          /* any-fit property: at most one lane is half full or less */
          uint32_t *fill = calloc(bins + 1, sizeof(uint32_t));
          for (size_t i = 0; i < n; i++)
            if (out[i].bin >= 0) fill[out[i].bin] += lens[i];
          int half = 0;
          for (uint32_t b = 0; b < bins; b++) half += 2 * fill[b] <= cap;
          ck_assert_int_le(half, 1);
          free(fill);
        }
      }
      /* a pinned item that fits alone in an empty lane is never dropped while
       * lanes are left over */
      if (prm.max_bins == 0 || prm.n_pinned <= prm.max_bins)
        for (size_t i = 0; i < prm.n_pinned && i < n; i++)
          if (lens[i] <= cap && (prm.max_bins == 0 || i < prm.max_bins))
            ck_assert_msg(out[i].bin >= 0 || prm.max_bins, "pinned %zu dropped", i);
      /* SPFHP is best-fit decreasing over groups: same lane count as BFD when
       * no segment cap makes equal-capacity lanes differ */
      if (prm.max_segments == 0 && prm.n_pinned == 0) {
        if (a == LP_ALGO_BFD) bfd_bins = bins;
        if (a == LP_ALGO_SPFHP) ck_assert_int_eq((long)bins, bfd_bins);
      }
    }
    free(lens);
    free(out);
  }
  lp_packer_free(p);
}
END_TEST

START_TEST(spfhp_histogram) {
  lp_packer_t *p = lp_packer_new();
  uint64_t count[101] = {0};
  count[60] = 1000; /* each needs its own lane... */
  count[40] = 1000; /* ...and a 40 completes it */
  count[10] = 5;    /* 5 more tokens x10: one lane */
  ck_assert_int_eq(lp_packer_spfhp_bins(p, count, 100, 0), 1001);
  /* with two segments per lane, the 10s cannot join the full pairs */
  ck_assert_int_eq(lp_packer_spfhp_bins(p, count, 100, 2), 1003);
  /* millions of sequences cost no more than their distinct lengths */
  uint64_t big[9] = {0};
  big[8] = 3000000000ull;
  ck_assert_int_eq(lp_packer_spfhp_bins(p, big, 8, 0), 3000000000l);
  lp_packer_free(p);
}
END_TEST

START_TEST(names) {
  ck_assert_int_eq(lp_algo_parse("bfd"), LP_ALGO_BFD);
  ck_assert_int_eq(lp_algo_parse("spfhp"), LP_ALGO_SPFHP);
  ck_assert_int_eq(lp_algo_parse("nope"), -EINVAL);
  ck_assert_str_eq(lp_algo_name(LP_ALGO_FFD), "ffd");
}
END_TEST

/* Reusing one packer across capacities and algorithms gives what a fresh one
 * gives: the best-fit index left by a call (bins of any capacity, SPFHP groups,
 * a first-fit tree in between) does not leak into the next. */
START_TEST(reuse_across_capacities) {
  lp_packer_t *p = lp_packer_new(), *q;
  uint32_t lens[200];
  lp_place_t a[200], b[200];
  uint64_t x = 12345;
  const uint32_t caps[] = {8192, 2048, 512, 8192, 100000, 64, 2048};
  const lp_algo_t algos[] = {LP_ALGO_BFD, LP_ALGO_SPFHP, LP_ALGO_FFD};
  for (int round = 0; round < 60; round++) {
    uint32_t cap = caps[round % 7];
    lp_algo_t algo = algos[round % 3];
    size_t n = 1 + (size_t)(round * 37 % 200);
    for (size_t i = 0; i < n; i++) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      lens[i] = 1 + (uint32_t)((x >> 33) % cap);
    }
    lp_pack_params_t prm = {.capacity = cap, .max_bins = (uint32_t)(round % 5 ? 4 + round % 9 : 0),
                            .max_segments = (uint32_t)(round % 4), .n_pinned = (uint32_t)(round % 3)};
    uint32_t ua, ub;
    long ra = lp_packer_pack(p, algo, &prm, lens, n, a, &ua);
    q = lp_packer_new();
    long rb = lp_packer_pack(q, algo, &prm, lens, n, b, &ub);
    lp_packer_free(q);
    ck_assert_int_eq(ra, rb);
    ck_assert_uint_eq(ua, ub);
    for (size_t i = 0; i < n; i++) {
      ck_assert_int_eq(a[i].bin, b[i].bin);
      ck_assert_uint_eq(a[i].offset, b[i].offset);
    }
  }
  lp_packer_free(p);
}
END_TEST

/* A decision costs what its items cost, not the bucket: packing a few items
 * into a very long bucket, thousands of times, must not clear a bucket-sized
 * index each time (that was ~20 MB per call at 2^20 tokens; about a minute of
 * memset for this loop, against milliseconds). The bound is far from both. */
START_TEST(best_fit_cost_does_not_grow_with_the_bucket) {
  lp_packer_t *p = lp_packer_new();
  uint32_t lens[8] = {1000, 700, 500, 300, 90000, 4000, 12, 1};
  lp_place_t out[8];
  lp_pack_params_t prm = {.capacity = 1u << 20, .max_bins = 2};
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int i = 0; i < 6000; i++) {
    REQUIRE(lp_packer_pack(p, LP_ALGO_BFD, &prm, lens, 8, out, NULL) == 8);
    uint64_t count[65] = {0};
    count[64] = 3;
    REQUIRE(lp_packer_spfhp_bins(p, count, 64, 0) == 3);
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
  ck_assert_msg(s < 3.0, "6000 best-fit packs into a 2^20 bucket took %.2f s", s);
  lp_packer_free(p);
}
END_TEST

LP_TEST_MAIN("packer", empty_input, exact_and_overflow, many_one_token, pinned_first, best_fit_differs, random_properties, spfhp_histogram, names, reuse_across_capacities, best_fit_cost_does_not_grow_with_the_bucket)
