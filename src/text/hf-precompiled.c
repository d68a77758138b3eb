/* The Precompiled normalizer: SentencePiece's compiled character map (a
 * Darts double-array trie over UTF-8 and the strings it maps to), carried in
 * tokenizer.json as base64, applied as the library applies it: a grapheme
 * (under 6 bytes) the map knows is replaced whole, else each character the
 * map knows, taking the first (shortest) match; the spans move as the
 * library's NormalizedString::transform moves them. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "hf.h"
#include "pcmap.h"

static int b64val(unsigned char c) {
  static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const char *p = c ? strchr(alphabet, c) : NULL;
  return p ? (int)(p - alphabet) : -1;
}

/* base64 (padding optional) into a malloc'd buffer; NULL when not base64. */
static unsigned char *b64decode(const char *s, size_t n, size_t *out) {
  unsigned char *o = malloc(n / 4 * 3 + 3);
  if (!o) return NULL;
  size_t k = 0;
  uint32_t acc = 0;
  int bits = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] == '=') break;
    int v = b64val((unsigned char)s[i]);
    if (v < 0) {
      free(o);
      return NULL;
    }
    acc = acc << 6 | (uint32_t)v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      o[k++] = (unsigned char)(acc >> bits);
    }
  }
  *out = k;
  return o;
}

static inline uint32_t u_offset(uint32_t u) { return (u >> 10) << ((u & (1u << 9)) >> 6); }
static inline uint32_t u_label(uint32_t u) { return u & ((1u << 31) | 0xFF); }
static inline int u_leaf(uint32_t u) { return (u >> 8) & 1; }
static inline uint32_t u_value(uint32_t u) { return u & ((1u << 31) - 1); }

const char *lp__pcmap_match(const lp__pcmap_t *m, const unsigned char *key, size_t len, int longest, size_t *mlen) {
  const uint32_t *a = m->units;
  size_t na = m->nunits, pos = 0;
  const char *found = NULL;
  *mlen = 0;
  if (!na) return NULL;
  pos ^= u_offset(a[0]);
  /* a NUL never matches (the builder's keys are C strings): stopping there is Darts' answer */
  for (size_t i = 0; i < len && key[i]; i++) {
    pos ^= key[i];
    if (pos >= na) return found;
    uint32_t u = a[pos];
    if (u_label(u) != key[i]) return found;
    pos ^= u_offset(u);
    if (u_leaf(u)) {
      if (pos >= na) return found;
      uint32_t v = u_value(a[pos]);
      if (v < m->nnorm) {
        found = m->norm + v;
        *mlen = i + 1;
        if (!longest) return found;
      }
    }
  }
  return found;
}

int lp__pcmap_first(const lp__pcmap_t *m, unsigned char c, const char **rep) {
  size_t mlen;
  *rep = c ? lp__pcmap_match(m, &c, 1, 1, &mlen) : NULL;
  int k = *rep != NULL;
  const uint32_t *a = m->units;
  size_t na = m->nunits;
  if (!na || !c) return k;
  size_t pos = u_offset(a[0]) ^ c;
  if (pos >= na || u_label(a[pos]) != c) return k;
  pos ^= u_offset(a[pos]);
  for (unsigned d = 1; d < 256; d++) /* any child but the leaf: a longer key */
    if ((pos ^ d) < na && u_label(a[pos ^ d]) == d) k |= d < 0x80 ? 2 : 4;
  return k;
}

int lp__pcmap_init(lp__pcmap_t *m, const unsigned char *raw, size_t len) {
  memset(m, 0, sizeof(*m));
  uint32_t tsize = len >= 4 ? (uint32_t)raw[0] | (uint32_t)raw[1] << 8 | (uint32_t)raw[2] << 16 | (uint32_t)raw[3] << 24 : 0;
  if (len < 4 || tsize % 4 || tsize > len - 4) return -EINVAL;
  m->nunits = tsize / 4;
  if (!(m->units = malloc((m->nunits + 1) * sizeof(*m->units)))) return -ENOMEM;
  for (size_t i = 0; i < m->nunits; i++) {
    const unsigned char *p = raw + 4 + 4 * i;
    m->units[i] = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
  }
  m->norm = (const char *)raw + 4 + tsize;
  m->nnorm = len - 4 - tsize;
  /* every replacement must end inside the blob and be UTF-8: checked once here */
  if ((m->nnorm && raw[len - 1] != 0) || lp__hf_utf8_check(m->norm, m->nnorm)) {
    lp__pcmap_free(m);
    return -EINVAL;
  }
  return 0;
}

void lp__pcmap_free(lp__pcmap_t *m) {
  free(m->units);
  memset(m, 0, sizeof(*m));
}

/* The first (shortest) match of key in the map, as tokenizer.json takes it. */
static const char *lookup(const lp__hf_norm_t *n, const unsigned char *key, size_t len) {
  size_t mlen;
  return lp__pcmap_match(&n->pc, key, len, 0, &mlen);
}

int lp__hf_precompiled_load(lp__hf_norm_t *n, json_t *o, const char *where, char *err, size_t errlen);
int lp__hf_precompiled_load(lp__hf_norm_t *n, json_t *o, const char *where, char *err, size_t errlen) {
  json_t *c = json_object_get(o, "precompiled_charsmap");
  if (json_is_null(c)) return 0; /* no map: the identity, as the library takes it */
  if (!json_is_string(c)) return lp__hf_bad(err, errlen, where, "precompiled_charsmap must be base64 text");
  size_t len;
  unsigned char *raw = b64decode(json_string_value(c), json_string_length(c), &len);
  if (!raw) return lp__hf_bad(err, errlen, where, "precompiled_charsmap is not base64");
  n->blob = raw;
  int rc = lp__pcmap_init(&n->pc, raw, len);
  if (rc == -EINVAL)
    return lp__hf_bad(err, errlen, where, "precompiled_charsmap is not a SentencePiece character map "
                      "(or its strings are not NUL-ended UTF-8)");
  return rc;
}

typedef struct {
  uint32_t cp;
  int32_t change;
} tr_t;

typedef struct {
  tr_t *t;
  size_t n, cap;
} trs_t;

static int tr_push(trs_t *l, uint32_t cp, int32_t ch) {
  if (l->n == l->cap) {
    size_t c = l->cap ? l->cap * 2 : 256;
    tr_t *t = realloc(l->t, c * sizeof(*t));
    if (!t) return -ENOMEM;
    l->t = t;
    l->cap = c;
  }
  l->t[l->n++] = (tr_t){cp, ch};
  return 0;
}

/* The library's replace(): the new characters, the last ones marked added
 * (more than the old) or the last one taking the removal (fewer). */
static int replace_with(trs_t *l, size_t old_chars, const char *rep) {
  size_t newc = 0, rl = strlen(rep);
  for (size_t i = 0; i < rl;) {
    int k;
    uint32_t c = lp__hf_utf8_get(rep, i, &k);
    if (tr_push(l, c, 0)) return -ENOMEM;
    i += (size_t)k;
    newc++;
  }
  long diff = (long)newc - (long)old_chars;
  if (diff > 0)
    for (size_t i = 0; i < (size_t)diff && i < l->n; i++) l->t[l->n - 1 - i].change = 1;
  else if (diff < 0 && l->n)
    l->t[l->n - 1].change += (int32_t)diff;
  return 0;
}

/* NormalizedString::transform over the whole string. */
static int transform(const lp__hf_ns_t *s, const trs_t *l, lp__hf_ns_t *o) {
  o->len = 0;
  size_t off = 0;
  for (size_t i = 0; i < l->n; i++) {
    lp__hf_al_t al;
    if (l->t[i].change > 0) al = off ? s->al[off - 1] : (lp__hf_al_t){0, 0};
    else al = off < s->len ? s->al[off] : (s->len ? s->al[s->len - 1] : (lp__hf_al_t){0, 0});
    if (l->t[i].change <= 0) {
      for (long r = 1 - (long)l->t[i].change; r > 0 && off < s->len; r--) {
        int k;
        lp__hf_utf8_get(s->b, off, &k);
        off += (size_t)k;
      }
    }
    if (lp__hf_ns_put(o, l->t[i].cp, al)) return -ENOMEM;
  }
  return 0;
}

int lp__hf_precompiled_run(const lp__hf_norm_t *n, const lp__hf_ns_t *s, lp__hf_ns_t *o, int *changed);
int lp__hf_precompiled_run(const lp__hf_norm_t *n, const lp__hf_ns_t *s, lp__hf_ns_t *o, int *changed) {
  *changed = 0;
  if (!n->pc.nunits || !s->len) return 0;
  trs_t l = {0};
  int rc = 0, modified = 0;
  for (size_t g = 0; g < s->len && !rc;) {
    /* the grapheme from g */
    int k;
    uint32_t c = lp__hf_utf8_get(s->b, g, &k);
    size_t e = g + (size_t)k, chars = 1;
    utf8proc_int32_t state = 0;
    while (e < s->len) {
      int k2;
      uint32_t d = lp__hf_utf8_get(s->b, e, &k2);
      if (utf8proc_grapheme_break_stateful((utf8proc_int32_t)c, (utf8proc_int32_t)d, &state)) break;
      c = d;
      e += (size_t)k2;
      chars++;
    }
    const char *rep = e - g < 6 ? lookup(n, (const unsigned char *)s->b + g, e - g) : NULL;
    if (rep) {
      modified = 1;
      rc = replace_with(&l, chars, rep);
    } else {
      for (size_t i = g; i < e && !rc;) {
        uint32_t cp = lp__hf_utf8_get(s->b, i, &k);
        const char *r1 = lookup(n, (const unsigned char *)s->b + i, (size_t)k);
        if (r1) {
          modified = 1;
          rc = replace_with(&l, 1, r1);
        } else {
          rc = tr_push(&l, cp, 0);
        }
        i += (size_t)k;
      }
    }
    g = e;
  }
  if (!rc && modified) {
    rc = transform(s, &l, o);
    *changed = !rc;
  }
  free(l.t);
  return rc;
}
