/* Arrival processes for open-loop load: the gap to the next request. */
#ifndef LANEPACK_ARRIVALS_H
#define LANEPACK_ARRIVALS_H

#include <stdint.h>

#include "lanepack/rng.h"

/* Poisson arrivals at rate per second: an exponential gap, in nanoseconds. */
uint64_t lp_arrival_gap_ns(lp_rng_t *rng, double rate);

#endif
