/* Runs on a front: a request's text handed to the tokenizer workers, and
 * taken back from the front's tok box when they are done, its client then
 * served by the route's continuation; a client gone meanwhile cancels it. */
#include <errno.h>
#include <stdlib.h>

#include "front/front.h"

/* Jobs back from the workers: each continues where its route left off, or
 * is dropped when its client left. */
static void on_tokbox(lp_wake_t *w) {
  lp_front_t *f = w->data;
  for (lp_tokjob_t *job = lp__tokbox_take(&f->tokbox), *next; job; job = next) {
    next = job->done_next; /* before: the job is freed */
    if (!job->cancelled) {
      lp_http_req_t *req = job->req;
      req->app = NULL; /* before answering: a failed write frees req at once */
      job->req = NULL;
      job->done(f, job, req);
    }
    lp__tokjob_free(job);
  }
}

int lp__front_tok_init(lp_front_t *f) { return lp__tokbox_init(&f->tokbox, f->loop, on_tokbox, f); }

/* On a worker: the pool calls up here (registered at its start). */
void lp__front_tok_finished(lp_tokjob_t *job) { lp__tokbox_push(&job->front->tokbox, job); }

int lp__front_tokenize(lp_front_t *f, lp_http_req_t *req, lp_tokjob_t *job) {
  lp_tokpool_t *p = f->shared->tokpool;
  if (!p) return -EINVAL; /* no model has a tokenizer: the route refused its text before */
  job->req = req;
  job->flow = lp_http_req_client(req); /* its connection's requests share their turns */
  int rc = lp__tokpool_submit(p, job, f->cfg->tokenizer_queue_bytes);
  if (rc) {
    job->req = NULL;
    return rc;
  }
  req->app = lp__app_tokjob(job);
  return 0;
}

void lp__front_tok_cancel(lp_front_t *f, lp_tokjob_t *job) {
  job->req = NULL;
  lp__tokpool_cancel(f->shared->tokpool, job);
}

int lp__front_decode(lp_front_t *f, lp_http_req_t *req, void *ctx, void (*ctx_free)(void *ctx), char **body,
                     void (*call)(lp_tokjob_t *job), void (*done)(lp_front_t *f, lp_tokjob_t *job, lp_http_req_t *req)) {
  lp_tokpool_t *p = f->shared->tokpool; /* none: no model takes text */
  if (!p || req->body_len <= LP_PARSE_INLINE_MAX || lp__tokpool_bytes(p) + req->body_len > LP_DECODE_QUEUE_MAX)
    return -EAGAIN;
  lp_tokjob_t *tj = lp__tokjob_new(f, NULL, 1);
  if (!tj) return -ENOMEM;
  tj->units[0].op = LP_TOKOP_CALL;
  tj->units[0].call = call;
  tj->units[0].len = req->body_len;
  tj->ctx = ctx; /* before the hand-over: a worker may run call at once */
  tj->ctx_free = ctx_free;
  tj->done = done;
  *body = req->body;
  req->body = NULL;
  if (lp__front_tokenize(f, req, tj)) {
    req->body = *body;
    *body = NULL;
    tj->ctx = NULL; /* still the caller's */
    lp__tokjob_free(tj);
    return -EAGAIN;
  }
  return 0;
}
