/* libFuzzer: the OpenAI embeddings codec on arbitrary bytes: a request is
 * decoded or refused with a message (never a crash or leak), what it decodes
 * is consistent, and a backend's vector text is read or refused; lp_jload
 * gives what jansson gives on the same bytes, and lp_openai_parse_inplace
 * what lp_openai_parse gives (its texts in the body). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "jload-diff.h"
#include "lanepack/openai.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_jload_vs_jansson(data, size);
  lp_openai_req_t r;
  char err[256] = "";
  int rc = lp_openai_parse((const char *)data, size, &r, err, sizeof(err));
  if (rc == -EPROTO && !err[0]) abort(); /* a refusal must say why */
  if (rc == 0) {
    if (!r.model[0] || r.ninputs == 0 || r.ninputs > LP_OPENAI_MAX_INPUTS) abort();
    for (size_t i = 0; i < r.ninputs; i++)
      if (r.in[i].text ? r.in[i].text_len == 0 : (r.in[i].len == 0 || r.in[i].off + r.in[i].len > r.ntokens)) abort();
  }
  char *own = malloc(size ? size : 1), err2[256] = "";
  if (own) { /* in place: the same verdict, message, model, format and texts */
    memcpy(own, data, size);
    lp_openai_req_t q;
    int rc2 = lp_openai_parse_inplace(own, size, &q, err2, sizeof(err2));
    if (rc2 != rc || strcmp(err, err2) != 0) abort();
    if (rc == 0 && (q.ninputs != r.ninputs || strcmp(q.model, r.model) != 0 || q.base64 != r.base64)) abort();
    for (size_t i = 0; rc == 0 && i < r.ninputs; i++)
      if (q.in[i].text_len != r.in[i].text_len || !q.in[i].text != !r.in[i].text ||
          (r.in[i].text && memcmp(q.in[i].text, r.in[i].text, r.in[i].text_len) != 0))
        abort();
    lp_openai_req_free(&q);
    free(own);
  }
  lp_openai_req_free(&r);
  float v[64];
  long n = lp_openai_floats((const char *)data, size, v, 64);
  if (n > 64) abort();
  if (n > 0) {
    lp_buf_t b;
    lp_buf_init(&b);
    lp_openai_embedding(&b, 0, v, (size_t)n, size & 1);
    lp_buf_free(&b);
  }
  return 0;
}
