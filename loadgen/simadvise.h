/* lanepack-sim's --advise mode (simadvise.c). */
#ifndef LANEPACK_SIMADVISE_H
#define LANEPACK_SIMADVISE_H

#include <stdint.h>

#include "lanepack/sim.h"

typedef struct sim_advise_opts_s {
  uint32_t k;               /* 0: not asked */
  double p99_ms, rate, budget_s;
  uint64_t requests;        /* per short simulation; 0: the advisor's default */
  const char *candidates;   /* a shape list, or NULL for the grid */
  int exhaustive, json;
  uint64_t seed;
} sim_advise_opts_t;

/* Prints the advice for the model's shapes and costs on the pool's lengths.
 * Returns the exit status (0, 1, or 2 for bad input, with a message). */
int sim_advise(const sim_model_t *m, const sim_pool_t *pool, const sim_advise_opts_t *ao);

#endif
