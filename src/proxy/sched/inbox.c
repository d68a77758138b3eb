/* Runs on the scheduler thread: what the fronts send it (jobs to admit,
 * cancels, page requests, a front's drain done), taken once per wake-up. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lanepack/log.h"
#include "proxy.h"

void lp__sched_page(lp_proxy_t *p, lp_job_t *job) {
  if (job->admin_route == LP_ROUTE_ADVICE) { /* may wait for its worker */
    lp__advice_page(p, job);
    return;
  }
  lp_page_t pg;
  lp__render_page(p, job->admin_route, job->admin_v2, job->admin_url, job->admin_path_len, &job->res_body, &pg);
  job->res_status = pg.status;
  job->res_ctype = pg.ctype;
  snprintf(job->res_hdr, sizeof(job->res_hdr), "%s", pg.hdr ? pg.hdr : "");
  if (pg.code) snprintf(job->res_code, sizeof(job->res_code), "%s", pg.code);
  snprintf(job->res_msg, sizeof(job->res_msg), "%s", pg.msg);
  p->page_done(job);
}

static void sched_admit(lp_proxy_t *p, lp_job_t *job) {
  (void)p;
  lp_perr_t e = {0};
  /* the shapes are the scheduler's: checked here, answered as the front would */
  if (lp__job_check_shapes(job, job->v2 ? "input_ids" : job->multi ? "inputs" : "input_ids", &e)) {
    job->answered = 1;
    job->res_status = e.status;
    snprintf(job->res_code, sizeof(job->res_code), "%s", e.code);
    snprintf(job->res_msg, sizeof(job->res_msg), "%s", e.msg);
    snprintf(job->res_extra, sizeof(job->res_extra), "%s", e.extra);
    lp__job_hand_back(job);
    return;
  }
  lp__model_admit(job->model, job);
}

void lp__sched_on_inbox(lp_wake_t *w) {
  lp_proxy_t *p = w->data;
  lp_job_t *jobs, *cancels;
  lp_ctl_t *ctls;
  lp_batch_t *batches;
  lp__mbox_take(&p->inbox, &jobs, &cancels, &ctls, &batches);
  /* admissions first: a cancel taken with them always finds its job admitted */
  while (jobs) {
    lp_job_t *job = jobs;
    jobs = job->mq_next;
    if (job->admin_route) lp__sched_page(p, job);
    else sched_admit(p, job);
  }
  while (cancels) {
    lp_job_t *job = cancels;
    cancels = job->cq_next;
    /* the core still has it: it hears the client left (a page waiting for
     * the advisor goes back when computed, and its front drops it) */
    if (!job->handed_back && !job->admin_route) {
      job->waited = 0;
      lp__job_cancel(job);
    }
    lp__job_release(job); /* the cancel's reference */
  }
  /* after the admissions: a batch's end dispatches with what just arrived */
  while (batches) {
    lp_batch_t *bt = batches;
    batches = bt->relay_next; /* before: finishing frees or reuses it */
    bt->front->batches_out--;
    lp__batch_finish(bt);
  }
  while (ctls) {
    lp_ctl_t *c = ctls;
    ctls = c->next;
    if (c->kind == LP_CTL_CLOSED && --p->fronts_open == 0) p->drained(p);
    free(c);
  }
}
