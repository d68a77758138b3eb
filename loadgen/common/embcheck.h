/* The load generator's reader of /v1/embeddings answers (OpenAI's list of
 * embeddings, float or base64): checks one answer against what was sent and
 * the emulator's --dims formula. A decoder of untrusted bytes: bounded, never
 * crashes, says what was wrong. */
#ifndef LP_EMBCHECK_H
#define LP_EMBCHECK_H

#include <stddef.h>
#include <stdint.h>

#include "lanepack/openai.h"

/* A vector's length at most: the proxy's own bound. */
#define LP_EMBCHECK_MAX_DIMS LP_OPENAI_MAX_DIMS

/* What a request sent and so what its answer must be. */
typedef struct lp_embcheck_want_s {
  const char *model;      /* the model asked for: the answer names it */
  size_t ninputs;         /* vectors expected, data[i].index == i */
  const int32_t *tokens;  /* every input's ids back to back (borrowed), or NULL:
                           * text whose ids are not known here */
  const uint32_t *lens;   /* ids per input (with tokens) */
  uint64_t ntokens;       /* the sum of lens: usage.prompt_tokens (with tokens) */
  unsigned dims;          /* floats per vector, 1..LP_EMBCHECK_MAX_DIMS */
  int base64;             /* the vectors come as base64 of little-endian float32 */
} lp_embcheck_want_t;

/* Checks body[0..len): {"object": "list", "data": [{"object": "embedding",
 * "index": i, "embedding": ...}], "model", "usage": {"prompt_tokens",
 * "total_tokens"}}. With ids, vector i must be the emulator's for input i
 * exactly (feature k of the last h of its ids) and prompt_tokens their count;
 * without, each vector must have the formula's form (v[0] an integer 0..999,
 * v[k] = v[0] + k/4) and prompt_tokens at least one per input. keys (may be
 * NULL; ninputs of them) gets each vector's v[0], by which a caller can check
 * that the same text always gets the same vector.
 * Returns 0, -EPROTO with err saying what differs, or -ENOMEM. */
int lp_embcheck_answer(const char *body, size_t len, const lp_embcheck_want_t *w, int32_t *keys, char *err,
                       size_t errlen);

/* Decodes base64 text s[0..n) (standard alphabet, '=' padding, no spaces)
 * into out (cap bytes). Returns the byte count, or -EPROTO (not base64),
 * -E2BIG (past cap). */
long lp_embcheck_base64(const char *s, size_t n, unsigned char *out, size_t cap);

#endif
