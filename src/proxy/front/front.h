/* A front's thread (src/proxy/front/): its context (lp_front_s: loop,
 * listeners, scratch, counters, access log, its copy of the configuration)
 * and the routes, refusals and answers written on it. No folder below
 * front/ sees lp_front_s: the scheduler keeps its own record of each front
 * (lp_sched_front_t, sched/sched.h), and the tokenizer workers hand a
 * finished job up through the callback the front registered
 * (lp__front_tok_finished). */
#ifndef LANEPACK_PROXY_FRONT_H
#define LANEPACK_PROXY_FRONT_H

#include "handoff/handoff.h"
#include "sched/sched.h"
#include "tokwork/tokwork.h"
#include "wire/wire.h"

#include "lanepack/metrics.h"
#include "lanepack/tei.h"

/* The challenge a 401 carries (RFC 9110 11.6.1), in every route's dialect. */
#define LP__AUTH_CHALLENGE "WWW-Authenticate: Bearer\r\n"

#define LP_STATUS_SLOTS 22

/* Where an embeddings answer being written stands: the next input to write
 * (0: not begun) and the first vector's length (0 before it). */
typedef struct lp_vecpos_s {
  uint32_t next;
  long first;
} lp_vecpos_t;

/* A success too large to write in one loop turn (front/deliver.c): written a
 * slice a turn, its job's reference and outputs held until it is answered. */
typedef struct lp_sliced_s lp_sliced_t;

/* The statuses counted per route, 0-terminated (front/reject.c). */
extern const int lp__status_codes[LP_STATUS_SLOTS];

/* A front's access log: whole lines gathered, written with one write(2) to its
 * own descriptor of the shared file (O_APPEND: lines of different fronts never
 * interleave). */
typedef struct lp_alog_s {
  int on;                 /* fd is open */
  int fd;                 /* owned (unless STDERR_FILENO and alone) */
  int failing;            /* its last write failed (warned once) */
  uint64_t dropped;       /* lines lost to failed writes (relaxed: read by /metrics) */
  uint64_t seen;          /* successes considered for sampling */
  lp_buf_t line;          /* the line being written; reused */
  lp_buf_t buf;           /* whole lines not yet written */
} lp_alog_t;

/* A front: accepts, reads, parses and answers on its own loop and thread,
 * with its own listener, scratch, counters and access log, and talks to the
 * scheduler through mailboxes only, whatever the number of fronts.
 * Everything here is the front's own unless marked. */
struct lp_front_s {
  lp_shared_t *shared;     /* what every front reads (the process's; its thread rule there) */
  unsigned index;
  int trim_due;            /* the proxy found it quiet: give its arena's top back (atomic) */
  uv_loop_t *loop;         /* own_loop */
  uv_loop_t own_loop;
  uv_thread_t thread;
  /* the configuration this front reads: its own copy, replaced on reload by
   * a RECONF message; owned */
  const lp_config_t *cfg;
  char **tokens;           /* its own copy of the bearer tokens; owned */
  size_t ntokens;
  lp_httpd_t *httpd;
  lp_httpd_t *admin;       /* front 0 only: the admin listener, if configured */
  lp_mbox_t inbox;         /* answers and control messages from the scheduler */
  uv_timer_t tick;         /* flushes the access log, publishes the connection count */
  /* jobs parsed this loop turn, handed to the scheduler together after
   * the turn's reads (one lock, at most one wake-up) by the check handle */
  lp_job_t *to_sched, *to_sched_last;
  uv_check_t flush;
  uv_idle_t flush_soon;    /* while jobs wait: the loop does not sleep before the flush */
  /* pages back from the scheduler, not yet rendered: a few a loop turn
   * (front.c), so that a client pipelining pages delays only itself */
  lp_job_t *pages_back, *pages_back_last;
  uv_idle_t pages_soon;    /* while pages wait: the next turn renders more */
  /* answers being written a slice a loop turn (deliver.c), in turn; each
   * owned here until answered or its client leaves */
  lp_sliced_t *answers, *answers_last;
  uv_idle_t answers_soon;  /* while answers wait: the next turn writes more */
  /* the front's own upstream connections, on its loop: the batches
   * the scheduler hands it are sent and their answers read and opened here
   * (wire/transfer.c), so no byte of theirs is the scheduler's; owned */
  lp_upstream_t *up;
  /* batches whose transfer ended this turn, handed back with to_sched */
  lp_batch_t *sent, *sent_last;
  int closing;             /* its listeners are closing (drain) */
  int open_servers;        /* listeners not yet closed */
  lp_buf_t scratch;        /* answers are built here, then handed to the server */
  lp_buf_t vec_text;       /* one sequence's output as text, read as a vector (embeddings) */
  float *vec;              /* ... its values; vec_cap of them; owned */
  size_t vec_cap;
  lp_tokbox_t tokbox;      /* jobs back from the tokenizer workers */
  int32_t *enc;            /* a request's token ids, text inputs tokenized; enc_cap; owned */
  size_t enc_cap;
  int32_t *tok_scratch;    /* token and length arrays lent to each parse; owned */
  size_t tok_scratch_cap;
  uint32_t *len_scratch;
  size_t len_scratch_cap;
  /* metrics (relaxed: read by whoever renders /metrics) */
  uint64_t requests[LP_ROUTE_COUNT][LP_STATUS_SLOTS];
  struct { char code[48]; uint64_t n; } rejections[32];
  size_t nrejections;      /* release-stored after the code is written */
  lp_hist_t t_queue, t_backend, t_total;
  uint64_t served;         /* requests routed */
  uint64_t answer_slices;  /* loop turns spent on answers being written a slice a turn, after their first */
  uint64_t conns;          /* open connections as of its last look */
  lp_alog_t alog;
};

/* Bodies up to this size are decoded on the front as they come (a few
 * hundred microseconds at most); larger ones on a tokenizer worker (a CALL
 * unit), so that a client's 1 MiB text costs the loop a hand-off, not a
 * decode. */
#define LP_PARSE_INLINE_MAX (64u << 10)
/* ... unless the workers already hold this much (text and bodies): then the
 * body is decoded on the front as it comes, and the loop reads no more
 * meanwhile (the kernel's buffers hold the rest), so a burst of large bodies
 * arriving faster than they decode is not all read into memory (16 MiB:
 * eight 2 MiB bodies parked beside the loop). */
#define LP_DECODE_QUEUE_MAX (16u << 20)
/* front/tokhand.c: req's body to a worker to decode (a CALL unit running
 * call, then done on the front), when it is larger than LP_PARSE_INLINE_MAX
 * and the workers hold less than LP_DECODE_QUEUE_MAX: 0 with req->body moved
 * into *body (a field of ctx) and ctx the job's (ctx_free), or -EAGAIN /
 * -ENOMEM with nothing changed: the caller decodes it here. */
int lp__front_decode(lp_front_t *f, lp_http_req_t *req, void *ctx, void (*ctx_free)(void *ctx), char **body,
                     void (*call)(lp_tokjob_t *job), void (*done)(lp_front_t *f, lp_tokjob_t *job, lp_http_req_t *req));

/* front/accesslog.c: JSON lines of answered requests (job may be NULL), each front
 * its own buffer and descriptor. Opening gives every front the file (with
 * several threads, a descriptor each, by a RECONF message); each
 * closes what it had (after writing what it was owed). */
int lp__access_log_open(lp_proxy_t *p, const char *path, char *err, size_t errlen);
int lp__alog_open_path(const char *path, int *fd, char *err, size_t errlen);
/* A front's own descriptor (*fd) of the log that lp__alog_open_path opened as
 * checked: -1 when off, standard error for "-", else the file opened anew. */
int lp__alog_front_fd(const char *path, int checked, int *fd);
void lp__alog_set_fd(lp_alog_t *a, int fd);
void lp__alog_close(lp_alog_t *a);
size_t lp__alog_flush(lp_alog_t *a); /* returns the bytes still owed to a full pipe */
void lp__access_log(lp_front_t *f, const lp_http_req_t *req, int status, const lp_job_t *job);
/* A refusal's line names its error code (the one counted and answered). */
void lp__access_log_refused(lp_front_t *f, const lp_http_req_t *req, int status, const char *code,
                            const lp_job_t *job);

/* front/reject.c: counting and refusing, on the front that owns req. */
void lp_proxy_count(lp_front_t *f, int route, int status);
void lp__count_rejection(lp_front_t *f, const char *code);
void lp_proxy_reject(lp_front_t *f, lp_http_req_t *req, int route, int status,
                     const char *headers, const char *code, const char *msg, const char *extra);
/* The same for the request of job (its sequences and timings go in the access log). */
void lp__reject_job(lp_front_t *f, lp_http_req_t *req, int route, int status, const char *headers,
                    const char *code, const char *msg, const char *extra, const lp_job_t *job);
/* front/route.c: the request handlers every front's server calls (ud: the front). */
void lp__on_request(lp_http_req_t *req, void *ud);
void lp__on_admin_request(lp_http_req_t *req, void *ud);
void lp__on_cancel(lp_http_req_t *req, void *ud);
int lp__on_reject(lp_http_req_t *req, int status, const char *code, const char *msg, const char *headers,
                  void *ud);
/* The TEI route (LP_ROUTE_TEI_*) req's path names, or 0. */
int lp__tei_route(const lp_http_req_t *req);

/* front/front.c: the front loops, their listeners and threads; what the
 * process tells every front (new limits, tokens and configuration on a
 * reload; drain; stop). */
int lp__fronts_start(lp_proxy_t *p, int *port);
void lp__fronts_reconfigure(lp_proxy_t *p);
void lp__fronts_drain(lp_proxy_t *p);
/* Several threads: every front's transfers in flight end LP_XFER_CANCELLED
 * (the drain's last step); their batches come back as any other. */
void lp__fronts_cancel_transfers(lp_proxy_t *p);
/* Stops and joins the front threads (their transfers cancelled: batches not
 * yet taken by the scheduler are freed unheard) and frees what they own. */
void lp__fronts_stop(lp_proxy_t *p);
/* The server limits a configuration sets, and the latency histograms' bounds. */
void lp__httpd_limits(const lp_config_t *cfg, lp_httpd_config_t *hc);
const double *lp__latency_bounds(size_t *n);

/* front/tokhand.c: a front's traffic to the tokenizer workers. init: its
 * tok box on its loop. finished: the pool's callback (lp__tokpool_start; any
 * thread, a worker's), job onto its front's box. tokenize hands job (its units and done set) over for
 * req: 0, or -EAGAIN (the text waiting would pass tokenizer_queue_bytes: the
 * route answers 429) with the job still the caller's. cancel: req's client
 * left (lp__on_cancel). */
int lp__front_tok_init(lp_front_t *f);
void lp__front_tok_finished(lp_tokjob_t *job);
int lp__front_tokenize(lp_front_t *f, lp_http_req_t *req, lp_tokjob_t *job);
void lp__front_tok_cancel(lp_front_t *f, lp_tokjob_t *job);
/* req->app while req's answer is being written a slice a turn: the answer
 * with the second bit set. */
static inline void *lp__app_sliced(lp_sliced_t *a) { return (void *)((uintptr_t)a | 2u); }
static inline lp_sliced_t *lp__app_as_sliced(void *app) {
  return ((uintptr_t)app & 3u) == 2u ? (lp_sliced_t *)((uintptr_t)app & ~(uintptr_t)3u) : NULL;
}
/* req->app while req's text is at the workers: its tokjob with the low bit
 * set (jobs and tokjobs come from malloc, aligned), so that a client's
 * leaving tells the two apart. */
static inline void *lp__app_tokjob(lp_tokjob_t *j) { return (void *)((uintptr_t)j | 1u); }
static inline lp_tokjob_t *lp__app_as_tokjob(void *app) {
  return ((uintptr_t)app & 1u) ? (lp_tokjob_t *)((uintptr_t)app & ~(uintptr_t)1u) : NULL;
}

/* front/submit.c: a front's traffic to the scheduler. Hands a parsed job to
 * the scheduler (directly, or by message). */
void lp__front_submit(lp_front_t *f, lp_http_req_t *req, lp_job_t *job);
/* Jobs parsed this loop turn, and batches whose transfers ended, go to the
 * scheduler now (before a cancel); the front loop's check handle calls it
 * once per turn. */
void lp__front_flush(lp_front_t *f);
/* Something waits for lp__front_flush: the loop does not sleep before it. */
void lp__front_flush_due(lp_front_t *f);
void lp__front_on_flush(uv_check_t *h);
/* The front's open connections, published for /metrics. */
void lp__front_publish(lp_front_t *f);
/* A page job for the scheduler, answered when it comes back (the advice may
 * wait for its worker first). */
void lp__front_ask_page(lp_front_t *f, lp_http_req_t *req, int route, int v2r);
/* front/batches.c: starts the transfers of the batches the scheduler handed
 * this front (linked by hand_next); each comes back by lp__front_flush. */
void lp__front_send_batches(lp_front_t *f, lp_batch_t *list);
/* front/pages.c: the pages of the scheduler's state rendered on the front
 * from a snapshot asked of the scheduler (a message there and back); the
 * advice is the scheduler's. */
void lp__front_page(lp_front_t *f, lp_http_req_t *req, int route, int v2r);
/* A page job back from the scheduler: req answered from its snapshot (which
 * the job's reference then drops) or its res_* (the advice, an error). */
void lp__front_page_back(lp_front_t *f, lp_job_t *job, lp_http_req_t *req);

/* front/infer.c: the bounds both routes put on a request's time fields. A deadline
 * (deadline_ms, or v2's timeout) past an hour counts as an hour, the longest
 * default_deadline_ms: the request's own bound answers it before that anyway. */
#define LP_MAX_DEADLINE_MS 3600000.0
/* A priority in [-1000, 1000]; beyond, the nearer end. */
int lp__clamp_priority(int64_t priority);

/* front/infer.c: parses a body into a job; on failure answers the client itself. */
lp_job_t *lp__infer_parse(lp_front_t *f, lp_http_req_t *req, const char *model_from_path,
                          size_t model_len);
/* A job of nseq sequences of lens[i] tokens laid end to end in tokens (copied
 * into the job's one block with its sequences and id), checked against the model's vocabulary and
 * shapes; field names the input in messages. deadline_ms: the client's, checked
 * finite and >= 0 by the caller; > 0 is clamped to LP_MAX_DEADLINE_MS; 0 or < 0
 * (none given) leaves the model's default_deadline_ms. NULL with e set on refusal. */
lp_job_t *lp__job_new(lp_front_t *f, lp_model_t *m, const int32_t *tokens, size_t ntokens,
                      const uint32_t *lens, size_t nseq, int multi, int priority, double deadline_ms,
                      const char *id_json, size_t id_len, const char *field, lp_perr_t *e);
/* The same, with text (when not NULL): the one sequence's tokens as the
 * client wrote them between the brackets; when that is digits, commas and
 * whitespace only, it is kept in the job's block without the whitespace, the
 * form lp_buf_i32_list writes ("1,2,3"), so the batch writer copies it
 * (lp_seq_ref_t.text) instead of writing the numbers again. */
lp_job_t *lp__job_new_text(lp_front_t *f, lp_model_t *m, const int32_t *tokens, size_t ntokens,
                           const uint32_t *lens, size_t nseq, int multi, int priority,
                           double deadline_ms, const char *id_json, size_t id_len,
                           const char *text, size_t text_len, const char *field, lp_perr_t *e);
/* Ties job to the request it answers: its request id, its span's traceparent
 * and the client's tracestate (a copy; left out if memory is short, as the
 * trace context is advice) go with it into batches. */
void lp__job_bind(lp_job_t *job, lp_http_req_t *req);

/* front/deliver.c: runs on the front that owns the client: writes the answer of a job the
 * scheduler is done with (its outputs' spans formatted here, or its error),
 * then drops the job's references to the batches' answers. 1 when the
 * answer is too large for one loop turn: the job is kept (the caller's
 * reference is the answer's now) and written a slice a turn; else 0. */
int lp__job_deliver(lp_front_t *f, lp_job_t *job, lp_http_req_t *req);
/* One slice of each answer waiting (every one whole when all is set: the
 * front is stopping); the idle handle calls it while any wait. */
void lp__front_write_answers(lp_front_t *f, int all);
/* req's client left while its answer was being written: the answer dropped. */
void lp__sliced_cancel(lp_front_t *f, lp_sliced_t *a);

/* front/v2front.c: Open Inference Protocol clients */
/* Handles /v2 routes; returns 0 when req is not one. */
int lp__v2_route(lp_front_t *f, lp_http_req_t *req);

/* A v2 job's answer body (its sequences' outputs as one tensor), its content
 * type and extra header lines. -EPROTO when the outputs are not numbers,
 * -EDOM when its parts came in different datatypes or shapes. */
int lp__v2_answer(lp_job_t *job, int per_segment, lp_buf_t *body, const char **ctype, char *hdr,
                  size_t hdrlen);
/* front/reject.c: an error in the Open Inference Protocol's shape, counted
 * and logged as every refusal. */
void lp__v2_reject(lp_front_t *f, lp_http_req_t *req, int status, const char *code, const char *msg);
void lp__v2_reject_job(lp_front_t *f, lp_http_req_t *req, int status, const char *code, const char *msg,
                       const lp_job_t *job);

/* front/tei.c: text-embeddings-inference's POST routes (route: LP_ROUTE_TEI_*). */
void lp__tei_request(lp_front_t *f, lp_http_req_t *req, int route);
/* The answer's body: /embed's vectors, /rerank's ranks by score, and (in
 * teiapi.c) /predict's, /embed_all's and /similarity's. -ENOTSUP when an
 * output is not of the kind the route needs, -EPROTO when it is not numbers,
 * -ENOMEM. */
int lp__tei_body(lp_front_t *f, lp_buf_t *out, const lp_job_t *job);
/* One vector's text in a route's answer (input i, n values). */
typedef void (*lp_put_vector_fn)(lp_buf_t *out, uint32_t i, const float *v, size_t n, const lp_job_t *job);
/* front/embeddings.c: job's vectors from pos on, sep between, each cut to
 * dims (0: whole) and normalized if asked, written by put: 0 once all are,
 * or lp__openai_body_part's -EAGAIN and errors. */
int lp__vectors_part(lp_front_t *f, lp_buf_t *out, const lp_job_t *job, lp_vecpos_t *pos, size_t values,
                     uint32_t dims, int normalize, const char *sep, lp_put_vector_fn put);
/* /embed's body from pos on, as lp__openai_body_part writes OpenAI's. */
int lp__tei_embed_part(lp_front_t *f, lp_buf_t *out, const lp_job_t *job, lp_vecpos_t *pos, size_t values);
/* front/reject.c: an error in TEI's shape, counted under route and logged as every refusal. */
void lp__tei_reject(lp_front_t *f, lp_http_req_t *req, int route, int status, const char *type,
                    const char *code, const char *msg, const lp_job_t *job);
/* A finished TEI job's error: lanepack's status and code as TEI's (queue full
 * 429 overloaded, too long 422 tokenizer, a backend's failure 424 backend). */
void lp__tei_reject_job(lp_front_t *f, lp_http_req_t *req, int route, int status, const char *code,
                        const char *msg, const lp_job_t *job);

/* front/teiapi.c: the rest of TEI 1.9's API. GET /info (the model's limits from
 * the configuration) and POST /decode are answered at once; GET /health is
 * readiness in TEI's shape (pages.c). */
void lp__tei_info(lp_front_t *f, lp_http_req_t *req);
void lp__tei_decode(lp_front_t *f, lp_http_req_t *req, const lp_tei_req_t *r, const lp_tok_t *t);
int lp__tei_predict_body(lp_front_t *f, lp_buf_t *out, const lp_job_t *job);
int lp__tei_embed_all_body(lp_front_t *f, lp_buf_t *out, const lp_job_t *job);
int lp__tei_similarity_body(lp_front_t *f, lp_buf_t *out, const lp_job_t *job);
/* Whether the model's configured outputs can serve TEI's route kind
 * (LP_TEI_*): NULL, or TEI's message for a model of the wrong type. */
const char *lp__tei_wrong_kind(const lp_model_config_t *mc, int kind);

/* front/embeddings.c (a front's): POST /v1/embeddings, OpenAI's embeddings API. */
void lp__embeddings_request(lp_front_t *f, lp_http_req_t *req);
/* The answer's body from pos on: every sequence's vector in input order, the
 * model, the usage. 0 once the body is whole; -EAGAIN when it stopped (pos
 * moved) after at least values values (at least one vector): call again;
 * -EPROTO when an output is not a vector of numbers, -ENOMEM. */
int lp__openai_body_part(lp_front_t *f, lp_buf_t *out, const lp_job_t *job, lp_vecpos_t *pos, size_t values);
/* A finished sequence's output read as a vector into f->vec: the count, or
 * -ENOTSUP when it is not one output for the sequence (a value per token; a
 * score unless scalar_ok, which reads it as a vector of one), -EPROTO when it
 * is not an array of numbers, -ENOMEM. */
long lp__seq_vector(lp_front_t *f, const lp_seq_t *s, int scalar_ok);
/* A backend's vector of n values for one of job's embeddings: n, or -EPROTO when it is empty, shorter than the model's
 * embedding.dimensions (job->embed_dims) or not as long as the request's
 * first (*first, 0 before it). */
long lp__check_vector(const lp_job_t *job, long n, long *first);
/* front/reject.c: an error in OpenAI's shape (param: the request field at fault, or NULL),
 * counted and logged as every refusal. */
void lp__openai_reject(lp_front_t *f, lp_http_req_t *req, int status, const char *hdr, const char *code,
                       const char *msg, const char *param, const lp_job_t *job);

/* front/view.c: GET / where /metrics is served, the live view's static page
 * (embedded at build time; it holds no data and fetches /v1/batches/recent). */
void lp__view_page(lp_front_t *f, lp_http_req_t *req);

#endif
