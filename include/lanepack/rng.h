/* A small, fast, seedable generator (xoshiro256**, seeded by splitmix64) so that
 * benchmarks, load and tests are reproducible from one seed. */
#ifndef LANEPACK_RNG_H
#define LANEPACK_RNG_H

#include <stdint.h>

typedef struct lp_rng_s {
  uint64_t s[4];
} lp_rng_t;

static inline uint64_t lp_rng__splitmix(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static inline void lp_rng_seed(lp_rng_t *r, uint64_t seed) {
  for (int i = 0; i < 4; i++) r->s[i] = lp_rng__splitmix(&seed);
}

static inline uint64_t lp_rng_next(lp_rng_t *r) {
  uint64_t *s = r->s;
  uint64_t x = s[1] * 5;
  uint64_t result = ((x << 7) | (x >> 57)) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = (s[3] << 45) | (s[3] >> 19);
  return result;
}

/* Uniform in [0, 1). */
static inline double lp_rng_double(lp_rng_t *r) {
  return (double)(lp_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

/* Uniform in [0, n), n > 0; the bias is below 2^-32 for n < 2^32. */
static inline uint64_t lp_rng_below(lp_rng_t *r, uint64_t n) {
  return lp_rng_next(r) % n;
}

#endif
