/* The v2 codec: jansson reads the JSON header only (for binary tensors it is a
 * few hundred bytes), tensor bytes are never copied on decode. */
#include "lanepack/v2.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (err && errlen) vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return -EPROTO;
}

void lp_v2_msg_free(lp_v2_msg_t *m) {
  for (int i = 0; i < m->n; i++) {
    free(m->t[i].ints);
    free(m->t[i].reals);
    m->t[i].ints = NULL;
    m->t[i].reals = NULL;
  }
  m->n = 0;
}

const lp_tensor_t *lp_v2_find(const lp_v2_msg_t *m, const char *name) {
  for (int i = 0; i < m->n; i++)
    if (strcmp(m->t[i].name, name) == 0) return &m->t[i];
  return NULL;
}

/* Whether v, an integer from JSON, is a value of integer datatype t. */
static int fits(lp_dtype_t t, json_int_t v) {
  switch (t) {
    case LP_DT_UINT8: return v >= 0 && v <= UINT8_MAX;
    case LP_DT_UINT16: return v >= 0 && v <= UINT16_MAX;
    case LP_DT_UINT32: return v >= 0 && v <= UINT32_MAX;
    case LP_DT_UINT64: return v >= 0;
    case LP_DT_INT8: return v >= INT8_MIN && v <= INT8_MAX;
    case LP_DT_INT16: return v >= INT16_MIN && v <= INT16_MAX;
    case LP_DT_INT32: return v >= INT32_MIN && v <= INT32_MAX;
    default: return 1;
  }
}

/* The values jansson cannot hold, which decode() turned into strings: NaN and
 * the infinities (floats), integers past INT64_MAX (UINT64). Returns 0 and sets
 * the value, or -1. */
static int special_real(const char *s, double *out) {
  if (strcmp(s, "NaN") == 0) *out = NAN;
  else if (strcmp(s, "Infinity") == 0) *out = INFINITY;
  else if (strcmp(s, "-Infinity") == 0) *out = -INFINITY;
  else return -1;
  return 0;
}

static int big_uint(const char *s, int64_t *out) {
  if (*s < '0' || *s > '9') return -1;
  errno = 0;
  char *end;
  unsigned long long u = strtoull(s, &end, 10);
  if (*end || errno) return -1;
  *out = (int64_t)u; /* UINT64 values are kept as their bits */
  return 0;
}

/* Flattens nested JSON arrays of numbers (row-major) into t's decoded values. */
static int flatten(lp_tensor_t *t, json_t *v, size_t *at, int depth, const char *name, char *err,
                   size_t errlen) {
  if (json_is_array(v)) {
    if (depth > LP_TENSOR_MAX_DIMS) return fail(err, errlen, "'%s': data nests too deep", name);
    size_t i;
    json_t *x;
    json_array_foreach(v, i, x) {
      int rc = flatten(t, x, at, depth + 1, name, err, errlen);
      if (rc) return rc;
    }
    return 0;
  }
  if (*at >= t->count) return fail(err, errlen, "'%s': data has more elements than its shape", name);
  if (lp_dtype_is_float(t->dtype)) {
    if (json_is_string(v) && special_real(json_string_value(v), &t->reals[*at]) == 0) {
      (*at)++;
      return 0;
    }
    if (!json_is_number(v)) return fail(err, errlen, "'%s': data[%zu] is not a number", name, *at);
    t->reals[(*at)++] = json_number_value(v);
  } else if (t->dtype == LP_DT_BOOL) {
    if (!json_is_boolean(v) && !json_is_integer(v))
      return fail(err, errlen, "'%s': data[%zu] is not a boolean", name, *at);
    t->ints[(*at)++] = json_is_boolean(v) ? json_is_true(v) : json_integer_value(v) != 0;
  } else {
    if (t->dtype == LP_DT_UINT64 && json_is_string(v) && big_uint(json_string_value(v), &t->ints[*at]) == 0) {
      (*at)++;
      return 0;
    }
    if (!json_is_integer(v) && !json_is_string(v))
      return fail(err, errlen, "'%s': data[%zu] is not an integer", name, *at);
    if (!json_is_integer(v) || !fits(t->dtype, json_integer_value(v)))
      return fail(err, errlen, "'%s': data[%zu] is out of range for %s", name, *at, lp_dtype_name(t->dtype));
    t->ints[(*at)++] = json_integer_value(v);
  }
  return 0;
}

/* One tensor of a list: name, datatype, shape, and its data in either form.
 * *cursor walks the binary part. */
static int read_tensor(lp_tensor_t *t, json_t *o, const char *body, size_t len, size_t *cursor,
                       int have_binary, size_t idx, char *err, size_t errlen) {
  memset(t, 0, sizeof(*t));
  if (!json_is_object(o)) return fail(err, errlen, "tensor %zu is not an object", idx);
  const char *name = json_string_value(json_object_get(o, "name"));
  if (!name || !name[0] || strlen(name) >= sizeof(t->name))
    return fail(err, errlen, "tensor %zu has no valid 'name'", idx);
  memcpy(t->name, name, strlen(name) + 1);
  const char *dt = json_string_value(json_object_get(o, "datatype"));
  t->dtype = dt ? lp_dtype_parse(dt) : LP_DT_INVALID;
  if (t->dtype == LP_DT_INVALID)
    return fail(err, errlen, "'%s': unknown datatype '%s'", name, dt ? dt : "(none)");
  if (t->dtype == LP_DT_BYTES) return fail(err, errlen, "'%s': BYTES tensors are not numbers", name);
  json_t *shape = json_object_get(o, "shape");
  if (!json_is_array(shape) || json_array_size(shape) > LP_TENSOR_MAX_DIMS)
    return fail(err, errlen, "'%s': 'shape' must be an array of at most %d sizes", name,
                LP_TENSOR_MAX_DIMS);
  t->ndim = (int)json_array_size(shape);
  uint64_t count = 1;
  for (int d = 0; d < t->ndim; d++) {
    json_t *x = json_array_get(shape, (size_t)d);
    if (!json_is_integer(x) || json_integer_value(x) < 0)
      return fail(err, errlen, "'%s': shape[%d] is not a size", name, d);
    t->shape[d] = json_integer_value(x);
    if (t->shape[d] && count > LP_V2_MAX_ELEMENTS / (uint64_t)t->shape[d])
      return fail(err, errlen, "'%s': shape holds more than 2^32 elements", name);
    count *= (uint64_t)t->shape[d];
  }
  t->count = (size_t)count;
  size_t esz = lp_dtype_size(t->dtype);
  json_t *size = json_object_get(json_object_get(o, "parameters"), "binary_data_size");
  if (size) {
    if (!have_binary) return fail(err, errlen, "'%s' is binary but the body has no binary part", name);
    if (!json_is_integer(size) || json_integer_value(size) < 0)
      return fail(err, errlen, "'%s': binary_data_size is not a size", name);
    uint64_t n = (uint64_t)json_integer_value(size);
    if (n != count * esz)
      return fail(err, errlen, "'%s': binary_data_size %llu, but shape and %s need %llu bytes", name,
                  (unsigned long long)n, lp_dtype_name(t->dtype), (unsigned long long)(count * esz));
    if (n > len - *cursor)
      return fail(err, errlen, "'%s': binary data runs past the body (%llu bytes at %zu of %zu)", name,
                  (unsigned long long)n, *cursor, len);
    t->raw = (const uint8_t *)body + *cursor;
    *cursor += (size_t)n;
    return 0;
  }
  json_t *data = json_object_get(o, "data");
  if (!data) return fail(err, errlen, "'%s' has neither 'data' nor binary_data_size", name);
  if (!json_is_array(data)) return fail(err, errlen, "'%s': 'data' is not an array", name);
  if (count > len) /* each element takes at least a byte of JSON */
    return fail(err, errlen, "'%s': shape holds more elements than the body", name);
  if (lp_dtype_is_float(t->dtype)) t->reals = malloc((count ? count : 1) * sizeof(double));
  else t->ints = malloc((count ? count : 1) * sizeof(int64_t));
  if (!t->reals && !t->ints) return -ENOMEM;
  size_t at = 0;
  int rc = flatten(t, data, &at, 0, name, err, errlen);
  if (rc) return rc;
  if (at != count)
    return fail(err, errlen, "'%s': data has %zu elements, shape needs %llu", name, at,
                (unsigned long long)count);
  return 0;
}

/* JSON as Triton and Python servers write it has bare NaN, Infinity and
 * -Infinity, and UINT64 values past INT64_MAX, none of which jansson reads: a
 * copy of text[0..n) with each of those tokens (outside strings) put in quotes,
 * for flatten() to read back. NULL when there is none (or no memory). */
static char *quote_specials(const char *text, size_t n, size_t *out_len) {
  lp_buf_t b;
  lp_buf_init(&b);
  size_t done = 0, i = 0, changed = 0;
  while (i < n) {
    char c = text[i];
    if (c == '"') { /* a string: skipped whole, escapes included */
      for (i++; i < n && text[i] != '"'; i++)
        if (text[i] == '\\') i++;
      i++;
      continue;
    }
    size_t tok = 0;
    if (n - i >= 3 && memcmp(text + i, "NaN", 3) == 0) tok = 3;
    else if (n - i >= 8 && memcmp(text + i, "Infinity", 8) == 0) tok = 8;
    else if (n - i >= 9 && memcmp(text + i, "-Infinity", 9) == 0) tok = 9;
    else if (c >= '0' && c <= '9' && (i == 0 || !strchr("0123456789.eE+-", text[i - 1]))) {
      size_t j = i;
      while (j < n && text[j] >= '0' && text[j] <= '9') j++;
      /* an integer past INT64_MAX that is not a fraction's or exponent's */
      int big = j - i > 19 || (j - i == 19 && memcmp(text + i, "9223372036854775807", 19) > 0);
      if (big && (j == n || !strchr(".eE", text[j]))) tok = j - i;
      else {
        i = j;
        continue;
      }
    }
    if (!tok) {
      i++;
      continue;
    }
    lp_buf_append(&b, text + done, i - done);
    lp_buf_puts(&b, "\"");
    lp_buf_append(&b, text + i, tok);
    lp_buf_puts(&b, "\"");
    i += tok;
    done = i;
    changed++;
  }
  lp_buf_append(&b, text + done, n - done);
  if (!changed || b.oom) {
    lp_buf_free(&b);
    return NULL;
  }
  *out_len = b.len;
  return b.data; /* the caller frees it */
}

int lp_v2_decode(lp_v2_msg_t *m, const char *body, size_t len, int64_t header_len, int request,
                 char *err, size_t errlen) {
  memset(m, 0, sizeof(*m));
  size_t hl = header_len < 0 ? len : (size_t)header_len;
  if (header_len >= 0 && (uint64_t)header_len > len)
    return fail(err, errlen, "Inference-Header-Content-Length %lld is past the body's %zu bytes",
                (long long)header_len, len);
  json_error_t je;
  json_t *root = json_loadb(body, hl, 0, &je);
  if (!root) { /* only then the slower reading of non-standard numbers */
    size_t ql;
    char *q = quote_specials(body, hl, &ql);
    json_error_t je2;
    if (q) root = json_loadb(q, ql, 0, &je2);
    free(q);
  }
  if (!root) return fail(err, errlen, "the JSON header is not valid JSON: %s", je.text);
  int rc = 0;
  if (!json_is_object(root)) {
    rc = fail(err, errlen, "the JSON header is not an object");
    goto out;
  }
  json_t *id = json_object_get(root, "id");
  if (id) {
    if (!json_is_string(id) || json_string_length(id) >= sizeof(m->id)) {
      rc = fail(err, errlen, "'id' must be a string of under %zu bytes", sizeof(m->id));
      goto out;
    }
    memcpy(m->id, json_string_value(id), json_string_length(id) + 1);
    m->has_id = 1;
  }
  const char *mn = json_string_value(json_object_get(root, "model_name"));
  if (mn && strlen(mn) < sizeof(m->model_name)) memcpy(m->model_name, mn, strlen(mn) + 1);
  const char *key = request ? "inputs" : "outputs";
  json_t *list = json_object_get(root, key);
  if (!json_is_array(list) || json_array_size(list) == 0) {
    rc = fail(err, errlen, "'%s' must be a non-empty array", key);
    goto out;
  }
  if (json_array_size(list) > LP_V2_MAX_TENSORS) {
    rc = fail(err, errlen, "more than %d tensors in '%s'", LP_V2_MAX_TENSORS, key);
    goto out;
  }
  size_t cursor = hl, i;
  json_t *o;
  json_array_foreach(list, i, o) {
    rc = read_tensor(&m->t[m->n], o, body, len, &cursor, header_len >= 0, i, err, errlen);
    m->n++; /* counted even when it failed: its buffers are freed with the rest */
    if (rc) goto out;
    for (int k = 0; k + 1 < m->n; k++)
      if (strcmp(m->t[k].name, m->t[m->n - 1].name) == 0) {
        rc = fail(err, errlen, "tensor '%s' appears twice", m->t[k].name);
        goto out;
      }
  }
  if (cursor != len) {
    rc = fail(err, errlen, "%zu bytes after the last binary tensor", len - cursor);
    goto out;
  }
  if (request) {
    json_t *params = json_object_get(root, "parameters");
    if (params && !json_is_object(params)) {
      rc = fail(err, errlen, "'parameters' must be an object");
      goto out;
    }
    m->binary_data_output = json_is_true(json_object_get(params, "binary_data_output"));
    json_t *p = json_object_get(params, "priority");
    if (p) {
      if (!json_is_integer(p)) {
        rc = fail(err, errlen, "parameter 'priority' must be an integer");
        goto out;
      }
      m->has_priority = 1;
      m->priority = json_integer_value(p);
    }
    json_t *to = json_object_get(params, "timeout");
    if (to) {
      if (!json_is_integer(to) || json_integer_value(to) < 0) {
        rc = fail(err, errlen, "parameter 'timeout' must be microseconds, an integer >= 0");
        goto out;
      }
      m->has_timeout = 1;
      m->timeout_us = json_integer_value(to);
    }
    json_t *outs = json_object_get(root, "outputs");
    if (outs && (!json_is_array(outs) || json_array_size(outs) > LP_V2_MAX_TENSORS)) {
      rc = fail(err, errlen, "'outputs' must be an array of at most %d", LP_V2_MAX_TENSORS);
      goto out;
    }
    json_array_foreach(outs, i, o) {
      const char *n = json_string_value(json_object_get(o, "name"));
      if (!n || !n[0] || strlen(n) >= sizeof(m->want[0])) {
        rc = fail(err, errlen, "outputs[%zu] has no valid 'name'", i);
        goto out;
      }
      memcpy(m->want[m->nwant], n, strlen(n) + 1);
      m->want_binary[m->nwant++] =
          json_is_true(json_object_get(json_object_get(o, "parameters"), "binary_data"));
    }
  }
out:
  json_decref(root);
  return rc;
}

/* ---- writing ---- */

static void put_shape(lp_buf_t *b, const lp_v2_out_t *t) {
  lp_buf_puts(b, "[");
  for (int d = 0; d < t->ndim; d++) {
    if (d) lp_buf_puts(b, ",");
    lp_buf_i64(b, t->shape[d]);
  }
  lp_buf_puts(b, "]");
}

int lp_v2_write(lp_buf_t *out, const char *members, const char *list_key, const lp_v2_out_t *t,
                int n, int binary, size_t *header_len) {
  size_t start = out->len;
  lp_buf_puts(out, "{");
  if (members && members[0]) {
    lp_buf_puts(out, members);
    lp_buf_puts(out, ",");
  }
  lp_buf_puts(out, "\"");
  lp_buf_puts(out, list_key);
  lp_buf_puts(out, "\":[");
  for (int i = 0; i < n; i++) {
    size_t esz = lp_dtype_size(t[i].dtype);
    if (i) lp_buf_puts(out, ",");
    lp_buf_puts(out, "{\"name\":");
    lp_buf_json_str(out, t[i].name, strlen(t[i].name));
    lp_buf_puts(out, ",\"datatype\":\"");
    lp_buf_puts(out, lp_dtype_name(t[i].dtype));
    lp_buf_puts(out, "\",\"shape\":");
    put_shape(out, &t[i]);
    if (binary) {
      lp_buf_puts(out, ",\"parameters\":{\"binary_data_size\":");
      lp_buf_u64(out, (uint64_t)(t[i].count * esz));
      lp_buf_puts(out, "}}");
      continue;
    }
    lp_buf_puts(out, ",\"data\":");
    if (t[i].widen_i32 || t[i].dtype == LP_DT_INT32) {
      lp_buf_i32_array(out, t[i].data, t[i].count); /* the fast writer, brackets included */
    } else {
      lp_tensor_t view = {.dtype = t[i].dtype, .raw = t[i].data, .count = t[i].count};
      lp_buf_puts(out, "[");
      lp_tensor_write_json_ex(out, &view, 0, t[i].count, 1, LP_TENSOR_JSON_NONFINITE);
      lp_buf_puts(out, "]");
    }
    lp_buf_puts(out, "}");
  }
  lp_buf_puts(out, "]}");
  if (header_len) *header_len = out->len - start;
  if (binary) {
    for (int i = 0; i < n; i++) {
      if (!t[i].data) continue; /* the caller's to append (a gather list) */
      if (!t[i].widen_i32) {
        lp_buf_append(out, t[i].data, t[i].count * lp_dtype_size(t[i].dtype));
        continue;
      }
      if (lp_buf_reserve(out, t[i].count * 8)) break;
      const int32_t *src = t[i].data;
      for (size_t k = 0; k < t[i].count; k++) {
        int64_t v = src[k];
        memcpy(out->data + out->len + k * 8, &v, 8);
      }
      out->len += t[i].count * 8;
    }
  }
  return out->oom ? -ENOMEM : 0;
}

/* ---- routes ---- */

static int is(const char *p, size_t n, const char *lit) { return n == strlen(lit) && memcmp(p, lit, n) == 0; }

lp_v2_route_t lp_v2_route(const char *p, size_t n, const char **name, size_t *name_len) {
  *name = NULL;
  *name_len = 0;
  if (n < 3 || memcmp(p, "/v2", 3) != 0 || (n > 3 && p[3] != '/')) return LP_V2_NOT_V2;
  if (n == 3) return LP_V2_SERVER;
  if (is(p, n, "/v2/health/live")) return LP_V2_LIVE;
  if (is(p, n, "/v2/health/ready")) return LP_V2_READY;
  static const char models[] = "/v2/models/";
  size_t ml = sizeof(models) - 1;
  if (n <= ml || memcmp(p, models, ml) != 0) return LP_V2_UNKNOWN;
  const char *nm = p + ml, *end = p + n;
  const char *slash = memchr(nm, '/', (size_t)(end - nm));
  const char *rest = slash ? slash : end;
  if (rest == nm) return LP_V2_UNKNOWN;
  *name = nm;
  *name_len = (size_t)(rest - nm);
  size_t rl = (size_t)(end - rest);
  if (rl >= 10 && memcmp(rest, "/versions/", 10) == 0) {
    const char *s2 = memchr(rest + 10, '/', rl - 10);
    rest = s2 ? s2 : end;
    rl = (size_t)(end - rest);
  }
  if (rl == 0) return LP_V2_MODEL;
  if (is(rest, rl, "/ready")) return LP_V2_MODEL_READY;
  if (is(rest, rl, "/infer")) return LP_V2_INFER;
  return LP_V2_UNKNOWN;
}
