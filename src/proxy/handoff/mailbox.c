/* A thread's inbox: other threads push jobs, batches, cancels and control
 * messages under a mutex; the owner's loop takes them all at once, woken by one
 * eventfd write per burst (wake.c). The links are fields of what is pushed: no allocation. */
#include "handoff/handoff.h"

int lp__mbox_init(lp_mbox_t *mb, uv_loop_t *loop, lp_wake_cb cb, void *owner) {
  mb->jobs = NULL;
  mb->jobs_tail = &mb->jobs;
  mb->cancels = NULL;
  mb->cancels_tail = &mb->cancels;
  mb->ctls = NULL;
  mb->ctls_tail = &mb->ctls;
  mb->batches = NULL;
  mb->batches_tail = &mb->batches;
  int rc = uv_mutex_init(&mb->lock);
  if (rc) return rc;
  if ((rc = lp__wake_init(&mb->wake, loop, cb, owner)) != 0) {
    uv_mutex_destroy(&mb->lock);
    return rc;
  }
  return 0;
}

static int empty(const lp_mbox_t *mb) { return !mb->jobs && !mb->cancels && !mb->ctls && !mb->batches; }

/* The owner wakes once per burst: only the push that finds the inbox empty
 * sends (the owner reads the wake-up back, then empties the inbox whole under
 * the lock, so a later push sends again). A push onto a non-empty inbox is
 * taken with the one that sent: that send comes after it, or the owner has
 * not taken the inbox yet. */
static void wake(lp_mbox_t *mb, int was_empty) {
  if (was_empty) lp__wake_send(&mb->wake);
}

void lp__mbox_push_job(lp_mbox_t *mb, lp_job_t *job) { lp__mbox_push_jobs(mb, job, job); }

void lp__mbox_push_jobs(lp_mbox_t *mb, lp_job_t *first, lp_job_t *last) { lp__mbox_push(mb, first, last, NULL, NULL); }

void lp__mbox_push(lp_mbox_t *mb, lp_job_t *first, lp_job_t *last, lp_batch_t *bfirst, lp_batch_t *blast) {
  if (last) last->mq_next = NULL;
  if (blast) blast->hand_next = NULL;
  uv_mutex_lock(&mb->lock);
  int was_empty = empty(mb);
  if (first) {
    *mb->jobs_tail = first;
    mb->jobs_tail = &last->mq_next;
  }
  if (bfirst) {
    *mb->batches_tail = bfirst;
    mb->batches_tail = &blast->hand_next;
  }
  uv_mutex_unlock(&mb->lock);
  wake(mb, was_empty);
}

void lp__mbox_push_cancel(lp_mbox_t *mb, lp_job_t *job) {
  job->cq_next = NULL;
  uv_mutex_lock(&mb->lock);
  int was_empty = empty(mb);
  *mb->cancels_tail = job;
  mb->cancels_tail = &job->cq_next;
  uv_mutex_unlock(&mb->lock);
  wake(mb, was_empty);
}

void lp__mbox_push_ctl(lp_mbox_t *mb, lp_ctl_t *c) {
  c->next = NULL;
  uv_mutex_lock(&mb->lock);
  int was_empty = empty(mb);
  *mb->ctls_tail = c;
  mb->ctls_tail = &c->next;
  uv_mutex_unlock(&mb->lock);
  wake(mb, was_empty);
}

void lp__mbox_take(lp_mbox_t *mb, lp_job_t **jobs, lp_job_t **cancels, lp_ctl_t **ctls, lp_batch_t **batches) {
  uv_mutex_lock(&mb->lock);
  *jobs = mb->jobs;
  *cancels = mb->cancels;
  *ctls = mb->ctls;
  *batches = mb->batches;
  mb->batches = NULL;
  mb->batches_tail = &mb->batches;
  mb->jobs = NULL;
  mb->jobs_tail = &mb->jobs;
  mb->cancels = NULL;
  mb->cancels_tail = &mb->cancels;
  mb->ctls = NULL;
  mb->ctls_tail = &mb->ctls;
  uv_mutex_unlock(&mb->lock);
}

lp_batch_t *lp__mbox_take_batches(lp_mbox_t *mb) {
  uv_mutex_lock(&mb->lock);
  lp_batch_t *b = mb->batches;
  mb->batches = NULL;
  mb->batches_tail = &mb->batches;
  uv_mutex_unlock(&mb->lock);
  return b;
}

void lp__mbox_close(lp_mbox_t *mb, uv_close_cb cb) { lp__wake_close(&mb->wake, cb); }

void lp__mbox_destroy(lp_mbox_t *mb) {
  lp__wake_destroy(&mb->wake);
  uv_mutex_destroy(&mb->lock);
}
