/* The tokenizer workers (threads lp-tok-N): text is tokenized here, never on
 * an event loop. A front hands over a job of units (one per input), goes on
 * serving, and gets the job back through its tok box (a mailbox woken by an
 * eventfd, as the fronts and the scheduler talk). Workers take a turn at a
 * time, round robin across flows (a client's connection: its jobs in
 * order): a turn is one unit, or several short ones of the same job
 * (LP_TOKPOOL_TURN_BYTES), so a request of 2,048 inputs, one long text or a
 * client's 60 pipelined requests hold one worker at a time while a one-line
 * request waits for one turn of each client ahead of it in the round, and a
 * batch of short lines costs one hand-over, not one per line. Workers are
 * woken for turns' worth of text, not per client (wakes_needed): many
 * clients' one-line requests may run one after another on one worker, a
 * turn of some 100 us each, rather than pay a wake-up each. Submit and cancel run on the fronts; the rest on the workers.
 * A finished job goes up through the callback registered at start (the
 * front's, which pushes it onto the job's front's box): nothing here reads a
 * front. */
#define _GNU_SOURCE /* SCHED_BATCH */
#include <errno.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "lanepack/log.h"
#include "lanepack/tei.h"
#include "lanepack/tokwindow.h"
#include "tokwork/tokwork.h"
#include "core/internal.h" /* lp__grow */

/* A worker's room, kept from turn to turn so that a unit allocates nothing:
 * one unit's ids (one), a turn's ids one after another (turn), /tokenize's
 * pieces (pc); all owned by the worker, given back past KEEP_IDS. */
typedef struct lp_tokworker_s {
  lp_tokpool_t *pool;
  unsigned index;
  uv_thread_t thread;
  int32_t *one, *turn;
  size_t one_cap, turn_cap;
  lp_tok_piece_t *pc;
  size_t pc_cap;
  size_t at[LP_TOKPOOL_TURN_UNITS]; /* each unit's ids' offset in turn */
} lp_tokworker_t;

/* A worker's room is kept up to this many ids (a 256 KiB buffer, some 64 KiB
 * of text): an 8 MiB text's 2 million ids are not held after its turn. */
#define KEEP_IDS (64 * 1024)

struct lp_tokpool_s {
  uv_mutex_t lock;
  uv_cond_t work;          /* a unit is waiting, or the pool stops */
  lp_tokjob_t *ring;       /* each flow's first job with units not yet taken (and each job without a
                              flow), circular by rr_next: the head's turn is next */
  size_t bytes;            /* text held by jobs not yet finished (their units' lengths) */
  size_t queued_bytes;     /* ... of units not yet taken */
  size_t queued_units;
  unsigned sleeping;       /* workers waiting on work */
  unsigned woken;          /* of them, signalled and not yet back: each takes a turn soon */
  unsigned short_running;  /* workers running a turn within LP_TOKPOOL_TURN_BYTES */
  lp_tokjob_t **flows;     /* the round's jobs that have a flow, by it (open addressing); owned */
  size_t flows_cap, nflows;
  int stopping;
  lp_tokjob_cb finished;   /* a job every unit of which is done goes up here (set at start) */
  unsigned nice;           /* tokenizer_nice: above the process's nice value, with SCHED_BATCH; 0: neither */
  int prio_warned;         /* a worker could not lower its priority: said once (atomic) */
  unsigned nthreads;
  lp_tokworker_t *workers; /* nthreads; owned */
};

/* ---- the box a front takes finished jobs from ---- */

int lp__tokbox_init(lp_tokbox_t *b, uv_loop_t *loop, lp_wake_cb cb, void *owner) {
  b->done = NULL;
  b->done_tail = &b->done;
  int rc = uv_mutex_init(&b->lock);
  if (rc) return rc;
  if ((rc = lp__wake_init(&b->wake, loop, cb, owner)) != 0) {
    uv_mutex_destroy(&b->lock);
    return rc;
  }
  b->ready = 1;
  return 0;
}

/* Any thread (a worker): one wake-up per burst as in mailbox.c. */
void lp__tokbox_push(lp_tokbox_t *b, lp_tokjob_t *job) {
  job->done_next = NULL;
  uv_mutex_lock(&b->lock);
  int was_empty = b->done == NULL;
  *b->done_tail = job;
  b->done_tail = &job->done_next;
  uv_mutex_unlock(&b->lock);
  if (was_empty) lp__wake_send(&b->wake);
}

lp_tokjob_t *lp__tokbox_take(lp_tokbox_t *b) {
  uv_mutex_lock(&b->lock);
  lp_tokjob_t *list = b->done;
  b->done = NULL;
  b->done_tail = &b->done;
  uv_mutex_unlock(&b->lock);
  return list;
}

void lp__tokbox_close(lp_tokbox_t *b) {
  if (b->ready) lp__wake_close(&b->wake, NULL);
}

void lp__tokbox_destroy(lp_tokbox_t *b) {
  if (!b->ready) return;
  for (lp_tokjob_t *j = lp__tokbox_take(b), *n; j; j = n) {
    n = j->done_next;
    lp__tokjob_free(j);
  }
  lp__wake_destroy(&b->wake);
  uv_mutex_destroy(&b->lock);
  b->ready = 0;
}

/* ---- jobs ---- */

/* The job and its units, one allocation. */
typedef struct {
  lp_tokjob_t job;
  lp_tokunit_t units[];
} job_block_t;

lp_tokjob_t *lp__tokjob_new(lp_front_t *f, const lp_tok_t *t, size_t nunits) {
  if (nunits > (SIZE_MAX - sizeof(job_block_t)) / sizeof(lp_tokunit_t)) return NULL;
  job_block_t *b = calloc(1, sizeof(*b) + nunits * sizeof(lp_tokunit_t));
  if (!b) return NULL;
  lp_tokjob_t *job = &b->job;
  job->units = b->units;
  job->front = f;
  job->tok = t;
  job->nunits = nunits;
  return job;
}

void lp__tokjob_free(lp_tokjob_t *job) {
  if (!job) return;
  for (size_t i = 0; i < job->nunits; i++) lp_buf_free(&job->units[i].json);
  for (lp_tokids_t *b = job->idblocks, *n; b; b = n) {
    n = b->next;
    free(b);
  }
  if (job->ctx_free) job->ctx_free(job->ctx);
  free(job); /* the block's start */
}

/* ---- one unit's work (a worker's) ---- */

/* lp_tok_encode (or _plain) of the whole text into the worker's room (one),
 * made large enough first for as many ids as the text has bytes (more is
 * rare: the text is tokenized twice only then). */
static long encode_all(lp_tokworker_t *w, const lp_tok_t *t, const lp_tokunit_t *u, int plain) {
  if (lp__grow((void **)&w->one, &w->one_cap, u->len + 8, sizeof(*w->one))) return -ENOMEM;
  for (int tries = 0; tries < 2; tries++) {
    long k = plain ? lp_tok_encode_plain(t, u->text, u->len, w->one, w->one_cap)
                   : lp_tok_encode(t, u->text, u->len, w->one, w->one_cap);
    if (k < 0 || (size_t)k <= w->one_cap) return k;
    if (lp__grow((void **)&w->one, &w->one_cap, (size_t)k, sizeof(*w->one))) return -ENOMEM;
  }
  return -EINVAL;
}

/* /tokenize's answer for one input: its pieces as TEI's tokens, tokenized
 * once into the worker's room (pc). */
static long pieces(lp_tokworker_t *w, const lp_tok_t *t, lp_tokunit_t *u) {
  size_t want = u->len + 8 < KEEP_IDS ? u->len + 8 : KEEP_IDS;
  if (lp__grow((void **)&w->pc, &w->pc_cap, want, sizeof(*w->pc))) return -ENOMEM;
  long n = lp_tok_pieces(t, u->text, u->len, u->special, w->pc, w->pc_cap);
  if (n > 0 && u->limit && (size_t)n > u->limit) {
    u->over = n;
    return -E2BIG;
  }
  if (n > (long)w->pc_cap) {
    if (lp__grow((void **)&w->pc, &w->pc_cap, (size_t)n, sizeof(*w->pc))) return -ENOMEM;
    if (lp_tok_pieces(t, u->text, u->len, u->special, w->pc, w->pc_cap) != n) n = -EINVAL;
  }
  lp_buf_puts(&u->json, "[");
  for (long k = 0; k < n; k++) {
    if (k) lp_buf_puts(&u->json, ",");
    const lp_tok_piece_t *p = &w->pc[k];
    const char *name = lp_tok_piece_name(t, p->id);
    int in_text = !p->special && p->begin <= p->end && p->end <= u->len;
    lp_tei_token(&u->json, p->id, in_text ? u->text + p->begin : name, in_text ? p->end - p->begin : strlen(name),
                 !in_text, p->begin, p->end);
  }
  lp_buf_puts(&u->json, "]");
  if (n >= 0 && u->json.oom) n = -ENOMEM;
  return n;
}

/* One unit: its count (or error) in u; ids (IDS, PLAIN) in the worker's
 * room (one). */
static void run_unit(lp_tokworker_t *w, lp_tokjob_t *job, lp_tokunit_t *u) {
  const lp_tok_t *t = job->tok;
  if (u->op == LP_TOKOP_CALL) {
    u->call(job);
    return;
  }
  if (!u->keep && u->limit) {
    /* refused at once when a prefix already holds more than the limit */
    long at_least = 0;
    int over = lp_tokw_over(t, u->text, u->len, u->limit, &at_least);
    if (over < 0) {
      u->n = over;
      return;
    }
    if (over) {
      u->over = at_least;
      u->over_prefix = 1;
      u->n = -E2BIG;
      return;
    }
  }
  if (u->op == LP_TOKOP_PIECES) u->n = pieces(w, t, u);
  else if (u->keep && u->op == LP_TOKOP_IDS)
    u->n = lp_tokw_fit(t, u->text, u->len, u->keep, u->left, &w->one, &w->one_cap, NULL);
  else if (u->keep) u->n = lp_tokw_plain(t, u->text, u->len, u->keep, u->left, &w->one, &w->one_cap, NULL);
  else u->n = encode_all(w, t, u, u->op == LP_TOKOP_PLAIN);
}

static int has_ids(const lp_tokunit_t *u) { return (u->op == LP_TOKOP_IDS || u->op == LP_TOKOP_PLAIN) && u->n > 0; }

/* A turn: count units of job from first, their ids gathered in the
 * worker's room (turn) and copied into one block, returned (the job's once
 * linked to it; NULL: no ids, or out of memory and those units say so). */
static lp_tokids_t *run_turn(lp_tokworker_t *w, lp_tokjob_t *job, size_t first, size_t count) {
  size_t used = 0;
  for (size_t i = 0; i < count; i++) {
    lp_tokunit_t *u = &job->units[first + i];
    run_unit(w, job, u);
    w->at[i] = used;
    if (!has_ids(u)) continue;
    if (lp__grow((void **)&w->turn, &w->turn_cap, used + (size_t)u->n, sizeof(*w->turn))) {
      u->n = -ENOMEM;
      continue;
    }
    memcpy(w->turn + used, w->one, (size_t)u->n * sizeof(*w->turn));
    used += (size_t)u->n;
  }
  lp_tokids_t *b = used ? malloc(sizeof(*b) + used * sizeof(b->ids[0])) : NULL;
  if (b) {
    b->next = NULL;
    memcpy(b->ids, w->turn, used * sizeof(b->ids[0]));
  }
  for (size_t i = 0; i < count; i++) {
    lp_tokunit_t *u = &job->units[first + i];
    if (!has_ids(u)) continue;
    if (b) u->ids = b->ids + w->at[i];
    else u->n = -ENOMEM;
  }
  return b;
}

/* The worker's room given back when a long text grew it past KEEP_IDS. */
static void trim_room(lp_tokworker_t *w) {
  if (w->one_cap > KEEP_IDS) {
    free(w->one);
    w->one = NULL;
    w->one_cap = 0;
  }
  if (w->turn_cap > KEEP_IDS) {
    free(w->turn);
    w->turn = NULL;
    w->turn_cap = 0;
  }
  if (w->pc_cap > KEEP_IDS) {
    free(w->pc);
    w->pc = NULL;
    w->pc_cap = 0;
  }
}

/* ---- the queue (under the pool's lock) ---- */

static void ring_insert(lp_tokpool_t *p, lp_tokjob_t *job) {
  if (!p->ring) {
    job->rr_next = job->rr_prev = job;
    p->ring = job;
    return;
  }
  /* last in the current round: every job queued before it has its turn first */
  job->rr_next = p->ring;
  job->rr_prev = p->ring->rr_prev;
  job->rr_prev->rr_next = job;
  p->ring->rr_prev = job;
}

static void ring_remove(lp_tokpool_t *p, lp_tokjob_t *job) {
  if (job->rr_next == job) {
    p->ring = NULL;
  } else {
    job->rr_prev->rr_next = job->rr_next;
    job->rr_next->rr_prev = job->rr_prev;
    if (p->ring == job) p->ring = job->rr_next;
  }
  job->rr_next = job->rr_prev = NULL;
}

/* On the worker itself (Linux: policy and nice are a thread's): SCHED_BATCH,
 * so that a worker woken by new text does not preempt a running loop, and
 * p->nice above the process's nice value (LP_TOKENIZER_NICE_DEFAULT says
 * why). Lowering needs no privilege; where it fails anyway (a seccomp
 * profile) the worker runs as it is, said once. */
static void lower_priority(lp_tokpool_t *p) {
  if (!p->nice) return;
  pid_t tid = (pid_t)syscall(SYS_gettid);
  struct sched_param sp = {.sched_priority = 0};
  int rc = sched_setscheduler(0, SCHED_BATCH, &sp) == 0 ? 0 : -errno; /* keeps the nice value */
  errno = 0;
  int nice = getpriority(PRIO_PROCESS, (id_t)tid);
  if (nice == -1 && errno) {
    rc = -errno;
  } else if (nice < 19) {
    nice = nice + (int)p->nice > 19 ? 19 : nice + (int)p->nice;
    if (setpriority(PRIO_PROCESS, (id_t)tid, nice) != 0) rc = -errno;
  }
  if (rc && !__atomic_exchange_n(&p->prio_warned, 1, __ATOMIC_RELAXED))
    lp_log(LP_LOG_WARN, "tokenizer workers run at the loops' priority", "\"error\": \"%s\"", strerror(-rc));
}

/* ---- flows: one place in the round per client (under the pool's lock) ---- */

/* A flow's first slot: its key mixed (keys from malloc share their low bits). */
static size_t flow_home(const void *flow, size_t mask) {
  uint64_t x = (uint64_t)(uintptr_t)flow;
  x ^= x >> 29;
  x *= 0x9E3779B97F4A7C15ull;
  return (size_t)(x >> 32) & mask;
}

/* The slot of flow's job in the round, or the empty one where it would go
 * (flows_cap > 0). */
static size_t flow_find(const lp_tokpool_t *p, const void *flow) {
  size_t mask = p->flows_cap - 1, i = flow_home(flow, mask);
  while (p->flows[i] && p->flows[i]->flow != flow) i = (i + 1) & mask;
  return i;
}

/* Room for one more flow: the table at most half full, so probes stay
 * short; 0 or -ENOMEM. */
static int flows_room(lp_tokpool_t *p) {
  if ((p->nflows + 1) * 2 <= p->flows_cap) return 0;
  size_t cap = p->flows_cap ? p->flows_cap * 2 : 64, oldcap = p->flows_cap;
  lp_tokjob_t **old = p->flows, **t = calloc(cap, sizeof(*t));
  if (!t) return -ENOMEM;
  p->flows = t;
  p->flows_cap = cap;
  for (size_t i = 0; i < oldcap; i++)
    if (old[i]) p->flows[flow_find(p, old[i]->flow)] = old[i];
  free(old);
  return 0;
}

/* flow leaves the table: the entries after its slot shift back (linear
 * probing's deletion, no tombstones). */
static void flow_forget(lp_tokpool_t *p, const void *flow) {
  size_t mask = p->flows_cap - 1, i = flow_find(p, flow);
  if (!p->flows[i]) return;
  p->flows[i] = NULL;
  p->nflows--;
  for (size_t j = (i + 1) & mask; p->flows[j]; j = (j + 1) & mask) {
    size_t k = flow_home(p->flows[j]->flow, mask);
    /* j's entry moves into the hole unless its home lies cyclically in (i, j] */
    if (i < j ? (k <= i || k > j) : (k <= i && k > j)) {
      p->flows[i] = p->flows[j];
      p->flows[j] = NULL;
      i = j;
    }
  }
}

/* A submitted job into the round: last in the current round, or behind its
 * flow's jobs when the flow has a place (no table room: a place of its own). */
static void enqueue(lp_tokpool_t *p, lp_tokjob_t *job) {
  job->flow_next = NULL;
  job->flow_tail = job;
  if (job->flow && p->nflows) {
    lp_tokjob_t *first = p->flows[flow_find(p, job->flow)];
    if (first) {
      first->flow_tail->flow_next = job;
      first->flow_tail = job;
      job->flow_tail = NULL;
      return;
    }
  }
  if (job->flow && flows_room(p) == 0) {
    p->flows[flow_find(p, job->flow)] = job;
    p->nflows++;
  } else {
    job->flow = NULL;
  }
  ring_insert(p, job);
}

/* job, its flow's place in the round, leaves it (every unit taken, or its
 * client gone): the flow's next job takes the place, or the flow leaves
 * too. Returns the job now there, or NULL. */
static lp_tokjob_t *leave_round(lp_tokpool_t *p, lp_tokjob_t *job) {
  lp_tokjob_t *next = job->flow_next;
  if (!next) {
    if (job->flow) flow_forget(p, job->flow);
    ring_remove(p, job);
    job->flow_tail = NULL;
    return NULL;
  }
  next->flow_tail = job->flow_tail;
  next->rr_next = job->rr_next == job ? next : job->rr_next;
  next->rr_prev = job->rr_prev == job ? next : job->rr_prev;
  next->rr_prev->rr_next = next;
  next->rr_next->rr_prev = next;
  if (p->ring == job) p->ring = next;
  p->flows[flow_find(p, job->flow)] = next;
  job->rr_next = job->rr_prev = job->flow_next = job->flow_tail = NULL;
  return next;
}

/* job, waiting behind its flow's place, leaves (its client gone). */
static void leave_flow(lp_tokpool_t *p, lp_tokjob_t *job) {
  lp_tokjob_t *first = p->flows[flow_find(p, job->flow)], *prev = first;
  while (prev->flow_next != job) prev = prev->flow_next;
  prev->flow_next = job->flow_next;
  if (first->flow_tail == job) first->flow_tail = prev;
  job->flow_next = NULL;
}

/* How many sleeping workers to wake for what is queued: as many as it has
 * turns' worth of text (a short queue needs one), less those already
 * coming (woken, or running a short turn: back within a turn's time), and
 * never more than sleep. Waking a worker that then finds nothing costs as
 * much as the hand-over saved. */
static unsigned wakes_needed(const lp_tokpool_t *p) {
  if (!p->queued_units) return 0;
  size_t want = (p->queued_bytes + LP_TOKPOOL_TURN_BYTES - 1) / LP_TOKPOOL_TURN_BYTES;
  if (want < 1) want = 1;
  if (want > p->queued_units) want = p->queued_units;
  if (want > p->nthreads) want = p->nthreads;
  size_t coming = (size_t)p->woken + p->short_running;
  size_t asleep = p->sleeping > p->woken ? p->sleeping - p->woken : 0;
  size_t n = want > coming ? want - coming : 0;
  return (unsigned)(n < asleep ? n : asleep);
}

static void worker_main(void *arg) {
  lp_tokworker_t *w = arg;
  lp_tokpool_t *p = w->pool;
  char name[16]; /* the kernel's limit, with its NUL */
  snprintf(name, sizeof(name), "lp-tok-%u", w->index);
  prctl(PR_SET_NAME, name, 0, 0, 0);
  lower_priority(p);
  uv_mutex_lock(&p->lock);
  for (;;) {
    while (!p->stopping && !p->ring) {
      p->sleeping++;
      uv_cond_wait(&p->work, &p->lock);
      p->sleeping--;
      if (p->woken) p->woken--; /* a spurious return too: fewer counted as coming wakes more, never fewer */
    }
    if (p->stopping) break;
    /* a turn: the head job's next unit, and those after it while short */
    lp_tokjob_t *job = p->ring;
    size_t first = job->next_unit, count = 0, bytes = 0;
    do {
      bytes += job->units[job->next_unit++].len;
      count++;
    } while (job->next_unit < job->nunits && count < LP_TOKPOOL_TURN_UNITS &&
             bytes + job->units[job->next_unit].len <= LP_TOKPOOL_TURN_BYTES);
    p->queued_bytes -= bytes;
    p->queued_units -= count;
    if (job->next_unit < job->nunits) {
      p->ring = job->rr_next; /* the next place's turn */
    } else {                  /* every unit taken: its flow's next job in its place, whose turn is over */
      lp_tokjob_t *next = leave_round(p, job);
      if (next && p->ring == next) p->ring = next->rr_next;
    }
    int is_short = bytes <= LP_TOKPOOL_TURN_BYTES;
    p->short_running += is_short;
    /* more queued than this worker and those coming take on soon */
    unsigned wake = wakes_needed(p);
    p->woken += wake;
    uv_mutex_unlock(&p->lock);
    while (wake--) uv_cond_signal(&p->work);
    lp_tokids_t *ids = run_turn(w, job, first, count);
    trim_room(w);
    uv_mutex_lock(&p->lock);
    p->short_running -= is_short;
    p->bytes -= bytes;
    if (ids) { /* another worker may be running a turn of the same job */
      ids->next = job->idblocks;
      job->idblocks = ids;
    }
    job->unfinished -= count;
    if (job->unfinished) continue;
    if (job->cancelled) {
      /* its client left while this turn ran: nobody waits for it */
      uv_mutex_unlock(&p->lock);
      lp__tokjob_free(job);
      uv_mutex_lock(&p->lock);
    } else {
      /* posted: a cancel now leaves it to the box; the push is made outside
       * the pool's lock, which the fronts take to submit and cancel: a worker
       * (below the loops' priority) put off a core while holding it would
       * hold a front up */
      job->posted = 1;
      uv_mutex_unlock(&p->lock);
      p->finished(job); /* the front's now */
      uv_mutex_lock(&p->lock);
    }
  }
  uv_mutex_unlock(&p->lock);
  free(w->one);
  free(w->turn);
  free(w->pc);
}

lp_tokpool_t *lp__tokpool_start(unsigned nthreads, unsigned nice, lp_tokjob_cb finished) {
  lp_tokpool_t *p = calloc(1, sizeof(*p));
  if (!p) return NULL;
  p->finished = finished;
  p->nice = nice; /* before the workers: each reads it as it starts */
  if (uv_mutex_init(&p->lock)) {
    free(p);
    return NULL;
  }
  if (uv_cond_init(&p->work) || !(p->workers = calloc(nthreads, sizeof(*p->workers)))) {
    uv_mutex_destroy(&p->lock);
    free(p);
    return NULL;
  }
  for (unsigned i = 0; i < nthreads; i++) {
    p->workers[i].pool = p;
    p->workers[i].index = i;
    if (uv_thread_create(&p->workers[i].thread, worker_main, &p->workers[i])) {
      lp__tokpool_stop(p);
      lp__tokpool_free(p);
      return NULL;
    }
    p->nthreads++;
  }
  lp_log(LP_LOG_INFO, "tokenizer threads", "\"threads\": %u, \"nice\": %u", nthreads, nice);
  return p;
}

int lp__tokpool_submit(lp_tokpool_t *p, lp_tokjob_t *job, size_t bound) {
  size_t bytes = 0;
  for (size_t i = 0; i < job->nunits; i++) bytes += job->units[i].len;
  uv_mutex_lock(&p->lock);
  /* a lone job always goes in: one larger than the bound could never run */
  if (p->stopping || (p->bytes && p->bytes + bytes > bound)) {
    uv_mutex_unlock(&p->lock);
    return -EAGAIN;
  }
  p->bytes += bytes;
  job->unfinished = job->nunits;
  job->next_unit = 0;
  unsigned wake = 0;
  if (job->nunits) {
    enqueue(p, job);
    p->queued_bytes += bytes;
    p->queued_units += job->nunits;
    wake = wakes_needed(p);
    p->woken += wake;
  }
  uv_mutex_unlock(&p->lock);
  if (!job->nunits) { /* nothing to tokenize: back at once, by the same way */
    job->posted = 1;
    p->finished(job);
    return 0;
  }
  while (wake--) uv_cond_signal(&p->work);
  return 0;
}

void lp__tokpool_cancel(lp_tokpool_t *p, lp_tokjob_t *job) {
  uv_mutex_lock(&p->lock);
  job->cancelled = 1;
  int free_now = 0;
  if (!job->posted && job->next_unit < job->nunits) {
    /* its units not yet taken go; those running finish, the last frees it */
    for (size_t i = job->next_unit; i < job->nunits; i++) {
      p->bytes -= job->units[i].len;
      p->queued_bytes -= job->units[i].len;
    }
    p->queued_units -= job->nunits - job->next_unit;
    job->unfinished -= job->nunits - job->next_unit;
    job->next_unit = job->nunits;
    if (job->rr_next) leave_round(p, job); /* its flow's next job takes its place */
    else leave_flow(p, job);
    free_now = job->unfinished == 0;
  }
  uv_mutex_unlock(&p->lock);
  /* posted: it waits in the front's box, which frees it when taken */
  if (free_now) lp__tokjob_free(job);
}

size_t lp__tokpool_bytes(lp_tokpool_t *p) {
  uv_mutex_lock(&p->lock);
  size_t b = p->bytes;
  uv_mutex_unlock(&p->lock);
  return b;
}

void lp__tokpool_stop(lp_tokpool_t *p) {
  if (!p) return;
  uv_mutex_lock(&p->lock);
  p->stopping = 1;
  uv_cond_broadcast(&p->work);
  uv_mutex_unlock(&p->lock);
  for (unsigned i = 0; i < p->nthreads; i++) uv_thread_join(&p->workers[i].thread);
  p->nthreads = 0;
}

void lp__tokpool_free(lp_tokpool_t *p) {
  if (!p) return;
  /* jobs never taken: their fronts are stopped, nobody waits for them */
  while (p->ring) {
    lp_tokjob_t *job = p->ring;
    for (lp_tokjob_t *j = job->flow_next, *n; j; j = n) { /* waiting behind it */
      n = j->flow_next;
      lp__tokjob_free(j);
    }
    ring_remove(p, job);
    lp__tokjob_free(job);
  }
  free(p->flows);
  uv_cond_destroy(&p->work);
  uv_mutex_destroy(&p->lock);
  free(p->workers);
  free(p);
}
