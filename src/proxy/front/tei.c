/* Runs on the front that read the request: text-embeddings-inference's
 * routes. Their texts are tokenized on the tokenizer workers (tokwork/);
 * then /embed, /rerank, /predict, /embed_all and /similarity become one job
 * of a packed sequence per input (per (query, text) pair), answered in TEI's
 * shapes from the backend's outputs, and /tokenize is answered with the
 * pieces (/decode and /info in teiapi.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lanepack/openai.h"
#include "lanepack/tei.h"
#include "core/internal.h" /* lp__grow */
#include "front/front.h"

/* The model a TEI request is for: the one it names, else the only one served
 * (TEI serves one model). NULL after answering the client. */
static lp_model_t *pick_model(lp_front_t *f, lp_http_req_t *req, int route, const char *name) {
  const lp_config_t *c = f->cfg;
  char msg[400];
  if (!name[0] && c->nmodels == 1) return &f->shared->models[0];
  for (size_t i = 0; name[0] && i < c->nmodels; i++)
    if (strcmp(c->models[i].name, name) == 0) return &f->shared->models[i];
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
    st->texts[i] = (lp_tei_text_t){.s = p, .len = r->texts[i].len};
    p += r->texts[i].len;
  }
  st->t = t;
  st->special = r->add_special_tokens;
  st->n = r->ntexts;
  *held = sizeof(*st) + bytes + r->ntexts * sizeof(*st->texts);
  return st;
}

/* What one token takes in a /tokenize answer, about ({"id":N,"text":"..",
 * "special":false,"start":N,"stop":N}): the answer's size is judged from the
 * workers' counts before any of it is built. */
#define TOKENIZE_BYTES_PER_ID 64

/* Text up to which a /tokenize request's answer is built by the workers:
 * at some 4 bytes a token (English) its answer is about TOKENIZE_AT_ONCE,
 * built at once anyway, and tokenizing it again on the front's loop took
 * it 1-2 ms a request (a connection pipelining 60 of them held its front
 * that long for each); at worst (a token a byte) a worker builds 1 MiB for
 * a moment, and an answer past TOKENIZE_AT_ONCE is still streamed. */
#define TOKENIZE_PIECES_BYTES (16 * 1024)

/* /tokenize: each input's pieces with their ids and where they lie in it,
 * each input at most limit pieces, as /embed's without truncate. The workers
 * have tokenized every input (tj's units: ids, or for a request within
 * TOKENIZE_PIECES_BYTES its inputs' parts of the answer; an error is the
 * whole answer's status, found off the loop); a small answer is then built
 * (joined) here at once, one past TOKENIZE_AT_ONCE is written as the client
 * reads it, its
 * inputs tokenized again a piece at a time (what the server's unsent answers
 * may hold bounds how many such wait at once: past it, 429). */
static void tokenize(lp_front_t *f, lp_http_req_t *req, const lp_tokjob_t *tj, const lp_tok_t *t,
                     const lp_tei_req_t *r, uint32_t limit) {
  int rc = 0;
  char msg[256];
  size_t ids = 0;
  for (size_t i = 0; i < tj->nunits && !rc; i++) {
    const lp_tokunit_t *u = &tj->units[i];
    if (u->n == -E2BIG) {
      snprintf(msg, sizeof(msg), "Input validation error: `inputs[%zu]` must have at most %u tokens. Given: %s%ld",
               i, limit, u->over_prefix ? "at least " : "", u->over);
      rc = -E2BIG;
    } else if (u->n < 0) {
      rc = u->n == -ENOMEM ? -ENOMEM : -EINVAL;
    } else if ((size_t)u->n > limit) {
      snprintf(msg, sizeof(msg), "Input validation error: `inputs[%zu]` must have at most %u tokens. Given: %ld", i,
               limit, u->n);
      rc = -E2BIG;
    } else {
      ids += (size_t)u->n;
    }
  }
  size_t at_once = lp_http_unsent_full(req) ? TOKENIZE_AT_ONCE_FULL : TOKENIZE_AT_ONCE;
  int stream = !rc && ids * TOKENIZE_BYTES_PER_ID > at_once;
  lp_buf_t out;
  lp_buf_init(&out);
  lp_tok_piece_t *pc = NULL; /* owned here */
  size_t cap = 0;
  if (!rc && !stream) {
    lp_buf_puts(&out, "[");
    for (size_t i = 0; i < r->ntexts && !rc; i++) {
      const lp_tokunit_t *u = &tj->units[i];
      if (u->op == LP_TOKOP_PIECES) { /* the workers' (tokenized once) */
        if (i) lp_buf_puts(&out, ",");
        lp_buf_append(&out, u->json.data, u->json.len);
        continue;
      }
      long n = input_pieces(t, &r->texts[i], r->add_special_tokens, &pc, &cap);
      if (n < 0) rc = (int)n;
      else input_json(&out, t, &r->texts[i], i, pc, n);
    }
    lp_buf_puts(&out, "]\n");
  }
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

/* Token ids the client gave, as they are (TEI adds no special pieces to
 * them), cut to limit from the end (or the start when left) with truncate,
 * into out (room for them made by the caller): the count. */
static long given_ids(const lp_tei_text_t *in, const lp_tei_req_t *r, uint32_t limit, int32_t *out) {
  size_t n = in->nids, from = 0;
  if (r->truncate && n > limit) {
    if (r->left) from = n - limit;
    n = limit;
  }
  memcpy(out, in->ids + from, n * sizeof(*out));
  return (long)n;
}

/* Which of a job's units hold input i's ids: unit[i] its text's (or a pair's
 * first), second[i] a pair's second text's; -1 where none (token ids given). */
typedef struct unit_map_s {
  long *unit, *second; /* owned, one block */
} unit_map_t;

/* /embed's (/embed_all's, /similarity's, /predict's) inputs into f->enc
 * (lens[i] each) within limit tokens: token ids as given, texts as the
 * workers tokenized them (tj's units, cut when the request says so), a
 * /predict pair laid out by the model's pair template (tpl): 0 or negative
 * with e set. */
/* Input i of r as the client named it: /similarity's are the source sentence
 * and then its sentences, every other route's inputs[i]. In buf (len). */
static const char *input_name(const lp_tei_req_t *r, size_t i, char *buf, size_t len) {
  if (r->route == LP_TEI_SIMILARITY && i == 0) snprintf(buf, len, "inputs.source_sentence");
  else if (r->route == LP_TEI_SIMILARITY) snprintf(buf, len, "inputs.sentences[%zu]", i - 1);
  else snprintf(buf, len, "inputs[%zu]", i);
  return buf;
}

static int embed_ids(lp_front_t *f, const lp_tokjob_t *tj, const unit_map_t *um, const lp_tei_template_t *tpl,
                     const lp_tei_req_t *r, uint32_t limit, uint32_t *lens, size_t *ntok, seq_err_t *e) {
  size_t n = 0;
  char name[48];
  for (size_t i = 0; i < r->ntexts; i++) {
    const lp_tei_text_t *in = &r->texts[i];
    long k;
    if (in->ids) {
      size_t want = r->truncate && in->nids > limit ? limit : in->nids;
      if (lp__grow((void **)&f->enc, &f->enc_cap, n + want + 1, sizeof(*f->enc)))
        return seq_fail(e, -ENOMEM, 503, LP_TEI_UNHEALTHY, "out_of_memory");
      k = given_ids(in, r, limit, f->enc + n);
    } else if (in->pair) {
      const lp_tokunit_t *a = &tj->units[um->unit[i]], *b = &tj->units[um->second[i]];
      if (a->n == -ENOMEM || b->n == -ENOMEM) return seq_fail(e, -ENOMEM, 503, LP_TEI_UNHEALTHY, "out_of_memory");
      if (a->n == -E2BIG || b->n == -E2BIG) {
        snprintf(e->msg, sizeof(e->msg), "Input validation error: `%s` must have at most %u tokens (or set "
                 "\"truncate\": true)", input_name(r, i, name, sizeof(name)), limit);
        return seq_fail(e, -E2BIG, 422, LP_TEI_TOKENIZER, "sequence_too_long");
      }
      if (a->n < 0 || b->n < 0) {
        snprintf(e->msg, sizeof(e->msg), "the tokenizer refused `%s`", input_name(r, i, name, sizeof(name)));
        return seq_fail(e, -EINVAL, 422, LP_TEI_TOKENIZER, "tokenizer_refused");
      }
      size_t whole = (size_t)a->n + (size_t)b->n + tpl->nparts - 2; /* every part but $A and $B is one piece */
      if (lp__grow((void **)&f->enc, &f->enc_cap, n + whole + 1, sizeof(*f->enc)))
        return seq_fail(e, -ENOMEM, 503, LP_TEI_UNHEALTHY, "out_of_memory");
      /* cut as TEI cuts a pair (LongestFirst), the first text too */
      k = lp_tei_pair(tpl, a->ids, (size_t)a->n, b->ids, (size_t)b->n, r->truncate ? limit : 0, r->left,
                      LP_TEI_LONGEST_FIRST, f->enc + n, f->enc_cap - n);
      if (k == -E2BIG) {
        snprintf(e->msg, sizeof(e->msg), "the template's pieces alone are over the model's %u tokens (`%s`)",
                 limit, input_name(r, i, name, sizeof(name)));
        return seq_fail(e, -E2BIG, 422, LP_TEI_TOKENIZER, "sequence_too_long");
      }
      if (k > (long)limit) {
        snprintf(e->msg, sizeof(e->msg), "Input validation error: `%s` must have at most %u tokens. Given: "
                 "%ld (or set \"truncate\": true)", input_name(r, i, name, sizeof(name)), limit, k);
        return seq_fail(e, -E2BIG, 422, LP_TEI_TOKENIZER, "sequence_too_long");
      }
      if (k < 0) {
        snprintf(e->msg, sizeof(e->msg), "the tokenizer refused `%s`", input_name(r, i, name, sizeof(name)));
        return seq_fail(e, -EINVAL, 422, LP_TEI_TOKENIZER, "tokenizer_refused");
      }
    } else {
      const lp_tokunit_t *u = &tj->units[um->unit[i]];
      k = u->n;
      if (k == -E2BIG && r->truncate) {
        snprintf(e->msg, sizeof(e->msg), "the model's special tokens alone fill its %u tokens", limit);
        return seq_fail(e, -E2BIG, 422, LP_TEI_TOKENIZER, "sequence_too_long");
      }
      if (k == -ENOMEM) return seq_fail(e, -ENOMEM, 503, LP_TEI_UNHEALTHY, "out_of_memory");
      if (k < 0 && k != -E2BIG) {
        snprintf(e->msg, sizeof(e->msg), "the tokenizer refused `%s`", input_name(r, i, name, sizeof(name)));
        return seq_fail(e, -EINVAL, 422, LP_TEI_TOKENIZER, "tokenizer_refused");
      }
      if (k == -E2BIG || (size_t)k > limit) {
        snprintf(e->msg, sizeof(e->msg),
                 "Input validation error: `%s` must have at most %u tokens. Given: %s%ld (or set "
                 "\"truncate\": true)", input_name(r, i, name, sizeof(name)), limit, k < 0 && u->over_prefix ? "at least " : "", k < 0 ? u->over : k);
        return seq_fail(e, -E2BIG, 422, LP_TEI_TOKENIZER, "sequence_too_long");
      }
      if (lp__grow((void **)&f->enc, &f->enc_cap, n + (size_t)k + 1, sizeof(*f->enc)))
        return seq_fail(e, -ENOMEM, 503, LP_TEI_UNHEALTHY, "out_of_memory");
      memcpy(f->enc + n, u->ids, (size_t)k * sizeof(*f->enc));
    }
    if (k > (long)limit) {
      snprintf(e->msg, sizeof(e->msg), "Input validation error: `%s` must have at most %u tokens. Given: "
               "%ld (or set \"truncate\": true)", input_name(r, i, name, sizeof(name)), limit, k);
      return seq_fail(e, -E2BIG, 422, LP_TEI_TOKENIZER, "sequence_too_long");
    }
    if (k == 0) {
      snprintf(e->msg, sizeof(e->msg), "`%s` has no tokens once tokenized", input_name(r, i, name, sizeof(name)));
      return seq_fail(e, -ENODATA, 400, LP_TEI_EMPTY, "empty_sequence");
    }
    lens[i] = (uint32_t)k;
    n += (size_t)k;
  }
  *ntok = n;
  return 0;
}

/* /rerank's (query, text) pairs laid out by the model's template into f->enc
 * (lens[i] each) within limit tokens from the workers' ids without the
 * encode options (tj's unit 0 the query's, unit i + 1 text i's, each text's
 * cut to its kept part when the request says so): 0 or negative with e set. */
static int rerank_ids(lp_front_t *f, const lp_tei_template_t *tpl, const lp_tokjob_t *tj, const lp_tei_req_t *r,
                      uint32_t limit, uint32_t *lens, size_t *ntok, seq_err_t *e) {
  size_t n = 0;
  const lp_tokunit_t *q = &tj->units[0];
  long nq = q->n;
  if (nq == -E2BIG) { /* the query alone is over the limit */
    snprintf(e->msg, sizeof(e->msg), "the query with the template's pieces has %s%ld tokens: no room for a text "
             "within the model's %u", q->over_prefix ? "at least " : "", q->over + (long)tpl->nparts - 2, limit);
    return seq_fail(e, -E2BIG, 422, LP_TEI_TOKENIZER, "sequence_too_long");
  }
  for (size_t i = 0; i < r->ntexts && nq >= 0; i++) {
    const lp_tokunit_t *b = &tj->units[i + 1];
    long nb = b->n;
    if (nb == -E2BIG) {
      snprintf(e->msg, sizeof(e->msg),
               "Input validation error: the query with `texts[%zu]` must have at most %u tokens. Given: at least "
               "%ld (or set \"truncate\": true)", i, limit, b->over + nq);
      return seq_fail(e, -E2BIG, 422, LP_TEI_TOKENIZER, "sequence_too_long");
    }
    if (nb < 0) {
      nq = nb;
      break;
    }
    size_t whole = (size_t)nq + (size_t)nb + tpl->nparts - 2; /* every part but $A and $B is one piece */
    if (lp__grow((void **)&f->enc, &f->enc_cap, n + whole, sizeof(*f->enc))) {
      nq = -ENOMEM;
      break;
    }
    long k = lp_tei_pair(tpl, q->ids, (size_t)nq, b->ids, (size_t)nb, r->truncate ? limit : 0, r->left,
                         LP_TEI_ONLY_SECOND, f->enc + n, f->enc_cap - n);
    if (k == -E2BIG) {
      snprintf(e->msg, sizeof(e->msg), "the query with the template's pieces has %zu tokens: no room for a text "
               "within the model's %u", (size_t)nq + tpl->nparts - 2, limit);
      return seq_fail(e, -E2BIG, 422, LP_TEI_TOKENIZER, "sequence_too_long");
    } else if (k > (long)limit) {
      snprintf(e->msg, sizeof(e->msg),
               "Input validation error: the query with `texts[%zu]` must have at most %u tokens. Given: %ld "
               "(or set \"truncate\": true)", i, limit, k);
      return seq_fail(e, -E2BIG, 422, LP_TEI_TOKENIZER, "sequence_too_long");
    } else if (k < 0) {
      nq = k;
    } else if (k == 0) { /* an empty query and text, a template of no pieces */
      snprintf(e->msg, sizeof(e->msg), "the query with `texts[%zu]` has no tokens once tokenized", i);
      return seq_fail(e, -ENODATA, 400, LP_TEI_EMPTY, "empty_sequence");
    } else {
      lens[i] = (uint32_t)k;
      n += (size_t)k;
    }
  }
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

/* What a request keeps while its body is decoded and its texts tokenized
 * on the workers: its parsed form (the texts point into it), what its answer
 * needs, and while a worker decodes it the body and the decoder's verdict. */
typedef struct tei_ctx_s {
  lp_tei_req_t r;
  int route, kind;
  lp_model_t *m;
  uint32_t limit;
  char *body;             /* owned: a large body decoded on a worker, its texts in it */
  unit_map_t um;          /* the inputs' units (embedding kinds) */
  size_t body_len, max_inputs;
  int rc, status;         /* lp_tei_parse's */
  const char *type;
  char err[256];
} tei_ctx_t;

static void tei_ctx_free(void *p) {
  tei_ctx_t *c = p;
  if (!c) return;
  lp_tei_req_free(&c->r);
  free(c->body);
  free(c->um.unit);
  free(c);
}

static void tei_decode(tei_ctx_t *c) {
  c->rc = lp_tei_parse(c->kind, c->body, c->body_len, c->max_inputs, &c->r, &c->status, &c->type, c->err,
                       sizeof(c->err));
}

/* A worker's: the body decoded in place, kept (c's, as long as its texts
 * are read: a text of MiBs is never copied, the tokenizer reads only what
 * it keeps of it), else freed at once. */
static void tei_decode_work(lp_tokjob_t *job) {
  tei_ctx_t *c = job->ctx;
  c->rc = lp_tei_parse_inplace(c->kind, c->body, c->body_len, c->max_inputs, &c->r, &c->status, &c->type, c->err,
                               sizeof(c->err));
  /* kept only when a text lies in it: many short texts are jansson's copies */
  uintptr_t b = (uintptr_t)c->body; /* as integers: pointers into other objects compared */
  int in_body = !c->rc && (uintptr_t)c->r.query.s - b < c->body_len;
  for (size_t i = 0; !c->rc && i < c->r.ntexts && !in_body; i++)
    in_body = (uintptr_t)c->r.texts[i].s - b < c->body_len || (uintptr_t)c->r.texts[i].b - b < c->body_len;
  if (!in_body) {
    free(c->body);
    c->body = NULL;
  }
}

/* The request's ids are known (tj: the workers' units; NULL when it gave
 * token ids only): made into a job for the scheduler (or refused). */
static void tei_submit(lp_front_t *f, lp_tokjob_t *tj, lp_http_req_t *req, tei_ctx_t *c) {
  const lp_tei_req_t *r = &c->r;
  int route = c->route, kind = c->kind;
  size_t mi = (size_t)(c->m - f->shared->models);
  const lp_model_config_t *mc = &f->cfg->models[mi];
  const lp_tei_template_t *tpl = &f->shared->pair[mi];
  uint32_t *lens = malloc(r->ntexts * sizeof(*lens)); /* owned here */
  seq_err_t se = {.status = 503, .type = LP_TEI_UNHEALTHY, .code = "out_of_memory", .msg = "proxy out of memory"};
  size_t ntok = 0;
  lp_perr_t e = {0};
  lp_job_t *job = NULL;
  size_t texts_bytes = 0;
  char *texts = r->return_text && kind == LP_TEI_RERANK ? keep_texts(r, &texts_bytes) : NULL;
  int grc = !lens || (r->return_text && kind == LP_TEI_RERANK && !texts) ? -ENOMEM
            : kind != LP_TEI_RERANK ? embed_ids(f, tj, &c->um, tpl, r, c->limit, lens, &ntok, &se)
                                    : rerank_ids(f, tpl, tj, r, c->limit, lens, &ntok, &se);
  if (grc) {
    lp__tei_reject(f, req, route, se.status, se.type, se.code, se.msg, NULL);
  } else if ((job = lp__job_new(f, c->m, f->enc, ntok, lens, r->ntexts, 1, 0, 0, NULL, 0,
                                kind == LP_TEI_RERANK ? "texts" : "inputs", &e)) == NULL) {
    lp__tei_reject_job(f, req, route, e.status, e.code, e.msg, NULL);
  } else {
    job->tei = route;
    job->proto.tei.normalize = r->normalize;
    job->proto.tei.raw_scores = r->raw_scores;
    job->proto.tei.texts = texts;
    job->bytes += texts_bytes; /* held while queued: max_queue_bytes counts them */
    job->embed_dims = kind == LP_TEI_EMBED || kind == LP_TEI_SIMILARITY ? mc->embed_dimensions : 0;
    job->proto.tei.dims = r->dimensions;
    job->proto.tei.single = r->single;
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

/* The request's texts are tokenized: /tokenize answered, the others made
 * into a job. */
static void tei_tokenized(lp_front_t *f, lp_tokjob_t *tj, lp_http_req_t *req) {
  tei_ctx_t *c = tj->ctx;
  if (c->kind == LP_TEI_TOKENIZE)
    tokenize(f, req, tj, f->shared->tok[c->m - f->shared->models], &c->r, c->limit);
  else tei_submit(f, tj, req, c);
}

/* A unit for text s of the request: what the route needs of it. */
static void tei_unit(lp_tokunit_t *u, const lp_tei_text_t *s, int op, const lp_tei_req_t *r, uint32_t limit,
                     int cut) {
  u->text = s->s;
  u->len = s->len;
  u->op = op;
  u->special = r->add_special_tokens;
  /* with truncation only the kept part is read; without, more than the
   * limit is refused as soon as a prefix shows it */
  u->keep = cut && r->truncate && limit != UINT32_MAX ? limit : 0;
  u->left = r->left;
  u->limit = u->keep || limit == UINT32_MAX ? 0 : limit;
}

/* The request's body is decoded (c, owned here from now on): refused, or
 * its texts handed to the tokenizer workers. */
static void tei_decoded(lp_front_t *f, lp_http_req_t *req, tei_ctx_t *c) {
  int route = c->route, kind = c->kind;
  char err[256];
  lp_model_t *m = NULL;
  if (c->rc == -ENOMEM)
    lp__tei_reject(f, req, route, 503, LP_TEI_UNHEALTHY, "out_of_memory", "proxy out of memory", NULL);
  else if (c->rc)
    lp__tei_reject(f, req, route, c->status, c->type, c->status == 413 ? "too_many_sequences" : "bad_field",
                   c->err, NULL);
  else
    m = pick_model(f, req, route, c->r.model);
  if (!m) {
    tei_ctx_free(c);
    return;
  }
  size_t mi = (size_t)(m - f->shared->models);
  const lp_model_config_t *mc = &f->cfg->models[mi];
  const lp_tok_t *t = f->shared->tok[mi];
  const lp_tei_template_t *tpl = &f->shared->pair[mi];
  /* the longest sequence its configured shapes hold (the scheduler checks
   * the shapes in force again) */
  uint32_t limit = lp_bucket_set_max_len(&mc->shapes);
  if (!limit) limit = UINT32_MAX; /* shapes only backends report: the scheduler alone judges */
  lp_tokjob_t *tj = NULL;
  const lp_tei_req_t *r = &c->r;
  int has_text = kind == LP_TEI_RERANK || kind == LP_TEI_TOKENIZE, pairs = kind == LP_TEI_RERANK;
  size_t nunits = kind == LP_TEI_RERANK; /* the query's */
  for (size_t i = 0; i < r->ntexts; i++) {
    has_text |= !r->texts[i].ids;
    pairs |= r->texts[i].pair;
    nunits += r->texts[i].ids ? 0 : r->texts[i].pair ? 2 : 1;
  }
  const char *wrong = lp__tei_wrong_kind(mc, kind);
  int answered = 1;
  if (wrong) {
    /* TEI's answer to a route its model does not serve (a classifier's /embed) */
    snprintf(err, sizeof(err), "%s: the outputs of '%s' are %s", wrong, mc->name, lp_outputs_name(mc->outputs));
    lp__tei_reject(f, req, route, 424, LP_TEI_BACKEND, "wrong_model_kind", err, NULL);
  } else if ((has_text && !t) || (pairs && !tpl->nparts)) {
    snprintf(err, sizeof(err), t ? "the model '%s' has no pair template for pairs of texts (configure "
             "models.%s.tokenizer.pair_template)" : "the model '%s' takes token ids: it has no tokenizer for text "
             "(configure models.%s.tokenizer)", mc->name, mc->name);
    lp__tei_reject(f, req, route, 400, LP_TEI_VALIDATION, "no_tokenizer", err, NULL);
  } else if (r->dimensions && kind == LP_TEI_EMBED && !mc->embed_dimensions) {
    snprintf(err, sizeof(err), "`dimensions` is not allowed: the vectors of '%s' may not be cut (configure "
             "models.%s.embedding.dimensions)", mc->name, mc->name);
    lp__tei_reject(f, req, route, 422, LP_TEI_VALIDATION, "bad_field", err, NULL);
  } else if (r->dimensions && kind == LP_TEI_EMBED && r->dimensions > mc->embed_dimensions) {
    snprintf(err, sizeof(err), "`dimensions` should be smaller than the maximum embedding dimension (%u)",
             mc->embed_dimensions);
    lp__tei_reject(f, req, route, 422, LP_TEI_VALIDATION, "bad_field", err, NULL);
  } else if (kind == LP_TEI_EMBED_SPARSE) {
    /* sparse vectors need a backend that gives them (a SPLADE head): none does yet */
    lp__tei_reject(f, req, route, 424, LP_TEI_BACKEND, "wrong_model_kind",
                   "Model is not an embedding model with SPLADE pooling: lanepack's backends give no sparse outputs",
                   NULL);
  } else if (kind == LP_TEI_DECODE) {
    lp__tei_decode(f, req, r, t);
  } else {
    answered = 0;
  }
  if (answered) {
    tei_ctx_free(c);
    return;
  }
  c->m = m;
  c->limit = limit;
  if (kind != LP_TEI_RERANK && kind != LP_TEI_TOKENIZE) {
    long *map = malloc(2 * (r->ntexts ? r->ntexts : 1) * sizeof(*map)); /* c's */
    if (!map) {
      lp__tei_reject(f, req, route, 503, LP_TEI_UNHEALTHY, "out_of_memory", "proxy out of memory", NULL);
      tei_ctx_free(c);
      return;
    }
    c->um.unit = map;
    c->um.second = map + (r->ntexts ? r->ntexts : 1);
  }
  if (!nunits) { /* token ids only: nothing to tokenize */
    tei_submit(f, NULL, req, c);
    tei_ctx_free(c);
    return;
  }
  if (!(tj = lp__tokjob_new(f, t, nunits))) {
    lp__tei_reject(f, req, route, 503, LP_TEI_UNHEALTHY, "out_of_memory", "proxy out of memory", NULL);
    tei_ctx_free(c);
    return;
  }
  /* the texts to the tokenizer workers: this loop goes on serving */
  tj->ctx = c;
  tj->ctx_free = tei_ctx_free;
  tj->done = tei_tokenized;
  lp_tokunit_t *u = tj->units;
  if (kind == LP_TEI_RERANK) {
    tei_unit(u++, &c->r.query, LP_TOKOP_PLAIN, &c->r, limit, 0);
    for (size_t i = 0; i < r->ntexts; i++) tei_unit(u++, &r->texts[i], LP_TOKOP_PLAIN, r, limit, 1);
  } else if (kind == LP_TEI_TOKENIZE) {
    /* a request of little text gets its answer's parts built by the
     * workers as they tokenize, once (its pieces, counted as its ids with
     * the special tokens are), the front only joining them; a larger one's
     * ids only: their counts check every input and size the answer, built
     * (or streamed, tokenized again) on the front (tokenize) */
    size_t bytes = 0;
    for (size_t i = 0; i < r->ntexts; i++) bytes += r->texts[i].len;
    int small = r->add_special_tokens && bytes <= TOKENIZE_PIECES_BYTES;
    int op = small ? LP_TOKOP_PIECES : LP_TOKOP_IDS;
    for (size_t i = 0; i < r->ntexts; i++) tei_unit(u++, &r->texts[i], op, r, limit, 0);
  } else {
    for (size_t i = 0; i < r->ntexts; i++) {
      const lp_tei_text_t *in = &r->texts[i];
      c->um.unit[i] = c->um.second[i] = -1;
      if (in->ids) continue;
      c->um.unit[i] = u - tj->units;
      if (!in->pair) {
        tei_unit(u++, in, LP_TOKOP_IDS, r, limit, 1);
        continue;
      }
      /* a pair's halves whole (the template cuts the pair with truncate),
       * each refused early past the limit without it */
      const lp_tei_text_t second = {.s = in->b, .len = in->blen};
      tei_unit(u++, in, LP_TOKOP_PLAIN, r, r->truncate ? UINT32_MAX : limit, 0);
      c->um.second[i] = u - tj->units;
      tei_unit(u++, &second, LP_TOKOP_PLAIN, r, r->truncate ? UINT32_MAX : limit, 0);
    }
  }
  if (lp__front_tokenize(f, req, tj)) {
    lp__tei_reject(f, req, route, 429, LP_TEI_OVERLOADED, "tokenizer_busy",
                   "Model is overloaded: too much text is waiting to be tokenized", NULL);
    lp__tokjob_free(tj);
    return;
  }
  /* the texts live in the parsed request: the body is not needed */
  free(req->body);
  req->body = NULL;
}

static void tei_decoded_back(lp_front_t *f, lp_tokjob_t *tj, lp_http_req_t *req) {
  tei_ctx_t *c = tj->ctx;
  tj->ctx = NULL; /* tei_decoded's now */
  tei_decoded(f, req, c);
}

void lp__tei_request(lp_front_t *f, lp_http_req_t *req, int route) {
  if (req->method != LP_HTTP_POST) {
    lp__tei_reject(f, req, route, 405, LP_TEI_VALIDATION, "method_not_allowed", "use POST", NULL);
    return;
  }
  tei_ctx_t *c = calloc(1, sizeof(*c));
  if (!c) {
    lp__tei_reject(f, req, route, 503, LP_TEI_UNHEALTHY, "out_of_memory", "proxy out of memory", NULL);
    return;
  }
  static const int kinds[][2] = {{LP_ROUTE_TEI_EMBED, LP_TEI_EMBED},         {LP_ROUTE_TEI_RERANK, LP_TEI_RERANK},
                                 {LP_ROUTE_TEI_TOKENIZE, LP_TEI_TOKENIZE},   {LP_ROUTE_TEI_PREDICT, LP_TEI_PREDICT},
                                 {LP_ROUTE_TEI_EMBED_ALL, LP_TEI_EMBED_ALL}, {LP_ROUTE_TEI_SIMILARITY, LP_TEI_SIMILARITY},
                                 {LP_ROUTE_TEI_DECODE, LP_TEI_DECODE},       {LP_ROUTE_TEI_EMBED_SPARSE, LP_TEI_EMBED_SPARSE}};
  c->route = route;
  c->kind = LP_TEI_TOKENIZE;
  for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
    if (kinds[i][0] == route) c->kind = kinds[i][1];
  c->max_inputs = f->cfg->max_sequences_per_request;
  c->body_len = req->body_len;
  /* a large body is decoded on a worker too */
  if (lp__front_decode(f, req, c, tei_ctx_free, &c->body, tei_decode_work, tei_decoded_back) == 0) return;
  c->body = req->body; /* borrowed */
  tei_decode(c);
  c->body = NULL;
  tei_decoded(f, req, c);
}

static void put_tei(lp_buf_t *out, uint32_t i, const float *v, size_t n, const lp_job_t *job) {
  lp_tei_vector(out, v, n);
}

int lp__tei_embed_part(lp_front_t *f, lp_buf_t *out, const lp_job_t *job, lp_vecpos_t *pos, size_t values) {
  if (!pos->next) lp_buf_puts(out, "[");
  int rc = lp__vectors_part(f, out, job, pos, values, job->proto.tei.dims, job->proto.tei.normalize, ",", put_tei);
  if (rc) return rc;
  lp_buf_puts(out, "]\n");
  return out->oom ? -ENOMEM : 0;
}

int lp__tei_body(lp_front_t *f, lp_buf_t *out, const lp_job_t *job) {
  if (job->tei == LP_ROUTE_TEI_PREDICT) return lp__tei_predict_body(f, out, job);
  if (job->tei == LP_ROUTE_TEI_EMBED_ALL) return lp__tei_embed_all_body(f, out, job);
  if (job->tei == LP_ROUTE_TEI_SIMILARITY) return lp__tei_similarity_body(f, out, job);
  if (job->tei != LP_ROUTE_TEI_RERANK) {
    lp_vecpos_t pos = {0, 0};
    return lp__tei_embed_part(f, out, job, &pos, SIZE_MAX);
  }
  lp_tei_rank_t *ranks = malloc(job->nseq * sizeof(*ranks)); /* owned here */
  if (!ranks) return -ENOMEM;
  for (uint32_t i = 0; i < job->nseq; i++) {
    /* a reranker's score is the first value of its segment's output */
    long n = lp__seq_vector(f, &job->seqs[i], 1);
    if (n <= 0) {
      free(ranks);
      return n < 0 ? (int)n : -EPROTO;
    }
    ranks[i] = (lp_tei_rank_t){job->proto.tei.raw_scores ? f->vec[0] : lp_tei_sigmoid(f->vec[0]), i};
  }
  lp_buf_puts(out, "[");
  lp_tei_rank(ranks, job->nseq);
  const size_t *off = (const size_t *)job->proto.tei.texts;
  const char *s = job->proto.tei.texts ? (const char *)(off + job->nseq + 1) : NULL;
  for (uint32_t i = 0; i < job->nseq; i++) {
    size_t k = ranks[i].index;
    if (i) lp_buf_puts(out, ",");
    lp_tei_rank_item(out, k, ranks[i].score, s ? s + off[k] : NULL, s ? off[k + 1] - off[k] : 0);
  }
  free(ranks);
  lp_buf_puts(out, "]\n");
  return out->oom ? -ENOMEM : 0;
}
