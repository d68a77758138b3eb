/* A growable byte buffer with fast appends of integers and integer arrays, the
 * writer side of the hot path: a rectangle of 32k token ids is written with one
 * pass and no allocation once the buffer has grown. */
#ifndef LANEPACK_BUF_H
#define LANEPACK_BUF_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct lp_buf_s {
  char *data;  /* owned; not NUL-terminated unless lp_buf_cstr() is called */
  size_t len;
  size_t cap;
  int oom;     /* set when an append failed for memory; later appends do nothing */
} lp_buf_t;

void lp_buf_init(lp_buf_t *b);
void lp_buf_free(lp_buf_t *b);
static inline void lp_buf_reset(lp_buf_t *b) { b->len = 0; b->oom = 0; }

/* Makes room for n more bytes. Returns 0 or -ENOMEM. */
int lp_buf_reserve(lp_buf_t *b, size_t n);
void lp_buf_append(lp_buf_t *b, const void *p, size_t n);
/* inline: the length of a literal is then known where it is written (strlen
 * per piece showed in the profile of building every answer and batch) */
static inline void lp_buf_puts(lp_buf_t *b, const char *s) { lp_buf_append(b, s, strlen(s)); }
void lp_buf_printf(lp_buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void lp_buf_i64(lp_buf_t *b, int64_t v);
void lp_buf_u64(lp_buf_t *b, uint64_t v);
/* Appends v[0..n) as a JSON array: "[1,2,3]". */
void lp_buf_i32_array(lp_buf_t *b, const int32_t *v, size_t n);
/* Appends v[0..n) joined by commas, no brackets: "1,2,3". */
void lp_buf_i32_list(lp_buf_t *b, const int32_t *v, size_t n);
/* Appends s as a JSON string with quotes, escaping what JSON requires; each
 * byte of s that is not part of well-formed UTF-8 becomes \ufffd, so that the
 * result is valid JSON whatever s holds. */
void lp_buf_json_str(lp_buf_t *b, const char *s, size_t n);
/* NUL-terminates (not counted in len) and returns data, or NULL after oom. */
const char *lp_buf_cstr(lp_buf_t *b);

/* Formats v in decimal into out (at least 21 bytes); returns the length. */
size_t lp_fmt_i64(char *out, int64_t v);

#endif
