/* Prometheus text exposition: counters, gauges and histograms written into a
 * buffer. Debian packages no C client, so this small writer is ours. */
#ifndef LANEPACK_METRICS_H
#define LANEPACK_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "lanepack/buf.h"

#define LP_HIST_MAX_BUCKETS 32

typedef struct lp_hist_s {
  const double *bounds;  /* upper bounds, increasing; borrowed (static) */
  size_t n;
  uint64_t counts[LP_HIST_MAX_BUCKETS + 1];  /* per bucket, not cumulative; last is +Inf */
  double sum;
  uint64_t count;
} lp_hist_t;

void lp_hist_init(lp_hist_t *h, const double *bounds, size_t n);
/* Counts v; its owner alone calls it, while another thread may read h with
 * lp_hist_add (relaxed atomic loads and stores: no lock). */
void lp_hist_observe(lp_hist_t *h, double v);
/* Adds src's counts (read with relaxed loads) to dst's; same bounds. */
void lp_hist_add(lp_hist_t *dst, const lp_hist_t *src);

/* "# HELP" and "# TYPE" lines for a metric family. */
void lp_metric_family(lp_buf_t *b, const char *name, const char *type, const char *help);
/* v as the inside of a label value (backslash, double quote and newline
 * escaped, as the text format wants) in out, cut at cap - 1 bytes before an
 * escape would be split; returns out. A model name or backend URL may hold
 * any of them: unescaped, one such value made the whole scrape unparseable. */
const char *lp_metric_label(char *out, size_t cap, const char *v);
/* One sample: name{labels} value. labels may be NULL or "" for none. */
void lp_metric_sample(lp_buf_t *b, const char *name, const char *labels, double v);
void lp_metric_sample_u64(lp_buf_t *b, const char *name, const char *labels, uint64_t v);
/* The _bucket (cumulative, ending with le="+Inf"), _sum and _count lines. */
void lp_metric_hist(lp_buf_t *b, const char *name, const char *labels, const lp_hist_t *h);

#endif
