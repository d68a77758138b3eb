/* A JSON scanner over raw bytes: validates and skips values without building
 * anything, so large backend answers are sliced, not parsed into trees. */
#include "lanepack/jscan.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "scan64.h"

static int fast_on = 1; /* written only by tests, before any reading */

int lp_jscan_fast(void) { return fast_on; }
void lp_jscan_set_fast(int on) { fast_on = on != 0; }

/* Reads the \uXXXX escape at p (after the backslash and 'u'); -1 if bad. */
static long hex4(const char *p, const char *end) {
  if (end - p < 4) return -1;
  long v = 0;
  for (int i = 0; i < 4; i++) {
    char h = p[i];
    int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10
          : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

/* Length of the valid UTF-8 sequence at p (first byte >= 0x80), or 0: no
 * overlong forms, no surrogates, nothing past U+10FFFF. */
static size_t utf8_len(const unsigned char *p, const unsigned char *end) {
  unsigned c = p[0];
  size_t n;
  unsigned lo = 0x80, hi = 0xbf;
  if (c >= 0xc2 && c <= 0xdf) n = 2;
  else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
    if (c == 0xe0) lo = 0xa0;
    if (c == 0xed) hi = 0x9f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
    if (c == 0xf0) lo = 0x90;
    if (c == 0xf4) hi = 0x8f;
  } else {
    return 0;
  }
  if ((size_t)(end - p) < n) return 0;
  if (p[1] < lo || p[1] > hi) return 0;
  for (size_t i = 2; i < n; i++)
    if (p[i] < 0x80 || p[i] > 0xbf) return 0;
  return n;
}

static const char *skip_string(const char *p, const char *end) {
  p++; /* opening quote */
  while (p < end) {
    unsigned char c = (unsigned char)*p;
    if (c == '"') return p + 1;
    if (c < 0x20) return NULL;
    if (c >= 0x80) { /* strings are UTF-8: what is sliced to a client stays valid */
      size_t n = utf8_len((const unsigned char *)p, (const unsigned char *)end);
      if (n == 0) return NULL;
      p += n;
      continue;
    }
    if (c == '\\') {
      if (++p >= end) return NULL;
      switch (*p) {
        case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
          p++;
          break;
        case 'u': {
          long v = hex4(p + 1, end);
          if (v < 0 || (v >= 0xdc00 && v <= 0xdfff)) return NULL; /* lone low surrogate */
          p += 5;
          if (v >= 0xd800 && v <= 0xdbff) { /* a high surrogate needs its low half */
            long w = end - p >= 6 && p[0] == '\\' && p[1] == 'u' ? hex4(p + 2, end) : -1;
            if (w < 0xdc00 || w > 0xdfff) return NULL;
            p += 6;
          }
          break;
        }
        default:
          return NULL;
      }
    } else {
      p++;
    }
  }
  return NULL;
}

static int is_digit(const char *p, const char *end) { return p < end && *p >= '0' && *p <= '9'; }

static const char *skip_number(const char *p, const char *end) {
  if (p < end && *p == '-') p++;
  if (!is_digit(p, end)) return NULL;
  if (*p == '0') p++;
  else
    while (is_digit(p, end)) p++;
  if (p < end && *p == '.') {
    p++;
    if (!is_digit(p, end)) return NULL;
    while (is_digit(p, end)) p++;
  }
  if (p < end && (*p == 'e' || *p == 'E')) {
    p++;
    if (p < end && (*p == '+' || *p == '-')) p++;
    if (!is_digit(p, end)) return NULL;
    while (is_digit(p, end)) p++;
  }
  return p;
}

static const char *skip_literal(const char *p, const char *end, const char *lit) {
  size_t n = strlen(lit);
  if ((size_t)(end - p) < n || memcmp(p, lit, n) != 0) return NULL;
  return p + n;
}

const char *lp_jscan_skip(const char *p, const char *end, int max_depth) {
  if (p >= end) return NULL;
  switch (*p) {
    case '"': return skip_string(p, end);
    case 't': return skip_literal(p, end, "true");
    case 'f': return skip_literal(p, end, "false");
    case 'n': return skip_literal(p, end, "null");
    case '[': case '{': {
      if (max_depth <= 0) return NULL;
      int obj = *p == '{';
      char close = obj ? '}' : ']';
      p = lp_jscan_ws(p + 1, end);
      if (p < end && *p == close) return p + 1;
      for (;;) {
        if (obj) {
          if (p >= end || *p != '"' || (p = skip_string(p, end)) == NULL) return NULL;
          p = lp_jscan_ws(p, end);
          if (p >= end || *p != ':') return NULL;
          p = lp_jscan_ws(p + 1, end);
        }
        if ((p = lp_jscan_skip(p, end, max_depth - 1)) == NULL) return NULL;
        p = lp_jscan_ws(p, end);
        if (p >= end) return NULL;
        if (*p == close) return p + 1;
        if (*p != ',') return NULL;
        p = lp_jscan_ws(p + 1, end);
      }
    }
    default: return skip_number(p, end);
  }
}

/* Compares the escaped string body [p, end) (already validated) with key by its
 * decoded text, without decoding into memory: "\u0069d" equals "id". */
static int escaped_eq(const char *p, const char *end, const char *key) {
  const unsigned char *k = (const unsigned char *)key;
  while (p < end) {
    unsigned char buf[4];
    size_t n = 1;
    if (*p != '\\') {
      buf[0] = (unsigned char)*p++;
    } else {
      char e = p[1];
      p += 2;
      switch (e) {
        case 'b': buf[0] = '\b'; break;
        case 'f': buf[0] = '\f'; break;
        case 'n': buf[0] = '\n'; break;
        case 'r': buf[0] = '\r'; break;
        case 't': buf[0] = '\t'; break;
        case 'u': {
          long cp = hex4(p, end);
          p += 4;
          if (cp >= 0xd800 && cp <= 0xdbff && end - p >= 6 && p[0] == '\\' && p[1] == 'u') {
            long lo = hex4(p + 2, end);
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            p += 6;
          }
          if (cp < 0x80) buf[0] = (unsigned char)cp;
          else if (cp < 0x800) {
            buf[0] = (unsigned char)(0xc0 | (cp >> 6));
            buf[1] = (unsigned char)(0x80 | (cp & 0x3f));
            n = 2;
          } else if (cp < 0x10000) {
            buf[0] = (unsigned char)(0xe0 | (cp >> 12));
            buf[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
            buf[2] = (unsigned char)(0x80 | (cp & 0x3f));
            n = 3;
          } else {
            buf[0] = (unsigned char)(0xf0 | (cp >> 18));
            buf[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3f));
            buf[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
            buf[3] = (unsigned char)(0x80 | (cp & 0x3f));
            n = 4;
          }
          break;
        }
        default: buf[0] = (unsigned char)e; /* " \\ / */
      }
    }
    for (size_t i = 0; i < n; i++, k++)
      if (*k == 0 || *k != buf[i]) return 0;
  }
  return *k == 0;
}

const char *lp_jscan_key(const char *p, const char *end, const char *key, int *eq) {
  const char *after = skip_string(p, end);
  *eq = 0;
  if (after == NULL) return NULL;
  size_t n = strlen(key);
  size_t raw = (size_t)(after - p - 2);
  if (raw == n && memcmp(p + 1, key, n) == 0) *eq = 1;
  else if (raw > n && memchr(p + 1, '\\', raw)) *eq = escaped_eq(p + 1, after - 1, key);
  return after;
}

/* The value of eight digit values (0..9) in the bytes of x, the first in the
 * lowest byte (leading zero bytes count as zeros). */
static inline uint64_t eight_digits(uint64_t x) {
  x = (x * 10 + (x >> 8)) & 0x00ff00ff00ff00ffULL;
  x = (x * 100 + (x >> 16)) & 0x0000ffff0000ffffULL;
  return (x * 10000 + (x >> 32)) & 0xffffffffULL;
}

/* The fast path of lp_jscan_int_array, 64 bytes at a time: from p (the start
 * of a value) it takes each block's integers (lp_scan64_plain) of one to
 * eight digits, no leading zero, in [min, max], while out has room, and
 * returns where the scalar loop goes on: the start of a value, maybe p itself
 * (whatever else comes is the scalar loop's to take or reject, so values,
 * counts and errors are the scalar loop's; tests/test-numscan.c). */
#if defined(LP_SCAN64_SSE2)
/* Value i of four (digit values 0..9 as eight_digits takes them, leading zero
 * bytes first) in lane i of the result: pairs of digits, then of pairs, then
 * of fours, each one multiply-add of 16-bit lanes (pmaddwd), no 64-bit
 * multiply chains. */
static inline __m128i four_values(uint64_t w0, uint64_t w1, uint64_t w2, uint64_t w3) {
  const __m128i zero = _mm_setzero_si128(), t10 = _mm_set1_epi32(0x0001000a),
                t100 = _mm_set1_epi32(0x00010064), t1e4 = _mm_set1_epi32(0x00012710);
  __m128i ab = _mm_unpacklo_epi64(_mm_cvtsi64_si128((long long)w0), _mm_cvtsi64_si128((long long)w1));
  __m128i cd = _mm_unpacklo_epi64(_mm_cvtsi64_si128((long long)w2), _mm_cvtsi64_si128((long long)w3));
  __m128i a = _mm_madd_epi16(_mm_unpacklo_epi8(ab, zero), t10);
  __m128i b = _mm_madd_epi16(_mm_unpackhi_epi8(ab, zero), t10);
  __m128i c = _mm_madd_epi16(_mm_unpacklo_epi8(cd, zero), t10);
  __m128i d = _mm_madd_epi16(_mm_unpackhi_epi8(cd, zero), t10);
  /* pairs (<= 99) and fours (<= 9999) fit the signed 16-bit packs */
  __m128i ab4 = _mm_madd_epi16(_mm_packs_epi32(a, b), t100);
  __m128i cd4 = _mm_madd_epi16(_mm_packs_epi32(c, d), t100);
  return _mm_madd_epi16(_mm_packs_epi32(ab4, cd4), t1e4);
}

/* One value's digit values at p + a (run of len digits) for four_values, or
 * all ones when it has more than eight. */
static inline uint64_t digits_at(const char *p, unsigned a, unsigned len) {
  uint64_t w;
  memcpy(&w, p + a, 8); /* a < 64 and 72 bytes readable */
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
  w = __builtin_bswap64(w);
#endif
  return len > 8 ? ~0ULL : (w - 0x3030303030303030ULL) << (64 - 8 * len);
}
#endif

static const char *int_array_fast(const char *p, const char *end, int32_t *out, size_t cap,
                                  int64_t min, int64_t max, size_t *n) {
  uint64_t st, en;
  unsigned took;
#if defined(LP_SCAN64_SSE2)
  /* every value of up to eight digits is in the range: no check per value */
  int any8 = min <= 0 && max >= 99999999;
#endif
  while (end - p >= 72 && (took = lp_scan64_plain(p, &st, &en)) != 0) {
#if defined(LP_SCAN64_SSE2)
    /* four at a time while the block has four more, each of one to eight
     * digits, with room for them; the rest one at a time below */
    while (any8 && cap - *n >= 4) {
      uint64_t s1 = st & (st - 1), s2 = s1 & (s1 - 1), s3 = s2 & (s2 - 1);
      if (!s3) break; /* fewer than four left */
      uint64_t n1 = en & (en - 1), n2 = n1 & (n1 - 1), n3 = n2 & (n2 - 1);
      unsigned a0 = (unsigned)__builtin_ctzll(st), a1 = (unsigned)__builtin_ctzll(s1),
               a2 = (unsigned)__builtin_ctzll(s2), a3 = (unsigned)__builtin_ctzll(s3);
      uint64_t w0 = digits_at(p, a0, (unsigned)__builtin_ctzll(en) + 1 - a0),
               w1 = digits_at(p, a1, (unsigned)__builtin_ctzll(n1) + 1 - a1),
               w2 = digits_at(p, a2, (unsigned)__builtin_ctzll(n2) + 1 - a2),
               w3 = digits_at(p, a3, (unsigned)__builtin_ctzll(n3) + 1 - a3);
      if (w0 == ~0ULL || w1 == ~0ULL || w2 == ~0ULL || w3 == ~0ULL)
        break; /* a value of nine or more digits: one at a time */
      _mm_storeu_si128((__m128i *)(void *)(out + *n), four_values(w0, w1, w2, w3));
      *n += 4;
      st = s3 & (s3 - 1);
      en = n3 & (n3 - 1);
    }
#endif
    while (st) {
      unsigned a = (unsigned)__builtin_ctzll(st), len = (unsigned)__builtin_ctzll(en) + 1 - a;
      if (len > 8 || *n == cap) return p + a; /* the scalar loop's */
      uint64_t w;
      memcpy(&w, p + a, 8); /* a < 64 and 72 bytes readable */
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
      w = __builtin_bswap64(w);
#endif
      int64_t v = (int64_t)eight_digits((w - 0x3030303030303030ULL) << (64 - 8 * len));
      if (v < min || v > max) return p + a;
      out[(*n)++] = (int32_t)v;
      st &= st - 1;
      en &= en - 1;
    }
    p = lp_jscan_ws(p + took, end); /* past the comma */
  }
  return p;
}

int lp_jscan_plain_ints(const char *p, size_t n) {
  size_t i = 0;
#if defined(LP_SCAN64_SSE2)
  /* only two classes: 16 bytes in four operations */
  const __m128i bias = _mm_set1_epi8(0x50), lim = _mm_set1_epi8(-118), comma = _mm_set1_epi8(',');
  for (; i + 16 <= n; i += 16) {
    __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(p + i));
    __m128i ok = _mm_or_si128(_mm_cmplt_epi8(_mm_add_epi8(v, bias), lim), _mm_cmpeq_epi8(v, comma));
    if (_mm_movemask_epi8(ok) != 0xffff) return 0;
  }
#else
  for (; i + 64 <= n; i += 64) {
    lp_scan64_t m;
    lp_scan64(p + i, &m);
    if (~(m.digit | m.comma)) return 0;
  }
#endif
  for (; i < n; i++)
    if (p[i] != ',' && (unsigned)((unsigned char)p[i] - '0') >= 10) return 0;
  return 1;
}

static inline int is_ws(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* Which of the 64 bytes at p are JSON whitespace (the result) and which are
 * neither that, a digit nor a comma (*other): bit i for byte i. */
static inline uint64_t ws64(const char *p, uint64_t *other) {
#if defined(LP_SCAN64_SSE2)
  const __m128i bias = _mm_set1_epi8(0x50), lim = _mm_set1_epi8(-118), comma = _mm_set1_epi8(',');
  const __m128i space = _mm_set1_epi8(' '), tab = _mm_set1_epi8('\t'), nl = _mm_set1_epi8('\n'),
                cr = _mm_set1_epi8('\r');
  uint64_t s = 0, ok = 0;
  for (int i = 0; i < 4; i++) {
    __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(p + 16 * i));
    __m128i w = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, space), _mm_cmpeq_epi8(v, tab)),
                             _mm_or_si128(_mm_cmpeq_epi8(v, nl), _mm_cmpeq_epi8(v, cr)));
    __m128i dc = _mm_or_si128(_mm_cmplt_epi8(_mm_add_epi8(v, bias), lim), _mm_cmpeq_epi8(v, comma));
    s |= (uint64_t)(uint16_t)_mm_movemask_epi8(w) << (16 * i);
    ok |= (uint64_t)(uint16_t)_mm_movemask_epi8(_mm_or_si128(dc, w)) << (16 * i);
  }
  *other = ~ok;
  return s;
#else
  lp_scan64_t m;
  lp_scan64(p, &m);
  *other = ~(m.digit | m.comma | m.space);
  return m.space;
#endif
}

size_t lp_jscan_compact_plain(const char *p, size_t n, char *out) {
  size_t k = 0, i = 0;
  /* 64 bytes at a time: each run of digits and commas copied 16 bytes at a
   * time (a run per number, so a branch per byte, mispredicted at every
   * separator, is what this avoids). A copy reads and writes up to 15 bytes
   * past its run: while 80 bytes are left both stay within p[0..n) and
   * out[0..n) (out is never ahead of p), and the next run's copy overwrites
   * them. */
  for (; i + 80 <= n; i += 64) {
    uint64_t other, keep = ~ws64(p + i, &other);
    if (other) return SIZE_MAX;
    if (keep == ~0ULL) {
      memcpy(out + k, p + i, 64);
      k += 64;
      continue;
    }
    /* each run's first and last byte: the runs are taken in turn with no
     * chain of dependent steps from one to the next but k */
    uint64_t st = keep & ~(keep << 1), en = keep & ~(keep >> 1);
    while (st) {
      unsigned a = (unsigned)__builtin_ctzll(st), len = (unsigned)__builtin_ctzll(en) + 1 - a;
      memcpy(out + k, p + i + a, 16);
      for (unsigned c = 16; c < len; c += 16) memcpy(out + k + c, p + i + a + c, 16);
      k += len;
      st &= st - 1;
      en &= en - 1;
    }
  }
  for (; i < n; i++) {
    unsigned char c = (unsigned char)p[i];
    if (is_ws(c)) continue;
    if (c != ',' && (unsigned)(c - '0') >= 10) return SIZE_MAX;
    out[k++] = (char)c;
  }
  return k;
}

const char *lp_jscan_int_array(const char *p, const char *end, int32_t *out, size_t cap,
                               int64_t min, int64_t max, size_t *n, int *err) {
  *n = 0;
  *err = LP_JSCAN_E_SYNTAX;
  if (max > INT32_MAX) max = INT32_MAX;
  if (min < INT32_MIN) min = INT32_MIN;
  if (p >= end || *p != '[') return NULL;
  p = lp_jscan_ws(p + 1, end);
  if (p < end && *p == ']') {
    *err = 0;
    return p + 1;
  }
  int fast = fast_on;
  for (;;) {
    if (fast && end - p >= 72) {
      const char *f = int_array_fast(p, end, out, cap, min, max, n);
      fast = f != p; /* no plain integers here: the scalar loop alone from now */
      p = f;
    }
    /* one integer: -?(0|[1-9][0-9]*), then not '.', 'e' or 'E' */
    const char *start = p;
    int neg = 0;
    if (p < end && *p == '-') {
      neg = 1;
      p++;
    }
    if (p >= end || *p < '0' || *p > '9') {
      /* a value, but not a number: tell "not an integer" from garbage */
      const char *q = lp_jscan_skip(start, end, 8);
      *err = q ? LP_JSCAN_E_NOT_INT : LP_JSCAN_E_SYNTAX;
      return NULL;
    }
    /* digits first, then their value: at most 18 fit a uint64 unchecked, and
     * no int32 needs more than 10 */
    const char *d = p;
    uint64_t v = 0;
    if (end - p >= 8) {
      /* eight bytes at a time: how many lead with digits, and their value */
      uint64_t w;
      memcpy(&w, p, 8);
      uint64_t nd = lp_jscan_nondigits8(w);
      unsigned k = nd ? (unsigned)__builtin_ctzll(nd) / 8 : 8;
      v = k ? eight_digits((w - 0x3030303030303030ULL) << (64 - 8 * k)) : 0;
      p += k;
      if (k == 8)
        for (unsigned dg; p < end && (dg = (unsigned)((unsigned char)*p - '0')) < 10; p++)
          v = v * 10 + dg;
    } else {
      for (unsigned dg; p < end && (dg = (unsigned)((unsigned char)*p - '0')) < 10; p++)
        v = v * 10 + dg;
    }
    /* past 19 digits v may have wrapped: those are flagged by their count */
    size_t nd = (size_t)(p - d);
    int big = nd > 18;
    if (nd > 1 && *d == '0') p = d + 1; /* leading zero: rejected below */
    if (p < end && (*p == '.' || *p == 'e' || *p == 'E')) {
      *err = skip_number(start, end) ? LP_JSCAN_E_NOT_INT : LP_JSCAN_E_SYNTAX;
      return NULL;
    }
    if (p < end && *p >= '0' && *p <= '9') return NULL; /* leading zero: 012 */
    int64_t sv;
    if (big || v > (uint64_t)INT64_MAX) {
      *err = LP_JSCAN_E_RANGE;
      return NULL;
    }
    sv = neg ? -(int64_t)v : (int64_t)v;
    if (sv < min || sv > max) {
      *err = LP_JSCAN_E_RANGE;
      return NULL;
    }
    if (*n == cap) {
      *err = LP_JSCAN_E_TOO_MANY;
      return NULL;
    }
    out[(*n)++] = (int32_t)sv;
    p = lp_jscan_ws(p, end);
    if (p >= end) return NULL;
    if (*p == ']') {
      *err = 0;
      return p + 1;
    }
    if (*p != ',') return NULL;
    p = lp_jscan_ws(p + 1, end);
  }
}

/* High bit set in each byte of w that ends a run of plain string text: '"',
 * '\\', a control byte (< 0x20) or any byte >= 0x80 (UTF-8, checked apart).
 * Exact per byte: no carry crosses a byte. */
static inline uint64_t str_special8(uint64_t w) {
  const uint64_t lo7 = 0x7f7f7f7f7f7f7f7fULL, hi = 0x8080808080808080ULL;
  uint64_t q = w ^ 0x2222222222222222ULL, b = w ^ 0x5c5c5c5c5c5c5c5cULL;
  uint64_t zq = ~(((q & lo7) + lo7) | q | lo7);
  uint64_t zb = ~(((b & lo7) + lo7) | b | lo7);
  uint64_t ctl = ~(((w & lo7) + 0x6060606060606060ULL) | w) & hi;
  return zq | zb | ctl | (w & hi);
}

/* Writes code point cp as UTF-8 at o; returns the byte after it. */
static char *put_utf8(char *o, long cp) {
  if (cp < 0x80) {
    *o++ = (char)cp;
  } else if (cp < 0x800) {
    *o++ = (char)(0xc0 | (cp >> 6));
    *o++ = (char)(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    *o++ = (char)(0xe0 | (cp >> 12));
    *o++ = (char)(0x80 | ((cp >> 6) & 0x3f));
    *o++ = (char)(0x80 | (cp & 0x3f));
  } else {
    *o++ = (char)(0xf0 | (cp >> 18));
    *o++ = (char)(0x80 | ((cp >> 12) & 0x3f));
    *o++ = (char)(0x80 | ((cp >> 6) & 0x3f));
    *o++ = (char)(0x80 | (cp & 0x3f));
  }
  return o;
}

#if defined(LP_SCAN64_SSE2)
/* Bytes of v that end a run of plain string text (as str_special8): '"',
 * '\\', and, compared signed, anything below ' ': a control byte or >= 0x80. */
static inline __m128i str_special16(__m128i v) {
  return _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('"')), _mm_cmpeq_epi8(v, _mm_set1_epi8('\\'))),
                      _mm_cmplt_epi8(v, _mm_set1_epi8(' ')));
}
#endif

/* lp_jscan_string and lp_jscan_string_inplace: with inplace, out is the
 * string's own first byte (p + 1) and o trails p by what escapes saved:
 * plain text is written down as it is scanned, whole blocks once loaded
 * (every write lands on bytes already read), the end of a run by memmove;
 * else plain text is copied as it is scanned. A text is scanned 64 bytes a
 * test while it is plain (most of a long text is): one branch per 64 bytes. */
/* Where lp_jscan_string_undoable stopped: the decoded bytes written. */
static const char *stopped(lp_jscan_undo_t *u, const char *out, const char *o) {
  if (u) u->dec = o ? (size_t)(o - out) : 0;
  return NULL;
}

/* Logs the escape [esc, p) whose text goes at o; -1 when u may hold no more
 * (u->full). */
static int log_escape(lp_jscan_undo_t *u, const char *out, const char *o, const char *esc, const char *p) {
  if (u->n == u->cap) {
    size_t cap = u->cap ? u->cap * 2 : 64;
    if (cap > u->max) cap = u->max;
    lp_jscan_esc_t *e = u->n < cap ? realloc(u->e, cap * sizeof(*e)) : NULL;
    if (!e) {
      u->full = 1;
      return -1;
    }
    u->e = e;
    u->cap = cap;
  }
  lp_jscan_esc_t *e = &u->e[u->n++];
  e->raw = (uint32_t)(esc - out);
  e->dec = (uint32_t)(o - out);
  e->raw_len = (uint8_t)(p - esc);
  memcpy(e->bytes, esc, e->raw_len);
  return 0;
}

static const char *scan_string(const char *p, const char *end, char *out, int inplace, size_t *n, int *escaped,
                               lp_jscan_undo_t *u) {
  char *o = out;
  /* stopped here (invalid, or u full): what was written is told to u */
#define FAIL() return stopped(u, out, o)
  *escaped = 0;
  p++; /* opening quote */
  for (;;) {
    /* o: where the plain text goes (NULL: only validating); with inplace,
     * o == p until the first escape, nothing to write then */
#if defined(LP_SCAN64_SSE2)
    while (end - p >= 64) {
      __m128i v0 = _mm_loadu_si128((const __m128i *)(const void *)p);
      __m128i v1 = _mm_loadu_si128((const __m128i *)(const void *)(p + 16));
      __m128i v2 = _mm_loadu_si128((const __m128i *)(const void *)(p + 32));
      __m128i v3 = _mm_loadu_si128((const __m128i *)(const void *)(p + 48));
      __m128i sp = _mm_or_si128(_mm_or_si128(str_special16(v0), str_special16(v1)),
                                _mm_or_si128(str_special16(v2), str_special16(v3)));
      if (_mm_movemask_epi8(sp)) break; /* the next 16-byte steps find where */
      if (o && o != p) {
        _mm_storeu_si128((__m128i *)(void *)o, v0);
        _mm_storeu_si128((__m128i *)(void *)(o + 16), v1);
        _mm_storeu_si128((__m128i *)(void *)(o + 32), v2);
        _mm_storeu_si128((__m128i *)(void *)(o + 48), v3);
      }
      if (o) o += 64;
      p += 64;
    }
    while (end - p >= 16) {
      __m128i v = _mm_loadu_si128((const __m128i *)(const void *)p);
      unsigned s = (unsigned)_mm_movemask_epi8(str_special16(v));
      size_t k = s ? (size_t)__builtin_ctz(s) : 16;
      if (o && o != p) {
        /* copying: all 16 (room: see the header); in place only the plain
         * ones, the rest are not read yet */
        if (inplace && s) memmove(o, p, k);
        else _mm_storeu_si128((__m128i *)(void *)o, v);
      }
      if (o) o += k;
      p += k;
      if (s) break;
    }
#endif
    while (end - p >= 8) {
      uint64_t x;
      memcpy(&x, p, 8);
      uint64_t s = str_special8(x);
      size_t k = s ? (size_t)__builtin_ctzll(s) / 8 : 8;
      if (o && o != p) {
        if (inplace) memmove(o, p, k);
        else memcpy(o, p, 8); /* room: see the header */
      }
      if (o) o += k;
      p += k;
      if (s) break;
    }
    if (p >= end) FAIL();
    unsigned char c = (unsigned char)*p;
    if (c == '"') {
      if (o) *n = (size_t)(o - out);
      if (u) u->dec = (size_t)(o - out);
      return p + 1;
    }
    if (c < 0x20) FAIL();
    if (c >= 0x80) {
      size_t k = utf8_len((const unsigned char *)p, (const unsigned char *)end);
      if (k == 0) FAIL();
      if (o) {
        memmove(o, p, k); /* in place o may be p */
        o += k;
      }
      p += k;
      continue;
    }
    if (c != '\\') {
      if (o) *o++ = (char)c;
      p++;
      continue;
    }
    *escaped = 1;
    const char *esc = p; /* its raw bytes, for u */
    if (++p >= end) FAIL();
    long cp;
    switch (*p) {
      case '"': case '\\': case '/': cp = *p; break;
      case 'b': cp = '\b'; break;
      case 'f': cp = '\f'; break;
      case 'n': cp = '\n'; break;
      case 'r': cp = '\r'; break;
      case 't': cp = '\t'; break;
      case 'u': {
        cp = hex4(p + 1, end);
        /* \u0000 too: jansson refuses it (without JSON_ALLOW_NUL) */
        if (cp <= 0 || (cp >= 0xdc00 && cp <= 0xdfff)) FAIL(); /* lone low surrogate */
        p += 4;
        if (cp >= 0xd800 && cp <= 0xdbff) { /* a high surrogate needs its low half */
          long lo = end - p >= 7 && p[1] == '\\' && p[2] == 'u' ? hex4(p + 3, end) : -1;
          if (lo < 0xdc00 || lo > 0xdfff) FAIL();
          cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
          p += 6;
        }
        break;
      }
      default:
        FAIL();
    }
    p++;
    /* an escape is 2, 6 or 12 bytes and gives 1 to 4: in place, its text
     * lands on its own bytes, all read */
    if (u && log_escape(u, out, o, esc, p)) FAIL();
    if (o) {
      char *w = put_utf8(o, cp);
      if (u) u->e[u->n - 1].dec_len = (uint8_t)(w - o);
      o = w;
    }
  }
#undef FAIL
}

const char *lp_jscan_string(const char *p, const char *end, char *out, size_t *n, int *escaped) {
  return scan_string(p, end, out, 0, n, escaped, NULL);
}

char *lp_jscan_string_inplace(char *p, const char *end, size_t *n, int *escaped) {
  return (char *)scan_string(p, end, p + 1, 1, n, escaped, NULL);
}

/* A raw string's bytes the undo log can address (its offsets are 32-bit) */
#define UNDO_MAX_BYTES 0xffffffffu

/* By default at most an escape per this many raw bytes is logged (24 bytes
 * each: the log is at most a tenth of the string): a text of denser
 * escapes (\uXXXX for every letter, as Python's json.dumps writes by default)
 * is validated apart and then decoded, two passes as before. */
#define UNDO_BYTES_PER_ESCAPE 256

char *lp_jscan_string_undoable(char *p, const char *end, size_t *n, int *escaped, lp_jscan_undo_t *u) {
  u->n = 0;
  u->dec = 0;
  u->full = 0;
  if ((size_t)(end - p) > UNDO_MAX_BYTES) { /* (a body of 4 GiB) */
    u->full = 1;
    return NULL;
  }
  if (!u->max) u->max = (size_t)(end - p) / UNDO_BYTES_PER_ESCAPE + 64;
  return (char *)scan_string(p, end, p + 1, 1, n, escaped, u);
}

void lp_jscan_string_undo(char *p, const lp_jscan_undo_t *u) {
  if (!u->n) return; /* nothing moved: the text before the first escape stays where it was */
  char *s = p + 1;
  const lp_jscan_esc_t *last = &u->e[u->n - 1];
  /* the plain bytes after each escape were moved down by what the escapes
   * before saved: moved back up, last first, each escape's raw bytes put back */
  size_t dend = u->dec, rend = last->raw + last->raw_len + (dend - (last->dec + last->dec_len));
  for (size_t i = u->n; i-- > 0;) {
    const lp_jscan_esc_t *e = &u->e[i];
    size_t seg = dend - (e->dec + e->dec_len);
    memmove(s + rend - seg, s + e->dec + e->dec_len, seg);
    memcpy(s + e->raw, e->bytes, e->raw_len);
    dend = e->dec;
    rend = e->raw;
  }
}
