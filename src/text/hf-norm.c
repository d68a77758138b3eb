/* tokenizer.json's normalizers, each as the library's NormalizedString does
 * it, keeping for every output byte the span of the original text it comes
 * from (a character that replaces one takes its span; one inserted after it
 * takes the span of the input just consumed). Unicode from utf8proc. */
#define _GNU_SOURCE /* memmem */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "hf.h"

static const lp__hf_al_t NOAL = {0, 0};

static int is_chinese(uint32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

/* unicode_categories' is_other: Cc, Cf, Cs, Co (an unassigned code point,
 * Cn, is kept: the library's tables name no such category). */
static int is_other(uint32_t c) { return utf8proc_category((utf8proc_int32_t)c) >= UTF8PROC_CATEGORY_CC; }

static int is_mn(uint32_t c) {
  return c >= 0x300 && utf8proc_category((utf8proc_int32_t)c) == UTF8PROC_CATEGORY_MN;
}

/* unicode-normalization's is_combining_mark (StripAccents): any mark. */
static int is_mark(uint32_t c) {
  if (c < 0x300) return 0;
  utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
  return k == UTF8PROC_CATEGORY_MN || k == UTF8PROC_CATEGORY_MC || k == UTF8PROC_CATEGORY_ME;
}

int lp__hf_precompiled_run(const lp__hf_norm_t *n, const lp__hf_ns_t *s, lp__hf_ns_t *o, int *changed);
int lp__hf_precompiled_load(lp__hf_norm_t *n, json_t *o, const char *where, char *err, size_t errlen);

static void swap(lp__hf_ns_t *a, lp__hf_ns_t *b) {
  lp__hf_ns_t t = *a;
  *a = *b;
  *b = t;
}

/* BertNormalizer's clean_text, chinese characters and lowercase (with the
 * accents stripped by strip_nfd below), one pass. */
static int bert_pass(const lp__hf_norm_t *n, const lp__hf_ns_t *s, lp__hf_ns_t *o) {
  o->len = 0;
  if (lp__hf_ns_reserve(o, s->len + s->len / 2 + 8)) return -ENOMEM;
  for (size_t i = 0; i < s->len;) {
    int k;
    uint32_t c = lp__hf_utf8_get(s->b, i, &k);
    lp__hf_al_t al = s->al[i];
    i += (size_t)k;
    if (n->clean_text) {
      if (c == 0 || c == 0xFFFD || (c != '\t' && c != '\n' && c != '\r' && is_other(c))) continue;
      if (lp__hf_is_whitespace(c)) c = ' ';
    }
    if (n->chinese && is_chinese(c)) {
      if (lp__hf_ns_put(o, ' ', al) || lp__hf_ns_put(o, c, al) || lp__hf_ns_put(o, ' ', al)) return -ENOMEM;
      continue;
    }
    if (c < 0x80) { /* the common case: one byte, lowercased by hand */
      if (lp__hf_ns_reserve(o, 1)) return -ENOMEM;
      if (n->lowercase && c >= 'A' && c <= 'Z') c += 32;
      o->b[o->len] = (char)c;
      o->al[o->len++] = al;
      continue;
    }
    if (lp__hf_ns_put(o, c, al)) return -ENOMEM;
  }
  return 0;
}

static int lower(const lp__hf_ns_t *s, lp__hf_ns_t *o) {
  o->len = 0;
  if (lp__hf_ns_reserve(o, s->len + 8)) return -ENOMEM;
  for (size_t i = 0; i < s->len;) {
    int k;
    uint32_t c = lp__hf_utf8_get(s->b, i, &k);
    lp__hf_al_t al = s->al[i];
    i += (size_t)k;
    if (c == 0x130) { /* the one unconditional lowercase of two characters (SpecialCasing) */
      if (lp__hf_ns_put(o, 'i', al) || lp__hf_ns_put(o, 0x307, al)) return -ENOMEM;
      continue;
    }
    if (lp__hf_ns_put(o, (uint32_t)utf8proc_tolower((utf8proc_int32_t)c), al)) return -ENOMEM;
  }
  return 0;
}

/* Whether c joins the run before it: a character whose decomposition starts
 * with a combining mark (U+FF9E's compatibility form is U+3099), or a Hangul
 * vowel or final jamo (they compose with the syllable before). */
static int joins(uint32_t c, utf8proc_option_t opt) {
  if ((c >= 0x1161 && c <= 0x1175) || (c >= 0x11A8 && c <= 0x11C2)) return 1;
  utf8proc_int32_t d[18];
  int bound = 0;
  utf8proc_ssize_t m = utf8proc_decompose_char((utf8proc_int32_t)c, d, 18,
                                               (utf8proc_option_t)((opt & UTF8PROC_COMPAT) | UTF8PROC_DECOMPOSE), &bound);
  return m > 0 && m <= 18 && utf8proc_get_property(d[0])->combining_class != 0;
}

/* Unicode normalization (NFD/NFC/NFKD/NFKC) a run at a time (a character
 * and what joins it), spans as the library's normalizer gives them: every
 * character decomposed alone, its pieces at its span and the positions
 * after; the canonical reordering moves characters, not spans (the library
 * keeps spans by position); then (NFC, NFKC) composed, a composite at its
 * starter's position using up its marks' positions. */
#define LP_HF_NF_RUN 64 /* characters in one run; a longer run of marks is cut (no text has one) */
static int nf(const lp__hf_ns_t *s, lp__hf_ns_t *o, utf8proc_option_t opt) {
  o->len = 0;
  if (lp__hf_ns_reserve(o, s->len + 8)) return -ENOMEM;
  utf8proc_int32_t dec[LP_HF_NF_RUN * 18], comp[LP_HF_NF_RUN * 18];
  lp__hf_al_t dal[LP_HF_NF_RUN * 18];
  for (size_t i = 0; i < s->len;) {
    if ((unsigned char)s->b[i] < 0x80 && (i + 1 == s->len || (unsigned char)s->b[i + 1] < 0x80)) {
      if (lp__hf_ns_append(o, s->b + i, s->al + i, 1)) return -ENOMEM;
      i++;
      continue;
    }
    size_t nin = 0, nd = 0;
    do {
      int k;
      uint32_t c = lp__hf_utf8_get(s->b, i, &k);
      if (nin > 0 && c >= 0x300 ? !joins(c, opt) : nin > 0) break;
      int bound = 0;
      utf8proc_ssize_t m = utf8proc_decompose_char((utf8proc_int32_t)c, dec + nd, 18,
                                                   (utf8proc_option_t)((opt & UTF8PROC_COMPAT) | UTF8PROC_DECOMPOSE), &bound);
      if (m < 0 || m > 18) return -EINVAL;
      for (utf8proc_ssize_t j = 0; j < m; j++) dal[nd + (size_t)j] = s->al[i];
      nd += (size_t)m;
      nin++;
      i += (size_t)k;
    } while (i < s->len && nin < LP_HF_NF_RUN);
    /* canonical order: a stable insertion sort of each run of marks by class */
    for (size_t j = 1; j < nd; j++) {
      int cj = utf8proc_get_property(dec[j])->combining_class;
      if (!cj) continue;
      utf8proc_int32_t c = dec[j];
      size_t q = j;
      while (q > 0) {
        int cq = utf8proc_get_property(dec[q - 1])->combining_class;
        if (cq <= cj) break;
        dec[q] = dec[q - 1];
        q--;
      }
      dec[q] = c;
    }
    if (!(opt & UTF8PROC_COMPOSE)) {
      for (size_t j = 0; j < nd; j++)
        if (lp__hf_ns_put(o, (uint32_t)dec[j], dal[j])) return -ENOMEM;
      continue;
    }
    memcpy(comp, dec, nd * sizeof(*dec));
    utf8proc_ssize_t m = utf8proc_normalize_utf32(comp, (utf8proc_ssize_t)nd, (utf8proc_option_t)(UTF8PROC_COMPOSE | UTF8PROC_STABLE));
    if (m < 0) return -EINVAL;
    /* each output character takes the span at its position and uses up as
       many positions as it has canonical pieces (a composite its marks') */
    size_t pos = 0;
    for (utf8proc_ssize_t j = 0; j < m; j++) {
      if (lp__hf_ns_put(o, (uint32_t)comp[j], dal[pos < nd ? pos : nd - 1])) return -ENOMEM;
      utf8proc_int32_t pieces[18];
      int bound = 0;
      utf8proc_ssize_t np = utf8proc_decompose_char(comp[j], pieces, 18, UTF8PROC_DECOMPOSE, &bound);
      pos += np > 0 ? (size_t)np : 1;
    }
  }
  return 0;
}

/* Keeps the characters keep() allows, with their spans. */
static int filter(const lp__hf_ns_t *s, lp__hf_ns_t *o, int (*drop)(uint32_t)) {
  o->len = 0;
  if (lp__hf_ns_reserve(o, s->len)) return -ENOMEM;
  for (size_t i = 0; i < s->len;) {
    int k;
    uint32_t c = lp__hf_utf8_get(s->b, i, &k);
    if (!drop(c)) {
      memcpy(o->b + o->len, s->b + i, (size_t)k);
      for (int j = 0; j < k; j++) o->al[o->len + (size_t)j] = s->al[i];
      o->len += (size_t)k;
    }
    i += (size_t)k;
  }
  return 0;
}

static int strip(const lp__hf_norm_t *n, const lp__hf_ns_t *s, lp__hf_ns_t *o) {
  size_t a = 0, b = s->len;
  while (n->left && a < b) {
    int k;
    if (!lp__hf_is_whitespace(lp__hf_utf8_get(s->b, a, &k))) break;
    a += (size_t)k;
  }
  while (n->right && b > a) {
    size_t p = b - 1;
    while (p > a && ((unsigned char)s->b[p] & 0xC0) == 0x80) p--;
    int k;
    if (!lp__hf_is_whitespace(lp__hf_utf8_get(s->b, p, &k))) break;
    b = p;
  }
  o->len = 0;
  return lp__hf_ns_append(o, s->b + a, s->al + a, b - a);
}

/* Each match's replacement takes the span of the match's last byte. */
static int replace(const lp__hf_norm_t *n, lp__hf_work_t *w, const lp__hf_ns_t *s, lp__hf_ns_t *o) {
  o->len = 0;
  size_t last = 0;
  pcre2_match_data *md = NULL;
  if (n->re && !(md = pcre2_match_data_create_from_pattern(n->re, NULL))) return -ENOMEM;
  int rc = 0;
  for (size_t at = 0; at <= s->len;) {
    size_t ms, me;
    if (n->re) {
      if (lp__hf_budget_spent()) { /* a pattern that backtracks: refused, not cut short */
        rc = -EINVAL;
        break;
      }
      int r = pcre2_match(n->re, (PCRE2_SPTR)s->b, s->len, at, PCRE2_NO_UTF_CHECK, md, NULL);
      if (r == PCRE2_ERROR_NOMATCH) break;
      if (r < 0) { /* a match or depth limit: refused, not cut short */
        rc = -EINVAL;
        break;
      }
      PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
      ms = ov[0];
      me = ov[1];
      if (me == ms) { /* an empty match replaces nothing: step over a character */
        if (ms >= s->len) break;
        int k;
        lp__hf_utf8_get(s->b, ms, &k);
        at = ms + (size_t)k;
        continue;
      }
    } else {
      if (n->pattern_len == 0) break;
      const char *hit = s->len - at >= n->pattern_len
                            ? memmem(s->b + at, s->len - at, n->pattern, n->pattern_len) : NULL;
      if (!hit) break;
      ms = (size_t)(hit - s->b);
      me = ms + n->pattern_len;
    }
    if ((rc = lp__hf_ns_append(o, s->b + last, s->al + last, ms - last))) break;
    lp__hf_al_t al = s->al[me - 1];
    if ((rc = lp__hf_ns_reserve(o, n->content_len))) break;
    if (n->content_len) memcpy(o->b + o->len, n->content, n->content_len); /* "" keeps o->b NULL */
    for (size_t j = 0; j < n->content_len; j++) o->al[o->len + j] = al;
    o->len += n->content_len;
    last = at = me;
  }
  if (md) pcre2_match_data_free(md);
  (void)w;
  if (rc) return rc;
  return lp__hf_ns_append(o, s->b + last, s->al + last, s->len - last);
}

static int prepend(const lp__hf_norm_t *n, const lp__hf_ns_t *s, lp__hf_ns_t *o) {
  o->len = 0;
  if (s->len == 0) return 0;
  if (lp__hf_ns_reserve(o, n->content_len + s->len)) return -ENOMEM;
  memcpy(o->b, n->content, n->content_len);
  for (size_t j = 0; j < n->content_len; j++) o->al[j] = s->al[0];
  o->len = n->content_len;
  return lp__hf_ns_append(o, s->b, s->al, s->len);
}

int lp__hf_norm_run(const lp__hf_norm_t *n, lp__hf_work_t *w, lp__hf_ns_t *s) {
  int rc = 0;
  lp__hf_ns_t *o = &w->tmp;
  switch (n->kind) {
  case LP_HF_N_BERT:
    if ((rc = bert_pass(n, s, o))) return rc;
    swap(s, o);
    if (n->strip_accents) {
      if ((rc = nf(s, o, UTF8PROC_DECOMPOSE))) return rc;
      if ((rc = filter(o, s, is_mn))) return rc;
      if (n->lowercase) { /* lowercase after the accents go, as the library orders it */
        if ((rc = lower(s, o))) return rc;
        swap(s, o);
      }
    } else if (n->lowercase) {
      if ((rc = lower(s, o))) return rc;
      swap(s, o);
    }
    return 0;
  case LP_HF_N_NFC: rc = nf(s, o, UTF8PROC_COMPOSE); break;
  case LP_HF_N_NFD: rc = nf(s, o, UTF8PROC_DECOMPOSE); break;
  case LP_HF_N_NFKC: rc = nf(s, o, UTF8PROC_COMPOSE | UTF8PROC_COMPAT); break;
  case LP_HF_N_NFKD: rc = nf(s, o, UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT); break;
  case LP_HF_N_LOWER: rc = lower(s, o); break;
  case LP_HF_N_STRIP_ACCENTS: rc = filter(s, o, is_mark); break;
  case LP_HF_N_STRIP: rc = strip(n, s, o); break;
  case LP_HF_N_REPLACE: rc = replace(n, w, s, o); break;
  case LP_HF_N_PREPEND: rc = prepend(n, s, o); break;
  case LP_HF_N_SEQ:
    for (size_t i = 0; i < n->nseq && !rc; i++) rc = lp__hf_norm_run(&n->seq[i], w, s);
    return rc;
  case LP_HF_N_PRECOMPILED: {
    int changed;
    if ((rc = lp__hf_precompiled_run(n, s, o, &changed))) return rc;
    if (changed) swap(s, o);
    return 0;
  }
  }
  if (!rc) swap(s, o);
  (void)NOAL;
  return rc;
}

/* ---- loading */

static int flag(json_t *o, const char *key, int dflt) {
  json_t *v = json_object_get(o, key);
  if (json_is_boolean(v)) return json_is_true(v);
  return dflt;
}

static int get_string(json_t *o, const char *key, char **out, size_t *len) {
  json_t *v = json_object_get(o, key);
  if (!json_is_string(v)) return -EINVAL;
  *len = json_string_length(v);
  if (!(*out = malloc(*len + 1))) return -ENOMEM;
  memcpy(*out, json_string_value(v), *len + 1);
  return 0;
}

/* Oniguruma's classes (the library's regex engine) in PCRE2's words: \s is
 * White_Space, \w has marks; PCRE2 10.42's \s lacks U+0085 and its \w has
 * no marks. Outside a [class] they are written as classes; inside, as their
 * members (a negated one stays PCRE2's). Returns malloc'd text or NULL. */
#define ONIG_S "\\t-\\r \\x{85}\\p{Z}"
#define ONIG_W "\\p{L}\\p{M}\\p{Nd}\\p{Pc}"
static char *onig_to_pcre2(const char *in, size_t n, size_t *outlen) {
  size_t cap = n * 8 + 64, k = 0;
  char *o = malloc(cap);
  if (!o) return NULL;
  int in_class = 0;
  for (size_t i = 0; i < n; i++) {
    if (k + 64 > cap) {
      char *o2 = realloc(o, cap *= 2);
      if (!o2) {
        free(o);
        return NULL;
      }
      o = o2;
    }
    char c = in[i];
    if (c == '\\' && i + 1 < n) {
      char d = in[i + 1];
      const char *rep = NULL;
      if (d == 's') rep = in_class ? ONIG_S : "[" ONIG_S "]";
      else if (d == 'S' && !in_class) rep = "[^" ONIG_S "]";
      else if (d == 'w') rep = in_class ? ONIG_W : "[" ONIG_W "]";
      else if (d == 'W' && !in_class) rep = "[^" ONIG_W "]";
      if (rep) {
        size_t rl = strlen(rep);
        memcpy(o + k, rep, rl);
        k += rl;
      } else {
        o[k++] = c;
        o[k++] = d;
      }
      i++;
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = 1;
      o[k++] = c;
      if (i + 1 < n && in[i + 1] == '^') o[k++] = in[++i];
      if (i + 1 < n && in[i + 1] == ']') o[k++] = in[++i]; /* a ']' first is a member */
      continue;
    }
    if (c == ']' && in_class) in_class = 0;
    o[k++] = c;
  }
  *outlen = k;
  return o;
}

/* The library's Pattern: {"String": "..."} or {"Regex": "..."}. */
int lp__hf_pattern_load(json_t *p, char **str, size_t *len, pcre2_code **re, char *err, size_t errlen,
                        const char *where);
int lp__hf_pattern_load(json_t *p, char **str, size_t *len, pcre2_code **re, char *err, size_t errlen,
                        const char *where) {
  if (!json_is_object(p)) return lp__hf_bad(err, errlen, where, "pattern must be {\"String\": ...} or {\"Regex\": ...}");
  json_t *s = json_object_get(p, "String"), *r = json_object_get(p, "Regex");
  if (json_is_string(s)) {
    *len = json_string_length(s);
    if (!(*str = malloc(*len + 1))) return -ENOMEM;
    memcpy(*str, json_string_value(s), *len + 1);
    return 0;
  }
  if (!json_is_string(r)) return lp__hf_bad(err, errlen, where, "pattern must be {\"String\": ...} or {\"Regex\": ...}");
  int ec;
  PCRE2_SIZE eo;
  size_t tl;
  char *t = onig_to_pcre2(json_string_value(r), json_string_length(r), &tl);
  if (!t) return -ENOMEM;
  /* UTF and UCP: \p{L} and the rest over Unicode as Oniguruma reads them */
  *re = pcre2_compile((PCRE2_SPTR)t, tl, PCRE2_UTF | PCRE2_UCP, &ec, &eo, NULL);
  free(t);
  if (!*re) {
    char msg[160], m2[220];
    pcre2_get_error_message(ec, (PCRE2_UCHAR *)msg, sizeof(msg));
    snprintf(m2, sizeof(m2), "pattern.Regex does not compile at %zu: %s", (size_t)eo, msg);
    return lp__hf_bad(err, errlen, where, "%s", m2);
  }
  pcre2_jit_compile(*re, PCRE2_JIT_COMPLETE); /* where the platform has no JIT it matches interpreted */
  return 0;
}

int lp__hf_norm_load(void *elem, json_t *o, const char *where, char *err, size_t errlen) {
  lp__hf_norm_t *n = elem;
  memset(n, 0, sizeof(*n));
  const char *type = json_string_value(json_object_get(o, "type"));
  if (!json_is_object(o) || !type) return lp__hf_bad(err, errlen, where, "must be an object with a \"type\"");
  if (strcmp(type, "BertNormalizer") == 0) {
    n->kind = LP_HF_N_BERT;
    n->clean_text = flag(o, "clean_text", 1);
    n->chinese = flag(o, "handle_chinese_chars", 1);
    n->lowercase = flag(o, "lowercase", 1);
    n->strip_accents = flag(o, "strip_accents", n->lowercase); /* null: as lowercase */
  } else if (strcmp(type, "NFC") == 0) n->kind = LP_HF_N_NFC;
  else if (strcmp(type, "NFD") == 0) n->kind = LP_HF_N_NFD;
  else if (strcmp(type, "NFKC") == 0) n->kind = LP_HF_N_NFKC;
  else if (strcmp(type, "NFKD") == 0) n->kind = LP_HF_N_NFKD;
  else if (strcmp(type, "Lowercase") == 0) n->kind = LP_HF_N_LOWER;
  else if (strcmp(type, "StripAccents") == 0) n->kind = LP_HF_N_STRIP_ACCENTS;
  else if (strcmp(type, "Strip") == 0) {
    n->kind = LP_HF_N_STRIP;
    n->left = flag(o, "strip_left", 1);
    n->right = flag(o, "strip_right", 1);
  } else if (strcmp(type, "Replace") == 0) {
    n->kind = LP_HF_N_REPLACE;
    char w2[200];
    snprintf(w2, sizeof(w2), "%s.pattern", where);
    int rc = lp__hf_pattern_load(json_object_get(o, "pattern"), &n->pattern, &n->pattern_len, &n->re, err, errlen, w2);
    if (rc) return rc;
    if (get_string(o, "content", &n->content, &n->content_len)) return lp__hf_bad(err, errlen, where, "needs \"content\"");
  } else if (strcmp(type, "Prepend") == 0) {
    n->kind = LP_HF_N_PREPEND;
    if (get_string(o, "prepend", &n->content, &n->content_len)) return lp__hf_bad(err, errlen, where, "needs \"prepend\"");
  } else if (strcmp(type, "Precompiled") == 0) {
    n->kind = LP_HF_N_PRECOMPILED;
    return lp__hf_precompiled_load(n, o, where, err, errlen);
  } else if (strcmp(type, "Sequence") == 0) {
    n->kind = LP_HF_N_SEQ;
    return lp__hf_load_seq(o, "normalizers", where, sizeof(*n->seq), (void **)&n->seq, &n->nseq, lp__hf_norm_load,
                           err, errlen);
  } else {
    return lp__hf_bad(err, errlen, where, "type '%.100s' is not supported", type);
  }
  return 0;
}

void lp__hf_norm_free(lp__hf_norm_t *n) {
  for (size_t i = 0; i < n->nseq; i++) lp__hf_norm_free(&n->seq[i]);
  free(n->seq);
  free(n->pattern);
  free(n->content);
  if (n->re) pcre2_code_free(n->re);
  free(n->blob);
  lp__pcmap_free(&n->pc);
  memset(n, 0, sizeof(*n));
}
