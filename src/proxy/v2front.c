/* Clients that speak the Open Inference Protocol: POST /v2/models/M/infer with
 * an input_ids tensor (INT32 or INT64; [n], [1, n] or [k, n]), JSON or binary;
 * Triton's priority and timeout parameters; the answer as the backend's output
 * tensor of shape [k, n, ...] (per token) or [k, ...] (per segment), in binary
 * when asked; health and metadata routes; errors as {"error": "..."}. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lanepack/log.h"
#include "lanepack/v2.h"
#include "proxy.h"

/* An error in the v2 form, with our status. */
void lp__v2_reject(lp_proxy_t *p, lp_http_req_t *req, int status, const char *code, const char *msg) {
  lp__v2_reject_job(p, req, status, code, msg, NULL);
}

void lp__v2_reject_job(lp_proxy_t *p, lp_http_req_t *req, int status, const char *code, const char *msg,
                       const lp_job_t *job) {
  lp_buf_t b;
  lp_buf_init(&b);
  char text[400];
  snprintf(text, sizeof(text), "%s: %s", code, msg);
  lp_buf_puts(&b, "{\"error\":");
  lp_buf_json_str(&b, text, strlen(text));
  lp_buf_puts(&b, "}\n");
  lp_proxy_count(p, LP_ROUTE_V2_INFER, status);
  lp__count_rejection(p, code);
  lp__access_log(p, req, status, job);
  const char *hdr = status == 429 || status == 503 ? "Retry-After: 1\r\n" : NULL;
  lp_http_respond(req, status, hdr, "application/json", b.data, b.len);
  lp_buf_free(&b);
}

static lp_model_t *find_model(lp_proxy_t *p, const char *name, size_t n) {
  for (size_t i = 0; i < p->nmodels; i++)
    if (strlen(p->models[i].cfg->name) == n && memcmp(p->models[i].cfg->name, name, n) == 0)
      return &p->models[i];
  return NULL;
}

/* The output's name as clients see it: the backend's. */
static const char *output_name(const lp_model_t *m) {
  return m->cfg->protocol == LP_PROTO_V2 && m->cfg->v2.output[0] ? m->cfg->v2.output : "output";
}

static void metadata(lp_proxy_t *p, lp_http_req_t *req, lp_model_t *m) {
  lp_buf_t b;
  lp_buf_init(&b);
  lp_buf_puts(&b, "{\"name\":");
  lp_buf_json_str(&b, m->cfg->name, strlen(m->cfg->name));
  lp_buf_puts(&b, ",\"versions\":[\"1\"],\"platform\":\"lanepack\",\"inputs\":[{\"name\":\"input_ids\","
                  "\"datatype\":\"INT64\",\"shape\":[-1,-1]}],\"outputs\":[{\"name\":");
  const char *on = output_name(m);
  lp_buf_json_str(&b, on, strlen(on));
  lp_buf_puts(&b, ",\"datatype\":\"FP32\",\"shape\":[-1,-1,-1]}],\"parameters\":{\"max_sequence_length\":");
  lp_buf_u64(&b, lp_bucket_set_max_len(&m->shapes));
  lp_buf_puts(&b, "}}\n");
  lp_proxy_count(p, LP_ROUTE_V2, 200);
  lp_http_respond(req, 200, NULL, "application/json", b.data, b.len);
  lp_buf_free(&b);
}

static void status_only(lp_proxy_t *p, lp_http_req_t *req, int ok) {
  lp_proxy_count(p, LP_ROUTE_V2, ok ? 200 : 503);
  lp_http_respond(req, ok ? 200 : 503, NULL, "application/json", ok ? "{}\n" : "{\"error\":\"not ready\"}\n",
                  ok ? 3 : 21);
}

static void infer(lp_proxy_t *p, lp_http_req_t *req, lp_model_t *m) {
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
  if (!t) bad = "the request needs an 'input_ids' tensor";
  else if (t->dtype != LP_DT_INT32 && t->dtype != LP_DT_INT64) bad = "'input_ids' must be INT32 or INT64";
  else if (t->ndim < 1 || t->ndim > 2) bad = "'input_ids' must have shape [n], [1, n] or [k, n]";
  else if (msg.n > 1) bad = "'input_ids' is the only input";
  for (int k = 0; !bad && k < msg.nwant; k++)
    if (strcmp(msg.want[k], output_name(m)) != 0) bad = "unknown output requested";
  size_t k = !t || t->ndim == 1 ? 1 : (size_t)t->shape[0];
  size_t n = !t ? 0 : t->ndim == 1 ? (size_t)t->shape[0] : (size_t)t->shape[1];
  if (!bad && k > p->cfg.max_sequences_per_request) bad = "too many sequences in one request";
  if (!bad && (k == 0 || n == 0)) bad = "'input_ids' is empty";
  int32_t *tokens = NULL;
  if (!bad) {
    tokens = malloc(k * n * sizeof(int32_t));
    if (!tokens) bad = "proxy out of memory";
    for (size_t i = 0; tokens && i < k * n; i++) {
      int64_t v = lp_tensor_int(t, i);
      if (v < 0 || v > INT32_MAX) {
        snprintf(err, sizeof(err), "input_ids[%zu] is not in [0, 2147483647]", i);
        bad = err;
        break;
      }
      tokens[i] = (int32_t)v;
    }
  }
  if (bad) {
    free(tokens);
    lp_v2_msg_free(&msg);
    return lp__v2_reject(p, req, 400, "bad_request", bad);
  }
  int priority = msg.has_priority ? (int)(msg.priority > 1000 ? 1000 : msg.priority < -1000 ? -1000 : msg.priority) : 0;
  double deadline_ms = msg.has_timeout && msg.timeout_us > 0 ? (double)msg.timeout_us / 1000.0 : -1;
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
  job->v2_binary = binary;
  job->v2_rows = k;
  job->req = req;
  memcpy(job->request_id, req->request_id, sizeof(job->request_id));
  req->app = job;
  lp__model_admit(m, job);
}

/* ---- the answer ---- */

/* Parses one sequence's output text back into numbers; sets the tensor's
 * trailing dimension (0 for scalars) on first use, and checks the others agree. */
static int collect(json_t *v, double *vals, size_t *nv, size_t cap, int64_t *inner, int *ints) {
  if (json_is_array(v)) {
    size_t m = json_array_size(v);
    if (*inner < 0) *inner = (int64_t)m;
    if ((int64_t)m != *inner) return -1;
    for (size_t i = 0; i < m; i++) {
      json_t *x = json_array_get(v, i);
      if (!json_is_number(x) || *nv >= cap) return -1;
      *ints &= json_is_integer(x);
      vals[(*nv)++] = json_number_value(x);
    }
    return 0;
  }
  if (*inner < 0) *inner = 0;
  if (*inner != 0 || !json_is_number(v) || *nv >= cap) return -1;
  *ints &= json_is_integer(v);
  vals[(*nv)++] = json_number_value(v);
  return 0;
}

int lp__v2_answer(lp_job_t *job, int per_segment, lp_buf_t *out_body, const char **ctype,
                  char *hdr, size_t hdrlen) {
  lp_model_t *m = job->model;
  size_t k = job->v2_rows, n = job->seqs[0].len;
  /* every output value, row-major: rows x (tokens per row or 1) x inner */
  size_t cap = 0;
  for (uint32_t i = 0; i < job->nseq; i++) cap += job->seqs[i].out_len; /* >= one byte per number */
  double *vals = malloc((cap + 1) * sizeof(double));
  if (!vals) return -ENOMEM;
  size_t nv = 0;
  int64_t inner = -1;
  int ints = 1, rc = 0;
  for (uint32_t i = 0; i < job->nseq && !rc; i++) {
    json_error_t je;
    json_t *v = json_loadb(job->seqs[i].out, job->seqs[i].out_len, JSON_DECODE_ANY, &je);
    if (!v) rc = -EPROTO;
    else if (per_segment) rc = collect(v, vals, &nv, cap, &inner, &ints);
    else if (!json_is_array(v) || json_array_size(v) != n) rc = -EPROTO;
    else
      for (size_t j = 0; j < n && !rc; j++) rc = collect(json_array_get(v, j), vals, &nv, cap, &inner, &ints);
    json_decref(v);
  }
  if (rc) {
    free(vals);
    return -EPROTO; /* the backend's values are not numbers: a lanepack-JSON backend's own form */
  }
  lp_v2_out_t o = {.name = output_name(m), .ndim = 0};
  o.shape[o.ndim++] = (int64_t)k;
  if (!per_segment) o.shape[o.ndim++] = (int64_t)n;
  if (inner > 0) o.shape[o.ndim++] = inner;
  o.count = nv;
  void *data = vals;
  /* converted in place, through memcpy: element i is written no later than it is read */
  if (ints) {
    for (size_t i = 0; i < nv; i++) {
      int64_t x = (int64_t)vals[i];
      memcpy((char *)vals + i * 8, &x, 8);
    }
    o.dtype = LP_DT_INT64;
  } else if (m->v2_out_dtype == LP_DT_FP64 || m->cfg->protocol != LP_PROTO_V2) {
    o.dtype = LP_DT_FP64;
  } else {
    for (size_t i = 0; i < nv; i++) {
      float x = (float)vals[i];
      memcpy((char *)vals + i * 4, &x, 4);
    }
    o.dtype = LP_DT_FP32;
  }
  o.data = data;
  lp_buf_t members;
  lp_buf_init(&members);
  lp_buf_puts(&members, "\"model_name\":");
  lp_buf_json_str(&members, m->cfg->name, strlen(m->cfg->name));
  lp_buf_puts(&members, ",\"model_version\":\"1\"");
  if (job->id_json) {
    lp_buf_puts(&members, ",\"id\":");
    lp_buf_puts(&members, job->id_json);
  }
  size_t hl = 0;
  lp_buf_reset(out_body);
  rc = lp_v2_write(out_body, lp_buf_cstr(&members), "outputs", &o, 1, job->v2_binary, &hl);
  lp_buf_free(&members);
  free(vals);
  if (rc) return rc;
  *ctype = job->v2_binary ? "application/octet-stream" : "application/json";
  hdr[0] = '\0';
  if (job->v2_binary) snprintf(hdr, hdrlen, "Inference-Header-Content-Length: %zu\r\n", hl);
  return 0;
}

/* ---- routes ---- */

int lp__v2_route(lp_proxy_t *p, lp_http_req_t *req) {
  const char *name;
  size_t nlen;
  lp_v2_route_t r = lp_v2_route(req->url, req->path_len, &name, &nlen);
  if (r == LP_V2_NOT_V2) return 0;
  if (r == LP_V2_SERVER) {
    static const char meta[] = "{\"name\":\"lanepack\",\"version\":\"" LP_VERSION
                               "\",\"extensions\":[\"binary_tensor_data\",\"schedule_policy\"]}\n";
    lp_proxy_count(p, LP_ROUTE_V2, 200);
    lp_http_respond(req, 200, NULL, "application/json", meta, sizeof(meta) - 1);
    return 1;
  }
  if (r == LP_V2_LIVE || r == LP_V2_READY) {
    int ready = !p->unready;
    for (size_t i = 0; r == LP_V2_READY && i < p->nmodels && ready; i++) ready = lp__model_ready(&p->models[i]);
    status_only(p, req, r == LP_V2_LIVE || ready);
    return 1;
  }
  if (r == LP_V2_UNKNOWN) {
    lp__v2_reject(p, req, 404, "not_found", "no such route");
    return 1;
  }
  lp_model_t *m = find_model(p, name, nlen);
  if (!m) {
    char msg[200];
    snprintf(msg, sizeof(msg), "no model named '%.*s'", (int)(nlen > 64 ? 64 : nlen), name);
    lp__v2_reject(p, req, 404, "unknown_model", msg);
  } else if (r == LP_V2_MODEL) {
    metadata(p, req, m);
  } else if (r == LP_V2_MODEL_READY) {
    status_only(p, req, !p->unready && lp__model_ready(m));
  } else {
    infer(p, req, m);
  }
  return 1;
}
