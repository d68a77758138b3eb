/* Differential tests of the 64-bytes-at-a-time readers of integer arrays (the
 * token reader lp_jscan_int_array and the backend answer's index in scatter)
 * against their byte-at-a-time reference loops and an independent reader
 * written here, over random arrays in every spacing, edge values and random
 * corruptions; and of the portable byte-class masks against a byte loop. */
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "lanepack/batchjson.h"
#include "lanepack/jscan.h"
#include "lanepack/packer.h"
#include "lanepack/layout.h"
#include "lanepack/rng.h"
#include "lanepack/scatter.h"

#define LP_SCAN64_PORTABLE 1
#include "../src/core/scan64.h"

typedef struct {
  char *s;
  size_t n, cap;
} text_t;

static void put(text_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(text_t *b, const char *fmt, ...) {
  va_list ap;
  for (;;) {
    va_start(ap, fmt);
    int k = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? b->cap - b->n : 0, fmt, ap);
    va_end(ap);
    if (b->s && (size_t)k < b->cap - b->n) {
      b->n += (size_t)k;
      return;
    }
    b->cap = b->cap * 2 + (size_t)k + 256;
    b->s = realloc(b->s, b->cap);
  }
}

/* A value as the readers meet them: mostly plain integers of every length
 * (edges: 0, 9, 10, 99999999, 100000000, INT32 limits), sometimes what only
 * the scalar loop takes or rejects (signs, leading zeros, fractions,
 * exponents, strings, nesting, 19+ digits). */
static void put_value(text_t *b, lp_rng_t *r, int odd_rate) {
  static const char *const edge[] = {"0", "9", "10", "99999999", "100000000", "2147483647",
                                     "2147483648", "4294967295", "4294967296", "12345678",
                                     "1234567", "999999999999999999", "9999999999999999999"};
  static const char *const odd[] = {"-1", "-0", "00", "01", "0.5", "1e3", "1E+2", "\"7\"",
                                    "[1]", "true", "null", "-", "1.", "12345678901234567890123",
                                    "{}", "-2147483648", "1.0e-2"};
  if (odd_rate && lp_rng_below(r, 1000) < (uint64_t)odd_rate) {
    put(b, "%s", odd[lp_rng_below(r, sizeof(odd) / sizeof(odd[0]))]);
    return;
  }
  switch (lp_rng_below(r, 8)) {
    case 0: put(b, "%s", edge[lp_rng_below(r, sizeof(edge) / sizeof(edge[0]))]); return;
    case 1: put(b, "0"); return;
    case 2: put(b, "%" PRIu64, lp_rng_below(r, 10)); return;
    case 3: put(b, "%" PRIu64, lp_rng_below(r, 32000)); return;
    case 4: put(b, "%" PRIu64, lp_rng_below(r, 1000000007)); return;
    default: {
      uint64_t digits = 1 + lp_rng_below(r, 10);
      uint64_t v = lp_rng_next(r) % 10000000000ULL;
      uint64_t lim = 1;
      for (uint64_t i = 0; i < digits; i++) lim *= 10;
      put(b, "%" PRIu64, v % lim);
    }
  }
}

/* A separator in one of the spellings backends and clients use. */
static void put_sep(text_t *b, lp_rng_t *r, int style) {
  static const char *const seps[] = {",", ", ", " ,", " , ", ",\n", ",  ", ",\t", ",                                                                          "};
  if (style == 0) put(b, ",");
  else if (style == 1) put(b, ", ");
  else put(b, "%s", seps[lp_rng_below(r, sizeof(seps) / sizeof(seps[0]))]);
}

/* An array of n values; the text may then be cut or have bytes changed. */
static void put_array(text_t *b, lp_rng_t *r, size_t n, int style, int odd_rate) {
  put(b, "[");
  for (size_t i = 0; i < n; i++) {
    if (i) put_sep(b, r, style);
    put_value(b, r, odd_rate);
  }
  put(b, style >= 2 && lp_rng_below(r, 2) ? " ]" : "]");
}

static void corrupt(text_t *b, lp_rng_t *r) {
  static const char bytes[] = "0123456789, -.eE]\"[x\n";
  switch (lp_rng_below(r, 4)) {
    case 0: break;
    case 1: if (b->n > 1) b->n = 1 + lp_rng_below(r, b->n - 1); break; /* cut short */
    default:
      for (uint64_t k = 1 + lp_rng_below(r, 3); k > 0 && b->n > 1; k--)
        b->s[1 + lp_rng_below(r, b->n - 1)] = bytes[lp_rng_below(r, sizeof(bytes) - 1)];
  }
}

/* The independent reader: byte by byte, the integer grammar of JSON, values in
 * [min, max]. Returns the byte after the array or NULL; only valid arrays are
 * compared value by value. */
static const char *ref_ints(const char *p, const char *end, int32_t *out, size_t cap,
                            int64_t min, int64_t max, size_t *n) {
  *n = 0;
  if (p >= end || *p != '[') return NULL;
  p++;
#define WS() while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++
  WS();
  if (p < end && *p == ']') return p + 1;
  for (;;) {
    int neg = 0;
    if (p < end && *p == '-') neg = 1, p++;
    if (p >= end || *p < '0' || *p > '9') return NULL;
    const char *d = p;
    int64_t v = 0;
    while (p < end && *p >= '0' && *p <= '9') {
      if (p - d >= 12) return NULL;
      v = v * 10 + (*p++ - '0');
    }
    if (p - d > 1 && *d == '0') return NULL;
    if (p < end && (*p == '.' || *p == 'e' || *p == 'E')) return NULL;
    if (neg) v = -v;
    if (v < min || v > max || *n == cap) return NULL;
    out[(*n)++] = (int32_t)v;
    WS();
    if (p >= end) return NULL;
    if (*p == ']') return p + 1;
    if (*p != ',') return NULL;
    p++;
    WS();
  }
#undef WS
}

START_TEST(masks_match_a_byte_loop) {
  lp_rng_t r;
  lp_rng_seed(&r, 11);
  static const char pool[] = "0123456789,, ,  /:[]-.\n\t\r\v\f\x80\xb0\xb9\xff\x2f\x3a\xac\xa0";
  char block[64];
  for (int it = 0; it < 200000; it++) {
    for (int i = 0; i < 64; i++)
      block[i] = it % 7 == 0 ? (char)lp_rng_below(&r, 256) : pool[lp_rng_below(&r, sizeof(pool) - 1)];
    lp_scan64_t m;
    lp_scan64(block, &m);
    uint64_t d = 0, c = 0, s = 0;
    for (int i = 0; i < 64; i++) {
      unsigned char x = (unsigned char)block[i];
      if (x >= '0' && x <= '9') d |= 1ULL << i;
      if (x == ',') c |= 1ULL << i;
      if (x == ' ' || x == '\t' || x == '\n' || x == '\r') s |= 1ULL << i;
    }
    REQUIRE(m.digit == d);
    REQUIRE(m.comma == c);
    REQUIRE(m.space == s);
    unsigned nd = 0, nz = 0;
    uint64_t z = 0;
    for (int i = 0; i < 64; i++) {
      nd += (unsigned)(d >> i & 1);
      if (block[i] == '0') z |= 1ULL << i, nz++;
    }
    REQUIRE(m.zero == z);
    REQUIRE(lp__popcount64(d) == nd && lp__popcount64(z) == nz);
  }
}
END_TEST

/* The token reader, fast and scalar, over the same text: the same result, the
 * same count, the same error and the same values; and, where the text is a
 * valid array, the independent reader's values. */
static void check_ints(const char *s, size_t len, int64_t min, int64_t max, size_t cap,
                       int32_t *a, int32_t *b, int32_t *c) {
  size_t na, nb, nc;
  int ea, eb;
  lp_jscan_set_fast(1);
  const char *ra = lp_jscan_int_array(s, s + len, a, cap, min, max, &na, &ea);
  lp_jscan_set_fast(0);
  const char *rb = lp_jscan_int_array(s, s + len, b, cap, min, max, &nb, &eb);
  lp_jscan_set_fast(1);
  if (ra != rb || na != nb || (!ra && ea != eb)) {
    ck_abort_msg("fast and scalar differ on %.*s: end %td/%td n %zu/%zu err %d/%d", (int)(len > 300 ? 300 : len), s,
                 ra ? ra - s : -1, rb ? rb - s : -1, na, nb, ea, eb);
  }
  REQUIRE(memcmp(a, b, na * sizeof(int32_t)) == 0);
  const char *rc = ref_ints(s, s + len, c, cap, min, max, &nc);
  REQUIRE((rc != NULL) == (ra != NULL));
  if (ra) {
    REQUIRE(rc == ra);
    REQUIRE(nc == na);
    REQUIRE(memcmp(a, c, na * sizeof(int32_t)) == 0);
  }
}

START_TEST(token_reader_matches_references) {
  lp_rng_t r;
  lp_rng_seed(&r, 5);
  text_t t = {0};
  size_t cap = 4096;
  int32_t *a = malloc(cap * sizeof(int32_t)), *b = malloc(cap * sizeof(int32_t)),
          *c = malloc(cap * sizeof(int32_t));
  static const int64_t mins[] = {0, INT32_MIN, -5, 10};
  static const int64_t maxs[] = {INT32_MAX, 31999, 99999999, 100000000, 9, 1000000006};
  for (int it = 0; it < 6000; it++) {
    t.n = 0;
    size_t n = it % 10 == 0 ? lp_rng_below(&r, 4) : lp_rng_below(&r, 700);
    int odd = it % 3 == 0 ? 0 : (int)lp_rng_below(&r, 30);
    put_array(&t, &r, n, (int)lp_rng_below(&r, 3), odd);
    if (it % 2) corrupt(&t, &r);
    size_t use_cap = it % 5 == 0 ? lp_rng_below(&r, n + 2) : cap;
    int64_t mn = mins[lp_rng_below(&r, 4)], mx = maxs[lp_rng_below(&r, 6)];
    if (it % 4 != 0) mn = 0, mx = INT32_MAX; /* the proxy's own range, mostly */
    check_ints(t.s, t.n, mn, mx, use_cap, a, b, c);
    /* trailing bytes after the array and every cut of the tail (reads near end) */
    if (it % 50 == 0)
      for (size_t cut = t.n > 80 ? t.n - 80 : 0; cut <= t.n; cut++) check_ints(t.s, cut, mn, mx, use_cap, a, b, c);
  }
  free(a);
  free(b);
  free(c);
  free(t.s);
}
END_TEST

/* The answer's index, fast and scalar, over the same answer: the same result
 * and message, and for every segment the same slice, one run of whole values
 * of the text. */
static void check_index(const char *s, size_t len, const lp_layout_t *l) {
  lp_scatter_t fa, sb;
  lp_scatter_init(&fa);
  lp_scatter_init(&sb);
  char ea[256] = "", eb[256] = "";
  lp_jscan_set_fast(1);
  int ra = lp_scatter_index(&fa, s, len, l, ea, sizeof(ea));
  lp_jscan_set_fast(0);
  int rb = lp_scatter_index(&sb, s, len, l, eb, sizeof(eb));
  lp_jscan_set_fast(1);
  if (ra != rb || strcmp(ea, eb) != 0)
    ck_abort_msg("fast and scalar differ: %d '%s' / %d '%s' on %.*s", ra, ea, rb, eb,
                 (int)(len > 300 ? 300 : len), s);
  if (ra == 0) {
    REQUIRE(fa.id_state == sb.id_state && fa.batch_id == sb.batch_id);
    REQUIRE(memcmp(fa.lane_start, sb.lane_start, ((size_t)l->lanes + 1) * sizeof(uint32_t)) == 0);
    for (size_t g = 0; g < l->nsegs; g++) {
      const char *a, *b;
      size_t na, nb;
      lp_scatter_slice(&fa, &l->segs[g], &a, &na);
      lp_scatter_slice(&sb, &l->segs[g], &b, &nb);
      if (a != b || na != nb)
        ck_abort_msg("segment %zu (lane %u, offset %u, length %u): fast %td+%zu, scalar %td+%zu", g,
                     l->segs[g].lane, l->segs[g].offset, l->segs[g].length, a - s, na, b - s, nb);
      /* the slice is its values and their separators: a JSON array once wrapped */
      char *w = malloc(nb + 2);
      w[0] = '[';
      memcpy(w + 1, b, nb);
      w[nb + 1] = ']';
      REQUIRE(lp_jscan_skip(w, w + nb + 2, 4) == w + nb + 2);
      free(w);
    }
  }
  lp_scatter_free(&fa);
  lp_scatter_free(&sb);
}

START_TEST(answer_index_matches_scalar) {
  lp_rng_t r;
  lp_rng_seed(&r, 9);
  text_t t = {0};
  lp_segment_t segs[400];
  for (int it = 0; it < 3000; it++) {
    lp_layout_t l;
    memset(&l, 0, sizeof(l));
    l.ragged = it % 4 == 0;
    l.lanes = l.ragged ? 1 : 1 + (uint32_t)lp_rng_below(&r, 4);
    l.bucket = (uint32_t)lp_rng_below(&r, it % 10 == 0 ? 4 : 400);
    /* segments: runs of each lane with gaps, of every length (1 included) */
    l.segs = segs;
    for (uint32_t lane = 0; lane < l.lanes; lane++) {
      uint32_t at = (uint32_t)lp_rng_below(&r, 3), no = 0;
      while (at < l.bucket && l.nsegs < 400) {
        uint32_t len = 1 + (uint32_t)lp_rng_below(&r, it % 3 ? 80 : 4);
        if (at + len > l.bucket) len = l.bucket - at;
        segs[l.nsegs++] = (lp_segment_t){lane, ++no, at, len, (uint32_t)l.nsegs};
        at += len + (uint32_t)lp_rng_below(&r, 3);
      }
    }
    int style = (int)lp_rng_below(&r, 3);
    int odd = it % 3 == 0 ? 0 : (int)lp_rng_below(&r, 20);
    t.n = 0;
    put(&t, "{\"batch_id\": %d, \"outputs\": ", it);
    if (l.ragged) {
      put_array(&t, &r, l.bucket + (it % 17 == 0), style, odd);
    } else {
      put(&t, "[");
      for (uint32_t lane = 0; lane < l.lanes; lane++) {
        if (lane) put_sep(&t, &r, style);
        put_array(&t, &r, l.bucket + (it % 17 == 0 && lane == 0), style, odd);
      }
      put(&t, "]");
    }
    put(&t, "}");
    if (it % 2) corrupt(&t, &r);
    check_index(t.s, t.n, &l);
  }
  free(t.s);
}
END_TEST

START_TEST(plain_ints_matches_a_byte_loop) {
  lp_rng_t r;
  lp_rng_seed(&r, 13);
  static const char pool[] = "0123456789012345678901234567890123456789,,,,,, -.\n]\x80\xb0";
  char s[300];
  for (int it = 0; it < 100000; it++) {
    size_t n = lp_rng_below(&r, sizeof(s));
    int clean = it % 3 != 0;
    for (size_t i = 0; i < n; i++) s[i] = pool[lp_rng_below(&r, clean ? 46 : sizeof(pool) - 1)];
    if (it % 5 == 0 && n) s[lp_rng_below(&r, n)] = (char)lp_rng_below(&r, 256);
    int want = 1;
    for (size_t i = 0; i < n; i++)
      if (s[i] != ',' && (s[i] < '0' || s[i] > '9')) want = 0;
    REQUIRE(lp_jscan_plain_ints(s, n) == want);
  }
}
END_TEST

/* The compacting copy of a client's token text: the bytes other than JSON
 * whitespace, or SIZE_MAX when any byte is not a digit, comma or whitespace;
 * input and output in blocks of exactly n bytes (AddressSanitizer sees any
 * read or write past them), every length around the 64- and 80-byte steps. */
START_TEST(compact_plain_matches_a_byte_loop) {
  lp_rng_t r;
  lp_rng_seed(&r, 29);
  static const char pool[] = "0123456789012345678901234567890123456789,,,,,,     \t\n\r-.]\x80";
  for (int it = 0; it < 100000; it++) {
    size_t n = it < 400 ? (size_t)it : lp_rng_below(&r, 400);
    char *s = malloc(n ? n : 1), *out = malloc(n ? n : 1), want[400];
    int clean = it % 3 != 0, runs = it % 4 == 0; /* runs: long stretches without whitespace */
    size_t kinds = clean ? 50 : sizeof(pool) - 1;
    for (size_t i = 0; i < n; i++) s[i] = pool[lp_rng_below(&r, runs && lp_rng_below(&r, 40) ? 46 : kinds)];
    if (it % 5 == 0 && n) s[lp_rng_below(&r, n)] = (char)lp_rng_below(&r, 256);
    size_t k = 0;
    for (size_t i = 0; i < n && k != SIZE_MAX; i++) {
      char c = s[i];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') continue;
      if (c != ',' && (c < '0' || c > '9')) k = SIZE_MAX;
      else want[k++] = c;
    }
    size_t got = lp_jscan_compact_plain(s, n, out);
    REQUIRE(got == k);
    REQUIRE(got == SIZE_MAX || memcmp(out, want, got) == 0);
    free(s);
    free(out);
  }
}
END_TEST

/* What a client's array of tokens keeps (its text between the brackets,
 * compacted) is what the batch writer would write from the values read, in
 * every spacing the token reader takes. */
START_TEST(compact_text_is_the_writers) {
  lp_rng_t r;
  lp_rng_seed(&r, 31);
  text_t t = {0};
  lp_buf_t w;
  lp_buf_init(&w);
  int32_t vals[700];
  char *out = malloc(1 << 16);
  int kept = 0;
  for (int it = 0; it < 20000; it++) {
    t.n = 0;
    put_array(&t, &r, lp_rng_below(&r, it % 8 ? 40 : 600) + 1, (int)lp_rng_below(&r, 3), it % 4 ? 0 : 5);
    size_t n;
    int err;
    const char *q = lp_jscan_int_array(t.s, t.s + t.n, vals, 700, 0, INT32_MAX, &n, &err);
    if (!q) continue;
    size_t got = lp_jscan_compact_plain(t.s + 1, (size_t)(q - t.s - 2), out);
    if (got == SIZE_MAX) continue; /* "-0" */
    kept++;
    lp_buf_reset(&w);
    lp_buf_i32_list(&w, vals, n);
    REQUIRE(!w.oom && got == w.len && memcmp(out, w.data, got) == 0);
  }
  ck_assert_int_gt(kept, 2000);
  lp_buf_free(&w);
  free(out);
  free(t.s);
}
END_TEST

/* The batch writer copying the clients' token text gives the very bytes it
 * writes from the numbers, whatever the padding id and whichever sequences
 * come with text. */
START_TEST(batch_text_copy_matches_writer) {
  lp_batchjson_t w;
  ck_assert_int_eq(lp_batchjson_init(&w, 64), 0);
  lp_packer_t *p = lp_packer_new();
  lp_layout_t l;
  lp_layout_init(&l);
  lp_buf_t a, b, txt;
  lp_buf_init(&a);
  lp_buf_init(&b);
  lp_buf_init(&txt);
  lp_rng_t r;
  static const int32_t pads[] = {0, 7, -3, 50000, 9, 10};
  for (uint64_t seed = 1; seed <= 400; seed++) {
    lp_rng_seed(&r, seed);
    uint32_t lanes = 1 + (uint32_t)lp_rng_below(&r, 4), bucket = 1 + (uint32_t)lp_rng_below(&r, 200);
    size_t n = (size_t)lp_rng_below(&r, 40);
    uint32_t lens[40];
    lp_seq_ref_t seqs[40];
    lp_seq_text_t texts[40];
    lp_place_t place[40];
    static int32_t toks[40][200];
    size_t at[40];
    lp_buf_reset(&txt);
    for (size_t i = 0; i < n; i++) {
      lens[i] = 1 + (uint32_t)lp_rng_below(&r, seed % 3 ? 6 : bucket);
      for (uint32_t k = 0; k < lens[i]; k++)
        toks[i][k] = (int32_t)(seed % 4 == 0 ? lp_rng_below(&r, 10) : lp_rng_below(&r, 2147483647u));
      seqs[i] = (lp_seq_ref_t){.tokens = toks[i], .len = lens[i]};
      at[i] = txt.len;
      lp_buf_i32_list(&txt, toks[i], lens[i]);
    }
    for (size_t i = 0; i < n; i++) /* after the text buffer stopped moving */
      texts[i] = (lp_seq_text_t){lp_rng_below(&r, 4) ? txt.data + at[i] : NULL,
                                 (uint32_t)((i + 1 < n ? at[i + 1] : txt.len) - at[i])};
    if (seed % 2) {
      lp_pack_params_t prm = {.capacity = bucket, .max_bins = lanes};
      lp_packer_pack(p, LP_ALGO_FFD, &prm, lens, n, place, NULL);
    } else { /* padding between segments too, and sequences left out */
      uint32_t next[4] = {0, 0, 0, 0};
      for (size_t i = 0; i < n; i++) {
        uint32_t lane = (uint32_t)lp_rng_below(&r, lanes), off = next[lane] + (uint32_t)lp_rng_below(&r, 3);
        if (off + lens[i] <= bucket) {
          place[i] = (lp_place_t){.bin = (int32_t)lane, .offset = off};
          next[lane] = off + lens[i];
        } else {
          place[i] = (lp_place_t){.bin = -1};
        }
      }
    }
    int32_t pad = pads[seed % 6];
    ck_assert_int_eq(lp_layout_build(&l, lanes, bucket, pad, place, seqs, n), 0);
    lp_buf_reset(&a);
    lp_batchjson_write(&w, &a, &l, seed, "m", NULL, NULL);
    l.texts = texts;
    lp_buf_reset(&b);
    lp_batchjson_write(&w, &b, &l, seed, "m", NULL, NULL);
    REQUIRE(!a.oom && !b.oom && a.len == b.len && memcmp(a.data, b.data, a.len) == 0);
    /* and a new build forgets the texts of the last */
    ck_assert_int_eq(lp_layout_build(&l, lanes, bucket, pad, place, seqs, n), 0);
    REQUIRE(l.texts == NULL);
  }
  lp_buf_free(&a);
  lp_buf_free(&b);
  lp_buf_free(&txt);
  lp_layout_free(&l);
  lp_packer_free(p);
  lp_batchjson_free(&w);
}
END_TEST

LP_TEST_MAIN("numscan", masks_match_a_byte_loop, token_reader_matches_references,
             answer_index_matches_scalar, plain_ints_matches_a_byte_loop,
             batch_text_copy_matches_writer, compact_plain_matches_a_byte_loop,
             compact_text_is_the_writers)
