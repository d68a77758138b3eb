/* Sequence-length sources for benchmarks and load: a file with one length per
 * line, or a named synthetic mix such as "lognormal:mu=6,sigma=1,max=8192". */
#ifndef LANEPACK_LENGTHS_H
#define LANEPACK_LENGTHS_H

#include <stddef.h>
#include <stdint.h>

#include "lanepack/rng.h"

#define LP_LENGTHS_MAX_PARTS 8

typedef enum { LP_DIST_FIXED, LP_DIST_UNIFORM, LP_DIST_LOGNORMAL, LP_DIST_ZIPF } lp_dist_kind_t;

typedef struct lp_dist_part_s {
  lp_dist_kind_t kind;
  double weight;
  double a, b;      /* fixed: a; uniform: [a, b]; lognormal: mu, sigma; zipf: s, - */
  uint32_t max;     /* lengths are clamped to [1, max]; 0 = no clamp */
} lp_dist_part_t;

typedef struct lp_lengths_s {
  /* file form: the lengths in file order, cycled; owned */
  uint32_t *values;
  size_t count;
  size_t next;
  /* mix form */
  lp_dist_part_t parts[LP_LENGTHS_MAX_PARTS];
  size_t nparts;
  double total_weight;
  char name[128];   /* the spec or file name, for reports */
} lp_lengths_t;

/* Loads spec: a mix ("fixed:N", "uniform:A,B", "lognormal:mu=M,sigma=S[,max=X]",
 * "zipf:s=S,max=X", parts joined by '+' with an optional "W*" weight, e.g.
 * "0.9*lognormal:mu=5,sigma=1+0.1*fixed:4000"), or else the path of a file with
 * one positive integer per line. Returns 0, or -EINVAL / -ENOENT / -ENOMEM with a
 * message in err naming the file and line or the bad part of the mix. */
int lp_lengths_load(lp_lengths_t *l, const char *spec, char *err, size_t errlen);
void lp_lengths_free(lp_lengths_t *l);

/* The next length: the file's next line (cycling), or a draw from the mix. */
uint32_t lp_lengths_next(lp_lengths_t *l, lp_rng_t *rng);

/* Fills out[0..n) with the file's lengths (n <= count) or n draws. */
void lp_lengths_fill(lp_lengths_t *l, lp_rng_t *rng, uint32_t *out, size_t n);

#endif
