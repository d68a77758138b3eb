/* lanepack-loadgen: an open-loop (Poisson, latency from the intended send time)
 * or closed-loop HTTP load generator for lanepack, on libuv with its own
 * keep-alive client, on lanepack's JSON route, v2 or OpenAI's /v1/embeddings.
 * It checks answers against the emulator's formula, reads the proxy's fill from
 * /metrics, and reports like wrk2 and vegeta do. */
#include <assert.h>
#include <errno.h>

#ifndef LP_VERSION
#define LP_VERSION "0.1.0"
#endif

#include <getopt.h>
#include <llhttp.h>
#include <math.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include <jansson.h>

#include "embcheck.h"
#include "lanepack/arrivals.h"
#include "lanepack/buf.h"
#include "lanepack/emu.h"
#include "lanepack/hdr.h"
#include "lanepack/jscan.h"
#include "lanepack/lengths.h"
#include "lanepack/rng.h"
#include "lanepack/tokenizer.h"
#include "lanepack/v2.h"

#define container_of(ptr, type, member) ((type *)((char *)(ptr) - offsetof(type, member)))
#define MAX_STATUS 600
/* Sequences one request carries at most (--sequences-per-request, --batch). */
#define MAX_SEQS 64
/* Error codes counted by name; a run that meets more puts the rest under
 * "(other)": enough for every code lanepack answers, bounded against a server
 * that puts something new in every answer (v2's codes are in messages). */
#define MAX_CODES 32
#define CODE_LEN 48
/* The vocabulary when neither --vocab nor the proxy's GET /v1/models says
 * one: a common SentencePiece size. */
#define DEFAULT_VOCAB 32000

typedef struct lg_s lg_t;

/* A request's content: its sequences and the JSON body that carries them. */
typedef struct body_s {
  int32_t *tokens;        /* owned; NULL for text whose ids are not known here */
  uint32_t lens[MAX_SEQS];
  uint32_t lines[MAX_SEQS]; /* --text: the line each input is */
  int text;               /* --text: the inputs are strings */
  uint32_t nseq;
  uint64_t ntokens;
  lp_buf_t json;          /* owned: the body (a v2 binary body is JSON header + tensor) */
  size_t v2_header_len;   /* v2 binary: the JSON header's length */
} body_t;

typedef struct conn_s conn_t;

typedef struct req_s {
  uint64_t intended_ns;
  uint64_t sent_ns;       /* when it went on a connection (0: not yet) */
  body_t *body;           /* from the pool (borrowed), or owned when pool is 0 */
  int owned;
  struct req_s *next;     /* pending queue, or its connection's in-flight queue */
  conn_t *conn;
  uv_write_t w;           /* its write; the request lives until it completes */
  char head[320];
  int writing, done;
} req_t;

struct conn_s {
  lg_t *lg;
  uv_tcp_t tcp;
  uv_connect_t creq;
  llhttp_t parser;
  int connected, closing, in_free;
  lp_buf_t body;           /* the answer being read */
  req_t *q_head, *q_tail;  /* requests in flight, answers come in this order */
  unsigned nq;
  req_t *first;            /* the request that opened it, sent once connected */
  uint64_t opened_ns;
  /* The lists a connection is on; it leaves each before it is freed
   * (on_conn_closed checks): the free list while it is connected, open and has
   * room (in_free says so), and every connection of the worker until closed. */
  struct conn_s *prev_free, *next_free;
  struct conn_s *prev_all, *next_all;
};

typedef struct {
  double rate;            /* 0: closed loop */
  uint64_t duration_ns, warmup_ns;
} phase_t;

typedef struct {
  char code[CODE_LEN];
  uint64_t n;
} code_count_t;

typedef struct {
  /* answered (every request accounted, connection errors and timeouts too) =
   * ok + failed + mismatches: a mismatch (an answer 200 whose content is
   * wrong) is not a failure, counted apart */
  uint64_t ok, failed, mismatches, by_status[MAX_STATUS], conn_errors, timeouts, tokens;
  code_count_t codes[MAX_CODES]; /* error answers by the code in their body */
  size_t ncodes;
  uint64_t codes_other;   /* error answers whose code found no room */
  uint64_t client_errors;  /* requests this client could not build or start */
  uint64_t unsent_timeouts;/* of the timeouts: never got a connection (too few) */
  uint64_t sent, answered;
  uint64_t conns_opened;  /* more than --connections: the server closed some */
  uint64_t last_ns;       /* when the last answer came */
  lp_hdr_t lat;           /* the ok requests' (what the benchmarks compare) */
  lp_hdr_t lat_all;       /* every answered request's, whatever its status or content */
  double elapsed_s;
  /* proxy side */
  double fill, pad_per_real;
  double busy; /* share of the devices' time spent on batches over the run; < 0 unknown */
  uint64_t batches;
  int have_proxy;
  uint64_t *per_second;   /* completions per second of the phase; owned */
  size_t nseconds;
} stats_t;

struct lg_s {
  uv_loop_t *loop;
  uv_loop_t own_loop;     /* each worker thread runs its own loop */
  char rbuf[65536];       /* read buffer: every read is parsed before the next */
  int worker;
  struct sockaddr_storage addr;
  char host[256];
  int port;
  char path[256];
  char model[64];
  int v2, v2_binary;      /* --protocol v2 [--binary] */
  int openai, base64;     /* --protocol openai [--encoding base64] */
  unsigned dims;          /* --dims: floats per vector the emulator answers (openai --verify) */
  char *text;             /* --text: the file, each line ended by a NUL (template's, owned) */
  char **lines;           /* --text: the inputs, one per line, into text (template's, owned) */
  size_t nlines, next_line;
  lp_tok_t *tok;          /* --tokenizer: the ids of each line, as the proxy makes them (template's) */
  int32_t *seen;          /* --text without ids: each line's first vector's key, -1 none (the worker's) */
  lp_lengths_t lengths;
  lp_rng_t rng;
  body_t **pool;          /* prebuilt bodies, cycled, so the client stays cheap */
  size_t npool, next_body;
  uint32_t vocab, seqs_per_req;
  int verify, per_segment;
  size_t max_conns, nconns;
  unsigned depth;         /* requests in flight per connection (pipelining) */
  size_t users;           /* closed loop: requests in flight */
  uint64_t max_requests, timeout_ns;
  conn_t *free_conns;     /* connected, not closing, with room: exactly those */
  conn_t *all_conns;      /* every connection not yet freed */
  req_t *pending_head, *pending_tail;
  size_t npending, inflight;
  uv_timer_t arrivals, ticker;
  phase_t ph;
  uint64_t t0, t_end, next_arrival, generated;
  int stopping;
  stats_t st;
  int tty;
  int printed_mismatch;
  int32_t *vgot, *vwant;  /* --verify scratch, reused; owned */
  size_t vcap;
  FILE *trace;            /* --trace: a line per request counted (shared by the workers) */
};

static uint64_t now_ns(void) { return uv_hrtime(); }

/* ---- requests ---- */

static void free_body(body_t *b) {
  free(b->tokens);
  lp_buf_free(&b->json);
  free(b);
}

/* --text: the request's inputs are the next lines (cycled), with their ids
 * when the load generator has the proxy's tokenizer. 0 or -ENOMEM. */
static int text_inputs(lg_t *lg, body_t *r) {
  size_t cap = 0;
  r->text = 1;
  for (uint32_t i = 0; i < r->nseq; i++) {
    r->lines[i] = (uint32_t)(lg->next_line++ % lg->nlines);
    if (!lg->tok) continue;
    const char *l = lg->lines[r->lines[i]];
    long k = lp_tok_encode(lg->tok, l, strlen(l), r->tokens ? r->tokens + r->ntokens : NULL,
                           cap - (size_t)r->ntokens);
    if (k > (long)(cap - r->ntokens)) { /* room, and again */
      size_t c = cap ? cap : 256;
      while (c - r->ntokens < (size_t)k) c *= 2;
      int32_t *t = realloc(r->tokens, c * sizeof(int32_t));
      if (!t) return -ENOMEM;
      r->tokens = t;
      cap = c;
      k = lp_tok_encode(lg->tok, l, strlen(l), r->tokens + r->ntokens, cap - (size_t)r->ntokens);
    }
    if (k < 0) return (int)k;
    r->lens[i] = (uint32_t)k;
    r->ntokens += (uint64_t)k;
  }
  return 0;
}

/* OpenAI's input: a string or strings (--text), else an array of ids or an
 * array of such arrays; then the encoding asked for. */
static void put_openai_input(const lg_t *lg, const body_t *r, lp_buf_t *j) {
  lp_buf_puts(j, "\"input\": ");
  if (r->nseq > 1) lp_buf_puts(j, "[");
  uint64_t off = 0;
  for (uint32_t i = 0; i < r->nseq; i++) {
    if (i) lp_buf_puts(j, ",");
    if (r->text) {
      const char *l = lg->lines[r->lines[i]];
      lp_buf_json_str(j, l, strlen(l));
    } else {
      lp_buf_i32_array(j, r->tokens + off, r->lens[i]);
      off += r->lens[i];
    }
  }
  if (r->nseq > 1) lp_buf_puts(j, "]");
  lp_buf_printf(j, ", \"encoding_format\": \"%s\"", lg->base64 ? "base64" : "float");
}

static body_t *make_body(lg_t *lg) {
  body_t *r = calloc(1, sizeof(*r));
  if (!r) return NULL;
  r->nseq = lg->seqs_per_req;
  if (lg->lines) {
    if (text_inputs(lg, r)) {
      free(r->tokens);
      free(r);
      return NULL;
    }
  } else {
    uint64_t total = 0;
    for (uint32_t i = 0; i < r->nseq; i++) {
      /* v2: one tensor [k, n], every row as long as the first */
      r->lens[i] = lg->v2 && i ? r->lens[0] : lp_lengths_next(&lg->lengths, &lg->rng);
      total += r->lens[i];
    }
    r->ntokens = total;
    r->tokens = malloc((total + 1) * sizeof(int32_t));
    if (!r->tokens) {
      free(r);
      return NULL;
    }
    for (uint64_t k = 0; k < total; k++) r->tokens[k] = (int32_t)lp_rng_below(&lg->rng, lg->vocab);
  }
  lp_buf_t *j = &r->json;
  lp_buf_init(j);
  if (lg->v2) {
    lp_v2_out_t in = {.name = "input_ids", .dtype = LP_DT_INT32, .ndim = 2,
                      .shape = {r->nseq, r->lens[0]}, .data = r->tokens, .count = (size_t)r->ntokens};
    if (lp_v2_write(j, lg->v2_binary ? "\"id\":\"lg\",\"parameters\":{\"binary_data_output\":true}"
                                     : "\"id\":\"lg\"",
                    "inputs", &in, 1, lg->v2_binary, &r->v2_header_len)) {
      free_body(r);
      return NULL;
    }
    return r;
  }
  lp_buf_puts(j, "{");
  if (lg->model[0]) {
    lp_buf_puts(j, "\"model\": ");
    lp_buf_json_str(j, lg->model, strlen(lg->model));
    lp_buf_puts(j, ", ");
  }
  if (lg->openai) {
    put_openai_input(lg, r, j);
  } else if (lg->seqs_per_req == 1) {
    lp_buf_puts(j, "\"input_ids\": ");
    lp_buf_i32_array(j, r->tokens, r->lens[0]);
  } else {
    lp_buf_puts(j, "\"inputs\": [");
    uint64_t off = 0;
    for (uint32_t i = 0; i < r->nseq; i++) {
      if (i) lp_buf_puts(j, ",");
      lp_buf_i32_array(j, r->tokens + off, r->lens[i]);
      off += r->lens[i];
    }
    lp_buf_puts(j, "]");
  }
  lp_buf_puts(j, "}");
  if (j->oom) {
    free_body(r);
    return NULL;
  }
  return r;
}

static req_t *make_req(lg_t *lg, uint64_t intended) {
  req_t *r = calloc(1, sizeof(*r));
  if (!r) return NULL;
  r->intended_ns = intended;
  lg->st.sent += intended >= lg->t0 + lg->ph.warmup_ns; /* issued, on a connection or waiting for one */
  if (lg->npool) {
    r->body = lg->pool[lg->next_body++ % lg->npool];
  } else {
    r->body = make_body(lg);
    r->owned = 1;
    if (!r->body) {
      free(r);
      return NULL;
    }
  }
  return r;
}

static void free_req(req_t *r) {
  if (r->writing) { /* its write has not completed: freed by on_written */
    r->done = 1;
    return;
  }
  if (r->owned) free_body(r->body);
  free(r);
}

/* The head goes in the request; the body is sent from the pool. */
static void write_head(lg_t *lg, req_t *r) {
  char ihcl[64] = "";
  if (lg->v2 && lg->v2_binary)
    snprintf(ihcl, sizeof(ihcl), "Inference-Header-Content-Length: %zu\r\n", r->body->v2_header_len);
  int n = snprintf(r->head, sizeof(r->head),
                   "POST %s HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: %s\r\n%s"
                   "Content-Length: %zu\r\n\r\n",
                   lg->path, lg->host, lg->port,
                   lg->v2 && lg->v2_binary ? "application/octet-stream" : "application/json", ihcl,
                   r->body->json.len);
  if (n < 0 || (size_t)n >= sizeof(r->head)) n = (int)sizeof(r->head) - 1;
  r->head[n] = 0;
}

/* ---- verification ---- */

/* Finds member `key` of the top-level object; returns its value or NULL. */
static const char *find_member(const char *p, const char *end, const char *key) {
  p = lp_jscan_ws(p, end);
  if (p >= end || *p != '{') return NULL;
  p = lp_jscan_ws(p + 1, end);
  while (p < end && *p == '"') {
    int eq;
    p = lp_jscan_key(p, end, key, &eq);
    if (!p) return NULL;
    p = lp_jscan_ws(p, end);
    if (p >= end || *p != ':') return NULL;
    p = lp_jscan_ws(p + 1, end);
    if (eq) return p;
    p = lp_jscan_skip(p, end, LP_JSCAN_MAX_DEPTH);
    if (!p) return NULL;
    p = lp_jscan_ws(p, end);
    if (p < end && *p == ',') p = lp_jscan_ws(p + 1, end);
  }
  return NULL;
}

/* Says in why where an array of outputs at v first differs from want[0..len)
 * (sequence i's): the index, what was expected and what came; or that it
 * has another length, or holds something else than numbers. */
static void array_diff(const char *v, const char *end, uint32_t i, const int32_t *want, uint32_t len, char *why,
                       size_t whylen) {
  const char *p = lp_jscan_ws(v + 1, end);
  size_t k = 0;
  for (; p < end && *p != ']'; k++) {
    char num[64], *e; /* a copy: the answer is not NUL-terminated */
    size_t m = 0;
    while (p + m < end && m < sizeof(num) - 1 && strchr("+-0123456789.eE", p[m])) num[m] = p[m], m++;
    num[m] = 0;
    double x = strtod(num, &e);
    if (e == num) {
      snprintf(why, whylen, "sequence %u: output[%zu] is not a number: %.40s", i, k, p);
      return;
    }
    if (k < len && x != want[k]) {
      snprintf(why, whylen, "sequence %u (%u tokens): output[%zu] expected %d, got %.9g", i, len, k, want[k], x);
      return;
    }
    p = lp_jscan_ws(p + m, end);
    if (p < end && *p == ',') p = lp_jscan_ws(p + 1, end);
  }
  snprintf(why, whylen, "sequence %u: %u outputs expected (one per token), got %zu", i, len, k);
}

/* Checks sequence i's output at v (an array per token, or one value per
 * segment: its last token's); returns the byte after it or NULL; *ok, and
 * why when it is not. */
static const char *check_one(const char *v, const char *end, uint32_t i, const int32_t *tok, uint32_t len,
                             int32_t *scratch, int32_t *want, int *ok, char *why, size_t whylen) {
  *ok = 0;
  if (*v == '[') {
    size_t n;
    int err;
    const char *q = lp_jscan_int_array(v, end, scratch, len + 1, INT32_MIN, INT32_MAX, &n, &err);
    lp_emu_outputs(tok, len, want);
    *ok = q && n == len && memcmp(scratch, want, len * sizeof(int32_t)) == 0;
    if (!*ok) array_diff(v, end, i, want, len, why, whylen);
    return q ? q : lp_jscan_skip(v, end, LP_JSCAN_MAX_DEPTH);
  }
  char *e;
  long long x = strtoll(v, &e, 10);
  int32_t w = lp_emu_last(tok, len);
  *ok = e != v && x == w;
  if (e == v) snprintf(why, whylen, "sequence %u: the output is not a number or an array", i);
  else if (!*ok) snprintf(why, whylen, "sequence %u (%u tokens, one value): expected %d, got %lld", i, len, w, x);
  return e == v ? NULL : e;
}

/* A v2 answer: the output tensor [k, n] (per token) or [k] (per segment), in
 * either form (a binary body's JSON header ends where its object closes). */
static int verify_v2(const body_t *r, const char *body, size_t len, int32_t *want, char *why, size_t whylen) {
  const char *hend = lp_jscan_skip(lp_jscan_ws(body, body + len), body + len, LP_JSCAN_MAX_DEPTH);
  if (!hend) return snprintf(why, whylen, "the answer does not start with a JSON object"), 0;
  int64_t hl = hend == body + len ? -1 : (int64_t)(hend - body);
  lp_v2_msg_t m;
  char err[128];
  if (lp_v2_decode(&m, body, len, hl, 0, err, sizeof(err)))
    return snprintf(why, whylen, "not a v2 answer: %s", err), 0;
  int ok = m.n == 1;
  const lp_tensor_t *t = ok ? &m.t[0] : NULL;
  uint32_t n = r->lens[0];
  int per_token = ok && t->ndim == 2;
  ok = ok && (size_t)t->shape[0] == r->nseq &&
       (per_token ? (uint32_t)t->shape[1] == n && t->count == (size_t)r->nseq * n
                  : t->ndim == 1 && t->count == r->nseq);
  if (!ok)
    snprintf(why, whylen, "%d outputs, shape [%lld%s]: expected one of [%u, %u] (per token) or [%u]", m.n,
             m.n ? (long long)m.t[0].shape[0] : 0LL, m.n && m.t[0].ndim == 2 ? ", ..." : "", r->nseq, n,
             r->nseq);
  for (uint32_t i = 0; ok && i < r->nseq; i++) {
    lp_emu_outputs(r->tokens + (size_t)i * n, n, want);
    for (uint32_t k = per_token ? 0 : n - 1; ok && k < n; k++) {
      int64_t got = lp_tensor_int(t, per_token ? (size_t)i * n + k : i);
      ok = got == want[k];
      if (!ok && per_token)
        snprintf(why, whylen, "sequence %u (%u tokens): output[%u] expected %d, got %lld", i, n, k, want[k],
                 (long long)got);
      else if (!ok)
        snprintf(why, whylen, "sequence %u (%u tokens, one value): expected %d, got %lld", i, n, want[k],
                 (long long)got);
    }
  }
  lp_v2_msg_free(&m);
  return ok;
}

/* An OpenAI answer: every vector the emulator's for its ids (token arrays,
 * or text with --tokenizer); text without ids: each vector of the formula's
 * form, and a line's vector the same every time it is sent. */
static int verify_openai(lg_t *lg, const body_t *r, const char *body, size_t len, char *why, size_t whylen) {
  lp_embcheck_want_t w = {.model = lg->model, .ninputs = r->nseq, .tokens = r->tokens, .lens = r->lens,
                          .ntokens = r->ntokens, .dims = lg->dims, .base64 = lg->base64};
  int32_t keys[MAX_SEQS];
  int rc = lp_embcheck_answer(body, len, &w, keys, why, whylen);
  for (uint32_t i = 0; rc == 0 && r->text && !r->tokens && i < r->nseq; i++) {
    int32_t *seen = &lg->seen[r->lines[i]];
    if (*seen < 0) *seen = keys[i];
    else if (*seen != keys[i]) {
      snprintf(why, whylen, "data[%u] (line %u) starts %d, the same line got %d before", i,
               r->lines[i] + 1, keys[i], *seen);
      rc = -EPROTO;
    }
  }
  return rc == 0;
}

/* Whether an answer 200 holds the emulator's outputs for the request; when
 * not, why says what was expected and what came, where they first differ. */
static int verify(lg_t *lg, const body_t *r, const char *body, size_t len, char *why, size_t whylen) {
  if (lg->openai) return verify_openai(lg, r, body, len, why, whylen);
  const char *end = body + len;
  /* two reused arrays per worker: the answer's values and the expected ones */
  if (r->ntokens + 2 > lg->vcap) {
    size_t c = r->ntokens + 2;
    int32_t *a = realloc(lg->vgot, c * sizeof(int32_t));
    if (a) lg->vgot = a;
    int32_t *b = realloc(lg->vwant, c * sizeof(int32_t));
    if (b) lg->vwant = b;
    if (!a || !b) return snprintf(why, whylen, "out of memory to check the answer"), 0;
    lg->vcap = c;
  }
  int32_t *scratch = lg->vgot, *want = lg->vwant;
  if (lg->v2) return verify_v2(r, body, len, want, why, whylen);
  int multi = lg->seqs_per_req > 1;
  const char *v = find_member(body, end, multi ? "outputs" : "output");
  if (!v || (multi && *v != '[')) {
    snprintf(why, whylen, "no \"%s\" in the answer: %.200s", multi ? "outputs" : "output", body);
    return 0;
  }
  if (!multi) {
    int ok;
    check_one(v, end, 0, r->tokens, r->lens[0], scratch, want, &ok, why, whylen);
    return ok;
  }
  v = lp_jscan_ws(v + 1, end);
  uint64_t off = 0;
  int ok = 1;
  for (uint32_t i = 0; i < r->nseq && ok; i++) {
    v = check_one(v, end, i, r->tokens + off, r->lens[i], scratch, want, &ok, why, whylen);
    off += r->lens[i];
    if (v) {
      v = lp_jscan_ws(v, end);
      if (v < end && *v == ',') v = lp_jscan_ws(v + 1, end);
    } else if (ok) {
      snprintf(why, whylen, "\"outputs\" ends before sequence %u", i + 1);
      ok = 0;
    }
  }
  return ok;
}

/* ---- why an answer failed ---- */

/* Counts n error answers under code; past MAX_CODES names, under "(other)". */
static void count_code(stats_t *st, const char *code, uint64_t n) {
  for (size_t i = 0; i < st->ncodes; i++)
    if (strcmp(st->codes[i].code, code) == 0) {
      st->codes[i].n += n;
      return;
    }
  if (st->ncodes == MAX_CODES) {
    st->codes_other += n;
    return;
  }
  snprintf(st->codes[st->ncodes].code, CODE_LEN, "%s", code);
  st->codes[st->ncodes++].n = n;
}

/* An error answer's code, in its route's dialect: lanepack's and OpenAI's
 * {"error": {"code": ..}} (OpenAI's code may be null: then its "type"),
 * TEI's {"error": "..", "error_type": ..}, v2's {"error": "CODE: message"}
 * (the message itself when it starts with no code). "-" for a body that is
 * none of these. Kept to printable ASCII without quotes or backslashes, so
 * that the reports print it as it is. */
static void error_code(const char *body, size_t len, char *out, size_t outlen) {
  snprintf(out, outlen, "-");
  json_t *root = len ? json_loadb(body, len, 0, NULL) : NULL;
  json_t *e = json_object_get(root, "error");
  const char *code = NULL;
  size_t n = 0;
  if (json_is_object(e)) {
    code = json_string_value(json_object_get(e, "code"));
    if (!code) code = json_string_value(json_object_get(e, "type"));
  } else if (json_is_string(e)) {
    code = json_string_value(json_object_get(root, "error_type"));
    if (!code) {
      code = json_string_value(e);
      while (code[n] && (code[n] == '_' || (code[n] >= 'a' && code[n] <= 'z') || (code[n] >= '0' && code[n] <= '9')))
        n++;
      if (!n || code[n] != ':') n = 0; /* not "code: message": the message is what there is */
    }
  }
  if (code) snprintf(out, outlen, "%.*s", (int)(n ? n : strlen(code)), code);
  for (char *c = out; *c; c++)
    if (*c < 0x20 || *c > 0x7e || *c == '"' || *c == '\\') *c = '_';
  json_decref(root);
}

/* ---- connections ---- */

static void conn_send(conn_t *c, req_t *r);
static void dispatch_pending(lg_t *lg);

static void record(lg_t *lg, req_t *r, int status, const char *body, size_t len, int kind) {
  uint64_t t = now_ns();
  lg->inflight--;
  stats_t *st = &lg->st;
  int counted = r->intended_ns >= lg->t0 + lg->ph.warmup_ns;
  if (t > st->last_ns) st->last_ns = t;
  if (counted) {
    st->answered++;
    size_t sec = (size_t)((t - lg->t0) / 1000000000ull);
    if (sec < st->nseconds) st->per_second[sec]++;
    if (kind == 1) st->conn_errors++, st->failed++;
    else if (kind == 2) st->timeouts++, st->failed++, st->unsent_timeouts += r->sent_ns == 0;
    else {
      uint64_t us = (t - r->intended_ns) / 1000;
      char why[512];
      st->by_status[status > 0 && status < MAX_STATUS ? status : 0]++;
      lp_hdr_record(&st->lat_all, us);
      if (status != 200) {
        char code[CODE_LEN];
        st->failed++;
        error_code(body, len, code, sizeof(code));
        count_code(st, code, 1);
      } else if (lg->verify && !verify(lg, r->body, body, len, why, sizeof(why))) {
        st->mismatches++;
        if (lg->printed_mismatch++ < 3) fprintf(stderr, "lanepack-loadgen: mismatch: %s\n", why);
      } else {
        st->ok++;
        st->tokens += r->body->ntokens;
        lp_hdr_record(&st->lat, us);
      }
    }
    /* one fprintf per line: stdio locks it against the other workers' */
    if (lg->trace)
      fprintf(lg->trace, "%llu %llu %u %d %llu\n", (unsigned long long)r->intended_ns,
              (unsigned long long)r->body->ntokens, r->body->nseq, kind ? -kind : status,
              (unsigned long long)((t - r->intended_ns) / 1000));
  }
  free_req(r);
}

static void on_conn_closed(uv_handle_t *h) {
  conn_t *c = container_of(h, conn_t, tcp);
  lg_t *lg = c->lg;
  /* conn_close took it off the free list; nothing it carried is left */
  assert(!c->in_free && !c->q_head && !c->first);
  if (c->prev_all) c->prev_all->next_all = c->next_all;
  else lg->all_conns = c->next_all;
  if (c->next_all) c->next_all->prev_all = c->prev_all;
  lp_buf_free(&c->body);
  free(c);
  lg->nconns--;
  dispatch_pending(lg);
}

/* The free list, doubly linked so that a connection leaves it at once when it
 * fills up or closes (issue 33: one freed while still on it was taken again). */
static void free_list_add(conn_t *c) {
  lg_t *lg = c->lg;
  c->in_free = 1;
  c->prev_free = NULL;
  c->next_free = lg->free_conns;
  if (lg->free_conns) lg->free_conns->prev_free = c;
  lg->free_conns = c;
}

static void free_list_del(conn_t *c) {
  if (!c->in_free) return;
  if (c->prev_free) c->prev_free->next_free = c->next_free;
  else c->lg->free_conns = c->next_free;
  if (c->next_free) c->next_free->prev_free = c->prev_free;
  c->prev_free = c->next_free = NULL;
  c->in_free = 0;
}

/* Starts closing c: it leaves the free list now, so nothing takes it again;
 * all_conns keeps it until on_conn_closed frees it. */
static void conn_close(conn_t *c) {
  c->closing = 1;
  free_list_del(c);
  uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
}

static void conn_fail(conn_t *c, int kind) {
  if (c->closing) return;
  c->closing = 1;
  free_list_del(c);
  if (c->first) {
    req_t *r = c->first;
    c->first = NULL;
    record(c->lg, r, 0, NULL, 0, kind);
  }
  while (c->q_head) {
    req_t *r = c->q_head;
    c->q_head = r->next;
    record(c->lg, r, 0, NULL, 0, kind);
  }
  c->q_tail = NULL;
  c->nq = 0;
  conn_close(c);
}

/* A connection with room for another request goes (back) on the free list;
 * conn_send takes it off when it fills up, conn_close when it closes. */
static void conn_offer(conn_t *c) {
  lg_t *lg = c->lg;
  if (c->in_free || c->closing || !c->connected || c->nq >= lg->depth) return;
  free_list_add(c);
}

/* The most recently offered connection with room (it stays on the list until
 * it is full), or NULL. */
static conn_t *take_free(lg_t *lg) {
  return lg->free_conns;
}

/* After an answer: a closed-loop user sends again at once; else a waiting
 * request takes the room. */
static void conn_refill(conn_t *c) {
  lg_t *lg = c->lg;
  while (c->nq < lg->depth && !c->closing) {
    if (lg->ph.rate == 0 && !lg->stopping && now_ns() < lg->t_end && lg->inflight < lg->users &&
        !(lg->max_requests && lg->generated >= lg->max_requests)) {
      req_t *r = make_req(lg, now_ns());
      if (!r) break;
      lg->generated++;
      lg->inflight++;
      conn_send(c, r);
    } else if (lg->pending_head) {
      req_t *r = lg->pending_head;
      lg->pending_head = r->next;
      if (!lg->pending_head) lg->pending_tail = NULL;
      lg->npending--;
      conn_send(c, r);
    } else {
      break;
    }
  }
  conn_offer(c);
}

static int on_body(llhttp_t *p, const char *at, size_t n) {
  conn_t *c = p->data;
  lp_buf_append(&c->body, at, n);
  return 0;
}

static int on_message_complete(llhttp_t *p) {
  conn_t *c = p->data;
  req_t *r = c->q_head;
  if (r) {
    c->q_head = r->next;
    if (!c->q_head) c->q_tail = NULL;
    c->nq--;
    /* NUL-terminated: the checks read numbers with strtoll */
    const char *data = lp_buf_cstr(&c->body);
    record(c->lg, r, p->status_code, data ? data : "", data ? c->body.len : 0, 0);
  }
  lp_buf_reset(&c->body);
  if (!llhttp_should_keep_alive(p)) {
    conn_fail(c, 1);
    return HPE_PAUSED;
  }
  conn_refill(c);
  return 0;
}

static llhttp_settings_t settings;

static void on_alloc(uv_handle_t *h, size_t sz, uv_buf_t *b) {
  conn_t *c = h->data;
  (void)sz;
  b->base = c->lg->rbuf;
  b->len = sizeof(c->lg->rbuf);
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b) {
  conn_t *c = s->data;
  if (n < 0) {
    conn_fail(c, 1);
    return;
  }
  if (n == 0) return;
  llhttp_errno_t e = llhttp_execute(&c->parser, b->base, (size_t)n);
  if (e != HPE_OK && e != HPE_PAUSED) conn_fail(c, 1);
}

static void on_written(uv_write_t *w, int status) {
  req_t *r = container_of(w, req_t, w);
  conn_t *c = r->conn;
  r->writing = 0;
  if (r->done) {
    free_req(r);
    return;
  }
  if (status < 0) conn_fail(c, 1);
}

static void conn_send(conn_t *c, req_t *r) {
  lg_t *lg = c->lg;
  r->conn = c;
  r->next = NULL;
  if (c->q_tail) c->q_tail->next = r;
  else c->q_head = r;
  c->q_tail = r;
  c->nq++;
  if (c->nq >= lg->depth) free_list_del(c);
  r->sent_ns = now_ns();
  write_head(lg, r);
  uv_buf_t b[2] = {uv_buf_init(r->head, (unsigned)strlen(r->head)),
                   uv_buf_init(r->body->json.data, (unsigned)r->body->json.len)};
  r->writing = 1;
  if (uv_write(&r->w, (uv_stream_t *)&c->tcp, b, 2, on_written) < 0) {
    r->writing = 0;
    conn_fail(c, 1);
  }
}

static void on_connect(uv_connect_t *cr, int status) {
  conn_t *c = container_of(cr, conn_t, creq);
  if (status < 0) {
    conn_fail(c, 1);
    return;
  }
  c->connected = 1;
  uv_tcp_nodelay(&c->tcp, 1);
  uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
  req_t *r = c->first;
  c->first = NULL;
  conn_send(c, r);
  conn_refill(c);
}

static void open_conn(lg_t *lg, req_t *r) {
  conn_t *c = calloc(1, sizeof(*c));
  if (!c) {
    lg->st.client_errors++;
    lg->st.failed++;
    lg->inflight--;
    free_req(r);
    return;
  }
  c->lg = lg;
  lg->st.conns_opened++;
  lp_buf_init(&c->body);
  uv_tcp_init(lg->loop, &c->tcp);
  c->tcp.data = c;
  llhttp_init(&c->parser, HTTP_RESPONSE, &settings);
  c->parser.data = c;
  c->first = r;
  c->opened_ns = now_ns();
  c->next_all = lg->all_conns;
  if (lg->all_conns) lg->all_conns->prev_all = c;
  lg->all_conns = c;
  lg->nconns++;
  if (uv_tcp_connect(&c->creq, &c->tcp, (struct sockaddr *)&lg->addr, on_connect) < 0) conn_fail(c, 1);
}

/* Sends r on a connection with room, opens one if allowed, else queues it:
 * queued time counts in its latency (the intended send time is its clock). */
static void submit(lg_t *lg, req_t *r) {
  lg->inflight++;
  conn_t *c = take_free(lg);
  if (c) {
    conn_send(c, r);
    conn_offer(c);
  } else if (lg->nconns < lg->max_conns) {
    open_conn(lg, r);
  } else {
    r->next = NULL;
    if (lg->pending_tail) lg->pending_tail->next = r;
    else lg->pending_head = r;
    lg->pending_tail = r;
    lg->npending++;
  }
}

static void dispatch_pending(lg_t *lg) {
  while (lg->pending_head && lg->nconns < lg->max_conns && !lg->free_conns) {
    req_t *r = lg->pending_head;
    lg->pending_head = r->next;
    if (!lg->pending_head) lg->pending_tail = NULL;
    lg->npending--;
    lg->inflight--; /* submit counts it again */
    submit(lg, r);
  }
}

/* ---- arrivals ---- */

static void maybe_finish(lg_t *lg) {
  if (lg->stopping && lg->inflight == 0) {
    uv_timer_stop(&lg->arrivals);
    uv_timer_stop(&lg->ticker);
    /* nothing in flight: every open connection is idle, on the free list */
    while (lg->free_conns) conn_close(lg->free_conns);
  }
}

static void on_arrivals(uv_timer_t *t) {
  lg_t *lg = t->data;
  uint64_t now = now_ns();
  if (lg->ph.rate > 0) {
    while (!lg->stopping && lg->next_arrival <= now) {
      if (lg->next_arrival >= lg->t_end || (lg->max_requests && lg->generated >= lg->max_requests)) {
        lg->stopping = 1;
        break;
      }
      req_t *r = make_req(lg, lg->next_arrival);
      if (r) submit(lg, r);
      else lg->st.client_errors++, lg->st.failed++;
      lg->generated++;
      lg->next_arrival += lp_arrival_gap_ns(&lg->rng, lg->ph.rate);
    }
    if (!lg->stopping) {
      /* at least 1 ms: on libuv < 1.48 a 0 ms timer armed in a timer callback
       * runs in the same pass and spins. Late sends still count from their
       * intended time. */
      uint64_t d = lg->next_arrival > now ? (lg->next_arrival - now + 999999) / 1000000 : 1;
      uv_timer_start(&lg->arrivals, on_arrivals, d ? d : 1, 0);
    }
  }
  if (now >= lg->t_end) lg->stopping = 1;
  maybe_finish(lg);
}

/* Closed loop: each user sends again as soon as its answer is in. */
static void closed_loop_fill(lg_t *lg) {
  uint64_t now = now_ns();
  while (!lg->stopping && lg->inflight < lg->users &&
         !(lg->max_requests && lg->generated >= lg->max_requests)) {
    req_t *r = make_req(lg, now);
    if (!r) break;
    lg->generated++;
    submit(lg, r);
  }
}

static void expire(lg_t *lg, uint64_t now, int all) {
  size_t before = lg->inflight;
  for (conn_t *c = lg->all_conns, *n; c; c = n) {
    n = c->next_all;
    if (c->closing) continue;
    uint64_t since = c->q_head ? c->q_head->sent_ns : c->first ? c->opened_ns : 0;
    if (since && (all || now - since > lg->timeout_ns)) conn_fail(c, 2);
  }
  while (lg->pending_head && (all || now - lg->pending_head->intended_ns > lg->timeout_ns)) {
    req_t *r = lg->pending_head;
    lg->pending_head = r->next;
    if (!lg->pending_head) lg->pending_tail = NULL;
    lg->npending--;
    record(lg, r, 0, NULL, 0, 2);
  }
  if (all && before)
    fprintf(stderr, "lanepack-loadgen: %zu requests unanswered after the timeout\n", before);
}

static void on_ticker(uv_timer_t *t) {
  lg_t *lg = t->data;
  uint64_t now = now_ns();
  if (now >= lg->t_end || (lg->max_requests && lg->generated >= lg->max_requests &&
                           lg->ph.rate == 0))
    lg->stopping = 1;
  if (lg->ph.rate == 0) closed_loop_fill(lg);
  /* a request unanswered past --timeout is a timeout: HTTP/1.1 answers in
   * order, so its connection is dropped with whatever waits behind it; past the
   * end plus the timeout, everything left is. Nothing outlives the run. */
  expire(lg, now, lg->stopping && now > lg->t_end + lg->timeout_ns);
  if (lg->tty && lg->worker == 0) { /* the first worker speaks for itself */
    double el = (double)(now - lg->t0) / 1e9;
    fprintf(stderr, "\r  %5.1fs  sent %llu  answered %llu  ok %llu  errors %llu  %.0f req/s   ",
            el, (unsigned long long)lg->st.sent, (unsigned long long)lg->st.answered,
            (unsigned long long)lg->st.ok, (unsigned long long)lg->st.failed,
            el > 0 ? (double)lg->st.answered / el : 0.0);
  }
  maybe_finish(lg);
}

/* ---- proxy metrics, read with a plain blocking GET ---- */

/* GET path into out (the whole answer, head and body): its HTTP status, or a
 * negative errno when there is none (no connection, no HTTP answer). */
static int fetch(const lg_t *lg, const char *path, lp_buf_t *out) {
  int fd = socket(lg->addr.ss_family, SOCK_STREAM, 0);
  if (fd < 0) return -errno;
  socklen_t al = lg->addr.ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
  struct timeval tv = {5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  if (connect(fd, (struct sockaddr *)&lg->addr, al) < 0) {
    int e = errno;
    close(fd);
    return -e;
  }
  char req[512];
  int n = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", path, lg->host);
  if (write(fd, req, (size_t)n) != n) {
    int e = errno ? errno : EIO;
    close(fd);
    return -e;
  }
  char buf[8192];
  ssize_t k;
  errno = 0;
  while ((k = read(fd, buf, sizeof(buf))) > 0) lp_buf_append(out, buf, (size_t)k);
  int e = k < 0 ? errno : EPROTO;
  close(fd);
  int status = 0;
  if (!lp_buf_cstr(out) || sscanf(out->data, "HTTP/1.%*1[01] %3d", &status) != 1 || status < 100) return -e;
  return status;
}

typedef struct {
  double real, pad, batches;
  double busy_s, devices; /* the proxy's device clock, summed over backends */
  uint64_t at_ns;         /* when read: the busy share's denominator */
  int ok;
} proxy_counts_t;

static proxy_counts_t read_proxy(const lg_t *lg) {
  proxy_counts_t pc = {0, 0, 0, 0, 0, 0, 0};
  lp_buf_t b;
  lp_buf_init(&b);
  if (fetch(lg, "/metrics", &b) == 200) {
    char want[128] = "";
    if (lg->model[0]) snprintf(want, sizeof(want), "model=\"%s\"", lg->model);
    for (char *line = b.data; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
      if (*line == '#') continue;
      if (want[0] && !strstr(line, want)) continue;
      char *sp = strchr(line, ' ');
      if (!sp) continue;
      double v = strtod(sp + 1, NULL);
      if (!strncmp(line, "lanepack_tokens_total{", 22)) {
        if (strstr(line, "kind=\"real\"") && strstr(line, "kind=\"real\"") < sp) pc.real += v;
        else if (strstr(line, "kind=\"pad\"") && strstr(line, "kind=\"pad\"") < sp) pc.pad += v;
        pc.ok = 1;
      } else if (!strncmp(line, "lanepack_batches_total{", 23)) {
        pc.batches += v;
      } else if (!strncmp(line, "lanepack_device_busy_seconds_total{", 35)) {
        pc.busy_s += v;
      } else if (!strncmp(line, "lanepack_backend_devices{", 25)) {
        pc.devices += v;
      }
    }
  }
  pc.at_ns = now_ns();
  lp_buf_free(&b);
  return pc;
}

/* The vocabulary of the model the load goes to, as the proxy's GET /v1/models
 * says it (vocab_size: its configured one, else its tokenizer's): that model
 * is --model's or the URL's (/v1/models/NAME/infer, /v2/models/NAME/infer),
 * else the only one, else the one named "default". 0 when the target says
 * none, and then why into why (whylen bytes): the status or error of the GET
 * (admin_listen puts /v1/models elsewhere; auth_tokens_file answers 401),
 * an answer that is not lanepack's list, or a model without a bound. */
static uint32_t model_vocab(const lg_t *lg, char *why, size_t whylen) {
  char want[sizeof(lg->model)];
  snprintf(want, sizeof(want), "%s", lg->model);
  const char *in_path = strncmp(lg->path, "/v1/models/", 11) && strncmp(lg->path, "/v2/models/", 11)
                            ? NULL : lg->path + 11;
  if (!want[0] && in_path) snprintf(want, sizeof(want), "%.*s", (int)strcspn(in_path, "/"), in_path);
  lp_buf_t b;
  lp_buf_init(&b);
  uint32_t vocab = 0;
  int status = fetch(lg, "/v1/models", &b);
  const char *at = status == 200 ? strstr(b.data, "\r\n\r\n") : NULL;
  json_t *root = at ? json_loads(at + 4, 0, NULL) : NULL;
  json_t *models = json_object_get(root, "models"), *m;
  if (status < 0) snprintf(why, whylen, "GET /v1/models failed: %s", strerror(-status));
  else if (status != 200) snprintf(why, whylen, "GET /v1/models answered %d", status);
  else if (!json_is_array(models)) snprintf(why, whylen, "GET /v1/models answered no \"models\" list");
  else if (want[0]) snprintf(why, whylen, "GET /v1/models names no model '%s'", want);
  else snprintf(why, whylen, "GET /v1/models names more than one model and none 'default' (give --model)");
  size_t i;
  json_array_foreach(models, i, m) {
    const char *name = json_string_value(json_object_get(m, "name"));
    if (!name) continue;
    int ours = want[0] ? strcmp(name, want) == 0 : json_array_size(models) == 1 || strcmp(name, "default") == 0;
    json_int_t v = json_integer_value(json_object_get(m, "vocab_size"));
    if (ours && v > 0 && v <= UINT32_MAX) vocab = (uint32_t)v;
    else if (ours) snprintf(why, whylen, "GET /v1/models gives no vocab_size for model '%s'", name);
  }
  json_decref(root);
  lp_buf_free(&b);
  return vocab;
}

/* ---- running a phase ---- */

static void *run_loop(void *arg) {
  lg_t *lg = arg;
  const phase_t *ph = &lg->ph;
  memset(&lg->st, 0, sizeof(lg->st));
  lp_hdr_init(&lg->st.lat);
  lp_hdr_init(&lg->st.lat_all);
  lg->st.nseconds = (size_t)(ph->duration_ns / 1000000000ull) + 2;
  lg->st.per_second = calloc(lg->st.nseconds, sizeof(uint64_t));
  lg->stopping = 0;
  lg->generated = 0;
  lg->printed_mismatch = 0;
  lg->t0 = now_ns();
  lg->t_end = lg->t0 + ph->duration_ns;
  lg->next_arrival = lg->t0;
  uv_timer_start(&lg->ticker, on_ticker, 1000, 1000);
  if (ph->rate > 0) uv_timer_start(&lg->arrivals, on_arrivals, 0, 0);
  else closed_loop_fill(lg);
  uv_run(lg->loop, UV_RUN_DEFAULT);
  if (lg->tty && lg->worker == 0) fprintf(stderr, "\n");
  return NULL;
}

/* Runs one phase on every worker (each with its share of the rate, users and
 * connections) and merges what they saw. */
static int run_phase(lg_t *w, size_t nw, const phase_t *ph, stats_t *out) {
  proxy_counts_t before = read_proxy(&w[0]);
  pthread_t th[64];
  for (size_t i = 0; i < nw; i++) {
    w[i].ph = *ph;
    w[i].ph.rate = ph->rate / (double)nw;
    if (nw > 1 && pthread_create(&th[i], NULL, run_loop, &w[i])) return -1;
  }
  if (nw == 1) run_loop(&w[0]);
  else
    for (size_t i = 0; i < nw; i++) pthread_join(th[i], NULL);
  stats_t *st = out;
  *st = w[0].st;
  uint64_t t0 = w[0].t0, t_end = w[0].t_end;
  for (size_t i = 1; i < nw; i++) {
    const stats_t *o = &w[i].st;
    st->ok += o->ok;
    st->failed += o->failed;
    st->mismatches += o->mismatches;
    st->conn_errors += o->conn_errors;
    st->timeouts += o->timeouts;
    st->client_errors += o->client_errors;
    st->unsent_timeouts += o->unsent_timeouts;
    st->tokens += o->tokens;
    st->sent += o->sent;
    st->answered += o->answered;
    st->conns_opened += o->conns_opened;
    for (int k = 0; k < MAX_STATUS; k++) st->by_status[k] += o->by_status[k];
    lp_hdr_merge(&st->lat, &o->lat);
    lp_hdr_merge(&st->lat_all, &o->lat_all);
    for (size_t k = 0; k < o->ncodes; k++) count_code(st, o->codes[k].code, o->codes[k].n);
    st->codes_other += o->codes_other;
    for (size_t k = 0; k < st->nseconds && k < o->nseconds; k++) st->per_second[k] += o->per_second[k];
    free(o->per_second);
    /* the window spans every worker's */
    if (o->last_ns > st->last_ns) st->last_ns = o->last_ns;
    if (w[i].t0 < t0) t0 = w[i].t0;
    if (w[i].t_end > t_end) t_end = w[i].t_end;
  }
  /* every worker stopped at --max-requests: the run ended with its last answer */
  int cut = 1;
  for (size_t i = 0; i < nw; i++) cut &= w[i].max_requests && w[i].generated >= w[i].max_requests;
  uint64_t end = st->last_ns > t_end || (cut && st->last_ns) ? st->last_ns : t_end;
  /* answers after the window count, and so does the time they took */
  st->elapsed_s = (double)(end - t0 - ph->warmup_ns) / 1e9;
  proxy_counts_t after = read_proxy(&w[0]);
  if (before.ok && after.ok) {
    double real = after.real - before.real, pad = after.pad - before.pad;
    st->have_proxy = 1;
    st->fill = real + pad > 0 ? real / (real + pad) : 0;
    st->pad_per_real = real > 0 ? pad / real : 0;
    st->batches = (uint64_t)(after.batches - before.batches);
    double span_s = (double)(after.at_ns - before.at_ns) / 1e9;
    st->busy = after.devices > 0 && span_s > 0 ? (after.busy_s - before.busy_s) / (span_s * after.devices) : -1;
  }
  return 0;
}

/* ---- reports ---- */

/* One latency line's figures (ms). */
static void print_latency(FILE *f, const char *name, const lp_hdr_t *h) {
  fprintf(f, "%-14smin %.2f  mean %.2f  p50 %.2f  p90 %.2f  p99 %.2f  p99.9 %.2f  max %.2f\n", name,
          h->total ? h->min / 1e3 : 0, lp_hdr_mean(h) / 1e3, lp_hdr_quantile(h, 0.5) / 1e3,
          lp_hdr_quantile(h, 0.9) / 1e3, lp_hdr_quantile(h, 0.99) / 1e3, lp_hdr_quantile(h, 0.999) / 1e3,
          h->total ? h->max / 1e3 : 0);
}

static void print_report(const lg_t *lg, const stats_t *s, FILE *f) {
  double el = s->elapsed_s > 0 ? s->elapsed_s : 1;
  fprintf(f, "requests      %llu sent, %llu answered: %llu ok, %llu failed", (unsigned long long)s->sent,
          (unsigned long long)s->answered, (unsigned long long)s->ok, (unsigned long long)s->failed);
  if (lg->verify) fprintf(f, ", %llu mismatches", (unsigned long long)s->mismatches);
  fprintf(f, "\n");
  fprintf(f, "by status    ");
  for (int i = 0; i < MAX_STATUS; i++)
    if (s->by_status[i]) fprintf(f, " %d: %llu", i, (unsigned long long)s->by_status[i]);
  if (s->conn_errors) fprintf(f, " connection: %llu", (unsigned long long)s->conn_errors);
  if (s->timeouts) fprintf(f, " timeout: %llu", (unsigned long long)s->timeouts);
  fprintf(f, "\n");
  if (s->ncodes) { /* why: the codes of the error answers' bodies ("-": none there) */
    fprintf(f, "by error     ");
    for (size_t i = 0; i < s->ncodes; i++)
      fprintf(f, " %s: %llu", s->codes[i].code, (unsigned long long)s->codes[i].n);
    if (s->codes_other) fprintf(f, " (other): %llu", (unsigned long long)s->codes_other);
    fprintf(f, "\n");
  }
  uint64_t server_status = 0;
  for (int i = 0; i < MAX_STATUS; i++)
    if (i != 200) server_status += s->by_status[i];
  fprintf(f, "failures      server: %llu error answers, %llu connections closed or reset, "
             "%llu not answered within --timeout%s; client: %llu not sent within --timeout "
             "(no free connection: raise --connections), %llu not built or started\n",
          (unsigned long long)server_status, (unsigned long long)s->conn_errors,
          (unsigned long long)(s->timeouts - s->unsent_timeouts),
          lg->verify ? ", wrong answers below" : "", (unsigned long long)s->unsent_timeouts,
          (unsigned long long)s->client_errors);
  if (lg->verify)
    fprintf(f, "verified      %llu mismatches (answers 200 whose outputs are not the emulator's)\n",
            (unsigned long long)s->mismatches);
  fprintf(f, "throughput    %.1f requests/s ok, %.1f answered, %.0f tokens/s ok\n", (double)s->ok / el,
          (double)(s->answered - s->conn_errors - s->timeouts) / el, (double)s->tokens / el);
  const lp_hdr_t *h = &s->lat;
  /* the ok ones'; and every answer's, whatever it said, when some were not ok
   * (a run of nothing but errors or mismatches still has figures) */
  if (h->total) print_latency(f, "latency ms", h);
  else fprintf(f, "latency ms    no ok answer\n");
  if (s->lat_all.total != h->total) print_latency(f, "answered ms", &s->lat_all);
  if (s->have_proxy) {
    fprintf(f, "proxy         %llu batches, fill %.4f, %.3f padding tokens per real token\n",
            (unsigned long long)s->batches, s->fill, s->pad_per_real);
    /* the three that judge a packing side by side: waiting, padding, idling */
    /* no ok answer has no p99 (0.00 would read as a fast run) */
    if (h->total) fprintf(f, "summary       p99 %.2f ms, fill %.4f, devices busy ", lp_hdr_quantile(h, 0.99) / 1e3, s->fill);
    else fprintf(f, "summary       p99 - (no ok answer), fill %.4f, devices busy ", s->fill);
    if (s->busy >= 0) fprintf(f, "%.1f%% (the proxy's device clock)\n", 100 * s->busy);
    else fprintf(f, "unknown (no device clock on /metrics)\n");
  }
  else
    fprintf(f, "proxy         /metrics not readable: no fill figures\n");
}

/* "name": {"min": .., "max": ..}, ms */
static void json_latency(FILE *f, const char *name, const lp_hdr_t *h) {
  fprintf(f, "\"%s\": {\"min\": %.3f, \"mean\": %.3f, \"p50\": %.3f, \"p90\": %.3f, \"p99\": %.3f, "
             "\"p99_9\": %.3f, \"max\": %.3f}",
          name, h->total ? h->min / 1e3 : 0, lp_hdr_mean(h) / 1e3, lp_hdr_quantile(h, 0.5) / 1e3,
          lp_hdr_quantile(h, 0.9) / 1e3, lp_hdr_quantile(h, 0.99) / 1e3, lp_hdr_quantile(h, 0.999) / 1e3,
          h->total ? h->max / 1e3 : 0);
}

static void json_report(FILE *f, const lg_t *lg, const stats_t *s, double rate) {
  double el = s->elapsed_s > 0 ? s->elapsed_s : 1;
  fprintf(f, "{\"rate\": %.3f, \"duration_s\": %.3f, \"sent\": %llu, \"answered\": %llu, \"ok\": %llu, "
             "\"failed\": %llu, \"mismatches\": %llu, \"connection_errors\": %llu, \"timeouts\": %llu, "
             "\"client_errors\": %llu, \"unsent_timeouts\": %llu, \"connections_opened\": %llu, "
             "\"by_status\": {",
          rate, el, (unsigned long long)s->sent, (unsigned long long)s->answered,
          (unsigned long long)s->ok, (unsigned long long)s->failed, (unsigned long long)s->mismatches,
          (unsigned long long)s->conn_errors, (unsigned long long)s->timeouts,
          (unsigned long long)s->client_errors, (unsigned long long)s->unsent_timeouts,
          (unsigned long long)s->conns_opened);
  int first = 1;
  for (int i = 0; i < MAX_STATUS; i++)
    if (s->by_status[i]) {
      fprintf(f, "%s\"%d\": %llu", first ? "" : ", ", i, (unsigned long long)s->by_status[i]);
      first = 0;
    }
  fprintf(f, "}, \"by_error\": {");
  for (size_t i = 0; i < s->ncodes; i++) /* codes are kept free of quotes and backslashes */
    fprintf(f, "%s\"%s\": %llu", i ? ", " : "", s->codes[i].code, (unsigned long long)s->codes[i].n);
  if (s->codes_other) fprintf(f, "%s\"(other)\": %llu", s->ncodes ? ", " : "", (unsigned long long)s->codes_other);
  fprintf(f, "}, \"requests_per_s\": %.3f, \"answered_per_s\": %.3f, \"tokens_per_s\": %.1f, ",
          (double)s->ok / el, (double)(s->answered - s->conn_errors - s->timeouts) / el, (double)s->tokens / el);
  json_latency(f, "latency_ms", &s->lat);
  fprintf(f, ", ");
  json_latency(f, "latency_answered_ms", &s->lat_all);
  if (s->have_proxy)
    fprintf(f, ", \"proxy\": {\"batches\": %llu, \"fill\": %.4f, \"pad_per_real\": %.4f, \"device_busy\": %.4f}",
            (unsigned long long)s->batches, s->fill, s->pad_per_real, s->busy);
  (void)lg;
  fprintf(f, "}");
}

/* The latency CDF (x in "nines") and completions per second, as one SVG. */
static int write_svg(const char *path, const stats_t *s) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  const lp_hdr_t *h = &s->lat;
  double maxlat = h->total ? h->max / 1e3 : 1;
  fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"900\" height=\"420\" font-family=\"sans-serif\" font-size=\"12\">\n"
             "<rect width=\"900\" height=\"420\" fill=\"white\"/>\n"
             "<text x=\"20\" y=\"20\" font-size=\"14\">latency by percentile (ms)</text>\n"
             "<text x=\"470\" y=\"20\" font-size=\"14\">answers per second</text>\n");
  /* left: x = log10(1/(1-q)) from 0 to 4 (p99.99) */
  fprintf(f, "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"2\" points=\"");
  for (int i = 0; i <= 200; i++) {
    double x = 4.0 * i / 200, q = 1 - pow(10, -x);
    double v = lp_hdr_quantile(h, q) / 1e3;
    fprintf(f, "%.1f,%.1f ", 40 + x / 4 * 380, 380 - (maxlat > 0 ? v / maxlat : 0) * 340);
  }
  fprintf(f, "\"/>\n");
  const char *ticks[] = {"p0", "p90", "p99", "p99.9", "p99.99"};
  for (int i = 0; i <= 4; i++)
    fprintf(f, "<text x=\"%.0f\" y=\"400\">%s</text>\n", 40 + i * 95.0 - 10, ticks[i]);
  fprintf(f, "<text x=\"5\" y=\"45\">%.1f</text><text x=\"5\" y=\"385\">0</text>\n", maxlat);
  /* right: per-second completions */
  uint64_t peak = 1;
  for (size_t i = 0; i < s->nseconds; i++)
    if (s->per_second[i] > peak) peak = s->per_second[i];
  fprintf(f, "<polyline fill=\"none\" stroke=\"#d62728\" stroke-width=\"2\" points=\"");
  for (size_t i = 0; i < s->nseconds; i++)
    fprintf(f, "%.1f,%.1f ", 480 + (double)i / (s->nseconds > 1 ? s->nseconds - 1 : 1) * 380,
            380 - (double)s->per_second[i] / peak * 340);
  fprintf(f, "\"/>\n<text x=\"445\" y=\"45\">%llu</text><text x=\"470\" y=\"400\">0 s</text>"
             "<text x=\"840\" y=\"400\">%zu s</text>\n</svg>\n",
          (unsigned long long)peak, s->nseconds - 1);
  return fclose(f);
}

/* ---- command line ---- */

static int parse_duration(const char *s, uint64_t *ns) {
  char *end;
  double v = strtod(s, &end);
  if (end == s || !(v >= 0)) return -1;
  double mul = 1e9;
  if (!strcmp(end, "ms")) mul = 1e6;
  else if (!strcmp(end, "s") || !*end) mul = 1e9;
  else if (!strcmp(end, "m")) mul = 60e9;
  else return -1;
  *ns = (uint64_t)(v * mul);
  return 0;
}

static int parse_url(lg_t *lg, const char *url) {
  if (strncmp(url, "http://", 7)) return -1;
  const char *h = url + 7, *slash = strchr(h, '/');
  size_t hl = slash ? (size_t)(slash - h) : strlen(h);
  char hostport[300];
  if (hl == 0 || hl >= sizeof(hostport)) return -1;
  memcpy(hostport, h, hl);
  hostport[hl] = 0;
  char *colon = strrchr(hostport, ':');
  if (hostport[0] == '[') colon = strstr(hostport, "]:") ? strstr(hostport, "]:") + 1 : NULL;
  lg->port = colon ? atoi(colon + 1) : 80;
  if (colon) *colon = 0;
  char *host = hostport;
  if (host[0] == '[') {
    host++;
    host[strlen(host) - 1] = 0;
  }
  snprintf(lg->host, sizeof(lg->host), "%.255s", host);
  snprintf(lg->path, sizeof(lg->path), "%s", slash && strcmp(slash, "/") ? slash : "/v1/infer");
  struct addrinfo hints = {0}, *res;
  hints.ai_socktype = SOCK_STREAM;
  char port[16];
  snprintf(port, sizeof(port), "%d", lg->port);
  if (lg->port <= 0 || lg->port > 65535 || getaddrinfo(host, port, &hints, &res)) return -1;
  memcpy(&lg->addr, res->ai_addr, res->ai_addrlen);
  freeaddrinfo(res);
  return 0;
}

/* --text FILE: its lines, each one input, into lg->text and lg->lines. Blank
 * lines are left out (the proxy refuses an input without tokens), and so, with
 * a tokenizer, are lines it gives no ids. 0, or -1 with err. */
static int load_lines(lg_t *lg, const char *path, char *err, size_t errlen) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(err, errlen, "cannot read '%s': %s", path, strerror(errno));
    return -1;
  }
  lp_buf_t b;
  lp_buf_init(&b);
  char chunk[65536];
  size_t n;
  while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) lp_buf_append(&b, chunk, n);
  int rerr = ferror(f);
  fclose(f);
  lp_buf_append(&b, "\n", 2); /* a last line without its newline, and a NUL after all */
  if (rerr || b.oom) {
    snprintf(err, errlen, "cannot read '%s'", path);
    lp_buf_free(&b);
    return -1;
  }
  size_t cap = 0;
  for (char *p = b.data, *end = b.data + b.len - 1; p < end;) {
    char *nl = memchr(p, '\n', (size_t)(end - p));
    *nl = 0;
    if (nl > p && nl[-1] == '\r') nl[-1] = 0;
    int blank = 1;
    for (const char *q = p; *q && blank; q++) blank = strchr(" \t\v\f\r", *q) != NULL;
    if (!blank && lg->tok) blank = lp_tok_encode(lg->tok, p, strlen(p), NULL, 0) <= 0;
    if (!blank) {
      if (lg->nlines == cap) {
        cap = cap ? cap * 2 : 1024;
        char **l = realloc(lg->lines, cap * sizeof(char *));
        if (!l) {
          snprintf(err, errlen, "out of memory for '%s'", path);
          lp_buf_free(&b);
          return -1;
        }
        lg->lines = l;
      }
      lg->lines[lg->nlines++] = p;
    }
    p = nl + 1;
  }
  if (!lg->nlines) {
    snprintf(err, errlen, "'%s' has no line with text", path);
    lp_buf_free(&b);
    return -1;
  }
  lg->text = b.data; /* the lines point into it */
  return 0;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: lanepack-loadgen --url http://HOST:PORT[/PATH] (--lengths FILE|MIX | --text FILE)\n"
          "         (--rate R | --concurrency C | --sweep R1,R2,...) [--duration 30s]\n"
          "         [--warmup 0s] [--connections N] [--model M] [--vocab V]\n"
          "         [--sequences-per-request K] [--max-requests N] [--timeout 30s]\n"
          "         [--seed S] [--verify] [--json FILE] [--plot FILE.svg] [--pool N]\n"
          "         [--threads N] [--pipeline N] [--protocol v1|v2 [--binary]] [--trace FILE]\n"
          "         [--shuffle] [--protocol openai [--encoding float|base64] [--batch N]\n"
          "         [--dims K] [--tokenizer MODEL [--tokenizer-options OPTS]]] [--min-ok FRACTION]\n"
          "--vocab V: token ids drawn below V (default: the model's vocabulary when the\n"
          "          proxy's GET /v1/models names one, else 32000, saying why on stderr)\n"
          "--min-ok FRACTION: exit 4 when fewer of the requests sent were ok (default:\n"
          "          exit 4 only when none was); wrong answers (--verify) exit 3\n"
          "--pool N: bodies built before the run and cycled (default 4096, and at least\n"
          "          a length file's lines); 0 builds a fresh body for every request\n"
          "--protocol v2: Open Inference Protocol requests to /v2/models/MODEL/infer (MODEL\n"
          "          from --model, else 'default'), input_ids [k, n] with the k rows of a\n"
          "          request as long as its first; --binary sends and asks for binary tensors\n"
          "--protocol openai: OpenAI's POST /v1/embeddings (model from --model, else\n"
          "          'default'): input as token ids (lengths from --lengths) or, with --text\n"
          "          FILE, the file's lines as strings (blank lines left out); --batch N\n"
          "          inputs per request (as --sequences-per-request); --verify needs --dims K\n"
          "          (the emulator's) and checks every vector, index, model and usage; text\n"
          "          vectors exactly with --tokenizer (the proxy's SentencePiece model and\n"
          "          options, or its tokenizer.json), else their form and that a line\n"
          "          always gets the same vector\n"
          "--trace FILE: a line per request counted: its intended send time (ns, uv_hrtime),\n"
          "          tokens, sequences, HTTP status (-1 connection error, -2 timeout) and\n"
          "          latency from the intended time (us); for replaying the same arrivals\n"
          "--shuffle: a length file's lines in an order drawn from --seed (else file order,\n"
          "          cycled)\n");
}

static int die(const char *fmt, const char *a) {
  fprintf(stderr, "lanepack-loadgen: ");
  fprintf(stderr, fmt, a);
  fprintf(stderr, "\n");
  return 2;
}

int main(int argc, char **argv) {
  static lg_t lg;
  const char *url = NULL, *lengths = NULL, *json = NULL, *plot = NULL, *sweep = NULL, *trace = NULL;
  const char *text = NULL, *tokenizer = NULL, *tok_options = NULL;
  int shuffle = 0;
  double rate = 0;
  unsigned long conc = 0, conns = 0, seed = 1, pool = 4096, threads = 1, depth = 1;
  uint64_t duration = 10000000000ull, warmup = 0;
  int vocab_given = 0;
  double min_ok = -1; /* --min-ok; < 0: none given, then at least one must be ok */
  lg.seqs_per_req = 1;
  lg.timeout_ns = 30000000000ull;
  static const struct option opts[] = {
      {"url", required_argument, 0, 'u'},         {"lengths", required_argument, 0, 'l'},
      {"rate", required_argument, 0, 'r'},        {"concurrency", required_argument, 0, 'c'},
      {"duration", required_argument, 0, 'd'},    {"warmup", required_argument, 0, 'w'},
      {"connections", required_argument, 0, 'n'}, {"model", required_argument, 0, 'm'},
      {"vocab", required_argument, 0, 'v'},       {"sequences-per-request", required_argument, 0, 'k'},
      {"max-requests", required_argument, 0, 'M'},{"timeout", required_argument, 0, 't'},
      {"seed", required_argument, 0, 's'},        {"verify", no_argument, 0, 'V'},
      {"json", required_argument, 0, 'j'},        {"plot", required_argument, 0, 'p'},
      {"sweep", required_argument, 0, 'S'},       {"pool", required_argument, 0, 'P'},
      {"threads", required_argument, 0, 'T'},      {"pipeline", required_argument, 0, 'Q'},
      {"protocol", required_argument, 0, 'X'},    {"binary", no_argument, 0, 'B'},
      {"trace", required_argument, 0, 'A'},      {"shuffle", no_argument, 0, 'U'},
      {"text", required_argument, 0, 'x'},       {"encoding", required_argument, 0, 'e'},
      {"batch", required_argument, 0, 'k'},      {"dims", required_argument, 0, 'D'},
      {"tokenizer", required_argument, 0, 'z'},  {"tokenizer-options", required_argument, 0, 'o'},
      {"min-ok", required_argument, 0, 'O'},
      {"help", no_argument, 0, 'h'}, {"version", no_argument, 0, 'Z'},
      {0, 0, 0, 0}};
  int c, idx = 0;
  while ((c = getopt_long(argc, argv, "", opts, &idx)) != -1) {
    char *end = NULL;
    switch (c) {
      case 'u': url = optarg; break;
      case 'l': lengths = optarg; break;
      case 'r': rate = strtod(optarg, &end); if (*end || !(rate > 0)) return die("--rate must be > 0, got '%s'", optarg); break;
      case 'c': conc = strtoul(optarg, &end, 10); if (*end || conc == 0 || conc > 100000) return die("--concurrency must be 1..100000, got '%s'", optarg); break;
      case 'n': conns = strtoul(optarg, &end, 10); if (*end || conns == 0 || conns > 100000) return die("--connections must be 1..100000, got '%s'", optarg); break;
      case 'd': if (parse_duration(optarg, &duration) || duration == 0) return die("bad --duration '%s' (e.g. 30s, 500ms, 2m)", optarg); break;
      case 'w': if (parse_duration(optarg, &warmup)) return die("bad --warmup '%s'", optarg); break;
      case 't': if (parse_duration(optarg, &lg.timeout_ns) || !lg.timeout_ns) return die("bad --timeout '%s'", optarg); break;
      case 'm': snprintf(lg.model, sizeof(lg.model), "%s", optarg); break;
      case 'v': lg.vocab = (uint32_t)strtoul(optarg, &end, 10); if (*end || lg.vocab == 0) return die("--vocab must be > 0, got '%s'", optarg); vocab_given = 1; break;
      case 'O': min_ok = strtod(optarg, &end); if (*end || !(min_ok >= 0 && min_ok <= 1)) return die("--min-ok must be a fraction in [0, 1], got '%s'", optarg); break;
      case 'k': lg.seqs_per_req = (uint32_t)strtoul(optarg, &end, 10); if (*end || lg.seqs_per_req == 0 || lg.seqs_per_req > MAX_SEQS) return die("--sequences-per-request (--batch) must be 1..64, got '%s'", optarg); break;
      case 'D': lg.dims = (unsigned)strtoul(optarg, &end, 10); if (*end || lg.dims == 0 || lg.dims > LP_EMBCHECK_MAX_DIMS) return die("--dims must be 1..65536, got '%s'", optarg); break;
      case 'x': text = optarg; break;
      case 'z': tokenizer = optarg; break;
      case 'o': tok_options = optarg; break;
      case 'e':
        if (strcmp(optarg, "float") == 0) lg.base64 = 0;
        else if (strcmp(optarg, "base64") == 0) lg.base64 = 1;
        else return die("--encoding must be float or base64, got '%s'", optarg);
        break;
      case 'M': lg.max_requests = strtoull(optarg, &end, 10); if (*end) return die("bad --max-requests '%s'", optarg); break;
      case 's': seed = strtoul(optarg, &end, 10); if (*end) return die("bad --seed '%s'", optarg); break;
      case 'V': lg.verify = 1; break;
      case 'j': json = optarg; break;
      case 'p': plot = optarg; break;
      case 'S': sweep = optarg; break;
      case 'Q': depth = strtoul(optarg, &end, 10); if (*end || depth == 0 || depth > 1024) return die("--pipeline must be 1..1024, got '%s'", optarg); break;
      case 'T': threads = strtoul(optarg, &end, 10); if (*end || threads == 0 || threads > 64) return die("--threads must be 1..64, got '%s'", optarg); break;
      case 'P': pool = strtoul(optarg, &end, 10); if (*end || pool > 1000000) return die("--pool must be 0..1000000, got '%s'", optarg); break;
      case 'X':
        lg.v2 = strcmp(optarg, "v2") == 0;
        lg.openai = strcmp(optarg, "openai") == 0;
        if (!lg.v2 && !lg.openai && strcmp(optarg, "v1") && strcmp(optarg, "lanepack"))
          return die("--protocol must be v1, v2 or openai, got '%s'", optarg);
        break;
      case 'B': lg.v2_binary = 1; break;
      case 'A': trace = optarg; break;
      case 'U': shuffle = 1; break;
      case 'Z': printf("%s %s\n", "lanepack-loadgen", LP_VERSION); return 0;
      case 'h': usage(stdout); return 0;
      default: usage(stderr); return 2;
    }
  }
  if (optind < argc) return die("unexpected argument '%s'", argv[optind]);
  if (!url) return die("%s", "--url is required");
  if (!lengths == !text) return die("%s", "give one of --lengths or --text");
  if (text && !lg.openai) return die("%s", "--text goes with --protocol openai");
  if ((tokenizer || tok_options) && !text) return die("%s", "--tokenizer goes with --text");
  if (lg.openai && lg.verify && !lg.dims) return die("%s", "--verify with --protocol openai needs --dims K (the emulator's)");
  if (lg.openai && !lg.model[0]) snprintf(lg.model, sizeof(lg.model), "default");
  if (!!rate + !!conc + !!sweep != 1) return die("%s", "give one of --rate, --concurrency or --sweep");
  if (warmup >= duration) return die("%s", "--warmup must be shorter than --duration");
  if (parse_url(&lg, url)) return die("bad --url '%s': want http://HOST:PORT[/PATH]", url);
  if (lg.v2_binary && !lg.v2) return die("%s", "--binary goes with --protocol v2");
  if (lg.v2 && strcmp(lg.path, "/v1/infer") == 0) /* no path given: the model's v2 route */
    snprintf(lg.path, sizeof(lg.path), "/v2/models/%s/infer", lg.model[0] ? lg.model : "default");
  if (lg.openai && strcmp(lg.path, "/v1/infer") == 0) snprintf(lg.path, sizeof(lg.path), "/v1/embeddings");
  char err[256];
  if (tokenizer && !(lg.tok = lp_tok_load(tokenizer, tok_options, err, sizeof(err))))
    return die("--tokenizer: %s", err);
  if (text && load_lines(&lg, text, err, sizeof(err))) return die("--text: %s", err);
  if (lengths && lp_lengths_load(&lg.lengths, lengths, err, sizeof(err))) return die("--lengths: %s", err);
  if (shuffle && lg.nlines > 1) { /* the same for a text file's lines */
    lp_rng_t srng;
    lp_rng_seed(&srng, seed * 2654435761ull + 17);
    for (size_t i = lg.nlines - 1; i > 0; i--) {
      size_t k = (size_t)lp_rng_below(&srng, i + 1);
      char *t = lg.lines[i];
      lg.lines[i] = lg.lines[k];
      lg.lines[k] = t;
    }
  }
  if (shuffle && lg.lengths.count > 1) {
    /* a file in some order (by package, by size) sends its runs of long
     * sequences together, cycle after cycle: shuffled once, by the seed */
    lp_rng_t srng;
    lp_rng_seed(&srng, seed * 2654435761ull + 17);
    for (size_t i = lg.lengths.count - 1; i > 0; i--) {
      size_t k = (size_t)lp_rng_below(&srng, i + 1);
      uint32_t t = lg.lengths.values[i];
      lg.lengths.values[i] = lg.lengths.values[k];
      lg.lengths.values[k] = t;
    }
  }
  double rates[64];
  size_t nrates = 0;
  if (sweep) {
    char tmp[512];
    snprintf(tmp, sizeof(tmp), "%s", sweep);
    for (char *sv, *t = strtok_r(tmp, ",", &sv); t; t = strtok_r(NULL, ",", &sv)) {
      char *end;
      double r = strtod(t, &end);
      if (*end || !(r > 0) || nrates == 64) return die("bad --sweep '%s': want R1,R2,... all > 0", sweep);
      rates[nrates++] = r;
    }
  } else {
    rates[nrates++] = rate;
  }
  /* the target must answer before any load is sent */
  lp_buf_t probe;
  lp_buf_init(&probe);
  int fd = socket(lg.addr.ss_family, SOCK_STREAM, 0);
  socklen_t al = lg.addr.ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
  if (fd < 0 || connect(fd, (struct sockaddr *)&lg.addr, al) < 0) {
    fprintf(stderr, "lanepack-loadgen: cannot connect to %s: %s\n", url, strerror(errno));
    return 1;
  }
  close(fd);
  lp_buf_free(&probe);
  /* ids below the model's vocabulary, which the proxy would refuse past it */
  char vocab_from[300] = "--vocab";
  if (!vocab_given && lengths) {
    char why[240];
    lg.vocab = model_vocab(&lg, why, sizeof(why));
    if (lg.vocab) {
      snprintf(vocab_from, sizeof(vocab_from), "the model's, from GET /v1/models");
    } else { /* said at once: ids past the model's vocabulary are all refused */
      lg.vocab = DEFAULT_VOCAB;
      snprintf(vocab_from, sizeof(vocab_from), "the default: %s", why);
      fprintf(stderr, "lanepack-loadgen: token ids below %u, the default: %s; give --vocab\n", lg.vocab, why);
    }
  } else if (!vocab_given) {
    lg.vocab = DEFAULT_VOCAB;
  }
  signal(SIGPIPE, SIG_IGN);
  lp_rng_seed(&lg.rng, seed);
  /* a file's lengths are cycled whole: the pool is at least the file */
  if (pool && lg.lengths.count > pool) pool = lg.lengths.count < 1000000 ? lg.lengths.count : 1000000;
  if (pool && lg.nlines > pool) pool = lg.nlines < 1000000 ? lg.nlines : 1000000;
  if (pool) {
    lg.pool = calloc(pool, sizeof(body_t *));
    if (!lg.pool) return die("%s", "out of memory for --pool");
    for (size_t i = 0; i < pool; i++) {
      lg.pool[i] = make_body(&lg);
      if (!lg.pool[i]) return die("%s", "out of memory for --pool");
    }
    lg.npool = pool;
  }
  lg.tty = isatty(2);
  llhttp_settings_init(&settings);
  settings.on_body = on_body;
  settings.on_message_complete = on_message_complete;
  /* open loop: enough connections that the generator is not what queues */
  lg.depth = (unsigned)depth;
  lg.users = conc;
  lg.max_conns = conc ? (conc + depth - 1) / depth : (conns ? conns : 2048);
  if (threads > lg.max_conns) threads = lg.max_conns;
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < lg.max_conns + 64) {
    rl.rlim_cur = rl.rlim_max < lg.max_conns + 64 ? rl.rlim_max : lg.max_conns + 64;
    setrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_cur < lg.max_conns + 64) lg.max_conns = rl.rlim_cur > 128 ? rl.rlim_cur - 64 : 64;
  }
  if (trace && !(lg.trace = fopen(trace, "w"))) return die("cannot write --trace '%s'", trace);
  /* workers: copies of the template, each with its own loop, random stream,
   * place in the pool and share of users and connections */
  lg_t *w = calloc(threads, sizeof(lg_t));
  if (!w) return die("%s", "out of memory");
  for (size_t i = 0; i < threads; i++) {
    w[i] = lg;
    w[i].worker = (int)i;
    lp_rng_seed(&w[i].rng, seed * 1000003ull + i);
    w[i].max_conns = lg.max_conns / threads + (i < lg.max_conns % threads);
    w[i].users = lg.users / threads + (i < lg.users % threads);
    w[i].max_requests = lg.max_requests ? lg.max_requests / threads + (i < lg.max_requests % threads) : 0;
    w[i].next_body = lg.npool ? i * (lg.npool / threads) : 0;
    uv_loop_init(&w[i].own_loop);
    w[i].loop = &w[i].own_loop;
    uv_timer_init(w[i].loop, &w[i].arrivals);
    uv_timer_init(w[i].loop, &w[i].ticker);
    w[i].arrivals.data = w[i].ticker.data = &w[i];
    if (lg.nlines && !(w[i].seen = malloc(lg.nlines * sizeof(int32_t)))) return die("%s", "out of memory");
    for (size_t k = 0; k < lg.nlines; k++) w[i].seen[k] = -1;
  }
  FILE *jf = NULL;
  if (json && !(jf = fopen(json, "w"))) return die("cannot write --json '%s'", json);
  stats_t *results = calloc(nrates, sizeof(stats_t));
  for (size_t i = 0; i < nrates; i++) {
    phase_t ph = {conc ? 0 : rates[i], duration, warmup};
    if (nrates > 1) fprintf(stderr, "lanepack-loadgen: rate %.1f/s for %.1fs\n", rates[i], duration / 1e9);
    run_phase(w, threads, &ph, &results[i]);
  }
  if (nrates == 1) {
    printf("lanepack-loadgen %s, %s, %s %g, %.1fs, %s %s\n", url,
           conc ? "closed loop" : "open loop (Poisson)", conc ? "concurrency" : "rate",
           conc ? (double)conc : rate, (duration - warmup) / 1e9, text ? "text" : "lengths", text ? text : lengths);
    if (lengths) printf("token ids     below %u (%s)\n", lg.vocab, vocab_from);
    print_report(&lg, &results[0], stdout);
    printf("client        %llu connections opened%s", (unsigned long long)results[0].conns_opened,
           threads > 1 ? "" : "\n");
    if (threads > 1) printf(", %lu threads\n", threads);
  } else {
    printf("%10s %12s %10s %10s %10s %8s %8s\n", "rate", "achieved/s", "p50 ms", "p99 ms", "errors", "fill", "batches");
    for (size_t i = 0; i < nrates; i++) {
      stats_t *s = &results[i];
      printf("%10.1f %12.1f %10.2f %10.2f %10llu %8.4f %8llu\n", rates[i],
             (double)s->ok / (s->elapsed_s > 0 ? s->elapsed_s : 1), lp_hdr_quantile(&s->lat, 0.5) / 1e3,
             lp_hdr_quantile(&s->lat, 0.99) / 1e3, (unsigned long long)s->failed, s->fill,
             (unsigned long long)s->batches);
    }
  }
  if (jf) {
    if (nrates == 1) json_report(jf, &lg, &results[0], conc ? 0 : rate);
    else {
      fprintf(jf, "{\"sweep\": [");
      for (size_t i = 0; i < nrates; i++) {
        if (i) fprintf(jf, ", ");
        json_report(jf, &lg, &results[i], rates[i]);
      }
      fprintf(jf, "]}");
    }
    fprintf(jf, "\n");
    fclose(jf);
  }
  if (plot && write_svg(plot, &results[nrates - 1])) return die("cannot write --plot '%s'", plot);
  /* 3: wrong answers; 4: too few ok (none, or under --min-ok), said why */
  int bad = 0;
  for (size_t i = 0; i < nrates; i++) {
    const stats_t *s = &results[i];
    double frac = s->sent ? (double)s->ok / (double)s->sent : 0;
    if (s->mismatches) bad = 3;
    else if (!bad && (min_ok < 0 ? s->ok == 0 : frac < min_ok)) {
      bad = 4;
      fprintf(stderr, "lanepack-loadgen: %llu of %llu requests ok (%.4f)%s%s\n", (unsigned long long)s->ok,
              (unsigned long long)s->sent, frac, min_ok < 0 ? ": none succeeded" : ", below --min-ok ",
              min_ok < 0 ? "" : (snprintf(err, sizeof(err), "%g", min_ok), err));
    }
    free(results[i].per_second);
  }
  free(results);
  for (size_t i = 0; i < lg.npool; i++) free_body(lg.pool[i]);
  free(lg.pool);
  lp_lengths_free(&lg.lengths);
  free(lg.lines);
  free(lg.text);
  if (lg.tok) lp_tok_free(lg.tok);
  for (size_t i = 0; i < threads; i++) {
    free(w[i].vgot);
    free(w[i].vwant);
    free(w[i].seen);
    uv_close((uv_handle_t *)&w[i].arrivals, NULL);
    uv_close((uv_handle_t *)&w[i].ticker, NULL);
    uv_run(w[i].loop, UV_RUN_DEFAULT);
    uv_loop_close(w[i].loop);
  }
  free(w);
  if (lg.trace && fclose(lg.trace)) return die("cannot write --trace '%s'", trace);
  return bad;
}
