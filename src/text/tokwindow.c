/* Tokenizing only what is kept (lanepack/tokwindow.h): a window of the text
 * cut at a space (else at a character's start), grown until its ids reach past
 * what is kept by LP_TOKW_MARGIN, so that a 4 MiB text with truncation costs
 * what its kept tokens cost. Runs on the tokenizer workers. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lanepack/tokwindow.h"

/* The most bytes a UTF-8 character takes: a cut looks back (or on) no further
 * for its start (invalid text has none: cut where it is). */
#define UTF8_MAX 4

static int is_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

static int continuation(unsigned char c) { return (c & 0xC0) == 0x80; }

/* Where a prefix of about want bytes ends: before a space at most
 * LP_TOKW_SCAN bytes back, else at a character's start. */
static size_t prefix_end(const char *s, size_t len, size_t want) {
  if (want >= len) return len;
  for (size_t i = want, n = 0; i > 0 && n < LP_TOKW_SCAN; i--, n++)
    if (is_space((unsigned char)s[i])) return i;
  size_t i = want;
  for (int n = 0; i > 0 && n < UTF8_MAX && continuation((unsigned char)s[i]); n++) i--;
  return i;
}

/* Where a suffix of about want bytes starts: at a space at most LP_TOKW_SCAN
 * bytes on, else at a character's start. */
static size_t suffix_start(const char *s, size_t len, size_t want) {
  if (want >= len) return 0;
  size_t at = len - want;
  for (size_t i = at; i < len && i - at < LP_TOKW_SCAN; i++)
    if (is_space((unsigned char)s[i])) return i;
  size_t i = at;
  for (int n = 0; i < len && n < UTF8_MAX && continuation((unsigned char)s[i]); n++) i++;
  return i;
}

static int grow(int32_t **ids, size_t *cap, size_t n) {
  if (n <= *cap) return 0;
  int32_t *p = realloc(*ids, n * sizeof(*p));
  if (!p) return -ENOMEM;
  *ids = p;
  *cap = n;
  return 0;
}

/* lp_tok_encode_plain (plain) or lp_tok_encode_fit (max > 0) into *ids,
 * grown to hold them all. */
static long encode(const lp_tok_t *t, const char *s, size_t n, size_t max, int left, int32_t **ids, size_t *cap) {
  for (int tries = 0; tries < 2; tries++) {
    long k = max ? lp_tok_encode_fit(t, s, n, max, left, *ids, *cap) : lp_tok_encode_plain(t, s, n, *ids, *cap);
    if (k < 0 || (size_t)k <= *cap) return k;
    if (grow(ids, cap, (size_t)k)) return -ENOMEM;
  }
  return -EINVAL; /* the same text gave more ids the second time */
}

/* Whether a text of len bytes needs no window for need ids: the first
 * window would hold it whole. */
static int short_text(size_t len, size_t need) { return len / LP_TOKW_BYTES_PER_TOKEN <= need + LP_TOKW_MARGIN; }

/* The plain ids of the shortest window tried (a prefix, a suffix when left)
 * whose ids reach need + LP_TOKW_MARGIN: their count into *ids, the window
 * [*a, *b), *read the bytes tokenized. When the next window would be the
 * whole text, nothing more is tokenized here: 0 with [*a, *b) the whole
 * text, for the caller to tokenize once in its own form (a text of few ids,
 * a run of characters the model does not know, costs one pass, not two). */
static long window(const lp_tok_t *t, const char *text, size_t len, size_t need, int left, int32_t **ids,
                   size_t *cap, size_t *a, size_t *b, size_t *read) {
  size_t want = (need + LP_TOKW_MARGIN) * LP_TOKW_BYTES_PER_TOKEN;
  for (;;) {
    *a = left ? suffix_start(text, len, want) : 0;
    *b = left ? len : prefix_end(text, len, want);
    if (*a == 0 && *b == len) return 0;
    long n = encode(t, text + *a, *b - *a, 0, 0, ids, cap);
    if (n < 0) return n;
    *read += *b - *a;
    if ((size_t)n >= need + LP_TOKW_MARGIN) return n;
    /* at least double; more when the bytes per token seen say so (a quarter
     * over, so the next try is usually the last) */
    size_t next = want * 2;
    if (n > 0) {
      size_t est = (*b - *a) / (size_t)n * (need + LP_TOKW_MARGIN) / 4 * 5;
      if (est > next) next = est;
    }
    want = next;
  }
}

long lp_tokw_fit(const lp_tok_t *t, const char *text, size_t len, size_t max, int left, int32_t **ids,
                 size_t *cap, size_t *read) {
  size_t got = 0, a = 0, b = len;
  if (!max) return -E2BIG;
  if (!short_text(len, max)) {
    long n = window(t, text, len, max, left, ids, cap, &a, &b, &got);
    if (n < 0) return n;
    if (n > 0) {
      /* the window's first (last) ids past the margin are the whole text's:
       * the kept ones, with the options applied after the cut as for the
       * whole, from the ids the window gave (not tokenized twice) */
      if (grow(ids, cap, max)) return -ENOMEM;
      if (read) *read = got;
      return lp_tok_fit_ids(t, *ids, (size_t)n, max, left, *ids, *cap);
    }
  }
  /* the whole text, once */
  long k = encode(t, text + a, b - a, max, left, ids, cap);
  if (read) *read = got + (b - a);
  return k;
}

long lp_tokw_plain(const lp_tok_t *t, const char *text, size_t len, size_t keep, int left, int32_t **ids,
                   size_t *cap, size_t *read) {
  size_t got = 0, a = 0, b = len;
  long n = short_text(len, keep) ? 0 : window(t, text, len, keep, left, ids, cap, &a, &b, &got);
  if (n == 0 && a == 0 && b == len) { /* the whole text */
    n = encode(t, text, len, 0, 0, ids, cap);
    got += len;
  }
  if (read) *read = got;
  if (n < 0 || (size_t)n <= keep) return n;
  if (left) memmove(*ids, *ids + (size_t)n - keep, keep * sizeof(**ids));
  return (long)keep;
}

int lp_tokw_over(const lp_tok_t *t, const char *text, size_t len, size_t limit, long *at_least) {
  *at_least = 0;
  if (short_text(len, limit + 1)) return 0;
  int32_t *ids = NULL; /* owned here */
  size_t cap = 0, a, b, read = 0;
  long n = window(t, text, len, limit + 1, 0, &ids, &cap, &a, &b, &read);
  free(ids);
  if (n < 0) return (int)n;
  if (a == 0 && b == len) return 0; /* the whole text: the caller counts it */
  /* the window's first n - margin ids are the whole text's */
  *at_least = n - LP_TOKW_MARGIN;
  return *at_least > (long)limit;
}
