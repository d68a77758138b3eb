/* Random mutations of a document for the differential tests against jansson:
 * one to three bytes replaced, removed or inserted from an alphabet; and
 * random pieces of JSON strings' texts. */
#ifndef LANEPACK_TESTS_MUTATE_H
#define LANEPACK_TESTS_MUTATE_H

#include <string.h>

#include "lanepack/rng.h"

/* buf holds the NUL-terminated document of *n bytes (room for cap). */
static inline void lp_test_mutate(lp_rng_t *rng, char *buf, size_t *n, size_t cap, const char *alphabet, size_t alen) {
  int muts = 1 + (int)lp_rng_below(rng, 3);
  for (int m = 0; m < muts; m++) {
    size_t at = (size_t)lp_rng_below(rng, *n);
    int op = (int)lp_rng_below(rng, 3);
    char c = alphabet[lp_rng_below(rng, alen)];
    if (op == 0) buf[at] = c;
    else if (op == 1 && *n > 1) { memmove(buf + at, buf + at + 1, *n - at); (*n)--; }
    else if (*n + 2 < cap) { memmove(buf + at + 1, buf + at, *n - at + 1); buf[at] = c; (*n)++; }
  }
}

/* Appends one random piece of a JSON string's text to b at *n: plain runs
 * of every length around the scan's 8-, 16- and 64-byte steps, escapes (so
 * that in place the text moves down by 1 to 8 bytes a time), raw UTF-8, and,
 * when bad, now and then something invalid. Escapes and UTF-8 are one piece
 * in 3, or one in 40 when sparse (prose: few enough for the undo log of
 * lp_jscan_string_undoable). */
static inline void lp_test_put_piece(lp_rng_t *rng, char *b, size_t *n, int bad, int sparse) {
  static const char *const escapes[] = {"\\n", "\\\"", "\\\\", "\\/", "\\t", "\\u00e9", "\\u20ac", "\\ud83d\\ude00",
                                        "\\u0041", "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80"};
  static const char *const invalid[] = {"\\x", "\\u12", "\\ud800", "\\udc00", "\\ud83d\\u0041", "\\u0000", "\x01",
                                        "\xc0\x80", "\xed\xa0\x80", "\xe2\x82", "\\"};
  uint64_t r = lp_rng_next(rng);
  if (bad && r % 4000 == 0) {
    const char *e = invalid[(r >> 12) % (sizeof(invalid) / sizeof(invalid[0]))];
    memcpy(b + *n, e, strlen(e));
    *n += strlen(e);
  } else if (r % (sparse ? 40 : 3) == 0) {
    const char *e = escapes[(r >> 12) % (sizeof(escapes) / sizeof(escapes[0]))];
    memcpy(b + *n, e, strlen(e));
    *n += strlen(e);
  } else {
    size_t k = (size_t)((r >> 20) % (sparse ? 140 : 40));
    for (size_t i = 0; i < k; i++) b[(*n)++] = (char)('a' + (r >> (i % 40)) % 26);
  }
}

#endif
