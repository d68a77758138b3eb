/* libFuzzer: the token-array reader against jansson. On every input they must
 * agree on whether it is an array of integers in range, and on its values;
 * the proxy's own range (four values at a time) gives the same values, and
 * the array's text kept compacted is what the batch writer writes for them. */
#include <jansson.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lanepack/jscan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* jansson reads a NUL outside strings as the end of the text; we refuse it */
  if (memchr(data, 0, size)) return 0;
  const char *end = (const char *)data + size;
  const char *p = lp_jscan_ws((const char *)data, end);
  int32_t out[256];
  size_t n;
  int err;
  const char *q = lp_jscan_int_array(p, end, out, 256, 0, 1000000, &n, &err);
  int ours = q && lp_jscan_ws(q, end) == end;
  json_error_t e;
  json_t *j = json_loadb((const char *)data, size, JSON_DECODE_ANY, &e);
  int theirs = j && json_is_array(j) && json_array_size(j) <= 256;
  for (size_t i = 0; theirs && i < json_array_size(j); i++) {
    json_t *v = json_array_get(j, i);
    theirs = json_is_integer(v) && json_integer_value(v) >= 0 && json_integer_value(v) <= 1000000;
  }
  /* jansson takes NUL bytes in strings only with a flag, and "-0" as integer 0;
   * both readers must still agree on arrays of plain integers */
  if (ours != theirs) abort();
  if (ours) {
    if (n != json_array_size(j)) abort();
    for (size_t i = 0; i < n; i++)
      if (out[i] != json_integer_value(json_array_get(j, i))) abort();
    int32_t wide[256];
    size_t wn;
    if (lp_jscan_int_array(p, end, wide, 256, 0, INT32_MAX, &wn, &err) != q || wn != n ||
        memcmp(wide, out, n * sizeof(int32_t)) != 0)
      abort();
    size_t tl = (size_t)(q - p - 2);
    char *kept = malloc(tl ? tl : 1), want[256 * 8 + 1];
    size_t kl = lp_jscan_compact_plain(p + 1, tl, kept), wl = 0;
    for (size_t i = 0; i < n; i++) wl += (size_t)snprintf(want + wl, sizeof(want) - wl, "%s%d", i ? "," : "", out[i]);
    if (kl != SIZE_MAX && n && (kl != wl || memcmp(kept, want, wl) != 0)) abort();
    free(kept);
  }
  json_decref(j);
  return 0;
}
