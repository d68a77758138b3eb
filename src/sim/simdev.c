/* The simulator's world: an event heap at virtual time, the arrivals, and the
 * modelled backends whose devices run one batch at a time (cost per shape,
 * jitter, stalls, failures, resets, slow answers and slow errors, a lead time before a
 * batch reaches its backend). It drives one policy and keeps its figures. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lanepack/sim.h"

enum { EV_ARRIVE, EV_DELIVER, EV_DONE, EV_WAKE };

typedef struct ev_s {
  uint64_t t, seq;  /* seq: ties go first come, first served */
  uint32_t type, idx;
} ev_t;

/* A batch the policy sent: owned by the world from SEND to its end. */
typedef struct wbatch_s {
  uint64_t id;          /* the policy's */
  uint64_t sent_ns, device_ns;
  uint32_t backend, n, next;  /* next: the backend's queue */
  int shape, status;
  uint32_t *items;      /* owned */
  uint64_t real;
  int cancelled, running, done;
  int carrying;         /* counted in its requests' carried (it may still answer) */
} wbatch_t;

typedef struct backend_s {
  uint32_t busy;
  uint32_t qhead, qtail;  /* batches delivered and waiting for a device; UINT32_MAX: none */
  uint64_t idle_since;    /* the idle check: since when a device has been idle (+ 1; 0: none is) */
} backend_t;

typedef struct world_s {
  const sim_model_t *m;
  sim_policy_t *p;
  const sim_req_t *reqs;
  size_t n;
  lp_rng_t rng;
  uint64_t now, horizon, wake_at, seq;
  ev_t *heap;
  size_t nheap, capheap;
  wbatch_t *b;
  size_t nb, capb;
  uint32_t *map;        /* open addressing: policy batch id -> index + 1 */
  size_t capmap;
  backend_t be[SIM_MAX_BACKENDS];
  uint64_t *answered;   /* per request: answer time + 1, 0 = none */
  int *status;
  uint64_t *sent;       /* per request: its first send + 1, 0 = none */
  /* figures */
  uint64_t busy_ns, real_tokens, slots, batches, failed, doubles, last_answer, window_ok, window_tokens;
  /* the idle check (m->check): per request, the batches carrying it that may
   * still answer, and since when it has waited on none (+ 1; 0: carried or
   * not arrived); a heap of (since, request) entries, stale ones skipped */
  uint32_t *carried;
  uint64_t *since;
  ev_t *waiting;
  size_t nwaiting, capwaiting;
} world_t;

/* The longest a request may wait on nothing that can answer it while a device
 * of its backend is idle: the policy's own waits (its batching wait, a stall
 * time, a hung device's probe backoff, a retry backoff) are each under a second
 * at the core's defaults; a stalled batch that held its device to the transfer
 * timeout held it 30 s (issue 33). */
#define IDLE_BOUND_NS 2000000000ull

#define NONE UINT32_MAX

static int push(world_t *w, uint64_t t, uint32_t type, uint32_t idx) {
  if (w->nheap == w->capheap) {
    size_t c = w->capheap ? w->capheap * 2 : 1024;
    ev_t *h = realloc(w->heap, c * sizeof(*h));
    if (!h) return -ENOMEM;
    w->heap = h;
    w->capheap = c;
  }
  ev_t e = {t, w->seq++, type, idx};
  size_t i = w->nheap++;
  while (i > 0) {
    size_t up = (i - 1) / 2;
    ev_t *u = &w->heap[up];
    if (u->t < e.t || (u->t == e.t && u->seq < e.seq)) break;
    w->heap[i] = *u;
    i = up;
  }
  w->heap[i] = e;
  return 0;
}

static ev_t pop(world_t *w) {
  ev_t top = w->heap[0], last = w->heap[--w->nheap];
  size_t i = 0, n = w->nheap;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= n) break;
    if (c + 1 < n && (w->heap[c + 1].t < w->heap[c].t ||
                      (w->heap[c + 1].t == w->heap[c].t && w->heap[c + 1].seq < w->heap[c].seq)))
      c++;
    if (last.t < w->heap[c].t || (last.t == w->heap[c].t && last.seq < w->heap[c].seq)) break;
    w->heap[i] = w->heap[c];
    i = c;
  }
  if (n) w->heap[i] = last;
  return top;
}

/* Request req waits on nothing from now (the idle check). */
static int wait_from(world_t *w, uint32_t req) {
  if (!w->m->check || w->answered[req] || w->carried[req]) return 0;
  if (w->nwaiting == w->capwaiting) {
    size_t c = w->capwaiting ? w->capwaiting * 2 : 1024;
    ev_t *h = realloc(w->waiting, c * sizeof(*h));
    if (!h) return -ENOMEM;
    w->waiting = h;
    w->capwaiting = c;
  }
  w->since[req] = w->now + 1;
  ev_t e = {w->now, req, 0, req};
  size_t i = w->nwaiting++;
  while (i > 0 && w->waiting[(i - 1) / 2].t > e.t) {
    w->waiting[i] = w->waiting[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  w->waiting[i] = e;
  return 0;
}

/* The batch no longer carries its requests (it ended, stalled or was dropped). */
static int uncarry(world_t *w, wbatch_t *b) {
  if (!b->carrying) return 0;
  b->carrying = 0;
  int rc = 0;
  for (uint32_t i = 0; i < b->n && !rc; i++)
    if (--w->carried[b->items[i]] == 0) rc = wait_from(w, b->items[i]);
  return rc;
}

/* The oldest request that waits on nothing (stale entries dropped), or NONE. */
static uint32_t oldest_waiting(world_t *w) {
  while (w->nwaiting) {
    ev_t top = w->waiting[0];
    if (!w->answered[top.idx] && !w->carried[top.idx] && w->since[top.idx] == top.t + 1) return top.idx;
    ev_t last = w->waiting[--w->nwaiting];
    size_t i = 0, n = w->nwaiting;
    for (;;) {
      size_t c = 2 * i + 1;
      if (c >= n) break;
      if (c + 1 < n && w->waiting[c + 1].t < w->waiting[c].t) c++;
      if (last.t <= w->waiting[c].t) break;
      w->waiting[i] = w->waiting[c];
      i = c;
    }
    if (n) w->waiting[i] = last;
  }
  return UINT32_MAX;
}

static size_t hslot(const world_t *w, uint64_t id) {
  uint64_t h = id * 0x9e3779b97f4a7c15ull;
  return (size_t)(h >> 20) & (w->capmap - 1);
}

static int map_grow(world_t *w) {
  size_t c = w->capmap ? w->capmap * 2 : 4096;
  uint32_t *m = calloc(c, sizeof(*m));
  if (!m) return -ENOMEM;
  uint32_t *old = w->map;
  size_t oc = w->capmap;
  w->map = m;
  w->capmap = c;
  for (size_t i = 0; i < oc; i++) {
    if (!old[i]) continue;
    size_t s = hslot(w, w->b[old[i] - 1].id);
    while (m[s]) s = (s + 1) & (c - 1);
    m[s] = old[i];
  }
  free(old);
  return 0;
}

/* The index of the batch the policy calls id, or NONE. */
static uint32_t find(const world_t *w, uint64_t id) {
  if (!w->capmap) return NONE;
  for (size_t s = hslot(w, id); w->map[s]; s = (s + 1) & (w->capmap - 1))
    if (w->b[w->map[s] - 1].id == id) return w->map[s] - 1;
  return NONE;
}

static int add_batch(world_t *w, const sim_action_t *a, uint32_t *out) {
  if (find(w, a->batch) != NONE) return -EEXIST;
  if (w->nb == w->capb) {
    size_t c = w->capb ? w->capb * 2 : 1024;
    wbatch_t *b = realloc(w->b, c * sizeof(*b));
    if (!b) return -ENOMEM;
    w->b = b;
    w->capb = c;
  }
  if ((w->nb + 1) * 2 > w->capmap && map_grow(w)) return -ENOMEM;
  wbatch_t *b = &w->b[w->nb];
  memset(b, 0, sizeof(*b));
  b->items = malloc((a->n ? a->n : 1) * sizeof(uint32_t));
  if (!b->items) return -ENOMEM;
  memcpy(b->items, a->items, a->n * sizeof(uint32_t));
  b->id = a->batch;
  b->n = a->n;
  b->backend = a->backend;
  b->shape = a->shape;
  b->sent_ns = w->now;
  b->next = NONE;
  for (uint32_t i = 0; i < a->n; i++) {
    b->real += w->reqs[a->items[i]].len;
    if (!w->sent[a->items[i]]) w->sent[a->items[i]] = w->now + 1;
    if (w->m->check) w->carried[a->items[i]]++;
  }
  b->carrying = w->m->check;
  size_t s = hslot(w, b->id);
  while (w->map[s]) s = (s + 1) & (w->capmap - 1);
  w->map[s] = (uint32_t)(w->nb + 1);
  *out = (uint32_t)w->nb++;
  return 0;
}

/* Takes every action the policy has queued. */
static int drain(world_t *w, char *err, size_t errlen) {
  sim_action_t a;
  for (;;) {
    memset(&a, 0, sizeof(a));
    int rc = w->p->next(w->p->st, &a);
    if (rc) return rc;
    switch (a.kind) {
    case SIM_ACT_NONE:
      return 0;
    case SIM_ACT_SEND: {
      if (a.backend >= w->m->backends || a.shape < 0 || (size_t)a.shape >= w->m->shapes.count ||
          a.n == 0) {
        snprintf(err, errlen, "%s sent a batch the world cannot run (backend %u, shape %d, %u items)",
                 w->p->name, a.backend, a.shape, a.n);
        return -EINVAL;
      }
      const lp_shape_t *sh = &w->m->shapes.shapes[a.shape];
      uint32_t idx;
      if ((rc = add_batch(w, &a, &idx))) {
        snprintf(err, errlen, "%s: batch %llu: %s", w->p->name, (unsigned long long)a.batch,
                 rc == -EEXIST ? "sent twice" : "out of memory");
        return rc;
      }
      if (w->b[idx].real > (uint64_t)sh->lanes * sh->bucket) {
        snprintf(err, errlen, "%s sent %llu tokens in a %ux%u batch", w->p->name,
                 (unsigned long long)w->b[idx].real, sh->lanes, sh->bucket);
        return -EINVAL;
      }
      if ((rc = push(w, w->now + w->p->lead_ns, EV_DELIVER, idx))) return rc;
      break;
    }
    case SIM_ACT_ANSWER:
      if (a.req >= w->n) {
        snprintf(err, errlen, "%s answered request %u of %zu", w->p->name, a.req, w->n);
        return -EINVAL;
      }
      if (w->answered[a.req]) {
        w->doubles++;
      } else {
        w->answered[a.req] = w->now + 1;
        w->status[a.req] = a.status;
        if (w->now > w->last_answer) w->last_answer = w->now;
        if (w->horizon && a.status == 200 && w->now >= w->horizon / 5) {
          w->window_ok++;
          w->window_tokens += w->reqs[a.req].len;
        }
      }
      break;
    case SIM_ACT_CANCEL: {
      uint32_t idx = find(w, a.batch);
      if (idx != NONE) w->b[idx].cancelled = 1;
      break;
    }
    case SIM_ACT_WAKE:
      w->wake_at = a.at < w->now ? w->now : a.at;
      if ((rc = push(w, w->wake_at, EV_WAKE, 0))) return rc;
      break;
    }
  }
}

/* Starts what waits at backend bk while it has a free device. */
static int start(world_t *w, uint32_t bk) {
  backend_t *be = &w->be[bk];
  const sim_model_t *m = w->m;
  while (be->busy < m->devices && be->qhead != NONE) {
    uint32_t idx = be->qhead;
    wbatch_t *b = &w->b[idx];
    be->qhead = b->next;
    if (be->qhead == NONE) be->qtail = NONE;
    if (b->cancelled) {
      b->done = 1;
      if (uncarry(w, b)) return -ENOMEM;
      continue;
    }
    double j = m->jitter > 0 ? 1 + m->jitter * (2 * lp_rng_double(&w->rng) - 1) : 1;
    uint64_t t = (uint64_t)((double)m->cost_ns[b->shape] * (j > 0 ? j : 0));
    double u = lp_rng_double(&w->rng);
    b->status = 200;
    if (!w->p->faultless) {
      if ((u -= m->fail_rate) < 0) {
        b->status = 500;
      } else if ((u -= m->stall_rate) < 0) {
        b->done = 1; /* never answers; the device is free again */
        w->failed++;
        if (uncarry(w, b)) return -ENOMEM;
        continue;
      } else if ((u -= m->slow_error_rate) < 0) {
        b->status = 500;
        t = m->slow_error_ns;
      } else if ((u -= m->slow_rate) < 0) {
        t += m->slow_ns;
      } else if ((u -= m->reset_rate) < 0) { /* drawn last: the other faults' draws are as before */
        b->status = SIM_RESET;
      }
    }
    b->device_ns = t;
    b->running = 1;
    be->busy++;
    w->busy_ns += t;
    int rc = push(w, w->now + t, EV_DONE, idx);
    if (rc) return rc;
  }
  return 0;
}

/* The policy's failure rc in err, with what broke when it says. */
static void failed(const world_t *w, int rc, char *err, size_t errlen) {
  const char *why = rc == -EPROTO && w->p->broken ? w->p->broken(w->p->st) : NULL;
  if (why) snprintf(err, errlen, "%s broke an invariant at %.6f s: %s", w->p->name, (double)w->now / 1e9, why);
  else snprintf(err, errlen, "%s failed: %s", w->p->name, strerror(-rc));
}

static int step(world_t *w, const ev_t *e, char *err, size_t errlen) {
  int rc = 0;
  switch (e->type) {
  case EV_ARRIVE: {
    uint32_t i = e->idx;
    if (i + 1 < w->n && (!w->horizon || w->reqs[i + 1].arrive_ns <= w->horizon))
      if ((rc = push(w, w->reqs[i + 1].arrive_ns, EV_ARRIVE, i + 1))) return rc;
    rc = w->p->admit(w->p->st, w->now, i, &w->reqs[i]);
    if (rc) break;
    if ((rc = drain(w, err, errlen))) return rc;
    return wait_from(w, i);
  }
  case EV_DELIVER: {
    wbatch_t *b = &w->b[e->idx];
    backend_t *be = &w->be[b->backend];
    if (be->qtail == NONE) be->qhead = e->idx;
    else w->b[be->qtail].next = e->idx;
    be->qtail = e->idx;
    return start(w, b->backend);
  }
  case EV_DONE: {
    wbatch_t *b = &w->b[e->idx];
    b->running = 0;
    b->done = 1;
    w->be[b->backend].busy--;
    w->batches++;
    if (b->status == 200) {
      const lp_shape_t *sh = &w->m->shapes.shapes[b->shape];
      w->real_tokens += b->real;
      w->slots += (uint64_t)sh->lanes * sh->bucket;
    } else {
      w->failed++;
    }
    if (!b->cancelled) {
      sim_result_t r = {.batch = b->id, .status = b->status, .sent_ns = b->sent_ns,
                        .answered_ns = w->now, .device_ns = b->device_ns};
      rc = w->p->result(w->p->st, w->now, &r);
      if (rc) failed(w, rc, err, errlen);
    }
    uint32_t bk = b->backend; /* drain may move the batches */
    if (!rc && (rc = drain(w, err, errlen)) == 0) rc = uncarry(w, &w->b[e->idx]);
    free(w->b[e->idx].items);
    w->b[e->idx].items = NULL;
    if (!rc) rc = start(w, bk);
    return rc;
  }
  case EV_WAKE:
    if (e->t != w->wake_at) return 0; /* replaced by a later one */
    w->wake_at = UINT64_MAX;
    rc = w->p->tick(w->p->st, w->now);
    break;
  }
  if (rc) {
    failed(w, rc, err, errlen);
    return rc;
  }
  return drain(w, err, errlen);
}

/* The idle check: no request waits on nothing while a device of a backend
 * stays idle (nothing runs on it, nothing waits at it), both at once for
 * longer than IDLE_BOUND_NS. A request's wait alone proves nothing: under
 * overload one waits seconds behind the backlog, and a device is idle for the
 * instant between a batch's end and the next one's delivery. The state only
 * changes at events and this runs after each, so each backend's idle spell is
 * timed exactly. 0 or -EPROTO with err saying which. */
static int check_idle(world_t *w, char *err, size_t errlen) {
  for (uint32_t b = 0; b < w->m->backends; b++) {
    int idle = w->be[b].busy < w->m->devices && w->be[b].qhead == NONE;
    if (!idle) w->be[b].idle_since = 0;
    else if (!w->be[b].idle_since) w->be[b].idle_since = w->now + 1;
  }
  uint32_t r = oldest_waiting(w);
  if (r == UINT32_MAX || w->now - (w->since[r] - 1) <= IDLE_BOUND_NS) return 0;
  for (uint32_t b = 0; b < w->m->backends; b++) {
    uint64_t from = w->be[b].idle_since;
    if (!from) continue;
    if (from < w->since[r]) from = w->since[r];
    if (w->now - (from - 1) <= IDLE_BOUND_NS) continue;
    snprintf(err, errlen,
             "%s broke an invariant at %.6f s: request %u (length %u) has waited %.3f s on no batch that can "
             "answer it while backend %u had an idle device for %.3f s of it",
             w->p->name, (double)w->now / 1e9, r, w->reqs[r].len, (double)(w->now - (w->since[r] - 1)) / 1e9,
             b, (double)(w->now - (from - 1)) / 1e9);
    return -EPROTO;
  }
  return 0;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* The p-quantile of sorted v[0..n), nearest rank. */
static double quantile_ms(const uint64_t *v, size_t n, double p) {
  if (!n) return 0;
  size_t k = (size_t)(p * (double)n + 0.999999);
  if (k == 0) k = 1;
  if (k > n) k = n;
  return (double)v[k - 1] / 1e6;
}

/* With requests of many sequences in the run: the others' (light) figures,
 * answered 200 ones only; lat is scratch of w->n entries (NULL: none). */
static void light_figures(const world_t *w, uint64_t *lat, sim_figures_t *o) {
  for (size_t i = 0; i < w->n && !o->grouped; i++) o->grouped = w->reqs[i].group > 1;
  if (!o->grouped || !lat) return;
  size_t k = 0;
  for (size_t i = 0; i < w->n; i++)
    if (w->reqs[i].group <= 1 && !w->reqs[i].in_group && w->answered[i] && w->status[i] == 200)
      lat[k++] = w->answered[i] - 1 - w->reqs[i].arrive_ns;
  qsort(lat, k, sizeof(*lat), cmp_u64);
  o->light_ok = k;
  o->light_p50_ms = quantile_ms(lat, k, 0.5);
  o->light_p99_ms = quantile_ms(lat, k, 0.99);
  k = 0;
  for (size_t i = 0; i < w->n; i++)
    if (w->reqs[i].group <= 1 && !w->reqs[i].in_group && w->answered[i] && w->status[i] == 200 && w->sent[i])
      lat[k++] = w->sent[i] - 1 - w->reqs[i].arrive_ns;
  qsort(lat, k, sizeof(*lat), cmp_u64);
  o->light_wait_p99_ms = quantile_ms(lat, k, 0.99);
}

static void figures(world_t *w, sim_figures_t *o) {
  memset(o, 0, sizeof(*o));
  uint64_t *lat = malloc((w->n ? w->n : 1) * sizeof(*lat));
  size_t k = 0;
  double sum = 0, qsum = 0;
  o->requests = w->n;
  for (size_t i = 0; i < w->n; i++) {
    if (!w->answered[i]) {
      if (!w->horizon) o->unanswered++;
      continue;
    }
    if (w->status[i] != 200) {
      o->errors++;
      int e = 0;
      while (e < 4 && o->err_count[e] && o->err_status[e] != w->status[i]) e++;
      if (e < 4) {
        o->err_status[e] = w->status[i];
        o->err_count[e]++;
      }
      continue;
    }
    o->ok++;
    if (w->sent[i]) qsum += (double)(w->sent[i] - 1 - w->reqs[i].arrive_ns);
    uint64_t l = w->answered[i] - 1 - w->reqs[i].arrive_ns;
    sum += (double)l;
    if (lat) lat[k++] = l;
  }
  if (lat) {
    qsort(lat, k, sizeof(*lat), cmp_u64);
    o->p50_ms = quantile_ms(lat, k, 0.5);
    o->p99_ms = quantile_ms(lat, k, 0.99);
    o->p999_ms = quantile_ms(lat, k, 0.999);
    o->max_ms = k ? (double)lat[k - 1] / 1e6 : 0;
    light_figures(w, lat, o); /* lat is scratch from here */
    free(lat);
  }
  o->mean_ms = k ? sum / (double)k / 1e6 : 0;
  o->queue_ms = o->ok ? qsum / (double)o->ok / 1e6 : 0;
  o->service_ms = w->batches ? (double)w->busy_ns / (double)w->batches / 1e6 : 0;
  uint64_t last_arrival = w->n ? w->reqs[w->n - 1].arrive_ns : 0;
  uint64_t span = w->horizon ? w->horizon : last_arrival > w->last_answer ? last_arrival : w->last_answer;
  o->span_s = (double)span / 1e9;
  uint64_t offered_span = w->horizon ? w->horizon : last_arrival;
  o->offered_rps = offered_span ? (double)w->n / ((double)offered_span / 1e9) : 0;
  if (w->horizon) {
    o->served_rps = (double)w->window_ok / ((double)w->horizon * 0.8 / 1e9);
    o->served_tps = (double)w->window_tokens / ((double)w->horizon * 0.8 / 1e9);
  } else {
    /* what was served while the traffic came: a policy that falls behind, or
     * holds requests for a timeout, shows here */
    double in = 0, in_tokens = 0;
    for (size_t i = 0; i < w->n; i++)
      if (w->answered[i] && w->status[i] == 200 && w->answered[i] - 1 <= last_arrival) {
        in++;
        in_tokens += w->reqs[i].len;
      }
    o->served_rps = last_arrival ? in / ((double)last_arrival / 1e9) : 0;
    o->served_tps = last_arrival ? in_tokens / ((double)last_arrival / 1e9) : 0;
  }
  double devs = (double)w->m->backends * w->m->devices;
  o->util = span ? (double)w->busy_ns / (devs * (double)span) : 0;
  if (o->util > 1) o->util = 1; /* the last batches may end past the horizon */
  o->fill = w->slots ? (double)w->real_tokens / (double)w->slots : 0;
  o->batches = w->batches;
  o->failed_batches = w->failed;
  o->double_answered = w->doubles;
}

int sim_run(const sim_model_t *m, sim_policy_t *p, const sim_req_t *reqs, size_t n,
            uint64_t seed, uint64_t horizon_ns, sim_figures_t *out, char *err, size_t errlen) {
  world_t w;
  memset(&w, 0, sizeof(w));
  w.m = m;
  w.p = p;
  w.reqs = reqs;
  w.n = horizon_ns ? 0 : n;
  w.horizon = horizon_ns;
  w.wake_at = UINT64_MAX;
  lp_rng_seed(&w.rng, seed ^ 0x5eed0fde51ce5ull);
  for (uint32_t b = 0; b < SIM_MAX_BACKENDS; b++) w.be[b].qhead = w.be[b].qtail = NONE;
  if (horizon_ns)
    while (w.n < n && reqs[w.n].arrive_ns <= horizon_ns) w.n++;
  int rc = -ENOMEM;
  w.answered = calloc(w.n ? w.n : 1, sizeof(*w.answered));
  w.status = calloc(w.n ? w.n : 1, sizeof(*w.status));
  w.sent = calloc(w.n ? w.n : 1, sizeof(*w.sent));
  if (m->check) {
    w.carried = calloc(w.n ? w.n : 1, sizeof(*w.carried));
    w.since = calloc(w.n ? w.n : 1, sizeof(*w.since));
  }
  if (!w.answered || !w.status || !w.sent || (m->check && (!w.carried || !w.since))) {
    snprintf(err, errlen, "out of memory");
    goto done;
  }
  if (w.n && (rc = push(&w, reqs[0].arrive_ns, EV_ARRIVE, 0))) goto done;
  rc = 0;
  while (w.nheap) {
    ev_t e = pop(&w);
    if (horizon_ns && e.t > horizon_ns) break;
    w.now = e.t;
    if ((rc = step(&w, &e, err, errlen))) goto done;
    if (m->check && (rc = check_idle(&w, err, errlen))) goto done;
  }
  figures(&w, out);
done:
  for (size_t i = 0; i < w.nb; i++) free(w.b[i].items);
  free(w.b);
  free(w.map);
  free(w.heap);
  free(w.answered);
  free(w.status);
  free(w.sent);
  free(w.carried);
  free(w.since);
  free(w.waiting);
  return rc;
}
