/* libFuzzer: the SentencePiece .model decoder (src/text/spm-model.c) on any
 * bytes. It loads or says why, never crashes or leaks; what loads then takes
 * the encode options and encodes a few texts (with and without them, and cut
 * to a limit from either end), every id inside the vocabulary. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "spm.h"

static void encode(const lp__spm_t *m, const char *text, size_t len) {
  int32_t ids[512];
  for (int opts = 0; opts < 2; opts++) {
    long n = lp__spm_encode(m, text, len, opts, ids, 512);
    for (long i = 0; i < n && i < 512; i++)
      if (ids[i] < 0 || ids[i] >= m->npieces) abort();
  }
  long n = lp__spm_encode_fit(m, text, len, 3, (int)(len & 1), ids, 512);
  if (n > 3) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  unsigned char *buf = malloc(size + 1);
  if (!buf) return 0;
  memcpy(buf, data, size);
  char why[160] = "";
  lp__spm_t *m = NULL;
  int rc = lp__spm_load(buf, size, &m, why, sizeof(why)); /* buf is the model's now */
  if (rc) {
    if (!why[0] || m) abort(); /* a refusal says why */
    return 0;
  }
  static const char *const options[] = {"", "bos:eos", "reverse:bos:eos:unk", "eos:eos:bos:reverse", "x", "bos:"};
  lp__spm_set_options(m, options[size % 6]);
  static const char *const texts[] = {"", "  Hello,  world! ", "caf\xc3\xa9 \xef\xac\x81 \xef\xbc\xa1 \xe6\x97\xa5\xe6\x9c\xac",
                                      "x\xff\xfe\xc3 \x01\t\xe2\x96\x81\xe2\x96\x81 <s> </s> 123"};
  for (size_t i = 0; i < 4; i++) encode(m, texts[i], strlen(texts[i]));
  encode(m, (const char *)data, size < 256 ? size : 256); /* the model's own bytes as a text */
  lp__spm_free(m);
  return 0;
}
