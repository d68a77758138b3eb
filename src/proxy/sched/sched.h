/* The scheduler's thread (src/proxy/sched/): models with their dispatch
 * cores and backends, the shape advisor's queue, lp_proxy_s, the
 * scheduler's context (the process folder builds and frees it), and
 * lp_shared_t, what every front reads beside its own context (f->shared),
 * which no front writes. */
#ifndef LANEPACK_PROXY_SCHED_H
#define LANEPACK_PROXY_SCHED_H

#include "handoff/handoff.h"
#include "handoff/snapshot.h"
#include "wire/wire.h"

#include "lanepack/advisor.h"
#include "lanepack/devclock.h"
#include "lanepack/metrics.h"
#include "lanepack/recent.h"
#include "lanepack/saturation.h"
#include "lanepack/tei.h"
#include "lanepack/tokenizer.h"

/* A shape found missing on a backend (a shape mismatch, a v2 404 or "not
 * ready") may be back soon: Triton answers 404 while it reloads a model. The
 * backend is asked again after a backoff that doubles from LP_RECHECK_FIRST_MS
 * up to LP_RECHECK_MAX_MS, and starts afresh after a quiet spell. */
#define LP_RECHECK_FIRST_MS 500
#define LP_RECHECK_MAX_MS 16000

struct lp_backend_s {
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
};

struct lp_model_s {
  lp_proxy_t *proxy;
  /* A pass of the dispatch core and its actions (model.c's lp__model_pump,
   * registered at init): what batches, jobs and shapes below it call when
   * something changed, naming no file above them. */
  void (*pump)(lp_model_t *m);
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
  lp_rectbin_t rect;       /* prebuilt binary runs for v2 bodies (lp__v2_gathered) */
  /* reused so a steady stream of batches allocates nothing: a layout and a body
   * are hundreds of KB, which malloc serves with mmap and page faults */
  lp_batch_t *spare;       /* finished batches with their buffers; owned */
  size_t nspare;
  lp_answer_t *answer;     /* the answer being sliced (its reference) while delivering */
  uint64_t trace_rng;      /* splitmix64 state of its batches' span ids */
  lp_dtype_t v2_out_dtype; /* the datatype v2 backends last answered in */
  lp_place_t *place;       /* dispatch scratch (the layout's input); owned */
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

/* The shape advisor's work (advice.c): one computation running on libuv's
 * pool, the others queued; the scheduler's thread's only. */
typedef struct lp_adv_comp_s lp_adv_comp_t;
typedef struct lp_advq_s {
  lp_adv_comp_t *running;  /* owned by the pool's work until it ends */
  lp_adv_comp_t *head, *tail; /* queued; owned */
  size_t queued;
} lp_advq_t;

/* The scheduler's record of front i (p->sfronts[i]): what it hands that
 * front this turn of its loop, pushed together by its check handle
 * (sched/handback.c), and how many of its batches are out. The scheduler's
 * thread's only; front/front.c sets inbox before the threads start. */
typedef struct lp_sched_front_s {
  lp_mbox_t *inbox;        /* the front's (lp_front_s.inbox): the scheduler only pushes to it */
  lp_job_t *back, *back_last; /* jobs handed back, by mq_next */
  lp_batch_t *out, *out_last; /* batches for it to send, by hand_next */
  unsigned batches_out;    /* its batches handed out and not back yet */
} lp_sched_front_t;

/* What the fronts share: set on the main thread (process/proxy.c, front/front.c's
 * lp__fronts_start) before the front threads start, then read by every
 * thread and written by none until they are joined, but client_counts
 * (every front's listener counts, atomically). Embedded in lp_proxy_s, which
 * owns what it points to; a front holds it as f->shared and reaches nothing
 * of the scheduler's but through these. */
typedef struct lp_shared_s {
  lp_front_t *fronts;      /* nfronts (each front's counters, read relaxed by /metrics); owned */
  unsigned nfronts;
  lp_mbox_t *sched_inbox;  /* the scheduler's inbox (lp_proxy_s.inbox): fronts push jobs,
                              cancels, batches and control messages to it */
  lp_model_t *models;      /* the scheduler's models (lp_proxy_s.models): a front names a
                              job's model by address, the index of its configuration, and
                              never reads one */
  lp_httpd_shared_t client_counts; /* every front's client listener counts (atomic) */
  /* each model's tokenizer, or NULL: loaded at start, read by every front
   * (encoding only reads it) and the scheduler's snapshot (its vocabulary),
   * kept until the end (a reload may not change it) */
  lp_tok_t *tok[LP_MAX_MODELS];
  /* each model's /rerank pair template with its pieces' ids (nparts 0: none) */
  lp_tei_template_t pair[LP_MAX_MODELS];
  lp_tokpool_t *tokpool;   /* the tokenizer workers (NULL: no model has a tokenizer); owned */
} lp_shared_t;

/* The scheduler's context: the thread lp-sched's, which runs the process's
 * main loop (signals, reloads, the drain: process/) as well; no other
 * thread reads or writes it. */
struct lp_proxy_s {
  uv_loop_t *loop;
  lp_config_t cfg;         /* the configuration the scheduler owns; fronts get copies (RECONF) */
  lp_shared_t shared;      /* what the fronts read (see lp_shared_t for its thread rule) */
  lp_sched_front_t *sfronts; /* shared.nfronts, the scheduler's record of each front; owned */
  lp_mbox_t inbox;         /* jobs, cancels and control messages from the fronts */
  unsigned fronts_open;    /* fronts whose listeners are not closed yet (drain) */
  uv_check_t flush;        /* hands back the turn's answers, one push per front */
  uv_idle_t flush_soon;    /* while answers wait: the loop does not sleep before the flush */
  int back_pending;        /* some front has answers or batches waiting */
  unsigned next_front;     /* where a tie between equally busy fronts' batches goes */
  /* Every front has written every answer and closed every connection: the
   * process's (registered by lp_proxy_init) ends the run. */
  void (*drained)(lp_proxy_t *p);
  lp_advq_t advq;
  char **tokens;           /* bearer tokens clients must show (fronts get copies); owned; NULL: none */
  size_t ntokens;
  lp_upstream_t *up;       /* the backends' health and shape probes (fronts send batches) */
  lp_model_t models[LP_MAX_MODELS];
  size_t nmodels;
  uv_idle_t kick;          /* run the schedulers once this loop turn */
  int kicking;
  uv_timer_t health;
  uv_timer_t drain;
  uv_timer_t trim;         /* hands freed memory back to the system when quiet */
  uint64_t trimmed_at;     /* `served` at the last trim */
  int trims_left;          /* quiet ticks that still trim since traffic */
  int unsent_seen;         /* answers were held for clients since the last trim */
  uv_signal_t sigterm, sigint, sighup;
  /* SIGHUP: makes the configuration anew (file and flags); 0 or an error */
  int (*reload)(lp_config_t *out, char *err, size_t errlen);
  int unready;             /* SIGTERM seen: /readyz fails, the listener stays for drain_delay_ms */
  int draining;            /* the listener is closed: every queued sequence is due now */
  int hard_stop;           /* past the drain timeout: fail instead of retrying */
  uint64_t next_batch_id;
  lp_recent_t *recent;     /* the last batches, for the live view; owned; the scheduler's */
  size_t jobs;             /* jobs alive */
  size_t batches;          /* batches in flight */
  lp_buf_t scratch;        /* the scheduler's: v2 answers are built here */
  uint64_t stalls, hedges_won;
  uint64_t retries;        /* sequences sent again after a failed batch (the cores' sum) */
  int exit_code;
  double start_time;       /* wall clock at start (Unix seconds) */
};

/* sched/model.c: the dispatch core's settings from a model's and the proxy's. */
void lp__disp_config(const lp_config_t *pc, const lp_model_config_t *cfg, const lp_bucket_set_t *shapes,
                     lp_disp_config_t *out);
/* sched/model.c: settings derived from m->cfg, again after a reload. */
void lp__model_reconfigured(lp_model_t *m);
/* sched/model.c: a backend of m at url, healthy until probes say otherwise. */
void lp__backend_init(lp_model_t *m, lp_backend_t *b, const char *url);

/* sched/kick.c: a scheduling pass of every model, once this loop turn. */
void lp_proxy_kick(lp_proxy_t *p);

/* A page of the scheduler's state (/metrics, /v1/models, advice, readiness,
 * v2 metadata, recent batches) as rendered: its status, and on an error its
 * code and message. */
typedef struct lp_page_s {
  int status;
  const char *ctype;      /* a string literal */
  const char *hdr;        /* extra header lines: a string literal, or NULL */
  const char *code;       /* an error: its code (a string literal), or NULL */
  char msg[256];
} lp_page_t;
/* sched/snapshot.c: the scheduler's state as the pages show it, its parts
 * (LP_SNAP_*) beside the models' basics; the caller's reference, or NULL
 * without memory. Only on the scheduler's thread: it walks live jobs and
 * samples each model's saturation (LP_SNAP_METRICS). */
lp_snap_t *lp__sched_snapshot(lp_proxy_t *p, unsigned parts);

/* sched/handback.c (the scheduler's thread): the scheduler is done with a
 * job: back to its front (with the others of this loop turn, by
 * lp__fronts_flush, which the scheduler loop's check handle calls once per
 * turn). */
void lp__job_hand_back(lp_job_t *job);
/* bt, built, to the front with the fewest batches out, whose loop sends it;
 * it comes back through the scheduler's inbox. */
void lp__batch_hand_out(lp_proxy_t *p, lp_batch_t *bt);
void lp__fronts_flush(lp_proxy_t *p);
void lp__sched_on_flush(uv_check_t *h);

/* sched/inbox.c: the scheduler's side: takes what the fronts sent (the
 * inbox's wake-up); a wake-up's pages share one snapshot (the advice gets its
 * answer) and go back with lp__job_hand_back. */
void lp__sched_on_inbox(lp_wake_t *w);

/* sched/job.c: whether each sequence fits a shape the model can run now: 0,
 * or -1 with e. */
int lp__job_check_shapes(lp_job_t *job, const char *field, lp_perr_t *e);

/* sched/model.c: admission, shape states, the core's events and actions */
int lp__model_init(lp_model_t *m, lp_proxy_t *p, const lp_model_config_t *cfg);
void lp__model_close(lp_model_t *m);
/* Hands job to the core; on refusal answers and frees it. Returns 0 or -1. */
int lp__model_admit(lp_model_t *m, lp_job_t *job);
/* Time passes: the core's tick, then its actions. */
void lp__model_schedule(lp_model_t *m);
/* Drains the core's actions (SEND, OUTPUT, ANSWER, HEALTH) and arms its wake. */
void lp__model_pump(lp_model_t *m);

void lp__model_fail_all(lp_model_t *m, lp_disp_status_t status);
int lp__model_ready(const lp_model_t *m);
/* sched/shapes.c: a backend's shape states or the shape set changed: recompute the model's and
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

/* sched/job.c: a request's end, exactly once */

/* The client left: the core hears it (now, or after the actions being
 * drained) and the job is freed then. */
void lp__job_cancel(lp_job_t *job);
/* Answers the client with an error if it has had no answer; frees nothing. */
void lp__job_fail(lp_job_t *job, int status, const char *code, const char *msg);
void lp__job_free(lp_job_t *job);
/* A sequence of job's has not been sent yet (the job is waiting, not running). */
int lp__job_waiting(const lp_job_t *job);
/* One sequence's output is here (slice, per-token outputs wrapped in [ ] when
 * written), inside ans (referenced while the job keeps it), from segment g of
 * batch bt: the answer reports that batch and place. */
void lp__seq_done(lp_seq_t *s, const lp_batch_t *bt, const lp_segment_t *g, lp_answer_t *ans,
                  const char *slice, size_t len, int per_segment);
/* The same from a v2 backend: elements [first, + n) of ans->out, inner per
 * token (or segment), its trailing dimensions dims[0..ndim); the front writes
 * them as its client's tensor part or JSON. */
void lp__seq_done_tensor(lp_seq_t *s, const lp_batch_t *bt, const lp_segment_t *g, lp_answer_t *ans,
                         size_t first, size_t n, size_t inner, int ndim, const int64_t *dims, int per_segment);

/* sched/v2link.c: Open Inference Protocol backends */
int lp__v2_model_name(const lp_model_t *m, int shape, char *out, size_t cap);
/* The batch as a v2 request: bt->body, bt->url, bt->headers. 0 or -errno. */
int lp__v2_encode(lp_model_t *m, lp_batch_t *bt);
/* Whether m's v2 bodies are gather lists (binary INT32 rectangles: the
 * sequences' tokens borrowed, ids from m->rect) rather than bt->body. */
int lp__v2_gathered(const lp_model_t *m);
/* Segment g's part of the batch's open answer, to sequence s as a span of the
 * kept answer (without one, for want of memory, its job fails). */
void lp__v2_slice(lp_model_t *m, const lp_batch_t *bt, const lp_segment_t *g, lp_seq_t *s);
/* The batch's open v2 answer's output tensor moves into a, its kept answer. */
void lp__v2_adopt(lp_batch_t *bt, lp_answer_t *a);

/* sched/v2probe.c: asks the backend whether each shape's model is ready;
 * answers set its states. */
void lp__v2_probe_shapes(lp_backend_t *b);

/* sched/v2pages.c: the model a v2 path names (n bytes; NULL: none; any
 * thread: c is the caller's configuration, models the address it names, never
 * read), and the name of a model's output tensor. */
lp_model_t *lp__v2_find_model(lp_model_t *models, const lp_config_t *c, const char *name, size_t n);
const char *lp__v2_output_name_of(const lp_model_config_t *c);
const char *lp__v2_output_name(const lp_model_t *m);

/* sched/batch.c: rectangles sent upstream and their answers */
/* The core's SEND: the layout and body built, the transfer started. */
void lp__batch_send(lp_model_t *m, const lp_disp_action_t *a);
/* The core's OUTPUT for the batch being delivered: the sequence's slice. */
void lp__batch_output(lp_model_t *m, const lp_disp_action_t *a);
/* Batches whose transfer could not start, reported to the core as resets. */
void lp__batches_failed(lp_model_t *m);
/* A batch back from its front, its outcome written: the core hears it. */
void lp__batch_finish(lp_batch_t *bt);
/* A batch back from a front after the scheduler stopped: freed unheard. */
void lp__batch_drop(lp_batch_t *bt);
void lp__batches_free(lp_model_t *m);

/* sched/backend.c */
/* What a probe's answer may hold: health and readiness (whose body is not
 * read), and shape lists or model metadata (a few shapes, a few tensors). */
#define LP_HEALTH_ANSWER_MAX (4u << 10)
#define LP_PROBE_ANSWER_MAX (64u << 10)
void lp__backends_start(lp_proxy_t *p);
/* sched/shapes.c: the core's verdict on b from its batches (a HEALTH action). */
void lp__backend_health_changed(lp_backend_t *b, int up);
/* The shell's record of a health change, whoever decided it (logged). */
void lp__backend_note_health(lp_backend_t *b, int healthy);
/* Shape k was found missing on b (mismatch, 404, not ready): asked about again
 * after a backoff. The caller sets its state. */
void lp__backend_shape_missing(lp_backend_t *b, int k);
/* Shape k is there after all: nothing to ask about it. */
void lp__backend_shape_found(lp_backend_t *b, int k);

/* sched/batchview.c: the recent-batches ring fed as each batch leaves (after its
 * transfer started) and ends (GET /v1/batches/recent is rendered from a copy
 * by front/pages.c). */
void lp__batchview_sent(lp_model_t *m, lp_batch_t *bt, const lp_disp_action_t *a);
void lp__batchview_answered(lp_model_t *m, const lp_batch_t *bt, lp_disp_outcome_t outcome, int http_status,
                            uint64_t device_ns, uint64_t now);

/* sched/status.c: the padding answer of /v1/buckets/advice */
int lp__render_advice(lp_proxy_t *p, lp_model_t *m, uint32_t k, lp_buf_t *out, char *err,
                      size_t errlen);

/* sched/advice.c (the scheduler's thread): /v1/buckets/advice for a page job. The
 * padding answer at once; with ?p99_ms= the shapes the simulator finds best
 * for the observed lengths, device times and rate (?rate= replaces the
 * observed one), computed on a worker of libuv's pool one at a time, equal
 * queries sharing one computation, cached; 429 advisor_busy past the queue's
 * bound. The job goes back to its front (lp__job_hand_back), now or when computed. */
void lp__advice_page(lp_proxy_t *p, lp_job_t *job);
/* Frees the computations still queued (the process is ending). */
void lp__advice_free(lp_proxy_t *p);

#endif
