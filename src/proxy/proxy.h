/* The proxy's state, shared by its files only: jobs (client requests), their
 * sequences, models with their dispatch cores and backends, batches in flight.
 * The policy (queue, device clocks, when and what a batch carries, retries,
 * hedges, health from outcomes, request bounds) is the model's lp_disp_t; these
 * files are the I/O around it. */
#ifndef LANEPACK_PROXY_H
#define LANEPACK_PROXY_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <uv.h>

#include "lanepack/advisor.h"
#include "lanepack/batchjson.h"
#include "lanepack/rectbin.h"
#include "lanepack/bucket.h"
#include "lanepack/buf.h"
#include "lanepack/config.h"
#include "lanepack/tei.h"
#include "lanepack/tokenizer.h"
#include "lanepack/trace.h"
#include "lanepack/devclock.h"
#include "lanepack/dispatch.h"
#include "lanepack/httpd.h"
#include "lanepack/layout.h"
#include "lanepack/metrics.h"
#include "lanepack/recent.h"
#include "lanepack/saturation.h"
#include "lanepack/scatter.h"
#include "lanepack/tensor.h"
#include "lanepack/upstream.h"
#include "lanepack/v2.h"

#define container_of(ptr, type, member) ((type *)((char *)(ptr) - offsetof(type, member)))

typedef struct lp_proxy_s lp_proxy_t;
typedef struct lp_model_s lp_model_t;
typedef struct lp_job_s lp_job_t;
typedef struct lp_batch_s lp_batch_t;
typedef struct lp_front_s lp_front_t;
typedef struct lp_ctl_s lp_ctl_t;

/* Counters one thread writes and another reads (a front's, read by the
 * front rendering /metrics): relaxed loads and stores, no locked
 * instruction (the owner is the only writer). */
#define LP_RELAXED_INC(x) __atomic_store_n(&(x), __atomic_load_n(&(x), __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED)
#define LP_RELAXED_ADD(x, v) __atomic_store_n(&(x), __atomic_load_n(&(x), __ATOMIC_RELAXED) + (v), __ATOMIC_RELAXED)
#define LP_RELAXED_LOAD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)
#define LP_RELAXED_STORE(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELAXED)

/* wake.c: one thread waking another's loop: an eventfd the owner's loop polls
 * (not uv_async_t: wake.c says why). Any thread may send; the callback runs on
 * the owner's loop after the counter is read back to 0, so what it takes from
 * its queue includes everything pushed before the send that woke it. */
typedef struct lp_wake_s lp_wake_t;
typedef void (*lp_wake_cb)(lp_wake_t *w);
struct lp_wake_s {
  uv_poll_t poll;         /* on the owner's loop */
  int fd;                 /* the eventfd; owned, closed by lp__wake_destroy */
  lp_wake_cb cb;
  void *data;             /* the owner */
};
int lp__wake_init(lp_wake_t *w, uv_loop_t *loop, lp_wake_cb cb, void *data);
void lp__wake_send(lp_wake_t *w);
/* Stops polling (cb may be NULL; the owner's loop must run after). The eventfd
 * stays open, so a late send from another thread writes to it, never to a
 * descriptor reused for something else. */
void lp__wake_close(lp_wake_t *w, uv_close_cb cb);
/* Closes the eventfd once no thread can send any more. */
void lp__wake_destroy(lp_wake_t *w);

/* mailbox.c: a thread's inbox. Other threads push under the mutex; the owner's
 * loop takes everything at once on one wake-up per burst (a push onto an
 * empty inbox sends it; wakes before the loop runs coalesce). Jobs and control
 * messages are linked through fields embedded in them: pushing allocates
 * nothing. Bounded by what feeds it: a front has at most max_connections x
 * max_pipeline requests unanswered, each at most one job and one cancel. */
typedef struct lp_mbox_s {
  uv_mutex_t lock;
  lp_wake_t wake;         /* on the owner's loop; data: the owner */
  lp_job_t *jobs, **jobs_tail;       /* jobs handed over (admit or done), by mq_next */
  lp_job_t *cancels, **cancels_tail; /* clients gone, by cq_next (to the scheduler) */
  lp_ctl_t *ctls, **ctls_tail;       /* control messages, by next */
  lp_batch_t *batches, **batches_tail; /* batches to send (to a front) or sent (back), by hand_next */
} lp_mbox_t;
int lp__mbox_init(lp_mbox_t *mb, uv_loop_t *loop, lp_wake_cb cb, void *owner);
void lp__mbox_push_job(lp_mbox_t *mb, lp_job_t *job);
/* A list of jobs linked by mq_next, first to *last, at once. */
void lp__mbox_push_jobs(lp_mbox_t *mb, lp_job_t *first, lp_job_t *last);
/* Jobs first..last (by mq_next; NULL, NULL for none) and batches
 * bfirst..blast (by hand_next; likewise) at once: one lock, one wake-up at
 * most, which is what a loop turn's hand-over costs whatever it carries. */
void lp__mbox_push(lp_mbox_t *mb, lp_job_t *first, lp_job_t *last, lp_batch_t *bfirst, lp_batch_t *blast);
void lp__mbox_push_cancel(lp_mbox_t *mb, lp_job_t *job);
void lp__mbox_push_ctl(lp_mbox_t *mb, lp_ctl_t *c);
/* Everything pushed so far, in order, each list NULL-terminated; the inbox is
 * left empty. */
void lp__mbox_take(lp_mbox_t *mb, lp_job_t **jobs, lp_job_t **cancels, lp_ctl_t **ctls, lp_batch_t **batches);
/* The batches alone, the rest left in place. */
lp_batch_t *lp__mbox_take_batches(lp_mbox_t *mb);
/* Stops the wake-up's polling (cb may be NULL); the owner's loop must run after. */
void lp__mbox_close(lp_mbox_t *mb, uv_close_cb cb);
void lp__mbox_destroy(lp_mbox_t *mb);

/* ---- tokwork/: the tokenizer workers (threads lp-tok-N). Text is tokenized
 * there, never on a loop: a front hands over a job of units, one per input,
 * and takes it back from its tok box (a mailbox woken by an eventfd). ---- */
typedef struct lp_tokjob_s lp_tokjob_t;
typedef struct lp_tokpool_s lp_tokpool_t;

/* What a unit asks: the ids with the encode options (IDS), without them
 * (PLAIN, a part of a /rerank pair), /tokenize's pieces (PIECES), or the
 * route's own work on its ctx (CALL: decoding a large body, which jansson
 * does at some 30-80 ms a MiB: no loop waits on it either). */
enum { LP_TOKOP_IDS = 1, LP_TOKOP_PLAIN, LP_TOKOP_PIECES, LP_TOKOP_CALL };

/* Bodies up to this size are decoded on the front as they come (a few
 * hundred microseconds at most); larger ones on a tokenizer worker (a CALL
 * unit), so that a client's 1 MiB text costs the loop a hand-off, not a
 * decode. */
#define LP_PARSE_INLINE_MAX (64u << 10)
/* ... unless the workers already hold this much (text and bodies): then the
 * body is decoded on the front as it comes, and the loop reads no more
 * meanwhile (the kernel's buffers hold the rest), so a burst of large bodies
 * arriving faster than they decode is not all read into memory (16 MiB:
 * eight 2 MiB bodies parked beside the loop). */
#define LP_DECODE_QUEUE_MAX (16u << 20)
/* front/tokhand.c: req's body to a worker to decode (a CALL unit running
 * call, then done on the front), when it is larger than LP_PARSE_INLINE_MAX
 * and the workers hold less than LP_DECODE_QUEUE_MAX: 0 with req->body moved
 * into *body (a field of ctx) and ctx the job's (ctx_free), or -EAGAIN /
 * -ENOMEM with nothing changed: the caller decodes it here. */
int lp__front_decode(lp_front_t *f, lp_http_req_t *req, void *ctx, void (*ctx_free)(void *ctx), char **body,
                     void (*call)(lp_tokjob_t *job), void (*done)(lp_front_t *f, lp_tokjob_t *job, lp_http_req_t *req));

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
  int32_t *ids;           /* owned */
  lp_buf_t json;          /* PIECES: the input's tokens in /tokenize's shape; owned */
} lp_tokunit_t;

/* A request's text on its way through the workers. Made by its front,
 * owned by the pool from lp__tokpool_submit until its last unit is done,
 * then by its front again (through the tok box), which runs done and frees
 * it. A client gone meanwhile (lp__tokpool_cancel): its units not yet taken
 * are dropped, and whoever holds it last (the worker of its last unit, or
 * the front taking it from the box) frees it unread. */
struct lp_tokjob_s {
  lp_front_t *front;      /* whose client it is; its box gets the job back */
  lp_http_req_t *req;     /* FRONT: the client's request */
  const lp_tok_t *tok;    /* the model's, kept until the process ends */
  lp_tokunit_t *units;    /* nunits; owned */
  size_t nunits;
  /* FRONT: the route's continuation, with the client still there; it answers
   * req (or hands a job on) and frees nothing of the job's */
  void (*done)(lp_front_t *f, lp_tokjob_t *job, lp_http_req_t *req);
  void *ctx;              /* the route's parsed request (the texts point into it); owned */
  void (*ctx_free)(void *ctx);
  /* the pool's, under its lock */
  size_t next_unit;       /* the next unit a worker takes */
  size_t unfinished;      /* units not done (queued or running) */
  int cancelled;          /* its client left */
  int posted;             /* every unit done: in its front's box */
  lp_tokjob_t *rr_prev, *rr_next; /* in the pool's round */
  lp_tokjob_t *done_next; /* in its front's box */
};

/* A front's box of jobs back from the workers. */
typedef struct lp_tokbox_s {
  uv_mutex_t lock;
  lp_wake_t wake;         /* on the front's loop */
  lp_tokjob_t *done, **done_tail;
  int ready;              /* initialised */
} lp_tokbox_t;

/* tokwork/pool.c. start: nthreads workers, or NULL. submit (a front's):
 * the job's units queued behind those of every job already there, or
 * -EAGAIN when the text the pool holds would pass bound bytes (a job alone
 * always goes in) or the pool stops; the job is the pool's on success.
 * cancel (its front's, the client gone): see lp_tokjob_t. stop joins the
 * workers (those running finish their unit); free then frees the jobs never
 * taken, once no front can cancel any. bytes: the text held now. */
lp_tokpool_t *lp__tokpool_start(unsigned nthreads);
int lp__tokpool_submit(lp_tokpool_t *p, lp_tokjob_t *job, size_t bound);
void lp__tokpool_cancel(lp_tokpool_t *p, lp_tokjob_t *job);
size_t lp__tokpool_bytes(lp_tokpool_t *p);
void lp__tokpool_stop(lp_tokpool_t *p);
void lp__tokpool_free(lp_tokpool_t *p);
/* A job of nunits zeroed units for the front's client, or NULL. free: its
 * units' results, its ctx (ctx_free) and itself. */
lp_tokjob_t *lp__tokjob_new(lp_front_t *f, const lp_tok_t *t, size_t nunits);
void lp__tokjob_free(lp_tokjob_t *job);
/* The box on the front's loop (cb runs there after a worker's push); take:
 * everything in it, by done_next; close stops its polling (the loop must run
 * after); destroy frees jobs still in it, once no worker runs. */
int lp__tokbox_init(lp_tokbox_t *b, uv_loop_t *loop, lp_wake_cb cb, void *owner);
lp_tokjob_t *lp__tokbox_take(lp_tokbox_t *b);
void lp__tokbox_close(lp_tokbox_t *b);
void lp__tokbox_destroy(lp_tokbox_t *b);

/* A control message between the scheduler and a front (not per request). */
enum { LP_CTL_RECONF = 1, LP_CTL_DRAIN, LP_CTL_STOP, LP_CTL_CLOSED, LP_CTL_CANCEL };
struct lp_ctl_s {
  int kind;
  lp_ctl_t *next;
  lp_front_t *front;      /* CLOSED: the front whose listeners closed */
  lp_config_t *cfg;       /* RECONF: the front's new copy (owned by the message, then the front); or NULL */
  char **tokens;          /* RECONF: its own copy of the bearer tokens (owned likewise) */
  size_t ntokens;
  int set_tokens;
  int access_fd;          /* RECONF: its own descriptor of the access log; -1 off, -2 unchanged */
};

/* A front's access log: whole lines gathered, written with one write(2) to its
 * own descriptor of the shared file (O_APPEND: lines of different fronts never
 * interleave). */
typedef struct lp_alog_s {
  int on;                 /* fd is open */
  int fd;                 /* owned (unless STDERR_FILENO and alone) */
  int failing;            /* its last write failed (warned once) */
  uint64_t dropped;       /* lines lost to failed writes (relaxed: read by /metrics) */
  uint64_t seen;          /* successes considered for sampling */
  lp_buf_t line;          /* the line being written; reused */
  lp_buf_t buf;           /* whole lines not yet written */
} lp_alog_t;

#define LP_ROUTE_COUNT 22
#define LP_STATUS_SLOTS 22
/* A shape found missing on a backend (a shape mismatch, a v2 404 or "not
 * ready") may be back soon: Triton answers 404 while it reloads a model. The
 * backend is asked again after a backoff that doubles from LP_RECHECK_FIRST_MS
 * up to LP_RECHECK_MAX_MS, and starts afresh after a quiet spell. */
#define LP_RECHECK_FIRST_MS 500
#define LP_RECHECK_MAX_MS 16000
/* The statuses counted per route, 0-terminated (front/reject.c). */
extern const int lp__status_codes[LP_STATUS_SLOTS];

/* A backend's answer (or one v2 sequence's values), shared by the sequences
 * that point into it. Made on the scheduler; each sequence holding a span of
 * it holds one reference, dropped by the front that writes its client's answer
 * (or by whoever frees the job): the bytes go with the last job written. */
typedef struct lp_answer_s {
  int refs;               /* atomic: the scheduler's while it slices, one per sequence */
  lp_buf_t body;          /* owned */
  /* a v2 answer's output tensor (has_out): raw borrows body, ints and reals
   * (its JSON form) are owned */
  lp_tensor_t out;
  int has_out;
} lp_answer_t;

/* answer.c. take moves body in (it is left empty); copy copies len bytes;
 * both give the caller its reference, or NULL without memory. adopt moves a
 * tensor decoded from body in (its ints and reals are the answer's now). */
lp_answer_t *lp__answer_take(lp_buf_t *body);
lp_answer_t *lp__answer_copy(const void *data, size_t len);
void lp__answer_adopt(lp_answer_t *a, lp_tensor_t *t);
void lp__answer_ref(lp_answer_t *a);
void lp__answer_unref(lp_answer_t *a); /* NULL: nothing */

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

typedef struct lp_snap_s {
  int refs;                /* atomic: one per page job holding it (and its taker's while it hands them out) */
  unsigned parts;          /* LP_SNAP_* taken */
  uint64_t at_ns;          /* when taken (lp__now) */
  int unready;             /* SIGTERM seen */
  double start_time;
  uint64_t retries, stalls, hedges_won, inflight_batches;
  lp_snap_model_t *models; /* nmodels, in the snapshot's block */
  size_t nmodels;
  lp_recent_t *recent;     /* LP_SNAP_RECENT: a copy of the ring; NULL when the proxy keeps none; owned */
} lp_snap_t;

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

/* One sequence of a job: waiting (queued or in flight: the core knows which),
 * or done. */
enum { LP_SEQ_WAITING = 0, LP_SEQ_DONE };

/* What one sequence's output is: a value (or vector) per token, one number
 * for the sequence (a score), or one vector for it. */
enum { LP_OUT_TOKENS = 0, LP_OUT_SCORE, LP_OUT_VECTOR };

typedef struct lp_seq_s {
  lp_job_t *job;
  const int32_t *tokens;  /* into job->tokens */
  uint32_t len;
  const char *text;       /* NULL or the tokens as "1,2,3", in the job's block */
  uint32_t text_len;
  int state;
  uint32_t sends;         /* batches that carried it (copies: hedges and retries) */
  /* where it ran: its latest send, then the batch that answered it */
  uint64_t batch_id;
  uint32_t lanes, bucket, lane, offset;
  uint64_t dispatch_ns, done_ns;
  /* its output: out[0..out_len) in ans (a reference held), per-token JSON
   * text to be wrapped in [ ] when out_wrap; set by the scheduler, read by
   * the front once the job is handed back */
  lp_answer_t *ans;
  const char *out;
  size_t out_len;
  int out_wrap;
  int out_kind;           /* LP_OUT_*: what the output is, per token or per sequence */
  /* or, from a v2 backend (out NULL): elements [out_first, + out_n) of
   * ans->out, out_inner of them per token (or per segment) */
  size_t out_first, out_n, out_inner;
} lp_seq_t;

/* One client request. Owned by the proxy from parsing until the core answers
 * it (its ANSWER action) or is told its client left (lp_disp_cancel); its
 * address is its job id in the core, so nothing of it is touched after.
 *
 * A job crosses threads, whatever their number; who owns what: the front makes it and hands it to the scheduler (mailbox, mq_next);
 * from then on every field but those marked FRONT is the scheduler's, which
 * writes its result (res_*) and hands it back (mailbox, mq_next) once the core
 * is done with it: then it is the front's again, which answers its client and
 * drops its reference. A client gone sends the job to the scheduler as a
 * cancel (cq_next) holding a reference of its own, dropped by the scheduler
 * once read: the memory goes when the last reference does (refs), so no job
 * is freed while a message about it is in flight. */
struct lp_job_s {
  lp_proxy_t *proxy;
  lp_model_t *model;
  lp_front_t *front;      /* whose client it is */
  lp_http_req_t *front_req; /* FRONT: the client's request, NULL once it left */
  lp_job_t *mq_next;      /* in a mailbox: to the scheduler, then back to its front */
  lp_job_t *cq_next;      /* its cancel, in the scheduler's mailbox */
  int refs;               /* atomic; 1 for the job, 1 per cancel in flight,
                             1 per item of a batch sending its text (batch.c) */
  int waited;             /* a client waits for its answer (the scheduler's view) */
  /* what the scheduler reads and writes for every sequence answered, together
   * after the first line (a cold line per job cost it a cache miss a sequence) */
  int handed_back;        /* the scheduler is done with it (written by the scheduler) */
  int res_status;         /* its answer's status, written by the scheduler (0: none) */
  int res_per_segment;    /* a success: one output per sequence, not per token */
  uint32_t nseq;
  uint32_t unresolved;    /* sequences without their output */
  int priority;           /* the client's, clamped: higher goes first */
  int answered;           /* the client has had its one answer */
  int in_core;            /* admitted: the core answers it or must hear it is cancelled */
  int charged;            /* its bytes count in its model's live_bytes, and it is in
                             the model's live list */
  lp_job_t *live_prev, *live_next;
  lp_job_t *next_cancel;  /* in its model's list of cancels the core has not heard yet */
  int cancel_queued;      /* ... is on that list */
  lp_seq_t *seqs;         /* owned */
  int32_t *tokens;        /* in the job's block (allocated with it) */
  uint64_t arrive_ns;
  uint64_t deadline_ns;   /* the client's; 0 = none */
  size_t bytes;           /* what it holds, charged to the queue's budget */
  int admin_route;        /* not an inference but a page of the scheduler's state (LP_ROUTE_*, or
                             LP_ROUTE_V2 with admin_v2 set), the advice among them */
  int admin_v2;           /* lp_v2_route_t of a v2 page */
  char *admin_url;        /* its URL (the query is read); owned */
  size_t admin_path_len;  /* admin_url[0..admin_path_len) is the path */
  lp_snap_t *snap;        /* a page's snapshot to render (a reference), set by the scheduler; dropped
                             by the front once rendered, or when the job is freed; NULL: res_* hold
                             the answer (the advice, an error) */
  /* its answer, written by the scheduler: beside res_status above,
   * code and message of an error, or the body of a success behind LP_HEAD_ROOM bytes */
  char res_code[48];
  char res_msg[256];
  char res_extra[96];
  char res_hdr[96];       /* extra header lines of an admin page */
  const char *res_ctype;  /* a string literal */
  lp_buf_t res_body;      /* owned */
  char *id_json;          /* the client's id as JSON text, or NULL; in the job's block */
  char request_id[64];    /* its X-Request-Id (sent or made), passed on in batches */
  char traceparent[LP_TRACEPARENT_SIZE]; /* its span's traceparent, passed on in batches */
  char *tracestate;       /* the client's tracestate (cleaned), NULL when none; owned */
  int multi;              /* "inputs" form: answers "outputs" */
  int v2;                 /* an Open Inference Protocol client: answered as a tensor */
  int openai;             /* an OpenAI embeddings client: answered in its shapes */
  int openai_base64;      /* ... its vectors as base64 float32 */
  int openai_normalize;   /* ... scaled to unit length (its model's embedding.normalize) */
  uint32_t openai_dims;   /* ... cut to their first values (its "dimensions"); 0 = whole */
  uint32_t embed_dims;    /* /v1/embeddings, /embed: the model's embedding.dimensions (0: none),
                             the least a backend's vector may hold */
  size_t openai_tokens;   /* ... its tokens, for "usage" */
  char openai_model[LP_NAME_MAX]; /* ... the model it named, echoed */
  int tei;                /* a TEI client (its LP_ROUTE_TEI_*, else 0): answered in its shapes */
  int tei_normalize;      /* ... /embed: unit-length vectors */
  int tei_raw_scores;     /* ... /rerank: scores without the sigmoid */
  char *tei_texts;        /* ... /rerank with return_text: the texts, NUL-separated; owned */
  uint32_t tei_dims;      /* ... /embed: vectors cut to their first values (its "dimensions"); 0 = whole */
  int tei_single;         /* ... /predict of one input: answered without the outer list */
  int v2_binary;          /* ... in binary */
  size_t v2_rows;         /* k of its [k, n] input_ids */
  /* its outputs as a v2 backend answered them: each sequence's out holds raw
   * little-endian values of v2_dtype, with trailing dimensions v2_dims (the
   * output's after its leading ones); LP_DT_INVALID: JSON text (lanepack wire) */
  lp_dtype_t v2_dtype;
  int v2_mixed;           /* parts came in different datatypes or trailing shapes */
  int v2_ndim;
  int64_t v2_dims[LP_TENSOR_MAX_DIMS];
};

typedef struct lp_backend_s {
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
} lp_backend_t;

/* A batch the core sent: its layout and body, its transfer, and which job and
 * sequence each layout item is (job ids are job addresses: valid while the
 * core still has the job, which is when it says anything about it). */
struct lp_batch_s {
  lp_model_t *model;
  lp_backend_t *backend;
  uint64_t id;            /* the core's */
  int shape;              /* index in model->shapes (a ragged model has one) */
  lp_disp_item_t *items;  /* layout item i is items[i]; owned array */
  uint32_t *seg_of;       /* item i's segment in the layout; owned array */
  size_t nitems;
  size_t items_cap;
  size_t cursor;          /* next item expected in OUTPUT order */
  lp_batch_t *next_spare; /* model's pool of finished batches */
  lp_layout_t layout;     /* owned */
  /* the request sent upstream, written by the scheduler (v2 arrays) or, for
   * a pending body (body_pending), by the front that sends it: owned */
  lp_buf_t body;
  /* the JSON (or v2 binary) request as a gather list: the members' token text
   * and the writer's runs borrowed, read out by curl, never assembled; owned;
   * likewise written where body_pending says */
  lp_gather_t gather;
  int pinned;             /* each item's job holds a reference of the batch's
                             (its text is in the gather list) until it is freed */
  /* what its body is written from, item i's, borrowed from its job (pinned
   * while the batch is in flight): per batch, not the model's scratch, so the
   * thread that starts the transfer may write the body; owned arrays of
   * items_cap, reused */
  lp_seq_ref_t *refs;     /* tokens */
  lp_seq_text_t *texts;   /* token text as the client sent it, or none */
  const char **ids;       /* request ids */
  const char **traces;    /* traceparents */
  uint64_t dispatch_ns;
  /* ---- the transfer's half: written by the scheduler before the hand-over,
   * then the sending front's (wire/ code on its loop) until it hands the batch back: it writes the pending body, the
   * layout's texts and seqs (cleared), headers and the outcome below ---- */
  lp_xfer_t *xfer;        /* in flight; the transfer's thread's */
  /* where it goes, the header lines it needs, its bounds and how to read its
   * answer: copied here, as a reload may change the model meanwhile */
  char url[LP_URL_MAX + 200];
  char v2_header[64];
  /* "traceparent: ..." of the batch's own span, under its first member's
   * trace (a request has one parent; the members' traces ride in the body) */
  char trace_header[16 + LP_TRACEPARENT_SIZE];
  char state_header[16 + LP_TRACESTATE_SIZE]; /* "tracestate: ..." of that member, or "" */
  const char *headers[5];   /* the transfer's header lines, NULL-terminated */
  int32_t v2_scalar;      /* max_seqlen of a ragged batch */
  int device;             /* the device the core sent it to */
  uint64_t expect_ns;     /* when the core expects it back; 0 = unknown */
  uint64_t timeout_ms;
  size_t max_answer;      /* the most answer bytes it can need (answer_bound) */
  int v2;                 /* an Open Inference Protocol batch */
  int v2_per_segment;     /* its output is one value per segment */
  int outputs;            /* its model's lp_outputs_t when sent: what the answer must be */
  uint32_t nlabels;       /* ... and its labels (LP_OUTPUTS_SCORE: scores per sequence, 0: one) */
  char v2_output[64];     /* the output to read; "": the answer's first */
  /* a body written by lp__transfer_start, on the front that sends it (a JSON
   * batch's, a v2 gathered one's): what it reads beside the fields above, the
   * writer and the rectangles' runs borrowed (the model's, immutable while
   * the model lives), the rest copied */
  enum { LP_BODY_NONE, LP_BODY_JSON, LP_BODY_V2 } body_pending;
  const lp_batchjson_t *writer;
  char model_name[LP_NAME_MAX];
  lp_v2_config_t v2cfg;
  const lp_rectbin_t *rect;
  lp_buf_t members;       /* a v2 request's members (id, parameters, outputs); owned, reused */
  /* how it ended (wire/transfer.c), read by the scheduler once handed back */
  int unstarted;          /* the transfer could not start */
  int unbuilt;            /* ... as its body could not be written (out of memory) */
  lp_xfer_result_t result;
  long status;
  char error[256];
  uint64_t sent_ns, device_ns;
  int64_t inference_header_len;
  lp_buf_t answer;        /* the answer's body; moved on into the jobs' shared answer */
  int opened;             /* a 200 answer indexed (JSON) or decoded (v2) for slicing */
  char open_err[300];     /* why a 200 answer could not be */
  lp_scatter_t scatter;   /* a JSON answer's index; owned, reused */
  lp_v2_msg_t v2msg;      /* a v2 answer decoded, its output tensor v2out */
  const lp_tensor_t *v2out;
  int v2_open;            /* v2msg holds a decoded answer (freed by lp__v2_close) */
  void (*on_done)(lp_batch_t *bt, void *ud); /* where the transfer's thread hands it */
  void *on_done_ud;
  lp_batch_t *hand_next; /* in a hand-over list: to a front, or back */
  lp_front_t *front;      /* several threads: the front whose loop runs its
                             transfer (the scheduler's count, batches_out) */
  int in_flight;          /* its transfer is running */
  lp_batch_t *next_failed;/* in the model's list of batches whose start failed */
  uint64_t view_ticket;   /* its entry in the recent-batches ring; 0: none */
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

/* Room left in front of an answer's body for its status line and headers: the
 * body is built once, in the buffer that is written, and the head is put just
 * before it. */
#define LP_HEAD_ROOM 512

/* A front: accepts, reads, parses and answers on its own loop and thread,
 * with its own listener, scratch, counters and access log, and talks to the
 * scheduler through mailboxes only, whatever the number of fronts.
 * Everything here is the front's own unless marked. */
struct lp_front_s {
  lp_proxy_t *proxy;
  unsigned index;
  int trim_due;            /* the proxy found it quiet: give its arena's top back (atomic) */
  uv_loop_t *loop;         /* own_loop */
  uv_loop_t own_loop;
  uv_thread_t thread;
  /* the configuration this front reads: its own copy, replaced on reload by
   * a RECONF message; owned */
  const lp_config_t *cfg;
  char **tokens;           /* its own copy of the bearer tokens; owned */
  size_t ntokens;
  lp_httpd_t *httpd;
  lp_httpd_t *admin;       /* front 0 only: the admin listener, if configured */
  lp_mbox_t inbox;         /* answers and control messages from the scheduler */
  uv_timer_t tick;         /* flushes the access log, publishes the connection count */
  /* jobs parsed this loop turn, handed to the scheduler together after
   * the turn's reads (one lock, at most one wake-up) by the check handle */
  lp_job_t *to_sched, *to_sched_last;
  uv_check_t flush;
  uv_idle_t flush_soon;    /* while jobs wait: the loop does not sleep before the flush */
  /* pages back from the scheduler, not yet rendered: a few a loop turn
   * (front.c), so that a client pipelining pages delays only itself */
  lp_job_t *pages_back, *pages_back_last;
  uv_idle_t pages_soon;    /* while pages wait: the next turn renders more */
  /* the front's own upstream connections, on its loop: the batches
   * the scheduler hands it are sent and their answers read and opened here
   * (wire/transfer.c), so no byte of theirs is the scheduler's; owned */
  lp_upstream_t *up;
  /* batches whose transfer ended this turn, handed back with to_sched */
  lp_batch_t *sent, *sent_last;
  /* the scheduler's (not the front's): jobs handed back to this front and
   * batches for it to send, this turn of the scheduler's loop, pushed
   * together by its check handle; and how many of its batches are out */
  lp_job_t *back, *back_last;
  lp_batch_t *out, *out_last;
  unsigned batches_out;
  int closing;             /* its listeners are closing (drain) */
  int open_servers;        /* listeners not yet closed */
  lp_buf_t scratch;        /* answers are built here, then handed to the server */
  lp_buf_t vec_text;       /* one sequence's output as text, read as a vector (embeddings) */
  float *vec;              /* ... its values; vec_cap of them; owned */
  size_t vec_cap;
  lp_tokbox_t tokbox;      /* jobs back from the tokenizer workers */
  int32_t *enc;            /* a request's token ids, text inputs tokenized; enc_cap; owned */
  size_t enc_cap;
  int32_t *tok_scratch;    /* token and length arrays lent to each parse; owned */
  size_t tok_scratch_cap;
  uint32_t *len_scratch;
  size_t len_scratch_cap;
  /* metrics (relaxed: read by whoever renders /metrics) */
  uint64_t requests[LP_ROUTE_COUNT][LP_STATUS_SLOTS];
  struct { char code[48]; uint64_t n; } rejections[32];
  size_t nrejections;      /* release-stored after the code is written */
  lp_hist_t t_queue, t_backend, t_total;
  uint64_t served;         /* requests routed */
  uint64_t conns;          /* open connections as of its last look */
  lp_alog_t alog;
};

/* The shape advisor's work (advice.c): one computation running on libuv's
 * pool, the others queued; the scheduler's thread's only. */
typedef struct lp_adv_comp_s lp_adv_comp_t;
typedef struct lp_advq_s {
  lp_adv_comp_t *running;  /* owned by the pool's work until it ends */
  lp_adv_comp_t *head, *tail; /* queued; owned */
  size_t queued;
} lp_advq_t;

struct lp_proxy_s {
  uv_loop_t *loop;
  lp_config_t cfg;
  lp_front_t *fronts;      /* nfronts; owned */
  unsigned nfronts;
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
  lp_httpd_shared_t client_counts; /* every front's client listener counts here */
  /* each model's tokenizer, or NULL: loaded at start, read by every front
   * (encoding only reads it), kept until the end (a reload may not change it) */
  lp_tok_t *tok[LP_MAX_MODELS];
  /* each model's /rerank pair template with its pieces' ids (nparts 0: none);
   * set at start, read by every front */
  lp_tei_template_t pair[LP_MAX_MODELS];
  lp_tokpool_t *tokpool;   /* the tokenizer workers (NULL: no model has a tokenizer); owned */
  char **tokens;           /* bearer tokens clients must show; owned; NULL: none */
  size_t ntokens;
  lp_upstream_t *up;        /* probes; batches too with one thread */
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

/* handoff/jobref.c (either thread, on a job it holds): the longest wait
 * before dispatch and at the backend among job's sequences (those never sent
 * count for nothing); and ns as "ms.mmm". */
void lp__job_times(const lp_job_t *job, uint64_t *queue_ns, uint64_t *backend_ns);
/* The allocator's trim threshold (main.c sets it): under load the top of a
 * heap is kept, and the quiet ticks give it back. */
#define LP_TRIM_THRESHOLD (256 << 20)
/* common/trim.c, any thread, about its own arena: gives back the free top of
 * the calling thread's malloc arena. */
void lp__trim_arena(void);
void lp__put_ms(lp_buf_t *b, uint64_t ns);

/* accesslog.c: JSON lines of answered requests (job may be NULL), each front
 * its own buffer and descriptor. Opening gives every front the file (with
 * several threads, a duplicate descriptor each, by a RECONF message); each
 * closes what it had (after writing what it was owed). */
int lp__access_log_open(lp_proxy_t *p, const char *path, char *err, size_t errlen);
int lp__alog_open_path(const char *path, int *fd, char *err, size_t errlen);
void lp__alog_set_fd(lp_alog_t *a, int fd);
void lp__alog_close(lp_alog_t *a);
size_t lp__alog_flush(lp_alog_t *a); /* returns the bytes still owed to a full pipe */
void lp__access_log(lp_front_t *f, const lp_http_req_t *req, int status, const lp_job_t *job);
/* A refusal's line names its error code (the one counted and answered). */
void lp__access_log_refused(lp_front_t *f, const lp_http_req_t *req, int status, const char *code,
                            const lp_job_t *job);

/* model.c: the dispatch core's settings from a model's and the proxy's. */
void lp__disp_config(const lp_config_t *pc, const lp_model_config_t *cfg, const lp_bucket_set_t *shapes,
                     lp_disp_config_t *out);
/* model.c: settings derived from m->cfg, again after a reload. */
void lp__model_reconfigured(lp_model_t *m);
/* model.c: a backend of m at url, healthy until probes say otherwise. */
void lp__backend_init(lp_model_t *m, lp_backend_t *b, const char *url);

/* reload.c: applies a new configuration to a running proxy, or refuses it
 * (err says why) leaving everything as it was. */
int lp__proxy_reload(lp_proxy_t *p, const lp_config_t *next, char *err, size_t errlen);

/* proxy.c */
int lp_proxy_init(lp_proxy_t *p, uv_loop_t *loop, const lp_config_t *cfg, int *port);
/* After the loop stopped: stops and joins the front threads, frees everything. */
void lp_proxy_free(lp_proxy_t *p);
/* sched/kick.c: a scheduling pass of every model, once this loop turn. */
void lp_proxy_kick(lp_proxy_t *p);
/* front/reject.c: counting and refusing, on the front that owns req. */
void lp_proxy_count(lp_front_t *f, int route, int status);
void lp__count_rejection(lp_front_t *f, const char *code);
void lp_proxy_reject(lp_front_t *f, lp_http_req_t *req, int route, int status,
                     const char *headers, const char *code, const char *msg, const char *extra);
/* The same for the request of job (its sequences and timings go in the access log). */
void lp__reject_job(lp_front_t *f, lp_http_req_t *req, int route, int status, const char *headers,
                    const char *code, const char *msg, const char *extra, const lp_job_t *job);
/* front/route.c: the request handlers every front's server calls (ud: the front). */
void lp__on_request(lp_http_req_t *req, void *ud);
void lp__on_admin_request(lp_http_req_t *req, void *ud);
void lp__on_cancel(lp_http_req_t *req, void *ud);
int lp__on_reject(lp_http_req_t *req, int status, const char *code, const char *msg, const char *headers,
                  void *ud);
/* The TEI route (LP_ROUTE_TEI_*) req's path names, or 0. */
int lp__tei_route(const lp_http_req_t *req);

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

/* front/front.c: the front loops, their listeners and threads; what the
 * process tells every front (new limits, tokens and configuration on a
 * reload; drain; stop). */
int lp__fronts_start(lp_proxy_t *p, int *port);
void lp__fronts_reconfigure(lp_proxy_t *p);
void lp__fronts_drain(lp_proxy_t *p);
/* Several threads: every front's transfers in flight end LP_XFER_CANCELLED
 * (the drain's last step); their batches come back as any other. */
void lp__fronts_cancel_transfers(lp_proxy_t *p);
/* Stops and joins the front threads (their transfers cancelled: batches not
 * yet taken by the scheduler are freed unheard) and frees what they own. */
void lp__fronts_stop(lp_proxy_t *p);
/* The server limits a configuration sets, and the latency histograms' bounds. */
void lp__httpd_limits(const lp_config_t *cfg, lp_httpd_config_t *hc);
const double *lp__latency_bounds(size_t *n);

/* front/tokhand.c: a front's traffic to the tokenizer workers. init: its
 * tok box on its loop. tokenize hands job (its units and done set) over for
 * req: 0, or -EAGAIN (the text waiting would pass tokenizer_queue_bytes: the
 * route answers 429) with the job still the caller's. cancel: req's client
 * left (lp__on_cancel). */
int lp__front_tok_init(lp_front_t *f);
int lp__front_tokenize(lp_front_t *f, lp_http_req_t *req, lp_tokjob_t *job);
void lp__front_tok_cancel(lp_front_t *f, lp_tokjob_t *job);
/* req->app while req's text is at the workers: its tokjob with the low bit
 * set (jobs and tokjobs come from malloc, aligned), so that a client's
 * leaving tells the two apart. */
static inline void *lp__app_tokjob(lp_tokjob_t *j) { return (void *)((uintptr_t)j | 1u); }
static inline lp_tokjob_t *lp__app_as_tokjob(void *app) {
  return ((uintptr_t)app & 1u) ? (lp_tokjob_t *)((uintptr_t)app & ~(uintptr_t)1u) : NULL;
}

/* front/submit.c: a front's traffic to the scheduler. Hands a parsed job to
 * the scheduler (directly, or by message). */
void lp__front_submit(lp_front_t *f, lp_http_req_t *req, lp_job_t *job);
/* Jobs parsed this loop turn, and batches whose transfers ended, go to the
 * scheduler now (before a cancel); the front loop's check handle calls it
 * once per turn. */
void lp__front_flush(lp_front_t *f);
/* Something waits for lp__front_flush: the loop does not sleep before it. */
void lp__front_flush_due(lp_front_t *f);
/* front/batches.c: starts the transfers of the batches the scheduler handed
 * this front (linked by hand_next); each comes back by lp__front_flush. */
void lp__front_send_batches(lp_front_t *f, lp_batch_t *list);
void lp__front_on_flush(uv_check_t *h);
/* The front's open connections, published for /metrics. */
void lp__front_publish(lp_front_t *f);
/* A page job for the scheduler, answered when it comes back (the advice may
 * wait for its worker first). */
void lp__front_ask_page(lp_front_t *f, lp_http_req_t *req, int route, int v2r);
/* front/pages.c: the pages of the scheduler's state rendered on the front
 * from a snapshot asked of the scheduler (a message there and back); the
 * advice is the scheduler's. */
void lp__front_page(lp_front_t *f, lp_http_req_t *req, int route, int v2r);
/* A page job back from the scheduler: req answered from its snapshot (which
 * the job's reference then drops) or its res_* (the advice, an error). */
void lp__front_page_back(lp_front_t *f, lp_job_t *job, lp_http_req_t *req);

/* sched/inbox.c: the scheduler's side: takes what the fronts sent (the
 * inbox's wake-up); a wake-up's pages share one snapshot (the advice gets its
 * answer) and go back with lp__job_hand_back. */
void lp__sched_on_inbox(lp_wake_t *w);

/* handoff/handback.c: the scheduler is done with a job:
 * back to it (with the others of this loop turn, by lp__fronts_flush, which
 * the scheduler loop's check handle calls once per turn). */
void lp__job_hand_back(lp_job_t *job);
/* Several threads: bt, built, to the front with the fewest batches out,
 * whose loop sends it; it comes back through the scheduler's inbox. */
void lp__batch_hand_out(lp_proxy_t *p, lp_batch_t *bt);
void lp__fronts_flush(lp_proxy_t *p);
void lp__sched_on_flush(uv_check_t *h);

/* handoff/jobref.c, any thread that holds a reference: a reference to a job
 * dropped: the last frees it. */
void lp__job_release(lp_job_t *job);
/* The job's references to its batches' answers, dropped once its client is
 * written: a batch's answer goes with the last job it serves. */
void lp__job_drop_outputs(lp_job_t *job);

/* Why a request was refused: status, code, message, more error members. */
typedef struct lp_perr_s {
  int status;
  const char *code;
  char msg[256];
  char extra[96];
} lp_perr_t;
/* common/perr.c: e set to status, code and the formatted message. */
void lp__perr_set(lp_perr_t *e, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void lp__perr_vset(lp_perr_t *e, int status, const char *code, const char *fmt, va_list ap)
    __attribute__((format(printf, 4, 0)));

/* infer.c: the bounds both routes put on a request's time fields. A deadline
 * (deadline_ms, or v2's timeout) past an hour counts as an hour, the longest
 * default_deadline_ms: the request's own bound answers it before that anyway. */
#define LP_MAX_DEADLINE_MS 3600000.0
/* A priority in [-1000, 1000]; beyond, the nearer end. */
int lp__clamp_priority(int64_t priority);

/* infer.c: parses a body into a job; on failure answers the client itself. */
lp_job_t *lp__infer_parse(lp_front_t *f, lp_http_req_t *req, const char *model_from_path,
                          size_t model_len);
/* A job of nseq sequences of lens[i] tokens laid end to end in tokens (copied
 * into the job's one block with its sequences and id), checked against the model's vocabulary and
 * shapes; field names the input in messages. deadline_ms: the client's, checked
 * finite and >= 0 by the caller; > 0 is clamped to LP_MAX_DEADLINE_MS; 0 or < 0
 * (none given) leaves the model's default_deadline_ms. NULL with e set on refusal. */
lp_job_t *lp__job_new(lp_front_t *f, lp_model_t *m, const int32_t *tokens, size_t ntokens,
                      const uint32_t *lens, size_t nseq, int multi, int priority, double deadline_ms,
                      const char *id_json, size_t id_len, const char *field, lp_perr_t *e);
/* The same, with text (when not NULL): the one sequence's tokens as the
 * client wrote them between the brackets; when that is digits, commas and
 * whitespace only, it is kept in the job's block without the whitespace, the
 * form lp_buf_i32_list writes ("1,2,3"), so the batch writer copies it
 * (lp_seq_ref_t.text) instead of writing the numbers again. */
lp_job_t *lp__job_new_text(lp_front_t *f, lp_model_t *m, const int32_t *tokens, size_t ntokens,
                           const uint32_t *lens, size_t nseq, int multi, int priority,
                           double deadline_ms, const char *id_json, size_t id_len,
                           const char *text, size_t text_len, const char *field, lp_perr_t *e);
/* Ties job to the request it answers: its request id, its span's traceparent
 * and the client's tracestate (a copy; left out if memory is short, as the
 * trace context is advice) go with it into batches. */
void lp__job_bind(lp_job_t *job, lp_http_req_t *req);

/* sched/job.c: whether each sequence fits a shape the model can run now: 0,
 * or -1 with e. */
int lp__job_check_shapes(lp_job_t *job, const char *field, lp_perr_t *e);

/* model.c: admission, shape states, the core's events and actions */
int lp__model_init(lp_model_t *m, lp_proxy_t *p, const lp_model_config_t *cfg);
void lp__model_close(lp_model_t *m);
/* Hands job to the core; on refusal answers and frees it. Returns 0 or -1. */
int lp__model_admit(lp_model_t *m, lp_job_t *job);
/* Time passes: the core's tick, then its actions. */
void lp__model_schedule(lp_model_t *m);
/* Drains the core's actions (SEND, OUTPUT, ANSWER, HEALTH) and arms its wake. */
void lp__model_pump(lp_model_t *m);
/* The proxy's clock for the core. */
static inline uint64_t lp__now(void) { return uv_hrtime(); }
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

/* job.c: a request's end, exactly once */
/* Runs on the front that owns the client: writes the answer of a job the
 * scheduler is done with (its outputs' spans formatted here, or its error),
 * then drops the job's references to the batches' answers. */
void lp__job_deliver(lp_front_t *f, lp_job_t *job, lp_http_req_t *req);
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

/* v2link.c: Open Inference Protocol backends */
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
/* wire/open.c, whichever thread holds the batch (its front, or the scheduler
 * once it is back): frees the batch's decoded v2 answer, if any. */
void lp__v2_close(lp_batch_t *bt);

/* ---- wire/: the backend wire, on the front that sends a batch: its body
 * written, its transfer run, its answer opened; its caller calls down, answers come
 * up through the on_done it sets in the batch ---- */
/* transfer.c: starts bt's transfer on up (its url, headers, gather list or
 * body, bounds, set); when it ends, its outcome is in bt (a 200 answer opened
 * for slicing: lp__answer_open) and bt->on_done runs on up's loop. 0, or
 * -ENOMEM when it could not start. */
int lp__transfer_start(lp_upstream_t *up, lp_batch_t *bt);
/* v2body.c: bt's Open Inference Protocol request (bt->body, or its gather
 * list for binary INT32 rectangles), url-less: headers set. Reads only the
 * batch (and the jobs it pins). 0 or -ENOMEM. */
int lp__v2_body_write(lp_batch_t *bt);
/* open.c: a 200 answer indexed (JSON: bt->scatter) or decoded and checked
 * (v2: bt->v2msg) against the batch it answers: 0, or -EPROTO/-ENOMEM with
 * bt->open_err. Reads only the batch. */
int lp__answer_open(lp_batch_t *bt);
/* sched/v2probe.c: asks the backend whether each shape's model is ready;
 * answers set its states. */
void lp__v2_probe_shapes(lp_backend_t *b);

/* v2front.c: Open Inference Protocol clients */
/* Handles /v2 routes; returns 0 when req is not one. */
int lp__v2_route(lp_front_t *f, lp_http_req_t *req);
void lp__v2_reject(lp_front_t *f, lp_http_req_t *req, int status, const char *code, const char *msg);
void lp__v2_reject_job(lp_front_t *f, lp_http_req_t *req, int status, const char *code, const char *msg,
                       const lp_job_t *job);
/* sched/v2pages.c: the model a v2 path names (n bytes; NULL: none), and the
 * name of a model's output tensor. */
lp_model_t *lp__v2_find_model(lp_proxy_t *p, const lp_config_t *c, const char *name, size_t n);
const char *lp__v2_output_name_of(const lp_model_config_t *c);
const char *lp__v2_output_name(const lp_model_t *m);
/* A v2 job's answer body (its sequences' outputs as one tensor), its content
 * type and extra header lines. -EPROTO when the outputs are not numbers,
 * -EDOM when its parts came in different datatypes or shapes. */
int lp__v2_answer(lp_job_t *job, int per_segment, lp_buf_t *body, const char **ctype, char *hdr,
                  size_t hdrlen);

/* batch.c: rectangles sent upstream and their answers */
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

/* backend.c */
/* What a probe's answer may hold: health and readiness (whose body is not
 * read), and shape lists or model metadata (a few shapes, a few tensors). */
#define LP_HEALTH_ANSWER_MAX (4u << 10)
#define LP_PROBE_ANSWER_MAX (64u << 10)
void lp__backends_start(lp_proxy_t *p);
/* The core's verdict on b from its batches (a HEALTH action). */
void lp__backend_health_changed(lp_backend_t *b, int up);
/* The shell's record of a health change, whoever decided it (logged). */
void lp__backend_note_health(lp_backend_t *b, int healthy);
/* Shape k was found missing on b (mismatch, 404, not ready): asked about again
 * after a backoff. The caller sets its state. */
void lp__backend_shape_missing(lp_backend_t *b, int k);
/* Shape k is there after all: nothing to ask about it. */
void lp__backend_shape_found(lp_backend_t *b, int k);

/* front/tei.c: text-embeddings-inference's POST routes (route: LP_ROUTE_TEI_*). */
void lp__tei_request(lp_front_t *f, lp_http_req_t *req, int route);
/* reject.c: an error in TEI's shape, counted under route and logged as every refusal. */
void lp__tei_reject(lp_front_t *f, lp_http_req_t *req, int route, int status, const char *type,
                    const char *code, const char *msg, const lp_job_t *job);
/* A finished TEI job's error: lanepack's status and code as TEI's (queue full
 * 429 overloaded, too long 422 tokenizer, a backend's failure 424 backend). */
void lp__tei_reject_job(lp_front_t *f, lp_http_req_t *req, int route, int status, const char *code,
                        const char *msg, const lp_job_t *job);
/* The answer's body: /embed's vectors, /rerank's ranks by score, and (in
 * teiapi.c) /predict's, /embed_all's and /similarity's. -ENOTSUP when an
 * output is not of the kind the route needs, -EPROTO when it is not numbers,
 * -ENOMEM. */
int lp__tei_body(lp_front_t *f, lp_buf_t *out, const lp_job_t *job);

/* front/teiapi.c: the rest of TEI 1.9's API. GET /info (the model's limits from
 * the configuration) and POST /decode are answered at once; GET /health is
 * readiness in TEI's shape (pages.c). */
void lp__tei_info(lp_front_t *f, lp_http_req_t *req);
void lp__tei_decode(lp_front_t *f, lp_http_req_t *req, const lp_tei_req_t *r, const lp_tok_t *t);
int lp__tei_predict_body(lp_front_t *f, lp_buf_t *out, const lp_job_t *job);
int lp__tei_embed_all_body(lp_front_t *f, lp_buf_t *out, const lp_job_t *job);
int lp__tei_similarity_body(lp_front_t *f, lp_buf_t *out, const lp_job_t *job);
/* Whether the model's configured outputs can serve TEI's route kind
 * (LP_TEI_*): NULL, or TEI's message for a model of the wrong type. */
const char *lp__tei_wrong_kind(const lp_model_config_t *mc, int kind);

/* embeddings.c (a front's): POST /v1/embeddings, OpenAI's embeddings API. */
void lp__embeddings_request(lp_front_t *f, lp_http_req_t *req);
/* An error in OpenAI's shape (param: the request field at fault, or NULL),
 * counted and logged as every refusal. */
void lp__openai_reject(lp_front_t *f, lp_http_req_t *req, int status, const char *hdr, const char *code,
                       const char *msg, const char *param, const lp_job_t *job);
/* The answer's body: every sequence's vector in input order, the model, the
 * usage. -EPROTO when an output is not a vector of numbers, -ENOMEM. */
int lp__openai_body(lp_front_t *f, lp_buf_t *out, const lp_job_t *job);
/* A finished sequence's output read as a vector into f->vec: the count, or
 * -ENOTSUP when it is not one output for the sequence (a value per token; a
 * score unless scalar_ok, which reads it as a vector of one), -EPROTO when it
 * is not an array of numbers, -ENOMEM. */
long lp__seq_vector(lp_front_t *f, const lp_seq_t *s, int scalar_ok);
/* A backend's vector of n values for one of job's embeddings: n, or -EPROTO when it is empty, shorter than the model's
 * embedding.dimensions (job->embed_dims) or not as long as the request's
 * first (*first, 0 before it). */
long lp__check_vector(const lp_job_t *job, long n, long *first);
/* job.c: a finished sequence's output as JSON text (its span of the answer). */
void lp__put_output(lp_buf_t *b, const lp_seq_t *s);

/* batchview.c: the recent-batches ring fed as each batch leaves (after its
 * transfer started) and ends (GET /v1/batches/recent is rendered from a copy
 * by front/pages.c). */
void lp__batchview_sent(lp_model_t *m, lp_batch_t *bt, const lp_disp_action_t *a);
void lp__batchview_answered(lp_model_t *m, const lp_batch_t *bt, lp_disp_outcome_t outcome, int http_status,
                            uint64_t device_ns, uint64_t now);

/* front/view.c: GET / where /metrics is served, the live view's static page
 * (embedded at build time; it holds no data and fetches /v1/batches/recent). */
void lp__view_page(lp_front_t *f, lp_http_req_t *req);

/* status.c: the padding answer of /v1/buckets/advice */
int lp__render_advice(lp_proxy_t *p, lp_model_t *m, uint32_t k, lp_buf_t *out, char *err,
                      size_t errlen);

/* advice.c (the scheduler's thread): /v1/buckets/advice for a page job. The
 * padding answer at once; with ?p99_ms= the shapes the simulator finds best
 * for the observed lengths, device times and rate (?rate= replaces the
 * observed one), computed on a worker of libuv's pool one at a time, equal
 * queries sharing one computation, cached; 429 advisor_busy past the queue's
 * bound. The job goes back to its front (lp__job_hand_back), now or when computed. */
void lp__advice_page(lp_proxy_t *p, lp_job_t *job);
/* Frees the computations still queued (the process is ending). */
void lp__advice_free(lp_proxy_t *p);

enum { LP_ROUTE_INFER = 0, LP_ROUTE_MODELS, LP_ROUTE_HEALTHZ, LP_ROUTE_READYZ, LP_ROUTE_METRICS,
       LP_ROUTE_ADVICE, LP_ROUTE_OTHER, LP_ROUTE_V2_INFER, LP_ROUTE_V2, LP_ROUTE_EMBEDDINGS,
       LP_ROUTE_TEI_EMBED, LP_ROUTE_TEI_RERANK, LP_ROUTE_TEI_TOKENIZE, LP_ROUTE_BATCHES, LP_ROUTE_VIEW,
       LP_ROUTE_TEI_PREDICT, LP_ROUTE_TEI_EMBED_ALL, LP_ROUTE_TEI_SIMILARITY, LP_ROUTE_TEI_DECODE,
       LP_ROUTE_TEI_EMBED_SPARSE, LP_ROUTE_TEI_INFO, LP_ROUTE_TEI_HEALTH };

#endif
