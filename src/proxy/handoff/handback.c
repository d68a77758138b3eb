/* Runs on the scheduler thread: jobs and pages the scheduler is done with go
 * back to their fronts, gathered per front and pushed once per loop turn. */
#include "proxy.h"

static void on_sched_flush_soon(uv_idle_t *h);

void lp__job_hand_back(lp_job_t *job) {
  lp_front_t *f = job->front;
  job->handed_back = 1;
  /* with the others of this loop turn (on_sched_flush) */
  job->mq_next = NULL;
  if (f->back) f->back_last->mq_next = job;
  else f->back = job;
  f->back_last = job;
  if (!f->proxy->back_pending) {
    f->proxy->back_pending = 1;
    /* as the front's: no sleep before the flush, wherever this was called from */
    uv_idle_start(&f->proxy->flush_soon, on_sched_flush_soon);
  }
}

void lp__fronts_flush(lp_proxy_t *p) {
  if (!p->back_pending) return;
  p->back_pending = 0;
  uv_idle_stop(&p->flush_soon);
  for (unsigned i = 0; i < p->nfronts; i++) {
    lp_front_t *f = &p->fronts[i];
    if (!f->back) continue;
    lp__mbox_push_jobs(&f->inbox, f->back, f->back_last);
    f->back = f->back_last = NULL;
  }
}

void lp__sched_on_flush(uv_check_t *h) { lp__fronts_flush(container_of(h, lp_proxy_t, flush)); }

static void on_sched_flush_soon(uv_idle_t *h) { lp__fronts_flush(container_of(h, lp_proxy_t, flush_soon)); }
