/* Bin-packing of sequence lengths into lanes of a fixed bucket length: first-fit
 * decreasing, best-fit decreasing and shortest-pack-first histogram packing. */
#ifndef LANEPACK_PACKER_H
#define LANEPACK_PACKER_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
  LP_ALGO_FFD = 0,  /* first-fit decreasing, O(n log n) with a max-capacity tree */
  LP_ALGO_BFD,      /* best-fit decreasing, O(n log n) with a capacity index */
  LP_ALGO_SPFHP,    /* shortest-pack-first histogram packing (Krell et al. 2021) */
  LP_ALGO_COUNT
} lp_algo_t;

typedef struct lp_pack_params_s {
  uint32_t capacity;      /* bucket length: token slots per lane */
  uint32_t max_bins;      /* lanes available; 0 = as many as needed */
  uint32_t max_segments;  /* sequences per lane; 0 = no limit */
  uint32_t n_pinned;      /* the first n_pinned items are placed first, in order */
} lp_pack_params_t;

typedef struct lp_place_s {
  int32_t bin;      /* lane index, or -1 when the item was not placed */
  uint32_t offset;  /* first token slot in the lane */
} lp_place_t;

/* Scratch space reused across calls so packing allocates only when inputs grow.
 * Owned by the caller; one per thread. */
typedef struct lp_packer_s lp_packer_t;

lp_packer_t *lp_packer_new(void);
void lp_packer_free(lp_packer_t *p);

/* Places n items of lengths lens[] into bins. out[i] receives item i's placement.
 * Items longer than the capacity, or that do not fit in max_bins, get bin -1.
 * Pinned items are placed before the rest (first fit, in the order given);
 * the rest follow the algorithm; among equal lengths, lower index first.
 * *bins_used (may be NULL) gets the number of bins opened.
 * Returns the number of items placed, or -ENOMEM / -EINVAL. */
long lp_packer_pack(lp_packer_t *p, lp_algo_t algo, const lp_pack_params_t *prm,
                    const uint32_t *lens, size_t n, lp_place_t *out, uint32_t *bins_used);

/* Histogram form of SPFHP: count[l] sequences of length l for l in 1..capacity
 * (count has capacity+1 entries). Returns the number of bins needed (unlimited
 * bins), or a negative errno. Cost grows with distinct lengths, not with counts. */
long lp_packer_spfhp_bins(lp_packer_t *p, const uint64_t *count, uint32_t capacity,
                          uint32_t max_segments);

const char *lp_algo_name(lp_algo_t a);
/* Returns the algorithm named s ("ffd", "bfd", "spfhp"), or -EINVAL. */
int lp_algo_parse(const char *s);

#endif
