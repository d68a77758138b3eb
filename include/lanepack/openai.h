/* The OpenAI embeddings API's codec (POST /v1/embeddings): the request's
 * model, inputs in its four forms (a string, strings, token ids, arrays of
 * token ids), encoding_format and dimensions decoded; each answer's vector
 * written as JSON floats or base64 little-endian float32; errors in OpenAI's
 * shape, which its SDKs parse. No I/O. */
#ifndef LANEPACK_OPENAI_H
#define LANEPACK_OPENAI_H

#include <stddef.h>
#include <stdint.h>

#include "lanepack/buf.h"

/* OpenAI's own bound on inputs per request (and so on sequences a request
 * adds to the queue at once). */
#define LP_OPENAI_MAX_INPUTS 2048
/* A vector's length at most (dimensions, and what a backend answers). */
#define LP_OPENAI_MAX_DIMS 65536

typedef struct lp_openai_input_s {
  const char *text;       /* a string input (borrowed from the request), or NULL: token ids */
  size_t text_len;
  size_t off;             /* token ids: tokens[off .. off + len) */
  uint32_t len;
} lp_openai_input_t;

typedef struct lp_openai_req_s {
  char model[128];
  int base64;             /* encoding_format "base64", else "float" */
  uint32_t dimensions;    /* asked for; 0: not asked */
  size_t ninputs;
  lp_openai_input_t *in;  /* ninputs; owned */
  int32_t *tokens;        /* every token-id input's ids; owned */
  size_t ntokens;
  void *root;             /* the decoded JSON (string inputs point into it); owned */
  const char *param;      /* on an error: the field at fault (a string literal), or NULL */
} lp_openai_req_t;

/* Decodes body[0..len). Returns 0, or -EPROTO with err naming what is wrong
 * (and r->param the field), or -ENOMEM. Token ids must be integers in
 * [0, 2^31). r is to be freed with lp_openai_req_free either way. */
int lp_openai_parse(const char *body, size_t len, lp_openai_req_t *r, char *err, size_t errlen);
/* The same decoding the long texts in place in body (writable): r's texts
 * may point into it (without a NUL), so it must outlive r (lp_jload_inplace). */
int lp_openai_parse_inplace(char *body, size_t len, lp_openai_req_t *r, char *err, size_t errlen);
void lp_openai_req_free(lp_openai_req_t *r);

/* A backend's vector as JSON text (an array of numbers) into out (at most cap
 * values): the count, or -EPROTO when it is not an array of finite numbers,
 * -E2BIG past cap. */
long lp_openai_floats(const char *json, size_t len, float *out, size_t cap);

/* Scales v[0..n) to unit L2 norm (a zero vector stays zero). */
void lp_openai_normalize(float *v, size_t n);

/* One element of the answer's data: {"object": "embedding", "index": i,
 * "embedding": [floats] or "base64"}. */
void lp_openai_embedding(lp_buf_t *b, size_t index, const float *v, size_t n, int base64);

/* OpenAI's error body: {"error": {"message", "type", "param", "code"}}; type
 * from the status (invalid_request_error for 4xx, server_error for 5xx,
 * rate_limit_error for 429, not_found_error for 404). */
void lp_openai_error(lp_buf_t *b, int status, const char *code, const char *msg, const char *param);

#endif
