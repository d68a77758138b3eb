/* Runs on the front that read the request: POST /v1/embeddings, the OpenAI
 * embeddings API. Each input is one sequence, packed with everyone else's;
 * texts are tokenized on the tokenizer workers (tokwork/) meanwhile;
 * the answer (the model's per-segment vectors, in input order) and every error
 * are in OpenAI's shapes, which its SDKs parse. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lanepack/openai.h"
#include "core/internal.h" /* lp__grow */
#include "front/front.h"

/* The request's sequences into f->enc (lens[i] each): token-id inputs
 * copied, texts' ids as the tokenizer workers gave them (tj's units, one per
 * text in input order; NULL: the model has no tokenizer, and a text is
 * refused naming the key). 0, or -EINVAL / -ENOMEM / -ENODATA, or -E2BIG
 * with *bad the input over the limit and *over at least its tokens. */
static int gather_ids(lp_front_t *f, const lp_openai_req_t *r, const lp_tokjob_t *tj, uint32_t *lens,
                      size_t *ntok, size_t *bad, long *over) {
  size_t n = 0, u = 0;
  for (size_t i = 0; i < r->ninputs; i++) {
    const lp_openai_input_t *in = &r->in[i];
    const int32_t *ids = NULL;
    long k = in->len;
    if (!in->text) {
      if (k) ids = r->tokens + in->off; /* none at all: tokens is NULL */
    } else {
      if (!tj) return -EINVAL;
      const lp_tokunit_t *tu = &tj->units[u++];
      ids = tu->ids;
      k = tu->n;
      *bad = i;
      *over = tu->over;
      if (k < 0) return (int)k;
    }
    if (k > UINT32_MAX) return -EINVAL;
    if (k == 0) return -ENODATA; /* whitespace the model drops: nothing to embed */
    if (lp__grow((void **)&f->enc, &f->enc_cap, n + (size_t)k, sizeof(*f->enc))) return -ENOMEM;
    memcpy(f->enc + n, ids, (size_t)k * sizeof(int32_t));
    lens[i] = (uint32_t)k;
    n += (size_t)k;
  }
  *ntok = n;
  return 0;
}

/* The model named, by the front's configuration (model i of it is the
 * proxy's model i), or NULL. */
static lp_model_t *find_model(lp_front_t *f, const char *name) {
  const lp_config_t *c = f->cfg;
  for (size_t i = 0; i < c->nmodels; i++)
    if (strcmp(c->models[i].name, name) == 0) return &f->shared->models[i];
  return NULL;
}

/* The request's job made from its ids (tj: its texts tokenized, or NULL)
 * and handed to the scheduler, or the client answered with why not. */
static void embeddings_submit(lp_front_t *f, lp_http_req_t *req, lp_openai_req_t *r, lp_model_t *m,
                              const lp_tokjob_t *tj) {
  char err[256];
  uint32_t *lens = malloc(r->ninputs * sizeof(*lens)); /* owned here */
  lp_perr_t e = {0};
  lp_job_t *job = NULL;
  size_t ntok = 0, bad = 0;
  long over = 0;
  const lp_model_config_t *mc = &f->cfg->models[m - f->shared->models];
  int grc = lens ? gather_ids(f, r, tj, lens, &ntok, &bad, &over) : -ENOMEM;
  if (grc == -EINVAL && !tj) {
    snprintf(err, sizeof(err), "the model '%.100s' takes token ids: it has no tokenizer for text "
             "(configure models.%.60s.tokenizer)", r->model, r->model);
    lp__openai_reject(f, req, 400, NULL, "invalid_request", err, "input", NULL);
  } else if (grc == -E2BIG) { /* a prefix already held more than the largest bucket */
    snprintf(err, sizeof(err), "input[%zu] has at least %ld tokens, the largest bucket holds %u", bad, over,
             lp_bucket_set_max_len(&mc->shapes));
    lp__openai_reject(f, req, 413, NULL, "sequence_too_long", err, "input", NULL);
  } else if (grc == -ENODATA) {
    lp__openai_reject(f, req, 400, NULL, "invalid_request", "an input has no tokens once tokenized", "input", NULL);
  } else if (grc == -EINVAL) {
    lp__openai_reject(f, req, 400, NULL, "invalid_request", "the tokenizer refused a text", "input", NULL);
  } else if (grc) {
    lp__openai_reject(f, req, 503, NULL, "out_of_memory", "proxy out of memory", NULL, NULL);
  } else if ((job = lp__job_new(f, m, f->enc, ntok, lens, r->ninputs, 1, 0, 0, NULL, 0, "input", &e)) == NULL) {
    lp__openai_reject(f, req, e.status, NULL, e.code, e.msg, "input", NULL);
  } else {
    job->openai = 1;
    job->proto.openai.base64 = r->base64;
    job->proto.openai.normalize = mc->embed_normalize;
    job->proto.openai.dims = r->dimensions;
    job->proto.openai.tokens = ntok;
    snprintf(job->proto.openai.model, sizeof(job->proto.openai.model), "%.*s", LP_NAME_MAX - 1, r->model); /* a model's name fits */
    job->embed_dims = mc->embed_dimensions;
    /* the tokens were copied out: a queued request holds no body (which
     * max_queue_bytes does not count) */
    free(req->body);
    req->body = NULL;
    lp__job_bind(job, req);
    lp__front_submit(f, req, job);
  }
  free(lens);
}

/* What a request keeps while its body is decoded and its texts tokenized
 * on the workers: its parsed form (the texts point into it) and its model,
 * and while a worker decodes it the body and the decoder's verdict. */
typedef struct emb_ctx_s {
  lp_openai_req_t r;
  lp_model_t *m;
  char *body;             /* owned: a large body decoded on a worker, its texts in it */
  size_t body_len;
  int rc;                 /* lp_openai_parse's */
  char err[256];
} emb_ctx_t;

static void emb_ctx_free(void *p) {
  emb_ctx_t *c = p;
  if (!c) return;
  lp_openai_req_free(&c->r);
  free(c->body);
  free(c);
}

static void embeddings_tokenized(lp_front_t *f, lp_tokjob_t *tj, lp_http_req_t *req) {
  emb_ctx_t *c = tj->ctx;
  embeddings_submit(f, req, &c->r, c->m, tj);
}

/* The request's texts (c, owned here from now on) to the tokenizer workers;
 * the client answered when they cannot take them. */
static void embeddings_tokenize(lp_front_t *f, lp_http_req_t *req, emb_ctx_t *c, lp_model_t *m, const lp_tok_t *t) {
  size_t ntexts = 0;
  for (size_t i = 0; i < c->r.ninputs; i++) ntexts += c->r.in[i].text != NULL;
  lp_tokjob_t *tj = lp__tokjob_new(f, t, ntexts);
  if (!tj) {
    lp__openai_reject(f, req, 503, NULL, "out_of_memory", "proxy out of memory", NULL, NULL);
    emb_ctx_free(c);
    return;
  }
  c->m = m;
  tj->ctx = c;
  tj->ctx_free = emb_ctx_free;
  tj->done = embeddings_tokenized;
  /* more than the largest bucket holds is refused without reading the rest */
  uint32_t limit = lp_bucket_set_max_len(&f->cfg->models[m - f->shared->models].shapes);
  for (size_t i = 0, u = 0; i < c->r.ninputs; i++) {
    if (!c->r.in[i].text) continue;
    tj->units[u].text = c->r.in[i].text;
    tj->units[u].len = c->r.in[i].text_len;
    tj->units[u].op = LP_TOKOP_IDS;
    tj->units[u++].limit = limit;
  }
  if (lp__front_tokenize(f, req, tj)) {
    lp__openai_reject(f, req, 429, NULL, "tokenizer_busy",
                      "too much text is waiting to be tokenized (tokenizer_queue_bytes): try again", NULL, NULL);
    lp__tokjob_free(tj);
    return;
  }
  /* the texts live in the parsed request: the body is not needed */
  free(req->body);
  req->body = NULL;
}

/* The request's body is decoded (c, owned here from now on): refused,
 * submitted, or its texts handed to the tokenizer workers. */
static void embeddings_decoded(lp_front_t *f, lp_http_req_t *req, emb_ctx_t *c) {
  lp_openai_req_t *r = &c->r;
  char err[256];
  if (c->rc) {
    if (c->rc == -ENOMEM) lp__openai_reject(f, req, 503, NULL, "out_of_memory", "proxy out of memory", NULL, NULL);
    else lp__openai_reject(f, req, 400, NULL, "invalid_request", c->err, r->param, NULL);
    emb_ctx_free(c);
    return;
  }
  lp_model_t *m = find_model(f, r->model);
  if (!m) {
    snprintf(err, sizeof(err), "The model '%.100s' does not exist", r->model);
    lp__openai_reject(f, req, 404, NULL, "model_not_found", err, "model", NULL);
  } else if (r->ninputs > f->cfg->max_sequences_per_request) {
    /* each input is one sequence: the proxy's bound on a request's, in
     * OpenAI's dialect (its own over-the-limit answer is a 400) */
    snprintf(err, sizeof(err), "'input' has %zu inputs, more than this proxy's max_sequences_per_request (%u)",
             r->ninputs, f->cfg->max_sequences_per_request);
    lp__openai_reject(f, req, 400, NULL, "too_many_sequences", err, "input", NULL);
  } else if (f->cfg->models[m - f->shared->models].outputs == LP_OUTPUTS_PER_TOKEN ||
             f->cfg->models[m - f->shared->models].outputs == LP_OUTPUTS_SCORE) {
    /* its configuration says it gives no vector per input: not worth a batch */
    snprintf(err, sizeof(err), "the model '%.100s' gives no embeddings: its outputs are %s (use /v1/infer)", r->model,
             lp_outputs_name(f->cfg->models[m - f->shared->models].outputs));
    lp__openai_reject(f, req, 400, NULL, "invalid_request", err, "model", NULL);
  } else if (r->dimensions && !f->cfg->models[m - f->shared->models].embed_dimensions) {
    /* a vector cut short is only right for a model trained for it
     * (Matryoshka), which its configuration says */
    snprintf(err, sizeof(err), "the model '%.40s' does not allow its vectors to be cut: leave out 'dimensions' "
             "(or configure models.%.40s.embedding.dimensions)", r->model, r->model);
    lp__openai_reject(f, req, 400, NULL, "invalid_request", err, "dimensions", NULL);
  } else if (r->dimensions > f->cfg->models[m - f->shared->models].embed_dimensions) {
    snprintf(err, sizeof(err), "'dimensions' is %u: the model '%.100s' gives vectors of %u values", r->dimensions,
             r->model, f->cfg->models[m - f->shared->models].embed_dimensions);
    lp__openai_reject(f, req, 400, NULL, "invalid_request", err, "dimensions", NULL);
  } else {
    const lp_tok_t *t = f->shared->tok[m - f->shared->models];
    int text = 0;
    for (size_t i = 0; i < r->ninputs && !text; i++) text = r->in[i].text != NULL;
    /* text is tokenized on the workers, never here; token ids go on at once */
    if (text && t) {
      embeddings_tokenize(f, req, c, m, t);
      return;
    }
    embeddings_submit(f, req, r, m, NULL);
  }
  emb_ctx_free(c);
}

static void embeddings_decode(emb_ctx_t *c) {
  c->rc = lp_openai_parse(c->body, c->body_len, &c->r, c->err, sizeof(c->err));
}

/* A worker's: the body decoded in place, kept (c's, as long as its texts
 * are read: a text of MiBs is never copied), else freed at once. */
static void embeddings_decode_work(lp_tokjob_t *job) {
  emb_ctx_t *c = job->ctx;
  c->rc = lp_openai_parse_inplace(c->body, c->body_len, &c->r, c->err, sizeof(c->err));
  /* kept only when a text lies in it: many short texts are jansson's copies */
  int in_body = 0;
  for (size_t i = 0; !c->rc && i < c->r.ninputs && !in_body; i++) /* as integers: other objects compared */
    in_body = (uintptr_t)c->r.in[i].text - (uintptr_t)c->body < c->body_len;
  if (!in_body) {
    free(c->body);
    c->body = NULL;
  }
}

static void embeddings_decoded_back(lp_front_t *f, lp_tokjob_t *tj, lp_http_req_t *req) {
  emb_ctx_t *c = tj->ctx;
  tj->ctx = NULL; /* embeddings_decoded's now */
  embeddings_decoded(f, req, c);
}

void lp__embeddings_request(lp_front_t *f, lp_http_req_t *req) {
  if (req->method != LP_HTTP_POST) {
    lp__openai_reject(f, req, 405, "Allow: POST\r\n", "method_not_allowed", "use POST", NULL, NULL);
    return;
  }
  emb_ctx_t *c = calloc(1, sizeof(*c));
  if (!c) {
    lp__openai_reject(f, req, 503, NULL, "out_of_memory", "proxy out of memory", NULL, NULL);
    return;
  }
  c->body_len = req->body_len;
  /* a large body is decoded on a worker too */
  if (lp__front_decode(f, req, c, emb_ctx_free, &c->body, embeddings_decode_work, embeddings_decoded_back) == 0)
    return;
  c->body = req->body; /* borrowed */
  embeddings_decode(c);
  c->body = NULL;
  embeddings_decoded(f, req, c);
}

int lp__vectors_part(lp_front_t *f, lp_buf_t *out, const lp_job_t *job, lp_vecpos_t *pos, size_t values,
                     uint32_t dims, int normalize, const char *sep, lp_put_vector_fn put) {
  size_t done = 0;
  for (uint32_t i = pos->next; i < job->nseq; i++) {
    if (done >= values) { /* at least one vector a call */
      pos->next = i;
      return out->oom ? -ENOMEM : -EAGAIN;
    }
    long n = lp__seq_vector(f, &job->seqs[i], 0);
    if (n < 0) return (int)n;
    if ((n = lp__check_vector(job, n, &pos->first)) < 0) return (int)n;
    /* dims <= embed_dims <= n: admission and lp__check_vector saw to it */
    if (dims) n = (long)dims;
    if (normalize) lp_openai_normalize(f->vec, (size_t)n);
    if (i) lp_buf_puts(out, sep);
    put(out, i, f->vec, (size_t)n, job);
    done += (size_t)n;
  }
  pos->next = job->nseq;
  return out->oom ? -ENOMEM : 0;
}

static void put_openai(lp_buf_t *out, uint32_t i, const float *v, size_t n, const lp_job_t *job) {
  lp_openai_embedding(out, i, v, n, job->proto.openai.base64);
}

int lp__openai_body_part(lp_front_t *f, lp_buf_t *out, const lp_job_t *job, lp_vecpos_t *pos, size_t values) {
  if (!pos->next) lp_buf_puts(out, "{\"object\": \"list\", \"data\": [");
  int rc = lp__vectors_part(f, out, job, pos, values, job->proto.openai.dims, job->proto.openai.normalize, ", ",
                            put_openai);
  if (rc) return rc;
  lp_buf_puts(out, "], \"model\": ");
  lp_buf_json_str(out, job->proto.openai.model, strlen(job->proto.openai.model));
  lp_buf_printf(out, ", \"usage\": {\"prompt_tokens\": %zu, \"total_tokens\": %zu}}\n", job->proto.openai.tokens,
                job->proto.openai.tokens);
  return out->oom ? -ENOMEM : 0;
}

long lp__seq_vector(lp_front_t *f, const lp_seq_t *s, int scalar_ok) {
  /* a value per token is never a sequence's vector, whatever its length */
  if (s->out_kind == LP_OUT_TOKENS || (s->out_kind == LP_OUT_SCORE && !scalar_ok)) return -ENOTSUP;
  lp_buf_t *text = &f->vec_text;
  lp_buf_reset(text);
  lp_buf_puts(text, "[");
  lp__put_output(text, s);
  lp_buf_puts(text, "]");
  /* one number per segment is read as [x]; a vector as it is */
  const char *p = s->out_kind == LP_OUT_VECTOR ? text->data + 1 : text->data;
  size_t len = s->out_kind == LP_OUT_VECTOR ? text->len - 2 : text->len;
  /* at most one value per two bytes of "[1,2]" text: room for them all */
  size_t most = len / 2 + 1;
  if (text->oom || lp__grow((void **)&f->vec, &f->vec_cap, most, sizeof(*f->vec))) return -ENOMEM;
  long n = lp_openai_floats(p, len, f->vec, most);
  return n >= 0 ? n : n == -ENOMEM ? -ENOMEM : -EPROTO;
}

long lp__check_vector(const lp_job_t *job, long n, long *first) {
  if (n <= 0 || (job->embed_dims && (size_t)n < job->embed_dims)) return -EPROTO;
  if (!*first) *first = n;
  return n == *first ? n : -EPROTO; /* every vector of a request as long as the first */
}
