/* The baseline policy, lanepack's old online dispatch policy (before the
 * dispatch core): given what is waiting, dispatch a rectangle now or wait. Kept
 * only for the simulator's and packbench's comparisons; no I/O, no clock: the
 * caller passes the time. */
#ifndef LANEPACK_BASELINE_SCHED_H
#define LANEPACK_BASELINE_SCHED_H

#include <stddef.h>
#include <stdint.h>

#include "lanepack/bucket.h"
#include "lanepack/packer.h"

typedef struct lp_baseline_item_s {
  uint32_t len;
  uint32_t bypassed;     /* dispatches that passed over it; lp_baseline_decide updates it */
  uint64_t enqueued_ns;
  uint64_t deadline_ns;  /* 0 = none */
} lp_baseline_item_t;

typedef struct lp_baseline_config_s {
  lp_algo_t algo;
  double fill_target;     /* dispatch at once when a plan fills this fraction (0..1] */
  uint64_t max_wait_ns;   /* the oldest item waits at most this long */
  uint32_t max_bypass;    /* an item passed over this many times is placed first */
  uint32_t max_segments;  /* per lane; 0 = no limit */
  uint32_t max_window;    /* items considered per decision; 0 = 4096 */
} lp_baseline_config_t;

typedef enum {
  LP_BASELINE_IDLE = 0,   /* nothing waiting */
  LP_BASELINE_WAIT,       /* decide again at wake_ns (or when items arrive) */
  LP_BASELINE_DISPATCH,   /* send the plan */
  LP_BASELINE_NO_SHAPE    /* no shape is compiled: nothing can be dispatched */
} lp_baseline_action_t;

typedef struct lp_baseline_plan_s {
  lp_baseline_action_t action;
  uint64_t wake_ns;         /* WAIT: the next time a rule can fire */
  int shape;                /* DISPATCH: index into the bucket set */
  size_t n;                 /* DISPATCH: items considered (a prefix of the queue) */
  const lp_place_t *place;  /* DISPATCH: n placements, bin -1 = stays queued;
                               owned by the scheduler, valid until the next call */
  uint32_t placed;
  uint64_t real_tokens;
  double fill;
  const char *reason;       /* DISPATCH: "fill", "max_wait", "deadline", "bypass" */
} lp_baseline_plan_t;

typedef struct lp_baseline_s lp_baseline_t;

/* Returns NULL on allocation failure or a config out of range. */
lp_baseline_t *lp_baseline_new(const lp_baseline_config_t *cfg);
void lp_baseline_free(lp_baseline_t *s);

/* When a plan may leave (the device clock's say, see lp_baseline_decide_mode). */
typedef enum {
  LP_BASELINE_RULES = 0,  /* the fill target and the due rules (max_wait, deadline, bypass) */
  LP_BASELINE_NOW,        /* a device is free or about to be: the best plan leaves now */
  LP_BASELINE_FULL_ONLY   /* every device is busy: only a plan that reaches the fill target */
} lp_baseline_mode_t;

/* Decides for items[0..n) given in queue order (priority first, then arrival).
 * Due items (waited max_wait, deadline within the shape's cost, or bypassed
 * max_bypass times) are placed before any other. On DISPATCH, every item left
 * out that precedes a placed one has its bypassed count raised.
 * Returns 0, or a negative errno. */
int lp_baseline_decide(lp_baseline_t *s, const lp_bucket_set_t *set, lp_baseline_item_t *items,
                       size_t n, uint64_t now_ns, lp_baseline_plan_t *plan);
/* The same in a mode. When every compiled shape has a cost_ns, shapes are
 * scored by expected device time per real token rather than padding. */
int lp_baseline_decide_mode(lp_baseline_t *s, const lp_bucket_set_t *set, lp_baseline_item_t *items,
                            size_t n, uint64_t now_ns, lp_baseline_mode_t mode, lp_baseline_plan_t *plan);

#endif
