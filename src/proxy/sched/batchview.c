/* Runs on the scheduler thread: each batch told to the recent-batches ring as
 * it leaves and when it ends (the live view's data: lengths and timings, never
 * tokens or request ids; GET /v1/batches/recent renders a copy, front/pages.c). */
#include <stdio.h>
#include <string.h>

#include "lanepack/recent.h"
#include "sched/sched.h"

void lp__batchview_sent(lp_model_t *m, lp_batch_t *bt, const lp_disp_action_t *a) {
  lp_recent_t *r = m->proxy->recent;
  bt->view_ticket = 0;
  if (!r) return;
  uint32_t bi = (uint32_t)(bt->backend - m->backends);
  const lp_devclock_t *c = lp_disp_clock(m->disp, bi);
  uint64_t free_ns[LP_RECENT_DEVICES];
  uint32_t nfree = 0;
  for (; c && nfree < c->devices && nfree < LP_RECENT_DEVICES; nfree++)
    free_ns[nfree] = c->dev[nfree].batches ? c->dev[nfree].free_ns : 0;
  lp_disp_stats_t st;
  lp_disp_stats(m->disp, &st);
  lp_recent_sent_t s = {.id = bt->id, .model = m->cfg->name, .backend = bt->backend->url,
                        .backend_index = bi, .device = a->send.device, .devices = c ? c->devices : 1,
                        .lanes = bt->layout.lanes, .bucket = bt->layout.bucket,
                        .real_tokens = bt->layout.real_tokens, .segs = bt->layout.segs,
                        .nsegs = bt->layout.nsegs, .reason = a->send.reason, .copies = a->send.copies,
                        .queue_seqs = st.queued_seqs, .queue_tokens = st.queued_tokens,
                        .sent_ns = bt->dispatch_ns, .lead_ns = c ? lp_devclock_lead(c) : 0,
                        .cost_ns = c ? lp_devclock_cost(c, bt->shape) : 0, .expect_ns = bt->expect_ns,
                        .device_free_ns = free_ns, .ndevice_free = nfree};
  bt->view_ticket = lp_recent_sent(r, &s);
}

void lp__batchview_answered(lp_model_t *m, const lp_batch_t *bt, lp_disp_outcome_t outcome, int http_status,
                            uint64_t device_ns, uint64_t now) {
  lp_recent_t *r = m->proxy->recent;
  if (r && bt->view_ticket)
    (void)lp_recent_answered(r, bt->view_ticket, lp_disp_outcome_name(outcome), http_status, device_ns, now);
}
