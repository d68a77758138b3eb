/* Runs on the scheduler thread: jobs and pages the scheduler is done with go
 * back to their fronts, and batches go to the front that sends them, gathered
 * per front and pushed once per loop turn. */
#include "handoff/handoff.h"
/* Outside LAYERS (handoff/ calls common/ only): this file runs on the
 * scheduler and writes the scheduler's per-front lists (lp_front_s's back,
 * out, batches_out) and lp_proxy_s's flush handles, so it reads both contexts
 * (test layers lists it as a known exception). */
#include "front/front.h"

static void on_sched_flush_soon(uv_idle_t *h);

/* as the front's: no sleep before the flush, wherever this was called from */
static void flush_due(lp_proxy_t *p) {
  if (p->back_pending) return;
  p->back_pending = 1;
  uv_idle_start(&p->flush_soon, on_sched_flush_soon);
}

void lp__job_hand_back(lp_job_t *job) {
  lp_front_t *f = job->front;
  job->handed_back = 1;
  /* with the others of this loop turn (on_sched_flush) */
  job->mq_next = NULL;
  if (f->back) f->back_last->mq_next = job;
  else f->back = job;
  f->back_last = job;
  flush_due(f->proxy);
}

void lp__batch_hand_out(lp_proxy_t *p, lp_batch_t *bt) {
  /* the front with the fewest batches out, ties in turn: batches differ in
   * size, so a turn alone would leave one front behind another */
  lp_front_t *f = &p->fronts[p->next_front++ % p->nfronts];
  for (unsigned i = 0; i < p->nfronts; i++)
    if (p->fronts[i].batches_out < f->batches_out) f = &p->fronts[i];
  f->batches_out++;
  bt->front = f;
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
  for (unsigned i = 0; i < p->nfronts; i++) {
    lp_front_t *f = &p->fronts[i];
    if (!f->back && !f->out) continue;
    lp__mbox_push(&f->inbox, f->back, f->back_last, f->out, f->out_last);
    f->back = f->back_last = NULL;
    f->out = f->out_last = NULL;
  }
}

void lp__sched_on_flush(uv_check_t *h) { lp__fronts_flush(container_of(h, lp_proxy_t, flush)); }

static void on_sched_flush_soon(uv_idle_t *h) { lp__fronts_flush(container_of(h, lp_proxy_t, flush_soon)); }
