/* Random mutations of a document for the differential tests against jansson:
 * one to three bytes replaced, removed or inserted from an alphabet. */
#ifndef LANEPACK_TESTS_MUTATE_H
#define LANEPACK_TESTS_MUTATE_H

#include <string.h>

#include "lanepack/rng.h"

/* buf holds the NUL-terminated document of *n bytes (room for cap). */
static inline void lp_test_mutate(lp_rng_t *rng, char *buf, size_t *n, size_t cap, const char *alphabet, size_t alen) {
  int muts = 1 + (int)lp_rng_below(rng, 3);
  for (int m = 0; m < muts; m++) {
    size_t at = (size_t)lp_rng_below(rng, *n);
    int op = (int)lp_rng_below(rng, 3);
    char c = alphabet[lp_rng_below(rng, alen)];
    if (op == 0) buf[at] = c;
    else if (op == 1 && *n > 1) { memmove(buf + at, buf + at + 1, *n - at); (*n)--; }
    else if (*n + 2 < cap) { memmove(buf + at + 1, buf + at, *n - at + 1); buf[at] = c; (*n)++; }
  }
}

#endif
