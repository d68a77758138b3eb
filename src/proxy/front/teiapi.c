/* Runs on the front that read the request: the rest of text-embeddings-
 * inference 1.9's API. GET /info from the configuration and POST /decode are
 * answered here at once; /predict's, /embed_all's and /similarity's answers
 * are written here from the backend's outputs, each checked for the kind the
 * route needs (a classifier's scores, a vector per token, a vector per input). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "lanepack/openai.h"
#include "lanepack/tei.h"
#include "lanepack/tokenizer.h"
#include "lanepack/urlpath.h"
#include "core/internal.h" /* lp__grow */
#include "front/front.h"

#ifndef LP_VERSION
#define LP_VERSION "0.1.0"
#endif

const char *lp__tei_wrong_kind(const lp_model_config_t *mc, int kind) {
  lp_outputs_t o = mc->outputs;
  if (o == LP_OUTPUTS_ANY) return NULL; /* each answer is checked for its kind instead */
  switch (kind) {
  case LP_TEI_EMBED:
  case LP_TEI_SIMILARITY:
    return o == LP_OUTPUTS_PER_SEGMENT ? NULL : "Model is not an embedding model";
  case LP_TEI_RERANK:
    return o == LP_OUTPUTS_PER_TOKEN ? "Model is not a reranker model" : NULL;
  case LP_TEI_PREDICT:
    return o == LP_OUTPUTS_SCORE ? NULL : "Model is not a classifier model";
  case LP_TEI_EMBED_ALL:
    return o == LP_OUTPUTS_PER_TOKEN ? NULL : "Model gives no vector per token";
  default:
    return NULL;
  }
}

/* The model /info describes: the only one, or the one ?model=NAME names.
 * NULL after answering the client. */
static const lp_model_config_t *info_model(lp_front_t *f, lp_http_req_t *req) {
  const lp_config_t *c = f->cfg;
  /* the query's own "model" parameter: not the tail of another's name
   * (?xmodel=a names no model) */
  const char *at = NULL;
  for (const char *p = req->url + req->path_len; p && *p && !at; p = strchr(p + 1, '&'))
    if (strncmp(p + 1, "model=", 6) == 0) at = p + 1;
  if (!at && c->nmodels == 1) return &c->models[0];
  char name[LP_NAME_MAX] = "";
  if (at) {
    const char *end = strchr(at, '&');
    size_t n = end ? (size_t)(end - at - 6) : strlen(at + 6);
    /* as the client's library percent-encoded it (a space as %20), as a
       model in a path is; an undecodable one is looked up as sent */
    if (lp_urlpath_decode(at + 6, n, name, sizeof(name)) < 0)
      snprintf(name, sizeof(name), "%.*s", (int)(n < sizeof(name) ? n : sizeof(name) - 1), at + 6);
  }
  for (size_t i = 0; name[0] && i < c->nmodels; i++)
    if (strcmp(c->models[i].name, name) == 0) return &c->models[i];
  char msg[200];
  if (name[0]) snprintf(msg, sizeof(msg), "the model '%s' is not served here", name);
  else snprintf(msg, sizeof(msg), "several models are served: name one with ?model=NAME");
  lp__tei_reject(f, req, LP_ROUTE_TEI_INFO, name[0] ? 404 : 400, LP_TEI_VALIDATION,
                 name[0] ? "unknown_model" : "missing_model", msg, NULL);
  return NULL;
}

/* A label's name: the configured one, else TEI's default LABEL_k. */
static const char *label_of(const lp_model_config_t *mc, size_t k, char *tmp, size_t len) {
  if (k < mc->nlabels) return mc->labels[k];
  snprintf(tmp, len, "LABEL_%zu", k);
  return tmp;
}

/* model_type: a classifier's (or reranker's) labels both ways, or an
 * embedding model's pooling (done by the backend: lanepack cannot say which). */
static void put_model_type(lp_buf_t *b, const lp_model_config_t *mc) {
  char tmp[32];
  if (mc->outputs != LP_OUTPUTS_SCORE) {
    lp_buf_printf(b, "{\"embedding\":{\"pooling\":\"%s\"}}",
                  mc->outputs == LP_OUTPUTS_PER_TOKEN ? "none" : "backend");
    return;
  }
  size_t n = mc->nlabels ? mc->nlabels : 1;
  lp_buf_puts(b, mc->nlabels > 1 ? "{\"classifier\":{\"id2label\":{" : "{\"reranker\":{\"id2label\":{");
  for (size_t k = 0; k < n; k++) {
    const char *l = label_of(mc, k, tmp, sizeof(tmp));
    lp_buf_printf(b, "%s\"%zu\":", k ? "," : "", k);
    lp_buf_json_str(b, l, strlen(l));
  }
  lp_buf_puts(b, "},\"label2id\":{");
  for (size_t k = 0; k < n; k++) {
    const char *l = label_of(mc, k, tmp, sizeof(tmp));
    if (k) lp_buf_puts(b, ",");
    lp_buf_json_str(b, l, strlen(l));
    lp_buf_printf(b, ":%zu", k);
  }
  lp_buf_puts(b, "}}}");
}

void lp__tei_info(lp_front_t *f, lp_http_req_t *req) {
  if (req->method != LP_HTTP_GET && req->method != LP_HTTP_HEAD) {
    lp__tei_reject(f, req, LP_ROUTE_TEI_INFO, 405, LP_TEI_VALIDATION, "method_not_allowed", "use GET", NULL);
    return;
  }
  const lp_model_config_t *mc = info_model(f, req);
  if (!mc) return;
  uint64_t batch_tokens = 0;
  for (size_t k = 0; k < mc->shapes.count; k++) {
    uint64_t t = (uint64_t)mc->shapes.shapes[k].lanes * mc->shapes.shapes[k].bucket;
    if (t > batch_tokens) batch_tokens = t;
  }
  if (mc->ragged) batch_tokens = mc->ragged_max_tokens;
  lp_buf_t *b = &f->scratch;
  lp_buf_reset(b);
  lp_buf_puts(b, "{\"model_id\":");
  lp_buf_json_str(b, mc->name, strlen(mc->name));
  lp_buf_puts(b, ",\"model_sha\":null,\"model_dtype\":\"unknown\",\"model_type\":");
  put_model_type(b, mc);
  lp_buf_puts(b, ",\"served_model_name\":");
  lp_buf_json_str(b, mc->name, strlen(mc->name));
  /* text is tokenized on the tokenizer workers (tokenizer_threads: a reload
     that changes it is refused, so the configuration says what runs); none
     run when no model has a tokenizer */
  lp_buf_printf(b, ",\"max_concurrent_requests\":%zu,\"max_input_length\":%u,\"max_batch_tokens\":%llu,"
                "\"max_batch_requests\":null,\"max_client_batch_size\":%u,\"auto_truncate\":false,"
                "\"tokenization_workers\":%u,\"version\":\"%s\",\"sha\":null,\"docker_label\":null}\n",
                mc->max_queue_requests, lp_bucket_set_max_len(&mc->shapes), (unsigned long long)batch_tokens,
                f->cfg->max_sequences_per_request,
                f->shared->tokpool ? lp_config_tokenizer_threads(f->cfg) : 0, LP_VERSION);
  if (b->oom) {
    lp__tei_reject(f, req, LP_ROUTE_TEI_INFO, 503, LP_TEI_UNHEALTHY, "out_of_memory", "proxy out of memory", NULL);
    return;
  }
  lp_proxy_count(f, LP_ROUTE_TEI_INFO, 200);
  lp__access_log(f, req, 200, NULL);
  lp_http_respond(req, 200, NULL, "application/json", b->data, b->len);
}

void lp__tei_decode(lp_front_t *f, lp_http_req_t *req, const lp_tei_req_t *r, const lp_tok_t *t) {
  if (!t) {
    lp__tei_reject(f, req, LP_ROUTE_TEI_DECODE, 400, LP_TEI_VALIDATION, "no_tokenizer",
                   "the model has no tokenizer to decode with (configure models.NAME.tokenizer)", NULL);
    return;
  }
  lp_buf_t out;
  lp_buf_init(&out);
  char *text = NULL; /* one input's text; owned here */
  size_t cap = 0;
  long rc = 0;
  lp_buf_puts(&out, "[");
  for (size_t i = 0; i < r->ntexts && rc >= 0; i++) {
    const lp_tei_text_t *in = &r->texts[i];
    rc = lp_tok_decode(t, in->ids, in->nids, r->skip_special_tokens, text, cap);
    if (rc > (long)cap) {
      if (lp__grow((void **)&text, &cap, (size_t)rc, 1)) rc = -ENOMEM;
      else rc = lp_tok_decode(t, in->ids, in->nids, r->skip_special_tokens, text, cap);
    }
    if (rc >= 0) {
      if (i) lp_buf_puts(&out, ",");
      lp_buf_json_str(&out, text ? text : "", (size_t)rc);
    }
  }
  lp_buf_puts(&out, "]\n");
  free(text);
  if (rc == -EINVAL) {
    lp__tei_reject(f, req, LP_ROUTE_TEI_DECODE, 422, LP_TEI_TOKENIZER, "token_out_of_range",
                   "an id is not in the model's vocabulary", NULL);
  } else if (rc < 0 || out.oom) {
    lp__tei_reject(f, req, LP_ROUTE_TEI_DECODE, 503, LP_TEI_UNHEALTHY, "out_of_memory", "proxy out of memory", NULL);
  } else {
    lp_proxy_count(f, LP_ROUTE_TEI_DECODE, 200);
    lp__access_log(f, req, 200, NULL);
    lp_http_respond(req, 200, NULL, "application/json", out.data, out.len);
  }
  lp_buf_free(&out);
}

int lp__tei_predict_body(lp_front_t *f, lp_buf_t *out, const lp_job_t *job) {
  const lp_model_config_t *mc = &f->cfg->models[job->model - f->shared->models];
  lp_tei_rank_t *rank = NULL; /* one input's scores by rank; owned here */
  size_t cap = 0;
  char tmp[32];
  int rc = 0;
  if (!job->proto.tei.single) lp_buf_puts(out, "[");
  for (uint32_t i = 0; i < job->nseq && !rc; i++) {
    /* one score (a reranker's), or one per label (a classifier's) */
    long n = lp__seq_vector(f, &job->seqs[i], 1);
    if (n <= 0 || (mc->nlabels && (size_t)n != mc->nlabels)) {
      /* -EBADMSG: numbers, but not one per configured label (said apart) */
      rc = n < 0 ? (int)n : n > 0 ? -EBADMSG : -EPROTO;
      break;
    }
    for (long k = 0; k < n; k++)
      if (isnan(f->vec[k])) rc = -EPROTO; /* TEI: "score is NaN" */
    if (rc || lp__grow((void **)&rank, &cap, (size_t)n, sizeof(*rank))) {
      rc = rc ? rc : -ENOMEM;
      break;
    }
    lp_tei_scores(f->vec, (size_t)n, job->proto.tei.raw_scores);
    for (long k = 0; k < n; k++) rank[k] = (lp_tei_rank_t){f->vec[k], (size_t)k};
    lp_tei_rank(rank, (size_t)n);
    lp_buf_puts(out, i ? ",[" : "[");
    for (long k = 0; k < n; k++) {
      if (k) lp_buf_puts(out, ",");
      lp_tei_prediction(out, rank[k].score, label_of(mc, rank[k].index, tmp, sizeof(tmp)));
    }
    lp_buf_puts(out, "]");
  }
  free(rank);
  if (rc) return rc;
  lp_buf_puts(out, job->proto.tei.single ? "\n" : "]\n");
  return out->oom ? -ENOMEM : 0;
}

int lp__tei_embed_all_body(lp_front_t *f, lp_buf_t *out, const lp_job_t *job) {
  lp_buf_puts(out, "[");
  for (uint32_t i = 0; i < job->nseq; i++) {
    const lp_seq_t *s = &job->seqs[i];
    if (s->out_kind != LP_OUT_TOKENS) return -ENOTSUP; /* a vector per token is what it gives */
    lp_buf_t *text = &f->vec_text;
    lp_buf_reset(text);
    lp__put_output(text, s);
    if (text->oom) return -ENOMEM;
    /* each token's value: a vector, or one number (a vector of one) */
    json_t *a = json_loadb(text->data, text->len, 0, NULL);
    size_t k;
    json_t *v;
    int ok = json_is_array(a) && json_array_size(a) > 0;
    lp_buf_puts(out, i ? ",[" : "[");
    json_array_foreach(a, k, v) {
      if (!ok) break;
      size_t n = json_is_array(v) ? json_array_size(v) : 1;
      if (lp__grow((void **)&f->vec, &f->vec_cap, n, sizeof(*f->vec))) {
        json_decref(a);
        return -ENOMEM;
      }
      for (size_t j = 0; j < n && ok; j++) {
        json_t *x = json_is_array(v) ? json_array_get(v, j) : v;
        ok = json_is_number(x);
        f->vec[j] = ok ? (float)json_number_value(x) : 0;
      }
      if (k) lp_buf_puts(out, ",");
      lp_tei_vector(out, f->vec, n);
    }
    json_decref(a);
    if (!ok) return -EPROTO;
    lp_buf_puts(out, "]");
  }
  lp_buf_puts(out, "]\n");
  return out->oom ? -ENOMEM : 0;
}

int lp__tei_similarity_body(lp_front_t *f, lp_buf_t *out, const lp_job_t *job) {
  float *src = NULL; /* the source sentence's vector; owned here */
  double src_norm = 0;
  long first = 0;
  lp_buf_puts(out, "[");
  for (uint32_t i = 0; i < job->nseq; i++) {
    long n = lp__seq_vector(f, &job->seqs[i], 0);
    if (n >= 0) n = lp__check_vector(job, n, &first); /* every vector as long as the source's */
    if (n < 0) {
      free(src);
      return (int)n;
    }
    if (i == 0) {
      src = malloc((size_t)n * sizeof(*src));
      if (!src) return -ENOMEM;
      memcpy(src, f->vec, (size_t)n * sizeof(*src));
      for (long k = 0; k < n; k++) src_norm += (double)src[k] * src[k];
      continue;
    }
    double dot = 0, norm = 0;
    for (long k = 0; k < n; k++) {
      dot += (double)src[k] * f->vec[k];
      norm += (double)f->vec[k] * f->vec[k];
    }
    double cos = src_norm > 0 && norm > 0 ? dot / (sqrt(src_norm) * sqrt(norm)) : 0;
    lp_buf_printf(out, i > 1 ? ",%.9g" : "%.9g", (double)(float)cos);
  }
  free(src);
  lp_buf_puts(out, "]\n");
  return out->oom ? -ENOMEM : 0;
}
