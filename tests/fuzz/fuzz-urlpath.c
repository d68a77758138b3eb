/* libFuzzer: the path-segment percent-decoder on arbitrary bytes and room:
 * what it accepts fits with its NUL, holds no NUL, is never longer than the
 * input, and encoding it back (every byte as %XX) decodes to the same bytes. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lanepack/urlpath.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  size_t cap = data[0]; /* the room, 0-255, from the first byte */
  const char *in = (const char *)data + 1;
  size_t n = size - 1;
  char *out = malloc(cap ? cap : 1);
  if (!out) return 0;
  long k = lp_urlpath_decode(in, n, out, cap);
  if (k >= 0) {
    if ((size_t)k >= cap || (size_t)k > n || strlen(out) != (size_t)k) abort();
    char *enc = malloc((size_t)k * 3 + 1), *again = malloc((size_t)k + 1);
    if (enc && again) {
      for (long i = 0; i < k; i++) snprintf(enc + 3 * i, 4, "%%%02X", (unsigned char)out[i]);
      if (lp_urlpath_decode(enc, (size_t)k * 3, again, (size_t)k + 1) != k || memcmp(again, out, (size_t)k) != 0)
        abort();
    }
    free(enc);
    free(again);
  }
  free(out);
  return 0;
}
