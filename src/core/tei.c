/* The TEI routes' codec (see tei.h). jansson reads a request, whose strings the
 * tokenizer then reads in place; the statuses follow TEI's (axum's for JSON it
 * cannot read). */
#include "lanepack/tei.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

static int bad(int *status, const char **type, int st, const char *ty, char *err, size_t errlen,
               const char *fmt, const char *what) {
  *status = st;
  *type = ty;
  snprintf(err, errlen, fmt, what);
  return -EPROTO;
}

/* A boolean field into *out. */
static int get_bool(json_t *v, const char *key, int *out, int *status, const char **type, char *err,
                    size_t errlen) {
  if (!json_is_boolean(v))
    return bad(status, type, 422, LP_TEI_VALIDATION, err, errlen, "`%s` must be true or false", key);
  *out = json_is_true(v);
  return 0;
}

/* A string or an array of strings (want_list: an array only) into r->texts. */
static int get_texts(lp_tei_req_t *r, json_t *v, const char *key, int want_list, size_t max_inputs,
                     int *status, const char **type, char *err, size_t errlen) {
  int one = json_is_string(v) && !want_list;
  if (!one && !json_is_array(v))
    return bad(status, type, 422, LP_TEI_VALIDATION, err, errlen,
               want_list ? "`%s` must be an array of strings" : "`%s` must be a string or an array of strings",
               key);
  size_t n = one ? 1 : json_array_size(v);
  if (n == 0) return bad(status, type, 400, LP_TEI_EMPTY, err, errlen, "`%s` cannot be empty", key);
  if (n > max_inputs) {
    char msg[160];
    snprintf(msg, sizeof(msg), "batch size %zu > maximum allowed batch size %zu", n, max_inputs);
    return bad(status, type, 413, LP_TEI_VALIDATION, err, errlen, "%s", msg);
  }
  r->texts = calloc(n, sizeof(*r->texts));
  if (!r->texts) return -ENOMEM;
  r->ntexts = n;
  for (size_t i = 0; i < n; i++) {
    json_t *e = one ? v : json_array_get(v, i);
    if (!json_is_string(e))
      return bad(status, type, 422, LP_TEI_VALIDATION, err, errlen, "`%s` must hold strings only", key);
    r->texts[i] = (lp_tei_text_t){json_string_value(e), json_string_length(e)};
  }
  return 0;
}

/* Whether key is one of route's fields. */
static int known(int route, const char *key) {
  static const char *const common[] = {"model", "truncate", "truncation_direction", NULL};
  static const char *const embed[] = {"inputs", "normalize", "prompt_name", NULL};
  static const char *const rerank[] = {"query", "texts", "raw_scores", "return_text", NULL};
  static const char *const tokenize[] = {"inputs", "add_special_tokens", "prompt_name", NULL};
  const char *const *own = route == LP_TEI_EMBED ? embed : route == LP_TEI_RERANK ? rerank : tokenize;
  for (size_t i = 0; common[i]; i++)
    if (strcmp(key, common[i]) == 0) return route != LP_TEI_TOKENIZE || strcmp(key, "model") == 0;
  for (size_t i = 0; own[i]; i++)
    if (strcmp(key, own[i]) == 0) return 1;
  return 0;
}

int lp_tei_parse(int route, const char *body, size_t len, size_t max_inputs, lp_tei_req_t *r, int *status,
                 const char **type, char *err, size_t errlen) {
  memset(r, 0, sizeof(*r));
  r->route = route;
  r->normalize = 1;
  r->add_special_tokens = 1;
  json_error_t je;
  /* no duplicate keys: which of two "inputs" would a client have meant */
  json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
  if (!root) return bad(status, type, 400, LP_TEI_VALIDATION, err, errlen, "the body is not valid JSON: %s", je.text);
  r->root = root;
  if (!json_is_object(root))
    return bad(status, type, 422, LP_TEI_VALIDATION, err, errlen, "the body must be a JSON %s", "object");
  const char *key;
  json_t *v;
  int rc = 0;
  json_object_foreach(root, key, v) {
    if (!known(route, key)) return bad(status, type, 422, LP_TEI_VALIDATION, err, errlen, "unknown field `%.100s`", key);
    if (strcmp(key, "model") == 0) {
      if (!json_is_string(v) || json_string_length(v) == 0 || json_string_length(v) >= sizeof(r->model))
        return bad(status, type, 422, LP_TEI_VALIDATION, err, errlen, "`%s` must be a model's name", key);
      memcpy(r->model, json_string_value(v), json_string_length(v) + 1);
    } else if (strcmp(key, "truncation_direction") == 0) {
      /* TEI's spellings, and the lower case its clients' docs use */
      const char *d = json_is_string(v) ? json_string_value(v) : "";
      if (strcmp(d, "Left") == 0 || strcmp(d, "left") == 0) r->left = 1;
      else if (strcmp(d, "Right") != 0 && strcmp(d, "right") != 0)
        return bad(status, type, 422, LP_TEI_VALIDATION, err, errlen, "`%s` must be \"Right\" or \"Left\"", key);
    } else if (strcmp(key, "prompt_name") == 0) {
      if (!json_is_null(v)) /* no model here has prompts configured */
        return bad(status, type, 422, LP_TEI_VALIDATION, err, errlen,
                   "`%s` is not supported: no prompts are configured", key);
    } else if (strcmp(key, "query") == 0) {
      if (!json_is_string(v)) return bad(status, type, 422, LP_TEI_VALIDATION, err, errlen, "`%s` must be a string", key);
      r->query = (lp_tei_text_t){json_string_value(v), json_string_length(v)};
    } else if (strcmp(key, "inputs") == 0 || strcmp(key, "texts") == 0) {
      rc = get_texts(r, v, key, route == LP_TEI_RERANK, max_inputs, status, type, err, errlen);
    } else {
      int *flag = strcmp(key, "truncate") == 0      ? &r->truncate
                  : strcmp(key, "normalize") == 0   ? &r->normalize
                  : strcmp(key, "raw_scores") == 0  ? &r->raw_scores
                  : strcmp(key, "return_text") == 0 ? &r->return_text
                                                    : &r->add_special_tokens;
      /* TEI takes null for an optional truncate: the default */
      if (!(json_is_null(v) && flag == &r->truncate)) rc = get_bool(v, key, flag, status, type, err, errlen);
    }
    if (rc) return rc;
  }
  const char *need = route == LP_TEI_RERANK ? (!r->query.s ? "query" : !r->texts ? "texts" : NULL)
                                             : (!r->texts ? "inputs" : NULL);
  if (need) return bad(status, type, 422, LP_TEI_VALIDATION, err, errlen, "missing field `%s`", need);
  return 0;
}

void lp_tei_req_free(lp_tei_req_t *r) {
  free(r->texts);
  json_decref(r->root);
  memset(r, 0, sizeof(*r));
}

/* The length of the part of s starting at p: a $A / $B slot, or a piece up to
 * a space, a ':' type suffix, a slot, or a '<' that starts the next piece. */
static size_t part_len(const char *p) {
  if (p[0] == '$' && (p[1] == 'A' || p[1] == 'B')) return 2;
  size_t n = 1;
  while (p[n] && p[n] != ' ' && p[n] != ':' && p[n] != '<' && !(p[n] == '$' && (p[n + 1] == 'A' || p[n + 1] == 'B')))
    n++;
  return n;
}

int lp_tei_template_parse(const char *s, lp_tei_template_t *t, char *err, size_t errlen) {
  memset(t, 0, sizeof(*t));
  int seen[3] = {0, 0, 0};
  for (const char *p = s; *p;) {
    if (*p == ' ') {
      p++;
      continue;
    }
    if (*p == ':') { /* a type id: digits */
      size_t d = strspn(p + 1, "0123456789");
      if (d == 0) {
        snprintf(err, errlen, "a ':' must be followed by a type id (digits)");
        return -EINVAL;
      }
      p += 1 + d;
      continue;
    }
    size_t n = part_len(p);
    if (t->nparts == LP_TEI_TEMPLATE_PARTS) {
      snprintf(err, errlen, "more than %d parts", LP_TEI_TEMPLATE_PARTS);
      return -EINVAL;
    }
    int slot = p[0] == '$' && n == 2 ? (p[1] == 'A' ? 1 : 2) : 0;
    if (!slot && n >= LP_TEI_PIECE_MAX) {
      snprintf(err, errlen, "the piece '%.*s' is longer than %d bytes", (int)n, p, LP_TEI_PIECE_MAX - 1);
      return -EINVAL;
    }
    t->part[t->nparts].slot = slot;
    if (!slot) memcpy(t->part[t->nparts].piece, p, n);
    t->nparts++;
    seen[slot]++;
    p += n;
  }
  if (seen[1] != 1 || seen[2] != 1) {
    snprintf(err, errlen, "must hold $A (the query) and $B (the text) once each");
    return -EINVAL;
  }
  return 0;
}

int lp_tei_template_load(const char *spec, int32_t (*lookup)(const void *ud, const char *piece), const void *ud,
                         lp_tei_template_t *t, char *err, size_t errlen) {
  if (lp_tei_template_parse(spec, t, err, errlen)) return -EINVAL;
  for (size_t i = 0; i < t->nparts; i++) {
    if (t->part[i].slot) continue;
    if ((t->part[i].id = lookup(ud, t->part[i].piece)) < 0) {
      snprintf(err, errlen, "the piece '%s' is not in the model's vocabulary", t->part[i].piece);
      return -EINVAL;
    }
  }
  return 0;
}

long lp_tei_pair(const lp_tei_template_t *t, const int32_t *a, size_t na, const int32_t *b, size_t nb,
                 size_t max, int left, int32_t *out, size_t cap) {
  size_t fixed = na;
  for (size_t i = 0; i < t->nparts; i++) fixed += t->part[i].slot == 0;
  if (max && fixed + nb > max) {
    if (fixed >= max) return -E2BIG;
    if (left) b += nb - (max - fixed);
    nb = max - fixed;
  }
  if (fixed + nb > cap) return -ENOSPC;
  size_t n = 0;
  for (size_t i = 0; i < t->nparts; i++) {
    int slot = t->part[i].slot;
    if (slot == 0) {
      out[n++] = t->part[i].id;
      continue;
    }
    const int32_t *src = slot == 1 ? a : b;
    size_t k = slot == 1 ? na : nb;
    if (k) memcpy(out + n, src, k * sizeof(*src));
    n += k;
  }
  return (long)n;
}

float lp_tei_sigmoid(float x) { return (float)(1.0 / (1.0 + exp(-(double)x))); }

/* Scores descending, then index ascending: a total order, so equal scores
 * keep the client's order whatever qsort does. */
static int by_score(const void *x, const void *y) {
  const lp_tei_rank_t *a = x, *b = y;
  if (a->score != b->score) return a->score > b->score ? -1 : 1;
  return a->index < b->index ? -1 : a->index > b->index;
}

void lp_tei_rank(lp_tei_rank_t *r, size_t n) {
  if (n > 1) qsort(r, n, sizeof(*r), by_score);
}

void lp_tei_vector(lp_buf_t *b, const float *v, size_t n) {
  lp_buf_puts(b, "[");
  for (size_t i = 0; i < n; i++) lp_buf_printf(b, i ? ",%.9g" : "%.9g", (double)v[i]);
  lp_buf_puts(b, "]");
}

void lp_tei_rank_item(lp_buf_t *b, size_t index, float score, const char *text, size_t text_len) {
  lp_buf_printf(b, "{\"index\":%zu,", index);
  if (text) {
    lp_buf_puts(b, "\"text\":");
    lp_buf_json_str(b, text, text_len);
    lp_buf_puts(b, ",");
  }
  lp_buf_printf(b, "\"score\":%.9g}", (double)score);
}

void lp_tei_token(lp_buf_t *b, int32_t id, const char *text, size_t len, int special, size_t start,
                  size_t stop) {
  lp_buf_printf(b, "{\"id\":%d,\"text\":", (int)id);
  lp_buf_json_str(b, text, len);
  if (special) lp_buf_puts(b, ",\"special\":true,\"start\":null,\"stop\":null}");
  else lp_buf_printf(b, ",\"special\":false,\"start\":%zu,\"stop\":%zu}", start, stop);
}

void lp_tei_error(lp_buf_t *b, const char *msg, const char *type) {
  lp_buf_puts(b, "{\"error\":");
  lp_buf_json_str(b, msg, strlen(msg));
  lp_buf_puts(b, ",\"error_type\":");
  lp_buf_json_str(b, type, strlen(type));
  lp_buf_puts(b, "}\n");
}
