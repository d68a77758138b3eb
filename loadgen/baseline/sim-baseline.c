/* The baseline policy for lanepack-sim ("legacy"): the scheduler lanepack
 * ran before its dispatch core (a decide-mode window and a device clock per
 * backend), kept only so the simulator has a BEFORE figure on the same
 * arrivals; the proxy no longer runs it. Modelled: the window, the clock's modes and ms-rounded wake-ups, at
 * most 2 x devices batches in flight per backend, a 5xx to several sequences
 * sending each alone next time, retries with backoff, stall hedging (3 copies)
 * and the backend timeout. Not modelled: health probes, priorities. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lanepack/devclock.h"
#include "baseline-sched.h"
#include "lanepack/sim.h"

#define WINDOW_MAX 4096
#define MAX_RETRIES 2
#define BACKOFF_NS 20000000ull
#define STALL_FACTOR 3
#define STALL_MIN_NS 100000000ull
#define TIMEOUT_NS 30000000000ull

typedef struct lbackend_s {
  lp_devclock_t clock;
  uint32_t inflight, failures_in_row;
} lbackend_t;

typedef struct lbatch_s {
  uint32_t *items;      /* owned; NULL once resolved */
  uint32_t n, backend;
  int device, shape;
  uint64_t sent_ns, expect_ns, stall_at, timeout_at;
  uint64_t real;
  int hedged;
} lbatch_t;

typedef struct lreq_s {
  lp_baseline_item_t item;
  uint32_t attempts, copies, flying; /* flying: batches holding it now */
  uint8_t isolate, queued, answered, avoid; /* avoid: backend + 1 */
} lreq_t;

typedef struct retry_s {
  uint64_t at;
  uint32_t req;
} retry_t;

typedef struct baseline_s {
  const sim_model_t *m;
  const sim_req_t *reqs;
  lp_baseline_t *sched;
  lbackend_t be[SIM_MAX_BACKENDS];
  uint32_t rr;
  lreq_t *r;            /* per request, grown as they come */
  size_t nr;
  uint32_t *q;          /* the queue: live requests in q[qh..qn), arrival order */
  size_t qh, qn, qcap;
  lbatch_t *b;          /* batch id - 1 -> batch */
  size_t nb, capb;
  size_t open_from;     /* no batch before it is still open */
  retry_t *retries;     /* backoffs under way */
  size_t nretries, capretries;
  lp_baseline_item_t *win, *win2;
  uint32_t *winpos, *placed;
  uint64_t wake_at;
  sim_actq_t aq;
} baseline_t;

static int reserve(void **p, size_t *cap, size_t want, size_t size) {
  if (want <= *cap) return 0;
  size_t c = *cap ? *cap : 256;
  while (c < want) c *= 2;
  void *v = realloc(*p, c * size);
  if (!v) return -ENOMEM;
  *p = v;
  *cap = c;
  return 0;
}

/* Puts req back in the queue in arrival order (it is usually near the head). */
static int requeue(baseline_t *s, uint32_t req) {
  if (s->r[req].queued || s->r[req].answered) return 0;
  if (s->qh == 0) {
    /* make room at the front */
    size_t room = s->qn - s->qh + 64;
    if (reserve((void **)&s->q, &s->qcap, s->qn + room, sizeof(*s->q))) return -ENOMEM;
    memmove(s->q + room, s->q, s->qn * sizeof(*s->q));
    s->qh += room;
    s->qn += room;
  }
  size_t i = s->qh;
  while (i < s->qn && s->q[i] < req) i++;
  memmove(s->q + s->qh - 1, s->q + s->qh, (i - s->qh) * sizeof(*s->q));
  s->qh--;
  s->q[i - 1] = req;
  s->r[req].queued = 1;
  return 0;
}

static int answer(baseline_t *s, uint32_t req, int status) {
  lreq_t *r = &s->r[req];
  if (r->answered) return 0;
  r->answered = 1;
  return sim_actq_answer(&s->aq, req, status);
}

static int healthy_others(const baseline_t *s, uint32_t b) {
  return s->m->backends > 1 && b < s->m->backends; /* health is not modelled: all are */
}

/* One decision round, as lp__model_schedule: returns 1 when a batch left. */
static int schedule_once(baseline_t *s, uint64_t now, uint64_t *wake) {
  const sim_model_t *m = s->m;
  /* drop answered and dead entries at the head */
  while (s->qh < s->qn && (!s->r[s->q[s->qh]].queued)) s->qh++;
  if (s->qh == s->qn) return 0;
  /* backends with a free slot, fewest failures in a row then fewest in flight */
  uint32_t order[SIM_MAX_BACKENDS];
  size_t nfree = 0;
  for (uint32_t k = 0; k < m->backends; k++) {
    uint32_t b = (s->rr + k) % m->backends;
    if (s->be[b].inflight >= 2 * s->be[b].clock.devices) continue;
    size_t at = nfree++;
    while (at > 0 && (s->be[b].failures_in_row < s->be[order[at - 1]].failures_in_row ||
                      (s->be[b].failures_in_row == s->be[order[at - 1]].failures_in_row &&
                       s->be[b].inflight < s->be[order[at - 1]].inflight))) {
      order[at] = order[at - 1];
      at--;
    }
    order[at] = b;
  }
  if (!nfree) return 0;
  /* the window: a sequence marked to go alone is one by itself when it leads */
  uint64_t cap = 0, acc = 0;
  for (size_t i = 0; i < m->shapes.count; i++) {
    uint64_t c = (uint64_t)m->shapes.shapes[i].lanes * m->shapes.shapes[i].bucket;
    if (c > cap) cap = c;
  }
  size_t n = 0;
  if (s->r[s->q[s->qh]].isolate) {
    s->winpos[0] = (uint32_t)s->qh;
    s->win[0] = s->r[s->q[s->qh]].item;
    n = 1;
  } else {
    for (size_t i = s->qh; i < s->qn && n < WINDOW_MAX && acc < 2 * cap; i++) {
      lreq_t *r = &s->r[s->q[i]];
      if (!r->queued || r->isolate) continue;
      s->winpos[n] = (uint32_t)i;
      s->win[n++] = r->item;
      acc += r->item.len;
    }
  }
  if (!n) return 0;
  for (size_t k = 0; k < nfree; k++) {
    uint32_t b = order[k];
    lbackend_t *be = &s->be[b];
    lp_bucket_set_t view = m->shapes;
    for (size_t i = 0; i < view.count; i++) view.shapes[i].cost_ns = lp_devclock_cost(&be->clock, (int)i);
    lp_baseline_mode_t mode = LP_BASELINE_NOW;
    if (lp_devclock_idle_device(&be->clock) < 0) {
      uint64_t lead = lp_devclock_lead(&be->clock);
      uint64_t slack = lead > 2000000 ? lead : 2000000;
      uint64_t free_at = lp_devclock_next_free_at(&be->clock, now, slack);
      uint64_t leave = free_at == UINT64_MAX ? UINT64_MAX : free_at > lead ? free_at - lead : 0;
      if (now < leave) {
        mode = LP_BASELINE_FULL_ONLY;
        if (leave < *wake) *wake = leave;
      }
    }
    lp_baseline_item_t *items = s->win;
    int any = 0;
    for (size_t i = 0; i < n && !any; i++) any = s->r[s->q[s->winpos[i]]].avoid == b + 1;
    if (any && healthy_others(s, b)) {
      memcpy(s->win2, s->win, n * sizeof(*s->win2));
      for (size_t i = 0; i < n; i++)
        if (s->r[s->q[s->winpos[i]]].avoid == b + 1) s->win2[i].len = UINT32_MAX;
      items = s->win2;
    }
    lp_baseline_plan_t plan;
    if (lp_baseline_decide_mode(s->sched, &view, items, n, now, mode, &plan)) return -ENOMEM;
    for (size_t i = 0; i < n; i++) s->win[i].bypassed = items[i].bypassed;
    if (plan.action == LP_BASELINE_WAIT && plan.wake_ns < *wake) *wake = plan.wake_ns;
    for (size_t i = 0; i < n; i++) s->r[s->q[s->winpos[i]]].item.bypassed = s->win[i].bypassed;
    if (plan.action != LP_BASELINE_DISPATCH) continue;
    /* the batch leaves */
    if (reserve((void **)&s->b, &s->capb, s->nb + 1, sizeof(*s->b))) return -ENOMEM;
    uint32_t np = 0;
    for (size_t i = 0; i < plan.n; i++)
      if (plan.place[i].bin >= 0) s->placed[np++] = s->q[s->winpos[i]];
    lbatch_t *bt = &s->b[s->nb++];
    memset(bt, 0, sizeof(*bt));
    bt->items = malloc(np * sizeof(uint32_t));
    if (!bt->items) return -ENOMEM;
    memcpy(bt->items, s->placed, np * sizeof(uint32_t));
    bt->n = np;
    bt->backend = b;
    bt->shape = plan.shape;
    bt->sent_ns = now;
    bt->device = lp_devclock_start(&be->clock, plan.shape, now, &bt->expect_ns);
    uint64_t expect = bt->expect_ns > now ? bt->expect_ns - now : 0;
    bt->stall_at = now + (STALL_FACTOR * expect > STALL_MIN_NS ? STALL_FACTOR * expect : STALL_MIN_NS);
    bt->timeout_at = now + TIMEOUT_NS;
    for (uint32_t i = 0; i < np; i++) {
      lreq_t *r = &s->r[bt->items[i]];
      r->queued = 0;
      r->copies++;
      r->flying++;
      bt->real += r->item.len;
    }
    be->inflight++;
    s->rr = (b + 1) % m->backends;
    /* the window's gaps close up: the live part of q[qh..last] moves right */
    size_t last = s->winpos[n - 1], j = last + 1;
    for (size_t i = last + 1; i-- > s->qh;)
      if (s->r[s->q[i]].queued) s->q[--j] = s->q[i];
    s->qh = j;
    return sim_actq_send(&s->aq, b, plan.shape, s->nb, bt->items, np) ? -ENOMEM : 1;
  }
  return 0;
}

/* Timers that came due: backoffs ending, stalls to hedge, timeouts. */
static int timers(baseline_t *s, uint64_t now, uint64_t *wake) {
  size_t k = 0;
  for (size_t i = 0; i < s->nretries; i++) {
    if (s->retries[i].at <= now) {
      if (requeue(s, s->retries[i].req)) return -ENOMEM;
    } else {
      if (s->retries[i].at < *wake) *wake = s->retries[i].at;
      s->retries[k++] = s->retries[i];
    }
  }
  s->nretries = k;
  while (s->open_from < s->nb && !s->b[s->open_from].items) s->open_from++;
  for (size_t i = s->open_from; i < s->nb; i++) {
    lbatch_t *bt = &s->b[i];
    if (!bt->items) continue;
    if (!bt->hedged && bt->stall_at <= now) {
      /* hedge: its sequences queue again, at most three copies each */
      bt->hedged = 1;
      for (uint32_t j = 0; j < bt->n; j++)
        if (s->r[bt->items[j]].copies < 3 && requeue(s, bt->items[j])) return -ENOMEM;
    }
    if (bt->timeout_at <= now) {
      /* given up: the slot is freed, the sequences try again elsewhere */
      lp_devclock_abandon(&s->be[bt->backend].clock, bt->device, bt->expect_ns, now);
      s->be[bt->backend].inflight--;
      s->be[bt->backend].failures_in_row++;
      for (uint32_t j = 0; j < bt->n; j++) {
        lreq_t *r = &s->r[bt->items[j]];
        r->flying--;
        if (r->answered || r->flying || r->queued) continue;
        if (r->attempts >= MAX_RETRIES) {
          if (answer(s, bt->items[j], 504)) return -ENOMEM;
          continue;
        }
        r->attempts++;
        r->avoid = (uint8_t)(bt->backend + 1);
        if (requeue(s, bt->items[j])) return -ENOMEM;
      }
      free(bt->items);
      bt->items = NULL;
      continue;
    }
    uint64_t t = bt->hedged ? bt->timeout_at : bt->stall_at;
    if (t < *wake) *wake = t;
  }
  return 0;
}

static int run(baseline_t *s, uint64_t now) {
  uint64_t wake = UINT64_MAX;
  int rc = timers(s, now, &wake);
  if (rc) return rc;
  for (;;) {
    uint64_t w = UINT64_MAX;
    rc = schedule_once(s, now, &w);
    if (rc < 0) return rc;
    if (rc == 0) {
      /* the proxy's wake timer rounds up to whole milliseconds, 1 at least */
      if (w != UINT64_MAX) {
        uint64_t d = w > now ? (w - now + 999999) / 1000000 : 0;
        w = now + (d ? d : 1) * 1000000;
        if (w < wake) wake = w;
      }
      break;
    }
  }
  if (wake != UINT64_MAX && wake != s->wake_at) {
    s->wake_at = wake;
    return sim_actq_wake(&s->aq, wake);
  }
  return 0;
}

static int baseline_admit(void *st, uint64_t now, uint32_t req, const sim_req_t *q) {
  baseline_t *s = st;
  if (reserve((void **)&s->r, &s->nr, (size_t)req + 1, sizeof(*s->r))) return -ENOMEM;
  lreq_t *r = &s->r[req];
  memset(r, 0, sizeof(*r));
  if (lp_bucket_set_admit(&s->m->shapes, q->len, NULL) != LP_ADMIT_OK) {
    r->answered = 1;
    return sim_actq_answer(&s->aq, req, 413);
  }
  r->item = (lp_baseline_item_t){.len = q->len, .enqueued_ns = q->arrive_ns, .deadline_ns = q->deadline_ns};
  if (reserve((void **)&s->q, &s->qcap, s->qn + 1, sizeof(*s->q))) return -ENOMEM;
  s->q[s->qn++] = req;
  r->queued = 1;
  return run(s, now);
}

static int baseline_result(void *st, uint64_t now, const sim_result_t *res) {
  baseline_t *s = st;
  if (res->batch == 0 || res->batch > s->nb) return -EINVAL;
  lbatch_t *bt = &s->b[res->batch - 1];
  if (!bt->items) return run(s, now); /* given up already */
  lbackend_t *be = &s->be[bt->backend];
  be->inflight--;
  if (res->status == 200) {
    const lp_shape_t *sh = &s->m->shapes.shapes[bt->shape];
    lp_devclock_finish(&be->clock, bt->device, bt->shape, bt->sent_ns, bt->expect_ns, now, res->device_ns,
                       (double)bt->real / ((double)sh->lanes * sh->bucket));
    be->failures_in_row = 0;
    for (uint32_t i = 0; i < bt->n; i++) {
      lreq_t *r = &s->r[bt->items[i]];
      r->flying--;
      r->queued = 0; /* a hedge still waiting is dropped */
      if (answer(s, bt->items[i], 200)) return -ENOMEM;
    }
  } else {
    lp_devclock_abandon(&be->clock, bt->device, bt->expect_ns, now);
    be->failures_in_row++;
    /* a 5xx to several, the first in a row: each goes alone, for free */
    int isolate = bt->n > 1 && be->failures_in_row <= 1;
    uint32_t most = 0;
    for (uint32_t i = 0; i < bt->n; i++) {
      lreq_t *r = &s->r[bt->items[i]];
      r->flying--;
      if (r->answered || r->flying || r->queued) continue; /* another copy carries it */
      if (isolate) {
        r->isolate = 1;
        if (requeue(s, bt->items[i])) return -ENOMEM;
        continue;
      }
      if (r->attempts >= MAX_RETRIES) {
        if (answer(s, bt->items[i], 502)) return -ENOMEM;
        continue;
      }
      r->attempts++;
      if (r->attempts > most) most = r->attempts;
      if (reserve((void **)&s->retries, &s->capretries, s->nretries + 1, sizeof(*s->retries))) return -ENOMEM;
      s->retries[s->nretries++] = (retry_t){.at = 0, .req = bt->items[i]};
    }
    /* one backoff for the batch: the most tried sequence's */
    uint64_t backoff = BACKOFF_NS;
    for (uint32_t i = 1; i < most; i++) backoff *= 2;
    for (size_t i = 0; i < s->nretries; i++)
      if (s->retries[i].at == 0) s->retries[i].at = now + backoff;
  }
  free(bt->items);
  bt->items = NULL;
  return run(s, now);
}

static int baseline_tick(void *st, uint64_t now) {
  baseline_t *s = st;
  s->wake_at = UINT64_MAX;
  return run(s, now);
}

static int baseline_next(void *st, sim_action_t *a) {
  baseline_t *s = st;
  sim_actq_next(&s->aq, a);
  return 0;
}

static void baseline_free(void *st) {
  baseline_t *s = st;
  if (!s) return;
  lp_baseline_free(s->sched);
  for (size_t i = 0; i < s->nb; i++) free(s->b[i].items);
  free(s->b);
  free(s->r);
  free(s->q);
  free(s->retries);
  free(s->win);
  free(s->win2);
  free(s->winpos);
  free(s->placed);
  sim_actq_free(&s->aq);
  free(s);
}

int sim_baseline_new(sim_policy_t *p, const sim_model_t *m, const sim_req_t *reqs) {
  baseline_t *s = calloc(1, sizeof(*s));
  if (!s) return -ENOMEM;
  s->m = m;
  s->reqs = reqs;
  s->wake_at = UINT64_MAX;
  lp_baseline_config_t sc = {.algo = LP_ALGO_BFD, .fill_target = 0.95, .max_wait_ns = 5000000ull,
                             .max_bypass = 8};
  s->sched = lp_baseline_new(&sc);
  s->win = malloc(WINDOW_MAX * sizeof(*s->win));
  s->win2 = malloc(WINDOW_MAX * sizeof(*s->win2));
  s->winpos = malloc(WINDOW_MAX * sizeof(*s->winpos));
  s->placed = malloc(WINDOW_MAX * sizeof(*s->placed));
  if (!s->sched || !s->win || !s->win2 || !s->winpos || !s->placed) {
    baseline_free(s);
    return -ENOMEM;
  }
  for (uint32_t b = 0; b < m->backends && b < SIM_MAX_BACKENDS; b++) {
    lp_devclock_init(&s->be[b].clock, m->devices);
    for (size_t i = 0; i < m->shapes.count; i++) lp_devclock_seed(&s->be[b].clock, (int)i, m->cost_ns[i]);
  }
  memset(p, 0, sizeof(*p));
  p->name = "legacy";
  p->st = s;
  p->admit = baseline_admit;
  p->result = baseline_result;
  p->tick = baseline_tick;
  p->next = baseline_next;
  p->free = baseline_free;
  p->lead_ns = m->lead_ns;
  return 0;
}
