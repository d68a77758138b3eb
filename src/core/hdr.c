/* HDR-style histogram: bucket index = (group, sub) where group is the power of
 * two above the sub-bucket range and sub the top LP_HDR_SUB_BITS bits below it. */
#include "lanepack/hdr.h"

#include <string.h>

void lp_hdr_init(lp_hdr_t *h) {
  memset(h, 0, sizeof(*h));
  h->min = UINT64_MAX;
}

static size_t index_of(uint64_t v) {
  if (v < LP_HDR_SUB) return (size_t)v; /* group 0: exact */
  unsigned bits = 64u - (unsigned)__builtin_clzll(v); /* v < 2^bits */
  unsigned group = bits - LP_HDR_SUB_BITS;           /* >= 1 */
  if (group >= LP_HDR_GROUPS) return LP_HDR_GROUPS * LP_HDR_SUB - 1;
  size_t sub = (size_t)(v >> (group - 1)) - LP_HDR_SUB; /* 0..SUB-1 */
  return (size_t)group * LP_HDR_SUB + sub;
}

/* The largest value that falls in bucket i. */
static uint64_t upper_of(size_t i) {
  size_t group = i / LP_HDR_SUB, sub = i % LP_HDR_SUB;
  if (group == 0) return sub;
  return (((uint64_t)(LP_HDR_SUB + sub) + 1) << (group - 1)) - 1;
}

void lp_hdr_record(lp_hdr_t *h, uint64_t us) {
  h->counts[index_of(us)]++;
  h->total++;
  h->sum += (double)us;
  if (us < h->min) h->min = us;
  if (us > h->max) h->max = us;
}

void lp_hdr_merge(lp_hdr_t *dst, const lp_hdr_t *src) {
  for (size_t i = 0; i < LP_HDR_GROUPS * LP_HDR_SUB; i++) dst->counts[i] += src->counts[i];
  dst->total += src->total;
  dst->sum += src->sum;
  if (src->min < dst->min) dst->min = src->min;
  if (src->max > dst->max) dst->max = src->max;
}

uint64_t lp_hdr_quantile(const lp_hdr_t *h, double q) {
  if (h->total == 0) return 0;
  if (q <= 0) return h->min;
  if (q >= 1) return h->max;
  uint64_t rank = (uint64_t)(q * (double)h->total);
  if (rank >= h->total) rank = h->total - 1;
  uint64_t seen = 0;
  for (size_t i = 0; i < LP_HDR_GROUPS * LP_HDR_SUB; i++) {
    seen += h->counts[i];
    if (seen > rank) {
      uint64_t u = upper_of(i);
      return u > h->max ? h->max : (u < h->min ? h->min : u);
    }
  }
  return h->max;
}

double lp_hdr_mean(const lp_hdr_t *h) { return h->total ? h->sum / (double)h->total : 0; }
