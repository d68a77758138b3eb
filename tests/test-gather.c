/* Gather lists: the JSON batch body read out of one (the clients' token text
 * borrowed, read in random steps, rewound part-way as curl does on a resend)
 * is byte for byte the body written from the numbers; and the list's own
 * edges (a separator taken back across a borrowed piece, seeks). */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "lanepack/batchjson.h"
#include "lanepack/gather.h"
#include "lanepack/packer.h"
#include "lanepack/rectbin.h"
#include "lanepack/rng.h"
#include "lanepack/v2.h"

#define MAXN 48
#define MAXLEN 300

/* Reads g to its end in steps of 1..max bytes into out. */
static size_t read_all(lp_gather_t *g, lp_rng_t *r, char *out, size_t cap, size_t max) {
  size_t got = 0, k;
  do {
    size_t step = 1 + (size_t)lp_rng_below(r, max);
    if (step > cap - got) step = cap - got;
    k = lp_gather_read(g, out + got, step);
    got += k;
  } while (k && got < cap);
  return got;
}

START_TEST(gathered_body_is_the_written_body) {
  lp_batchjson_t w;
  ck_assert_int_eq(lp_batchjson_init(&w, 128), 0);
  lp_packer_t *p = lp_packer_new();
  lp_layout_t l, only;
  lp_layout_init(&l);
  lp_layout_init(&only);
  lp_buf_t want, text[MAXN];
  lp_buf_init(&want);
  for (int i = 0; i < MAXN; i++) lp_buf_init(&text[i]);
  lp_gather_t g;
  lp_gather_init(&g);
  lp_rng_t r;
  static int32_t toks[MAXN][MAXLEN];
  char *got = NULL;
  size_t borrowed = 0;
  for (uint64_t seed = 1; seed <= 300; seed++) {
    lp_rng_seed(&r, seed);
    /* buckets past the prebuilt 128, pad ids of every kind, lanes with more
     * than 9 segments, sequences with and without their text */
    uint32_t lanes = 1 + (uint32_t)lp_rng_below(&r, 6), bucket = 1 + (uint32_t)lp_rng_below(&r, MAXLEN);
    size_t n = (size_t)lp_rng_below(&r, MAXN);
    int32_t pad = seed % 3 == 0 ? 0 : seed % 3 == 1 ? 7 : -3;
    uint32_t lens[MAXN];
    lp_seq_ref_t seqs[MAXN];
    lp_seq_text_t texts[MAXN];
    lp_place_t place[MAXN];
    const char *ids[MAXN];
    for (size_t i = 0; i < n; i++) {
      lens[i] = 1 + (uint32_t)lp_rng_below(&r, seed % 4 ? 6 : bucket);
      for (uint32_t k = 0; k < lens[i]; k++) toks[i][k] = (int32_t)lp_rng_below(&r, 200000) - 50;
      seqs[i] = (lp_seq_ref_t){toks[i], lens[i]};
      lp_buf_reset(&text[i]);
      lp_buf_i32_list(&text[i], toks[i], lens[i]);
      int has = lp_rng_below(&r, 4) != 0;
      texts[i] = (lp_seq_text_t){has ? text[i].data : NULL, has ? text[i].len : 0};
      ids[i] = i % 3 ? "req" : "q\"x";
    }
    lp_pack_params_t prm = {.capacity = bucket, .max_bins = lanes};
    lp_packer_pack(p, LP_ALGO_FFD, &prm, lens, n, place, NULL);
    int ragged = seed % 7 == 0;
    if (ragged) ck_assert_int_eq(lp_layout_build_ragged(&l, place, seqs, n), 0);
    else ck_assert_int_eq(lp_layout_build(&l, lanes, bucket, pad, place, seqs, n), 0);
    /* the reference: every number written, nothing borrowed */
    l.texts = NULL;
    lp_buf_reset(&want);
    lp_batchjson_write(&w, &want, &l, seed, "m", seed % 2 ? ids : NULL, seed % 5 ? NULL : ids);
    ck_assert(!want.oom);
    l.texts = texts;
    lp_gather_reset(&g);
    lp_batchjson_gather(&w, &g, &l, seed, "m", seed % 2 ? ids : NULL, seed % 5 ? NULL : ids);
    borrowed += g.nrefs;
    size_t len = lp_gather_len(&g);
    ck_assert_uint_eq(len, want.len);
    got = realloc(got, len + 1);
    ck_assert_ptr_nonnull(got);
    size_t k = read_all(&g, &r, got, len, 1 + seed * 37 % 5000);
    ck_assert_uint_eq(k, len);
    ck_assert_uint_eq(lp_gather_read(&g, got, 1), 0); /* the end */
    ck_assert_msg(memcmp(got, want.data, len) == 0, "seed %llu: bodies differ", (unsigned long long)seed);
    /* a resend from a random byte on */
    size_t from = (size_t)lp_rng_below(&r, len + 1);
    ck_assert_int_eq(lp_gather_seek(&g, from), 0);
    ck_assert_uint_eq(read_all(&g, &r, got, len - from, 97), len - from);
    ck_assert(memcmp(got, want.data + from, len - from) == 0);
    ck_assert_int_eq(lp_gather_seek(&g, len + 1), -EINVAL);
    /* a segments-only build (no rectangle: what the proxy sends JSON
     * rectangles from) gives the same bytes, with its sequences' text, some
     * of it or none */
    if (!ragged) {
      only.segs_only = 1;
      ck_assert_int_eq(lp_layout_build(&only, lanes, bucket, pad, place, seqs, n), 0);
      for (int with_text = 0; with_text < 2; with_text++) {
        only.texts = with_text ? texts : NULL;
        lp_gather_reset(&g);
        lp_batchjson_gather(&w, &g, &only, seed, "m", seed % 2 ? ids : NULL, seed % 5 ? NULL : ids);
        ck_assert_uint_eq(lp_gather_len(&g), want.len);
        ck_assert_uint_eq(read_all(&g, &r, got, want.len, 211), want.len);
        ck_assert_msg(memcmp(got, want.data, want.len) == 0, "seed %llu: a segments-only body differs (text %d)",
                      (unsigned long long)seed, with_text);
      }
    }
  }
  ck_assert_uint_gt(borrowed, 300); /* text and runs were borrowed, not copied */
  free(got);
  lp_gather_free(&g);
  for (int i = 0; i < MAXN; i++) lp_buf_free(&text[i]);
  lp_buf_free(&want);
  lp_layout_free(&l);
  lp_layout_free(&only);
  lp_packer_free(p);
  lp_batchjson_free(&w);
}
END_TEST

START_TEST(separator_taken_back_across_pieces) {
  static char big[200];
  memset(big, '7', sizeof(big));
  big[sizeof(big) - 1] = ',';
  lp_gather_t g;
  lp_gather_init(&g);
  lp_buf_puts(lp_gather_buf(&g), "[");
  lp_gather_ref(&g, big, sizeof(big)); /* borrowed: it ends the list */
  ck_assert_uint_eq(g.nrefs, 1);
  lp_gather_unput(&g, ',');
  lp_gather_unput(&g, ','); /* no second comma: nothing more goes */
  lp_buf_puts(lp_gather_buf(&g), "]");
  lp_gather_ref(&g, "1,", 2); /* short: copied */
  ck_assert_uint_eq(g.nrefs, 1);
  lp_gather_unput(&g, ',');
  size_t len = lp_gather_len(&g);
  ck_assert_uint_eq(len, 1 + 199 + 1 + 1);
  lp_buf_t out;
  lp_buf_init(&out);
  lp_gather_flatten(&g, &out);
  ck_assert_uint_eq(out.len, len);
  ck_assert_int_eq(out.data[0], '[');
  ck_assert_int_eq(out.data[199], '7');
  ck_assert_int_eq(out.data[200], ']');
  ck_assert_int_eq(out.data[201], '1');
  lp_buf_free(&out);
  lp_gather_free(&g);
}
END_TEST

/* v2 binary: header written, tensors borrowed from the sequences and the
 * runs (lanes of more than LP_RECTBIN_RUNS segments, buckets past the runs),
 * against lp_v2_write over the arrays lp_layout_build fills. */
START_TEST(v2_gathered_body_is_the_written_body) {
  lp_packer_t *p = lp_packer_new();
  lp_layout_t l, only;
  lp_layout_init(&l);
  lp_layout_init(&only);
  only.segs_only = 1;
  lp_buf_t want;
  lp_buf_init(&want);
  lp_gather_t g;
  lp_gather_init(&g);
  lp_rng_t r;
  static int32_t toks[MAXN][MAXLEN];
  char *got = NULL;
  for (uint64_t seed = 1; seed <= 300; seed++) {
    lp_rng_seed(&r, seed);
    uint32_t lanes = 1 + (uint32_t)lp_rng_below(&r, 6), bucket = 1 + (uint32_t)lp_rng_below(&r, MAXLEN);
    size_t n = (size_t)lp_rng_below(&r, MAXN);
    int32_t pad = seed % 3 == 0 ? 0 : seed % 3 == 1 ? 7 : -3;
    lp_rectbin_t rb;
    ck_assert_int_eq(lp_rectbin_init(&rb, 1 + (uint32_t)lp_rng_below(&r, MAXLEN), pad), 0);
    uint32_t lens[MAXN];
    lp_seq_ref_t seqs[MAXN];
    lp_place_t place[MAXN];
    for (size_t i = 0; i < n; i++) {
      lens[i] = 1 + (uint32_t)lp_rng_below(&r, seed % 4 ? 3 : bucket);
      for (uint32_t k = 0; k < lens[i]; k++) toks[i][k] = (int32_t)lp_rng_below(&r, 200000) - 50;
      seqs[i] = (lp_seq_ref_t){toks[i], lens[i]};
    }
    lp_pack_params_t prm = {.capacity = bucket, .max_bins = lanes};
    lp_packer_pack(p, LP_ALGO_FFD, &prm, lens, n, place, NULL);
    ck_assert_int_eq(lp_layout_build(&l, lanes, bucket, pad, place, seqs, n), 0);
    ck_assert_int_eq(lp_layout_build(&only, lanes, bucket, pad, place, seqs, n), 0);
    ck_assert_uint_eq(only.nsegs, l.nsegs);
    ck_assert_uint_eq(only.real_tokens, l.real_tokens);
    const int32_t *data[3] = {l.input_ids, l.segment_ids, l.position_ids};
    static const char *const names[3] = {"input_ids", "segment_ids", "position_ids"};
    int skip = (int)(seed % 4); /* 3: a model without segment ids */
    lp_v2_out_t in[3], head[3];
    int nt = 0;
    for (int k = 0; k < 3; k++) {
      if (k == 1 && skip == 3) continue;
      in[nt] = (lp_v2_out_t){.name = names[k], .dtype = LP_DT_INT32, .ndim = 2, .shape = {lanes, bucket},
                             .data = data[k], .count = (size_t)lanes * bucket};
      head[nt] = in[nt];
      head[nt++].data = NULL;
    }
    size_t hl1, hl2;
    lp_buf_reset(&want);
    ck_assert_int_eq(lp_v2_write(&want, "\"id\":\"1\"", "inputs", in, nt, 1, &hl1), 0);
    lp_gather_reset(&g);
    ck_assert_int_eq(lp_v2_write(lp_gather_buf(&g), "\"id\":\"1\"", "inputs", head, nt, 1, &hl2), 0);
    ck_assert_uint_eq(hl1, hl2);
    for (int k = 0; k < 3; k++)
      if (!(k == 1 && skip == 3)) lp_rectbin_gather(&rb, &g, &only, seqs, k);
    size_t len = lp_gather_len(&g);
    ck_assert_uint_eq(len, want.len);
    got = realloc(got, len + 1);
    ck_assert_ptr_nonnull(got);
    ck_assert_uint_eq(read_all(&g, &r, got, len, 1 + seed * 53 % 3000), len);
    ck_assert_msg(memcmp(got, want.data, len) == 0, "seed %llu: bodies differ", (unsigned long long)seed);
    lp_rectbin_free(&rb);
  }
  free(got);
  lp_gather_free(&g);
  lp_buf_free(&want);
  lp_layout_free(&l);
  lp_layout_free(&only);
  lp_packer_free(p);
}
END_TEST

LP_TEST_MAIN("gather", gathered_body_is_the_written_body, separator_taken_back_across_pieces,
             v2_gathered_body_is_the_written_body)
