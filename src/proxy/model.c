/* A model: admission into its queue, the shape states its backends report, and
 * the scheduling loop that hands the scheduler's plans to batches. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lanepack/log.h"
#include "proxy.h"

static const double fill_bounds[] = {0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 0.98, 0.99, 1.0};
/* fine around typical batch times */
static const double time_bounds[] = {0.001, 0.002, 0.004, 0.006, 0.008, 0.01, 0.012, 0.015, 0.02,
                                     0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1, 2, 5, 10};
static const double error_bounds[] = {0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5};

/* Sequences looked at per decision, at most (the scheduler narrows further). */
#define LP_WINDOW_MAX 4096
/* How far from the head a retried sequence's place is searched for. */
#define LP_REQUEUE_SEARCH 256

static void on_wake(uv_timer_t *t) {
  lp_model_t *m = t->data;
  lp__model_schedule(m);
}

/* The longest a request may stay: queueing up to max_wait, every try running to
 * the backend timeout, every backoff, and a second of slack. */
static uint64_t derived_bound_ms(const lp_model_config_t *cfg) {
  if (cfg->max_request_ms) return cfg->max_request_ms;
  uint64_t ms = cfg->max_wait_ms + (cfg->max_retries + 1ull) * cfg->backend_timeout_ms + 1000;
  uint64_t b = cfg->retry_backoff_ms;
  for (uint32_t i = 0; i < cfg->max_retries; i++) {
    ms += b < LP_MAX_BACKOFF_MS ? b : LP_MAX_BACKOFF_MS;
    if (b < LP_MAX_BACKOFF_MS) b *= 2;
  }
  return ms;
}

lp_sched_t *lp__sched_for(const lp_model_config_t *cfg) {
  lp_sched_config_t sc = {.algo = cfg->packer, .fill_target = cfg->fill_target,
                          .max_wait_ns = cfg->max_wait_ms * 1000000ull,
                          .max_bypass = cfg->max_bypass,
                          .max_segments = cfg->max_segments_per_lane};
  return lp_sched_new(&sc);
}

void lp__backend_init(lp_model_t *m, lp_backend_t *b, const char *url) {
  const lp_model_config_t *cfg = m->cfg;
  memset(b, 0, sizeof(*b));
  b->model = m;
  snprintf(b->url, sizeof(b->url), "%s", url);
  snprintf(b->batch_url, sizeof(b->batch_url), "%s/v1/batch", url);
  snprintf(b->health_url, sizeof(b->health_url),
           cfg->protocol == LP_PROTO_V2 ? "%s/v2/health/ready" : "%s/healthz", url);
  snprintf(b->shapes_url, sizeof(b->shapes_url), "%s/v1/shapes", url);
  b->healthy = 1; /* until probes or batches say otherwise */
  for (size_t k = 0; k < m->shapes.count; k++) b->shape_state[k] = m->shapes.shapes[k].state;
  lp_devclock_init(&b->clock, cfg->devices);
  for (size_t k = 0; k < cfg->ncosts; k++) {
    int si = lp_bucket_set_find(&m->shapes, cfg->cost_spec[k].lanes, cfg->cost_spec[k].bucket);
    if (si >= 0) lp_devclock_seed(&b->clock, si, cfg->cost_spec[k].ms * 1000000ull);
  }
}

int lp__model_init(lp_model_t *m, lp_proxy_t *p, const lp_model_config_t *cfg) {
  memset(m, 0, sizeof(*m));
  m->proxy = p;
  m->cfg = cfg;
  m->shapes = cfg->shapes;
  if (cfg->ragged) {
    /* a GPU backend takes any flat token list up to the budget */
    lp_bucket_set_init(&m->shapes);
    lp_bucket_set_add(&m->shapes, 1, cfg->ragged_max_tokens);
  }
  m->bound_ns = derived_bound_ms(cfg) * 1000000ull;
  lp_queue_init(&m->queue);
  m->sched = lp__sched_for(cfg);
  if (!m->sched) return -ENOMEM;
  uint32_t maxb = 0;
  for (size_t i = 0; i < m->shapes.count; i++)
    if (m->shapes.shapes[i].bucket > maxb) maxb = m->shapes.shapes[i].bucket;
  if (lp_lenhist_init(&m->lengths, maxb ? maxb : 1)) return -ENOMEM;
  if (lp_batchjson_init(&m->writer, maxb ? maxb : 1)) return -ENOMEM;
  lp_hist_init(&m->fill, fill_bounds, sizeof(fill_bounds) / sizeof(fill_bounds[0]));
  for (size_t s = 0; s < LP_BUCKET_MAX_SHAPES; s++)
    lp_hist_init(&m->fill_by_shape[s], fill_bounds, sizeof(fill_bounds) / sizeof(fill_bounds[0]));
  lp_hist_init(&m->duration, time_bounds, sizeof(time_bounds) / sizeof(time_bounds[0]));
  lp_hist_init(&m->service, time_bounds, sizeof(time_bounds) / sizeof(time_bounds[0]));
  lp_hist_init(&m->queue_delay, time_bounds, sizeof(time_bounds) / sizeof(time_bounds[0]));
  lp_hist_init(&m->service_error, error_bounds, sizeof(error_bounds) / sizeof(error_bounds[0]));
  lp_scatter_init(&m->scatter);
  lp_buf_init(&m->render);
  lp_buf_init(&m->v2_members);
  uv_timer_init(p->loop, &m->wake);
  m->wake.data = m;
  for (size_t i = 0; i < cfg->nbackends; i++) lp__backend_init(m, &m->backends[m->nbackends++], cfg->backends[i]);
  return 0;
}

void lp__model_reconfigured(lp_model_t *m) {
  m->bound_ns = derived_bound_ms(m->cfg) * 1000000ull;
  /* devices: the configured count holds for a backend that has not told its own */
  for (size_t b = 0; b < m->nbackends; b++)
    if (!m->backends[b].devices_reported) lp_devclock_set_devices(&m->backends[b].clock, m->cfg->devices);
  for (size_t k = 0; k < m->cfg->ncosts; k++) {
    int si = lp_bucket_set_find(&m->shapes, m->cfg->cost_spec[k].lanes, m->cfg->cost_spec[k].bucket);
    for (size_t b = 0; si >= 0 && b < m->nbackends; b++)
      lp_devclock_seed(&m->backends[b].clock, si, m->cfg->cost_spec[k].ms * 1000000ull);
  }
}

void lp__model_close(lp_model_t *m) {
  uv_close((uv_handle_t *)&m->wake, NULL);
  lp_sched_free(m->sched);
  lp_queue_free(&m->queue);
  free(m->items);
  free(m->items2);
  free(m->win);
  lp_lenhist_free(&m->lengths);
  lp_batchjson_free(&m->writer);
  lp_scatter_free(&m->scatter);
  lp_buf_free(&m->render);
  lp_buf_free(&m->v2_members);
  free(m->item_ids);
  lp__batches_free(m);
  free(m->refs);
  free(m->place);
}

/* Ready: some healthy, probed backend has a shape it can run now. */
int lp__model_ready(const lp_model_t *m) {
  for (size_t i = 0; i < m->nbackends; i++) {
    const lp_backend_t *b = &m->backends[i];
    if (!b->healthy || !b->probed_ok) continue;
    for (size_t k = 0; k < m->shapes.count; k++)
      if (b->shape_state[k] == LP_SHAPE_COMPILED) return 1;
  }
  return 0;
}

static int any_healthy(const lp_model_t *m) {
  for (size_t i = 0; i < m->nbackends; i++)
    if (m->backends[i].healthy) return 1;
  return 0;
}

/* ---- shapes: per backend, and the model's union ---- */

void lp__backend_view(const lp_backend_t *be, lp_bucket_set_t *out) {
  *out = be->model->shapes;
  for (size_t i = 0; i < out->count; i++) {
    out->shapes[i].state = be->shape_state[i];
    out->shapes[i].cost_ns = lp_devclock_cost(&be->clock, (int)i); /* what its devices take */
  }
}

void lp__model_remove_shape(lp_model_t *m, size_t k) {
  if (lp_bucket_set_remove(&m->shapes, k)) return;
  m->batches_by_shape[k] = 0;
  lp_hist_init(&m->fill_by_shape[k], fill_bounds, sizeof(fill_bounds) / sizeof(fill_bounds[0]));
  for (size_t i = 0; i < m->nbackends; i++) {
    lp_backend_t *b = &m->backends[i];
    b->shape_state[k] = LP_SHAPE_UNAVAILABLE;
    lp_devclock_forget_shape(&b->clock, (int)k);
    lp__backend_shape_found(b, (int)k);
  }
}

uint32_t lp__model_compiled_max(const lp_model_t *m) {
  uint32_t max = 0;
  for (size_t i = 0; i < m->shapes.count; i++)
    if (m->shapes.shapes[i].state == LP_SHAPE_COMPILED && m->shapes.shapes[i].bucket > max)
      max = m->shapes.shapes[i].bucket;
  return max;
}

static lp_seq_t *seq_of(lp_qnode_t *n) { return n ? container_of(n, lp_seq_t, q) : NULL; }

/* Adds job to the list of jobs to fail (*jobs, grown as needed; the caller
 * frees it), once: its doomed mark says it is listed. -ENOMEM when it cannot. */
static int pick(lp_job_t ***jobs, size_t *n, size_t *cap, lp_job_t *job) {
  if (job->doomed) return 0;
  if (*n == *cap) {
    size_t c = *cap ? *cap * 2 : 16;
    lp_job_t **d = realloc(*jobs, c * sizeof(*d));
    if (!d) return -ENOMEM;
    *jobs = d;
    *cap = c;
  }
  job->doomed = 1;
  (*jobs)[(*n)++] = job;
  return 0;
}

/* Fails each listed job, holding a reference to all of them meanwhile: failing
 * one may close its client's connection (a write to a peer that is gone),
 * which cancels the requests pipelined behind it there, and a cancelled job
 * nothing refers to is freed at once, later entries of the list with it. */
static void fail_jobs(lp_job_t **jobs, size_t n, int status, const char *code, const char *msg) {
  for (size_t i = 0; i < n; i++) jobs[i]->refs++;
  for (size_t i = 0; i < n; i++) lp__job_fail(jobs[i], status, code, msg);
  for (size_t i = 0; i < n; i++) {
    jobs[i]->refs--;
    lp__job_release(jobs[i]);
  }
}

void lp__model_shapes_changed(lp_model_t *m) {
  for (size_t k = 0; k < m->shapes.count; k++) {
    lp_shape_state_t best = LP_SHAPE_UNAVAILABLE;
    for (size_t i = 0; i < m->nbackends; i++) {
      if (m->backends[i].retired) continue; /* it gets no batch again: its shapes admit nothing */
      lp_shape_state_t s = m->backends[i].shape_state[k];
      if (s == LP_SHAPE_COMPILED || (s == LP_SHAPE_COMPILING && best == LP_SHAPE_UNAVAILABLE))
        best = s;
    }
    m->shapes.shapes[k].state = best;
  }
  /* a sequence that no shape anywhere holds now would otherwise wait for its
   * bound: tell its client at once (a rare event, so a walk of the queue). The
   * jobs are collected first: failing one takes all its sequences out, wherever
   * they stand. */
  uint32_t max_len = lp_bucket_set_max_len(&m->shapes);
  lp_job_t **doomed = NULL;
  size_t nd = 0, cap = 0;
  for (lp_qnode_t *n = lp_queue_first(&m->queue); n; n = lp_queue_next(&m->queue, n)) {
    lp_seq_t *s = seq_of(n);
    if (s->len > max_len && pick(&doomed, &nd, &cap, s->job))
      break; /* out of memory: the job timers still answer them in time */
  }
  char msg[160];
  snprintf(msg, sizeof(msg), "no backend has a shape that holds this request's sequences any more "
           "(largest: %u tokens)", max_len);
  fail_jobs(doomed, nd, 503, "no_shape_available", msg);
  free(doomed);
  lp_proxy_kick(m->proxy);
}

/* ---- the queue ---- */

void lp__model_unqueue(lp_model_t *m, lp_seq_t *s, int state) {
  lp_queue_remove(&m->queue, &s->q);
  s->state = state;
  m->queued_tokens -= s->len;
  if (--s->job->queued == 0) {
    m->queued_requests--;
    m->queued_bytes -= s->job->bytes;
  }
}

int lp__model_requeue(lp_model_t *m, lp_seq_t *s) {
  if (lp_bucket_set_admit(&m->shapes, s->len, NULL) != LP_ADMIT_OK) return -ERANGE;
  if (lp_queue_requeue(&m->queue, &s->q, LP_REQUEUE_SEARCH)) return -ENOMEM;
  s->state = LP_SEQ_QUEUED;
  m->queued_tokens += s->len;
  if (s->job->queued++ == 0) {
    m->queued_requests++;
    m->queued_bytes += s->job->bytes;
  }
  return 0;
}

/* The head is read again after each failure: failing a job may end others
 * (its connection's pipeline), so no pointer into the queue is kept across one. */
void lp__model_fail_all(lp_model_t *m, int status, const char *code, const char *msg) {
  lp_qnode_t *n;
  while ((n = lp_queue_first(&m->queue)) != NULL) lp__job_fail(seq_of(n)->job, status, code, msg);
}

/* ---- admission ---- */

int lp__model_admit(lp_model_t *m, lp_job_t *job) {
  lp_proxy_t *p = m->proxy;
  p->jobs++;
  /* while draining, a request that still arrives on an open connection is
   * served (the connection closes after it); only past the drain timeout is
   * it refused */
  if (p->hard_stop) {
    lp__job_fail(job, 503, "shutting_down", "the proxy is shutting down");
    return -1;
  }
  if (!any_healthy(m)) {
    lp__job_fail(job, 503, "no_healthy_backend", "no backend of this model is healthy");
    return -1;
  }
  uint64_t tokens = 0;
  for (uint32_t i = 0; i < job->nseq; i++) tokens += job->seqs[i].len;
  /* a deadline that even the fastest shape cannot meet is told at once */
  if (job->deadline_ns) {
    uint32_t longest = 0;
    for (uint32_t i = 0; i < job->nseq; i++)
      if (job->seqs[i].len > longest) longest = job->seqs[i].len;
    /* the wait for a device (when its clock knows) plus the service time */
    uint64_t fastest = UINT64_MAX;
    for (size_t b = 0; b < m->nbackends; b++) {
      const lp_backend_t *be = &m->backends[b];
      if (!be->healthy) continue;
      uint64_t free_at = lp_devclock_next_free(&be->clock);
      uint64_t wait = free_at != UINT64_MAX && free_at > job->arrive_ns ? free_at - job->arrive_ns : 0;
      for (size_t k = 0; k < m->shapes.count; k++) {
        uint64_t c = lp_devclock_cost(&be->clock, (int)k);
        if (be->shape_state[k] != LP_SHAPE_COMPILED || m->shapes.shapes[k].bucket < longest || !c) continue;
        c += wait + lp_devclock_lead(&be->clock);
        if (c < fastest) fastest = c;
      }
    }
    if (fastest != UINT64_MAX && job->arrive_ns + fastest > job->deadline_ns) {
      char msg[160];
      snprintf(msg, sizeof(msg), "the deadline is too close: the earliest answer is expected in %.1f ms",
               (double)fastest / 1e6);
      lp__job_fail(job, 504, "deadline_exceeded", msg);
      return -1;
    }
  }
  if (m->queued_requests + 1 > m->cfg->max_queue_requests ||
      m->queued_tokens + tokens > m->cfg->max_queue_tokens ||
      m->queued_bytes + job->bytes > m->cfg->max_queue_bytes) {
    lp__job_fail(job, 429, "queue_full", "the queue is full; retry later");
    return -1;
  }
  for (uint32_t i = 0; i < job->nseq; i++) {
    lp_seq_t *s = &job->seqs[i];
    s->q.seqno = m->next_seqno++;
    s->state = LP_SEQ_QUEUED;
    s->sched = (lp_sched_item_t){.len = s->len, .enqueued_ns = job->arrive_ns,
                                 .deadline_ns = job->deadline_ns};
    if (lp_queue_push(&m->queue, &s->q)) {
      for (uint32_t k = 0; k < i; k++) lp_queue_remove(&m->queue, &job->seqs[k].q);
      for (uint32_t k = 0; k <= i; k++) job->seqs[k].state = LP_SEQ_DONE;
      lp__job_fail(job, 503, "out_of_memory", "proxy out of memory");
      return -1;
    }
  }
  for (uint32_t i = 0; i < job->nseq; i++) {
    m->queued_tokens += job->seqs[i].len;
    lp_lenhist_add(&m->lengths, job->seqs[i].len, 1);
  }
  job->unresolved = job->queued = job->nseq;
  m->queued_requests++;
  m->queued_bytes += job->bytes;
  if (lp__job_arm(job)) {
    lp__job_fail(job, 503, "out_of_memory", "proxy out of memory");
    return -1;
  }
  lp_proxy_kick(p);
  return 0;
}

/* ---- scheduling ---- */

static void arm_wake(lp_model_t *m, uint64_t at, uint64_t now) {
  uint64_t d = at > now ? (at - now + 999999) / 1000000 : 0;
  if (d == 0) d = 1;
  uv_timer_start(&m->wake, on_wake, d, 0);
}

/* Copies the head of the queue into the decision scratch: as many sequences as
 * could change the next rectangle (twice the largest capacity in tokens), so a
 * decision costs what its window costs, not the queue's length. */
static size_t gather(lp_model_t *m) {
  uint64_t cap = 0, acc = 0;
  for (size_t i = 0; i < m->shapes.count; i++) {
    uint64_t c = (uint64_t)m->shapes.shapes[i].lanes * m->shapes.shapes[i].bucket;
    if (m->shapes.shapes[i].state == LP_SHAPE_COMPILED && c > cap) cap = c;
  }
  size_t want = m->queue.n < LP_WINDOW_MAX ? m->queue.n : LP_WINDOW_MAX;
  if (want > m->items_cap) {
    size_t c = m->items_cap ? m->items_cap : 256;
    while (c < want) c *= 2;
    lp_sched_item_t *it = realloc(m->items, c * sizeof(*it));
    if (it) m->items = it;
    lp_seq_t **w = realloc(m->win, c * sizeof(*w));
    if (w) m->win = w;
    if (!it || !w) return 0;
    m->items_cap = c;
  }
  size_t n = 0;
  uint64_t gen = ++m->gather_gen;
  /* a sequence marked to go alone is a window by itself when it leads, and
   * waits its turn otherwise */
  lp_qnode_t *head = lp_queue_first(&m->queue);
  if (head && seq_of(head)->isolate) {
    m->win[0] = seq_of(head);
    m->items[0] = seq_of(head)->sched;
    return 1;
  }
  /* age raises priority: whatever its level, a sequence that has waited
   * max_wait_ms is seen first (each level is in arrival order, so its head is
   * its oldest and the walk stops at the first younger one) */
  uint64_t now = uv_hrtime(), max_wait = m->cfg->max_wait_ms * 1000000ull;
  for (size_t l = 1; max_wait && l < m->queue.nlevels && n < want / 2; l++)
    for (lp_qnode_t *q = m->queue.levels[l].head; q && n < want / 2 && acc < cap; q = q->next) {
      lp_seq_t *s = seq_of(q);
      if (now - s->sched.enqueued_ns < max_wait) break;
      if (s->isolate) continue;
      s->gather_gen = gen;
      m->win[n] = s;
      m->items[n++] = s->sched;
      acc += s->len;
    }
  for (lp_qnode_t *q = lp_queue_first(&m->queue); q && n < want && acc < 2 * cap;
       q = lp_queue_next(&m->queue, q)) {
    lp_seq_t *s = seq_of(q);
    if (s->gather_gen == gen || s->isolate) continue;
    m->win[n] = s;
    m->items[n++] = s->sched;
    acc += s->len;
  }
  return n;
}

/* The window as backend be may take it: m->items, or a copy in which the
 * sequences to keep away from be cannot be placed. */
static lp_sched_item_t *avoiding(lp_model_t *m, const lp_backend_t *be, size_t n) {
  int mark = (int)(be - m->backends) + 1, any = 0, others = 0;
  for (size_t i = 0; i < n && !any; i++) any = m->win[i]->avoid == mark;
  for (size_t b = 0; b < m->nbackends; b++) others += &m->backends[b] != be && m->backends[b].healthy;
  if (!any || !others) return m->items;
  if (m->items2_cap < n) {
    lp_sched_item_t *c = realloc(m->items2, n * sizeof(*c));
    if (!c) return m->items;
    m->items2 = c;
    m->items2_cap = n;
  }
  memcpy(m->items2, m->items, n * sizeof(*m->items2));
  for (size_t i = 0; i < n; i++)
    if (m->win[i]->avoid == mark) m->items2[i].len = UINT32_MAX;
  return m->items2;
}

/* Fails the requests whose sequences the plan placed (the first n of the
 * window): a batch that cannot be built fails what it would have carried. */
static void fail_placed(lp_model_t *m, const lp_sched_plan_t *plan, size_t n) {
  static const char msg[] = "proxy out of memory: the batch could not be built";
  lp_job_t **jobs = NULL, *first = NULL;
  size_t nj = 0, cap = 0;
  for (size_t i = 0; i < n && i < plan->n; i++) {
    if (plan->place[i].bin < 0) continue;
    if (!first) first = m->win[i]->job;
    if (pick(&jobs, &nj, &cap, m->win[i]->job)) break;
  }
  if (nj == 0 && first) { /* no memory for the list: one goes, so the next turn moves on */
    fail_jobs(&first, 1, 503, "out_of_memory", msg);
    return;
  }
  fail_jobs(jobs, nj, 503, "out_of_memory", msg);
  free(jobs);
}

/* Runs the policy until it says wait: each decision dispatches one batch to a
 * backend with a free slot, tried in the balancer's order, each with the shapes
 * it has. With no slot free, requests stay queued (and pack better); a
 * finished batch runs this again. The job timers answer whatever waits too long,
 * whatever this decides. */
void lp__model_schedule(lp_model_t *m) {
  lp_proxy_t *p = m->proxy;
  for (;;) {
    uint64_t now = uv_hrtime();
    if (m->queue.n == 0) {
      uv_timer_stop(&m->wake);
      return;
    }
    if (!any_healthy(m)) {
      lp__model_fail_all(m, 503, "no_healthy_backend", "no backend of this model is healthy");
      return;
    }
    if (lp__model_compiled_max(m) == 0 && !m->cfg->ragged) {
      lp__model_fail_all(m, 503, "no_shape_available", "no shape of this model is compiled");
      return;
    }
    lp_backend_t *order[LP_MAX_BACKENDS];
    size_t nfree = lp__backends_free(m, order);
    if (nfree == 0) return; /* every slot busy: a completion reschedules */
    size_t n = gather(m);
    if (n == 0) return; /* out of memory for the scratch: the job timers still answer */
    /* draining: everything is due now */
    uint64_t t = p->draining ? now + 3600ull * 1000000000ull : now;
    uint64_t wake = UINT64_MAX;
    int sent = 0;
    for (size_t k = 0; k < nfree && !sent; k++) {
      lp_backend_t *be = order[k];
      lp_bucket_set_t view;
      lp__backend_view(be, &view);
      /* the device clock: an idle device gets a batch at once; while all are
       * busy the next rectangle keeps filling and leaves when the first is
       * expected free, less the time to deliver it */
      lp_sched_mode_t mode = LP_SCHED_NOW;
      if (p->draining) {
        mode = LP_SCHED_RULES; /* everything is due */
      } else if (lp_devclock_idle_device(&be->clock) < 0) {
        uint64_t lead = lp_devclock_lead(&be->clock);
        uint64_t slack = lead > 2000000 ? lead : 2000000;
        uint64_t free_at = lp_devclock_next_free_at(&be->clock, now, slack);
        uint64_t leave = free_at == UINT64_MAX ? UINT64_MAX : free_at > lead ? free_at - lead : 0;
        if (now < leave) {
          mode = LP_SCHED_FULL_ONLY; /* unknown (UINT64_MAX): an answer reschedules */
          if (leave < wake) wake = leave;
        }
      }
      /* a sequence that timed out on this backend (it may still be computing
       * it) goes elsewhere while another backend is healthy */
      lp_sched_item_t *items = avoiding(m, be, n);
      lp_sched_plan_t plan;
      if (lp_sched_decide_mode(m->sched, &view, items, n, t, mode, &plan)) return;
      if (items != m->items)
        for (size_t i = 0; i < n; i++) m->items[i].bypassed = items[i].bypassed;
      if (plan.action == LP_SCHED_WAIT && plan.wake_ns < wake) wake = plan.wake_ns;
      if (plan.action != LP_SCHED_DISPATCH) continue;
      for (size_t i = 0; i < n; i++) m->win[i]->sched.bypassed = m->items[i].bypassed;
      int rc = lp__batch_dispatch(m, be, &plan);
      if (rc) {
        /* this rectangle could not be made (its layout or its batch): the
         * requests it held fail, the rest of the queue waits on */
        lp_log(LP_LOG_ERROR, "dispatch failed", "\"model\": \"%s\", \"shape\": [%u, %u], \"error\": \"%s\"",
               m->cfg->name, m->shapes.shapes[plan.shape].lanes, m->shapes.shapes[plan.shape].bucket,
               strerror(-rc));
        fail_placed(m, &plan, n);
        lp_proxy_kick(p);
        return;
      }
      sent = 1;
    }
    if (!sent) {
      if (wake != UINT64_MAX) arm_wake(m, wake, now);
      return;
    }
  }
}
