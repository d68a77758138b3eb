/* The dispatch state machine: jobs in and answers out, a batch's result turned
 * into outputs, retries, bisection and hedges, the device clocks taught by every
 * answer, backend health, and the time bound of every job. When batches leave
 * and what they hold is in dispatch-plan.c, the records both use in
 * dispatch-state.c. No I/O, no clock: time is passed in. */
#include "dispatch-internal.h"

#include "internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* free re-sends (bisection, missing shape) one sequence may have: a batch is
 * bisected at most log2(its size) times, and lanes x segments is far below 2^16 */
#define MAX_FREE_SENDS 16
/* how far from a level's head a retried sequence's place is searched for */
#define REQUEUE_SEARCH 256
/* first interval between probe batches to a backend marked down here ... */
#define PROBE_NS (200 * MS)
/* ... doubling with each time it went down, up to 2^5 times (6.4 s): a backend
 * back after a restart is found within seconds */
#define PROBE_DOUBLINGS_MAX 5
/* a hung device's probe interval when no stall_min is configured, doubling
 * with each stall past DISP_SUSPECT_STALLS up to 2^4 times */
#define DEVICE_PROBE_MIN_NS (10 * MS)
#define DEVICE_PROBE_DOUBLINGS_MAX 4
/* a sequence whose copies are spent and all stalled is given up this many of
 * its last copy's stall waits after that copy's send: one more wait for a slow
 * answer, then a 504 (it waited half the transfer timeout before, 15 s, while
 * the client held its connection, issue 33) */
#define STRANDED_WAITS 2
/* ... and no sooner than this after it (a loaded host answers late: with one
 * stall wait alone, a debug build under the soak's load gave up answers that
 * came; 1 s keeps the answer well inside a client's patience) */
#define STRANDED_MIN_NS (1000 * MS)

/* ---- names ---- */

static const struct {
  int http;
  const char *code, *msg;
} status_info[LP_DISP_ST_COUNT] = {
  [LP_DISP_ST_OK] = {200, "", ""},
  [LP_DISP_ST_DEADLINE] = {504, "deadline_exceeded", "the deadline passed before an answer"},
  [LP_DISP_ST_BOUND] = {504, "request_bound_exceeded", "no answer within the proxy's bound"},
  [LP_DISP_ST_BACKEND_ERROR] = {502, "backend_error", "the backend failed the batch"},
  [LP_DISP_ST_BACKEND_TIMEOUT] = {504, "backend_timeout", "the backend did not answer in time"},
  [LP_DISP_ST_BAD_ANSWER] = {502, "bad_backend_answer", "the backend answered a malformed batch"},
  [LP_DISP_ST_NO_SHAPE] = {503, "no_shape_available",
                           "no backend has a shape that holds this request's sequences any more"},
  [LP_DISP_ST_NO_BACKEND] = {503, "no_healthy_backend", "no backend of this model is healthy"},
  [LP_DISP_ST_SHUTDOWN] = {503, "shutting_down", "the proxy is shutting down"},
  [LP_DISP_ST_NOMEM] = {503, "out_of_memory", "proxy out of memory"},
  [LP_DISP_ST_SHAPE_COMPILING] = {503, "shape_compiling",
                                  "only a shape still compiling can hold this sequence"},
};

int lp_disp_status_http(lp_disp_status_t s) { return s < LP_DISP_ST_COUNT ? status_info[s].http : 500; }

const char *lp_disp_status_code(lp_disp_status_t s) {
  return s < LP_DISP_ST_COUNT ? status_info[s].code : "internal";
}

const char *lp_disp_outcome_name(lp_disp_outcome_t o) {
  static const char *const names[LP_DISP_OUTCOME_COUNT] = {"ok", "5xx", "4xx", "shape_missing", "timeout",
                                                           "reset", "garbled", "abandoned", "unsent"};
  return o < LP_DISP_OUTCOME_COUNT ? names[o] : "?";
}

int lp_disp_reject_status(int rc, const char **code) {
  const char *c;
  int http;
  switch (rc) {
    case -EINVAL: http = 400; c = "bad_request"; break;
    case -EEXIST: http = 400; c = "duplicate_id"; break;
    case -EMSGSIZE: http = 413; c = "sequence_too_long"; break;
    case -ENODEV: http = 503; c = "no_shape_available"; break;
    case -EHOSTDOWN: http = 503; c = "no_healthy_backend"; break;
    case -ENOBUFS: http = 429; c = "queue_full"; break;
    case -ETIME: http = 504; c = "deadline_exceeded"; break;
    case -ENOMEM: http = 503; c = "out_of_memory"; break;
    default: http = 500; c = "internal"; break;
  }
  if (code) *code = c;
  return http;
}

/* ---- configuration ---- */

void lp_disp_config_default(lp_disp_config_t *c) {
  memset(c, 0, sizeof(*c));
  lp_bucket_set_init(&c->shapes);
  c->nbackends = 1;
  c->packer = LP_ALGO_BFD;
  c->max_wait_ns = 5 * MS;
  c->high_util = 0.85;
  c->max_copies = DISP_DEFAULT_MAX_COPIES;
  c->stall_factor = 3.0;
  c->stall_min_ns = 50 * MS;
  c->retry_backoff_ns = 10 * MS;
  c->backend_timeout_ns = 30000 * MS;
  c->unhealthy_after = DISP_DEFAULT_UNHEALTHY_AFTER;
}

/* ---- life cycle ---- */

lp_disp_t *lp_disp_new(const lp_disp_config_t *cfg) {
  if (cfg == NULL || cfg->shapes.count == 0 || cfg->nbackends == 0 ||
      cfg->nbackends > LP_DISP_MAX_BACKENDS || cfg->shapes.count > LP_BUCKET_MAX_SHAPES ||
      (unsigned)cfg->packer >= LP_ALGO_COUNT)
    return NULL;
  lp_disp_t *d = calloc(1, sizeof(*d));
  if (d == NULL) return NULL;
  d->cfg = *cfg;
  d->packer = lp_packer_new();
  if (d->packer == NULL) {
    free(d);
    return NULL;
  }
  lp__disp_derive(d);
  d->shapes = cfg->shapes;
  for (uint32_t b = 0; b < cfg->nbackends; b++) lp__disp_backend_init(d, b, cfg->devices[b] ? cfg->devices[b] : 1);
  lp_queue_init(&d->queue);
  lp_theap_init(&d->timers);
  lp_theap_init(&d->deadlines);
  lp_theap_init(&d->retries);
  lp_theap_init(&d->stalls);
  d->wake = UINT64_MAX;
  return d;
}


void lp_disp_free(lp_disp_t *d) {
  if (d == NULL) return;
  /* the heaps first: freeing one touches its nodes, which live in jobs and batches */
  lp_theap_free(&d->timers); lp_theap_free(&d->deadlines); lp_theap_free(&d->retries);
  lp_theap_free(&d->stalls);
  /* a job goes with its last reference: live jobs nothing refers to now, the
   * rest (live or answered) with the last in-flight batch holding them */
  for (size_t i = 0; i < d->jobs.cap; i++) {
    disp_job_t *j = d->jobs.keys[i] ? d->jobs.vals[i] : NULL;
    if (j) j->answered = 1;
    if (j && j->refs == 0) free(j);
  }
  for (size_t i = 0; i < d->batches.cap; i++) {
    if (!d->batches.keys[i]) continue;
    disp_batch_t *bt = d->batches.vals[i];
    for (uint32_t k = 0; k < bt->n; k++) {
      disp_job_t *j = bt->seqs[k]->job;
      if (--j->refs == 0) free(j);
    }
    lp__disp_batch_destroy(bt);
  }
  while (d->job_spare) {
    disp_job_t *j = d->job_spare;
    d->job_spare = j->free_next;
    free(j);
  }
  while (d->spare) {
    disp_batch_t *b = d->spare;
    d->spare = b->dnext;
    lp__disp_batch_destroy(b);
  }
  free(d->jobs.keys); free(d->jobs.vals); free(d->batches.keys); free(d->batches.vals);
  lp_queue_free(&d->queue);
  free(d->acts); free(d->items);
  lp_packer_free(d->packer);
  free(d->win); free(d->lens); free(d->trial); free(d->best); free(d->keys); free(d->sitems);
  free(d);
}

/* ---- actions ---- */

int lp_disp_next(lp_disp_t *d, lp_disp_action_t *a) {
  if (d->acts_head == d->nacts) return 0;
  disp_act_t *x = &d->acts[d->acts_head++];
  *a = x->a;
  if (a->kind == LP_DISP_ACT_SEND) a->send.items = d->items + x->items_at;
  return 1;
}

/* At the start of each event: what was drained is forgotten (its pointers were
 * valid until now). */
static void begin(lp_disp_t *d, uint64_t now) {
  if (d->acts_head == d->nacts) d->acts_head = d->nacts = d->nitems = 0;
  if (now > d->now) d->now = now;
  if (d->idle_work && now > d->idle_work_at) d->st.idle_with_work_ns += now - d->idle_work_at;
  d->idle_work_at = now > d->idle_work_at ? now : d->idle_work_at;
}

uint64_t lp_disp_wake_at(const lp_disp_t *d) { return d->wake; }

/* ---- jobs ---- */

/* Under AddressSanitizer no pool: a job used after its end must still be caught. */
#if defined(__SANITIZE_ADDRESS__)
#define JOB_SPARE_MAX 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define JOB_SPARE_MAX 0
#endif
#endif
#ifndef JOB_SPARE_MAX
#define JOB_SPARE_MAX 256
#endif

static void job_free_if_done(lp_disp_t *d, disp_job_t *j) {
  if (!j->answered || j->refs != 0) return;
  if (j->nseq == 1 && d->njob_spare < JOB_SPARE_MAX) {
    j->free_next = d->job_spare;
    d->job_spare = j;
    d->njob_spare++;
    return;
  }
  free(j);
}

/* A zeroed job of nseq sequences, from the pool when it has one. */
static disp_job_t *job_alloc(lp_disp_t *d, uint32_t nseq) {
  if (nseq == 1 && d->job_spare) {
    disp_job_t *j = d->job_spare;
    d->job_spare = j->free_next;
    d->njob_spare--;
    memset(j, 0, sizeof(*j) + sizeof(disp_seq_t));
    return j;
  }
  return calloc(1, sizeof(disp_job_t) + nseq * sizeof(disp_seq_t));
}



static int seq_enqueue(lp_disp_t *d, disp_seq_t *s, int requeue) {
  disp_job_t *j = s->job;
  int rc = requeue ? lp_queue_requeue(&d->queue, &s->q, REQUEUE_SEARCH) : lp_queue_push(&d->queue, &s->q);
  if (rc) return rc;
  s->state = SEQ_QUEUED;
  d->st.queued_seqs++;
  d->st.queued_tokens += s->len;
  if (j->queued++ == 0 && j->deadline_ns && lp_theap_set(&d->deadlines, &j->dl, j->deadline_ns)) {
    /* without the heap entry the deadline still holds through the job timer */
  }
  return 0;
}

/* The job's one answer. Its queued sequences are dropped; in-flight copies finish
 * and are ignored. */
/* The job is over for the queue (answered or cancelled): its waiting sequences
 * leave, its timers and its place among the live jobs go. */
static void job_end(lp_disp_t *d, disp_job_t *j) {
  for (uint32_t i = 0; i < j->nseq; i++) {
    disp_seq_t *s = &j->seqs[i];
    if (s->state == SEQ_QUEUED || s->state == SEQ_BACKOFF) lp__disp_unqueue(d, s, SEQ_DONE);
  }
  j->answered = 1;
  lp_theap_remove(&d->timers, &j->timer);
  lp_theap_remove(&d->deadlines, &j->dl);
  lp__disp_map_del(&d->jobs, j->id);
  d->live_jobs--;
  d->live_tokens -= j->tokens;
}

static void job_answer(lp_disp_t *d, disp_job_t *j, lp_disp_status_t st) {
  if (j->answered) return;
  job_end(d, j);
  if (st == LP_DISP_ST_OK) d->st.answered_ok++;
  else d->st.answered_err++;
  lp_disp_action_t a = {.kind = LP_DISP_ACT_ANSWER};
  a.answer.job_id = j->id;
  a.answer.status = st;
  a.answer.http_status = status_info[st].http;
  a.answer.code = status_info[st].code;
  a.answer.message = status_info[st].msg;
  a.answer.admitted_ns = j->admitted_ns;
  /* an answer that cannot be queued is lost: the actions array only grows, and
   * the caller's own bound answers the job; nothing else can be done here */
  (void)lp__disp_push(d, &a, NULL, 0);
  job_free_if_done(d, j);
}

/* Fails every unanswered job that has a sequence waiting (queued or in backoff). */
static void fail_waiting(lp_disp_t *d, lp_disp_status_t st, uint32_t min_len) {
  for (size_t i = 0; i < d->jobs.cap;) {
    disp_job_t *j = d->jobs.keys[i] ? d->jobs.vals[i] : NULL;
    int hit = 0;
    for (uint32_t k = 0; j && k < j->nseq && !hit; k++)
      hit = (j->seqs[k].state == SEQ_QUEUED || j->seqs[k].state == SEQ_BACKOFF) && j->seqs[k].len >= min_len;
    if (hit) job_answer(d, j, st); /* deletes slot i: another entry may move into it */
    else i++;
  }
}

static int any_up(const lp_disp_t *d) {
  for (uint32_t b = 0; b < d->cfg.nbackends; b++)
    if (d->be[b].up) return 1;
  return 0;
}

/* The model's shape states: the best any backend has. */
static void union_shapes(lp_disp_t *d) {
  for (size_t k = 0; k < d->shapes.count; k++) {
    lp_shape_state_t best = LP_SHAPE_UNAVAILABLE;
    for (uint32_t b = 0; b < d->cfg.nbackends; b++) {
      lp_shape_state_t s = d->be[b].state[k];
      if (s == LP_SHAPE_COMPILED || (s == LP_SHAPE_COMPILING && best == LP_SHAPE_UNAVAILABLE)) best = s;
    }
    d->shapes.shapes[k].state = best;
  }
}

static void time_sent_untaught(lp_disp_t *d, size_t from, uint64_t now);

/* Ends every event: sends what may leave, then sets the wake time. */
static void finish(lp_disp_t *d, uint64_t now) {
  uint64_t wake = UINT64_MAX;
  size_t sent_from = d->nacts;
  if (lp__disp_schedule(d, now, &wake) == -ENOMEM) {
    /* the scratch could not grow: the queue waits for the job timers */
  }
  time_sent_untaught(d, sent_from, now);
  lp_theap_node_t *t;
  if ((t = lp_theap_top(&d->timers)) && t->at < wake) wake = t->at;
  if ((t = lp_theap_top(&d->retries)) && t->at < wake) wake = t->at;
  if ((t = lp_theap_top(&d->stalls)) && t->at < wake) wake = t->at;
  d->wake = wake != UINT64_MAX && wake < now ? now : wake;
  d->idle_work = lp__disp_idle_with_work(d, now, NULL, NULL);
}

/* The earliest a job's longest sequence can be answered, from now: the wait for
 * a device, the lead time and the cheapest shape that holds it, over healthy
 * backends; UINT64_MAX when no clock knows. */
static uint64_t earliest_answer(const lp_disp_t *d, uint32_t longest, uint64_t now) {
  uint64_t best = UINT64_MAX;
  for (uint32_t b = 0; b < d->cfg.nbackends; b++) {
    const disp_backend_t *be = &d->be[b];
    if (!be->up) continue;
    uint64_t free_at = lp_devclock_next_free(&be->clock);
    uint64_t wait = free_at != UINT64_MAX && free_at > now ? free_at - now : 0;
    for (size_t k = 0; k < d->shapes.count; k++) {
      uint64_t c = lp_devclock_cost(&be->clock, (int)k);
      if (be->state[k] != LP_SHAPE_COMPILED || d->shapes.shapes[k].bucket < longest || !c) continue;
      c += wait + lp_devclock_lead(&be->clock);
      if (c < best) best = c;
    }
  }
  return best;
}

/* The longest sequence a compiled shape (on any backend) holds now. */
static uint32_t compiled_max(const lp_disp_t *d) {
  uint32_t m = 0;
  for (size_t k = 0; k < d->shapes.count; k++)
    if (d->shapes.shapes[k].state == LP_SHAPE_COMPILED && d->shapes.shapes[k].bucket > m)
      m = d->shapes.shapes[k].bucket;
  return m;
}

/* When a job must be looked at: its deadline, its bound, or, while only a shape
 * still compiling could hold one of its sequences, backend_timeout after its
 * admission (a compile that takes longer is not waited for). */
static uint64_t next_check(const lp_disp_t *d, const disp_job_t *j) {
  uint64_t at = j->deadline_ns && j->deadline_ns < j->bound_ns ? j->deadline_ns : j->bound_ns;
  uint64_t patience = j->admitted_ns + d->cfg.backend_timeout_ns;
  uint32_t m = compiled_max(d);
  for (uint32_t i = 0; i < j->nseq && patience < at; i++)
    if (j->seqs[i].state != SEQ_DONE && j->seqs[i].len > m) at = patience;
  return at;
}

int lp_disp_admit(lp_disp_t *d, uint64_t job_id, uint32_t nseq, const uint32_t *lens, int priority,
                  uint64_t deadline_ns, uint64_t now) {
  begin(d, now);
  int rc = 0;
  uint32_t longest = 0;
  uint64_t tokens = 0;
  if (job_id == 0 || nseq == 0 || lens == NULL) rc = -EINVAL;
  for (uint32_t i = 0; !rc && i < nseq; i++) {
    if (lens[i] == 0) rc = -EINVAL;
    if (lens[i] > longest) longest = lens[i];
    tokens += lens[i];
  }
  if (!rc && lp__disp_map_get(&d->jobs, job_id)) rc = -EEXIST;
  uint32_t max_len = lp_bucket_set_max_len(&d->shapes);
  if (!rc && max_len == 0) rc = -ENODEV;
  if (!rc && longest > max_len) rc = -EMSGSIZE;
  if (!rc && !any_up(d)) rc = -EHOSTDOWN;
  if (!rc && ((d->cfg.max_queue_jobs && d->live_jobs + 1 > d->cfg.max_queue_jobs) ||
              (d->cfg.max_queue_tokens && d->live_tokens + tokens > d->cfg.max_queue_tokens)))
    rc = -ENOBUFS;
  if (!rc && deadline_ns) {
    uint64_t e = earliest_answer(d, longest, now);
    if (deadline_ns <= now || (e != UINT64_MAX && now + e > deadline_ns)) rc = -ETIME;
  }
  disp_job_t *j = NULL;
  if (!rc) {
    j = job_alloc(d, (uint32_t)nseq);
    if (!j || lp__disp_map_put(&d->jobs, job_id, j)) {
      free(j);
      rc = -ENOMEM;
    }
  }
  if (rc) {
    d->st.rejected++;
    return rc;
  }
  j->id = job_id;
  j->priority = priority;
  j->deadline_ns = deadline_ns;
  j->admitted_ns = now;
  j->bound_ns = now + d->bound_ns;
  j->nseq = j->unresolved = nseq;
  j->tokens = tokens;
  lp_theap_node_init(&j->timer);
  lp_theap_node_init(&j->dl);
  for (uint32_t i = 0; i < nseq; i++) {
    disp_seq_t *s = &j->seqs[i];
    s->job = j;
    s->idx = i;
    s->len = lens[i];
    s->enq_ns = now;
    s->q.priority = priority;
    s->q.seqno = ++d->next_seqno;
    lp_theap_node_init(&s->retry);
  }
  int bad = lp_theap_set(&d->timers, &j->timer, next_check(d, j));
  for (uint32_t i = 0; !bad && i < nseq; i++) bad = seq_enqueue(d, &j->seqs[i], 0);
  d->live_jobs++;
  d->live_tokens += tokens;
  d->st.admitted++;
  if (bad) {
    /* admitted, then failed at once: it still gets its one answer */
    job_answer(d, j, LP_DISP_ST_NOMEM);
  }
  finish(d, now);
  return 0;
}

int lp_disp_cancel(lp_disp_t *d, uint64_t job_id, uint64_t now) {
  begin(d, now);
  disp_job_t *j = lp__disp_map_get(&d->jobs, job_id);
  if (!j) return -ENOENT;
  job_end(d, j);
  d->st.cancelled++;
  job_free_if_done(d, j);
  finish(d, now);
  return 0;
}

/* ---- batches ---- */



/* The device time of a shape on backend b to be late against: its own
 * clock's once that knows a time, else the slowest another backend of the
 * model has learned for it (the same compiled shapes); 0 while no clock knows
 * one. */
static uint64_t stall_cost(const lp_disp_t *d, uint32_t b, int shape) {
  if (lp__disp_clock_knows(d, b)) return lp__disp_cost(d, b, shape);
  uint64_t worst = 0;
  for (uint32_t o = 0; o < d->cfg.nbackends; o++)
    if (o != b && lp__disp_clock_knows(d, o) && lp__disp_cost(d, o, shape) > worst) worst = lp__disp_cost(d, o, shape);
  return worst;
}

/* When the first batch holding a device could have started: on arrival, or
 * when the one ahead of it ended while holding the device, or, behind one
 * that never did (now presumed lost), when that one was expected to end at its
 * send. Never later because time passed. */
static uint64_t anchored_start(const disp_batch_t *x, uint64_t lead) {
  uint64_t from = x->sent_ns + lead;
  if (x->ahead_ns) return x->ahead_ns > from ? x->ahead_ns : from;
  return x->start_ns > from ? x->start_ns : from;
}

/* The expected answers of the batches on device k of backend b that are not
 * presumed lost, in order from now: each runs after the one ahead of it, or
 * once it has arrived. A lost batch (stalled, or overtaken) holds nothing up
 * and keeps its stall time. The clock mirrors their expected answers. Their
 * stall times count from anchored starts, not from now: a batch that never
 * answers is presumed lost at a time fixed by its send and the answers ahead
 * of it (when each event on its device, a late answer or the timeout of a lost
 * batch, moved it to now plus its time, stall_factor pushed its stall further
 * each time: a stalled batch held its device up to its 30 s transfer timeout
 * while the queue waited, issue 33). */
static void device_chain(lp_disp_t *d, uint32_t b, uint32_t k, uint64_t now) {
  disp_backend_t *be = &d->be[b];
  disp_dev_t *dv = &be->dev[k];
  uint64_t prev = now, lead = lp_devclock_lead(&be->clock), aprev = 0;
  for (disp_batch_t *x = dv->first; x; x = x->dnext) {
    /* one sent before the clock knew has no stall time yet: it gets one now
     * (a lost one from its own send), or it waits out its transfer timeout;
     * until this backend's clock knows a time, another's stands in (this one
     * learns nothing while its only batch stalls) */
    uint64_t cost = stall_cost(d, b, x->shape);
    int untimed = cost && !x->stalled && !lp_theap_contains(&x->stall) && d->cfg.stall_factor > 0;
    if (x->lost) {
      if (untimed) {
        uint64_t wait = lp__disp_stall_wait(d, lead + cost);
        (void)lp_theap_set(&d->stalls, &x->stall, x->sent_ns + wait); /* without it: no hedge */
      }
      continue;
    }
    uint64_t start = x->sent_ns + lead > prev ? x->sent_ns + lead : prev;
    uint64_t c = cost ? cost : lp__disp_cost(d, x->backend, x->shape);
    x->expect_ns = start + c;
    prev = x->expect_ns;
    uint64_t astart = aprev ? (x->sent_ns + lead > aprev ? x->sent_ns + lead : aprev) : anchored_start(x, lead);
    aprev = astart + c;
    if (cost && (lp_theap_contains(&x->stall) || untimed) && d->cfg.stall_factor > 0) {
      uint64_t wait = lp__disp_stall_wait(d, aprev - x->sent_ns);
      (void)lp_theap_set(&d->stalls, &x->stall, x->sent_ns + wait); /* re-keying never grows */
    }
  }
  lp_device_t *cd = &be->clock.dev[k];
  cd->batches = dv->n - dv->lost;
  cd->free_ns = cd->batches && lp__disp_clock_knows(d, b) ? prev : 0;
}

static int some_clock_knows(const lp_disp_t *d) {
  for (uint32_t b = 0; b < d->cfg.nbackends; b++)
    if (lp__disp_clock_knows(d, b)) return 1;
  return 0;
}

/* A batch on a backend whose own clock knows no time yet gets its stall time
 * from another backend's clock (such a backend gets no other batch while one is
 * out, so its clock would learn nothing from a stalled one before its transfer
 * timeout): those sent in this event (actions from `from` on) at once, ... */
static void time_sent_untaught(lp_disp_t *d, size_t from, uint64_t now) {
  if (d->cfg.stall_factor <= 0) return;
  int some = -1;
  for (size_t i = from; i < d->nacts; i++) {
    const lp_disp_action_t *a = &d->acts[i].a;
    if (a->kind != LP_DISP_ACT_SEND || lp__disp_clock_knows(d, a->send.backend)) continue;
    if (some < 0) some = some_clock_knows(d);
    if (!some) return;
    device_chain(d, a->send.backend, a->send.device, now);
  }
}

/* ... and those sent before any clock knew a time, when the first one learns. */
static void time_all_untaught(lp_disp_t *d, uint64_t now) {
  if (d->cfg.stall_factor <= 0) return;
  for (uint32_t b = 0; b < d->cfg.nbackends; b++) {
    if (lp__disp_clock_knows(d, b)) continue;
    for (uint32_t k = 0; k < LP_CLOCK_MAX_DEVICES; k++)
      if (d->be[b].dev[k].first) device_chain(d, b, k, now);
  }
}

/* Takes bt off its device; the batches behind it move by how early or late it
 * ended, and the one now running is expected a service time after now. */
static void device_release(lp_disp_t *d, disp_batch_t *bt, uint64_t now) {
  disp_backend_t *be = &d->be[bt->backend];
  disp_dev_t *dv = &be->dev[bt->device];
  disp_batch_t *next = bt->dnext;
  /* a device runs its batches in order: those sent before this one that have
   * not answered are presumed lost (their stall time still hedges them) */
  for (disp_batch_t *x = dv->first; x != bt; x = x->dnext)
    if (!x->lost) {
      x->lost = 1;
      dv->lost++;
    }
  if (bt->dprev) bt->dprev->dnext = bt->dnext;
  else dv->first = bt->dnext;
  if (bt->dnext) bt->dnext->dprev = bt->dprev;
  else dv->last = bt->dprev;
  dv->n--;
  if (bt->lost && dv->lost) dv->lost--;
  lp_theap_remove(&d->stalls, &bt->stall);
  if (next) next->prev_answer_ns = now;
  if (next && !bt->lost) next->ahead_ns = now;
  device_chain(d, bt->backend, bt->device, now);
}

/* What an answer teaches the clock (errors too: a backend that answers slowly is
 * busy that long, whatever it says). */
static void learn(lp_disp_t *d, disp_batch_t *bt, const lp_disp_result_t *r, uint64_t now) {
  lp_devclock_t *c = &d->be[bt->backend].clock;
  uint64_t sent = r->sent_ns && r->sent_ns <= now ? r->sent_ns : bt->sent_ns;
  uint64_t total = now > sent ? now - sent : 0;
  uint64_t lead = lp_devclock_lead(c);
  /* it started on an idle device when nothing was ahead of it, or what was
   * ahead answered before it could have arrived */
  int alone = !bt->behind || (bt->prev_answer_ns && bt->prev_answer_ns <= sent + lead);
  if (r->device_ns) {
    lp_window_add(&c->svc[bt->shape], r->device_ns);
    if (alone) lp_window_add(&c->lead, total > r->device_ns ? total - r->device_ns : 0);
  } else if (bt->behind && bt->prev_answer_ns && sent + lead <= bt->prev_answer_ns &&
             now >= bt->prev_answer_ns) {
    /* it waited at the device and ran as soon as the one ahead ended: the gap
     * between the two answers is its service time */
    lp_window_add(&c->svc[bt->shape], now - bt->prev_answer_ns);
  } else if (alone) {
    uint64_t svc = lp_devclock_cost(c, bt->shape);
    if (svc) lp_window_add(&c->lead, total > svc ? total - svc : 0);
    else lp_window_add(&c->svc[bt->shape], total);
  }
  uint64_t busy = r->device_ns ? r->device_ns : lp_devclock_cost(c, bt->shape);
  uint64_t slots = (uint64_t)d->shapes.shapes[bt->shape].lanes * d->shapes.shapes[bt->shape].bucket;
  c->busy_ns += busy;
  c->useful_ns += slots ? (uint64_t)((double)busy * (double)bt->real / (double)slots) : 0;
}

/* When a backend marked down here gets its next probe batch. */
static void next_probe(lp_disp_t *d, disp_backend_t *be, uint64_t now) {
  uint32_t k = be->downs < PROBE_DOUBLINGS_MAX ? be->downs : PROBE_DOUBLINGS_MAX;
  be->downs++;
  be->probing = 0;
  be->probe_at = now + (PROBE_NS << k);
}

/* The core's own verdict from batch outcomes: down is only said while another
 * backend is up (with none, retries and the bounds serve better than 503s);
 * a backend down here is probed with one batch now and then. */
static void set_health(lp_disp_t *d, uint32_t b, int up, uint64_t now) {
  disp_backend_t *be = &d->be[b];
  if (be->up == up) return;
  be->up = up;
  be->fails_in_row = be->errors_in_row = 0;
  be->core_down = !up;
  be->downs = 0;
  if (!up) next_probe(d, be, now);
  lp_disp_action_t a = {.kind = LP_DISP_ACT_HEALTH};
  a.health.backend = b;
  a.health.up = up;
  (void)lp__disp_push(d, &a, NULL, 0);
}

static uint64_t backoff_ns(const lp_disp_t *d, uint32_t retries) {
  uint64_t b = d->cfg.retry_backoff_ns;
  for (uint32_t i = 0; i < retries && b < DISP_MAX_BACKOFF_NS; i++) b *= 2;
  return b < DISP_MAX_BACKOFF_NS ? b : DISP_MAX_BACKOFF_NS;
}

/* Sequence s failed in a batch and nothing else carries it: it goes back to the
 * queue (free: at once; else after its backoff, spending its budget) or its job
 * fails with st. */
static void retry_or_fail(lp_disp_t *d, disp_seq_t *s, int free_try, lp_disp_status_t st, uint64_t now) {
  disp_job_t *j = s->job;
  if (d->draining) {
    job_answer(d, j, st);
    return;
  }
  if (free_try && s->free_sends >= MAX_FREE_SENDS) free_try = 0;
  if (!free_try && s->copies >= d->max_copies) {
    job_answer(d, j, st);
    return;
  }
  uint64_t wait = free_try ? 0 : backoff_ns(d, s->retries);
  if (j->deadline_ns && j->deadline_ns <= now + wait) {
    job_answer(d, j, LP_DISP_ST_DEADLINE);
    return;
  }
  if (s->len > lp_bucket_set_max_len(&d->shapes)) {
    job_answer(d, j, LP_DISP_ST_NO_SHAPE);
    return;
  }
  s->free_next = (uint8_t)free_try;
  if (!free_try) s->retries++;
  d->st.retries++;
  if (wait == 0) {
    if (seq_enqueue(d, s, 1)) job_answer(d, j, LP_DISP_ST_NOMEM);
    return;
  }
  s->state = SEQ_BACKOFF;
  if (lp_theap_set(&d->retries, &s->retry, now + wait)) {
    s->state = SEQ_OUT;
    job_answer(d, j, LP_DISP_ST_NOMEM);
  }
}

/* A copy of it is queued or still in flight elsewhere: the failure of batch bt
 * is not its. When bt answered in time (it did not stall), copies in stalled
 * batches do not count: they are presumed lost, and waiting for them would hold
 * the request until their transfer timeout. A stalled bt's late error leaves
 * its later copies their time. */
static int carried(const disp_seq_t *s, const disp_batch_t *bt) {
  return s->state == SEQ_QUEUED || s->inflight > (bt->stalled ? 0 : s->stalled);
}

static int seq_live(const disp_seq_t *s) { return s->state != SEQ_DONE && !s->job->answered; }

static lp_disp_status_t status_for(lp_disp_outcome_t o) {
  switch (o) {
    case LP_DISP_TIMEOUT: return LP_DISP_ST_BACKEND_TIMEOUT;
    case LP_DISP_GARBLED: return LP_DISP_ST_BAD_ANSWER;
    case LP_DISP_ABANDONED: return LP_DISP_ST_SHUTDOWN;
    default: return LP_DISP_ST_BACKEND_ERROR;
  }
}

/* A 5xx to a batch: if several of its sequences still need it, they are split in
 * two halves that may not share a batch again (each still packs with others),
 * re-sent free; one left alone to blame goes alone from now on. Returns 1 when
 * the failure is explained by a sequence already under suspicion. */
static int bisect(lp_disp_t *d, disp_batch_t *bt, uint64_t now) {
  int explained = 0;
  uint32_t live = 0;
  for (uint32_t i = 0; i < bt->n; i++) {
    disp_seq_t *s = bt->seqs[i];
    if (s->alone || s->group) explained = 1;
    if (seq_live(s) && !carried(s, bt)) live++;
  }
  if (live >= 2) {
    uint32_t g[2] = {++d->next_group, ++d->next_group}, k = 0;
    if (g[0] == 0 || g[1] == 0) g[0] = ++d->next_group, g[1] = ++d->next_group;
    d->st.bisections++;
    for (uint32_t i = 0; i < bt->n; i++) {
      disp_seq_t *s = bt->seqs[i];
      if (!seq_live(s) || carried(s, bt)) continue;
      s->group = g[k++ & 1];
      retry_or_fail(d, s, 1, LP_DISP_ST_BACKEND_ERROR, now);
    }
    return explained;
  }
  for (uint32_t i = 0; i < bt->n; i++) {
    disp_seq_t *s = bt->seqs[i];
    if (!seq_live(s) || carried(s, bt)) continue;
    /* failed alone: it spends its own budget; failed beside others that were
     * fine: it is the one to blame, and goes alone next time for free */
    int was_alone = bt->n == 1;
    s->alone = 1;
    s->group = 0;
    retry_or_fail(d, s, !was_alone, LP_DISP_ST_BACKEND_ERROR, now);
  }
  return explained;
}

/* Bars a shape on backend b (it said it does not have it) and fails what no
 * shape anywhere holds now. */
static void shape_gone(lp_disp_t *d, uint32_t b, int shape) {
  d->be[b].state[shape] = LP_SHAPE_UNAVAILABLE;
  union_shapes(d);
  uint32_t max_len = lp_bucket_set_max_len(&d->shapes);
  fail_waiting(d, LP_DISP_ST_NO_SHAPE, max_len + 1);
}

int lp_disp_result(lp_disp_t *d, uint64_t batch_id, const lp_disp_result_t *r, uint64_t now) {
  begin(d, now);
  disp_batch_t *bt = lp__disp_map_get(&d->batches, batch_id);
  if (!bt || r == NULL || r->outcome >= LP_DISP_OUTCOME_COUNT) return bt ? -EINVAL : -ENOENT;
  lp__disp_map_del(&d->batches, batch_id);
  d->st.inflight--;
  lp_disp_outcome_t o = r->outcome;
  disp_backend_t *be = &d->be[bt->backend];
  /* an answer says the device works; a timeout or a reset ends the wait too */
  be->dev[bt->device].suspect = 0;
  /* what the device did teaches its clock, errors included; a missing shape,
   * a timeout or a reset say nothing of it */
  int knew = lp__disp_clock_knows(d, bt->backend), knew_any = knew || some_clock_knows(d);
  if (o != LP_DISP_TIMEOUT && o != LP_DISP_RESET && o != LP_DISP_ABANDONED && o != LP_DISP_ERR_SHAPE &&
      o != LP_DISP_UNSENT)
    learn(d, bt, r, now);
  device_release(d, bt, now);
  /* the clock's first lesson: batches on its other devices get their stall times */
  if (!knew && lp__disp_clock_knows(d, bt->backend))
    for (uint32_t k = 0; k < LP_CLOCK_MAX_DEVICES; k++)
      if (k != bt->device && be->dev[k].first) device_chain(d, bt->backend, k, now);
  /* the model's first lesson: the other backends' batches too */
  if (!knew_any && lp__disp_clock_knows(d, bt->backend)) time_all_untaught(d, now);
  for (uint32_t i = 0; i < bt->n; i++) {
    bt->seqs[i]->inflight--;
    if (bt->stalled) bt->seqs[i]->stalled--;
  }

  if (o == LP_DISP_OK) {
    be->fails_in_row = be->errors_in_row = 0;
    for (uint32_t i = 0; i < bt->n; i++) {
      disp_seq_t *s = bt->seqs[i];
      if (!seq_live(s)) continue;
      lp__disp_unqueue(d, s, SEQ_DONE); /* a hedge copy still queued is dropped */
      lp_disp_action_t a = {.kind = LP_DISP_ACT_OUTPUT};
      a.output.job_id = s->job->id;
      a.output.seq = s->idx;
      a.output.batch_id = bt->id;
      a.output.sent_ns = bt->sent_ns;
      (void)lp__disp_push(d, &a, NULL, 0);
      if (--s->job->unresolved == 0) job_answer(d, s->job, LP_DISP_ST_OK);
    }
  } else if (o == LP_DISP_ERR_4XX || o == LP_DISP_ABANDONED) {
    /* refused as wrong (it answered: the backend is fine), or given up */
    if (o == LP_DISP_ERR_4XX) be->fails_in_row = be->errors_in_row = 0;
    lp_disp_status_t st = status_for(o);
    for (uint32_t i = 0; i < bt->n; i++)
      if (seq_live(bt->seqs[i]) && !carried(bt->seqs[i], bt)) job_answer(d, bt->seqs[i]->job, st);
  } else if (o == LP_DISP_ERR_SHAPE) {
    shape_gone(d, bt->backend, bt->shape);
    for (uint32_t i = 0; i < bt->n; i++)
      if (seq_live(bt->seqs[i]) && !carried(bt->seqs[i], bt))
        retry_or_fail(d, bt->seqs[i], 1, LP_DISP_ST_NO_SHAPE, now);
  } else {
    int explained = o == LP_DISP_ERR_5XX ? bisect(d, bt, now) : 0;
    if (o != LP_DISP_ERR_5XX) {
      for (uint32_t i = 0; i < bt->n; i++) {
        disp_seq_t *s = bt->seqs[i];
        if (!seq_live(s) || carried(s, bt)) continue;
        /* it may still run there: elsewhere next time, while another is up;
         * one that never got there (a backend restarting) costs it no copy */
        if (o == LP_DISP_TIMEOUT || o == LP_DISP_UNSENT) s->avoid |= 1u << bt->backend;
        retry_or_fail(d, s, o == LP_DISP_UNSENT, status_for(o), now);
      }
    }
    be->errors_in_row++;
    if (!explained) be->fails_in_row++;
    int others = 0;
    for (uint32_t o2 = 0; o2 < d->cfg.nbackends; o2++) others |= o2 != bt->backend && d->be[o2].up;
    if (be->up && others &&
        (be->fails_in_row >= d->unhealthy_after || be->errors_in_row >= 4 * d->unhealthy_after))
      set_health(d, bt->backend, 0, now);
  }
  /* a probe of a backend down here: it is back when it answers */
  if (!be->up && be->core_down && be->probing) {
    if (o == LP_DISP_OK || o == LP_DISP_ERR_4XX) set_health(d, bt->backend, 1, now);
    else next_probe(d, be, now);
  }
  for (uint32_t i = 0; i < bt->n; i++) {
    disp_job_t *j = bt->seqs[i]->job;
    j->refs--;
    job_free_if_done(d, j);
  }
  lp__disp_batch_put(d, bt);
  finish(d, now);
  return 0;
}

/* ---- health and shapes ---- */

int lp_disp_backend_health(lp_disp_t *d, uint32_t b, int up, uint64_t now) {
  if (b >= d->cfg.nbackends) return -EINVAL;
  begin(d, now);
  up = up != 0;
  disp_backend_t *be = &d->be[b];
  /* the caller's probe decides: no probe batches of ours after it */
  be->core_down = be->probing = 0;
  if (be->up != up) {
    be->up = up;
    be->fails_in_row = be->errors_in_row = 0;
    if (!any_up(d)) fail_waiting(d, LP_DISP_ST_NO_BACKEND, 0);
  }
  finish(d, now);
  return 0;
}

int lp_disp_backend_shapes(lp_disp_t *d, uint32_t b, const lp_shape_state_t *states, size_t n,
                           uint64_t now) {
  if (b >= d->cfg.nbackends || n > d->shapes.count || (n && !states)) return -EINVAL;
  begin(d, now);
  for (size_t k = 0; k < n; k++) d->be[b].state[k] = states[k];
  union_shapes(d);
  fail_waiting(d, LP_DISP_ST_NO_SHAPE, lp_bucket_set_max_len(&d->shapes) + 1);
  finish(d, now);
  return 0;
}

int lp_disp_add_backend(lp_disp_t *d, uint32_t devices, uint64_t now) {
  if (d->cfg.nbackends >= LP_DISP_MAX_BACKENDS || devices == 0 || devices > LP_CLOCK_MAX_DEVICES)
    return -EINVAL;
  begin(d, now);
  uint32_t b = d->cfg.nbackends++;
  d->cfg.devices[b] = devices;
  lp__disp_backend_init(d, b, devices);
  finish(d, now);
  return (int)b;
}

int lp_disp_backend_devices(lp_disp_t *d, uint32_t b, uint32_t devices, uint64_t now) {
  if (b >= d->cfg.nbackends || devices == 0 || devices > LP_CLOCK_MAX_DEVICES) return -EINVAL;
  begin(d, now);
  /* devices dropped keep their batches until they answer; none is sent to them */
  lp_devclock_set_devices(&d->be[b].clock, devices);
  finish(d, now);
  return 0;
}

/* ---- time ---- */

/* A stalled batch: its sequences are queued again as copies while their budget
 * lasts. The batch is presumed lost and no longer holds its device up; but a
 * device that stalls twice without answering in between is taken as hung and
 * gets one batch now and then (stall_min, doubling) until it answers. */
/* A sequence whose copies are spent and whose every copy out is in a stalled
 * batch: no hedge may carry it. */
static int stranded(const lp_disp_t *d, const disp_seq_t *s) {
  return seq_live(s) && s->state == SEQ_OUT && s->copies >= d->max_copies && s->inflight <= s->stalled;
}

static void stall(lp_disp_t *d, disp_batch_t *bt, uint64_t now) {
  disp_backend_t *be = &d->be[bt->backend];
  disp_dev_t *dv = &be->dev[bt->device];
  if (bt->stalled) {
    /* one more stall wait (at most half its transfer timeout): the stranded
     * are given up, long before the transfer timeout (issue 33) */
    lp_theap_remove(&d->stalls, &bt->stall);
    for (uint32_t i = 0; i < bt->n; i++)
      if (stranded(d, bt->seqs[i])) job_answer(d, bt->seqs[i]->job, LP_DISP_ST_BACKEND_TIMEOUT);
    return;
  }
  d->st.stalls++;
  /* a shape nothing was known of took at least this long: a lower bound the
   * clock times the next batches by (else the device waits for an answer
   * that may come only with the transfer timeout) */
  int knew = lp__disp_clock_knows(d, bt->backend);
  if (lp_devclock_cost(&be->clock, bt->shape) == 0) {
    uint64_t lead = lp_devclock_lead(&be->clock), t = now > bt->sent_ns + lead ? now - bt->sent_ns - lead : 1;
    lp_devclock_seed(&be->clock, bt->shape, t);
  }
  if (!bt->lost) {
    bt->lost = 1;
    dv->lost++;
  }
  /* hung: probed with one batch after a backoff that doubles with each stall */
  if (++dv->suspect >= DISP_SUSPECT_STALLS) {
    uint32_t k = dv->suspect - DISP_SUSPECT_STALLS;
    if (k > DEVICE_PROBE_DOUBLINGS_MAX) k = DEVICE_PROBE_DOUBLINGS_MAX;
    dv->probe_at = now + ((d->cfg.stall_min_ns ? d->cfg.stall_min_ns : DEVICE_PROBE_MIN_NS) << k);
  }
  lp_theap_remove(&d->stalls, &bt->stall);
  bt->stalled = 1;
  for (uint32_t i = 0; i < bt->n; i++) bt->seqs[i]->stalled++;
  for (uint32_t i = 0; i < bt->n; i++) {
    disp_seq_t *s = bt->seqs[i];
    if (!seq_live(s) || s->state != SEQ_OUT || s->copies >= d->max_copies) continue;
    s->free_next = 0;
    if (seq_enqueue(d, s, 1) == 0) d->st.hedges++;
  }
  /* its sequences that no copy can carry now (their copies are spent) wait
   * for it as long again as it has run, at least STRANDED_MIN_NS from its send
   * (a slow answer by then still serves them), at most half its transfer
   * timeout, and are then
   * answered 504: a sequence whose every copy failed or stalled is answered
   * long before the transfer timeout */
  for (uint32_t i = 0; i < bt->n; i++)
    if (stranded(d, bt->seqs[i])) {
      uint64_t ran = now > bt->sent_ns ? now - bt->sent_ns : 0, half = d->cfg.backend_timeout_ns / 2;
      uint64_t wait = STRANDED_WAITS * ran > STRANDED_MIN_NS ? STRANDED_WAITS * ran : STRANDED_MIN_NS;
      uint64_t at = bt->sent_ns + (wait < half ? wait : half);
      (void)lp_theap_set(&d->stalls, &bt->stall, at > now ? at : now); /* without it: the timeout */
      break;
    }
  for (uint32_t k = 0; k < LP_CLOCK_MAX_DEVICES; k++)
    if (k == bt->device || (!knew && be->dev[k].first)) device_chain(d, bt->backend, k, now);
}

void lp_disp_tick(lp_disp_t *d, uint64_t now) {
  begin(d, now);
  lp_theap_node_t *t;
  while ((t = lp_theap_top(&d->timers)) && t->at <= now) {
    disp_job_t *j = container_of(t, disp_job_t, timer);
    uint64_t at = next_check(d, j);
    if (j->deadline_ns && j->deadline_ns <= now) job_answer(d, j, LP_DISP_ST_DEADLINE);
    else if (j->bound_ns <= now) job_answer(d, j, LP_DISP_ST_BOUND);
    else if (at <= now) job_answer(d, j, LP_DISP_ST_SHAPE_COMPILING);
    else (void)lp_theap_set(&d->timers, t, at); /* re-keying never grows */
  }
  while ((t = lp_theap_top(&d->retries)) && t->at <= now) {
    disp_seq_t *s = container_of(t, disp_seq_t, retry);
    lp_theap_remove(&d->retries, t);
    s->state = SEQ_OUT;
    if (s->len > lp_bucket_set_max_len(&d->shapes)) job_answer(d, s->job, LP_DISP_ST_NO_SHAPE);
    else if (!any_up(d)) job_answer(d, s->job, LP_DISP_ST_NO_BACKEND);
    else if (seq_enqueue(d, s, 1)) job_answer(d, s->job, LP_DISP_ST_NOMEM);
  }
  while ((t = lp_theap_top(&d->stalls)) && t->at <= now) stall(d, container_of(t, disp_batch_t, stall), now);
  finish(d, now);
}

void lp_disp_drain(lp_disp_t *d, uint64_t now) {
  begin(d, now);
  d->draining = 1;
  finish(d, now);
}

void lp_disp_fail_all(lp_disp_t *d, lp_disp_status_t status, uint64_t now) {
  begin(d, now);
  if (status == LP_DISP_ST_OK || status >= LP_DISP_ST_COUNT) status = LP_DISP_ST_SHUTDOWN;
  /* the ids first: answering a job deletes it from the map, whose backward
   * shift moves entries behind the scan (rescanning from the start after
   * each answer was quadratic) */
  size_t n = 0;
  uint64_t *ids = d->jobs.n ? malloc(d->jobs.n * sizeof(*ids)) : NULL;
  if (ids) {
    for (size_t i = 0; i < d->jobs.cap; i++)
      if (d->jobs.keys[i]) ids[n++] = d->jobs.keys[i];
    for (size_t i = 0; i < n; i++) {
      disp_job_t *j = lp__disp_map_get(&d->jobs, ids[i]);
      if (j) job_answer(d, j, status);
    }
    free(ids);
  }
  while (d->jobs.n) { /* out of memory for the ids: one at a time */
    for (size_t i = 0; i < d->jobs.cap; i++)
      if (d->jobs.keys[i]) {
        job_answer(d, d->jobs.vals[i], status);
        break;
      }
  }
  finish(d, now);
}

/* ---- reading ---- */

void lp_disp_stats(const lp_disp_t *d, lp_disp_stats_t *out) {
  *out = d->st;
  out->queued_jobs = d->live_jobs;
}

const lp_devclock_t *lp_disp_clock(const lp_disp_t *d, uint32_t b) {
  return b < d->cfg.nbackends ? &d->be[b].clock : NULL;
}

uint32_t lp_disp_backends(const lp_disp_t *d) { return d->cfg.nbackends; }

int lp_disp_backend_up(const lp_disp_t *d, uint32_t b) { return b < d->cfg.nbackends && d->be[b].up; }
