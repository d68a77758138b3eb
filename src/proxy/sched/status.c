/* What the proxy tells about itself: /metrics (Prometheus text), /v1/models
 * and the padding answer of /v1/buckets/advice (the simulated one, with
 * ?p99_ms=, is advice.c's). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>
#include <unistd.h>

#include "lanepack/shapeadv.h"
#include "lanepack/sim.h"
#include "proxy.h"

static const char *route_names[LP_ROUTE_COUNT] = {"infer", "models", "healthz", "readyz",
                                                  "metrics", "advice", "other", "v2_infer", "v2", "embeddings",
                                                  "embed", "rerank", "tokenize", "batches", "view"};

/* One sample per model, or per backend, of a value read by a small function. */
/* The statuses the fronts count answers by (lp_proxy_count), each a slot of
 * their counters, named here where the counters are rendered. */
const int lp__status_codes[LP_STATUS_SLOTS] = {200, 400, 401, 404, 405, 408, 409, 411, 413, 415,
                                               417, 422, 424, 429, 431, 500, 502, 503, 504, 505, 0};

typedef uint64_t (*model_value_fn)(const lp_model_t *m);
typedef uint64_t (*backend_value_fn)(const lp_backend_t *b);

static uint64_t m_qlen(const lp_model_t *m) { return m->st.queued_seqs; }
static uint64_t m_qtokens(const lp_model_t *m) { return m->st.queued_tokens; }
static uint64_t m_done(const lp_model_t *m) { return m->sequences_done; }
static uint64_t b_up(const lp_backend_t *b) { return (uint64_t)b->healthy; }
static uint64_t b_inflight(const lp_backend_t *b) { return b->inflight; }
static uint64_t b_failures(const lp_backend_t *b) { return b->failures; }
static uint64_t b_batches(const lp_backend_t *b) { return b->batches; }
/* a backend's device clock is the core's */
static const lp_devclock_t *b_clock(const lp_backend_t *b) {
  return lp_disp_clock(b->model->disp, (uint32_t)(b - b->model->backends));
}
static uint64_t b_devices(const lp_backend_t *b) { return b_clock(b)->devices; }

/* Per model, a histogram at offset in lp_model_t. */
static void per_model_hist(lp_buf_t *b, lp_proxy_t *p, const char *name, const char *help, size_t offset) {
  char labels[128];
  lp_metric_family(b, name, "histogram", help);
  for (size_t i = 0; i < p->nmodels; i++) {
    snprintf(labels, sizeof(labels), "model=\"%s\"", p->models[i].cfg->name);
    lp_metric_hist(b, name, labels, (const lp_hist_t *)((const char *)&p->models[i] + offset));
  }
}

/* Per backend, a value in seconds from nanoseconds. */
static void per_backend_seconds(lp_buf_t *b, lp_proxy_t *p, const char *name, const char *type,
                                const char *help, size_t offset) {
  char labels[512];
  lp_metric_family(b, name, type, help);
  for (size_t i = 0; i < p->nmodels; i++)
    for (size_t k = 0; k < p->models[i].nbackends; k++) {
      const lp_backend_t *be = &p->models[i].backends[k];
      uint64_t ns;
      memcpy(&ns, (const char *)b_clock(be) + offset, sizeof(ns));
      snprintf(labels, sizeof(labels), "model=\"%s\",backend=\"%s\"", p->models[i].cfg->name, be->url);
      lp_metric_sample(b, name, labels, (double)ns / 1e9);
    }
}

static void per_model(lp_buf_t *b, lp_proxy_t *p, const char *name, const char *type,
                      const char *help, model_value_fn value) {
  char labels[128];
  lp_metric_family(b, name, type, help);
  for (size_t i = 0; i < p->nmodels; i++) {
    snprintf(labels, sizeof(labels), "model=\"%s\"", p->models[i].cfg->name);
    lp_metric_sample_u64(b, name, labels, value(&p->models[i]));
  }
}

/* A gauge per model from values counted in one walk (v[i] for model i). */
static void per_model_counts(lp_buf_t *b, lp_proxy_t *p, const char *name, const char *help,
                             const uint64_t *v) {
  char labels[128];
  lp_metric_family(b, name, "gauge", help);
  for (size_t i = 0; i < p->nmodels; i++) {
    snprintf(labels, sizeof(labels), "model=\"%s\"", p->models[i].cfg->name);
    lp_metric_sample_u64(b, name, labels, v[i]);
  }
}

static void per_backend(lp_buf_t *b, lp_proxy_t *p, const char *name, const char *type,
                        const char *help, backend_value_fn value) {
  char labels[512];
  lp_metric_family(b, name, type, help);
  for (size_t i = 0; i < p->nmodels; i++)
    for (size_t k = 0; k < p->models[i].nbackends; k++) {
      const lp_backend_t *be = &p->models[i].backends[k];
      snprintf(labels, sizeof(labels), "model=\"%s\",backend=\"%s\"", p->models[i].cfg->name, be->url);
      lp_metric_sample_u64(b, name, labels, value(be));
    }
}

/* What an inference gateway's endpoint picker and an autoscaler read, per
 * model: requests waiting (a sequence of theirs is queued) and running (every
 * sequence sent, no answer yet) -- the Gateway API Inference Extension's
 * TotalQueuedRequests and TotalRunningRequests, counted in requests as a
 * client sees them, not sequences -- and the saturation: mean queue delay over
 * mean device time per batch over the last 30 s. Every admitted request is in
 * its model's live list, so one walk counts them; a scrape costs O(requests
 * held). Waiting: a sequence of it was never sent (one queued again for a retry
 * counts as running). */
static void load_gauges(lp_buf_t *b, lp_proxy_t *p) {
  uint64_t running[LP_MAX_MODELS] = {0}, waiting[LP_MAX_MODELS] = {0}, pending[LP_MAX_MODELS] = {0};
  double pending_s[LP_MAX_MODELS] = {0};
  uint64_t now = uv_hrtime();
  for (size_t k = 0; k < p->nmodels; k++)
    for (const lp_job_t *job = p->models[k].live; job; job = job->live_next) {
      if (job->answered) continue;
      /* not yet in the queue-delay histogram (observed at the answer): counted
       * with the wait it has so far */
      uint64_t wait = 0, backend = 0;
      if (lp__job_waiting(job)) {
        waiting[k]++;
        wait = now > job->arrive_ns ? now - job->arrive_ns : 0;
      } else {
        running[k]++;
        lp__job_times(job, &wait, &backend);
      }
      pending[k]++;
      pending_s[k] += (double)wait / 1e9;
    }
  char labels[128];
  per_model_counts(b, p, "lanepack_requests_waiting",
                   "Requests with a sequence queued, by model (the endpoint picker's TotalQueuedRequests).",
                   waiting);
  per_model_counts(b, p, "lanepack_requests_running",
                   "Requests sent to a backend whole and not yet answered, by model "
                   "(the endpoint picker's TotalRunningRequests).",
                   running);
  lp_metric_family(b, "lanepack_saturation", "gauge",
                   "Mean queue delay over mean device time per batch, last 30 s, by model: "
                   "the autoscaling target (0.7, see Scaling out).");
  for (size_t i = 0; i < p->nmodels; i++) {
    lp_model_t *m = &p->models[i];
    lp_sat_sums_t cur = {.at_ns = now, .wait_s = m->queue_delay.sum, .waits = m->queue_delay.count,
                         .service_s = m->service.sum, .batches = m->service.count};
    snprintf(labels, sizeof(labels), "model=\"%s\"", m->cfg->name);
    lp_metric_sample(b, "lanepack_saturation", labels,
                     lp_saturation_update(&m->saturation, &cur, pending_s[i], pending[i]));
  }
}

#ifndef LP_VERSION
#define LP_VERSION "0.1.0"
#endif

/* The standard process metrics (as Prometheus' client libraries name them),
 * read from the kernel at each scrape. */
static void process_metrics(lp_buf_t *b, const lp_proxy_t *p) {
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) == 0) {
    double cpu = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
                 (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
    lp_metric_family(b, "process_cpu_seconds_total", "counter", "User and system CPU time spent, in seconds.");
    lp_metric_sample(b, "process_cpu_seconds_total", NULL, cpu);
  }
  FILE *f = fopen("/proc/self/statm", "r");
  unsigned long long vm = 0, rss = 0;
  if (f) {
    if (fscanf(f, "%llu %llu", &vm, &rss) == 2) {
      double page = (double)sysconf(_SC_PAGESIZE);
      lp_metric_family(b, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.");
      lp_metric_sample(b, "process_resident_memory_bytes", NULL, (double)rss * page);
      lp_metric_family(b, "process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.");
      lp_metric_sample(b, "process_virtual_memory_bytes", NULL, (double)vm * page);
    }
    fclose(f);
  }
  /* open, then fdopendir: opendir's descriptor is unseen by ThreadSanitizer,
   * whose closedir then reports a race with the front thread that last used
   * that number (a closed client connection) and halts the sanitized build */
  int dfd = open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
  if (!d && dfd >= 0) close(dfd);
  if (d) {
    uint64_t n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
      if (e->d_name[0] != '.') n++;
    closedir(d);
    lp_metric_family(b, "process_open_fds", "gauge", "Open file descriptors.");
    lp_metric_sample_u64(b, "process_open_fds", NULL, n ? n - 1 : 0); /* less the one reading */
  }
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    lp_metric_family(b, "process_max_fds", "gauge", "The most file descriptors the process may open.");
    lp_metric_sample_u64(b, "process_max_fds", NULL, (uint64_t)rl.rlim_cur);
  }
  lp_metric_family(b, "process_start_time_seconds", "gauge", "Start time of the process, Unix seconds.");
  lp_metric_sample_u64(b, "process_start_time_seconds", NULL, (uint64_t)p->start_time);
  lp_metric_family(b, "lanepack_build_info", "gauge", "Always 1: the running version.");
  lp_metric_sample_u64(b, "lanepack_build_info", "version=\"" LP_VERSION "\"", 1);
}

void lp__render_metrics(lp_proxy_t *p, lp_buf_t *b) {
  char labels[512];
  process_metrics(b, p);
  /* the fronts' counters, summed (each front writes its own; read relaxed) */
  static uint64_t requests[LP_ROUTE_COUNT][LP_STATUS_SLOTS];
  struct { const char *code; uint64_t n; } rej[64];
  size_t nrej = 0;
  uint64_t dropped = 0, conns = 0;
  lp_hist_t t_queue, t_backend, t_total; /* bounds are set once, at start */
  lp_hist_init(&t_queue, p->fronts[0].t_queue.bounds, p->fronts[0].t_queue.n);
  lp_hist_init(&t_backend, p->fronts[0].t_backend.bounds, p->fronts[0].t_backend.n);
  lp_hist_init(&t_total, p->fronts[0].t_total.bounds, p->fronts[0].t_total.n);
  memset(requests, 0, sizeof(requests));
  lp_metric_family(b, "lanepack_front_requests_total", "counter",
                   "Requests routed by each front thread (configuration key threads).");
  for (unsigned fi = 0; fi < p->nfronts; fi++) {
    lp_front_t *f = &p->fronts[fi];
    for (int r = 0; r < LP_ROUTE_COUNT; r++)
      for (int s = 0; s < LP_STATUS_SLOTS; s++) requests[r][s] += LP_RELAXED_LOAD(f->requests[r][s]);
    size_t nr = __atomic_load_n(&f->nrejections, __ATOMIC_ACQUIRE);
    for (size_t i = 0; i < nr; i++) {
      size_t j = 0;
      while (j < nrej && strcmp(rej[j].code, f->rejections[i].code) != 0) j++;
      if (j == nrej) {
        if (nrej == sizeof(rej) / sizeof(rej[0])) continue;
        rej[nrej].code = f->rejections[i].code;
        rej[nrej++].n = 0;
      }
      rej[j].n += LP_RELAXED_LOAD(f->rejections[i].n);
    }
    lp_hist_add(&t_queue, &f->t_queue);
    lp_hist_add(&t_backend, &f->t_backend);
    lp_hist_add(&t_total, &f->t_total);
    dropped += LP_RELAXED_LOAD(f->alog.dropped);
    if (f->remote) conns += LP_RELAXED_LOAD(f->conns);
    else conns += (f->httpd ? lp_httpd_connections(f->httpd) : 0) + (f->admin ? lp_httpd_connections(f->admin) : 0);
    snprintf(labels, sizeof(labels), "thread=\"%u\"", fi);
    lp_metric_sample_u64(b, "lanepack_front_requests_total", labels, LP_RELAXED_LOAD(f->served));
  }
  lp_metric_family(b, "lanepack_requests_total", "counter", "HTTP requests answered, by route and status.");
  for (int r = 0; r < LP_ROUTE_COUNT; r++)
    for (int s = 0; s < LP_STATUS_SLOTS; s++) {
      if (!requests[r][s]) continue;
      if (lp__status_codes[s])
        snprintf(labels, sizeof(labels), "route=\"%s\",status=\"%d\"", route_names[r], lp__status_codes[s]);
      else
        snprintf(labels, sizeof(labels), "route=\"%s\",status=\"other\"", route_names[r]);
      lp_metric_sample_u64(b, "lanepack_requests_total", labels, requests[r][s]);
    }
  lp_metric_family(b, "lanepack_rejections_total", "counter", "Requests refused or failed, by reason.");
  for (size_t i = 0; i < nrej; i++) {
    snprintf(labels, sizeof(labels), "reason=\"%s\"", rej[i].code);
    lp_metric_sample_u64(b, "lanepack_rejections_total", labels, rej[i].n);
  }
  lp_metric_family(b, "lanepack_retries_total", "counter", "Sequences sent again after a failed batch.");
  lp_metric_sample_u64(b, "lanepack_retries_total", NULL, p->retries);
  lp_metric_family(b, "lanepack_stalls_total", "counter",
                   "Batches past stall_factor times their expected time: their sequences were hedged.");
  lp_metric_sample_u64(b, "lanepack_stalls_total", NULL, p->stalls);
  lp_metric_family(b, "lanepack_hedges_won_total", "counter",
                   "Sequences whose hedged copy answered before the stalled batch.");
  lp_metric_sample_u64(b, "lanepack_hedges_won_total", NULL, p->hedges_won);
  lp_metric_family(b, "lanepack_access_log_dropped_lines_total", "counter",
                   "Access log lines lost to failed writes (a full disk); the file keeps whole lines only.");
  lp_metric_sample_u64(b, "lanepack_access_log_dropped_lines_total", NULL, dropped);
  lp_metric_family(b, "lanepack_connections", "gauge", "Open client connections.");
  lp_metric_sample_u64(b, "lanepack_connections", NULL, conns);
  lp_metric_family(b, "lanepack_inflight_batches", "gauge", "Batches sent and not yet answered.");
  lp_metric_sample_u64(b, "lanepack_inflight_batches", NULL, p->batches);

  per_model(b, p, "lanepack_queue_sequences", "gauge", "Sequences waiting, by model.", m_qlen);
  load_gauges(b, p);
  per_model(b, p, "lanepack_queue_tokens", "gauge", "Tokens waiting, by model.", m_qtokens);
  lp_metric_family(b, "lanepack_batches_total", "counter", "Batches dispatched, by model and shape.");
  for (size_t i = 0; i < p->nmodels; i++) {
    lp_model_t *m = &p->models[i];
    for (size_t s = 0; s < m->shapes.count; s++) {
      if (!m->shapes.shapes[s].lanes) continue; /* a free slot (a pruned shape's) */
      snprintf(labels, sizeof(labels), "model=\"%s\",shape=\"%ux%u\"", m->cfg->name,
               m->shapes.shapes[s].lanes, m->shapes.shapes[s].bucket);
      lp_metric_sample_u64(b, "lanepack_batches_total", labels, m->batches_by_shape[s]);
    }
  }
  lp_metric_family(b, "lanepack_tokens_total", "counter", "Token slots sent upstream: real tokens and padding.");
  for (size_t i = 0; i < p->nmodels; i++) {
    lp_model_t *m = &p->models[i];
    snprintf(labels, sizeof(labels), "model=\"%s\",kind=\"real\"", m->cfg->name);
    lp_metric_sample_u64(b, "lanepack_tokens_total", labels, m->real_tokens);
    snprintf(labels, sizeof(labels), "model=\"%s\",kind=\"pad\"", m->cfg->name);
    lp_metric_sample_u64(b, "lanepack_tokens_total", labels, m->pad_tokens);
  }
  per_model(b, p, "lanepack_sequences_total", "counter", "Sequences answered by a backend, by model.",
            m_done);
  per_model_hist(b, p, "lanepack_batch_fill_ratio", "Real tokens over slots, per batch.",
                 offsetof(lp_model_t, fill));
  lp_metric_family(b, "lanepack_batch_fill_ratio_by_shape", "histogram",
                   "Real tokens over slots, per batch, by model and shape.");
  for (size_t i = 0; i < p->nmodels; i++) {
    lp_model_t *m = &p->models[i];
    for (size_t s = 0; s < m->shapes.count; s++) {
      if (!m->shapes.shapes[s].lanes) continue; /* a free slot (a pruned shape's) */
      snprintf(labels, sizeof(labels), "model=\"%s\",shape=\"%ux%u\"", m->cfg->name,
               m->shapes.shapes[s].lanes, m->shapes.shapes[s].bucket);
      lp_metric_hist(b, "lanepack_batch_fill_ratio_by_shape", labels, &m->fill_by_shape[s]);
    }
  }
  per_model_hist(b, p, "lanepack_model_request_duration_seconds",
                 "Arrival to answer of answered inference requests, by model.",
                 offsetof(lp_model_t, duration));
  per_model_hist(b, p, "lanepack_service_seconds",
                 "Device time per batch (as the backend reports it, else dispatch to answer), by model.",
                 offsetof(lp_model_t, service));
  per_model_hist(b, p, "lanepack_service_prediction_error_ratio",
                 "|answer time - the clock's expectation| / expectation, per batch, by model.",
                 offsetof(lp_model_t, service_error));
  per_model_hist(b, p, "lanepack_queue_delay_seconds", "Arrival to dispatch of answered requests, by model.",
                 offsetof(lp_model_t, queue_delay));
  lp_metric_family(b, "lanepack_request_duration_seconds", "histogram",
                   "Time of answered inference requests: queued, at the backend, total.");
  lp_metric_hist(b, "lanepack_request_duration_seconds", "phase=\"queue\"", &t_queue);
  lp_metric_hist(b, "lanepack_request_duration_seconds", "phase=\"backend\"", &t_backend);
  lp_metric_hist(b, "lanepack_request_duration_seconds", "phase=\"total\"", &t_total);
  per_backend(b, p, "lanepack_backend_up", "gauge", "1 if the backend is healthy.", b_up);
  per_backend(b, p, "lanepack_backend_inflight", "gauge", "Batches in flight, by backend.", b_inflight);
  per_backend(b, p, "lanepack_backend_failures_total", "counter", "Batches a backend failed.", b_failures);
  per_backend(b, p, "lanepack_backend_batches_total", "counter", "Batches a backend answered.", b_batches);
  /* the device clock */
  per_backend(b, p, "lanepack_backend_devices", "gauge", "Devices a backend runs batches on.", b_devices);
  per_backend_seconds(b, p, "lanepack_device_busy_seconds_total", "counter",
                      "Device time spent on batches (rate / devices = busy ratio).",
                      offsetof(lp_devclock_t, busy_ns));
  per_backend_seconds(b, p, "lanepack_device_useful_seconds_total", "counter",
                      "Device time times fill: the share doing real work (effective utilization).",
                      offsetof(lp_devclock_t, useful_ns));
  per_backend_seconds(b, p, "lanepack_lead_time_seconds", "gauge",
                      "Learned time from dispatch to device start (encode and delivery).",
                      offsetof(lp_devclock_t, lead) + offsetof(lp_window_t, median));
  lp_metric_family(b, "lanepack_service_time_seconds", "gauge",
                   "Expected device time of a batch, by backend and shape: learned median or configured cost.");
  for (size_t i = 0; i < p->nmodels; i++) {
    const lp_model_t *m = &p->models[i];
    for (size_t k = 0; k < m->nbackends; k++)
      for (size_t sh = 0; sh < m->shapes.count; sh++) {
        uint64_t c = lp_devclock_cost(b_clock(&m->backends[k]), (int)sh);
        if (!c) continue;
        snprintf(labels, sizeof(labels), "model=\"%s\",backend=\"%s\",shape=\"%ux%u\"", m->cfg->name,
                 m->backends[k].url, m->shapes.shapes[sh].lanes, m->shapes.shapes[sh].bucket);
        lp_metric_sample(b, "lanepack_service_time_seconds", labels, (double)c / 1e9);
      }
  }
}

void lp__render_models(lp_proxy_t *p, lp_buf_t *b) {
  lp_buf_puts(b, "{\"models\": [");
  for (size_t i = 0; i < p->nmodels; i++) {
    lp_model_t *m = &p->models[i];
    if (i) lp_buf_puts(b, ", ");
    lp_buf_puts(b, "{\"name\": ");
    lp_buf_json_str(b, m->cfg->name, strlen(m->cfg->name));
    lp_buf_printf(b, ", \"ragged\": %s, \"ready\": %s, \"queue\": {\"sequences\": %zu, \"tokens\": %llu}, \"shapes\": [",
                  m->cfg->ragged ? "true" : "false", lp__model_ready(m) ? "true" : "false", m->st.queued_seqs,
                  (unsigned long long)m->st.queued_tokens);
    for (size_t s = 0, n = 0; s < m->shapes.count; s++) {
      const lp_shape_t *sh = &m->shapes.shapes[s];
      if (!sh->lanes) continue;
      double slots = (double)(sh->real_tokens + sh->pad_tokens);
      lp_buf_printf(b, "%s{\"shape\": [%u, %u], \"state\": \"%s\", \"batches\": %llu, \"fill\": %.4f}",
                    n++ ? ", " : "", sh->lanes, sh->bucket, lp_shape_state_name(sh->state),
                    (unsigned long long)sh->batches, slots > 0 ? (double)sh->real_tokens / slots : 0.0);
    }
    lp_buf_puts(b, "], \"backends\": [");
    for (size_t k = 0; k < m->nbackends; k++) {
      const lp_backend_t *be = &m->backends[k];
      lp_buf_printf(b, "%s{\"url\": ", k ? ", " : "");
      lp_buf_json_str(b, be->url, strlen(be->url));
      lp_buf_printf(b, ", \"healthy\": %s, \"inflight\": %u, \"batches\": %llu, \"failures\": %llu}",
                    be->healthy ? "true" : "false", be->inflight, (unsigned long long)be->batches,
                    (unsigned long long)be->failures);
    }
    lp_buf_puts(b, "]}");
  }
  /* the same models in OpenAI's list shape (GET /v1/models of its API), so
   * the clients of OpenAI-compatible servers list them unchanged */
  lp_buf_puts(b, "], \"object\": \"list\", \"data\": [");
  for (size_t i = 0; i < p->nmodels; i++) {
    lp_buf_puts(b, i ? ", {\"id\": " : "{\"id\": ");
    lp_buf_json_str(b, p->models[i].cfg->name, strlen(p->models[i].cfg->name));
    lp_buf_printf(b, ", \"object\": \"model\", \"created\": %lld, \"owned_by\": \"lanepack\"}",
                  (long long)p->start_time);
  }
  lp_buf_puts(b, "]}\n");
}

int lp__render_advice(lp_proxy_t *p, lp_model_t *m, uint32_t k, lp_buf_t *b, char *err,
                      size_t errlen) {
  (void)p;
  lp_packer_t *pk = lp_packer_new();
  if (!pk) return snprintf(err, errlen, "out of memory"), -1;
  uint64_t budget = 0;
  for (size_t i = 0; i < m->shapes.count; i++) {
    uint64_t c = (uint64_t)m->shapes.shapes[i].lanes * m->shapes.shapes[i].bucket;
    if (c > budget) budget = c;
  }
  lp_advice_t a[2];
  int rc = 0;
  for (int o = 0; o < 2 && rc == 0; o++) {
    lp_advise_params_t prm = {.objective = (lp_advise_objective_t)o, .k = k,
                              .max_bucket = m->lengths.max, .token_budget = budget,
                              .granule = 128, .max_segments = m->cfg->max_segments_per_lane};
    rc = lp_advise(pk, &m->lengths, &prm, &m->shapes, &a[o]);
  }
  lp_packer_free(pk);
  if (rc) {
    snprintf(err, errlen, "%s", rc == -ENODATA ? "no lengths observed yet" : "advisor failed");
    return rc;
  }
  lp_buf_puts(b, "{\"model\": ");
  lp_buf_json_str(b, m->cfg->name, strlen(m->cfg->name));
  lp_buf_printf(b, ", \"observed\": %llu, \"current\": {\"shapes\": [",
                (unsigned long long)m->lengths.total);
  for (size_t s = 0, n = 0; s < m->shapes.count; s++)
    if (m->shapes.shapes[s].lanes)
      lp_buf_printf(b, "%s[%u, %u]", n++ ? ", " : "", m->shapes.shapes[s].lanes, m->shapes.shapes[s].bucket);
  lp_buf_printf(b, "], \"padded_fill\": %.4f, \"packed_fill\": %.4f}, \"proposals\": [",
                a[0].current_padded_fill, a[0].current_packed_fill);
  static const char *names[2] = {"padded", "packed"};
  for (int o = 0; o < 2; o++) {
    lp_buf_printf(b, "%s{\"objective\": \"%s\", \"shapes\": [", o ? ", " : "", names[o]);
    for (size_t i = 0; i < a[o].k; i++)
      lp_buf_printf(b, "%s[%u, %u]", i ? ", " : "", a[o].lanes[i], a[o].bucket[i]);
    lp_buf_printf(b, "], \"padded_fill\": %.4f, \"packed_fill\": %.4f}", a[o].padded_fill,
                  a[o].packed_fill);
  }
  lp_buf_printf(b, "], \"rejected\": %llu}\n", (unsigned long long)a[0].rejected);
  return 0;
}

void lp__render_page(lp_proxy_t *p, int route, int v2r, const char *url, size_t path_len, lp_buf_t *b,
                     lp_page_t *pg) {
  *pg = (lp_page_t){.status = 200, .ctype = "application/json"};
  if (route == LP_ROUTE_V2) {
    lp__v2_render_page(p, v2r, url, path_len, b, pg);
  } else if (route == LP_ROUTE_READYZ) {
    int ready = !p->unready;
    for (size_t i = 0; i < p->nmodels && ready; i++) ready = lp__model_ready(&p->models[i]);
    lp_buf_printf(b, "{\"ready\": %s%s}\n", ready ? "true" : "false",
                  p->unready ? ", \"reason\": \"shutting down\"" : "");
    pg->status = ready ? 200 : 503;
  } else if (route == LP_ROUTE_METRICS) {
    lp__render_metrics(p, b);
    pg->ctype = "text/plain; version=0.0.4; charset=utf-8";
  } else if (route == LP_ROUTE_MODELS) {
    lp__render_models(p, b);
  } else if (route == LP_ROUTE_BATCHES) {
    lp__batchview_render(p, url, path_len, b, pg);
  }
}
