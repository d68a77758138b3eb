/* Runs on the front that read the request: text-embeddings-inference's
 * routes. /embed and /rerank become one job of a packed sequence per input
 * (per (query, text) pair), answered in TEI's shapes from the backend's
 * per-segment vectors; /tokenize is answered here at once. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lanepack/openai.h"
#include "lanepack/tei.h"
#include "lanepack/tokenizer.h"
#include "core/internal.h" /* lp__grow */
#include "proxy.h"

void lp__tei_reject(lp_front_t *f, lp_http_req_t *req, int route, int status, const char *type,
                    const char *code, const char *msg, const lp_job_t *job) {
  lp_buf_t *b = &f->scratch;
  lp_buf_reset(b);
  lp_tei_error(b, msg, type);
  lp_proxy_count(f, route, status);
  lp__count_rejection(f, code);
  lp__access_log(f, req, status, job);
  const char *hdr = status == 429 || status == 503 ? "Retry-After: 1\r\n" : NULL;
  lp_http_respond(req, status, hdr, "application/json", b->data, b->len);
}

void lp__tei_reject_job(lp_front_t *f, lp_http_req_t *req, int route, int status, const char *code,
                        const char *msg, const lp_job_t *job) {
  const char *type = LP_TEI_VALIDATION;
  if (status == 429) type = LP_TEI_OVERLOADED;
  else if (status == 413 && strcmp(code, "sequence_too_long") == 0) status = 422, type = LP_TEI_TOKENIZER;
  else if (status == 503) type = LP_TEI_UNHEALTHY;
  else if (status >= 500) status = 424, type = LP_TEI_BACKEND; /* a batch that failed: TEI's backend error */
  lp__tei_reject(f, req, route, status, type, code, msg, job);
}

/* The model a TEI request is for: the one it names, else the only one served
 * (TEI serves one model). NULL after answering the client. */
static lp_model_t *pick_model(lp_front_t *f, lp_http_req_t *req, int route, const char *name) {
  const lp_config_t *c = f->cfg;
  char msg[400];
  if (!name[0] && c->nmodels == 1) return &f->proxy->models[0];
  for (size_t i = 0; name[0] && i < c->nmodels; i++)
    if (strcmp(c->models[i].name, name) == 0) return &f->proxy->models[i];
  if (name[0]) {
    snprintf(msg, sizeof(msg), "the model '%.100s' is not served here", name);
    lp__tei_reject(f, req, route, 404, LP_TEI_VALIDATION, "unknown_model", msg, NULL);
    return NULL;
  }
  size_t n = (size_t)snprintf(msg, sizeof(msg), "several models are served: name one with \"model\" (");
  for (size_t i = 0; i < c->nmodels && n < sizeof(msg); i++)
    n += (size_t)snprintf(msg + n, sizeof(msg) - n, "%s%s", i ? ", " : "", c->models[i].name);
  if (n < sizeof(msg)) snprintf(msg + n, sizeof(msg) - n, ")");
  lp__tei_reject(f, req, route, 400, LP_TEI_VALIDATION, "missing_model", msg, NULL);
  return NULL;
}

/* A /tokenize answer is built whole up to this size (most are far smaller);
 * a larger one is written as its client reads it, a piece at a time (an
 * answer takes some 60 bytes a token: 1,024 inputs of 1,000 tokens are 60 MB). */
#define TOKENIZE_AT_ONCE (256 * 1024)
/* ... and up to this while the answers held for clients are at their bound
 * (a few inputs' worth: what 10,000 clients that do not read may make the
 * proxy hold, each its own answer, stays small). */
#define TOKENIZE_AT_ONCE_FULL (16 * 1024)

/* The pieces of one input into *pc (grown; owned by the caller): the count,
 * or negative. */
static long input_pieces(const lp_tok_t *t, const lp_tei_text_t *in, int special, lp_tok_piece_t **pc,
                         size_t *cap) {
  long n = lp_tok_pieces(t, in->s, in->len, special, *pc, *cap);
  if (n > (long)*cap) {
    lp_tok_piece_t *p2 = realloc(*pc, (size_t)n * sizeof(**pc));
    if (!p2) return -ENOMEM;
    *pc = p2;
    *cap = (size_t)n;
    n = lp_tok_pieces(t, in->s, in->len, special, *pc, *cap);
  }
  if (n > (long)*cap) return -EINVAL;
  return n < 0 && n != -ENOMEM ? -EINVAL : n;
}

/* Input i's entry of the answer: its n pieces (pc). */
static void input_json(lp_buf_t *out, const lp_tok_t *t, const lp_tei_text_t *in, size_t i,
                       const lp_tok_piece_t *pc, long n) {
  lp_buf_puts(out, i ? ",[" : "[");
  for (long k = 0; k < n; k++) {
    if (k) lp_buf_puts(out, ",");
    const lp_tok_piece_t *p = &pc[k];
    const char *name = lp_tok_piece_name(t, p->id);
    int in_text = !p->special && p->begin <= p->end && p->end <= in->len;
    lp_tei_token(out, p->id, in_text ? in->s + p->begin : name, in_text ? p->end - p->begin : strlen(name),
                 !in_text, p->begin, p->end);
  }
  lp_buf_puts(out, "]");
}

/* A /tokenize answer written as its client reads, its inputs tokenized
 * again a piece at a time (what was built while checking them is dropped:
 * a waiting stream holds its texts only). All of it owned here
 * (tok_stream_next frees it). */
typedef struct tok_stream_s {
  const lp_tok_t *t;          /* the model's: loaded once, freed with the proxy */
  int special;
  int begun;                  /* the answer's '[' is written */
  size_t next, n;             /* the next input to write, of n */
  lp_tei_text_t *texts;       /* n, pointing into text */
  char *text;                 /* the inputs' bytes, copied out of the request */
  lp_tok_piece_t *pc;
  size_t cap;
} tok_stream_t;

static void tok_stream_free(tok_stream_t *st) {
  if (!st) return;
  free(st->texts);
  free(st->text);
  free(st->pc);
  free(st);
}

/* lp_http_stream_cb: the answer's next inputs, about room bytes of them. */
static int tok_stream_next(void *ud, lp_buf_t *out, size_t room) {
  tok_stream_t *st = ud;
  if (!out) {
    tok_stream_free(st);
    return 0;
  }
  size_t start = out->len;
  if (!st->begun) lp_buf_puts(out, "[");
  st->begun = 1;
  while (st->next < st->n && out->len - start < room && !out->oom) {
    const lp_tei_text_t *in = &st->texts[st->next];
    long k = input_pieces(st->t, in, st->special, &st->pc, &st->cap);
    if (k < 0) return (int)k; /* it was tokenized once already: memory only */
    input_json(out, st->t, in, st->next, st->pc, k);
    st->next++;
  }
  if (st->next < st->n) return 1;
  lp_buf_puts(out, "]\n");
  return 0;
}

/* The stream of r's answer, with what it holds in *held. NULL without memory. */
static tok_stream_t *tok_stream_new(const lp_tok_t *t, const lp_tei_req_t *r, size_t *held) {
  tok_stream_t *st = calloc(1, sizeof(*st));
  if (!st) return NULL;
  size_t bytes = 0;
  for (size_t i = 0; i < r->ntexts; i++) bytes += r->texts[i].len;
  st->texts = calloc(r->ntexts, sizeof(*st->texts));
  st->text = malloc(bytes ? bytes : 1);
  if (!st->texts || !st->text) {
    tok_stream_free(st);
    return NULL;
  }
  char *p = st->text;
  for (size_t i = 0; i < r->ntexts; i++) {
    if (r->texts[i].len) memcpy(p, r->texts[i].s, r->texts[i].len);
    st->texts[i] = (lp_tei_text_t){p, r->texts[i].len};
    p += r->texts[i].len;
  }
  st->t = t;
  st->special = r->add_special_tokens;
  st->n = r->ntexts;
  *held = sizeof(*st) + bytes + r->ntexts * sizeof(*st->texts);
  return st;
}

/* /tokenize: each input's pieces with their ids and where they lie in it,
 * each input at most limit pieces, as /embed's without truncate. Every input
 * is checked first (an error is the whole answer's status); an answer past
 * TOKENIZE_AT_ONCE is then written as the client reads it (what the
 * server's unsent answers may hold bounds how many such wait at once: past
 * it, 429). */
static void tokenize(lp_front_t *f, lp_http_req_t *req, const lp_tok_t *t, const lp_tei_req_t *r,
                     uint32_t limit) {
  lp_buf_t out;
  lp_buf_init(&out);
  lp_tok_piece_t *pc = NULL; /* owned here */
  size_t cap = 0;
  int stream = 0; /* too large to build at once */
  size_t at_once = lp_http_unsent_full(req) ? TOKENIZE_AT_ONCE_FULL : TOKENIZE_AT_ONCE;
  int rc = 0;
  char msg[256];
  lp_buf_puts(&out, "[");
  for (size_t i = 0; i < r->ntexts && !rc; i++) {
    long n = input_pieces(t, &r->texts[i], r->add_special_tokens, &pc, &cap);
    if (n < 0) {
      rc = (int)n;
      break;
    }
    if ((size_t)n > limit) {
      snprintf(msg, sizeof(msg), "Input validation error: `inputs[%zu]` must have at most %u tokens. Given: %ld", i,
               limit, n);
      rc = -E2BIG;
      break;
    }
    if (stream) continue; /* checked only: written later */
    if (out.len >= at_once) stream = 1;
    else input_json(&out, t, &r->texts[i], i, pc, n);
  }
  if (stream) lp_buf_free(&out);
  else lp_buf_puts(&out, "]\n");
  free(pc);
  tok_stream_t *st = NULL;
  size_t held = 0;
  if (rc == -E2BIG) {
    lp__tei_reject(f, req, LP_ROUTE_TEI_TOKENIZE, 422, LP_TEI_TOKENIZER, "sequence_too_long", msg, NULL);
  } else if (rc == -EINVAL) {
    lp__tei_reject(f, req, LP_ROUTE_TEI_TOKENIZE, 422, LP_TEI_TOKENIZER, "tokenizer_refused",
                   "the tokenizer refused a text", NULL);
  } else if (rc || out.oom || (stream && !(st = tok_stream_new(t, r, &held)))) {
    lp__tei_reject(f, req, LP_ROUTE_TEI_TOKENIZE, 503, LP_TEI_UNHEALTHY, "out_of_memory", "proxy out of memory",
                   NULL);
  } else if (!st) {
    lp_proxy_count(f, LP_ROUTE_TEI_TOKENIZE, 200);
    lp__access_log(f, req, 200, NULL);
    lp_http_respond(req, 200, NULL, "application/json", out.data, out.len);
  } else if (lp_http_reserve(req, held) == 0) {
    lp_proxy_count(f, LP_ROUTE_TEI_TOKENIZE, 200);
    lp__access_log(f, req, 200, NULL);
    /* the texts were copied out: a stream holds no body (r's point into
     * its JSON, not into the body) */
    free(req->body);
    req->body = NULL;
    lp_http_respond_stream(req, 200, NULL, "application/json", tok_stream_next, st);
  } else {
    tok_stream_free(st);
    lp__tei_reject(f, req, LP_ROUTE_TEI_TOKENIZE, 429, LP_TEI_OVERLOADED, "answers_unsent_full",
                   "large answers waiting for their clients fill the proxy's max_unsent_bytes_total: retry later",
                   NULL);
  }
  lp_buf_free(&out);
}

/* Why a request's sequences cannot be made: its status, type, code and message. */
typedef struct seq_err_s {
  int status;
  const char *type, *code;
  char msg[256];
} seq_err_t;

static int seq_fail(seq_err_t *e, int rc, int status, const char *type, const char *code) {
  e->status = status;
  e->type = type;
  e->code = code;
  return rc;
}

/* /embed's inputs, tokenized into f->enc (lens[i] each) within limit tokens,
 * cut when the request says so: 0 or negative with e set. */
static int embed_ids(lp_front_t *f, const lp_tok_t *t, const lp_tei_req_t *r, uint32_t limit, uint32_t *lens,
                     size_t *ntok, seq_err_t *e) {
  size_t n = 0;
  if (lp__grow((void **)&f->enc, &f->enc_cap, 1, sizeof(*f->enc))) return seq_fail(e, -ENOMEM, 503, LP_TEI_UNHEALTHY, "out_of_memory");
  for (size_t i = 0; i < r->ntexts; i++) {
    const lp_tei_text_t *in = &r->texts[i];
    long k = lp_tok_encode(t, in->s, in->len, f->enc + n, f->enc_cap - n);
    if (k > 0 && (size_t)k > limit && r->truncate) {
      k = lp_tok_encode_fit(t, in->s, in->len, limit, r->left, f->enc + n, f->enc_cap - n);
      if (k == -E2BIG) {
        snprintf(e->msg, sizeof(e->msg), "the model's special tokens alone fill its %u tokens", limit);
        return seq_fail(e, -E2BIG, 422, LP_TEI_TOKENIZER, "sequence_too_long");
      }
    }
    if (k == -ENOMEM) return seq_fail(e, -ENOMEM, 503, LP_TEI_UNHEALTHY, "out_of_memory");
    if (k < 0) {
      snprintf(e->msg, sizeof(e->msg), "the tokenizer refused `inputs[%zu]`", i);
      return seq_fail(e, -EINVAL, 422, LP_TEI_TOKENIZER, "tokenizer_refused");
    }
    if ((size_t)k > limit) {
      snprintf(e->msg, sizeof(e->msg),
               "Input validation error: `inputs[%zu]` must have at most %u tokens. Given: %ld (or set "
               "\"truncate\": true)", i, limit, k);
      return seq_fail(e, -E2BIG, 422, LP_TEI_TOKENIZER, "sequence_too_long");
    }
    if (k == 0) {
      snprintf(e->msg, sizeof(e->msg), "`inputs[%zu]` has no tokens once tokenized", i);
      return seq_fail(e, -ENODATA, 400, LP_TEI_EMPTY, "empty_sequence");
    }
    if ((size_t)k > f->enc_cap - n) { /* more than there was room for: again with room */
      if (lp__grow((void **)&f->enc, &f->enc_cap, n + (size_t)k, sizeof(*f->enc))) return seq_fail(e, -ENOMEM, 503, LP_TEI_UNHEALTHY, "out_of_memory");
      i--;
      continue;
    }
    lens[i] = (uint32_t)k;
    n += (size_t)k;
  }
  *ntok = n;
  return 0;
}

/* The ids of text without the encode options into *buf (grown; owned by the
 * caller): the count, or negative. */
static long plain_ids(const lp_tok_t *t, const lp_tei_text_t *text, int32_t **buf, size_t *cap) {
  long k = lp_tok_encode_plain(t, text->s, text->len, *buf, *cap);
  if (k > (long)*cap) {
    int32_t *b = realloc(*buf, (size_t)k * sizeof(*b));
    if (!b) return -ENOMEM;
    *buf = b;
    *cap = (size_t)k;
    k = lp_tok_encode_plain(t, text->s, text->len, *buf, *cap);
    if (k > (long)*cap) return -EINVAL;
  }
  return k;
}

/* /rerank's (query, text) pairs laid out by the model's template into f->enc
 * (lens[i] each) within limit tokens, each text cut when the request says so:
 * 0 or negative with e set. */
static int rerank_ids(lp_front_t *f, const lp_tok_t *t, const lp_tei_template_t *tpl, const lp_tei_req_t *r,
                      uint32_t limit, uint32_t *lens, size_t *ntok, seq_err_t *e) {
  int32_t *q = NULL, *b = NULL; /* the query's and a text's ids; owned here */
  size_t qcap = 0, bcap = 0, n = 0;
  int rc = 0;
  long nq = plain_ids(t, &r->query, &q, &qcap);
  for (size_t i = 0; i < r->ntexts && nq >= 0 && !rc; i++) {
    long nb = plain_ids(t, &r->texts[i], &b, &bcap);
    if (nb < 0) {
      nq = nb;
      break;
    }
    size_t whole = (size_t)nq + (size_t)nb + tpl->nparts - 2; /* every part but $A and $B is one piece */
    if (lp__grow((void **)&f->enc, &f->enc_cap, n + whole, sizeof(*f->enc))) {
      nq = -ENOMEM;
      break;
    }
    long k = lp_tei_pair(tpl, q, (size_t)nq, b, (size_t)nb, r->truncate ? limit : 0, r->left, f->enc + n,
                         f->enc_cap - n);
    if (k == -E2BIG) {
      snprintf(e->msg, sizeof(e->msg), "the query with the template's pieces has %zu tokens: no room for a text "
               "within the model's %u", (size_t)nq + tpl->nparts - 2, limit);
      rc = seq_fail(e, -E2BIG, 422, LP_TEI_TOKENIZER, "sequence_too_long");
    } else if (k > (long)limit) {
      snprintf(e->msg, sizeof(e->msg),
               "Input validation error: the query with `texts[%zu]` must have at most %u tokens. Given: %ld "
               "(or set \"truncate\": true)", i, limit, k);
      rc = seq_fail(e, -E2BIG, 422, LP_TEI_TOKENIZER, "sequence_too_long");
    } else if (k < 0) {
      nq = k;
    } else if (k == 0) { /* an empty query and text, a template of no pieces */
      snprintf(e->msg, sizeof(e->msg), "the query with `texts[%zu]` has no tokens once tokenized", i);
      rc = seq_fail(e, -ENODATA, 400, LP_TEI_EMPTY, "empty_sequence");
    } else {
      lens[i] = (uint32_t)k;
      n += (size_t)k;
    }
  }
  free(q);
  free(b);
  if (rc) return rc;
  if (nq == -ENOMEM) return seq_fail(e, -ENOMEM, 503, LP_TEI_UNHEALTHY, "out_of_memory");
  if (nq < 0) {
    snprintf(e->msg, sizeof(e->msg), "the tokenizer refused the query or a text");
    return seq_fail(e, -EINVAL, 422, LP_TEI_TOKENIZER, "tokenizer_refused");
  }
  *ntok = n;
  return 0;
}

/* The texts a /rerank with return_text answers with, in one block: n + 1
 * offsets, then the bytes (the block's size in *size). NULL without memory. */
static char *keep_texts(const lp_tei_req_t *r, size_t *size) {
  size_t bytes = 0;
  for (size_t i = 0; i < r->ntexts; i++) bytes += r->texts[i].len;
  *size = (r->ntexts + 1) * sizeof(size_t) + bytes;
  size_t *off = malloc(*size);
  if (!off) return NULL;
  char *s = (char *)(off + r->ntexts + 1);
  off[0] = 0;
  for (size_t i = 0; i < r->ntexts; i++) {
    memcpy(s + off[i], r->texts[i].s, r->texts[i].len);
    off[i + 1] = off[i] + r->texts[i].len;
  }
  return (char *)off;
}

void lp__tei_request(lp_front_t *f, lp_http_req_t *req, int route) {
  if (req->method != LP_HTTP_POST) {
    lp__tei_reject(f, req, route, 405, LP_TEI_VALIDATION, "method_not_allowed", "use POST", NULL);
    return;
  }
  int kind = route == LP_ROUTE_TEI_EMBED ? LP_TEI_EMBED : route == LP_ROUTE_TEI_RERANK ? LP_TEI_RERANK
                                                                                         : LP_TEI_TOKENIZE;
  lp_tei_req_t r;
  int status;
  const char *type;
  char err[256];
  int rc = lp_tei_parse(kind, req->body, req->body_len, f->cfg->max_sequences_per_request, &r, &status, &type,
                        err, sizeof(err));
  lp_model_t *m = NULL;
  if (rc == -ENOMEM)
    lp__tei_reject(f, req, route, 503, LP_TEI_UNHEALTHY, "out_of_memory", "proxy out of memory", NULL);
  else if (rc)
    lp__tei_reject(f, req, route, status, type, status == 413 ? "too_many_sequences" : "bad_field", err, NULL);
  else
    m = pick_model(f, req, route, r.model);
  if (!m) {
    lp_tei_req_free(&r);
    return;
  }
  size_t mi = (size_t)(m - f->proxy->models);
  const lp_model_config_t *mc = &f->cfg->models[mi];
  const lp_tok_t *t = f->proxy->tok[mi];
  const lp_tei_template_t *tpl = &f->proxy->pair[mi];
  /* the longest sequence its configured shapes hold (the scheduler checks
   * the shapes in force again) */
  uint32_t limit = lp_bucket_set_max_len(&mc->shapes);
  if (!limit) limit = UINT32_MAX; /* shapes only backends report: the scheduler alone judges */
  if (!t || (kind == LP_TEI_RERANK && !tpl->nparts)) {
    snprintf(err, sizeof(err), t ? "the model '%s' has no pair template for /rerank (configure "
             "models.%s.tokenizer.pair_template)" : "the model '%s' takes token ids: it has no tokenizer for text "
             "(configure models.%s.tokenizer)", mc->name, mc->name);
    lp__tei_reject(f, req, route, 400, LP_TEI_VALIDATION, "no_tokenizer", err, NULL);
  } else if (kind == LP_TEI_TOKENIZE) {
    tokenize(f, req, t, &r, limit);
  } else {
    uint32_t *lens = malloc(r.ntexts * sizeof(*lens)); /* owned here */
    seq_err_t se = {.status = 503, .type = LP_TEI_UNHEALTHY, .code = "out_of_memory", .msg = "proxy out of memory"};
    size_t ntok = 0;
    lp_perr_t e = {0};
    lp_job_t *job = NULL;
    size_t texts_bytes = 0;
    char *texts = r.return_text && kind == LP_TEI_RERANK ? keep_texts(&r, &texts_bytes) : NULL;
    int grc = !lens || (r.return_text && kind == LP_TEI_RERANK && !texts) ? -ENOMEM
              : kind == LP_TEI_EMBED                                 ? embed_ids(f, t, &r, limit, lens, &ntok, &se)
                                              : rerank_ids(f, t, tpl, &r, limit, lens, &ntok, &se);
    if (grc) {
      lp__tei_reject(f, req, route, se.status, se.type, se.code, se.msg, NULL);
    } else if ((job = lp__job_new(f, m, f->enc, ntok, lens, r.ntexts, 1, 0, 0, NULL, 0,
                                  kind == LP_TEI_EMBED ? "inputs" : "texts", &e)) == NULL) {
      lp__tei_reject_job(f, req, route, e.status, e.code, e.msg, NULL);
    } else {
      job->tei = route;
      job->tei_normalize = r.normalize;
      job->tei_raw_scores = r.raw_scores;
      job->tei_texts = texts;
      job->bytes += texts_bytes; /* held while queued: max_queue_bytes counts them */
      job->embed_dims = kind == LP_TEI_EMBED ? mc->embed_dimensions : 0;
      texts = NULL;
      /* the ids and texts were copied out: a queued request holds no body */
      free(req->body);
      req->body = NULL;
      lp__job_bind(job, req);
      lp__front_submit(f, req, job);
    }
    free(texts);
    free(lens);
  }
  lp_tei_req_free(&r);
}

int lp__tei_body(lp_front_t *f, lp_buf_t *out, const lp_job_t *job) {
  int rerank = job->tei == LP_ROUTE_TEI_RERANK;
  lp_tei_rank_t *ranks = rerank ? malloc(job->nseq * sizeof(*ranks)) : NULL; /* owned here */
  if (rerank && !ranks) return -ENOMEM;
  lp_buf_puts(out, "[");
  long first = 0; /* /embed: the first vector's length */
  for (uint32_t i = 0; i < job->nseq; i++) {
    /* a reranker's score is the first value of its segment's output */
    long n = lp__seq_vector(f, &job->seqs[i], rerank);
    if (n < 0 || (rerank && n == 0)) {
      free(ranks);
      return n == -ENOMEM ? -ENOMEM : -EPROTO;
    }
    if (rerank) {
      ranks[i] = (lp_tei_rank_t){job->tei_raw_scores ? f->vec[0] : lp_tei_sigmoid(f->vec[0]), i};
      continue;
    }
    if ((n = lp__check_vector(job, n, &first)) < 0) return (int)n;
    if (job->tei_normalize) lp_openai_normalize(f->vec, (size_t)n);
    if (i) lp_buf_puts(out, ",");
    lp_tei_vector(out, f->vec, (size_t)n);
  }
  if (rerank) {
    lp_tei_rank(ranks, job->nseq);
    const size_t *off = (const size_t *)job->tei_texts;
    const char *s = job->tei_texts ? (const char *)(off + job->nseq + 1) : NULL;
    for (uint32_t i = 0; i < job->nseq; i++) {
      size_t k = ranks[i].index;
      if (i) lp_buf_puts(out, ",");
      lp_tei_rank_item(out, k, ranks[i].score, s ? s + off[k] : NULL, s ? off[k + 1] - off[k] : 0);
    }
    free(ranks);
  }
  lp_buf_puts(out, "]\n");
  return out->oom ? -ENOMEM : 0;
}
