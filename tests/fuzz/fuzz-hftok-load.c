/* libFuzzer: the tokenizer.json loader on any file. It loads or says why,
 * never crashes or leaks; what loads then encodes a few texts (single, pair,
 * with and without special tokens) with every offset inside its text and
 * every id named, and decodes those ids and the input's own bytes as ids
 * into valid UTF-8 of the length it said. */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hf.h"

static void decode(const lp__hf_t *h, const int32_t *ids, size_t n, int skip) {
  long k = lp__hf_decode(h, ids, n, skip, NULL, 0);
  if (k < 0) return;
  char *s = malloc((size_t)k + 1);
  if (!s) return;
  if (lp__hf_decode(h, ids, n, skip, s, (size_t)k) != k || lp__hf_utf8_check(s, (size_t)k)) abort();
  free(s);
}

static void check(const lp__hf_t *h, const lp__hf_enc_t *e, size_t la, size_t lb) {
  int32_t ids[64];
  for (size_t i = 0; i < e->n; i++) {
    const lp__hf_token_t *t = &e->t[i];
    if (t->a0 > t->a1 || t->a1 > (la > lb ? la : lb) || t->id < 0) abort();
    if (i < 64) ids[i] = t->id;
  }
  decode(h, ids, e->n < 64 ? e->n : 64, (int)(e->n & 1));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  json_error_t je;
  json_t *root = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, &je);
  if (!root) return 0;
  char err[256] = "";
  lp__hf_t *h = lp__hf_load_json(root, err, sizeof(err));
  json_decref(root);
  if (!h) {
    if (!err[0]) abort(); /* a refusal says why */
    return 0;
  }
  static const char *const texts[] = {"", "Hello, world! ", "  café 北京 [CLS] <s> ▁a</s>\r\n", "x\xcc\x81\xe2\x80\x8d\xf0\x9f\x98\x80 12345"};
  lp__hf_enc_t e = {0};
  for (size_t i = 0; i < 4; i++)
    for (int sp = 0; sp < 2; sp++) {
      const char *b = texts[(i + 1) % 4];
      if (lp__hf_encode(h, texts[i], strlen(texts[i]), NULL, 0, sp, &e) == 0) check(h, &e, strlen(texts[i]), 0);
      if (lp__hf_encode(h, texts[i], strlen(texts[i]), b, strlen(b), sp, &e) == 0) check(h, &e, strlen(texts[i]), strlen(b));
    }
  int32_t ids[64]; /* the file's bytes as ids: pieces in any order, any count */
  size_t n = size < 64 ? size : 64;
  for (size_t i = 0; i < n; i++) ids[i] = (int32_t)(data[i] % (uint32_t)(h->nnames + 1));
  decode(h, ids, n, 0);
  free(e.t);
  lp__hf_free(h);
  return 0;
}
