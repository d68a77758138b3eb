/* The proxy's configuration: loaded from a JSON file, overridden by flags,
 * validated with errors that name the key, printed back as JSON. */
#ifndef LANEPACK_CONFIG_H
#define LANEPACK_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "lanepack/bucket.h"
#include "lanepack/packer.h"

#define LP_MAX_MODELS 16
#define LP_MAX_BACKENDS 16
#define LP_URL_MAX 256
#define LP_NAME_MAX 64
/* Bounds on any shape, configured or reported by a backend. */
#define LP_MAX_LANES 4096
#define LP_MAX_BUCKET (1u << 20)

typedef enum { LP_PROTO_LANEPACK = 0, LP_PROTO_V2 } lp_protocol_t;

/* How a "protocol": "v2" model talks to its backends (Open Inference Protocol). */
typedef struct lp_v2_config_s {
  char model[128];        /* name template: {lanes}, {bucket}, {model}; "" = the model's name */
  int binary;             /* binary tensors both ways (else JSON data) */
  char output[64];        /* the output to read; "" = the answer's first */
  int per_segment;        /* output_kind: per_segment, else per_token */
  int kind_set;           /* output_kind was given (else it follows the model's outputs) */
  char inputs[3][64];     /* names of input_ids, segment_ids, position_ids; "" = not sent */
  int int64;              /* INT64 token tensors, else INT32 */
} lp_v2_config_t;

/* What a model's backend returns per sequence (its "outputs"). ANY: what
 * each answer says it is (the JSON contract's member, v2's output_kind and
 * the output's shape), checked route by route; the others are also checked
 * against every answer, which must be of that kind. */
typedef enum {
  LP_OUTPUTS_ANY = 0,
  LP_OUTPUTS_PER_TOKEN,   /* a value or a vector per token (a token model, hidden states) */
  LP_OUTPUTS_PER_SEGMENT, /* a vector per sequence (an embedding model) */
  LP_OUTPUTS_SCORE        /* one score per sequence (a cross-encoder), or one per label (a classifier) */
} lp_outputs_t;
const char *lp_outputs_name(lp_outputs_t o);

/* A classifier's labels (TEI's id2label, in id order): /predict names each score by them. */
#define LP_MAX_LABELS 64 /* emotion sets have 28; more is a vocabulary, not classes */
#define LP_LABEL_MAX 48

typedef struct lp_model_config_s {
  char name[LP_NAME_MAX];
  lp_bucket_set_t shapes;
  char backends[LP_MAX_BACKENDS][LP_URL_MAX];
  size_t nbackends;
  int32_t pad_id;
  int64_t vocab_size;           /* token ids must be in [0, vocab_size); 0 = [0, 2^31) */
  lp_algo_t packer;
  uint32_t max_segments_per_lane;
  uint64_t max_wait_ms;
  size_t max_queue_requests;
  uint64_t max_queue_tokens;
  uint32_t max_inflight;        /* cap on batches in flight per backend; 0 = none beyond one waiting per device (2 x devices) */
  uint32_t devices;             /* per backend, until a backend reports its own */
  double stall_factor;          /* a batch past this many times its expected time is hedged; 0 = never */
  uint64_t stall_min_ms;        /* ... and past its expected time by at least this much */
  struct {                      /* "cost_ms": seeds the device clock per shape; else learned */
    uint32_t lanes, bucket;
    uint64_t ms;
  } cost_spec[LP_BUCKET_MAX_SHAPES];
  size_t ncosts;
  uint64_t backend_timeout_ms;
  int ragged;                   /* GPU backend: flat token budget, cu_seqlens */
  uint32_t ragged_max_tokens;
  uint64_t default_deadline_ms; /* 0 = none */
  uint32_t max_retries;         /* tries after the first, per sequence */
  uint64_t retry_backoff_ms;    /* first backoff; doubles per retry */
  uint64_t max_request_ms;      /* a request's longest stay; 0 = derived from the above */
  uint64_t max_queue_bytes;     /* memory queued requests may hold */
  uint64_t max_batch_tokens;    /* lanes x bucket of any shape, at most */
  uint64_t max_output_value_bytes; /* an answer's bytes per token slot, at most (its bound) */
  lp_protocol_t protocol;
  lp_v2_config_t v2;
  /* "tokenizer": text inputs become token ids on the front that read them */
  char sentencepiece[LP_URL_MAX]; /* a SentencePiece model file; "" = token ids only */
  char huggingface[LP_URL_MAX];   /* a Hugging Face tokenizer.json instead; "" = none */
  char sentencepiece_options[64]; /* its encode options, e.g. "bos:eos"; "" = none */
  char pair_template[256];        /* /rerank's (query, text) layout, e.g. "<s> $A </s></s> $B </s>"; "" = none */
  /* "embedding": what /v1/embeddings does with the backend's vectors */
  int embed_normalize;            /* scaled to unit length (L2) */
  uint32_t embed_dimensions;      /* their length, which clients may cut them to (Matryoshka); 0 = not cut */
  lp_outputs_t outputs;           /* what the backend returns per sequence */
  char labels[LP_MAX_LABELS][LP_LABEL_MAX]; /* "labels": a classifier's, score k named labels[k] */
  size_t nlabels;
} lp_model_config_t;

typedef struct lp_config_s {
  char listen[LP_URL_MAX];
  char admin_listen[LP_URL_MAX];     /* "" = admin routes on the main listener */
  char auth_tokens_file[LP_URL_MAX]; /* "" = no client authentication */
  char access_log[LP_URL_MAX]; /* JSON lines: "" off, "-" standard error, else a file appended to */
  double access_log_sample;    /* share of successful requests logged (errors always) */
  int log_level;                /* LP_LOG_* */
  size_t max_header_bytes;
  size_t max_body_bytes;
  size_t max_connections;
  size_t max_pipeline;
  size_t max_unsent_bytes;      /* written to a client and not yet read: over it, stop reading it */
  size_t max_unsent_bytes_total; /* answers held for clients, the whole process (httpd.h) */
  size_t max_body_bytes_in_flight; /* bodies being received, all clients together; 0 = not
                                      given: see lp_config_body_budget */
  uint64_t idle_timeout_ms;
  uint64_t max_requests_per_connection; /* answers before Connection: close; 0 = no limit */
  uint64_t request_timeout_ms;
  uint32_t max_sequences_per_request;
  uint64_t drain_timeout_ms;
  uint64_t drain_delay_ms;     /* after SIGTERM: not ready, still accepting, this long */
  uint64_t health_interval_ms;
  uint32_t unhealthy_after;     /* consecutive failures */
  /* front loops (accept, read, parse, answer), each a thread around the one
   * scheduler; 0 = one per core the process may use (lp_config_threads) */
  uint32_t threads;
  /* tokenizer workers, the threads that turn text into ids off every loop;
   * 0 = one per core the process may use (lp_config_tokenizer_threads) */
  uint32_t tokenizer_threads;
  /* how much nicer than the process the workers run (and SCHED_BATCH);
   * 0 = at the loops' priority */
  uint32_t tokenizer_nice;
  /* bytes of text the workers may hold (waiting or being tokenized), all
   * requests together: past it a request with text gets 429 */
  uint64_t tokenizer_queue_bytes;
  lp_model_config_t models[LP_MAX_MODELS];
  size_t nmodels;
} lp_config_t;

/* Bodies being received may hold this much together: max_body_bytes_in_flight,
 * or when not given LP_BODY_BUDGET_DEFAULT but at least one largest body. */
#define LP_BODY_BUDGET_DEFAULT (256u * 1024 * 1024)
/* max_unsent_bytes_total when not given: answers held for clients that have
 * not taken them, the whole process. A quarter of the bodies' budget: an
 * answer is mostly written as it is made, and what waits is a slow or idle
 * client's; 64 MiB holds a thousand streamed pieces or a few of the largest
 * v2 answers. */
#define LP_UNSENT_TOTAL_DEFAULT (64u * 1024 * 1024)
size_t lp_config_body_budget(const lp_config_t *c);

/* The most front threads a configuration may ask for. */
#define LP_MAX_THREADS 256
/* The front loops to run: c->threads, or for 0 one per core the process may
 * use (its affinity mask), at most LP_MAX_THREADS. */
uint32_t lp_config_threads(const lp_config_t *c);
/* The tokenizer workers to run: c->tokenizer_threads, or for 0 one per core
 * the process may use, at most LP_MAX_THREADS. */
uint32_t lp_config_tokenizer_threads(const lp_config_t *c);
/* The default of tokenizer_queue_bytes: 64 MiB, eight bodies of the default
 * max_body_bytes, so a burst of large texts waits rather than being refused,
 * while what a flood of text can pin stays a fraction of the body budget. */
#define LP_TOKENIZER_QUEUE_DEFAULT (64ull << 20)
/* The default of tokenizer_nice. Tokenizing is throughput work; the loops
 * (fronts, scheduler) are latency work that must get a core the moment they
 * wake. At +10 a woken loop weighs some 9 times a busy worker (CFS weights
 * 1024 and 110) while the workers still take every cycle nothing else wants;
 * 19 (as the shape advisor's) would leave text almost nothing beside a busy
 * backend or client on the same cores. The cost: beside other busy processes
 * text waits for them too (a 4 MiB text on the loaded 2-core machine: median
 * 20.3 ms, was 16.3; doc/benchmarks.md). */
#define LP_TOKENIZER_NICE_DEFAULT 10

/* Defaults: listen 127.0.0.1:8080, no models. */
void lp_config_default(lp_config_t *c);
/* Fills m with the defaults for a model named name. */
void lp_model_config_default(lp_model_config_t *m, const char *name);

/* Loads a JSON file on top of c. Returns 0 or -EINVAL with a message naming the
 * file and the key (e.g. "models.default.max_wait_ms: must be an integer >= 0"). */
int lp_config_load_file(lp_config_t *c, const char *path, char *err, size_t errlen);
/* Loads from a JSON text (same rules); name is used in messages. */
int lp_config_load_text(lp_config_t *c, const char *text, size_t len, const char *name, char *err,
                        size_t errlen);

/* Final checks (a model, a backend per model, shapes, ranges). */
int lp_config_validate(const lp_config_t *c, char *err, size_t errlen);

/* The effective configuration as JSON text (malloc'd, caller frees). */
char *lp_config_dump(const lp_config_t *c);

/* Whether next changes a key that applies only at restart (the table's
 * "at restart": listen, threads, the set of models, a model's shapes, wire
 * and tokenizer...): 1 with its path and values in what, e.g. "threads
 * changed (1 -> 2)", "models.m.shapes changed"; else 0. A reload refuses such a file. */
int lp_config_restart_diff(const lp_config_t *running, const lp_config_t *next, char *what, size_t whatlen);

/* Every key as doc/configuration.md's tables write it (markdown: name, type,
 * default, range, when it applies, what it does), from the table that loads
 * them; malloc'd, caller frees; NULL without memory. `lanepack --config-keys`. */
char *lp_config_keys_doc(void);

/* A piece's id in a tokenizer (ud: its lp_tok_t), or -1: the lookup
 * lp_tei_template_load is given. */
int32_t lp_config_piece_id(const void *ud, const char *piece);

/* The model's tokenizer, of the kind its configuration names (SentencePiece
 * with its options, or a tokenizer.json): owned by the caller (lp_tok_free),
 * or NULL with err saying why. */
struct lp_tok_s *lp_config_tok_load(const lp_model_config_t *m, char *err, size_t errlen);

const lp_model_config_t *lp_config_model(const lp_config_t *c, const char *name);

/* Reads bearer tokens, one per line of any length ('#' comments and blank lines
 * skipped, spaces around a token dropped) into *tokens (malloc'd, free with
 * lp_config_free_tokens). Returns 0, or -EINVAL with a message for a missing or
 * empty file, or one naming the line of a token that holds other than visible
 * ASCII or is longer than max_len (0: no bound). */
int lp_config_read_tokens(const char *path, size_t max_len, char ***tokens, size_t *n, char *err,
                          size_t errlen);
/* The longest token an Authorization header can carry under c's max_header_bytes,
 * with room left for the rest of a request. */
size_t lp_config_token_max(const lp_config_t *c);
void lp_config_free_tokens(char **tokens, size_t n);

#endif
