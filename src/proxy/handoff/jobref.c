/* A job's references and times, read on both sides of the hand-off: the
 * front that answers a job and the scheduler that finished it each call these,
 * never both on one job at once (a job is one thread's at a time; its
 * reference count is the one field both touch, atomically). */
#include <stdlib.h>

#include "handoff/handoff.h"
#include "handoff/snapshot.h"

/* Any thread that holds a reference: the front (its own, a cancel's), the
 * scheduler (a cancel's, a batch's item), the advisor's worker's page. */
void lp__job_release(lp_job_t *job) {
  /* the only holder (refs 1, read by the holder) skips the locked decrement */
  if (__atomic_load_n(&job->refs, __ATOMIC_ACQUIRE) != 1 &&
      __atomic_sub_fetch(&job->refs, 1, __ATOMIC_ACQ_REL) != 0)
    return;
  lp__job_drop_outputs(job);
  lp__snap_unref(job->snap); /* a page whose client left before it was rendered */
  lp_buf_free(&job->res_body);
  free(job->admin_url);
  free(job->tracestate);
  if (job->tei) free(job->proto.tei.texts); /* the union's other members hold no pointer */
  free(job);
}

/* The job's references to its batches' answers, dropped once its client is
 * written: a batch's answer goes with the last job it serves. The thread the
 * job belongs to now: its front once it is handed back, or the last
 * reference's holder as it frees it. */
void lp__job_drop_outputs(lp_job_t *job) {
  for (uint32_t i = 0; i < job->nseq; i++) {
    lp__answer_unref(job->seqs[i].ans);
    job->seqs[i].ans = NULL;
    job->seqs[i].out = NULL;
  }
}

/* The longest wait before dispatch and at the backend among job's sequences.
 * Either thread, on a job it holds: the scheduler (the snapshot's waits) or
 * the front (the answer's timing_ms, the access log). */
void lp__job_times(const lp_job_t *job, uint64_t *queue_ns, uint64_t *backend_ns) {
  *queue_ns = *backend_ns = 0;
  for (uint32_t i = 0; i < job->nseq; i++) {
    const lp_seq_t *s = &job->seqs[i];
    if (!s->dispatch_ns) continue; /* never sent (a failed job) */
    if (s->dispatch_ns - job->arrive_ns > *queue_ns) *queue_ns = s->dispatch_ns - job->arrive_ns;
    if (s->done_ns > s->dispatch_ns && s->done_ns - s->dispatch_ns > *backend_ns)
      *backend_ns = s->done_ns - s->dispatch_ns;
  }
}

/* Nanoseconds as milliseconds with three decimals, without printf's float
 * path (it showed in the profile of every answer). Any thread: writes into b,
 * its caller's. */
void lp__put_ms(lp_buf_t *b, uint64_t ns) {
  uint64_t us = (ns + 500) / 1000;
  char frac[4] = {(char)('0' + us / 100 % 10), (char)('0' + us / 10 % 10), (char)('0' + us % 10), 0};
  lp_buf_u64(b, us / 1000);
  lp_buf_puts(b, ".");
  lp_buf_puts(b, frac);
}
