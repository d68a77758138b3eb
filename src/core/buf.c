/* The growable byte buffer and the fast integer writer. */
#include "lanepack/buf.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void lp_buf_init(lp_buf_t *b) { memset(b, 0, sizeof(*b)); }

void lp_buf_free(lp_buf_t *b) {
  free(b->data);
  memset(b, 0, sizeof(*b));
}

int lp_buf_reserve(lp_buf_t *b, size_t n) {
  if (b->oom) return -ENOMEM;
  if (b->cap - b->len > n) return 0; /* keeps one byte for lp_buf_cstr */
  size_t c = b->cap ? b->cap : 256;
  while (c - b->len <= n) c *= 2;
  char *d = realloc(b->data, c);
  if (d == NULL) {
    b->oom = 1;
    return -ENOMEM;
  }
  b->data = d;
  b->cap = c;
  return 0;
}

void lp_buf_append(lp_buf_t *b, const void *p, size_t n) {
  if (n == 0 || lp_buf_reserve(b, n)) return;
  memcpy(b->data + b->len, p, n);
  b->len += n;
}


void lp_buf_printf(lp_buf_t *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0 || lp_buf_reserve(b, (size_t)n + 1)) return;
  va_start(ap, fmt);
  vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
}

/* Two digits at a time from a table: the usual trick of fast integer writers. */
static const char digits2[] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

/* Exactly four and eight digits, zero-padded. */
static inline void put4(char *o, uint32_t v) {
  memcpy(o, digits2 + 2 * (v / 100), 2);
  memcpy(o + 2, digits2 + 2 * (v % 100), 2);
}

static inline void put8(char *o, uint32_t v) {
  put4(o, v / 10000);
  put4(o + 4, v % 10000);
}

/* 1 to 4 digits of v < 10000. */
static inline char *put_small(char *o, uint32_t v) {
  if (v < 100) {
    if (v < 10) {
      *o = (char)('0' + v);
      return o + 1;
    }
    memcpy(o, digits2 + 2 * v, 2);
    return o + 2;
  }
  if (v < 1000) {
    *o = (char)('0' + v / 100);
    memcpy(o + 1, digits2 + 2 * (v % 100), 2);
    return o + 3;
  }
  put4(o, v);
  return o + 4;
}

/* Writes v in place: split into groups of four and eight digits, each group a
 * couple of table copies (token, segment and position ids and token outputs
 * go through here: the hottest writer). */
static inline char *put_u32(char *o, uint32_t v) {
  if (v < 10000) return put_small(o, v);
  if (v < 100000000) {
    o = put_small(o, v / 10000);
    put4(o, v % 10000);
    return o + 4;
  }
  o = put_small(o, v / 100000000);
  put8(o, v % 100000000);
  return o + 8;
}

/* Past 32 bits, one 64-bit division splits off eight digits at a time (a
 * division per digit pair there costs several times a 32-bit one). */
static inline size_t fmt_u64(char *out, uint64_t v) {
  if (v <= UINT32_MAX) return (size_t)(put_u32(out, (uint32_t)v) - out);
  char *o = out;
  if (v >= 10000000000000000ull) {
    o = put_u32(o, (uint32_t)(v / 10000000000000000ull));
    v %= 10000000000000000ull;
    put8(o, (uint32_t)(v / 100000000));
    o += 8;
  } else {
    o = put_u32(o, (uint32_t)(v / 100000000));
  }
  put8(o, (uint32_t)(v % 100000000));
  return (size_t)(o + 8 - out);
}

size_t lp_fmt_i64(char *out, int64_t v) {
  if (v < 0) {
    out[0] = '-';
    return 1 + fmt_u64(out + 1, (uint64_t)0 - (uint64_t)v);
  }
  return fmt_u64(out, (uint64_t)v);
}

void lp_buf_i64(lp_buf_t *b, int64_t v) {
  if (lp_buf_reserve(b, 21)) return;
  b->len += lp_fmt_i64(b->data + b->len, v);
}

void lp_buf_u64(lp_buf_t *b, uint64_t v) {
  if (lp_buf_reserve(b, 21)) return;
  b->len += fmt_u64(b->data + b->len, v);
}

void lp_buf_i32_array(lp_buf_t *b, const int32_t *v, size_t n) {
  lp_buf_append(b, "[", 1);
  lp_buf_i32_list(b, v, n);
  lp_buf_append(b, "]", 1);
}

void lp_buf_i32_list(lp_buf_t *b, const int32_t *v, size_t n) {
  /* at most 11 digits and sign, plus a comma, per value */
  if (lp_buf_reserve(b, n * 12 + 2)) return;
  char *o = b->data + b->len;
  for (size_t i = 0; i < n; i++) {
    if (i) *o++ = ',';
    int32_t x = v[i];
    if (x >= 0) {
      o = put_u32(o, (uint32_t)x);
    } else {
      *o++ = '-';
      o = put_u32(o, (uint32_t)0 - (uint32_t)x);
    }
  }
  b->len = (size_t)(o - b->data);
}

/* The length of the well-formed UTF-8 sequence at s[0..n) (RFC 3629: no
 * overlong form, no surrogate, nothing past U+10FFFF), or 0 if there is none. */
static size_t utf8_len(const unsigned char *s, size_t n) {
  unsigned char c = s[0];
  size_t k;
  unsigned lo = 0x80, hi = 0xbf; /* the second byte's range */
  if (c >= 0xc2 && c <= 0xdf) k = 2;
  else if (c >= 0xe0 && c <= 0xef) {
    k = 3;
    if (c == 0xe0) lo = 0xa0;
    if (c == 0xed) hi = 0x9f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    k = 4;
    if (c == 0xf0) lo = 0x90;
    if (c == 0xf4) hi = 0x8f;
  } else {
    return 0;
  }
  if (n < k || s[1] < lo || s[1] > hi) return 0;
  for (size_t i = 2; i < k; i++)
    if ((s[i] & 0xc0) != 0x80) return 0;
  return k;
}

void lp_buf_json_str(lp_buf_t *b, const char *s, size_t n) {
  if (lp_buf_reserve(b, n * 6 + 2)) return;
  char *o = b->data + b->len;
  *o++ = '"';
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c == '"' || c == '\\') {
      *o++ = '\\';
      *o++ = (char)c;
    } else if (c < 0x20) {
      static const char hex[] = "0123456789abcdef";
      memcpy(o, "\\u00", 4);
      o[4] = hex[c >> 4];
      o[5] = hex[c & 15];
      o += 6;
    } else if (c < 0x80) {
      *o++ = (char)c;
    } else {
      /* bytes from clients (a path, a header) need not be UTF-8: each byte
       * of a malformed sequence becomes U+FFFD, so the output stays JSON */
      size_t k = utf8_len((const unsigned char *)s + i, n - i);
      if (k == 0) {
        memcpy(o, "\\ufffd", 6);
        o += 6;
      } else {
        memcpy(o, s + i, k);
        o += k;
        i += k - 1;
      }
    }
  }
  *o++ = '"';
  b->len = (size_t)(o - b->data);
}

const char *lp_buf_cstr(lp_buf_t *b) {
  if (lp_buf_reserve(b, 1)) return NULL;
  b->data[b->len] = '\0';
  return b->data;
}
