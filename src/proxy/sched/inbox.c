/* Runs on the scheduler thread: what the fronts send it (jobs to admit,
 * cancels, page requests, a front's drain done), taken once per wake-up; the
 * wake-up's pages get one snapshot of its state to be rendered from. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lanepack/log.h"
#include "sched/sched.h"

/* Pages linked by mq_next (none the advice's), all served by one snapshot
 * taken now: what it holds is as fresh as the inbox's order asks (an answer a
 * client had before it asked was handed back in an earlier turn), and its
 * text is the fronts' to format. Without memory each is answered 503. */
static void sched_pages(lp_proxy_t *p, lp_job_t *pages, unsigned parts) {
  lp_snap_t *s = lp__sched_snapshot(p, parts);
  while (pages) {
    lp_job_t *job = pages;
    pages = job->mq_next; /* before: handing back relinks it */
    if (s) {
      lp__snap_ref(s);
      job->snap = s;
    } else {
      job->res_status = 503;
      snprintf(job->res_code, sizeof(job->res_code), "out_of_memory");
      snprintf(job->res_msg, sizeof(job->res_msg), "proxy out of memory");
      snprintf(job->res_hdr, sizeof(job->res_hdr), "Retry-After: 1\r\n");
    }
    lp__job_hand_back(job);
  }
  lp__snap_unref(s); /* the taker's: the pages hold theirs */
}

static void sched_admit(lp_proxy_t *p, lp_job_t *job) {
  (void)p;
  lp_perr_t e = {0};
  /* the shapes are the scheduler's: checked here, answered as the front would */
  /* named as the route's request names the field: OpenAI's is input */
  const char *field = job->v2 ? "input_ids" : job->openai ? "input" : job->multi ? "inputs" : "input_ids";
  if (lp__job_check_shapes(job, field, &e)) {
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
  /* the pages of this wake-up, in order, to share one snapshot */
  lp_job_t *pages = NULL, **pages_tail = &pages;
  unsigned parts = 0;
  /* admissions first: a cancel taken with them always finds its job admitted */
  while (jobs) {
    lp_job_t *job = jobs;
    jobs = job->mq_next;
    job->proxy = p; /* the front names its model and front, not the scheduler's context */
    if (job->admin_route == LP_ROUTE_ADVICE) {
      lp__advice_page(p, job);
    } else if (job->admin_route) {
      job->mq_next = NULL;
      *pages_tail = job;
      pages_tail = &job->mq_next;
      parts |= lp__snap_parts(job->admin_route);
    } else {
      sched_admit(p, job);
    }
  }
  if (pages) sched_pages(p, pages, parts);
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
    batches = bt->hand_next; /* before: finishing frees or reuses it */
    p->sfronts[bt->front_index].batches_out--;
    lp__batch_finish(bt);
  }
  while (ctls) {
    lp_ctl_t *c = ctls;
    ctls = c->next;
    if (c->kind == LP_CTL_CLOSED && --p->fronts_open == 0) p->drained(p);
    free(c);
  }
}
