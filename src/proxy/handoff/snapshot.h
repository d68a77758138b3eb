/* The scheduler's state as the pages show it, taken on the scheduler
 * (sched/snapshot.c) and rendered on a front (front/pages.c): a message
 * between the threads, apart from handoff.h as only those two read it. */
#ifndef LANEPACK_PROXY_SNAPSHOT_H
#define LANEPACK_PROXY_SNAPSHOT_H

#include "handoff/handoff.h"

#include "lanepack/bucket.h"
#include "lanepack/metrics.h"
#include "lanepack/recent.h"

/* What the pages of the scheduler's state show (/metrics, /v1/models,
 * readiness, the v2 metadata and readiness, /v1/batches/recent): plain numbers
 * and copied strings, taken on the scheduler's thread (sched/snapshot.c) and
 * rendered as text by the fronts (front/pages.c), so that no page's
 * formatting runs on the thread that dispatches. Nothing in it points into
 * the scheduler's state or the configuration: a reload rewrites p->cfg and the
 * backends' URLs in place while a front renders, so names are copied (a few
 * hundred bytes a backend), not pinned. One snapshot serves every page request
 * of a wake-up: each holds a reference, the last one dropped frees it. */
enum { LP_SNAP_METRICS = 1, LP_SNAP_RECENT = 2 }; /* parts beyond the models' basics */

typedef struct lp_snap_backend_s {
  char url[LP_URL_MAX];
  int healthy;
  uint32_t inflight;
  uint64_t batches, failures;
  /* LP_SNAP_METRICS: its device clock */
  uint32_t devices;
  uint64_t busy_ns, useful_ns, lead_ns;
  uint64_t cost_ns[LP_BUCKET_MAX_SHAPES]; /* expected time of a batch per shape slot; 0: unknown */
} lp_snap_backend_t;

typedef struct lp_snap_model_s {
  char name[LP_NAME_MAX];
  char v2_output[64];      /* its output tensor's name as v2 clients see it */
  int ragged, ready;
  int64_t vocab;           /* ids it takes are below this (vocab_size, else its tokenizer's); 0: no bound */
  lp_dtype_t v2_dtype;     /* the datatype its v2 metadata names */
  uint64_t queued_seqs, queued_tokens;
  lp_bucket_set_t shapes;  /* states and counters; a free slot has lanes 0 */
  lp_snap_backend_t *backends; /* nbackends, in the snapshot's block */
  size_t nbackends;
  /* LP_SNAP_METRICS */
  uint64_t batches_by_shape[LP_BUCKET_MAX_SHAPES];
  uint64_t real_tokens, pad_tokens, sequences_done;
  uint64_t waiting, running; /* its requests as one walk of its live jobs found them */
  uint64_t idle_with_work_ns; /* the core's: time with work waiting and a usable device idle */
  double saturation;       /* lp_saturation_update's, sampled when taken */
  lp_hist_t fill, duration, service, service_error, queue_delay;
  lp_hist_t fill_by_shape[LP_BUCKET_MAX_SHAPES];
} lp_snap_model_t;

struct lp_snap_s {
  int refs;                /* atomic: one per page job holding it (and its taker's while it hands them out) */
  unsigned parts;          /* LP_SNAP_* taken */
  uint64_t at_ns;          /* when taken (lp__now) */
  int unready;             /* SIGTERM seen */
  double start_time;
  uint64_t retries, stalls, hedges_won, inflight_batches;
  lp_snap_model_t *models; /* nmodels, in the snapshot's block */
  size_t nmodels;
  lp_recent_t *recent;     /* LP_SNAP_RECENT: a copy of the ring; NULL when the proxy keeps none; owned */
};

/* handoff/snapshot.c. new: one zeroed block for nmodels models and nbackends
 * backends in all (models[i].backends left for the taker to point into
 * backends[0..nbackends), given as *backends), with the caller's reference;
 * NULL without memory. unref drops a reference (NULL: nothing): the last frees
 * the block and the ring's copy, on whichever thread drops it. parts: what a
 * page of route (LP_ROUTE_*) needs beyond the models' basics. */
lp_snap_t *lp__snap_new(size_t nmodels, size_t nbackends, lp_snap_backend_t **backends);
void lp__snap_ref(lp_snap_t *s);
void lp__snap_unref(lp_snap_t *s);
unsigned lp__snap_parts(int route);

#endif
