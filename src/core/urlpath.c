/* Percent-decoding of one URL path segment: no I/O, no allocation. */
#include "lanepack/urlpath.h"

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

long lp_urlpath_decode(const char *in, size_t n, char *out, size_t cap) {
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    int c = (unsigned char)in[i];
    if (c == '%') {
      if (i + 2 >= n) return -1; /* two hex digits must follow */
      int a = hexval(in[i + 1]), b = hexval(in[i + 2]);
      if (a < 0 || b < 0) return -1;
      c = a << 4 | b;
      i += 2;
    }
    if (c == 0 || k + 1 >= cap) return -1;
    out[k++] = (char)c;
  }
  if (!cap) return -1;
  out[k] = '\0';
  return (long)k;
}
