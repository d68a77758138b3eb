/* libFuzzer: the backend-answer decoder on arbitrary bytes, for a fixed batch
 * layout: no crash, and an accepted answer yields in-bounds slices that are
 * themselves valid JSON values. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lanepack/jscan.h"
#include "lanepack/layout.h"
#include "lanepack/scatter.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static lp_layout_t l;
  static int ready;
  if (!ready) {
    static int32_t t[6] = {1, 2, 3, 4, 5, 6};
    lp_seq_ref_t s[3] = {{t, 2}, {t, 1}, {t, 3}};
    lp_place_t pl[3] = {{0, 0}, {0, 2}, {1, 1}};
    lp_layout_init(&l);
    if (lp_layout_build(&l, 2, 4, 0, pl, s, 3)) abort();
    ready = 1;
  }
  lp_scatter_t sc;
  lp_scatter_init(&sc);
  char err[128];
  if (lp_scatter_index(&sc, (const char *)data, size, &l, err, sizeof(err)) == 0) {
    for (size_t i = 0; i < l.nsegs; i++) {
      const char *start;
      size_t len;
      lp_scatter_slice(&sc, &l.segs[i], &start, &len);
      if (start < (const char *)data || start + len > (const char *)data + size) abort();
      /* per token the slice is the inside of an array; per segment a value:
       * wrapped in [ ] it must be one whole JSON value (the full scanner checks
       * what the fast integer path let through; jansson would refuse valid
       * integers past 64 bits) */
      char *wrapped = malloc(len + 3);
      wrapped[0] = '[';
      memcpy(wrapped + 1, start, len);
      wrapped[len + 1] = ']';
      const char *q = lp_jscan_skip(wrapped, wrapped + len + 2, LP_JSCAN_MAX_DEPTH);
      if (q != wrapped + len + 2) abort();
      free(wrapped);
    }
  }
  lp_scatter_free(&sc);
  return 0;
}
