/* A request's life after admission: its answer, built once every sequence has
 * its output, or its failure; and its time bound, kept in a heap apart from
 * the scheduler, so that no scheduling state can keep a request unanswered. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lanepack/log.h"
#include "proxy.h"

/* ---- ending jobs ---- */

void lp__job_free(lp_job_t *job) {
  lp_theap_remove(&job->proxy->job_timers, &job->timer);
  for (uint32_t i = 0; i < job->nseq; i++) free(job->seqs[i].out);
  job->proxy->jobs--;
  free(job); /* one block with its sequences, tokens and id */
}

void lp__job_release(lp_job_t *job) {
  if (job->unresolved == 0 && job->refs == 0) lp__job_free(job);
}

/* Removes the job's queued sequences (they will never be sent). */
static void drop_queued(lp_job_t *job) {
  if (!job->queued) return;
  lp_model_t *m = job->model;
  for (uint32_t i = 0; i < job->nseq && job->queued; i++) {
    lp_seq_t *s = &job->seqs[i];
    if (s->state == LP_SEQ_QUEUED) {
      lp__model_unqueue(m, s, LP_SEQ_DONE);
      job->unresolved--;
    }
  }
}

/* The job has had its one answer (or its client left): nothing times it now. */
static void settle(lp_job_t *job) {
  job->answered = 1;
  lp_theap_remove(&job->proxy->job_timers, &job->timer);
}

void lp__job_fail(lp_job_t *job, int status, const char *code, const char *msg) {
  if (!job->answered) {
    settle(job);
    if (job->req) {
      const char *hdr = status == 429 || status == 503 ? "Retry-After: 1\r\n" : NULL;
      lp_http_req_t *req = job->req;
      req->app = NULL; /* before answering: a failed write frees req at once */
      job->req = NULL;
      if (job->v2) lp__v2_reject_job(job->proxy, req, status, code, msg, job);
      else lp__reject_job(job->proxy, req, LP_ROUTE_INFER, status, hdr, code, msg, NULL, job);
    }
  }
  drop_queued(job);
  lp__job_release(job);
}

void lp__job_cancel(lp_job_t *job) {
  job->req = NULL;
  settle(job);
  drop_queued(job);
  lp__job_release(job);
}

/* ---- the time bound ---- */

static void on_job_timer(uv_timer_t *t);

/* Keeps the loop timer at the heap's top: restarted only when the top moves
 * earlier, so a stream of admissions costs a heap insertion each, no more. */
static void timers_arm(lp_proxy_t *p) {
  lp_theap_node_t *top = lp_theap_top(&p->job_timers);
  if (!top) {
    if (p->job_timer_at) uv_timer_stop(&p->job_timer);
    p->job_timer_at = 0;
    return;
  }
  if (p->job_timer_at && p->job_timer_at <= top->at) return;
  uint64_t now = uv_hrtime();
  uint64_t ms = top->at > now ? (top->at - now + 999999) / 1000000 : 0;
  p->job_timer_at = top->at;
  uv_timer_start(&p->job_timer, on_job_timer, ms, 0);
}

/* The next moment the job must be looked at: its deadline, its bound, or, while
 * only a compiling shape could hold one of its sequences, the backend timeout. */
static uint64_t next_check(const lp_job_t *job) {
  uint64_t at = job->bound_ns;
  if (job->deadline_ns && job->deadline_ns < at) at = job->deadline_ns;
  const lp_model_t *m = job->model;
  uint32_t compiled = lp__model_compiled_max(m);
  uint64_t patience = job->arrive_ns + m->cfg->backend_timeout_ms * 1000000ull;
  for (uint32_t i = 0; i < job->nseq && patience < at; i++)
    if (job->seqs[i].state == LP_SEQ_QUEUED && job->seqs[i].len > compiled) {
      at = patience;
      break;
    }
  return at;
}

int lp__job_arm(lp_job_t *job) {
  lp_proxy_t *p = job->proxy;
  job->bound_ns = job->arrive_ns + job->model->bound_ns;
  if (lp_theap_set(&p->job_timers, &job->timer, next_check(job))) return -ENOMEM;
  timers_arm(p);
  return 0;
}

/* A job's time has come: fail it for the reason that holds, or look again later. */
static void check(lp_job_t *job, uint64_t now) {
  lp_proxy_t *p = job->proxy;
  char msg[160];
  if (job->deadline_ns && now >= job->deadline_ns) {
    lp__job_fail(job, 504, "deadline_exceeded",
                 job->queued == job->nseq ? "the deadline passed while queued"
                                          : "the deadline passed before the backend answered");
    return;
  }
  if (now >= job->bound_ns) {
    snprintf(msg, sizeof(msg), "no answer within the proxy's bound of %llu ms",
             (unsigned long long)(job->model->bound_ns / 1000000));
    lp_log(LP_LOG_WARN, "request bound reached", "\"model\": \"%s\", \"queued\": %u",
           job->model->cfg->name, job->queued);
    lp__job_fail(job, 504, "request_bound_exceeded", msg);
    return;
  }
  uint64_t at = next_check(job);
  if (at <= now) {
    lp__job_fail(job, 503, "shape_compiling", "only a shape still compiling can hold this sequence");
    return;
  }
  if (lp_theap_set(&p->job_timers, &job->timer, at)) /* cannot grow: re-keying never does */
    lp__job_fail(job, 503, "out_of_memory", "proxy out of memory");
}

static void on_job_timer(uv_timer_t *t) {
  lp_proxy_t *p = container_of(t, lp_proxy_t, job_timer);
  p->job_timer_at = 0;
  uint64_t now = uv_hrtime();
  lp_theap_node_t *top;
  while ((top = lp_theap_top(&p->job_timers)) && top->at <= now)
    check(container_of(top, lp_job_t, timer), now);
  timers_arm(p);
  lp_proxy_kick(p);
}

void lp__job_timers_init(lp_proxy_t *p) {
  lp_theap_init(&p->job_timers);
  uv_timer_init(p->loop, &p->job_timer);
  p->job_timer_at = 0;
}

/* ---- answering ---- */

/* Nanoseconds as milliseconds with three decimals, without printf's float path
 * (it showed in the profile of every answer). */
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

void lp__put_ms(lp_buf_t *b, uint64_t ns) {
  uint64_t us = (ns + 500) / 1000;
  char frac[4] = {(char)('0' + us / 100 % 10), (char)('0' + us / 10 % 10), (char)('0' + us % 10), 0};
  lp_buf_u64(b, us / 1000);
  lp_buf_puts(b, ".");
  lp_buf_puts(b, frac);
}

static void put_batch(lp_buf_t *b, const lp_seq_t *s) {
  lp_buf_puts(b, "{\"id\": ");
  lp_buf_u64(b, s->batch_id);
  lp_buf_puts(b, ", \"shape\": [");
  lp_buf_u64(b, s->lanes);
  lp_buf_puts(b, ", ");
  lp_buf_u64(b, s->bucket);
  lp_buf_puts(b, "], \"lane\": ");
  lp_buf_u64(b, s->lane);
  lp_buf_puts(b, ", \"offset\": ");
  lp_buf_u64(b, s->offset);
  lp_buf_puts(b, "}");
}

/* The client's answer, once every sequence of the job has its output.
 * Returns 0, or -ENOMEM with nothing sent. */
/* Room left in front of an answer's body for its status line and headers: the
 * body is built once, in the buffer that is written, and the head is put just
 * before it. */
#define HEAD_ROOM 512

/* The proxy's scratch after a v2 answer was built in it: a big one (a wide
 * output) is given back, not kept by the proxy for ever. */
static void scratch_give_back(lp_proxy_t *p) {
  if (p->scratch.cap > LP_XFER_KEEP_BYTES) {
    lp_buf_free(&p->scratch);
    lp_buf_init(&p->scratch);
  }
}

static int answer(lp_job_t *job, const char *single, size_t single_len, int per_segment) {
  lp_proxy_t *p = job->proxy;
  lp_buf_t out;
  lp_buf_init(&out);
  uint64_t now = uv_hrtime(), queue_ns, backend_ns;
  const char *ctype = "application/json";
  char extra[96] = "";
  lp__job_times(job, &queue_ns, &backend_ns);
  size_t need = HEAD_ROOM + single_len + 256 + (job->id_json ? strlen(job->id_json) : 0);
  for (uint32_t i = 0; i < job->nseq; i++) need += job->seqs[i].out_len + 160;
  if (lp_buf_reserve(&out, need)) return -ENOMEM;
  out.len = HEAD_ROOM;
  lp_buf_t *body = &out;
  if (job->v2) {
    lp_buf_t *v2body = &p->scratch;
    lp_buf_reset(v2body);
    int rc = lp__v2_answer(job, per_segment, v2body, &ctype, extra, sizeof(extra));
    if (rc) scratch_give_back(p);
    if (rc == -EPROTO || rc == -EDOM) {
      lp_buf_free(&out);
      lp__job_fail(job, 502, "bad_backend_answer",
                   rc == -EPROTO ? "the backend's outputs are not numbers: use /v1/infer for this model"
                                 : "the backends answered this request's sequences in different "
                                   "datatypes or shapes");
      return 0;
    }
    if (rc) {
      lp_buf_free(&out);
      return rc;
    }
    lp_buf_append(body, v2body->data, v2body->len);
    scratch_give_back(p);
    goto send;
  }
  lp_buf_puts(body, "{");
  if (job->id_json) {
    lp_buf_puts(body, "\"id\": ");
    lp_buf_puts(body, job->id_json);
    lp_buf_puts(body, ", ");
  }
  if (!job->multi) {
    lp_buf_puts(body, "\"output\": ");
    if (!per_segment) lp_buf_puts(body, "[");
    lp_buf_append(body, single, single_len);
    if (!per_segment) lp_buf_puts(body, "]");
    lp_buf_puts(body, ", \"batch\": ");
    put_batch(body, &job->seqs[0]);
  } else {
    lp_buf_puts(body, "\"outputs\": [");
    for (uint32_t i = 0; i < job->nseq; i++) {
      if (i) lp_buf_puts(body, ", ");
      lp_buf_append(body, job->seqs[i].out, job->seqs[i].out_len);
    }
    lp_buf_puts(body, "], \"batches\": [");
    for (uint32_t i = 0; i < job->nseq; i++) {
      if (i) lp_buf_puts(body, ", ");
      put_batch(body, &job->seqs[i]);
    }
    lp_buf_puts(body, "]");
  }
  lp_buf_puts(body, ", \"timing_ms\": {\"queue\": ");
  lp__put_ms(body, queue_ns);
  lp_buf_puts(body, ", \"backend\": ");
  lp__put_ms(body, backend_ns);
  lp_buf_puts(body, ", \"total\": ");
  lp__put_ms(body, now - job->arrive_ns);
  lp_buf_puts(body, "}}\n");
send:
  if (out.oom) {
    lp_buf_free(&out);
    return -ENOMEM;
  }
  lp_hist_observe(&p->t_queue, (double)queue_ns / 1e9);
  lp_hist_observe(&job->model->queue_delay, (double)queue_ns / 1e9);
  lp_hist_observe(&p->t_backend, (double)backend_ns / 1e9);
  lp_hist_observe(&p->t_total, (double)(now - job->arrive_ns) / 1e9);
  lp_hist_observe(&job->model->duration, (double)(now - job->arrive_ns) / 1e9);
  lp_buf_t *head = &p->scratch;
  lp_buf_reset(head);
  lp_http_head(job->req, head, 200, extra[0] ? extra : NULL, ctype, out.len - HEAD_ROOM);
  if (head->oom || head->len > HEAD_ROOM) {
    lp_buf_free(&out);
    return -ENOMEM;
  }
  memcpy(out.data + HEAD_ROOM - head->len, head->data, head->len);
  lp_proxy_count(p, job->v2 ? LP_ROUTE_V2_INFER : LP_ROUTE_INFER, 200);
  lp__access_log(p, job->req, 200, job);
  lp_http_req_t *req = job->req;
  req->app = NULL;
  job->req = NULL;
  settle(job);
  lp_http_respond_raw_at(req, &out, HEAD_ROOM - head->len);
  lp_buf_free(&out);
  return 0;
}

/* wrap: a per-token slice of JSON text, wrapped in [ ] when kept; bt and g:
 * the batch and segment that answered (the answer reports that batch and place) */
static void seq_done(lp_seq_t *s, const lp_batch_t *bt, const lp_segment_t *g, const char *slice,
                     size_t len, int per_segment, int wrap) {
  lp_job_t *job = s->job;
  if (s->state == LP_SEQ_DONE) return; /* a hedged copy answered first */
  if (s->state == LP_SEQ_QUEUED) lp__model_unqueue(job->model, s, LP_SEQ_INFLIGHT); /* its hedge had not left */
  /* the latest copy is the hedge: its winning is what hedging bought */
  if (s->hedged && bt->id == s->batch_id) job->proxy->hedges_won++;
  /* where it ran is where this answer came from: the latest copy's place
   * (what dispatch wrote) is another batch's when an earlier copy wins */
  s->batch_id = bt->id;
  s->lanes = bt->layout.lanes;
  s->bucket = bt->layout.bucket;
  s->lane = g->lane;
  s->offset = g->offset;
  s->dispatch_ns = bt->dispatch_ns;
  s->state = LP_SEQ_DONE;
  s->done_ns = uv_hrtime();
  job->unresolved--;
  job->model->sequences_done++;
  if (!job->answered && job->req) {
    int rc = 0;
    if (!job->multi) {
      rc = answer(job, slice, len, per_segment);
    } else if ((s->out = malloc(len + 2)) == NULL) {
      rc = -ENOMEM;
    } else {
      size_t k = 0;
      if (!per_segment && wrap) s->out[k++] = '[';
      memcpy(s->out + k, slice, len);
      k += len;
      if (!per_segment && wrap) s->out[k++] = ']';
      s->out_len = k;
      if (job->unresolved == 0) rc = answer(job, NULL, 0, per_segment);
    }
    if (rc) {
      lp__job_fail(job, 503, "out_of_memory", "proxy out of memory"); /* frees at 0 */
      return;
    }
  }
  lp__job_release(job);
}

void lp__seq_done(lp_seq_t *s, const lp_batch_t *bt, const lp_segment_t *g, const char *slice, size_t len,
                  int per_segment) {
  seq_done(s, bt, g, slice, len, per_segment, 1);
}

void lp__seq_done_tensor(lp_seq_t *s, const lp_batch_t *bt, const lp_segment_t *g, lp_dtype_t dtype, const void *raw, size_t len, int ndim,
                         const int64_t *dims, int per_segment) {
  lp_job_t *job = s->job;
  if (s->state != LP_SEQ_DONE && ndim >= 0 && ndim <= LP_TENSOR_MAX_DIMS) {
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
  seq_done(s, bt, g, raw, len, per_segment, 0);
}

void lp__seq_failed(lp_seq_t *s, int status, const char *code, const char *msg) {
  lp_job_t *job = s->job;
  if (s->state == LP_SEQ_DONE) return;
  if (s->state == LP_SEQ_QUEUED) lp__model_unqueue(job->model, s, LP_SEQ_INFLIGHT);
  s->state = LP_SEQ_DONE;
  job->unresolved--;
  lp__job_fail(job, status, code, msg); /* frees the job when nothing refers to it */
}
