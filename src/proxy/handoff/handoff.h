/* What crosses between the threads (src/proxy/handoff/): jobs (client
 * requests) and their sequences, batches, the answers they share, control
 * messages, and the mailboxes and wake-ups that carry them; who owns which
 * field when is written at each struct. The snapshots the pages render are in
 * handoff/snapshot.h, the tokenizer workers' jobs in tokwork/tokwork.h. */
#ifndef LANEPACK_PROXY_HANDOFF_H
#define LANEPACK_PROXY_HANDOFF_H

#include "common/common.h"

#include "lanepack/batchjson.h"
#include "lanepack/buf.h"
#include "lanepack/config.h"
#include "lanepack/dispatch.h"
#include "lanepack/httpd.h"
#include "lanepack/layout.h"
#include "lanepack/rectbin.h"
#include "lanepack/scatter.h"
#include "lanepack/tensor.h"
#include "lanepack/trace.h"
#include "lanepack/upstream.h"
#include "lanepack/v2.h"

typedef struct lp_proxy_s lp_proxy_t;
typedef struct lp_model_s lp_model_t;
typedef struct lp_job_s lp_job_t;
typedef struct lp_batch_s lp_batch_t;
typedef struct lp_front_s lp_front_t;
typedef struct lp_ctl_s lp_ctl_t;
typedef struct lp_backend_s lp_backend_t;
typedef struct lp_snap_s lp_snap_t;
typedef struct lp_tokpool_s lp_tokpool_t;

/* handoff/wake.c: one thread waking another's loop: an eventfd the owner's loop polls
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

/* handoff/mailbox.c: a thread's inbox. Other threads push under the mutex; the owner's
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

#define LP_ROUTE_COUNT 22

/* Room left in front of an answer's body for its status line and headers: the
 * body is built once, in the buffer that is written, and the head is put just
 * before it. */
#define LP_HEAD_ROOM 512

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

/* handoff/answer.c. take moves body in (it is left empty); copy copies len bytes;
 * both give the caller its reference, or NULL without memory. adopt moves a
 * tensor decoded from body in (its ints and reals are the answer's now). */
lp_answer_t *lp__answer_take(lp_buf_t *body);
lp_answer_t *lp__answer_copy(const void *data, size_t len);
void lp__answer_adopt(lp_answer_t *a, lp_tensor_t *t);
void lp__answer_ref(lp_answer_t *a);
void lp__answer_unref(lp_answer_t *a); /* NULL: nothing */

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

/* handoff/answer.c: a finished sequence's output as JSON text (its span of the answer). */
void lp__put_output(lp_buf_t *b, const lp_seq_t *s);

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
  lp_proxy_t *proxy;      /* the scheduler's context, set by it as it takes the job from its inbox */
  lp_model_t *model;
  lp_front_t *front;      /* whose client it is */
  unsigned front_index;   /* ... its index (lp_front_s.index), set by the front that makes
                             the job: the scheduler's record of it is p->sfronts[front_index] */
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
  /* the client's protocol, the front's (set as it parses, read as it answers),
   * multi, v2 and openai read by the scheduler too (to name a field as the route
   * does); none of v2, openai, tei: lanepack's
   * own /v1/infer */
  int multi;              /* "inputs" form: answers "outputs" */
  int v2;                 /* an Open Inference Protocol client: answered as a tensor */
  int openai;             /* an OpenAI embeddings client: answered in its shapes */
  int tei;                /* a TEI client (its LP_ROUTE_TEI_*, else 0): answered in its shapes */
  uint32_t embed_dims;    /* /v1/embeddings, /embed: the model's embedding.dimensions (0: none),
                             the least a backend's vector may hold */
  /* FRONT: what each protocol's answer needs, only the member the flag above
   * names written or read */
  union {
    struct {              /* /v1/embeddings (front/embeddings.c) */
      int base64;         /* its vectors as base64 float32 */
      int normalize;      /* ... scaled to unit length (its model's embedding.normalize) */
      uint32_t dims;      /* ... cut to their first values (its "dimensions"); 0 = whole */
      size_t tokens;      /* its tokens, for "usage" */
      char model[LP_NAME_MAX]; /* the model it named, echoed */
    } openai;
    struct {              /* TEI's routes (front/tei.c, front/teiapi.c) */
      int normalize;      /* /embed: unit-length vectors */
      int raw_scores;     /* /rerank, /predict: scores without the sigmoid */
      char *texts;        /* /rerank with return_text: the texts, NUL-separated; owned */
      uint32_t dims;      /* /embed: vectors cut to their first values (its "dimensions"); 0 = whole */
      int single;         /* /predict of one input: answered without the outer list */
    } tei;
    struct {              /* /v2/models/.../infer (front/v2front.c) */
      int binary;         /* answered in binary */
      size_t rows;        /* k of its [k, n] input_ids */
    } v2;
  } proto;
  /* v2 only, written by the scheduler (sched/job.c), read by the front once
   * handed back: its outputs as a v2 backend answered them: each sequence's
   * out holds raw little-endian values of v2_dtype, with trailing dimensions
   * v2_dims (the output's after its leading ones); LP_DT_INVALID: JSON text
   * (lanepack wire) */
  lp_dtype_t v2_dtype;
  int v2_mixed;           /* parts came in different datatypes or trailing shapes */
  int v2_ndim;
  int64_t v2_dims[LP_TENSOR_MAX_DIMS];
};

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
  unsigned front_index;   /* the front whose loop runs its transfer (p->fronts[i]), written
                             by the scheduler at the hand-out; read back by it (that
                             front's batches_out in p->sfronts) */
  int in_flight;          /* its transfer is running */
  lp_batch_t *next_failed;/* in the model's list of batches whose start failed */
  uint64_t view_ticket;   /* its entry in the recent-batches ring; 0: none */
};

/* handoff/jobref.c (either thread, on a job it holds): the longest wait
 * before dispatch and at the backend among job's sequences (those never sent
 * count for nothing); and ns as "ms.mmm". */
void lp__job_times(const lp_job_t *job, uint64_t *queue_ns, uint64_t *backend_ns);

void lp__put_ms(lp_buf_t *b, uint64_t ns);

/* handoff/jobref.c, any thread that holds a reference: a reference to a job
 * dropped: the last frees it. */
void lp__job_release(lp_job_t *job);
/* The job's references to its batches' answers, dropped once its client is
 * written: a batch's answer goes with the last job it serves. */
void lp__job_drop_outputs(lp_job_t *job);

enum { LP_ROUTE_INFER = 0, LP_ROUTE_MODELS, LP_ROUTE_HEALTHZ, LP_ROUTE_READYZ, LP_ROUTE_METRICS,
       LP_ROUTE_ADVICE, LP_ROUTE_OTHER, LP_ROUTE_V2_INFER, LP_ROUTE_V2, LP_ROUTE_EMBEDDINGS,
       LP_ROUTE_TEI_EMBED, LP_ROUTE_TEI_RERANK, LP_ROUTE_TEI_TOKENIZE, LP_ROUTE_BATCHES, LP_ROUTE_VIEW,
       LP_ROUTE_TEI_PREDICT, LP_ROUTE_TEI_EMBED_ALL, LP_ROUTE_TEI_SIMILARITY, LP_ROUTE_TEI_DECODE,
       LP_ROUTE_TEI_EMBED_SPARSE, LP_ROUTE_TEI_INFO, LP_ROUTE_TEI_HEALTH };

#endif
