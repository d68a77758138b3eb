/* Batches: the core's SEND built into a rectangle and a body and sent to its
 * backend; the answer classified for the core (ok, 5xx, 4xx, missing shape,
 * timeout, reset, malformed) with its times, and each OUTPUT the core then
 * gives sliced to its client. What is retried, bisected, hedged or failed is
 * the core's to say. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lanepack/log.h"
#include "sched/sched.h"

#define LP_SPARE_BATCHES 4

static void on_batch_done(lp_batch_t *bt, void *ud);

static lp_job_t *job_of(uint64_t id) { return (lp_job_t *)(uintptr_t)id; }

/* The batch's references on its items' jobs go: a job whose client left
 * while the batch was out is freed here, once nothing reads its text. */
static void batch_unpin(lp_batch_t *b) {
  if (!b->pinned) return;
  b->pinned = 0;
  for (size_t i = 0; i < b->nitems; i++) lp__job_release(job_of(b->items[i].job_id));
}

static void batch_destroy(lp_batch_t *b) {
  lp__v2_close(b);
  lp_scatter_free(&b->scatter);
  lp_buf_free(&b->answer);
  lp_layout_free(&b->layout);
  lp_buf_free(&b->body);
  lp_gather_free(&b->gather);
  lp_buf_free(&b->members);
  free(b->items);
  free(b->seg_of);
  free(b->refs);
  free(b->texts);
  free(b->ids);
  free(b->traces);
  free(b);
}

/* A finished batch goes back to its model's pool, buffers and all. */
static void batch_free(lp_batch_t *b) {
  lp_model_t *m = b->model;
  batch_unpin(b);
  lp__v2_close(b);
  lp_buf_free(&b->answer); /* an error's body is not kept (an answer's moved on to its jobs) */
  /* the index of a large rectangle is not kept by an idle batch: spare
   * batches and batches in flight would each hold one */
  if (b->scatter.span_cap * sizeof(uint32_t) > LP_XFER_KEEP_BYTES) {
    lp_scatter_free(&b->scatter);
    lp_scatter_init(&b->scatter);
  }
  if (m->nspare >= LP_SPARE_BATCHES) {
    batch_destroy(b);
    return;
  }
  b->next_spare = m->spare;
  m->spare = b;
  m->nspare++;
}

static lp_batch_t *batch_get(lp_model_t *m, size_t n) {
  lp_batch_t *b = m->spare;
  if (b) {
    m->spare = b->next_spare;
    m->nspare--;
  } else {
    b = calloc(1, sizeof(*b));
    if (!b) return NULL;
    lp_layout_init(&b->layout);
    lp_scatter_init(&b->scatter);
    lp_buf_init(&b->answer);
    lp_buf_init(&b->body);
    lp_gather_init(&b->gather);
    lp_buf_init(&b->members);
  }
  if (n > b->items_cap) {
    lp_disp_item_t *it = realloc(b->items, n * sizeof(*it));
    if (it) b->items = it;
    uint32_t *so = realloc(b->seg_of, n * sizeof(*so));
    if (so) b->seg_of = so;
    lp_seq_ref_t *r = realloc(b->refs, n * sizeof(*r));
    if (r) b->refs = r;
    lp_seq_text_t *tx = realloc(b->texts, n * sizeof(*tx));
    if (tx) b->texts = tx;
    const char **ids = realloc(b->ids, n * sizeof(*ids));
    if (ids) b->ids = ids;
    const char **tr = realloc(b->traces, n * sizeof(*tr));
    if (tr) b->traces = tr;
    if (!it || !so || !r || !tx || !ids || !tr) {
      batch_destroy(b);
      return NULL;
    }
    b->items_cap = n;
  }
  lp_buf_reset(&b->body);
  lp_gather_reset(&b->gather);
  b->unstarted = b->unbuilt = 0; /* a reused batch's last ending is not this one's */
  b->pinned = 0;
  b->model = m;
  b->nitems = 0;
  b->cursor = 0;
  b->xfer = NULL;
  b->next_spare = b->next_failed = NULL;
  b->in_flight = 0;
  return b;
}

static int contains(const lp_buf_t *b, const char *needle) {
  size_t n = strlen(needle);
  for (size_t i = 0; b->data && i + n <= b->len; i++)
    if (memcmp(b->data + i, needle, n) == 0) return 1;
  return 0;
}

/* The length of the valid UTF-8 sequence at u[0..left) (RFC 3629: no
 * overlongs, no surrogates, nothing past U+10FFFF), or 0. */
static size_t utf8_len(const unsigned char *u, size_t left) {
  unsigned lo = 0x80, hi = 0xbf;
  size_t want = 0;
  if (u[0] >= 0xc2 && u[0] <= 0xdf) want = 2;
  else if (u[0] >= 0xe0 && u[0] <= 0xef) want = 3, lo = u[0] == 0xe0 ? 0xa0 : lo, hi = u[0] == 0xed ? 0x9f : hi;
  else if (u[0] >= 0xf0 && u[0] <= 0xf4) want = 4, lo = u[0] == 0xf0 ? 0x90 : lo, hi = u[0] == 0xf4 ? 0x8f : hi;
  if (!want || left < want || u[1] < lo || u[1] > hi) return 0;
  for (size_t j = 2; j < want; j++)
    if (u[j] < 0x80 || u[j] > 0xbf) return 0;
  return want;
}

/* Up to cap-1 bytes of s[0..n) written to out as the inside of a JSON string,
 * safe for a log line whatever the bytes: quotes and backslashes escaped,
 * control characters (C0, DEL, C1) as \u00XX, valid UTF-8 kept, any other
 * byte as \ufffd. Stops before a piece that does not fit. */
static void log_excerpt(char *out, size_t cap, const char *s, size_t n) {
  static const char hex[] = "0123456789abcdef";
  size_t k = 0;
  for (size_t i = 0; i < n;) {
    const unsigned char *u = (const unsigned char *)s + i;
    size_t len = u[0] < 0x80 ? 1 : utf8_len(u, n - i);
    unsigned cp = len == 2 ? ((u[0] & 0x1fu) << 6) | (u[1] & 0x3fu) : u[0]; /* C1 is two bytes */
    char piece[8];
    size_t plen;
    if (len == 0) {
      memcpy(piece, "\\ufffd", plen = 6);
      len = 1;
    } else if (len <= 2 && (cp < 0x20 || (cp >= 0x7f && cp < 0xa0))) {
      char e[6] = {'\\', 'u', '0', '0', hex[cp >> 4], hex[cp & 15]};
      memcpy(piece, e, plen = 6);
    } else if (len == 1 && (u[0] == '"' || u[0] == '\\')) {
      piece[0] = '\\', piece[1] = (char)u[0], plen = 2;
    } else {
      memcpy(piece, u, plen = len);
    }
    if (k + plen >= cap) break;
    memcpy(out + k, piece, plen);
    k += plen;
    i += len;
  }
  if (cap) out[k] = '\0';
}

/* The batch did not end in an answer: the log says what happened, with the
 * backend's own words (escaped, bounded); a client only ever sees code and
 * the generic message (another client's tokens may be quoted in the backend's
 * body, and the backend's address is the operator's business). */
static void log_refusal(const lp_batch_t *bt, const char *what, const char *detail, size_t detail_len) {
  char esc[700];
  log_excerpt(esc, sizeof(esc), detail ? detail : "", detail ? detail_len : 0);
  lp_log(LP_LOG_WARN, what,
         "\"batch\": %llu, \"model\": \"%s\", \"backend\": \"%s\", \"kind\": \"%s\", \"status\": %ld, "
         "\"bytes\": %zu, \"detail\": \"%s\"",
         (unsigned long long)bt->id, bt->model->cfg->name, bt->backend->url,
         lp_xfer_result_name(bt->result), bt->status, bt->answer.len, esc);
}

/* The most bytes a batch's answer may take: max_output_value_bytes per token
 * slot (the most values either output kind can have, in either encoding) and
 * room for the rest of the message. A backend sending more is cut off there. */
#define LP_ANSWER_MARGIN (64u << 10)
static size_t answer_bound(const lp_model_t *m, const lp_batch_t *bt) {
  uint64_t slots = (uint64_t)bt->layout.lanes * bt->layout.bucket; /* <= 2^26 */
  uint64_t b = slots * m->cfg->max_output_value_bytes + LP_ANSWER_MARGIN; /* <= 2^51 */
  return b < SIZE_MAX ? (size_t)b : SIZE_MAX;
}

/* ---- sending ---- */

/* The batch's own traceparent header: a new span under the trace of its first
 * segment's request (each member's trace is in the body, in segment order). */
static void batch_trace(lp_model_t *m, lp_batch_t *bt) {
  lp_trace_t t;
  const lp_job_t *job = bt->layout.nsegs ? job_of(bt->items[bt->layout.segs[0].item].job_id) : NULL;
  const char *first = job ? job->traceparent : "";
  bt->state_header[0] = '\0';
  if (lp_trace_parse(first, strlen(first), &t)) {
    bt->trace_header[0] = '\0';
    return;
  }
  /* its tracestate goes with its trace (W3C), as the client sent it: the
   * proxy adds no entry of its own */
  if (job->tracestate) snprintf(bt->state_header, sizeof(bt->state_header), "tracestate: %s", job->tracestate);
  uint8_t span[8];
  lp_trace_random(&m->trace_rng, span, sizeof(span));
  char tp[LP_TRACEPARENT_SIZE];
  lp_trace_format(t.trace_id, span, t.flags, tp);
  snprintf(bt->trace_header, sizeof(bt->trace_header), "traceparent: %s", tp);
}

/* The batch never left: the core hears it as a reset once the action being
 * handled is done. A rectangle that could not be built (its layout or body,
 * out of memory) fails the requests it held with 503 out_of_memory, as their
 * own failure (they are cancelled in the core first); one whose transfer could
 * not start is retried. */
static void start_failed(lp_model_t *m, lp_batch_t *bt, const char *why, int unbuildable) {
  lp_log(LP_LOG_ERROR, "batch not sent", "\"batch\": %llu, \"model\": \"%s\", \"error\": \"%s\"",
         (unsigned long long)bt->id, m->cfg->name, why);
  for (size_t i = 0; unbuildable && i < bt->nitems; i++) {
    lp_job_t *job = job_of(bt->items[i].job_id);
    if (!job->in_core || job->cancel_queued) continue;
    lp__job_fail(job, 503, "out_of_memory", "proxy out of memory: the batch could not be built");
    lp__job_cancel(job); /* queued: the core hears it before the reset */
  }
  bt->next_failed = m->failed;
  m->failed = bt;
}

/* Its transfer did not start: its body could not be written (out of memory:
 * its requests fail) or the transfer itself (retried). */
static void start_unsent(lp_model_t *m, lp_batch_t *bt) {
  if (bt->unbuilt) start_failed(m, bt, "out of memory for the body", 1);
  else start_failed(m, bt, "could not start the upstream request", 0);
}

void lp__batches_failed(lp_model_t *m) {
  while (m->failed) {
    lp_batch_t *bt = m->failed;
    m->failed = bt->next_failed;
    lp_disp_result_t r = {.outcome = LP_DISP_RESET};
    lp_disp_result(m->disp, bt->id, &r, lp__now());
    batch_free(bt);
  }
}

void lp__batch_send(lp_model_t *m, const lp_disp_action_t *a) {
  lp_proxy_t *p = m->proxy;
  size_t n = a->send.n;
  lp_batch_t *bt = batch_get(m, n ? n : 1);
  if (!bt) { /* not even a record: the core hears it at once (no action is held) */
    lp_disp_result_t r = {.outcome = LP_DISP_RESET};
    lp_disp_result(m->disp, a->send.batch_id, &r, lp__now());
    return;
  }
  bt->id = a->send.batch_id;
  bt->shape = a->send.shape;
  bt->device = (int)a->send.device;
  bt->expect_ns = a->send.expect_ns;
  bt->v2 = m->cfg->protocol == LP_PROTO_V2;
  bt->v2_per_segment = m->cfg->v2.per_segment;
  bt->outputs = (int)m->cfg->outputs;
  bt->nlabels = (uint32_t)m->cfg->nlabels;
  snprintf(bt->v2_output, sizeof(bt->v2_output), "%s", m->cfg->v2.output);
  bt->backend = &m->backends[a->send.backend < m->nbackends ? a->send.backend : 0];
  memcpy(bt->items, a->send.items, n * sizeof(*bt->items));
  bt->nitems = n;
  if (a->send.backend >= m->nbackends) {
    start_failed(m, bt, "no such backend", 0);
    return;
  }
  lp_backend_t *be = bt->backend;
  if (n > m->scratch_cap) {
    lp_place_t *pl = realloc(m->place, n * sizeof(*pl));
    if (!pl) {
      start_failed(m, bt, "out of memory", 1);
      return;
    }
    m->place = pl;
    m->scratch_cap = n;
  }
  int any_text = 0;
  for (size_t i = 0; i < n; i++) {
    const lp_job_t *job = job_of(bt->items[i].job_id);
    const lp_seq_t *s = &job->seqs[bt->items[i].seq];
    bt->refs[i] = (lp_seq_ref_t){s->tokens, s->len};
    bt->texts[i] = (lp_seq_text_t){s->text, s->text_len};
    bt->ids[i] = job->request_id;
    bt->traces[i] = job->traceparent;
    any_text |= s->text != NULL;
    m->place[i] = (lp_place_t){.bin = (int32_t)bt->items[i].lane, .offset = bt->items[i].offset};
  }
  /* only v2 rectangles send segment and position ids from the layout; the JSON
   * writer derives them from the segments */
  bt->layout.skip_ids = !(m->cfg->protocol == LP_PROTO_V2 &&
                          (m->cfg->v2.inputs[1][0] || m->cfg->v2.inputs[2][0]));
  /* a gathered body (JSON rectangles; v2 binary INT32 ones) borrows the
   * tokens and runs: no arrays to fill, no token copied on this thread */
  bt->layout.segs_only = m->cfg->protocol == LP_PROTO_V2 ? lp__v2_gathered(m) : !m->cfg->ragged;
  int rc = m->cfg->ragged ? lp_layout_build_ragged(&bt->layout, NULL, bt->refs, n)
                          : lp_layout_build(&bt->layout, a->send.lanes, a->send.bucket, m->cfg->pad_id,
                                            m->place, bt->refs, n);
  if (rc) {
    start_failed(m, bt, strerror(-rc), 1);
    return;
  }
  if (any_text) bt->layout.texts = bt->texts; /* the clients' own token text, copied by the writer */
  uint64_t now = lp__now();
  for (size_t i = 0; i < bt->layout.nsegs; i++) {
    const lp_segment_t *g = &bt->layout.segs[i];
    bt->seg_of[g->item] = (uint32_t)i;
    lp_seq_t *s = &job_of(bt->items[g->item].job_id)->seqs[bt->items[g->item].seq];
    s->batch_id = bt->id;
    s->lanes = bt->layout.lanes;
    s->bucket = bt->layout.bucket;
    s->lane = g->lane;
    s->offset = g->offset;
    s->dispatch_ns = now;
    s->sends++;
  }
  batch_trace(m, bt);
  int gathered = m->cfg->protocol != LP_PROTO_V2 || bt->layout.segs_only;
  if (gathered) {
    /* the members' text or tokens are borrowed until the batch is freed:
     * their jobs are pinned, so a client leaving meanwhile frees its job
     * only then */
    for (size_t i = 0; i < n; i++) __atomic_add_fetch(&job_of(bt->items[i].job_id)->refs, 1, __ATOMIC_RELAXED);
    bt->pinned = 1;
  }
  bt->body_pending = LP_BODY_NONE;
  if (m->cfg->protocol == LP_PROTO_V2) {
    if (lp__v2_encode(m, bt)) bt->body.oom = 1;
  } else {
    /* written where the transfer starts (lp__transfer_start): on a front's
     * thread, not this one, from the batch's own arrays and its jobs' bytes */
    bt->body_pending = LP_BODY_JSON;
    bt->writer = &m->writer;
    snprintf(bt->model_name, sizeof(bt->model_name), "%s", m->cfg->name);
    bt->headers[0] = "Content-Type: application/json";
    size_t k = 1;
    if (bt->trace_header[0]) bt->headers[k++] = bt->trace_header;
    if (bt->state_header[0]) bt->headers[k++] = bt->state_header;
    bt->headers[k] = NULL;
  }
  if (bt->body.oom) {
    start_failed(m, bt, "out of memory for the body", 1);
    return;
  }
  bt->dispatch_ns = now;
  lp_log(LP_LOG_DEBUG, "dispatch",
         "\"batch\": %llu, \"shape\": [%u, %u], \"segments\": %zu, \"fill\": %.4f, "
         "\"reason\": \"%s\", \"backend\": \"%s\", \"device\": %u, \"copies\": %u",
         (unsigned long long)bt->id, bt->layout.lanes, bt->layout.bucket, bt->layout.nsegs,
         (double)bt->layout.real_tokens / ((double)bt->layout.lanes * bt->layout.bucket), a->send.reason,
         be->url, a->send.device, a->send.copies);
  if (!bt->v2) snprintf(bt->url, sizeof(bt->url), "%s", be->batch_url);
  bt->timeout_ms = m->cfg->backend_timeout_ms;
  bt->max_answer = answer_bound(m, bt);
  bt->on_done = on_batch_done;
  bt->on_done_ud = NULL;
  bt->in_flight = 1;
  lp__batchview_sent(m, bt, a);
  /* accounting: what the chip will compute */
  uint64_t slots = (uint64_t)bt->layout.lanes * bt->layout.bucket;
  lp_bucket_set_account(&m->shapes, (size_t)bt->shape, (uint32_t)bt->layout.nsegs, bt->layout.real_tokens);
  m->batches_by_shape[bt->shape]++;
  m->real_tokens += bt->layout.real_tokens;
  m->pad_tokens += slots - bt->layout.real_tokens;
  lp_hist_observe(&m->fill, (double)bt->layout.real_tokens / (double)slots);
  lp_hist_observe(&m->fill_by_shape[bt->shape], (double)bt->layout.real_tokens / (double)slots);
  be->inflight++;
  m->inflight++;
  m->shape_inflight[bt->shape]++;
  p->batches++;
  /* last: from here until it comes back the batch is a front's, whose
   * thread sends its bytes and reads its answer */
  lp__batch_hand_out(p, bt);
}

/* ---- answers ---- */

void lp__batch_output(lp_model_t *m, const lp_disp_action_t *a) {
  lp_batch_t *bt = m->delivering;
  if (!bt || bt->id != a->output.batch_id) return; /* outputs come only while their answer is held */
  size_t i = bt->cursor; /* the core says them in the batch's item order */
  if (i >= bt->nitems || bt->items[i].job_id != a->output.job_id || bt->items[i].seq != a->output.seq)
    for (i = 0; i < bt->nitems; i++)
      if (bt->items[i].job_id == a->output.job_id && bt->items[i].seq == a->output.seq) break;
  if (i >= bt->nitems) return;
  bt->cursor = i + 1;
  const lp_segment_t *g = &bt->layout.segs[bt->seg_of[i]];
  lp_seq_t *s = &job_of(a->output.job_id)->seqs[a->output.seq];
  if (m->cfg->protocol == LP_PROTO_V2) {
    lp__v2_slice(m, bt, g, s);
    return;
  }
  const char *start;
  size_t len;
  lp_scatter_slice(&bt->scatter, g, &start, &len);
  lp__seq_done(s, bt, g, m->answer, start, len, bt->scatter.per_segment);
}

/* How the answer ended, for the core; what it says is logged. */
static lp_disp_outcome_t classify(lp_batch_t *bt) {
  lp_backend_t *be = bt->backend;
  if (bt->result == LP_XFER_CANCELLED) return LP_DISP_ABANDONED;
  if (bt->result == LP_XFER_TOO_LARGE) { /* past what the batch can hold: malformed, whatever else it is */
    be->failures++;
    log_refusal(bt, "backend answer too large", bt->error, strlen(bt->error));
    return LP_DISP_GARBLED;
  }
  if (bt->result != LP_XFER_OK) {
    be->failures++;
    log_refusal(bt, "batch failed", bt->error, strlen(bt->error));
    return bt->result == LP_XFER_TIMEOUT ? LP_DISP_TIMEOUT : bt->result == LP_XFER_CONNECT ? LP_DISP_UNSENT : LP_DISP_RESET;
  }
  if (bt->status != 200) {
    be->failures++;
    log_refusal(bt, "batch refused", bt->answer.data, bt->answer.len);
    /* a v2 server without the shape's model says 404 (or "unavailable") */
    int mismatch = (bt->status == 500 && (contains(&bt->answer, "shape mismatch") ||
                                          contains(&bt->answer, "shape_mismatch"))) ||
                   (bt->v2 && (bt->status == 404 || (bt->status == 503 && contains(&bt->answer, "unavailable"))));
    if (mismatch) {
      /* the shape is not there: barred on this backend (the core re-packs at
       * once), asked about again later */
      be->shape_state[bt->shape] = LP_SHAPE_UNAVAILABLE;
      lp__backend_shape_missing(be, bt->shape);
      return LP_DISP_ERR_SHAPE;
    }
    return bt->status >= 500 ? LP_DISP_ERR_5XX : LP_DISP_ERR_4XX;
  }
  if (!bt->opened) { /* where it arrived, it could not be indexed or decoded */
    be->failures++;
    log_refusal(bt, "bad backend answer", bt->open_err, strlen(bt->open_err));
    return LP_DISP_GARBLED;
  }
  be->batches++;
  return LP_DISP_OK;
}

static void on_batch_done(lp_batch_t *bt, void *ud) {
  (void)ud;
  lp_model_t *m = bt->model;
  lp_proxy_t *p = m->proxy;
  bt->backend->inflight--;
  m->inflight--;
  m->shape_inflight[bt->shape]--;
  p->batches--;
  bt->in_flight = 0;
  uint64_t now = lp__now();
  if (bt->unstarted) {
    lp__batchview_answered(m, bt, LP_DISP_RESET, 0, 0, now); /* the view does not keep it in flight */
    start_unsent(m, bt);
    m->pump(m); /* the core hears the reset */
    return;
  }
  lp_disp_result_t r = {.outcome = classify(bt), .http_status = (int)bt->status,
                        .sent_ns = bt->sent_ns && bt->sent_ns <= now ? bt->sent_ns : bt->dispatch_ns,
                        .device_ns = bt->device_ns};
  int opened = r.outcome == LP_DISP_OK;
  if (opened && bt->v2out && bt->v2out->dtype != LP_DT_BYTES)
    m->v2_out_dtype = bt->v2out->dtype; /* what the model's metadata names: only from an answer that is sliced */
  if (r.outcome == LP_DISP_OK) {
    uint64_t took = now - bt->dispatch_ns;
    lp_hist_observe(&m->service, (double)(bt->device_ns ? bt->device_ns : took) / 1e9);
    if (bt->expect_ns > bt->dispatch_ns) { /* how good the clock's prediction was */
      double want = (double)(bt->expect_ns - bt->dispatch_ns);
      lp_hist_observe(&m->service_error, ((double)took > want ? (double)took - want : want - (double)took) / want);
    }
  }
  lp__batchview_answered(m, bt, r.outcome, (int)bt->status, r.device_ns, now);
  lp_log(LP_LOG_DEBUG, "batch done", "\"batch\": %llu, \"outcome\": \"%s\", \"ms\": %.3f",
         (unsigned long long)bt->id, lp_disp_outcome_name(r.outcome), (double)(now - bt->dispatch_ns) / 1e6);
  /* the core says which sequences this answer serves (OUTPUT, sliced from it
   * while it is held) and what becomes of the rest */
  m->delivering = opened ? bt : NULL;
  /* a JSON answer is kept, not copied: each sequence it serves holds a span
   * of it (a v2 answer: of its output tensor), and the front of each job
   * formats its own (NULL without memory: those jobs fail with a 503) */
  if (opened) m->answer = lp__answer_take(&bt->answer);
  if (m->answer && bt->v2) lp__v2_adopt(bt, m->answer);
  m->result_http = bt->result == LP_XFER_OK && bt->status != 200 ? (int)bt->status : 0;
  lp_disp_result(m->disp, bt->id, &r, now);
  m->pump(m);
  m->delivering = NULL;
  m->result_http = 0;
  lp__answer_unref(m->answer); /* the jobs hold their own references */
  m->answer = NULL;
  lp__v2_close(bt);
  if (r.outcome == LP_DISP_ERR_SHAPE) {
    lp__model_shapes_changed(m);
    int anywhere = m->shapes.shapes[bt->shape].state != LP_SHAPE_UNAVAILABLE;
    lp_log(LP_LOG_WARN, "shape mismatch", "\"backend\": \"%s\", \"shape\": [%u, %u], \"anywhere\": %s",
           bt->backend->url, m->shapes.shapes[bt->shape].lanes, m->shapes.shapes[bt->shape].bucket,
           anywhere ? "true" : "false");
  }
  batch_free(bt);
}

void lp__batch_finish(lp_batch_t *bt) { on_batch_done(bt, NULL); }

void lp__batch_drop(lp_batch_t *bt) { batch_free(bt); }

void lp__batches_free(lp_model_t *m) {
  while (m->spare) {
    lp_batch_t *b = m->spare;
    m->spare = b->next_spare;
    batch_destroy(b);
  }
}
