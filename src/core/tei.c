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

#include "lanepack/jload.h"
#include "lanepack/tensor.h"

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

/* Token ids given as numbers: each in [0, 2^31) (TEI's u32 ids, lanepack's
 * int32 ones). */
static int is_ids(json_t *v) {
  if (!json_is_array(v)) return 0;
  size_t i;
  json_t *e;
  json_array_foreach(v, i, e) if (!json_is_integer(e) || json_integer_value(e) < 0 ||
                                  json_integer_value(e) > INT32_MAX) return 0;
  return 1;
}

/* Room for r->n inputs, and the ids block sized by counting every id the
 * inputs hold (each a text, an array of ids, or a pair). */
static int alloc_inputs(lp_tei_req_t *r, size_t n, size_t nids) {
  r->texts = calloc(n ? n : 1, sizeof(*r->texts));
  r->ids = malloc((nids ? nids : 1) * sizeof(*r->ids));
  if (!r->texts || !r->ids) return -ENOMEM;
  return 0;
}

/* One input e: a string, or (ids_ok) token ids, or (pairs_ok) a list of one
 * or two strings; into r->texts[r->ntexts++] (ids appended to r->ids at *at). */
static int put_input(lp_tei_req_t *r, json_t *e, int ids_ok, int pairs_ok, size_t *at) {
  lp_tei_text_t *t = &r->texts[r->ntexts];
  if (json_is_string(e)) {
    *t = (lp_tei_text_t){0};
    t->s = lp_jload_str(e, &t->len);
  } else if (ids_ok && is_ids(e)) {
    size_t n = json_array_size(e);
    for (size_t k = 0; k < n; k++) r->ids[*at + k] = (int32_t)json_integer_value(json_array_get(e, k));
    *t = (lp_tei_text_t){.ids = r->ids + *at, .nids = n};
    *at += n;
  } else if (pairs_ok && json_is_array(e) && (json_array_size(e) == 1 || json_array_size(e) == 2) &&
             json_is_string(json_array_get(e, 0)) && json_is_string(json_array_get(e, json_array_size(e) - 1))) {
    json_t *a = json_array_get(e, 0), *b = json_array_get(e, 1);
    *t = (lp_tei_text_t){0};
    t->s = lp_jload_str(a, &t->len);
    if (b) {
      t->b = lp_jload_str(b, &t->blen);
      t->pair = 1;
    }
  } else {
    return -EPROTO;
  }
  r->ntexts++;
  return 0;
}

/* TEI's 413 for n inputs past max_inputs. */
static int too_many(int *status, const char **type, char *err, size_t errlen, size_t n, size_t max_inputs) {
  char msg[160];
  snprintf(msg, sizeof(msg), "batch size %zu > maximum allowed batch size %zu", n, max_inputs);
  return bad(status, type, 413, LP_TEI_VALIDATION, err, errlen, "%s", msg);
}

/* What TEI 1.9's PredictInput says it expects, in its refusals. */
#define PREDICT_EXPECTED                                                                                         \
  "a string, a pair of strings [string, string] or a batch of mixed strings and pairs [[string], [string, "   \
  "string], ...]"

/* 1 when e is a list of strings. */
static int is_strings(json_t *e) {
  size_t i;
  json_t *s;
  if (!json_is_array(e)) return 0;
  json_array_foreach(e, i, s) if (!json_is_string(s)) return 0;
  return 1;
}

/* TEI's refusal of a list of n strings where one sequence (one or two) goes,
 * as its serde error reads (axum's prefix, no line and column). */
static int bad_length(int *status, const char **type, char *err, size_t errlen, size_t n) {
  char msg[300];
  snprintf(msg, sizeof(msg), "Failed to deserialize the JSON body into the target type: inputs: invalid length %zu, "
           "expected " PREDICT_EXPECTED, n);
  return bad(status, type, 422, LP_TEI_VALIDATION, err, errlen, "%s", msg);
}

/* /predict's inputs as TEI 1.9's PredictInput reads them: a string, or a list
 * whose first element is a string (one sequence: ["a"] a text, ["a", "b"] a
 * pair, a third string refused as invalid length 3, not a batch of three), or
 * a list whose first element is a list (a batch, each element [a] or [a, b],
 * another length refused as invalid length n). Every refusal is 422, an empty
 * list too (TEI's invalid length 0); then more than max_inputs is 413. */
static int get_predict_inputs(lp_tei_req_t *r, json_t *v, size_t max_inputs, int *status, const char **type,
                              char *err, size_t errlen) {
  static const char want[] = "`%s` must be a string, a pair of strings or a list of [string] and [string, string]";
  size_t n = json_array_size(v);
  if (!json_is_string(v) && !json_is_array(v)) return bad(status, type, 422, LP_TEI_VALIDATION, err, errlen, want,
                                                           "inputs");
  if (json_is_array(v) && n == 0) return bad_length(status, type, err, errlen, 0);
  int one = json_is_string(v) || json_is_string(json_array_get(v, 0));
  if (one && n > 2 && json_is_string(json_array_get(v, 1)) && json_is_string(json_array_get(v, 2)))
    return bad_length(status, type, err, errlen, 3); /* TEI stops at the third */
  if (one && !is_strings(v) && !json_is_string(v))
    return bad(status, type, 422, LP_TEI_VALIDATION, err, errlen, want, "inputs");
  size_t count = one ? 1 : n;
  for (size_t i = 0; !one && i < n; i++) {
    json_t *e = json_array_get(v, i);
    if (!is_strings(e)) return bad(status, type, 422, LP_TEI_VALIDATION, err, errlen, want, "inputs");
    size_t k = json_array_size(e);
    if (k < 1 || k > 2) return bad_length(status, type, err, errlen, k);
  }
  if (count > max_inputs) return too_many(status, type, err, errlen, count, max_inputs);
  if (alloc_inputs(r, count, 0)) return -ENOMEM;
  r->single = one;
  size_t at = 0;
  for (size_t i = 0; i < count; i++) put_input(r, one ? v : json_array_get(v, i), 0, 1, &at);
  return 0;
}

/* route's inputs into r->texts: a string or an array of strings; with ids_ok
 * (/embed, /embed_all, /embed_sparse, /decode) token ids or an array mixing
 * strings and token ids. */
static int get_inputs(lp_tei_req_t *r, json_t *v, const char *key, int want_list, int ids_ok, size_t max_inputs,
                      int *status, const char **type, char *err, size_t errlen) {
  const char *want = ids_ok ? "`%s` must be a string, token ids or a list of strings and token ids"
                     : want_list ? "`%s` must be an array of strings" : "`%s` must be a string or an array of strings";
  int one = (json_is_string(v) && !want_list) || (ids_ok && json_array_size(v) > 0 && is_ids(v));
  if (!one && !json_is_array(v)) return bad(status, type, 422, LP_TEI_VALIDATION, err, errlen, want, key);
  size_t n = one ? 1 : json_array_size(v);
  if (n == 0) return bad(status, type, 400, LP_TEI_EMPTY, err, errlen, "`%s` cannot be empty", key);
  if (n > max_inputs) return too_many(status, type, err, errlen, n, max_inputs);
  size_t nids = 0;
  for (size_t i = 0; ids_ok && i < n; i++) {
    json_t *e = one ? v : json_array_get(v, i);
    if (is_ids(e)) nids += json_array_size(e);
  }
  if (alloc_inputs(r, n, nids)) return -ENOMEM;
  r->single = one;
  size_t at = 0;
  for (size_t i = 0; i < n; i++)
    if (put_input(r, one ? v : json_array_get(v, i), ids_ok, 0, &at))
      return bad(status, type, 422, LP_TEI_VALIDATION, err, errlen, want, key);
  return 0;
}

/* /similarity's "inputs": {"source_sentence", "sentences"}: the source first. */
static int get_similarity(lp_tei_req_t *r, json_t *v, size_t max_inputs, int *status, const char **type, char *err,
                          size_t errlen) {
  json_t *src = json_object_get(v, "source_sentence"), *all = json_object_get(v, "sentences");
  if (!json_is_object(v) || !json_is_string(src) || !json_is_array(all))
    return bad(status, type, 422, LP_TEI_VALIDATION, err, errlen, "`%s` must be {\"source_sentence\": string, "
               "\"sentences\": [string, ...]}", "inputs");
  size_t n = json_array_size(all);
  if (n == 0) return bad(status, type, 400, LP_TEI_EMPTY, err, errlen, "`%s` cannot be empty", "sentences");
  if (n + 1 > max_inputs) return too_many(status, type, err, errlen, n + 1, max_inputs);
  if (alloc_inputs(r, n + 1, 0)) return -ENOMEM;
  size_t at = 0;
  put_input(r, src, 0, 0, &at);
  for (size_t i = 0; i < n; i++)
    if (put_input(r, json_array_get(all, i), 0, 0, &at))
      return bad(status, type, 422, LP_TEI_VALIDATION, err, errlen, "`%s` must hold strings only", "sentences");
  return 0;
}

/* Whether text d[0..n) (maybe NULL) is lit. */
static int same(const char *d, size_t n, const char *lit) { return d && n == strlen(lit) && memcmp(d, lit, n) == 0; }

/* truncate / truncation_direction (/similarity's are in "parameters"). */
static int get_truncation(lp_tei_req_t *r, const char *key, json_t *v, int *status, const char **type, char *err,
                          size_t errlen) {
  if (strcmp(key, "truncation_direction") == 0) {
    /* TEI's spellings, and the lower case its clients' docs use */
    size_t n = 0; /* in place its text may be a reference into the body, without a NUL */
    const char *d = lp_jload_str(v, &n);
    if (same(d, n, "Left") || same(d, n, "left")) r->left = 1;
    else if (!same(d, n, "Right") && !same(d, n, "right"))
      return bad(status, type, 422, LP_TEI_VALIDATION, err, errlen, "`%s` must be \"Right\" or \"Left\"", key);
    return 0;
  }
  /* TEI takes null for an optional truncate: the default */
  return json_is_null(v) ? 0 : get_bool(v, key, &r->truncate, status, type, err, errlen);
}

/* Whether key is one of route's fields; any other is ignored, as TEI's
 * server ignores it. */
static int known(int route, const char *key) {
  static const char *const embed[] = {"inputs", "normalize", "prompt_name", "dimensions", "truncate",
                                      "truncation_direction", NULL};
  static const char *const rerank[] = {"query", "texts", "raw_scores", "return_text", "truncate",
                                       "truncation_direction", NULL};
  static const char *const tokenize[] = {"inputs", "add_special_tokens", "prompt_name", NULL};
  static const char *const predict[] = {"inputs", "raw_scores", "truncate", "truncation_direction", NULL};
  static const char *const all[] = {"inputs", "prompt_name", "truncate", "truncation_direction", NULL};
  static const char *const similarity[] = {"inputs", "parameters", NULL};
  static const char *const decode[] = {"ids", "skip_special_tokens", NULL};
  const char *const *own = route == LP_TEI_EMBED        ? embed
                           : route == LP_TEI_RERANK     ? rerank
                           : route == LP_TEI_TOKENIZE   ? tokenize
                           : route == LP_TEI_PREDICT    ? predict
                           : route == LP_TEI_SIMILARITY ? similarity
                           : route == LP_TEI_DECODE     ? decode
                                                        : all;
  if (strcmp(key, "model") == 0) return 1; /* lanepack's: which of its models */
  for (size_t i = 0; own[i]; i++)
    if (strcmp(key, own[i]) == 0) return 1;
  return 0;
}

/* /similarity's "parameters": {truncate, truncation_direction, prompt_name} or null. */
static int get_parameters(lp_tei_req_t *r, json_t *v, int *status, const char **type, char *err, size_t errlen) {
  if (json_is_null(v)) return 0;
  if (!json_is_object(v)) return bad(status, type, 422, LP_TEI_VALIDATION, err, errlen, "`%s` must be an object", "parameters");
  const char *key;
  json_t *p;
  json_object_foreach(v, key, p) {
    int rc = 0;
    if (strcmp(key, "truncate") == 0 || strcmp(key, "truncation_direction") == 0)
      rc = get_truncation(r, key, p, status, type, err, errlen);
    else if (strcmp(key, "prompt_name") == 0 && !json_is_null(p))
      rc = bad(status, type, 422, LP_TEI_VALIDATION, err, errlen, "`%s` is not supported: no prompts are configured", key);
    if (rc) return rc;
  }
  return 0;
}

/* lp_tei_parse, and lp_tei_parse_inplace with own (the body, writable). */
static int parse(int route, const char *body, char *own, size_t len, size_t max_inputs, lp_tei_req_t *r, int *status,
                 const char **type, char *err, size_t errlen) {
  memset(r, 0, sizeof(*r));
  r->route = route;
  r->normalize = 1;
  r->add_special_tokens = 1;
  r->skip_special_tokens = 1;
  json_error_t je;
  /* no duplicate keys: which of two "inputs" would a client have meant */
  json_t *root = own ? lp_jload_inplace(own, len, JSON_REJECT_DUPLICATES, &je)
                     : lp_jload(body, len, JSON_REJECT_DUPLICATES, &je);
  if (!root && json_error_code(&je) == json_error_out_of_memory) { /* not the client's fault */
    bad(status, type, 503, LP_TEI_UNHEALTHY, err, errlen, "%s", "proxy out of memory");
    return -ENOMEM;
  }
  /* a \u0000 is valid JSON that lanepack does not take (its texts are C
     strings to the tokenizers): said so, as a value refused, not as bad JSON */
  if (!root && json_error_code(&je) == json_error_null_character)
    return bad(status, type, 422, LP_TEI_VALIDATION, err, errlen, "%s", LP_JLOAD_NUL_MSG);
  if (!root) return bad(status, type, 400, LP_TEI_VALIDATION, err, errlen, "the body is not valid JSON: %s", je.text);
  r->root = root;
  if (!json_is_object(root))
    return bad(status, type, 422, LP_TEI_VALIDATION, err, errlen, "the body must be a JSON %s", "object");
  const char *key;
  json_t *v;
  int rc = 0;
  int ids_ok = route == LP_TEI_EMBED || route == LP_TEI_EMBED_ALL || route == LP_TEI_EMBED_SPARSE;
  json_object_foreach(root, key, v) {
    if (!known(route, key)) continue;
    if (strcmp(key, "model") == 0) {
      size_t mlen;
      const char *name = lp_jload_str(v, &mlen);
      if (!name || mlen == 0 || mlen >= sizeof(r->model))
        return bad(status, type, 422, LP_TEI_VALIDATION, err, errlen, "`%s` must be a model's name", key);
      memcpy(r->model, name, mlen);
      r->model[mlen] = '\0';
    } else if (strcmp(key, "truncation_direction") == 0 || strcmp(key, "truncate") == 0) {
      rc = get_truncation(r, key, v, status, type, err, errlen);
    } else if (strcmp(key, "prompt_name") == 0) {
      if (!json_is_null(v)) /* no model here has prompts configured */
        return bad(status, type, 422, LP_TEI_VALIDATION, err, errlen,
                   "`%s` is not supported: no prompts are configured", key);
    } else if (strcmp(key, "dimensions") == 0) {
      if (!json_is_null(v) && (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX))
        return bad(status, type, 422, LP_TEI_VALIDATION, err, errlen, "`%s` must be a number of dimensions", key);
      if (json_is_integer(v) && json_integer_value(v) == 0)
        return bad(status, type, 422, LP_TEI_VALIDATION, err, errlen, "`%s` should be positive", key);
      r->dimensions = json_is_integer(v) ? (uint32_t)json_integer_value(v) : 0;
    } else if (strcmp(key, "query") == 0) {
      if (!json_is_string(v)) return bad(status, type, 422, LP_TEI_VALIDATION, err, errlen, "`%s` must be a string", key);
      r->query = (lp_tei_text_t){0};
      r->query.s = lp_jload_str(v, &r->query.len);
    } else if (strcmp(key, "parameters") == 0) {
      rc = get_parameters(r, v, status, type, err, errlen);
    } else if (strcmp(key, "inputs") == 0 && route == LP_TEI_SIMILARITY) {
      rc = get_similarity(r, v, max_inputs, status, type, err, errlen);
    } else if (strcmp(key, "inputs") == 0 || strcmp(key, "texts") == 0 || strcmp(key, "ids") == 0) {
      rc = route == LP_TEI_PREDICT && strcmp(key, "inputs") == 0
               ? get_predict_inputs(r, v, max_inputs, status, type, err, errlen)
               : get_inputs(r, v, key, route == LP_TEI_RERANK, ids_ok || route == LP_TEI_DECODE, max_inputs, status,
                            type, err, errlen);
      if (!rc && route == LP_TEI_DECODE)
        for (size_t i = 0; i < r->ntexts; i++)
          if (!r->texts[i].ids)
            return bad(status, type, 422, LP_TEI_VALIDATION, err, errlen, "`%s` must be token ids or lists of them", key);
    } else {
      int *flag = strcmp(key, "normalize") == 0            ? &r->normalize
                  : strcmp(key, "raw_scores") == 0         ? &r->raw_scores
                  : strcmp(key, "return_text") == 0        ? &r->return_text
                  : strcmp(key, "skip_special_tokens") == 0 ? &r->skip_special_tokens
                                                            : &r->add_special_tokens;
      rc = get_bool(v, key, flag, status, type, err, errlen);
    }
    if (rc) return rc;
  }
  const char *need = route == LP_TEI_RERANK ? (!r->query.s ? "query" : !r->texts ? "texts" : NULL)
                     : route == LP_TEI_DECODE ? (!r->texts ? "ids" : NULL)
                                              : (!r->texts ? "inputs" : NULL);
  if (need) return bad(status, type, 422, LP_TEI_VALIDATION, err, errlen, "missing field `%s`", need);
  return 0;
}

int lp_tei_parse(int route, const char *body, size_t len, size_t max_inputs, lp_tei_req_t *r, int *status,
                 const char **type, char *err, size_t errlen) {
  return parse(route, body, NULL, len, max_inputs, r, status, type, err, errlen);
}

int lp_tei_parse_inplace(int route, char *body, size_t len, size_t max_inputs, lp_tei_req_t *r, int *status,
                         const char **type, char *err, size_t errlen) {
  return parse(route, body, body, len, max_inputs, r, status, type, err, errlen);
}

void lp_tei_req_free(lp_tei_req_t *r) {
  free(r->texts);
  free(r->ids);
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

/* *p's *n ids cut to keep of them (the end cut, or the start when left). */
static void keep_ids(const int32_t **p, size_t *n, size_t keep, int left) {
  if (*n <= keep) return;
  if (left) *p += *n - keep;
  *n = keep;
}

long lp_tei_pair(const lp_tei_template_t *t, const int32_t *a, size_t na, const int32_t *b, size_t nb,
                 size_t max, int left, int strategy, int32_t *out, size_t cap) {
  size_t pieces = 0;
  for (size_t i = 0; i < t->nparts; i++) pieces += t->part[i].slot == 0;
  if (max && pieces + na + nb > max && strategy == LP_TEI_LONGEST_FIRST) {
    /* tokenizers' truncate_encodings, LongestFirst, within room = the
     * limit less the template's pieces (as its post_process subtracts them) */
    if (pieces > max) return -E2BIG;
    size_t room = max - pieces, s = na <= nb ? na : nb;
    size_t ks = s, kl = s > room ? s : s > room - s ? s : room - s;
    if (ks + kl > room) {
      ks = room / 2;
      kl = ks + room % 2;
    }
    /* the longer keeps kl (when equal, a keeps ks: tokenizers swaps only when a is longer) */
    int a_longer = na > nb;
    keep_ids(&a, &na, a_longer ? kl : ks, left);
    keep_ids(&b, &nb, a_longer ? ks : kl, left);
  } else if (max && pieces + na + nb > max) {
    if (pieces + na >= max) return -E2BIG;
    keep_ids(&b, &nb, max - pieces - na, left);
  }
  if (pieces + na + nb > cap) return -ENOSPC;
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

/* v as printf's "%.9g" writes it, without its float path (a front writes
 * every value of every embedding answer so). */
static void put_f32(lp_buf_t *b, float v) {
  char t[32];
  lp_buf_append(b, t, lp_fmt_float_g9(t, v));
}

void lp_tei_vector(lp_buf_t *b, const float *v, size_t n) {
  lp_buf_puts(b, "[");
  for (size_t i = 0; i < n; i++) {
    if (i) lp_buf_puts(b, ",");
    put_f32(b, v[i]);
  }
  lp_buf_puts(b, "]");
}

void lp_tei_rank_item(lp_buf_t *b, size_t index, float score, const char *text, size_t text_len) {
  lp_buf_printf(b, "{\"index\":%zu,", index);
  if (text) {
    lp_buf_puts(b, "\"text\":");
    lp_buf_json_str(b, text, text_len);
    lp_buf_puts(b, ",");
  }
  lp_buf_puts(b, "\"score\":");
  put_f32(b, score);
  lp_buf_puts(b, "}");
}

void lp_tei_token(lp_buf_t *b, int32_t id, const char *text, size_t len, int special, size_t start,
                  size_t stop) {
  lp_buf_printf(b, "{\"id\":%d,\"text\":", (int)id);
  lp_buf_json_str(b, text, len);
  if (special) lp_buf_puts(b, ",\"special\":true,\"start\":null,\"stop\":null}");
  else lp_buf_printf(b, ",\"special\":false,\"start\":%zu,\"stop\":%zu}", start, stop);
}

void lp_tei_scores(float *v, size_t n, int raw) {
  if (raw || n == 0) return;
  if (n == 1) {
    v[0] = lp_tei_sigmoid(v[0]);
    return;
  }
  /* softmax, shifted by the largest value (TEI shifts by the value of
   * largest magnitude; the result is the same where neither overflows) */
  double max = v[0], den = 0;
  for (size_t i = 1; i < n; i++)
    if (v[i] > max) max = v[i];
  for (size_t i = 0; i < n; i++) den += exp((double)v[i] - max);
  for (size_t i = 0; i < n; i++) v[i] = (float)(exp((double)v[i] - max) / den);
}

void lp_tei_prediction(lp_buf_t *b, float score, const char *label) {
  lp_buf_puts(b, "{\"score\":");
  put_f32(b, score);
  lp_buf_puts(b, ",\"label\":");
  lp_buf_json_str(b, label, strlen(label));
  lp_buf_puts(b, "}");
}

void lp_tei_error(lp_buf_t *b, const char *msg, const char *type) {
  lp_buf_puts(b, "{\"error\":");
  lp_buf_json_str(b, msg, strlen(msg));
  lp_buf_puts(b, ",\"error_type\":");
  lp_buf_json_str(b, type, strlen(type));
  lp_buf_puts(b, "}\n");
}
