/* The codec of text-embeddings-inference's (TEI's) routes, POST /embed,
 * /rerank, /tokenize, /predict, /embed_all, /similarity, /decode: their request bodies decoded into plain structs, a
 * model's pair template, and the answers and errors written in TEI's shapes,
 * which its clients parse. No I/O. */
#ifndef LANEPACK_TEI_H
#define LANEPACK_TEI_H

#include <stddef.h>
#include <stdint.h>

#include "lanepack/buf.h"

enum { LP_TEI_EMBED = 1, LP_TEI_RERANK, LP_TEI_TOKENIZE, LP_TEI_PREDICT, LP_TEI_EMBED_ALL, LP_TEI_SIMILARITY,
       LP_TEI_DECODE, LP_TEI_EMBED_SPARSE };

/* TEI's error types (its "error_type" member), spelt as TEI's server writes
 * them (serde's names of its ErrorType variants, capitalised; the lowercase
 * ones in its OpenAPI examples are not what it sends), each with its status: 413
 * validation (too many inputs), 422 tokenizer (too long), 424 backend, 429
 * overloaded, 400 empty, 503 unhealthy. */
#define LP_TEI_VALIDATION "Validation"
#define LP_TEI_TOKENIZER "Tokenizer"
#define LP_TEI_BACKEND "Backend"
#define LP_TEI_OVERLOADED "Overloaded"
#define LP_TEI_EMPTY "Empty"
#define LP_TEI_UNHEALTHY "Unhealthy"

/* One input: a text, token ids given instead (ids set), or (/predict) a
 * pair of texts. */
typedef struct lp_tei_text_s {
  const char *s;          /* borrowed from the decoded JSON (in place: from the body, without a NUL); NULL for ids */
  size_t len;
  const int32_t *ids;     /* token ids as the client gave them, in the request's ids block */
  size_t nids;
  const char *b;          /* a pair's second text (pair set), borrowed */
  size_t blen;
  int pair;
} lp_tei_text_t;

typedef struct lp_tei_req_s {
  int route;              /* LP_TEI_* */
  char model[128];        /* "model", "" when not named */
  lp_tei_text_t query;    /* /rerank's query */
  lp_tei_text_t *texts;   /* "inputs" (/embed, /tokenize) or "texts" (/rerank); owned array */
  size_t ntexts;
  int normalize;          /* /embed: unit-length vectors (default 1) */
  int truncate;           /* cut what is too long instead of refusing it (default 0) */
  int left;               /* truncation_direction "Left": cut the start, keep the end */
  int raw_scores;         /* /rerank: scores as the model gave them, else through a sigmoid */
  int return_text;        /* /rerank: each rank carries its text */
  int add_special_tokens; /* /tokenize: the model's special tokens too (default 1) */
  int skip_special_tokens; /* /decode: control pieces left out (default 1) */
  uint32_t dimensions;    /* /embed: vectors cut to their first values; 0 = whole */
  int single;             /* one input not in a list (/predict, /decode answer it alone) */
  int32_t *ids;           /* every input's token ids given as numbers; owned */
  void *root;             /* the decoded JSON; owned */
} lp_tei_req_t;

/* Decodes body[0..len) as route's request (LP_TEI_*), as TEI 1.9's
 * openapi.json describes it: /embed's inputs strings, token ids or both mixed;
 * /predict's a string, a pair or a list of both; /similarity's source first in
 * texts; /decode's ids; fields a route does not have are ignored. Returns 0,
 * or -EPROTO with *status and *type saying how TEI answers it (400 not JSON,
 * 422 a field missing or of the wrong type, 400 "empty" no inputs, 413 more
 * than max_inputs) and err naming the field, or -ENOMEM. r is to be freed
 * with lp_tei_req_free either way. */
int lp_tei_parse(int route, const char *body, size_t len, size_t max_inputs, lp_tei_req_t *r, int *status,
                 const char **type, char *err, size_t errlen);
/* The same decoding the long texts in place in body (writable): r's texts
 * may point into it, so it must outlive r (lp_jload_inplace). */
int lp_tei_parse_inplace(int route, char *body, size_t len, size_t max_inputs, lp_tei_req_t *r, int *status,
                         const char **type, char *err, size_t errlen);
void lp_tei_req_free(lp_tei_req_t *r);

/* A pair template (TEI's and Hugging Face's TemplateProcessing form): pieces
 * of the vocabulary and the two sequences, e.g. "<s> $A </s></s> $B </s>"
 * (XLM-R's cross-encoders). A part is a word between spaces, or one of several
 * pieces written together, split where "$A" / "$B" or a '<' starts ("</s></s>"
 * is two). A ":N" type suffix is accepted and ignored (lanepack sends no token
 * types). */
#define LP_TEI_TEMPLATE_PARTS 16 /* BERT's and XLM-R's take 5 to 7 */
#define LP_TEI_PIECE_MAX 48      /* the longest special piece name */
typedef struct lp_tei_template_s {
  size_t nparts;
  struct {
    int slot;             /* 0: a piece, 1: $A, 2: $B */
    char piece[LP_TEI_PIECE_MAX];
    int32_t id;           /* the piece's id, set by whoever has the vocabulary */
  } part[LP_TEI_TEMPLATE_PARTS];
} lp_tei_template_t;

/* Parses s: 0, or -EINVAL with err saying why (each of $A and $B exactly
 * once, at most LP_TEI_TEMPLATE_PARTS parts, pieces at most
 * LP_TEI_PIECE_MAX - 1 bytes). */
int lp_tei_template_parse(const char *s, lp_tei_template_t *t, char *err, size_t errlen);

/* Parses spec and sets each piece's id with lookup (ud passed on; -1: not in
 * the vocabulary): 0, or -EINVAL with err saying why or naming the piece the
 * vocabulary lacks. */
int lp_tei_template_load(const char *spec, int32_t (*lookup)(const void *ud, const char *piece), const void *ud,
                         lp_tei_template_t *t, char *err, size_t errlen);

/* How a pair over the limit is cut, as Hugging Face tokenizers' truncation
 * strategies: ONLY_SECOND keeps a whole and cuts b (lanepack's /rerank);
 * LONGEST_FIRST, TEI's for every pair (/predict), cuts the longer one to
 * what the shorter leaves, or both to half when the shorter is over half. */
enum { LP_TEI_ONLY_SECOND = 0, LP_TEI_LONGEST_FIRST = 1 };

/* The pair's ids laid out by t into out (cap of them): returns the count. With
 * max > 0 and more than max, cut to fit by strategy (LP_TEI_*), each text's
 * end cut, or its start when left; -E2BIG when the template's pieces (and a,
 * ONLY_SECOND) leave no room. -ENOSPC when cap is too small. */
long lp_tei_pair(const lp_tei_template_t *t, const int32_t *a, size_t na, const int32_t *b, size_t nb,
                 size_t max, int left, int strategy, int32_t *out, size_t cap);

/* 1 / (1 + e^-x): a reranker's logit as a probability. */
float lp_tei_sigmoid(float x);

/* A text's score and its place in the request: sorted by score descending
 * (equal scores by index), TEI's order. */
typedef struct lp_tei_rank_s {
  float score;
  size_t index;
} lp_tei_rank_t;
void lp_tei_rank(lp_tei_rank_t *r, size_t n);

/* The answers' parts: one /embed vector [v...]; one /rerank rank {"index",
 * "score"[, "text"]}; one /tokenize token {"id", "text", "special", "start",
 * "stop"} (start and stop null for a special token). */
void lp_tei_vector(lp_buf_t *b, const float *v, size_t n);
void lp_tei_rank_item(lp_buf_t *b, size_t index, float score, const char *text, size_t text_len);
void lp_tei_token(lp_buf_t *b, int32_t id, const char *text, size_t len, int special, size_t start,
                  size_t stop);

/* A classifier's n scores as /predict answers them: as they are when raw,
 * else one through a sigmoid and several through a softmax (TEI's rule). */
void lp_tei_scores(float *v, size_t n, int raw);
/* One /predict prediction: {"score", "label"}. */
void lp_tei_prediction(lp_buf_t *b, float score, const char *label);

/* TEI's error body: {"error": msg, "error_type": type}. */
void lp_tei_error(lp_buf_t *b, const char *msg, const char *type);

#endif
