/* libFuzzer: the load generator's reader of /v1/embeddings answers on
 * arbitrary bytes: checked or refused with a reason (never a crash, leak or
 * read past the body), and the base64 decoder within its bounds. The first
 * byte picks what was sent: dims, float or base64, ids known or not. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "embcheck.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  uint8_t pick = data[0];
  const char *body = (const char *)data + 1;
  size_t len = size - 1;
  static const int32_t tokens[] = {5, 6, 7, 1, 2, 42};
  static const uint32_t lens[] = {3, 2, 1};
  lp_embcheck_want_t w = {.model = "m", .ninputs = 1 + (pick >> 6) % 3, .tokens = pick & 1 ? tokens : NULL,
                          .lens = lens, .dims = 1 + (pick >> 2 & 15), .base64 = pick >> 1 & 1};
  w.ntokens = 0;
  for (size_t i = 0; i < w.ninputs; i++) w.ntokens += lens[i];
  int32_t keys[3];
  char err[256] = "";
  int rc = lp_embcheck_answer(body, len, &w, keys, err, sizeof(err));
  if (rc == -EPROTO && !err[0]) abort(); /* a refusal says why */
  if (rc != 0 && rc != -EPROTO && rc != -ENOMEM) abort();
  if (rc == 0)
    for (size_t i = 0; i < w.ninputs; i++)
      if (keys[i] < 0 || keys[i] > 999) abort();
  unsigned char out[48];
  long n = lp_embcheck_base64(body, len, out, sizeof(out));
  if (n > (long)sizeof(out) || (n >= 0 && (size_t)n > len / 4 * 3)) abort();
  return 0;
}
