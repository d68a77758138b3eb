/* The proxy's state, shared by its files only: jobs (client requests), their
 * sequences, models with their dispatch cores and backends, batches in flight.
 * The policy (queue, device clocks, when and what a batch carries, retries,
 * hedges, health from outcomes, request bounds) is the model's lp_disp_t; these
 * files are the I/O around it. */
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
#include "lanepack/dispatch.h"
#include "lanepack/httpd.h"
#include "lanepack/layout.h"
#include "lanepack/metrics.h"
#include "lanepack/saturation.h"
#include "lanepack/scatter.h"
#include "lanepack/tensor.h"
#include "lanepack/upstream.h"
#include "lanepack/v2.h"

#define container_of(ptr, type, member) ((type *)((char *)(ptr) - offsetof(type, member)))

typedef struct lp_proxy_s lp_proxy_t;
typedef struct lp_model_s lp_model_t;
typedef struct lp_job_s lp_job_t;
typedef struct lp_batch_s lp_batch_t;

/* One sequence of a job: waiting (queued or in flight: the core knows which),
 * or done. */
enum { LP_SEQ_WAITING = 0, LP_SEQ_DONE };

typedef struct lp_seq_s {
  lp_job_t *job;
  const int32_t *tokens;  /* into job->tokens */
  uint32_t len;
  int state;
  uint32_t sends;         /* batches that carried it (copies: hedges and retries) */
  /* where it ran: its latest send, then the batch that answered it */
  uint64_t batch_id;
  uint32_t lanes, bucket, lane, offset;
  uint64_t dispatch_ns, done_ns;
  char *out;              /* its slice of the answer (multi-sequence jobs); owned */
  size_t out_len;
} lp_seq_t;

/* One client request. Owned by the proxy from parsing until the core answers
 * it (its ANSWER action) or is told its client left (lp_disp_cancel); its
 * address is its job id in the core, so nothing of it is touched after. */
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
  uint32_t unresolved;    /* sequences without their output */
  int priority;           /* the client's, clamped: higher goes first */
  int answered;           /* the client has had its one answer */
  int in_core;            /* admitted: the core answers it or must hear it is cancelled */
  int charged;            /* its bytes count in its model's live_bytes, and it is in
                             the model's live list */
  lp_job_t *live_prev, *live_next;
  lp_job_t *next_cancel;  /* in its model's list of cancels the core has not heard yet */
  int cancel_queued;      /* ... is on that list */
  lp_seq_t *seqs;         /* owned */
  int32_t *tokens;        /* in the job's block (allocated with it) */
  uint64_t arrive_ns;
  uint64_t deadline_ns;   /* the client's; 0 = none */
  size_t bytes;           /* what it holds, charged to the queue's budget */
};

typedef struct lp_backend_s {
  lp_model_t *model;
  char url[LP_URL_MAX];
  char batch_url[LP_URL_MAX + 16];
  char health_url[LP_URL_MAX + 16];
  char shapes_url[LP_URL_MAX + 16];
  int healthy;            /* as the core has it (probes and batch outcomes) */
  int probed_ok;          /* a health probe has succeeded */
  uint32_t probe_fails;   /* health probes failed in a row */
  uint32_t inflight;
  lp_xfer_t *probe;       /* health probe in flight */
  uint64_t batches, failures;
  /* shape i as this backend has it: reported by /v1/shapes, or configured and
   * not contradicted; UNAVAILABLE after a shape mismatch here */
  lp_shape_state_t shape_state[LP_BUCKET_MAX_SHAPES];
  int reported;           /* /v1/shapes answered since it last came up */
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

/* A batch the core sent: its layout and body, its transfer, and which job and
 * sequence each layout item is (job ids are job addresses: valid while the
 * core still has the job, which is when it says anything about it). */
struct lp_batch_s {
  lp_model_t *model;
  lp_backend_t *backend;
  uint64_t id;            /* the core's */
  int shape;              /* index in model->shapes (a ragged model has one) */
  lp_disp_item_t *items;  /* layout item i is items[i]; owned array */
  uint32_t *seg_of;       /* item i's segment in the layout; owned array */
  size_t nitems;
  size_t items_cap;
  size_t cursor;          /* next item expected in OUTPUT order */
  lp_batch_t *next_spare; /* model's pool of finished batches */
  lp_layout_t layout;     /* owned */
  lp_buf_t body;          /* the request sent upstream; owned */
  uint64_t dispatch_ns;
  lp_xfer_t *xfer;
  /* v2 backends: where it goes and the header lines it needs */
  char url[LP_URL_MAX + 200];
  char v2_header[64];
  const char *headers[3];
  int32_t v2_scalar;      /* max_seqlen of a ragged batch */
  int device;             /* the device the core sent it to */
  uint64_t expect_ns;     /* when the core expects it back; 0 = unknown */
  int in_flight;          /* its transfer is running */
  lp_batch_t *next_failed;/* in the model's list of batches whose start failed */
};

struct lp_model_s {
  lp_proxy_t *proxy;
  const lp_model_config_t *cfg;
  /* the union of every backend's shapes; a shape's state here is the best any
   * backend has it in (admission looks at this), its counters the model's */
  lp_bucket_set_t shapes;
  lp_disp_t *disp;         /* the policy; owned */
  lp_disp_stats_t st;      /* its counters after the last event */
  uint64_t live_bytes;     /* what admitted jobs hold, against max_queue_bytes */
  lp_job_t *live;          /* admitted jobs not yet freed (the load gauges walk them) */
  uv_poll_t wake;          /* readable when wake_fd fires */
  int wake_fd;             /* a timerfd on uv_hrtime's clock, armed at the core's wake_at
                              to the nanosecond (owned; -1 before init) */
  uint64_t wake_at;        /* what wake_fd is armed for; 0 = nothing */
  int pumping;             /* draining the core's actions: events wait their turn */
  int drain_told;          /* the core knows the proxy is draining */
  lp_job_t *cancels;       /* clients gone while pumping: the core hears after */
  lp_batch_t *failed;      /* batches whose transfer could not start: reported after */
  lp_batch_t *delivering;  /* the batch whose answer OUTPUT actions are sliced from */
  int result_http;         /* the HTTP status of the batch result being handled; 0: none */
  lp_backend_t backends[LP_MAX_BACKENDS];
  size_t nbackends;
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
  lp_v2_msg_t v2msg;       /* the v2 answer being sliced; its output tensor */
  const lp_tensor_t *v2out;
  int v2_open;             /* v2msg holds a decoded answer */
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
  uint64_t stalls, hedges_won;
  /* metrics */
  uint64_t requests[LP_ROUTE_COUNT][LP_STATUS_SLOTS];
  struct { const char *code; uint64_t n; } rejections[32];
  size_t nrejections;
  lp_hist_t t_queue, t_backend, t_total;
  uint64_t retries;        /* sequences sent again after a failed batch (the cores' sum) */
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

/* model.c: the dispatch core's settings from a model's and the proxy's. */
void lp__disp_config(const lp_config_t *pc, const lp_model_config_t *cfg, const lp_bucket_set_t *shapes,
                     lp_disp_config_t *out);
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

/* model.c: admission, shape states, the core's events and actions */
int lp__model_init(lp_model_t *m, lp_proxy_t *p, const lp_model_config_t *cfg);
void lp__model_close(lp_model_t *m);
/* Hands job to the core; on refusal answers and frees it. Returns 0 or -1. */
int lp__model_admit(lp_model_t *m, lp_job_t *job);
/* Time passes: the core's tick, then its actions. */
void lp__model_schedule(lp_model_t *m);
/* Drains the core's actions (SEND, OUTPUT, ANSWER, HEALTH) and arms its wake. */
void lp__model_pump(lp_model_t *m);
/* The proxy's clock for the core (uv_hrtime, read here only). */
uint64_t lp__now(void);
void lp__model_fail_all(lp_model_t *m, lp_disp_status_t status);
int lp__model_ready(const lp_model_t *m);
/* A backend's shape states or the shape set changed: recompute the model's and
 * tell the core each backend's (it fails what no shape holds any more). */
void lp__model_shapes_changed(lp_model_t *m);
/* Removes shape k (not configured, held by no batch in flight) and what is
 * kept of it per shape and per backend; its index is free for a new shape. */
void lp__model_remove_shape(lp_model_t *m, size_t k);
/* Shape k was added to m->shapes (a backend reported it): the core has it too. */
void lp__model_shape_added(lp_model_t *m, size_t k);
/* Backend b's health or devices as probes and reports say. */
void lp__model_backend_health(lp_model_t *m, lp_backend_t *b, int up);
void lp__model_backend_devices(lp_model_t *m, lp_backend_t *b, uint32_t devices);

/* job.c: a request's end, exactly once */
/* The client left: the core hears it (now, or after the actions being
 * drained) and the job is freed then. */
void lp__job_cancel(lp_job_t *job);
/* Answers the client with an error if it has had no answer; frees nothing. */
void lp__job_fail(lp_job_t *job, int status, const char *code, const char *msg);
void lp__job_free(lp_job_t *job);
/* A sequence of job's has not been sent yet (the job is waiting, not running). */
int lp__job_waiting(const lp_job_t *job);
/* One sequence's output is here (slice, per-token outputs wrapped in [ ]), from
 * segment g of batch bt: the answer reports that batch and place. */
void lp__seq_done(lp_seq_t *s, const lp_batch_t *bt, const lp_segment_t *g, const char *slice, size_t len,
                  int per_segment);
/* The same for a v2 client's sequence, as the backend's tensor part: len bytes
 * of raw little-endian values of dtype, its trailing dimensions dims[0..ndim). */
void lp__seq_done_tensor(lp_seq_t *s, const lp_batch_t *bt, const lp_segment_t *g, lp_dtype_t dtype,
                         const void *raw, size_t len, int ndim, const int64_t *dims, int per_segment);

/* v2link.c: Open Inference Protocol backends */
int lp__v2_model_name(const lp_model_t *m, int shape, char *out, size_t cap);
/* The batch as a v2 request: bt->body, bt->url, bt->headers. 0 or -errno. */
int lp__v2_encode(lp_model_t *m, lp_batch_t *bt, const char *const *item_ids);
/* A 200 answer decoded and checked against the batch (kept in m->v2msg until
 * lp__v2_close); -EPROTO with err when it is malformed. */
int lp__v2_open(lp_model_t *m, lp_batch_t *bt, const lp_xfer_t *x, char *err, size_t errlen);
/* Segment g's part of the open answer to sequence s: 0, or -ENOMEM. */
int lp__v2_slice(lp_model_t *m, const lp_batch_t *bt, const lp_segment_t *g, lp_seq_t *s);
void lp__v2_close(lp_model_t *m);
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
/* The core's SEND: the layout and body built, the transfer started. */
void lp__batch_send(lp_model_t *m, const lp_disp_action_t *a);
/* The core's OUTPUT for the batch being delivered: the sequence's slice. */
void lp__batch_output(lp_model_t *m, const lp_disp_action_t *a);
/* Batches whose transfer could not start, reported to the core as resets. */
void lp__batches_failed(lp_model_t *m);
void lp__batches_free(lp_model_t *m);

/* backend.c */
/* What a probe's answer may hold: health and readiness (whose body is not
 * read), and shape lists or model metadata (a few shapes, a few tensors). */
#define LP_HEALTH_ANSWER_MAX (4u << 10)
#define LP_PROBE_ANSWER_MAX (64u << 10)
void lp__backends_start(lp_proxy_t *p);
/* The core's verdict on b from its batches (a HEALTH action). */
void lp__backend_health_changed(lp_backend_t *b, int up);
/* Shape k was found missing on b (mismatch, 404, not ready): asked about again
 * after a backoff. The caller sets its state. */
void lp__backend_shape_missing(lp_backend_t *b, int k);
/* Shape k is there after all: nothing to ask about it. */
void lp__backend_shape_found(lp_backend_t *b, int k);

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
