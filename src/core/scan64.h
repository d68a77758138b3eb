/* 64 bytes at a time: which bytes are digits, commas and spaces, as bitmasks
 * (bit i for byte i), so the readers of integer arrays find each number's run
 * of digits and its separator with a few bit operations instead of a branch
 * per byte. SSE2 where the compiler targets it (every x86-64), eight-byte
 * words elsewhere; both give the same masks (tests/test-numscan.c holds the
 * fast readers to the byte-at-a-time ones on random and edge inputs). */
#ifndef LANEPACK_CORE_SCAN64_H
#define LANEPACK_CORE_SCAN64_H

#include <stdint.h>
#include <string.h>

/* LP_SCAN64_PORTABLE: the eight-byte words even where SSE2 is there (the
 * test of the masks builds both) */
#if defined(__SSE2__) && !defined(LP_SCAN64_PORTABLE)
#define LP_SCAN64_SSE2 1
#include <emmintrin.h>
#endif

typedef struct {
  uint64_t digit, comma, space; /* space: any JSON whitespace (' ', \t, \n, \r) */
  uint64_t zero;                /* '0' */
} lp_scan64_t;

#if !defined(LP_SCAN64_SSE2)
/* The high bit of each byte of x, gathered into the low eight bits (byte k
 * to bit k). */
static inline uint64_t lp__gather8(uint64_t x) {
  return ((x & 0x8080808080808080ULL) * 0x0002040810204081ULL) >> 56;
}

/* High bit set exactly where a byte of x is zero. */
static inline uint64_t lp__zero8(uint64_t x) {
  uint64_t t = (x & 0x7f7f7f7f7f7f7f7fULL) + 0x7f7f7f7f7f7f7f7fULL;
  return ~(t | x | 0x7f7f7f7f7f7f7f7fULL);
}
#endif

/* Fills m for the 64 bytes at p (all readable). */
static inline void lp_scan64(const char *p, lp_scan64_t *m) {
#if defined(LP_SCAN64_SSE2)
  const __m128i bias = _mm_set1_epi8(0x50), lim = _mm_set1_epi8(-118);
  const __m128i comma = _mm_set1_epi8(','), space = _mm_set1_epi8(' '), zero = _mm_set1_epi8('0');
  const __m128i tab = _mm_set1_epi8('\t'), nl = _mm_set1_epi8('\n'), cr = _mm_set1_epi8('\r');
  uint64_t d = 0, c = 0, s = 0, z = 0;
  for (int i = 0; i < 4; i++) {
    __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(p + 16 * i));
    /* '0'..'9' + 0x50 are exactly the bytes 0x80..0x89: signed, below -118 */
    d |= (uint64_t)(uint16_t)_mm_movemask_epi8(_mm_cmplt_epi8(_mm_add_epi8(v, bias), lim)) << (16 * i);
    c |= (uint64_t)(uint16_t)_mm_movemask_epi8(_mm_cmpeq_epi8(v, comma)) << (16 * i);
    __m128i ws = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, space), _mm_cmpeq_epi8(v, tab)),
                              _mm_or_si128(_mm_cmpeq_epi8(v, nl), _mm_cmpeq_epi8(v, cr)));
    s |= (uint64_t)(uint16_t)_mm_movemask_epi8(ws) << (16 * i);
    z |= (uint64_t)(uint16_t)_mm_movemask_epi8(_mm_cmpeq_epi8(v, zero)) << (16 * i);
  }
  m->digit = d;
  m->comma = c;
  m->space = s;
  m->zero = z;
#else
  uint64_t d = 0, c = 0, s = 0, z = 0;
  for (int i = 0; i < 8; i++) {
    uint64_t w;
    memcpy(&w, p + 8 * i, 8);
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
    w = __builtin_bswap64(w);
#endif
    /* per byte, no carry between bytes: the low seven bits plus 0x50
     * reach the high bit from '0' on, plus 0x46 from ':' on */
    uint64_t x = w & 0x7f7f7f7f7f7f7f7fULL;
    uint64_t dig = (x + 0x5050505050505050ULL) & ~(x + 0x4646464646464646ULL) & ~w;
    d |= lp__gather8(dig) << (8 * i);
    c |= lp__gather8(lp__zero8(w ^ 0x2c2c2c2c2c2c2c2cULL)) << (8 * i);
    s |= lp__gather8(lp__zero8(w ^ 0x2020202020202020ULL) | lp__zero8(w ^ 0x0909090909090909ULL) |
                     lp__zero8(w ^ 0x0a0a0a0a0a0a0a0aULL) | lp__zero8(w ^ 0x0d0d0d0d0d0d0d0dULL))
         << (8 * i);
    z |= lp__gather8(lp__zero8(w ^ 0x3030303030303030ULL)) << (8 * i);
  }
  m->digit = d;
  m->comma = c;
  m->space = s;
  m->zero = z;
#endif
}

/* The number of set bits of x, inline (the builtin is a library call on
 * x86-64 without -mpopcnt, which showed in the profile). */
static inline unsigned lp__popcount64(uint64_t x) {
  x = x - ((x >> 1) & 0x5555555555555555ULL);
  x = (x & 0x3333333333333333ULL) + ((x >> 2) & 0x3333333333333333ULL);
  x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0fULL;
  return (unsigned)((x * 0x0101010101010101ULL) >> 56);
}

/* Bit i of the result: the parity of the set bits of x at i and below. */
static inline uint64_t lp__prefix_xor(uint64_t x) {
  x ^= x << 1;
  x ^= x << 2;
  x ^= x << 4;
  x ^= x << 8;
  x ^= x << 16;
  x ^= x << 32;
  return x;
}

/* The plain integers of a block of an array: the 64 bytes at p begin a value,
 * and the block is taken up to its last comma before any byte that is not a
 * digit, a comma or whitespace. Sets *starts and *ends (the first and last
 * digit of each run of digits in that part) and returns the number of bytes
 * taken (through that comma), or 0 when the part is not runs of digits and
 * single commas in turn, starting with a digit, or a run has a leading zero
 * (the scalar loop then takes the value at p, or rejects it). */
#if defined(LP_SCAN64_SSE2)
/* lp_scan64 without the whitespace mask, then that only when the block has
 * bytes other than digits and commas: arrays written without spaces (the
 * batch writer's, most backends') skip a third of the work. */
static inline void lp_scan64_lazy(const char *p, lp_scan64_t *m) {
  const __m128i bias = _mm_set1_epi8(0x50), lim = _mm_set1_epi8(-118);
  const __m128i comma = _mm_set1_epi8(','), zero = _mm_set1_epi8('0');
  __m128i v[4];
  uint64_t d = 0, c = 0, z = 0;
  for (int i = 0; i < 4; i++) {
    v[i] = _mm_loadu_si128((const __m128i *)(const void *)(p + 16 * i));
    d |= (uint64_t)(uint16_t)_mm_movemask_epi8(_mm_cmplt_epi8(_mm_add_epi8(v[i], bias), lim)) << (16 * i);
    c |= (uint64_t)(uint16_t)_mm_movemask_epi8(_mm_cmpeq_epi8(v[i], comma)) << (16 * i);
    z |= (uint64_t)(uint16_t)_mm_movemask_epi8(_mm_cmpeq_epi8(v[i], zero)) << (16 * i);
  }
  m->digit = d;
  m->comma = c;
  m->zero = z;
  m->space = 0;
  if (~(d | c)) {
    const __m128i space = _mm_set1_epi8(' '), tab = _mm_set1_epi8('\t'), nl = _mm_set1_epi8('\n'),
                  cr = _mm_set1_epi8('\r');
    uint64_t s = 0;
    for (int i = 0; i < 4; i++) {
      __m128i ws = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v[i], space), _mm_cmpeq_epi8(v[i], tab)),
                                _mm_or_si128(_mm_cmpeq_epi8(v[i], nl), _mm_cmpeq_epi8(v[i], cr)));
      s |= (uint64_t)(uint16_t)_mm_movemask_epi8(ws) << (16 * i);
    }
    m->space = s;
  }
}
#else
#define lp_scan64_lazy lp_scan64
#endif

static inline unsigned lp_scan64_plain(const char *p, uint64_t *starts, uint64_t *ends) {
  lp_scan64_t m;
  lp_scan64_lazy(p, &m);
  uint64_t other = ~(m.digit | m.comma | m.space);
  uint64_t commas = other ? m.comma & ((1ULL << __builtin_ctzll(other)) - 1) : m.comma;
  if (!commas || !(m.digit & 1)) return 0;
  unsigned last = 63 - (unsigned)__builtin_clzll(commas);
  uint64_t part = last == 63 ? ~0ULL : (1ULL << (last + 1)) - 1;
  uint64_t s = m.digit & ~(m.digit << 1) & part, c = m.comma & part;
  /* runs and commas alternate, a run first: the n-th of them (from 1) is a
   * run when n is odd */
  uint64_t odd = lp__prefix_xor(s | c);
  if ((s & ~odd) | (c & odd) | (s & m.zero & (m.digit >> 1))) return 0;
  *starts = s;
  *ends = m.digit & ~(m.digit >> 1) & part;
  return last + 1;
}

#endif
