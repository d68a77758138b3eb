/* Runs on the front that read the request: text-embeddings-inference's
 * routes. /embed, /rerank, /predict, /embed_all and /similarity become one job
 * of a packed sequence per input (per (query, text) pair), answered in TEI's
 * shapes from the backend's outputs; /tokenize is answered here at once (and
 * /decode, /info in teiapi.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lanepack/openai.h"
#include "lanepack/tei.h"
#include "lanepack/tokenizer.h"
#include "core/internal.h" /* lp__grow */
#include "proxy.h"

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

/* /tokenize: each input's pieces with their ids and where they lie in it,
 * each input at most limit pieces, as /embed's without truncate (an answer
 * takes some 60 bytes a piece: the bound keeps it near its model's sizes). */
static void tokenize(lp_front_t *f, lp_http_req_t *req, const lp_tok_t *t, const lp_tei_req_t *r,
                     uint32_t limit) {
  lp_buf_t out;
  lp_buf_init(&out);
  lp_tok_piece_t *pc = NULL; /* owned here */
  size_t cap = 0;
  int rc = 0;
  char msg[256];
  lp_buf_puts(&out, "[");
  for (size_t i = 0; i < r->ntexts && !rc; i++) {
    const lp_tei_text_t *in = &r->texts[i];
    long n = lp_tok_pieces(t, in->s, in->len, r->add_special_tokens, pc, cap);
    if (n > (long)cap) {
      lp_tok_piece_t *p2 = realloc(pc, (size_t)n * sizeof(*pc));
      if (!p2) {
        rc = -ENOMEM;
        break;
      }
      pc = p2;
      cap = (size_t)n;
      n = lp_tok_pieces(t, in->s, in->len, r->add_special_tokens, pc, cap);
    }
    if (n < 0 || n > (long)cap) {
      rc = n == -ENOMEM ? -ENOMEM : -EINVAL;
      break;
    }
    if ((size_t)n > limit) {
      snprintf(msg, sizeof(msg), "Input validation error: `inputs[%zu]` must have at most %u tokens. Given: %ld", i,
               limit, n);
      rc = -E2BIG;
      break;
    }
    lp_buf_puts(&out, i ? ",[" : "[");
    for (long k = 0; k < n; k++) {
      if (k) lp_buf_puts(&out, ",");
      const lp_tok_piece_t *p = &pc[k];
      const char *name = lp_tok_piece_name(t, p->id);
      int in_text = !p->special && p->begin <= p->end && p->end <= in->len;
      lp_tei_token(&out, p->id, in_text ? in->s + p->begin : name, in_text ? p->end - p->begin : strlen(name),
                   !in_text, p->begin, p->end);
    }
    lp_buf_puts(&out, "]");
  }
  lp_buf_puts(&out, "]\n");
  free(pc);
  if (rc == -E2BIG) {
    lp__tei_reject(f, req, LP_ROUTE_TEI_TOKENIZE, 422, LP_TEI_TOKENIZER, "sequence_too_long", msg, NULL);
  } else if (rc == -EINVAL) {
    lp__tei_reject(f, req, LP_ROUTE_TEI_TOKENIZE, 422, LP_TEI_TOKENIZER, "tokenizer_refused",
                   "the tokenizer refused a text", NULL);
  } else if (rc || out.oom) {
    lp__tei_reject(f, req, LP_ROUTE_TEI_TOKENIZE, 503, LP_TEI_UNHEALTHY, "out_of_memory", "proxy out of memory",
                   NULL);
  } else {
    lp_proxy_count(f, LP_ROUTE_TEI_TOKENIZE, 200);
    lp__access_log(f, req, 200, NULL);
    lp_http_respond(req, 200, NULL, "application/json", out.data, out.len);
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

static long plain_ids(const lp_tok_t *t, const lp_tei_text_t *text, int32_t **buf, size_t *cap);

/* Token ids the client gave, as they are (TEI adds no special pieces to
 * them), cut to limit from the end (or the start when left) with truncate:
 * the count (more than cap: nothing copied; call again with room). */
static long given_ids(const lp_tei_text_t *in, const lp_tei_req_t *r, uint32_t limit, int32_t *out, size_t cap) {
  size_t n = in->nids, from = 0;
  if (r->truncate && n > limit) {
    if (r->left) from = n - limit;
    n = limit;
  }
  if (n <= cap) memcpy(out, in->ids + from, n * sizeof(*out));
  return (long)n;
}

/* A /predict pair laid out by the model's pair template, its second text cut
 * with truncate: the count (more than cap: call again with room), -E2BIG when
 * the first leaves the second no room, -ENOMEM, -EINVAL. */
static long pair_ids(const lp_tok_t *t, const lp_tei_template_t *tpl, const lp_tei_text_t *in,
                     const lp_tei_req_t *r, uint32_t limit, int32_t *out, size_t cap) {
  int32_t *a = NULL, *b = NULL; /* owned here */
  size_t acap = 0, bcap = 0;
  const lp_tei_text_t second = {.s = in->b, .len = in->blen};
  long na = plain_ids(t, in, &a, &acap), nb = na < 0 ? na : plain_ids(t, &second, &b, &bcap), k = nb;
  if (nb >= 0) {
    size_t whole = (size_t)na + (size_t)nb + tpl->nparts - 2; /* every part but $A and $B is one piece */
    size_t want = r->truncate && whole > limit ? limit : whole; /* what the layout holds */
    k = want > cap ? (long)want
                   : lp_tei_pair(tpl, a, (size_t)na, b, (size_t)nb, r->truncate ? limit : 0, r->left, out, cap);
  }
  free(a);
  free(b);
  return k;
}

/* /embed's (/embed_all's, /similarity's, /predict's) inputs, tokenized into
 * f->enc (lens[i] each) within limit tokens, cut when the request says so: 0
 * or negative with e set. Token ids are taken as given; a /predict pair is
 * laid out by the model's pair template (tpl). */
static int embed_ids(lp_front_t *f, const lp_tok_t *t, const lp_tei_template_t *tpl, const lp_tei_req_t *r,
                     uint32_t limit, uint32_t *lens, size_t *ntok, seq_err_t *e) {
  size_t n = 0;
  if (lp__grow((void **)&f->enc, &f->enc_cap, 1, sizeof(*f->enc))) return seq_fail(e, -ENOMEM, 503, LP_TEI_UNHEALTHY, "out_of_memory");
  for (size_t i = 0; i < r->ntexts; i++) {
    const lp_tei_text_t *in = &r->texts[i];
    long k = in->ids ? given_ids(in, r, limit, f->enc + n, f->enc_cap - n)
             : in->pair ? pair_ids(t, tpl, in, r, limit, f->enc + n, f->enc_cap - n)
                        : lp_tok_encode(t, in->s, in->len, f->enc + n, f->enc_cap - n);
    if (k == -E2BIG && in->pair) {
      snprintf(e->msg, sizeof(e->msg), "the first text of `inputs[%zu]` with the template's pieces leaves the "
               "second no room within the model's %u tokens", i, limit);
      return seq_fail(e, -E2BIG, 422, LP_TEI_TOKENIZER, "sequence_too_long");
    }
    if (k > 0 && (size_t)k > limit && r->truncate && !in->ids && !in->pair) {
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
  static const int kinds[][2] = {{LP_ROUTE_TEI_EMBED, LP_TEI_EMBED},         {LP_ROUTE_TEI_RERANK, LP_TEI_RERANK},
                                 {LP_ROUTE_TEI_TOKENIZE, LP_TEI_TOKENIZE},   {LP_ROUTE_TEI_PREDICT, LP_TEI_PREDICT},
                                 {LP_ROUTE_TEI_EMBED_ALL, LP_TEI_EMBED_ALL}, {LP_ROUTE_TEI_SIMILARITY, LP_TEI_SIMILARITY},
                                 {LP_ROUTE_TEI_DECODE, LP_TEI_DECODE},       {LP_ROUTE_TEI_EMBED_SPARSE, LP_TEI_EMBED_SPARSE}};
  int kind = LP_TEI_TOKENIZE;
  for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
    if (kinds[i][0] == route) kind = kinds[i][1];
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
  int has_text = kind == LP_TEI_RERANK || kind == LP_TEI_TOKENIZE, pairs = kind == LP_TEI_RERANK;
  for (size_t i = 0; i < r.ntexts; i++) {
    has_text |= !r.texts[i].ids;
    pairs |= r.texts[i].pair;
  }
  const char *wrong = lp__tei_wrong_kind(mc, kind);
  if (wrong) {
    /* TEI's answer to a route its model does not serve (a classifier's /embed) */
    snprintf(err, sizeof(err), "%s: the outputs of '%s' are %s", wrong, mc->name, lp_outputs_name(mc->outputs));
    lp__tei_reject(f, req, route, 424, LP_TEI_BACKEND, "wrong_model_kind", err, NULL);
  } else if ((has_text && !t) || (pairs && !tpl->nparts)) {
    snprintf(err, sizeof(err), t ? "the model '%s' has no pair template for pairs of texts (configure "
             "models.%s.tokenizer.pair_template)" : "the model '%s' takes token ids: it has no tokenizer for text "
             "(configure models.%s.tokenizer)", mc->name, mc->name);
    lp__tei_reject(f, req, route, 400, LP_TEI_VALIDATION, "no_tokenizer", err, NULL);
  } else if (r.dimensions && kind == LP_TEI_EMBED && !mc->embed_dimensions) {
    snprintf(err, sizeof(err), "`dimensions` is not allowed: the vectors of '%s' may not be cut (configure "
             "models.%s.embedding.dimensions)", mc->name, mc->name);
    lp__tei_reject(f, req, route, 422, LP_TEI_VALIDATION, "bad_field", err, NULL);
  } else if (r.dimensions && kind == LP_TEI_EMBED && r.dimensions > mc->embed_dimensions) {
    snprintf(err, sizeof(err), "`dimensions` should be smaller than the maximum embedding dimension (%u)",
             mc->embed_dimensions);
    lp__tei_reject(f, req, route, 422, LP_TEI_VALIDATION, "bad_field", err, NULL);
  } else if (kind == LP_TEI_EMBED_SPARSE) {
    /* sparse vectors need a backend that gives them (a SPLADE head): none does yet */
    lp__tei_reject(f, req, route, 424, LP_TEI_BACKEND, "wrong_model_kind",
                   "Model is not an embedding model with SPLADE pooling: lanepack's backends give no sparse outputs",
                   NULL);
  } else if (kind == LP_TEI_DECODE) {
    lp__tei_decode(f, req, &r, t);
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
              : kind != LP_TEI_RERANK ? embed_ids(f, t, tpl, &r, limit, lens, &ntok, &se)
                                      : rerank_ids(f, t, tpl, &r, limit, lens, &ntok, &se);
    if (grc) {
      lp__tei_reject(f, req, route, se.status, se.type, se.code, se.msg, NULL);
    } else if ((job = lp__job_new(f, m, f->enc, ntok, lens, r.ntexts, 1, 0, 0, NULL, 0,
                                  kind == LP_TEI_RERANK ? "texts" : "inputs", &e)) == NULL) {
      lp__tei_reject_job(f, req, route, e.status, e.code, e.msg, NULL);
    } else {
      job->tei = route;
      job->tei_normalize = r.normalize;
      job->tei_raw_scores = r.raw_scores;
      job->tei_texts = texts;
      job->bytes += texts_bytes; /* held while queued: max_queue_bytes counts them */
      job->embed_dims = kind == LP_TEI_EMBED || kind == LP_TEI_SIMILARITY ? mc->embed_dimensions : 0;
      job->tei_dims = r.dimensions;
      job->tei_single = r.single;
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
  if (job->tei == LP_ROUTE_TEI_PREDICT) return lp__tei_predict_body(f, out, job);
  if (job->tei == LP_ROUTE_TEI_EMBED_ALL) return lp__tei_embed_all_body(f, out, job);
  if (job->tei == LP_ROUTE_TEI_SIMILARITY) return lp__tei_similarity_body(f, out, job);
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
      return n < 0 ? (int)n : -EPROTO;
    }
    if (rerank) {
      ranks[i] = (lp_tei_rank_t){job->tei_raw_scores ? f->vec[0] : lp_tei_sigmoid(f->vec[0]), i};
      continue;
    }
    if ((n = lp__check_vector(job, n, &first)) < 0) return (int)n;
    /* tei_dims <= embed_dims <= n: admission and lp__check_vector saw to it */
    if (job->tei_dims) n = (long)job->tei_dims;
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
