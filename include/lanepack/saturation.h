/* A model's saturation over a trailing window: the mean time requests waited
 * before dispatch over the mean device time of a batch (as Triton's users scale
 * on queue-duration / compute-duration). In the simulator the p99 takes off
 * near 0.8 to 1 (a request waits about as long as a batch runs), whatever the mix and its
 * fill; autoscalers target 0.7 (README, "Scaling out", has the evidence). Made from cumulative
 * sums (the histograms' sum and count) sampled whenever it is read, so nothing
 * on the request path changes. No I/O, no clock: the caller passes the time. */
#ifndef LANEPACK_SATURATION_H
#define LANEPACK_SATURATION_H

#include <stddef.h>
#include <stdint.h>

#define LP_SAT_SNAPS 32
#define LP_SAT_WINDOW_NS 30000000000ull /* 30 s: two Prometheus scrapes at the default 15 s */

/* Cumulative sums at a moment: waits of requests dispatched (seconds, count)
 * and device times of batches answered (seconds, count). */
typedef struct lp_sat_sums_s {
  uint64_t at_ns;
  double wait_s, service_s;
  uint64_t waits, batches;
} lp_sat_sums_t;

/* A ring of samples spaced at least window/16 apart. All zero is a valid empty
 * state (window LP_SAT_WINDOW_NS), so it can sit zeroed in a bigger struct. */
typedef struct lp_saturation_s {
  lp_sat_sums_t ring[LP_SAT_SNAPS];
  size_t head, n;          /* oldest sample, samples held */
  uint64_t window_ns;      /* 0: LP_SAT_WINDOW_NS */
} lp_saturation_t;

/* Records cur (sums since start, now at cur->at_ns) and returns the ratio over
 * the last window: (wait in the window + pending_s) / (waits + pending) over
 * the window's mean device time per batch. pending_s/pending are the requests
 * still queued and how long they have waited so far, so that a backlog nothing
 * drains still shows. The device time falls back to the mean since start when
 * no batch ended in the window. 0 when nothing waited in the window or no
 * batch has ever ended (nothing to compare with). */
double lp_saturation_update(lp_saturation_t *s, const lp_sat_sums_t *cur, double pending_s,
                            uint64_t pending);

#endif
