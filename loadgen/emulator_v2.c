/* The emulator's Open Inference Protocol side: one v2 model per compiled shape,
 * named by a template; every batch decoded (binary tensors or JSON) and checked
 * as strictly as a JSON batch; answers in the form the request asked for. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emulator.h"
#include "lanepack/buf.h"
#include "lanepack/emu.h"
#include "lanepack/v2.h"

#ifndef LP_VERSION
#define LP_VERSION "0.1.0"
#endif

static void model_name(const emu_t *emu, uint32_t lanes, uint32_t bucket, char *out, size_t cap) {
  size_t k = 0;
  for (const char *t = emu->v2_model; *t && k + 24 < cap;) {
    if (strncmp(t, "{lanes}", 7) == 0) {
      k += (size_t)snprintf(out + k, cap - k, "%u", lanes);
      t += 7;
    } else if (strncmp(t, "{bucket}", 8) == 0) {
      k += (size_t)snprintf(out + k, cap - k, "%u", bucket);
      t += 8;
    } else {
      out[k++] = *t++;
    }
  }
  out[k] = '\0';
}

/* The shape whose model this is; -1 for the ragged model (when it takes
 * ragged batches and no shape's name matches), -2 for no model. */
static int model_shape(const emu_t *emu, const char *name, size_t n) {
  char buf[192];
  for (size_t i = 0; i < emu->shapes.count; i++) {
    model_name(emu, emu->shapes.shapes[i].lanes, emu->shapes.shapes[i].bucket, buf, sizeof(buf));
    if (strlen(buf) == n && memcmp(buf, name, n) == 0) return (int)i;
  }
  return emu->ragged_ok && n > 0 ? -1 : -2;
}

/* An error as v2 servers give it: {"error": "..."}. */
static void v2_error(lp_http_req_t *req, int status, const char *msg) {
  lp_buf_t b;
  lp_buf_init(&b);
  lp_buf_puts(&b, "{\"error\":");
  lp_buf_json_str(&b, msg, strlen(msg));
  lp_buf_puts(&b, "}");
  lp_http_respond(req, status, NULL, "application/json", b.data, b.len);
  lp_buf_free(&b);
}

static void respond_json(lp_http_req_t *req, lp_buf_t *b) {
  lp_http_respond(req, 200, NULL, "application/json", b->data, b->len);
  lp_buf_free(b);
}

static void metadata(emu_t *emu, lp_http_req_t *req, int shape, const char *name, size_t n) {
  lp_buf_t b;
  lp_buf_init(&b);
  uint32_t lanes = shape >= 0 ? emu->shapes.shapes[shape].lanes : 0;
  uint32_t bucket = shape >= 0 ? emu->shapes.shapes[shape].bucket : 0;
  lp_buf_puts(&b, "{\"name\":");
  lp_buf_json_str(&b, name, n);
  lp_buf_puts(&b, ",\"versions\":[\"1\"],\"platform\":\"lanepack-emulator\",\"inputs\":[");
  static const char *const rect[3] = {"input_ids", "segment_ids", "position_ids"};
  static const char *const flat[3] = {"input_ids", "cu_seqlens", "max_seqlen"};
  for (int k = 0; k < 3; k++) {
    if (shape >= 0)
      lp_buf_printf(&b, "%s{\"name\":\"%s\",\"datatype\":\"INT32\",\"shape\":[%u,%u]}", k ? "," : "",
                    rect[k], lanes, bucket);
    else
      lp_buf_printf(&b, "%s{\"name\":\"%s\",\"datatype\":\"INT32\",\"shape\":[-1]}", k ? "," : "", flat[k]);
  }
  lp_buf_printf(&b, "],\"outputs\":[{\"name\":\"%s\",\"datatype\":\"%s\",\"shape\":[", emu->v2_output,
                emu->v2_dims ? "FP32" : "INT32");
  if (shape >= 0) lp_buf_printf(&b, "%u,%d", lanes, emu->per_segment ? -1 : (int)bucket);
  else lp_buf_puts(&b, "-1");
  if (emu->v2_dims) lp_buf_printf(&b, ",%u", emu->v2_dims);
  lp_buf_puts(&b, "]}]}");
  respond_json(req, &b);
}

/* Reads an integer tensor of exactly want elements into out (int32 values). */
static const char *int_input(const lp_v2_msg_t *m, const char *name, int ndim, const int64_t *shape,
                             size_t want, int32_t *out, char *msg, size_t cap) {
  const lp_tensor_t *t = lp_v2_find(m, name);
  if (!t) return snprintf(msg, cap, "input '%s' is missing", name), msg;
  if (t->dtype != LP_DT_INT32 && t->dtype != LP_DT_INT64)
    return snprintf(msg, cap, "input '%s' is %s, want INT32 or INT64", name, lp_dtype_name(t->dtype)), msg;
  int same = t->ndim == ndim;
  for (int d = 0; same && d < ndim; d++) same = shape[d] < 0 || t->shape[d] == shape[d];
  if (!same || t->count != want) return snprintf(msg, cap, "input '%s' has the wrong shape", name), msg;
  for (size_t i = 0; i < want; i++) {
    int64_t v = lp_tensor_int(t, i);
    if (v < INT32_MIN || v > INT32_MAX) return snprintf(msg, cap, "input '%s'[%zu] is out of range", name, i), msg;
    out[i] = (int32_t)v;
  }
  return NULL;
}

/* Segment and position ids, read left to right per lane: runs of 1, 2, ...,
 * each contiguous, positions restarting at 0; padding 0 and 0. */
static const char *check_rect(const job_t *j, char *msg, size_t cap) {
  for (uint32_t lane = 0; lane < j->lanes; lane++) {
    const int32_t *sid = j->sids + (size_t)lane * j->bucket, *pos = j->pos + (size_t)lane * j->bucket;
    int32_t next = 1;
    for (uint32_t k = 0; k < j->bucket;) {
      if (sid[k] == 0) {
        if (pos[k] != 0)
          return snprintf(msg, cap, "padding at lane %u slot %u must have position id 0", lane, k), msg;
        k++;
        continue;
      }
      if (sid[k] != next)
        return snprintf(msg, cap, "segment ids must count 1, 2, ... per lane: lane %u slot %u has %d", lane, k,
                        sid[k]), msg;
      uint32_t e = k;
      while (e < j->bucket && sid[e] == sid[k]) {
        if (pos[e] != (int32_t)(e - k))
          return snprintf(msg, cap, "position_ids at lane %u slot %u should restart at 0 per segment", lane, e),
                 msg;
        e++;
      }
      next++;
      k = e;
    }
  }
  return NULL;
}

static void infer(emu_t *emu, lp_http_req_t *req, int shape, const char *name, size_t n) {
  char msg[300];
  if (req->method != LP_HTTP_POST) return v2_error(req, 405, "use POST");
  if (req->inference_header_len == -2) return v2_error(req, 400, "bad Inference-Header-Content-Length");
  job_t *j = calloc(1, sizeof(*j));
  if (!j) return v2_error(req, 500, "emulator out of memory");
  j->emu = emu;
  j->v2 = 1;
  j->shape = shape;
  snprintf(j->v2_model, sizeof(j->v2_model), "%.*s", (int)n, name);
  lp_v2_msg_t m;
  const char *bad = NULL;
  int rc = lp_v2_decode(&m, req->body, req->body_len, req->inference_header_len, 1, msg, sizeof(msg));
  if (rc) bad = msg;
  if (!bad && emu->log_batches) {
    size_t hl = req->inference_header_len >= 0 && (size_t)req->inference_header_len < req->body_len
                    ? (size_t)req->inference_header_len : req->body_len;
    emu_log_batch(m.id, req->body, hl, "\"lanepack_request_ids\":\"", "\"lanepack_traceparents\":\"", '"',
                  req->traceparent, req->tracestate);
  }
  if (!bad) {
    snprintf(j->v2_id, sizeof(j->v2_id), "%s", m.id);
    j->v2_binary = m.binary_data_output;
    for (int k = 0; k < m.nwant; k++) {
      if (strcmp(m.want[k], emu->v2_output) != 0) {
        snprintf(msg, sizeof(msg), "unknown output '%s'", m.want[k]);
        bad = msg;
      }
      j->v2_binary |= m.want_binary[k];
    }
  }
  if (!bad && shape >= 0) {
    j->lanes = emu->shapes.shapes[shape].lanes;
    j->bucket = emu->shapes.shapes[shape].bucket;
    size_t slots = (size_t)j->lanes * j->bucket;
    j->ids = malloc(slots * sizeof(int32_t));
    j->sids = malloc(slots * sizeof(int32_t));
    j->pos = malloc(slots * sizeof(int32_t));
    int64_t dims[2] = {j->lanes, j->bucket};
    if (!j->ids || !j->sids || !j->pos) bad = "emulator out of memory";
    if (!bad) bad = int_input(&m, "input_ids", 2, dims, slots, j->ids, msg, sizeof(msg));
    if (!bad) bad = int_input(&m, "segment_ids", 2, dims, slots, j->sids, msg, sizeof(msg));
    if (!bad) bad = int_input(&m, "position_ids", 2, dims, slots, j->pos, msg, sizeof(msg));
    if (!bad) bad = check_rect(j, msg, sizeof(msg));
  } else if (!bad) {
    const lp_tensor_t *ids = lp_v2_find(&m, "input_ids"), *cu = lp_v2_find(&m, "cu_seqlens");
    int64_t any[1] = {-1}, one[1] = {1};
    if (!ids || !cu || ids->ndim != 1 || cu->ndim != 1) {
      bad = "a ragged batch needs input_ids [T], cu_seqlens [n+1] and max_seqlen [1]";
    } else {
      j->bucket = (uint32_t)ids->count;
      j->lanes = 1;
      j->ncu = cu->count;
      j->ids = malloc((ids->count + 1) * sizeof(int32_t));
      j->cu = malloc((cu->count + 1) * sizeof(int32_t));
      int32_t max = 0;
      if (!j->ids || !j->cu) bad = "emulator out of memory";
      if (!bad) bad = int_input(&m, "input_ids", 1, any, ids->count, j->ids, msg, sizeof(msg));
      if (!bad) bad = int_input(&m, "cu_seqlens", 1, any, cu->count, j->cu, msg, sizeof(msg));
      if (!bad) bad = int_input(&m, "max_seqlen", 1, one, 1, &max, msg, sizeof(msg));
      if (!bad && (j->ncu < 2 || j->cu[0] != 0 || (uint32_t)j->cu[j->ncu - 1] != j->bucket))
        bad = "cu_seqlens must run from 0 to the token count";
      int32_t longest = 0;
      for (size_t i = 1; !bad && i < j->ncu; i++) {
        if (j->cu[i] <= j->cu[i - 1]) bad = "cu_seqlens must increase";
        if (j->cu[i] - j->cu[i - 1] > longest) longest = j->cu[i] - j->cu[i - 1];
      }
      if (!bad && max != longest) bad = "max_seqlen is not the longest sequence";
    }
  }
  lp_v2_msg_free(&m);
  if (bad) {
    emu->rejected++;
    v2_error(req, 400, bad);
    emu_job_free(j);
    return;
  }
  emu_enqueue(emu, j, req);
}

int emu_v2_route(emu_t *emu, lp_http_req_t *req) {
  const char *name;
  size_t nlen;
  lp_v2_route_t r = lp_v2_route(req->url, req->path_len, &name, &nlen);
  if (r == LP_V2_NOT_V2) return 0;
  if (r == LP_V2_SERVER) {
    lp_buf_t b;
    lp_buf_init(&b);
    lp_buf_puts(&b, "{\"name\":\"lanepack-emulator\",\"version\":\"" LP_VERSION
                    "\",\"extensions\":[\"binary_tensor_data\"]}");
    respond_json(req, &b);
  } else if (r == LP_V2_LIVE || r == LP_V2_READY) {
    lp_http_respond(req, 200, NULL, "application/json", "{}", 2);
  } else if (r == LP_V2_UNKNOWN) {
    v2_error(req, 404, "no such route");
  } else {
    int shape = model_shape(emu, name, nlen);
    if (shape == -2 || emu_shapes_missing(emu)) { /* Triton while it reloads a model */
      char msg[256];
      snprintf(msg, sizeof(msg), "unknown model '%.*s'", (int)(nlen > 128 ? 128 : nlen), name);
      v2_error(req, 404, msg);
    } else if (r == LP_V2_MODEL) {
      metadata(emu, req, shape, name, nlen);
    } else if (r == LP_V2_MODEL_READY) {
      lp_http_respond(req, 200, NULL, "application/json", "{}", 2);
    } else {
      infer(emu, req, shape, name, nlen);
    }
  }
  return 1;
}

void emu_v2_answer(job_t *j) {
  emu_t *emu = j->emu;
  size_t slots = (size_t)j->lanes * j->bucket;
  int32_t *tok = calloc(slots + 1, sizeof(int32_t));
  int32_t *seg = calloc(slots + 1, sizeof(int32_t)); /* per lane, up to bucket segments */
  size_t maxseg = 0, nseg_flat = 0;
  if (!tok || !seg) {
    free(tok);
    free(seg);
    v2_error(j->req, 500, "emulator out of memory");
    return;
  }
  if (j->cu) {
    for (size_t s = 0; s + 1 < j->ncu; s++) {
      size_t a = (size_t)j->cu[s], len = (size_t)(j->cu[s + 1] - j->cu[s]);
      lp_emu_outputs(j->ids + a, len, tok + a);
      seg[nseg_flat++] = tok[a + len - 1];
    }
  } else {
    for (uint32_t lane = 0; lane < j->lanes; lane++) {
      const int32_t *sid = j->sids + (size_t)lane * j->bucket;
      size_t ns = 0;
      for (uint32_t k = 0; k < j->bucket;) {
        if (sid[k] == 0) {
          k++;
          continue;
        }
        uint32_t e = k;
        while (e < j->bucket && sid[e] == sid[k]) e++;
        lp_emu_outputs(j->ids + (size_t)lane * j->bucket + k, e - k, tok + (size_t)lane * j->bucket + k);
        seg[(size_t)lane * j->bucket + ns++] = tok[(size_t)lane * j->bucket + e - 1];
        k = e;
      }
      if (ns > maxseg) maxseg = ns;
    }
  }
  /* the output: per token or per segment, INT32 or FP32 features */
  lp_v2_out_t o = {.name = emu->v2_output};
  const int32_t *src;
  if (j->cu) {
    o.ndim = 1;
    o.shape[0] = emu->per_segment ? (int64_t)nseg_flat : (int64_t)j->bucket;
    src = emu->per_segment ? seg : tok;
    o.count = (size_t)o.shape[0];
  } else if (emu->per_segment) {
    /* compact [lanes, maxseg] from the per-lane rows */
    for (uint32_t lane = 0; lane < j->lanes; lane++)
      memmove(seg + (size_t)lane * maxseg, seg + (size_t)lane * j->bucket, maxseg * sizeof(int32_t));
    o.ndim = 2;
    o.shape[0] = j->lanes;
    o.shape[1] = (int64_t)maxseg;
    src = seg;
    o.count = (size_t)j->lanes * maxseg;
  } else {
    o.ndim = 2;
    o.shape[0] = j->lanes;
    o.shape[1] = j->bucket;
    src = tok;
    o.count = slots;
  }
  float *feat = NULL;
  if (emu->v2_dims) {
    feat = malloc(o.count * emu->v2_dims * sizeof(float) + 1);
    for (size_t i = 0; feat && i < o.count; i++)
      for (unsigned k = 0; k < emu->v2_dims; k++) feat[i * emu->v2_dims + k] = lp_emu_feature(src[i], k);
    o.shape[o.ndim++] = emu->v2_dims;
    o.count *= emu->v2_dims;
    o.dtype = LP_DT_FP32;
    o.data = feat;
  } else {
    o.dtype = LP_DT_INT32;
    o.data = src;
  }
  lp_buf_t members, body;
  lp_buf_init(&members);
  lp_buf_init(&body);
  lp_buf_puts(&members, "\"model_name\":");
  lp_buf_json_str(&members, j->v2_model, strlen(j->v2_model));
  lp_buf_puts(&members, ",\"model_version\":\"1\",\"id\":");
  lp_buf_json_str(&members, j->v2_id, strlen(j->v2_id));
  size_t hl = 0;
  int rc = (emu->v2_dims && !feat) || lp_v2_write(&body, lp_buf_cstr(&members), "outputs", &o, 1,
                                                  j->v2_binary, &hl);
  free(tok);
  free(seg);
  free(feat);
  lp_buf_free(&members);
  if (rc) {
    lp_buf_free(&body);
    v2_error(j->req, 500, "emulator out of memory");
    return;
  }
  if (j->fault == FAULT_GARBAGE) {
    /* a wrong answer: cut short, or a header length that lies */
    if (lp_rng_below(&emu->rng, 2) && body.len > 8) body.len = body.len * 2 / 3;
    else hl += 3;
  }
  char hdr[160];
  int k = snprintf(hdr, sizeof(hdr), "X-Device-Time-Us: %llu\r\n", (unsigned long long)j->device_us);
  if (j->v2_binary) snprintf(hdr + k, sizeof(hdr) - (size_t)k, "Inference-Header-Content-Length: %zu\r\n", hl);
  lp_buf_t out;
  lp_buf_init(&out);
  lp_http_head(j->req, &out, 200, hdr[0] ? hdr : NULL,
               j->v2_binary ? "application/octet-stream" : "application/json", body.len);
  lp_buf_append(&out, body.data, body.len);
  lp_buf_free(&body);
  lp_http_respond_raw(j->req, &out);
  lp_buf_free(&out);
}
