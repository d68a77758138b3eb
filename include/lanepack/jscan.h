/* A small JSON scanner over raw bytes: skips values, compares keys, reads and
 * writes integer arrays without building a tree. Used where jansson's tree would
 * cost an allocation per element (token arrays, backend answers). */
#ifndef LANEPACK_JSCAN_H
#define LANEPACK_JSCAN_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define LP_JSCAN_MAX_DEPTH 64

/* Skips whitespace; returns the first other byte's position (maybe end). */
/* A byte's high bit set in the result where w's byte is not an ASCII digit
 * (little-endian: the lowest set byte is the first non-digit; borrows and
 * carries only run upward, past it). */
static inline uint64_t lp_jscan_nondigits8(uint64_t w) {
  uint64_t below = w - 0x3030303030303030ULL; /* high bit: < '0' or >= 0xb0 */
  uint64_t above = w + 0x4646464646464646ULL; /* high bit: > '9' (up to 0xb9) */
  return (below | above) & 0x8080808080808080ULL;
}

/* The end of the run of ASCII digits at p, eight bytes at a time. */
static inline const char *lp_jscan_digits_end(const char *p, const char *end) {
  while (end - p >= 8) {
    uint64_t w;
    memcpy(&w, p, 8);
    uint64_t nd = lp_jscan_nondigits8(w);
    if (nd) return p + __builtin_ctzll(nd) / 8;
    p += 8;
  }
  while (p < end && (unsigned)((unsigned char)*p - '0') < 10) p++;
  return p;
}

static inline const char *lp_jscan_ws(const char *p, const char *end) {
  /* most calls find no space at all: one compare decides */
  while (p < end && (unsigned char)*p <= ' ' &&
         (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
    p++;
  return p;
}

/* Skips one JSON value starting at p (no leading whitespace). Returns the byte
 * after it, or NULL when it is not valid JSON or nests deeper than max_depth. */
const char *lp_jscan_skip(const char *p, const char *end, int max_depth);

/* p points at a JSON string; sets *eq to whether its decoded text equals key
 * ("\u0069d" equals "id"). Returns the byte after it or NULL. */
const char *lp_jscan_key(const char *p, const char *end, const char *key, int *eq);

/* Reads a JSON array of integers at p (no leading whitespace) into out[0..cap),
 * without allocating: each value must be an integer in [min, max] (no fraction,
 * no exponent). Returns the byte after the array and sets *n, or NULL and sets
 * *err to LP_JSCAN_E_*; *n then counts the values read before the error. */
#define LP_JSCAN_E_SYNTAX (-1)   /* not an array of numbers, or malformed */
#define LP_JSCAN_E_NOT_INT (-2)  /* a value is not an integer (string, 1.5, 1e3, ...) */
#define LP_JSCAN_E_RANGE (-3)    /* a value is outside [min, max] */
#define LP_JSCAN_E_TOO_MANY (-4) /* more than cap values */
const char *lp_jscan_int_array(const char *p, const char *end, int32_t *out, size_t cap,
                               int64_t min, int64_t max, size_t *n, int *err);

/* p points at a JSON string; returns the byte after it, or NULL when it is not
 * valid JSON or holds \u0000 (as jansson refuses it: what this accepts, jansson
 * decodes to the same bytes). Sets *escaped to whether it holds any escape.
 * With out (room for the string's raw length, quotes included, plus 16: plain
 * text is copied sixteen bytes at a time), writes its decoded text there and
 * its length to *n. Plain text is scanned 16 (SSE2) or 8 bytes at a time. */
const char *lp_jscan_string(const char *p, const char *end, char *out, size_t *n, int *escaped);

/* The same decoding the string at p in place: its text is written from p + 1
 * on (it is never longer than its raw form) and its length set to *n.
 * Returns the byte after the string, or NULL (invalid as lp_jscan_string
 * says; the string's bytes are then undefined: callers that may need them
 * check it with lp_jscan_string first). */
char *lp_jscan_string_inplace(char *p, const char *end, size_t *n, int *escaped);

/* One escape a string's in-place decoding replaced: where its raw bytes were
 * and its text went (bytes from the string's first), and those raw bytes. */
typedef struct {
  uint32_t raw, dec;
  uint8_t raw_len, dec_len;
  char bytes[12]; /* the longest escape: a surrogate pair, \uXXXX\uXXXX */
} lp_jscan_esc_t;

/* What lp_jscan_string_undoable changed, so that lp_jscan_string_undo can put
 * the string back as it came. Start it zeroed; free e when done. */
typedef struct {
  lp_jscan_esc_t *e; /* owned (realloc) */
  size_t n, cap, max; /* max: the most escapes it may hold (0: one per 256 bytes from p to end, plus 64) */
  size_t dec;         /* the decoded bytes written when it stopped */
  int full;           /* stopped for want of room for one more escape (or memory) */
} lp_jscan_undo_t;

/* lp_jscan_string_inplace in one pass that can be undone: validating and
 * decoding at once (instead of lp_jscan_string, then in place), each escape
 * logged in u. NULL when the string is invalid or u->full (too many escapes
 * for u->max: it is then best validated apart); either way, and after a
 * success, lp_jscan_string_undo(p, u) gives the string back as it came. */
char *lp_jscan_string_undoable(char *p, const char *end, size_t *n, int *escaped, lp_jscan_undo_t *u);

/* Puts the string at p back as it was before lp_jscan_string_undoable(p, ...,
 * u) changed it (nothing to do where it held no escape). */
void lp_jscan_string_undo(char *p, const lp_jscan_undo_t *u);

/* Whether p[0..n) is only digits and commas: the text of an array that
 * lp_jscan_int_array read (between its brackets) is then exactly what
 * lp_buf_i32_array writes for its values, and can be copied instead. */
int lp_jscan_plain_ints(const char *p, size_t n);

/* The same allowing JSON whitespace too, and copying: p[0..n) without its
 * JSON whitespace (' ', \t, \n, \r) is written to out (room for n bytes,
 * not overlapping p; past what is kept its content is undefined) and its
 * length returned, or SIZE_MAX (out then undefined) when p holds any byte but
 * those, digits and commas. The text of an array that lp_jscan_int_array
 * read, so kept, is what lp_buf_i32_array writes for its values ("1, 2, 3",
 * the separator most JSON writers use, becomes "1,2,3"). */
size_t lp_jscan_compact_plain(const char *p, size_t n, char *out);

/* Whether the readers of integer arrays (lp_jscan_int_array, the backend
 * answer's index) take their 64-bytes-at-a-time paths (the default) or only
 * the byte-at-a-time reference loops: tests compare the two. */
int lp_jscan_fast(void);
void lp_jscan_set_fast(int on);

#endif
