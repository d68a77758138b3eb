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

/* Values of vectors formatted for one answer in one loop turn. Formatting
 * costs about 0.14 us a value (perf: a 2,048 x 64 answer held the front
 * 15-18 ms in one turn, and with it every other connection of the front and
 * every batch it sends); 8,192 values keep a turn near 1 ms, while a
 * typical answer (a few inputs, or 2,048 vectors of 8) takes one or two
 * turns. */
#define LP_FRONT_VALUES_PER_TURN 8192

struct lp_sliced_s {
  lp_sliced_t *next;      /* the front's list, in turn */
  lp_job_t *job;          /* the front's reference to the job, dropped when answered */
  lp_http_req_t *req;
  lp_buf_t out;           /* owned: the head's room, then the body so far */
  size_t room;
  lp_vecpos_t pos;
};

/* The part of an embeddings answer from pos on (lp__openai_body_part's contract). */
static int body_part(lp_front_t *f, lp_buf_t *out, const lp_job_t *job, lp_vecpos_t *pos, size_t values) {
  return job->openai ? lp__openai_body_part(f, out, job, pos, values) : lp__tei_embed_part(f, out, job, pos, values);
}

/* The body out (after room bytes for the head) answered to req: 0, or
 * -ENOMEM with nothing sent. out is freed either way. */
static int answer_end(lp_front_t *f, lp_job_t *job, lp_http_req_t *req, lp_buf_t *out, size_t room,
                      const char *ctype, const char *extra, uint64_t now) {
  uint64_t queue_ns, backend_ns;
  lp__job_times(job, &queue_ns, &backend_ns);
  lp_buf_t *head = &f->scratch;
  lp_buf_reset(head);
  lp_http_head(req, head, 200, extra[0] ? extra : NULL, ctype, out->len - room);
  if (out->oom || head->oom || head->len > room) {
    lp_buf_free(out);
    return -ENOMEM;
  }
  lp_hist_observe(&f->t_queue, (double)queue_ns / 1e9);
  lp_hist_observe(&f->t_backend, (double)backend_ns / 1e9);
  lp_hist_observe(&f->t_total, (double)(now - job->arrive_ns) / 1e9);
  memcpy(out->data + room - head->len, head->data, head->len);
  lp_proxy_count(f, job->v2 ? LP_ROUTE_V2_INFER : job->openai ? LP_ROUTE_EMBEDDINGS : job->tei ? job->tei : LP_ROUTE_INFER,
                 200);
  lp__access_log(f, req, 200, job);
  lp_http_respond_raw_at(req, out, room - head->len);
  lp_buf_free(out);
  return 0;
}

static void on_answers_soon(uv_idle_t *h) { lp__front_write_answers(container_of(h, lp_front_t, answers_soon), 0); }

/* An answer whose first slice is written waits for the next turns. 0, or
 * -ENOMEM (nothing changed: the caller writes it whole). */
static int answer_park(lp_front_t *f, lp_job_t *job, lp_http_req_t *req, lp_buf_t *out, size_t room,
                       const lp_vecpos_t *pos) {
  lp_sliced_t *a = calloc(1, sizeof(*a));
  if (!a) return -ENOMEM;
  a->job = job;
  a->req = req;
  a->out = *out;
  a->room = room;
  a->pos = *pos;
  if (f->answers) f->answers_last->next = a;
  else f->answers = a;
  f->answers_last = a;
  req->app = lp__app_sliced(a); /* a client leaving drops it (lp__sliced_cancel) */
  if (!uv_is_active((uv_handle_t *)&f->answers_soon)) uv_idle_start(&f->answers_soon, on_answers_soon);
  return 0;
}

/* A success written to req: 0, or -ENOMEM (nothing sent), -EPROTO / -EDOM (a
 * v2 client's answer cannot be made of its parts: nothing sent), or 1: an
 * embeddings answer too large for one turn, its first slice written and the
 * rest waiting (answer_park: the job is the answer's). */
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
  } else if (job->openai || job->tei == LP_ROUTE_TEI_EMBED) {
    /* a large answer a slice a turn: the front's other clients are served between */
    lp_vecpos_t pos = {0, 0};
    int rc = body_part(f, &out, job, &pos, LP_FRONT_VALUES_PER_TURN);
    if (rc == -EAGAIN && answer_park(f, job, req, &out, room, &pos) == 0) return 1;
    if (rc == -EAGAIN) rc = body_part(f, &out, job, &pos, SIZE_MAX); /* no memory to wait: whole now */
    if (rc) {
      lp_buf_free(&out);
      return rc;
    }
  } else if (job->tei) {
    int rc = lp__tei_body(f, &out, job);
    if (rc) {
      lp_buf_free(&out);
      return rc;
    }
  } else {
    v1_body(&out, job, queue_ns, backend_ns, now);
  }
  return answer_end(f, job, req, &out, room, ctype, extra, now);
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

/* Why a classifier's scores cannot be labelled (lp__tei_predict_body's
 * -EBADMSG): the backend gave another count than the model's labels. */
static const char *wrong_labels(lp_front_t *f, const lp_job_t *job, char *why, size_t len) {
  const lp_model_config_t *mc = &f->cfg->models[job->model - f->shared->models]; /* the front's own */
  snprintf(why, len, "the backend's scores are not one per label: the model has %zu (models.%s.labels)",
           mc->nlabels, mc->name);
  return why;
}

/* job's error (or its success that failed to be written: rc) answered to req. */
static void deliver_error(lp_front_t *f, lp_job_t *job, lp_http_req_t *req, int rc) {
  char why[320];
  int status = job->res_status ? job->res_status : 503;
  const char *code = job->res_status ? job->res_code : "out_of_memory";
  const char *msg = job->res_status ? job->res_msg : "proxy out of memory";
  if (job->res_status == 200) {
    status = rc == -ENOMEM ? 503 : 502;
    code = rc == -ENOMEM ? "out_of_memory" : "bad_backend_answer";
    msg = rc == -ENOMEM ? "proxy out of memory"
          : rc == -ENOTSUP ? wrong_kind(f, job, why, sizeof(why))
          : rc == -EBADMSG ? wrong_labels(f, job, why, sizeof(why))
          : rc == -EPROTO && (job->openai || job->tei) ? "the backend's outputs are not vectors of numbers: use /v1/infer for this model"
          : rc == -EPROTO ? "the backend's outputs are not numbers: use /v1/infer for this model"
                          : "the backends answered this request's sequences in different datatypes or shapes";
  }
  const char *hdr = status == 429 || status == 503 ? "Retry-After: 1\r\n" : NULL;
  if (job->v2) lp__v2_reject_job(f, req, status, code, msg, job);
  else if (job->openai) /* the shapes' refusals are about an input: OpenAI's param names it */
    lp__openai_reject(f, req, status, hdr, code, msg,
                      strcmp(code, "sequence_too_long") && strcmp(code, "empty_sequence") ? NULL : "input", job);
  else if (job->tei) lp__tei_reject_job(f, req, job->tei, status, code, msg, job);
  else lp__reject_job(f, req, LP_ROUTE_INFER, status, hdr, code, msg, job->res_extra[0] ? job->res_extra : NULL, job);
}

int lp__job_deliver(lp_front_t *f, lp_job_t *job, lp_http_req_t *req) {
  int rc = 0;
  if (job->res_status == 200) {
    if ((rc = write_success(f, job, req)) == 1) return 1; /* the rest in the next turns */
    lp__job_drop_outputs(job);
    if (!rc) return 0;
  }
  deliver_error(f, job, req, rc);
  return 0;
}

/* An answer out of the front's list. */
static void answer_unlink(lp_front_t *f, lp_sliced_t *a) {
  lp_sliced_t **pp = &f->answers, *prev = NULL;
  while (*pp && *pp != a) {
    prev = *pp;
    pp = &(*pp)->next;
  }
  if (!*pp) return;
  *pp = a->next;
  if (f->answers_last == a) f->answers_last = prev;
  a->next = NULL;
}

static void answer_free(lp_sliced_t *a) {
  lp_buf_free(&a->out);
  lp__job_release(a->job); /* its outputs with it */
  free(a);
}

void lp__sliced_cancel(lp_front_t *f, lp_sliced_t *a) {
  answer_unlink(f, a);
  answer_free(a);
}

void lp__front_write_answers(lp_front_t *f, int all) {
  /* one slice a turn, of the answer whose turn it is (then it goes last):
   * a turn stays short however many large answers wait */
  while (f->answers) {
    lp_sliced_t *a = f->answers;
    answer_unlink(f, a);
    int rc = body_part(f, &a->out, a->job, &a->pos, all ? SIZE_MAX : LP_FRONT_VALUES_PER_TURN);
    LP_RELAXED_INC(f->answer_slices);
    if (rc == -EAGAIN) {
      if (f->answers) f->answers_last->next = a;
      else f->answers = a;
      f->answers_last = a;
      break;
    }
    a->req->app = NULL; /* answered now: no cancel comes for it */
    if (!rc) rc = answer_end(f, a->job, a->req, &a->out, a->room, "application/json", "", lp__now());
    lp__job_drop_outputs(a->job);
    if (rc) deliver_error(f, a->job, a->req, rc);
    answer_free(a);
    if (!all) break;
  }
  if (!f->answers) uv_idle_stop(&f->answers_soon);
}
