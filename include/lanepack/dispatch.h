/* The dispatch policy of one model as one pure state machine: its queue (ages,
 * priorities, deadlines), each backend's device clocks and shape states, when a
 * batch leaves and with which shape, sequences and backend, stalls, hedges,
 * retries, failures and the bound on every request. Events go in (admit, cancel,
 * a batch's result, health or shapes changed, tick), actions come out (send this
 * batch there, this sequence's output is in that batch's answer, answer this job,
 * a backend's health changed) and wake_at says when to tick next.
 *
 * No I/O, no clock, no libuv: every call takes `now` (nanoseconds on any
 * monotonic clock the caller keeps; it must never go back). The same code runs in
 * the proxy, in unit tests in virtual time and in lanepack-sim.
 *
 * Calling protocol (one thread):
 *   after every event call, drain lp_disp_next() until it returns 0, then arm a
 *   timer for lp_disp_wake_at() and call lp_disp_tick() when it fires (a tick
 *   earlier or later than asked is harmless; ticking late only delays).
 * Every job admitted (lp_disp_admit returned 0) gets exactly one ANSWER action,
 * unless it is cancelled first (lp_disp_cancel: no ANSWER is emitted for it).
 * A rejected admission emits nothing: the caller answers it from the return code. */
#ifndef LANEPACK_DISPATCH_H
#define LANEPACK_DISPATCH_H

#include <stddef.h>
#include <stdint.h>

#include "lanepack/bucket.h"
#include "lanepack/devclock.h"
#include "lanepack/packer.h"

#define LP_DISP_MAX_BACKENDS 16
/* Times in the core are nanoseconds; configurations speak milliseconds. */
#define LP_NS_PER_MS 1000000ull

/* ---- configuration ---- */

typedef struct lp_disp_config_s {
  /* Shapes of the model, as configured. Their `state` is the initial state on
   * every backend (lp_disp_backend_shapes changes it per backend); cost_ns, when
   * set, seeds the device clock of every backend for that shape (else
   * seed_cost_ns[] below, else learned from the first batches). */
  lp_bucket_set_t shapes;
  uint64_t seed_cost_ns[LP_BUCKET_MAX_SHAPES]; /* per shape index; 0 = use shapes.cost_ns */
  uint32_t nbackends;                          /* 1..LP_DISP_MAX_BACKENDS */
  uint32_t devices[LP_DISP_MAX_BACKENDS];      /* devices per backend; 0 = 1 */
  uint32_t max_segments;      /* sequences per lane; 0 = no limit */
  lp_algo_t packer;           /* how a shape's lanes are filled; default best-fit decreasing */
  uint32_t ragged;            /* 1: one flat lane (GPU); shapes holds one 1 x budget shape */

  /* When a batch leaves and what it must hold. */
  uint64_t max_wait_ns;       /* age bound: a sequence older than this (minus the time
                                 its smallest holding shape takes) is a hard constraint:
                                 the oldest such must go in the next batch (when it is a
                                 large request's, one past a rectangle of the window, it
                                 takes turns with the others' oldest such); also how long
                                 a lone sequence may wait for company on an idle device
                                 when there is no clock yet. Default 5 ms. */
  double high_util;           /* above this device utilization (0..1) one batch waits
                                 queued at the device behind the running one (else the
                                 next leaves just in time); default 0.85 */
  uint32_t max_queued_at_device; /* batches sent to a device beyond the running one;
                                    0 = 1 (the default) */
  uint32_t max_window;        /* sequences looked at per decision at most; 0 = 4096 */
  int age_order;              /* 1: every request's sequences in one age order, a large
                                 request's all before a newer small one's (the order before
                                 the fair share across requests; lanepack-sim's core-age
                                 policy, to compare); 0 (the default): fair across requests */

  /* Failures. */
  uint32_t max_copies;        /* copies one sequence may have over its life, the first
                                 send, hedges and retries together; 0 = 3 */
  double stall_factor;        /* a batch past this many times its expected service time is
                                 stalled and its sequences hedged; 0 = never */
  uint64_t stall_min_ns;      /* ... and past its expected finish by at least this */
  uint64_t retry_backoff_ns;  /* wait before a failed sequence is packed again; doubles
                                 per retry of that sequence, capped at 1 s */
  uint64_t backend_timeout_ns;/* the caller's transfer timeout (for the request bound and
                                 deadlines); the caller reports TIMEOUT itself */
  uint32_t unhealthy_after;   /* consecutive batch failures that mark a backend down
                                 (failures a poisoned sequence explains do not count);
                                 0 = 3 */

  /* Bounds. */
  uint64_t request_bound_ns;  /* every job is answered within this of its admission;
                                 0 = derived: max_wait + max_copies x (backend_timeout +
                                 backoff) + 1 s */
  size_t max_queue_jobs;      /* jobs admitted and not answered; 0 = no limit */
  uint64_t max_queue_tokens;  /* their tokens; 0 = no limit */
} lp_disp_config_t;

/* Fills c with the defaults above: no shapes, one backend with one device. */
void lp_disp_config_default(lp_disp_config_t *c);

/* ---- the state machine ---- */

typedef struct lp_disp_s lp_disp_t;

/* Returns NULL on allocation failure or a config out of range (no shape, no
 * backend, more than LP_DISP_MAX_BACKENDS). The config is copied. */
lp_disp_t *lp_disp_new(const lp_disp_config_t *cfg);
void lp_disp_free(lp_disp_t *d);

/* ---- events in ---- */

/* A job of nseq sequences of lens[i] tokens arrives at now. priority: higher goes
 * first (the proxy's range is -1000..1000); deadline_ns: absolute time on the same
 * clock as now, 0 = none. job_id: the caller's, unique among live jobs.
 * Returns 0 (the job will get exactly one ANSWER) or a negative errno with
 * nothing queued and no action emitted:
 *   -EINVAL     nseq 0, a zero-length sequence or job_id 0
 *   -EEXIST     job_id is live
 *   -EMSGSIZE   a sequence longer than any shape (compiled or compiling) holds
 *   -ENODEV     no shape is compiled or compiling anywhere
 *   -EHOSTDOWN  no backend is healthy
 *   -ENOBUFS    the queue is full (jobs or tokens): retry later
 *   -ETIME      the deadline cannot be met (the earliest answer is later)
 *   -ENOMEM
 * lp_disp_reject_status() maps these to an HTTP status and a stable code. */
int lp_disp_admit(lp_disp_t *d, uint64_t job_id, uint32_t nseq, const uint32_t *lens, int priority,
                  uint64_t deadline_ns, uint64_t now);

/* The client left: the job's queued sequences are dropped, in-flight copies are
 * left to finish (their output is discarded). No ANSWER follows. Returns 0 or
 * -ENOENT (unknown or already answered). */
int lp_disp_cancel(lp_disp_t *d, uint64_t job_id, uint64_t now);

/* How a batch ended, as the caller saw it. */
typedef enum {
  LP_DISP_OK = 0,         /* 200 and an answer the caller could read: every sequence's
                             output is in it */
  LP_DISP_ERR_5XX,        /* 5xx (not a shape mismatch): the backend or one sequence
                             failed; the batch is bisected and retried */
  LP_DISP_ERR_4XX,        /* 4xx other than a missing shape: the batch was refused as
                             wrong; its sequences fail with 502, the backend is fine */
  LP_DISP_ERR_SHAPE,      /* the backend does not have the shape (500 "shape mismatch",
                             v2 404/503 unavailable): the shape is barred on that backend
                             and the sequences are packed again at no cost */
  LP_DISP_TIMEOUT,        /* no answer within the caller's timeout: may still run there,
                             so its retry goes to another backend when one is healthy */
  LP_DISP_RESET,          /* the transfer failed (connection refused or reset) */
  LP_DISP_GARBLED,        /* 200 with an answer that could not be read */
  LP_DISP_ABANDONED,      /* the caller gave the transfer up (shutting down): the
                             device slot is freed and its sequences fail with 503 */
  LP_DISP_UNSENT,         /* it never reached the backend (connection refused): counts
                             against the backend like a reset, but its sequences are
                             re-sent elsewhere (while another backend is up) at no cost
                             to their copies, like a bisection's halves */
  LP_DISP_OUTCOME_COUNT
} lp_disp_outcome_t;

typedef struct lp_disp_result_s {
  lp_disp_outcome_t outcome;
  int http_status;     /* what the backend answered; 0 = none (for messages only) */
  uint64_t sent_ns;    /* when the request was really sent; 0 = the SEND action's time */
  uint64_t device_ns;  /* device time the backend reported (X-Device-Time-Us); 0 = unknown:
                          the service and lead times are then learned from round trips */
} lp_disp_result_t;

/* The batch batch_id (from a SEND action) ended at now. An unknown id (already
 * ended) returns -ENOENT and changes nothing; else 0. Emits OUTPUT for each of its
 * sequences not yet answered (OK), ANSWERs, maybe HEALTH, maybe SENDs. */
int lp_disp_result(lp_disp_t *d, uint64_t batch_id, const lp_disp_result_t *r, uint64_t now);

/* A probe's verdict on backend b (0..nbackends-1). Marking the last healthy
 * backend down fails every queued job with 503 no_healthy_backend. Returns 0 or
 * -EINVAL. */
int lp_disp_backend_health(lp_disp_t *d, uint32_t b, int up, uint64_t now);

/* Backend b's shape states, one per configured shape index (n <= shapes.count; the
 * rest keep theirs). A job a shape no longer held anywhere was needed for is
 * failed with 503 no_shape_available at once. Returns 0 or -EINVAL. */
int lp_disp_backend_shapes(lp_disp_t *d, uint32_t b, const lp_shape_state_t *states, size_t n,
                           uint64_t now);

/* A backend more (a reload added it), up, with its device count
 * (1..LP_CLOCK_MAX_DEVICES): its index (the count so far), or -EINVAL past
 * LP_DISP_MAX_BACKENDS. Only configured backends are walked by a decision. */
int lp_disp_add_backend(lp_disp_t *d, uint32_t devices, uint64_t now);
/* How many backends the core has (configured and added). */
uint32_t lp_disp_backends(const lp_disp_t *d);

/* Backend b reports its device count (1..LP_CLOCK_MAX_DEVICES). */
int lp_disp_backend_devices(lp_disp_t *d, uint32_t b, uint32_t devices, uint64_t now);

/* Time passes: sends what is due, hedges stalls, requeues retries after their
 * backoff, fails what passed its deadline or bound. */
void lp_disp_tick(lp_disp_t *d, uint64_t now);

/* Shutting down: from now on nothing waits for company (every queued sequence
 * leaves as soon as a device can take it) and no retry is made; answered as usual.
 * lp_disp_fail_all answers every unanswered job with status at once. */
void lp_disp_drain(lp_disp_t *d, uint64_t now);

/* ---- actions out ---- */

typedef enum {
  LP_DISP_ACT_SEND = 1,  /* send batch `send` to backend send.backend */
  LP_DISP_ACT_OUTPUT,    /* sequence (job_id, seq) is done: its output is in the answer
                            of batch output.batch_id at (lane, offset); emitted while the
                            caller still holds that answer (during lp_disp_result) */
  LP_DISP_ACT_ANSWER,    /* job job_id is finished: status OK (every sequence had its
                            OUTPUT) or an error; exactly once per admitted job */
  LP_DISP_ACT_HEALTH     /* the core marked backend health.backend up or down from
                            batch outcomes (the caller may log it and probe). Down is
                            only said while another backend is up; a backend down
                            here gets a probe batch now and then (SEND reason
                            "probe") and is up again when that one is answered. A
                            verdict of the caller's (lp_disp_backend_health) ends
                            those probes. */
} lp_disp_act_kind_t;

/* Why a job failed (or OK). lp_disp_status_http / _code give the HTTP status and
 * the stable machine-readable code the proxy uses. */
typedef enum {
  LP_DISP_ST_OK = 0,
  LP_DISP_ST_DEADLINE,       /* 504 deadline_exceeded */
  LP_DISP_ST_BOUND,          /* 504 request_bound_exceeded */
  LP_DISP_ST_BACKEND_ERROR,  /* 502 backend_error (5xx or 4xx after the retries) */
  LP_DISP_ST_BACKEND_TIMEOUT,/* 504 backend_timeout */
  LP_DISP_ST_BAD_ANSWER,     /* 502 bad_backend_answer */
  LP_DISP_ST_NO_SHAPE,       /* 503 no_shape_available */
  LP_DISP_ST_NO_BACKEND,     /* 503 no_healthy_backend */
  LP_DISP_ST_SHUTDOWN,       /* 503 shutting_down */
  LP_DISP_ST_NOMEM,          /* 503 out_of_memory */
  LP_DISP_ST_SHAPE_COMPILING,/* 503 shape_compiling: only a shape still compiling holds one
                                of its sequences, and it did not compile within
                                backend_timeout of the job's admission */
  LP_DISP_ST_COUNT
} lp_disp_status_t;

/* Answers every unanswered job with status at once (e.g. LP_DISP_ST_SHUTDOWN past
 * the drain timeout); in-flight batches' results are then ignored. */
void lp_disp_fail_all(lp_disp_t *d, lp_disp_status_t status, uint64_t now);

/* One sequence placed in a SEND. */
typedef struct lp_disp_item_s {
  uint64_t job_id;
  uint32_t seq;      /* index in the job's lens[] */
  uint32_t lane;
  uint32_t offset;   /* first token slot in the lane */
  uint32_t len;
} lp_disp_item_t;

typedef struct lp_disp_action_s {
  lp_disp_act_kind_t kind;
  union {
    struct {
      uint64_t batch_id;       /* unique, from 1 */
      uint32_t backend, device;
      int shape;               /* index into the configured shapes */
      uint32_t lanes, bucket;
      size_t n;                /* items */
      const lp_disp_item_t *items; /* lane-major, offsets ascending; owned by the core,
                                      valid until the next event call */
      uint64_t real_tokens;    /* sum of lens: fill = real_tokens / (lanes x bucket) */
      uint64_t expect_ns;      /* when the clock expects its answer; 0 = unknown */
      uint32_t copies;         /* items that are a hedge or retry copy */
      const char *reason;      /* why it left now (static string): "idle" (a device was
                                  free), "just_in_time" (one is about to be),
                                  "queued" (a full batch to wait at a busy device
                                  above high_util), "drain", "probe" */
    } send;
    struct {
      uint64_t job_id;
      uint32_t seq;
      uint64_t batch_id;
      uint32_t lane, offset;
      uint64_t sent_ns;        /* when that batch left (the SEND's time) */
    } output;
    struct {
      uint64_t job_id;
      lp_disp_status_t status;
      int http_status;         /* 200 on OK */
      const char *code;        /* stable code, "" on OK (static string) */
      const char *message;     /* human message (owned by the core, valid until the next
                                  event call) */
      uint64_t admitted_ns;    /* when the job was admitted */
    } answer;
    struct {
      uint32_t backend;
      int up;
    } health;
  };
} lp_disp_action_t;

/* Takes the next action in order: 1 and *a filled, or 0 when there is none. */
int lp_disp_next(lp_disp_t *d, lp_disp_action_t *a);

/* The next time the caller must call lp_disp_tick (exact, in ns; never earlier than
 * now's latest value), or UINT64_MAX when nothing is pending on time. */
uint64_t lp_disp_wake_at(const lp_disp_t *d);

/* ---- reading the state (metrics, the simulator) ---- */

typedef struct lp_disp_stats_s {
  uint64_t admitted, rejected, cancelled;
  uint64_t answered_ok, answered_err;
  uint64_t batches, real_tokens, pad_tokens;
  uint64_t batches_by_shape[LP_BUCKET_MAX_SHAPES];
  uint64_t real_by_shape[LP_BUCKET_MAX_SHAPES];
  uint64_t hedges, retries, bisections, stalls;
  size_t queued_jobs, queued_seqs;
  uint64_t queued_tokens;
  uint32_t inflight;           /* batches sent and not ended */
  uint64_t idle_with_work_ns;  /* time with a sequence waiting while a healthy device that could
                                  run it was idle (by the core's own view: 0 when it keeps its
                                  rules; a stalled batch counts as busy until its stall time) */
} lp_disp_stats_t;

void lp_disp_stats(const lp_disp_t *d, lp_disp_stats_t *out);
/* The core's invariants, between events (dispatch-check.c): no device that is
 * free (healthy, nothing live on it, not a hung one before its probe time) and
 * has a compiled shape is idle while a sequence it could run is queued; every
 * batch holding a device has a stall time; every sequence of a live job is
 * queued, in backoff with a retry time, in flight with a live (not stalled)
 * copy, or, its copies spent and all stalled, on a timer that gives it up by
 * half the transfer timeout. As of the last event (a later now is taken as its
 * time). 0, or -EPROTO with what broke in why[0..n). Costs
 * a walk over the live jobs: lanepack-sim runs it at every step, the proxy's
 * debug build after every event. */
int lp_disp_check(const lp_disp_t *d, uint64_t now, char *why, size_t n);
/* Backend b's device clock (learned costs, lead time, utilization), or NULL. */
const lp_devclock_t *lp_disp_clock(const lp_disp_t *d, uint32_t b);
/* 1 when backend b is healthy. */
int lp_disp_backend_up(const lp_disp_t *d, uint32_t b);

/* HTTP status and stable code for an admission's negative return. */
int lp_disp_reject_status(int rc, const char **code);
int lp_disp_status_http(lp_disp_status_t s);
const char *lp_disp_status_code(lp_disp_status_t s);
const char *lp_disp_outcome_name(lp_disp_outcome_t o);

/* ---- the shell's changes (dispatch-config.c) ---- */

/* A reload: the tunables of cfg (wait, copies, stalls, backoff, timeouts, health,
 * bounds, queue limits, seeded costs) replace the running ones; shapes, backends
 * and devices are not read. Jobs admitted before keep their bound. 0 or -EINVAL. */
int lp_disp_reconfigure(lp_disp_t *d, const lp_disp_config_t *cfg);

/* Shape slot k (k <= the shape count: k == count appends) becomes lanes x bucket,
 * or a free slot with lanes = bucket = 0; unchanged geometry changes nothing.
 * A changed slot starts UNAVAILABLE on every backend with its learned costs
 * forgotten: follow with lp_disp_backend_shapes. The caller keeps no batch of
 * the slot's old shape in flight. 0 or -EINVAL. */
int lp_disp_set_shape(lp_disp_t *d, size_t k, uint32_t lanes, uint32_t bucket);

/* Batches a device may hold beyond the one running, 0 allowed (the proxy's
 * max_inflight cap: one batch in flight per device, none waiting at it).
 * Replaces max_queued_at_device until the next lp_disp_reconfigure. */
int lp_disp_set_queue_depth(lp_disp_t *d, uint32_t queued);

#endif
