/* The Prometheus text format writer (version 0.0.4). */
#include "lanepack/metrics.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

void lp_hist_init(lp_hist_t *h, const double *bounds, size_t n) {
  memset(h, 0, sizeof(*h));
  h->bounds = bounds;
  h->n = n > LP_HIST_MAX_BUCKETS ? LP_HIST_MAX_BUCKETS : n;
}

void lp_hist_observe(lp_hist_t *h, double v) {
  size_t i = 0;
  while (i < h->n && v > h->bounds[i]) i++;
  /* relaxed loads and stores (no locked instruction): a front's histograms
   * are read by the thread that renders /metrics while their owner writes */
  __atomic_store_n(&h->counts[i], __atomic_load_n(&h->counts[i], __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED);
  double sum;
  __atomic_load(&h->sum, &sum, __ATOMIC_RELAXED);
  sum += v;
  __atomic_store(&h->sum, &sum, __ATOMIC_RELAXED);
  __atomic_store_n(&h->count, __atomic_load_n(&h->count, __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED);
}

void lp_hist_add(lp_hist_t *dst, const lp_hist_t *src) {
  /* the count is the buckets read, not src's own: a read between an owner's
   * bucket increment and its count's would render a +Inf bucket that is not
   * _count */
  uint64_t count = 0;
  for (size_t i = 0; i <= src->n && i <= LP_HIST_MAX_BUCKETS; i++) {
    uint64_t c = __atomic_load_n(&src->counts[i], __ATOMIC_RELAXED);
    dst->counts[i] += c;
    count += c;
  }
  double sum;
  __atomic_load(&src->sum, &sum, __ATOMIC_RELAXED);
  dst->sum += sum;
  dst->count += count;
}

const char *lp_metric_label(char *out, size_t cap, const char *v) {
  size_t k = 0;
  for (; cap && *v; v++) {
    /* the text format's three escapes inside a label value; nothing else is */
    const char *e = *v == '\\' ? "\\\\" : *v == '"' ? "\\\"" : *v == '\n' ? "\\n" : NULL;
    size_t n = e ? 2 : 1;
    if (k + n >= cap) break; /* cut whole: never half an escape */
    if (e) memcpy(out + k, e, 2);
    else out[k] = *v;
    k += n;
  }
  if (cap) out[k] = '\0';
  return out;
}

void lp_metric_family(lp_buf_t *b, const char *name, const char *type, const char *help) {
  lp_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void put_value(lp_buf_t *b, double v) {
  if (isinf(v)) lp_buf_puts(b, v > 0 ? "+Inf" : "-Inf");
  else if (isnan(v)) lp_buf_puts(b, "NaN");
  else if (v == (double)(int64_t)v && fabs(v) < 9e15) lp_buf_i64(b, (int64_t)v);
  else lp_buf_printf(b, "%.9g", v);
}

/* "name{labels} " : what every sample line starts with */
static void put_series(lp_buf_t *b, const char *name, const char *labels) {
  lp_buf_puts(b, name);
  if (labels && *labels) {
    lp_buf_puts(b, "{");
    lp_buf_puts(b, labels);
    lp_buf_puts(b, "}");
  }
  lp_buf_puts(b, " ");
}

void lp_metric_sample(lp_buf_t *b, const char *name, const char *labels, double v) {
  put_series(b, name, labels);
  put_value(b, v);
  lp_buf_puts(b, "\n");
}

void lp_metric_sample_u64(lp_buf_t *b, const char *name, const char *labels, uint64_t v) {
  put_series(b, name, labels);
  lp_buf_u64(b, v);
  lp_buf_puts(b, "\n");
}

void lp_metric_hist(lp_buf_t *b, const char *name, const char *labels, const lp_hist_t *h) {
  uint64_t cum = 0;
  const char *sep = labels && *labels ? "," : "";
  for (size_t i = 0; i <= h->n; i++) {
    cum += h->counts[i];
    lp_buf_printf(b, "%s_bucket{%s%sle=\"", name, labels ? labels : "", sep);
    if (i == h->n) lp_buf_puts(b, "+Inf");
    else lp_buf_printf(b, "%.9g", h->bounds[i]);
    lp_buf_puts(b, "\"} ");
    lp_buf_u64(b, cum);
    lp_buf_puts(b, "\n");
  }
  char n2[128];
  snprintf(n2, sizeof(n2), "%s_sum", name);
  lp_metric_sample(b, n2, labels, h->sum);
  snprintf(n2, sizeof(n2), "%s_count", name);
  lp_metric_sample_u64(b, n2, labels, h->count);
}
