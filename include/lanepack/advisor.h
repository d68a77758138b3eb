/* The bucket advisor: from the observed length histogram, the set of K shapes
 * that minimizes padding, and the fill it would give against the current set. */
#ifndef LANEPACK_ADVISOR_H
#define LANEPACK_ADVISOR_H

#include <stddef.h>
#include <stdint.h>

#include "lanepack/bucket.h"
#include "lanepack/packer.h"

/* Histogram of sequence lengths 1..max; longer ones are only counted. */
typedef struct lp_lenhist_s {
  uint64_t *count;  /* max + 1 entries; owned */
  uint32_t max;
  uint64_t over;    /* observations longer than max */
  uint64_t total;   /* observations, over included */
} lp_lenhist_t;

int lp_lenhist_init(lp_lenhist_t *h, uint32_t max);
void lp_lenhist_free(lp_lenhist_t *h);
void lp_lenhist_add(lp_lenhist_t *h, uint32_t len, uint64_t times);

#define LP_ADVISE_MAX_K 8

typedef struct lp_advice_s {
  size_t k;                              /* shapes proposed (may be < asked) */
  uint32_t lanes[LP_ADVISE_MAX_K];
  uint32_t bucket[LP_ADVISE_MAX_K];      /* increasing */
  /* padded: each sequence alone in a lane of the smallest bucket that fits;
   * packed: sequences packed (SPFHP) into lanes of the smallest bucket that fits */
  double padded_fill, packed_fill;
  double current_padded_fill, current_packed_fill;
  uint64_t sequences;                    /* counted, over the largest bucket excluded */
  uint64_t tokens;
  uint64_t rejected;                     /* longer than the largest bucket allowed */
} lp_advice_t;

typedef enum {
  LP_ADVISE_PADDED = 0,  /* least padding with one sequence per lane (no packing) */
  LP_ADVISE_PACKED       /* best packed fill: the fewest of up to k shapes that pack best */
} lp_advise_objective_t;

typedef struct lp_advise_params_s {
  lp_advise_objective_t objective;
  uint32_t k;             /* shapes wanted at most, 1..LP_ADVISE_MAX_K */
  uint32_t max_bucket;    /* largest bucket allowed */
  uint64_t token_budget;  /* lanes x bucket of every proposed shape, at most */
  uint32_t granule;       /* bucket lengths are multiples of it (e.g. 128) */
  uint32_t max_segments;  /* per lane, for the packed estimate; 0 = no limit */
} lp_advise_params_t;

/* Proposes shapes for the lengths in h. current (may be NULL or empty) is
 * evaluated the same way for comparison. Returns 0, -EINVAL, -ENODATA when the
 * histogram holds nothing that fits, or -ENOMEM. */
int lp_advise(lp_packer_t *pk, const lp_lenhist_t *h, const lp_advise_params_t *prm,
              const lp_bucket_set_t *current, lp_advice_t *out);

#endif
