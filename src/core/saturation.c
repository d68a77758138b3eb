/* A model's saturation (queue delay over service time) over a trailing window,
 * from cumulative sums sampled when read. */
#include "lanepack/saturation.h"

static uint64_t window(const lp_saturation_t *s) { return s->window_ns ? s->window_ns : LP_SAT_WINDOW_NS; }

static const lp_sat_sums_t *at(const lp_saturation_t *s, size_t i) {
  return &s->ring[(s->head + i) % LP_SAT_SNAPS];
}

/* Keeps cur when the newest sample is window/16 old or more (or there is none):
 * 32 samples then cover at least two windows, whatever the scrape interval. */
static void record(lp_saturation_t *s, const lp_sat_sums_t *cur) {
  if (s->n) {
    const lp_sat_sums_t *newest = at(s, s->n - 1);
    if (cur->at_ns < newest->at_ns + window(s) / 16) return;
  }
  if (s->n == LP_SAT_SNAPS) {
    s->head = (s->head + 1) % LP_SAT_SNAPS;
    s->n--;
  }
  s->ring[(s->head + s->n) % LP_SAT_SNAPS] = *cur;
  s->n++;
}

double lp_saturation_update(lp_saturation_t *s, const lp_sat_sums_t *cur, double pending_s,
                            uint64_t pending) {
  /* the base: the newest sample at least a window old; else the oldest one;
   * before any, the start (all zero) */
  static const lp_sat_sums_t zero = {0};
  const lp_sat_sums_t *base = &zero;
  uint64_t w = window(s);
  for (size_t i = 0; i < s->n; i++) {
    const lp_sat_sums_t *x = at(s, i);
    if (x->at_ns > cur->at_ns || x->waits > cur->waits || x->batches > cur->batches) break; /* not before cur */
    if (i == 0 || x->at_ns + w <= cur->at_ns) base = x;
  }
  record(s, cur);
  double wait = cur->wait_s - base->wait_s + pending_s;
  uint64_t waits = cur->waits - base->waits + pending;
  if (!waits) return 0;
  double service;
  if (cur->batches > base->batches)
    service = (cur->service_s - base->service_s) / (double)(cur->batches - base->batches);
  else if (cur->batches)
    service = cur->service_s / (double)cur->batches;
  else
    return 0;
  if (!(service > 0)) return 0;
  double r = wait / (double)waits / service;
  return r > 0 ? r : 0;
}
