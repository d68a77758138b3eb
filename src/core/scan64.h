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
  uint64_t digit, comma, space;
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
  const __m128i comma = _mm_set1_epi8(','), space = _mm_set1_epi8(' ');
  uint64_t d = 0, c = 0, s = 0;
  for (int i = 0; i < 4; i++) {
    __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(p + 16 * i));
    /* '0'..'9' + 0x50 are exactly the bytes 0x80..0x89: signed, below -118 */
    d |= (uint64_t)(uint16_t)_mm_movemask_epi8(_mm_cmplt_epi8(_mm_add_epi8(v, bias), lim)) << (16 * i);
    c |= (uint64_t)(uint16_t)_mm_movemask_epi8(_mm_cmpeq_epi8(v, comma)) << (16 * i);
    s |= (uint64_t)(uint16_t)_mm_movemask_epi8(_mm_cmpeq_epi8(v, space)) << (16 * i);
  }
  m->digit = d;
  m->comma = c;
  m->space = s;
#else
  uint64_t d = 0, c = 0, s = 0;
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
    s |= lp__gather8(lp__zero8(w ^ 0x2020202020202020ULL)) << (8 * i);
  }
  m->digit = d;
  m->comma = c;
  m->space = s;
#endif
}

/* The index of the first zero bit of x at or after bit i (64 when none). */
static inline unsigned lp__next_zero(uint64_t x, unsigned i) {
  if (i >= 64) return 64;
  uint64_t z = ~x >> i;
  return z ? i + (unsigned)__builtin_ctzll(z) : 64;
}

#endif
