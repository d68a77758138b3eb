/* The latency-aware shape advisor: from a length mix, a cost per shape
 * (measured, or a fitted fixed + per-slot model), a compile budget of K shapes
 * and a target (a request rate and a p99), the set of at most K shapes that
 * serves the most requests/s while meeting the p99 at that rate, found by
 * running the dispatch core against modelled devices (lanepack/sim.h), not by
 * a padding formula. Pure: no I/O; the caller may pass a clock to bound the
 * search in time. */
#ifndef LANEPACK_SHAPEADV_H
#define LANEPACK_SHAPEADV_H

#include <stddef.h>
#include <stdint.h>

#include "lanepack/bucket.h"

#define LP_SADV_MAX_K 8
#define LP_SADV_MAX_CAND 64

/* One shape with the cost the simulation gives it. */
typedef struct lp_sadv_shape_s {
  uint32_t lanes, bucket;
  uint64_t cost_ns;
  int fitted;             /* 1: from the fitted model; 0: measured */
} lp_sadv_shape_t;

/* A set of shapes and what the simulation found for it. */
typedef struct lp_sadv_set_s {
  size_t n;
  lp_sadv_shape_t s[LP_BUCKET_MAX_SHAPES];  /* increasing bucket */
  double capacity_rps;    /* requests/s served under overload (saturation) */
  double p99_ms, p50_ms;  /* at the target rate, with the given devices */
  double fill;            /* real tokens / slots at the target rate */
  uint32_t devices_needed;/* smallest device count whose p99 at the rate meets
                             the target; 0: more than max_devices (or not computed) */
  int meets;              /* p99 at the rate within the target, every request served */
} lp_sadv_set_t;

typedef struct lp_sadv_params_s {
  /* the mix: lengths with weights (weight NULL: 1 each); lengths longer than
   * the largest current bucket are left out and counted */
  const uint32_t *lens;
  const double *weight;
  size_t nlens;
  /* the current set; cost_ns of a shape, when set, is its measured cost */
  lp_bucket_set_t current;
  /* the candidates; count 0: a grid from the mix (see lp_sadv_run) */
  lp_bucket_set_t candidates;
  uint32_t k;             /* shapes wanted at most, 1..LP_SADV_MAX_K */
  double p99_ms;          /* target, > 0 */
  double rate;            /* target requests/s, 0.001..1e9 */
  uint32_t backends, devices;  /* devices per backend; 0 = 1 */
  uint64_t lead_ns;
  uint64_t seed;
  size_t short_requests;  /* per simulation while searching; 0 = 1500 */
  size_t long_requests;   /* per simulation to confirm; 0 = 4 x short */
  uint32_t beam;          /* sets kept per size; 0 = 3 */
  uint32_t confirm;       /* best sets of each size the search found, run long; 0 = 5 */
  uint32_t max_devices;   /* for devices_needed; 0 = 64; devices_needed skipped when
                             no_devices is set */
  int no_devices;
  int exhaustive;         /* every set of 1..k candidates, all run long (a check) */
  /* the time bound: the search stops widening once clock(arg) - its start
   * passes budget_s (clock NULL: no bound but the beam's) */
  double (*clock)(void *arg);
  void *clock_arg;
  double budget_s;
} lp_sadv_params_t;

typedef struct lp_sadv_result_s {
  lp_sadv_set_t current, advice;
  /* the cost model: fixed_ns + per_slot_ns x lanes x bucket, least squares over
   * the measured shapes (a negative fixed part is refitted through 0) */
  double fixed_ns, per_slot_ns;
  size_t fit_points;
  size_t candidates, evaluated;   /* sets simulated, short and long */
  int complete;           /* the search was not cut by the time bound */
  uint32_t longest;       /* longest length kept */
  double kept_weight, dropped_weight; /* lengths kept, left out (too long) */
  lp_sadv_shape_t cand[LP_SADV_MAX_CAND];
} lp_sadv_result_t;

/* Runs the search. The grid, when no candidates are given: bucket lengths at
 * the mix's 50/90/99/100th percentiles (rounded up to 32) and powers of two
 * up to the longest length, none above the largest current bucket; per bucket
 * the lanes that fill the token budget (the largest lanes x bucket of the
 * current set), half and a quarter of them; and the current shapes. Every set
 * holds a shape that takes the longest length. A set is better when it meets
 * the target and the other does not, then by capacity (within 1%: a tie), then
 * by fewer shapes,
 * then by p99; sets that miss the target rank by p99. Returns 0, -EINVAL (err
 * says why), -ENODATA (no length fits) or -ENOMEM. */
int lp_sadv_run(const lp_sadv_params_t *p, lp_sadv_result_t *out, char *err, size_t errlen);

/* The result as one JSON object (no newline) into buf[0..cap), NUL-terminated
 * when it fits; returns the length it needs (as snprintf). */
size_t lp_sadv_json(const lp_sadv_params_t *p, const lp_sadv_result_t *r, char *buf, size_t cap);

#endif
