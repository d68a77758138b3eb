/* The tokenizer workers (src/proxy/tokwork/) and what crosses between them
 * and the fronts: a job of units, handed over by its front and back through
 * its tok box. */
#ifndef LANEPACK_PROXY_TOKWORK_H
#define LANEPACK_PROXY_TOKWORK_H

#include "handoff/handoff.h"

#include "lanepack/tokenizer.h"

/* ---- tokwork/: the tokenizer workers (threads lp-tok-N). Text is tokenized
 * there, never on a loop: a front hands over a job of units, one per input,
 * and takes it back from its tok box (a mailbox woken by an eventfd). ---- */
typedef struct lp_tokjob_s lp_tokjob_t;
/* What the pool calls, on the worker that finished it (or the submitting
 * front, for a job of no units), with a job every unit of which is done: the
 * job is the callee's from then on. */
typedef void (*lp_tokjob_cb)(lp_tokjob_t *job);

/* A worker's turn: the units it takes of one job at once, in order, while
 * their text stays within LP_TOKPOOL_TURN_BYTES (the first one whatever its
 * size) and they number at most LP_TOKPOOL_TURN_UNITS. Handing a unit over
 * (the lock, a wake-up, a hand-back) cost some 130 us a request of 8 lines
 * on a busy machine, more than tokenizing them (0.5-0.7 us a token with
 * SentencePiece, doc/benchmarks.md): short inputs go many a turn. 8 KiB is
 * about 2,000 tokens, a millisecond or so of tokenizing: what a one-line
 * request queued behind another job's turn waits at most for it, and it
 * holds a typical batch of short texts (8-64 lines) whole. */
#define LP_TOKPOOL_TURN_BYTES (8 * 1024)
/* ... a tokenizer call has a cost of its own even for an empty text: 64
 * keeps a turn of 2,048 tiny inputs from holding a worker long. */
#define LP_TOKPOOL_TURN_UNITS 64

/* Token ids of one turn's units, one allocation (units point into it),
 * owned by their job. */
typedef struct lp_tokids_s {
  struct lp_tokids_s *next;
  int32_t ids[];
} lp_tokids_t;

/* What a unit asks: the ids with the encode options (IDS), without them
 * (PLAIN, a part of a /rerank pair), /tokenize's pieces (PIECES), or the
 * route's own work on its ctx (CALL: decoding a large body, which jansson
 * does at some 30-80 ms a MiB: no loop waits on it either). */
enum { LP_TOKOP_IDS = 1, LP_TOKOP_PLAIN, LP_TOKOP_PIECES, LP_TOKOP_CALL };


typedef struct lp_tokunit_s {
  /* asked, by the front */
  const char *text;       /* borrowed from the job's ctx */
  size_t len;             /* its bytes (CALL: those its work reads), held against
                             tokenizer_queue_bytes until done */
  int op;                 /* LP_TOKOP_* */
  uint32_t keep;          /* truncation: its first (last when left) keep ids; 0: all of them */
  int left;
  uint32_t limit;         /* without keep: more ids than this are refused (-E2BIG), read
                             from a prefix when it already holds more; 0: no limit */
  int special;            /* PIECES: with the encode options' pieces */
  void (*call)(lp_tokjob_t *job); /* CALL: runs on the worker, reads and writes job->ctx only */
  /* answered, by a worker */
  long n;                 /* ids (pieces), or -E2BIG (over the limit: `over` of them, or at
                             least that many when over_prefix), -ENOMEM, -EINVAL (the
                             tokenizer refused the text) */
  long over;
  int over_prefix;        /* ... found so in a prefix, the rest never read */
  int32_t *ids;           /* n of them, in one of the job's id blocks (freed with it) */
  lp_buf_t json;          /* PIECES: the input's tokens in /tokenize's shape; owned */
} lp_tokunit_t;

/* A request's text on its way through the workers. Made by its front,
 * owned by the pool from lp__tokpool_submit until its last unit is done,
 * then by its front again (through the tok box), which runs done and frees
 * it. A client gone meanwhile (lp__tokpool_cancel): its units not yet taken
 * are dropped, and whoever holds it last (the worker of its last unit, or
 * the front taking it from the box) frees it unread. */
struct lp_tokjob_s {
  lp_front_t *front;      /* whose client it is (the pool never reads it: its finished callback does) */
  lp_http_req_t *req;     /* FRONT: the client's request */
  const lp_tok_t *tok;    /* the model's, kept until the process ends */
  lp_tokunit_t *units;    /* nunits; in the job's own allocation */
  size_t nunits;
  /* FRONT: the route's continuation, with the client still there; it answers
   * req (or hands a job on) and frees nothing of the job's */
  void (*done)(lp_front_t *f, lp_tokjob_t *job, lp_http_req_t *req);
  void *ctx;              /* the route's parsed request (the texts point into it); owned */
  void (*ctx_free)(void *ctx);
  /* FRONT, before submit: whose turns these are (its client's connection,
   * lp_http_req_client): jobs of one flow share one place in the round, in
   * the order submitted, so a client pipelining 60 requests takes a turn as
   * one request does; NULL: a place of its own */
  const void *flow;
  /* the pool's, under its lock */
  size_t next_unit;       /* the next unit a worker takes */
  size_t unfinished;      /* units not done (queued or running) */
  lp_tokids_t *idblocks;  /* the ids of its turns; owned */
  int cancelled;          /* its client left */
  int posted;             /* every unit done: in its front's box */
  lp_tokjob_t *rr_prev, *rr_next; /* in the pool's round (its flow's first job there), else NULL */
  lp_tokjob_t *flow_next; /* its flow's next job, waiting behind it */
  lp_tokjob_t *flow_tail; /* in the round: its flow's last job (itself when alone) */
  lp_tokjob_t *done_next; /* in its front's box */
};

/* A front's box of jobs back from the workers. */
typedef struct lp_tokbox_s {
  uv_mutex_t lock;
  lp_wake_t wake;         /* on the front's loop */
  lp_tokjob_t *done, **done_tail;
  int ready;              /* initialised */
} lp_tokbox_t;

/* tokwork/pool.c. start: nthreads workers, each nice (tokenizer_nice) above
 * the process's nice value and SCHED_BATCH (0: as the process), or NULL; each
 * finished job goes to finished (any thread: a worker's). submit (a front's):
 * the job's units queued behind those of every job already there (in its
 * flow's place when the flow has one: behind the flow's jobs), or
 * -EAGAIN when the text the pool holds would pass bound bytes (a job alone
 * always goes in) or the pool stops; the job is the pool's on success.
 * cancel (its front's, the client gone): see lp_tokjob_t. stop joins the
 * workers (those running finish their unit); free then frees the jobs never
 * taken, once no front can cancel any. bytes: the text held now. */
lp_tokpool_t *lp__tokpool_start(unsigned nthreads, unsigned nice, lp_tokjob_cb finished);
int lp__tokpool_submit(lp_tokpool_t *p, lp_tokjob_t *job, size_t bound);
void lp__tokpool_cancel(lp_tokpool_t *p, lp_tokjob_t *job);
size_t lp__tokpool_bytes(lp_tokpool_t *p);
void lp__tokpool_stop(lp_tokpool_t *p);
void lp__tokpool_free(lp_tokpool_t *p);
/* A job of nunits zeroed units for the front's client, or NULL. free: its
 * units' results, its ctx (ctx_free) and itself. */
lp_tokjob_t *lp__tokjob_new(lp_front_t *f, const lp_tok_t *t, size_t nunits);
void lp__tokjob_free(lp_tokjob_t *job);
/* The box on the front's loop (cb runs there after a push); push (any
 * thread: the front's finished callback, on a worker): job in, by done_next;
 * take: everything in it, by done_next; close stops its polling (the loop must run
 * after); destroy frees jobs still in it, once no worker runs. */
int lp__tokbox_init(lp_tokbox_t *b, uv_loop_t *loop, lp_wake_cb cb, void *owner);
void lp__tokbox_push(lp_tokbox_t *b, lp_tokjob_t *job);
lp_tokjob_t *lp__tokbox_take(lp_tokbox_t *b);
void lp__tokbox_close(lp_tokbox_t *b);
void lp__tokbox_destroy(lp_tokbox_t *b);

#endif
