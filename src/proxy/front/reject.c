/* Runs on a front thread: counting answers by route and status, and writing a
 * refusal in each route's dialect (lanepack's, the Open Inference Protocol's,
 * OpenAI's, TEI's), logged like any answer. */
#include <stdio.h>
#include <string.h>

#include "lanepack/openai.h"
#include "lanepack/tei.h"
#include "lanepack/v2.h"
#include "front/front.h"

/* The statuses the fronts count answers by, each a slot of their counters
 * (pages.c names them when it renders the counters). */
const int lp__status_codes[LP_STATUS_SLOTS] = {200, 400, 401, 404, 405, 408, 409, 411, 413, 415,
                                               417, 422, 424, 429, 431, 500, 502, 503, 504, 505, 0};

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
  lp__access_log_refused(f, req, status, code, job);
  lp_http_respond_error(req, status, headers, code, msg, extra);
}

void lp_proxy_reject(lp_front_t *f, lp_http_req_t *req, int route, int status, const char *headers,
                     const char *code, const char *msg, const char *extra) {
  lp__reject_job(f, req, route, status, headers, code, msg, extra, NULL);
}

/* An error in the v2 form, with our status. */
void lp__v2_reject(lp_front_t *p, lp_http_req_t *req, int status, const char *code, const char *msg) {
  lp__v2_reject_job(p, req, status, code, msg, NULL);
}

void lp__v2_reject_job(lp_front_t *p, lp_http_req_t *req, int status, const char *code, const char *msg,
                       const lp_job_t *job) {
  lp_buf_t b;
  lp_buf_init(&b);
  char text[400];
  snprintf(text, sizeof(text), "%s: %s", code, msg);
  lp_buf_puts(&b, "{\"error\":");
  lp_buf_json_str(&b, text, strlen(text));
  lp_buf_puts(&b, "}\n");
  lp_proxy_count(p, LP_ROUTE_V2_INFER, status);
  lp__count_rejection(p, code);
  lp__access_log_refused(p, req, status, code, job);
  const char *hdr = status == 401 ? LP__AUTH_CHALLENGE : status == 429 || status == 503 ? "Retry-After: 1\r\n" : NULL;
  lp_http_respond(req, status, hdr, "application/json", b.data, b.len);
  lp_buf_free(&b);
}

void lp__openai_reject(lp_front_t *f, lp_http_req_t *req, int status, const char *hdr, const char *code,
                       const char *msg, const char *param, const lp_job_t *job) {
  lp_buf_t *b = &f->scratch;
  lp_buf_reset(b);
  /* OpenAI answers an input over the model's length 400 (its "maximum context
   * length"), as every other invalid request: its clients expect that */
  if (status == 413 && strcmp(code, "sequence_too_long") == 0) status = 400;
  lp_openai_error(b, status, code, msg, param);
  lp_proxy_count(f, LP_ROUTE_EMBEDDINGS, status);
  lp__count_rejection(f, code);
  lp__access_log_refused(f, req, status, code, job);
  if (!hdr && (status == 429 || status == 503)) hdr = "Retry-After: 1\r\n";
  lp_http_respond(req, status, hdr, "application/json", b->data, b->len);
}

void lp__tei_reject(lp_front_t *f, lp_http_req_t *req, int route, int status, const char *type,
                    const char *code, const char *msg, const lp_job_t *job) {
  lp_buf_t *b = &f->scratch;
  lp_buf_reset(b);
  lp_tei_error(b, msg, type);
  lp_proxy_count(f, route, status);
  lp__count_rejection(f, code);
  lp__access_log_refused(f, req, status, code, job);
  const char *hdr = status == 401 ? LP__AUTH_CHALLENGE : status == 429 || status == 503 ? "Retry-After: 1\r\n" : NULL;
  lp_http_respond(req, status, hdr, "application/json", b->data, b->len);
}

void lp__tei_reject_job(lp_front_t *f, lp_http_req_t *req, int route, int status, const char *code,
                        const char *msg, const lp_job_t *job) {
  const char *type = LP_TEI_VALIDATION;
  if (status == 429) type = LP_TEI_OVERLOADED;
  else if (status == 413 && strcmp(code, "sequence_too_long") == 0) status = 422, type = LP_TEI_TOKENIZER;
  else if (status == 503) type = LP_TEI_UNHEALTHY;
  else if (status >= 500) status = 424, type = LP_TEI_BACKEND; /* a batch that failed: TEI's backend error */
  lp__tei_reject(f, req, route, status, type, code, msg, job);
}
