/* The proxy's state, shared by its files only: jobs (client requests), their
 * sequences, models with their queues and backends, batches in flight. */
#ifndef LANEPACK_PROXY_H
#define LANEPACK_PROXY_H

#include <stdint.h>
#include <stdio.h>
#include <uv.h>

#include "lanepack/advisor.h"
#include "lanepack/batchjson.h"
#include "lanepack/bucket.h"
#include "lanepack/buf.h"
#include "lanepack/config.h"
#include "lanepack/devclock.h"
#include "lanepack/httpd.h"
#include "lanepack/layout.h"
#include "lanepack/metrics.h"
#include "lanepack/queue.h"
#include "lanepack/saturation.h"
#include "lanepack/scatter.h"
#include "lanepack/sched.h"
#include "lanepack/tensor.h"
#include "lanepack/timeheap.h"
#include "lanepack/upstream.h"

#define container_of(ptr, type, member) ((type *)((char *)(ptr) - offsetof(type, member)))

typedef struct lp_proxy_s lp_proxy_t;
typedef struct lp_model_s lp_model_t;
typedef struct lp_job_s lp_job_t;
typedef struct lp_batch_s lp_batch_t;

enum { LP_SEQ_QUEUED = 0, LP_SEQ_INFLIGHT, LP_SEQ_DONE };

/* One sequence of a job: waiting in its model's queue, in a batch, or done. */
typedef struct lp_seq_s {
  lp_job_t *job;
  const int32_t *tokens;  /* into job->tokens */
  uint32_t len;
  int state;
  lp_qnode_t q;           /* its place in the model's queue (priority, arrival) */
  uint64_t gather_gen;    /* already in this decision's window */
  uint32_t attempts;      /* retries spent */
  uint32_t refs;          /* batches holding it (two while hedged) */
  int hedged;             /* a copy went out again: the first answer wins */
  int isolate;            /* goes alone: it was in a batch an otherwise healthy backend refused */
  int avoid;              /* 1 + the backend that may still be computing it (timed out); 0: none */
  lp_sched_item_t sched;
  /* where it ran */
  uint64_t batch_id;
  uint32_t lanes, bucket, lane, offset;
  uint64_t dispatch_ns, done_ns;
  char *out;              /* its slice of the answer (multi-sequence jobs); owned */
  size_t out_len;
} lp_seq_t;

/* One client request. Owned by the proxy from admission until it is answered
 * and no batch refers to it. */
struct lp_job_s {
  lp_proxy_t *proxy;
  lp_model_t *model;
  lp_http_req_t *req;     /* NULL once the client left */
  char *id_json;          /* the client's id as JSON text, or NULL; in the job's block */
  char request_id[64];    /* its X-Request-Id (sent or made), passed on in batches */
  int multi;              /* "inputs" form: answers "outputs" */
  int v2;                 /* an Open Inference Protocol client: answered as a tensor */
  int v2_binary;          /* ... in binary */
  size_t v2_rows;         /* k of its [k, n] input_ids */
  /* its outputs as a v2 backend answered them: each sequence's out holds raw
   * little-endian values of v2_dtype, with trailing dimensions v2_dims (the
   * output's after its leading ones); LP_DT_INVALID: JSON text (lanepack wire) */
  lp_dtype_t v2_dtype;
  int v2_mixed;           /* parts came in different datatypes or trailing shapes */
  int v2_ndim;
  int64_t v2_dims[LP_TENSOR_MAX_DIMS];
  uint32_t nseq;
  uint32_t unresolved;    /* sequences queued or in flight */
  uint32_t queued;        /* sequences still in the model's queue */
  int answered;           /* the client has had its one answer */
  int doomed;             /* picked to fail: listed by the one who fails it */
  uint32_t refs;          /* batch references to its sequences: freed at 0 */
  lp_seq_t *seqs;         /* owned */
  int32_t *tokens;        /* in the job's block (allocated with it) */
  uint64_t arrive_ns;
  uint64_t deadline_ns;   /* the client's; 0 = none */
  uint64_t bound_ns;      /* the proxy's: answered by then whatever happens */
  lp_theap_node_t timer;  /* in proxy->job_timers until answered */
  size_t bytes;           /* what it holds, charged to the queue's budget */
};

typedef struct lp_backend_s {
  lp_model_t *model;
  char url[LP_URL_MAX];
  char batch_url[LP_URL_MAX + 16];
  char health_url[LP_URL_MAX + 16];
  char shapes_url[LP_URL_MAX + 16];
  int healthy;
  int probed_ok;          /* a health probe has succeeded */
  uint32_t failures_in_row;
  uint32_t inflight;
  lp_xfer_t *probe;       /* health probe in flight */
  uint64_t batches, failures;
  /* shape i as this backend has it: reported by /v1/shapes, or configured and
   * not contradicted; UNAVAILABLE after a shape mismatch here */
  lp_shape_state_t shape_state[LP_BUCKET_MAX_SHAPES];
  int reported;           /* /v1/shapes answered since it last came up */
  lp_devclock_t clock;    /* its devices: when free, how long each shape takes */
  int retired;            /* gone from the configuration (reload): no new batches,
                             no probes, its shapes admit nothing; its batches in
                             flight still end here */
  int devices_reported;   /* its /v1/shapes named its devices (configured ones no longer apply) */
  /* shapes found missing here (bit k: shape k) are asked about again at
   * recheck_at (0: nothing to ask), after a backoff of recheck_ms */
  uint32_t missing;
  uint64_t recheck_at, missing_ns;
  uint32_t recheck_ms;
} lp_backend_t;

struct lp_batch_s {
  lp_model_t *model;
  lp_backend_t *backend;
  uint64_t id;
  int shape;              /* index in model->shapes (a ragged model has one) */
  lp_seq_t **seqs;        /* layout item i is seqs[i]; owned array */
  size_t nseqs;
  size_t seqs_cap;
  lp_batch_t *next_spare; /* model's pool of finished batches */
  lp_layout_t layout;     /* owned */
  lp_buf_t body;          /* the request sent upstream; owned */
  uint64_t dispatch_ns;
  lp_xfer_t *xfer;
  uv_timer_t retry;       /* backoff before its sequences go back in the queue */
  uint32_t backoff_ms;
  /* v2 backends: where it goes and the header lines it needs */
  char url[LP_URL_MAX + 200];
  char v2_header[64];
  const char *headers[3];
  int32_t v2_scalar;      /* max_seqlen of a ragged batch */
  int device;             /* the device the clock expects it on */
  uint64_t expect_ns;     /* when it is expected back; 0 = unknown */
  lp_theap_node_t stall;  /* in proxy->stall_timers while it may stall */
  int in_flight;          /* its transfer is running */
};

struct lp_model_s {
  lp_proxy_t *proxy;
  const lp_model_config_t *cfg;
  /* the union of every backend's shapes; a shape's state here is the best any
   * backend has it in (admission looks at this), its counters the model's */
  lp_bucket_set_t shapes;
  lp_sched_t *sched;       /* owned */
  lp_queue_t queue;        /* waiting sequences (lp_seq_t.q); owns its level array */
  uint64_t queued_tokens;
  size_t queued_requests;
  uint64_t queued_bytes;
  uint64_t next_seqno;
  uint64_t gather_gen;
  uint64_t bound_ns;       /* a request's longest stay in the proxy */
  lp_sched_item_t *items;  /* scratch for decisions; owned */
  lp_seq_t **win;          /* the sequences behind items; owned array */
  lp_sched_item_t *items2; /* items as one backend may take them; owned */
  size_t items2_cap;
  size_t items_cap;
  uv_timer_t wake;         /* the scheduler's next rule */
  lp_backend_t backends[LP_MAX_BACKENDS];
  size_t nbackends;
  size_t rr;               /* round-robin cursor */
  uint32_t inflight;
  lp_lenhist_t lengths;    /* observed lengths, for the bucket advisor */
  lp_batchjson_t writer;   /* prebuilt id runs for batch bodies */
  /* reused so a steady stream of batches allocates nothing: a layout and a body
   * are hundreds of KB, which malloc serves with mmap and page faults */
  lp_batch_t *spare;       /* finished batches with their buffers; owned */
  size_t nspare;
  lp_scatter_t scatter;    /* answer index, one answer at a time */
  lp_buf_t render;         /* one sequence's output written from a v2 answer */
  const char **item_ids;   /* per batch: its items' request ids; owned array, reused */
  lp_buf_t v2_members;     /* a v2 request's members (id, parameters, outputs); reused */
  size_t item_ids_cap;
  lp_dtype_t v2_out_dtype; /* the datatype v2 backends last answered in */
  lp_seq_ref_t *refs;      /* dispatch scratch; owned */
  lp_place_t *place;
  size_t scratch_cap;
  /* metrics */
  uint64_t batches_by_shape[LP_BUCKET_MAX_SHAPES];
  uint32_t shape_inflight[LP_BUCKET_MAX_SHAPES]; /* batches in flight by shape: such a shape stays */
  uint64_t real_tokens, pad_tokens, sequences_done;
  lp_hist_t fill;
  lp_hist_t fill_by_shape[LP_BUCKET_MAX_SHAPES];
  lp_hist_t duration;     /* answered requests, arrival to answer */
  lp_hist_t service;       /* observed device time per batch (or dispatch to answer) */
  lp_hist_t service_error; /* |observed - expected| / expected, per batch */
  lp_hist_t queue_delay;   /* arrival to dispatch, per answered request */
  lp_saturation_t saturation; /* read by /metrics (status.c); zeroed is empty */
};

#define LP_ROUTE_COUNT 9
#define LP_STATUS_SLOTS 20

struct lp_proxy_s {
  uv_loop_t *loop;
  lp_config_t cfg;
  lp_httpd_t *httpd;
  lp_httpd_t *admin;       /* /metrics, /v1/models, advice; NULL: on httpd */
  char **tokens;           /* bearer tokens clients must show; owned; NULL: none */
  size_t ntokens;
  lp_upstream_t *up;
  lp_model_t models[LP_MAX_MODELS];
  size_t nmodels;
  uv_idle_t kick;          /* run the schedulers once this loop turn */
  int kicking;
  uv_timer_t health;
  uv_timer_t drain;
  uv_timer_t trim;         /* hands freed memory back to the system when quiet */
  uint64_t served;         /* requests routed so far */
  uint64_t trimmed_at;     /* `served` at the last trim */
  uv_signal_t sigterm, sigint, sighup;
  /* SIGHUP: makes the configuration anew (file and flags); 0 or an error */
  int (*reload)(lp_config_t *out, char *err, size_t errlen);
  int unready;             /* SIGTERM seen: /readyz fails, the listener stays for drain_delay_ms */
  int draining;            /* the listener is closed: every queued sequence is due now */
  int hard_stop;           /* past the drain timeout: fail instead of retrying */
  uint64_t next_batch_id;
  size_t jobs;             /* jobs alive */
  size_t batches;          /* batches in flight */
  lp_buf_t scratch;        /* answers are built here, then handed to the server */
  int32_t *tok_scratch;    /* token and length arrays lent to each parse; owned */
  size_t tok_scratch_cap;
  uint32_t *len_scratch;
  size_t len_scratch_cap;
  lp_theap_t job_timers;   /* every unanswered job by the time it must be looked at */
  uv_timer_t job_timer;    /* fires at the heap's top */
  uint64_t job_timer_at;   /* when job_timer fires; 0 = stopped */
  lp_theap_t stall_timers; /* batches in flight by when they count as stalled */
  uv_timer_t stall_timer;
  uint64_t stall_timer_at;
  uint64_t stalls, hedges_won;
  uint64_t delivering;     /* the batch whose answer is being sliced */
  /* metrics */
  uint64_t requests[LP_ROUTE_COUNT][LP_STATUS_SLOTS];
  struct { const char *code; uint64_t n; } rejections[32];
  size_t nrejections;
  lp_hist_t t_queue, t_backend, t_total;
  uint64_t retries;        /* sequences sent again after a failed batch */
  int exit_code;
  double start_time;       /* wall clock at start (Unix seconds) */
  int access_on;           /* the access log is open: access_fd */
  int access_fd;           /* owned (unless STDERR_FILENO) */
  int access_failing;      /* its last write failed (warned once) */
  uint64_t access_dropped; /* lines lost to failed writes */
  uint64_t access_seen;    /* successes considered for sampling */
  lp_buf_t access_line;    /* the line being written; reused */
  lp_buf_t access_buf;     /* whole lines not yet written */
};

/* job.c: the longest wait before dispatch and at the backend among job's
 * sequences (those never sent count for nothing); and ns as "ms.mmm". */
void lp__job_times(const lp_job_t *job, uint64_t *queue_ns, uint64_t *backend_ns);
void lp__put_ms(lp_buf_t *b, uint64_t ns);

/* accesslog.c: JSON lines of answered requests (job may be NULL). Opening
 * closes what was open (after writing what it was owed). */
int lp__access_log_open(lp_proxy_t *p, const char *path, char *err, size_t errlen);
void lp__access_log_close(lp_proxy_t *p);
void lp__access_log_flush(lp_proxy_t *p);
void lp__access_log(lp_proxy_t *p, const lp_http_req_t *req, int status, const lp_job_t *job);

/* model.c: a scheduler configured from cfg; NULL on allocation failure. */
lp_sched_t *lp__sched_for(const lp_model_config_t *cfg);
/* proxy.c: the HTTP server's limits from the configuration (handlers unset). */
void lp__httpd_limits(const lp_config_t *cfg, lp_httpd_config_t *hc);
/* model.c: settings derived from m->cfg, again after a reload. */
void lp__model_reconfigured(lp_model_t *m);
/* model.c: a backend of m at url, healthy until probes say otherwise. */
void lp__backend_init(lp_model_t *m, lp_backend_t *b, const char *url);

/* reload.c: applies a new configuration to a running proxy, or refuses it
 * (err says why) leaving everything as it was. */
int lp__proxy_reload(lp_proxy_t *p, const lp_config_t *next, char *err, size_t errlen);

/* proxy.c */
int lp_proxy_init(lp_proxy_t *p, uv_loop_t *loop, const lp_config_t *cfg, int *port);
void lp_proxy_kick(lp_proxy_t *p);
void lp_proxy_count(lp_proxy_t *p, int route, int status);
void lp__count_rejection(lp_proxy_t *p, const char *code);
void lp_proxy_reject(lp_proxy_t *p, lp_http_req_t *req, int route, int status,
                     const char *headers, const char *code, const char *msg, const char *extra);
/* The same for the request of job (its sequences and timings go in the access log). */
void lp__reject_job(lp_proxy_t *p, lp_http_req_t *req, int route, int status, const char *headers,
                    const char *code, const char *msg, const char *extra, const lp_job_t *job);

/* Why a request was refused: status, code, message, more error members. */
typedef struct lp_perr_s {
  int status;
  const char *code;
  char msg[256];
  char extra[96];
} lp_perr_t;

/* infer.c: the bounds both routes put on a request's time fields. A deadline
 * (deadline_ms, or v2's timeout) past an hour counts as an hour, the longest
 * default_deadline_ms: the request's own bound answers it before that anyway. */
#define LP_MAX_DEADLINE_MS 3600000.0
/* A priority in [-1000, 1000]; beyond, the nearer end. */
int lp__clamp_priority(int64_t priority);

/* infer.c: parses a body into a job; on failure answers the client itself. */
lp_job_t *lp__infer_parse(lp_proxy_t *p, lp_http_req_t *req, const char *model_from_path,
                          size_t model_len);
/* A job of nseq sequences of lens[i] tokens laid end to end in tokens (copied
 * into the job's one block with its sequences and id), checked against the model's vocabulary and
 * shapes; field names the input in messages. deadline_ms: the client's, checked
 * finite and >= 0 by the caller; > 0 is clamped to LP_MAX_DEADLINE_MS; 0 or < 0
 * (none given) leaves the model's default_deadline_ms. NULL with e set on refusal. */
lp_job_t *lp__job_new(lp_proxy_t *p, lp_model_t *m, const int32_t *tokens, size_t ntokens,
                      const uint32_t *lens, size_t nseq, int multi, int priority, double deadline_ms,
                      const char *id_json, size_t id_len, const char *field, lp_perr_t *e);

/* model.c: admission, the queue, shape states, the scheduling loop */
int lp__model_init(lp_model_t *m, lp_proxy_t *p, const lp_model_config_t *cfg);
void lp__model_close(lp_model_t *m);
int lp__model_admit(lp_model_t *m, lp_job_t *job);
void lp__model_schedule(lp_model_t *m);
void lp__model_fail_all(lp_model_t *m, int status, const char *code, const char *msg);
int lp__model_ready(const lp_model_t *m);
/* Takes a queued sequence out of the queue and its counts. */
void lp__model_unqueue(lp_model_t *m, lp_seq_t *s, int state);
/* Puts a retried sequence back; -ENOMEM, or -ERANGE when no shape holds it now. */
int lp__model_requeue(lp_model_t *m, lp_seq_t *s);
/* A backend's shape states changed: recompute the model's, and fail at once the
 * queued sequences that no shape anywhere can hold any more. */
void lp__model_shapes_changed(lp_model_t *m);
/* Removes shape k (not configured, held by no batch in flight) and what is
 * kept of it per shape and per backend; its index is free for a new shape. */
void lp__model_remove_shape(lp_model_t *m, size_t k);
/* The shapes as one backend has them. */
void lp__backend_view(const lp_backend_t *be, lp_bucket_set_t *out);
/* Largest bucket compiled on some backend. */
uint32_t lp__model_compiled_max(const lp_model_t *m);

/* job.c: a request's end, exactly once, and its time bound */
void lp__job_cancel(lp_job_t *job);
void lp__job_fail(lp_job_t *job, int status, const char *code, const char *msg);
void lp__job_free(lp_job_t *job);
/* Frees the job once no sequence is unresolved and no batch holds one. */
void lp__job_release(lp_job_t *job);
/* Starts the job's bound: answered by min(deadline, bound) whatever happens. */
int lp__job_arm(lp_job_t *job);
void lp__job_timers_init(lp_proxy_t *p);
/* One sequence's output is here (slice, per-token outputs wrapped in [ ]), from
 * segment g of batch bt: the answer reports that batch and place. */
void lp__seq_done(lp_seq_t *s, const lp_batch_t *bt, const lp_segment_t *g, const char *slice, size_t len,
                  int per_segment);
/* The same for a v2 client's sequence, as the backend's tensor part: len bytes
 * of raw little-endian values of dtype, its trailing dimensions dims[0..ndim). */
void lp__seq_done_tensor(lp_seq_t *s, const lp_batch_t *bt, const lp_segment_t *g, lp_dtype_t dtype,
                         const void *raw, size_t len, int ndim, const int64_t *dims, int per_segment);
void lp__seq_failed(lp_seq_t *s, int status, const char *code, const char *msg);

/* v2link.c: Open Inference Protocol backends */
int lp__v2_model_name(const lp_model_t *m, int shape, char *out, size_t cap);
/* The batch as a v2 request: bt->body, bt->url, bt->headers. 0 or -errno. */
int lp__v2_encode(lp_model_t *m, lp_batch_t *bt, const char *const *item_ids);
/* A 200 answer sliced to every sequence of the batch; -EPROTO with err when
 * the answer is malformed (nothing delivered then). */
int lp__v2_deliver(lp_model_t *m, lp_batch_t *bt, const lp_xfer_t *x, char *err, size_t errlen);
/* Asks the backend whether each shape's model is ready; answers set its states. */
void lp__v2_probe_shapes(lp_backend_t *b);

/* v2front.c: Open Inference Protocol clients */
/* Handles /v2 routes; returns 0 when req is not one. */
int lp__v2_route(lp_proxy_t *p, lp_http_req_t *req);
void lp__v2_reject(lp_proxy_t *p, lp_http_req_t *req, int status, const char *code, const char *msg);
void lp__v2_reject_job(lp_proxy_t *p, lp_http_req_t *req, int status, const char *code, const char *msg,
                       const lp_job_t *job);
/* A v2 job's answer body (its sequences' outputs as one tensor), its content
 * type and extra header lines. -EPROTO when the outputs are not numbers,
 * -EDOM when its parts came in different datatypes or shapes. */
int lp__v2_answer(lp_job_t *job, int per_segment, lp_buf_t *body, const char **ctype, char *hdr,
                  size_t hdrlen);

/* batch.c: rectangles sent upstream and their answers */
#define LP_MAX_BACKOFF_MS 60000
/* The backoff before retry attempts+1: doubling, capped, never overflowing. */
uint64_t lp__backoff_ms(const lp_model_t *m, uint32_t attempts);
int lp__batch_dispatch(lp_model_t *m, lp_backend_t *be, const lp_sched_plan_t *plan);
void lp__stall_timers_init(lp_proxy_t *p);
void lp__batches_free(lp_model_t *m);

/* backend.c */
/* What a probe's answer may hold: health and readiness (whose body is not
 * read), and shape lists or model metadata (a few shapes, a few tensors). */
#define LP_HEALTH_ANSWER_MAX (4u << 10)
#define LP_PROBE_ANSWER_MAX (64u << 10)
void lp__backends_start(lp_proxy_t *p);
void lp__backend_result(lp_backend_t *b, int ok);
/* Shape k was found missing on b (mismatch, 404, not ready): asked about again
 * after a backoff. The caller sets its state. */
void lp__backend_shape_missing(lp_backend_t *b, int k);
/* Shape k is there after all: nothing to ask about it. */
void lp__backend_shape_found(lp_backend_t *b, int k);
/* The healthy backends with a free slot, best first; returns how many. */
size_t lp__backends_free(lp_model_t *m, lp_backend_t **out);

/* status.c: /metrics, /v1/models, /v1/buckets/advice */
void lp__render_metrics(lp_proxy_t *p, lp_buf_t *out);
void lp__render_models(lp_proxy_t *p, lp_buf_t *out);
int lp__render_advice(lp_proxy_t *p, lp_model_t *m, uint32_t k, lp_buf_t *out, char *err,
                      size_t errlen);
/* With ?p99_ms=: the shapes the simulator finds best for the observed lengths,
 * device times and rate (rate_asked > 0 replaces the observed rate), bounded in
 * CPU time and cached. 0, or negative with *status, *code and err for the answer. */
int lp__render_shape_advice(lp_proxy_t *p, lp_model_t *m, uint32_t k, double p99_ms, double rate_asked,
                            lp_buf_t *out, int *status, const char **code, char *err, size_t errlen);
/* A query parameter as a finite number: 1 with *out, 0 absent, -1 malformed. */
int lp__query_double(const char *query, const char *name, double *out);

enum { LP_ROUTE_INFER = 0, LP_ROUTE_MODELS, LP_ROUTE_HEALTHZ, LP_ROUTE_READYZ, LP_ROUTE_METRICS,
       LP_ROUTE_ADVICE, LP_ROUTE_OTHER, LP_ROUTE_V2_INFER, LP_ROUTE_V2 };

#endif
