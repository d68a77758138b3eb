/* The OpenAI embeddings codec (see openai.h). jansson reads the request, whose
 * strings the tokenizer then reads in place; vectors are parsed from the
 * backend's JSON text with strtod, never into a tree. */
#include "lanepack/openai.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "lanepack/jload.h"
#include "lanepack/tensor.h"

#include "internal.h"

static int bad(lp_openai_req_t *r, const char *param, char *err, size_t errlen, const char *msg) {
  r->param = param;
  snprintf(err, errlen, "%s", msg);
  return -EPROTO;
}

/* One array of token ids appended to r->tokens as input i. */
static int add_ids(lp_openai_req_t *r, size_t *cap, json_t *arr, size_t i, char *err, size_t errlen) {
  size_t n = json_array_size(arr);
  if (n == 0) return bad(r, "input", err, errlen, "'input' holds an empty array of token ids");
  if (n > UINT32_MAX || lp__grow((void **)&r->tokens, cap, r->ntokens + n, sizeof(*r->tokens))) return -ENOMEM;
  r->in[i] = (lp_openai_input_t){.off = r->ntokens, .len = (uint32_t)n};
  size_t k;
  json_t *v;
  json_array_foreach(arr, k, v) {
    json_int_t t = json_is_integer(v) ? json_integer_value(v) : -1;
    if (t < 0 || t > INT32_MAX)
      return bad(r, "input", err, errlen, "'input' token ids must be integers in [0, 2147483647]");
    r->tokens[r->ntokens++] = (int32_t)t;
  }
  return 0;
}

static int add_text(lp_openai_req_t *r, json_t *s, size_t i, char *err, size_t errlen) {
  r->in[i] = (lp_openai_input_t){0};
  r->in[i].text = lp_jload_str(s, &r->in[i].text_len);
  if (r->in[i].text_len == 0) return bad(r, "input", err, errlen, "'input' holds an empty string");
  return 0;
}

/* lp_openai_parse, and lp_openai_parse_inplace with own (the body, writable). */
static int parse(const char *body, char *own, size_t len, lp_openai_req_t *r, char *err, size_t errlen) {
  memset(r, 0, sizeof(*r));
  json_error_t je;
  /* no duplicate keys: which of two "model"s would a client have meant */
  json_t *root = own ? lp_jload_inplace(own, len, JSON_REJECT_DUPLICATES, &je)
                     : lp_jload(body, len, JSON_REJECT_DUPLICATES, &je);
  if (!root && json_error_code(&je) == json_error_out_of_memory) return -ENOMEM; /* not the client's fault */
  if (!root) {
    char msg[256];
    if (json_error_code(&je) == json_error_null_character) /* valid JSON, a value not taken */
      return bad(r, NULL, err, errlen, LP_JLOAD_NUL_MSG);
    snprintf(msg, sizeof(msg), "the body is not valid JSON: %s", je.text);
    return bad(r, NULL, err, errlen, msg);
  }
  r->root = root;
  if (!json_is_object(root)) return bad(r, NULL, err, errlen, "the body must be a JSON object");
  const char *key;
  json_t *v;
  json_object_foreach(root, key, v) {
    if (strcmp(key, "model") == 0) {
      /* in place a string may be a reference into the body, without a NUL */
      size_t n;
      const char *name = lp_jload_str(v, &n);
      if (!name || n == 0 || n >= sizeof(r->model))
        return bad(r, "model", err, errlen, "'model' must be a model's name");
      memcpy(r->model, name, n);
      r->model[n] = '\0';
    } else if (strcmp(key, "encoding_format") == 0) {
      size_t n;
      const char *f = lp_jload_str(v, &n);
      if (f && n == 6 && memcmp(f, "base64", 6) == 0) r->base64 = 1;
      else if (!f || n != 5 || memcmp(f, "float", 5) != 0)
        return bad(r, "encoding_format", err, errlen, "'encoding_format' must be \"float\" or \"base64\"");
    } else if (strcmp(key, "dimensions") == 0) {
      json_int_t d = json_is_integer(v) ? json_integer_value(v) : 0;
      if (d < 1 || d > LP_OPENAI_MAX_DIMS)
        return bad(r, "dimensions", err, errlen, "'dimensions' must be an integer in [1, 65536]");
      r->dimensions = (uint32_t)d;
    } else if (strcmp(key, "user") == 0) {
      if (!json_is_string(v)) return bad(r, "user", err, errlen, "'user' must be a string");
    } else if (strcmp(key, "input") != 0) {
      char msg[160];
      snprintf(msg, sizeof(msg), "unknown parameter '%.100s'", key);
      return bad(r, NULL, err, errlen, msg);
    }
  }
  if (!r->model[0]) return bad(r, "model", err, errlen, "'model' is required");
  json_t *in = json_object_get(root, "input");
  if (!in) return bad(r, "input", err, errlen, "'input' is required");
  size_t n = json_is_array(in) ? json_array_size(in) : 1;
  int nested = json_is_array(in) && n && json_is_array(json_array_get(in, 0));
  int ids = json_is_array(in) && n && json_is_integer(json_array_get(in, 0));
  if (ids) n = 1; /* one array of token ids is one input */
  if (n == 0) return bad(r, "input", err, errlen, "'input' must not be empty");
  if (n > LP_OPENAI_MAX_INPUTS)
    return bad(r, "input", err, errlen, "'input' holds more than 2048 inputs");
  r->in = calloc(n, sizeof(*r->in));
  if (!r->in) return -ENOMEM;
  r->ninputs = n;
  size_t cap = 0;
  if (json_is_string(in)) return add_text(r, in, 0, err, errlen);
  if (!json_is_array(in))
    return bad(r, "input", err, errlen, "'input' must be a string, strings, token ids or arrays of token ids");
  if (ids) return add_ids(r, &cap, in, 0, err, errlen);
  for (size_t i = 0; i < n; i++) {
    json_t *e = json_array_get(in, i);
    int rc;
    if (nested && json_is_array(e)) rc = add_ids(r, &cap, e, i, err, errlen);
    else if (!nested && json_is_string(e)) rc = add_text(r, e, i, err, errlen);
    else if (json_is_number(e)) /* 1.0 is no token id */
      rc = bad(r, "input", err, errlen, "'input' token ids must be integers in [0, 2147483647]");
    else if (!json_is_string(e) && !json_is_array(e))
      rc = bad(r, "input", err, errlen, "'input' must be a string, strings, token ids or arrays of token ids");
    else rc = bad(r, "input", err, errlen, "'input' mixes forms: strings, or arrays of token ids, not both");
    if (rc) return rc;
  }
  return 0;
}

int lp_openai_parse(const char *body, size_t len, lp_openai_req_t *r, char *err, size_t errlen) {
  return parse(body, NULL, len, r, err, errlen);
}

int lp_openai_parse_inplace(char *body, size_t len, lp_openai_req_t *r, char *err, size_t errlen) {
  return parse(body, body, len, r, err, errlen);
}

void lp_openai_req_free(lp_openai_req_t *r) {
  free(r->in);
  free(r->tokens);
  json_decref(r->root);
  memset(r, 0, sizeof(*r));
}

/* A character a number's text may hold (what the strtod path copies). */
static int number_char(char c) {
  return (c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.' || c == 'e' || c == 'E';
}

/* Clinger's fast path: a decimal of at most 19 significant digits whose
 * integer fits 2^53, with a power of ten up to 10^22, is one exact IEEE
 * operation from its value, so the result is strtod's (correctly rounded).
 * Every value of a backend's "%.9g" text takes it; strtod was the largest
 * item of writing an embedding answer. The bytes read (the whole number),
 * or 0: then strtod judges it, as before. */
static size_t fast_number(const char *p, const char *end, double *out) {
  static const double p10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                               1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
  const char *s = p;
  int neg = s < end && *s == '-', sig = 0, e10 = 0, n = 0;
  uint64_t m = 0;
  s += neg;
  for (; s < end && *s >= '0' && *s <= '9'; s++, n++)
    if (m || *s != '0') {
      if (++sig > 19) return 0;
      m = m * 10 + (uint64_t)(*s - '0');
    }
  if (!n) return 0;
  if (s < end && *s == '.') {
    for (n = 0, s++; s < end && *s >= '0' && *s <= '9'; s++, n++, e10--)
      if (m || *s != '0') {
        if (++sig > 19) return 0;
        m = m * 10 + (uint64_t)(*s - '0');
      }
    if (!n) return 0;
  }
  if (s < end && (*s == 'e' || *s == 'E')) {
    int eneg = 0, x = 0;
    s++;
    if (s < end && (*s == '+' || *s == '-')) eneg = *s++ == '-';
    for (n = 0; s < end && *s >= '0' && *s <= '9'; s++, n++)
      if (x < 10000) x = x * 10 + (*s - '0');
    if (!n) return 0;
    e10 += eneg ? -x : x;
  }
  /* a number that goes on oddly, or longer than the strtod path reads */
  if ((s < end && number_char(*s)) || s - p >= 63) return 0;
  if (m > (1ull << 53) || e10 < -22 || e10 > 22) return 0;
  double v = e10 < 0 ? (double)m / p10[-e10] : (double)m * p10[e10];
  *out = neg ? -v : v;
  return (size_t)(s - p);
}

long lp_openai_floats(const char *p, size_t len, float *out, size_t cap) {
  const char *end = p + len;
  while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
  if (p == end || *p++ != '[') return -EPROTO;
  size_t n = 0;
  char num[64];
  for (;;) {
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
    if (p < end && *p == ']' && n == 0) return 0;
    double v = 0;
    size_t k = fast_number(p, end, &v);
    char *e = num;
    num[0] = '\0';
    if (k) {
      p += k;
    } else {
      while (p < end && k + 1 < sizeof(num) && number_char(*p)) num[k++] = *p++;
      num[k] = '\0';
      v = k ? strtod(num, &e) : 0;
    }
    if (!k || *e || !isfinite(v) || fabs(v) > 3.4028234663852886e38) return -EPROTO;
    if (n == cap) return -E2BIG;
    out[n++] = (float)v;
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
    if (p < end && *p == ',') {
      p++;
      continue;
    }
    if (p < end && *p == ']') return (long)n;
    return -EPROTO;
  }
}

void lp_openai_normalize(float *v, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; i++) s += (double)v[i] * v[i];
  if (s <= 0) return;
  double k = 1.0 / sqrt(s);
  for (size_t i = 0; i < n; i++) v[i] = (float)(v[i] * k);
}

static void put_base64(lp_buf_t *b, const unsigned char *p, size_t n) {
  static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  if (lp_buf_reserve(b, (n + 2) / 3 * 4)) return;
  char *o = b->data + b->len;
  size_t i = 0;
  for (; i + 3 <= n; i += 3, o += 4) {
    uint32_t w = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
    o[0] = tab[w >> 18], o[1] = tab[w >> 12 & 63], o[2] = tab[w >> 6 & 63], o[3] = tab[w & 63];
  }
  if (i < n) {
    uint32_t w = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0);
    o[0] = tab[w >> 18], o[1] = tab[w >> 12 & 63];
    o[2] = i + 1 < n ? tab[w >> 6 & 63] : '=';
    o[3] = '=';
    o += 4;
  }
  b->len = (size_t)(o - b->data);
}

void lp_openai_embedding(lp_buf_t *b, size_t index, const float *v, size_t n, int base64) {
  lp_buf_printf(b, "{\"object\": \"embedding\", \"index\": %zu, \"embedding\": ", index);
  if (base64) {
    /* little-endian float32, as the SDKs decode it (Float32Array, numpy
     * frombuffer '<f4'); this machine's order is checked at build time */
    _Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "base64 embeddings are little-endian");
    lp_buf_puts(b, "\"");
    put_base64(b, (const unsigned char *)v, n * sizeof(float));
    lp_buf_puts(b, "\"}");
    return;
  }
  lp_buf_puts(b, "[");
  char t[32];
  for (size_t i = 0; i < n; i++) {
    if (i) lp_buf_puts(b, ", ");
    lp_buf_append(b, t, lp_fmt_float_g9(t, v[i])); /* "%.9g" without printf's float path */
  }
  lp_buf_puts(b, "]}");
}

void lp_openai_error(lp_buf_t *b, int status, const char *code, const char *msg, const char *param) {
  const char *type = status == 429   ? "rate_limit_error"
                     : status == 404 ? "not_found_error"
                     : status >= 500 ? "server_error"
                                     : "invalid_request_error";
  lp_buf_puts(b, "{\"error\": {\"message\": ");
  lp_buf_json_str(b, msg, strlen(msg));
  lp_buf_printf(b, ", \"type\": \"%s\", \"param\": ", type);
  if (param) lp_buf_json_str(b, param, strlen(param));
  else lp_buf_puts(b, "null");
  lp_buf_puts(b, ", \"code\": ");
  lp_buf_json_str(b, code, strlen(code));
  lp_buf_puts(b, "}}\n");
}
