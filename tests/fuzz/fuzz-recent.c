/* libFuzzer: the live view's ?n= parser on arbitrary bytes (accepted: 1 to
 * the ring's capacity), and the ring driven by the same bytes (batches of any
 * segment count, names of any bytes, answers for any ticket) rendered as JSON
 * that jansson reads, with no more batches than asked or held. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lanepack/recent.h"

/* Segments one input's batch may have: past the ring's store, so cutting is
 * reached, and small enough to run fast. */
#define FUZZ_MAX_SEGS (LP_RECENT_SEGMENTS + 64)

static lp_segment_t segs[FUZZ_MAX_SEGS];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint32_t n;
  if (lp_recent_query_n((const char *)data, size, &n) == 0 && (n < 1 || n > LP_RECENT_BATCHES)) abort();
  if (lp_recent_query_n((const char *)data, size, &n)) n = LP_RECENT_BATCHES;
  lp_recent_t *r = lp_recent_new();
  if (!r) return 0;
  char name[32];
  uint64_t now = 1, ticket = 0;
  for (size_t i = 0; i + 4 <= size; i += 4) {
    const uint8_t *p = data + i;
    now += p[1];
    if (p[0] & 1) {
      ticket = lp_recent_sent(r, &(lp_recent_sent_t){0}); /* all unknown */
    } else if (p[0] & 2) {
      lp_recent_answered(r, ticket - (p[1] & 7), (p[0] & 4) ? "ok" : "garbled", p[2], p[3], now);
    } else {
      size_t k = ((size_t)p[2] << 6 | p[3]) % FUZZ_MAX_SEGS;
      for (size_t j = 0; j < k; j++)
        segs[j] = (lp_segment_t){.lane = (uint32_t)j & 3, .offset = (uint32_t)j, .length = p[3]};
      size_t nl = size - i < sizeof(name) - 1 ? size - i : sizeof(name) - 1;
      memcpy(name, p, nl);
      name[nl] = '\0';
      uint64_t busy[4] = {now + p[2], 0, now, now + p[3]};
      lp_recent_sent_t s = {.id = i, .model = name, .backend = name, .lanes = p[0], .bucket = p[1],
                            .segs = segs, .nsegs = k, .reason = name, .sent_ns = now, .expect_ns = now + p[3],
                            .cost_ns = p[2], .device_free_ns = busy, .ndevice_free = p[3] % 4};
      ticket = lp_recent_sent(r, &s);
    }
  }
  lp_buf_t b;
  lp_buf_init(&b);
  lp_recent_render(r, n, now, &b);
  json_error_t err;
  json_t *j = b.oom ? NULL : json_loadb(b.data, b.len, 0, &err);
  if (!b.oom && !j) abort();
  size_t got = json_array_size(json_object_get(j, "batches"));
  if (got > n || got > lp_recent_count(r)) abort();
  json_decref(j);
  lp_buf_free(&b);
  lp_recent_free(r);
  return 0;
}
