/* libFuzzer: the TEI routes' codec on arbitrary bytes: each route's request is
 * decoded or refused with a status, a type and a message (never a crash or
 * leak), what it decodes is consistent; the bytes as a pair template are
 * parsed or refused and, when parsed, lay out a pair within any bound;
 * lp_jload gives what jansson gives on the same bytes, and
 * lp_tei_parse_inplace what lp_tei_parse gives (its texts in the body). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "jload-diff.h"
#include "lanepack/tei.h"

/* the bound on inputs the fuzzer's requests meet (the proxy's is configured) */
#define FUZZ_MAX_INPUTS 8

static int32_t lookup(const void *ud, const char *piece) {
  (void)ud;
  return piece[0] == '<' ? (int32_t)strlen(piece) : -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_jload_vs_jansson(data, size);
  for (int route = LP_TEI_EMBED; route <= LP_TEI_EMBED_SPARSE; route++) {
    lp_tei_req_t r;
    int status = 0;
    const char *type = NULL;
    char err[256] = "";
    int rc = lp_tei_parse(route, (const char *)data, size, FUZZ_MAX_INPUTS, &r, &status, &type, err, sizeof(err));
    if (rc == -EPROTO && (!err[0] || !type || (status != 400 && status != 413 && status != 422))) abort();
    if (rc == 0) {
      if (r.ntexts == 0 || r.ntexts > FUZZ_MAX_INPUTS || (route == LP_TEI_RERANK && !r.query.s)) abort();
      for (size_t i = 0; i < r.ntexts; i++)
        if (!r.texts[i].s != !!r.texts[i].ids || (r.texts[i].pair && !r.texts[i].b)) abort();
    }
    /* in place: the same verdict, message and texts */
    char *own = malloc(size ? size : 1), err2[256] = "";
    if (own) {
      memcpy(own, data, size);
      lp_tei_req_t q;
      int status2 = 0;
      const char *type2 = NULL;
      int rc2 = lp_tei_parse_inplace(route, own, size, FUZZ_MAX_INPUTS, &q, &status2, &type2, err2, sizeof(err2));
      if (rc2 != rc || status2 != status || strcmp(err, err2) != 0) abort();
      if (rc == 0 && (q.ntexts != r.ntexts || (q.query.s && (q.query.len != r.query.len ||
                                                              memcmp(q.query.s, r.query.s, r.query.len)))))
        abort();
      for (size_t i = 0; rc == 0 && i < r.ntexts; i++)
        if (q.texts[i].len != r.texts[i].len || q.texts[i].blen != r.texts[i].blen ||
            (r.texts[i].s && memcmp(q.texts[i].s, r.texts[i].s, r.texts[i].len)) ||
            (r.texts[i].b && memcmp(q.texts[i].b, r.texts[i].b, r.texts[i].blen)))
          abort();
      lp_tei_req_free(&q);
      free(own);
    }
    lp_tei_req_free(&r);
  }
  char spec[512];
  size_t n = size < sizeof(spec) - 1 ? size : sizeof(spec) - 1;
  memcpy(spec, data, n);
  spec[n] = '\0';
  lp_tei_template_t t;
  char err[256];
  if (lp_tei_template_load(spec, lookup, NULL, &t, err, sizeof(err)) == 0) {
    int32_t a[3] = {1, 2, 3}, b[5] = {4, 5, 6, 7, 8}, out[LP_TEI_TEMPLATE_PARTS + 8];
    for (size_t max = 0; max < 12; max++) {
      long k = lp_tei_pair(&t, a, 3, b, 5, max, (int)(max & 1), (int)((max >> 1) & 1), out,
                           sizeof(out) / sizeof(out[0]));
      if (k > (long)(sizeof(out) / sizeof(out[0])) || (max && k > (long)max)) abort();
    }
  }
  return 0;
}
