/* json_loadb with the long strings of a body's top level decoded by
 * lp_jscan_string: texts of MiBs cost a scan, not jansson's lexer; with
 * lp_jload_inplace they are decoded in the body itself and referenced from
 * the tree, never copied. */
#include "lanepack/jload.h"

#include <stdio.h>
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
 * index in its array or -1) and whether it holds escapes. It is decoded
 * once the rest of the body is known to be valid: a body refused goes to
 * jansson whole, as it came. */
typedef struct {
  char key[LP_JLOAD_KEY_MAX];
  long index;
  const char *at, *after; /* the raw string in the body, quotes included */
  int escaped;
  int decoded;            /* in place already, as it was scanned: dec_len bytes from at + 1 */
  size_t dec_len;
  lp_jscan_undo_t undo;   /* what that decoding changed, to give a body refused back as it came */
} hole_t;

typedef struct {
  hole_t *h;
  size_t n, cap;
  const char *body;
  char *own; /* the body, writable (lp_jload_inplace), else NULL */
} holes_t;

/* The string at p: taken out when long enough and decodable here. In place,
 * a long one is validated and decoded in one pass (lp_jscan_string_undoable:
 * a 4 MiB text is read once, not twice), its changes logged until the whole
 * body is known to be valid. Returns the byte after it, or NULL (the body
 * goes to jansson whole, as it came). */
static const char *take(holes_t *hs, const char *key, long index, const char *p, const char *end) {
  int escaped;
  size_t dec_len = 0;
  lp_jscan_undo_t u = {0}; /* owned here until a hole holds it */
  char *w = NULL;          /* the string in own, when decoded as it is scanned */
  /* a short string (no hole) is validated whole within its first bytes */
  const char *cut = (size_t)(end - p) > min_len + 2 ? p + min_len + 2 : end;
  const char *after = lp_jscan_string(p, cut, NULL, NULL, &escaped);
  if (!after && cut < end && hs->own && key) {
    w = hs->own + (p - hs->body);
    after = lp_jscan_string_undoable(w, end, &dec_len, &escaped, &u);
    if (!after) {
      /* invalid (jansson says why), or too dense with escapes to log:
       * validated apart then, and decoded in place by fill */
      lp_jscan_string_undo(w, &u);
      free(u.e);
      if (u.full) after = lp_jscan_string(p, end, NULL, NULL, &escaped);
      u = (lp_jscan_undo_t){0};
      w = NULL;
    }
  } else if (!after && cut < end) {
    after = lp_jscan_string(p, end, NULL, NULL, &escaped);
  }
  if (!after || (size_t)(after - p) < min_len + 2 || !key) return after;
  if (hs->n == hs->cap) {
    size_t cap = hs->cap ? hs->cap * 2 : 8;
    hole_t *h = realloc(hs->h, cap * sizeof(*h));
    if (!h) {
      if (w) lp_jscan_string_undo(w, &u);
      free(u.e);
      return NULL;
    }
    hs->h = h;
    hs->cap = cap;
  }
  hole_t *h = &hs->h[hs->n];
  memset(h, 0, sizeof(*h));
  strcpy(h->key, key);
  h->index = index;
  h->at = p;
  h->after = after;
  h->escaped = escaped;
  h->decoded = w != NULL;
  h->dec_len = dec_len;
  h->undo = u;
  hs->n++;
  return after;
}

/* The holes' texts decoded as they were scanned put back as they came (a
 * body refused), and their logs freed. */
static void holes_free(holes_t *hs, int undo) {
  for (size_t i = 0; i < hs->n; i++) {
    hole_t *h = &hs->h[i];
    if (undo && h->decoded) lp_jscan_string_undo(hs->own + (h->at - hs->body), &h->undo);
    free(h->undo.e);
  }
  free(hs->h);
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

/* A reference to a text in the body, as a string of the tree: a NUL (no
 * string jansson parses without JSON_ALLOW_NUL holds one), then the text's
 * address and length. jansson has no string that borrows its bytes. */
#define REF_BYTES (1 + sizeof(const char *) + sizeof(size_t))

/* Sets hole h's text into v: decoded in place in the body and referenced
 * (own), else copied into the string. 0 or -1. */
static int fill(json_t *v, const hole_t *h, char *own) {
  const char *text = h->at + 1;
  size_t len = (size_t)(h->after - h->at) - 2;
  char *tmp = NULL; /* owned here */
  int escaped;
  if (h->decoded) {
    len = h->dec_len; /* in place as it was scanned */
  } else if (h->escaped && own) {
    lp_jscan_string_inplace(own + (h->at - (const char *)own), h->after, &len, &escaped);
  } else if (h->escaped) {
    if (!(tmp = malloc((size_t)(h->after - h->at) + 16))) return -1;
    lp_jscan_string(h->at, h->after, tmp, &len, &escaped);
    text = tmp;
  }
  int rc;
  if (own) {
    char b[REF_BYTES] = {0};
    memcpy(b + 1, &text, sizeof(text));
    memcpy(b + 1 + sizeof(text), &len, sizeof(len));
    rc = json_string_setn_nocheck(v, b, sizeof(b));
  } else {
    /* the text is valid UTF-8 without NUL, as lp_jscan_string checked */
    rc = json_string_setn_nocheck(v, text, len);
  }
  free(tmp);
  return rc ? -1 : 0;
}

/* Parses the body with each hole as "" and sets the texts in (own: the body,
 * writable, to decode them in place). NULL when anything does not match,
 * with the body untouched (the caller then parses it whole), or with
 * *touched set when it was already changed (out of memory). */
static json_t *load_holed(const holes_t *hs, const char *body, size_t len, size_t flags, char *own, int *touched) {
  size_t holed = len;
  for (size_t i = 0; i < hs->n; i++) holed -= (size_t)(hs->h[i].after - hs->h[i].at) - 2;
  char *b = malloc(holed);
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
  json_t **vs = root ? malloc(hs->n * sizeof(*vs)) : NULL; /* owned here */
  /* every hole found before any is decoded: a body given back to jansson
   * must be as it came */
  for (size_t i = 0; vs && i < hs->n; i++) {
    json_t *v = json_object_get(root, hs->h[i].key);
    if (v && hs->h[i].index >= 0) v = json_is_array(v) ? json_array_get(v, (size_t)hs->h[i].index) : NULL;
    vs[i] = v;
    if (!json_is_string(v) || json_string_length(v) != 0) {
      free(vs);
      vs = NULL;
    }
  }
  for (size_t i = 0; vs && i < hs->n; i++) {
    if (fill(vs[i], &hs->h[i], own)) {
      *touched = own != NULL;
      free(vs);
      vs = NULL;
    }
  }
  if (!vs) {
    json_decref(root);
    return NULL;
  }
  free(vs);
  return root;
}

/* Says out of memory in je as jansson says its own (json_error_code), so
 * that the caller answers 503, not "bad JSON". */
static void set_oom(json_error_t *je) {
  snprintf(je->text, sizeof(je->text), "out of memory");
  je->text[JSON_ERROR_TEXT_LENGTH - 1] = (char)json_error_out_of_memory;
}

/* lp_jload, and lp_jload_inplace with own (the body, writable). */
static json_t *load(const char *body, size_t len, size_t flags, json_error_t *je, char *own) {
  /* a duplicate key could hide where a hole was: only where they are refused;
   * and with NUL allowed a string could look like a reference */
  if (len >= min_len && (flags & JSON_REJECT_DUPLICATES) && !(flags & JSON_ALLOW_NUL)) {
    holes_t hs = {.body = body, .own = own};
    json_t *root = NULL;
    int touched = 0;
    if (scan(&hs, body, body + len) == 0 && hs.n) root = load_holed(&hs, body, len, flags, own, &touched);
    holes_free(&hs, !root);
    if (root) return root;
    if (touched) {
      /* the body is no longer what came: jansson cannot say more */
      if (je) {
        memset(je, 0, sizeof(*je));
        je->position = -1;
        set_oom(je);
      }
      return NULL;
    }
  }
  json_error_t own_je;
  if (!je) je = &own_je;
  json_t *root = json_loadb(body, len, flags, je);
  if (!root && je->text[0] == '\0') {
    /* jansson's one failure without a message: its lexer's buffer could
     * not be allocated */
    set_oom(je);
  }
  return root;
}

json_t *lp_jload(const char *body, size_t len, size_t flags, json_error_t *je) {
  return load(body, len, flags, je, NULL);
}

json_t *lp_jload_inplace(char *body, size_t len, size_t flags, json_error_t *je) {
  return load(body, len, flags, je, body);
}

const char *lp_jload_str(const json_t *v, size_t *len) {
  *len = 0;
  if (!json_is_string(v)) return NULL;
  const char *s = json_string_value(v);
  *len = json_string_length(v);
  if (*len != REF_BYTES || s[0] != '\0') return s;
  const char *text;
  memcpy(&text, s + 1, sizeof(text));
  memcpy(len, s + 1 + sizeof(text), sizeof(*len));
  return text;
}
