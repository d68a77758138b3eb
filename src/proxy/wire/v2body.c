/* Runs where a v2 batch's body is written: on the front that sends it for a
 * gathered body (binary INT32 rectangles), on the scheduler for one of arrays.
 * The Open Inference Protocol request from what the batch holds alone. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "lanepack/v2.h"
#include "wire/wire.h"

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

int lp__v2_body_write(lp_batch_t *bt) {
  const lp_v2_config_t *c = &bt->v2cfg;
  const lp_layout_t *l = &bt->layout;
  const char *const *item_ids = bt->ids, *const *item_traces = bt->traces;
  bt->body_pending = LP_BODY_NONE;
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
  lp_buf_t *mb = &bt->members;
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
      if (c->inputs[k][0]) lp_rectbin_gather(bt->rect, &bt->gather, l, bt->refs, k);
    if (bt->gather.oom || bt->gather.own.oom) return -ENOMEM;
  } else if (lp_v2_write(&bt->body, members, "inputs", in, n, c->binary, &hl)) {
    return -ENOMEM;
  }
  snprintf(bt->v2_header, sizeof(bt->v2_header), "Inference-Header-Content-Length: %zu", hl);
  size_t k = 0;
  bt->headers[k++] = c->binary ? "Content-Type: application/octet-stream" : "Content-Type: application/json";
  if (c->binary) bt->headers[k++] = bt->v2_header;
  if (bt->trace_header[0]) bt->headers[k++] = bt->trace_header;
  if (bt->state_header[0]) bt->headers[k++] = bt->state_header;
  bt->headers[k] = NULL;
  return 0;
}

