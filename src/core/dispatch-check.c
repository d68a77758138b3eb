/* The dispatch core's invariants, checked between events (lanepack-sim at every
 * step, the proxy's debug build after every event) and the time it spent with
 * work waiting while a device it could use was idle (a counter in every build). */
#include "dispatch-internal.h"

#include "internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>

static disp_seq_t *seq_of(lp_qnode_t *n) { return n ? container_of(n, disp_seq_t, q) : NULL; }

/* The longest sequence a compiled shape of backend b holds (0: none). */
static uint32_t backend_max(const lp_disp_t *d, uint32_t b) {
  uint32_t m = 0;
  for (size_t k = 0; k < d->shapes.count; k++)
    if (d->be[b].state[k] == LP_SHAPE_COMPILED && d->shapes.shapes[k].bucket > m) m = d->shapes.shapes[k].bucket;
  return m;
}

/* Device k of backend b could take a batch now: the backend is healthy (or a
 * probe of it is due), nothing live runs there, and it is not a hung device
 * waiting for its probe time. */
static int device_free(const lp_disp_t *d, uint32_t b, uint32_t k, uint64_t now) {
  const disp_backend_t *be = &d->be[b];
  const disp_dev_t *dv = &be->dev[k];
  if (!be->up && !(be->core_down && !be->probing && now >= be->probe_at)) return 0;
  if (dv->n > dv->lost) return 0;
  return !(dv->suspect >= DISP_SUSPECT_STALLS && now < dv->probe_at);
}

/* A queued sequence backend b can run (it fits a compiled shape there, and it
 * is not avoiding b while another backend is up); NULL when none. Looks at up
 * to max_window queued sequences, as a decision does. */
static const disp_seq_t *waiting_for(const lp_disp_t *d, uint32_t b) {
  uint32_t maxb = backend_max(d, b);
  int others = 0;
  for (uint32_t o = 0; o < d->cfg.nbackends; o++) others |= o != b && d->be[o].up;
  size_t seen = 0;
  for (lp_qnode_t *q = lp_queue_first(&d->queue); q && seen < d->max_window; q = lp_queue_next(&d->queue, q), seen++) {
    const disp_seq_t *s = seq_of(q);
    if (s->len <= maxb && (!(s->avoid & (1u << b)) || !others)) return s;
  }
  return NULL;
}

int lp__disp_idle_with_work(const lp_disp_t *d, uint64_t now, uint32_t *backend, uint32_t *device) {
  if (d->queue.n == 0) return 0;
  for (uint32_t b = 0; b < d->cfg.nbackends; b++)
    for (uint32_t k = 0; k < d->be[b].clock.devices; k++)
      if (device_free(d, b, k, now) && waiting_for(d, b)) {
        if (backend) *backend = b;
        if (device) *device = k;
        return 1;
      }
  return 0;
}

static int fail(char *why, size_t n, const char *fmt, ...) {
  if (why && n) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, n, fmt, ap);
    va_end(ap);
  }
  return -EPROTO;
}

int lp_disp_check(const lp_disp_t *d, uint64_t now, char *why, size_t n) {
  uint32_t b = 0, k = 0;
  /* as of its last event: a probe time passed since is the next event's */
  if (now > d->now) now = d->now;
  if (why && n) why[0] = '\0';
  /* 1. no device that could run a waiting sequence is left idle: the event
   * that freed it (or queued the sequence) sends at once */
  if (lp__disp_idle_with_work(d, now, &b, &k)) {
    const disp_seq_t *s = waiting_for(d, b);
    return fail(why, n, "backend %u device %u is idle while sequence %u of job %llu (length %u) has waited %.3f ms",
                b, k, s->idx, (unsigned long long)s->job->id, s->len, (double)(now - s->enq_ns) / 1e6);
  }
  /* 2. a batch that holds its device has a stall time to be presumed lost at
   * (once a clock can time it): it never holds the device past that */
  if (d->cfg.stall_factor > 0)
    for (b = 0; b < d->cfg.nbackends; b++)
      for (k = 0; k < LP_CLOCK_MAX_DEVICES; k++)
        for (const disp_batch_t *x = d->be[b].dev[k].first; x; x = x->dnext) {
          if (x->lost || lp_theap_contains(&x->stall)) continue;
          if (lp__disp_cost(d, b, x->shape) == 0) continue; /* untimed until a clock learns */
          return fail(why, n, "batch %llu holds backend %u device %u with no stall time",
                      (unsigned long long)x->id, b, k);
        }
  /* 3. every sequence of a live job is queued, in backoff, answered, or in
   * flight with a live copy; one whose copies all stalled (its budget spent)
   * waits on a timer that gives it up */
  for (size_t i = 0; i < d->jobs.cap; i++) {
    const disp_job_t *j = d->jobs.keys[i] ? d->jobs.vals[i] : NULL;
    if (!j || j->answered) continue;
    if (!lp_theap_contains(&j->timer)) return fail(why, n, "job %llu has no timer", (unsigned long long)j->id);
    for (uint32_t q = 0; q < j->nseq; q++) {
      const disp_seq_t *s = &j->seqs[q];
      switch (s->state) {
        case SEQ_QUEUED:
        case SEQ_DONE: continue;
        case SEQ_BACKOFF:
          if (lp_theap_contains(&s->retry)) continue;
          return fail(why, n, "sequence %u of job %llu is in backoff with no retry time", q, (unsigned long long)j->id);
        case SEQ_OUT: {
          if (s->inflight > s->stalled) continue;
          const disp_batch_t *bt = s->inflight ? lp__disp_map_get(&d->batches, s->batch_id) : NULL;
          if (bt && bt->stalled && lp_theap_contains(&bt->stall) &&
              bt->stall.at <= bt->sent_ns + d->cfg.backend_timeout_ns / 2)
            continue;
          return fail(why, n, "sequence %u of job %llu is out with no live copy (%u in flight, %u stalled, %u copies)",
                      q, (unsigned long long)j->id, s->inflight, s->stalled, s->copies);
        }
        default: return fail(why, n, "sequence %u of job %llu in state %u", q, (unsigned long long)j->id, s->state);
      }
    }
  }
  return 0;
}
