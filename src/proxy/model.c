/* A model's life: admission into its queue, the scheduler's decisions, batches
 * sent to a backend, answers sliced back to each client, and every way a
 * request can end (answered, failed, expired, cancelled) happening once. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lanepack/log.h"
#include "proxy.h"

static const double fill_bounds[] = {0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 0.98, 0.99, 1.0};

static void batch_destroy(lp_batch_t *b);

static void on_wake(uv_timer_t *t) {
  lp_model_t *m = t->data;
  lp__model_schedule(m);
}

int lp__model_init(lp_model_t *m, lp_proxy_t *p, const lp_model_config_t *cfg) {
  memset(m, 0, sizeof(*m));
  m->proxy = p;
  m->cfg = cfg;
  m->shapes = cfg->shapes;
  if (cfg->ragged) {
    /* a GPU backend takes any flat token list up to the budget */
    lp_bucket_set_init(&m->shapes);
    lp_bucket_set_add(&m->shapes, 1, cfg->ragged_max_tokens);
  }
  lp_sched_config_t sc = {.algo = cfg->packer, .fill_target = cfg->fill_target,
                          .max_wait_ns = cfg->max_wait_ms * 1000000ull,
                          .max_bypass = cfg->max_bypass,
                          .max_segments = cfg->max_segments_per_lane};
  m->sched = lp_sched_new(&sc);
  if (!m->sched) return -ENOMEM;
  uint32_t maxb = 0;
  for (size_t i = 0; i < m->shapes.count; i++)
    if (m->shapes.shapes[i].bucket > maxb) maxb = m->shapes.shapes[i].bucket;
  if (lp_lenhist_init(&m->lengths, maxb ? maxb : 1)) return -ENOMEM;
  if (lp_batchjson_init(&m->writer, maxb ? maxb : 1)) return -ENOMEM;
  lp_hist_init(&m->fill, fill_bounds, sizeof(fill_bounds) / sizeof(fill_bounds[0]));
  lp_scatter_init(&m->scatter);
  uv_timer_init(p->loop, &m->wake);
  m->wake.data = m;
  for (size_t i = 0; i < cfg->nbackends; i++) {
    lp_backend_t *b = &m->backends[m->nbackends++];
    b->model = m;
    snprintf(b->url, sizeof(b->url), "%s", cfg->backends[i]);
    snprintf(b->batch_url, sizeof(b->batch_url), "%s/v1/batch", cfg->backends[i]);
    snprintf(b->health_url, sizeof(b->health_url), "%s/healthz", cfg->backends[i]);
    snprintf(b->shapes_url, sizeof(b->shapes_url), "%s/v1/shapes", cfg->backends[i]);
    b->healthy = 1; /* until probes or batches say otherwise */
  }
  return 0;
}

void lp__model_close(lp_model_t *m) {
  uv_close((uv_handle_t *)&m->wake, NULL);
  lp_sched_free(m->sched);
  free(m->queue);
  free(m->items);
  lp_lenhist_free(&m->lengths);
  lp_batchjson_free(&m->writer);
  lp_scatter_free(&m->scatter);
  while (m->spare) {
    lp_batch_t *b = m->spare;
    m->spare = b->next_spare;
    batch_destroy(b);
  }
  free(m->refs);
  free(m->place);
}

int lp__model_ready(const lp_model_t *m) {
  for (size_t i = 0; i < m->nbackends; i++)
    if (m->backends[i].healthy && m->backends[i].probed_ok) return 1;
  return 0;
}

static int any_healthy(const lp_model_t *m) {
  for (size_t i = 0; i < m->nbackends; i++)
    if (m->backends[i].healthy) return 1;
  return 0;
}

/* ---- the queue ---- */

/* Takes a queued sequence out of the counts (the array is compacted later). */
static void unqueue(lp_model_t *m, lp_seq_t *s, int state) {
  s->state = state;
  m->queued_tokens -= s->len;
  if (--s->job->queued == 0) m->queued_requests--;
}

/* Drops from the array every sequence no longer queued. Must run before any
 * job whose sequences it holds can be freed. */
static void compact(lp_model_t *m) {
  size_t w = 0;
  for (size_t i = 0; i < m->qlen; i++)
    if (m->queue[i]->state == LP_SEQ_QUEUED) m->queue[w++] = m->queue[i];
  m->qlen = w;
}

/* Room for n more sequences, so that inserting them cannot fail half way. */
static int queue_reserve(lp_model_t *m, size_t n) {
  if (m->qlen + n <= m->qcap) return 0;
  size_t c = m->qcap ? m->qcap : 256;
  while (c < m->qlen + n) c *= 2;
  lp_seq_t **q = realloc(m->queue, c * sizeof(*q));
  if (!q) return -ENOMEM;
  m->queue = q;
  m->qcap = c;
  return 0;
}

static void queue_insert(lp_model_t *m, lp_seq_t *s) {
  /* higher priority first; equal priority in arrival order */
  size_t at = m->qlen;
  while (at > 0 && m->queue[at - 1]->priority < s->priority) at--;
  memmove(m->queue + at + 1, m->queue + at, (m->qlen - at) * sizeof(*m->queue));
  m->queue[at] = s;
  m->qlen++;
}

/* Puts a sequence back where its priority and arrival place it: a retried
 * sequence is older than what arrived meanwhile and goes before it. */
static int requeue(lp_model_t *m, lp_seq_t *s) {
  if (queue_reserve(m, 1)) return -ENOMEM;
  size_t at = 0;
  while (at < m->qlen && (m->queue[at]->priority > s->priority ||
                          (m->queue[at]->priority == s->priority && m->queue[at]->seqno < s->seqno)))
    at++;
  memmove(m->queue + at + 1, m->queue + at, (m->qlen - at) * sizeof(*m->queue));
  m->queue[at] = s;
  m->qlen++;
  s->state = LP_SEQ_QUEUED;
  m->queued_tokens += s->len;
  if (s->job->queued++ == 0) m->queued_requests++;
  return 0;
}

/* ---- ending jobs ---- */

void lp__job_free(lp_job_t *job) {
  for (uint32_t i = 0; i < job->nseq; i++) free(job->seqs[i].out);
  free(job->seqs);
  free(job->tokens);
  free(job->id_json);
  job->proxy->jobs--;
  free(job);
}

/* Removes the job's queued sequences (they will never be sent). */
static void drop_queued(lp_job_t *job) {
  if (!job->queued) return;
  lp_model_t *m = job->model;
  for (uint32_t i = 0; i < job->nseq; i++) {
    lp_seq_t *s = &job->seqs[i];
    if (s->state == LP_SEQ_QUEUED) {
      s->cancelled = 1;
      unqueue(m, s, LP_SEQ_DONE);
      job->unresolved--;
    }
  }
  compact(m);
}

void lp__job_fail(lp_job_t *job, int status, const char *code, const char *msg) {
  if (!job->answered) {
    job->answered = 1;
    if (job->req) {
      const char *hdr = status == 429 || status == 503 ? "Retry-After: 1\r\n" : NULL;
      lp_proxy_reject(job->proxy, job->req, LP_ROUTE_INFER, status, hdr, code, msg, NULL);
      job->req = NULL;
    }
  }
  drop_queued(job);
  if (job->unresolved == 0) lp__job_free(job);
}

void lp__job_cancel(lp_job_t *job) {
  job->req = NULL;
  job->answered = 1;
  drop_queued(job);
  if (job->unresolved == 0) lp__job_free(job);
}

void lp__model_fail_all(lp_model_t *m, int status, const char *code, const char *msg) {
  while (m->qlen > 0) lp__job_fail(m->queue[0]->job, status, code, msg);
}

/* ---- admission ---- */

int lp__model_admit(lp_model_t *m, lp_job_t *job) {
  lp_proxy_t *p = m->proxy;
  p->jobs++;
  if (p->draining) {
    lp__job_fail(job, 503, "shutting_down", "the proxy is shutting down");
    return -1;
  }
  if (!any_healthy(m)) {
    lp__job_fail(job, 503, "no_healthy_backend", "no backend of this model is healthy");
    return -1;
  }
  uint64_t tokens = 0;
  for (uint32_t i = 0; i < job->nseq; i++) tokens += job->seqs[i].len;
  if (m->queued_requests + 1 > m->cfg->max_queue_requests ||
      m->queued_tokens + tokens > m->cfg->max_queue_tokens) {
    lp__job_fail(job, 429, "queue_full", "the queue is full; retry later");
    return -1;
  }
  if (queue_reserve(m, job->nseq)) {
    lp__job_fail(job, 503, "out_of_memory", "proxy out of memory");
    return -1;
  }
  for (uint32_t i = 0; i < job->nseq; i++) {
    lp_seq_t *s = &job->seqs[i];
    s->seqno = m->next_seqno++;
    s->state = LP_SEQ_QUEUED;
    s->sched = (lp_sched_item_t){.len = s->len, .enqueued_ns = job->arrive_ns,
                                 .deadline_ns = job->deadline_ns};
    queue_insert(m, s);
    m->queued_tokens += s->len;
    lp_lenhist_add(&m->lengths, s->len, 1);
  }
  job->unresolved = job->queued = job->nseq;
  m->queued_requests++;
  lp_proxy_kick(p);
  return 0;
}

/* ---- answering ---- */

/* Nanoseconds as milliseconds with three decimals, without printf's float path
 * (it showed in the profile of every answer). */
static void put_ms(lp_buf_t *b, uint64_t ns) {
  uint64_t us = (ns + 500) / 1000;
  char frac[4] = {(char)('0' + us / 100 % 10), (char)('0' + us / 10 % 10), (char)('0' + us % 10), 0};
  lp_buf_u64(b, us / 1000);
  lp_buf_puts(b, ".");
  lp_buf_puts(b, frac);
}

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

/* The client's answer, once every sequence of the job has its output.
 * Returns 0, or -ENOMEM with nothing sent. */
static int answer(lp_job_t *job, const char *single, size_t single_len, int per_segment) {
  lp_proxy_t *p = job->proxy;
  lp_buf_t *body = &p->scratch;
  lp_buf_reset(body);
  uint64_t now = uv_hrtime(), queue_ns = 0, backend_ns = 0;
  for (uint32_t i = 0; i < job->nseq; i++) {
    const lp_seq_t *s = &job->seqs[i];
    if (s->dispatch_ns - job->arrive_ns > queue_ns) queue_ns = s->dispatch_ns - job->arrive_ns;
    if (s->done_ns - s->dispatch_ns > backend_ns) backend_ns = s->done_ns - s->dispatch_ns;
  }
  lp_buf_puts(body, "{");
  if (job->id_json) {
    lp_buf_puts(body, "\"id\": ");
    lp_buf_puts(body, job->id_json);
    lp_buf_puts(body, ", ");
  }
  if (!job->multi) {
    lp_buf_puts(body, "\"output\": ");
    if (!per_segment) lp_buf_puts(body, "[");
    lp_buf_append(body, single, single_len);
    if (!per_segment) lp_buf_puts(body, "]");
    lp_buf_puts(body, ", \"batch\": ");
    put_batch(body, &job->seqs[0]);
  } else {
    lp_buf_puts(body, "\"outputs\": [");
    for (uint32_t i = 0; i < job->nseq; i++) {
      if (i) lp_buf_puts(body, ", ");
      lp_buf_append(body, job->seqs[i].out, job->seqs[i].out_len);
    }
    lp_buf_puts(body, "], \"batches\": [");
    for (uint32_t i = 0; i < job->nseq; i++) {
      if (i) lp_buf_puts(body, ", ");
      put_batch(body, &job->seqs[i]);
    }
    lp_buf_puts(body, "]");
  }
  lp_buf_puts(body, ", \"timing_ms\": {\"queue\": ");
  put_ms(body, queue_ns);
  lp_buf_puts(body, ", \"backend\": ");
  put_ms(body, backend_ns);
  lp_buf_puts(body, ", \"total\": ");
  put_ms(body, now - job->arrive_ns);
  lp_buf_puts(body, "}}\n");
  if (body->oom) return -ENOMEM;
  lp_hist_observe(&p->t_queue, (double)queue_ns / 1e9);
  lp_hist_observe(&p->t_backend, (double)backend_ns / 1e9);
  lp_hist_observe(&p->t_total, (double)(now - job->arrive_ns) / 1e9);
  lp_buf_t out;
  lp_buf_init(&out);
  /* one allocation for the whole answer: head and body */
  if (lp_buf_reserve(&out, body->len + 256)) return -ENOMEM;
  lp_http_head(job->req, &out, 200, NULL, "application/json", body->len);
  lp_buf_append(&out, body->data, body->len);
  lp_proxy_count(p, LP_ROUTE_INFER, 200);
  lp_http_respond_raw(job->req, &out);
  lp_buf_free(&out);
  job->req = NULL;
  job->answered = 1;
  return 0;
}

/* One sequence's output arrived: per-token answers are wrapped in [ ] here. */
static void seq_done(lp_seq_t *s, const char *slice, size_t len, int per_segment) {
  lp_job_t *job = s->job;
  s->state = LP_SEQ_DONE;
  s->done_ns = uv_hrtime();
  job->unresolved--;
  job->model->sequences_done++;
  if (!job->answered && job->req) {
    int rc = 0;
    if (!job->multi) {
      rc = answer(job, slice, len, per_segment);
    } else if ((s->out = malloc(len + 2)) == NULL) {
      rc = -ENOMEM;
    } else {
      size_t k = 0;
      if (!per_segment) s->out[k++] = '[';
      memcpy(s->out + k, slice, len);
      k += len;
      if (!per_segment) s->out[k++] = ']';
      s->out_len = k;
      if (job->unresolved == 0) rc = answer(job, NULL, 0, per_segment);
    }
    if (rc) {
      lp__job_fail(job, 503, "out_of_memory", "proxy out of memory"); /* frees at 0 */
      return;
    }
  }
  if (job->unresolved == 0) lp__job_free(job);
}

static void seq_failed(lp_seq_t *s, int status, const char *code, const char *msg) {
  lp_job_t *job = s->job;
  s->state = LP_SEQ_DONE;
  job->unresolved--;
  lp__job_fail(job, status, code, msg); /* frees the job when nothing refers to it */
}

/* ---- batches ---- */

#define LP_SPARE_BATCHES 4

static void batch_destroy(lp_batch_t *b) {
  lp_layout_free(&b->layout);
  lp_buf_free(&b->body);
  free(b->seqs);
  free(b);
}

/* A finished batch goes back to its model's pool, buffers and all. */
static void batch_free(lp_batch_t *b) {
  lp_model_t *m = b->model;
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
    if (bt->seqs[i]) seq_failed(bt->seqs[i], status, code, msg);
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
    if (job->answered) { /* the client left, or another sequence failed it */
      s->state = LP_SEQ_DONE;
      if (--job->unresolved == 0) lp__job_free(job);
    } else if (m->proxy->hard_stop) {
      seq_failed(s, 503, "shutting_down", "the proxy is shutting down");
    } else if (s->sched.deadline_ns && s->sched.deadline_ns <= now) {
      seq_failed(s, 504, "deadline_exceeded", "the deadline passed while retrying");
    } else if (requeue(m, s)) {
      seq_failed(s, 503, "out_of_memory", "proxy out of memory");
    }
  }
  uv_close((uv_handle_t *)&bt->retry, on_batch_retry_closed);
  lp_proxy_kick(m->proxy);
}

/* A batch failed before the backend computed it: its sequences are tried again
 * (budget and deadline allowing) after a backoff; free_try (a shape mismatch,
 * re-packed at once) does not spend the budget. The rest fail with status.
 * Returns 1 when the batch is kept for the retry, 0 when it can be freed. */
static int retry_batch(lp_batch_t *bt, int status, const char *code, const char *msg, int free_try) {
  lp_model_t *m = bt->model;
  uint64_t now = uv_hrtime();
  uint32_t most = 0;
  size_t kept = 0;
  for (size_t i = 0; i < bt->nseqs; i++) {
    lp_seq_t *s = bt->seqs[i];
    bt->seqs[i] = NULL;
    lp_job_t *job = s->job;
    uint64_t backoff = free_try ? 0 : (m->cfg->retry_backoff_ms << s->attempts) * 1000000ull;
    if (job->answered) {
      s->state = LP_SEQ_DONE;
      if (--job->unresolved == 0) lp__job_free(job);
    } else if (!free_try && s->attempts >= m->cfg->max_retries) {
      seq_failed(s, status, code, msg);
    } else if (s->sched.deadline_ns && s->sched.deadline_ns <= now + backoff) {
      seq_failed(s, 504, "deadline_exceeded", "the deadline would pass before a retry");
    } else {
      if (!free_try) s->attempts++;
      if (s->attempts > most) most = s->attempts;
      m->proxy->retries++;
      bt->seqs[i] = s;
      kept++;
    }
  }
  if (!kept) return 0;
  bt->backoff_ms = free_try ? 0 : (uint32_t)(m->cfg->retry_backoff_ms << (most ? most - 1 : 0));
  uv_timer_init(m->proxy->loop, &bt->retry);
  uv_timer_start(&bt->retry, on_batch_retry, bt->backoff_ms, 0);
  return 1;
}

/* A backend that does not have a shape: never send it that shape again, and if
 * no backend has it, the model no longer chooses or admits by it. */
static void shape_missing(lp_model_t *m, lp_backend_t *be, int shape) {
  be->bad_shapes |= 1u << shape;
  int anywhere = 0;
  for (size_t i = 0; i < m->nbackends; i++) anywhere |= !(m->backends[i].bad_shapes & (1u << shape));
  if (!anywhere) m->shapes.shapes[shape].state = LP_SHAPE_UNAVAILABLE;
  lp_log(LP_LOG_WARN, "shape mismatch", "\"backend\": \"%s\", \"shape\": [%u, %u], \"anywhere\": %s",
         be->url, m->shapes.shapes[shape].lanes, m->shapes.shapes[shape].bucket,
         anywhere ? "true" : "false");
}

static void on_batch_done(lp_xfer_t *x, void *ud) {
  lp_batch_t *bt = ud;
  lp_model_t *m = bt->model;
  lp_proxy_t *p = m->proxy;
  lp_backend_t *be = bt->backend;
  be->inflight--;
  m->inflight--;
  p->batches--;
  char msg[600];
  if (x->result != LP_XFER_OK) {
    int timeout = x->result == LP_XFER_TIMEOUT;
    snprintf(msg, sizeof(msg), "backend %s: %s (%s)", be->url,
             timeout ? "no answer in time" : "transfer failed", x->error);
    int keep = 0;
    if (x->result != LP_XFER_CANCELLED) {
      be->failures++;
      lp__backend_result(be, 0);
      lp_log(LP_LOG_WARN, "batch failed", "\"batch\": %llu, \"backend\": \"%s\", \"kind\": \"%s\"",
             (unsigned long long)bt->id, be->url, lp_xfer_result_name(x->result));
      keep = retry_batch(bt, timeout ? 504 : 502, timeout ? "backend_timeout" : "backend_error", msg, 0);
    } else {
      fail_batch(bt, 503, "shutting_down", msg);
    }
    if (keep) {
      lp_proxy_kick(p);
      return;
    }
  } else if (x->status != 200) {
    size_t n = x->body.len > 160 ? 160 : x->body.len;
    snprintf(msg, sizeof(msg), "backend %s answered %ld: %.*s", be->url, x->status, (int)n,
             x->body.data ? x->body.data : "");
    while (n && (msg[strlen(msg) - 1] == '\n')) msg[strlen(msg) - 1] = 0, n--;
    int mismatch = x->status == 500 && (contains(&x->body, "shape mismatch") ||
                                        contains(&x->body, "shape_mismatch"));
    int keep = 0;
    be->failures++;
    if (mismatch) {
      /* the backend is fine; the shape is not there: re-pack at once (the shape
       * is now barred on this backend, so this cannot repeat) */
      shape_missing(m, be, bt->shape);
      keep = retry_batch(bt, 502, "backend_error", msg, 1);
    } else if (x->status >= 500) {
      lp__backend_result(be, 0);
      keep = retry_batch(bt, 502, "backend_error", msg, 0);
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
    char err[200];
    int rc = lp_scatter_index(sc, x->body.data ? x->body.data : "", x->body.len, &bt->layout,
                              err, sizeof(err));
    if (rc) {
      snprintf(msg, sizeof(msg), "backend %s answered a malformed batch: %s", be->url, err);
      be->failures++;
      lp__backend_result(be, 0);
      lp_log(LP_LOG_WARN, "bad backend answer", "\"batch\": %llu, \"error\": \"%s\"",
             (unsigned long long)bt->id, err);
      fail_batch(bt, 502, "bad_backend_answer", msg);
    } else {
      be->batches++;
      lp__backend_result(be, 1);
      for (size_t i = 0; i < bt->layout.nsegs; i++) {
        const lp_segment_t *g = &bt->layout.segs[i];
        const char *start;
        size_t len;
        lp_scatter_slice(sc, g, &start, &len);
        seq_done(bt->seqs[g->item], start, len, sc->per_segment);
      }
    }
  }
  batch_free(bt);
  lp_proxy_kick(p);
}

/* Sends what the plan placed; the placed sequences leave the queue. */
static int dispatch(lp_model_t *m, lp_backend_t *be, const lp_sched_plan_t *plan) {
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
    lp_seq_t *s = m->queue[i];
    bt->seqs[k] = s;
    refs[k] = (lp_seq_ref_t){s->tokens, s->len};
    place[k] = plan->place[i];
    k++;
  }
  bt->nseqs = k;
  const lp_shape_t *sh = &m->shapes.shapes[plan->shape];
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
    unqueue(m, s, LP_SEQ_INFLIGHT);
  }
  compact(m);
  lp_batchjson_write(&m->writer, &bt->body, &bt->layout, bt->id, m->cfg->name);
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
  bt->dispatch_ns = now;
  m->rr = (size_t)(be - m->backends) + 1;
  be->inflight++;
  m->inflight++;
  p->batches++;
  lp_log(LP_LOG_DEBUG, "dispatch",
         "\"batch\": %llu, \"shape\": [%u, %u], \"segments\": %zu, \"fill\": %.4f, "
         "\"reason\": \"%s\", \"backend\": \"%s\"",
         (unsigned long long)bt->id, bt->layout.lanes, bt->layout.bucket, bt->layout.nsegs,
         plan->fill, plan->reason, be->url);
  bt->xfer = lp_upstream_request(p->up, be->batch_url, bt->body.data, bt->body.len,
                                 m->cfg->backend_timeout_ms, on_batch_done, bt);
  if (!bt->xfer) {
    be->inflight--;
    m->inflight--;
    p->batches--;
    fail_batch(bt, 502, "backend_error", "could not start the upstream request");
    batch_free(bt);
  }
  return 0;
}

/* Fails queued requests whose deadline has passed (they are not sent), and
 * those that only a compiling shape could hold once they have waited the
 * backend timeout: a shape that never compiles must not hold them forever. */
static void expire(lp_model_t *m, uint64_t now) {
  uint32_t compiled = 0;
  for (size_t i = 0; i < m->shapes.count; i++)
    if (m->shapes.shapes[i].state == LP_SHAPE_COMPILED && m->shapes.shapes[i].bucket > compiled)
      compiled = m->shapes.shapes[i].bucket;
  uint64_t patience = m->cfg->backend_timeout_ms * 1000000ull;
  for (size_t i = 0; i < m->qlen;) {
    lp_seq_t *s = m->queue[i];
    if (s->sched.deadline_ns && s->sched.deadline_ns <= now) {
      lp__job_fail(s->job, 504, "deadline_exceeded", "the deadline passed while queued");
      i = 0; /* the queue was compacted */
      continue;
    }
    if (s->len > compiled && now - s->sched.enqueued_ns > patience) {
      lp__job_fail(s->job, 503, "shape_compiling",
                   "only a shape still compiling can hold this sequence");
      i = 0;
      continue;
    }
    i++;
  }
}

static void arm_wake(lp_model_t *m, uint64_t at, uint64_t now) {
  uint64_t d = at > now ? (at - now + 999999) / 1000000 : 0;
  if (d == 0) d = 1;
  uv_timer_start(&m->wake, on_wake, d, 0);
}

/* Runs the policy until it says wait: each decision dispatches one batch to a
 * backend with a free slot. With no slot free, requests stay queued (and pack
 * better); a finished batch runs this again. */
void lp__model_schedule(lp_model_t *m) {
  lp_proxy_t *p = m->proxy;
  for (;;) {
    uint64_t now = uv_hrtime();
    expire(m, now);
    if (m->qlen == 0) {
      uv_timer_stop(&m->wake);
      return;
    }
    if (!any_healthy(m)) {
      lp__model_fail_all(m, 503, "no_healthy_backend", "no backend of this model is healthy");
      return;
    }
    lp_backend_t *be = lp__backend_pick(m);
    if (!be) {
      /* every slot busy: a completion reschedules; deadlines still expire */
      uint64_t next = UINT64_MAX;
      for (size_t i = 0; i < m->qlen && i < 4096; i++)
        if (m->queue[i]->sched.deadline_ns && m->queue[i]->sched.deadline_ns < next)
          next = m->queue[i]->sched.deadline_ns;
      if (next != UINT64_MAX) arm_wake(m, next, now);
      return;
    }
    size_t n = m->qlen < 4096 ? m->qlen : 4096;
    if (n > m->items_cap) {
      size_t c = m->items_cap ? m->items_cap : 256;
      while (c < n) c *= 2;
      lp_sched_item_t *it = realloc(m->items, c * sizeof(*it));
      if (!it) return;
      m->items = it;
      m->items_cap = c;
    }
    for (size_t i = 0; i < n; i++) m->items[i] = m->queue[i]->sched;
    /* draining: everything is due now */
    uint64_t t = p->draining ? now + 3600ull * 1000000000ull : now;
    /* the shapes as this backend has them */
    const lp_bucket_set_t *view = &m->shapes;
    lp_bucket_set_t local;
    if (be->bad_shapes) {
      local = m->shapes;
      for (size_t i = 0; i < local.count; i++)
        if (be->bad_shapes & (1u << i)) local.shapes[i].state = LP_SHAPE_UNAVAILABLE;
      view = &local;
    }
    lp_sched_plan_t plan;
    if (lp_sched_decide(m->sched, view, m->items, n, t, &plan)) return;
    for (size_t i = 0; i < n; i++) m->queue[i]->sched.bypassed = m->items[i].bypassed;
    switch (plan.action) {
      case LP_SCHED_IDLE:
        return;
      case LP_SCHED_NO_SHAPE:
        lp__model_fail_all(m, 503, "no_shape_available", "no shape of this model is compiled");
        return;
      case LP_SCHED_WAIT: {
        uint64_t at = plan.wake_ns;
        for (size_t i = 0; i < n; i++)
          if (m->queue[i]->sched.deadline_ns && m->queue[i]->sched.deadline_ns < at)
            at = m->queue[i]->sched.deadline_ns;
        arm_wake(m, at, now);
        return;
      }
      case LP_SCHED_DISPATCH:
        if (dispatch(m, be, &plan)) {
          lp_log(LP_LOG_ERROR, "dispatch failed", NULL);
          lp__model_fail_all(m, 503, "out_of_memory", "proxy out of memory");
          return;
        }
        break;
    }
  }
}
