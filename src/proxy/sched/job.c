/* Runs on the scheduler thread: a request's life after admission: each
 * sequence's span of its batch's answer kept, then the job handed back to its
 * front to be answered (front/deliver.c), or its failure written down. When it ends is the dispatch core's to say (its
 * ANSWER action, within the request's bound); a client gone is told to it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lanepack/log.h"
#include "sched/sched.h"

/* ---- admission ---- */

/* Runs on the scheduler, where the model's shapes live, as a job arrives. */
int lp__job_check_shapes(lp_job_t *job, const char *field, lp_perr_t *e) {
  lp_model_t *m = job->model;
  int multi = job->multi;
  for (uint32_t i = 0; i < job->nseq; i++) {
    uint32_t maxlen, len = job->seqs[i].len;
    int v = lp_bucket_set_admit(&m->shapes, len, &maxlen);
    if (v == LP_ADMIT_EMPTY) {
      if (multi) lp__perr_set(e, 400, "empty_sequence", "%s[%u] is empty", field, i);
      else lp__perr_set(e, 400, "empty_sequence", "'%s' is empty", field);
      return -1;
    }
    if (v == LP_ADMIT_TOO_LONG) {
      if (multi)
        lp__perr_set(e, 413, "sequence_too_long", "%s[%u] has %u tokens, the largest bucket holds %u",
             field, i, len, maxlen);
      else
        lp__perr_set(e, 413, "sequence_too_long", "'%s' has %u tokens, the largest bucket holds %u",
             field, len, maxlen);
      snprintf(e->extra, sizeof(e->extra), ", \"max_len\": %u", maxlen);
      return -1;
    }
    if (v == LP_ADMIT_NO_SHAPE) {
      lp__perr_set(e, 503, "no_shape_available", "no shape of model '%s' is available", m->cfg->name);
      return -1;
    }
  }
  return 0;
}

/* ---- ending jobs ---- */


/* The core is done with job: it goes back to its front (which answers its
 * client and drops it). */
void lp__job_free(lp_job_t *job) {
  lp_model_t *m = job->model;
  if (job->charged) {
    m->live_bytes -= job->bytes;
    if (job->live_prev) job->live_prev->live_next = job->live_next;
    else m->live = job->live_next;
    if (job->live_next) job->live_next->live_prev = job->live_prev;
    job->charged = 0;
  }
  job->proxy->jobs--;
  lp__job_hand_back(job); /* the last touch: it is the front's now */
}

/* A client waits for job's answer, until the scheduler heard it left. */
static int has_client(const lp_job_t *job) { return job->waited; }

int lp__job_waiting(const lp_job_t *job) {
  for (uint32_t i = 0; i < job->nseq; i++)
    if (job->seqs[i].state != LP_SEQ_DONE && job->seqs[i].sends == 0) return 1;
  return 0;
}

void lp__job_fail(lp_job_t *job, int status, const char *code, const char *msg) {
  if (job->answered) return;
  job->answered = 1;
  /* written down: the front answers when the job is back */
  if (!job->waited) return;
  job->res_status = status;
  snprintf(job->res_code, sizeof(job->res_code), "%s", code);
  snprintf(job->res_msg, sizeof(job->res_msg), "%s", msg);
}

void lp__job_cancel(lp_job_t *job) {
  lp_model_t *m = job->model;
  job->answered = 1;
  if (!job->in_core) {
    lp__job_free(job);
    return;
  }
  if (job->cancel_queued) return; /* the core hears it already */
  if (m->pumping) { /* an action is being handled: the core hears it right after */
    job->cancel_queued = 1;
    job->next_cancel = m->cancels;
    m->cancels = job;
    return;
  }
  job->in_core = 0;
  lp_disp_cancel(m->disp, (uint64_t)(uintptr_t)job, lp__now());
  lp__job_free(job);
  m->pump(m);
}

/* ---- answering ---- */




/* wrap: a per-token slice of JSON text, to be wrapped in [ ] when written; bt
 * and g: the batch and segment that answered (the answer reports that batch
 * and place) */
static void seq_done(lp_seq_t *s, const lp_batch_t *bt, const lp_segment_t *g, lp_answer_t *ans,
                     const char *slice, size_t len, int per_segment, int wrap, int kind) {
  lp_job_t *job = s->job;
  if (s->state == LP_SEQ_DONE) return; /* the core says each once; kept as a guard */
  /* a later copy (a hedge) answered: what hedging bought */
  if (s->sends > 1 && bt->id == s->batch_id) job->proxy->hedges_won++;
  /* where it ran is where this answer came from: the latest copy's place
   * (what the send wrote) is another batch's when an earlier copy wins */
  s->batch_id = bt->id;
  s->lanes = bt->layout.lanes;
  s->bucket = bt->layout.bucket;
  s->lane = g->lane;
  s->offset = g->offset;
  s->dispatch_ns = bt->dispatch_ns;
  s->state = LP_SEQ_DONE;
  s->done_ns = lp__now();
  job->unresolved--;
  job->model->sequences_done++;
  if (job->answered || !has_client(job)) return;
  if (!ans) {
    /* the client has its 503; the core still answers the job (then it is freed) */
    lp__job_fail(job, 503, "out_of_memory", "proxy out of memory");
    return;
  }
  /* a span, not a copy: the front formats it where the client's connection is */
  lp__answer_ref(ans);
  s->ans = ans;
  s->out = slice;
  s->out_len = len;
  s->out_wrap = wrap && !per_segment;
  s->out_kind = kind;
  if (job->unresolved) return;
  uint64_t now = lp__now(), queue_ns, backend_ns;
  lp__job_times(job, &queue_ns, &backend_ns);
  lp_hist_observe(&job->model->queue_delay, (double)queue_ns / 1e9);
  lp_hist_observe(&job->model->duration, (double)(now - job->arrive_ns) / 1e9);
  job->res_status = 200;
  job->res_per_segment = per_segment;
  job->answered = 1; /* written when the job is handed back */
}

void lp__seq_done(lp_seq_t *s, const lp_batch_t *bt, const lp_segment_t *g, lp_answer_t *ans,
                  const char *slice, size_t len, int per_segment) {
  /* a segment's value is a vector or one number: its text says which */
  size_t k = 0;
  while (per_segment && k < len && (slice[k] == ' ' || slice[k] == '\n' || slice[k] == '\t' || slice[k] == '\r')) k++;
  int kind = !per_segment ? LP_OUT_TOKENS : k < len && slice[k] == '[' ? LP_OUT_VECTOR : LP_OUT_SCORE;
  seq_done(s, bt, g, ans, slice, len, per_segment, 1, kind);
}

void lp__seq_done_tensor(lp_seq_t *s, const lp_batch_t *bt, const lp_segment_t *g, lp_answer_t *ans,
                         size_t first, size_t n, size_t inner, int ndim, const int64_t *dims, int per_segment) {
  lp_job_t *job = s->job;
  if (s->state == LP_SEQ_DONE) return;
  lp_dtype_t dtype = ans->out.dtype;
  if (job->v2 && ndim >= 0 && ndim <= LP_TENSOR_MAX_DIMS) {
    /* one tensor for the client: every part must agree (they differ only when
     * its backends disagree, which the answer then says) */
    if (job->v2_dtype == LP_DT_INVALID) {
      job->v2_dtype = dtype;
      job->v2_ndim = ndim;
      memcpy(job->v2_dims, dims, (size_t)ndim * sizeof(int64_t));
    } else if (job->v2_dtype != dtype || job->v2_ndim != ndim ||
               memcmp(job->v2_dims, dims, (size_t)ndim * sizeof(int64_t)) != 0) {
      job->v2_mixed = 1;
    }
  }
  s->out_first = first;
  s->out_n = n;
  s->out_inner = inner;
  /* a /v1 client's part is JSON text, wrapped as a slice of per-token text is */
  /* a segment's part of [lanes, segments] is a number, of [lanes, segments, K...] a vector */
  int kind = !per_segment ? LP_OUT_TOKENS : ndim >= 1 ? LP_OUT_VECTOR : LP_OUT_SCORE;
  seq_done(s, bt, g, ans, NULL, n * lp_dtype_size(dtype), per_segment, !job->v2, kind);
}


