/* libFuzzer: the v2 message decoder on arbitrary bytes, as a request and as an
 * answer, with the header length taken from the input: no crash, no read past
 * the body; what is accepted has in-bounds tensors that write out as JSON that
 * jansson reads back, and integer and FP64 tensors go through the v2 JSON
 * writer and reader (NaN and UINT64 past INT64_MAX included) to the same bytes. */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lanepack/v2.h"

/* t's first n elements as raw bytes, written as a v2 JSON answer, read back:
 * the same bytes (NaN compared as NaN). FP32 and the halves are left out: their
 * shortest text is checked with strtof, jansson reads through a double. */
static void round_trip(const lp_tensor_t *t, size_t n) {
  if (lp_dtype_is_float(t->dtype) && t->dtype != LP_DT_FP64) return;
  size_t esz = lp_dtype_size(t->dtype);
  uint8_t *a = malloc(n * esz + 1), *b = malloc(n * esz + 1);
  lp_tensor_put_raw(a, t, 0, n);
  lp_v2_out_t o = {.name = "o", .dtype = t->dtype, .ndim = 1, .shape = {(int64_t)n}, .data = a, .count = n};
  lp_buf_t w;
  lp_buf_init(&w);
  if (lp_v2_write(&w, NULL, "outputs", &o, 1, 0, NULL) == 0) {
    lp_v2_msg_t m;
    char err[256];
    if (lp_v2_decode(&m, w.data, w.len, -1, 0, err, sizeof(err)) != 0 || m.n != 1) abort();
    lp_tensor_put_raw(b, &m.t[0], 0, n);
    for (size_t i = 0; i < n; i++) {
      if (t->dtype == LP_DT_BOOL) {
        if ((a[i] != 0) != (b[i] != 0)) abort();
        continue;
      }
      if (t->dtype == LP_DT_FP64) {
        double x, y;
        memcpy(&x, a + i * 8, 8);
        memcpy(&y, b + i * 8, 8);
        if (isnan(x) && isnan(y)) continue;
      }
      if (memcmp(a + i * esz, b + i * esz, esz) != 0) abort();
    }
    lp_v2_msg_free(&m);
  }
  lp_buf_free(&w);
  free(a);
  free(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  /* first two bytes: the header length (0xffff: JSON only); the rest: the body */
  int64_t hl = (int64_t)(data[0] | data[1] << 8);
  if (hl == 0xffff) hl = -1;
  const char *body = (const char *)data + 2;
  size_t len = size - 2;
  /* a copy of exactly len bytes, so ASan sees any read past the body */
  char *copy = malloc(len ? len : 1);
  memcpy(copy, body, len);
  for (int request = 0; request <= 1; request++) {
    lp_v2_msg_t m;
    char err[256];
    if (lp_v2_decode(&m, copy, len, hl, request, err, sizeof(err)) == 0) {
      for (int i = 0; i < m.n; i++) {
        const lp_tensor_t *t = &m.t[i];
        if (t->raw && (t->raw < (const uint8_t *)copy ||
                       t->raw + t->count * lp_dtype_size(t->dtype) > (const uint8_t *)copy + len))
          abort();
        lp_buf_t b;
        lp_buf_init(&b);
        lp_buf_puts(&b, "[");
        size_t n = t->count < 4096 ? t->count : 4096;
        lp_tensor_write_json(&b, t, 0, n, 1);
        lp_buf_puts(&b, "]");
        round_trip(t, n);
        if (!b.oom) {
          json_error_t je;
          json_t *v = json_loadb(b.data, b.len, 0, &je);
          /* jansson refuses integers past 2^63 - 1, which UINT64 may hold */
          if (!v && t->dtype != LP_DT_UINT64) abort();
          json_decref(v);
        }
        lp_buf_free(&b);
      }
    }
    lp_v2_msg_free(&m);
  }
  free(copy);
  return 0;
}
