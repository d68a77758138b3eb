/* lanepack-sim's parts: the policy interface (events in, actions out) that the
 * dispatch core, the legacy scheduler and the ideal all implement, the world
 * of modelled devices that drives one at virtual time, and its figures. The
 * world, the action queue and the core policy are the library src/sim (pure:
 * no I/O, no clock), linked by the proxy for the shape advisor too; the ideal,
 * the legacy policy and the traffic below are lanepack-sim's (loadgen/). */
#ifndef LANEPACK_SIM_H
#define LANEPACK_SIM_H

#include <stddef.h>
#include <stdint.h>

#include "lanepack/bucket.h"
#include "lanepack/rng.h"

#define SIM_MAX_BACKENDS 64

/* One request of the replay: a single sequence, or one of a request of many
 * (--big): those arrive together and are counted apart, the light ones'
 * figures too. */
typedef struct sim_req_s {
  uint64_t arrive_ns;
  uint64_t deadline_ns;   /* absolute; 0 = none */
  uint32_t len;
  int32_t prio;
  uint32_t group;         /* > 1: the first of `group` sequences of one request (the
                             next group - 1 have in_group); 0 or 1: a request by itself */
  uint8_t in_group;       /* a later sequence of the group before it */
} sim_req_t;

/* What the modelled devices are and how they misbehave. */
typedef struct sim_model_s {
  lp_bucket_set_t shapes;
  uint64_t cost_ns[LP_BUCKET_MAX_SHAPES];  /* true device time per batch of each shape */
  uint32_t backends, devices;              /* devices per backend */
  uint64_t lead_ns;       /* encode + deliver before the batch reaches the backend */
  double jitter;          /* device time x (1 + jitter x U(-1, 1)) */
  double fail_rate;       /* a batch answers 500 after running */
  double stall_rate;      /* a batch never answers (its device is freed) */
  double slow_rate;       /* a batch takes slow_ns more */
  uint64_t slow_ns;
  double slow_error_rate; /* a batch answers 500 after slow_error_ns on its device */
  uint64_t slow_error_ns;
  double reset_rate;      /* a batch's connection is reset after it ran (no answer) */
  int check;              /* invariants after every step: the policy's own (the core:
                             lp_disp_check), and the world's: no request waits on no batch
                             that can answer it for 2 s while a device is idle; a broken
                             one ends the run with -EPROTO */
} sim_model_t;

/* ---- the policy interface ---- */

typedef enum {
  SIM_ACT_NONE = 0,
  SIM_ACT_SEND,     /* batch `batch` of `shape` with items[0..n) to backend */
  SIM_ACT_ANSWER,   /* request `req` gets its one answer, `status` */
  SIM_ACT_CANCEL,   /* the batch is not wanted any more (a hedge lost) */
  SIM_ACT_WAKE      /* call tick at `at` (replaces the previous wake) */
} sim_act_kind_t;

typedef struct sim_action_s {
  sim_act_kind_t kind;
  uint32_t backend;
  int shape;
  uint64_t batch;
  const uint32_t *items;  /* request indices; owned by the policy, valid until its next call */
  uint32_t n;
  uint32_t req;
  int status;
  uint64_t at;
} sim_action_t;

/* A batch's status when its connection was reset after it ran (no HTTP status). */
#define SIM_RESET 0

/* A batch's outcome as the policy hears it. */
typedef struct sim_result_s {
  uint64_t batch;
  int status;             /* 200, 500, or SIM_RESET: the connection was reset */
  uint64_t sent_ns;       /* when the policy sent it */
  uint64_t answered_ns;   /* when the answer came back (now) */
  uint64_t device_ns;     /* device time, as X-Device-Time-Us tells it */
} sim_result_t;

/* A policy: a state machine driven at virtual time. Each call may queue
 * actions; the world takes them with next() until it says SIM_ACT_NONE.
 * Every call returns 0 or a negative errno. */
typedef struct sim_policy_s {
  const char *name;
  void *st;
  int (*admit)(void *st, uint64_t now, uint32_t req, const sim_req_t *r);
  int (*result)(void *st, uint64_t now, const sim_result_t *res);
  int (*tick)(void *st, uint64_t now);
  int (*next)(void *st, sim_action_t *a);
  void (*free)(void *st);
  /* what broke when a call returned -EPROTO (NULL: the policy does not say) */
  const char *(*broken)(void *st);
  uint64_t lead_ns;       /* the lead time this policy's batches see (the ideal: 0) */
  int faultless;          /* this policy's devices never fail (the ideal) */
} sim_policy_t;

/* The policies. reqs is borrowed for the policy's life. Each returns 0 or a
 * negative errno; on success *p is ready and p->free releases it. */
int sim_ideal_new(sim_policy_t *p, const sim_model_t *m, const sim_req_t *reqs, int oldest);
int sim_baseline_new(sim_policy_t *p, const sim_model_t *m, const sim_req_t *reqs);
/* age_order: the dispatch core's order before the fair share across requests
 * (lp_disp_config_t.age_order; the policy "core-age"), to compare. */
int sim_core_new(sim_policy_t *p, const sim_model_t *m, const sim_req_t *reqs, int age_order);

/* A policy's queue of actions for the world, with the items its SENDs carry
 * (simact.c): filled during one call, emptied by next(). */
typedef struct sim_actq_s {
  sim_action_t *acts;   /* owned; a SEND's items hold an offset into arena until taken */
  size_t n, cap, taken;
  uint32_t *arena;      /* owned */
  size_t narena, caparena;
} sim_actq_t;

void sim_actq_free(sim_actq_t *q);
int sim_actq_send(sim_actq_t *q, uint32_t backend, int shape, uint64_t batch, const uint32_t *items,
                  uint32_t n);
int sim_actq_answer(sim_actq_t *q, uint32_t req, int status);
int sim_actq_cancel(sim_actq_t *q, uint64_t batch);
int sim_actq_wake(sim_actq_t *q, uint64_t at);
/* The next action (SIM_ACT_NONE when all are taken, which empties the queue). */
void sim_actq_next(sim_actq_t *q, sim_action_t *a);

/* ---- a run ---- */

typedef struct sim_figures_s {
  double p50_ms, p99_ms, p999_ms, max_ms, mean_ms;
  double util;            /* device busy time / (devices x span) */
  double fill;            /* real tokens / slots over batches that ran */
  double served_rps;      /* answered 200 per second while the arrivals came (or, with a
                             horizon, in its last four fifths) */
  double served_tps;      /* their tokens per second (starving long sequences cannot raise it) */
  double offered_rps;
  /* the saturation signals as the proxy computes them (lanepack_saturation):
   * mean arrival-to-first-send of answered requests, mean device time per batch */
  double queue_ms, service_ms;
  uint64_t requests, ok, errors, unanswered, double_answered;
  int err_status[4];      /* the most common error statuses, and how many each */
  uint64_t err_count[4];
  uint64_t batches, failed_batches;
  double span_s;
  /* with requests of many sequences (groups): the others' (light: one sequence
   * each) latency p99 and their wait until first sent, p99 */
  int grouped;
  uint64_t light_ok;
  double light_p50_ms, light_p99_ms, light_wait_p99_ms;
} sim_figures_t;

/* Replays reqs[0..n) (sorted by arrival) through the policy against the
 * model's devices, seeded by seed for the devices' draws. When horizon_ns is
 * not 0 the run stops there and served_rps counts answers in
 * [horizon/5, horizon] (a capacity measurement under overload); else it runs
 * until every request is answered. Returns 0 or a negative errno (with a
 * message in err). */
int sim_run(const sim_model_t *m, sim_policy_t *p, const sim_req_t *reqs, size_t n,
            uint64_t seed, uint64_t horizon_ns, sim_figures_t *out, char *err, size_t errlen);

/* ---- traffic (loadgen/simarr.c, lanepack-sim only) ---- */

/* The lengths arrivals draw from: a length file's values (those no shape holds
 * left out and counted) or a synthetic mix. */
typedef struct sim_pool_s {
  uint32_t *v;            /* owned; NULL for a mix */
  size_t n, dropped, total;
  void *mix;              /* lp_lengths_t of a mix, owned */
  uint32_t maxb;
} sim_pool_t;

/* Loads spec (as lp_lengths_load takes it) keeping lengths 1..maxb. Returns 0
 * or a negative errno with a message in err. */
int sim_pool_load(sim_pool_t *p, const char *spec, uint32_t maxb, char *err, size_t errlen);
void sim_pool_free(sim_pool_t *p);
/* Poisson arrivals at rate for seconds (or count requests when count is not 0),
 * lengths from the pool, seeded by seed: *out (owned by the caller) gets *n
 * requests sorted by arrival. Returns 0 or -ENOMEM. */
int sim_poisson(const sim_pool_t *p, double rate, double seconds, size_t count, uint64_t seed,
                sim_req_t **out, size_t *n);
/* Adds to *reqs (sorted, *n of them; replaced, owned by the caller) a request of
 * big sequences every every_ns (the first at every_ns / 2), up to the last
 * arrival, lengths from the pool, seeded by seed: each a group (sim_req_t.group)
 * arriving after the requests of the same instant. Returns 0 or -ENOMEM. */
int sim_add_big(const sim_pool_t *p, uint32_t big, uint64_t every_ns, uint64_t seed, sim_req_t **reqs, size_t *n);
/* Reads a trace: one request a line, "ARRIVAL_MS LENGTH [PRIORITY [DEADLINE_MS]]"
 * (blanks or commas between; the deadline after the arrival, 0 = none; '#'
 * starts a comment). Returns 0 or -EINVAL / -ENOENT / -ENOMEM with err naming
 * the line. */
int sim_trace_load(const char *path, sim_req_t **out, size_t *n, char *err, size_t errlen);

#endif
