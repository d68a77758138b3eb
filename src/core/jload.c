/* json_loadb with the long strings of a body's top level decoded by
 * lp_jscan_string: texts of MiBs cost a scan, not jansson's lexer. */
#include "lanepack/jload.h"

#include <stdlib.h>
#include <string.h>

#include "lanepack/jscan.h"

/* Shorter strings (and bodies) cost jansson little: below 4 KiB the scan
 * and the second copy would cost about what they save. */
#define LP_JLOAD_MIN_DEFAULT 4096
/* A key is looked up again in the tree: longer ones are no text route's */
#define LP_JLOAD_KEY_MAX 32

static size_t min_len = LP_JLOAD_MIN_DEFAULT; /* written only by tests, before any reading */

size_t lp_jload_min(void) { return min_len; }
void lp_jload_set_min(size_t min) { min_len = min ? min : 1; }

/* A long string taken out of the body: where it was (the member's key, the
 * index in its array or -1) and its decoded text (into the body when plain,
 * else owned by own). */
typedef struct {
  char key[LP_JLOAD_KEY_MAX];
  long index;
  const char *at, *after; /* the raw string in the body, quotes included */
  const char *text;
  size_t len;
  char *own;
} hole_t;

typedef struct {
  hole_t *h;
  size_t n, cap;
} holes_t;

static void holes_free(holes_t *hs) {
  for (size_t i = 0; i < hs->n; i++) free(hs->h[i].own);
  free(hs->h);
}

/* The string at p: taken out when long enough and decodable here. Returns the
 * byte after it, or NULL (the body goes to jansson whole). */
static const char *take(holes_t *hs, const char *key, long index, const char *p, const char *end) {
  int escaped;
  const char *after = lp_jscan_string(p, end, NULL, NULL, &escaped);
  if (!after || (size_t)(after - p) < min_len + 2 || !key) return after;
  if (hs->n == hs->cap) {
    size_t cap = hs->cap ? hs->cap * 2 : 8;
    hole_t *h = realloc(hs->h, cap * sizeof(*h));
    if (!h) return NULL;
    hs->h = h;
    hs->cap = cap;
  }
  hole_t *h = &hs->h[hs->n];
  memset(h, 0, sizeof(*h));
  strcpy(h->key, key);
  h->index = index;
  h->at = p;
  h->after = after;
  if (!escaped) {
    h->text = p + 1;
    h->len = (size_t)(after - p) - 2;
  } else {
    if (!(h->own = malloc((size_t)(after - p) + 16))) return NULL;
    lp_jscan_string(p, end, h->own, &h->len, &escaped);
    h->text = h->own;
  }
  hs->n++;
  return after;
}

/* Walks the top-level object, taking its long strings out. 0 or -1. */
static int scan(holes_t *hs, const char *body, const char *end) {
  const char *p = lp_jscan_ws(body, end);
  if (p >= end || *p != '{') return -1;
  p = lp_jscan_ws(p + 1, end);
  if (p < end && *p == '}') return lp_jscan_ws(p + 1, end) == end ? 0 : -1;
  for (;;) {
    if (p >= end || *p != '"') return -1;
    const char *kend = lp_jscan_skip(p, end, 1);
    if (!kend) return -1;
    char key[LP_JLOAD_KEY_MAX];
    size_t klen = (size_t)(kend - p) - 2;
    /* plain keys only: an escaped one is left where it is */
    int plain = klen < sizeof(key) && !memchr(p + 1, '\\', klen);
    if (plain) {
      memcpy(key, p + 1, klen);
      key[klen] = '\0';
    }
    p = lp_jscan_ws(kend, end);
    if (p >= end || *p != ':') return -1;
    p = lp_jscan_ws(p + 1, end);
    if (p < end && *p == '"') {
      p = take(hs, plain ? key : NULL, -1, p, end);
    } else if (p < end && *p == '[') {
      p = lp_jscan_ws(p + 1, end);
      for (long i = 0; p && p < end && *p != ']'; i++) {
        p = *p == '"' ? take(hs, plain ? key : NULL, i, p, end) : lp_jscan_skip(p, end, LP_JSCAN_MAX_DEPTH - 1);
        if (p) p = lp_jscan_ws(p, end);
        if (p && p < end && *p == ',') {
          p = lp_jscan_ws(p + 1, end);
          if (p < end && *p == ']') return -1; /* a trailing comma */
        } else if (p && (p >= end || *p != ']')) {
          return -1;
        }
      }
      if (!p || p >= end) return -1;
      p++;
    } else {
      p = lp_jscan_skip(p, end, LP_JSCAN_MAX_DEPTH);
    }
    if (!p) return -1;
    p = lp_jscan_ws(p, end);
    if (p < end && *p == ',') {
      p = lp_jscan_ws(p + 1, end);
      continue;
    }
    if (p < end && *p == '}') return lp_jscan_ws(p + 1, end) == end ? 0 : -1;
    return -1;
  }
}

/* Parses the body with each hole as "" and sets the texts in; NULL when
 * anything does not match (the caller then parses the body whole). */
static json_t *load_holed(const holes_t *hs, const char *body, size_t len, size_t flags) {
  char *b = malloc(len);
  if (!b) return NULL;
  size_t n = 0;
  const char *from = body;
  for (size_t i = 0; i < hs->n; i++) {
    memcpy(b + n, from, (size_t)(hs->h[i].at - from));
    n += (size_t)(hs->h[i].at - from);
    memcpy(b + n, "\"\"", 2);
    n += 2;
    from = hs->h[i].after;
  }
  memcpy(b + n, from, (size_t)(body + len - from));
  n += (size_t)(body + len - from);
  json_error_t je;
  json_t *root = json_loadb(b, n, flags, &je);
  free(b);
  if (!root) return NULL;
  for (size_t i = 0; i < hs->n; i++) {
    json_t *v = json_object_get(root, hs->h[i].key);
    if (v && hs->h[i].index >= 0) v = json_is_array(v) ? json_array_get(v, (size_t)hs->h[i].index) : NULL;
    /* the text is valid UTF-8 without NUL, as lp_jscan_string checked */
    if (!json_is_string(v) || json_string_length(v) != 0 || json_string_setn_nocheck(v, hs->h[i].text, hs->h[i].len)) {
      json_decref(root);
      return NULL;
    }
  }
  return root;
}

json_t *lp_jload(const char *body, size_t len, size_t flags, json_error_t *je) {
  /* a duplicate key could hide where a hole was: only where they are refused */
  if (len >= min_len && (flags & JSON_REJECT_DUPLICATES)) {
    holes_t hs = {0};
    json_t *root = NULL;
    if (scan(&hs, body, body + len) == 0 && hs.n) root = load_holed(&hs, body, len, flags);
    holes_free(&hs);
    if (root) return root;
  }
  return json_loadb(body, len, flags, je);
}
