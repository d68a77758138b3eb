/* A JSON scanner over raw bytes: validates and skips values without building
 * anything, so large backend answers are sliced, not parsed into trees. */
#include "lanepack/jscan.h"

#include <string.h>

const char *lp_jscan_ws(const char *p, const char *end) {
  while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
  return p;
}

static const char *skip_string(const char *p, const char *end) {
  p++; /* opening quote */
  while (p < end) {
    unsigned char c = (unsigned char)*p;
    if (c == '"') return p + 1;
    if (c < 0x20) return NULL;
    if (c == '\\') {
      if (++p >= end) return NULL;
      switch (*p) {
        case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
          p++;
          break;
        case 'u':
          for (int i = 1; i <= 4; i++) {
            char h = p + i < end ? p[i] : 0;
            if (!((h >= '0' && h <= '9') || (h >= 'a' && h <= 'f') || (h >= 'A' && h <= 'F')))
              return NULL;
          }
          p += 5;
          break;
        default:
          return NULL;
      }
    } else {
      p++;
    }
  }
  return NULL;
}

static int is_digit(const char *p, const char *end) { return p < end && *p >= '0' && *p <= '9'; }

static const char *skip_number(const char *p, const char *end) {
  if (p < end && *p == '-') p++;
  if (!is_digit(p, end)) return NULL;
  if (*p == '0') p++;
  else
    while (is_digit(p, end)) p++;
  if (p < end && *p == '.') {
    p++;
    if (!is_digit(p, end)) return NULL;
    while (is_digit(p, end)) p++;
  }
  if (p < end && (*p == 'e' || *p == 'E')) {
    p++;
    if (p < end && (*p == '+' || *p == '-')) p++;
    if (!is_digit(p, end)) return NULL;
    while (is_digit(p, end)) p++;
  }
  return p;
}

static const char *skip_literal(const char *p, const char *end, const char *lit) {
  size_t n = strlen(lit);
  if ((size_t)(end - p) < n || memcmp(p, lit, n) != 0) return NULL;
  return p + n;
}

const char *lp_jscan_skip(const char *p, const char *end, int max_depth) {
  if (p >= end) return NULL;
  switch (*p) {
    case '"': return skip_string(p, end);
    case 't': return skip_literal(p, end, "true");
    case 'f': return skip_literal(p, end, "false");
    case 'n': return skip_literal(p, end, "null");
    case '[': case '{': {
      if (max_depth <= 0) return NULL;
      int obj = *p == '{';
      char close = obj ? '}' : ']';
      p = lp_jscan_ws(p + 1, end);
      if (p < end && *p == close) return p + 1;
      for (;;) {
        if (obj) {
          if (p >= end || *p != '"' || (p = skip_string(p, end)) == NULL) return NULL;
          p = lp_jscan_ws(p, end);
          if (p >= end || *p != ':') return NULL;
          p = lp_jscan_ws(p + 1, end);
        }
        if ((p = lp_jscan_skip(p, end, max_depth - 1)) == NULL) return NULL;
        p = lp_jscan_ws(p, end);
        if (p >= end) return NULL;
        if (*p == close) return p + 1;
        if (*p != ',') return NULL;
        p = lp_jscan_ws(p + 1, end);
      }
    }
    default: return skip_number(p, end);
  }
}

const char *lp_jscan_key(const char *p, const char *end, const char *key, int *eq) {
  const char *after = skip_string(p, end);
  *eq = 0;
  if (after == NULL) return NULL;
  size_t n = strlen(key);
  *eq = (size_t)(after - p - 2) == n && memcmp(p + 1, key, n) == 0;
  return after;
}
