/* A tokenizer.json's decoder: ids back to text as Hugging Face's library
 * decodes them (each decoder rewrites the list of pieces; the last list joined). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hf.h"

/* ---- a list of pieces: their bytes one after another */
typedef struct {
  char *b; /* owned */
  size_t len, cap;
  size_t *off, *n; /* owned; cnt pieces */
  size_t cnt, tcap;
} toks_t;

static int cat(toks_t *t, const char *s, size_t n) {
  if (t->len + n > t->cap || !t->b) { /* a list with a piece has a buffer, even an empty one */
    size_t c = t->cap ? t->cap * 2 : 256;
    while (c < t->len + n) c *= 2;
    char *q = realloc(t->b, c);
    if (!q) return -ENOMEM;
    t->b = q;
    t->cap = c;
  }
  if (n) memcpy(t->b + t->len, s, n);
  t->len += n;
  t->n[t->cnt - 1] += n;
  return 0;
}

/* Starts a new piece holding s[0..n). */
static int add(toks_t *t, const char *s, size_t n) {
  if (t->cnt == t->tcap) {
    size_t c = t->tcap ? t->tcap * 2 : 64;
    size_t *o = realloc(t->off, c * sizeof(*o)), *k = o ? realloc(t->n, c * sizeof(*k)) : NULL;
    if (o) t->off = o;
    if (!k) return -ENOMEM;
    t->n = k;
    t->tcap = c;
  }
  t->off[t->cnt] = t->len;
  t->n[t->cnt++] = 0;
  return cat(t, s, n);
}

static int put_cp(toks_t *t, uint32_t cp) {
  char u[4];
  return cat(t, u, (size_t)lp__hf_utf8_put(u, cp));
}

static void toks_free(toks_t *t) {
  free(t->b);
  free(t->off);
  free(t->n);
}

/* Appends s[0..n) to the last piece with each pat replaced by rep (Rust's
 * str::replace: an empty pat matches before each character and at the end). */
static int cat_replaced(toks_t *t, const char *s, size_t n, const char *pat, size_t plen, const char *rep,
                        size_t rlen) {
  size_t i = 0, from = 0;
  if (!plen) {
    for (int len; i < n; i += (size_t)len) {
      lp__hf_utf8_get(s, i, &len);
      if (cat(t, rep, rlen) || cat(t, s + i, (size_t)len)) return -ENOMEM;
    }
    return cat(t, rep, rlen);
  }
  while (i + plen <= n) {
    if (memcmp(s + i, pat, plen) == 0) {
      if (cat(t, s + from, i - from) || cat(t, rep, rlen)) return -ENOMEM;
      i += plen;
      from = i;
    } else {
      i++;
    }
  }
  return cat(t, s + from, n - from);
}

/* The library's wordpiece::cleanup, its replacements one after another over
 * the last piece of t (tmp is scratch). */
static int cleanup(toks_t *t, toks_t *tmp) {
  static const char *const from[] = {" .", " ?", " !", " ,", " ' ", " n't", " 'm", " do not", " 's", " 've", " 're"};
  static const char *const to[] = {".", "?", "!", ",", "'", "n't", "'m", " don't", "'s", "'ve", "'re"};
  for (size_t k = 0; k < sizeof(from) / sizeof(from[0]); k++) {
    size_t at = t->off[t->cnt - 1], n = t->n[t->cnt - 1];
    tmp->len = tmp->cnt = 0;
    if (add(tmp, "", 0) || cat_replaced(tmp, t->b + at, n, from[k], strlen(from[k]), to[k], strlen(to[k])))
      return -ENOMEM;
    t->len = at;
    t->n[t->cnt - 1] = 0;
    if (cat(t, tmp->b, tmp->len)) return -ENOMEM;
  }
  return 0;
}

/* ---- ByteLevel: GPT-2's characters back to bytes */

/* The byte a character of GPT-2's alphabet stands for, or -1 (bytes
 * '!'..'~', 0xA1..0xAC and 0xAE..0xFF are themselves; the others are
 * U+0100 and up, in byte order). */
static int byte_of(uint32_t cp) {
  if ((cp >= 0x21 && cp <= 0x7E) || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE && cp <= 0xFF)) return (int)cp;
  if (cp < 0x100 || cp >= 0x100 + 68) return -1; /* 68 bytes are not themselves */
  uint32_t k = cp - 0x100;
  for (int b = 0; b < 256; b++) {
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE) continue;
    if (k-- == 0) return b;
  }
  return -1;
}

/* Appends bytes b[0..n) to the last piece as Rust's String::from_utf8_lossy
 * does: each maximal ill-formed part becomes one U+FFFD. */
static int cat_lossy(toks_t *t, const unsigned char *b, size_t n) {
  for (size_t i = 0; i < n;) {
    unsigned c = b[i];
    size_t w = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    size_t ok = w ? 1 : 0; /* bytes of a well-formed start seen */
    if (w > 1 && i + 1 < n) {
      unsigned d = b[i + 1], lo = 0x80, hi = 0xBF;
      if (c == 0xE0) lo = 0xA0;
      else if (c == 0xED) hi = 0x9F;
      else if (c == 0xF0) lo = 0x90;
      else if (c == 0xF4) hi = 0x8F;
      if (d >= lo && d <= hi) {
        ok = 2;
        while (ok < w && i + ok < n && (b[i + ok] & 0xC0) == 0x80) ok++;
      }
    }
    if (w && ok == w) {
      if (cat(t, (const char *)b + i, w)) return -ENOMEM;
      i += w;
    } else {
      if (put_cp(t, 0xFFFD)) return -ENOMEM;
      i += ok ? ok : 1;
    }
  }
  return 0;
}

static int bytelevel(const toks_t *in, toks_t *out) {
  unsigned char *raw = malloc(in->len + 1); /* a piece's bytes are at most its UTF-8 length */
  size_t k = 0;
  if (!raw) return -ENOMEM;
  for (size_t i = 0; i < in->cnt; i++) {
    const char *s = in->b + in->off[i];
    size_t n = in->n[i], start = k;
    for (size_t j = 0; j < n;) {
      int len, v = byte_of(lp__hf_utf8_get(s, j, &len));
      if (v < 0) { /* a piece not all of the alphabet goes as it is */
        memcpy(raw + start, s, n);
        k = start + n;
        break;
      }
      raw[k++] = (unsigned char)v;
      j += (size_t)len;
    }
  }
  int rc = add(out, "", 0) || cat_lossy(out, raw, k) ? -ENOMEM : 0;
  free(raw);
  return rc;
}

/* ---- ByteFallback: "<0xAB>" pieces back to bytes */

/* A piece "<0xAB>": its byte, else -1 (Rust's u8::from_str_radix takes a '+'). */
static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static int fallback_byte(const char *s, size_t n) {
  if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
  if (s[3] == '+') return hexval(s[4]);
  int h = hexval(s[3]), l = hexval(s[4]);
  return h < 0 || l < 0 ? -1 : h * 16 + l;
}

/* The bytes gathered so far as one piece when they are UTF-8, else a piece
 * U+FFFD per byte (a later CTC's dedup sees them apart). */
static int flush_bytes(toks_t *out, const unsigned char *b, size_t n) {
  if (!n) return 0;
  if (!lp__hf_utf8_check((const char *)b, n)) return add(out, (const char *)b, n);
  for (size_t i = 0; i < n; i++)
    if (add(out, "\xef\xbf\xbd", 3)) return -ENOMEM;
  return 0;
}

static int bytefallback(const toks_t *in, toks_t *out) {
  unsigned char *bytes = malloc(in->cnt + 1);
  size_t nb = 0;
  int rc = bytes ? 0 : -ENOMEM;
  for (size_t i = 0; i < in->cnt && !rc; i++) {
    int v = fallback_byte(in->b + in->off[i], in->n[i]);
    if (v >= 0) {
      bytes[nb++] = (unsigned char)v;
      continue;
    }
    if (!(rc = flush_bytes(out, bytes, nb))) rc = add(out, in->b + in->off[i], in->n[i]);
    nb = 0;
  }
  if (!rc) rc = flush_bytes(out, bytes, nb);
  free(bytes);
  return rc;
}

/* ---- the others */

static int metaspace(const lp__hf_dec_t *d, const toks_t *in, toks_t *out) {
  for (size_t i = 0; i < in->cnt; i++) {
    const char *s = in->b + in->off[i];
    if (add(out, "", 0)) return -ENOMEM;
    for (size_t j = 0; j < in->n[i];) {
      int len;
      uint32_t c = lp__hf_utf8_get(s, j, &len);
      /* the first piece's replacements were put there by the pre-tokenizer: gone */
      int rc = c != d->ch ? cat(out, s + j, (size_t)len) : i == 0 && d->prepend ? 0 : cat(out, " ", 1);
      if (rc) return rc;
      j += (size_t)len;
    }
  }
  return 0;
}

static int strip(const lp__hf_dec_t *d, const toks_t *in, toks_t *out) {
  for (size_t i = 0; i < in->cnt; i++) {
    const char *s = in->b + in->off[i];
    size_t n = in->n[i], a = 0, b = n;
    for (size_t k = 0; k < d->start && a < n; k++) {
      int len;
      if (lp__hf_utf8_get(s, a, &len) != d->ch) break;
      a += (size_t)len;
    }
    for (size_t k = 0; k < d->stop && b > 0; k++) {
      size_t q = b - 1;
      while (q > 0 && ((unsigned char)s[q] & 0xC0) == 0x80) q--;
      int len;
      if (lp__hf_utf8_get(s, q, &len) != d->ch) break;
      b = q;
    }
    /* both ends cut into each other: the library panics; nothing is left */
    if (add(out, s + a, b > a ? b - a : 0)) return -ENOMEM;
  }
  return 0;
}

static int replace(const lp__hf_dec_t *d, const toks_t *in, toks_t *out) {
  lp__hf_work_t w = {0};
  int rc = 0;
  lp__hf_budget_start(in->off && in->cnt ? in->off[in->cnt - 1] + in->n[in->cnt - 1] : 0); /* its own regex budget */
  for (size_t i = 0; i < in->cnt && !rc; i++) {
    lp__hf_ns_t *s = &w.ns;
    s->len = 0;
    if ((rc = lp__hf_ns_reserve(s, in->n[i] + 1))) break; /* + 1: an empty piece has buffers too */
    if (in->n[i]) memcpy(s->b, in->b + in->off[i], in->n[i]);
    memset(s->al, 0, in->n[i] * sizeof(*s->al));
    s->len = in->n[i];
    if (!(rc = lp__hf_norm_run(d->rep, &w, s))) rc = add(out, s->b, s->len);
  }
  lp__hf_ns_free(&w.ns);
  lp__hf_ns_free(&w.tmp);
  return rc;
}

static int ctc(const lp__hf_dec_t *d, const toks_t *in, toks_t *out, toks_t *tmp) {
  for (size_t i = 0; i < in->cnt; i++) {
    const char *s = in->b + in->off[i];
    size_t n = in->n[i];
    if (i && n == in->n[i - 1] && memcmp(s, in->b + in->off[i - 1], n) == 0) continue; /* repeats are one */
    if (add(out, "", 0) || cat_replaced(out, s, n, d->a, d->alen, "", 0)) return -ENOMEM;
    if (d->cleanup) {
      if (cleanup(out, tmp)) return -ENOMEM;
      size_t at = out->off[out->cnt - 1], k = out->n[out->cnt - 1];
      tmp->len = tmp->cnt = 0;
      if (add(tmp, "", 0) || cat_replaced(tmp, out->b + at, k, d->b, d->blen, " ", 1)) return -ENOMEM;
      out->len = at;
      out->n[out->cnt - 1] = 0;
      if (cat(out, tmp->b, tmp->len)) return -ENOMEM;
    }
    if (!out->n[out->cnt - 1]) out->cnt--; /* an empty piece is dropped */
  }
  return 0;
}

/* Rewrites the pieces *in into *out (emptied first); then they swap. */
static int run(const lp__hf_dec_t *d, toks_t **in, toks_t **out, toks_t *tmp) {
  if (d->kind == LP_HF_D_SEQ) {
    for (size_t i = 0; i < d->nseq; i++) {
      int rc = run(&d->seq[i], in, out, tmp);
      if (rc) return rc;
    }
    return 0;
  }
  const toks_t *a = *in;
  toks_t *b = *out;
  b->len = b->cnt = 0;
  int rc = 0;
  switch (d->kind) {
  case LP_HF_D_WORDPIECE:
    for (size_t i = 0; i < a->cnt && !rc; i++) {
      const char *s = a->b + a->off[i];
      size_t n = a->n[i];
      if (i && n >= d->alen && memcmp(s, d->a, d->alen) == 0) rc = add(b, s + d->alen, n - d->alen);
      else if (i) rc = add(b, " ", 1) || cat(b, s, n) ? -ENOMEM : 0;
      else rc = add(b, s, n);
      if (!rc && d->cleanup) rc = cleanup(b, tmp);
    }
    break;
  case LP_HF_D_BYTELEVEL: rc = bytelevel(a, b); break;
  case LP_HF_D_METASPACE: rc = metaspace(d, a, b); break;
  case LP_HF_D_BPE:
    for (size_t i = 0; i < a->cnt && !rc; i++)
      rc = add(b, "", 0) || cat_replaced(b, a->b + a->off[i], a->n[i], d->a, d->alen, " ", i + 1 < a->cnt)
               ? -ENOMEM : 0;
    break;
  case LP_HF_D_BYTEFALLBACK: rc = bytefallback(a, b); break;
  case LP_HF_D_FUSE: rc = add(b, a->b, a->len); break;
  case LP_HF_D_STRIP: rc = strip(d, a, b); break;
  case LP_HF_D_REPLACE: rc = replace(d, a, b); break;
  case LP_HF_D_CTC: rc = ctc(d, a, b, tmp); break;
  case LP_HF_D_SEQ: break;
  }
  *out = *in;
  *in = b;
  return rc;
}

long lp__hf_decode(const lp__hf_t *h, const int32_t *ids, size_t n, int skip_special, char *out, size_t cap) {
  toks_t t[3] = {{0}}, *in = &t[0], *res = &t[1];
  long rc = 0;
  for (size_t i = 0; i < n && !rc; i++) {
    int32_t id = ids[i];
    if (id < 0 || id >= h->nnames) rc = -EINVAL;
    else if (!h->names[id] || (skip_special && h->special[id])) continue; /* the library drops an id without a piece */
    else if (!h->has_dec && in->cnt) rc = cat(in, " ", 1) || cat(in, h->names[id], strlen(h->names[id])) ? -ENOMEM : 0;
    else rc = add(in, h->names[id], strlen(h->names[id]));
  }
  if (!rc && h->has_dec) rc = run(&h->dec, &in, &res, &t[2]);
  if (!rc) {
    rc = (long)in->len; /* the pieces are one after another: their join */
    if (in->len <= cap && in->len) memcpy(out, in->b, in->len);
  }
  for (int i = 0; i < 3; i++) toks_free(&t[i]);
  return rc;
}

/* ---- loading */

/* o[key] as an owned string, dflt when absent; -EINVAL when not a string. */
static int str_or(json_t *o, const char *key, const char *dflt, char **out, size_t *len) {
  json_t *v = json_object_get(o, key);
  if (v && !json_is_null(v) && !json_is_string(v)) return -EINVAL;
  const char *s = v && json_is_string(v) ? json_string_value(v) : dflt;
  *len = v && json_is_string(v) ? json_string_length(v) : strlen(dflt);
  if (!(*out = malloc(*len + 1))) return -ENOMEM;
  memcpy(*out, s, *len + 1);
  return 0;
}

/* o[key] as one character into *cp (dflt when absent and dflt is set). */
static int one_char(json_t *o, const char *key, const char *dflt, uint32_t *cp) {
  const char *r = json_string_value(json_object_get(o, key));
  if (!r) r = dflt;
  int k;
  if (!r || !*r || lp__hf_utf8_check(r, strlen(r))) return -EINVAL;
  *cp = lp__hf_utf8_get(r, 0, &k);
  return r[k] ? -EINVAL : 0;
}

static int flag(json_t *o, const char *key, int dflt) {
  json_t *v = json_object_get(o, key);
  return json_is_boolean(v) ? json_is_true(v) : dflt;
}

int lp__hf_dec_load(void *elem, json_t *o, const char *where, char *err, size_t errlen) {
  lp__hf_dec_t *d = elem;
  memset(d, 0, sizeof(*d));
  const char *type = json_string_value(json_object_get(o, "type"));
  if (!json_is_object(o) || !type) return lp__hf_bad(err, errlen, where, "must be an object with a \"type\"");
  int rc = 0;
  if (strcmp(type, "WordPiece") == 0) {
    d->kind = LP_HF_D_WORDPIECE;
    d->cleanup = flag(o, "cleanup", 1);
    if ((rc = str_or(o, "prefix", "##", &d->a, &d->alen)) == -EINVAL)
      return lp__hf_bad(err, errlen, where, "prefix must be a string");
  } else if (strcmp(type, "ByteLevel") == 0) {
    d->kind = LP_HF_D_BYTELEVEL;
  } else if (strcmp(type, "Metaspace") == 0) {
    d->kind = LP_HF_D_METASPACE;
    if (one_char(o, "replacement", "\xe2\x96\x81", &d->ch)) /* ▁ */
      return lp__hf_bad(err, errlen, where, "replacement must be one character");
    const char *ps = json_string_value(json_object_get(o, "prepend_scheme"));
    d->prepend = 1;
    if (ps && strcmp(ps, "never") == 0) d->prepend = 0;
    else if (ps && strcmp(ps, "first") != 0 && strcmp(ps, "always") != 0)
      return lp__hf_bad(err, errlen, where, "prepend_scheme must be first, always or never");
    else if (!ps && json_is_false(json_object_get(o, "add_prefix_space"))) d->prepend = 0;
  } else if (strcmp(type, "BPEDecoder") == 0) {
    d->kind = LP_HF_D_BPE;
    if ((rc = str_or(o, "suffix", "</w>", &d->a, &d->alen)) == -EINVAL)
      return lp__hf_bad(err, errlen, where, "suffix must be a string");
  } else if (strcmp(type, "ByteFallback") == 0) {
    d->kind = LP_HF_D_BYTEFALLBACK;
  } else if (strcmp(type, "Fuse") == 0) {
    d->kind = LP_HF_D_FUSE;
  } else if (strcmp(type, "Strip") == 0) {
    d->kind = LP_HF_D_STRIP;
    json_t *a = json_object_get(o, "start"), *b = json_object_get(o, "stop");
    if (one_char(o, "content", NULL, &d->ch) || !json_is_integer(a) || !json_is_integer(b) ||
        json_integer_value(a) < 0 || json_integer_value(b) < 0)
      return lp__hf_bad(err, errlen, where, "needs \"content\" (one character), \"start\" and \"stop\" (counts)");
    d->start = (size_t)json_integer_value(a);
    d->stop = (size_t)json_integer_value(b);
  } else if (strcmp(type, "Replace") == 0) {
    d->kind = LP_HF_D_REPLACE;
    if (!(d->rep = calloc(1, sizeof(*d->rep)))) return -ENOMEM;
    return lp__hf_norm_load(d->rep, o, where, err, errlen); /* the same object as the Replace normalizer's */
  } else if (strcmp(type, "CTC") == 0) {
    d->kind = LP_HF_D_CTC;
    d->cleanup = flag(o, "cleanup", 1);
    if ((rc = str_or(o, "pad_token", "<pad>", &d->a, &d->alen)) == -EINVAL ||
        (!rc && (rc = str_or(o, "word_delimiter_token", "|", &d->b, &d->blen)) == -EINVAL))
      return lp__hf_bad(err, errlen, where, "pad_token and word_delimiter_token must be strings");
  } else if (strcmp(type, "Sequence") == 0) {
    d->kind = LP_HF_D_SEQ;
    return lp__hf_load_seq(o, "decoders", where, sizeof(*d->seq), (void **)&d->seq, &d->nseq, lp__hf_dec_load, err,
                           errlen);
  } else {
    return lp__hf_bad(err, errlen, where, "type '%.100s' is not supported", type);
  }
  return rc;
}

void lp__hf_dec_free(lp__hf_dec_t *d) {
  for (size_t i = 0; i < d->nseq; i++) lp__hf_dec_free(&d->seq[i]);
  free(d->seq);
  free(d->a);
  free(d->b);
  if (d->rep) lp__hf_norm_free(d->rep);
  free(d->rep);
  memset(d, 0, sizeof(*d));
}
