/* The backend request writer (see batchjson.h). */
#include "lanepack/batchjson.h"

#include "lanepack/gather.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int lp_batchjson_init(lp_batchjson_t *w, uint32_t max_len) {
  memset(w, 0, sizeof(*w));
  w->max_len = max_len;
  lp_buf_t b;
  lp_buf_init(&b);
  w->pos_end = malloc(((size_t)max_len + 1) * sizeof(uint32_t));
  if (!w->pos_end) return -ENOMEM;
  w->pos_end[0] = 0;
  for (uint32_t i = 0; i < max_len; i++) {
    lp_buf_u64(&b, i);
    lp_buf_puts(&b, ",");
    w->pos_end[i + 1] = (uint32_t)b.len;
  }
  if (b.oom) {
    lp_batchjson_free(w);
    return -ENOMEM;
  }
  w->positions = b.data;
  for (int d = 0; d < 10; d++) {
    w->runs[d] = malloc((size_t)max_len * 2 + 1);
    if (!w->runs[d]) {
      lp_batchjson_free(w);
      return -ENOMEM;
    }
    for (uint32_t i = 0; i < max_len; i++) {
      w->runs[d][2 * i] = (char)('0' + d);
      w->runs[d][2 * i + 1] = ',';
    }
  }
  return 0;
}

void lp_batchjson_free(lp_batchjson_t *w) {
  free(w->positions);
  free(w->pos_end);
  for (int d = 0; d < 10; d++) free(w->runs[d]);
  memset(w, 0, sizeof(*w));
}

/* Appends n copies of value v, each followed by a comma. */
static void put_run(const lp_batchjson_t *w, lp_gather_t *g, int32_t v, uint32_t n) {
  lp_buf_t *b = lp_gather_buf(g);
  if (v >= 0 && v <= 9) {
    while (n > 0) {
      uint32_t k = n < w->max_len ? n : w->max_len;
      lp_gather_ref(g, w->runs[v], 2 * (size_t)k);
      n -= k;
    }
    return;
  }
  for (uint32_t i = 0; i < n; i++) {
    lp_buf_i64(b, v);
    lp_buf_puts(b, ",");
  }
}

/* Appends positions 0..n-1, each followed by a comma. */
static void put_positions(const lp_batchjson_t *w, lp_gather_t *g, uint32_t n) {
  lp_buf_t *b = lp_gather_buf(g);
  if (n <= w->max_len) {
    lp_gather_ref(g, w->positions, w->pos_end[n]);
    return;
  }
  for (uint32_t i = 0; i < n; i++) {
    lp_buf_u64(b, i);
    lp_buf_puts(b, ",");
  }
}

/* A lane's segment or position ids: runs over its segments and padding. The
 * trailing comma of the last run is taken back. */
static void put_lane(const lp_batchjson_t *w, lp_gather_t *g, const lp_layout_t *l, size_t *s,
                     uint32_t lane, int positions) {
  lp_buf_t *b = lp_gather_buf(g);
  uint32_t at = 0;
  lp_buf_puts(b, "[");
  for (; *s < l->nsegs && l->segs[*s].lane == lane; (*s)++) {
    const lp_segment_t *sg = &l->segs[*s];
    if (sg->offset > at) put_run(w, g, 0, sg->offset - at);
    if (positions) put_positions(w, g, sg->length);
    else put_run(w, g, (int32_t)sg->segment, sg->length);
    at = sg->offset + sg->length;
  }
  if (l->bucket > at) put_run(w, g, 0, l->bucket - at);
  lp_gather_unput(g, ',');
  lp_buf_puts(b, "]");
}

/* A lane's input ids: each segment whose sequence came with its text (the
 * client's own, already in the form lp_buf_i32_list writes) is that text
 * borrowed, the rest written from its tokens (the sequence's own in a
 * segments-only build, else the rectangle's); the bytes are the same either
 * way, the reference is several times cheaper than writing 600 numbers. */
static void put_input_lane(const lp_batchjson_t *w, lp_gather_t *g, const lp_layout_t *l, size_t *s,
                           uint32_t lane) {
  lp_buf_t *b = lp_gather_buf(g);
  const int32_t *ids = l->segs_only ? NULL : l->input_ids + (size_t)lane * l->bucket;
  uint32_t at = 0;
  lp_buf_puts(b, "[");
  for (; *s < l->nsegs && l->segs[*s].lane == lane; (*s)++) {
    const lp_segment_t *sg = &l->segs[*s];
    if (sg->offset > at) put_run(w, g, ids ? ids[at] : l->pad_id, sg->offset - at); /* padding: one id */
    const lp_seq_text_t *t = l->texts ? &l->texts[sg->item] : NULL;
    if (t && t->text) {
      lp_gather_ref(g, t->text, t->len);
    } else {
      lp_buf_i32_list(b, ids ? ids + sg->offset : l->seqs[sg->item].tokens, sg->length);
    }
    lp_buf_puts(b, ",");
    at = sg->offset + sg->length;
  }
  if (l->bucket > at) put_run(w, g, ids ? ids[at] : l->pad_id, l->bucket - at);
  lp_gather_unput(g, ',');
  lp_buf_puts(b, "]");
}

static void put_ids(const lp_batchjson_t *w, lp_gather_t *g, const lp_layout_t *l, int positions) {
  lp_buf_t *b = lp_gather_buf(g);
  lp_buf_puts(b, "[");
  size_t s = 0;
  for (uint32_t lane = 0; lane < l->lanes; lane++) {
    if (lane) lp_buf_puts(b, ",");
    put_lane(w, g, l, &s, lane, positions);
  }
  lp_buf_puts(b, "]");
}

/* key [...] in segment order: "request_ids" (the client requests'
 * X-Request-Id) or "traces" (their traceparents), so a backend's log and
 * traces can be joined to them. */
static void put_request_ids(lp_buf_t *b, const lp_layout_t *l, const char *const *item_ids, const char *key) {
  if (!item_ids) return;
  lp_buf_puts(b, key);
  for (size_t i = 0; i < l->nsegs; i++) {
    const char *rid = item_ids[l->segs[i].item];
    if (i) lp_buf_puts(b, ", ");
    lp_buf_json_str(b, rid ? rid : "", rid ? strlen(rid) : 0);
  }
  lp_buf_puts(b, "]");
}

void lp_batchjson_write(const lp_batchjson_t *w, lp_buf_t *out, const lp_layout_t *l, uint64_t id,
                        const char *model, const char *const *item_ids, const char *const *item_traces) {
  lp_gather_t g;
  lp_gather_init(&g);
  lp_batchjson_gather(w, &g, l, id, model, item_ids, item_traces);
  lp_gather_flatten(&g, out);
  lp_gather_free(&g);
}

void lp_batchjson_gather(const lp_batchjson_t *w, lp_gather_t *g, const lp_layout_t *l, uint64_t id,
                         const char *model, const char *const *item_ids, const char *const *item_traces) {
  lp_buf_t *b = lp_gather_buf(g);
  /* the owned part: everything but the clients' text and the prebuilt runs
   * (all of it when no text came: the numbers written here) */
  size_t slots = l->texts || l->segs_only ? 0 : (size_t)l->lanes * l->bucket;
  lp_buf_reserve(b, slots * 12 + (size_t)l->lanes * 64 + l->nsegs * 72 + 256);
  lp_buf_puts(b, "{\"batch_id\": ");
  lp_buf_u64(b, id);
  lp_buf_puts(b, ", \"model\": ");
  lp_buf_json_str(b, model, strlen(model));
  if (l->ragged) {
    lp_buf_puts(b, ", \"input_ids\": ");
    lp_buf_i32_array(b, l->input_ids, l->bucket);
    lp_buf_puts(b, ", \"cu_seqlens\": ");
    lp_buf_i32_array(b, l->cu_seqlens, l->nsegs + 1);
    lp_buf_printf(b, ", \"max_seqlen\": %u", l->max_seqlen);
    put_request_ids(b, l, item_ids, ", \"request_ids\": [");
    put_request_ids(b, l, item_traces, ", \"traces\": [");
    lp_buf_puts(b, "}");
    return;
  }
  lp_buf_printf(b, ", \"shape\": [%u, %u], \"input_ids\": [", l->lanes, l->bucket);
  size_t seg = 0;
  for (uint32_t lane = 0; lane < l->lanes; lane++) {
    if (lane) lp_buf_puts(b, ",");
    if (l->texts || l->segs_only) put_input_lane(w, g, l, &seg, lane);
    else lp_buf_i32_array(b, l->input_ids + (size_t)lane * l->bucket, l->bucket);
  }
  lp_buf_puts(b, "], \"segment_ids\": ");
  put_ids(w, g, l, 0);
  lp_buf_puts(b, ", \"position_ids\": ");
  put_ids(w, g, l, 1);
  lp_buf_puts(b, ", \"segments\": [");
  for (size_t i = 0; i < l->nsegs; i++) {
    const lp_segment_t *s = &l->segs[i];
    lp_buf_puts(b, i ? ", {\"lane\": " : "{\"lane\": ");
    lp_buf_u64(b, s->lane);
    lp_buf_puts(b, ", \"segment\": ");
    lp_buf_u64(b, s->segment);
    lp_buf_puts(b, ", \"offset\": ");
    lp_buf_u64(b, s->offset);
    lp_buf_puts(b, ", \"length\": ");
    lp_buf_u64(b, s->length);
    lp_buf_puts(b, "}");
  }
  lp_buf_puts(b, "]");
  put_request_ids(b, l, item_ids, ", \"request_ids\": [");
  put_request_ids(b, l, item_traces, ", \"traces\": [");
  lp_buf_puts(b, "}");
}
