/* Runs on the front that owns the client's connection: a finished job's
 * answer written from the spans of its batches' answers (lanepack's JSON, a
 * v2 tensor or OpenAI's list), or its error in the route's dialect. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "front/front.h"

#define HEAD_ROOM LP_HEAD_ROOM

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
  } else if (job->openai || job->tei) {
    int rc = job->tei ? lp__tei_body(f, &out, job) : lp__openai_body(f, &out, job);
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
  lp_proxy_count(f, job->v2 ? LP_ROUTE_V2_INFER : job->openai ? LP_ROUTE_EMBEDDINGS : job->tei ? job->tei : LP_ROUTE_INFER,
                 200);
  lp__access_log(f, req, 200, job);
  lp_http_respond_raw_at(req, &out, room - head->len);
  lp_buf_free(&out);
  return 0;
}

/* Why job's outputs cannot be its route's answer (lp__tei_body's or
 * lp__openai_body's -ENOTSUP): what the route needs, naming the model's key. */
static const char *wrong_kind(lp_front_t *f, const lp_job_t *job, char *why, size_t len) {
  const char *name = f->cfg->models[job->model - f->shared->models].name; /* the front's own configuration */
  const char *got = "a value per token, or a score", *want = "\"per_segment\"";
  if (job->tei == LP_ROUTE_TEI_RERANK) got = "a value per token", want = "\"score\" or \"per_segment\"";
  else if (job->tei == LP_ROUTE_TEI_PREDICT) got = "a value per token", want = "\"score\"";
  else if (job->tei == LP_ROUTE_TEI_EMBED_ALL) got = "one output per input", want = "\"per_token\"";
  snprintf(why, len, "the backend's answer is not what this route needs (it gave %s): it needs a model whose "
           "outputs are %s (models.%s.outputs)", got, want, name);
  return why;
}

void lp__job_deliver(lp_front_t *f, lp_job_t *job, lp_http_req_t *req) {
  char why[320];
  int status = job->res_status ? job->res_status : 503;
  const char *code = job->res_status ? job->res_code : "out_of_memory";
  const char *msg = job->res_status ? job->res_msg : "proxy out of memory";
  if (job->res_status == 200) {
    int rc = write_success(f, job, req);
    lp__job_drop_outputs(job);
    if (!rc) return;
    status = rc == -ENOMEM ? 503 : 502;
    code = rc == -ENOMEM ? "out_of_memory" : "bad_backend_answer";
    msg = rc == -ENOMEM ? "proxy out of memory"
          : rc == -ENOTSUP ? wrong_kind(f, job, why, sizeof(why))
          : rc == -EPROTO && (job->openai || job->tei) ? "the backend's outputs are not vectors of numbers: use /v1/infer for this model"
          : rc == -EPROTO ? "the backend's outputs are not numbers: use /v1/infer for this model"
                          : "the backends answered this request's sequences in different datatypes or shapes";
  }
  const char *hdr = status == 429 || status == 503 ? "Retry-After: 1\r\n" : NULL;
  if (job->v2) lp__v2_reject_job(f, req, status, code, msg, job);
  else if (job->openai) lp__openai_reject(f, req, status, hdr, code, msg, NULL, job);
  else if (job->tei) lp__tei_reject_job(f, req, job->tei, status, code, msg, job);
  else lp__reject_job(f, req, LP_ROUTE_INFER, status, hdr, code, msg, job->res_extra[0] ? job->res_extra : NULL, job);
}
