/* tokenizer.json's pre-tokenizers: each cuts the pieces of the normalized
 * text (w->sp, spans of w->pre) into smaller ones, as the library's
 * PreTokenizedString::split does (empty pieces dropped, added tokens kept
 * whole). A cut is a list of (span, is_match) the behavior then folds. */
#define _GNU_SOURCE /* memmem */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "hf.h"

typedef struct {
  uint32_t a, b;
  int match;
} mt_t;

typedef struct {
  mt_t *m;
  size_t n, cap;
} mts_t;

static int mt_push(mts_t *l, uint32_t a, uint32_t b, int match) {
  if (l->n == l->cap) {
    size_t c = l->cap ? l->cap * 2 : 64;
    mt_t *m = realloc(l->m, c * sizeof(*m));
    if (!m) return -ENOMEM;
    l->m = m;
    l->cap = c;
  }
  l->m[l->n++] = (mt_t){a, b, match};
  return 0;
}

static void swap_splits(lp__hf_work_t *w) {
  lp__hf_split_t *t = w->sp;
  size_t c = w->spcap;
  w->sp = w->sp2;
  w->spcap = w->sp2cap;
  w->sp2 = t;
  w->sp2cap = c;
  w->nsp = w->nsp2;
  w->nsp2 = 0;
}

static int is_ascii_punct(uint32_t c) {
  return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126);
}

static int is_bert_punct(uint32_t c) { return is_ascii_punct(c) || (c >= 0x80 && lp__hf_is_punct(c)); }

static int is_numeric(uint32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
  return k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_NO;
}

/* Folds the matches of one piece by behavior into w->sp2 (offsets in w->pre). */
static int fold(lp__hf_work_t *w, uint32_t base, const mts_t *l, lp__hf_behavior_t beh, int invert) {
  size_t start = w->nsp2;
  int prev = 0;
  for (size_t i = 0; i < l->n; i++) {
    mt_t m = l->m[i];
    if (invert) m.match = !m.match;
    int rc = 0;
    switch (beh) {
    case LP_HF_B_REMOVED:
      if (!m.match) rc = lp__hf_split_push(&w->sp2, &w->nsp2, &w->sp2cap, base + m.a, m.b - m.a, -1);
      break;
    case LP_HF_B_ISOLATED:
      rc = lp__hf_split_push(&w->sp2, &w->nsp2, &w->sp2cap, base + m.a, m.b - m.a, -1);
      break;
    case LP_HF_B_CONTIGUOUS:
      if (w->nsp2 > start && m.match == prev) w->sp2[w->nsp2 - 1].len = base + m.b - w->sp2[w->nsp2 - 1].off;
      else rc = lp__hf_split_push(&w->sp2, &w->nsp2, &w->sp2cap, base + m.a, m.b - m.a, -1);
      break;
    case LP_HF_B_PREV:
      if (w->nsp2 > start && m.match && !prev) w->sp2[w->nsp2 - 1].len = base + m.b - w->sp2[w->nsp2 - 1].off;
      else rc = lp__hf_split_push(&w->sp2, &w->nsp2, &w->sp2cap, base + m.a, m.b - m.a, -1);
      break;
    case LP_HF_B_NEXT:
      /* a match joins the piece after it: it opens a piece that the next non-match extends */
      if (w->nsp2 > start && !m.match && prev) w->sp2[w->nsp2 - 1].len = base + m.b - w->sp2[w->nsp2 - 1].off;
      else rc = lp__hf_split_push(&w->sp2, &w->nsp2, &w->sp2cap, base + m.a, m.b - m.a, -1);
      break;
    }
    if (rc) return rc;
    prev = m.match;
  }
  /* empty pieces are dropped */
  size_t k = start;
  for (size_t i = start; i < w->nsp2; i++)
    if (w->sp2[i].len) w->sp2[k++] = w->sp2[i];
  w->nsp2 = k;
  return 0;
}

static int by_char(const char *b, uint32_t n, int (*pred)(uint32_t), mts_t *l) {
  uint32_t last = 0;
  for (uint32_t i = 0; i < n;) {
    int k;
    uint32_t c = lp__hf_utf8_get(b, i, &k);
    if (pred(c)) {
      if (last < i && mt_push(l, last, i, 0)) return -ENOMEM;
      if (mt_push(l, i, i + (uint32_t)k, 1)) return -ENOMEM;
      last = i + (uint32_t)k;
    }
    i += (uint32_t)k;
  }
  if (last < n && mt_push(l, last, n, 0)) return -ENOMEM;
  return 0;
}

static int by_regex(const pcre2_code *re, pcre2_match_data *md, const char *b, uint32_t n, mts_t *l) {
  uint32_t prev = 0;
  for (size_t at = 0; at <= n;) {
    if (lp__hf_budget_spent()) return -EINVAL; /* a pattern that backtracks: refused, not cut short */
    int r = pcre2_match(re, (PCRE2_SPTR)b, n, at, PCRE2_NO_UTF_CHECK, md, NULL);
    if (r == PCRE2_ERROR_NOMATCH) break;
    if (r < 0) return -EINVAL; /* a match or depth limit: refused, not cut short */
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    uint32_t s = (uint32_t)ov[0], e = (uint32_t)ov[1];
    if (e == s) { /* an empty match splits nothing off; step a character as Rust's regex does */
      if (s != prev || s == 0) {
        if (prev != s && mt_push(l, prev, s, 0)) return -ENOMEM;
        if (mt_push(l, s, e, 1)) return -ENOMEM;
        prev = e;
      }
      if (s >= n) break;
      int k;
      lp__hf_utf8_get(b, s, &k);
      at = s + (size_t)k;
      continue;
    }
    if (prev != s && mt_push(l, prev, s, 0)) return -ENOMEM;
    if (mt_push(l, s, e, 1)) return -ENOMEM;
    prev = e;
    at = e;
  }
  if (prev != n && mt_push(l, prev, n, 0)) return -ENOMEM;
  return 0;
}

static int by_string(const char *pat, size_t plen, const char *b, uint32_t n, mts_t *l) {
  uint32_t prev = 0;
  if (plen == 0) return mt_push(l, 0, n, 0);
  for (uint32_t at = 0; at + plen <= n;) {
    const char *hit = memmem(b + at, n - at, pat, plen);
    if (!hit) break;
    uint32_t s = (uint32_t)(hit - b);
    if (prev != s && mt_push(l, prev, s, 0)) return -ENOMEM;
    if (mt_push(l, s, s + (uint32_t)plen, 1)) return -ENOMEM;
    prev = at = s + (uint32_t)plen;
  }
  if (prev != n && mt_push(l, prev, n, 0)) return -ENOMEM;
  return 0;
}

/* BertPreTokenizer in one pass: whitespace ends a piece and goes, each
 * punctuation character is a piece of its own. */
static int bert(lp__hf_work_t *w, const lp__hf_split_t *s) {
  const char *b = w->pre.b + s->off;
  uint32_t start = 0, i = 0;
  while (i < s->len) {
    uint32_t c = (unsigned char)b[i];
    int k = 1;
    if (c >= 0x80) c = lp__hf_utf8_get(b, i, &k);
    int ws = c < 0x80 ? (c == ' ' || (c >= 9 && c <= 13)) : lp__hf_is_whitespace(c);
    int pu = !ws && is_bert_punct(c);
    if (ws || pu) {
      if (start < i && lp__hf_split_push(&w->sp2, &w->nsp2, &w->sp2cap, s->off + start, i - start, -1)) return -ENOMEM;
      if (pu && lp__hf_split_push(&w->sp2, &w->nsp2, &w->sp2cap, s->off + i, (uint32_t)k, -1)) return -ENOMEM;
      start = i + (uint32_t)k;
    }
    i += (uint32_t)k;
  }
  if (start < i && lp__hf_split_push(&w->sp2, &w->nsp2, &w->sp2cap, s->off + start, i - start, -1)) return -ENOMEM;
  return 0;
}

/* The pieces a rewriting pre-tokenizer wrote (w->pre2, w->sp2) become the
 * pieces. */
static void take_rewritten(lp__hf_work_t *w) {
  lp__hf_ns_t x = w->pre;
  w->pre = w->pre2;
  w->pre2 = x;
  swap_splits(w);
}

/* GPT-2's bytes as characters: the printable ones stand for themselves,
 * the rest (controls, space, 0x7F-0xA0, 0xAD) for 256, 257, ... in order. */
static uint32_t byte_char(unsigned char b) {
  if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE) return b;
  if (b <= 0x20) return 256u + b;               /* 0x00-0x20: 256-288 */
  if (b <= 0xA0) return 256u + 33 + (b - 0x7Fu); /* 0x7F-0xA0: 289-322 */
  return 256u + 33 + 34;                        /* 0xAD */
}

/* ByteLevel: a space before each piece (add_prefix_space), GPT-2's split
 * (use_regex), then every byte as its character; a character's bytes keep
 * its span. Writes the pieces anew into w->pre2, then swaps. */
static int bytelevel(const lp__hf_pre_t *p, lp__hf_work_t *w, pcre2_match_data *md) {
  mts_t l = {0};
  int rc = 0;
  w->pre2.len = 0;
  w->nsp2 = 0;
  for (size_t i = 0; i < w->nsp && !rc; i++) {
    const lp__hf_split_t *s = &w->sp[i];
    uint32_t base = (uint32_t)w->pre2.len;
    if (s->added >= 0) {
      if (!(rc = lp__hf_ns_append(&w->pre2, w->pre.b + s->off, w->pre.al + s->off, s->len)))
        rc = lp__hf_split_push(&w->sp2, &w->nsp2, &w->sp2cap, base, s->len, s->added);
      continue;
    }
    lp__hf_ns_t *t = &w->tmp;
    t->len = 0;
    if (p->add_prefix_space && s->len && w->pre.b[s->off] != ' ' && (rc = lp__hf_ns_put(t, ' ', w->pre.al[s->off]))) break;
    if ((rc = lp__hf_ns_append(t, w->pre.b + s->off, w->pre.al + s->off, s->len))) break;
    l.n = 0;
    if (p->use_regex) rc = by_regex(p->re, md, t->b, (uint32_t)t->len, &l);
    else if (t->len) rc = mt_push(&l, 0, (uint32_t)t->len, 0);
    for (size_t k = 0; k < l.n && !rc; k++) {
      uint32_t a = l.m[k].a, b = l.m[k].b, off = (uint32_t)w->pre2.len;
      if (a == b) continue;
      for (uint32_t j = a; j < b && !rc; j++) rc = lp__hf_ns_put(&w->pre2, byte_char((unsigned char)t->b[j]), t->al[j]);
      if (!rc) rc = lp__hf_split_push(&w->sp2, &w->nsp2, &w->sp2cap, off, (uint32_t)w->pre2.len - off, -1);
    }
  }
  free(l.m);
  if (!rc) take_rewritten(w);
  return rc;
}

/* Metaspace: each space becomes the replacement ('▁', with the space's
 * span), one more before the piece (prepend_scheme: always, or first: only
 * the text's first piece), then a cut before each replacement (split). */
static int metaspace(const lp__hf_pre_t *p, lp__hf_work_t *w) {
  mts_t l = {0};
  int rc = 0;
  char rep[4];
  int rl = lp__hf_utf8_put(rep, p->delim);
  w->pre2.len = 0;
  w->nsp2 = 0;
  for (size_t i = 0; i < w->nsp && !rc; i++) {
    const lp__hf_split_t *s = &w->sp[i];
    uint32_t base = (uint32_t)w->pre2.len;
    const char *b = w->pre.b + s->off;
    const lp__hf_al_t *al = w->pre.al + s->off;
    if (s->added >= 0) {
      if (!(rc = lp__hf_ns_append(&w->pre2, b, al, s->len)))
        rc = lp__hf_split_push(&w->sp2, &w->nsp2, &w->sp2cap, base, s->len, s->added);
      continue;
    }
    int starts = s->len && (b[0] == ' ' || (s->len >= (uint32_t)rl && memcmp(b, rep, (size_t)rl) == 0));
    if (!starts && (p->prepend == 2 || (p->prepend == 1 && al[0].a0 == 0)) && (rc = lp__hf_ns_put(&w->pre2, p->delim, al[0])))
      break;
    for (uint32_t j = 0; j < s->len && !rc; j++) {
      if (b[j] == ' ') rc = lp__hf_ns_put(&w->pre2, p->delim, al[j]);
      else rc = lp__hf_ns_append(&w->pre2, b + j, al + j, 1);
    }
    if (rc) break;
    uint32_t len = (uint32_t)w->pre2.len - base;
    if (!p->split) {
      rc = lp__hf_split_push(&w->sp2, &w->nsp2, &w->sp2cap, base, len, -1);
      continue;
    }
    l.n = 0;
    if (!(rc = by_string(rep, (size_t)rl, w->pre2.b + base, len, &l))) rc = fold(w, base, &l, LP_HF_B_NEXT, 0);
  }
  free(l.m);
  if (!rc) take_rewritten(w);
  return rc;
}

static int is_ws_or_nothing(uint32_t c) { return lp__hf_is_whitespace(c); }

static _Thread_local uint32_t delim_char;
static int is_delim(uint32_t c) { return c == delim_char; }

int lp__hf_pre_run(const lp__hf_pre_t *p, lp__hf_work_t *w) {
  if (p->kind == LP_HF_P_SEQ) {
    for (size_t i = 0; i < p->nseq; i++) {
      int rc = lp__hf_pre_run(&p->seq[i], w);
      if (rc) return rc;
    }
    return 0;
  }
  mts_t l = {0};
  pcre2_match_data *md = NULL;
  if (p->re && !(md = pcre2_match_data_create_from_pattern(p->re, NULL))) return -ENOMEM;
  if (p->kind == LP_HF_P_METASPACE) return metaspace(p, w);
  if (p->kind == LP_HF_P_BYTELEVEL) {
    int r = bytelevel(p, w, md);
    if (md) pcre2_match_data_free(md);
    return r;
  }
  int rc = 0;
  w->nsp2 = 0;
  for (size_t i = 0; i < w->nsp && !rc; i++) {
    const lp__hf_split_t *s = &w->sp[i];
    if (s->added >= 0) {
      rc = lp__hf_split_push(&w->sp2, &w->nsp2, &w->sp2cap, s->off, s->len, s->added);
      continue;
    }
    const char *b = w->pre.b + s->off;
    l.n = 0;
    switch (p->kind) {
    case LP_HF_P_BERT: rc = bert(w, s); continue;
    case LP_HF_P_WSSPLIT:
      if (!(rc = by_char(b, s->len, is_ws_or_nothing, &l))) rc = fold(w, s->off, &l, LP_HF_B_REMOVED, 0);
      break;
    case LP_HF_P_WHITESPACE:
      if (!(rc = by_regex(p->re, md, b, s->len, &l))) rc = fold(w, s->off, &l, LP_HF_B_REMOVED, 1);
      break;
    case LP_HF_P_PUNCT:
      if (!(rc = by_char(b, s->len, is_bert_punct, &l))) rc = fold(w, s->off, &l, p->behavior, 0);
      break;
    case LP_HF_P_DIGITS:
      if (!(rc = by_char(b, s->len, is_numeric, &l)))
        rc = fold(w, s->off, &l, p->individual_digits ? LP_HF_B_ISOLATED : LP_HF_B_CONTIGUOUS, 0);
      break;
    case LP_HF_P_CHARDELIM:
      delim_char = p->delim;
      if (!(rc = by_char(b, s->len, is_delim, &l))) rc = fold(w, s->off, &l, LP_HF_B_REMOVED, 0);
      break;
    case LP_HF_P_SPLIT:
      rc = p->re ? by_regex(p->re, md, b, s->len, &l) : by_string(p->pattern, p->pattern_len, b, s->len, &l);
      if (!rc) rc = fold(w, s->off, &l, p->behavior, p->invert);
      break;
    default: rc = -EINVAL; break;
    }
  }
  free(l.m);
  if (md) pcre2_match_data_free(md);
  if (!rc) swap_splits(w);
  return rc;
}

/* ---- loading */

int lp__hf_pattern_load(json_t *p, char **str, size_t *len, pcre2_code **re, char *err, size_t errlen,
                        const char *where);

static int behavior(json_t *o, lp__hf_behavior_t *b) {
  const char *s = json_string_value(json_object_get(o, "behavior"));
  if (!s) return -EINVAL;
  static const char *const names[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"};
  for (int i = 0; i < 5; i++)
    if (strcmp(s, names[i]) == 0) {
      *b = (lp__hf_behavior_t)i;
      return 0;
    }
  return -EINVAL;
}

static int compile(pcre2_code **re, const char *pat) {
  int ec;
  PCRE2_SIZE eo;
  *re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &ec, &eo, NULL);
  if (!*re) return -ENOMEM;
  pcre2_jit_compile(*re, PCRE2_JIT_COMPLETE);
  return 0;
}

int lp__hf_pre_load(void *elem, json_t *o, const char *where, char *err, size_t errlen) {
  lp__hf_pre_t *p = elem;
  memset(p, 0, sizeof(*p));
  const char *type = json_string_value(json_object_get(o, "type"));
  if (!json_is_object(o) || !type) return lp__hf_bad(err, errlen, where, "must be an object with a \"type\"");
  if (strcmp(type, "BertPreTokenizer") == 0) p->kind = LP_HF_P_BERT;
  else if (strcmp(type, "WhitespaceSplit") == 0) p->kind = LP_HF_P_WSSPLIT;
  else if (strcmp(type, "Whitespace") == 0) {
    p->kind = LP_HF_P_WHITESPACE;
    /* the library's \w+|[^\w\s]+ with Rust's \w (marks and joiners are word
       characters; PCRE2 10.42's \w has neither) */
    if (compile(&p->re, "[\\p{L}\\p{M}\\p{Nd}\\p{Nl}\\p{Pc}\\x{200C}\\x{200D}]+|"
                        "[^\\p{L}\\p{M}\\p{Nd}\\p{Nl}\\p{Pc}\\x{200C}\\x{200D}\\s]+"))
      return -ENOMEM;
  } else if (strcmp(type, "ByteLevel") == 0) {
    p->kind = LP_HF_P_BYTELEVEL;
    p->add_prefix_space = !json_is_false(json_object_get(o, "add_prefix_space"));
    p->use_regex = !json_is_false(json_object_get(o, "use_regex"));
    /* GPT-2's split, with Oniguruma's \s (White_Space) written out */
    if (compile(&p->re, "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\t-\\r \\x{85}\\p{Z}\\p{L}\\p{N}]+|"
                        "[\\t-\\r \\x{85}\\p{Z}]+(?![^\\t-\\r \\x{85}\\p{Z}])|[\\t-\\r \\x{85}\\p{Z}]+"))
      return -ENOMEM;
  } else if (strcmp(type, "Metaspace") == 0) {
    p->kind = LP_HF_P_METASPACE;
    const char *r = json_string_value(json_object_get(o, "replacement"));
    int k;
    if (!r) r = "\xe2\x96\x81"; /* ▁ */
    if (!*r || lp__hf_utf8_check(r, strlen(r)) || (p->delim = lp__hf_utf8_get(r, 0, &k), r[k]))
      return lp__hf_bad(err, errlen, where, "replacement must be one character");
    const char *ps = json_string_value(json_object_get(o, "prepend_scheme"));
    json_t *aps = json_object_get(o, "add_prefix_space");
    p->prepend = 2;
    if (ps && strcmp(ps, "first") == 0) p->prepend = 1;
    else if (ps && strcmp(ps, "never") == 0) p->prepend = 0;
    else if (ps && strcmp(ps, "always") != 0) return lp__hf_bad(err, errlen, where, "prepend_scheme must be first, always or never");
    else if (!ps && json_is_false(aps)) p->prepend = 0;
    p->split = !json_is_false(json_object_get(o, "split"));
  } else if (strcmp(type, "Punctuation") == 0) {
    p->kind = LP_HF_P_PUNCT;
    p->behavior = LP_HF_B_ISOLATED;
    if (json_object_get(o, "behavior") && behavior(o, &p->behavior))
      return lp__hf_bad(err, errlen, where, "behavior must be Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous");
  } else if (strcmp(type, "Digits") == 0) {
    p->kind = LP_HF_P_DIGITS;
    p->individual_digits = json_is_true(json_object_get(o, "individual_digits"));
  } else if (strcmp(type, "CharDelimiterSplit") == 0) {
    p->kind = LP_HF_P_CHARDELIM;
    const char *d = json_string_value(json_object_get(o, "delimiter"));
    int k;
    if (!d || !*d || lp__hf_utf8_check(d, strlen(d))) return lp__hf_bad(err, errlen, where, "needs \"delimiter\": one character");
    p->delim = lp__hf_utf8_get(d, 0, &k);
    if (d[k]) return lp__hf_bad(err, errlen, where, "needs \"delimiter\": one character");
  } else if (strcmp(type, "Split") == 0) {
    p->kind = LP_HF_P_SPLIT;
    char w2[200];
    snprintf(w2, sizeof(w2), "%s.pattern", where);
    int rc = lp__hf_pattern_load(json_object_get(o, "pattern"), &p->pattern, &p->pattern_len, &p->re, err, errlen, w2);
    if (rc) return rc;
    if (behavior(o, &p->behavior))
      return lp__hf_bad(err, errlen, where, "behavior must be Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous");
    p->invert = json_is_true(json_object_get(o, "invert"));
  } else if (strcmp(type, "Sequence") == 0) {
    p->kind = LP_HF_P_SEQ;
    return lp__hf_load_seq(o, "pretokenizers", where, sizeof(*p->seq), (void **)&p->seq, &p->nseq, lp__hf_pre_load,
                           err, errlen);
  } else {
    return lp__hf_bad(err, errlen, where, "type '%.100s' is not supported", type);
  }
  return 0;
}

void lp__hf_pre_free(lp__hf_pre_t *p) {
  for (size_t i = 0; i < p->nseq; i++) lp__hf_pre_free(&p->seq[i]);
  free(p->seq);
  free(p->pattern);
  if (p->re) pcre2_code_free(p->re);
  memset(p, 0, sizeof(*p));
}
