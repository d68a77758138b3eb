/* Tensors as the Open Inference Protocol carries them: datatypes, element
 * access over raw little-endian bytes (binary) or numbers decoded from JSON, and
 * elements written back as JSON numbers that read back to the same value. No I/O. */
#ifndef LANEPACK_TENSOR_H
#define LANEPACK_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "lanepack/buf.h"

#define LP_TENSOR_MAX_DIMS 8

typedef enum {
  LP_DT_INVALID = 0,
  LP_DT_BOOL, LP_DT_UINT8, LP_DT_UINT16, LP_DT_UINT32, LP_DT_UINT64,
  LP_DT_INT8, LP_DT_INT16, LP_DT_INT32, LP_DT_INT64,
  LP_DT_FP16, LP_DT_BF16, LP_DT_FP32, LP_DT_FP64,
  LP_DT_BYTES
} lp_dtype_t;

/* "INT32" -> LP_DT_INT32; LP_DT_INVALID for anything else. */
lp_dtype_t lp_dtype_parse(const char *name);
const char *lp_dtype_name(lp_dtype_t t);
/* Bytes per element; 0 for BYTES and INVALID. */
size_t lp_dtype_size(lp_dtype_t t);
int lp_dtype_is_float(lp_dtype_t t);

/* A tensor's elements: raw bytes of its datatype (binary form, borrowed, may
 * be unaligned) or values decoded from JSON (owned by whoever filled them:
 * ints for integer and boolean types, reals for floating ones). */
typedef struct lp_tensor_s {
  char name[64];
  lp_dtype_t dtype;
  int ndim;
  int64_t shape[LP_TENSOR_MAX_DIMS];
  size_t count;            /* elements: the product of shape */
  const uint8_t *raw;      /* binary form, or NULL */
  int64_t *ints;           /* JSON form, integer types */
  double *reals;           /* JSON form, floating types */
} lp_tensor_t;

/* Element i as an integer (UINT64: its bits) or as a double. */
int64_t lp_tensor_int(const lp_tensor_t *t, size_t i);
double lp_tensor_real(const lp_tensor_t *t, size_t i);

/* Elements [first, first + n) as the little-endian bytes of t's datatype, into
 * dst (n x lp_dtype_size bytes): copied from the binary form, or encoded from
 * values decoded from JSON (FP16 and BF16 rounded to nearest, ties to even). */
void lp_tensor_put_raw(uint8_t *dst, const lp_tensor_t *t, size_t first, size_t n);

/* Writes elements [first, first + n) as JSON numbers separated by commas;
 * when inner > 1 each group of inner elements is an array ("[a,b],[c,d]").
 * Integers are exact (UINT64 too), BOOL is true/false; floats are the shortest
 * text that reads back to the same value (FP32/FP16/BF16 as single precision).
 * NaN and infinities, which JSON lacks, are null, or with
 * LP_TENSOR_JSON_NONFINITE the bare tokens NaN, Infinity and -Infinity, as
 * Triton's JSON writer (rapidjson's kWriteNanAndInfFlag) puts them. */
#define LP_TENSOR_JSON_NONFINITE 1u
void lp_tensor_write_json(lp_buf_t *b, const lp_tensor_t *t, size_t first, size_t n, size_t inner);
void lp_tensor_write_json_ex(lp_buf_t *b, const lp_tensor_t *t, size_t first, size_t n, size_t inner,
                             unsigned flags);

/* Shortest decimal text of a double (17 significant digits at most) or of a
 * float (9 at most) that reads back exactly; returns its length (< 32). */
size_t lp_fmt_double(char *out, double v);
size_t lp_fmt_float(char *out, float v);
/* printf's "%.9g" of a float, the same bytes, at about 6 times its speed
 * (the embedding routes write every value so); returns its length (< 32). */
size_t lp_fmt_float_g9(char *out, float v);

/* Half-precision conversions (IEEE binary16 and bfloat16); to half: rounded
 * to nearest, ties to even, too large to infinity, NaN kept NaN. */
float lp_half_to_float(uint16_t h);
float lp_bf16_to_float(uint16_t h);
uint16_t lp_float_to_half(float f);
uint16_t lp_float_to_bf16(float f);

#endif
