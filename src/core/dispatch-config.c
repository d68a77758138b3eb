/* What the I/O shell changes in a running dispatch core besides events: its
 * tunables after a reload, and shape slots a backend added or that were pruned
 * (the shell keeps one shape index space with the core). */
#include "dispatch-internal.h"

#include <errno.h>


int lp_disp_reconfigure(lp_disp_t *d, const lp_disp_config_t *cfg) {
  if (d == NULL || cfg == NULL || (unsigned)cfg->packer >= LP_ALGO_COUNT) return -EINVAL;
  lp_disp_config_t *c = &d->cfg;
  c->max_segments = cfg->max_segments;
  c->packer = cfg->packer;
  c->max_wait_ns = cfg->max_wait_ns;
  c->high_util = cfg->high_util;
  c->max_queued_at_device = cfg->max_queued_at_device;
  c->max_window = cfg->max_window;
  c->age_order = cfg->age_order;
  c->max_copies = cfg->max_copies;
  c->stall_factor = cfg->stall_factor;
  c->stall_min_ns = cfg->stall_min_ns;
  c->retry_backoff_ns = cfg->retry_backoff_ns;
  c->backend_timeout_ns = cfg->backend_timeout_ns;
  c->unhealthy_after = cfg->unhealthy_after;
  c->request_bound_ns = cfg->request_bound_ns;
  c->max_queue_jobs = cfg->max_queue_jobs;
  c->max_queue_tokens = cfg->max_queue_tokens;
  lp__disp_derive(d);
  /* seeded costs take effect on every backend (learned ones stay learned) */
  for (size_t s = 0; s < d->shapes.count && s < LP_BUCKET_MAX_SHAPES; s++) {
    uint64_t seed = cfg->seed_cost_ns[s];
    c->seed_cost_ns[s] = seed;
    for (uint32_t b = 0; seed && b < c->nbackends; b++) lp_devclock_seed(&d->be[b].clock, (int)s, seed);
  }
  return 0;
}

int lp_disp_set_shape(lp_disp_t *d, size_t k, uint32_t lanes, uint32_t bucket) {
  if (d == NULL || k >= LP_BUCKET_MAX_SHAPES || k > d->shapes.count || (lanes == 0) != (bucket == 0))
    return -EINVAL;
  lp_shape_t *s = &d->shapes.shapes[k];
  if (k < d->shapes.count && s->lanes == lanes && s->bucket == bucket) return 0;
  if (k == d->shapes.count) d->shapes.count++;
  *s = (lp_shape_t){.lanes = lanes, .bucket = bucket, .state = LP_SHAPE_UNAVAILABLE};
  for (uint32_t b = 0; b < LP_DISP_MAX_BACKENDS; b++) {
    d->be[b].state[k] = LP_SHAPE_UNAVAILABLE;
    lp_devclock_forget_shape(&d->be[b].clock, (int)k);
  }
  /* trailing free slots leave the count */
  while (d->shapes.count && d->shapes.shapes[d->shapes.count - 1].lanes == 0) d->shapes.count--;
  return 0;
}

int lp_disp_set_queue_depth(lp_disp_t *d, uint32_t queued) {
  if (d == NULL) return -EINVAL;
  d->max_queued = queued;
  return 0;
}
