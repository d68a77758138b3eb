/* The load generator's reader of /v1/embeddings answers: jansson decodes the
 * JSON (bounded by the answer's size), this walks it and checks each vector
 * against the emulator's formula (lanepack/emu.h). */
#include "embcheck.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lanepack/emu.h"

static int fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (errlen) vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return -EPROTO;
}

static int b64_value(unsigned char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

long lp_embcheck_base64(const char *s, size_t n, unsigned char *out, size_t cap) {
  if (n % 4) return -EPROTO;
  size_t o = 0;
  for (size_t i = 0; i < n; i += 4) {
    int last = i + 4 == n;
    int pad = last ? (s[i + 3] == '=') + (s[i + 2] == '=') : 0;
    if (pad == 1 && s[i + 2] == '=') return -EPROTO; /* "x=y=" */
    uint32_t w = 0;
    for (int k = 0; k < 4 - pad; k++) {
      int v = b64_value((unsigned char)s[i + k]);
      if (v < 0) return -EPROTO;
      w |= (uint32_t)v << (18 - 6 * k);
    }
    size_t bytes = 3 - (size_t)pad;
    if (o + bytes > cap) return -E2BIG;
    out[o++] = (unsigned char)(w >> 16);
    if (bytes > 1) out[o++] = (unsigned char)(w >> 8);
    if (bytes > 2) out[o++] = (unsigned char)w;
  }
  return (long)o;
}

/* Vector i's floats into v[0..dims). 0 or -EPROTO with err. */
static int read_vector(const json_t *e, const lp_embcheck_want_t *w, size_t i, float *v, char *err, size_t errlen) {
  if (w->base64) {
    if (!json_is_string(e)) return fail(err, errlen, "data[%zu].embedding is not a base64 string", i);
    long n = lp_embcheck_base64(json_string_value(e), json_string_length(e), (unsigned char *)v,
                                (size_t)w->dims * sizeof(float));
    if (n == -E2BIG) return fail(err, errlen, "data[%zu].embedding holds more than %u floats", i, w->dims);
    if (n < 0) return fail(err, errlen, "data[%zu].embedding is not base64", i);
    if ((size_t)n != w->dims * sizeof(float))
      return fail(err, errlen, "data[%zu].embedding is %ld bytes, %u floats are %zu", i, n, w->dims,
                  w->dims * sizeof(float));
    /* little-endian float32 on the wire, as in this machine's memory */
    _Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "base64 embeddings are little-endian");
    return 0;
  }
  if (!json_is_array(e)) return fail(err, errlen, "data[%zu].embedding is not an array", i);
  if (json_array_size(e) != w->dims)
    return fail(err, errlen, "data[%zu].embedding has %zu floats, want %u", i, json_array_size(e), w->dims);
  for (unsigned k = 0; k < w->dims; k++) {
    const json_t *x = json_array_get(e, k);
    if (!json_is_number(x)) return fail(err, errlen, "data[%zu].embedding[%u] is not a number", i, k);
    v[k] = (float)json_number_value(x);
  }
  return 0;
}

/* Vector v against input i: the formula's values for its ids, or its form. */
static int check_vector(const float *v, const lp_embcheck_want_t *w, size_t i, uint64_t off, int32_t *key,
                        char *err, size_t errlen) {
  if (w->tokens) {
    int32_t h = lp_emu_last(w->tokens + off, w->lens[i]);
    for (unsigned k = 0; k < w->dims; k++)
      if (v[k] != lp_emu_feature(h, k))
        return fail(err, errlen, "data[%zu].embedding[%u] is %.9g, the emulator's for its ids is %.9g", i, k,
                    (double)v[k], (double)lp_emu_feature(h, k));
  } else {
    /* h is never negative, so h mod 1000 is an integer 0..999 */
    if (!(v[0] >= 0 && v[0] <= 999 && v[0] == floorf(v[0])))
      return fail(err, errlen, "data[%zu].embedding[0] is %.9g, not an integer 0..999", i, (double)v[0]);
    for (unsigned k = 1; k < w->dims; k++)
      if (v[k] != v[0] + 0.25f * (float)k)
        return fail(err, errlen, "data[%zu].embedding[%u] is %.9g, not embedding[0] + %u/4", i, k, (double)v[k], k);
  }
  if (key) *key = (int32_t)v[0];
  return 0;
}

static int check_tree(const json_t *root, const lp_embcheck_want_t *w, float *v, int32_t *keys, char *err,
                      size_t errlen) {
  if (!json_is_object(root)) return fail(err, errlen, "the answer is not a JSON object");
  const char *obj = json_string_value(json_object_get(root, "object"));
  if (!obj || strcmp(obj, "list")) return fail(err, errlen, "'object' is not \"list\"");
  const char *model = json_string_value(json_object_get(root, "model"));
  if (!model || strcmp(model, w->model)) return fail(err, errlen, "'model' is not \"%.64s\"", w->model);
  const json_t *data = json_object_get(root, "data");
  if (!json_is_array(data)) return fail(err, errlen, "'data' is not an array");
  if (json_array_size(data) != w->ninputs)
    return fail(err, errlen, "'data' has %zu embeddings for %zu inputs", json_array_size(data), w->ninputs);
  uint64_t off = 0;
  for (size_t i = 0; i < w->ninputs; i++) {
    const json_t *d = json_array_get(data, i);
    if (!json_is_object(d)) return fail(err, errlen, "data[%zu] is not an object", i);
    const char *o = json_string_value(json_object_get(d, "object"));
    if (!o || strcmp(o, "embedding")) return fail(err, errlen, "data[%zu].object is not \"embedding\"", i);
    const json_t *index = json_object_get(d, "index");
    if (!json_is_integer(index) || json_integer_value(index) != (json_int_t)i)
      return fail(err, errlen, "data[%zu].index is not %zu: answers out of input order", i, i);
    int rc = read_vector(json_object_get(d, "embedding"), w, i, v, err, errlen);
    if (!rc) rc = check_vector(v, w, i, off, keys ? keys + i : NULL, err, errlen);
    if (rc) return rc;
    if (w->tokens) off += w->lens[i];
  }
  const json_t *usage = json_object_get(root, "usage");
  const json_t *pt = json_object_get(usage, "prompt_tokens"), *tt = json_object_get(usage, "total_tokens");
  if (!json_is_integer(pt) || !json_is_integer(tt))
    return fail(err, errlen, "'usage' lacks integer prompt_tokens and total_tokens");
  json_int_t p = json_integer_value(pt);
  if (json_integer_value(tt) != p) return fail(err, errlen, "usage.total_tokens is not usage.prompt_tokens");
  if (w->tokens ? p != (json_int_t)w->ntokens : p < (json_int_t)w->ninputs)
    return fail(err, errlen, "usage.prompt_tokens is %lld for %llu tokens in %zu inputs", (long long)p,
                (unsigned long long)w->ntokens, w->ninputs);
  return 0;
}

int lp_embcheck_answer(const char *body, size_t len, const lp_embcheck_want_t *w, int32_t *keys, char *err,
                       size_t errlen) {
  if (errlen) err[0] = 0;
  if (w->dims == 0 || w->dims > LP_EMBCHECK_MAX_DIMS) return fail(err, errlen, "dims %u out of range", w->dims);
  json_error_t je;
  json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
  if (!root) return fail(err, errlen, "not JSON: %s", je.text);
  float *v = malloc((size_t)w->dims * sizeof(float)); /* one vector's, reused for each */
  int rc = v ? check_tree(root, w, v, keys, err, errlen) : -ENOMEM;
  free(v);
  json_decref(root);
  return rc;
}
