/* A latency histogram in the HDR style: logarithmic buckets with linear
 * sub-buckets, so memory is fixed (about 30 KB) and every recorded value keeps
 * better than 1% relative precision from 1 microsecond to over an hour. */
#ifndef LANEPACK_HDR_H
#define LANEPACK_HDR_H

#include <stddef.h>
#include <stdint.h>

#define LP_HDR_SUB_BITS 7                      /* 128 sub-buckets per power of two */
#define LP_HDR_SUB (1u << LP_HDR_SUB_BITS)
#define LP_HDR_GROUPS 32                       /* values up to 2^(32+7) us */

typedef struct lp_hdr_s {
  uint64_t counts[LP_HDR_GROUPS * LP_HDR_SUB];
  uint64_t total;
  uint64_t min, max;   /* exact, in microseconds */
  double sum;
} lp_hdr_t;

void lp_hdr_init(lp_hdr_t *h);
/* Records a value in microseconds. */
void lp_hdr_record(lp_hdr_t *h, uint64_t us);
/* Adds every count of src into dst. */
void lp_hdr_merge(lp_hdr_t *dst, const lp_hdr_t *src);
/* The value at quantile q in [0, 1] (the upper edge of its bucket, never above
 * max); 0 when empty. */
uint64_t lp_hdr_quantile(const lp_hdr_t *h, double q);
double lp_hdr_mean(const lp_hdr_t *h);

#endif
