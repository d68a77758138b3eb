/* The device clock: per-device expected free times and per-shape service
 * times as window medians. */
#include "lanepack/devclock.h"

#include <string.h>

void lp_window_add(lp_window_t *w, uint64_t v) {
  w->v[w->next] = v;
  w->next = (w->next + 1) % LP_CLOCK_WINDOW;
  if (w->n < LP_CLOCK_WINDOW) w->n++;
  /* the median by counting: the window is small */
  uint64_t sorted[LP_CLOCK_WINDOW];
  memcpy(sorted, w->v, w->n * sizeof(uint64_t));
  for (uint32_t i = 1; i < w->n; i++) {
    uint64_t x = sorted[i];
    uint32_t j = i;
    while (j > 0 && sorted[j - 1] > x) {
      sorted[j] = sorted[j - 1];
      j--;
    }
    sorted[j] = x;
  }
  w->median = sorted[w->n / 2];
}

void lp_devclock_init(lp_devclock_t *c, uint32_t devices) {
  memset(c, 0, sizeof(*c));
  lp_devclock_set_devices(c, devices);
}

void lp_devclock_set_devices(lp_devclock_t *c, uint32_t devices) {
  if (devices < 1) devices = 1;
  if (devices > LP_CLOCK_MAX_DEVICES) devices = LP_CLOCK_MAX_DEVICES;
  c->devices = devices;
}

void lp_devclock_seed(lp_devclock_t *c, int shape, uint64_t cost_ns) {
  if (shape >= 0 && shape < LP_BUCKET_MAX_SHAPES) c->seed_ns[shape] = cost_ns;
}

void lp_devclock_forget_shape(lp_devclock_t *c, int shape) {
  if (shape < 0 || shape >= LP_BUCKET_MAX_SHAPES) return;
  memset(&c->svc[shape], 0, sizeof(c->svc[shape]));
  c->seed_ns[shape] = 0;
}

uint64_t lp_devclock_cost(const lp_devclock_t *c, int shape) {
  if (shape < 0 || shape >= LP_BUCKET_MAX_SHAPES) return 0;
  return c->svc[shape].n ? c->svc[shape].median : c->seed_ns[shape];
}

uint64_t lp_devclock_lead(const lp_devclock_t *c) { return c->lead.median; }

int lp_devclock_idle_device(const lp_devclock_t *c) {
  for (uint32_t d = 0; d < c->devices; d++)
    if (c->dev[d].batches == 0) return (int)d;
  return -1;
}

uint64_t lp_devclock_next_free(const lp_devclock_t *c) {
  uint64_t t = UINT64_MAX;
  for (uint32_t d = 0; d < c->devices; d++) {
    if (c->dev[d].batches == 0) return 0;
    if (c->dev[d].free_ns && c->dev[d].free_ns < t) t = c->dev[d].free_ns;
  }
  return t;
}

uint64_t lp_devclock_next_free_at(const lp_devclock_t *c, uint64_t now, uint64_t slack_ns) {
  uint64_t t = UINT64_MAX;
  for (uint32_t d = 0; d < c->devices; d++) {
    if (c->dev[d].batches == 0) return 0;
    uint64_t f = c->dev[d].free_ns;
    if (f && f + slack_ns >= now && f < t) t = f;
  }
  return t;
}

int lp_devclock_start(lp_devclock_t *c, int shape, uint64_t now, uint64_t *finish_ns) {
  int best = 0;
  for (uint32_t d = 0; d < c->devices; d++) {
    const lp_device_t *v = &c->dev[d];
    if (v->batches == 0) {
      best = (int)d;
      break;
    }
    if (v->free_ns && (c->dev[best].free_ns == 0 || v->free_ns < c->dev[best].free_ns)) best = (int)d;
  }
  lp_device_t *v = &c->dev[best];
  uint64_t cost = lp_devclock_cost(c, shape);
  uint64_t begin = now + lp_devclock_lead(c);
  if (v->batches && v->free_ns > begin) begin = v->free_ns;
  v->batches++;
  v->free_ns = cost && (v->batches == 1 || v->free_ns) ? begin + cost : 0;
  if (finish_ns) *finish_ns = v->free_ns;
  return best;
}

/* Any device the batch started on: one a reload has cut since (devices) must
 * still be freed, or it is busy for ever once it comes back. */
static void release(lp_devclock_t *c, int device, uint64_t now, uint64_t expected_end) {
  if (device < 0 || device >= LP_CLOCK_MAX_DEVICES) return;
  lp_device_t *v = &c->dev[device];
  if (v->batches) v->batches--;
  if (v->batches == 0) {
    v->free_ns = 0;
  } else if (v->free_ns && expected_end) {
    /* the batch behind it started when this one ended, not when expected */
    int64_t shift = (int64_t)now - (int64_t)expected_end;
    v->free_ns = (uint64_t)((int64_t)v->free_ns + shift);
  }
}

void lp_devclock_finish(lp_devclock_t *c, int device, int shape, uint64_t sent_ns, uint64_t expect_ns,
                        uint64_t now, uint64_t device_ns, double fill) {
  uint64_t total = now > sent_ns ? now - sent_ns : 0;
  uint64_t svc = device_ns ? device_ns : total;
  /* a batch that waited behind another on its device says nothing clean about
   * its own service time unless the backend reported it */
  int alone = device >= 0 && (uint32_t)device < c->devices && c->dev[device].batches == 1;
  if (shape >= 0 && shape < LP_BUCKET_MAX_SHAPES && (device_ns || alone)) {
    lp_window_add(&c->svc[shape], svc);
    if (device_ns && alone) lp_window_add(&c->lead, total > device_ns ? total - device_ns : 0);
  }
  c->busy_ns += svc;
  c->useful_ns += (uint64_t)((double)svc * (fill < 0 ? 0 : fill > 1 ? 1 : fill));
  release(c, device, now, expect_ns);
}

void lp_devclock_abandon(lp_devclock_t *c, int device, uint64_t expect_ns, uint64_t now) {
  release(c, device, now, expect_ns);
}
