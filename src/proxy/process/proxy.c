/* The proxy: routes, the scheduler kick, counting, and a graceful shutdown
 * that stops accepting, finishes what was accepted, then exits. */
#include <errno.h>
#include <malloc.h>
#include <signal.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "lanepack/log.h"
#include "proxy.h"

const int lp__status_codes[LP_STATUS_SLOTS] = {200, 400, 401, 404, 405, 408, 409, 411, 413, 415,
                                               417, 429, 431, 500, 502, 503, 504, 505, 0};

/* fine around typical batch times (a few ms to tens of ms), coarse past */
static const double latency_bounds[] = {0.0005, 0.001, 0.002, 0.003, 0.004, 0.005, 0.006, 0.008,
                                        0.01, 0.012, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075,
                                        0.1, 0.15, 0.2, 0.3, 0.5, 1, 2, 5, 10, 30};

void lp_proxy_count(lp_front_t *f, int route, int status) {
  int s = 0;
  while (lp__status_codes[s] && lp__status_codes[s] != status) s++;
  LP_RELAXED_INC(f->requests[route][s]);
}

void lp__count_rejection(lp_front_t *f, const char *code) {
  size_t n = f->nrejections; /* its own: the owner reads it plainly */
  for (size_t i = 0; i < n; i++)
    if (strcmp(f->rejections[i].code, code) == 0) {
      LP_RELAXED_INC(f->rejections[i].n);
      return;
    }
  if (n < sizeof(f->rejections) / sizeof(f->rejections[0])) {
    /* codes are string literals or live in jobs: keep our own copy, published
     * (release) before the count that shows it */
    snprintf(f->rejections[n].code, sizeof(f->rejections[n].code), "%s", code);
    LP_RELAXED_STORE(f->rejections[n].n, 1);
    __atomic_store_n(&f->nrejections, n + 1, __ATOMIC_RELEASE);
  }
}

void lp__reject_job(lp_front_t *f, lp_http_req_t *req, int route, int status, const char *headers,
                    const char *code, const char *msg, const char *extra, const lp_job_t *job) {
  lp_proxy_count(f, route, status);
  lp__count_rejection(f, code);
  lp__access_log(f, req, status, job);
  lp_http_respond_error(req, status, headers, code, msg, extra);
}

void lp_proxy_reject(lp_front_t *f, lp_http_req_t *req, int route, int status, const char *headers,
                     const char *code, const char *msg, const char *extra) {
  lp__reject_job(f, req, route, status, headers, code, msg, extra, NULL);
}

/* ---- the scheduler runs once per loop turn, however many arrivals ---- */

static void on_kick(uv_idle_t *h) {
  lp_proxy_t *p = container_of(h, lp_proxy_t, kick);
  uv_idle_stop(&p->kick);
  p->kicking = 0;
  for (size_t i = 0; i < p->nmodels; i++) lp__model_schedule(&p->models[i]);
}

void lp_proxy_kick(lp_proxy_t *p) {
  if (p->kicking) return;
  p->kicking = 1;
  uv_idle_start(&p->kick, on_kick);
}

/* ---- routes ---- */

static int path_is(const lp_http_req_t *r, const char *path) {
  return r->path_len == strlen(path) && memcmp(r->url, path, r->path_len) == 0;
}

static void respond_json(lp_front_t *f, lp_http_req_t *req, int route, int status, lp_buf_t *b) {
  lp_proxy_count(f, route, status);
  lp_http_respond(req, status, NULL, "application/json", b->data, b->len);
}

static int method_ok(lp_front_t *f, lp_http_req_t *req, int route, int want) {
  if (req->method == want || (want == LP_HTTP_GET && req->method == LP_HTTP_HEAD)) return 1;
  lp_proxy_reject(f, req, route, 405, want == LP_HTTP_GET ? "Allow: GET\r\n" : "Allow: POST\r\n",
                  "method_not_allowed", want == LP_HTTP_GET ? "use GET" : "use POST", NULL);
  return 0;
}

static void handle_infer(lp_front_t *f, lp_http_req_t *req, const char *model, size_t mlen) {
  if (!method_ok(f, req, LP_ROUTE_INFER, LP_HTTP_POST)) return;
  lp_job_t *job = lp__infer_parse(f, req, model, mlen);
  if (!job) return;
  lp__front_submit(f, req, job);
}

/* Query parameter value as an unsigned integer; def when absent. -1 if bad. */
long lp__query_uint(const char *url, size_t path_len, const char *name, long def) {
  const char *q = url + path_len;
  size_t n = strlen(name);
  while (*q) {
    q++; /* '?' or '&' */
    if (strncmp(q, name, n) == 0 && q[n] == '=') {
      char *end;
      long v = strtol(q + n + 1, &end, 10);
      if (end == q + n + 1 || (*end && *end != '&') || v < 0) return -1;
      return v;
    }
    q += strcspn(q, "&");
  }
  return def;
}

/* Whole tokens compared in time that depends on the lengths only, not on
 * where they differ. */
static int token_eq(const char *a, size_t alen, const char *b) {
  size_t blen = strlen(b);
  unsigned char d = alen != blen;
  for (size_t i = 0; i < alen && i < blen; i++) d |= (unsigned char)(a[i] ^ b[i]);
  return d == 0;
}

/* "Bearer TOKEN" (RFC 6750: the scheme in any case, then spaces) with TOKEN
 * one of the configured ones, whole: the header reaches here uncut (one
 * header only: a repeat is refused by the server) and every token is read
 * whole from its file. The front's own copy of the tokens (remote) or the
 * proxy's. */
static int authorized(lp_front_t *f, const lp_http_req_t *req) {
  char **tokens = f->remote ? f->tokens : f->proxy->tokens;
  size_t ntokens = f->remote ? f->ntokens : f->proxy->ntokens;
  if (!ntokens) return 1;
  const char *h = req->authorization;
  size_t n = req->authorization_len;
  if (!h || n < 7 || strncasecmp(h, "Bearer ", 7) != 0) return 0;
  const char *t = h + 7;
  n -= 7;
  while (n && *t == ' ') t++, n--;
  while (n && (t[n - 1] == ' ' || t[n - 1] == '\t')) n--;
  int ok = 0;
  for (size_t i = 0; i < ntokens; i++) ok |= token_eq(t, n, tokens[i]);
  return ok;
}

static int is_admin_route(const lp_http_req_t *req) {
  return path_is(req, "/metrics") || path_is(req, "/v1/models") || path_is(req, "/v1/buckets/advice");
}

/* The server refused a request itself (a limit, bad framing, a repeated
 * header, a timeout): counted and logged like any other error. */
void lp__on_reject(lp_http_req_t *req, int status, const char *code, void *ud) {
  lp_front_t *f = ud;
  lp_proxy_count(f, LP_ROUTE_OTHER, status);
  lp__count_rejection(f, code);
  lp__access_log(f, req, status, NULL);
}

static void route(lp_front_t *f, lp_http_req_t *req, int on_admin);

void lp__on_request(lp_http_req_t *req, void *ud) {
  lp_front_t *f = ud;
  LP_RELAXED_INC(f->served);
  route(f, req, 0);
}
void lp__on_admin_request(lp_http_req_t *req, void *ud) { route(ud, req, 1); }

/* A page of the scheduler's state: rendered here with one loop, by the
 * scheduler (a message there and back) with several. */
void lp__front_page(lp_front_t *f, lp_http_req_t *req, int route, int v2r) {
  if (f->remote || route == LP_ROUTE_ADVICE) { /* the advice may wait for its worker */
    lp__front_ask_page(f, req, route, v2r);
    return;
  }
  lp_page_t pg;
  lp_buf_reset(&f->scratch);
  lp__render_page(f->proxy, route, v2r, req->url, req->path_len, &f->scratch, &pg);
  lp__front_answer_page(f, req, route, v2r, &f->scratch, &pg);
}

void lp__front_answer_page(lp_front_t *f, lp_http_req_t *req, int route, int v2r, const lp_buf_t *body,
                           const lp_page_t *pg) {
  (void)v2r;
  if (pg->code) {
    if (route == LP_ROUTE_V2) lp__v2_reject(f, req, pg->status, pg->code, pg->msg);
    else lp_proxy_reject(f, req, route, pg->status, pg->hdr, pg->code, pg->msg, NULL);
    return;
  }
  if (route != LP_ROUTE_METRICS) lp_proxy_count(f, route, pg->status); /* /metrics counts itself first */
  lp_http_respond(req, pg->status, pg->hdr, pg->ctype, body->data, body->len);
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
  }
}

/* Routes: with an admin listener, its routes live there only and inference
 * never does; probes answer on both. Client routes under /v1/ and /v2/models
 * need a bearer token when tokens are configured, and so do the admin routes
 * when they share the client port (/metrics shows backend URLs and load); the
 * admin listener (loopback by default) and the probes do not. */
static void route(lp_front_t *f, lp_http_req_t *req, int on_admin) {
  lp_buf_t *b = &f->scratch;
  lp_buf_reset(b);
  static const char prefix[] = "/v1/models/";
  int probe = path_is(req, "/healthz") || path_is(req, "/readyz");
  int has_admin = f->cfg->admin_listen[0] != 0;
  if (!probe && has_admin && on_admin != is_admin_route(req)) {
    lp_proxy_reject(f, req, LP_ROUTE_OTHER, 404, NULL, "not_found",
                    on_admin ? "not on the admin listener" : "no such route", NULL);
    return;
  }
  int client_route = strncmp(req->url, "/v1/", 4) == 0 || strncmp(req->url, "/v2/models", 10) == 0 ||
                     path_is(req, "/v2") || is_admin_route(req);
  if (!on_admin && !probe && client_route && !authorized(f, req)) {
    lp_proxy_reject(f, req, LP_ROUTE_OTHER, 401, "WWW-Authenticate: Bearer\r\n", "unauthorized",
                    "a valid 'Authorization: Bearer TOKEN' header is required", NULL);
    return;
  }
  if (!on_admin && lp__v2_route(f, req)) {
    /* the Open Inference Protocol: its own routes and error form */
  } else if (path_is(req, "/v1/infer")) {
    handle_infer(f, req, NULL, 0);
  } else if (path_is(req, "/v1/embeddings")) {
    lp__embeddings_request(f, req);
  } else if (req->path_len > sizeof(prefix) - 1 && strncmp(req->url, prefix, sizeof(prefix) - 1) == 0) {
    const char *name = req->url + sizeof(prefix) - 1;
    size_t rest = req->path_len - (sizeof(prefix) - 1);
    const char *slash = memchr(name, '/', rest);
    if (slash && (size_t)(req->url + req->path_len - slash) == strlen("/infer") &&
        strncmp(slash, "/infer", 6) == 0 && slash > name)
      handle_infer(f, req, name, (size_t)(slash - name));
    else
      lp_proxy_reject(f, req, LP_ROUTE_OTHER, 404, NULL, "not_found", "no such route", NULL);
  } else if (path_is(req, "/healthz")) {
    if (!method_ok(f, req, LP_ROUTE_HEALTHZ, LP_HTTP_GET)) return;
    lp_buf_puts(b, "{\"status\": \"ok\"}\n");
    respond_json(f, req, LP_ROUTE_HEALTHZ, 200, b);
  } else if (path_is(req, "/readyz")) {
    if (!method_ok(f, req, LP_ROUTE_READYZ, LP_HTTP_GET)) return;
    lp__front_page(f, req, LP_ROUTE_READYZ, 0);
  } else if (path_is(req, "/metrics")) {
    if (!method_ok(f, req, LP_ROUTE_METRICS, LP_HTTP_GET)) return;
    lp_proxy_count(f, LP_ROUTE_METRICS, 200);
    lp__front_page(f, req, LP_ROUTE_METRICS, 0);
  } else if (path_is(req, "/v1/models")) {
    if (!method_ok(f, req, LP_ROUTE_MODELS, LP_HTTP_GET)) return;
    lp__front_page(f, req, LP_ROUTE_MODELS, 0);
  } else if (path_is(req, "/v1/buckets/advice")) {
    if (!method_ok(f, req, LP_ROUTE_ADVICE, LP_HTTP_GET)) return;
    lp__front_page(f, req, LP_ROUTE_ADVICE, 0);
  } else {
    lp_proxy_reject(f, req, LP_ROUTE_OTHER, 404, NULL, "not_found", "no such route", NULL);
  }
}

void lp__on_cancel(lp_http_req_t *req, void *ud) {
  lp_front_t *f = ud;
  lp_job_t *job = req->app;
  if (!job) return;
  req->app = NULL;
  if (!f->remote) {
    if (job->admin_route) job->front_req = NULL; /* its page is dropped when it comes */
    else lp__job_cancel(job);
    return;
  }
  /* the scheduler hears it (after the job itself, if that still waits here);
   * the job is freed once every reference is dropped */
  lp__front_flush(f);
  job->front_req = NULL;
  __atomic_fetch_add(&job->refs, 1, __ATOMIC_RELAXED);
  lp__mbox_push_cancel(&f->proxy->inbox, job);
}

/* ---- shutdown ---- */

/* Every front has written every answer and closed every connection: done. */
void lp__proxy_drained(lp_proxy_t *p) {
  if (!p->remote) lp__alog_flush(&p->fronts[0].alog);
  lp_log(LP_LOG_INFO, "drained", "\"batches_in_flight\": %zu", p->batches);
  uv_stop(p->loop);
}

static void on_last_resort(uv_timer_t *t) {
  lp_proxy_t *p = t->data;
  lp_log(LP_LOG_ERROR, "drain did not finish: stopping", NULL);
  uv_stop(p->loop);
}

/* Past the drain timeout: whatever is still queued, in flight or waiting to
 * be retried gets 503 shutting_down, so every accepted request is answered
 * before the process goes. */
static void on_drain_timeout(uv_timer_t *t) {
  lp_proxy_t *p = t->data;
  lp_log(LP_LOG_WARN, "drain timeout: failing what is left", "\"batches\": %zu", p->batches);
  p->hard_stop = 1;
  for (size_t i = 0; i < p->nmodels; i++)
    lp__model_fail_all(&p->models[i], LP_DISP_ST_SHUTDOWN);
  lp_upstream_cancel_all(p->up); /* their batches fail with shutting_down */
  uv_timer_start(&p->drain, on_last_resort, 2000, 0);
}

/* Stops accepting and drains: connections close once their last answer is
 * written; then the loop stops. */
static void start_drain(lp_proxy_t *p) {
  if (p->draining) return;
  p->draining = 1;
  lp_log(LP_LOG_INFO, "draining", "\"jobs\": %zu, \"batches\": %zu", p->jobs, p->batches);
  lp__fronts_drain(p);
  uv_timer_start(&p->drain, on_drain_timeout, p->cfg.drain_timeout_ms, 0);
  lp_proxy_kick(p);
}

static void on_drain_delay(uv_timer_t *t) { start_drain(t->data); }

/* SIGTERM: first not ready (so that load balancers and Kubernetes endpoints
 * stop sending here) while still accepting and serving, for drain_delay_ms;
 * then the drain. A second signal drains at once. */
static void on_signal(uv_signal_t *s, int signum) {
  lp_proxy_t *p = s->data;
  if (p->unready) {
    if (!p->draining) {
      uv_timer_stop(&p->drain);
      start_drain(p);
    }
    return;
  }
  p->unready = 1;
  lp_log(LP_LOG_INFO, "shutting down", "\"signal\": %d, \"drain_delay_ms\": %llu", signum,
         (unsigned long long)p->cfg.drain_delay_ms);
  if (p->cfg.drain_delay_ms == 0) start_drain(p);
  else uv_timer_start(&p->drain, on_drain_delay, p->cfg.drain_delay_ms, 0);
}

/* SIGHUP: a new configuration, validated and applied without dropping a
 * connection or a queued request; a bad one is refused and the old kept. */
static void on_sighup(uv_signal_t *s, int signum) {
  lp_proxy_t *p = s->data;
  (void)signum;
  static lp_config_t next; /* large: not on the stack */
  char err[512] = "";
  if (!p->reload) return;
  if (p->reload(&next, err, sizeof(err)) == 0 && lp__proxy_reload(p, &next, err, sizeof(err)) == 0) {
    lp_log(LP_LOG_INFO, "reloaded", "\"models\": %zu", p->nmodels);
    return;
  }
  lp_buf_t e;
  lp_buf_init(&e);
  lp_buf_json_str(&e, err, strlen(err));
  lp_buf_append(&e, "", 1);
  lp_log(LP_LOG_ERROR, "reload refused: the running configuration stays", "\"error\": %s",
         e.oom ? "\"\"" : e.data);
  lp_buf_free(&e);
  /* the access log is reopened all the same: logrotate may have renamed it, and
   * would compress the old file under us */
  if (p->cfg.access_log[0] && lp__access_log_open(p, p->cfg.access_log, err, sizeof(err)))
    lp_log(LP_LOG_ERROR, "access log not reopened: writing on to the old file", NULL);
}

/* After a burst the allocator keeps what it freed; once nothing is in flight,
 * give it back, so that resident memory follows live connections and queues
 * (what an operator watches), not the last peak. At most once a second, and
 * only after traffic. */
static void on_trim(uv_timer_t *t) {
  lp_proxy_t *p = t->data;
  if (!p->remote) lp__alog_flush(&p->fronts[0].alog); /* remote fronts flush their own */
  uint64_t served = 0;
  for (unsigned i = 0; i < p->nfronts; i++) served += LP_RELAXED_LOAD(p->fronts[i].served);
  if (served == p->trimmed_at || p->jobs || p->batches) return;
  p->trimmed_at = served;
  malloc_trim(0);
}

void lp__httpd_limits(const lp_config_t *cfg, lp_httpd_config_t *hc) {
  lp_httpd_config_default(hc);
  hc->max_header_bytes = cfg->max_header_bytes;
  hc->max_body_bytes = cfg->max_body_bytes;
  hc->max_connections = cfg->max_connections;
  hc->max_pipeline = cfg->max_pipeline;
  hc->max_unsent_bytes = cfg->max_unsent_bytes;
  hc->max_body_bytes_in_flight = lp_config_body_budget(cfg);
  hc->idle_timeout_ms = cfg->idle_timeout_ms;
  hc->max_requests_per_connection = cfg->max_requests_per_connection;
  hc->request_timeout_ms = cfg->request_timeout_ms;
}

/* The latency histograms' bounds, for the fronts. */
const double *lp__latency_bounds(size_t *n) {
  *n = sizeof(latency_bounds) / sizeof(latency_bounds[0]);
  return latency_bounds;
}

int lp_proxy_init(lp_proxy_t *p, uv_loop_t *loop, const lp_config_t *cfg, int *port) {
  memset(p, 0, sizeof(*p));
  struct timespec wall;
  clock_gettime(CLOCK_REALTIME, &wall);
  p->start_time = (double)wall.tv_sec + (double)wall.tv_nsec / 1e9;
  p->loop = loop;
  p->cfg = *cfg;
  lp_log_level = cfg->log_level;
  lp_buf_init(&p->scratch);
  p->up = lp_upstream_new(loop, 1ull << 30);
  if (!p->up) return -ENOMEM;
  for (size_t i = 0; i < p->cfg.nmodels; i++) {
    int rc = lp__model_init(&p->models[i], p, &p->cfg.models[i]);
    if (rc) return rc;
    p->nmodels++;
    const lp_model_config_t *mc = &p->cfg.models[i];
    if (mc->sentencepiece[0]) {
      char err[256];
      if (!(p->tok[i] = lp_tok_load(mc->sentencepiece, mc->sentencepiece_options, err, sizeof(err)))) {
        lp_log(LP_LOG_ERROR, "tokenizer", "\"model\": \"%s\", \"file\": \"%s\", \"error\": \"%s\"", mc->name,
               mc->sentencepiece, err);
        return -EINVAL;
      }
    }
  }
  uv_idle_init(loop, &p->kick);
  uv_timer_init(loop, &p->health);
  uv_timer_init(loop, &p->drain);
  p->drain.data = p;
  uv_timer_init(loop, &p->trim);
  p->trim.data = p;
  uv_timer_start(&p->trim, on_trim, 1000, 1000);
  uv_unref((uv_handle_t *)&p->trim);
  if (cfg->auth_tokens_file[0]) {
    char err[300];
    if (lp_config_read_tokens(cfg->auth_tokens_file, lp_config_token_max(cfg), &p->tokens,
                              &p->ntokens, err, sizeof(err))) {
      lp_log(LP_LOG_ERROR, "auth tokens", "\"error\": \"%s\"", err);
      return -EINVAL;
    }
  }
  /* the fronts: their listeners, access log and (several) threads */
  int rc = lp__fronts_start(p, port);
  if (rc) return rc;
  uv_signal_init(loop, &p->sigterm);
  uv_signal_init(loop, &p->sigint);
  p->sigterm.data = p->sigint.data = p;
  uv_signal_start(&p->sigterm, on_signal, SIGTERM);
  uv_signal_start(&p->sigint, on_signal, SIGINT);
  uv_signal_init(loop, &p->sighup);
  p->sighup.data = p;
  uv_signal_start(&p->sighup, on_sighup, SIGHUP);
  lp__backends_start(p);
  return 0;
}

void lp_proxy_free(lp_proxy_t *p) {
  lp__advice_free(p);
  for (size_t i = 0; i < LP_MAX_MODELS; i++) lp_tok_free(p->tok[i]);
  lp__fronts_stop(p); /* joins the threads and frees what the fronts own */
}
