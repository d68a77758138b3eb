/* Runs on the scheduler thread: jobs and pages the scheduler is done with go
 * back to their fronts, and batches go to the front that sends them, gathered
 * per front (the scheduler's records, p->sfronts) and pushed once per loop
 * turn. */
#include "sched/sched.h"

static void on_sched_flush_soon(uv_idle_t *h);

/* as the front's: no sleep before the flush, wherever this was called from */
static void flush_due(lp_proxy_t *p) {
  if (p->back_pending) return;
  p->back_pending = 1;
  uv_idle_start(&p->flush_soon, on_sched_flush_soon);
}

void lp__job_hand_back(lp_job_t *job) {
  lp_sched_front_t *f = &job->proxy->sfronts[job->front_index];
  job->handed_back = 1;
  /* with the others of this loop turn (on_sched_flush) */
  job->mq_next = NULL;
  if (f->back) f->back_last->mq_next = job;
  else f->back = job;
  f->back_last = job;
  flush_due(job->proxy);
}

void lp__batch_hand_out(lp_proxy_t *p, lp_batch_t *bt) {
  /* the front with the fewest batches out, ties in turn: batches differ in
   * size, so a turn alone would leave one front behind another */
  unsigned fi = p->next_front++ % p->shared.nfronts;
  for (unsigned i = 0; i < p->shared.nfronts; i++)
    if (p->sfronts[i].batches_out < p->sfronts[fi].batches_out) fi = i;
  lp_sched_front_t *f = &p->sfronts[fi];
  f->batches_out++;
  bt->front_index = fi;
  bt->hand_next = NULL;
  if (f->out) f->out_last->hand_next = bt;
  else f->out = bt;
  f->out_last = bt;
  flush_due(p);
}

void lp__fronts_flush(lp_proxy_t *p) {
  if (!p->back_pending) return;
  p->back_pending = 0;
  uv_idle_stop(&p->flush_soon);
  for (unsigned i = 0; i < p->shared.nfronts; i++) {
    lp_sched_front_t *f = &p->sfronts[i];
    if (!f->back && !f->out) continue;
    lp__mbox_push(f->inbox, f->back, f->back_last, f->out, f->out_last);
    f->back = f->back_last = NULL;
    f->out = f->out_last = NULL;
  }
}

void lp__sched_on_flush(uv_check_t *h) { lp__fronts_flush(container_of(h, lp_proxy_t, flush)); }

static void on_sched_flush_soon(uv_idle_t *h) { lp__fronts_flush(container_of(h, lp_proxy_t, flush_soon)); }
