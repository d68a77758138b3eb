/* Runs on a front thread: the pages of the scheduler's state (/metrics,
 * /v1/models, readiness, v2 metadata, /v1/batches/recent) rendered as text
 * from a snapshot the scheduler took, whatever the number of fronts. */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "lanepack/tei.h"
#include "lanepack/v2.h"
#include "lanepack/urlpath.h"
#include "front/front.h"
#include "handoff/snapshot.h"

static const char *route_names[LP_ROUTE_COUNT] = {"infer", "models", "healthz", "readyz",
                                                  "metrics", "advice", "other", "v2_infer", "v2", "embeddings",
                                                  "embed", "rerank", "tokenize", "batches", "view",
                                                  "predict", "embed_all", "similarity", "decode",
                                                  "embed_sparse", "info", "health"};

#ifndef LP_VERSION
#define LP_VERSION "0.1.0"
#endif

/* ---- /metrics ---- */

/* A model name or backend URL as a label value (lp_metric_label), each in its
 * own buffer of the statement it is used in: escaped, at most twice as long. */
#define ML(name) lp_metric_label((char[2 * LP_NAME_MAX]){0}, 2 * LP_NAME_MAX, (name))
#define BL(url) lp_metric_label((char[2 * LP_URL_MAX]){0}, 2 * LP_URL_MAX, (url))
/* labels of one model (and a short label more), or of a model and a backend
 * (and a shape), escaped */
#define LP_LABELS_MODEL (2 * LP_NAME_MAX + 64)
#define LP_LABELS_BACKEND (2 * LP_NAME_MAX + 2 * LP_URL_MAX + 64)


/* One sample per model, or per backend, of a value read by a small function. */
typedef uint64_t (*model_value_fn)(const lp_snap_model_t *m);
typedef uint64_t (*backend_value_fn)(const lp_snap_backend_t *b);

static uint64_t m_qlen(const lp_snap_model_t *m) { return m->queued_seqs; }
static uint64_t m_qtokens(const lp_snap_model_t *m) { return m->queued_tokens; }
static uint64_t m_done(const lp_snap_model_t *m) { return m->sequences_done; }
static uint64_t m_waiting(const lp_snap_model_t *m) { return m->waiting; }
static uint64_t m_running(const lp_snap_model_t *m) { return m->running; }
static uint64_t m_idle_work(const lp_snap_model_t *m) { return m->idle_with_work_ns; }
static uint64_t b_up(const lp_snap_backend_t *b) { return (uint64_t)b->healthy; }
static uint64_t b_inflight(const lp_snap_backend_t *b) { return b->inflight; }
static uint64_t b_failures(const lp_snap_backend_t *b) { return b->failures; }
static uint64_t b_batches(const lp_snap_backend_t *b) { return b->batches; }
static uint64_t b_devices(const lp_snap_backend_t *b) { return b->devices; }

/* Per model, a histogram at offset in lp_snap_model_t. */
static void per_model_hist(lp_buf_t *b, const lp_snap_t *s, const char *name, const char *help, size_t offset) {
  char labels[LP_LABELS_MODEL];
  lp_metric_family(b, name, "histogram", help);
  for (size_t i = 0; i < s->nmodels; i++) {
    snprintf(labels, sizeof(labels), "model=\"%s\"", ML(s->models[i].name));
    lp_metric_hist(b, name, labels, (const lp_hist_t *)((const char *)&s->models[i] + offset));
  }
}

/* Per model: value(m), or with per not 0 value(m) / per (nanoseconds as seconds). */
static void per_model_scaled(lp_buf_t *b, const lp_snap_t *s, const char *name, const char *type, const char *help,
                             model_value_fn value, double per) {
  char labels[LP_LABELS_MODEL];
  lp_metric_family(b, name, type, help);
  for (size_t i = 0; i < s->nmodels; i++) {
    snprintf(labels, sizeof(labels), "model=\"%s\"", ML(s->models[i].name));
    if (per) lp_metric_sample(b, name, labels, (double)value(&s->models[i]) / per);
    else lp_metric_sample_u64(b, name, labels, value(&s->models[i]));
  }
}

static void per_model(lp_buf_t *b, const lp_snap_t *s, const char *name, const char *type, const char *help,
                      model_value_fn value) {
  per_model_scaled(b, s, name, type, help, value, 0);
}

/* Per backend: value(be), or (value NULL) the nanoseconds at offset in
 * lp_snap_backend_t as seconds. */
static void per_backend_at(lp_buf_t *b, const lp_snap_t *s, const char *name, const char *type,
                           const char *help, backend_value_fn value, size_t offset) {
  char labels[LP_LABELS_BACKEND];
  lp_metric_family(b, name, type, help);
  for (size_t i = 0; i < s->nmodels; i++)
    for (size_t k = 0; k < s->models[i].nbackends; k++) {
      const lp_snap_backend_t *be = &s->models[i].backends[k];
      snprintf(labels, sizeof(labels), "model=\"%s\",backend=\"%s\"", ML(s->models[i].name), BL(be->url));
      if (value) {
        lp_metric_sample_u64(b, name, labels, value(be));
      } else {
        uint64_t ns;
        memcpy(&ns, (const char *)be + offset, sizeof(ns));
        lp_metric_sample(b, name, labels, (double)ns / 1e9);
      }
    }
}

static void per_backend(lp_buf_t *b, const lp_snap_t *s, const char *name, const char *type,
                        const char *help, backend_value_fn value) {
  per_backend_at(b, s, name, type, help, value, 0);
}

static void per_backend_seconds(lp_buf_t *b, const lp_snap_t *s, const char *name, const char *type,
                                const char *help, size_t offset) {
  per_backend_at(b, s, name, type, help, NULL, offset);
}

/* The standard process metrics (as Prometheus' client libraries name them),
 * read from the kernel at each scrape: the process's, whichever thread asks. */
static void process_metrics(lp_buf_t *b, const lp_snap_t *s) {
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
   * whose closedir then reports a race with the thread that last used that
   * number (a closed client connection) and halts the sanitized build */
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
  lp_metric_sample_u64(b, "process_start_time_seconds", NULL, (uint64_t)s->start_time);
  lp_metric_family(b, "lanepack_build_info", "gauge", "Always 1: the running version.");
  lp_metric_sample_u64(b, "lanepack_build_info", "version=\"" LP_VERSION "\"", 1);
}

/* The fronts' counters, summed here when the page is rendered (each front
 * writes its own, read relaxed: never older than the snapshot), then the
 * scheduler's from the snapshot. */
static void render_metrics(lp_front_t *self, const lp_snap_t *s, lp_buf_t *b) {
  const lp_shared_t *p = self->shared;
  char labels[LP_LABELS_BACKEND];
  process_metrics(b, s);
  lp__front_publish(self); /* this front's count is current (the others' as of their last tick) */
  uint64_t requests[LP_ROUTE_COUNT][LP_STATUS_SLOTS];
  struct { const char *code; uint64_t n; } rej[64];
  size_t nrej = 0;
  uint64_t dropped = 0, conns = 0, slices = 0;
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
      for (int st = 0; st < LP_STATUS_SLOTS; st++) requests[r][st] += LP_RELAXED_LOAD(f->requests[r][st]);
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
    slices += LP_RELAXED_LOAD(f->answer_slices);
    /* each front's servers are its own thread's: their count as it published it */
    conns += LP_RELAXED_LOAD(f->conns);
    snprintf(labels, sizeof(labels), "thread=\"%u\"", fi);
    lp_metric_sample_u64(b, "lanepack_front_requests_total", labels, LP_RELAXED_LOAD(f->served));
  }
  lp_metric_family(b, "lanepack_requests_total", "counter", "HTTP requests answered, by route and status.");
  for (int r = 0; r < LP_ROUTE_COUNT; r++)
    for (int st = 0; st < LP_STATUS_SLOTS; st++) {
      if (!requests[r][st]) continue;
      if (lp__status_codes[st])
        snprintf(labels, sizeof(labels), "route=\"%s\",status=\"%d\"", route_names[r], lp__status_codes[st]);
      else
        snprintf(labels, sizeof(labels), "route=\"%s\",status=\"other\"", route_names[r]);
      lp_metric_sample_u64(b, "lanepack_requests_total", labels, requests[r][st]);
    }
  lp_metric_family(b, "lanepack_rejections_total", "counter", "Requests refused or failed, by reason.");
  for (size_t i = 0; i < nrej; i++) {
    snprintf(labels, sizeof(labels), "reason=\"%s\"", rej[i].code);
    lp_metric_sample_u64(b, "lanepack_rejections_total", labels, rej[i].n);
  }
  lp_metric_family(b, "lanepack_retries_total", "counter", "Sequences sent again after a failed batch.");
  lp_metric_sample_u64(b, "lanepack_retries_total", NULL, s->retries);
  lp_metric_family(b, "lanepack_stalls_total", "counter",
                   "Batches past stall_factor times their expected time: their sequences were hedged.");
  lp_metric_sample_u64(b, "lanepack_stalls_total", NULL, s->stalls);
  lp_metric_family(b, "lanepack_hedges_won_total", "counter",
                   "Sequences whose hedged copy answered before the stalled batch.");
  lp_metric_sample_u64(b, "lanepack_hedges_won_total", NULL, s->hedges_won);
  lp_metric_family(b, "lanepack_access_log_dropped_lines_total", "counter",
                   "Access log lines lost to failed writes (a full disk); the file keeps whole lines only.");
  lp_metric_sample_u64(b, "lanepack_access_log_dropped_lines_total", NULL, dropped);
  lp_metric_family(b, "lanepack_answer_slices_total", "counter",
                   "Loop turns the fronts spent on large embeddings answers after their first "
                   "(written a slice a turn).");
  lp_metric_sample_u64(b, "lanepack_answer_slices_total", NULL, slices);
  lp_metric_family(b, "lanepack_connections", "gauge", "Open client connections.");
  lp_metric_sample_u64(b, "lanepack_connections", NULL, conns);
  lp_metric_family(b, "lanepack_tokenizer_queue_bytes", "gauge",
                   "Text (and bodies being decoded) the tokenizer workers hold, against tokenizer_queue_bytes.");
  lp_metric_sample_u64(b, "lanepack_tokenizer_queue_bytes", NULL, p->tokpool ? lp__tokpool_bytes(p->tokpool) : 0);
  lp_metric_family(b, "lanepack_answer_bytes_unsent", "gauge",
                   "Bytes of answers held for clients that have not taken them (configuration key "
                   "max_unsent_bytes_total).");
  lp_metric_sample_u64(b, "lanepack_answer_bytes_unsent", NULL,
                       __atomic_load_n(&p->client_counts.unsent_bytes, __ATOMIC_RELAXED));
  lp_metric_family(b, "lanepack_inflight_batches", "gauge", "Batches sent and not yet answered.");
  lp_metric_sample_u64(b, "lanepack_inflight_batches", NULL, s->inflight_batches);

  per_model(b, s, "lanepack_queue_sequences", "gauge", "Sequences waiting, by model.", m_qlen);
  per_model(b, s, "lanepack_requests_waiting", "gauge",
            "Requests with a sequence queued, by model (the endpoint picker's TotalQueuedRequests).", m_waiting);
  per_model(b, s, "lanepack_requests_running", "gauge",
            "Requests sent to a backend whole and not yet answered, by model "
            "(the endpoint picker's TotalRunningRequests).",
            m_running);
  per_model_scaled(b, s, "lanepack_idle_with_work_seconds_total", "counter",
                   "Seconds a model had a sequence waiting while a healthy device that could run it was idle "
                   "(the dispatch core's own view; 0 while it keeps its rules).",
                   m_idle_work, 1e9);
  lp_metric_family(b, "lanepack_saturation", "gauge",
                   "Mean queue delay over mean device time per batch, last 30 s, by model: "
                   "the autoscaling target (0.7, see Scaling out).");
  for (size_t i = 0; i < s->nmodels; i++) {
    snprintf(labels, sizeof(labels), "model=\"%s\"", ML(s->models[i].name));
    lp_metric_sample(b, "lanepack_saturation", labels, s->models[i].saturation);
  }
  per_model(b, s, "lanepack_queue_tokens", "gauge", "Tokens waiting, by model.", m_qtokens);
  lp_metric_family(b, "lanepack_batches_total", "counter", "Batches dispatched, by model and shape.");
  for (size_t i = 0; i < s->nmodels; i++) {
    const lp_snap_model_t *m = &s->models[i];
    for (size_t sh = 0; sh < m->shapes.count; sh++) {
      if (!m->shapes.shapes[sh].lanes) continue; /* a free slot (a pruned shape's) */
      snprintf(labels, sizeof(labels), "model=\"%s\",shape=\"%ux%u\"", ML(m->name), m->shapes.shapes[sh].lanes,
               m->shapes.shapes[sh].bucket);
      lp_metric_sample_u64(b, "lanepack_batches_total", labels, m->batches_by_shape[sh]);
    }
  }
  lp_metric_family(b, "lanepack_tokens_total", "counter", "Token slots sent upstream: real tokens and padding.");
  for (size_t i = 0; i < s->nmodels; i++) {
    const lp_snap_model_t *m = &s->models[i];
    snprintf(labels, sizeof(labels), "model=\"%s\",kind=\"real\"", ML(m->name));
    lp_metric_sample_u64(b, "lanepack_tokens_total", labels, m->real_tokens);
    snprintf(labels, sizeof(labels), "model=\"%s\",kind=\"pad\"", ML(m->name));
    lp_metric_sample_u64(b, "lanepack_tokens_total", labels, m->pad_tokens);
  }
  per_model(b, s, "lanepack_sequences_total", "counter", "Sequences answered by a backend, by model.", m_done);
  per_model_hist(b, s, "lanepack_batch_fill_ratio", "Real tokens over slots, per batch.",
                 offsetof(lp_snap_model_t, fill));
  lp_metric_family(b, "lanepack_batch_fill_ratio_by_shape", "histogram",
                   "Real tokens over slots, per batch, by model and shape.");
  for (size_t i = 0; i < s->nmodels; i++) {
    const lp_snap_model_t *m = &s->models[i];
    for (size_t sh = 0; sh < m->shapes.count; sh++) {
      if (!m->shapes.shapes[sh].lanes) continue; /* a free slot (a pruned shape's) */
      snprintf(labels, sizeof(labels), "model=\"%s\",shape=\"%ux%u\"", ML(m->name), m->shapes.shapes[sh].lanes,
               m->shapes.shapes[sh].bucket);
      lp_metric_hist(b, "lanepack_batch_fill_ratio_by_shape", labels, &m->fill_by_shape[sh]);
    }
  }
  per_model_hist(b, s, "lanepack_model_request_duration_seconds",
                 "Arrival to answer of answered inference requests, by model.",
                 offsetof(lp_snap_model_t, duration));
  per_model_hist(b, s, "lanepack_service_seconds",
                 "Device time per batch (as the backend reports it, else dispatch to answer), by model.",
                 offsetof(lp_snap_model_t, service));
  per_model_hist(b, s, "lanepack_service_prediction_error_ratio",
                 "|answer time - the clock's expectation| / expectation, per batch, by model.",
                 offsetof(lp_snap_model_t, service_error));
  per_model_hist(b, s, "lanepack_queue_delay_seconds", "Arrival to dispatch of answered requests, by model.",
                 offsetof(lp_snap_model_t, queue_delay));
  lp_metric_family(b, "lanepack_request_duration_seconds", "histogram",
                   "Time of answered inference requests: queued, at the backend, total.");
  lp_metric_hist(b, "lanepack_request_duration_seconds", "phase=\"queue\"", &t_queue);
  lp_metric_hist(b, "lanepack_request_duration_seconds", "phase=\"backend\"", &t_backend);
  lp_metric_hist(b, "lanepack_request_duration_seconds", "phase=\"total\"", &t_total);
  per_backend(b, s, "lanepack_backend_up", "gauge", "1 if the backend is healthy.", b_up);
  per_backend(b, s, "lanepack_backend_inflight", "gauge", "Batches in flight, by backend.", b_inflight);
  per_backend(b, s, "lanepack_backend_failures_total", "counter", "Batches a backend failed.", b_failures);
  per_backend(b, s, "lanepack_backend_batches_total", "counter", "Batches a backend answered.", b_batches);
  /* the device clock */
  per_backend(b, s, "lanepack_backend_devices", "gauge", "Devices a backend runs batches on.", b_devices);
  per_backend_seconds(b, s, "lanepack_device_busy_seconds_total", "counter",
                      "Device time spent on batches (rate / devices = busy ratio).",
                      offsetof(lp_snap_backend_t, busy_ns));
  per_backend_seconds(b, s, "lanepack_device_useful_seconds_total", "counter",
                      "Device time times fill: the share doing real work (effective utilization).",
                      offsetof(lp_snap_backend_t, useful_ns));
  per_backend_seconds(b, s, "lanepack_lead_time_seconds", "gauge",
                      "Learned time from dispatch to device start (encode and delivery).",
                      offsetof(lp_snap_backend_t, lead_ns));
  lp_metric_family(b, "lanepack_service_time_seconds", "gauge",
                   "Expected device time of a batch, by backend and shape: learned median or configured cost.");
  for (size_t i = 0; i < s->nmodels; i++) {
    const lp_snap_model_t *m = &s->models[i];
    for (size_t k = 0; k < m->nbackends; k++)
      for (size_t sh = 0; sh < m->shapes.count; sh++) {
        uint64_t c = m->backends[k].cost_ns[sh];
        if (!c) continue;
        snprintf(labels, sizeof(labels), "model=\"%s\",backend=\"%s\",shape=\"%ux%u\"", ML(m->name),
                 BL(m->backends[k].url), m->shapes.shapes[sh].lanes, m->shapes.shapes[sh].bucket);
        lp_metric_sample(b, "lanepack_service_time_seconds", labels, (double)c / 1e9);
      }
  }
}

/* ---- /v1/models, readiness, v2 metadata, recent batches ---- */

static void render_models(const lp_snap_t *s, lp_buf_t *b) {
  lp_buf_puts(b, "{\"models\": [");
  for (size_t i = 0; i < s->nmodels; i++) {
    const lp_snap_model_t *m = &s->models[i];
    if (i) lp_buf_puts(b, ", ");
    lp_buf_puts(b, "{\"name\": ");
    lp_buf_json_str(b, m->name, strlen(m->name));
    /* the bound on token ids, so that a client (lanepack-loadgen) sends ids it takes */
    if (m->vocab) lp_buf_printf(b, ", \"vocab_size\": %lld", (long long)m->vocab);
    lp_buf_printf(b, ", \"ragged\": %s, \"ready\": %s, \"queue\": {\"sequences\": %llu, \"tokens\": %llu}, \"shapes\": [",
                  m->ragged ? "true" : "false", m->ready ? "true" : "false", (unsigned long long)m->queued_seqs,
                  (unsigned long long)m->queued_tokens);
    for (size_t sh = 0, n = 0; sh < m->shapes.count; sh++) {
      const lp_shape_t *shape = &m->shapes.shapes[sh];
      if (!shape->lanes) continue;
      double slots = (double)(shape->real_tokens + shape->pad_tokens);
      lp_buf_printf(b, "%s{\"shape\": [%u, %u], \"state\": \"%s\", \"batches\": %llu, \"fill\": %.4f}",
                    n++ ? ", " : "", shape->lanes, shape->bucket, lp_shape_state_name(shape->state),
                    (unsigned long long)shape->batches, slots > 0 ? (double)shape->real_tokens / slots : 0.0);
    }
    lp_buf_puts(b, "], \"backends\": [");
    for (size_t k = 0; k < m->nbackends; k++) {
      const lp_snap_backend_t *be = &m->backends[k];
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
  for (size_t i = 0; i < s->nmodels; i++) {
    lp_buf_puts(b, i ? ", {\"id\": " : "{\"id\": ");
    lp_buf_json_str(b, s->models[i].name, strlen(s->models[i].name));
    lp_buf_printf(b, ", \"object\": \"model\", \"created\": %lld, \"owned_by\": \"lanepack\"}",
                  (long long)s->start_time);
  }
  lp_buf_puts(b, "]}\n");
}

/* Ready: not shutting down, and every model can run a batch somewhere. */
static int all_ready(const lp_snap_t *s) {
  int ready = !s->unready;
  for (size_t i = 0; i < s->nmodels && ready; i++) ready = s->models[i].ready;
  return ready;
}

static void v2_metadata(lp_buf_t *b, const lp_snap_model_t *m) {
  lp_buf_puts(b, "{\"name\":");
  lp_buf_json_str(b, m->name, strlen(m->name));
  lp_buf_puts(b, ",\"versions\":[\"1\"],\"platform\":\"lanepack\",\"inputs\":[{\"name\":\"input_ids\","
                 "\"datatype\":\"INT64\",\"shape\":[-1,-1]}],\"outputs\":[{\"name\":");
  lp_buf_json_str(b, m->v2_output, strlen(m->v2_output));
  lp_buf_puts(b, ",\"datatype\":\"");
  lp_buf_puts(b, lp_dtype_name(m->v2_dtype));
  lp_buf_puts(b, "\",\"shape\":[-1,-1,-1]}],\"parameters\":{\"max_sequence_length\":");
  lp_buf_u64(b, lp_bucket_set_max_len(&m->shapes));
  lp_buf_puts(b, "}}\n");
}

static void v2_status_only(lp_buf_t *b, lp_page_t *pg, int ok) {
  pg->status = ok ? 200 : 503;
  lp_buf_puts(b, ok ? "{}\n" : "{\"error\":\"not ready\"}\n");
}

/* The Open Inference Protocol's pages of the models: server readiness, a
 * model's metadata and readiness. */
static void render_v2(const lp_snap_t *s, int v2r, const char *url, size_t path_len, lp_buf_t *b,
                      lp_page_t *pg) {
  if (v2r == LP_V2_READY) {
    v2_status_only(b, pg, all_ready(s));
    return;
  }
  const char *name;
  size_t nlen;
  lp_v2_route(url, path_len, &name, &nlen);
  /* the name as the client's library percent-encoded it; an undecodable one
   * is looked up as sent (and found by no model) */
  char dec[LP_NAME_MAX];
  long dl = lp_urlpath_decode(name, nlen, dec, sizeof(dec));
  if (dl >= 0) {
    name = dec;
    nlen = (size_t)dl;
  }
  const lp_snap_model_t *m = NULL;
  for (size_t i = 0; i < s->nmodels && !m; i++)
    if (strlen(s->models[i].name) == nlen && memcmp(s->models[i].name, name, nlen) == 0) m = &s->models[i];
  if (!m) {
    pg->status = 404;
    pg->code = "unknown_model";
    snprintf(pg->msg, sizeof(pg->msg), "no model named '%.*s'", (int)(nlen > 64 ? 64 : nlen), name);
  } else if (v2r == LP_V2_MODEL) {
    v2_metadata(b, m);
  } else {
    v2_status_only(b, pg, !s->unready && m->ready);
  }
}

static void render_batches(const lp_snap_t *s, const char *url, size_t path_len, lp_buf_t *b, lp_page_t *pg) {
  const char *q = url + path_len;
  if (*q == '?') q++;
  uint32_t n;
  if (lp_recent_query_n(q, strlen(q), &n)) {
    pg->status = 400;
    pg->code = "bad_parameter";
    snprintf(pg->msg, sizeof(pg->msg), "n must be an integer from 1 to %d", LP_RECENT_BATCHES);
    return;
  }
  pg->hdr = "Cache-Control: no-store\r\n";
  if (!s->recent) lp_buf_printf(b, "{\"capacity\": %d, \"batches\": []}\n", LP_RECENT_BATCHES);
  else lp_recent_render(s->recent, n, s->at_ns, b); /* ages as of the copy */
}

/* The page of route (LP_ROUTE_*; LP_ROUTE_V2 with v2r, a lp_v2_route_t) for
 * url (path_len bytes of path, then the query) from s into b. */
static void render_page(lp_front_t *f, const lp_snap_t *s, int route, int v2r, const char *url,
                        size_t path_len, lp_buf_t *b, lp_page_t *pg) {
  *pg = (lp_page_t){.status = 200, .ctype = "application/json"};
  if (route == LP_ROUTE_V2) {
    render_v2(s, v2r, url, path_len, b, pg);
  } else if (route == LP_ROUTE_READYZ) {
    int ready = all_ready(s);
    lp_buf_printf(b, "{\"ready\": %s%s}\n", ready ? "true" : "false",
                  s->unready ? ", \"reason\": \"shutting down\"" : "");
    pg->status = ready ? 200 : 503;
  } else if (route == LP_ROUTE_TEI_HEALTH) {
    /* TEI's GET /health: 200 with no body, or 503 in its error shape */
    if (!all_ready(s)) {
      lp_tei_error(b, "unhealthy", LP_TEI_UNHEALTHY);
      pg->status = 503;
    }
  } else if (route == LP_ROUTE_METRICS) {
    render_metrics(f, s, b);
    pg->ctype = "text/plain; version=0.0.4; charset=utf-8";
  } else if (route == LP_ROUTE_MODELS) {
    render_models(s, b);
  } else if (route == LP_ROUTE_BATCHES) {
    render_batches(s, url, path_len, b, pg);
  }
}

/* ---- answering ---- */

static void answer_page(lp_front_t *f, lp_http_req_t *req, int route, const lp_buf_t *body, const lp_page_t *pg) {
  if (pg->code) {
    if (route == LP_ROUTE_V2) lp__v2_reject(f, req, pg->status, pg->code, pg->msg);
    else lp_proxy_reject(f, req, route, pg->status, pg->hdr, pg->code, pg->msg, NULL);
    return;
  }
  if (route != LP_ROUTE_METRICS) lp_proxy_count(f, route, pg->status); /* /metrics counts itself first */
  lp_http_respond(req, pg->status, pg->hdr, pg->ctype, body->data, body->len);
}

static void render_and_answer(lp_front_t *f, lp_http_req_t *req, const lp_snap_t *s, int route, int v2r,
                              const char *url, size_t path_len) {
  lp_page_t pg;
  lp_buf_reset(&f->scratch);
  render_page(f, s, route, v2r, url, path_len, &f->scratch, &pg);
  if (f->scratch.oom) {
    pg = (lp_page_t){.status = 503, .hdr = "Retry-After: 1\r\n", .code = "out_of_memory"};
    snprintf(pg.msg, sizeof(pg.msg), "proxy out of memory");
  }
  answer_page(f, req, route, &f->scratch, &pg);
}

/* A page is rendered from a snapshot the scheduler takes on its own thread:
 * the request goes there as a job and comes back with it (or, for the
 * advice, with the answer its worker computed). */
void lp__front_page(lp_front_t *f, lp_http_req_t *req, int route, int v2r) {
  lp__front_ask_page(f, req, route, v2r);
}

void lp__front_page_back(lp_front_t *f, lp_job_t *job, lp_http_req_t *req) {
  if (job->snap) {
    render_and_answer(f, req, job->snap, job->admin_route, job->admin_v2, job->admin_url, job->admin_path_len);
    lp__snap_unref(job->snap); /* rendered: the memory goes with the wake-up's last page */
    job->snap = NULL;
    return;
  }
  lp_page_t pg = {.status = job->res_status, .ctype = job->res_ctype,
                  .hdr = job->res_hdr[0] ? job->res_hdr : NULL, .code = job->res_code[0] ? job->res_code : NULL};
  snprintf(pg.msg, sizeof(pg.msg), "%s", job->res_msg);
  answer_page(f, req, job->admin_route, &job->res_body, &pg);
}
