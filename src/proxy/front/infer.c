/* Reading an inference request. Token arrays go through the allocation-free
 * reader straight into the job's token storage; the few envelope fields
 * (model, id) are decoded by jansson from their own bytes only. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "lanepack/jscan.h"
#include "front/front.h"

typedef lp_perr_t perr_t;

/* The refusal written down; NULL, what a parser returns on refusal. */
static lp_job_t *fail(perr_t *e, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static lp_job_t *fail(perr_t *e, int status, const char *code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  lp__perr_vset(e, status, code, fmt, ap);
  va_end(ap);
  return NULL;
}

/* Token-array errors, with the index of the offending value. */
static lp_job_t *token_error(perr_t *e, int err, const char *field, size_t index, int64_t vocab) {
  switch (err) {
    case LP_JSCAN_E_NOT_INT:
      return fail(e, 400, "bad_token", "%s[%zu] is not an integer token id", field, index);
    case LP_JSCAN_E_RANGE:
      if (vocab)
        return fail(e, 400, "token_out_of_range", "%s[%zu] is outside [0, %lld)", field, index,
                    (long long)vocab);
      return fail(e, 400, "token_out_of_range", "%s[%zu] is not in [0, 2147483647]", field, index);
    case LP_JSCAN_E_TOO_MANY:
      return fail(e, 413, "body_too_large", "%s has more tokens than the body can hold", field);
    default:
      return fail(e, 400, "malformed_json", "%s is not an array of integers", field);
  }
}

static int is_json_type(const char *ct) {
  if (!ct[0]) return 1; /* absent: accepted */
  size_t n = strlen("application/json");
  if (strncasecmp(ct, "application/json", n) != 0) return 0;
  return ct[n] == '\0' || ct[n] == ';' || ct[n] == ' ';
}

/* Token storage while a body is read: the proxy's scratch arrays, lent for
 * one parse (a job copies what it keeps into its own block), so a request
 * costs no allocation here. */
typedef struct {
  lp_front_t *p;
  int32_t *tokens;
  size_t cap, used;
  uint32_t *lens;         /* one per sequence read */
  size_t nspans, lens_cap;
  const char *text;       /* 'input_ids' between its brackets, borrowed from
                             the body (kept when plain: lp__job_new_text) */
  size_t text_len;
} toks_t;

/* Scratch larger than this is given back after the parse that needed it. */
#define TOKS_KEEP_BYTES (1u << 20)

static void toks_init(toks_t *t, lp_front_t *p) {
  *t = (toks_t){.p = p, .tokens = p->tok_scratch, .cap = p->tok_scratch_cap,
                .lens = p->len_scratch, .lens_cap = p->len_scratch_cap};
}

static void toks_done(toks_t *t) {
  lp_front_t *p = t->p;
  if (t->cap * sizeof(int32_t) > TOKS_KEEP_BYTES) {
    free(t->tokens);
    t->tokens = NULL;
    t->cap = 0;
  }
  if (t->lens_cap * sizeof(uint32_t) > TOKS_KEEP_BYTES) {
    free(t->lens);
    t->lens = NULL;
    t->lens_cap = 0;
  }
  p->tok_scratch = t->tokens;
  p->tok_scratch_cap = t->cap;
  p->len_scratch = t->lens;
  p->len_scratch_cap = t->lens_cap;
}

static int toks_span(toks_t *t, size_t n) {
  if (t->nspans == t->lens_cap) {
    size_t c = t->lens_cap ? t->lens_cap * 2 : 8;
    uint32_t *nl = realloc(t->lens, c * sizeof(uint32_t));
    if (!nl) return -1;
    t->lens = nl;
    t->lens_cap = c;
  }
  t->lens[t->nspans++] = (uint32_t)n;
  t->used += n;
  return 0;
}

/* Reads 'input_ids' (one array) or 'inputs' (an array of arrays) at v straight
 * into token storage, in one pass; the vocabulary is checked once the model is
 * known. Returns the byte after the value, or NULL with e set. */
static const char *read_tokens(lp_front_t *f, toks_t *t, const char *v, const char *end, int multi,
                               size_t body_len, perr_t *e) {
  size_t need = body_len / 2 + 1; /* "1," is the shortest token */
  if (t->cap < need) {
    int32_t *nt = realloc(t->tokens, need * sizeof(int32_t));
    if (!nt) return fail(e, 503, "out_of_memory", "proxy out of memory"), NULL;
    t->tokens = nt;
    t->cap = need;
  }
  size_t n;
  int err;
  if (!multi) {
    const char *q = lp_jscan_int_array(v, end, t->tokens, t->cap, 0, INT32_MAX, &n, &err);
    if (!q) return token_error(e, err, "input_ids", n, 0), NULL;
    if (toks_span(t, n)) return fail(e, 503, "out_of_memory", "proxy out of memory"), NULL;
    if (n) {
      t->text = v + 1;
      t->text_len = (size_t)(q - v - 2);
    }
    return q;
  }
  if (*v != '[') return fail(e, 400, "bad_field", "'inputs' must be an array of token arrays"), NULL;
  const char *q = lp_jscan_ws(v + 1, end);
  while (q < end && *q != ']') {
    if (t->nspans == f->cfg->max_sequences_per_request)
      return fail(e, 413, "too_many_sequences", "more than %u sequences in one request",
                  f->cfg->max_sequences_per_request), NULL;
    const char *r = lp_jscan_int_array(q, end, t->tokens + t->used, t->cap - t->used, 0, INT32_MAX,
                                       &n, &err);
    if (!r) {
      char fname[48];
      snprintf(fname, sizeof(fname), "inputs[%zu]", t->nspans);
      return token_error(e, err, fname, n, 0), NULL;
    }
    if (toks_span(t, n)) return fail(e, 503, "out_of_memory", "proxy out of memory"), NULL;
    q = lp_jscan_ws(r, end);
    if (q < end && *q == ',') q = lp_jscan_ws(q + 1, end);
    else if (q < end && *q != ']') return fail(e, 400, "malformed_json", "'inputs' is not valid JSON"), NULL;
  }
  if (q >= end) return fail(e, 400, "malformed_json", "'inputs' is not valid JSON"), NULL;
  if (t->nspans == 0) return fail(e, 400, "empty_sequence", "'inputs' holds no sequence"), NULL;
  return q + 1;
}

static lp_job_t *parse(lp_front_t *f, lp_http_req_t *req, const char *path_model,
                       size_t path_model_len, toks_t *t, perr_t *e) {
  const char *body = req->body, *end = req->body + req->body_len;
  const char *pp = lp_jscan_ws(body, end);
  if (pp >= end || *pp != '{')
    return fail(e, 400, "malformed_json", "the body must be a JSON object");
  const char *ids_at = NULL, *inputs_at = NULL, *model_at = NULL, *model_end = NULL;
  const char *id_at = NULL, *id_end = NULL;
  int64_t priority = 0;
  double deadline_ms = -1;
  int seen_prio = 0, seen_dead = 0;
  pp = lp_jscan_ws(pp + 1, end);
  while (pp < end && *pp != '}') {
    if (*pp != '"') return fail(e, 400, "malformed_json", "the body is not valid JSON");
    const char *k = pp;
    int is_ids, is_inputs, is_model, is_prio, is_dead, is_id;
    pp = lp_jscan_key(k, end, "input_ids", &is_ids);
    if (!pp) return fail(e, 400, "malformed_json", "the body is not valid JSON");
    lp_jscan_key(k, end, "inputs", &is_inputs);
    lp_jscan_key(k, end, "model", &is_model);
    lp_jscan_key(k, end, "priority", &is_prio);
    lp_jscan_key(k, end, "deadline_ms", &is_dead);
    lp_jscan_key(k, end, "id", &is_id);
    size_t klen = (size_t)(pp - k);
    pp = lp_jscan_ws(pp, end);
    if (pp >= end || *pp != ':') return fail(e, 400, "malformed_json", "the body is not valid JSON");
    pp = lp_jscan_ws(pp + 1, end);
    const char *v = pp;
    if ((is_ids && ids_at) || (is_inputs && inputs_at) || (is_model && model_at) ||
        (is_prio && seen_prio) || (is_dead && seen_dead) || (is_id && id_at))
      return fail(e, 400, "duplicate_field", "field %.*s appears twice", (int)klen, k);
    if ((is_ids && inputs_at) || (is_inputs && ids_at))
      return fail(e, 400, "missing_input", "give exactly one of 'input_ids' or 'inputs'");
    if (is_ids || is_inputs) {
      pp = read_tokens(f, t, pp, end, is_inputs, req->body_len, e);
      if (!pp) return NULL;
    } else {
      pp = lp_jscan_skip(pp, end, LP_JSCAN_MAX_DEPTH);
      if (!pp) return fail(e, 400, "malformed_json", "the body is not valid JSON (or nests too deep)");
    }
    if (is_ids) ids_at = v;
    else if (is_inputs) inputs_at = v;
    else if (is_model) {
      model_at = v;
      model_end = pp;
      if (*v != '"') return fail(e, 400, "bad_field", "'model' must be a string");
    } else if (is_id) {
      if (*v != '"' && *v != '-' && (*v < '0' || *v > '9'))
        return fail(e, 400, "bad_field", "'id' must be a string or a number");
      if (pp - v > 256) return fail(e, 400, "bad_field", "'id' is longer than 256 bytes");
      /* it is echoed back: it must be valid JSON text, UTF-8 included */
      json_error_t je;
      json_t *idv = json_loadb(v, (size_t)(pp - v), JSON_DECODE_ANY, &je);
      if (!idv || !(json_is_string(idv) || json_is_integer(idv))) {
        json_decref(idv);
        return fail(e, 400, "bad_field", "'id' must be a UTF-8 string or an integer");
      }
      json_decref(idv);
      id_at = v;
      id_end = pp;
    } else if (is_prio) {
      /* an integer (any size: past [-1000, 1000] it is clamped, as v2's is) */
      char num[32];
      size_t n = (size_t)(pp - v);
      char *ne;
      seen_prio = 1;
      if (n >= sizeof(num) || (*v != '-' && (*v < '0' || *v > '9')))
        return fail(e, 400, "bad_field", "'priority' must be an integer (clamped to [-1000, 1000])");
      memcpy(num, v, n);
      num[n] = 0;
      priority = lp__clamp_priority(strtoll(num, &ne, 10)); /* out of range: LLONG_MIN or MAX */
      if (*ne) return fail(e, 400, "bad_field", "'priority' must be an integer (clamped to [-1000, 1000])");
    } else if (is_dead) {
      /* milliseconds, finite and >= 0: past an hour it is clamped, 0 leaves
       * the model's default_deadline_ms (as v2's timeout) */
      char num[400];
      size_t n = (size_t)(pp - v);
      char *ne;
      seen_dead = 1;
      if (n >= sizeof(num) || *v < '0' || *v > '9')
        return fail(e, 400, "bad_field", "'deadline_ms' must be a finite number of milliseconds >= 0");
      memcpy(num, v, n);
      num[n] = 0;
      deadline_ms = strtod(num, &ne);
      if (*ne || !isfinite(deadline_ms) || deadline_ms < 0)
        return fail(e, 400, "bad_field", "'deadline_ms' must be a finite number of milliseconds >= 0");
    } else {
      return fail(e, 400, "unknown_field", "unknown field %.*s", (int)(klen > 64 ? 64 : klen), k);
    }
    pp = lp_jscan_ws(pp, end);
    if (pp < end && *pp == ',') {
      pp = lp_jscan_ws(pp + 1, end);
      if (pp < end && *pp == '}') return fail(e, 400, "malformed_json", "the body is not valid JSON");
    } else if (pp < end && *pp != '}') {
      return fail(e, 400, "malformed_json", "the body is not valid JSON");
    }
  }
  if (pp >= end) return fail(e, 400, "malformed_json", "the body is not valid JSON (truncated)");
  if (lp_jscan_ws(pp + 1, end) != end)
    return fail(e, 400, "malformed_json", "the body has bytes after the JSON object");
  if (!ids_at == !inputs_at)
    return fail(e, 400, "missing_input", "give exactly one of 'input_ids' or 'inputs'");

  /* the model: the path's, else the body's, else the only or "default" one */
  char mname[LP_NAME_MAX] = "";
  if (model_at) {
    json_error_t je;
    json_t *s = json_loadb(model_at, (size_t)(model_end - model_at), JSON_DECODE_ANY, &je);
    if (!s || json_string_length(s) == 0 || json_string_length(s) >= sizeof(mname)) {
      json_decref(s);
      return fail(e, 400, "bad_field", "'model' must be a model name");
    }
    memcpy(mname, json_string_value(s), json_string_length(s) + 1);
    json_decref(s);
  }
  if (path_model) {
    if (path_model_len >= sizeof(mname))
      return fail(e, 404, "unknown_model", "no such model");
    if (model_at && (strlen(mname) != path_model_len || memcmp(mname, path_model, path_model_len)))
      return fail(e, 400, "model_mismatch", "'model' in the body differs from the path's");
    memcpy(mname, path_model, path_model_len);
    mname[path_model_len] = 0;
  }
  /* by the front's configuration: model i of it is the proxy's model i */
  lp_model_t *m = NULL;
  const lp_config_t *c = f->cfg;
  for (size_t i = 0; i < c->nmodels; i++) {
    if (mname[0] ? strcmp(c->models[i].name, mname) == 0
                 : (c->nmodels == 1 || strcmp(c->models[i].name, "default") == 0)) {
      m = &f->shared->models[i];
      break;
    }
  }
  if (!m) {
    if (!mname[0]) return fail(e, 400, "missing_model", "several models are served: name one");
    return fail(e, 404, "unknown_model", "no model named '%s'", mname);
  }

  /* the job copies the tokens into its own block, sized to their count */
  lp_job_t *job = lp__job_new_text(f, m, t->tokens, t->used, t->lens, t->nspans, inputs_at != NULL,
                                   (int)priority, deadline_ms, id_at,
                                   id_at ? (size_t)(id_end - id_at) : 0, t->text, t->text_len,
                                   inputs_at ? "inputs" : "input_ids", e);
  if (job) {
    lp__job_bind(job, req);
  }
  return job;
}

int lp__clamp_priority(int64_t priority) {
  return (int)(priority > 1000 ? 1000 : priority < -1000 ? -1000 : priority);
}

void lp__job_bind(lp_job_t *job, lp_http_req_t *req) {
  memcpy(job->request_id, req->request_id, sizeof(job->request_id));
  memcpy(job->traceparent, req->traceparent, sizeof(job->traceparent));
  job->tracestate = req->tracestate[0] ? strdup(req->tracestate) : NULL;
}

lp_job_t *lp__job_new(lp_front_t *f, lp_model_t *m, const int32_t *tokens, size_t ntokens,
                      const uint32_t *lens, size_t nseq, int multi, int priority, double deadline_ms,
                      const char *id_json, size_t id_len, const char *field, lp_perr_t *e) {
  return lp__job_new_text(f, m, tokens, ntokens, lens, nseq, multi, priority, deadline_ms, id_json,
                          id_len, NULL, 0, field, e);
}

lp_job_t *lp__job_new_text(lp_front_t *f, lp_model_t *m, const int32_t *tokens, size_t ntokens,
                           const uint32_t *lens, size_t nseq, int multi, int priority,
                           double deadline_ms, const char *id_json, size_t id_len,
                           const char *text, size_t text_len, const char *field, lp_perr_t *e) {
  const lp_shared_t *p = f->shared;
  /* the front's copy of the model's configuration (the scheduler's may be
   * rewritten by a reload meanwhile) */
  const lp_model_config_t *mc = &f->cfg->models[m - p->models];
  /* the vocabulary, now that the model is known: its vocab_size, else its
   * tokenizer's (an id past it would index past the model's embeddings) */
  int64_t vocab = mc->vocab_size;
  if (!vocab && p->tok[m - p->models]) vocab = lp_tok_vocab(p->tok[m - p->models]);
  if (vocab) {
    size_t off = 0;
    for (size_t si = 0; si < nseq; si++) {
      for (uint32_t k = 0; k < lens[si]; k++)
        if (tokens[off + k] >= vocab || tokens[off + k] < 0) {
          char fname[48];
          if (multi) snprintf(fname, sizeof(fname), "%s[%zu]", field, si);
          else snprintf(fname, sizeof(fname), "%s", field);
          return token_error(e, LP_JSCAN_E_RANGE, fname, k, vocab);
        }
      off += lens[si];
    }
  }
  /* one block: the job, its sequences, its tokens, its id and tokens' text */
  size_t nalloc = nseq ? nseq : 1;
  size_t head = sizeof(lp_job_t) + nalloc * sizeof(lp_seq_t);
  size_t idn = id_json ? id_len + 1 : 0;
  if (nseq != 1 || text_len > UINT32_MAX) text = NULL;
  size_t textn = text ? text_len : 0;
  size_t total = head + ntokens * sizeof(int32_t) + idn + textn;
  lp_job_t *job = malloc(total);
  if (!job) return fail(e, 503, "out_of_memory", "proxy out of memory");
  memset(job, 0, head);
  job->refs = 1; /* the job's own */
  job->seqs = (lp_seq_t *)(job + 1);
  job->nseq = (uint32_t)nseq;
  job->multi = multi;
  job->priority = priority;
  job->model = m;
  job->front = f;
  job->front_index = f->index;
  for (size_t i = 0; i < nseq; i++) {
    job->seqs[i].job = job;
    job->seqs[i].len = lens[i];
  }
  /* the shapes are the scheduler's: it checks them when the job arrives */
  job->tokens = (int32_t *)((char *)job + head);
  if (ntokens) memcpy(job->tokens, tokens, ntokens * sizeof(int32_t));
  if (id_json) {
    job->id_json = (char *)job->tokens + ntokens * sizeof(int32_t);
    memcpy(job->id_json, id_json, id_len);
    job->id_json[id_len] = '\0';
  }
  for (size_t i = 0, at = 0; i < nseq; at += lens[i++]) job->seqs[i].tokens = job->tokens + at;
  if (text) {
    char *tx = (char *)job->tokens + ntokens * sizeof(int32_t) + idn;
    /* checked as it is copied: anything but digits, commas and whitespace
     * (a "-0") leaves the writer to write the numbers (the room unused) */
    size_t kept = lp_jscan_compact_plain(text, textn, tx);
    if (kept != SIZE_MAX) {
      job->seqs[0].text = tx;
      job->seqs[0].text_len = (uint32_t)kept;
    }
  }
  job->bytes = total;
  job->arrive_ns = uv_hrtime();
  /* the client's deadline, within the bound that keeps the sum below from
   * overflowing (NaN fails every comparison: none); at least 1 ns when given */
  uint64_t dl = mc->default_deadline_ms * 1000000ull;
  if (deadline_ms > 0) {
    dl = (uint64_t)((deadline_ms < LP_MAX_DEADLINE_MS ? deadline_ms : LP_MAX_DEADLINE_MS) * 1e6);
    if (dl == 0) dl = 1;
  }
  job->deadline_ns = dl ? job->arrive_ns + dl : 0;
  return job;
}

lp_job_t *lp__infer_parse(lp_front_t *p, lp_http_req_t *req, const char *path_model,
                          size_t path_model_len) {
  perr_t e = {0};
  if (!is_json_type(req->content_type)) {
    lp_proxy_reject(p, req, LP_ROUTE_INFER, 415, NULL, "unsupported_media_type",
                    "the body must be application/json", NULL);
    return NULL;
  }
  if (!req->has_body_length) {
    lp_proxy_reject(p, req, LP_ROUTE_INFER, 411, NULL, "length_required",
                    "send the body with Content-Length or chunked encoding", NULL);
    return NULL;
  }
  toks_t t;
  toks_init(&t, p);
  lp_job_t *job = parse(p, req, path_model, path_model_len, &t, &e);
  toks_done(&t);
  /* the tokens were copied out: a queued request holds no body */
  free(req->body);
  req->body = NULL;
  req->body_len = 0;
  if (!job)
    lp_proxy_reject(p, req, LP_ROUTE_INFER, e.status, NULL, e.code, e.msg,
                    e.extra[0] ? e.extra : NULL);
  return job;
}
