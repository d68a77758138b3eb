/* libFuzzer: the traceparent parser on arbitrary bytes: accepted values have
 * non-zero ids and write back as a valid version-00 value of the same ids; the
 * tracestate checker on the same bytes: what it keeps fits, is valid, and is
 * kept again unchanged. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lanepack/trace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char st[LP_TRACESTATE_SIZE], again[LP_TRACESTATE_SIZE];
  int n = lp_trace_state_clean((const char *)data, size, st);
  if (n > LP_TRACESTATE_MAX) abort();
  if (n >= 0 && (strlen(st) != (size_t)n || lp_trace_state_clean(st, (size_t)n, again) != n ||
                 memcmp(st, again, (size_t)n) != 0))
    abort();
  lp_trace_t t, u;
  if (lp_trace_parse((const char *)data, size, &t)) return 0;
  char out[LP_TRACEPARENT_SIZE];
  lp_trace_format(t.trace_id, t.parent_id, t.flags, out);
  if (strlen(out) != LP_TRACEPARENT_LEN || lp_trace_parse(out, strlen(out), &u) ||
      memcmp(&t, &u, sizeof(t)) != 0)
    abort();
  return 0;
}
