/* libFuzzer: the traceparent parser on arbitrary bytes: accepted values have
 * non-zero ids and write back as a valid version-00 value of the same ids. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lanepack/trace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  lp_trace_t t, u;
  if (lp_trace_parse((const char *)data, size, &t)) return 0;
  char out[LP_TRACEPARENT_SIZE];
  lp_trace_format(t.trace_id, t.parent_id, t.flags, out);
  if (strlen(out) != LP_TRACEPARENT_LEN || lp_trace_parse(out, strlen(out), &u) ||
      memcmp(&t, &u, sizeof(t)) != 0)
    abort();
  return 0;
}
