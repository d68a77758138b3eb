/* The "core" policy for lanepack-sim: the dispatch core (lanepack/dispatch.h)
 * driven through the simulator's policy interface, as the proxy drives it:
 * one job of one sequence per request (a group of requests, --big: one job of
 * their sequences), a batch's end as its result, the
 * transfer timeout that the caller (here this adapter) reports itself, and a
 * health prober that brings a backend the core marked down back a probe later. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lanepack/dispatch.h"
#include "lanepack/sim.h"

/* The proxy's defaults (src/proxy/common/config.c) where the core leaves them open. */
#define BACKEND_TIMEOUT_NS 30000000000ull
/* health_interval_ms: a backend the core marked down is probed this often; the
 * modelled backends are alive, so the next probe brings it back */
#define PROBE_NS 1000000000ull

typedef struct pending_s {
  uint64_t batch, at;   /* its transfer times out at `at` */
} pending_t;

typedef struct core_s {
  const sim_model_t *m;
  const sim_req_t *reqs; /* borrowed: a group's lengths, and who its answer goes to */
  uint32_t *lens;        /* scratch for a group's lengths */
  size_t caplens;
  lp_disp_t *d;
  uint64_t timeout_ns;
  uint8_t *ended;       /* batch id -> 1 once its result was given */
  size_t capended;
  pending_t *pend;      /* sends in order, so their timeouts are in order */
  size_t phead, pn, pcap;
  uint32_t *items;      /* scratch for a SEND's requests */
  size_t capitems;
  uint64_t wake_at, now;
  uint64_t probe_at[SIM_MAX_BACKENDS]; /* 0: up, else when the prober says so */
  sim_actq_t aq;
  char why[256];        /* the invariant that broke (m->check) */
} core_t;

static int mark(core_t *s, uint64_t id) {
  if (id >= s->capended) {
    size_t c = s->capended ? s->capended : 1024;
    while (c <= id) c *= 2;
    uint8_t *v = realloc(s->ended, c);
    if (!v) return -ENOMEM;
    memset(v + s->capended, 0, c - s->capended);
    s->ended = v;
    s->capended = c;
  }
  return 0;
}

/* Turns the core's actions into the world's, then asks for the next wake. */
static int drain(core_t *s) {
  lp_disp_action_t a;
  while (lp_disp_next(s->d, &a)) {
    switch (a.kind) {
    case LP_DISP_ACT_SEND: {
      if (a.send.n > s->capitems) {
        size_t c = s->capitems ? s->capitems : 256;
        while (c < a.send.n) c *= 2;
        uint32_t *v = realloc(s->items, c * sizeof(*v));
        if (!v) return -ENOMEM;
        s->items = v;
        s->capitems = c;
      }
      for (size_t i = 0; i < a.send.n; i++)
        s->items[i] = (uint32_t)(a.send.items[i].job_id - 1 + a.send.items[i].seq); /* a group's k-th */
      if (mark(s, a.send.batch_id)) return -ENOMEM;
      if (s->pn == s->pcap) {
        if (s->phead) { /* reuse the room at the front */
          memmove(s->pend, s->pend + s->phead, (s->pn - s->phead) * sizeof(*s->pend));
          s->pn -= s->phead;
          s->phead = 0;
        }
        if (s->pn == s->pcap) {
          size_t c = s->pcap ? s->pcap * 2 : 256;
          pending_t *v = realloc(s->pend, c * sizeof(*v));
          if (!v) return -ENOMEM;
          s->pend = v;
          s->pcap = c;
        }
      }
      s->pend[s->pn++] = (pending_t){.batch = a.send.batch_id, .at = 0};
      if (sim_actq_send(&s->aq, a.send.backend, a.send.shape, a.send.batch_id, s->items, (uint32_t)a.send.n))
        return -ENOMEM;
      break;
    }
    case LP_DISP_ACT_ANSWER: {
      uint32_t first = (uint32_t)(a.answer.job_id - 1), g = s->reqs[first].group;
      for (uint32_t k = 0; k < (g > 1 ? g : 1); k++)
        if (sim_actq_answer(&s->aq, first + k, a.answer.http_status)) return -ENOMEM;
      break;
    }
    case LP_DISP_ACT_HEALTH:
      if (a.health.backend < SIM_MAX_BACKENDS)
        s->probe_at[a.health.backend] = a.health.up ? 0 : s->now + PROBE_NS;
      break;
    case LP_DISP_ACT_OUTPUT:
      break;
    }
  }
  return 0;
}

/* Stamps new sends with their timeout, gives the core the timeouts that came,
 * and arms the world's wake for the earlier of the core's and the next timeout. */
static int settle(core_t *s, uint64_t now) {
  s->now = now;
  int rc = drain(s);
  for (size_t i = s->pn; i-- > s->phead && s->pend[i].at == 0;) s->pend[i].at = now + s->timeout_ns;
  while (!rc && s->phead < s->pn && (s->ended[s->pend[s->phead].batch] || s->pend[s->phead].at <= now)) {
    pending_t p = s->pend[s->phead++];
    if (s->ended[p.batch]) continue;
    s->ended[p.batch] = 1;
    lp_disp_result_t r = {.outcome = LP_DISP_TIMEOUT};
    if (sim_actq_cancel(&s->aq, p.batch)) return -ENOMEM;
    lp_disp_result(s->d, p.batch, &r, now);
    rc = drain(s);
    for (size_t i = s->pn; i-- > s->phead && s->pend[i].at == 0;) s->pend[i].at = now + s->timeout_ns;
  }
  for (uint32_t b = 0; !rc && b < s->m->backends; b++)
    if (s->probe_at[b] && s->probe_at[b] <= now) {
      s->probe_at[b] = 0;
      lp_disp_backend_health(s->d, b, 1, now);
      rc = drain(s);
      for (size_t i = s->pn; i-- > s->phead && s->pend[i].at == 0;) s->pend[i].at = now + s->timeout_ns;
    }
  if (rc) return rc;
  if (s->m->check && lp_disp_check(s->d, now, s->why, sizeof(s->why))) return -EPROTO;
  uint64_t wake = lp_disp_wake_at(s->d);
  for (uint32_t b = 0; b < s->m->backends; b++)
    if (s->probe_at[b] && s->probe_at[b] < wake) wake = s->probe_at[b];
  if (s->phead < s->pn && s->pend[s->phead].at < wake) wake = s->pend[s->phead].at;
  if (wake != UINT64_MAX && wake != s->wake_at) {
    s->wake_at = wake;
    return sim_actq_wake(&s->aq, wake);
  }
  return 0;
}

static int core_admit(void *st, uint64_t now, uint32_t req, const sim_req_t *r) {
  core_t *s = st;
  if (r->in_group) return 0; /* admitted with its group's first */
  uint32_t n = r->group > 1 ? r->group : 1, len = r->len, *lens = &len;
  if (n > 1) {
    if (n > s->caplens) {
      uint32_t *v = realloc(s->lens, n * sizeof(*v));
      if (!v) return -ENOMEM;
      s->lens = v;
      s->caplens = n;
    }
    for (uint32_t k = 0; k < n; k++) s->lens[k] = s->reqs[req + k].len;
    lens = s->lens;
  }
  int rc = lp_disp_admit(s->d, (uint64_t)req + 1, n, lens, r->prio, r->deadline_ns, now);
  if (rc == -ENOMEM) return rc;
  if (rc) {
    const char *code;
    int status = lp_disp_reject_status(rc, &code);
    for (uint32_t k = 0; k < n; k++)
      if (sim_actq_answer(&s->aq, req + k, status)) return -ENOMEM;
  }
  return settle(s, now);
}

static int core_result(void *st, uint64_t now, const sim_result_t *res) {
  core_t *s = st;
  if (res->batch < s->capended && s->ended[res->batch]) return settle(s, now); /* timed out already */
  if (mark(s, res->batch)) return -ENOMEM;
  s->ended[res->batch] = 1;
  lp_disp_result_t r = {.outcome = res->status == 200        ? LP_DISP_OK
                                   : res->status == SIM_RESET ? LP_DISP_RESET
                                                              : LP_DISP_ERR_5XX,
                        .http_status = res->status, .sent_ns = res->sent_ns, .device_ns = res->device_ns};
  lp_disp_result(s->d, res->batch, &r, now);
  return settle(s, now);
}

static int core_tick(void *st, uint64_t now) {
  core_t *s = st;
  s->wake_at = UINT64_MAX;
  lp_disp_tick(s->d, now);
  return settle(s, now);
}

static const char *core_broken(void *st) { return ((core_t *)st)->why; }

static int core_next(void *st, sim_action_t *a) {
  core_t *s = st;
  sim_actq_next(&s->aq, a);
  return 0;
}

static void core_free(void *st) {
  core_t *s = st;
  if (!s) return;
  lp_disp_free(s->d);
  free(s->ended);
  free(s->pend);
  free(s->items);
  free(s->lens);
  sim_actq_free(&s->aq);
  free(s);
}

int sim_core_new(sim_policy_t *p, const sim_model_t *m, const sim_req_t *reqs, int age_order) {
  if (m->backends > LP_DISP_MAX_BACKENDS) return -E2BIG;
  core_t *s = calloc(1, sizeof(*s));
  if (!s) return -ENOMEM;
  s->m = m;
  s->reqs = reqs;
  s->wake_at = UINT64_MAX;
  lp_disp_config_t c;
  lp_disp_config_default(&c);
  c.shapes = m->shapes;
  for (size_t i = 0; i < m->shapes.count; i++) c.seed_cost_ns[i] = m->cost_ns[i];
  c.nbackends = m->backends;
  c.age_order = age_order;
  for (uint32_t b = 0; b < m->backends; b++) c.devices[b] = m->devices;
  if (!c.backend_timeout_ns) c.backend_timeout_ns = BACKEND_TIMEOUT_NS;
  s->timeout_ns = c.backend_timeout_ns;
  s->d = lp_disp_new(&c);
  if (!s->d) {
    core_free(s);
    return -ENOMEM;
  }
  memset(p, 0, sizeof(*p));
  p->name = age_order ? "core-age" : "core";
  p->st = s;
  p->admit = core_admit;
  p->result = core_result;
  p->tick = core_tick;
  p->next = core_next;
  p->free = core_free;
  p->broken = core_broken;
  p->lead_ns = m->lead_ns;
  return 0;
}
