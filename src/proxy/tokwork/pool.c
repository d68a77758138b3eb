/* The tokenizer workers (threads lp-tok-N): text is tokenized here, never on
 * an event loop. A front hands over a job of units (one per input), goes on
 * serving, and gets the job back through its tok box (a mailbox woken by an
 * eventfd, as the fronts and the scheduler talk). Workers take one unit at a
 * time, round robin across jobs, so a request of 2,048 inputs or of one long
 * text holds one worker at a time while a one-line request waits for one
 * unit at most. Submit and cancel run on the fronts; the rest on the workers.
 * A finished job goes up through the callback registered at start (the
 * front's, which pushes it onto the job's front's box): nothing here reads a
 * front. */
#define _GNU_SOURCE /* SCHED_BATCH */
#include <errno.h>
#include <sched.h>
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

typedef struct lp_tokworker_s {
  lp_tokpool_t *pool;
  unsigned index;
  uv_thread_t thread;
} lp_tokworker_t;

struct lp_tokpool_s {
  uv_mutex_t lock;
  uv_cond_t work;          /* a unit is waiting, or the pool stops */
  lp_tokjob_t *ring;       /* jobs with units not yet taken, circular by rr_next: the head's turn is next */
  size_t bytes;            /* text held by jobs not yet finished (their units' lengths) */
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

lp_tokjob_t *lp__tokjob_new(lp_front_t *f, const lp_tok_t *t, size_t nunits) {
  lp_tokjob_t *job = calloc(1, sizeof(*job));
  if (!job) return NULL;
  job->units = calloc(nunits ? nunits : 1, sizeof(*job->units));
  if (!job->units) {
    free(job);
    return NULL;
  }
  job->front = f;
  job->tok = t;
  job->nunits = nunits;
  return job;
}

void lp__tokjob_free(lp_tokjob_t *job) {
  if (!job) return;
  for (size_t i = 0; i < job->nunits; i++) {
    free(job->units[i].ids);
    lp_buf_free(&job->units[i].json);
  }
  free(job->units);
  if (job->ctx_free) job->ctx_free(job->ctx);
  free(job);
}

/* ---- one unit's work (a worker's) ---- */

/* lp_tok_encode (or _plain) of the whole text into u->ids, grown to hold them. */
static long encode_all(const lp_tok_t *t, lp_tokunit_t *u, int plain) {
  size_t cap = 0;
  for (int tries = 0; tries < 2; tries++) {
    long k = plain ? lp_tok_encode_plain(t, u->text, u->len, u->ids, cap) : lp_tok_encode(t, u->text, u->len, u->ids, cap);
    if (k < 0 || (size_t)k <= cap) return k;
    int32_t *p = realloc(u->ids, (size_t)k * sizeof(*p));
    if (!p) return -ENOMEM;
    u->ids = p;
    cap = (size_t)k;
  }
  return -EINVAL;
}

/* /tokenize's answer for one input: its pieces as TEI's tokens. */
static long pieces(const lp_tok_t *t, lp_tokunit_t *u) {
  lp_tok_piece_t *pc = NULL; /* owned here */
  long n = lp_tok_pieces(t, u->text, u->len, u->special, NULL, 0);
  if (n > 0 && u->limit && (size_t)n > u->limit) {
    u->over = n;
    return -E2BIG;
  }
  if (n > 0 && !(pc = malloc((size_t)n * sizeof(*pc)))) return -ENOMEM;
  if (n > 0 && lp_tok_pieces(t, u->text, u->len, u->special, pc, (size_t)n) != n) n = -EINVAL;
  lp_buf_puts(&u->json, "[");
  for (long k = 0; k < n; k++) {
    if (k) lp_buf_puts(&u->json, ",");
    const lp_tok_piece_t *p = &pc[k];
    const char *name = lp_tok_piece_name(t, p->id);
    int in_text = !p->special && p->begin <= p->end && p->end <= u->len;
    lp_tei_token(&u->json, p->id, in_text ? u->text + p->begin : name, in_text ? p->end - p->begin : strlen(name),
                 !in_text, p->begin, p->end);
  }
  lp_buf_puts(&u->json, "]");
  free(pc);
  if (n >= 0 && u->json.oom) n = -ENOMEM;
  return n;
}

static void run_unit(lp_tokjob_t *job, lp_tokunit_t *u) {
  const lp_tok_t *t = job->tok;
  size_t cap = 0;
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
  if (u->op == LP_TOKOP_PIECES) u->n = pieces(t, u);
  else if (u->keep && u->op == LP_TOKOP_IDS) u->n = lp_tokw_fit(t, u->text, u->len, u->keep, u->left, &u->ids, &cap, NULL);
  else if (u->keep) u->n = lp_tokw_plain(t, u->text, u->len, u->keep, u->left, &u->ids, &cap, NULL);
  else u->n = encode_all(t, u, u->op == LP_TOKOP_PLAIN);
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

static void worker_main(void *arg) {
  lp_tokworker_t *w = arg;
  lp_tokpool_t *p = w->pool;
  char name[16]; /* the kernel's limit, with its NUL */
  snprintf(name, sizeof(name), "lp-tok-%u", w->index);
  prctl(PR_SET_NAME, name, 0, 0, 0);
  lower_priority(p);
  uv_mutex_lock(&p->lock);
  for (;;) {
    while (!p->stopping && !p->ring) uv_cond_wait(&p->work, &p->lock);
    if (p->stopping) break;
    lp_tokjob_t *job = p->ring;
    lp_tokunit_t *u = &job->units[job->next_unit++];
    if (job->next_unit == job->nunits) ring_remove(p, job); /* every unit taken */
    else p->ring = job->rr_next;                            /* the next job's turn */
    uv_mutex_unlock(&p->lock);
    run_unit(job, u);
    uv_mutex_lock(&p->lock);
    p->bytes -= u->len;
    if (--job->unfinished) continue;
    if (job->cancelled) {
      /* its client left while this unit ran: nobody waits for it */
      uv_mutex_unlock(&p->lock);
      lp__tokjob_free(job);
      uv_mutex_lock(&p->lock);
    } else {
      job->posted = 1;
      p->finished(job); /* the front's now */
    }
  }
  uv_mutex_unlock(&p->lock);
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
  if (job->nunits) ring_insert(p, job);
  uv_mutex_unlock(&p->lock);
  if (!job->nunits) { /* nothing to tokenize: back at once, by the same way */
    job->posted = 1;
    p->finished(job);
    return 0;
  }
  /* one worker per unit, at most: a one-input job wakes one */
  if (job->nunits == 1) uv_cond_signal(&p->work);
  else uv_cond_broadcast(&p->work);
  return 0;
}

void lp__tokpool_cancel(lp_tokpool_t *p, lp_tokjob_t *job) {
  uv_mutex_lock(&p->lock);
  job->cancelled = 1;
  int free_now = 0;
  if (!job->posted && job->next_unit < job->nunits) {
    /* its units not yet taken go; those running finish, the last frees it */
    for (size_t i = job->next_unit; i < job->nunits; i++) p->bytes -= job->units[i].len;
    job->unfinished -= job->nunits - job->next_unit;
    job->next_unit = job->nunits;
    ring_remove(p, job);
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
    ring_remove(p, job);
    lp__tokjob_free(job);
  }
  uv_cond_destroy(&p->work);
  uv_mutex_destroy(&p->lock);
  free(p->workers);
  free(p);
}
