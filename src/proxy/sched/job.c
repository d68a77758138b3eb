/* A request's life after admission: its answer, built once every sequence has
 * its output, or its failure. When it ends is the dispatch core's to say (its
 * ANSWER action, within the request's bound); a client gone is told to it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lanepack/log.h"
#include "proxy.h"

/* ---- ending jobs ---- */

/* The job's references to its batches' answers, dropped once its client is
 * written: a batch's answer goes with the last job it serves. */
static void drop_outputs(lp_job_t *job) {
  for (uint32_t i = 0; i < job->nseq; i++) {
    lp__answer_unref(job->seqs[i].ans);
    job->seqs[i].ans = NULL;
    job->seqs[i].out = NULL;
  }
}

/* The core is done with job: with one loop it is freed; a remote front's
 * goes back to its front (which answers its client and drops it). */
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
  if (job->front->remote) {
    lp__job_hand_back(job); /* the last touch: it is the front's now */
    return;
  }
  drop_outputs(job);
  free(job->tracestate);
  free(job); /* one block with its sequences, tokens and id */
}

/* A client waits for job's answer: its request (one loop) or, for a remote
 * front, until the scheduler heard it left. */
static int has_client(const lp_job_t *job) { return job->req != NULL || job->waited; }

int lp__job_waiting(const lp_job_t *job) {
  for (uint32_t i = 0; i < job->nseq; i++)
    if (job->seqs[i].state != LP_SEQ_DONE && job->seqs[i].sends == 0) return 1;
  return 0;
}

void lp__job_fail(lp_job_t *job, int status, const char *code, const char *msg) {
  if (job->answered) return;
  job->answered = 1;
  if (job->front->remote) { /* written down: the front answers when the job is back */
    if (!job->waited) return;
    job->res_status = status;
    snprintf(job->res_code, sizeof(job->res_code), "%s", code);
    snprintf(job->res_msg, sizeof(job->res_msg), "%s", msg);
    return;
  }
  if (!job->req) return;
  const char *hdr = status == 429 || status == 503 ? "Retry-After: 1\r\n" : NULL;
  lp_http_req_t *req = job->req;
  req->app = NULL; /* before answering: a failed write frees req at once */
  job->req = NULL;
  if (job->v2) lp__v2_reject_job(job->front, req, status, code, msg, job);
  else if (job->openai) lp__openai_reject(job->front, req, status, hdr, code, msg, NULL, job);
  else lp__reject_job(job->front, req, LP_ROUTE_INFER, status, hdr, code, msg, NULL, job);
}

void lp__job_cancel(lp_job_t *job) {
  lp_model_t *m = job->model;
  job->req = NULL;
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
  lp__model_pump(m);
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

#define HEAD_ROOM LP_HEAD_ROOM

/* wrap: a per-token slice of JSON text, to be wrapped in [ ] when written; bt
 * and g: the batch and segment that answered (the answer reports that batch
 * and place) */
static void seq_done(lp_seq_t *s, const lp_batch_t *bt, const lp_segment_t *g, lp_answer_t *ans,
                     const char *slice, size_t len, int per_segment, int wrap) {
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
  if (job->unresolved) return;
  uint64_t now = lp__now(), queue_ns, backend_ns;
  lp__job_times(job, &queue_ns, &backend_ns);
  lp_hist_observe(&job->model->queue_delay, (double)queue_ns / 1e9);
  lp_hist_observe(&job->model->duration, (double)(now - job->arrive_ns) / 1e9);
  job->res_status = 200;
  job->res_per_segment = per_segment;
  job->answered = 1;
  if (job->front->remote) return; /* written when the job is handed back */
  lp_http_req_t *req = job->req;
  req->app = NULL; /* before answering: a failed write frees req at once */
  job->req = NULL;
  lp__job_deliver(job->front, job, req);
}

void lp__seq_done(lp_seq_t *s, const lp_batch_t *bt, const lp_segment_t *g, lp_answer_t *ans,
                  const char *slice, size_t len, int per_segment) {
  seq_done(s, bt, g, ans, slice, len, per_segment, 1);
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
  seq_done(s, bt, g, ans, NULL, n * lp_dtype_size(dtype), per_segment, !job->v2);
}

/* ---- the front's side: the answer written where the connection lives ---- */

void lp__put_output(lp_buf_t *b, const lp_seq_t *s) {
  if (s->out_wrap) lp_buf_puts(b, "[");
  if (s->out) lp_buf_append(b, s->out, s->out_len);
  else lp_tensor_write_json(b, &s->ans->out, s->out_first, s->out_n, s->out_inner);
  if (s->out_wrap) lp_buf_puts(b, "]");
}

/* A /v1/infer answer's body, from the sequences' spans. */
static void v1_body(lp_buf_t *body, const lp_job_t *job, uint64_t queue_ns, uint64_t backend_ns, uint64_t now) {
  lp_buf_puts(body, "{");
  if (job->id_json) {
    lp_buf_puts(body, "\"id\": ");
    lp_buf_puts(body, job->id_json);
    lp_buf_puts(body, ", ");
  }
  if (!job->multi) {
    lp_buf_puts(body, "\"output\": ");
    lp__put_output(body, &job->seqs[0]);
    lp_buf_puts(body, ", \"batch\": ");
    put_batch(body, &job->seqs[0]);
  } else {
    lp_buf_puts(body, "\"outputs\": [");
    for (uint32_t i = 0; i < job->nseq; i++) {
      if (i) lp_buf_puts(body, ", ");
      lp__put_output(body, &job->seqs[i]);
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
}

/* A success written to req: 0, or -ENOMEM (nothing sent), -EPROTO / -EDOM (a
 * v2 client's answer cannot be made of its parts: nothing sent). */
static int write_success(lp_front_t *f, lp_job_t *job, lp_http_req_t *req) {
  lp_buf_t out;
  lp_buf_init(&out);
  lp_http_take_buf(req, &out); /* a pooled request's buffer */
  uint64_t now = lp__now(), queue_ns, backend_ns;
  lp__job_times(job, &queue_ns, &backend_ns);
  const char *ctype = "application/json";
  char extra[96] = "";
  /* the head's room: a client's tracestate comes back in it */
  const size_t room = HEAD_ROOM + (req->tracestate[0] ? strlen(req->tracestate) + sizeof("tracestate: \r\n") : 0);
  size_t need = room + 256 + (job->id_json ? strlen(job->id_json) : 0);
  for (uint32_t i = 0; i < job->nseq; i++) need += job->seqs[i].out_len + 160;
  if (lp_buf_reserve(&out, need)) {
    lp_buf_free(&out);
    return -ENOMEM;
  }
  out.len = room;
  if (job->v2) {
    lp_buf_t v2body;
    lp_buf_init(&v2body);
    int rc = lp__v2_answer(job, job->res_per_segment, &v2body, &ctype, extra, sizeof(extra));
    if (!rc) lp_buf_append(&out, v2body.data, v2body.len);
    lp_buf_free(&v2body);
    if (rc) {
      lp_buf_free(&out);
      return rc;
    }
  } else if (job->openai) {
    int rc = lp__openai_body(f, &out, job);
    if (rc) {
      lp_buf_free(&out);
      return rc;
    }
  } else {
    v1_body(&out, job, queue_ns, backend_ns, now);
  }
  lp_buf_t *head = &f->scratch;
  lp_buf_reset(head);
  lp_http_head(req, head, 200, extra[0] ? extra : NULL, ctype, out.len - room);
  if (out.oom || head->oom || head->len > room) {
    lp_buf_free(&out);
    return -ENOMEM;
  }
  lp_hist_observe(&f->t_queue, (double)queue_ns / 1e9);
  lp_hist_observe(&f->t_backend, (double)backend_ns / 1e9);
  lp_hist_observe(&f->t_total, (double)(now - job->arrive_ns) / 1e9);
  memcpy(out.data + room - head->len, head->data, head->len);
  lp_proxy_count(f, job->v2 ? LP_ROUTE_V2_INFER : job->openai ? LP_ROUTE_EMBEDDINGS : LP_ROUTE_INFER, 200);
  lp__access_log(f, req, 200, job);
  lp_http_respond_raw_at(req, &out, room - head->len);
  lp_buf_free(&out);
  return 0;
}

void lp__job_deliver(lp_front_t *f, lp_job_t *job, lp_http_req_t *req) {
  int status = job->res_status ? job->res_status : 503;
  const char *code = job->res_status ? job->res_code : "out_of_memory";
  const char *msg = job->res_status ? job->res_msg : "proxy out of memory";
  if (job->res_status == 200) {
    int rc = write_success(f, job, req);
    drop_outputs(job);
    if (!rc) return;
    status = rc == -ENOMEM ? 503 : 502;
    code = rc == -ENOMEM ? "out_of_memory" : "bad_backend_answer";
    msg = rc == -ENOMEM ? "proxy out of memory"
          : rc == -EPROTO && job->openai ? "the backend's outputs are not vectors of numbers: use /v1/infer for this model"
          : rc == -EPROTO ? "the backend's outputs are not numbers: use /v1/infer for this model"
                          : "the backends answered this request's sequences in different datatypes or shapes";
  }
  const char *hdr = status == 429 || status == 503 ? "Retry-After: 1\r\n" : NULL;
  if (job->v2) lp__v2_reject_job(f, req, status, code, msg, job);
  else if (job->openai) lp__openai_reject(f, req, status, hdr, code, msg, NULL, job);
  else lp__reject_job(f, req, LP_ROUTE_INFER, status, hdr, code, msg, job->res_extra[0] ? job->res_extra : NULL, job);
}

void lp__job_release(lp_job_t *job) {
  /* the only holder (refs 1, read by the holder) skips the locked decrement */
  if (__atomic_load_n(&job->refs, __ATOMIC_ACQUIRE) != 1 &&
      __atomic_sub_fetch(&job->refs, 1, __ATOMIC_ACQ_REL) != 0)
    return;
  drop_outputs(job);
  lp_buf_free(&job->res_body);
  free(job->admin_url);
  free(job->tracestate);
  free(job);
}
