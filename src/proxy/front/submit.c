/* Runs on a front thread: jobs and page requests handed to the scheduler
 * through its mailbox once per loop turn, with the batches whose transfers
 * ended, whatever the number of fronts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "front/front.h"

static void on_front_flush_soon(uv_idle_t *h);

void lp__front_submit(lp_front_t *f, lp_http_req_t *req, lp_job_t *job) {
  req->app = job;
  job->front_req = req;
  job->refs = 1;
  job->waited = 1;
  /* with the others of this loop turn, after its reads (on_front_flush) */
  job->mq_next = NULL;
  if (f->to_sched) f->to_sched_last->mq_next = job;
  else f->to_sched = job;
  f->to_sched_last = job;
  lp__front_flush_due(f);
}

void lp__front_flush_due(lp_front_t *f) {
  /* something queued after this turn's check (a close callback, a transfer's
   * end) must not wait for the next wake-up: the idle handle keeps the next
   * poll from sleeping */
  uv_idle_start(&f->flush_soon, on_front_flush_soon);
}

void lp__front_flush(lp_front_t *f) {
  if (!f->to_sched && !f->sent) return;
  uv_idle_stop(&f->flush_soon);
  lp__mbox_push(f->shared->sched_inbox, f->to_sched, f->to_sched_last, f->sent, f->sent_last);
  f->to_sched = f->to_sched_last = NULL;
  f->sent = f->sent_last = NULL;
}

void lp__front_on_flush(uv_check_t *h) { lp__front_flush(container_of(h, lp_front_t, flush)); }

static void on_front_flush_soon(uv_idle_t *h) { lp__front_flush(container_of(h, lp_front_t, flush_soon)); }

void lp__front_publish(lp_front_t *f) {
  size_t n = (f->httpd ? lp_httpd_connections(f->httpd) : 0) + (f->admin ? lp_httpd_connections(f->admin) : 0);
  LP_RELAXED_STORE(f->conns, (uint64_t)n);
}

void lp__front_ask_page(lp_front_t *f, lp_http_req_t *req, int route, int v2r) {
  lp_job_t *job = calloc(1, sizeof(*job));
  char *url = job ? malloc(req->url_len + 1) : NULL;
  if (!url) {
    free(job);
    lp_proxy_reject(f, req, route == LP_ROUTE_V2 ? LP_ROUTE_V2 : route, 503, "Retry-After: 1\r\n",
                    "out_of_memory", "proxy out of memory", NULL);
    return;
  }
  memcpy(url, req->url, req->url_len + 1);
  job->front = f;
  job->front_index = f->index;
  job->admin_route = route;
  job->admin_v2 = v2r;
  job->admin_url = url;
  job->nseq = 0;
  job->admin_path_len = req->path_len;
  job->front_req = req;
  job->refs = 1;
  job->waited = 1;
  req->app = job;
  lp__mbox_push_job(f->shared->sched_inbox, job);
}
