/* Poisson arrivals by inversion of the exponential distribution. */
#include "lanepack/arrivals.h"

#include <math.h>

uint64_t lp_arrival_gap_ns(lp_rng_t *rng, double rate) {
  double u = lp_rng_double(rng); /* [0, 1): 1 - u is never 0 */
  return (uint64_t)(-log(1.0 - u) / rate * 1e9);
}
