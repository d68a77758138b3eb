/* The link to Open Inference Protocol (v2) backends: a batch's layout as one
 * inference request (binary tensors by default) on the model that was compiled
 * for its shape, and the answer's output sliced back per sequence (the shapes'
 * readiness is v2probe.c's). */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lanepack/log.h"
#include "lanepack/v2.h"
#include "proxy.h"

/* The backend's model for a shape: the template with {lanes}, {bucket} and
 * {model} filled in. Returns 0 or -ENAMETOOLONG. */
int lp__v2_model_name(const lp_model_t *m, int shape, char *out, size_t cap) {
  const char *t = m->cfg->v2.model[0] ? m->cfg->v2.model : m->cfg->name;
  const lp_shape_t *sh = &m->shapes.shapes[shape];
  size_t k = 0;
  while (*t) {
    char num[24];
    const char *put = NULL;
    size_t skip = 1;
    if (strncmp(t, "{lanes}", 7) == 0) {
      snprintf(num, sizeof(num), "%u", sh->lanes);
      put = num;
      skip = 7;
    } else if (strncmp(t, "{bucket}", 8) == 0) {
      snprintf(num, sizeof(num), "%u", sh->bucket);
      put = num;
      skip = 8;
    } else if (strncmp(t, "{model}", 7) == 0) {
      put = m->cfg->name;
      skip = 7;
    }
    size_t n = put ? strlen(put) : 1;
    if (k + n + 1 > cap) return -ENAMETOOLONG;
    memcpy(out + k, put ? put : t, n);
    k += n;
    t += skip;
  }
  out[k] = '\0';
  return 0;
}

/* Appends id as a JSON string escaped once more to sit inside a JSON string:
 * a"b becomes \"a\\\"b\" (request ids are printable ASCII without quotes or
 * backslashes, but nothing here relies on it). */
static void put_id_in_string(lp_buf_t *b, const char *id) {
  static const char hex[] = "0123456789abcdef";
  lp_buf_puts(b, "\\\"");
  const unsigned char *c = (const unsigned char *)(id ? id : "");
  for (;;) {
    const unsigned char *plain = c; /* a run that needs no escape goes in one copy */
    while (*c && *c != '"' && *c != '\\' && *c >= 0x20) c++;
    if (c > plain) lp_buf_append(b, (const char *)plain, (size_t)(c - plain));
    if (!*c) break;
    if (*c == '"') lp_buf_puts(b, "\\\\\\\"");   /* \" inside, each escaped again */
    else if (*c == '\\') lp_buf_puts(b, "\\\\\\\\"); /* \\ inside */
    else {
      char u[8] = {'\\', '\\', 'u', '0', '0', hex[*c >> 4], hex[*c & 15], 0}; /* \u00XX inside */
      lp_buf_puts(b, u);
    }
    c++;
  }
  lp_buf_puts(b, "\\\"");
}

int lp__v2_gathered(const lp_model_t *m) {
  const lp_v2_config_t *c = &m->cfg->v2;
  return m->cfg->protocol == LP_PROTO_V2 && c->binary && !c->int64 && !m->cfg->ragged;
}

int lp__v2_encode(lp_model_t *m, lp_batch_t *bt, const char *const *item_ids, const char *const *item_traces) {
  const lp_v2_config_t *c = &m->cfg->v2;
  const lp_layout_t *l = &bt->layout;
  lp_dtype_t it = c->int64 ? LP_DT_INT64 : LP_DT_INT32;
  lp_v2_out_t in[3];
  int n = 0;
  if (l->ragged) {
    static const char *const names[3] = {"input_ids", "cu_seqlens", "max_seqlen"};
    int32_t max = (int32_t)l->max_seqlen;
    bt->v2_scalar = max;
    const void *data[3] = {l->input_ids, l->cu_seqlens, &bt->v2_scalar};
    int64_t dim[3] = {(int64_t)l->bucket, (int64_t)l->nsegs + 1, 1};
    for (int k = 0; k < 3; k++)
      in[n++] = (lp_v2_out_t){.name = k == 0 ? c->inputs[0] : names[k], .dtype = it, .ndim = 1,
                              .shape = {dim[k]}, .data = data[k], .count = (size_t)dim[k],
                              .widen_i32 = c->int64};
  } else {
    const int32_t *data[3] = {l->input_ids, l->segment_ids, l->position_ids};
    for (int k = 0; k < 3; k++) {
      if (!c->inputs[k][0]) continue;
      in[n++] = (lp_v2_out_t){.name = c->inputs[k], .dtype = it, .ndim = 2,
                              .shape = {l->lanes, l->bucket}, .data = l->segs_only ? NULL : data[k],
                              .count = (size_t)l->lanes * l->bucket, .widen_i32 = c->int64};
    }
  }
  /* the request's members; its clients' request ids, in segment order, ride
   * as a string parameter (parameters hold scalars only) holding a JSON array
   * of strings, so an id with a comma in it stays one id */
  lp_buf_t *mb = &m->v2_members;
  lp_buf_reset(mb);
  lp_buf_printf(mb, "\"id\":\"%llu\",\"parameters\":{", (unsigned long long)bt->id);
  if (!c->output[0]) lp_buf_printf(mb, "\"binary_data_output\":%s,", c->binary ? "true" : "false");
  lp_buf_puts(mb, "\"lanepack_request_ids\":\"[");
  for (size_t i = 0; item_ids && i < l->nsegs; i++) {
    if (i) lp_buf_puts(mb, ",");
    put_id_in_string(mb, item_ids[l->segs[i].item]);
  }
  lp_buf_puts(mb, "]\",\"lanepack_traceparents\":\"[");
  for (size_t i = 0; item_traces && i < l->nsegs; i++) {
    if (i) lp_buf_puts(mb, ",");
    put_id_in_string(mb, item_traces[l->segs[i].item]);
  }
  lp_buf_puts(mb, "]\"}");
  if (c->output[0])
    lp_buf_printf(mb, ",\"outputs\":[{\"name\":\"%s\",\"parameters\":{\"binary_data\":%s}}]", c->output,
                  c->binary ? "true" : "false");
  lp_buf_append(mb, "", 1); /* a C string from here */
  if (mb->oom) return -ENOMEM;
  const char *members = mb->data;
  size_t hl;
  lp_buf_reset(&bt->body);
  if (l->segs_only) {
    /* the header written, each tensor's bytes borrowed (lp__v2_gathered) */
    if (lp_v2_write(lp_gather_buf(&bt->gather), members, "inputs", in, n, 1, &hl)) return -ENOMEM;
    for (int k = 0; k < 3; k++)
      if (c->inputs[k][0]) lp_rectbin_gather(&m->rect, &bt->gather, l, bt->refs, k);
    if (bt->gather.oom || bt->gather.own.oom) return -ENOMEM;
  } else if (lp_v2_write(&bt->body, members, "inputs", in, n, c->binary, &hl)) {
    return -ENOMEM;
  }
  char name[160];
  if (lp__v2_model_name(m, bt->shape, name, sizeof(name))) return -ENAMETOOLONG;
  snprintf(bt->url, sizeof(bt->url), "%s/v2/models/%s/infer", bt->backend->url, name);
  snprintf(bt->v2_header, sizeof(bt->v2_header), "Inference-Header-Content-Length: %zu", hl);
  size_t k = 0;
  bt->headers[k++] = c->binary ? "Content-Type: application/octet-stream" : "Content-Type: application/json";
  if (c->binary) bt->headers[k++] = bt->v2_header;
  if (bt->trace_header[0]) bt->headers[k++] = bt->trace_header;
  if (bt->state_header[0]) bt->headers[k++] = bt->state_header;
  bt->headers[k] = NULL;
  return 0;
}

void lp__v2_adopt(lp_batch_t *bt, lp_answer_t *a) {
  if (!bt->v2_open || !bt->v2out) return;
  lp__answer_adopt(a, &bt->v2msg.t[bt->v2out - bt->v2msg.t]);
  bt->v2out = &a->out;
}

void lp__v2_slice(lp_model_t *m, const lp_batch_t *bt, const lp_segment_t *g, lp_seq_t *s) {
  const lp_layout_t *l = &bt->layout;
  const lp_tensor_t *t = bt->v2out;
  if (!bt->v2_open || !t || !m->answer || t != &m->answer->out) {
    /* the answer could not be kept (no memory): the sequence's job fails */
    lp__seq_done(s, bt, g, NULL, NULL, 0, bt->v2_per_segment);
    return;
  }
  int lead = l->ragged ? 1 : 2;
  size_t inner = 1;
  for (int d = lead; d < t->ndim; d++) inner *= (size_t)t->shape[d];
  size_t per_row = l->ragged ? inner : (size_t)t->shape[1] * inner;
  size_t i = (size_t)(g - l->segs);
  size_t first, n;
  if (bt->v2_per_segment) {
    first = l->ragged ? i * inner : g->lane * per_row + (g->segment - 1) * inner;
    n = inner;
  } else {
    first = l->ragged ? (size_t)g->offset * inner : g->lane * per_row + (size_t)g->offset * inner;
    n = (size_t)g->length * inner;
  }
  /* a span of the tensor, not its values: the front writes them (raw for a
   * v2 client, JSON text for /v1) */
  lp__seq_done_tensor(s, bt, g, m->answer, first, n, inner, t->ndim - lead, t->shape + lead, bt->v2_per_segment);
}


