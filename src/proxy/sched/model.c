/* Runs on the scheduler thread. A model: its dispatch core (the whole policy,
 * lp_disp_t) and the shell around it: admission handed to the core (shapes
 * and health are mirrored into it by shapes.c),
 * its actions drained after every event (SEND, OUTPUT, ANSWER, HEALTH) and one
 * timer armed at its wake time. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "lanepack/log.h"
#include "sched/sched.h"

#include <sys/random.h>

static const double fill_bounds[] = {0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 0.98, 0.99, 1.0};
/* fine around typical batch times */
static const double time_bounds[] = {0.001, 0.002, 0.004, 0.006, 0.008, 0.01, 0.012, 0.015, 0.02,
                                     0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1, 2, 5, 10};
static const double error_bounds[] = {0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5};


void lp__disp_config(const lp_config_t *pc, const lp_model_config_t *cfg, const lp_bucket_set_t *shapes,
                     lp_disp_config_t *c) {
  lp_disp_config_default(c);
  c->shapes = *shapes;
  for (size_t k = 0; k < cfg->ncosts; k++) {
    int si = lp_bucket_set_find(shapes, cfg->cost_spec[k].lanes, cfg->cost_spec[k].bucket);
    if (si >= 0) c->seed_cost_ns[si] = cfg->cost_spec[k].ms * LP_NS_PER_MS;
  }
  /* the configured backends only: a reload adds more (lp_disp_add_backend),
   * so no decision walks empty slots */
  c->nbackends = cfg->nbackends ? (uint32_t)cfg->nbackends : 1;
  for (size_t b = 0; b < c->nbackends; b++) c->devices[b] = cfg->devices ? cfg->devices : 1;
  c->max_segments = cfg->max_segments_per_lane;
  c->packer = cfg->packer;
  c->ragged = cfg->ragged;
  c->max_wait_ns = cfg->max_wait_ms * LP_NS_PER_MS;
  c->max_copies = cfg->max_retries + 1;
  c->stall_factor = cfg->stall_factor;
  c->stall_min_ns = cfg->stall_min_ms * LP_NS_PER_MS;
  c->retry_backoff_ns = cfg->retry_backoff_ms * LP_NS_PER_MS;
  c->backend_timeout_ns = cfg->backend_timeout_ms * LP_NS_PER_MS;
  c->unhealthy_after = pc->unhealthy_after;
  c->request_bound_ns = cfg->max_request_ms * LP_NS_PER_MS;
  c->max_queue_jobs = cfg->max_queue_requests;
  c->max_queue_tokens = cfg->max_queue_tokens;
}

/* ---- the wake ---- */

/* The core's wake time on an absolute timerfd of CLOCK_MONOTONIC, the clock
 * uv_hrtime (lp__now) reads: the loop wakes when it is due, to the
 * microsecond, without spinning (libuv's timers count whole milliseconds of a
 * cached loop time: a wake up to a millisecond late, or an idle handle
 * polling for the last fraction, cost device time between short batches). */
static void arm_wake(lp_model_t *m);

static void on_wake(uv_poll_t *h, int status, int events) {
  lp_model_t *m = h->data;
  (void)status;
  (void)events;
  uint64_t n;
  if (read(m->wake_fd, &n, sizeof(n)) < 0) {
    /* EAGAIN: re-armed since it fired; a tick before time is harmless */
  }
  m->wake_at = 0;
  lp__model_schedule(m);
}

static void arm_wake(lp_model_t *m) {
  uint64_t at = lp_disp_wake_at(m->disp);
  uint64_t want = at == UINT64_MAX ? 0 : at ? at : 1;
  if (want == m->wake_at) return;
  m->wake_at = want;
  /* 0 disarms; a time already past fires at once */
  struct itimerspec its = {{0, 0}, {(time_t)(want / 1000000000ull), (long)(want % 1000000000ull)}};
  if (timerfd_settime(m->wake_fd, TFD_TIMER_ABSTIME, &its, NULL))
    lp_log(LP_LOG_ERROR, "wake timer not armed", "\"model\": \"%s\", \"error\": \"%s\"", m->cfg->name,
           strerror(errno));
}

/* ---- actions ---- */

static lp_job_t *job_of(uint64_t id) { return (lp_job_t *)(uintptr_t)id; }

/* The core answered a job whose cancel it has not heard yet (its client left
 * while the actions were drained): the cancel is moot. */
static void drop_cancel(lp_model_t *m, lp_job_t *job) {
  for (lp_job_t **p = &m->cancels; *p; p = &(*p)->next_cancel)
    if (*p == job) {
      *p = job->next_cancel;
      break;
    }
  job->cancel_queued = 0;
}

static void on_answer(lp_model_t *m, const lp_disp_action_t *a) {
  lp_job_t *job = job_of(a->answer.job_id);
  job->in_core = 0;
  if (job->cancel_queued) drop_cancel(m, job);
  if (a->answer.status == LP_DISP_ST_OK) {
    /* every output was delivered and the answer written then, unless that failed */
    if (!job->answered) lp__job_fail(job, 503, "out_of_memory", "proxy out of memory");
  } else {
    char msg[160];
    const char *text = a->answer.message;
    if (a->answer.status == LP_DISP_ST_BACKEND_ERROR && m->result_http) {
      /* failed by the answer being handled: its status says more (the body
       * goes to the log only) */
      snprintf(msg, sizeof(msg), "the backend %s the batch (HTTP %d)",
               m->result_http >= 500 ? "failed" : "refused", m->result_http);
      text = msg;
    }
    if (a->answer.status == LP_DISP_ST_BOUND) {
      snprintf(msg, sizeof(msg), "no answer within the proxy's bound (%.0f ms after arrival)",
               (double)(lp__now() - job->arrive_ns) / 1e6);
      text = msg;
      lp_log(LP_LOG_WARN, "request bound reached", "\"model\": \"%s\"", m->cfg->name);
    }
    lp__job_fail(job, a->answer.http_status, a->answer.code, text);
  }
  lp__job_free(job);
}

static void on_health(lp_model_t *m, const lp_disp_action_t *a) {
  if (a->health.backend < m->nbackends) lp__backend_health_changed(&m->backends[a->health.backend], a->health.up);
}

/* Counters the metrics read, from the core's. */
static void take_stats(lp_model_t *m) {
  lp_disp_stats_t prev = m->st;
  lp_disp_stats(m->disp, &m->st);
  m->proxy->retries += m->st.retries - prev.retries;
  m->proxy->stalls += m->st.stalls - prev.stalls;
}

void lp__model_pump(lp_model_t *m) {
  if (m->pumping) return; /* the loop below takes what the nested event left */
  m->pumping = 1;
  lp_disp_action_t a;
  for (;;) {
    while (lp_disp_next(m->disp, &a)) {
      switch (a.kind) {
        case LP_DISP_ACT_SEND: lp__batch_send(m, &a); break;
        case LP_DISP_ACT_OUTPUT: lp__batch_output(m, &a); break;
        case LP_DISP_ACT_ANSWER: on_answer(m, &a); break;
        case LP_DISP_ACT_HEALTH: on_health(m, &a); break;
      }
    }
    /* events that came up while draining, told now that no action is held */
    if (m->cancels) {
      lp_job_t *job = m->cancels;
      m->cancels = job->next_cancel;
      job->in_core = 0;
      lp_disp_cancel(m->disp, (uint64_t)(uintptr_t)job, lp__now());
      lp__job_free(job);
      continue;
    }
    if (m->failed) {
      lp__batches_failed(m);
      continue;
    }
    break;
  }
  m->pumping = 0;
  take_stats(m);
  arm_wake(m);
#ifdef LP_CHECK_INVARIANTS
  /* the debug build: the core's invariants after every event (assert-like) */
  char why[256];
  if (lp_disp_check(m->disp, lp__now(), why, sizeof(why))) {
    lp_log(LP_LOG_ERROR, "dispatch invariant broken", "\"model\": \"%s\", \"what\": \"%s\"", m->cfg->name, why);
    abort();
  }
#endif
}

void lp__model_schedule(lp_model_t *m) {
  uint64_t now = lp__now();
  if (m->proxy->draining && !m->drain_told) {
    m->drain_told = 1;
    lp_disp_drain(m->disp, now);
  }
  lp_disp_tick(m->disp, now);
  lp__model_pump(m);
}

/* ---- life ---- */

/* max_inflight, a cap per backend, as batches a device may hold beyond the
 * running one (0: the core's default, one). */
static void set_depth(lp_model_t *m) {
  uint32_t dev = m->cfg->devices ? m->cfg->devices : 1;
  if (m->cfg->max_inflight) lp_disp_set_queue_depth(m->disp, m->cfg->max_inflight > dev ? m->cfg->max_inflight / dev - 1 : 0);
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
  size_t configured = cfg->ragged ? 1 : cfg->shapes.count;
  for (size_t k = 0; k < m->shapes.count; k++)
    b->shape_state[k] = k < configured ? m->cfg->shapes.shapes[k].state : LP_SHAPE_UNAVAILABLE;
  if (cfg->ragged) b->shape_state[0] = LP_SHAPE_COMPILED;
  /* one added by a reload: the core's next slot, up (the reload checked for room) */
  if (m->disp && (size_t)(b - m->backends) >= lp_disp_backends(m->disp))
    (void)lp_disp_add_backend(m->disp, cfg->devices ? cfg->devices : 1, lp__now());
}

int lp__model_init(lp_model_t *m, lp_proxy_t *p, const lp_model_config_t *cfg) {
  memset(m, 0, sizeof(*m));
  m->wake_fd = -1;
  m->proxy = p;
  m->pump = lp__model_pump;
  /* batch span ids should be random (W3C): a seed from the kernel, else the clock */
  if (getrandom(&m->trace_rng, sizeof(m->trace_rng), GRND_NONBLOCK) != sizeof(m->trace_rng))
    m->trace_rng = uv_hrtime() ^ (uint64_t)(uintptr_t)m;
  m->cfg = cfg;
  m->shapes = cfg->shapes;
  if (cfg->ragged) {
    /* a GPU backend takes any flat token list up to the budget */
    lp_bucket_set_init(&m->shapes);
    lp_bucket_set_add(&m->shapes, 1, cfg->ragged_max_tokens);
    m->shapes.shapes[0].state = LP_SHAPE_COMPILED;
  }
  lp_disp_config_t dc;
  lp__disp_config(&p->cfg, cfg, &m->shapes, &dc);
  m->disp = lp_disp_new(&dc);
  if (!m->disp) return -ENOMEM;
  set_depth(m);
  uint32_t maxb = 0;
  for (size_t i = 0; i < m->shapes.count; i++)
    if (m->shapes.shapes[i].bucket > maxb) maxb = m->shapes.shapes[i].bucket;
  if (lp_lenhist_init(&m->lengths, maxb ? maxb : 1)) return -ENOMEM;
  if (lp_batchjson_init(&m->writer, maxb ? maxb : 1)) return -ENOMEM;
  if (lp__v2_gathered(m) && lp_rectbin_init(&m->rect, maxb, cfg->pad_id)) return -ENOMEM;
  lp_hist_init(&m->fill, fill_bounds, sizeof(fill_bounds) / sizeof(fill_bounds[0]));
  for (size_t s = 0; s < LP_BUCKET_MAX_SHAPES; s++)
    lp_hist_init(&m->fill_by_shape[s], fill_bounds, sizeof(fill_bounds) / sizeof(fill_bounds[0]));
  lp_hist_init(&m->duration, time_bounds, sizeof(time_bounds) / sizeof(time_bounds[0]));
  lp_hist_init(&m->service, time_bounds, sizeof(time_bounds) / sizeof(time_bounds[0]));
  lp_hist_init(&m->queue_delay, time_bounds, sizeof(time_bounds) / sizeof(time_bounds[0]));
  lp_hist_init(&m->service_error, error_bounds, sizeof(error_bounds) / sizeof(error_bounds[0]));
  m->wake_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (m->wake_fd < 0) return -errno;
  int rc = uv_poll_init(p->loop, &m->wake, m->wake_fd);
  if (rc) {
    close(m->wake_fd);
    m->wake_fd = -1;
    return rc;
  }
  m->wake.data = m;
  uv_poll_start(&m->wake, UV_READABLE, on_wake);
  for (size_t i = 0; i < cfg->nbackends; i++) lp__backend_init(m, &m->backends[m->nbackends++], cfg->backends[i]);
  lp__model_shapes_changed(m);
  return 0;
}

void lp__model_reconfigured(lp_model_t *m) {
  lp_disp_config_t dc;
  lp__disp_config(&m->proxy->cfg, m->cfg, &m->shapes, &dc);
  lp_disp_reconfigure(m->disp, &dc);
  set_depth(m);
  /* devices: the configured count holds for a backend that has not told its own */
  uint64_t now = lp__now();
  for (size_t b = 0; b < m->nbackends; b++)
    if (!m->backends[b].devices_reported)
      lp_disp_backend_devices(m->disp, (uint32_t)b, m->cfg->devices ? m->cfg->devices : 1, now);
  lp__model_pump(m);
}

void lp__model_close(lp_model_t *m) {
  if (m->wake_fd >= 0) {
    uv_close((uv_handle_t *)&m->wake, NULL); /* stops polling now: the fd can go */
    close(m->wake_fd);
    m->wake_fd = -1;
  }
  lp_disp_free(m->disp);
  m->disp = NULL;
  lp_lenhist_free(&m->lengths);
  lp_batchjson_free(&m->writer);
  lp_rectbin_free(&m->rect);
  lp__batches_free(m);
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

/* ---- shapes and health, mirrored into the core ---- */

void lp__model_fail_all(lp_model_t *m, lp_disp_status_t status) {
  lp_disp_fail_all(m->disp, status, lp__now());
  lp__model_pump(m);
}

/* ---- admission ---- */

/* Answers a job the core never had, and frees it. */
static int refuse(lp_job_t *job, int status, const char *code, const char *msg) {
  lp__job_fail(job, status, code, msg);
  lp__job_free(job);
  return -1;
}

int lp__model_admit(lp_model_t *m, lp_job_t *job) {
  lp_proxy_t *p = m->proxy;
  p->jobs++;
  /* while draining, a request that still arrives on an open connection is
   * served (the connection closes after it); only past the drain timeout is
   * it refused */
  if (p->hard_stop) return refuse(job, 503, "shutting_down", "the proxy is shutting down");
  if (job->bytes > m->cfg->max_queue_bytes) {
    /* larger than the whole queue may hold: a retry can never succeed, so
     * not 429 with Retry-After but the limit named */
    char msg[160];
    snprintf(msg, sizeof(msg), "the request needs %llu bytes queued, more than the model's max_queue_bytes (%llu)",
             (unsigned long long)job->bytes, (unsigned long long)m->cfg->max_queue_bytes);
    return refuse(job, 413, "request_too_large", msg);
  }
  if (m->live_bytes + job->bytes > m->cfg->max_queue_bytes)
    return refuse(job, 429, "queue_full", "the queue is full; retry later");
  uint32_t stack_lens[64], *lens = stack_lens;
  if (job->nseq > 64 && (lens = malloc(job->nseq * sizeof(*lens))) == NULL)
    return refuse(job, 503, "out_of_memory", "proxy out of memory");
  for (uint32_t i = 0; i < job->nseq; i++) lens[i] = job->seqs[i].len;
  uint64_t now = lp__now();
  if (m->proxy->draining && !m->drain_told) {
    m->drain_told = 1;
    lp_disp_drain(m->disp, now);
  }
  int rc = lp_disp_admit(m->disp, (uint64_t)(uintptr_t)job, job->nseq, lens, job->priority,
                         job->deadline_ns, now);
  if (rc == 0)
    for (uint32_t i = 0; i < job->nseq; i++) lp_lenhist_add(&m->lengths, lens[i], 1);
  if (lens != stack_lens) free(lens);
  if (rc) {
    const char *code;
    int status = lp_disp_reject_status(rc, &code);
    const char *msg = rc == -ENOBUFS     ? "the queue is full; retry later"
                      : rc == -EHOSTDOWN ? "no backend of this model is healthy"
                      : rc == -ETIME     ? "the deadline is too close for the earliest answer expected"
                      : rc == -ENODEV    ? "no shape of this model is available"
                      : rc == -EMSGSIZE  ? "a sequence is longer than any available shape holds"
                                         : "proxy out of memory";
    if (rc == -ENOMEM) status = 503, code = "out_of_memory";
    return refuse(job, status, code, msg);
  }
  job->in_core = 1;
  job->charged = 1;
  job->live_prev = NULL;
  job->live_next = m->live;
  if (m->live) m->live->live_prev = job;
  m->live = job;
  job->unresolved = job->nseq;
  m->live_bytes += job->bytes;
  lp__model_pump(m);
  return 0;
}
