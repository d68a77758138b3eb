/* Scatter: index a backend answer's elements by byte offset, checking that its
 * sizes match the batch, so each request's slice is one copy of its own bytes. */
#include "lanepack/scatter.h"

#include "internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lanepack/jscan.h"
#include "scan64.h"

/* The bits [at, at + k) of the bitmap w (k <= 64; w has a word past the last). */
static inline uint64_t bits_at(const uint64_t *w, size_t at, unsigned k) {
  size_t i = at >> 6;
  unsigned sh = (unsigned)(at & 63);
  uint64_t v = w[i] >> sh;
  if (sh && sh + k > 64) v |= w[i + 1] << (64 - sh);
  return k == 64 ? v : v & ((1ULL << k) - 1);
}

/* The position of the j-th (from 0) set bit of x (it has more than j). */
static inline unsigned nth_bit(uint64_t x, unsigned j) {
  while (j--) x &= x - 1;
  return (unsigned)__builtin_ctzll(x);
}

/* The fast path of index_array, 64 bytes at a time: from p (the start of a
 * value) it takes each block's plain integers up to its last comma
 * (lp_scan64_plain: every value checked at once), recording the spans the
 * bitmap `wanted` asks for (NULL: every span), and returns where the scalar
 * loop goes on: the start of a value, maybe p itself (the last value, a sign,
 * a fraction, a leading zero, fewer than 64 bytes left are the scalar loop's
 * to take or reject). Counts, results and the spans asked for are the scalar
 * loop's (tests/test-numscan.c). */
static const char *index_fast(lp_scatter_t *s, const char *base, const char *p,
                              const char *end, size_t want, const uint64_t *wanted, size_t *at,
                              size_t *got) {
  uint64_t st, en;
  unsigned took;
  while (end - p >= 64 && (took = lp_scan64_plain(p, &st, &en)) != 0) {
    uint32_t off = (uint32_t)(p - base);
    unsigned k = lp__popcount64(st);
    if (wanted && *got + k <= want) {
      /* a block's values at once: only those asked for are looked up */
      uint64_t w = bits_at(wanted, *at, k);
      for (; w; w &= w - 1) {
        unsigned j = (unsigned)__builtin_ctzll(w);
        s->span[2 * (*at + j)] = off + nth_bit(st, j);
        s->span[2 * (*at + j) + 1] = off + nth_bit(en, j) + 1;
      }
      *at += k;
      *got += k;
    } else {
      for (; st; st &= st - 1, en &= en - 1) {
        unsigned a = (unsigned)__builtin_ctzll(st), e = (unsigned)__builtin_ctzll(en);
        if (*got >= want) return p + a; /* the scalar loop's */
        s->span[2 * *at] = off + a;
        s->span[2 * *at + 1] = off + e + 1;
        (*at)++;
        (*got)++;
      }
    }
    p = lp_jscan_ws(p + took, end); /* past the comma */
  }
  return p;
}

void lp_scatter_init(lp_scatter_t *s) { memset(s, 0, sizeof(*s)); }

void lp_scatter_free(lp_scatter_t *s) {
  free(s->wanted);
  free(s->span);
  free(s->lane_start);
  memset(s, 0, sizeof(*s));
}

static int fail(char *err, size_t errlen, const char *fmt, ...) {
  if (err && errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return -EPROTO;
}

/* Reads a flat array of values at p, recording each value's span from index
 * *at on; `want` values are expected. Returns the byte after the array or NULL. */
static const char *index_array(lp_scatter_t *s, const char *base, const char *p,
                               const char *end, size_t want, const uint64_t *wanted, size_t *at,
                               size_t *got) {
  *got = 0;
  if (p >= end || *p != '[') return NULL;
  p = lp_jscan_ws(p + 1, end);
  if (p < end && *p == ']') return p + 1;
  int fast = lp_jscan_fast();
  for (;;) {
    if (fast && end - p >= 64) {
      const char *f = index_fast(s, base, p, end, want, wanted, at, got);
      fast = f != p; /* no plain integers here: the scalar loop alone from now */
      p = f;
    }
    const char *v = p;
    /* fast path for the common element, a plain integer: digits up to a
     * separator; anything else (fraction, exponent, string, ...) takes the
     * full scanner from the start of the value */
    const char *q = p + (p < end && *p == '-');
    if (q < end && *q >= '0' && *q <= '9') {
      if (*q++ != '0') q = lp_jscan_digits_end(q, end); /* eight bytes at a time */
      if (q < end && (*q == ',' || *q == ']' || *q == ' ' || *q == '\n')) p = q;
      else p = lp_jscan_skip(p, end, LP_JSCAN_MAX_DEPTH - 2);
    } else {
      p = lp_jscan_skip(p, end, LP_JSCAN_MAX_DEPTH - 2);
    }
    if (p == NULL) return NULL;
    if (*got < want) {
      s->span[2 * *at] = (uint32_t)(v - base);
      s->span[2 * *at + 1] = (uint32_t)(p - base);
      (*at)++;
    }
    (*got)++;
    p = lp_jscan_ws(p, end);
    if (p >= end) return NULL;
    if (*p == ']') return p + 1;
    if (*p != ',') return NULL;
    p = lp_jscan_ws(p + 1, end);
  }
}

/* Reads the value at p as an unsigned 64-bit integer (plain digits, no sign,
 * fraction or exponent) into s's batch id; anything else marks it bad. Returns
 * the byte after the value, or NULL when it is not valid JSON. */
static const char *read_id(lp_scatter_t *s, const char *p, const char *end) {
  const char *q = p;
  uint64_t v = 0;
  int ok = q < end && *q >= '0' && *q <= '9' && !(*q == '0' && q + 1 < end && q[1] >= '0' && q[1] <= '9');
  for (; ok && q < end && *q >= '0' && *q <= '9'; q++) {
    unsigned d = (unsigned)(*q - '0');
    if (v > (UINT64_MAX - d) / 10) ok = 0;
    else v = v * 10 + d;
  }
  if (ok && q < end && (*q == '.' || *q == 'e' || *q == 'E')) ok = 0;
  if (!ok) {
    s->id_state = LP_SCATTER_ID_BAD;
    return lp_jscan_skip(p, end, LP_JSCAN_MAX_DEPTH);
  }
  if (s->id_state == LP_SCATTER_ID_NONE) {
    s->id_state = LP_SCATTER_ID_SET;
    s->batch_id = v;
  } else if (s->id_state == LP_SCATTER_ID_SET && s->batch_id != v) {
    s->id_state = LP_SCATTER_ID_BAD;
  }
  return q;
}

int lp_scatter_index(lp_scatter_t *s, const char *body, size_t len, const lp_layout_t *lay,
                     char *err, size_t errlen) {
  const char *p = body, *end = body + len;
  if (len > UINT32_MAX) return fail(err, errlen, "answer larger than 4 GiB");
  s->body = body;
  s->lanes = lay->lanes;
  s->id_state = LP_SCATTER_ID_NONE;
  s->batch_id = 0;
  if (lp__grow((void **)&s->lane_start, &s->lane_cap, (size_t)lay->lanes + 1, sizeof(uint32_t)))
    return -ENOMEM;

  p = lp_jscan_ws(p, end);
  if (p >= end || *p != '{') return fail(err, errlen, "answer is not a JSON object");
  p = lp_jscan_ws(p + 1, end);
  int found = 0;
  while (p < end && *p != '}') {
    int is_out = 0, is_seg = 0, is_id = 0;
    const char *k = p;
    if (*p != '"' || (p = lp_jscan_key(k, end, "outputs", &is_out)) == NULL)
      return fail(err, errlen, "answer is not valid JSON (bad member name)");
    lp_jscan_key(k, end, "segment_outputs", &is_seg);
    lp_jscan_key(k, end, "batch_id", &is_id);
    p = lp_jscan_ws(p, end);
    if (p >= end || *p != ':') return fail(err, errlen, "answer is not valid JSON (missing ':')");
    p = lp_jscan_ws(p + 1, end);
    if ((is_out || is_seg) && !found) {
      found = 1;
      s->per_segment = is_seg;
      /* element counts per lane */
      size_t total = is_seg ? lay->nsegs : (size_t)lay->lanes * lay->bucket;
      if (lp__grow((void **)&s->span, &s->span_cap, 2 * total + 2, sizeof(uint32_t))) return -ENOMEM;
      /* per token: the spans read are each segment's first and last; per
       * segment: every one (NULL) */
      const uint64_t *wanted = NULL;
      if (!is_seg) {
        size_t words = total / 64 + 2;
        if (lp__grow((void **)&s->wanted, &s->wanted_cap, words, sizeof(uint64_t))) return -ENOMEM;
        memset(s->wanted, 0, words * sizeof(uint64_t));
        for (size_t g = 0; g < lay->nsegs; g++) {
          const lp_segment_t *sg = &lay->segs[g];
          if (!sg->length) continue;
          size_t first = (lay->ragged ? 0 : (size_t)sg->lane * lay->bucket) + sg->offset;
          size_t last = first + sg->length - 1;
          if (last >= total) continue; /* not this layout's: lp_scatter_slice is not asked */
          s->wanted[first >> 6] |= 1ULL << (first & 63);
          s->wanted[last >> 6] |= 1ULL << (last & 63);
        }
        wanted = s->wanted;
      }
      const char *name = is_seg ? "segment_outputs" : "outputs";
      size_t at = 0, got;
      if (lay->ragged) {
        s->lane_start[0] = 0;
        p = index_array(s, body, p, end, total, wanted, &at, &got);
        if (p == NULL) return fail(err, errlen, "'%s' is not a valid JSON array", name);
        if (got != total)
          return fail(err, errlen, "'%s' has %zu values, the batch has %zu %s", name, got, total,
                      is_seg ? "sequences" : "tokens");
      } else {
        if (p >= end || *p != '[') return fail(err, errlen, "'%s' is not an array of lanes", name);
        p = lp_jscan_ws(p + 1, end);
        size_t seg = 0;
        for (uint32_t lane = 0; lane < lay->lanes; lane++) {
          size_t want = lay->bucket;
          if (is_seg) {
            want = 0;
            while (seg + want < lay->nsegs && lay->segs[seg + want].lane == lane) want++;
            seg += want;
          }
          s->lane_start[lane] = (uint32_t)at;
          if (lane > 0) {
            if (p >= end || *p != ',')
              return fail(err, errlen, "'%s' has %u lanes, the batch has %u", name, lane,
                          lay->lanes);
            p = lp_jscan_ws(p + 1, end);
          }
          p = index_array(s, body, p, end, want, wanted, &at, &got);
          if (p == NULL)
            return fail(err, errlen, "'%s' lane %u is not a valid JSON array", name, lane);
          if (got != want)
            return fail(err, errlen, "'%s' lane %u has %zu values, expected %zu", name, lane, got,
                        want);
          p = lp_jscan_ws(p, end);
        }
        if (p >= end || *p != ']')
          return fail(err, errlen, "'%s' has more lanes than the batch's %u", name, lay->lanes);
        p++;
      }
      s->lane_start[lay->lanes] = (uint32_t)at;
    } else if (is_id) {
      p = read_id(s, p, end);
      if (p == NULL) return fail(err, errlen, "answer is not valid JSON");
    } else {
      p = lp_jscan_skip(p, end, LP_JSCAN_MAX_DEPTH);
      if (p == NULL) return fail(err, errlen, "answer is not valid JSON");
    }
    p = lp_jscan_ws(p, end);
    if (p < end && *p == ',') {
      p = lp_jscan_ws(p + 1, end);
      if (p < end && *p == '}') return fail(err, errlen, "answer is not valid JSON (trailing ',')");
    } else if (p < end && *p != '}') return fail(err, errlen, "answer is not valid JSON");
  }
  if (p >= end) return fail(err, errlen, "answer is not valid JSON (truncated)");
  p = lp_jscan_ws(p + 1, end);
  if (p != end) return fail(err, errlen, "answer has bytes after the JSON object");
  if (!found) return fail(err, errlen, "answer has neither 'outputs' nor 'segment_outputs'");
  return 0;
}

void lp_scatter_slice(const lp_scatter_t *s, const lp_segment_t *seg, const char **start,
                      size_t *len) {
  size_t first, last;
  uint32_t lane = s->lanes ? seg->lane : 0;
  if (s->per_segment) {
    first = last = s->lane_start[lane] + (seg->segment - 1);
  } else {
    first = s->lane_start[lane] + seg->offset;
    last = first + seg->length - 1;
  }
  *start = s->body + s->span[2 * first];
  *len = s->span[2 * last + 1] - s->span[2 * first];
}
