/* Batches: a rectangle built from the scheduler's plan, sent to one backend,
 * and what its answer becomes: slices for each client, a retry, or failures. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lanepack/log.h"
#include "proxy.h"

static void batch_destroy(lp_batch_t *b);
static void stall_arm(lp_proxy_t *p);

#define LP_SPARE_BATCHES 4

static void batch_destroy(lp_batch_t *b) {
  lp_layout_free(&b->layout);
  lp_buf_free(&b->body);
  free(b->seqs);
  free(b);
}

/* A finished batch goes back to its model's pool, buffers and all. */
/* Lets go of sequence i (a batch holds a reference to each it lists). */
static void drop(lp_batch_t *b, size_t i) {
  lp_seq_t *s = b->seqs[i];
  if (!s) return;
  b->seqs[i] = NULL;
  s->refs--;
  s->job->refs--;
  lp__job_release(s->job);
}

/* Another batch holds this sequence, or its hedge waits in the queue: this
 * batch's failure is not the sequence's. */
static int other_copy(const lp_seq_t *s) { return s->refs > 1 || s->state == LP_SEQ_QUEUED; }

static void batch_free(lp_batch_t *b) {
  lp_model_t *m = b->model;
  lp_theap_remove(&m->proxy->stall_timers, &b->stall);
  for (size_t i = 0; i < b->nseqs; i++) drop(b, i);
  if (m->nspare >= LP_SPARE_BATCHES) {
    batch_destroy(b);
    return;
  }
  b->next_spare = m->spare;
  m->spare = b;
  m->nspare++;
}

static lp_batch_t *batch_get(lp_model_t *m, size_t nseqs) {
  lp_batch_t *b = m->spare;
  if (b) {
    m->spare = b->next_spare;
    m->nspare--;
  } else {
    b = calloc(1, sizeof(*b));
    if (!b) return NULL;
    lp_theap_node_init(&b->stall);
    lp_layout_init(&b->layout);
    lp_buf_init(&b->body);
  }
  if (nseqs > b->seqs_cap) {
    lp_seq_t **s = realloc(b->seqs, nseqs * sizeof(*s));
    if (!s) {
      batch_destroy(b);
      return NULL;
    }
    b->seqs = s;
    b->seqs_cap = nseqs;
  }
  lp_buf_reset(&b->body);
  b->model = m;
  b->nseqs = 0;
  b->xfer = NULL;
  b->next_spare = NULL;
  return b;
}

static void fail_batch(lp_batch_t *bt, int status, const char *code, const char *msg) {
  for (size_t i = 0; i < bt->nseqs; i++)
    if (bt->seqs[i] && !other_copy(bt->seqs[i])) lp__seq_failed(bt->seqs[i], status, code, msg);
}

static int contains(const lp_buf_t *b, const char *needle) {
  size_t n = strlen(needle);
  for (size_t i = 0; b->data && i + n <= b->len; i++)
    if (memcmp(b->data + i, needle, n) == 0) return 1;
  return 0;
}

static void on_batch_retry_closed(uv_handle_t *h) {
  batch_free(container_of(h, lp_batch_t, retry));
}

/* Back in the queue after the backoff: the scheduler packs them anew, maybe with
 * others, maybe into another shape, on the backend it picks. */
static void on_batch_retry(uv_timer_t *t) {
  lp_batch_t *bt = container_of(t, lp_batch_t, retry);
  lp_model_t *m = bt->model;
  uint64_t now = uv_hrtime();
  for (size_t i = 0; i < bt->nseqs; i++) {
    lp_seq_t *s = bt->seqs[i];
    if (!s) continue;
    lp_job_t *job = s->job;
    if (s->state == LP_SEQ_DONE || other_copy(s)) {
      /* answered meanwhile, or its hedge carries it */
    } else if (job->answered) { /* the client left, or another sequence failed it */
      s->state = LP_SEQ_DONE;
      job->unresolved--;
    } else if (m->proxy->hard_stop) {
      lp__seq_failed(s, 503, "shutting_down", "the proxy is shutting down");
    } else if (s->sched.deadline_ns && s->sched.deadline_ns <= now) {
      lp__seq_failed(s, 504, "deadline_exceeded", "the deadline passed while retrying");
    } else {
      int rc = lp__model_requeue(m, s);
      if (rc == -ERANGE)
        lp__seq_failed(s, 503, "no_shape_available",
                       "no backend has a shape that holds this sequence any more");
      else if (rc)
        lp__seq_failed(s, 503, "out_of_memory", "proxy out of memory");
    }
  }
  uv_close((uv_handle_t *)&bt->retry, on_batch_retry_closed);
  lp_proxy_kick(m->proxy);
}

/* The backoff before retry number attempts+1: doubling from retry_backoff_ms,
 * capped (a shift past 63 bits is undefined, and earlier ones overflow). */
uint64_t lp__backoff_ms(const lp_model_t *m, uint32_t attempts) {
  uint64_t ms = m->cfg->retry_backoff_ms;
  if (ms == 0) return 0;
  for (uint32_t i = 0; i < attempts && ms < LP_MAX_BACKOFF_MS; i++) ms *= 2;
  return ms < LP_MAX_BACKOFF_MS ? ms : LP_MAX_BACKOFF_MS;
}

/* How a failed batch's sequences are tried again: spending their budget, for
 * free and at once (a shape mismatch), each alone for free (see retry_kind), or
 * away from the backend that may still be computing them. */
enum { RETRY_SPEND = 0, RETRY_FREE = 1, RETRY_ISOLATE = 2, RETRY_ELSEWHERE = 3 };

/* How a failed batch's sequences are tried again. An otherwise healthy backend
 * that answers 5xx to a batch of several sequences may be refusing one of
 * them: each goes alone next time, at no cost to its budget, so one bad
 * sequence spends its own retries and not its neighbours'. A batch that timed
 * out may still be computing there: its retry goes elsewhere when it can. */
static int retry_kind(const lp_batch_t *bt, const lp_xfer_t *x) {
  if (x->result == LP_XFER_TIMEOUT) return RETRY_ELSEWHERE;
  if (x->result == LP_XFER_OK && x->status >= 500 && bt->nseqs > 1 && bt->backend->failures_in_row <= 1)
    return RETRY_ISOLATE;
  return RETRY_SPEND;
}

/* A batch failed before the backend computed it: its sequences are tried again
 * (budget and deadline allowing) after a backoff, as kind says; the rest fail
 * with status. Returns 1 when the batch is kept for the retry, 0 when it can be
 * freed. */
static int retry_batch(lp_batch_t *bt, int status, const char *code, const char *msg, int kind) {
  int free_try = kind == RETRY_FREE || kind == RETRY_ISOLATE;
  lp_model_t *m = bt->model;
  uint64_t now = uv_hrtime();
  uint32_t most = 0;
  size_t kept = 0;
  for (size_t i = 0; i < bt->nseqs; i++) {
    lp_seq_t *s = bt->seqs[i];
    if (!s) continue;
    lp_job_t *job = s->job;
    uint64_t backoff = free_try ? 0 : lp__backoff_ms(m, s->attempts) * 1000000ull;
    if (s->state == LP_SEQ_DONE || other_copy(s)) {
      drop(bt, i); /* answered, or carried by its hedge */
    } else if (job->answered) {
      s->state = LP_SEQ_DONE;
      job->unresolved--;
      drop(bt, i);
    } else if (!free_try && s->attempts >= m->cfg->max_retries) {
      lp__seq_failed(s, status, code, msg);
      drop(bt, i);
    } else if (s->sched.deadline_ns && s->sched.deadline_ns <= now + backoff) {
      lp__seq_failed(s, 504, "deadline_exceeded", "the deadline would pass before a retry");
      drop(bt, i);
    } else {
      if (!free_try) s->attempts++;
      if (kind == RETRY_ISOLATE) s->isolate = 1;
      if (kind == RETRY_ELSEWHERE) s->avoid = (int)(bt->backend - m->backends) + 1;
      if (s->attempts > most) most = s->attempts;
      m->proxy->retries++;
      kept++; /* held until the backoff ends, then requeued */
    }
  }
  if (!kept) return 0;
  bt->backoff_ms = kind == RETRY_FREE ? 0 : (uint32_t)lp__backoff_ms(m, most ? most - 1 : 0);
  uv_timer_init(m->proxy->loop, &bt->retry);
  uv_timer_start(&bt->retry, on_batch_retry, bt->backoff_ms, 0);
  return 1;
}

/* A backend that does not have a shape: never send it that shape again, and if
 * no backend has it, the model no longer chooses or admits by it. */
static void shape_missing(lp_model_t *m, lp_backend_t *be, int shape) {
  be->shape_state[shape] = LP_SHAPE_UNAVAILABLE;
  lp__backend_shape_missing(be, shape); /* asked about again later */
  lp__model_shapes_changed(m);
  int anywhere = m->shapes.shapes[shape].state != LP_SHAPE_UNAVAILABLE;
  lp_log(LP_LOG_WARN, "shape mismatch", "\"backend\": \"%s\", \"shape\": [%u, %u], \"anywhere\": %s",
         be->url, m->shapes.shapes[shape].lanes, m->shapes.shapes[shape].bucket,
         anywhere ? "true" : "false");
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
static void log_refusal(const lp_batch_t *bt, const lp_xfer_t *x, const char *what, const char *detail,
                        size_t detail_len) {
  char esc[700];
  log_excerpt(esc, sizeof(esc), detail ? detail : "", detail ? detail_len : 0);
  lp_log(LP_LOG_WARN, what,
         "\"batch\": %llu, \"model\": \"%s\", \"backend\": \"%s\", \"kind\": \"%s\", \"status\": %ld, "
         "\"bytes\": %zu, \"detail\": \"%s\"",
         (unsigned long long)bt->id, bt->model->cfg->name, bt->backend->url,
         lp_xfer_result_name(x->result), x->status, x->body.len, esc);
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

static void on_batch_done(lp_xfer_t *x, void *ud) {
  lp_batch_t *bt = ud;
  lp_model_t *m = bt->model;
  lp_proxy_t *p = m->proxy;
  lp_backend_t *be = bt->backend;
  be->inflight--;
  m->inflight--;
  m->shape_inflight[bt->shape]--;
  p->batches--;
  bt->in_flight = 0;
  lp_theap_remove(&p->stall_timers, &bt->stall);
  p->delivering = bt->id;
  /* the device is free again: what it took teaches the clock, if it ran */
  if (x->result == LP_XFER_OK && x->status == 200) {
    uint64_t slots = (uint64_t)bt->layout.lanes * bt->layout.bucket, end = uv_hrtime();
    uint64_t took = end - bt->dispatch_ns;
    lp_hist_observe(&m->service, (double)(x->device_ns ? x->device_ns : took) / 1e9);
    if (bt->expect_ns > bt->dispatch_ns) { /* how good the clock's prediction was */
      double want = (double)(bt->expect_ns - bt->dispatch_ns);
      lp_hist_observe(&m->service_error, ((double)took > want ? (double)took - want : want - (double)took) / want);
    }
    lp_devclock_finish(&be->clock, bt->device, bt->shape, bt->dispatch_ns, bt->expect_ns, end,
                       x->device_ns, slots ? (double)bt->layout.real_tokens / (double)slots : 0);
  } else {
    lp_devclock_abandon(&be->clock, bt->device, bt->expect_ns, uv_hrtime());
  }
  char msg[160];
  if (x->result == LP_XFER_TOO_LARGE) {
    /* past what the batch can hold: malformed, whatever else it is */
    be->failures++;
    lp__backend_result(be, 0);
    log_refusal(bt, x, "backend answer too large", x->error, strlen(x->error));
    fail_batch(bt, 502, "bad_backend_answer", "the backend's answer was larger than the batch can be");
  } else if (x->result != LP_XFER_OK) {
    int timeout = x->result == LP_XFER_TIMEOUT;
    int keep = 0;
    if (x->result != LP_XFER_CANCELLED) {
      be->failures++;
      lp__backend_result(be, 0);
      log_refusal(bt, x, "batch failed", x->error, strlen(x->error));
      keep = retry_batch(bt, timeout ? 504 : 502, timeout ? "backend_timeout" : "backend_error",
                         timeout ? "the backend did not answer in time"
                                 : "the connection to the backend failed",
                         retry_kind(bt, x));
    } else {
      fail_batch(bt, 503, "shutting_down", "the proxy is shutting down");
    }
    if (keep) {
      lp_proxy_kick(p);
      return;
    }
  } else if (x->status != 200) {
    int v2 = m->cfg->protocol == LP_PROTO_V2;
    snprintf(msg, sizeof(msg), "the backend %s the batch (HTTP %ld)",
             x->status >= 500 ? "failed" : "refused", x->status);
    log_refusal(bt, x, "batch refused", x->body.data, x->body.len);
    /* a v2 server without the shape's model says 404 (or "unavailable") */
    int mismatch = (x->status == 500 && (contains(&x->body, "shape mismatch") ||
                                         contains(&x->body, "shape_mismatch"))) ||
                   (v2 && (x->status == 404 || (x->status == 503 && contains(&x->body, "unavailable"))));
    int keep = 0;
    be->failures++;
    if (mismatch) {
      /* the backend is fine; the shape is not there: re-pack at once (the shape
       * is now barred on this backend, so this cannot repeat) */
      shape_missing(m, be, bt->shape);
      keep = retry_batch(bt, 502, "backend_error", msg, RETRY_FREE);
    } else if (x->status >= 500) {
      lp__backend_result(be, 0);
      keep = retry_batch(bt, 502, "backend_error", msg, retry_kind(bt, x));
    } else {
      lp__backend_result(be, 1); /* it answered: our batch was wrong, retrying cannot help */
      fail_batch(bt, 502, "backend_error", msg);
    }
    if (keep) {
      lp_proxy_kick(p);
      return;
    }
  } else {
    lp_scatter_t *sc = &m->scatter;
    char err[300];
    int v2 = m->cfg->protocol == LP_PROTO_V2;
    int rc = v2 ? lp__v2_deliver(m, bt, x, err, sizeof(err))
                : lp_scatter_index(sc, x->body.data ? x->body.data : "", x->body.len, &bt->layout,
                                   err, sizeof(err));
    /* an answer naming another batch is another batch's answer (a backend, or
     * a proxy between, that mixed two up): it is never sliced. One naming none
     * is taken (the field is the backend's to echo, as v2's id is optional). */
    if (!rc && !v2 && sc->id_state != LP_SCATTER_ID_NONE &&
        (sc->id_state == LP_SCATTER_ID_BAD || sc->batch_id != bt->id)) {
      if (sc->id_state == LP_SCATTER_ID_BAD)
        snprintf(err, sizeof(err), "the answer's batch_id is not an unsigned integer (batch %llu)",
                 (unsigned long long)bt->id);
      else
        snprintf(err, sizeof(err), "the answer's batch_id %llu is not this batch's %llu",
                 (unsigned long long)sc->batch_id, (unsigned long long)bt->id);
      rc = -EPROTO;
    }
    if (rc) {
      be->failures++;
      lp__backend_result(be, 0);
      log_refusal(bt, x, "bad backend answer", err, strlen(err));
      fail_batch(bt, 502, "bad_backend_answer",
                 "the backend's answer was malformed or did not match the batch");
    } else {
      be->batches++;
      lp__backend_result(be, 1);
      for (size_t i = 0; !v2 && i < bt->layout.nsegs; i++) {
        const lp_segment_t *g = &bt->layout.segs[i];
        const char *start;
        size_t len;
        lp_scatter_slice(sc, g, &start, &len);
        lp__seq_done(bt->seqs[g->item], bt, g, start, len, sc->per_segment);
      }
    }
  }
  batch_free(bt);
  lp_proxy_kick(p);
}

/* ---- stalls: a batch far past its expected time is hedged ---- */

static void on_stall_timer(uv_timer_t *t);

static void stall_arm(lp_proxy_t *p) {
  lp_theap_node_t *top = lp_theap_top(&p->stall_timers);
  if (!top) return;
  if (p->stall_timer_at && p->stall_timer_at <= top->at) return;
  uint64_t now = uv_hrtime();
  p->stall_timer_at = top->at;
  uv_timer_start(&p->stall_timer, on_stall_timer, top->at > now ? (top->at - now + 999999) / 1000000 : 0, 0);
}

/* Its sequences go back in the queue as well as staying in it: the scheduler
 * packs them anew on a free device (of this backend or another), the first
 * answer wins and the other is dropped when it comes; the stalled device counts
 * as busy until it answers or its connection is dropped. */
static void hedge(lp_batch_t *bt) {
  lp_model_t *m = bt->model;
  size_t n = 0;
  for (size_t i = 0; i < bt->nseqs; i++) {
    lp_seq_t *s = bt->seqs[i];
    /* the latest copy only, and at most three copies in all */
    if (!s || s->state != LP_SEQ_INFLIGHT || s->batch_id != bt->id || s->refs >= 3 || s->job->answered)
      continue;
    if (lp__model_requeue(m, s) == 0) {
      s->hedged = 1;
      n++;
    }
  }
  m->proxy->stalls++;
  lp_log(LP_LOG_WARN, "batch stalled: hedged", "\"batch\": %llu, \"backend\": \"%s\", \"sequences\": %zu",
         (unsigned long long)bt->id, bt->backend->url, n);
  lp_proxy_kick(m->proxy);
}

static void on_stall_timer(uv_timer_t *t) {
  lp_proxy_t *p = container_of(t, lp_proxy_t, stall_timer);
  p->stall_timer_at = 0;
  uint64_t now = uv_hrtime();
  lp_theap_node_t *top;
  while ((top = lp_theap_top(&p->stall_timers)) && top->at <= now) {
    lp_batch_t *bt = container_of(top, lp_batch_t, stall);
    lp_theap_remove(&p->stall_timers, top);
    if (bt->in_flight) hedge(bt);
  }
  stall_arm(p);
}

void lp__stall_timers_init(lp_proxy_t *p) {
  lp_theap_init(&p->stall_timers);
  uv_timer_init(p->loop, &p->stall_timer);
  p->stall_timer_at = 0;
}

/* Sends what the plan placed; the placed sequences leave the queue. */
/* The batch's items' request ids (layout item i is bt->seqs[i]), in the
 * model's reused array; NULL when out of memory (the batch goes without). */
static const char *const *batch_request_ids(lp_model_t *m, const lp_batch_t *bt) {
  if (bt->nseqs > m->item_ids_cap) {
    size_t c = bt->nseqs * 2;
    const char **n = realloc(m->item_ids, c * sizeof(*n));
    if (!n) return NULL;
    m->item_ids = n;
    m->item_ids_cap = c;
  }
  for (size_t i = 0; i < bt->nseqs; i++) m->item_ids[i] = bt->seqs[i]->job->request_id;
  return m->item_ids;
}

int lp__batch_dispatch(lp_model_t *m, lp_backend_t *be, const lp_sched_plan_t *plan) {
  lp_proxy_t *p = m->proxy;
  lp_batch_t *bt = batch_get(m, plan->placed + 1);
  if (!bt) return -ENOMEM;
  bt->backend = be;
  bt->id = ++p->next_batch_id;
  bt->shape = plan->shape;
  if (plan->placed + 1 > m->scratch_cap) {
    size_t c = plan->placed + 1;
    lp_seq_ref_t *r = realloc(m->refs, c * sizeof(*r));
    if (r) m->refs = r;
    lp_place_t *pl = realloc(m->place, c * sizeof(*pl));
    if (pl) m->place = pl;
    if (!r || !pl) {
      batch_free(bt);
      return -ENOMEM;
    }
    m->scratch_cap = c;
  }
  lp_seq_ref_t *refs = m->refs;
  lp_place_t *place = m->place;
  size_t k = 0;
  for (size_t i = 0; i < plan->n; i++) {
    if (plan->place[i].bin < 0) continue;
    lp_seq_t *s = m->win[i];
    bt->seqs[k] = s;
    s->refs++;
    s->job->refs++;
    refs[k] = (lp_seq_ref_t){s->tokens, s->len};
    place[k] = plan->place[i];
    k++;
  }
  bt->nseqs = k;
  const lp_shape_t *sh = &m->shapes.shapes[plan->shape];
  /* only v2 rectangles send segment and position ids from the layout; the JSON
   * writer derives them from the segments */
  bt->layout.skip_ids = !(m->cfg->protocol == LP_PROTO_V2 &&
                          (m->cfg->v2.inputs[1][0] || m->cfg->v2.inputs[2][0]));
  int rc = m->cfg->ragged ? lp_layout_build_ragged(&bt->layout, NULL, refs, k)
                          : lp_layout_build(&bt->layout, sh->lanes, sh->bucket, m->cfg->pad_id,
                                            place, refs, k);
  if (rc) {
    batch_free(bt);
    return rc;
  }
  uint64_t now = uv_hrtime();
  for (size_t i = 0; i < bt->layout.nsegs; i++) {
    const lp_segment_t *g = &bt->layout.segs[i];
    lp_seq_t *s = bt->seqs[g->item];
    s->batch_id = bt->id;
    s->lanes = bt->layout.lanes;
    s->bucket = bt->layout.bucket;
    s->lane = g->lane;
    s->offset = g->offset;
    s->dispatch_ns = now;
    lp__model_unqueue(m, s, LP_SEQ_INFLIGHT);
  }
  bt->backend = be;
  const char *const *ids = batch_request_ids(m, bt);
  if (m->cfg->protocol == LP_PROTO_V2) {
    if (lp__v2_encode(m, bt, ids)) bt->body.oom = 1;
  } else {
    lp_batchjson_write(&m->writer, &bt->body, &bt->layout, bt->id, m->cfg->name, ids);
  }
  if (bt->body.oom) {
    fail_batch(bt, 503, "out_of_memory", "proxy out of memory");
    batch_free(bt);
    return 0;
  }
  /* accounting: what the chip will compute */
  uint64_t slots = (uint64_t)bt->layout.lanes * bt->layout.bucket;
  lp_bucket_set_account(&m->shapes, (size_t)plan->shape, (uint32_t)bt->layout.nsegs,
                        bt->layout.real_tokens);
  m->batches_by_shape[plan->shape]++;
  m->real_tokens += bt->layout.real_tokens;
  m->pad_tokens += slots - bt->layout.real_tokens;
  lp_hist_observe(&m->fill, (double)bt->layout.real_tokens / (double)slots);
  lp_hist_observe(&m->fill_by_shape[bt->shape], (double)bt->layout.real_tokens / (double)slots);
  bt->dispatch_ns = now;
  bt->device = lp_devclock_start(&be->clock, plan->shape, now, &bt->expect_ns);
  m->rr = (size_t)(be - m->backends) + 1;
  be->inflight++;
  m->inflight++;
  m->shape_inflight[plan->shape]++;
  p->batches++;
  lp_log(LP_LOG_DEBUG, "dispatch",
         "\"batch\": %llu, \"shape\": [%u, %u], \"segments\": %zu, \"fill\": %.4f, "
         "\"reason\": \"%s\", \"backend\": \"%s\"",
         (unsigned long long)bt->id, bt->layout.lanes, bt->layout.bucket, bt->layout.nsegs,
         plan->fill, plan->reason, be->url);
  if (m->cfg->protocol == LP_PROTO_V2)
    bt->xfer = lp_upstream_request_h(p->up, bt->url, bt->body.data, bt->body.len, bt->headers,
                                     m->cfg->backend_timeout_ms, answer_bound(m, bt), on_batch_done, bt);
  else
    bt->xfer = lp_upstream_request(p->up, be->batch_url, bt->body.data, bt->body.len,
                                   m->cfg->backend_timeout_ms, answer_bound(m, bt), on_batch_done, bt);
  if (bt->xfer) {
    bt->in_flight = 1;
    /* past stall_factor times its expected time, and at least stall_min_ms
     * past it, it counts as stalled: the floor keeps a busy host's jitter on
     * short batches from hedging them all (a storm of copies that starves new
     * work) */
    double f = m->cfg->stall_factor;
    if (f > 0 && bt->expect_ns > now) {
      uint64_t span = bt->expect_ns - now;
      uint64_t wait = (uint64_t)(f * (double)span);
      if (wait < span + m->cfg->stall_min_ms * 1000000ull) wait = span + m->cfg->stall_min_ms * 1000000ull;
      uint64_t at = now + wait;
      if (lp_theap_set(&p->stall_timers, &bt->stall, at) == 0) stall_arm(p);
    }
  } else {
    lp_devclock_abandon(&be->clock, bt->device, bt->expect_ns, uv_hrtime());
    be->inflight--;
    m->inflight--;
    m->shape_inflight[plan->shape]--;
    p->batches--;
    fail_batch(bt, 502, "backend_error", "could not start the upstream request");
    batch_free(bt);
  }
  return 0;
}

void lp__batches_free(lp_model_t *m) {
  while (m->spare) {
    lp_batch_t *b = m->spare;
    m->spare = b->next_spare;
    batch_destroy(b);
  }
}
