/* Runs on a front thread: each parsed request to its route (inference, the
 * OpenAI and v2 routes, probes, pages), with the token and admin-listener
 * rules; and a client's leaving, told to whoever holds its job. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "lanepack/tei.h"
#include "lanepack/urlpath.h"
#include "front/front.h"

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
 * whole from its file. The front's own copy of the tokens (a reload sends
 * it a new one). */
static int authorized(lp_front_t *f, const lp_http_req_t *req) {
  char **tokens = f->tokens;
  size_t ntokens = f->ntokens;
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
  return path_is(req, "/metrics") || path_is(req, "/v1/models") || path_is(req, "/v1/buckets/advice") ||
         path_is(req, "/v1/batches/recent") || path_is(req, "/");
}

/* text-embeddings-inference's routes, by path. */
int lp__tei_route(const lp_http_req_t *req) {
  static const struct {
    const char *path;
    int route;
  } tei[] = {{"/embed", LP_ROUTE_TEI_EMBED},           {"/rerank", LP_ROUTE_TEI_RERANK},
             {"/tokenize", LP_ROUTE_TEI_TOKENIZE},     {"/predict", LP_ROUTE_TEI_PREDICT},
             {"/embed_all", LP_ROUTE_TEI_EMBED_ALL},   {"/similarity", LP_ROUTE_TEI_SIMILARITY},
             {"/decode", LP_ROUTE_TEI_DECODE},         {"/embed_sparse", LP_ROUTE_TEI_EMBED_SPARSE},
             {"/info", LP_ROUTE_TEI_INFO},             {"/health", LP_ROUTE_TEI_HEALTH}};
  for (size_t i = 0; i < sizeof(tei) / sizeof(tei[0]); i++)
    if (path_is(req, tei[i].path)) return tei[i].route;
  return 0;
}

/* A refusal in the dialect of req's route: OpenAI's on /v1/embeddings, TEI's
 * on its routes, v2's under /v2/; else 0 (lanepack's own: the caller's). */
static int reject_in_dialect(lp_front_t *f, lp_http_req_t *req, int status, const char *headers,
                             const char *code, const char *msg) {
  int tei = lp__tei_route(req);
  if (path_is(req, "/v1/embeddings")) {
    lp__openai_reject(f, req, status, headers, code, msg, NULL, NULL);
  } else if (tei) {
    const char *type = status == 429 || strcmp(code, "bodies_in_flight_full") == 0 ? LP_TEI_OVERLOADED
                       : status >= 500                                             ? LP_TEI_UNHEALTHY
                                                                                   : LP_TEI_VALIDATION;
    lp__tei_reject(f, req, tei, status, type, code, msg, NULL);
  } else if (req->path_len >= 4 && strncmp(req->url, "/v2/", 4) == 0) {
    lp__v2_reject(f, req, status, code, msg);
  } else {
    return 0;
  }
  return 1;
}

/* The server refused a request itself (a limit, bad framing, a repeated
 * header, a timeout): answered in its route's dialect where it has one, and
 * counted and logged like any other error. */
int lp__on_reject(lp_http_req_t *req, int status, const char *code, const char *msg, const char *headers,
                  void *ud) {
  lp_front_t *f = ud;
  if (reject_in_dialect(f, req, status, headers, code, msg)) return 1;
  lp_proxy_count(f, LP_ROUTE_OTHER, status);
  lp__count_rejection(f, code);
  lp__access_log_refused(f, req, status, code, NULL);
  return 0;
}

static void route(lp_front_t *f, lp_http_req_t *req, int on_admin);

void lp__on_request(lp_http_req_t *req, void *ud) {
  lp_front_t *f = ud;
  LP_RELAXED_INC(f->served);
  route(f, req, 0);
}

void lp__on_admin_request(lp_http_req_t *req, void *ud) { route(ud, req, 1); }

/* Routes: with an admin listener, its routes live there only and inference
 * never does; probes answer on both. Client routes under /v1/ and /v2/models
 * and TEI's (/embed, /rerank, /info, ...; not /health) need a bearer token when tokens are configured, and so do the admin routes
 * when they share the client port (/metrics shows backend URLs and load); the
 * admin listener (loopback by default) and the probes do not. The live view's
 * page (GET /) lives where /metrics does but holds no data: it is served
 * without a token, and its script sends one to /v1/batches/recent. */
static void route(lp_front_t *f, lp_http_req_t *req, int on_admin) {
  lp_buf_t *b = &f->scratch;
  lp_buf_reset(b);
  static const char prefix[] = "/v1/models/";
  /* TEI's /health is a probe too (TEI serves it without its API key) */
  int probe = path_is(req, "/healthz") || path_is(req, "/readyz") || path_is(req, "/health");
  int has_admin = f->cfg->admin_listen[0] != 0;
  if (!probe && has_admin && on_admin != is_admin_route(req)) {
    lp_proxy_reject(f, req, LP_ROUTE_OTHER, 404, NULL, "not_found",
                    on_admin ? "not on the admin listener" : "no such route", NULL);
    return;
  }
  int tei = lp__tei_route(req);
  int client_route = strncmp(req->url, "/v1/", 4) == 0 || strncmp(req->url, "/v2/models", 10) == 0 ||
                     path_is(req, "/v2") || (is_admin_route(req) && !path_is(req, "/")) || tei;
  if (!on_admin && !probe && client_route && !authorized(f, req)) {
    /* in the route's dialect, as the HTTP layer's refusals: an OpenAI or TEI
       client reads its own error shape */
    static const char why[] = "a valid 'Authorization: Bearer TOKEN' header is required";
    if (!reject_in_dialect(f, req, 401, LP__AUTH_CHALLENGE, "unauthorized", why))
      lp_proxy_reject(f, req, LP_ROUTE_OTHER, 401, LP__AUTH_CHALLENGE, "unauthorized", why, NULL);
    return;
  }
  if (!on_admin && req->method == LP_HTTP_POST && !req->has_body_length &&
      reject_in_dialect(f, req, 411, NULL, "length_required",
                        "send the body with Content-Length or chunked encoding")) {
    /* a POST without a length (/v1/infer says so after its content type) */
  } else if (!on_admin && lp__v2_route(f, req)) {
    /* the Open Inference Protocol: its own routes and error form */
  } else if (path_is(req, "/v1/infer")) {
    handle_infer(f, req, NULL, 0);
  } else if (path_is(req, "/v1/embeddings")) {
    lp__embeddings_request(f, req);
  } else if (tei == LP_ROUTE_TEI_INFO) {
    lp__tei_info(f, req);
  } else if (tei == LP_ROUTE_TEI_HEALTH) {
    if (req->method != LP_HTTP_GET && req->method != LP_HTTP_HEAD)
      lp__tei_reject(f, req, tei, 405, LP_TEI_VALIDATION, "method_not_allowed", "use GET", NULL);
    else
      lp__front_page(f, req, LP_ROUTE_TEI_HEALTH, 0);
  } else if (tei) {
    lp__tei_request(f, req, tei);
  } else if (req->path_len > sizeof(prefix) - 1 && strncmp(req->url, prefix, sizeof(prefix) - 1) == 0) {
    const char *name = req->url + sizeof(prefix) - 1;
    size_t rest = req->path_len - (sizeof(prefix) - 1);
    const char *slash = memchr(name, '/', rest);
    if (slash && (size_t)(req->url + req->path_len - slash) == strlen("/infer") &&
        strncmp(slash, "/infer", 6) == 0 && slash > name) {
      /* the name as the client's library percent-encoded it (a space as %20);
       * an undecodable one is looked up as sent (and found by no model) */
      char dec[LP_NAME_MAX];
      long dl = lp_urlpath_decode(name, (size_t)(slash - name), dec, sizeof(dec));
      if (dl >= 0) handle_infer(f, req, dec, (size_t)dl);
      else handle_infer(f, req, name, (size_t)(slash - name));
    }
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
  } else if (path_is(req, "/v1/batches/recent")) {
    if (!method_ok(f, req, LP_ROUTE_BATCHES, LP_HTTP_GET)) return;
    lp__front_page(f, req, LP_ROUTE_BATCHES, 0);
  } else if (path_is(req, "/")) {
    if (!method_ok(f, req, LP_ROUTE_VIEW, LP_HTTP_GET)) return;
    lp__view_page(f, req);
  } else {
    lp_proxy_reject(f, req, LP_ROUTE_OTHER, 404, NULL, "not_found", "no such route", NULL);
  }
}

void lp__on_cancel(lp_http_req_t *req, void *ud) {
  lp_front_t *f = ud;
  lp_sliced_t *a = lp__app_as_sliced(req->app);
  if (a) { /* its answer is being written a slice a turn */
    req->app = NULL;
    lp__sliced_cancel(f, a);
    return;
  }
  lp_tokjob_t *tj = lp__app_as_tokjob(req->app);
  if (tj) { /* its text is at the tokenizer workers */
    req->app = NULL;
    lp__front_tok_cancel(f, tj);
    return;
  }
  lp_job_t *job = req->app;
  if (!job) return;
  req->app = NULL;
  /* the scheduler hears it (after the job itself, if that still waits here);
   * the job is freed once every reference is dropped */
  lp__front_flush(f);
  job->front_req = NULL;
  __atomic_fetch_add(&job->refs, 1, __ATOMIC_RELAXED);
  lp__mbox_push_cancel(f->shared->sched_inbox, job);
}
