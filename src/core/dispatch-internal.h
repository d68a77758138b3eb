/* The dispatch state machine's records, shared by its files (dispatch.c: events,
 * failures, answers; dispatch-plan.c: when a batch leaves and what it holds). */
#ifndef LANEPACK_DISPATCH_INTERNAL_H
#define LANEPACK_DISPATCH_INTERNAL_H

#include "lanepack/dispatch.h"
#include "lanepack/packer.h"
#include "lanepack/queue.h"
#include "lanepack/timeheap.h"

#include <stddef.h>
#include <stdint.h>

#ifndef container_of
#define container_of(p, T, m) ((T *)(void *)((char *)(p)-offsetof(T, m)))
#endif

#define MS LP_NS_PER_MS
/* The defaults of tunables a configuration leaves at 0 (lp_disp_config_t
 * says what each means). */
#define DISP_DEFAULT_MAX_COPIES 3       /* the first send, one hedge or retry, one more */
#define DISP_DEFAULT_UNHEALTHY_AFTER 3  /* failed batches in a row: one is noise, three a pattern */
#define DISP_DEFAULT_QUEUED_AT_DEVICE 1 /* one batch waits at a busy device: enough to hide the
                                           round trip, no more committed early */
#define DISP_DEFAULT_MAX_WINDOW 4096    /* sequences a decision looks at: bounds its cost */
/* Stalls in a row after which a device is presumed hung: it gets one probe
 * batch at a time, after a backoff, until it answers (one stall may be a slow
 * batch; two running are the device). */
#define DISP_SUSPECT_STALLS 2

/* The longest backoff before a retry (it doubles from retry_backoff_ns). */
#define DISP_MAX_BACKOFF_NS (1000ull * MS)
/* A request's bound past its worst case (queue wait, every copy's timeout and
 * backoff): room for the answer's own delivery, so the bound never fires on
 * a request that is on its way. */
#define DISP_BOUND_SLACK_NS (1000ull * MS)

typedef struct disp_job_s disp_job_t;
typedef struct disp_batch_s disp_batch_t;

enum { SEQ_QUEUED = 1, SEQ_OUT, SEQ_BACKOFF, SEQ_DONE };

typedef struct disp_seq_s {
  lp_qnode_t q;            /* in d->queue while SEQ_QUEUED */
  lp_theap_node_t retry;   /* in d->retries while SEQ_BACKOFF */
  disp_job_t *job;         /* borrowed: the job's block holds this record */
  uint32_t idx, len;
  uint8_t state;
  uint8_t alone;           /* failed with no one else to blame: goes in a batch by itself */
  uint8_t free_next;       /* its next send is a free re-send (bisection, missing shape) */
  uint16_t inflight;       /* batches holding it now */
  uint16_t stalled;        /* of those, batches that stalled: presumed lost, they carry it no more */
  uint32_t copies;         /* sends that spent its budget: the first, hedges, retries */
  uint32_t free_sends;     /* re-sends that did not */
  uint32_t retries;        /* spending retries so far (the backoff doubles) */
  uint32_t group;          /* suspect set after a failed batch was bisected; 0 = none */
  uint32_t avoid;          /* backends (bit per index) it should not go to */
  uint32_t mark;           /* decision scratch: the decision that looked at it */
  uint64_t enq_ns;         /* its age counts from admission, through retries */
  uint64_t batch_id, sent_ns; /* its latest send */
} disp_seq_t;

struct disp_job_s {
  uint64_t id;
  lp_theap_node_t timer;   /* in d->timers at min(deadline, bound) while unanswered */
  lp_theap_node_t dl;      /* in d->deadlines at its deadline while it has a queued sequence */
  int priority;
  int answered;            /* answered or cancelled: nothing more is said for it */
  uint64_t deadline_ns, admitted_ns, bound_ns, tokens;
  uint32_t nseq, unresolved, queued;
  uint32_t refs;           /* batches in flight holding one of its sequences */
  uint32_t wmark;          /* decision scratch: the decision that counted wtok */
  uint64_t wtok;           /* ... its tokens in that decision's window */
  disp_job_t *free_next;   /* in d->job_spare once freed */
  disp_seq_t seqs[];       /* nseq records, in the same block */
};

struct disp_batch_s {
  uint64_t id;
  uint32_t backend, device;
  int shape;
  uint64_t sent_ns;        /* the SEND's time */
  uint64_t expect_ns;      /* expected answer; 0 = unknown */
  uint64_t start_ns;       /* when it was expected to start on its device at its send (after
                              the lead time, or after what was ahead of it then): its stall
                              time counts from this, or from ahead_ns */
  uint64_t ahead_ns;       /* when the batch ahead of it ended while holding the device (not
                              presumed lost: a lost one's late answer or timeout says nothing
                              of when this one started); 0 = none */
  uint64_t prev_answer_ns; /* when the batch ahead of it on its device answered; 0 = none */
  int behind;              /* a batch was ahead of it on its device when it was sent */
  int lost;                /* presumed lost: stalled, or overtaken on its device by one sent
                              after it; it holds the device up no more */
  int stalled;             /* its stall time passed: its sequences count it in their stalled */
  uint64_t real;
  lp_theap_node_t stall;   /* in d->stalls while in flight and not yet stalled */
  disp_batch_t *dnext, *dprev; /* its device's batches, in send order; free list */
  disp_seq_t **seqs;       /* owned array of borrowed sequences (each holds a job ref) */
  uint32_t n, cap;
};

typedef struct disp_dev_s {
  disp_batch_t *first, *last; /* in flight on it, in send order */
  uint32_t n;                 /* how many */
  uint32_t lost;              /* of which presumed lost */
  uint32_t suspect;           /* stalls since it last answered: at 2 it is taken as hung */
  uint64_t probe_at;          /* hung: when it may have one batch to see if it is back */
  double util;                /* share of recent sends that found it busy */
} disp_dev_t;

typedef struct disp_backend_s {
  int up;
  int core_down;              /* marked down here from its batches: probed with one batch
                                 at probe_at (then probing), up again when it succeeds */
  int probing;
  uint32_t downs;             /* failed probes in a row: the interval doubles */
  uint64_t probe_at;
  uint32_t fails_in_row;      /* failures a poisoned sequence does not explain */
  uint32_t errors_in_row;     /* all failures */
  lp_shape_state_t state[LP_BUCKET_MAX_SHAPES];
  lp_devclock_t clock;        /* learned costs and lead; dev[].batches/free_ns mirrored */
  disp_dev_t dev[LP_CLOCK_MAX_DEVICES];
} disp_backend_t;

/* A u64 -> pointer map, open addressing, linear probing, backward-shift delete. */
typedef struct disp_map_s {
  uint64_t *keys;          /* 0 = empty */
  void **vals;
  size_t cap, n;           /* cap a power of two */
} disp_map_t;

typedef struct disp_act_s {
  lp_disp_action_t a;
  size_t items_at;         /* SEND: offset of its items in d->items */
} disp_act_t;

struct lp_disp_s {
  lp_disp_config_t cfg;
  uint32_t max_copies, unhealthy_after, max_queued, max_window;
  uint64_t bound_ns;
  lp_bucket_set_t shapes;         /* the model's union over backends (states) */
  disp_backend_t be[LP_DISP_MAX_BACKENDS];
  lp_queue_t queue;               /* queued sequences: priority, then age */
  lp_theap_t timers, deadlines, retries, stalls;
  disp_map_t jobs, batches;
  uint64_t next_batch_id, next_seqno;
  uint32_t next_group, decision;
  uint32_t rr;                    /* the backend looked at first next time */
  int fair_pick;                  /* the last window had a large request's oldest past its
                                     age bound and another request's: they take turns */
  int fair_turn;                  /* ... the other request's turn next */
  int draining;
  uint64_t now, wake;
  size_t live_jobs;               /* admitted, not answered */
  uint64_t live_tokens;
  lp_disp_stats_t st;
  /* actions out, and the SEND items they point into (owned) */
  disp_act_t *acts;
  size_t nacts, acts_head, acts_cap;
  lp_disp_item_t *items;
  size_t nitems, items_cap;
  /* decision scratch (owned), grown to the window */
  lp_packer_t *packer;
  disp_seq_t **win;
  uint32_t *lens;
  lp_place_t *trial, *best;
  uint64_t *keys;
  size_t win_cap;
  lp_disp_item_t *sitems;
  size_t sitems_cap;
  disp_batch_t *spare;            /* finished batches kept for reuse */
  size_t nspare;
  disp_job_t *job_spare;          /* freed one-sequence jobs kept for reuse (a bounded
                                     pool: an allocation less per request) */
  size_t njob_spare;
  int idle_work;                  /* at the end of the last event a device that could run
                                     a waiting sequence was idle (lp__disp_idle_with_work) */
  uint64_t idle_work_at;          /* ... since then: the time counts into st.idle_with_work_ns */
};

/* dispatch-state.c: the bottom layer, calling neither file above it */
/* d's derived tunables (copies, health, queue depth, window, request bound)
 * from d->cfg: at creation and after a reload. */
void lp__disp_derive(lp_disp_t *d);
/* Backend slot b up, with devices devices, its shapes as configured, its
 * clock seeded. */
void lp__disp_backend_init(lp_disp_t *d, uint32_t b, uint32_t devices);
/* The time past its send at which a batch expected to take span is presumed
 * stalled. */
uint64_t lp__disp_stall_wait(const lp_disp_t *d, uint64_t span);
int lp__disp_push(lp_disp_t *d, const lp_disp_action_t *a, const lp_disp_item_t *items, size_t n);
uint64_t lp__disp_cost(const lp_disp_t *d, uint32_t b, int shape);
int lp__disp_clock_knows(const lp_disp_t *d, uint32_t b);
uint64_t lp__disp_prior(const lp_disp_t *d, uint32_t b, int shape);
void lp__disp_seq_leave_backoff(lp_disp_t *d, disp_seq_t *s);
void lp__disp_unqueue(lp_disp_t *d, disp_seq_t *s, int state);
disp_batch_t *lp__disp_batch_get(lp_disp_t *d, size_t n);
void lp__disp_batch_put(lp_disp_t *d, disp_batch_t *bt);
void lp__disp_batch_destroy(disp_batch_t *bt);
void *lp__disp_map_get(const disp_map_t *m, uint64_t key);
int lp__disp_map_put(disp_map_t *m, uint64_t key, void *val);
void lp__disp_map_del(disp_map_t *m, uint64_t key);

/* dispatch-check.c: 1 when a device of a healthy backend that runs nothing
 * live (and is no hung device before its probe time) could take a queued
 * sequence now; *backend and *device (may be NULL) name it. */
int lp__disp_idle_with_work(const lp_disp_t *d, uint64_t now, uint32_t *backend, uint32_t *device);

/* dispatch-plan.c: sends what may leave now and sets d->wake's share of it. */
int lp__disp_schedule(lp_disp_t *d, uint64_t now, uint64_t *wake);

#endif
