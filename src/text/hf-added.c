/* tokenizer.json's added tokens, found in the text as the library's
 * AddedVocabulary finds them: leftmost-longest matches, a single_word one
 * only between non-word characters, lstrip/rstrip taking the whitespace
 * beside it. Checked only where a content's first byte stands. */
#include <errno.h>
#include <string.h>

#include "hf.h"

/* The last character before s[i] / the first at s[i]: 0 when none. */
static uint32_t char_before(const char *s, size_t i) {
  if (i == 0) return 0;
  size_t p = i - 1;
  while (p > 0 && ((unsigned char)s[p] & 0xC0) == 0x80) p--;
  int k;
  return lp__hf_utf8_get(s, p, &k);
}

int lp__hf_added_find(const lp__hf_addedset_t *a, int normalized, const char *s, size_t n, lp__hf_split_t **sp,
                      size_t *nsp, size_t *cap) {
  const uint8_t *first = normalized ? a->first_norm : a->first_raw;
  size_t last = 0; /* the end of the last split made */
  for (size_t i = 0; i < n;) {
    if (!first[(unsigned char)s[i]]) {
      i++;
      continue;
    }
    /* the longest content matching here (leftmost first, then longest) */
    const lp__hf_added_t *best = NULL;
    for (size_t k = 0; k < a->ntok; k++) {
      const lp__hf_added_t *t = &a->tok[k];
      if (t->normalized != normalized || t->len == 0 || t->len > n - i || (best && t->len <= best->len)) continue;
      if (memcmp(s + i, t->content, t->len) == 0) best = t;
    }
    if (!best) {
      i++;
      continue;
    }
    size_t start = i, stop = i + best->len;
    if (best->single_word) {
      uint32_t before = char_before(s, start);
      int k;
      uint32_t after = stop < n ? lp__hf_utf8_get(s, stop, &k) : 0;
      if ((start > 0 && lp__hf_is_word(before)) || (stop < n && lp__hf_is_word(after))) {
        i = stop; /* the library's matcher goes on after the match it refused */
        continue;
      }
    }
    if (best->lstrip) {
      size_t ns = start;
      while (ns > last) {
        size_t p = ns - 1;
        while (p > 0 && ((unsigned char)s[p] & 0xC0) == 0x80) p--;
        int k;
        if (!lp__hf_is_whitespace(lp__hf_utf8_get(s, p, &k))) break;
        ns = p;
      }
      start = ns;
    }
    if (best->rstrip) {
      while (stop < n) {
        int k;
        if (!lp__hf_is_whitespace(lp__hf_utf8_get(s, stop, &k))) break;
        stop += (size_t)k;
      }
    }
    if (last < start && lp__hf_split_push(sp, nsp, cap, (uint32_t)last, (uint32_t)(start - last), -1)) return -ENOMEM;
    if (lp__hf_split_push(sp, nsp, cap, (uint32_t)start, (uint32_t)(stop - start), best->id)) return -ENOMEM;
    last = i = stop;
  }
  if (last < n && lp__hf_split_push(sp, nsp, cap, (uint32_t)last, (uint32_t)(n - last), -1)) return -ENOMEM;
  return 0;
}
