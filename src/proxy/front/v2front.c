/* Clients that speak the Open Inference Protocol: POST /v2/models/M/infer with
 * an input_ids tensor (INT32 or INT64; [n], [1, n] or [k, n]), JSON or binary;
 * Triton's priority and timeout parameters; the answer as the backend's output
 * tensor of shape [k, n, ...] (per token) or [k, ...] (per segment), in binary
 * when asked; health and metadata routes; errors as {"error": "..."}. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lanepack/log.h"
#include "lanepack/v2.h"
#include "lanepack/urlpath.h"
#include "front/front.h"

static void infer(lp_front_t *f, lp_http_req_t *req, lp_model_t *m) {
  lp_front_t *p = f;
  const lp_model_config_t *mc = &f->cfg->models[m - f->shared->models];
  char err[300];
  if (req->method != LP_HTTP_POST) return lp__v2_reject(p, req, 405, "method_not_allowed", "use POST");
  if (req->inference_header_len == -2)
    return lp__v2_reject(p, req, 400, "bad_header", "Inference-Header-Content-Length is not a size");
  lp_v2_msg_t msg;
  int rc = lp_v2_decode(&msg, req->body ? req->body : "", req->body_len, req->inference_header_len, 1,
                        err, sizeof(err));
  if (rc) {
    lp_v2_msg_free(&msg);
    return lp__v2_reject(p, req, rc == -ENOMEM ? 503 : 400, rc == -ENOMEM ? "out_of_memory" : "bad_request", err);
  }
  const lp_tensor_t *t = lp_v2_find(&msg, "input_ids");
  const char *bad = NULL;
  /* the code and status /v1/infer gives for the same cause */
  const char *code = "bad_request";
  int status = 400;
  if (!t) {
    bad = "the request needs an 'input_ids' tensor";
    code = "missing_input";
  } else if (t->dtype != LP_DT_INT32 && t->dtype != LP_DT_INT64) bad = "'input_ids' must be INT32 or INT64";
  else if (t->ndim < 1 || t->ndim > 2) bad = "'input_ids' must have shape [n], [1, n] or [k, n]";
  else if (msg.n > 1) bad = "'input_ids' is the only input";
  for (int k = 0; !bad && k < msg.nwant; k++)
    if (strcmp(msg.want[k], lp__v2_output_name_of(mc)) != 0) bad = "unknown output requested";
  size_t k = !t || t->ndim == 1 ? 1 : (size_t)t->shape[0];
  size_t n = !t ? 0 : t->ndim == 1 ? (size_t)t->shape[0] : (size_t)t->shape[1];
  if (!bad && k > f->cfg->max_sequences_per_request) {
    snprintf(err, sizeof(err), "more than %u sequences in one request", f->cfg->max_sequences_per_request);
    bad = err;
    code = "too_many_sequences";
    status = 413;
  }
  if (!bad && (k == 0 || n == 0)) {
    bad = "'input_ids' is empty";
    code = "empty_sequence";
  }
  int32_t *tokens = NULL;
  if (!bad) {
    tokens = malloc(k * n * sizeof(int32_t));
    if (!tokens) {
      bad = "proxy out of memory";
      code = "out_of_memory";
      status = 503;
    }
    for (size_t i = 0; tokens && i < k * n; i++) {
      int64_t v = lp_tensor_int(t, i);
      if (v < 0 || v > INT32_MAX) {
        snprintf(err, sizeof(err), "input_ids[%zu] is not in [0, 2147483647]", i);
        bad = err;
        code = "token_out_of_range";
        break;
      }
      tokens[i] = (int32_t)v;
    }
  }
  if (bad) {
    free(tokens);
    lp_v2_msg_free(&msg);
    return lp__v2_reject(p, req, status, code, bad);
  }
  /* as /v1/infer's priority and deadline_ms (lp__job_new clamps the deadline;
   * 0, like no timeout, leaves the model's default_deadline_ms) */
  int priority = msg.has_priority ? lp__clamp_priority(msg.priority) : 0;
  double deadline_ms = msg.has_timeout ? (double)msg.timeout_us / 1000.0 : -1;
  uint32_t *lens = malloc(k * sizeof(uint32_t));
  for (size_t i = 0; lens && i < k; i++) lens[i] = (uint32_t)n;
  lp_perr_t e = {0};
  lp_job_t *job = NULL;
  /* the id is echoed: kept as JSON text, like /v1/infer's */
  lp_buf_t id;
  lp_buf_init(&id);
  if (msg.has_id) lp_buf_json_str(&id, msg.id, strlen(msg.id));
  if (lens && !id.oom)
    job = lp__job_new(p, m, tokens, k * n, lens, k, 1, priority, deadline_ms,
                      msg.has_id ? id.data : NULL, id.len, "input_ids", &e);
  else
    e = (lp_perr_t){.status = 503, .code = "out_of_memory"};
  int binary = msg.binary_data_output;
  for (int i = 0; i < msg.nwant; i++) binary |= msg.want_binary[i];
  free(lens);
  free(tokens);
  lp_buf_free(&id);
  lp_v2_msg_free(&msg);
  free(req->body); /* the tokens were copied out */
  req->body = NULL;
  req->body_len = 0;
  if (!job) return lp__v2_reject(p, req, e.status, e.code, e.msg[0] ? e.msg : "proxy out of memory");
  job->v2 = 1;
  job->proto.v2.binary = binary;
  job->proto.v2.rows = k;
  lp__job_bind(job, req);
  lp__front_submit(f, req, job);
}

/* ---- the answer ---- */

/* Reads one sequence's output text (a lanepack-JSON backend's numbers) as
 * doubles, null (how /v1 writes NaN and infinities) as NaN; sets the tensor's
 * trailing dimension (0 for scalars) on first use, and checks the others agree. */
static int collect(json_t *v, double *vals, size_t *nv, size_t cap, int64_t *inner) {
  size_t m = json_is_array(v) ? json_array_size(v) : 1;
  int64_t want = json_is_array(v) ? (int64_t)m : 0;
  if (m == 0) return -1; /* [] holds no number */
  if (*inner < 0) *inner = want;
  if (*inner != want) return -1;
  for (size_t i = 0; i < m; i++) {
    json_t *x = json_is_array(v) ? json_array_get(v, i) : v;
    if (*nv >= cap) return -1;
    if (json_is_null(x)) vals[(*nv)++] = NAN;
    else if (json_is_real(x)) vals[(*nv)++] = json_real_value(x); /* integers too: INT_AS_REAL */
    else return -1;
  }
  return 0;
}

/* The model's configuration as the job's front has it: its own copy (the
 * scheduler's, which a reload rewrites in place, is not this thread's). */
static const lp_model_config_t *front_model_cfg(const lp_job_t *job) {
  return &job->front->cfg->models[job->model - job->front->shared->models];
}

/* The answer's members before "outputs". */
static void put_members(lp_buf_t *b, const lp_job_t *job) {
  const char *name = front_model_cfg(job)->name;
  lp_buf_puts(b, "\"model_name\":");
  lp_buf_json_str(b, name, strlen(name));
  lp_buf_puts(b, ",\"model_version\":\"1\"");
  if (job->id_json) {
    lp_buf_puts(b, ",\"id\":");
    lp_buf_puts(b, job->id_json);
  }
}

/* A v2 backend's parts: its values, in its datatype, laid end to end. */
static int typed_output(lp_job_t *job, int per_segment, lp_v2_out_t *o, void **data) {
  if (job->v2_mixed) return -EDOM;
  size_t esz = lp_dtype_size(job->v2_dtype), bytes = 0;
  for (uint32_t i = 0; i < job->nseq; i++) bytes += job->seqs[i].out_len;
  size_t inner = 1;
  for (int d = 0; d < job->v2_ndim; d++) inner *= (size_t)job->v2_dims[d];
  size_t per_row = per_segment ? inner : job->seqs[0].len * inner;
  if (!esz || o->ndim + job->v2_ndim > LP_TENSOR_MAX_DIMS || bytes != job->proto.v2.rows * per_row * esz)
    return -EDOM;
  for (int d = 0; d < job->v2_ndim; d++) o->shape[o->ndim++] = job->v2_dims[d];
  char *all = malloc(bytes ? bytes : 1);
  if (!all) return -ENOMEM;
  size_t at = 0;
  for (uint32_t i = 0; i < job->nseq; i++) {
    const lp_seq_t *sq = &job->seqs[i];
    lp_tensor_put_raw((uint8_t *)all + at, &sq->ans->out, sq->out_first, sq->out_n);
    at += job->seqs[i].out_len;
  }
  o->dtype = job->v2_dtype;
  o->count = bytes / esz;
  *data = all;
  return 0;
}

/* A lanepack-JSON backend's parts: every number as FP64, whatever its value. */
static int text_output(lp_job_t *job, int per_segment, lp_v2_out_t *o, void **data) {
  size_t n = job->seqs[0].len, cap = 0;
  for (uint32_t i = 0; i < job->nseq; i++) cap += job->seqs[i].out_len; /* >= one byte per number */
  double *vals = malloc((cap + 1) * sizeof(double));
  if (!vals) return -ENOMEM;
  size_t nv = 0;
  int64_t inner = -1;
  int rc = 0;
  for (uint32_t i = 0; i < job->nseq && !rc; i++) {
    json_error_t je;
    const lp_seq_t *sq = &job->seqs[i];
    lp_buf_t text; /* a per-token span is the array's inside */
    lp_buf_init(&text);
    if (sq->out_wrap) lp_buf_puts(&text, "[");
    lp_buf_append(&text, sq->out, sq->out_len);
    if (sq->out_wrap) lp_buf_puts(&text, "]");
    json_t *v = text.oom ? NULL : json_loadb(text.data, text.len, JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL, &je);
    lp_buf_free(&text);
    if (!v) rc = -EPROTO;
    else if (per_segment) rc = collect(v, vals, &nv, cap, &inner);
    else if (!json_is_array(v) || json_array_size(v) != n) rc = -EPROTO;
    else
      for (size_t j = 0; j < n && !rc; j++) rc = collect(json_array_get(v, j), vals, &nv, cap, &inner);
    json_decref(v);
  }
  size_t rows = job->proto.v2.rows * (per_segment ? 1 : n);
  if (!rc && nv != rows * (size_t)(inner > 0 ? inner : 1)) rc = -EPROTO;
  if (rc) {
    free(vals);
    return -EPROTO; /* the backend's values are not numbers: a lanepack-JSON backend's own form */
  }
  if (inner > 0) o->shape[o->ndim++] = inner;
  o->dtype = LP_DT_FP64;
  o->count = nv;
  *data = vals;
  return 0;
}

int lp__v2_answer(lp_job_t *job, int per_segment, lp_buf_t *out_body, const char **ctype,
                  char *hdr, size_t hdrlen) {
  lp_v2_out_t o = {.name = lp__v2_output_name_of(front_model_cfg(job)), .ndim = 0};
  o.shape[o.ndim++] = (int64_t)job->proto.v2.rows;
  if (!per_segment) o.shape[o.ndim++] = (int64_t)job->seqs[0].len;
  void *data = NULL;
  int rc = job->v2_dtype != LP_DT_INVALID ? typed_output(job, per_segment, &o, &data)
                                          : text_output(job, per_segment, &o, &data);
  if (rc) return rc;
  o.data = data;
  lp_buf_t members;
  lp_buf_init(&members);
  put_members(&members, job);
  size_t hl = 0;
  lp_buf_reset(out_body);
  rc = members.oom ? -ENOMEM
                   : lp_v2_write(out_body, lp_buf_cstr(&members), "outputs", &o, 1, job->proto.v2.binary, &hl);
  lp_buf_free(&members);
  free(data);
  if (rc) return rc;
  *ctype = job->proto.v2.binary ? "application/octet-stream" : "application/json";
  hdr[0] = '\0';
  if (job->proto.v2.binary) snprintf(hdr, hdrlen, "Inference-Header-Content-Length: %zu\r\n", hl);
  return 0;
}

/* ---- routes ---- */

int lp__v2_route(lp_front_t *f, lp_http_req_t *req) {
  const char *name;
  size_t nlen;
  lp_v2_route_t r = lp_v2_route(req->url, req->path_len, &name, &nlen);
  if (r == LP_V2_NOT_V2) return 0;
  /* the name as the client's library percent-encoded it; an undecodable one
   * is looked up as sent (and found by no model) */
  char dec[LP_NAME_MAX];
  long dl = lp_urlpath_decode(name, nlen, dec, sizeof(dec));
  if (dl >= 0) {
    name = dec;
    nlen = (size_t)dl;
  }
  if (r == LP_V2_SERVER) {
    static const char meta[] = "{\"name\":\"lanepack\",\"version\":\"" LP_VERSION
                               "\",\"extensions\":[\"binary_tensor_data\",\"schedule_policy\"]}\n";
    lp_proxy_count(f, LP_ROUTE_V2, 200);
    lp_http_respond(req, 200, NULL, "application/json", meta, sizeof(meta) - 1);
    return 1;
  }
  if (r == LP_V2_LIVE) {
    lp_proxy_count(f, LP_ROUTE_V2, 200);
    lp_http_respond(req, 200, NULL, "application/json", "{}\n", 3);
    return 1;
  }
  if (r == LP_V2_READY) {
    lp__front_page(f, req, LP_ROUTE_V2, r);
    return 1;
  }
  if (r == LP_V2_UNKNOWN) {
    lp__v2_reject(f, req, 404, "not_found", "no such route");
    return 1;
  }
  lp_model_t *m = lp__v2_find_model(f->shared->models, f->cfg, name, nlen);
  if (!m) {
    char msg[200];
    snprintf(msg, sizeof(msg), "no model named '%.*s'", (int)(nlen > 64 ? 64 : nlen), name);
    lp__v2_reject(f, req, 404, "unknown_model", msg);
  } else if (r == LP_V2_MODEL || r == LP_V2_MODEL_READY) {
    lp__front_page(f, req, LP_ROUTE_V2, r);
  } else {
    infer(f, req, m);
  }
  return 1;
}
